/* downsample.c - the bucket engine shared by the aggregating queries, and the
 * downsample query.
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
 * NaN and null values are counted in nan_count and left out of
 * min/max/sum/avg/quantiles; first/last are the values of the points with the
 * smallest/largest (ts, step), NaN included (as chunk statistics define them).
 *
 * Rollups (downsample only, bk->use_rollups): the points retention dropped
 * survive as per-bucket rollup records (storage/index.h), read from the same
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
#include "query/agg.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
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

static int64_t sat_add(int64_t a, int64_t b)
{
	if (b > 0 && a > INT64_MAX - b)
		return INT64_MAX;
	if (b < 0 && a < INT64_MIN - b)
		return INT64_MIN;
	return a + b;
}

static int64_t sat_mul(int64_t a, int64_t b)
{
	int64_t r;
	if (__builtin_mul_overflow(a, b, &r))
		return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
	return r;
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

int qry_json_f64(struct rdb_buf *out, double v, bool defined)
{
	if (!defined)
		return rdb_buf_append(out, "null", 4);
	return qry_json_value(out, rdb_f64_bits(v));
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

int qry_agg_extent(struct qry_scan *sc, uint64_t id, const struct sto_range *r,
		   struct qry_extent *e)
{
	struct sto_series_view v;
	int rc = sto_view_series(sc->s, id, r, sc->max_points, &v);
	if (rc)
		return rc;
	for (size_t i = 0; i < v.head.n; i++)
		extent_add(e, v.head.ts_ns[i], v.head.step[i]);
	for (size_t i = 0; i < v.nchunks; i++) {
		const struct sto_chunk_stats *st = &v.chunks[i].stats;
		int64_t lo = clamp(st->min_ts_ns, r->from_ns, r->to_ns);
		int64_t hi = clamp(st->max_ts_ns, r->from_ns, r->to_ns);
		int64_t slo = st->min_step, shi = st->max_step;
		if (slo != MDL_STEP_NONE && r->by_step) {
			slo = clamp(slo, r->step_from, r->step_to);
			shi = clamp(shi, r->step_from, r->step_to);
		}
		extent_add(e, lo, slo);
		extent_add(e, hi, shi);
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
};
#define PT_VEC_INIT {.ordered = true, .lo = 1, .hi = 0}

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
			h[n++] = (struct pt){.step = v->head.step[i], .attempt = v->head.attempt[i]};
	qsort(h, n, sizeof(*h), cmp_pt_step);
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
	return attempt >= 0 && ((uint64_t)attempt < st->min_attempt ||
				(uint64_t)attempt > st->max_attempt);
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

/* Appends the points of c that the bucketing selects, with their keys. */
static int take_points(struct pt_vec *pv, const struct mdl_cols *c, const struct qry_bucketing *bk)
{
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
		if (!in_range(&bk->range, ts, step))
			continue;
		if (step_axis && step == MDL_STEP_NONE)
			continue;
		if (bk->attempt >= 0 && c->attempt[i] != (uint64_t)bk->attempt)
			continue;
		struct pt *p = &pv->p[pv->n];
		*p = (struct pt){.key = key_of(pv, bk, step_axis ? step : ts), .ts = ts,
				 .step = step, .attempt = c->attempt[i], .bits = c->value[i]};
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
		qsort(pv->p, pv->n, sizeof(*pv->p), cmp_pt_step);
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

static bool before(int64_t ts1, int64_t step1, int64_t ts2, int64_t step2)
{
	return ts1 < ts2 || (ts1 == ts2 && step1 < step2);
}

static void part_from_pt(struct qry_bucket *b, const struct pt *p)
{
	double v = rdb_bits_f64(p->bits);
	memset(b, 0, sizeof(*b));
	b->key = p->key;
	b->count = !isnan(v);
	b->nan_count = isnan(v);
	b->min = b->max = b->sum = b->count ? v : 0;
	b->first_ts = b->last_ts = p->ts;
	b->first_step = b->last_step = p->step;
	b->first_bits = b->last_bits = p->bits;
}

static void part_from_stats(struct qry_bucket *b, const struct sto_chunk_stats *st, int64_t key)
{
	memset(b, 0, sizeof(*b));
	b->key = key;
	b->count = st->count - st->nan_count;
	b->nan_count = st->nan_count;
	b->min = st->min;
	b->max = st->max;
	b->sum = st->sum;
	b->first_ts = st->min_ts_ns;
	b->first_step = st->min_step;
	b->last_ts = st->max_ts_ns;
	b->last_step = st->max_step;
	b->first_bits = st->first;
	b->last_bits = st->last;
}

static void merge(struct qry_bucket *b, const struct qry_bucket *p)
{
	if (b->count + b->nan_count == 0) {
		size_t off = b->vals_off;
		*b = *p;
		b->vals_off = off;
		return;
	}
	if (p->count) {
		b->min = b->count && b->min <= p->min ? b->min : p->min;
		b->max = b->count && b->max >= p->max ? b->max : p->max;
		b->sum += p->sum;
	}
	b->count += p->count;
	b->nan_count += p->nan_count;
	if (before(p->first_ts, p->first_step, b->first_ts, b->first_step)) {
		b->first_ts = p->first_ts;
		b->first_step = p->first_step;
		b->first_bits = p->first_bits;
	}
	if (!before(p->last_ts, p->last_step, b->last_ts, b->last_step)) {
		b->last_ts = p->last_ts;
		b->last_step = p->last_step;
		b->last_bits = p->last_bits;
	}
}

/* merge(b, part_from_pt(p)) for a non-empty b whose points came before p
 * in (ts, step) order: p is never first and always last. */
static void fold_pt(struct qry_bucket *b, const struct pt *p)
{
	double v = rdb_bits_f64(p->bits);
	if (!isnan(v)) {
		b->min = b->count && b->min <= v ? b->min : v;
		b->max = b->count && b->max >= v ? b->max : v;
		b->sum += v;
		b->count++;
	} else {
		b->nan_count++;
	}
	b->last_ts = p->ts;
	b->last_step = p->step;
	b->last_bits = p->bits;
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
			fold_pt(b, &pv->p[i]);
		if (need_values)
			for (size_t t = b_first; t < i; t++)
				if (!isnan(rdb_bits_f64(pv->p[t].bits)))
					out->vals[out->nvals++] = rdb_bits_f64(pv->p[t].bits);
		for (; j < nparts && parts[j].key == key; j++)
			merge(b, &parts[j]);
		b->key = key;
		b->vals_off = vals_off;
		if (need_values)
			qsort(out->vals + b->vals_off, b->count, sizeof(double), cmp_double);
	}
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

/* Plans and reads the chunks of v: stats partials into parts, points into pv. */
static int read_chunks(struct qry_scan *sc, const struct sto_series_view *v,
		       const struct qry_bucketing *bk, const bool *conflict, struct pt_vec *pv,
		       struct qry_bucket *parts, size_t *nparts)
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
		rc = sto_read_chunk(sc->s, &v->chunks[i], &sc->rec, &sc->tmp, &sc->re);
		sc->points_read += st->count;
		sc->chunks_decoded++;
		if (rc == 0)
			rc = take_points(pv, &sc->tmp, bk);
	}
	return rc;
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
	b->count = r->count;
	b->nan_count = r->nan_count;
	b->min = r->min;
	b->max = r->max;
	b->sum = r->sum;
	b->first_ts = r->first_ts_ns;
	b->first_step = r->first_step;
	b->last_ts = r->last_ts_ns;
	b->last_step = r->last_step;
	b->first_bits = r->first_bits;
	b->last_bits = r->last_bits;
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
				 "rolled up (from %lld ns); ask without q= or start the range "
				 "after it", (long long)r->first_ts_ns);
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

