/* qry.h - the query engine: catalog listings and range queries, written as
 * JSON into a bounded buffer. Reads through the storage API (storage/sto.h)
 * only.
 */
#ifndef QRY_QRY_H
#define QRY_QRY_H

#include "common/rdb_buf.h"
#include "storage/sto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Why a query failed: the HTTP status to answer and a message for the
 * user saying what to change. */
struct qry_error {
	int status;
	char msg[5200];
};

/* {"jobs":[{"job":..,"series":N,"meta":{...}},...]}; "meta" is the job's
 * metadata document stored under data_dir (absent when none, or when
 * data_dir is NULL). */
int qry_jobs(struct sto *s, const char *data_dir, struct rdb_buf *out, struct qry_error *err);
/* {"job":..,"metrics":[..]} ; 404 for an unknown job */
int qry_job_metrics(struct sto *s, const char *job, struct rdb_buf *out, struct qry_error *err);
/* {"job":..,"ranks":[..],"job_level":bool} ; 404 for an unknown job */
int qry_job_ranks(struct sto *s, const char *job, struct rdb_buf *out, struct qry_error *err);

struct qry_range_req {
	const char *job;
	const char *const *metrics; /* names; nmetrics >= 1 */
	size_t nmetrics;
	const uint32_t *ranks;      /* nranks == 0: every rank */
	size_t nranks;
	struct sto_range range;
	size_t max_points;          /* over all series */
};

/* Raw points of the matching series:
 * {"series":[{"job","rank","metric","timestamps","steps","attempts","values"}],"points":N}
 * Returns 0 or an error with err filled (status 404 unknown job, 422 too
 * many points, 500 corrupt data, 413 response too large). */
int qry_range(struct sto *s, const struct qry_range_req *req, struct rdb_buf *out,
	      struct qry_error *err);

/* Writes a stored value as JSON: a number (shortest text that reads back to
 * the same bits, -0.0 kept), null for MDL_VALUE_NULL_BITS, "NaN" for the
 * canonical NaN, "+Inf"/"-Inf", other NaN payloads as "0x<16 hex>". */
int qry_json_value(struct rdb_buf *out, uint64_t bits);
/* Writes a rank: a number, or "job" for the job-level pseudo-rank. */
int qry_json_rank(struct rdb_buf *out, uint32_t rank);
/* Write an integer in decimal. 0 or the rdb_buf error. */
int qry_json_i64(struct rdb_buf *out, int64_t v);
int qry_json_u64(struct rdb_buf *out, uint64_t v);

/* The text qry_json_value writes, into p (at least QRY_FMT_VALUE_MAX
 * bytes, not NUL-terminated); returns its length. */
#define QRY_FMT_VALUE_MAX 40
size_t qry_fmt_value(char *p, uint64_t bits);
/* The same for a finite non-zero non-integral value, always through
 * snprintf + strtod: the reference qry_fmt_value must equal (tests). */
size_t qry_fmt_value_slow(char *p, uint64_t bits);
/* Comma-separated arrays (no brackets): integers; steps (MDL_STEP_NONE as
 * null); stored values as qry_json_value writes them. */
int qry_json_i64s(struct rdb_buf *out, const int64_t *v, size_t n);
int qry_json_steps(struct rdb_buf *out, const int64_t *v, size_t n);
int qry_json_u32s(struct rdb_buf *out, const uint32_t *v, size_t n);
int qry_json_values(struct rdb_buf *out, const uint64_t *bits, size_t n);
/* Decimal digits of v into p (at least 21 bytes); returns the length. */
size_t qry_fmt_i64(char *p, int64_t v);
size_t qry_fmt_u64(char *p, uint64_t v);

#endif
