/* each.c - many series through the bucket engine: qry_agg_each reads the
 * series of a match in order, or, for many series, in consecutive parts
 * (this thread and the query helper threads of pool.h, one part each) each
 * with its own scratch memory, with the same results, counters and errors
 * as the plain loop; plus the resolution of a bucket spec against the
 * data's extent and the messages of failed reads.
 *
 * Threading: the parts' callbacks run at the same time (see struct
 * qry_each); a call returns when every part is done. Storage calls are
 * thread-safe.
 */
#include "query/bucket.h"
#include "common/rdb_err.h"
#include "query/pool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPLIT_MIN_SERIES 8 /* fewer series: one thread */
/* The extent pass costs ~0.6 us per series (no decoding): below this many
 * series handing half of it to a helper (tens of microseconds to wake)
 * makes it slower, not faster (64 series: 39 us alone, 66 us split). */
#define EXTENT_SPLIT_MIN_SERIES 128
#define PART_MIN_SERIES		4 /* a part of a split reads at least this many */

/* How many parts to read n series in: one per helper thread and the
 * caller's, at most QRY_EACH_MAX_PARTS, each of PART_MIN_SERIES or more. */
static unsigned parts_for(size_t n)
{
	if (n < SPLIT_MIN_SERIES)
		return 1;
	size_t p = (size_t)qry_pool_threads() + 1;
	if (p > QRY_EACH_MAX_PARTS)
		p = QRY_EACH_MAX_PARTS;
	if (p > n / PART_MIN_SERIES)
		p = n / PART_MIN_SERIES;
	return p ? (unsigned)p : 1;
}

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

struct part {
	struct qry_scan sc;
	const struct qry_match *m;
	const struct qry_bucketing *bk;
	const struct qry_each *e;
	unsigned part;
	size_t lo, hi;
	int rc;
};

static void part_run(void *arg)
{
	struct part *h = arg;
	struct qry_buckets bs = {0};
	for (size_t i = h->lo; h->rc == 0 && i < h->hi; i++) {
		h->rc = qry_agg_series(&h->sc, h->m->v[i].id, h->bk, &bs);
		if (h->rc == 0)
			h->rc = h->e->fn(h->e->arg, h->part, i, &bs);
	}
	qry_buckets_free(&bs);
}

/* Success of the parts, with their points read within the budget left,
 * means the plain loop succeeds too: each of its checks compares a running
 * total that is at most the sum of all parts. */
int qry_agg_each(struct qry_scan *sc, const struct qry_match *m, const struct qry_bucketing *bk,
		 const struct qry_each *e, size_t *failed)
{
	unsigned np = parts_for(m->n);
	struct part *h = np > 1 ? calloc(np, sizeof(*h)) : NULL;
	if (!h)
		return each_in_order(sc, m, bk, e, failed);
	size_t left = sc->max_points > sc->points_read ? sc->max_points - sc->points_read : 0;
	struct qry_task t[QRY_EACH_MAX_PARTS];
	for (unsigned k = 0; k < np; k++) {
		qry_scan_init(&h[k].sc, sc->s, left);
		h[k].m = m;
		h[k].bk = bk;
		h[k].e = e;
		h[k].part = k;
		h[k].lo = m->n * k / np;
		h[k].hi = m->n * (k + 1) / np;
		t[k] = (struct qry_task){.fn = part_run, .arg = &h[k]};
	}
	qry_pool_run(t, np);
	bool ok = true;
	uint64_t read = 0;
	for (unsigned k = 0; k < np; k++) {
		ok = ok && h[k].rc == 0;
		read += h[k].sc.points_read;
	}
	ok = ok && read <= left;
	for (unsigned k = 0; k < np; k++) {
		if (ok) {
			sc->points_read += h[k].sc.points_read;
			sc->chunks_stats += h[k].sc.chunks_stats;
			sc->chunks_decoded += h[k].sc.chunks_decoded;
			sc->from_rollups += h[k].sc.from_rollups;
			sc->chunks_no_ts += h[k].sc.chunks_no_ts;
		}
		qry_scan_free(&h[k].sc);
	}
	free(h);
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

struct ext_part {
	struct qry_scan *sc; /* shared: qry_agg_extent only reads it */
	const struct qry_match *m;
	const struct sto_range *r;
	size_t lo, hi, failed;
	struct qry_extent e;
	int rc;
};

static void ext_run(void *arg)
{
	struct ext_part *h = arg;
	for (size_t i = h->lo; h->rc == 0 && i < h->hi; i++) {
		h->rc = qry_agg_extent(h->sc, h->m->v[i].id, h->r, &h->e);
		if (h->rc)
			h->failed = i;
	}
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
	struct ext_part h[QRY_EACH_MAX_PARTS];
	struct qry_task t[QRY_EACH_MAX_PARTS];
	unsigned np = m->n < EXTENT_SPLIT_MIN_SERIES ? 1 : parts_for(m->n);
	for (unsigned k = 0; k < np; k++) {
		h[k] = (struct ext_part){
		    .sc = sc, .m = m, .r = r, .lo = m->n * k / np, .hi = m->n * (k + 1) / np};
		qry_extent_init(&h[k].e);
		t[k] = (struct qry_task){.fn = ext_run, .arg = &h[k]};
	}
	qry_pool_run(t, np);
	for (unsigned k = 0; k < np; k++) {
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
