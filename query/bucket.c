/* bucket.c - the bucket engine: the buckets of one series (bucket.h).
 *
 * A series is cut into buckets along one axis (step or time): bucket k holds
 * the points whose coordinate x satisfies k * width <= x < (k + 1) * width,
 * so boundaries are aligned to multiples of the width whatever the range.
 * For each bucket the engine keeps a partial aggregate (count, NaN count,
 * min, max, sum, first, last) and, for quantiles, the bucket's values.
 *
 * Reading a series (qry_agg_series):
 *   1. one consistent view (sto_view_series): head points in range, plus
 *      the index entries of the chunks overlapping the range;
 *   2. a plan per chunk: SKIP (it cannot hold a selected point), STATS (its
 *      index statistics answer it: every point is in the range and in one
 *      bucket, no quantile is asked, and on the step axis with latest-attempt
 *      selection it holds one attempt and no other chunk or head point of
 *      another attempt shares one of its steps), or DECODE;
 *   3. decoded and head points are filtered (range, step presence, attempt),
 *      on the step axis the latest attempt per step is kept, and they are
 *      folded into buckets together with the STATS chunks.
 * A caller that reads no bucket timestamp (bk->ts_unused: cross-rank,
 * outliers) gets its chunks decoded without their timestamp column where
 * that provably changes nothing it reads (no_ts_ok): the column is often
 * the costliest to decode.
 * NaN and null values are counted in nan_count and left out of
 * min/max/sum/avg/quantiles; first/last are the values of the points with the
 * smallest/largest (ts, step), NaN included (as chunk statistics define them).
 *
 * Rollups (downsample only, bk->use_rollups): the points retention dropped
 * survive as per-bucket rollup records (storage/index/index.h), read from the same
 * snapshot as the chunks, so a point is in exactly one of them. When the
 * width is a multiple of the axis tier's width, every record lying inside
 * the range and inside one query bucket is merged into that bucket like a
 * STATS chunk; a record that straddles the range bound is left out (its
 * points cannot be separated). Quantiles need every value: a query asking
 * for them over a range holding rollup records gets RDB_EINVAL (422).
 *
 * Bounds: points read (head + decoded chunk points) are limited by
 * max_points (RDB_ELIMIT, 422); STATS chunks cost nothing. Only non-empty
 * buckets exist, so memory follows points read plus chunks.
 * Threading: one query per struct qry_scan; storage calls are thread-safe.
 */
#include "query/bucket.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "common/rdb_sort.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers ------------------------------------------------------------ */

void qry_buckets_free(struct qry_buckets *b)
{
	if (!b)
		return;
	free(b->b);
	free(b->vals);
	memset(b, 0, sizeof(*b));
}

void qry_scan_init(struct qry_scan *sc, struct sto *s, size_t max_points)
{
	memset(sc, 0, sizeof(*sc));
	sc->s = s;
	sc->max_points = max_points;
	rdb_buf_init(&sc->rec, STO_CHUNK_HEADER_SIZE + STO_CHUNK_MAX_PAYLOAD);
}

void qry_scan_free(struct qry_scan *sc)
{
	if (!sc)
		return;
	rdb_buf_free(&sc->rec);
	mdl_cols_free(&sc->tmp);
}

void qry_extent_init(struct qry_extent *e)
{
	memset(e, 0, sizeof(*e));
	e->min_ts = INT64_MAX;
	e->max_ts = INT64_MIN;
	e->min_step = INT64_MAX;
	e->max_step = INT64_MIN;
}

static int64_t floor_div(int64_t x, int64_t w)
{
	if (w <= 0)
		return 0;
	int64_t q = x / w;
	if (x % w != 0 && x < 0)
		q--;
	return q;
}

static bool in_range(const struct sto_range *r, int64_t ts, int64_t step)
{
	if (ts < r->from_ns || ts > r->to_ns)
		return false;
	if (!r->by_step)
		return true;
	return step != MDL_STEP_NONE && step >= r->step_from && step <= r->step_to;
}

double qry_quantile_sorted(const double *v, size_t n, double q)
{
	double pos = q * (double)(n - 1);
	size_t lo = (size_t)floor(pos);
	if (lo >= n - 1)
		return v[n - 1];
	double frac = pos - (double)lo;
	if (frac == 0)
		return v[lo];
	return v[lo] + (v[lo + 1] - v[lo]) * frac;
}

/* ---- extent and bucketing choice ------------------------------------------------ */

static void extent_add(struct qry_extent *e, int64_t ts, int64_t step)
{
	e->any = true;
	if (ts < e->min_ts)
		e->min_ts = ts;
	if (ts > e->max_ts)
		e->max_ts = ts;
	if (step == MDL_STEP_NONE)
		return;
	e->has_steps = true;
	if (step < e->min_step)
		e->min_step = step;
	if (step > e->max_step)
		e->max_step = step;
}

static int64_t clamp(int64_t x, int64_t lo, int64_t hi)
{
	return x < lo ? lo : x > hi ? hi : x;
}

/* Adds the clamped corners of a chunk's or rollup record's time and step
 * span to e. */
static void extent_add_span(struct qry_extent *e, const struct sto_range *r, int64_t min_ts,
			    int64_t max_ts, int64_t min_step, int64_t max_step)
{
	if (min_step != MDL_STEP_NONE && r->by_step) {
		min_step = clamp(min_step, r->step_from, r->step_to);
		max_step = clamp(max_step, r->step_from, r->step_to);
	}
	extent_add(e, clamp(min_ts, r->from_ns, r->to_ns), min_step);
	extent_add(e, clamp(max_ts, r->from_ns, r->to_ns), max_step);
}

