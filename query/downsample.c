/* downsample.c - the downsample query: the buckets of every selected series
 * (bucket engine, bucket.h), answering points retention dropped from the
 * rollup tier of the axis. */
#include "query/agg.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int qry_json_f64(struct rdb_buf *out, double v, bool defined)
{
	if (!defined)
		return rdb_buf_append(out, "null", 4);
	return qry_json_value(out, rdb_f64_bits(v));
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
		return qry_json_u64(out, b->a.count);
	case COL_NAN:
		return qry_json_u64(out, b->a.nan_count);
	case COL_AVG:
		return qry_json_f64(out, b->a.sum / (double)b->a.count, b->a.count > 0);
	case COL_MIN:
		return qry_json_f64(out, b->a.min, b->a.count > 0);
	case COL_MAX:
		return qry_json_f64(out, b->a.max, b->a.count > 0);
	case COL_SUM:
		return qry_json_f64(out, b->a.sum, b->a.count > 0);
	case COL_FIRST:
		return qry_json_value(out, b->a.first_bits);
	case COL_LAST:
		return qry_json_value(out, b->a.last_bits);
	case COL_Q:
		return qry_json_f64(out, b->a.count ? qry_quantile_sorted(bs->vals + b->vals_off,
									b->a.count, q) : 0,
				    b->a.count > 0);
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

