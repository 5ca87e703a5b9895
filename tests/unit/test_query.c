/* test_query.c - the aggregating queries (query/agg.h) against a brute-force
 * reference, over random data written through sto_write into a real store:
 * several ranks and metrics, small chunks (part sealed by a checkpoint, part
 * left in the head), out-of-order points, NaN and null values, gaps, ranks
 * missing at some steps, and a second attempt re-logging a step range.
 * Every bucketing is checked with chunk statistics trusted and not trusted:
 * answers from stats and from decoding must be bit-identical (values are
 * multiples of 0.25, so sums are exact in any order). Also: cross-rank
 * columns, the outlier ranking, metadata documents, and that partial results
 * (buckets, cross-rank cells) merge into the whole. Links query, storage and
 * model only: JSON output is tested with the server (test_json_out.c). */
#include "check.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "query/agg.h"
#include "storage/sto.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#define NRANKS 12 /* >= 8: cross-rank and outliers read with two threads */
#define NSTEPS 200
#define T0     1700000000000000000ll

static char base[4096];

enum { M_LOSS, M_GPU, M_COUNT };
static const char *const metric_names[M_COUNT] = {"loss", "gpu"};

struct rp {
	uint32_t rank;
	int metric;
	int64_t ts, step;
	uint32_t attempt;
	uint64_t bits;
};

static struct rp *all;
static size_t nall, capall;
static uint64_t rng = 88172645463325252ull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static uint64_t random_value(void)
{
	uint64_t r = rnd() % 100;
	if (r < 5)
		return MDL_VALUE_NAN_BITS;
	if (r < 7)
		return MDL_VALUE_NULL_BITS;
	return rdb_f64_bits((double)((int64_t)(rnd() % 4001) - 2000) * 0.25);
}

static void remember(uint32_t rank, int metric, int64_t ts, int64_t step, uint32_t attempt,
		     uint64_t bits)
{
	if (nall == capall) {
		capall = capall ? capall * 2 : 4096;
		all = realloc(all, capall * sizeof(*all));
	}
	all[nall++] = (struct rp){rank, metric, ts, step, attempt, bits};
}

/* Writes all[from..to) in the order given by idx, in batches of 97. */
static int write_range(struct sto *s, size_t from, size_t to, const size_t *idx)
{
	struct mdl_batch *b;
	int rc = mdl_batch_new(1 << 16, 64, &b);
	for (size_t i = from; rc == 0 && i < to; i++) {
		const struct rp *p = &all[idx ? idx[i - from] : i];
		const char *m = metric_names[p->metric];
		rc = mdl_batch_add(b, "jq", 2, p->rank, m, strlen(m), p->ts, p->step, p->attempt,
				   p->bits);
		if (rc == 0 && (mdl_batch_points(b) == 97 || i + 1 == to)) {
			rc = sto_write(s, b);
			mdl_batch_reset(b);
		}
	}
	mdl_batch_free(b);
	return rc;
}

/* Phase 1 (in order, then checkpointed): attempt 0 of loss (steps with gaps,
 * ranks missing at some steps) and the first half of gpu (no steps).
 * Phase 2 (shuffled, partly left in the head): attempt 1 re-logging steps
 * 120..160 of loss, and the second half of gpu. */
static int fill(struct sto *s)
{
	for (uint32_t r = 0; r < NRANKS; r++)
		for (int64_t st = 0; st < NSTEPS; st++)
			if (rnd() % 10)
				remember(r, M_LOSS, T0 + st * 1000 + r, st, 0, random_value());
	for (uint32_t r = 0; r < NRANKS; r++)
		for (int64_t i = 0; i < 150; i++)
			remember(r, M_GPU, T0 + i * 997 + r, MDL_STEP_NONE, 0, random_value());
	size_t phase1 = nall;
	for (uint32_t r = 0; r < NRANKS; r++)
		for (int64_t st = 120; st <= 160; st++)
			if (rnd() % 8)
				remember(r, M_LOSS, T0 + 500000 + st * 1000 + r, st, 1,
					 random_value());
	for (uint32_t r = 0; r < NRANKS; r++)
		for (int64_t i = 150; i < 300; i++)
			remember(r, M_GPU, T0 + i * 997 + r, MDL_STEP_NONE, 0, random_value());
	size_t n2 = nall - phase1, *idx = malloc(n2 * sizeof(*idx));
	for (size_t i = 0; i < n2; i++)
		idx[i] = phase1 + i;
	for (size_t i = n2; i > 1; i--) {
		size_t j = rnd() % i, t = idx[i - 1];
		idx[i - 1] = idx[j];
		idx[j] = t;
	}
	int rc = write_range(s, 0, phase1, NULL);
	if (rc == 0)
		rc = sto_checkpoint(s);
	if (rc == 0)
		rc = write_range(s, phase1, phase1 + n2 / 2, idx);
	if (rc == 0)
		rc = sto_checkpoint(s);
	if (rc == 0)
		rc = write_range(s, phase1 + n2 / 2, nall, idx + n2 / 2);
	free(idx);
	return rc;
}

/* ---- the reference ---------------------------------------------------------- */

static int64_t floordiv(int64_t x, int64_t w)
{
	if (w == 0)
		return 0;
	int64_t q = x / w;
	return (x % w && x < 0) ? q - 1 : q;
}

static bool selected(const struct rp *p, uint32_t rank, int metric, const struct qry_bucketing *bk)
{
	const struct sto_range *r = &bk->range;
	if (p->rank != rank || p->metric != metric || p->ts < r->from_ns || p->ts > r->to_ns)
		return false;
	if ((r->by_step || bk->axis == QRY_AXIS_STEP) && p->step == MDL_STEP_NONE)
		return false;
	if (r->by_step && (p->step < r->step_from || p->step > r->step_to))
		return false;
	return bk->attempt < 0 || p->attempt == (uint32_t)bk->attempt;
}

static int64_t ref_key(const struct rp *p, const struct qry_bucketing *bk)
{
	return floordiv(bk->axis == QRY_AXIS_STEP ? p->step : p->ts, bk->width);
}