int qry_agg_extent(struct qry_scan *sc, uint64_t id, const struct sto_range *r,
		   struct qry_extent *e)
{
	struct sto_series_view v;
	int64_t tw, sw;
	sto_rollup_widths(sc->s, &tw, &sw);
	/* where retention left only rollups, they are the data (either tier
	 * holds every rolled-up point) */
	int rc = tw > 0 || sw > 0 ? sto_view_series_rollups(sc->s, id, r, sc->max_points,
							    tw > 0 ? STO_TIER_TIME : STO_TIER_STEP,
							    sc->max_points, &v)
				  : sto_view_series(sc->s, id, r, sc->max_points, &v);
	if (rc)
		return rc;
	for (size_t i = 0; i < v.head.n; i++)
		extent_add(e, v.head.ts_ns[i], v.head.step[i]);
	for (size_t i = 0; i < v.nrollups; i++) {
		const struct sto_rollup *ru = &v.rollups[i].r;
		if (ru->last_ts_ns < r->from_ns || ru->first_ts_ns > r->to_ns)
			continue;
		extent_add_span(e, r, ru->first_ts_ns, ru->last_ts_ns, ru->min_step, ru->max_step);
	}
	for (size_t i = 0; i < v.nchunks; i++) {
		const struct sto_chunk_stats *st = &v.chunks[i].stats;
		extent_add_span(e, r, st->min_ts_ns, st->max_ts_ns, st->min_step, st->max_step);
	}
	sto_view_free(&v);
	return 0;
}

bool qry_agg_needs_extent(const struct qry_bucket_spec *spec)
{
	return !spec->axis_set;
}

static int64_t width_for(int64_t lo, int64_t hi, uint32_t points)
{
	if (hi < lo || points == 0)
		return 1;
	uint64_t span = (uint64_t)hi - (uint64_t)lo + 1;
	if (span == 0) /* the whole int64 range */
		span = UINT64_MAX;
	uint64_t w = span / points + (span % points != 0);
	return w > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)(w ? w : 1);
}

void qry_agg_choose(const struct qry_bucket_spec *spec, const struct qry_extent *e,
		    struct qry_bucketing *out)
{
	memset(out, 0, sizeof(*out));
	out->range = spec->range;
	out->attempt = spec->attempt;
	out->force_decode = spec->force_decode;
	if (spec->axis_set) {
		out->axis = spec->axis;
		out->width = spec->width;
		return;
	}
	bool step = spec->range.by_step || (e && e->has_steps);
	out->axis = step ? QRY_AXIS_STEP : QRY_AXIS_TIME;
	int64_t lo, hi;
	if (step) {
		lo = spec->step_from_set ? spec->range.step_from : e ? e->min_step : 0;
		hi = spec->step_to_set ? spec->range.step_to : e ? e->max_step : 0;
	} else {
		lo = spec->from_set ? spec->range.from_ns : e ? e->min_ts : 0;
		hi = spec->to_set ? spec->range.to_ns : e ? e->max_ts : 0;
	}
	out->width = width_for(lo, hi, spec->points ? spec->points : 1000);
}

/* ---- planning ---------------------------------------------------------------- */

enum { PLAN_DECODE, PLAN_STATS, PLAN_SKIP };

static bool pure(const struct sto_chunk_stats *st)
{
	return st->min_attempt == st->max_attempt;
}

static bool stepped(const struct sto_chunk_stats *st)
{
	return st->min_step != MDL_STEP_NONE;
}

/* A point taken from the head or a decoded chunk. */
struct pt {
	int64_t key, ts, step;
	uint32_t attempt;
	uint64_t bits;
};

struct pt_vec {
	struct pt *p;
	size_t n, cap;
	/* The points taken so far are in their final order: on the step axis
	 * steps strictly increase and times do not decrease, on the time axis
	 * (ts, step, attempt) does not decrease. Then neither the latest-
	 * attempt filter nor the sort by (key, ts, step, attempt) changes
	 * anything, and both are skipped. Points usually come that way (one
	 * chunk after the other, each sorted by time, steps growing). */
	bool ordered;
	int64_t lo, hi, key; /* the last bucket found: key covers [lo, hi] */
	/* Fold mode (read_view without timestamps): points are folded into
	 * *fold's buckets as they come instead of being kept, which gives what
	 * build() would for points in final order; a point out of order clears
	 * `ordered` and the read is done again the ordinary way. */
	struct qry_buckets *fold;
	struct pt last; /* the last point taken (fold mode) */
	bool have_last;
};
#define PT_VEC_INIT                                                                                \
	{                                                                                          \
		.ordered = true, .lo = 1, .hi = 0                                                  \
	}

static int cmp_chunk_step(const void *a, const void *b, void *arg)
{
	const struct sto_chunk_ref *c = arg;
	int64_t x = c[*(const size_t *)a].stats.min_step;
	int64_t y = c[*(const size_t *)b].stats.min_step;
	return (x > y) - (x < y);
}

static int cmp_pt_step(const void *a, const void *b)
{
	const struct pt *x = a, *y = b;
	if (x->step != y->step)
		return x->step < y->step ? -1 : 1;
	return (x->attempt > y->attempt) - (x->attempt < y->attempt);
}

/* Marks chunks whose step range overlaps another chunk's holding a different
 * attempt. Pairs are found by a sweep over chunks sorted by min_step, so the
 * cost follows the overlapping pairs, not chunks squared. */
