/* agg.h - aggregating queries: downsampling, cross-rank aggregates, straggler
 * outliers (downsample.c, crossrank.c, outliers.c), over the bucket engine
 * (bucket.h); and job metadata documents (meta.c). Results are typed values
 * the caller owns (a free function each); failures fill a struct qry_error
 * (qry.h) with a code and a message saying what to change. Which results
 * merge across nodes, and how: qry.h.
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

/* What a query read: the scan counters of struct qry_scan. */
struct qry_totals {
	uint64_t points_read;  /* head points, decoded chunk points, rollup records */
	uint64_t chunks_stats; /* chunks answered from their index statistics */
	uint64_t chunks_decoded;
	uint64_t from_rollups; /* rollup records merged into buckets */
};

/* The counters of sc as totals. */
void qry_totals_of(const struct qry_scan *sc, struct qry_totals *t);

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
	const uint32_t *ranks; /* nranks == 0: every rank */
	size_t nranks;
	struct qry_bucket_spec spec;
	uint32_t aggs;		     /* QRY_AGG_* bits */
	double q[QRY_MAX_QUANTILES]; /* quantiles in 0..1, written as "p<100q>" */
	size_t nq;
	size_t max_points;
};

/* The buckets of one series (only non-empty buckets exist). */
struct qry_ds_series {
	struct mdl_series_key key;
	struct qry_buckets b;
};

struct qry_ds_result {
	char job[MDL_JOB_MAX + 1];
	enum qry_axis axis;
	int64_t width;		     /* bucket k covers [k * width, (k + 1) * width - 1] */
	uint32_t aggs;		     /* QRY_AGG_* asked for (the answer's columns) */
	double q[QRY_MAX_QUANTILES]; /* quantiles asked for; b.vals holds the values */
	size_t nq;
	struct qry_ds_series *v; /* series with buckets, in (rank, metric) order */
	size_t n;
	size_t nbuckets; /* over all series */
	struct qry_totals totals;
};
void qry_ds_result_free(struct qry_ds_result *r); /* NULL ok; r becomes empty */

/* Buckets of every selected series. Points retention dropped are answered
 * from the rollup tier of the axis when the width is a multiple of its
 * width (totals.from_rollups: records used). 0, or an error with err
 * filled and out empty: QRY_E_NOT_FOUND unknown job/metric, QRY_E_LIMIT
 * too many points, QRY_E_UNSUPPORTED quantiles over rolled-up data,
 * QRY_E_INTERNAL corrupt data. Blocks on chunk reads. */
int qry_downsample(struct sto *s, const struct qry_ds_req *req, struct qry_ds_result *out,
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
	const uint32_t *ranks; /* nranks == 0: every rank (never the job level) */
	size_t nranks;
	struct qry_bucket_spec spec; /* default: step width 1, or points on time */
	double q[QRY_MAX_QUANTILES]; /* nq == 0: 0.1 and 0.9 (when cols is 0) */
	size_t nq;
	/* QRY_XR_* bits: the columns to compute and write; 0: all of them, with
	 * the default quantiles. With bits, quantile columns are the nq given. */
	uint32_t cols;
	size_t max_points;
};

/* One bucket across ranks: over the ranks with a value there (each rank's
 * mean of its non-NaN values in the bucket). Only the columns asked for
 * are computed; min/max ties go to the lowest rank. */
struct qry_xr_row {
	int64_t key;			       /* bucket index (as struct qry_bucket) */
	size_t count;			       /* ranks with a value */
	double mean, min, max, median, stddev; /* stddev: population */
	double q[QRY_MAX_QUANTILES];	       /* the quantiles asked for */
	uint32_t argmin, argmax;	       /* the ranks holding min and max */
};

/* The mergeable partial of a cross-rank aggregate: per (bucket, rank) the
 * count and sum of the rank's non-NaN values. Partials of series read
 * apart (two nodes, two threads) merge with qry_xr_part_merge; rows are
 * computed from the whole once (qry_xr_rows). Zero-initialized is empty. */
struct qry_xr_cell {
	int64_t key;
	uint32_t rank;
	uint64_t count; /* > 0 */
	double sum;
};
struct qry_xr_part {
	struct qry_xr_cell *v;
	size_t n, cap;
	bool unsorted; /* cells may not be in (rank, key) order or may repeat */
};
void qry_xr_part_free(struct qry_xr_part *p); /* NULL ok; p becomes empty */

/* Adds the buckets of one series of rank (its buckets with non-NaN values).
 * Series added in ascending rank order, each once, keep the fast path.
 * 0 or -ENOMEM (p unchanged). */
int qry_xr_part_add(struct qry_xr_part *p, uint32_t rank, const struct qry_buckets *bs);
/* Appends the cells of src to dst (equal (key, rank) cells combine when
 * rows are made). 0 or -ENOMEM (dst unchanged). */
int qry_xr_part_merge(struct qry_xr_part *dst, const struct qry_xr_part *src);
/* The rows of p, ascending by key, with the columns of cols (QRY_XR_*) and
 * the nq quantiles q; *rows is malloc'd (caller frees). May reorder p.
 * 0 or -ENOMEM. */
int qry_xr_rows(struct qry_xr_part *p, uint32_t cols, const double *q, size_t nq,
		struct qry_xr_row **rows, size_t *nrows);

