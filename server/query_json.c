/* query_json.c - the JSON bodies of the catalog, raw range and aggregating
 * query endpoints, from the typed results of query/ (json_out.h), and the
 * one mapping from query error codes to HTTP statuses.
 *
 * Layouts are the API's (docs/API.md): columnar arrays per series, numbers
 * exact (json_out.c), null where a value is undefined. Output is bounded by
 * the response buffer (max_response_bytes): reaching it is a 413 whose
 * message says how to narrow that query. Pure functions; threading: any.
 */
#include "server/json_out.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "server/json_array.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

int srv_qry_status(enum qry_code code)
{
	switch (code) {
	case QRY_E_INVALID:
		return 400;
	case QRY_E_NOT_FOUND:
		return 404;
	case QRY_E_TOO_LARGE:
		return 413;
	case QRY_E_LIMIT:
	case QRY_E_UNSUPPORTED:
		return 422;
	case QRY_E_INTERNAL:
		return 500;
	}
	return 500;
}

int srv_out_failed(struct qry_error *err, int rc, const char *advice)
{
	if (rc == RDB_ELIMIT)
		return qry_fail(err, QRY_E_TOO_LARGE, rc,
				"the response would exceed "
				"max_response_bytes; %s",
				advice);
	return qry_fail(err, QRY_E_INTERNAL, rc, "writing the response: %s", rdb_strerror(rc));
}

static int put_str(struct rdb_buf *out, const char *s)
{
	return rdb_buf_json_str(out, s, strlen(s));
}

/* "job":..,"rank":..,"metric":.. (no braces) */
static int write_key(struct rdb_buf *out, const struct mdl_series_key *k)
{
	int rc = rdb_buf_puts(out, "\"job\":");
	if (rc == 0)
		rc = put_str(out, k->job);
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"rank\":");
	if (rc == 0)
		rc = srv_json_rank(out, k->rank);
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"metric\":");
	if (rc == 0)
		rc = put_str(out, k->metric);
	return rc;
}

/* ,"points_read":N,"chunks_from_stats":N,"chunks_decoded":N} */
static int write_totals(struct rdb_buf *out, const struct qry_totals *t)
{
	return rdb_buf_printf(out,
			      ",\"points_read\":%llu,\"chunks_from_stats\":%llu,"
			      "\"chunks_decoded\":%llu}",
			      (unsigned long long)t->points_read,
			      (unsigned long long)t->chunks_stats,
			      (unsigned long long)t->chunks_decoded);
}

/* ---- catalog ----------------------------------------------------------------------- */

int srv_write_jobs(struct rdb_buf *out, const struct qry_jobs *r,
		   int (*extra)(void *arg, const char *job, struct rdb_buf *out), void *arg,
		   struct qry_error *err)
{
	int rc = rdb_buf_puts(out, "{\"jobs\":[");
	for (size_t i = 0; rc == 0 && i < r->n; i++) {
		const struct qry_job *j = &r->v[i];
		rc = rdb_buf_puts(out, i ? ",{\"job\":" : "{\"job\":");
		if (rc == 0)
			rc = put_str(out, j->job);
		if (rc == 0)
			rc =
			    rdb_buf_printf(out, ",\"series\":%llu", (unsigned long long)j->nseries);
		if (rc == 0 && j->has_points)
			rc = rdb_buf_printf(out, ",\"first_ts\":%lld,\"last_ts\":%lld",
					    (long long)j->first_ts_ns, (long long)j->last_ts_ns);
		else if (rc == 0)
			rc = rdb_buf_puts(out, ",\"first_ts\":null,\"last_ts\":null");
		if (rc == 0 && j->last_step != MDL_STEP_NONE)
			rc = rdb_buf_printf(out, ",\"last_step\":%lld", (long long)j->last_step);
		else if (rc == 0)
			rc = rdb_buf_puts(out, ",\"last_step\":null");
		if (rc == 0)
			rc = rdb_buf_printf(out, ",\"ranks\":%u", j->nranks);
		if (rc == 0 && extra)
			rc = extra(arg, j->job, out);
		if (rc == 0 && j->meta)
			rc = rdb_buf_puts(out, ",\"meta\":");
		if (rc == 0 && j->meta)
			rc = rdb_buf_append(out, j->meta, j->meta_len);
		if (rc == 0)
			rc = rdb_buf_putc(out, '}');
	}
	if (rc == 0)
		rc = rdb_buf_puts(out, "]}");
	return rc ? srv_out_failed(err, rc, "raise max_response_bytes to list this many jobs") : 0;
}