static int chunk_conflicts(const struct sto_series_view *v, bool *conflict)
{
	size_t *order = malloc((v->nchunks ? v->nchunks : 1) * sizeof(*order));
	size_t n = 0;
	if (!order)
		return -ENOMEM;
	for (size_t i = 0; i < v->nchunks; i++)
		if (stepped(&v->chunks[i].stats))
			order[n++] = i;
	qsort_r(order, n, sizeof(*order), cmp_chunk_step, v->chunks);
	for (size_t a = 0; a < n; a++) {
		const struct sto_chunk_stats *x = &v->chunks[order[a]].stats;
		for (size_t b = a + 1; b < n; b++) {
			const struct sto_chunk_stats *y = &v->chunks[order[b]].stats;
			if (y->min_step > x->max_step)
				break;
			if (pure(x) && pure(y) && x->min_attempt == y->min_attempt)
				continue;
			conflict[order[a]] = conflict[order[b]] = true;
		}
	}
	free(order);
	return 0;
}

/* Marks chunks that share a step with a head point of another attempt. */
static int head_conflicts(const struct sto_series_view *v, bool *conflict)
{
	struct pt *h = malloc((v->head.n ? v->head.n : 1) * sizeof(*h));
	size_t n = 0;
	if (!h)
		return -ENOMEM;
	for (size_t i = 0; i < v->head.n; i++)
		if (v->head.step[i] != MDL_STEP_NONE)
			h[n++] =
			    (struct pt){.step = v->head.step[i], .attempt = v->head.attempt[i]};
	rdb_sort(h, n, sizeof(*h), cmp_pt_step);
	for (size_t c = 0; c < v->nchunks && n; c++) {
		const struct sto_chunk_stats *st = &v->chunks[c].stats;
		if (!stepped(st) || conflict[c])
			continue;
		size_t lo = 0, hi = n;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (h[mid].step < st->min_step)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (size_t i = lo; i < n && h[i].step <= st->max_step && !conflict[c]; i++)
			conflict[c] = !pure(st) || h[i].attempt != st->min_attempt;
	}
	free(h);
	return 0;
}

static int find_conflicts(const struct sto_series_view *v, const struct qry_bucketing *bk,
			  bool **out)
{
	*out = NULL;
	if (bk->axis != QRY_AXIS_STEP || bk->attempt != QRY_ATTEMPT_LATEST || !v->nchunks)
		return 0;
	bool *c = calloc(v->nchunks, sizeof(*c));
	if (!c)
		return -ENOMEM;
	int rc = chunk_conflicts(v, c);
	if (rc == 0)
		rc = head_conflicts(v, c);
	if (rc)
		free(c);
	else
		*out = c;
	return rc;
}

static bool attempt_excluded(const struct sto_chunk_stats *st, int64_t attempt)
{
	return attempt >= 0 &&
	       ((uint64_t)attempt < st->min_attempt || (uint64_t)attempt > st->max_attempt);
}

static int plan_chunk(const struct sto_chunk_stats *st, const struct qry_bucketing *bk,
		      bool conflict)
{
	const struct sto_range *r = &bk->range;
	bool step_axis = bk->axis == QRY_AXIS_STEP;
	if (attempt_excluded(st, bk->attempt) || (step_axis && !stepped(st)))
		return PLAN_SKIP;
	if (bk->force_decode || bk->need_values || st->min_ts_ns < r->from_ns ||
	    st->max_ts_ns > r->to_ns)
		return PLAN_DECODE;
	/* A step bucket may use the stats only if every point has a step. */
	if ((step_axis || r->by_step) && st->step_count != st->count)
		return PLAN_DECODE;
	if (r->by_step && (st->min_step < r->step_from || st->max_step > r->step_to))
		return PLAN_DECODE;
	int64_t lo = step_axis ? st->min_step : st->min_ts_ns;
	int64_t hi = step_axis ? st->max_step : st->max_ts_ns;
	if (floor_div(lo, bk->width) != floor_div(hi, bk->width))
		return PLAN_DECODE;
	if (bk->attempt >= 0 && !(pure(st) && st->min_attempt == (uint64_t)bk->attempt))
		return PLAN_DECODE;
	if (bk->attempt == QRY_ATTEMPT_LATEST && step_axis && (!pure(st) || conflict))
		return PLAN_DECODE;
	return PLAN_STATS;
}

/* ---- points and buckets --------------------------------------------------------- */

/* The bucket key of coordinate x. Along ordered coordinates most points
 * fall in the bucket of the one before: the bounds are compared instead of
 * dividing. */
static int64_t key_of(struct pt_vec *pv, const struct qry_bucketing *bk, int64_t x)
{
	if (x >= pv->lo && x <= pv->hi)
		return pv->key;
	int64_t w = bk->width, key = floor_div(x, w), lo, hi;
	if (w <= 0) {
		lo = INT64_MIN;
		hi = INT64_MAX;
	} else if (__builtin_mul_overflow(key, w, &lo) || __builtin_add_overflow(lo, w - 1, &hi)) {
		lo = 1; /* bounds not representable: divide every time */
		hi = 0;
	}
	pv->lo = lo;
	pv->hi = hi;
	pv->key = key;
	return key;
}

/* True when point b may follow point a in final order (see pt_vec). */
static bool in_order(const struct pt *a, const struct pt *b, bool step_axis)
{
	if (step_axis)
		return a->step < b->step && a->ts <= b->ts;
	if (a->ts != b->ts)
		return a->ts < b->ts;
	if (a->step != b->step)
		return a->step < b->step;
	return a->attempt <= b->attempt;
}