int qry_agg_series(struct qry_scan *sc, uint64_t id, const struct qry_bucketing *bk,
		   struct qry_buckets *out)
{
	struct sto_series_view v;
	struct pt_vec pv = PT_VEC_INIT;
	struct qry_bucket *parts = NULL;
	bool *conflict = NULL;
	size_t nparts = 0;
	out->n = out->nvals = 0;
	sc->re.msg[0] = 0;
	int rc = view_of(sc, id, bk, &v);
	if (rc)
		return rc;
	sc->points_read += v.head.n + v.nrollups;
	rc = find_conflicts(&v, bk, &conflict);
	if (rc == 0 && v.nchunks + v.nrollups &&
	    !(parts = malloc((v.nchunks + v.nrollups) * sizeof(*parts))))
		rc = -ENOMEM;
	if (rc == 0)
		rc = take_points(&pv, &v.head, bk);
	if (rc == 0)
		rc = read_chunks(sc, &v, bk, conflict, &pv, parts, &nparts);
	if (rc == 0)
		rc = read_rollups(sc, &v, bk, parts, &nparts);
	if (rc)
		goto out;
	if (!pv.ordered && bk->axis == QRY_AXIS_STEP && bk->attempt == QRY_ATTEMPT_LATEST)
		keep_latest(&pv);
	if (!pv.ordered && pv.n && !ordered_by_key(pv.p, pv.n))
		qsort(pv.p, pv.n, sizeof(*pv.p), cmp_pt_key);
	if (nparts)
		qsort(parts, nparts, sizeof(*parts), cmp_bucket_key);
	rc = build(out, &pv, parts, nparts, bk->need_values);
out:
	free(pv.p);
	free(parts);
	free(conflict);
	sto_view_free(&v);
	return rc;
}

