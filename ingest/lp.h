/* lp.h - InfluxDB line protocol: parsing and mapping onto rankdb's model.
 *
 *   measurement[,tag=value...] field=value[,field=value...] [timestamp]
 *
 * Mapping (documented in docs/API.md):
 *  - tags `job` and `rank` give the series key (rank: integer >= 0 or "job");
 *    a line without `job` uses opt->default_job, or is an error if that is
 *    NULL/empty; a line without `rank` is job-level (rank "job").
 *  - an integer field `step` gives the step, an integer field `attempt` the
 *    attempt (neither becomes a metric).
 *  - every other numeric field f (float, integer i, unsigned u, boolean as
 *    1/0) becomes one point of metric "<measurement>.<f>", or "<measurement>"
 *    when f is "value"; other tags are appended in sorted key order as
 *    ";key=value" with bytes outside the metric-name alphabet and the bytes
 *    ';' '=' '%' percent-encoded (%XX), so that two distinct input series
 *    never map to the same metric name.
 *  - measurement `rankdb_log` is a log record (tags job, rank, level; string
 *    field `message` required; integer field `step`; other fields become the
 *    record's fields object); measurement `rankdb_span` is a span (tags job,
 *    rank, `name` = the phase; integer fields `step`, `duration_ns`; the
 *    line's timestamp is the span start).
 *  - string fields of other measurements are not numbers: they are skipped
 *    and counted (res->string_fields_skipped); a line left with no numeric
 *    field is an error.
 *
 * Partial writes, as InfluxDB: every good line is kept, every bad line is
 * reported (line number and reason) and skipped; a bad line adds nothing.
 */
#ifndef ING_LP_H
#define ING_LP_H

#include "ingest/ing.h"
#include "model/batch.h"
#include "model/events.h"

#include <stddef.h>
#include <stdint.h>

struct ing_lp_options {
	int64_t precision_ns;	 /* ns per timestamp unit: 1, 1000, 1000000, 1e9 */
	int64_t default_ts_ns;	 /* for lines without a timestamp */
	const char *default_job; /* for lines without a job tag; NULL = error */
	size_t max_line_bytes;	 /* longer lines are errors */
	size_t max_fields_per_line;
	size_t max_tags_per_line;
};

/* Sane defaults (precision ns, default_ts_ns 0, no default job). */
void ing_lp_options_default(struct ing_lp_options *o);

/* Parses "n"/"ns", "u"/"us"/"µ", "ms", "s" (v1 and v2 spellings). */
int ing_lp_precision(const char *s, int64_t *precision_ns);

#define ING_LP_MAX_ERRORS 16

struct ing_lp_result {
	size_t lines_ok;  /* lines that added points or events */
	size_t lines_bad; /* lines skipped with an error */
	size_t points;	  /* points added to the batch */
	size_t events;	  /* logs and spans added */
	size_t string_fields_skipped;
	size_t nerrors; /* first ING_LP_MAX_ERRORS errors (line, field, msg) */
	struct ing_error errors[ING_LP_MAX_ERRORS];
};

/* Parses body (not NUL-terminated, untrusted), adding points to b and logs
 * and spans to ev. Returns 0 even when some lines are bad (see res);
 * RDB_ELIMIT when b or ev is full (res says how far it got; the rest of the
 * body is not applied), -ENOMEM. */
int ing_lp_parse(const char *body, size_t len, const struct ing_lp_options *opt,
		 struct mdl_batch *b, struct mdl_events *ev, struct ing_lp_result *res);

#endif