static void part_from_pt(struct qry_bucket *b, const struct pt *p);

/* Fold mode: p (in final order after pv->last) into the last bucket of
 * pv->fold or a new one. */
static int fold_point(struct pt_vec *pv, const struct pt *p)
{
	struct qry_buckets *o = pv->fold;
	if (o->n && o->b[o->n - 1].key == p->key) {
		mdl_agg_append(&o->b[o->n - 1].a, p->ts, p->step, p->bits);
		return 0;
	}
	if (o->n == o->cap) {
		size_t cap = o->cap ? o->cap * 2 : 64;
		struct qry_bucket *b = realloc(o->b, cap * sizeof(*b));
		if (!b)
			return -ENOMEM;
		o->b = b;
		o->cap = cap;
	}
	struct qry_bucket *b = &o->b[o->n++];
	memset(b, 0, sizeof(*b));
	part_from_pt(b, p);
	return 0;
}

/* Whether the point at (ts, step, attempt) belongs to the bucketing: in
 * its range, with a step on the step axis, of its attempt when one is
 * asked for. */
static inline bool point_wanted(const struct qry_bucketing *bk, bool step_axis, int64_t ts,
				int64_t step, uint64_t attempt)
{
	return in_range(&bk->range, ts, step) && !(step_axis && step == MDL_STEP_NONE) &&
	       (bk->attempt < 0 || attempt == (uint64_t)bk->attempt);
}

/* take_points in fold mode. */
static int fold_points(struct pt_vec *pv, const struct mdl_cols *c, const struct qry_bucketing *bk)
{
	bool step_axis = bk->axis == QRY_AXIS_STEP;
	for (size_t i = 0; i < c->n && pv->ordered; i++) {
		int64_t step = c->step[i], ts = c->ts_ns[i];
		if (!point_wanted(bk, step_axis, ts, step, c->attempt[i]))
			continue;
		struct pt p = {.key = key_of(pv, bk, step_axis ? step : ts),
			       .ts = ts,
			       .step = step,
			       .attempt = c->attempt[i],
			       .bits = c->value[i]};
		if (pv->have_last && !in_order(&pv->last, &p, step_axis)) {
			pv->ordered = false;
			break;
		}
		pv->last = p;
		pv->have_last = true;
		int rc = fold_point(pv, &p);
		if (rc)
			return rc;
	}
	return 0;
}

/* The run of points of c from i on that continues the one before i (steps
 * strictly increasing, times not decreasing) inside the bucket ending at
 * step hi, appended to a in point order; the index after the run. */
static size_t fold_run(const struct mdl_cols *c, size_t i, int64_t hi, struct mdl_agg *a)
{
	const int64_t *step = c->step, *ts = c->ts_ns;
	struct mdl_agg x = *a;
	size_t j = i;
	for (; j < c->n; j++) {
		if (step[j] <= step[j - 1] || step[j] > hi || ts[j] < ts[j - 1])
			break;
		mdl_agg_append(&x, ts[j], step[j], c->value[j]);
	}
	*a = x;
	return j;
}

/* fold_run for a caller that reads only count, nan_count and sum
 * (bk->sums_only): the same additions in the same order, so the same
 * sums, without min, max and last. */
static size_t fold_run_sums(const struct mdl_cols *c, size_t i, int64_t hi, struct mdl_agg *a)
{
	const int64_t *step = c->step, *ts = c->ts_ns;
	const uint64_t *bits = c->value;
	double sum = a->sum;
	uint64_t count = a->count, nans = a->nan_count;
	size_t j = i;
	for (; j < c->n; j++) {
		if (step[j] <= step[j - 1] || step[j] > hi || ts[j] < ts[j - 1])
			break;
		double v = rdb_bits_f64(bits[j]);
		if (v == v) {
			sum += v;
			count++;
		} else {
			nans++;
		}
	}
	a->sum = sum;
	a->count = count;
	a->nan_count = nans;
	return j;
}

/* fold_points for a chunk whose statistics say every point has a step,
 * lies in the time range and passes the attempt filter (chunk_fast): per
 * point only the step range is left to test. Points are folded a run at a
 * time: while steps strictly increase, times do not decrease and the
 * bucket stays the same, a point is only added to the run's aggregate
 * (mdl_agg_append, or only its count and sum for bk->sums_only; in point
 * order, so the sums are those of fold_point).
 * The first point of each run goes the ordinary way (order check against
 * the point before, new bucket). */
static int fold_fast(struct pt_vec *pv, const struct mdl_cols *c, const struct qry_bucketing *bk)
{
	bool by_step = bk->range.by_step;
	int64_t slo = by_step ? bk->range.step_from : INT64_MIN;
	int64_t shi = by_step ? bk->range.step_to : INT64_MAX;
	const int64_t *step = c->step, *ts = c->ts_ns;
	for (size_t i = 0; i < c->n && pv->ordered;) {
		if (step[i] < slo || step[i] > shi) {
			i++;
			continue;
		}
		struct pt p = {.key = key_of(pv, bk, step[i]),
			       .ts = ts[i],
			       .step = step[i],
			       .attempt = c->attempt[i],
			       .bits = c->value[i]};
		if (pv->have_last && !in_order(&pv->last, &p, true)) {
			pv->ordered = false;
			break;
		}
		int rc = fold_point(pv, &p);
		if (rc)
			return rc;
		int64_t hi = pv->hi < shi ? pv->hi : shi;
		struct mdl_agg *a = &pv->fold->b[pv->fold->n - 1].a;
		size_t j =
		    bk->sums_only ? fold_run_sums(c, i + 1, hi, a) : fold_run(c, i + 1, hi, a);
		pv->last = (struct pt){.key = p.key,
				       .ts = ts[j - 1],
				       .step = step[j - 1],
				       .attempt = c->attempt[j - 1],
				       .bits = c->value[j - 1]};
		pv->have_last = true;
		i = j;
	}
	return 0;
}