/* ---- many series, two threads ------------------------------------------------------ */

#define SPLIT_MIN_SERIES 8 /* fewer series: one thread (a thread costs ~50 us) */

static int each_in_order(struct qry_scan *sc, const struct qry_match *m,
			 const struct qry_bucketing *bk, const struct qry_each *e, size_t *failed)
{
	struct qry_buckets bs = {0};
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < m->n; i++) {
		rc = qry_agg_series(sc, m->v[i].id, bk, &bs);
		if (rc == 0)
			rc = e->fn(e->arg, 0, i, &bs);
		if (rc)
			*failed = i;
	}
	qry_buckets_free(&bs);
	return rc;
}

struct half {
	struct qry_scan sc;
	const struct qry_match *m;
	const struct qry_bucketing *bk;
	const struct qry_each *e;
	unsigned part;
	size_t lo, hi;
	int rc;
};

static void *half_run(void *arg)
{
	struct half *h = arg;
	struct qry_buckets bs = {0};
	for (size_t i = h->lo; h->rc == 0 && i < h->hi; i++) {
		h->rc = qry_agg_series(&h->sc, h->m->v[i].id, h->bk, &bs);
		if (h->rc == 0)
			h->rc = h->e->fn(h->e->arg, h->part, i, &bs);
	}
	qry_buckets_free(&bs);
	return NULL;
}

/* Success of the halves, with their points read within the budget left,
 * means the plain loop succeeds too: each of its checks compares a running
 * total that is at most the sum of both halves. */
int qry_agg_each(struct qry_scan *sc, const struct qry_match *m, const struct qry_bucketing *bk,
		 const struct qry_each *e, size_t *failed)
{
	if (m->n < SPLIT_MIN_SERIES)
		return each_in_order(sc, m, bk, e, failed);
	size_t left = sc->max_points > sc->points_read ? sc->max_points - sc->points_read : 0;
	struct half h[2];
	for (unsigned k = 0; k < 2; k++) {
		memset(&h[k], 0, sizeof(h[k]));
		qry_scan_init(&h[k].sc, sc->s, left);
		h[k].m = m;
		h[k].bk = bk;
		h[k].e = e;
		h[k].part = k;
	}
	h[0].hi = h[1].lo = m->n / 2;
	h[1].hi = m->n;
	pthread_t t;
	bool threaded = pthread_create(&t, NULL, half_run, &h[1]) == 0;
	half_run(&h[0]);
	if (threaded)
		pthread_join(t, NULL);
	else
		half_run(&h[1]);
	bool ok = h[0].rc == 0 && h[1].rc == 0 &&
		  h[0].sc.points_read + h[1].sc.points_read <= left;
	for (unsigned k = 0; k < 2; k++) {
		if (ok) {
			sc->points_read += h[k].sc.points_read;
			sc->chunks_stats += h[k].sc.chunks_stats;
			sc->chunks_decoded += h[k].sc.chunks_decoded;
			sc->from_rollups += h[k].sc.from_rollups;
		}
		qry_scan_free(&h[k].sc);
	}
	if (ok)
		return 0;
	e->reset(e->arg);
	return each_in_order(sc, m, bk, e, failed);
}

