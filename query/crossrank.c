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
 * Memory: one (bucket, rank, mean) triple per non-empty rank bucket, bounded
 * by the points and chunks the engine reads (max_query_points).
 */
#include "query/agg.h"
#include "common/rdb_err.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rank_mean {
	int64_t key;
	uint32_t rank;
	double mean;
};

struct xr_row {
	int64_t key;
	size_t count;
	double mean, min, max, stddev, median;
	double q[QRY_MAX_QUANTILES];
	uint32_t argmin, argmax;
};

struct xr_state {
	struct rank_mean *rm;
	size_t nrm, caprm;
	bool ranks_ascending; /* the series' ranks strictly increase */
	struct xr_row *rows;
	size_t nrows;
	double *scratch; /* one bucket's means, sorted */
	double *tmp;     /* merge sort scratch */
	uint32_t cols;   /* QRY_XR_* computed */
};

static int cmp_rank_mean(const void *a, const void *b)
{
	const struct rank_mean *x = a, *y = b;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return (x->rank > y->rank) - (x->rank < y->rank);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Rank means of one part of the series (qry_agg_each), in series order. */
struct rm_list {
	struct rank_mean *v;
	size_t n, cap;
};

static int add_means(struct rm_list *l, uint32_t rank, const struct qry_buckets *bs)
{
	if (l->n + bs->n > l->cap) {
		size_t cap = l->cap ? l->cap : 256;
		while (cap < l->n + bs->n)
			cap *= 2;
		struct rank_mean *p = realloc(l->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		l->v = p;
		l->cap = cap;
	}
	for (size_t i = 0; i < bs->n; i++) {
		const struct qry_bucket *b = &bs->b[i];
		if (b->a.count)
			l->v[l->n++] = (struct rank_mean){b->key, rank, b->a.sum / (double)b->a.count};
	}
	return 0;
}

/* Orders rm by (key, rank). Every (key, rank) is there once, so any correct
 * sort gives the same order. rm is the ranks' bucket lists one after the
 * other (each ascending by key); with ascending ranks that is already
 * (key, rank) order within each key, and a stable counting sort by key
 * finishes it in linear time when the keys span a small range. */
static int sort_rank_means(struct xr_state *st)
{
	if (st->nrm < 2)
		return 0;
	int64_t lo = st->rm[0].key, hi = lo;
	for (size_t i = 1; i < st->nrm; i++) {
		lo = st->rm[i].key < lo ? st->rm[i].key : lo;
		hi = st->rm[i].key > hi ? st->rm[i].key : hi;
	}
	uint64_t span = (uint64_t)hi - (uint64_t)lo;
	if (!st->ranks_ascending || span >= 4 * (uint64_t)st->nrm) {
		qsort(st->rm, st->nrm, sizeof(*st->rm), cmp_rank_mean);
		return 0;
	}
	size_t *start = calloc((size_t)span + 2, sizeof(*start));
	struct rank_mean *out = malloc(st->nrm * sizeof(*out));
	if (!start || !out) {
		free(start);
		free(out);
		return -ENOMEM;
	}
	for (size_t i = 0; i < st->nrm; i++)
		start[(uint64_t)st->rm[i].key - (uint64_t)lo + 1]++;
	for (size_t k = 1; k <= (size_t)span + 1; k++)
		start[k] += start[k - 1];
	for (size_t i = 0; i < st->nrm; i++)
		out[start[(uint64_t)st->rm[i].key - (uint64_t)lo]++] = st->rm[i];
	free(st->rm);
	free(start);
	st->rm = out;
	st->caprm = st->nrm;
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

/* Aggregates rm[lo..hi) (one bucket, ascending rank) into row. */
static void aggregate(struct xr_state *st, size_t lo, size_t hi, const double *q, size_t nq,
		      struct xr_row *row)
{
	size_t n = hi - lo;
	double sum = 0, ss = 0;
	bool nan = false;
	memset(row, 0, sizeof(*row));
	row->key = st->rm[lo].key;
	row->count = n;
	row->min = row->max = st->rm[lo].mean;
	row->argmin = row->argmax = st->rm[lo].rank;
	for (size_t i = lo; i < hi; i++) {
		const struct rank_mean *r = &st->rm[i];
		sum += r->mean;
		st->scratch[i - lo] = r->mean;
		nan |= isnan(r->mean);
		if (r->mean < row->min) {
			row->min = r->mean;
			row->argmin = r->rank;
		}
		if (r->mean > row->max) {
			row->max = r->mean;
			row->argmax = r->rank;
		}
	}
	row->mean = sum / (double)n;
	if (st->cols & QRY_XR_STDDEV) {
		for (size_t i = lo; i < hi; i++)
			ss += (st->rm[i].mean - row->mean) * (st->rm[i].mean - row->mean);
		row->stddev = sqrt(ss / (double)n);
	}
	if (!(st->cols & (QRY_XR_MEDIAN | QRY_XR_QUANTILES)))
		return;
	if (nan)
		qsort(st->scratch, n, sizeof(double), cmp_double);
	else
		sort_doubles(st->scratch, n, st->tmp);
	row->median = qry_quantile_sorted(st->scratch, n, 0.5);
	for (size_t i = 0; i < nq; i++)
		row->q[i] = qry_quantile_sorted(st->scratch, n, q[i]);
}

static int make_rows(struct xr_state *st, const double *q, size_t nq)
{
	int rc = sort_rank_means(st);
	if (rc)
		return rc;
	st->rows = malloc((st->nrm ? st->nrm : 1) * sizeof(*st->rows));
	st->scratch = malloc((st->nrm ? st->nrm : 1) * sizeof(double));
	st->tmp = malloc((st->nrm ? st->nrm : 1) * sizeof(double));
	if (!st->rows || !st->scratch || !st->tmp)
		return -ENOMEM;
	for (size_t i = 0; i < st->nrm;) {
		size_t j = i;
		while (j < st->nrm && st->rm[j].key == st->rm[i].key)
			j++;
		aggregate(st, i, j, q, nq, &st->rows[st->nrows++]);
		i = j;
	}
	return 0;
}

enum xcol { X_START, X_END, X_COUNT, X_MEAN, X_MIN, X_MAX, X_MEDIAN, X_Q, X_STDDEV, X_ARGMIN,
	    X_ARGMAX };

static int xr_cell(struct rdb_buf *out, const struct xr_row *r, enum xcol c, size_t qi,
		   int64_t width)
{
	int64_t start = 0;
	if (width && __builtin_mul_overflow(r->key, width, &start))
		start = r->key < 0 ? INT64_MIN : INT64_MAX;
	switch (c) {
	case X_START:
		return qry_json_i64(out, start);
	case X_END:
		return qry_json_i64(out, start > INT64_MAX - (width - 1) ? INT64_MAX :
									     start + width - 1);
	case X_COUNT:
		return qry_json_u64(out, r->count);
	case X_MEAN:
		return qry_json_f64(out, r->mean, true);
	case X_MIN:
		return qry_json_f64(out, r->min, true);
	case X_MAX:
		return qry_json_f64(out, r->max, true);
	case X_MEDIAN:
		return qry_json_f64(out, r->median, true);
	case X_Q:
		return qry_json_f64(out, r->q[qi], true);
	case X_STDDEV:
		return qry_json_f64(out, r->stddev, true);
	case X_ARGMIN:
		return qry_json_rank(out, r->argmin);
	case X_ARGMAX:
		return qry_json_rank(out, r->argmax);
	}
	return 0;
}

static int xr_col(struct rdb_buf *out, const struct xr_state *st, enum xcol c, size_t qi,
		  double q, int64_t width)
{
	static const char *const names[] = {"start", "end",    "count", "mean", "min",  "max",
					    "median", "",      "stddev", "argmin", "argmax"};
	int rc = c == X_Q ? rdb_buf_printf(out, ",\"p%g\":[", q * 100) :
			    rdb_buf_printf(out, ",\"%s\":[", names[c]);
	for (size_t i = 0; rc == 0 && i < st->nrows; i++) {
		if (i)
			rc = rdb_buf_putc(out, ',');
		if (rc == 0)
			rc = xr_cell(out, &st->rows[i], c, qi, width);
	}
	return rc ? rc : rdb_buf_putc(out, ']');
}

static int xr_write(struct rdb_buf *out, const struct qry_xr_req *req, const struct qry_match *m,
		    const struct qry_bucketing *bk, const struct xr_state *st, const double *q,
		    size_t nq)
{
	int rc = rdb_buf_puts(out, "{\"job\":");
	if (rc == 0)
		rc = rdb_buf_json_str(out, req->job, strlen(req->job));
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"metric\":");
	if (rc == 0)
		rc = rdb_buf_json_str(out, req->metric, strlen(req->metric));
	if (rc == 0)
		rc = rdb_buf_printf(out, ",\"axis\":\"%s\",\"width\":%lld,\"ranks\":[",
				    bk->axis == QRY_AXIS_STEP ? "step" : "time", (long long)bk->width);
	for (size_t i = 0; rc == 0 && i < m->n; i++)
		rc = rdb_buf_printf(out, i ? ",%u" : "%u", m->v[i].key.rank);
	if (rc == 0)
		rc = rdb_buf_putc(out, ']');
	static const uint32_t bit[] = {
		[X_START] = QRY_XR_ALL, [X_END] = QRY_XR_ALL,	      [X_COUNT] = QRY_XR_COUNT,
		[X_MEAN] = QRY_XR_MEAN, [X_MIN] = QRY_XR_MIN,	      [X_MAX] = QRY_XR_MAX,
		[X_MEDIAN] = QRY_XR_MEDIAN, [X_Q] = QRY_XR_QUANTILES, [X_STDDEV] = QRY_XR_STDDEV,
		[X_ARGMIN] = QRY_XR_ARGMIN, [X_ARGMAX] = QRY_XR_ARGMAX};
	for (enum xcol c = X_START; rc == 0 && c <= X_MEDIAN; c++)
		if (st->cols & bit[c])
			rc = xr_col(out, st, c, 0, 0, bk->width);
	for (size_t i = 0; rc == 0 && (st->cols & QRY_XR_QUANTILES) && i < nq; i++)
		rc = xr_col(out, st, X_Q, i, q[i], bk->width);
	for (enum xcol c = X_STDDEV; rc == 0 && c <= X_ARGMAX; c++)
		if (st->cols & bit[c])
			rc = xr_col(out, st, c, 0, 0, bk->width);
	if (rc == 0)
		rc = rdb_buf_printf(out, ",\"buckets\":%zu", st->nrows);
	return rc;
}

struct collect_ctx {
	const struct qry_match *m;
	struct rm_list part[2];
};

static int collect_fn(void *arg, unsigned part, size_t i, const struct qry_buckets *bs)
{
	struct collect_ctx *c = arg;
	return add_means(&c->part[part], c->m->v[i].key.rank, bs);
}

static void collect_reset(void *arg)
{
	struct collect_ctx *c = arg;
	for (int k = 0; k < 2; k++) {
		free(c->part[k].v);
		memset(&c->part[k], 0, sizeof(c->part[k]));
	}
}

/* Every series' rank means into st->rm, in series order. */
static int collect(struct qry_scan *sc, const struct qry_match *m, const struct qry_bucketing *bk,
		   struct xr_state *st, struct qry_error *err)
{
	struct collect_ctx c = {.m = m};
	struct qry_each e = {collect_fn, collect_reset, &c};
	size_t failed = 0;
	int rc = qry_agg_each(sc, m, bk, &e, &failed);
	if (rc)
		qry_agg_read_error(err, rc, &m->v[failed].key, sc);
	st->ranks_ascending = true;
	for (size_t i = 1; i < m->n; i++)
		if (m->v[i - 1].key.rank >= m->v[i].key.rank)
			st->ranks_ascending = false;
	struct rm_list *a = &c.part[0], *b = &c.part[1];
	if (rc == 0 && b->n) {
		struct rank_mean *v = realloc(a->v, (a->n + b->n) * sizeof(*v));
		if (!v)
			rc = -ENOMEM;
		else {
			memcpy(v + a->n, b->v, b->n * sizeof(*v));
			a->v = v;
			a->n += b->n;
			a->cap = a->n;
		}
	}
	if (rc == 0) {
		st->rm = a->v;
		st->nrm = a->n;
		st->caprm = a->cap;
		a->v = NULL;
	}
	collect_reset(&c);
	return rc;
}

int qry_crossrank(struct sto *s, const struct qry_xr_req *req, struct rdb_buf *out,
		  struct qry_error *err)
{
	static const double default_q[] = {0.1, 0.9};
	const double *q = req->nq || req->cols ? req->q : default_q;
	size_t nq = req->nq || req->cols ? req->nq : 2;
	struct xr_state st = {.cols = req->cols ? req->cols & QRY_XR_ALL : QRY_XR_ALL};
	struct qry_match m = {0};
	struct qry_bucketing bk;
	const char *metrics[1] = {req->metric};
	struct qry_match_req mr = {.job = req->job, .metrics = metrics, .nmetrics = 1,
				   .ranks = req->ranks, .nranks = req->nranks,
				   .skip_job_level = true};
	struct qry_scan *sc = malloc(sizeof(*sc));
	int rc = sc ? 0 : -ENOMEM;
	if (sc)
		qry_scan_init(sc, s, req->max_points);
	if (rc == 0)
		rc = qry_match(s, &mr, &m, err);
	if (rc == 0)
		rc = qry_agg_resolve(sc, &m, &req->spec, &bk, err);
	if (rc)
		goto out;
	if (!req->spec.axis_set && !req->spec.points && bk.axis == QRY_AXIS_STEP)
		bk.width = 1; /* default: one bucket per step */
	rc = collect(sc, &m, &bk, &st, err);
	if (rc)
		goto out;
	rc = make_rows(&st, q, nq);
	if (rc == 0)
		rc = xr_write(out, req, &m, &bk, &st, q, nq);
	if (rc == 0)
		rc = qry_write_scan_totals(out, sc);
	if (rc)
		qry_agg_out_error(err, rc);
out:
	if (rc == -ENOMEM && !sc) {
		err->status = 500;
		snprintf(err->msg, sizeof(err->msg), "out of memory");
	}
	qry_match_free(&m);
	qry_scan_free(sc);
	free(sc);
	free(st.rm);
	free(st.rows);
	free(st.scratch);
	free(st.tmp);
	return rc;
}