struct qry_xr_result {
	char job[MDL_JOB_MAX + 1];
	char metric[MDL_METRIC_MAX + 1];
	enum qry_axis axis;
	int64_t width;
	uint32_t *ranks; /* the ranks compared (selected series), ascending */
	size_t nranks;
	uint32_t cols;		     /* QRY_XR_* computed (the answer's columns) */
	double q[QRY_MAX_QUANTILES]; /* quantile columns (when cols has QRY_XR_QUANTILES) */
	size_t nq;
	struct qry_xr_row *rows; /* ascending by key */
	size_t nrows;
	struct qry_totals totals;
};
void qry_xr_result_free(struct qry_xr_result *r); /* NULL ok; r becomes empty */

/* Per bucket, each rank's mean over the bucket, then across ranks. Without
 * req->cols every column with the quantiles 0.1 and 0.9 (unless req->nq).
 * 0, or an error with err filled (as qry_downsample) and out empty. */
int qry_crossrank(struct sto *s, const struct qry_xr_req *req, struct qry_xr_result *out,
		  struct qry_error *err);

/* ---- outliers -------------------------------------------------------------- */

enum qry_direction { QRY_DIR_BOTH, QRY_DIR_HIGH, QRY_DIR_LOW };

struct qry_out_req {
	const char *job;
	const char *metric;
	const uint32_t *ranks; /* nranks == 0: every rank */
	size_t nranks;
	struct qry_bucket_spec spec; /* range and attempt; the width is ignored */
	int64_t last_steps;	     /* > 0: the window is the last N steps */
	size_t limit;		     /* ranks listed */
	enum qry_direction direction;
	bool phases_mode;
	const char *const *phases; /* nphases == 0: every <metric>.<phase> of the job */
	size_t nphases;
	const char *const *wait_phases; /* phases that are waiting, not own work */
	size_t nwait;
	size_t max_points;
};

#define QRY_MAX_PHASES 64

/* One rank of the report. */
struct qry_out_row {
	uint32_t rank;
	bool ok;       /* has a value (all non-wait phases in phase mode): scored */
	double value;  /* window mean, or own work (sum of the non-wait phase means) */
	double total;  /* phase mode: sum of every phase's mean */
	double score;  /* (value - median) / scale */
	double *phase; /* phase mode: nphases means, NaN where absent (into means) */
};

struct qry_out_result {
	char job[MDL_JOB_MAX + 1];
	char metric[MDL_METRIC_MAX + 1];
	bool phases_mode;
	enum qry_direction direction;
	struct sto_range window;	    /* by_step: step_from..step_to, else from..to */
	char (*phases)[MDL_METRIC_MAX + 1]; /* phase mode: the phase names found */
	bool wait[QRY_MAX_PHASES];	    /* phases[i] is a wait phase */
	size_t nphases;
	size_t nscored;		   /* rows with ok */
	double median, mad, scale; /* over the scored ranks; defined when nscored */
	bool mad_zero;		   /* MAD was 0: scores are only an ordering */
	struct qry_out_row *rows;  /* every rank, ordered by the direction's score */
	size_t nrows;
	size_t nlisted;		 /* rows to report: min(nscored, limit) */
	double *means;		 /* backing of the rows' phase arrays */
	bool phase_source_spans; /* phase mode answered from spans (seconds) */
	struct qry_totals totals;
};
void qry_out_result_free(struct qry_out_result *r); /* NULL ok; r becomes empty */

/* Robust straggler report (median / MAD over the ranks' window means).
 * 0, or an error with err filled and out empty (QRY_E_INVALID for phase
 * mode without compute phases or last_steps without steps). */
int qry_outliers(struct sto *s, const struct qry_out_req *req, struct qry_out_result *out,
		 struct qry_error *err);

/* ---- job metadata ---------------------------------------------------------- */

#define QRY_META_MAX_BYTES (1u << 20)

/* Validates doc (a JSON object of at most QRY_META_MAX_BYTES) and stores it
 * as the job's metadata document through the storage engine
 * (sto_jobmeta_put: atomic and durable, checksummed). Replaces any previous
 * document. 0; RDB_EINVAL (QRY_E_INVALID) for a bad job id or document;
 * RDB_ELIMIT (QRY_E_TOO_LARGE); -errno (QRY_E_INTERNAL). Blocks on the file
 * system. (Deleting the job deletes its document: sto_delete_job.) */
int qry_meta_put(struct sto *s, const char *job, const void *doc, size_t len,
		 struct qry_error *err);

/* Appends the bytes of the job's stored document (a JSON object's text) to
 * out, a byte buffer whose bound the caller sets. 0; RDB_ENOTFOUND
 * (QRY_E_NOT_FOUND) when there is none; RDB_ECORRUPT (QRY_E_INTERNAL, the
 * message names the job and says what to do) when the stored document
 * fails its checksum: nothing is appended; RDB_ELIMIT (QRY_E_TOO_LARGE) past
 * out's bound (out unchanged); RDB_EINVAL for a bad job id; -errno
 * (QRY_E_INTERNAL). */
int qry_meta_get(struct sto *s, const char *job, struct rdb_buf *out, struct qry_error *err);

#endif