/* ---- series selection and errors ------------------------------------------------ */

static bool rank_wanted(const struct qry_match_req *req, uint32_t rank)
{
	if (req->skip_job_level && rank == MDL_RANK_JOB)
		return false;
	if (req->nranks == 0)
		return true;
	for (size_t i = 0; i < req->nranks; i++)
		if (req->ranks[i] == rank)
			return true;
	return false;
}

static bool metric_wanted(const struct qry_match_req *req, const char *metric)
{
	if (req->prefix) {
		size_t n = strlen(req->prefix);
		return strncmp(metric, req->prefix, n) == 0 && metric[n] != 0;
	}
	for (size_t i = 0; i < req->nmetrics; i++)
		if (strcmp(req->metrics[i], metric) == 0)
			return true;
	return false;
}

struct match_ctx {
	const struct qry_match_req *req;
	struct qry_match *m;
};

static int match_cb(void *arg, const struct mdl_series_key *k, uint64_t id)
{
	struct match_ctx *c = arg;
	struct qry_match *m = c->m;
	m->job_seen = true;
	if (!metric_wanted(c->req, k->metric))
		return 0;
	m->metric_seen = true;
	if (!rank_wanted(c->req, k->rank))
		return 0;
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 32;
		struct qry_series *v = realloc(m->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		m->v = v;
		m->cap = cap;
	}
	m->v[m->n].key = *k;
	m->v[m->n++].id = id;
	return 0;
}

static int cmp_series(const void *a, const void *b)
{
	const struct qry_series *x = a, *y = b;
	if (x->key.rank != y->key.rank)
		return x->key.rank < y->key.rank ? -1 : 1;
	return strcmp(x->key.metric, y->key.metric);
}

#define LOOKUP_MAX 64 /* series looked up one by one; more: one listing */

static bool fill_key(struct mdl_series_key *k, const char *job, uint32_t rank, const char *metric)
{
	size_t jl = strlen(job), ml = strlen(metric);
	if (jl == 0 || jl > MDL_JOB_MAX || ml == 0 || ml > MDL_METRIC_MAX)
		return false;
	memset(k, 0, sizeof(*k));
	memcpy(k->job, job, jl);
	memcpy(k->metric, metric, ml);
	k->rank = rank;
	return true;
}

/* Exact metrics and ranks: looks each series up by its key instead of
 * listing the whole job. True when every wanted series exists (m then
 * holds them, sorted, as the listing would); false (m empty) means list
 * the job, which also tells an unknown job, metric or rank apart. */
