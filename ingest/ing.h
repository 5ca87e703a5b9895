/* ing.h - ingest: parsing and validation of client write bodies into
 * storage batches. ingest/ knows the data model (storage/batch.h) but not
 * the on-disk format.
 */
#ifndef ING_ING_H
#define ING_ING_H

#include "storage/batch.h"

#include <stddef.h>
#include <stdint.h>

struct ing_limits {
	size_t max_records;            /* records per request */
	size_t max_metrics_per_record; /* entries in one record's "metrics" */
	size_t max_depth;              /* JSON nesting depth */
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
 * record per line; blank lines ignored). Records are metric records:
 *   {"job":str, "rank":int>=0 | "job", "step":int>=0?, "timestamp":int ns?,
 *    "attempt":int>=0?, "type":"metrics"?, "metrics":{name: value, ...}}
 * Values: a JSON number, null, NaN/Infinity/-Infinity literals (as Python's
 * json module writes them), the strings "NaN", "Inf", "+Inf", "-Inf",
 * "Infinity", "-Infinity", or "0x" + 16 hex digits (exact IEEE-754 bits).
 * Records without "timestamp" get default_ts_ns. Unknown fields are errors.
 *
 * All-or-nothing: returns 0 with every point added to b, or an error with
 * *err filled (b's content is then unspecified; reset it). body is
 * untrusted and need not be NUL-terminated. Returns 0, RDB_EINVAL (bad
 * input), RDB_ELIMIT (a limit in lim or b's bounds; err says which),
 * -ENOMEM. *nrecords (may be NULL) gets the number of records. */
int ing_json_parse(const char *body, size_t len, const struct ing_limits *lim,
		   int64_t default_ts_ns, struct sto_batch *b, struct ing_error *err,
		   size_t *nrecords);

#endif