int srv_write_metrics(struct rdb_buf *out, const struct qry_metrics *r, struct qry_error *err)
{
	int rc = rdb_buf_puts(out, "{\"job\":");
	if (rc == 0)
		rc = put_str(out, r->job);
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"metrics\":[");
	for (size_t i = 0; rc == 0 && i < r->n; i++) {
		if (i)
			rc = rdb_buf_putc(out, ',');
		if (rc == 0)
			rc = put_str(out, r->v[i]);
	}
	if (rc == 0)
		rc = rdb_buf_puts(out, "]}");
	return rc ? srv_out_failed(err, rc,
				   "list a job with fewer metrics, or raise max_response_bytes")
		  : 0;
}

int srv_write_ranks(struct rdb_buf *out, const struct qry_ranks *r, struct qry_error *err)
{
	int rc = rdb_buf_puts(out, "{\"job\":");
	if (rc == 0)
		rc = put_str(out, r->job);
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"ranks\":[");
	if (rc == 0)
		rc = srv_json_u32s(out, r->v, r->n);
	if (rc == 0)
		rc = rdb_buf_printf(out, "],\"job_level\":%s}", r->job_level ? "true" : "false");
	return rc ? srv_out_failed(err, rc,
				   "list a job with fewer ranks, or raise max_response_bytes")
		  : 0;
}

/* ---- raw points ---------------------------------------------------------------------- */

static int write_series_points(struct rdb_buf *out, const struct qry_series_points *sp, bool first)
{
	const struct mdl_cols *p = &sp->pts;
	int rc = rdb_buf_puts(out, first ? "{" : ",{");
	if (rc == 0)
		rc = write_key(out, &sp->key);
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"timestamps\":[");
	if (rc == 0)
		rc = srv_json_i64s(out, p->ts_ns, p->n);
	if (rc == 0)
		rc = rdb_buf_puts(out, "],\"steps\":[");
	if (rc == 0)
		rc = srv_json_steps(out, p->step, p->n);
	if (rc == 0)
		rc = rdb_buf_puts(out, "],\"attempts\":[");
	if (rc == 0)
		rc = srv_json_u32s(out, p->attempt, p->n);
	if (rc == 0)
		rc = rdb_buf_puts(out, "],\"values\":[");
	if (rc == 0)
		rc = srv_json_values(out, p->value, p->n);
	if (rc == 0)
		rc = rdb_buf_puts(out, "]}");
	return rc;
}

int srv_write_points(struct rdb_buf *out, const struct qry_points *r, struct qry_error *err)
{
	/* ~50 bytes a point (a ns timestamp, a step, an attempt, a value):
	 * grown once instead of by doubling, when that fits the bound */
	size_t guess = 256 + 50 * r->total;
	if (r->total < out->max / 64 && guess <= out->max - out->len)
		(void)rdb_buf_reserve(out, guess);
	int rc = rdb_buf_puts(out, "{\"series\":[");
	for (size_t i = 0; rc == 0 && i < r->n; i++)
		rc = write_series_points(out, &r->v[i], i == 0);
	if (rc == 0)
		rc = rdb_buf_printf(out, "],\"points\":%zu}", r->total);
	return rc ? srv_out_failed(err, rc, "narrow the query") : 0;
}

/* ---- downsample ---------------------------------------------------------------------- */

static const char ds_advice[] = "use wider buckets or fewer points, narrow the range, or "
				"select fewer ranks or metrics";

enum col {
	COL_START,
	COL_END,
	COL_COUNT,
	COL_NAN,
	COL_AVG,
	COL_MIN,
	COL_MAX,
	COL_SUM,
	COL_FIRST,
	COL_LAST,
	COL_Q
};

static const char *const col_names[] = {"start", "end", "count", "nan_count", "avg",
					"min",	 "max", "sum",	 "first",     "last"};

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

/* The first step or ns of bucket key (saturated). */
static int64_t bucket_start(int64_t key, int64_t width)
{
	return width ? sat_mul(key, width) : 0;
}

/* A cell's text into p (room for SRV_FMT_VALUE_MAX bytes); returns its
 * length. */