static bool match_by_lookup(struct sto *s, const struct qry_match_req *req, struct qry_match *m)
{
	if (req->prefix || req->nranks == 0 || req->nmetrics == 0 || req->nmetrics > LOOKUP_MAX ||
	    req->nranks > LOOKUP_MAX || req->nmetrics * req->nranks > LOOKUP_MAX)
		return false;
	size_t cap = req->nmetrics * req->nranks;
	if (!(m->v = malloc(cap * sizeof(*m->v))))
		return false;
	m->cap = cap;
	for (size_t i = 0; i < req->nmetrics; i++) {
		for (size_t j = 0; j < req->nranks; j++) {
			struct qry_series *e = &m->v[m->n];
			if (req->skip_job_level && req->ranks[j] == MDL_RANK_JOB)
				continue;
			if (!fill_key(&e->key, req->job, req->ranks[j], req->metrics[i]) ||
			    sto_lookup_series(s, &e->key, &e->id) != 0)
				goto no;
			m->n++;
		}
	}
	if (m->n == 0)
		goto no;
	qsort(m->v, m->n, sizeof(*m->v), cmp_series);
	size_t w = 1;
	for (size_t i = 1; i < m->n; i++)
		if (cmp_series(&m->v[w - 1], &m->v[i]) != 0)
			m->v[w++] = m->v[i];
	m->n = w;
	m->job_seen = m->metric_seen = true;
	return true;
no:
	qry_match_free(m);
	return false;
}

int qry_match(struct sto *s, const struct qry_match_req *req, struct qry_match *m,
	      struct qry_error *err)
{
	struct match_ctx c = {req, m};
	memset(m, 0, sizeof(*m));
	if (match_by_lookup(s, req, m))
		return 0;
	int rc = sto_list_series(s, req->job, match_cb, &c);
	if (rc) {
		err->status = 500;
		snprintf(err->msg, sizeof(err->msg), "listing series: %s", rdb_strerror(rc));
		return rc;
	}
	if (!m->job_seen || !m->metric_seen) {
		err->status = 404;
		if (!m->job_seen)
			snprintf(err->msg, sizeof(err->msg), "unknown job '%.128s' (GET /api/v1/jobs "
				 "lists the jobs)", req->job);
		else
			snprintf(err->msg, sizeof(err->msg), "job '%.128s' has no metric %s'%.256s' "
				 "(GET /api/v1/jobs/%.128s/metrics lists them)", req->job,
				 req->prefix ? "starting with " : "",
				 req->prefix ? req->prefix : req->metrics[0], req->job);
		return RDB_ENOTFOUND;
	}
	qsort(m->v, m->n, sizeof(*m->v), cmp_series);
	return 0;
}

void qry_match_free(struct qry_match *m)
{
	if (!m)
		return;
	free(m->v);
	memset(m, 0, sizeof(*m));
}

int qry_agg_read_error(struct qry_error *err, int rc, const struct mdl_series_key *k,
		       const struct qry_scan *sc)
{
	if (rc == RDB_ELIMIT) {
		err->status = 422;
		snprintf(err->msg, sizeof(err->msg),
			 "the query would read more than max_query_points (%zu) points; chunks "
			 "that lie inside one bucket are answered from their statistics and cost "
			 "nothing, so use wider buckets (step_width, time_width_ns or fewer "
			 "points), drop quantile aggregates (they need every point), narrow the "
			 "range (from/to, step_from/step_to) or select fewer ranks or metrics",
			 sc->max_points);
		return rc;
	}
	if (rc == RDB_EINVAL && sc->re.msg[0]) {
		err->status = 422;
		snprintf(err->msg, sizeof(err->msg), "%s", sc->re.msg);
		return rc;
	}
	err->status = 500;
	if (k->rank == MDL_RANK_JOB)
		snprintf(err->msg, sizeof(err->msg), "series job=%s rank=job metric=%s: %s",
			 k->job, k->metric, sc->re.msg[0] ? sc->re.msg : rdb_strerror(rc));
	else
		snprintf(err->msg, sizeof(err->msg), "series job=%s rank=%u metric=%s: %s", k->job,
			 k->rank, k->metric, sc->re.msg[0] ? sc->re.msg : rdb_strerror(rc));
	return rc;
}

int qry_agg_out_error(struct qry_error *err, int rc)
{
	err->status = rc == RDB_ELIMIT ? 413 : 500;
	if (rc == RDB_ELIMIT)
		snprintf(err->msg, sizeof(err->msg), "the response would exceed "
			 "max_response_bytes; use wider buckets or fewer points, narrow the "
			 "range, or select fewer ranks or metrics");
	else
		snprintf(err->msg, sizeof(err->msg), "writing the response: %s",
			 rdb_strerror(rc));
	return rc;
}