/* Appends the points of c that the bucketing selects, with their keys.
 * fast: c is a chunk whose statistics pass chunk_fast. */
static int take_points(struct pt_vec *pv, const struct mdl_cols *c, const struct qry_bucketing *bk,
		       bool fast)
{
	if (pv->fold && fast)
		return fold_fast(pv, c, bk);
	if (pv->fold)
		return fold_points(pv, c, bk);
	if (pv->n + c->n > pv->cap) {
		size_t cap = pv->cap ? pv->cap : 256;
		while (cap < pv->n + c->n)
			cap *= 2;
		struct pt *p = realloc(pv->p, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		pv->p = p;
		pv->cap = cap;
	}
	bool step_axis = bk->axis == QRY_AXIS_STEP, ordered = pv->ordered;
	for (size_t i = 0; i < c->n; i++) {
		int64_t step = c->step[i], ts = c->ts_ns[i];
		if (!point_wanted(bk, step_axis, ts, step, c->attempt[i]))
			continue;
		struct pt *p = &pv->p[pv->n];
		*p = (struct pt){.key = key_of(pv, bk, step_axis ? step : ts),
				 .ts = ts,
				 .step = step,
				 .attempt = c->attempt[i],
				 .bits = c->value[i]};
		if (ordered && pv->n)
			ordered = in_order(p - 1, p, step_axis);
		pv->n++;
	}
	pv->ordered = ordered;
	return 0;
}

/* Points usually arrive already in order (one chunk after the other, each
 * sorted by time, steps growing with time): checking costs one pass, and
 * skipping the sort of ordered input gives what the (stable) sort would. */
static bool ordered_by_step(const struct pt *p, size_t n, bool *strict)
{
	*strict = true;
	for (size_t i = 1; i < n; i++) {
		if (p[i - 1].step < p[i].step)
			continue;
		*strict = false;
		if (cmp_pt_step(&p[i - 1], &p[i]) > 0)
			return false;
	}
	return true;
}

/* Keeps, for each step, only the points of its highest attempt. */
static void keep_latest(struct pt_vec *pv)
{
	if (pv->n == 0)
		return;
	bool strict;
	if (ordered_by_step(pv->p, pv->n, &strict)) {
		if (strict)
			return; /* one point per step: each is its step's latest */
	} else {
		rdb_sort(pv->p, pv->n, sizeof(*pv->p), cmp_pt_step);
	}
	size_t w = 0;
	for (size_t i = 0; i < pv->n;) {
		size_t j = i;
		while (j < pv->n && pv->p[j].step == pv->p[i].step)
			j++;
		uint32_t latest = pv->p[j - 1].attempt;
		for (size_t k = i; k < j; k++)
			if (pv->p[k].attempt == latest)
				pv->p[w++] = pv->p[k];
		i = j;
	}
	pv->n = w;
}

static int cmp_pt_key(const void *a, const void *b)
{
	const struct pt *x = a, *y = b;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	if (x->step != y->step)
		return x->step < y->step ? -1 : 1;
	return (x->attempt > y->attempt) - (x->attempt < y->attempt);
}

static int cmp_bucket_key(const void *a, const void *b)
{
	const struct qry_bucket *x = a, *y = b;
	return (x->key > y->key) - (x->key < y->key);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void part_from_pt(struct qry_bucket *b, const struct pt *p)
{
	b->key = p->key;
	mdl_agg_point(&b->a, p->ts, p->step, p->bits);
}

static void part_from_stats(struct qry_bucket *b, const struct sto_chunk_stats *st, int64_t key)
{
	memset(b, 0, sizeof(*b));
	b->key = key;
	b->a = (struct mdl_agg){.count = st->count - st->nan_count,
				.nan_count = st->nan_count,
				.min = st->min,
				.max = st->max,
				.sum = st->sum,
				.first_ts_ns = st->min_ts_ns,
				.first_step = st->min_step,
				.last_ts_ns = st->max_ts_ns,
				.last_step = st->max_step,
				.first_bits = st->first,
				.last_bits = st->last};
}

/* Folds sorted points and sorted stats partials into out, bucket by bucket. */
static int build(struct qry_buckets *out, const struct pt_vec *pv, const struct qry_bucket *parts,
		 size_t nparts, bool need_values)
{
	size_t want = pv->n + nparts;
	if (want > out->cap) {
		struct qry_bucket *b = realloc(out->b, want * sizeof(*b));
		if (!b)
			return -ENOMEM;
		out->b = b;
		out->cap = want;
	}
	if (need_values && pv->n > out->vcap) {
		double *v = realloc(out->vals, pv->n * sizeof(*v));
		if (!v)
			return -ENOMEM;
		out->vals = v;
		out->vcap = pv->n;
	}
	size_t i = 0, j = 0;
	while (i < pv->n || j < nparts) {
		int64_t key = i < pv->n ? pv->p[i].key : parts[j].key;
		if (j < nparts && parts[j].key < key)
			key = parts[j].key;
		struct qry_bucket *b = &out->b[out->n++];
		size_t b_first = i, vals_off = out->nvals;
		memset(b, 0, sizeof(*b));
		if (i < pv->n && pv->p[i].key == key)
			part_from_pt(b, &pv->p[i++]);
		for (; i < pv->n && pv->p[i].key == key; i++)
			mdl_agg_append(&b->a, pv->p[i].ts, pv->p[i].step, pv->p[i].bits);
		if (need_values)
			for (size_t t = b_first; t < i; t++)
				if (!isnan(rdb_bits_f64(pv->p[t].bits)))
					out->vals[out->nvals++] = rdb_bits_f64(pv->p[t].bits);
		for (; j < nparts && parts[j].key == key; j++)
			mdl_agg_merge(&b->a, &parts[j].a);
		b->key = key;
		b->vals_off = vals_off;
		if (need_values)
			rdb_sort(out->vals + b->vals_off, b->a.count, sizeof(double), cmp_double);
	}
	return 0;
}

/* Fold mode's end: merges the sorted stats partials into the folded
 * buckets of out (ascending by key), bucket by bucket as build() does:
 * a key's points first, then its partials in order. */
static int merge_parts(struct qry_buckets *out, const struct qry_bucket *parts, size_t nparts)
{
	if (nparts == 0)
		return 0;
	size_t n = out->n + nparts;
	struct qry_bucket *m = malloc(n * sizeof(*m));
	if (!m)
		return -ENOMEM;
	size_t i = 0, j = 0, k = 0;
	while (i < out->n || j < nparts) {
		int64_t key = i < out->n ? out->b[i].key : parts[j].key;
		if (j < nparts && parts[j].key < key)
			key = parts[j].key;
		struct qry_bucket *b = &m[k++];
		if (i < out->n && out->b[i].key == key)
			*b = out->b[i++];
		else
			memset(b, 0, sizeof(*b));
		for (; j < nparts && parts[j].key == key; j++)
			mdl_agg_merge(&b->a, &parts[j].a);
		b->key = key;
		b->vals_off = 0;
	}
	free(out->b);
	out->b = m;
	out->n = k;
	out->cap = n;
	return 0;
}

/* ---- merging bucket lists ------------------------------------------------------- */

static const double *vals_of(const struct qry_buckets *bs, const struct qry_bucket *b)
{
	return bs->nvals ? bs->vals + b->vals_off : NULL;
}

/* Appends the values of x and y (each sorted, either may be NULL) in order. */
static size_t merge_vals(double *to, const double *x, size_t nx, const double *y, size_t ny)
{
	size_t i = 0, j = 0, o = 0;
	nx = x ? nx : 0;
	ny = y ? ny : 0;
	while (i < nx && j < ny)
		to[o++] = y[j] < x[i] ? y[j++] : x[i++];
	while (i < nx)
		to[o++] = x[i++];
	while (j < ny)
		to[o++] = y[j++];
	return o;
}

int qry_buckets_merge(struct qry_buckets *dst, const struct qry_buckets *src)
{
	struct qry_buckets m = {0};
	size_t nb = dst->n + src->n, nv = dst->nvals + src->nvals;
	m.b = malloc((nb ? nb : 1) * sizeof(*m.b));
	m.vals = nv ? malloc(nv * sizeof(*m.vals)) : NULL;
	if (!m.b || (nv && !m.vals)) {
		qry_buckets_free(&m);
		return -ENOMEM;
	}
	m.cap = nb;
	m.vcap = nv;
	for (size_t i = 0, j = 0; i < dst->n || j < src->n;) {
		bool tx = j == src->n || (i < dst->n && dst->b[i].key <= src->b[j].key);
		bool ty = i == dst->n || (j < src->n && src->b[j].key <= dst->b[i].key);
		const struct qry_bucket *x = tx ? &dst->b[i++] : NULL,
					*y = ty ? &src->b[j++] : NULL;
		struct qry_bucket *o = &m.b[m.n++];
		*o = x ? *x : *y;
		o->vals_off = m.nvals;
		if (x && y)
			mdl_agg_merge(&o->a, &y->a);
		if (nv)
			m.nvals += merge_vals(m.vals + m.nvals, x ? vals_of(dst, x) : NULL,
					      x ? x->a.count : 0, y ? vals_of(src, y) : NULL,
					      y ? y->a.count : 0);
	}
	qry_buckets_free(dst);
	*dst = m;
	return 0;
}

static int64_t axis_key(const struct qry_bucketing *bk, int64_t ts, int64_t step)
{
	return floor_div(bk->axis == QRY_AXIS_STEP ? step : ts, bk->width);
}

static bool ordered_by_key(const struct pt *p, size_t n)
{
	for (size_t i = 1; i < n; i++)
		if (cmp_pt_key(&p[i - 1], &p[i]) > 0)
			return false;
	return true;
}

/* True when every point of the chunk has a step (step axis), lies in the
 * time range and passes the attempt filter, by its statistics: fold_fast
 * then tests only the step range per point. */
static bool chunk_fast(const struct sto_chunk_stats *st, const struct qry_bucketing *bk)
{
	const struct sto_range *r = &bk->range;
	if (bk->axis != QRY_AXIS_STEP || st->step_count != st->count)
		return false;
	if (st->min_ts_ns < r->from_ns || st->max_ts_ns > r->to_ns)
		return false;
	return bk->attempt < 0 || (pure(st) && st->min_attempt == (uint64_t)bk->attempt);
}

/* Plans and reads the chunks of v: stats partials into parts, points into pv. */
static int read_chunks(struct qry_scan *sc, const struct sto_series_view *v,
		       const struct qry_bucketing *bk, unsigned flags, const bool *conflict,
		       struct pt_vec *pv, struct qry_bucket *parts, size_t *nparts)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < v->nchunks; i++) {
		const struct sto_chunk_stats *st = &v->chunks[i].stats;
		int plan = plan_chunk(st, bk, conflict && conflict[i]);
		if (plan == PLAN_SKIP)
			continue;
		if (plan == PLAN_STATS) {
			int64_t key = axis_key(bk, st->min_ts_ns, st->min_step);
			part_from_stats(&parts[(*nparts)++], st, key);
			sc->chunks_stats++;
			continue;
		}
		if (sc->points_read + st->count > sc->max_points)
			return RDB_ELIMIT;
		/* a step range starting inside the chunk: its points before it are
		 * never taken, and their value blocks need no decoding */
		int64_t min_step = bk->range.by_step && st->min_step < bk->range.step_from
				       ? bk->range.step_from
				       : INT64_MIN;
		rc = sto_read_chunk_tail(sc->s, &v->chunks[i], flags, min_step, &sc->rec, &sc->tmp,
					 &sc->re);
		sc->points_read += st->count;
		sc->chunks_decoded++;
		sc->chunks_no_ts += flags != 0;
		if (rc == 0)
			rc = take_points(pv, &sc->tmp, bk, chunk_fast(st, bk));
	}
	return rc;
}