static size_t fmt_cell(char *p, const struct qry_buckets *bs, size_t i, enum col c, double q,
		       int64_t width)
{
	const struct qry_bucket *b = &bs->b[i];
	const struct mdl_agg *a = &b->a;
	int64_t start = bucket_start(b->key, width);
	switch (c) {
	case COL_START:
		return srv_fmt_i64(p, start);
	case COL_END:
		return srv_fmt_i64(p, sat_add(start, width - 1));
	case COL_COUNT:
		return srv_fmt_u64(p, a->count);
	case COL_NAN:
		return srv_fmt_u64(p, a->nan_count);
	case COL_AVG:
		return srv_fmt_f64(p, a->sum / (double)a->count, a->count > 0);
	case COL_MIN:
		return srv_fmt_f64(p, a->min, a->count > 0);
	case COL_MAX:
		return srv_fmt_f64(p, a->max, a->count > 0);
	case COL_SUM:
		return srv_fmt_f64(p, a->sum, a->count > 0);
	case COL_FIRST:
		return srv_fmt_value(p, a->first_bits);
	case COL_LAST:
		return srv_fmt_value(p, a->last_bits);
	case COL_Q:
		return srv_fmt_f64(
		    p, a->count ? qry_quantile_sorted(bs->vals + b->vals_off, a->count, q) : 0,
		    a->count > 0);
	}
	return 0;
}

/* A column's cells, comma-separated, as every array is written
 * (json_array.h). */
static int write_cells(struct rdb_buf *out, const struct qry_buckets *bs, enum col c, double q,
		       int64_t width)
{
	SRV_JSON_ARRAY(out, bs->n, SRV_JSON_ELEM_MAX, p += fmt_cell(p, bs, i, c, q, width));
}

/* ,"<name>":[<cells>] */
static int write_col(struct rdb_buf *out, const struct qry_buckets *bs, enum col c, double q,
		     int64_t width)
{
	int rc = c == COL_Q ? rdb_buf_printf(out, ",\"p%g\":[", q * 100)
			    : rdb_buf_printf(out, ",\"%s\":[", col_names[c]);
	if (rc == 0)
		rc = write_cells(out, bs, c, q, width);
	return rc ? rc : rdb_buf_putc(out, ']');
}

static int write_ds_series(struct rdb_buf *out, const struct qry_ds_result *r,
			   const struct qry_ds_series *s, bool first)
{
	static const struct {
		uint32_t bit;
		enum col col;
	} aggs[] = {{QRY_AGG_AVG, COL_AVG}, {QRY_AGG_MIN, COL_MIN},	{QRY_AGG_MAX, COL_MAX},
		    {QRY_AGG_SUM, COL_SUM}, {QRY_AGG_FIRST, COL_FIRST}, {QRY_AGG_LAST, COL_LAST}};
	int rc = rdb_buf_puts(out, first ? "{" : ",{");
	if (rc == 0)
		rc = write_key(out, &s->key);
	for (enum col c = COL_START; rc == 0 && c <= COL_NAN; c++)
		rc = write_col(out, &s->b, c, 0, r->width);
	for (size_t i = 0; rc == 0 && i < sizeof(aggs) / sizeof(aggs[0]); i++)
		if (r->aggs & aggs[i].bit)
			rc = write_col(out, &s->b, aggs[i].col, 0, r->width);
	for (size_t i = 0; rc == 0 && i < r->nq; i++)
		rc = write_col(out, &s->b, COL_Q, r->q[i], r->width);
	return rc ? rc : rdb_buf_putc(out, '}');
}

int srv_write_downsample(struct rdb_buf *out, const struct qry_ds_result *r, struct qry_error *err)
{
	int rc = rdb_buf_puts(out, "{\"job\":");
	if (rc == 0)
		rc = put_str(out, r->job);
	if (rc == 0)
		rc =
		    rdb_buf_printf(out, ",\"axis\":\"%s\",\"width\":%lld,\"series\":[",
				   r->axis == QRY_AXIS_STEP ? "step" : "time", (long long)r->width);
	for (size_t i = 0; rc == 0 && i < r->n; i++)
		rc = write_ds_series(out, r, &r->v[i], i == 0);
	if (rc == 0)
		rc = rdb_buf_printf(out, "],\"buckets\":%zu,\"from_rollups\":%llu", r->nbuckets,
				    (unsigned long long)r->totals.from_rollups);
	if (rc == 0)
		rc = write_totals(out, &r->totals);
	return rc ? srv_out_failed(err, rc, ds_advice) : 0;
}

/* ---- cross-rank ------------------------------------------------------------------------ */

enum xcol {
	X_START,
	X_END,
	X_COUNT,
	X_MEAN,
	X_MIN,
	X_MAX,
	X_MEDIAN,
	X_Q,
	X_STDDEV,
	X_ARGMIN,
	X_ARGMAX
};

/* A row's cell's text into p (room for SRV_FMT_VALUE_MAX bytes); returns
 * its length. */