int qry_agg_resolve(struct qry_scan *sc, const struct qry_match *m,
		    const struct qry_bucket_spec *spec, struct qry_bucketing *out,
		    struct qry_error *err)
{
	struct qry_extent e;
	qry_extent_init(&e);
	for (size_t i = 0; i < m->n && qry_agg_needs_extent(spec); i++) {
		int rc = qry_agg_extent(sc, m->v[i].id, &spec->range, &e);
		if (rc)
			return qry_agg_read_error(err, rc, &m->v[i].key, sc);
	}
	qry_agg_choose(spec, &e, out);
	return 0;
}

/* ---- the downsample query ------------------------------------------------------- */

enum col {
	COL_START, COL_END, COL_COUNT, COL_NAN, COL_AVG, COL_MIN, COL_MAX, COL_SUM, COL_FIRST,
	COL_LAST, COL_Q
};

static const char *const col_names[] = {"start", "end", "count", "nan_count", "avg", "min",
					"max", "sum", "first", "last"};

static int write_cell(struct rdb_buf *out, const struct qry_buckets *bs, size_t i, enum col c,
		      double q, int64_t width)
{
	const struct qry_bucket *b = &bs->b[i];
	int64_t start = width ? sat_mul(b->key, width) : 0;
	switch (c) {
	case COL_START:
		return qry_json_i64(out, start);
	case COL_END:
		return qry_json_i64(out, sat_add(start, width - 1));
	case COL_COUNT:
		return qry_json_u64(out, b->count);
	case COL_NAN:
		return qry_json_u64(out, b->nan_count);
	case COL_AVG:
		return qry_json_f64(out, b->sum / (double)b->count, b->count > 0);
	case COL_MIN:
		return qry_json_f64(out, b->min, b->count > 0);
	case COL_MAX:
		return qry_json_f64(out, b->max, b->count > 0);
	case COL_SUM:
		return qry_json_f64(out, b->sum, b->count > 0);
	case COL_FIRST:
		return qry_json_value(out, b->first_bits);
	case COL_LAST:
		return qry_json_value(out, b->last_bits);
	case COL_Q:
		return qry_json_f64(out, b->count ? qry_quantile_sorted(bs->vals + b->vals_off,
									b->count, q) : 0,
				    b->count > 0);
	}
	return 0;
}

static int write_col(struct rdb_buf *out, const struct qry_buckets *bs, enum col c, double q,
		     int64_t width)
{
	int rc = c == COL_Q ? rdb_buf_printf(out, ",\"p%g\":[", q * 100) :
			      rdb_buf_printf(out, ",\"%s\":[", col_names[c]);
	for (size_t i = 0; rc == 0 && i < bs->n; i++) {
		if (i)
			rc = rdb_buf_putc(out, ',');
		if (rc == 0)
			rc = write_cell(out, bs, i, c, q, width);
	}
	return rc ? rc : rdb_buf_putc(out, ']');
}

int qry_write_key(struct rdb_buf *out, const struct mdl_series_key *k)
{
	int rc = rdb_buf_puts(out, "\"job\":");
	if (rc == 0)
		rc = rdb_buf_json_str(out, k->job, strlen(k->job));
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"rank\":");
	if (rc == 0)
		rc = qry_json_rank(out, k->rank);
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"metric\":");
	if (rc == 0)
		rc = rdb_buf_json_str(out, k->metric, strlen(k->metric));
	return rc;
}

