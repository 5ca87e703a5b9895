/* qry.h - the query engine: its error type, catalog listings and raw range
 * queries. Reads through the storage API (storage/sto.h) only.
 *
 * Results are typed values that the caller owns and frees with the free
 * function of their type; query/ writes no JSON and knows nothing of HTTP
 * (server/ serialises results and maps error codes to statuses, in one
 * place). agg.h has the aggregating queries, events.h the log and span
 * queries, bucket.h the bucket engine under them.
 *
 * Mergeable results. A scale-out coordinator asks every node holding part
 * of a job's series the same query and merges the partial results:
 *   - listings (qry_jobs, qry_metrics, qry_ranks): union; jobs add nseries;
 *   - raw points (qry_points): series of different nodes are distinct
 *     (concatenate, then sort by (rank, metric)); a series split by time
 *     merges by timestamp;
 *   - downsample buckets (qry_buckets, bucket.h): qry_buckets_merge
 *     (partial aggregates by mdl_agg_merge, quantile values by a merge of
 *     sorted lists);
 *   - cross-rank: not the rows (medians do not merge) but the per (bucket,
 *     rank) cells of struct qry_xr_part (agg.h), merged with
 *     qry_xr_part_merge and then turned into rows once;
 *   - outliers: not the report (median / MAD need every rank) but each
 *     rank's window partial (a one-bucket qry_buckets per series);
 *   - log pages and spans (events.h): events of different nodes
 *     interleave by the page order; spans concatenate by (step, rank).
 */
#ifndef QRY_QRY_H
#define QRY_QRY_H

#include "storage/sto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What kind of failure a query had; the front end picks its answer from it
 * (server/query_json.c maps each to one HTTP status). */
enum qry_code {
	QRY_E_INVALID = 1, /* the request cannot be answered as asked (bad cursor, ...) */
	QRY_E_NOT_FOUND,   /* unknown job, metric, rank at a step, metadata document */
	QRY_E_TOO_LARGE,   /* a result or document would exceed its byte bound */
	QRY_E_LIMIT,	   /* the query would read more than its bound (points, events) */
	QRY_E_UNSUPPORTED, /* not computable over this data (quantiles over rollups) */
	QRY_E_INTERNAL,	   /* corrupt data, I/O error, out of memory */
};

/* Why a query failed: the kind, and a message for the user saying what to
 * change (or what broke). */
struct qry_error {
	enum qry_code code;
	char msg[5200];
};

/* A heap struct qry_error with no error yet (code 0, msg ""), or NULL out
 * of memory; free() it. Only those two fields are set: a query that
 * succeeds never reads the rest, and zeroing 5 KB per query was a good
 * part of a one-series query's writes. */
struct qry_error *qry_error_new(void);

/* Fills err (printf format); returns rc, the error value to propagate. */
int qry_fail(struct qry_error *err, enum qry_code code, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A catalog listing's failure (what: "listing jobs", ...): RDB_ELIMIT is
 * QRY_E_TOO_LARGE "response would exceed max_response_bytes; <what>",
 * anything else QRY_E_INTERNAL "<what>: <error>". Returns rc. */
int qry_fail_listing(struct qry_error *err, int rc, const char *what);

/* ---- catalog --------------------------------------------------------------- */

struct qry_job {
	char job[MDL_JOB_MAX + 1];
	uint64_t nseries;
	char *meta; /* the job's metadata document (JSON object text), or NULL */
	size_t meta_len;
	/* What the run has sent (head and index entries; nothing decoded): */
	bool has_points;
	int64_t first_ts_ns, last_ts_ns; /* over every series; when has_points */
	int64_t last_step;		 /* highest step; MDL_STEP_NONE if none */
	uint32_t nranks;		 /* ranks with series (the job-level one not counted) */
};

struct qry_jobs {
	struct qry_job *v; /* in job-id order */
	size_t n, cap;
	size_t meta_bytes; /* sum of meta_len */
};
void qry_jobs_free(struct qry_jobs *j); /* NULL ok; j becomes empty */

/* Every job with series, with its first/last timestamp, last step and
 * ranks (from head points and chunk statistics, no decoding: storage's
 * per-job summary, sto_job_extent_get, built by one walk of the job's
 * series when it has none, then kept up to date by writes; the ranks from
 * the job's series list); with with_meta, each with its metadata document
 * (absent when none or damaged), at most max_meta_bytes of them in all
 * (QRY_E_TOO_LARGE beyond). 0 or an error with err filled (out empty).
 * Several LMDB read transactions (listings; a walk takes one per 1024
 * series); blocks on the file system. */
int qry_jobs(struct sto *s, bool with_meta, size_t max_meta_bytes, struct qry_jobs *out,
	     struct qry_error *err);

struct qry_metrics {
	char job[MDL_JOB_MAX + 1];
	char (*v)[MDL_METRIC_MAX + 1]; /* distinct names, ascending (strcmp) */
	size_t n;
};
void qry_metrics_free(struct qry_metrics *m); /* NULL ok */

/* The job's metric names. QRY_E_NOT_FOUND for an unknown job. */
int qry_job_metrics(struct sto *s, const char *job, struct qry_metrics *out, struct qry_error *err);

struct qry_ranks {
	char job[MDL_JOB_MAX + 1];
	uint32_t *v; /* distinct ranks, ascending, the job-level pseudo-rank not among them */
	size_t n;
	bool job_level; /* the job has job-level series */
};
void qry_ranks_free(struct qry_ranks *r); /* NULL ok */

/* The job's ranks. QRY_E_NOT_FOUND for an unknown job. */
int qry_job_ranks(struct sto *s, const char *job, struct qry_ranks *out, struct qry_error *err);

/* Every job with series and its series count, in job-id order, for callers
 * with their own selection (the Grafana datasource): fn as sto_list_jobs
 * (a non-zero return stops and is returned). */
int qry_list_jobs(struct sto *s, int (*fn)(void *arg, const char *job, uint64_t nseries),
		  void *arg);
/* Every series of job in index order (rank, then metric bytes): fn as
 * sto_list_series. 0, fn's non-zero return, or -errno. */
int qry_list_series(struct sto *s, const char *job,
		    int (*fn)(void *arg, const struct mdl_series_key *k, uint64_t id), void *arg);

/* ---- raw points ---------------------------------------------------------------- */

struct qry_range_req {
	const char *job;
	const char *const *metrics; /* names; nmetrics >= 1 */
	size_t nmetrics;
	const uint32_t *ranks; /* nranks == 0: every rank */
	size_t nranks;
	struct sto_range range;
	size_t max_points; /* over all series */
	int64_t attempt;   /* >= 0: only it; QRY_ATTEMPT_LATEST (-1): per step the
			    * highest attempt (points without a step all kept);
			    * QRY_ATTEMPT_ALL (-2): every point */
};

/* The points of one series, in time order. */
struct qry_series_points {
	struct mdl_series_key key;
	struct mdl_cols pts;
};

struct qry_points {
	struct qry_series_points *v; /* series with points, in (rank, metric) order */
	size_t n, cap;
	size_t total; /* points over all series */
};
void qry_points_free(struct qry_points *p); /* NULL ok; p becomes empty */

/* Raw points of the matching series. 0, or an error with err filled
 * (QRY_E_NOT_FOUND unknown job, QRY_E_LIMIT more than max_points points,
 * QRY_E_INTERNAL corrupt data) and out empty. Blocks on chunk reads. */
int qry_range(struct sto *s, const struct qry_range_req *req, struct qry_points *out,
	      struct qry_error *err);

#endif
