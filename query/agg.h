/* agg.h - aggregating queries: downsampling, cross-rank aggregates, straggler
 * outliers (downsample.c, crossrank.c, outliers.c), and job metadata
 * documents (meta.c). Results are JSON written into a bounded buffer, like
 * qry.h; failures fill a struct qry_error with the HTTP status and a message
 * saying what to change.
 *
 * The bucket engine (qry_agg_*) is shared by the three queries: it turns one
 * series into per-bucket partial aggregates, answering a chunk from its index
 * statistics when the chunk lies entirely in the query range and in one
 * bucket, and decoding it otherwise.
 */
#ifndef QRY_AGG_H
#define QRY_AGG_H

#include "common/rdb_buf.h"
#include "query/bucket.h"
#include "query/qry.h"
#include "storage/sto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- downsample ------------------------------------------------------------ */

enum qry_agg_kind {
	QRY_AGG_AVG = 1u << 0,
	QRY_AGG_MIN = 1u << 1,
	QRY_AGG_MAX = 1u << 2,
	QRY_AGG_SUM = 1u << 3,
	QRY_AGG_COUNT = 1u << 4,
	QRY_AGG_FIRST = 1u << 5,
	QRY_AGG_LAST = 1u << 6,
};

struct qry_ds_req {
	const char *job;
	const char *const *metrics; /* nmetrics >= 1 */
	size_t nmetrics;
	const uint32_t *ranks;      /* nranks == 0: every rank */
	size_t nranks;
	struct qry_bucket_spec spec;
	uint32_t aggs;              /* QRY_AGG_* bits */
	double q[QRY_MAX_QUANTILES]; /* quantiles in 0..1, written as "p<100q>" */
	size_t nq;
	size_t max_points;
};

/* {"job":..,"axis":"step"|"time","width":W,"series":[{"job","rank","metric",
 *  "start":[..],"end":[..],"count":[..],"nan_count":[..],<agg>:[..]...}],
 *  "buckets":N,"from_rollups":N,"points_read":N,"chunks_from_stats":N,
 *  "chunks_decoded":N}
 * Only non-empty buckets are listed. Points retention dropped are answered
 * from the rollup tier of the axis when the width is a multiple of its
 * width (from_rollups: records used). 404 unknown job/metric, 422 too many
 * points or quantiles over rolled-up data, 413 response too large, 500
 * corrupt data. */
int qry_downsample(struct sto *s, const struct qry_ds_req *req, struct rdb_buf *out,
		   struct qry_error *err);

/* ---- cross-rank ------------------------------------------------------------ */

/* Columns of a cross-rank answer (qry_xr_req.cols). */
enum qry_xr_col {
	QRY_XR_COUNT = 1u << 0,
	QRY_XR_MEAN = 1u << 1,
	QRY_XR_MIN = 1u << 2,
	QRY_XR_MAX = 1u << 3,
	QRY_XR_MEDIAN = 1u << 4,
	QRY_XR_QUANTILES = 1u << 5,
	QRY_XR_STDDEV = 1u << 6,
	QRY_XR_ARGMIN = 1u << 7,
	QRY_XR_ARGMAX = 1u << 8,
	QRY_XR_ALL = (1u << 9) - 1,
};

struct qry_xr_req {
	const char *job;
	const char *metric;
	const uint32_t *ranks;      /* nranks == 0: every rank (never the job level) */
	size_t nranks;
	struct qry_bucket_spec spec; /* default: step width 1, or points on time */
	double q[QRY_MAX_QUANTILES]; /* nq == 0: 0.1 and 0.9 (when cols is 0) */
	size_t nq;
	/* QRY_XR_* bits: the columns to compute and write; 0: all of them, with
	 * the default quantiles. With bits, quantile columns are the nq given. */
	uint32_t cols;
	size_t max_points;
};

/* Per bucket, each rank's mean over the bucket, then across ranks:
 * {"job","metric","axis","width","ranks":[..],"start":[..],"end":[..],
 *  "count":[..],"mean":[..],"min":[..],"max":[..],"median":[..],"p10":[..],
 *  "p90":[..],"stddev":[..],"argmin":[..],"argmax":[..],"buckets":N,
 *  "points_read":N,"chunks_from_stats":N,"chunks_decoded":N}
 * With req->cols, only start, end and the columns asked for (in this
 * order). */
int qry_crossrank(struct sto *s, const struct qry_xr_req *req, struct rdb_buf *out,
		  struct qry_error *err);

/* ---- outliers -------------------------------------------------------------- */

enum qry_direction { QRY_DIR_BOTH, QRY_DIR_HIGH, QRY_DIR_LOW };

struct qry_out_req {
	const char *job;
	const char *metric;
	const uint32_t *ranks; /* nranks == 0: every rank */
	size_t nranks;
	struct qry_bucket_spec spec; /* range and attempt; the width is ignored */
	int64_t last_steps;          /* > 0: the window is the last N steps */
	size_t limit;                /* ranks listed */
	enum qry_direction direction;
	bool phases_mode;
	const char *const *phases;   /* nphases == 0: every <metric>.<phase> of the job */
	size_t nphases;
	const char *const *wait_phases; /* phases that are waiting, not own work */
	size_t nwait;
	size_t max_points;
};

/* Robust straggler report (median / MAD over the ranks' window means). */
int qry_outliers(struct sto *s, const struct qry_out_req *req, struct rdb_buf *out,
		 struct qry_error *err);

/* ---- job metadata ---------------------------------------------------------- */

#define QRY_META_MAX_BYTES (1u << 20)

/* Validates doc (a JSON object of at most QRY_META_MAX_BYTES) and stores it
 * as <data_dir>/meta/<job>.json atomically and durably (temp file, fsync,
 * rename, fsync of the directory). Replaces any previous document. 0;
 * RDB_EINVAL (400) for a bad job id or document; RDB_ELIMIT (413); -errno
 * (500). Blocks on the file system. */
int qry_meta_put(const char *data_dir, const char *job, const void *doc, size_t len,
		 struct qry_error *err);

/* Appends the job's stored document (a JSON object) to out. 0;
 * RDB_ENOTFOUND (404) when there is none; RDB_ELIMIT (413); -errno (500).
 * For embedding metadata in listings too. */
int qry_meta_get(const char *data_dir, const char *job, struct rdb_buf *out,
		 struct qry_error *err);

#endif
