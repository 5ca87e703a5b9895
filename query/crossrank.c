/* crossrank.c - cross-rank aggregates of one metric of a job.
 *
 * Buckets are those of the bucket engine (downsample.c): by step (width 1 by
 * default: one bucket per step), or by time when the metric has no steps. For
 * each bucket, each rank contributes the mean of its non-NaN values in the
 * bucket (chunk statistics answer whole chunks: sum and count suffice), with
 * the latest attempt winning per (rank, step). Then, across the ranks that
 * have a value: count, mean, min, max (with the rank holding each; ties go to
 * the lowest rank), median and quantiles (linear interpolation, exact) and
 * the population standard deviation. A rank whose bucket holds only NaN or
 * null values is not counted there. The job-level pseudo-rank is never part
 * of the comparison.
 *
 * The partial (struct qry_xr_part) keeps per (bucket, rank) the count and
 * sum of the rank's values, so partials of series read apart (the parts
 * of qry_agg_each, nodes of a scale-out) merge before the rows are made; the
 * Grafana datasource's crossrank-* series use the same partial and rows.
 *
 * Memory: one cell per non-empty rank bucket, bounded by the points and
 * chunks the engine reads (max_query_points).
 */
#include "query/agg.h"
#include "common/rdb_err.h"
#include "common/rdb_sort.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct xr_state {
	struct qry_xr_part *p;
	struct qry_xr_row *rows;
	size_t nrows;
	double *scratch; /* one bucket's means, sorted */
	double *tmp;	 /* merge sort scratch */
	uint32_t cols;	 /* QRY_XR_* computed */
};

static double cell_mean(const struct qry_xr_cell *c)
{
	return c->sum / (double)c->count;
}