int64_t qry_agg_rollup_width(struct sto *s, enum qry_axis axis)
{
	int64_t tw, sw;
	sto_rollup_widths(s, &tw, &sw);
	return axis == QRY_AXIS_STEP ? sw : tw;
}

int qry_agg_fit_rollups(struct qry_scan *sc, const uint64_t *ids, size_t n,
			struct qry_bucketing *bk)
{
	int64_t w = qry_agg_rollup_width(sc->s, bk->axis);
	if (w <= 0 || bk->width <= 0 || bk->width % w == 0)
		return 0;
	unsigned tier = bk->axis == QRY_AXIS_STEP ? STO_TIER_STEP : STO_TIER_TIME;
	bool found = false;
	for (size_t i = 0; i < n && !found; i++) {
		struct sto_series_view v;
		int rc = sto_view_series_rollups(sc->s, ids[i], &bk->range, SIZE_MAX, tier, 1, &v);
		if (rc == RDB_ELIMIT) {
			found = true; /* more than one record */
			continue;
		}
		if (rc)
			return rc;
		found = v.nrollups > 0;
		sto_view_free(&v);
	}
	if (found) {
		int64_t k = bk->width / w + 1;
		bk->width = k > INT64_MAX / w ? INT64_MAX / w * w : k * w;
	}
	return 0;
}

