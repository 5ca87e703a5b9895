/* qry.h - the query engine: catalog listings and range queries, written as
 * JSON into a bounded buffer. Reads through the storage API (storage/sto.h)
 * only.
 */
#ifndef QRY_QRY_H
#define QRY_QRY_H

#include "common/rdb_buf.h"
#include "storage/sto.h"

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
 * the same bits, -0.0 kept), null for STO_VALUE_NULL_BITS, "NaN" for the
 * canonical NaN, "+Inf"/"-Inf", other NaN payloads as "0x<16 hex>". */
int qry_json_value(struct rdb_buf *out, uint64_t bits);
/* Writes a rank: a number, or "job" for the job-level pseudo-rank. */
int qry_json_rank(struct rdb_buf *out, uint32_t rank);

#endif