static int cmp_cell(const void *a, const void *b)
{
	const struct qry_xr_cell *x = a, *y = b;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return (x->rank > y->rank) - (x->rank < y->rank);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* ---- the partial -------------------------------------------------------------------- */

void qry_xr_part_free(struct qry_xr_part *p)
{
	if (!p)
		return;
	free(p->v);
	memset(p, 0, sizeof(*p));
}

static int part_reserve(struct qry_xr_part *p, size_t more)
{
	if (p->n + more <= p->cap)
		return 0;
	size_t cap = p->cap ? p->cap : 256;
	while (cap < p->n + more)
		cap *= 2;
	struct qry_xr_cell *v = realloc(p->v, cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	p->v = v;
	p->cap = cap;
	return 0;
}

int qry_xr_part_add(struct qry_xr_part *p, uint32_t rank, const struct qry_buckets *bs)
{
	if (part_reserve(p, bs->n))
		return -ENOMEM;
	bool first = true;
	for (size_t i = 0; i < bs->n; i++) {
		const struct qry_bucket *b = &bs->b[i];
		if (!b->a.count)
			continue;
		if (first && p->n && p->v[p->n - 1].rank >= rank)
			p->unsorted = true;
		first = false;
		p->v[p->n++] = (struct qry_xr_cell){b->key, rank, b->a.count, b->a.sum};
	}
	return 0;
}

int qry_xr_part_merge(struct qry_xr_part *dst, const struct qry_xr_part *src)
{
	if (src->n == 0)
		return 0;
	if (part_reserve(dst, src->n))
		return -ENOMEM;
	if (src->unsorted || (dst->n && dst->v[dst->n - 1].rank >= src->v[0].rank))
		dst->unsorted = true;
	memcpy(dst->v + dst->n, src->v, src->n * sizeof(*src->v));
	dst->n += src->n;
	return 0;
}

/* Combines adjacent cells of equal (key, rank) (merged partials). */
static void combine_equal(struct qry_xr_part *p)
{
	size_t w = 0;
	for (size_t i = 0; i < p->n; i++) {
		if (w && p->v[w - 1].key == p->v[i].key && p->v[w - 1].rank == p->v[i].rank) {
			p->v[w - 1].count += p->v[i].count;
			p->v[w - 1].sum += p->v[i].sum;
		} else {
			p->v[w++] = p->v[i];
		}
	}
	p->n = w;
}

/* The smallest key of the non-empty p (*lo) and the distance from it to
 * the largest. */
static uint64_t key_span(const struct qry_xr_part *p, int64_t *lo)
{
	int64_t l = p->v[0].key, h = l;
	for (size_t i = 1; i < p->n; i++) {
		l = p->v[i].key < l ? p->v[i].key : l;
		h = p->v[i].key > h ? p->v[i].key : h;
	}
	*lo = l;
	return (uint64_t)h - (uint64_t)l;
}

/* Orders p by (key, rank). Cells of one series each then the next, ranks
 * ascending, are already (key, rank) order within each key, and a stable
 * counting sort by key finishes it in linear time when the keys span a
 * small range; anything else is sorted and equal (key, rank) combined. */
static int sort_cells(struct qry_xr_part *p)
{
	if (p->n < 2)
		return 0;
	int64_t lo;
	uint64_t span = key_span(p, &lo);
	if (p->unsorted || span >= 4 * (uint64_t)p->n) {
		rdb_sort(p->v, p->n, sizeof(*p->v), cmp_cell);
		combine_equal(p);
		return 0;
	}
	size_t *start = calloc((size_t)span + 2, sizeof(*start));
	struct qry_xr_cell *out = malloc(p->n * sizeof(*out));
	if (!start || !out) {
		free(start);
		free(out);
		return -ENOMEM;
	}
	for (size_t i = 0; i < p->n; i++)
		start[(uint64_t)p->v[i].key - (uint64_t)lo + 1]++;
	for (size_t k = 1; k <= (size_t)span + 1; k++)
		start[k] += start[k - 1];
	for (size_t i = 0; i < p->n; i++)
		out[start[(uint64_t)p->v[i].key - (uint64_t)lo]++] = p->v[i];
	free(p->v);
	free(start);
	p->v = out;
	p->cap = p->n;
	return 0;
}

/* Sorts v[0..n) ascending, stably, like qsort with cmp_double does here
 * (glibc's qsort is a stable merge sort): equal values such as -0.0 and
 * 0.0 keep their order. Only for values without NaN (cmp_double is no
 * order with NaN: those go to qsort itself). tmp holds n doubles. */
static void sort_doubles(double *v, size_t n, double *tmp)
{
	if (n <= 16) {
		for (size_t i = 1; i < n; i++) {
			double x = v[i];
			size_t j = i;
			for (; j > 0 && v[j - 1] > x; j--)
				v[j] = v[j - 1];
			v[j] = x;
		}
		return;
	}
	size_t h = n / 2;
	sort_doubles(v, h, tmp);
	sort_doubles(v + h, n - h, tmp);
	size_t i = 0, j = h, o = 0;
	while (i < h && j < n)
		tmp[o++] = v[j] < v[i] ? v[j++] : v[i++];
	while (i < h)
		tmp[o++] = v[i++];
	while (j < n)
		tmp[o++] = v[j++];
	memcpy(v, tmp, n * sizeof(*v));
}

/* Aggregates cells [lo..hi) (one bucket, ascending rank) into row. */
static void aggregate(struct xr_state *st, size_t lo, size_t hi, const double *q, size_t nq,
		      struct qry_xr_row *row)
{
	const struct qry_xr_cell *c = st->p->v;
	size_t n = hi - lo;
	double sum = 0, ss = 0;
	bool nan = false;
	memset(row, 0, sizeof(*row));
	row->key = c[lo].key;
	row->count = n;
	row->min = row->max = cell_mean(&c[lo]);
	row->argmin = row->argmax = c[lo].rank;
	for (size_t i = lo; i < hi; i++) {
		double mean = cell_mean(&c[i]);
		sum += mean;
		st->scratch[i - lo] = mean;
		nan |= isnan(mean);
		if (mean < row->min) {
			row->min = mean;
			row->argmin = c[i].rank;
		}
		if (mean > row->max) {
			row->max = mean;
			row->argmax = c[i].rank;
		}
	}
	row->mean = sum / (double)n;
	if (st->cols & QRY_XR_STDDEV) {
		for (size_t i = 0; i < n; i++)
			ss += (st->scratch[i] - row->mean) * (st->scratch[i] - row->mean);
		row->stddev = sqrt(ss / (double)n);
	}
	if (!(st->cols & (QRY_XR_MEDIAN | QRY_XR_QUANTILES)))
		return;
	if (nan)
		rdb_sort(st->scratch, n, sizeof(double), cmp_double);
	else
		sort_doubles(st->scratch, n, st->tmp);
	row->median = qry_quantile_sorted(st->scratch, n, 0.5);
	for (size_t i = 0; i < nq; i++)
		row->q[i] = qry_quantile_sorted(st->scratch, n, q[i]);
}

/* Rows without the columns that need a bucket's means together (median,
 * quantiles, stddev), from the cells of parts p[0..np) taken one after the
 * other, as their merge (qry_xr_part_merge) would hold them, without making
 * it. The cells must be in series order (no part unsorted, each part's
 * ranks above the one before's: ranks ascending, each series' keys
 * ascending, no (key, rank) twice) with keys spanning at most 4 * n: one
 * pass into a row per key, no sort. Each row sees its cells in ascending
 * rank, as aggregate() does after sort_cells, so sums, minima, maxima and
 * their ranks are the same. 1 when done, 0 when the cells do not qualify,
 * -ENOMEM. */
static int rows_streamed(const struct qry_xr_part *p, size_t np, uint32_t cols,
			 struct qry_xr_row **rows, size_t *nrows)
{
	if (cols & (QRY_XR_MEDIAN | QRY_XR_QUANTILES | QRY_XR_STDDEV))
		return 0;
	size_t n = 0;
	int64_t lo = INT64_MAX, hi = INT64_MIN;
	const struct qry_xr_cell *last = NULL;
	for (size_t k = 0; k < np; k++) {
		if (p[k].unsorted)
			return 0;
		if (p[k].n == 0)
			continue;
		if (last && last->rank >= p[k].v[0].rank)
			return 0;
		int64_t l;
		uint64_t d = key_span(&p[k], &l);
		int64_t h = (int64_t)((uint64_t)l + d);
		lo = l < lo ? l : lo;
		hi = h > hi ? h : hi;
		last = &p[k].v[p[k].n - 1];
		n += p[k].n;
	}
	if (n == 0)
		return 0;
	uint64_t span = (uint64_t)hi - (uint64_t)lo;
	if (span >= 4 * (uint64_t)n)
		return 0;
	struct qry_xr_row *r = calloc((size_t)span + 1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	for (size_t k = 0; k < np; k++) {
		for (size_t i = 0; i < p[k].n; i++) {
			const struct qry_xr_cell *c = &p[k].v[i];
			struct qry_xr_row *row = &r[(uint64_t)c->key - (uint64_t)lo];
			double mean = cell_mean(c);
			if (row->count == 0) {
				row->key = c->key;
				row->min = row->max = mean;
				row->argmin = row->argmax = c->rank;
			}
			row->count++;
			row->mean += mean; /* the sum until the end */
			if (mean < row->min) {
				row->min = mean;
				row->argmin = c->rank;
			}
			if (mean > row->max) {
				row->max = mean;
				row->argmax = c->rank;
			}
		}
	}
	size_t w = 0;
	for (size_t k = 0; k <= (size_t)span; k++) {
		if (r[k].count == 0)
			continue;
		r[w] = r[k];
		r[w].mean /= (double)r[w].count;
		w++;
	}
	*rows = r;
	*nrows = w;
	return 1;
}

int qry_xr_rows(struct qry_xr_part *p, uint32_t cols, const double *q, size_t nq,
		struct qry_xr_row **rows, size_t *nrows)
{
	struct xr_state st = {.p = p, .cols = cols};
	size_t n = p->n ? p->n : 1;
	int rc = rows_streamed(p, 1, cols, rows, nrows);
	if (rc)
		return rc < 0 ? rc : 0;
	rc = sort_cells(p);
	*rows = NULL;
	*nrows = 0;
	if (rc)
		return rc;
	st.rows = malloc(n * sizeof(*st.rows));
	st.scratch = malloc(n * sizeof(double));
	st.tmp = malloc(n * sizeof(double));
	if (!st.rows || !st.scratch || !st.tmp) {
		free(st.rows);
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < p->n;) {
		size_t j = i;
		while (j < p->n && p->v[j].key == p->v[i].key)
			j++;
		aggregate(&st, i, j, q, nq, &st.rows[st.nrows++]);
		i = j;
	}
	*rows = st.rows;
	*nrows = st.nrows;
out:
	free(st.scratch);
	free(st.tmp);
	return rc;
}

/* ---- the cross-rank query ---------------------------------------------------------- */

void qry_xr_result_free(struct qry_xr_result *r)
{
	if (!r)
		return;
	free(r->ranks);
	free(r->rows);
	memset(r, 0, sizeof(*r));
}

struct collect_ctx {
	const struct qry_match *m;
	struct qry_xr_part part[QRY_EACH_MAX_PARTS];
};

static int collect_fn(void *arg, unsigned part, size_t i, const struct qry_buckets *bs)
{
	struct collect_ctx *c = arg;
	return qry_xr_part_add(&c->part[part], c->m->v[i].key.rank, bs);
}

static void collect_reset(void *arg)
{
	struct collect_ctx *c = arg;
	for (unsigned k = 0; k < QRY_EACH_MAX_PARTS; k++)
		qry_xr_part_free(&c->part[k]);
}

/* Every series' cells into c->part[], in series order part after part.
 * On failure err is filled and the parts are empty. */
static int collect(struct qry_scan *sc, const struct qry_match *m, const struct qry_bucketing *bk,
		   struct collect_ctx *c, struct qry_error *err)
{
	struct qry_each e = {collect_fn, collect_reset, c};
	size_t failed = 0;
	int rc = qry_agg_each(sc, m, bk, &e, &failed);
	if (rc) {
		qry_agg_read_error(err, rc, &m->v[failed].key, sc);
		collect_reset(c);
	}
	return rc;
}

/* The rows of the collected parts: streamed over them when they qualify,
 * else over their merge (into part[0]). */
static int collect_rows(struct collect_ctx *c, struct qry_xr_result *out)
{
	int rc = rows_streamed(c->part, QRY_EACH_MAX_PARTS, out->cols, &out->rows, &out->nrows);
	if (rc)
		return rc < 0 ? rc : 0;
	for (unsigned k = 1; rc == 0 && k < QRY_EACH_MAX_PARTS; k++)
		rc = qry_xr_part_merge(&c->part[0], &c->part[k]);
	if (rc == 0)
		rc = qry_xr_rows(&c->part[0], out->cols, out->q, out->nq, &out->rows, &out->nrows);
	return rc;
}

/* The result's fixed part: names, axis, width, the ranks compared, columns. */
static int xr_head(const struct qry_xr_req *req, const struct qry_match *m,
		   const struct qry_bucketing *bk, struct qry_xr_result *out)
{
	static const double default_q[] = {0.1, 0.9};
	snprintf(out->job, sizeof(out->job), "%s", req->job);
	snprintf(out->metric, sizeof(out->metric), "%s", req->metric);
	out->axis = bk->axis;
	out->width = bk->width;
	out->cols = req->cols ? req->cols & QRY_XR_ALL : QRY_XR_ALL;
	out->nq = req->nq || req->cols ? req->nq : 2;
	memcpy(out->q, req->nq || req->cols ? req->q : default_q, out->nq * sizeof(double));
	out->ranks = malloc((m->n ? m->n : 1) * sizeof(*out->ranks));
	if (!out->ranks)
		return -ENOMEM;
	for (size_t i = 0; i < m->n; i++)
		out->ranks[out->nranks++] = m->v[i].key.rank;
	return 0;
}

int qry_crossrank(struct sto *s, const struct qry_xr_req *req, struct qry_xr_result *out,
		  struct qry_error *err)
{
	struct qry_match m = {0};
	struct qry_bucketing bk;
	struct collect_ctx c = {.m = &m};
	const char *metrics[1] = {req->metric};
	struct qry_match_req mr = {.job = req->job,
				   .metrics = metrics,
				   .nmetrics = 1,
				   .ranks = req->ranks,
				   .nranks = req->nranks,
				   .skip_job_level = true};
	struct qry_scan *sc = malloc(sizeof(*sc));
	memset(out, 0, sizeof(*out));
	if (!sc)
		return qry_fail(err, QRY_E_INTERNAL, -ENOMEM, "out of memory");
	qry_scan_init(sc, s, req->max_points);
	int rc = qry_match(s, &mr, &m, err);
	if (rc == 0)
		rc = qry_agg_resolve(sc, &m, &req->spec, &bk, err);
	if (rc)
		goto out;
	if (!req->spec.axis_set && !req->spec.points && bk.axis == QRY_AXIS_STEP)
		bk.width = 1; /* default: one bucket per step */
	bk.ts_unused = true;  /* per-rank counts and sums only */
	bk.sums_only = true;
	rc = collect(sc, &m, &bk, &c, err);
	if (rc)
		goto out;
	rc = xr_head(req, &m, &bk, out);
	if (rc == 0)
		rc = collect_rows(&c, out);
	if (rc)
		qry_fail(err, QRY_E_INTERNAL, rc, "out of memory");
	qry_totals_of(sc, &out->totals);
out:
	if (rc)
		qry_xr_result_free(out);
	collect_reset(&c);
	qry_match_free(&m);
	qry_scan_free(sc);
	free(sc);
	return rc;
}
