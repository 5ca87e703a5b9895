/* each.c - many series through the bucket engine: qry_agg_each reads the
 * series of a match in order, or, for many series, by two threads (this one
 * and a helper) each with its own scratch memory, with the same results,
 * counters and errors as the plain loop; plus the resolution of a bucket
 * spec against the data's extent and the messages of failed reads.
 *
 * Threading: the helper thread lives for one call; the callbacks of the two
 * parts run at the same time (see struct qry_each). Storage calls are
 * thread-safe.
 */
#include "query/bucket.h"
#include "common/rdb_err.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	bool ok = h[0].rc == 0 && h[1].rc == 0 && h[0].sc.points_read + h[1].sc.points_read <= left;
	for (unsigned k = 0; k < 2; k++) {
		if (ok) {
			sc->points_read += h[k].sc.points_read;
			sc->chunks_stats += h[k].sc.chunks_stats;
			sc->chunks_decoded += h[k].sc.chunks_decoded;
			sc->from_rollups += h[k].sc.from_rollups;
			sc->chunks_no_ts += h[k].sc.chunks_no_ts;
		}
		qry_scan_free(&h[k].sc);
	}
	if (ok)
		return 0;
	e->reset(e->arg);
	return each_in_order(sc, m, bk, e, failed);
}

/* ---- bucketing resolution and errors ------------------------------------------------ */

int qry_agg_read_error(struct qry_error *err, int rc, const struct mdl_series_key *k,
		       const struct qry_scan *sc)
{
	const char *why = sc->re.msg[0] ? sc->re.msg : rdb_strerror(rc);
	if (rc == RDB_ELIMIT)
		return qry_fail(
		    err, QRY_E_LIMIT, rc,
		    "the query would read more than "
		    "max_query_points (%zu) points; chunks that lie inside one bucket "
		    "are answered from their statistics and cost nothing, so use wider "
		    "buckets (step_width, time_width_ns or fewer points), drop quantile "
		    "aggregates (they need every point), narrow the range (from/to, "
		    "step_from/step_to) or select fewer ranks or metrics",
		    sc->max_points);
	if (rc == RDB_EINVAL && sc->re.msg[0])
		return qry_fail(err, QRY_E_UNSUPPORTED, rc, "%s", sc->re.msg);
	if (k->rank == MDL_RANK_JOB)
		return qry_fail(err, QRY_E_INTERNAL, rc, "series job=%s rank=job metric=%s: %s",
				k->job, k->metric, why);
	return qry_fail(err, QRY_E_INTERNAL, rc, "series job=%s rank=%u metric=%s: %s", k->job,
			k->rank, k->metric, why);
}

/* ---- extents ------------------------------------------------------------------------ */

struct ext_half {
	struct qry_scan *sc; /* shared: qry_agg_extent only reads it */
	const struct qry_match *m;
	const struct sto_range *r;
	size_t lo, hi, failed;
	struct qry_extent e;
	int rc;
};

static void *ext_run(void *arg)
{
	struct ext_half *h = arg;
	for (size_t i = h->lo; h->rc == 0 && i < h->hi; i++) {
		h->rc = qry_agg_extent(h->sc, h->m->v[i].id, h->r, &h->e);
		if (h->rc)
			h->failed = i;
	}
	return NULL;
}

static void extent_merge(struct qry_extent *to, const struct qry_extent *x)
{
	to->any |= x->any;
	to->has_steps |= x->has_steps;
	to->min_ts = x->min_ts < to->min_ts ? x->min_ts : to->min_ts;
	to->max_ts = x->max_ts > to->max_ts ? x->max_ts : to->max_ts;
	to->min_step = x->min_step < to->min_step ? x->min_step : to->min_step;
	to->max_step = x->max_step > to->max_step ? x->max_step : to->max_step;
}

int qry_agg_extent_all(struct qry_scan *sc, const struct qry_match *m, const struct sto_range *r,
		       struct qry_extent *e, size_t *failed)
{
	struct ext_half h[2];
	for (unsigned k = 0; k < 2; k++) {
		h[k] = (struct ext_half){.sc = sc, .m = m, .r = r};
		qry_extent_init(&h[k].e);
	}
	h[0].hi = h[1].lo = m->n < SPLIT_MIN_SERIES ? m->n : m->n / 2;
	h[1].hi = m->n;
	pthread_t t;
	bool threaded = h[1].lo < h[1].hi && pthread_create(&t, NULL, ext_run, &h[1]) == 0;
	ext_run(&h[0]);
	if (threaded)
		pthread_join(t, NULL);
	else
		ext_run(&h[1]);
	for (unsigned k = 0; k < 2; k++) {
		if (h[k].rc) { /* the first failure in series order, as a plain loop */
			*failed = h[k].failed;
			return h[k].rc;
		}
		extent_merge(e, &h[k].e);
	}
	return 0;
}

int qry_agg_resolve(struct qry_scan *sc, const struct qry_match *m,
		    const struct qry_bucket_spec *spec, struct qry_bucketing *out,
		    struct qry_error *err)
{
	struct qry_extent e;
	qry_extent_init(&e);
	if (qry_agg_needs_extent(spec)) {
		size_t failed = 0;
		int rc = qry_agg_extent_all(sc, m, &spec->range, &e, &failed);
		if (rc)
			return qry_agg_read_error(err, rc, &m->v[failed].key, sc);
	}
	qry_agg_choose(spec, &e, out);
	return 0;
}

int qry_read_series(struct qry_scan *sc, uint64_t id, const struct sto_range *r, size_t max_points,
		    struct mdl_cols *out)
{
	sc->re.msg[0] = 0;
	return sto_read(sc->s, id, r, max_points, out, &sc->re);
}
