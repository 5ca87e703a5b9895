/* protocol.h - the table of write protocols: which parser reads which body.
 *
 * Every front end (HTTP /api/v1/write, /write, /api/v2/write, UDP) looks its
 * protocol up here and gets one parse function with one result shape, so a
 * new protocol is one entry in ingest/protocol.c plus its parser, and the
 * pipeline (ingest/pipeline.h) stores whatever any of them produced.
 */
#ifndef ING_PROTOCOL_H
#define ING_PROTOCOL_H

#include "ingest/ing.h"
#include "ingest/lp.h"
#include "model/batch.h"
#include "model/events.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a parse needs besides the body. */
struct ing_parse_opts {
	const struct ing_limits *lim; /* JSON record limits */
	struct ing_lp_options lp;     /* line protocol; lp.default_ts_ns is also the
				       * timestamp of JSON records without one, and
				       * lp.precision_ns the unit of JSON times */
	int64_t json_min_ts_ns;	      /* JSON: explicit times below it are refused
				       * (ing_json_parse_units); 0 = no check */
};

/* What a parse found, whatever the protocol. A protocol that is all or
 * nothing (JSON) reports every record bad with one error when it refuses. */
struct ing_parse_result {
	size_t records_ok;  /* records / lines that added points or events */
	size_t records_bad; /* records / lines refused with an error */
	size_t points, events;
	size_t string_fields_skipped; /* line protocol string fields (not stored) */
	size_t nerrors;		      /* the first ING_LP_MAX_ERRORS errors */
	struct ing_error errors[ING_LP_MAX_ERRORS];
};

struct ing_protocol {
	const char *name;		  /* "json", "line-protocol" */
	const char *const *content_types; /* media types it reads, NULL-terminated */
	/* Whether an unlabelled body (a UDP datagram) looks like this protocol. */
	bool (*probe)(const uint8_t *p, size_t len);
	/* Parses body (untrusted, not NUL-terminated) into b and ev. Returns 0
	 * when something was added (some records may still be bad: see res);
	 * RDB_EINVAL when nothing usable was found (res->errors say why);
	 * RDB_ENOTFOUND when the body held nothing (blank or comment lines);
	 * RDB_ELIMIT when a limit or b's / ev's bound was reached (nothing of
	 * the body may be stored: the caller resets b and ev); -ENOMEM.
	 * Reentrant; blocks on nothing. */
	int (*parse)(const uint8_t *body, size_t len, const struct ing_parse_opts *o,
		     struct mdl_batch *b, struct mdl_events *ev, struct ing_parse_result *res);
};

extern const struct ing_protocol ing_proto_json;
extern const struct ing_protocol ing_proto_lp;

/* The protocol named name, or NULL. */
const struct ing_protocol *ing_protocol_find(const char *name);
/* The protocol of an unlabelled body: JSON when its first non-blank byte
 * (after an optional UTF-8 BOM) is '{' or '[', else line protocol. Never
 * NULL. */
const struct ing_protocol *ing_protocol_probe(const uint8_t *p, size_t len);

#endif