static size_t xr_cell(char *p, const struct qry_xr_row *r, enum xcol c, size_t qi, int64_t width)
{
	int64_t start = bucket_start(r->key, width);
	switch (c) {
	case X_START:
		return srv_fmt_i64(p, start);
	case X_END:
		return srv_fmt_i64(p, sat_add(start, width - 1));
	case X_COUNT:
		return srv_fmt_u64(p, r->count);
	case X_MEAN:
		return srv_fmt_f64(p, r->mean, true);
	case X_MIN:
		return srv_fmt_f64(p, r->min, true);
	case X_MAX:
		return srv_fmt_f64(p, r->max, true);
	case X_MEDIAN:
		return srv_fmt_f64(p, r->median, true);
	case X_Q:
		return srv_fmt_f64(p, r->q[qi], true);
	case X_STDDEV:
		return srv_fmt_f64(p, r->stddev, true);
	case X_ARGMIN:
		return srv_fmt_rank(p, r->argmin);
	case X_ARGMAX:
		return srv_fmt_rank(p, r->argmax);
	}
	return 0;
}

/* A column's cells, comma-separated (json_array.h). */
static int xr_cells(struct rdb_buf *out, const struct qry_xr_result *r, enum xcol c, size_t qi)
{
	SRV_JSON_ARRAY(out, r->nrows, SRV_JSON_ELEM_MAX,
		       p += xr_cell(p, &r->rows[i], c, qi, r->width));
}

static int xr_col(struct rdb_buf *out, const struct qry_xr_result *r, enum xcol c, size_t qi)
{
	static const char *const names[] = {"start",  "end", "count",  "mean",	 "min",	  "max",
					    "median", "",    "stddev", "argmin", "argmax"};
	int rc = c == X_Q ? rdb_buf_printf(out, ",\"p%g\":[", r->q[qi] * 100)
			  : rdb_buf_printf(out, ",\"%s\":[", names[c]);
	if (rc == 0)
		rc = xr_cells(out, r, c, qi);
	return rc ? rc : rdb_buf_putc(out, ']');
}

static int xr_head(struct rdb_buf *out, const struct qry_xr_result *r)
{
	int rc = rdb_buf_puts(out, "{\"job\":");
	if (rc == 0)
		rc = put_str(out, r->job);
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"metric\":");
	if (rc == 0)
		rc = put_str(out, r->metric);
	if (rc == 0)
		rc =
		    rdb_buf_printf(out, ",\"axis\":\"%s\",\"width\":%lld,\"ranks\":[",
				   r->axis == QRY_AXIS_STEP ? "step" : "time", (long long)r->width);
	if (rc == 0)
		rc = srv_json_u32s(out, r->ranks, r->nranks);
	return rc ? rc : rdb_buf_putc(out, ']');
}

int srv_write_crossrank(struct rdb_buf *out, const struct qry_xr_result *r, struct qry_error *err)
{
	static const uint32_t bit[] = {
	    [X_START] = QRY_XR_ALL,	[X_END] = QRY_XR_ALL,	   [X_COUNT] = QRY_XR_COUNT,
	    [X_MEAN] = QRY_XR_MEAN,	[X_MIN] = QRY_XR_MIN,	   [X_MAX] = QRY_XR_MAX,
	    [X_MEDIAN] = QRY_XR_MEDIAN, [X_Q] = QRY_XR_QUANTILES,  [X_STDDEV] = QRY_XR_STDDEV,
	    [X_ARGMIN] = QRY_XR_ARGMIN, [X_ARGMAX] = QRY_XR_ARGMAX};
	int rc = xr_head(out, r);
	for (enum xcol c = X_START; rc == 0 && c <= X_MEDIAN; c++)
		if (r->cols & bit[c])
			rc = xr_col(out, r, c, 0);
	for (size_t i = 0; rc == 0 && (r->cols & QRY_XR_QUANTILES) && i < r->nq; i++)
		rc = xr_col(out, r, X_Q, i);
	for (enum xcol c = X_STDDEV; rc == 0 && c <= X_ARGMAX; c++)
		if (r->cols & bit[c])
			rc = xr_col(out, r, c, 0);
	if (rc == 0)
		rc = rdb_buf_printf(out, ",\"buckets\":%zu", r->nrows);
	if (rc == 0)
		rc = write_totals(out, &r->totals);
	return rc ? srv_out_failed(err, rc, ds_advice) : 0;
}

/* ---- outliers ---------------------------------------------------------------------------- */

