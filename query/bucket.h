/* bucket.h - the bucket engine shared by the aggregating queries
 * (downsample, cross-rank, outliers, the Grafana datasource): it turns one
 * series into per-bucket partial aggregates (model/agg.h), answering a
 * chunk from its index statistics when the chunk lies entirely in the query
 * range and in one bucket, and decoding it otherwise; plus the selection of
 * a job's series by metric and rank, and the reading of many series by two
 * threads.
 *
 *   bucket.c   buckets of one series: planning, points, rollups
 *   each.c     many series (in parts, pool.h), bucketing resolution, errors
 *   match.c    series selection
 */
#ifndef QRY_BUCKET_H
#define QRY_BUCKET_H

#include "common/rdb_buf.h"
#include "model/agg.h"
#include "query/qry.h"
#include "storage/sto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum qry_axis { QRY_AXIS_TIME, QRY_AXIS_STEP };

#define QRY_ATTEMPT_LATEST (-1) /* step axis: per step only the highest attempt */
#define QRY_ATTEMPT_ALL	   (-2) /* every attempt's points */
#define QRY_MAX_QUANTILES  8
#define QRY_MAX_BUCKETS	   1000000u /* bound on points=N */

/* How the user asked to bucket; qry_agg_choose turns it into a bucketing. */
struct qry_bucket_spec {
	struct sto_range range; /* inclusive bounds; see the *_set flags */
	bool from_set, to_set, step_from_set, step_to_set;
	bool axis_set;	    /* step_width or time_width_ns given */
	enum qry_axis axis; /* when axis_set */
	int64_t width;	    /* > 0 when axis_set */
	uint32_t points;    /* target bucket count when !axis_set; 0: default */
	int64_t attempt;    /* >= 0, QRY_ATTEMPT_LATEST or QRY_ATTEMPT_ALL */
	bool force_decode;  /* see struct qry_bucketing */
};

/* A resolved bucketing. Bucket k of a series covers axis coordinates
 * [k * width, (k + 1) * width - 1] (step, or timestamp in ns); width 0 means
 * one bucket (key 0) for the whole range. On the step axis points without a
 * step are excluded. */
struct qry_bucketing {
	struct sto_range range;
	enum qry_axis axis;
	int64_t width;
	int64_t attempt;
	bool need_values; /* keep each bucket's non-NaN values (quantiles): no stats */
	/* Decode every chunk instead of answering whole chunks from their
	 * statistics: for tests comparing both paths (results must be equal). */
	bool force_decode;
	/* Downsample: answer points retention dropped from the rollup tier of
	 * the axis when the width is a multiple of the tier's width. */
	bool use_rollups;
	/* The caller reads no timestamp of the buckets (first_ts_ns,
	 * last_ts_ns) and no first/last value: on the step axis chunks may then
	 * be decoded without their timestamp column (see bucket.c, "Reading a
	 * series"). count, nan_count, min, max and sum are exact either way. */
	bool ts_unused;
	/* The caller reads only count, nan_count and sum of the buckets
	 * (cross-rank, outliers: means): points folded as they are decoded
	 * (see bucket.c) may then leave min, max, first and last unset. The
	 * three it reads are the same either way. */
	bool sums_only;
};

/* One bucket of one series: its key and the partial aggregate of its
 * points (model/agg.h; it holds at least one point, so first/last are
 * always defined). */
struct qry_bucket {
	int64_t key;	  /* bucket index */
	struct mdl_agg a; /* count, nan_count, min, max, sum, first, last */
	size_t vals_off;  /* need_values: the bucket's values are vals[vals_off..+a.count] */
};

/* Buckets of one series, ascending by key. Zero-initialized is empty.
 * Mergeable: the buckets of one series read in parts (two time ranges, two
 * nodes) combine with qry_buckets_merge. */
struct qry_buckets {
	struct qry_bucket *b;
	size_t n, cap;
	double *vals; /* need_values: sorted ascending within each bucket */
	size_t nvals, vcap;
};
void qry_buckets_free(struct qry_buckets *b); /* NULL ok; b becomes empty */

/* Merges src into dst (both ascending by key, with or without values):
 * buckets of equal key combine with mdl_agg_merge, their sorted values by a
 * merge of the two lists; the others are taken over in key order. Both
 * must have values, or neither. src is left unchanged. 0 or -ENOMEM (dst
 * unchanged). */
int qry_buckets_merge(struct qry_buckets *dst, const struct qry_buckets *src);

/* Scratch memory and counters of one query over many series. Not shared
 * between threads. */
struct qry_scan {
	struct sto *s;
	size_t max_points; /* bound on points read (head + decoded chunks) */
	uint64_t points_read;
	uint64_t chunks_stats; /* chunks answered from their index stats */
	uint64_t chunks_decoded;
	uint64_t from_rollups; /* rollup records merged into buckets */
	uint64_t chunks_no_ts; /* of chunks_decoded: without timestamps (ts_unused) */
	struct rdb_buf rec;
	struct mdl_cols tmp;
	struct sto_read_error re; /* why the last read failed */
};
void qry_scan_init(struct qry_scan *sc, struct sto *s, size_t max_points);
void qry_scan_free(struct qry_scan *sc);

/* Where a series has data in a range (chunk extents are clipped to it). */
struct qry_extent {
	bool any, has_steps;
	int64_t min_ts, max_ts, min_step, max_step;
};
void qry_extent_init(struct qry_extent *e);