/* The rollup tier that can answer bk, or -1. */
static int rollup_tier(struct qry_scan *sc, const struct qry_bucketing *bk)
{
	int64_t tw, sw;
	if (!bk->use_rollups)
		return -1;
	sto_rollup_widths(sc->s, &tw, &sw);
	int64_t w = bk->axis == QRY_AXIS_STEP ? sw : tw;
	if (w <= 0 || (bk->width != 0 && bk->width % w != 0))
		return -1;
	return bk->axis == QRY_AXIS_STEP ? STO_TIER_STEP : STO_TIER_TIME;
}

/* True when every point of r is selected by bk and falls in one bucket. */
static bool rollup_usable(const struct sto_rollup *r, const struct qry_bucketing *bk)
{
	const struct sto_range *g = &bk->range;
	bool step_axis = bk->axis == QRY_AXIS_STEP;
	if (r->first_ts_ns < g->from_ns || r->last_ts_ns > g->to_ns)
		return false;
	if ((step_axis || g->by_step) && r->nostep_count)
		return false;
	if (g->by_step && (r->min_step < g->step_from || r->max_step > g->step_to))
		return false;
	if (bk->attempt >= 0 &&
	    !(r->min_attempt == r->max_attempt && r->min_attempt == (uint64_t)bk->attempt))
		return false;
	if (bk->attempt == QRY_ATTEMPT_LATEST && step_axis && r->min_attempt != r->max_attempt)
		return false;
	int64_t lo = step_axis ? r->min_step : r->first_ts_ns;
	int64_t hi = step_axis ? r->max_step : r->last_ts_ns;
	return floor_div(lo, bk->width) == floor_div(hi, bk->width);
}

static void part_from_rollup(struct qry_bucket *b, const struct sto_rollup *r,
			     const struct qry_bucketing *bk)
{
	memset(b, 0, sizeof(*b));
	b->key = floor_div(bk->axis == QRY_AXIS_STEP ? r->min_step : r->first_ts_ns, bk->width);
	b->a = (struct mdl_agg){.count = r->count,
				.nan_count = r->nan_count,
				.min = r->min,
				.max = r->max,
				.sum = r->sum,
				.first_ts_ns = r->first_ts_ns,
				.first_step = r->first_step,
				.last_ts_ns = r->last_ts_ns,
				.last_step = r->last_step,
				.first_bits = r->first_bits,
				.last_bits = r->last_bits};
}