static int write_ds_series(struct rdb_buf *out, const struct qry_ds_req *req,
			   const struct mdl_series_key *k, const struct qry_buckets *bs,
			   int64_t width, bool first)
{
	static const struct {
		uint32_t bit;
		enum col col;
	} aggs[] = {{QRY_AGG_AVG, COL_AVG},   {QRY_AGG_MIN, COL_MIN},	  {QRY_AGG_MAX, COL_MAX},
		    {QRY_AGG_SUM, COL_SUM},   {QRY_AGG_FIRST, COL_FIRST}, {QRY_AGG_LAST, COL_LAST}};
	int rc = rdb_buf_puts(out, first ? "{" : ",{");
	if (rc == 0)
		rc = qry_write_key(out, k);
	for (enum col c = COL_START; rc == 0 && c <= COL_NAN; c++)
		rc = write_col(out, bs, c, 0, width);
	for (size_t i = 0; rc == 0 && i < sizeof(aggs) / sizeof(aggs[0]); i++)
		if (req->aggs & aggs[i].bit)
			rc = write_col(out, bs, aggs[i].col, 0, width);
	for (size_t i = 0; rc == 0 && i < req->nq; i++)
		rc = write_col(out, bs, COL_Q, req->q[i], width);
	return rc ? rc : rdb_buf_putc(out, '}');
}

int qry_write_scan_totals(struct rdb_buf *out, const struct qry_scan *sc)
{
	return rdb_buf_printf(out, ",\"points_read\":%llu,\"chunks_from_stats\":%llu,"
			      "\"chunks_decoded\":%llu}", (unsigned long long)sc->points_read,
			      (unsigned long long)sc->chunks_stats,
			      (unsigned long long)sc->chunks_decoded);
}

static int ds_series_loop(struct qry_scan *sc, const struct qry_ds_req *req,
			  const struct qry_match *m, const struct qry_bucketing *bk,
			  struct rdb_buf *out, struct qry_error *err)
{
	struct qry_buckets bs = {0};
	size_t nonempty = 0, nbuckets = 0;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < m->n; i++) {
		rc = qry_agg_series(sc, m->v[i].id, bk, &bs);
		if (rc) {
			qry_agg_read_error(err, rc, &m->v[i].key, sc);
			goto out;
		}
		nbuckets += bs.n;
		if (bs.n)
			rc = write_ds_series(out, req, &m->v[i].key, &bs, bk->width, nonempty++ == 0);
	}
	if (rc == 0)
		rc = rdb_buf_printf(out, "],\"buckets\":%zu,\"from_rollups\":%llu", nbuckets,
				    (unsigned long long)sc->from_rollups);
	if (rc == 0)
		rc = qry_write_scan_totals(out, sc);
	if (rc)
		qry_agg_out_error(err, rc);
out:
	qry_buckets_free(&bs);
	return rc;
}

int qry_downsample(struct sto *s, const struct qry_ds_req *req, struct rdb_buf *out,
		   struct qry_error *err)
{
	struct qry_match m;
	struct qry_bucketing bk;
	struct qry_match_req mr = {.job = req->job, .metrics = req->metrics,
				   .nmetrics = req->nmetrics, .ranks = req->ranks,
				   .nranks = req->nranks};
	struct qry_scan *sc = malloc(sizeof(*sc));
	if (!sc) {
		err->status = 500;
		snprintf(err->msg, sizeof(err->msg), "out of memory");
		return -ENOMEM;
	}
	qry_scan_init(sc, s, req->max_points);
	int rc = qry_match(s, &mr, &m, err);
	if (rc == 0)
		rc = qry_agg_resolve(sc, &m, &req->spec, &bk, err);
	if (rc)
		goto out;
	bk.need_values = req->nq > 0;
	bk.use_rollups = true;
	rc = rdb_buf_puts(out, "{\"job\":");
	if (rc == 0)
		rc = rdb_buf_json_str(out, req->job, strlen(req->job));
	if (rc == 0)
		rc = rdb_buf_printf(out, ",\"axis\":\"%s\",\"width\":%lld,\"series\":[",
				    bk.axis == QRY_AXIS_STEP ? "step" : "time", (long long)bk.width);
	if (rc)
		qry_agg_out_error(err, rc);
	else
		rc = ds_series_loop(sc, req, &m, &bk, out, err);
out:
	qry_match_free(&m);
	qry_scan_free(sc);
	free(sc);
	return rc;
}