static int write_phases(struct rdb_buf *out, const struct qry_out_result *o,
			const struct qry_out_row *r)
{
	int rc = rdb_buf_puts(out, ",\"total\":");
	if (rc == 0)
		rc = srv_json_f64(out, r->total, true);
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"phases\":{");
	for (size_t p = 0; rc == 0 && p < o->nphases; p++) {
		rc = rdb_buf_puts(out, p ? "," : "");
		if (rc == 0)
			rc = put_str(out, o->phases[p]);
		if (rc == 0)
			rc = rdb_buf_putc(out, ':');
		if (rc == 0)
			rc = srv_json_f64(out, r->phase[p], !isnan(r->phase[p]));
	}
	return rc ? rc : rdb_buf_putc(out, '}');
}

static int write_row(struct rdb_buf *out, const struct qry_out_result *o,
		     const struct qry_out_row *r, bool first)
{
	int rc = rdb_buf_printf(out, "%s{\"rank\":%u,\"value\":", first ? "" : ",", r->rank);
	if (rc == 0)
		rc = srv_json_f64(out, r->value, true);
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"median\":");
	if (rc == 0)
		rc = srv_json_f64(out, o->median, true);
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"score\":");
	if (rc == 0)
		rc = srv_json_f64(out, r->score, true);
	if (rc == 0 && o->phases_mode)
		rc = write_phases(out, o, r);
	return rc ? rc : rdb_buf_putc(out, '}');
}

static int write_names(struct rdb_buf *out, const struct qry_out_result *o, const char *key,
		       bool wait)
{
	int rc = rdb_buf_printf(out, ",\"%s\":[", key);
	bool first = true;
	for (size_t p = 0; rc == 0 && p < o->nphases; p++) {
		if (o->wait[p] != wait)
			continue;
		rc = rdb_buf_puts(out, first ? "" : ",");
		first = false;
		if (rc == 0)
			rc = put_str(out, o->phases[p]);
	}
	return rc ? rc : rdb_buf_putc(out, ']');
}

static int write_window(struct rdb_buf *out, const struct qry_out_result *o)
{
	static const char *const dirs[] = {"both", "high", "low"};
	const struct sto_range *r = &o->window;
	int rc = rdb_buf_printf(out, ",\"mode\":\"%s\",\"direction\":\"%s\",\"window\":",
				o->phases_mode ? "phases" : "value", dirs[o->direction]);
	if (rc == 0 && r->by_step)
		rc = rdb_buf_printf(out, "{\"step_from\":%lld,\"step_to\":%lld}",
				    (long long)r->step_from, (long long)r->step_to);
	else if (rc == 0)
		rc = rdb_buf_printf(out, "{\"from\":%lld,\"to\":%lld}", (long long)r->from_ns,
				    (long long)r->to_ns);
	return rc;
}

static int write_out_head(struct rdb_buf *out, const struct qry_out_result *o)
{
	bool scored = o->nscored > 0;
	int rc = rdb_buf_puts(out, "{\"job\":");
	if (rc == 0)
		rc = put_str(out, o->job);
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"metric\":");
	if (rc == 0)
		rc = put_str(out, o->metric);
	if (rc == 0)
		rc = write_window(out, o);
	if (rc == 0 && o->phases_mode)
		rc = rdb_buf_printf(out, ",\"phase_source\":\"%s\"",
				    o->phase_source_spans ? "spans" : "metrics");
	if (rc == 0 && o->phases_mode)
		rc = write_names(out, o, "phases", false);
	if (rc == 0 && o->phases_mode)
		rc = write_names(out, o, "wait_phases", true);
	if (rc == 0)
		rc = rdb_buf_printf(
		    out, ",\"ranks\":%zu,\"ranks_scored\":%zu,\"median\":", o->nrows, o->nscored);
	if (rc == 0)
		rc = srv_json_f64(out, o->median, scored);
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"mad\":");
	if (rc == 0)
		rc = srv_json_f64(out, o->mad, scored);
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"scale\":");
	if (rc == 0)
		rc = srv_json_f64(out, o->scale, scored);
	if (rc == 0)
		rc = rdb_buf_printf(out, ",\"mad_zero\":%s,\"outliers\":[",
				    o->mad_zero ? "true" : "false");
	return rc;
}

int srv_write_outliers(struct rdb_buf *out, const struct qry_out_result *o, struct qry_error *err)
{
	int rc = write_out_head(out, o);
	for (size_t i = 0; rc == 0 && i < o->nlisted; i++)
		rc = write_row(out, o, &o->rows[i], i == 0);
	if (rc == 0)
		rc = rdb_buf_putc(out, ']');
	if (rc == 0)
		rc = write_totals(out, &o->totals);
	return rc ? srv_out_failed(err, rc, ds_advice) : 0;
}