/* Rollup records of v into parts; quantiles over them are refused. */
static int read_rollups(struct qry_scan *sc, const struct sto_series_view *v,
			const struct qry_bucketing *bk, struct qry_bucket *parts, size_t *nparts)
{
	for (size_t i = 0; i < v->nrollups; i++) {
		const struct sto_rollup *r = &v->rollups[i].r;
		if (!rollup_usable(r, bk))
			continue;
		if (bk->need_values) {
			snprintf(sc->re.msg, sizeof(sc->re.msg),
				 "quantiles cannot be computed over data that retention has "
				 "rolled up (from %lld ns); ask without p.. aggregates (agg=p50, "
				 "quantiles=) or start the range "
				 "after it",
				 (long long)r->first_ts_ns);
			return RDB_EINVAL;
		}
		part_from_rollup(&parts[(*nparts)++], r, bk);
		sc->from_rollups++;
	}
	return 0;
}

static int view_of(struct qry_scan *sc, uint64_t id, const struct qry_bucketing *bk,
		   struct sto_series_view *v)
{
	size_t left = sc->max_points > sc->points_read ? sc->max_points - sc->points_read : 0;
	int tier = rollup_tier(sc, bk);
	if (tier < 0)
		return sto_view_series(sc->s, id, &bk->range, left, v);
	/* A rollup record costs what one point does: it bounds the memory. */
	return sto_view_series_rollups(sc->s, id, &bk->range, left, (unsigned)tier, left, v);
}

/* Chunks may be decoded without their timestamps (STO_READ_NO_TS) when the
 * caller reads none (bk->ts_unused) and the stand-ins cannot change which
 * points are taken or their order: step axis, no head point, every chunk
 * inside the time range (so the range test passes either way) and the
 * chunks disjoint in time in view order. Then the true timestamps of the
 * points taken do not decrease, and the stand-ins (a chunk's min_ts for its
 * first point, its max_ts for the others) do not either, so "in final
 * order" (in_order) is decided by the steps alone in both cases. When the
 * points come out of order they would be sorted by timestamp: that read is
 * done again with timestamps. */
static bool no_ts_ok(const struct sto_series_view *v, const struct qry_bucketing *bk)
{
	if (!bk->ts_unused || bk->axis != QRY_AXIS_STEP || v->head.n)
		return false;
	for (size_t i = 0; i < v->nchunks; i++) {
		const struct sto_chunk_stats *st = &v->chunks[i].stats;
		if (st->min_ts_ns < bk->range.from_ns || st->max_ts_ns > bk->range.to_ns)
			return false;
		if (i && v->chunks[i - 1].stats.max_ts_ns > st->min_ts_ns)
			return false;
	}
	return true;
}

/* The buckets of view v into out. With flags (STO_READ_NO_TS) and points
 * out of order, *redo is set and out is not built. */
static int read_view(struct qry_scan *sc, const struct sto_series_view *v,
		     const struct qry_bucketing *bk, unsigned flags, struct qry_buckets *out,
		     bool *redo)
{
	struct pt_vec pv = PT_VEC_INIT;
	struct qry_bucket *parts = NULL;
	bool *conflict = NULL;
	size_t nparts = 0;
	out->n = out->nvals = 0;
	*redo = false;
	if (flags && !bk->need_values)
		pv.fold = out; /* no values to keep: fold as the points come */
	int rc = find_conflicts(v, bk, &conflict);
	if (rc == 0 && v->nchunks + v->nrollups &&
	    !(parts = malloc((v->nchunks + v->nrollups) * sizeof(*parts))))
		rc = -ENOMEM;
	if (rc == 0)
		rc = take_points(&pv, &v->head, bk, false);
	if (rc == 0)
		rc = read_chunks(sc, v, bk, flags, conflict, &pv, parts, &nparts);
	if (rc == 0)
		rc = read_rollups(sc, v, bk, parts, &nparts);
	if (rc)
		goto out;
	if (flags && !pv.ordered) {
		*redo = true;
		goto out;
	}
	if (nparts)
		rdb_sort(parts, nparts, sizeof(*parts), cmp_bucket_key);
	if (pv.fold) {
		rc = merge_parts(out, parts, nparts);
		goto out;
	}
	if (!pv.ordered && bk->axis == QRY_AXIS_STEP && bk->attempt == QRY_ATTEMPT_LATEST)
		keep_latest(&pv);
	if (!pv.ordered && pv.n && !ordered_by_key(pv.p, pv.n))
		rdb_sort(pv.p, pv.n, sizeof(*pv.p), cmp_pt_key);
	rc = build(out, &pv, parts, nparts, bk->need_values);
out:
	free(pv.p);
	free(parts);
	free(conflict);
	return rc;
}

int qry_agg_series(struct qry_scan *sc, uint64_t id, const struct qry_bucketing *bk,
		   struct qry_buckets *out)
{
	struct sto_series_view v;
	out->n = out->nvals = 0;
	sc->re.msg[0] = 0;
	int rc = view_of(sc, id, bk, &v);
	if (rc)
		return rc;
	sc->points_read += v.head.n + v.nrollups;
	/* the counters, for a read done again */
	uint64_t pr = sc->points_read, cs = sc->chunks_stats, cd = sc->chunks_decoded,
		 fr = sc->from_rollups, nt = sc->chunks_no_ts;
	bool redo = false;
	rc = read_view(sc, &v, bk, no_ts_ok(&v, bk) ? STO_READ_NO_TS : 0, out, &redo);
	if (rc == 0 && redo) {
		sc->points_read = pr;
		sc->chunks_stats = cs;
		sc->chunks_decoded = cd;
		sc->from_rollups = fr;
		sc->chunks_no_ts = nt;
		rc = read_view(sc, &v, bk, 0, out, &redo);
	}
	sto_view_free(&v);
	return rc;
}