/* The rollup tier width of the axis (ns or steps; 0: tier off). */
int64_t qry_agg_rollup_width(struct sto *s, enum qry_axis axis);
/* When the range of bk holds rollup records of any of the series ids and
 * bk->width is not a multiple of the axis tier's width, widens bk->width to
 * the next multiple, so that the rollups answer (a chosen width: points=,
 * Grafana). 0 or -errno. Reads the index, decodes nothing. */
int qry_agg_fit_rollups(struct qry_scan *sc, const uint64_t *ids, size_t n,
			struct qry_bucketing *bk);

/* Widens e by the data of series id in r, without decoding (rollup records
 * included). 0 or -errno. */
int qry_agg_extent(struct qry_scan *sc, uint64_t id, const struct sto_range *r,
		   struct qry_extent *e);

/* Resolves spec into a bucketing given the extent of all selected series.
 * The axis is the step axis when asked for, when a step bound is given or
 * when any series has steps; else time. points=N picks
 * width = ceil(span / N) over the given bounds, else the data's extent. */
void qry_agg_choose(const struct qry_bucket_spec *spec, const struct qry_extent *e,
		    struct qry_bucketing *out);

/* True when spec needs qry_agg_extent before qry_agg_choose. */
bool qry_agg_needs_extent(const struct qry_bucket_spec *spec);

/* Aggregates series id into out (replacing its contents). 0; RDB_ELIMIT
 * when the query would read more than sc->max_points points; RDB_ECORRUPT
 * (sc->re says which chunk) or -errno. Blocks on chunk reads. */
int qry_agg_series(struct qry_scan *sc, uint64_t id, const struct qry_bucketing *bk,
		   struct qry_buckets *out);

/* The q-quantile (0..1) of n >= 1 sorted values, linear interpolation
 * between the order statistics at q * (n - 1) (numpy's default). */
double qry_quantile_sorted(const double *v, size_t n, double q);

/* Series of one job selected by metric and rank, sorted by (rank, metric). */
struct qry_series {
	struct mdl_series_key key;
	uint64_t id;
};
struct qry_match {
	struct qry_series *v; /* owned */
	size_t n, cap;
	bool job_seen, metric_seen;
};
struct qry_match_req {
	const char *job;
	const char *const *metrics; /* exact names; nmetrics >= 1 unless prefix */
	size_t nmetrics;
	const char *prefix;    /* or: every metric starting with this */
	const uint32_t *ranks; /* nranks == 0: every rank */
	size_t nranks;
	bool skip_job_level; /* leave out the job-level pseudo-rank */
};
/* 0; RDB_ENOTFOUND with err 404 for an unknown job or metric; -errno (500). */
int qry_match(struct sto *s, const struct qry_match_req *req, struct qry_match *m,
	      struct qry_error *err);
void qry_match_free(struct qry_match *m);

/* The most parts qry_agg_each cuts a read into (one per thread). */
#define QRY_EACH_MAX_PARTS 8u

/* What qry_agg_each does with each series' buckets. */
struct qry_each {
	/* Called for series i (index into the match) with its buckets. The
	 * series are cut into up to QRY_EACH_MAX_PARTS consecutive slices;
	 * part k (0, 1, ...) gets the k-th slice in order, all parts at the
	 * same time from different threads: the results of part 0, then those
	 * of part 1, ... are in series order. 0, or an error that stops the
	 * read. */
	int (*fn)(void *arg, unsigned part, size_t i, const struct qry_buckets *bs);
	/* Forgets everything fn was given: a split read failed and is redone
	 * in one part, in order, so that it fails as a plain loop would. */
	void (*reset)(void *arg);
	void *arg;
};

/* Like qry_agg_series over m's series in order, calling e->fn after each:
 * the same results, the same counters added to sc and the same error as
 * that loop (*failed: the index of the series that failed). Queries over
 * many series are read in parts by this thread and the query helper
 * threads (pool.h), each part with its own scratch memory; any failure
 * there, or a total over sc's point budget, is redone by the plain loop.
 * Blocks. */
int qry_agg_each(struct qry_scan *sc, const struct qry_match *m, const struct qry_bucketing *bk,
		 const struct qry_each *e, size_t *failed);

/* Widens e by the extent of every series of m in r (qry_agg_extent), for
 * many series in parts as qry_agg_each (sc is only read). 0, or the error of the
 * first failing series in match order with *failed its index. */
int qry_agg_extent_all(struct qry_scan *sc, const struct qry_match *m, const struct sto_range *r,
		       struct qry_extent *e, size_t *failed);
/* Resolves spec for the series of m: runs qry_agg_extent over them when the
 * bucket width depends on the data, then qry_agg_choose. 0 or an error with
 * err filled. */
int qry_agg_resolve(struct qry_scan *sc, const struct qry_match *m,
		    const struct qry_bucket_spec *spec, struct qry_bucketing *out,
		    struct qry_error *err);

/* Fills err for a failed read of series k: QRY_E_LIMIT for RDB_ELIMIT
 * (with advice), QRY_E_UNSUPPORTED for a read the data cannot answer
 * (sc->re says why), else QRY_E_INTERNAL. Returns rc. */
int qry_agg_read_error(struct qry_error *err, int rc, const struct mdl_series_key *k,
		       const struct qry_scan *sc);

/* The stored points of series id in r (head and chunks merged, verified),
 * at most max_points (RDB_ELIMIT beyond), into out (replacing its
 * contents); sc->re says why a read failed. 0, RDB_ELIMIT, RDB_ECORRUPT or
 * -errno. Blocks on chunk reads. */
int qry_read_series(struct qry_scan *sc, uint64_t id, const struct sto_range *r, size_t max_points,
		    struct mdl_cols *out);

#endif
