/* downsample.c - the downsample query: the buckets of every selected series
 * (bucket engine, bucket.h) as a struct qry_ds_result, answering points
 * retention dropped from the rollup tier of the axis. Threading: reentrant.
 */
#include "query/agg.h"
#include "common/rdb_err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void qry_totals_of(const struct qry_scan *sc, struct qry_totals *t)
{
	t->points_read = sc->points_read;
	t->chunks_stats = sc->chunks_stats;
	t->chunks_decoded = sc->chunks_decoded;
	t->from_rollups = sc->from_rollups;
}

void qry_ds_result_free(struct qry_ds_result *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n; i++)
		qry_buckets_free(&r->v[i].b);
	free(r->v);
	memset(r, 0, sizeof(*r));
}

/* Reads every series of m; keeps those with buckets. */
static int ds_series_loop(struct qry_scan *sc, const struct qry_match *m,
			  const struct qry_bucketing *bk, struct qry_ds_result *out,
			  struct qry_error *err)
{
	out->v = calloc(m->n ? m->n : 1, sizeof(*out->v));
	if (!out->v)
		return qry_fail(err, QRY_E_INTERNAL, -ENOMEM, "out of memory");
	for (size_t i = 0; i < m->n; i++) {
		struct qry_ds_series *ds = &out->v[out->n];
		int rc = qry_agg_series(sc, m->v[i].id, bk, &ds->b);
		if (rc)
			return qry_agg_read_error(err, rc, &m->v[i].key, sc);
		if (ds->b.n == 0)
			continue;
		ds->key = m->v[i].key;
		out->nbuckets += ds->b.n;
		out->n++;
	}
	/* the series slot after the last kept one may hold an empty list */
	if (out->n < m->n)
		qry_buckets_free(&out->v[out->n].b);
	return 0;
}

int qry_downsample(struct sto *s, const struct qry_ds_req *req, struct qry_ds_result *out,
		   struct qry_error *err)
{
	struct qry_match m = {0};
	struct qry_bucketing bk;
	struct qry_match_req mr = {.job = req->job,
				   .metrics = req->metrics,
				   .nmetrics = req->nmetrics,
				   .ranks = req->ranks,
				   .nranks = req->nranks};
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
	bk.need_values = req->nq > 0;
	bk.use_rollups = true;
	/* only first/last read a bucket's timestamps (which point is first) */
	bk.ts_unused = !(req->aggs & (QRY_AGG_FIRST | QRY_AGG_LAST));
	/* avg, sum and count read only count, nan_count and sum: points are
	 * then folded without min, max and last */
	bk.sums_only = req->nq == 0 &&
		       !(req->aggs & (QRY_AGG_MIN | QRY_AGG_MAX | QRY_AGG_FIRST | QRY_AGG_LAST));
	if (!req->spec.axis_set) { /* a chosen width: one the rollups can answer */
		uint64_t *ids = malloc((m.n ? m.n : 1) * sizeof(*ids));
		for (size_t i = 0; ids && i < m.n; i++)
			ids[i] = m.v[i].id;
		rc = ids ? qry_agg_fit_rollups(sc, ids, m.n, &bk) : -ENOMEM;
		free(ids);
		if (rc) {
			qry_fail(err, QRY_E_INTERNAL, rc, "reading the rollup index: %s",
				 rdb_strerror(rc));
			goto out;
		}
	}
	snprintf(out->job, sizeof(out->job), "%s", req->job);
	out->axis = bk.axis;
	out->width = bk.width;
	out->aggs = req->aggs;
	out->nq = req->nq;
	memcpy(out->q, req->q, sizeof(out->q));
	rc = ds_series_loop(sc, &m, &bk, out, err);
	qry_totals_of(sc, &out->totals);
out:
	if (rc) {
		if (out->v && out->n < m.n)
			qry_buckets_free(&out->v[out->n].b);
		qry_ds_result_free(out);
	}
	qry_match_free(&m);
	qry_scan_free(sc);
	free(sc);
	return rc;
}