static int cmp_ref(const void *a, const void *b, void *arg)
{
	const struct rp *x = a, *y = b;
	int64_t kx = ref_key(x, arg), ky = ref_key(y, arg);
	if (kx != ky)
		return kx < ky ? -1 : 1;
	return (x->ts > y->ts) - (x->ts < y->ts);
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The selected points of a series, latest attempt per step on the step axis. */
static size_t ref_points(uint32_t rank, int metric, const struct qry_bucketing *bk, struct rp *out)
{
	size_t n = 0;
	for (size_t i = 0; i < nall; i++) {
		const struct rp *p = &all[i];
		if (!selected(p, rank, metric, bk))
			continue;
		bool newer = false;
		for (size_t j = 0; bk->axis == QRY_AXIS_STEP && bk->attempt == QRY_ATTEMPT_LATEST &&
				   j < nall && !newer;
		     j++)
			newer = selected(&all[j], rank, metric, bk) && all[j].step == p->step &&
				all[j].attempt > p->attempt;
		if (!newer)
			out[n++] = *p;
	}
	qsort_r(out, n, sizeof(*out), cmp_ref, (void *)bk);
	return n;
}

static int bucket_mismatches;
static bool ignore_first_last; /* ts_unused: first/last are unspecified */
static bool ignore_min_max;    /* sums_only: so are min and max */

static void check_bucket(const struct qry_buckets *got, size_t bi, const struct rp *p, size_t n,
			 const struct qry_bucketing *bk, double *vals)
{
	const struct qry_bucket *g = &got->b[bi];
	uint64_t count = 0, nan = 0;
	double min = 0, max = 0, sum = 0;
	for (size_t i = 0; i < n; i++) {
		double v = rdb_bits_f64(p[i].bits);
		if (isnan(v)) {
			nan++;
			continue;
		}
		min = count == 0 || v < min ? v : min;
		max = count == 0 || v > max ? v : max;
		sum += v;
		vals[count++] = v;
	}
	bool ok = g->key == ref_key(&p[0], bk) && g->a.count == count && g->a.nan_count == nan &&
		  (ignore_first_last ||
		   (g->a.first_bits == p[0].bits && g->a.last_bits == p[n - 1].bits));
	if (count)
		ok = ok && (ignore_min_max || (g->a.min == min && g->a.max == max)) &&
		     g->a.sum == sum;
	if (count && bk->need_values) {
		qsort(vals, count, sizeof(double), cmp_dbl);
		for (size_t i = 0; i < count; i++)
			ok = ok && got->vals[g->vals_off + i] == vals[i];
	}
	if (!ok && bucket_mismatches++ < 5)
		fprintf(stderr,
			"bucket key %lld: got count %llu nan %llu sum %g, want key %lld "
			"count %llu nan %llu sum %g\n",
			(long long)g->key, (unsigned long long)g->a.count,
			(unsigned long long)g->a.nan_count, g->a.sum, (long long)ref_key(&p[0], bk),
			(unsigned long long)count, (unsigned long long)nan, sum);
	CHECK(ok);
}

static uint64_t sid(struct sto *s, uint32_t rank, const char *metric)
{
	struct mdl_series_key k = {.rank = rank};
	snprintf(k.job, sizeof(k.job), "jq");
	snprintf(k.metric, sizeof(k.metric), "%s", metric);
	uint64_t id = 0;
	CHECK_EQ_INT(sto_lookup_series(s, &k, &id), 0);
	return id;
}

/* Compares the engine with the reference for one series and bucketing. */
static void compare(struct qry_scan *sc, uint32_t rank, int metric, const struct qry_bucketing *bk)
{
	struct rp *ref = malloc(nall * sizeof(*ref));
	double *vals = malloc(nall * sizeof(double));
	struct qry_buckets got = {0};
	size_t n = ref_points(rank, metric, bk, ref);
	CHECK_EQ_INT(qry_agg_series(sc, sid(sc->s, rank, metric_names[metric]), bk, &got), 0);
	size_t nb = 0;
	for (size_t i = 0; i < n;) {
		size_t j = i;
		while (j < n && ref_key(&ref[j], bk) == ref_key(&ref[i], bk))
			j++;
		if (nb < got.n)
			check_bucket(&got, nb, ref + i, j - i, bk, vals);
		nb++;
		i = j;
	}
	CHECK_EQ_INT(got.n, nb);
	qry_buckets_free(&got);
	free(ref);
	free(vals);
}

static struct sto *open_store(const char *name, uint32_t chunk_max)
{
	static char dir[4300];
	snprintf(dir, sizeof(dir), "%s/%s", base, name);
	struct sto_options o;
	sto_options_default(&o);
	o.data_dir = dir;
	o.chunk_max_points = chunk_max;
	o.sync = STO_SYNC_NONE;
	o.index_map_bytes = 64ull << 20;
	struct sto *s = NULL;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	return s;
}

/* ---- tests ---------------------------------------------------------------------- */

static struct sto *store;

static void run_matrix(const struct qry_bucketing *bk, uint64_t *stats_used)
{
	struct qry_scan sc;
	qry_scan_init(&sc, store, 10000000);
	for (uint32_t r = 0; r < NRANKS; r++)
		compare(&sc, r, bk->axis == QRY_AXIS_STEP || bk->range.by_step ? M_LOSS : M_GPU,
			bk);
	*stats_used += sc.chunks_stats;
	qry_scan_free(&sc);
}

static void test_downsample_step_axis(void)
{
	static const int64_t widths[] = {1, 7, 16, 64, 0};
	static const int64_t attempts[] = {QRY_ATTEMPT_LATEST, QRY_ATTEMPT_ALL, 0, 1};
	const struct sto_range ranges[] = {
	    {INT64_MIN, INT64_MAX, false, 0, INT64_MAX},
	    {INT64_MIN, INT64_MAX, true, 30, 150},
	    {T0 + 20000, T0 + 100000, false, 0, INT64_MAX},
	};
	uint64_t stats_allowed = 0, stats_forced = 0;
	for (size_t w = 0; w < 5; w++)
		for (size_t a = 0; a < 4; a++)
			for (size_t r = 0; r < 3; r++)
				for (int t = 0; t < 2; t++) {
					struct qry_bucketing bk = {.range = ranges[r],
								   .axis = QRY_AXIS_STEP,
								   .width = widths[w],
								   .attempt = attempts[a],
								   .need_values = a == 0 && r == 0,
								   .force_decode = !t};
					run_matrix(&bk, t ? &stats_allowed : &stats_forced);
				}
	fprintf(stderr,
		"  step axis: %llu chunks answered from stats (stats allowed), %llu "
		"(decode forced)\n",
		(unsigned long long)stats_allowed, (unsigned long long)stats_forced);
	CHECK(stats_allowed > 0);
	CHECK_EQ_INT(stats_forced, 0);
}

/* Callers that read no bucket timestamp (cross-rank, outliers) get chunks
 * decoded without their timestamp column where that changes nothing: the
 * buckets must equal the reference, with head points in the view (path
 * off), chunks only (path on), steps out of order across chunks (the
 * attempt-1 re-logs: read again with timestamps) and step windows that
 * start or end inside chunks; and for callers that read only counts and
 * sums (sums_only), the same counts and sums. */
static void step_axis_no_ts(uint64_t *no_ts)
{
	static const int64_t widths[] = {1, 7, 64, 0};
	const struct sto_range ranges[] = {
	    {INT64_MIN, INT64_MAX, false, 0, INT64_MAX},    {INT64_MIN, INT64_MAX, true, 30, 150},
	    {INT64_MIN, INT64_MAX, true, 3, 100},	    {INT64_MIN, INT64_MAX, true, 181, 199},
	    {T0 + 20000, T0 + 100000, false, 0, INT64_MAX},
	};
	static const int64_t attempts[] = {QRY_ATTEMPT_LATEST, QRY_ATTEMPT_ALL, 1};
	ignore_first_last = true;
	for (size_t i = 0; i < 4 * 5 * 3 * 2; i++) {
		size_t w = i % 4, r = i / 4 % 5, a = i / 20 % 3;
		bool sums = i / 60;
		struct qry_bucketing bk = {.range = ranges[r],
					   .axis = QRY_AXIS_STEP,
					   .width = widths[w],
					   .attempt = attempts[a],
					   .need_values = w == 1 && a == 0 && !sums,
					   .ts_unused = true,
					   .sums_only = sums};
		struct qry_scan sc;
		qry_scan_init(&sc, store, 10000000);
		ignore_min_max = sums;
		for (uint32_t k = 0; k < NRANKS; k++)
			compare(&sc, k, M_LOSS, &bk);
		*no_ts += sc.chunks_no_ts;
		qry_scan_free(&sc);
	}
	ignore_first_last = ignore_min_max = false;
}

static void test_step_axis_without_timestamps(void)
{
	uint64_t with_head = 0, chunks_only = 0;
	step_axis_no_ts(&with_head);
	CHECK_EQ_INT(sto_checkpoint(store), 0); /* every point into chunks */
	step_axis_no_ts(&chunks_only);
	fprintf(stderr,
		"  chunks decoded without timestamps: %llu with head points, %llu after "
		"a checkpoint\n",
		(unsigned long long)with_head, (unsigned long long)chunks_only);
	/* the path ran (for views without head points in range) both times */
	CHECK(with_head > 0 && chunks_only > 0);
}

/* A downsample asking only for avg, sum and count folds points without
 * min, max and last (sums_only): its count, nan_count and sum must be those
 * of the same query also asking for min and max, on every step width,
 * attempt selection and step window, with head points and (after the
 * checkpoint of test_step_axis_without_timestamps) from chunks, where step
 * windows make views whose chunks are folded as they are decoded. */
static void test_downsample_sums_only(void)
{
	static const char *const metrics[] = {"loss"};
	static const int64_t widths[] = {1, 7, 64};
	static const int64_t attempts[] = {QRY_ATTEMPT_LATEST, QRY_ATTEMPT_ALL, 1};
	const struct sto_range ranges[] = {
	    {INT64_MIN, INT64_MAX, false, 0, INT64_MAX},
	    {INT64_MIN, INT64_MAX, true, 30, 150},
	    {INT64_MIN, INT64_MAX, true, 3, 100},
	    {INT64_MIN, INT64_MAX, true, 181, 199},
	};
	size_t compared = 0;
	for (size_t i = 0; i < 3 * 3 * 4; i++) {
		struct qry_ds_req req = {.job = "jq",
					 .metrics = metrics,
					 .nmetrics = 1,
					 .aggs = QRY_AGG_AVG | QRY_AGG_SUM | QRY_AGG_COUNT,
					 .max_points = 10000000};
		req.spec.range = ranges[i / 9];
		req.spec.step_from_set = req.spec.step_to_set = ranges[i / 9].by_step;
		req.spec.axis_set = true;
		req.spec.axis = QRY_AXIS_STEP;
		req.spec.width = widths[i % 3];
		req.spec.attempt = attempts[i / 3 % 3];
		struct qry_ds_result sums, full;
		struct qry_error err;
		CHECK_EQ_INT(qry_downsample(store, &req, &sums, &err), 0);
		req.aggs |= QRY_AGG_MIN | QRY_AGG_MAX;
		CHECK_EQ_INT(qry_downsample(store, &req, &full, &err), 0);
		CHECK_EQ_INT(sums.n, full.n);
		for (size_t s = 0; s < sums.n && s < full.n; s++) {
			const struct qry_buckets *a = &sums.v[s].b, *b = &full.v[s].b;
			bool same = a->n == b->n;
			compared += a->n;
			for (size_t k = 0; same && k < a->n; k++)
				same = a->b[k].key == b->b[k].key &&
				       a->b[k].a.count == b->b[k].a.count &&
				       a->b[k].a.nan_count == b->b[k].a.nan_count &&
				       rdb_f64_bits(a->b[k].a.sum) == rdb_f64_bits(b->b[k].a.sum);
			CHECK(same);
		}
		qry_ds_result_free(&sums);
		qry_ds_result_free(&full);
	}
	CHECK(compared > 1000);
}

static void test_downsample_time_axis(void)
{
	static const int64_t widths[] = {1000, 4999, 64000, 1000000, 0};
	uint64_t stats = 0;
	for (size_t w = 0; w < 5; w++)
		for (int a = 0; a < 3; a++)
			for (int q = 0; q < 2; q++) {
				struct qry_bucketing bk = {
				    .range = {INT64_MIN, INT64_MAX, false, 0, INT64_MAX},
				    .axis = QRY_AXIS_TIME,
				    .width = widths[w],
				    .attempt = a == 0	? QRY_ATTEMPT_LATEST
					       : a == 1 ? 0
							: 3,
				    .need_values = q};
				if (w == 2)
					bk.range = (struct sto_range){T0 + 33333, T0 + 250000,
								      false, 0, INT64_MAX};
				run_matrix(&bk, &stats);
			}
	/* the loss metric on the time axis: both attempts, all points */
	struct qry_bucketing bk = {.range = {INT64_MIN, INT64_MAX, false, 0, INT64_MAX},
				   .axis = QRY_AXIS_TIME,
				   .width = 50000,
				   .attempt = QRY_ATTEMPT_LATEST};
	struct qry_scan sc;
	qry_scan_init(&sc, store, 10000000);
	for (uint32_t r = 0; r < NRANKS; r++)
		compare(&sc, r, M_LOSS, &bk);
	stats += sc.chunks_stats;
	qry_scan_free(&sc);
	fprintf(stderr, "  time axis: %llu chunks answered from stats\n",
		(unsigned long long)stats);
	CHECK(stats > 0);
}

static void test_point_bound(void)
{
	struct qry_bucketing bk = {.range = {INT64_MIN, INT64_MAX, false, 0, INT64_MAX},
				   .axis = QRY_AXIS_STEP,
				   .width = 1,
				   .attempt = QRY_ATTEMPT_ALL};
	struct qry_scan sc;
	struct qry_buckets b = {0};
	qry_scan_init(&sc, store, 50);
	CHECK_EQ_INT(qry_agg_series(&sc, sid(store, 0, "loss"), &bk, &b), RDB_ELIMIT);
	struct qry_error err;
	qry_agg_read_error(&err, RDB_ELIMIT, &(struct mdl_series_key){.job = "jq"}, &sc);
	CHECK_EQ_INT(err.code, QRY_E_LIMIT);
	qry_buckets_free(&b);
	qry_scan_free(&sc);
}

/* Buckets are mergeable: a series read in two time halves (as two nodes
 * holding one part each would), merged with qry_buckets_merge, equals the
 * series read whole, values for quantiles included. */
static void test_buckets_merge(void)
{
	struct qry_scan sc;
	qry_scan_init(&sc, store, 10000000);
	for (int axis = 0; axis < 2; axis++)
		for (uint32_t r = 0; r < NRANKS; r += 5) {
			struct qry_bucketing bk = {
			    .range = {INT64_MIN, INT64_MAX, false, 0, INT64_MAX},
			    .axis = axis ? QRY_AXIS_TIME : QRY_AXIS_STEP,
			    .width = axis ? 64000 : 7,
			    .attempt = QRY_ATTEMPT_ALL,
			    .need_values = r == 0};
			uint64_t id = sid(store, r, axis ? "gpu" : "loss");
			struct qry_buckets whole = {0}, lo = {0}, hi = {0};
			CHECK_EQ_INT(qry_agg_series(&sc, id, &bk, &whole), 0);
			bk.range.to_ns = T0 + 100000;
			CHECK_EQ_INT(qry_agg_series(&sc, id, &bk, &lo), 0);
			bk.range.from_ns = T0 + 100001;
			bk.range.to_ns = INT64_MAX;
			CHECK_EQ_INT(qry_agg_series(&sc, id, &bk, &hi), 0);
			CHECK_EQ_INT(qry_buckets_merge(&hi, &lo), 0);
			CHECK_EQ_INT(hi.n, whole.n);
			CHECK_EQ_INT(hi.nvals, whole.nvals);
			for (size_t i = 0; i < hi.n && i < whole.n; i++) {
				const struct mdl_agg *x = &hi.b[i].a, *y = &whole.b[i].a;
				CHECK(hi.b[i].key == whole.b[i].key && x->count == y->count &&
				      x->nan_count == y->nan_count && x->sum == y->sum &&
				      x->first_bits == y->first_bits &&
				      x->last_bits == y->last_bits);
				CHECK(!x->count || (x->min == y->min && x->max == y->max));
			}
			for (size_t i = 0; i < hi.nvals && i < whole.nvals; i++)
				CHECK(hi.vals[i] == whole.vals[i]);
			qry_buckets_free(&whole);
			qry_buckets_free(&lo);
			qry_buckets_free(&hi);
		}
	qry_scan_free(&sc);
}

/* True when column col of the rows holds exactly (bit for bit) v. */
static bool same_column(const struct qry_xr_result *r, int col, const double *v, size_t n)
{
	if (r->nrows != n) {
		fprintf(stderr, "rows %zu, want %zu\n", r->nrows, n);
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		const struct qry_xr_row *w = &r->rows[i];
		double got = col == 0 ? w->mean : col == 1 ? w->min : col == 2 ? w->stddev : w->max;
		if (rdb_f64_bits(got) != rdb_f64_bits(v[i])) {
			fprintf(stderr, "column %d row %zu: got %.17g want %.17g\n", col, i, got,
				v[i]);
			return false;
		}
	}
	return true;
}

/* ---- qry_agg_each: parts read by the query helper threads ---------------- */

struct each_rec {
	const struct qry_match *m;
	struct qry_buckets *got; /* per series */
	unsigned *part;		 /* per series */
	size_t fail_at;		 /* fn fails at this series (SIZE_MAX: never) */
	int resets;
};

static int each_fn(void *arg, unsigned part, size_t i, const struct qry_buckets *bs)
{
	struct each_rec *r = arg;
	if (i == r->fail_at)
		return -EIO;
	r->part[i] = part;
	qry_buckets_free(&r->got[i]);
	return qry_buckets_merge(&r->got[i], bs); /* a copy */
}

static void each_reset(void *arg)
{
	struct each_rec *r = arg;
	r->resets++;
	for (size_t i = 0; i < r->m->n; i++)
		qry_buckets_free(&r->got[i]);
}

static bool same_buckets(const struct qry_buckets *x, const struct qry_buckets *y)
{
	if (x->n != y->n)
		return false;
	for (size_t i = 0; i < x->n; i++)
		if (x->b[i].key != y->b[i].key || x->b[i].a.count != y->b[i].a.count ||
		    x->b[i].a.nan_count != y->b[i].a.nan_count || x->b[i].a.sum != y->b[i].a.sum)
			return false;
	return true;
}

/* Every series of the match read in parts gives what qry_agg_series gives
 * one by one, with the same counters; parts are consecutive slices in
 * series order; a callback error or the point budget fails the read with
 * the error and series index of the plain loop. Runs on a checkpointed
 * store: a background checkpoint sealing head points between the reads
 * compared would change what they read. */
static void test_each_parts(void)
{
	const char *metrics[] = {"loss", "gpu"};
	struct qry_match_req mr = {.job = "jq", .metrics = metrics, .nmetrics = 2};
	struct qry_match m = {0};
	struct qry_error err;
	CHECK_EQ_INT(qry_match(store, &mr, &m, &err), 0);
	CHECK(m.n >= 16);
	struct qry_bucketing bk = {.range = {INT64_MIN, INT64_MAX, false, 0, INT64_MAX},
				   .axis = QRY_AXIS_STEP,
				   .width = 7,
				   .attempt = QRY_ATTEMPT_LATEST,
				   .ts_unused = true,
				   .sums_only = true};
	struct each_rec r = {.m = &m, .fail_at = SIZE_MAX};
	r.got = calloc(m.n, sizeof(*r.got));
	r.part = calloc(m.n, sizeof(*r.part));
	struct qry_scan par, ser;
	qry_scan_init(&par, store, 10000000);
	qry_scan_init(&ser, store, 10000000);
	size_t failed = SIZE_MAX;
	CHECK_EQ_INT(
	    qry_agg_each(&par, &m, &bk, &(struct qry_each){each_fn, each_reset, &r}, &failed), 0);
	struct qry_buckets one = {0};
	size_t same = 0, ordered = 0;
	for (size_t i = 0; i < m.n; i++) {
		CHECK_EQ_INT(qry_agg_series(&ser, m.v[i].id, &bk, &one), 0);
		same += same_buckets(&one, &r.got[i]);
		ordered += i == 0 || r.part[i] == r.part[i - 1] || r.part[i] == r.part[i - 1] + 1;
	}
	CHECK_EQ_INT(same, m.n);
	CHECK_EQ_INT(ordered, m.n);
	CHECK_EQ_INT(r.part[0], 0);
	CHECK(r.part[m.n - 1] < QRY_EACH_MAX_PARTS);
	fprintf(stderr, "  %zu series read in %u parts\n", m.n, r.part[m.n - 1] + 1);
	CHECK(r.part[m.n - 1] >= 1); /* split: at least one helper thread */
	CHECK_EQ_INT(par.points_read, ser.points_read);
	CHECK_EQ_INT(par.chunks_decoded, ser.chunks_decoded);
	CHECK_EQ_INT(par.chunks_stats, ser.chunks_stats);
	CHECK_EQ_INT(r.resets, 0);

	/* a callback failing in the last part: its error, its index */
	r.fail_at = m.n - 2;
	failed = SIZE_MAX;
	CHECK_EQ_INT(
	    qry_agg_each(&par, &m, &bk, &(struct qry_each){each_fn, each_reset, &r}, &failed),
	    -EIO);
	CHECK_EQ_INT(failed, m.n - 2);
	CHECK_EQ_INT(r.resets, 1);

	/* over the point budget: RDB_ELIMIT at the series the plain loop stops at */
	r.fail_at = SIZE_MAX;
	uint64_t budget = ser.points_read / 2;
	struct qry_scan small;
	qry_scan_init(&small, store, budget);
	size_t want = SIZE_MAX;
	int want_rc = 0;
	for (size_t i = 0; i < m.n && want_rc == 0; i++)
		if ((want_rc = qry_agg_series(&small, m.v[i].id, &bk, &one)) != 0)
			want = i;
	qry_scan_free(&small);
	qry_scan_init(&small, store, budget);
	failed = SIZE_MAX;
	CHECK_EQ_INT(want_rc, RDB_ELIMIT);
	CHECK_EQ_INT(
	    qry_agg_each(&small, &m, &bk, &(struct qry_each){each_fn, each_reset, &r}, &failed),
	    RDB_ELIMIT);
	CHECK_EQ_INT(failed, want);
	qry_scan_free(&small);

	qry_buckets_free(&one);
	for (size_t i = 0; i < m.n; i++)
		qry_buckets_free(&r.got[i]);
	free(r.got);
	free(r.part);
	qry_scan_free(&par);
	qry_scan_free(&ser);
	qry_match_free(&m);
}

/* A pass over many series (>= 128: the extent pass splits too) gives what
 * the plain loops give: the same extent as qry_agg_extent series by series,
 * the same buckets as qry_agg_series, and the cross-rank rows of the
 * reference (each rank's mean of its values, then the mean across ranks). */
static void test_many_series(void)
{
	enum { NSER = 160, PTS = 5 };
	struct sto *s = open_store("many", 4);
	struct mdl_batch *b;
	CHECK_EQ_INT(mdl_batch_new(1 << 16, 64, &b), 0);
	for (uint32_t r = 0; r < NSER; r++) {
		for (int64_t k = 0; k < PTS; k++) {
			double v = (double)((r * 7 + (uint32_t)k * 3) % 11) * 0.5;
			int64_t step = (int64_t)r % 3 + k * 2; /* extents differ per rank */
			CHECK_EQ_INT(mdl_batch_add(b, "jm", 2, r, "loss", 4, T0 + step * 1000 + r,
						   step, 0, rdb_f64_bits(v)),
				     0);
		}
		CHECK_EQ_INT(sto_write(s, b), 0);
		mdl_batch_reset(b);
		if (r == NSER / 2)
			CHECK_EQ_INT(sto_checkpoint(s), 0); /* half in chunks, half in the head */
	}
	mdl_batch_free(b);
	const char *metrics[] = {"loss"};
	struct qry_match_req mr = {.job = "jm", .metrics = metrics, .nmetrics = 1};
	struct qry_match m = {0};
	struct qry_error err;
	CHECK_EQ_INT(qry_match(s, &mr, &m, &err), 0);
	CHECK_EQ_INT(m.n, NSER);
	struct sto_range all_r = {INT64_MIN, INT64_MAX, false, 0, INT64_MAX};
	struct qry_scan sc;
	qry_scan_init(&sc, s, 10000000);
	struct qry_extent split, plain;
	qry_extent_init(&split);
	qry_extent_init(&plain);
	size_t failed = 0;
	CHECK_EQ_INT(qry_agg_extent_all(&sc, &m, &all_r, &split, &failed), 0);
	for (size_t i = 0; i < m.n; i++)
		CHECK_EQ_INT(qry_agg_extent(&sc, m.v[i].id, &all_r, &plain), 0);
	CHECK(split.any && plain.any && split.has_steps == plain.has_steps);
	CHECK(split.min_ts == plain.min_ts && split.max_ts == plain.max_ts);
	CHECK(split.min_step == plain.min_step && split.max_step == plain.max_step);
	CHECK_EQ_INT(plain.min_step, 0);
	CHECK_EQ_INT(plain.max_step, 2 + (PTS - 1) * 2);
	qry_scan_free(&sc);

	/* one bucket over every step: per rank the mean of its PTS values */
	struct qry_xr_req q = {.job = "jm",
			       .metric = "loss",
			       .max_points = 10000000,
			       .cols = QRY_XR_COUNT | QRY_XR_MEAN,
			       .spec = {.range = all_r,
					.axis_set = true,
					.axis = QRY_AXIS_STEP,
					.width = 1000,
					.attempt = QRY_ATTEMPT_LATEST}};
	struct qry_xr_result out;
	CHECK_EQ_INT(qry_crossrank(s, &q, &out, &err), 0);
	CHECK_EQ_INT(out.nrows, 1);
	double means = 0; /* each rank's mean over its PTS points, summed in rank order */
	for (uint32_t r = 0; r < NSER; r++) {
		double rs = 0;
		for (int64_t k = 0; k < PTS; k++)
			rs += (double)((r * 7 + (uint32_t)k * 3) % 11) * 0.5;
		means += rs / PTS;
	}
	if (out.nrows == 1) {
		CHECK_EQ_INT(out.rows[0].count, NSER);
		CHECK(out.rows[0].mean == means / NSER);
	}
	qry_xr_result_free(&out);
	qry_match_free(&m);
	sto_close(s);
}

static void test_crossrank(void)
{
	struct qry_bucketing bk = {.range = {INT64_MIN, INT64_MAX, false, 0, INT64_MAX},
				   .axis = QRY_AXIS_STEP,
				   .width = 10,
				   .attempt = QRY_ATTEMPT_LATEST};
	struct rp *ref = malloc(nall * sizeof(*ref));
	double mean[NSTEPS / 10], mn[NSTEPS / 10], sd[NSTEPS / 10], rv[NSTEPS / 10][NRANKS];
	bool def[NSTEPS / 10];
	size_t cnt[NSTEPS / 10] = {0};
	for (uint32_t r = 0; r < NRANKS; r++) {
		double sum[NSTEPS / 10] = {0};
		size_t c[NSTEPS / 10] = {0};
		size_t n = ref_points(r, M_LOSS, &bk, ref);
		for (size_t i = 0; i < n; i++) {
			double v = rdb_bits_f64(ref[i].bits);
			if (!isnan(v)) {
				sum[ref[i].step / 10] += v;
				c[ref[i].step / 10]++;
			}
		}
		for (int b = 0; b < NSTEPS / 10; b++)
			if (c[b])
				rv[b][cnt[b]++] = sum[b] / (double)c[b];
	}
	size_t nb = 0;
	for (int b = 0; b < NSTEPS / 10; b++) {
		if (!cnt[b])
			continue;
		double s = 0, ss = 0, m = rv[b][0];
		for (size_t i = 0; i < cnt[b]; i++) {
			s += rv[b][i];
			m = rv[b][i] < m ? rv[b][i] : m;
		}
		double mu = s / (double)cnt[b];
		for (size_t i = 0; i < cnt[b]; i++)
			ss += (rv[b][i] - mu) * (rv[b][i] - mu);
		mean[nb] = mu;
		mn[nb] = m;
		sd[nb] = sqrt(ss / (double)cnt[b]);
		def[nb++] = true;
	}
	const char *metric = "loss";
	struct qry_xr_req q = {.job = "jq",
			       .metric = metric,
			       .max_points = 10000000,
			       .spec = {.range = bk.range,
					.axis_set = true,
					.axis = QRY_AXIS_STEP,
					.width = 10,
					.attempt = QRY_ATTEMPT_LATEST}};
	struct qry_error err;
	struct qry_xr_result out, sub;
	CHECK_EQ_INT(qry_crossrank(store, &q, &out, &err), 0);
	const double *vals[] = {mean, mn, sd};
	for (int c = 0; c < 3; c++)
		CHECK(same_column(&out, c, vals[c], nb));
	(void)def;
	CHECK_EQ_INT(out.nranks, NRANKS);
	for (uint32_t r = 0; r < out.nranks; r++)
		CHECK_EQ_INT(out.ranks[r], r);
	CHECK_EQ_INT(out.cols, QRY_XR_ALL);

	/* agg=mean,max: the same columns as the full answer, and only them */
	q.cols = QRY_XR_MEAN | QRY_XR_MAX;
	CHECK_EQ_INT(qry_crossrank(store, &q, &sub, &err), 0);
	CHECK_EQ_INT(sub.cols, QRY_XR_MEAN | QRY_XR_MAX);
	CHECK_EQ_INT(sub.nrows, out.nrows);
	for (size_t i = 0; i < sub.nrows && i < out.nrows; i++)
		CHECK(sub.rows[i].key == out.rows[i].key &&
		      rdb_f64_bits(sub.rows[i].mean) == rdb_f64_bits(out.rows[i].mean) &&
		      rdb_f64_bits(sub.rows[i].max) == rdb_f64_bits(out.rows[i].max));
	qry_xr_result_free(&sub);

	/* without median, quantiles and stddev the rows are made in one pass
	 * over the cells (no sort): every column equal to the sorted path's */
	q.cols =
	    QRY_XR_COUNT | QRY_XR_MEAN | QRY_XR_MIN | QRY_XR_MAX | QRY_XR_ARGMIN | QRY_XR_ARGMAX;
	CHECK_EQ_INT(qry_crossrank(store, &q, &sub, &err), 0);
	CHECK_EQ_INT(sub.nrows, out.nrows);
	for (size_t i = 0; i < sub.nrows && i < out.nrows; i++)
		CHECK(sub.rows[i].key == out.rows[i].key &&
		      sub.rows[i].count == out.rows[i].count &&
		      rdb_f64_bits(sub.rows[i].mean) == rdb_f64_bits(out.rows[i].mean) &&
		      rdb_f64_bits(sub.rows[i].min) == rdb_f64_bits(out.rows[i].min) &&
		      rdb_f64_bits(sub.rows[i].max) == rdb_f64_bits(out.rows[i].max) &&
		      sub.rows[i].argmin == out.rows[i].argmin &&
		      sub.rows[i].argmax == out.rows[i].argmax);
	qry_xr_result_free(&sub);

	/* a point bound crossed with two threads fails as the plain loop does */
	q.cols = 0;
	q.max_points = 100;
	CHECK_EQ_INT(qry_crossrank(store, &q, &sub, &err), RDB_ELIMIT);
	CHECK_EQ_INT(err.code, QRY_E_LIMIT);
	qry_xr_result_free(&sub);
	qry_xr_result_free(&out);
	free(ref);
}

/* Cross-rank partials are mergeable: the cells of two halves of the ranks
 * (as two nodes would hold them), merged, give the rows of all ranks. */
static void test_crossrank_merge(void)
{
	struct qry_bucketing bk = {.range = {INT64_MIN, INT64_MAX, false, 0, INT64_MAX},
				   .axis = QRY_AXIS_STEP,
				   .width = 3,
				   .attempt = QRY_ATTEMPT_LATEST};
	struct qry_xr_part whole = {0}, lo = {0}, hi = {0};
	struct qry_buckets b = {0};
	struct qry_scan sc;
	static const double q[] = {0.25, 0.9};
	qry_scan_init(&sc, store, 10000000);
	for (uint32_t r = 0; r < NRANKS; r++) {
		CHECK_EQ_INT(qry_agg_series(&sc, sid(store, r, "loss"), &bk, &b), 0);
		CHECK_EQ_INT(qry_xr_part_add(&whole, r, &b), 0);
		/* the second node's part is added first: merge order must not matter */
		CHECK_EQ_INT(qry_xr_part_add(r % 2 ? &lo : &hi, r, &b), 0);
	}
	CHECK_EQ_INT(qry_xr_part_merge(&hi, &lo), 0);
	struct qry_xr_row *a = NULL, *m = NULL;
	size_t na = 0, nm = 0;
	CHECK_EQ_INT(qry_xr_rows(&whole, QRY_XR_ALL, q, 2, &a, &na), 0);
	CHECK_EQ_INT(qry_xr_rows(&hi, QRY_XR_ALL, q, 2, &m, &nm), 0);
	CHECK_EQ_INT(na, nm);
	for (size_t i = 0; i < na && i < nm; i++)
		CHECK(a[i].key == m[i].key && a[i].count == m[i].count && a[i].min == m[i].min &&
		      a[i].max == m[i].max && a[i].median == m[i].median &&
		      a[i].q[0] == m[i].q[0] && a[i].q[1] == m[i].q[1] &&
		      a[i].argmin == m[i].argmin && a[i].argmax == m[i].argmax &&
		      a[i].mean == m[i].mean);
	free(a);
	free(m);
	qry_xr_part_free(&whole);
	qry_xr_part_free(&lo);
	qry_xr_part_free(&hi);
	qry_buckets_free(&b);
	qry_scan_free(&sc);
}

static void test_outliers_and_errors(void)
{
	struct sto *s = open_store("outliers", 8);
	struct mdl_batch *b;
	CHECK_EQ_INT(mdl_batch_new(1 << 16, 64, &b), 0);
	for (uint32_t r = 0; r < 8; r++)
		for (int64_t st = 0; st < 40; st++)
			mdl_batch_add(b, "jo", 2, r, "step_time", 9, T0 + st * 100 + r, st, 0,
				      rdb_f64_bits(r == 3 ? 2.0 : 1.0 + 0.01 * r));
	CHECK_EQ_INT(sto_write(s, b), 0);
	mdl_batch_free(b);
	struct qry_error err;
	struct qry_out_result out;
	struct qry_out_req q = {.job = "jo",
				.metric = "step_time",
				.limit = 2,
				.max_points = 1000000,
				.last_steps = 10,
				.spec = {.range = {INT64_MIN, INT64_MAX, false, 0, INT64_MAX},
					 .attempt = QRY_ATTEMPT_LATEST}};
	CHECK_EQ_INT(qry_outliers(s, &q, &out, &err), 0);
	CHECK(out.nlisted >= 1 && out.rows[0].rank == 3 && out.rows[0].value == 2.0);
	CHECK(out.window.by_step && out.window.step_from == 30 && out.window.step_to == 39);
	qry_out_result_free(&out);
	q.job = "nope";
	CHECK_EQ_INT(qry_outliers(s, &q, &out, &err), RDB_ENOTFOUND);
	CHECK_EQ_INT(err.code, QRY_E_NOT_FOUND);
	q.job = "jo";
	q.metric = "nope";
	CHECK_EQ_INT(qry_outliers(s, &q, &out, &err), RDB_ENOTFOUND);
	CHECK_EQ_INT(err.code, QRY_E_NOT_FOUND);
	/* Phases mode with more phase names than phases one report holds (the
	 * API takes up to 256): the names beyond are only looked up, never
	 * written past a fixed array (ASan caught select_series doing so). */
	static char pnames[256][16];
	const char *phases[256];
	for (int i = 0; i < 256; i++) {
		snprintf(pnames[i], sizeof(pnames[i]), "p%d", i);
		phases[i] = pnames[i];
	}
	q.metric = "step_time";
	q.phases_mode = true;
	q.phases = phases;
	q.nphases = 256;
	CHECK_EQ_INT(qry_outliers(s, &q, &out, &err), RDB_ENOTFOUND); /* no such phases */
	CHECK_EQ_INT(err.code, QRY_E_NOT_FOUND);
	/* (a response over max_response_bytes is a 413: tests/unit/test_json_out.c) */
	sto_close(s);
}

/* Series selection: exact names over every rank list only those names'
 * series (in (rank, metric) order, as a listing of the job selects them);
 * an alias finds the series under its other name; a rank filter, an
 * unknown metric and an unknown job are told apart. */
static void test_match(void)
{
	const char *both[] = {"gpu", "loss"}, *alias[] = {"train.loss"}, *none[] = {"nope"};
	struct qry_match_req mr = {.job = "jq", .metrics = both, .nmetrics = 2};
	struct qry_match m = {0};
	struct qry_error err;
	CHECK_EQ_INT(qry_match(store, &mr, &m, &err), 0);
	CHECK_EQ_INT(m.n, 2 * NRANKS);
	size_t good = 0;
	for (size_t i = 0; i < m.n; i++)
		good += m.v[i].key.rank == i / 2 &&
			strcmp(m.v[i].key.metric, metric_names[i % 2 ? M_LOSS : M_GPU]) == 0 &&
			m.v[i].id == sid(store, (uint32_t)(i / 2), m.v[i].key.metric);
	CHECK_EQ_INT(good, m.n);
	qry_match_free(&m);

	mr.metrics = alias;
	mr.nmetrics = 1;
	CHECK_EQ_INT(qry_match(store, &mr, &m, &err), 0);
	CHECK_EQ_INT(m.n, NRANKS);
	CHECK(m.n && strcmp(m.v[0].key.metric, "loss") == 0);
	qry_match_free(&m);

	uint32_t far[] = {NRANKS + 5};
	mr.metrics = both;
	mr.ranks = far;
	mr.nranks = 1;
	CHECK_EQ_INT(qry_match(store, &mr, &m, &err), 0); /* known metric, no such rank */
	CHECK_EQ_INT(m.n, 0);
	qry_match_free(&m);

	mr.ranks = NULL;
	mr.nranks = 0;
	mr.metrics = none;
	CHECK_EQ_INT(qry_match(store, &mr, &m, &err), RDB_ENOTFOUND);
	CHECK(err.code == QRY_E_NOT_FOUND && strstr(err.msg, "has no metric"));
	mr.job = "nope";
	CHECK_EQ_INT(qry_match(store, &mr, &m, &err), RDB_ENOTFOUND);
	CHECK(err.code == QRY_E_NOT_FOUND && strstr(err.msg, "unknown job"));
	qry_match_free(&m);
}

static void test_meta(void)
{
	struct sto *dir = open_store("meta", 16);
	struct qry_error err;
	struct rdb_buf out;
	rdb_buf_init(&out, 1 << 21);
	CHECK_EQ_INT(qry_meta_get(dir, "j1", &out, &err), RDB_ENOTFOUND);
	CHECK_EQ_INT(err.code, QRY_E_NOT_FOUND);
	const char *doc = "{\"world_size\": 8, \"lr\": 3e-4}";
	CHECK_EQ_INT(qry_meta_put(dir, "j1", doc, strlen(doc), &err), 0);
	CHECK_EQ_INT(qry_meta_get(dir, "j1", &out, &err), 0);
	CHECK(out.len == strlen(doc) && memcmp(out.data, doc, out.len) == 0);
	CHECK_EQ_INT(qry_meta_put(dir, "j1", "[1,2]", 5, &err), RDB_EINVAL);
	CHECK_EQ_INT(qry_meta_put(dir, "j1", "{\"a\":", 5, &err), RDB_EINVAL);
	CHECK_EQ_INT(err.code, QRY_E_INVALID);
	CHECK_EQ_INT(qry_meta_put(dir, "../x", "{}", 2, &err), RDB_EINVAL);
	size_t big = QRY_META_MAX_BYTES + 1;
	char *huge = malloc(big);
	memset(huge, ' ', big);
	huge[0] = '{';
	huge[big - 1] = '}';
	CHECK_EQ_INT(qry_meta_put(dir, "j1", huge, big, &err), RDB_ELIMIT);
	CHECK_EQ_INT(err.code, QRY_E_TOO_LARGE);
	free(huge);
	out.len = 0;
	CHECK_EQ_INT(qry_meta_get(dir, "j1", &out, &err), 0); /* the old one is intact */
	CHECK(out.len == strlen(doc));
	rdb_buf_free(&out);
	sto_close(dir);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* A fresh error holds none (code 0, empty message) until qry_fail fills it. */
static void test_error_new(void)
{
	struct qry_error *e = qry_error_new();
	CHECK(e != NULL);
	if (!e)
		return;
	CHECK_EQ_INT(e->code, 0);
	CHECK_EQ_INT(e->msg[0], 0);
	CHECK_EQ_INT(qry_fail(e, QRY_E_LIMIT, -7, "more than %d points", 5), -7);
	CHECK_EQ_INT(e->code, QRY_E_LIMIT);
	CHECK(strcmp(e->msg, "more than 5 points") == 0);
	free(e);
}

int main(void)
{
	const char *tmp = getenv("RDB_TEST_TMP");
	snprintf(base, sizeof(base), "%s/test_query.XXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	store = open_store("main", 16);
	CHECK_EQ_INT(fill(store), 0);
	RUN(test_downsample_step_axis);
	RUN(test_downsample_time_axis);
	RUN(test_point_bound);
	RUN(test_buckets_merge);
	RUN(test_crossrank);
	RUN(test_crossrank_merge);
	RUN(test_outliers_and_errors);
	RUN(test_downsample_sums_only);		/* head points */
	RUN(test_step_axis_without_timestamps); /* checkpoints the store */
	RUN(test_downsample_sums_only);		/* chunks */
	RUN(test_each_parts);			/* after it: no head point left to seal meanwhile */
	RUN(test_many_series);
	RUN(test_match);
	RUN(test_meta);
	RUN(test_error_new);
	sto_close(store);
	free(all);
	int rc = check_summary("query");
	if (rc == 0)
		nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return rc;
}
