/* range.c - raw range queries: the points of the series of one job that
 * match a metric set and a rank set, by time and/or step range.
 *
 * The points of every selected series are read (storage merges head and
 * chunks, verified) into a struct qry_points the caller owns. The total is
 * bounded by max_points (QRY_E_LIMIT, telling how to narrow the query).
 * Threading: reentrant.
 */
#include "query/qry.h"
#include "common/rdb_err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct match_ctx {
	const struct qry_range_req *req;
	struct mdl_series_key *keys;
	uint64_t *ids;
	size_t n, cap;
	bool job_seen;
};

static bool wanted(const struct qry_range_req *req, const struct mdl_series_key *k)
{
	bool metric_ok = false;
	for (size_t i = 0; i < req->nmetrics && !metric_ok; i++)
		metric_ok = strcmp(req->metrics[i], k->metric) == 0;
	if (!metric_ok)
		return false;
	if (req->nranks == 0)
		return true;
	for (size_t i = 0; i < req->nranks; i++)
		if (req->ranks[i] == k->rank)
			return true;
	return false;
}

static int match_cb(void *arg, const struct mdl_series_key *k, uint64_t id)
{
	struct match_ctx *c = arg;
	c->job_seen = true;
	if (!wanted(c->req, k))
		return 0;
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 32;
		struct mdl_series_key *kk = realloc(c->keys, cap * sizeof(*kk));
		if (!kk)
			return -ENOMEM;
		c->keys = kk;
		uint64_t *ii = realloc(c->ids, cap * sizeof(*ii));
		if (!ii)
			return -ENOMEM;
		c->ids = ii;
		c->cap = cap;
	}
	c->keys[c->n] = *k;
	c->ids[c->n++] = id;
	return 0;
}

#define LOOKUP_MAX 64 /* series looked up one by one; more: one listing */

static int cmp_key(const struct mdl_series_key *x, const struct mdl_series_key *y)
{
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return strcmp(x->metric, y->metric);
}

/* Exact metrics and ranks: looks each series up by its key instead of
 * listing the whole job. True when every wanted series exists; m then
 * holds them in the listing's order (rank, then metric bytes: the index
 * key order), each once. False (m empty) means list the job, which also
 * tells an unknown job apart. */
static bool match_by_lookup(struct sto *s, const struct qry_range_req *req, struct match_ctx *m)
{
	size_t jl = strlen(req->job);
	if (req->nranks == 0 || req->nmetrics == 0 || req->nmetrics > LOOKUP_MAX ||
	    req->nranks > LOOKUP_MAX || req->nmetrics * req->nranks > LOOKUP_MAX || jl == 0 ||
	    jl > MDL_JOB_MAX)
		return false;
	size_t cap = req->nmetrics * req->nranks;
	m->keys = malloc(cap * sizeof(*m->keys));
	m->ids = malloc(cap * sizeof(*m->ids));
	if (!m->keys || !m->ids)
		goto no;
	for (size_t i = 0; i < req->nmetrics; i++) {
		size_t ml = strlen(req->metrics[i]);
		if (ml == 0 || ml > MDL_METRIC_MAX)
			goto no;
		for (size_t j = 0; j < req->nranks; j++) {
			struct mdl_series_key k;
			memset(&k, 0, sizeof(k));
			memcpy(k.job, req->job, jl);
			memcpy(k.metric, req->metrics[i], ml);
			k.rank = req->ranks[j];
			uint64_t id;
			if (sto_lookup_series(s, &k, &id) != 0)
				goto no;
			/* insertion into order; duplicates (repeated names) once */
			size_t at = m->n;
			while (at > 0 && cmp_key(&m->keys[at - 1], &k) > 0)
				at--;
			if (at > 0 && cmp_key(&m->keys[at - 1], &k) == 0)
				continue;
			memmove(m->keys + at + 1, m->keys + at, (m->n - at) * sizeof(*m->keys));
			memmove(m->ids + at + 1, m->ids + at, (m->n - at) * sizeof(*m->ids));
			m->keys[at] = k;
			m->ids[at] = id;
			m->n++;
		}
	}
	m->cap = cap;
	m->job_seen = true;
	return true;
no:
	free(m->keys);
	free(m->ids);
	m->keys = NULL;
	m->ids = NULL;
	m->n = m->cap = 0;
	return false;
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
static int read_one(struct sto *s, const struct qry_range_req *req, const struct match_ctx *m,
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
	sp->key = m->keys[i];
	sp->pts = (struct mdl_cols)MDL_COLS_INIT;
	int rc = sto_read(s, m->ids[i], &req->range, req->max_points - out->total, &sp->pts, re);
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
	struct match_ctx m = {.req = req};
	struct sto_read_error *re = malloc(sizeof(*re));
	int rc = re ? 0 : -ENOMEM;
	memset(out, 0, sizeof(*out));
	if (rc == 0 && !match_by_lookup(s, req, &m))
		rc = sto_list_series(s, req->job, match_cb, &m);
	if (rc) {
		qry_fail(err, QRY_E_INTERNAL, rc, "listing series: %s", rdb_strerror(rc));
		goto out;
	}
	if (!m.job_seen) {
		rc = qry_fail(err, QRY_E_NOT_FOUND, RDB_ENOTFOUND,
			      "unknown job '%.128s' (GET "
			      "/api/v1/jobs lists the jobs)",
			      req->job);
		goto out;
	}
	for (size_t i = 0; rc == 0 && i < m.n; i++) {
		re->msg[0] = 0;
		rc = read_one(s, req, &m, i, out, re);
		if (rc)
			read_error(err, rc, &m.keys[i], re, req->max_points);
	}
out:
	if (rc)
		qry_points_free(out);
	free(m.keys);
	free(m.ids);
	free(re);
	return rc;
}
