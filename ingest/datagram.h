/* datagram.h - parsing of one UDP datagram (JSON records or line protocol). */
#ifndef ING_DATAGRAM_H
#define ING_DATAGRAM_H

#include "ingest/ing.h"
#include "ingest/lp.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ing_datagram_result {
	bool json;                 /* which parser ran */
	struct ing_error json_err; /* JSON: why the datagram is bad */
	struct ing_lp_result lp;   /* line protocol: per-line results */
};

/* True when the datagram is JSON (first non-blank byte '{' or '['). */
bool ing_datagram_is_json(const uint8_t *p, size_t len);

/* Parses one datagram into b and ev (JSON: all or nothing; line protocol:
 * good lines kept, bad lines in res->lp). Returns 0 when something was
 * added; RDB_EINVAL when nothing usable (JSON error, or every line bad);
 * RDB_ENOTFOUND when it held only blank/comment lines; RDB_ELIMIT when b or
 * ev is full; -ENOMEM. Timestamps default to lp->default_ts_ns. */
int ing_datagram_parse(const uint8_t *p, size_t len, const struct ing_limits *lim,
		       const struct ing_lp_options *lp, struct mdl_batch *b, struct mdl_events *ev,
		       struct ing_datagram_result *res);

#endif
