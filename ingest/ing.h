/* ing.h - ingest: parsing and validation of client write bodies into
 * storage batches. ingest/ knows the data model (storage/batch.h) but not
 * the on-disk format.
 */
#ifndef ING_ING_H
#define ING_ING_H

#include "model/batch.h"
#include "model/events.h"

#include <stddef.h>
#include <stdint.h>

struct ing_limits {
	size_t max_records;	       /* records per request */
	size_t max_metrics_per_record; /* entries in one record's "metrics" */
	size_t max_depth;	       /* JSON nesting depth */
};

/* Sane defaults. */
void ing_limits_default(struct ing_limits *l);

/* What was wrong, for a 400 body: which record (0-based, -1 when the body
 * as a whole is bad), which line (1-based, 0 if unknown), which field
 * (may be empty) and why, in words a user acts on. */
struct ing_error {
	long record;
	long line;
	char field[64];
	char msg[256];
};

/* Parses a POST /api/v1/write body: a JSON array of records, or NDJSON (one
 * record per line; blank lines ignored). "type" selects the record kind
 * (absent or "metrics": metrics); ingest/json_write.c has the exact grammar.
 *   metrics: {"job":str, "rank":int>=0 | "job", "step":int>=0?,
 *             "timestamp":int ns?, "attempt":int>=0?, "type":"metrics"?,
 *             "metrics":{name: value, ...}}
 *   log:     {"type":"log", "job", "rank", "timestamp"?, "step"?, "attempt"?,
 *             "level":"debug"|"info"|"warn"|"error"|"fatal"? (default info),
 *             "message":str (valid UTF-8, <= MDL_EVENT_TEXT_MAX bytes),
 *             "fields":{name: string|number|true|false|null, ...}?}
 *   span:    {"type":"span", "job", "rank", "step":int>=0, "name":str,
 *             "start":int ns, "duration_ns":int>=0, "attempt"?}
 * Metric values: a JSON number, null, NaN/Infinity/-Infinity literals (as
 * Python's json module writes them), the strings "NaN", "Inf", "+Inf",
 * "-Inf", "Infinity", "-Infinity", or "0x" + 16 hex digits (exact IEEE-754
 * bits). Records without "timestamp" get default_ts_ns. Unknown fields, and
 * fields of another record type, are errors.
 *
 * Metric points go to b; log and span records become events appended to ev
 * (a log's fields as compact JSON text, "{}" if absent; a span's fields
 * ""). ev may be NULL: log and span records are then errors ("log records
 * are not accepted here").
 *
 * All-or-nothing: returns 0 with every point added to b and every event to
 * ev, or an error with *err filled (the content of b and ev is then
 * unspecified; reset them). body is untrusted and need not be
 * NUL-terminated. Returns 0, RDB_EINVAL (bad input), RDB_ELIMIT (a limit in
 * lim or b's or ev's bounds; err says which), -ENOMEM. *nrecords (may be
 * NULL) gets the number of records of all types. Blocks on nothing;
 * reentrant. */
int ing_json_parse_all(const char *body, size_t len, const struct ing_limits *lim,
		       int64_t default_ts_ns, struct mdl_batch *b, struct mdl_events *ev,
		       struct ing_error *err, size_t *nrecords);

/* Units of the explicit times of a JSON body. */
#define ING_JSON_MIN_TS_S 978307200LL  /* 2001-01-01T00:00:00Z */
#define ING_JSON_MAX_TS_S 4102444800LL /* 2100-01-01T00:00:00Z */
struct ing_json_units {
	int64_t precision_ns; /* ns per unit of "timestamp" / "start": 1, 1e3, 1e6, 1e9 */
	int64_t min_ts_ns;    /* an explicit time (after scaling) below it is refused,
			       * naming the unit it looks like; INT64_MIN: no check */
};
/* ing_json_parse_all with "timestamp" and "start" read in u->precision_ns
 * units (overflow of int64 ns is an error) and checked against
 * u->min_ts_ns (RDB_EINVAL whose message says "looks like s|ms|us" when the
 * value read in that unit falls in 2001..2100). ing_json_parse_all is this
 * with precision 1 and no check. */
int ing_json_parse_units(const char *body, size_t len, const struct ing_limits *lim,
			 int64_t default_ts_ns, const struct ing_json_units *u, struct mdl_batch *b,
			 struct mdl_events *ev, struct ing_error *err, size_t *nrecords);

/* ing_json_parse_all with ev = NULL: metrics records only. */
int ing_json_parse(const char *body, size_t len, const struct ing_limits *lim,
		   int64_t default_ts_ns, struct mdl_batch *b, struct ing_error *err,
		   size_t *nrecords);

#endif
