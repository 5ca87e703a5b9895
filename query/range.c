/* range.c - raw range queries: the points of the series of one job that
 * match a metric set and a rank set, by time and/or step range.
 *
 * Series are selected by qry_match (query/match.c), as every aggregating
 * query selects them: an unknown job or metric is QRY_E_NOT_FOUND, and the
 * built-in metric aliases apply. The points of every selected series are
 * read (storage merges head and chunks, verified) into a struct qry_points
 * the caller owns; attempt keeps one attempt, or (QRY_ATTEMPT_LATEST, the
 * default of GET /api/v1/query/range) per step only its highest attempt,
 * as the aggregates do. The total is
 * bounded by max_points (QRY_E_LIMIT, telling how to narrow the query).
 * Threading: reentrant.
 */
#include "query/qry.h"
#include "query/bucket.h"
#include "common/rdb_err.h"
#include "common/rdb_sort.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The (step, attempt) pairs of a series, for the latest-attempt filter. */
struct step_att {
	int64_t step;
	uint32_t attempt;
};

static int cmp_step_att(const void *a, const void *b)
{
	const struct step_att *x = a, *y = b;
	if (x->step != y->step)
		return x->step < y->step ? -1 : 1;
	return (x->attempt > y->attempt) - (x->attempt < y->attempt);
}

/* True when the steps of c's points that have one strictly increase (in
 * time order, as read): then no step has two points. */
static bool steps_distinct(const struct mdl_cols *c)
{
	int64_t last = MDL_STEP_NONE;
	bool any = false;
	for (size_t i = 0; i < c->n; i++) {
		if (c->step[i] == MDL_STEP_NONE)
			continue;
		if (any && c->step[i] <= last)
			return false;
		last = c->step[i];
		any = true;
	}
	return true;
}

/* Keeps the points of attempt (>= 0), or with QRY_ATTEMPT_LATEST per step
 * only those of its highest attempt (points without a step stay), in place.
 * 0 or -ENOMEM. */
static int filter_attempt(struct mdl_cols *c, int64_t attempt)
{
	struct step_att *sa = NULL;
	size_t ns = 0;
	if (attempt == QRY_ATTEMPT_ALL || c->n == 0)
		return 0;
	if (attempt == QRY_ATTEMPT_LATEST && steps_distinct(c))
		return 0; /* one point per step: each is its step's latest */
	if (attempt == QRY_ATTEMPT_LATEST) {
		sa = malloc(c->n * sizeof(*sa));
		if (!sa)
			return -ENOMEM;
		for (size_t i = 0; i < c->n; i++)
			if (c->step[i] != MDL_STEP_NONE)
				sa[ns++] = (struct step_att){c->step[i], c->attempt[i]};
		rdb_sort(sa, ns, sizeof(*sa), cmp_step_att);
		size_t w = 0; /* the last pair of each step: its highest attempt */
		for (size_t i = 0; i < ns; i++)
			if (i + 1 == ns || sa[i + 1].step != sa[i].step)
				sa[w++] = sa[i];
		ns = w;
	}
	size_t w = 0;
	for (size_t i = 0; i < c->n; i++) {
		bool keep;
		if (attempt >= 0) {
			keep = c->attempt[i] == (uint64_t)attempt;
		} else if (c->step[i] == MDL_STEP_NONE) {
			keep = true;
		} else {
			size_t lo = 0, hi = ns;
			while (lo < hi) {
				size_t mid = lo + (hi - lo) / 2;
				if (sa[mid].step < c->step[i])
					lo = mid + 1;
				else
					hi = mid;
			}
			keep = c->attempt[i] == sa[lo].attempt;
		}
		if (keep) {
			c->ts_ns[w] = c->ts_ns[i];
			c->step[w] = c->step[i];
			c->attempt[w] = c->attempt[i];
			c->value[w] = c->value[i];
			w++;
		}
	}
	c->n = w;
	free(sa);
	return 0;
}

static void key_text(const struct mdl_series_key *k, char *buf, size_t len)
{
	if (k->rank == MDL_RANK_JOB)
		snprintf(buf, len, "job=%s rank=job metric=%s", k->job, k->metric);
	else
		snprintf(buf, len, "job=%s rank=%u metric=%s", k->job, k->rank, k->metric);
}

static int read_error(struct qry_error *err, int rc, const struct mdl_series_key *k,
		      const struct sto_read_error *re, size_t max_points)
{
	char key[512];
	key_text(k, key, sizeof(key));
	if (rc == RDB_ELIMIT)
		return qry_fail(err, QRY_E_LIMIT, rc,
				"the query selects more than "
				"max_query_points (%zu) points; narrow the time range (from/to) "
				"or step range (step_from/step_to), select fewer ranks or "
				"metrics, or use a downsampling query",
				max_points);
	return qry_fail(err, QRY_E_INTERNAL, rc, "series %s: %s", key,
			re->msg[0] ? re->msg : rdb_strerror(rc));
}

void qry_points_free(struct qry_points *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++)
		mdl_cols_free(&p->v[i].pts);
	free(p->v);
	memset(p, 0, sizeof(*p));
}

/* Reads series i of m into out (kept only when it has points). */
static int read_one(struct sto *s, const struct qry_range_req *req, const struct qry_match *m,
		    size_t i, struct qry_points *out, struct sto_read_error *re)
{
	if (out->n == out->cap) {
		size_t cap = out->cap ? out->cap * 2 : 16;
		struct qry_series_points *v = realloc(out->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		out->v = v;
		out->cap = cap;
	}
	struct qry_series_points *sp = &out->v[out->n];
	sp->key = m->v[i].key;
	sp->pts = (struct mdl_cols)MDL_COLS_INIT;
	int rc = sto_read(s, m->v[i].id, &req->range, req->max_points - out->total, &sp->pts, re);
	if (rc == 0)
		rc = filter_attempt(&sp->pts, req->attempt);
	if (rc == 0 && sp->pts.n) {
		out->total += sp->pts.n;
		out->n++;
	} else {
		mdl_cols_free(&sp->pts);
	}
	return rc;
}

int qry_range(struct sto *s, const struct qry_range_req *req, struct qry_points *out,
	      struct qry_error *err)
{
	struct qry_match m = {0};
	struct qry_match_req mr = {.job = req->job,
				   .metrics = req->metrics,
				   .nmetrics = req->nmetrics,
				   .ranks = req->ranks,
				   .nranks = req->nranks};
	struct sto_read_error *re = malloc(sizeof(*re));
	memset(out, 0, sizeof(*out));
	if (!re)
		return qry_fail(err, QRY_E_INTERNAL, -ENOMEM, "out of memory");
	int rc = qry_match(s, &mr, &m, err);
	for (size_t i = 0; rc == 0 && i < m.n; i++) {
		re->msg[0] = 0;
		rc = read_one(s, req, &m, i, out, re);
		if (rc)
			read_error(err, rc, &m.v[i].key, re, req->max_points);
	}
	if (rc)
		qry_points_free(out);
	qry_match_free(&m);
	free(re);
	return rc;
}
