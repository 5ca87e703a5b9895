/* match.c - the series of one job selected by metric (exact names or a
 * prefix) and rank, sorted by (rank, metric): exact keys are looked up one
 * by one (at most LOOKUP_MAX); exact names over every rank list the job's
 * series of those names (the others skipped on their index key); anything
 * else, or exact names that found nothing, lists the job once. Unknown
 * job or metric is told apart for the error message. A metric with no series
 * under the name asked is looked for under its built-in aliases
 * (model/alias.h: loss finds train.loss). Threading: reentrant.
 */
#include "query/bucket.h"
#include "common/rdb_err.h"
#include "common/rdb_sort.h"
#include "model/alias.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The matcher of one qry_match call. */
struct match_ctx {
	const struct qry_match_req *req;
	struct qry_match *m;
	bool alias;	   /* the built-in metric aliases apply (model/alias.h) */
	size_t prefix_len; /* strlen(req->prefix), measured once, not per key */
};

static bool metric_wanted(const struct match_ctx *c, const char *metric)
{
	const struct qry_match_req *req = c->req;
	if (req->prefix)
		return strncmp(metric, req->prefix, c->prefix_len) == 0 &&
		       metric[c->prefix_len] != 0;
	for (size_t i = 0; i < req->nmetrics; i++)
		if (c->alias ? mdl_metric_same(req->metrics[i], metric)
			     : strcmp(req->metrics[i], metric) == 0)
			return true;
	return false;
}

static int match_cb(void *arg, const struct mdl_series_key *k, uint64_t id)
{
	struct match_ctx *c = arg;
	struct qry_match *m = c->m;
	m->job_seen = true;
	if (!metric_wanted(c, k->metric))
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
	rdb_sort(m->v, m->n, sizeof(*m->v), cmp_series);
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

/* The metric of an index key is one of the exact names asked for (no
 * alias, no prefix): a job's other metrics are skipped on their key. */
/* metric[0..len) is not NUL-terminated and holds no NUL: a wanted name
 * equals it when their first len bytes agree and the name ends there (no
 * strlen of each name per key). */
static bool name_wanted(void *arg, const char *metric, size_t len)
{
	const struct match_ctx *c = arg;
	for (size_t i = 0; i < c->req->nmetrics; i++) {
		const char *w = c->req->metrics[i];
		if (strncmp(w, metric, len) == 0 && w[len] == 0)
			return true;
	}
	return false;
}

/* Exact names: the series under them, the others skipped on their key.
 * Finding none says nothing of the job: then the whole job is listed. */
static int match_exact(struct sto *s, const struct qry_match_req *req, struct match_ctx *c)
{
	if (req->prefix || req->nmetrics == 0)
		return 0;
	int rc = sto_list_series_metric(s, req->job, name_wanted, match_cb, c);
	if (rc == 0 && !c->m->metric_seen)
		c->m->job_seen = false;
	return rc;
}

int qry_match(struct sto *s, const struct qry_match_req *req, struct qry_match *m,
	      struct qry_error *err)
{
	struct match_ctx c = {
	    .req = req, .m = m, .prefix_len = req->prefix ? strlen(req->prefix) : 0};
	memset(m, 0, sizeof(*m));
	if (match_by_lookup(s, req, m))
		return 0;
	int rc = match_exact(s, req, &c);
	if (rc == 0 && !m->metric_seen)
		rc = sto_list_series(s, req->job, match_cb, &c);
	if (rc == 0 && m->job_seen && !m->metric_seen && !req->prefix) {
		/* none under the names asked: under their built-in aliases
		 * (loss finds train.loss and the other way round) */
		c.alias = true;
		rc = sto_list_series(s, req->job, match_cb, &c);
	}
	if (rc)
		return qry_fail(err, QRY_E_INTERNAL, rc, "listing series: %s", rdb_strerror(rc));
	if (!m->job_seen)
		return qry_fail(err, QRY_E_NOT_FOUND, RDB_ENOTFOUND,
				"unknown job '%.128s' (GET "
				"/api/v1/jobs lists the jobs)",
				req->job);
	if (!m->metric_seen)
		return qry_fail(err, QRY_E_NOT_FOUND, RDB_ENOTFOUND,
				"job '%.128s' has no metric "
				"%s'%.256s' (GET /api/v1/jobs/%.128s/metrics lists them)",
				req->job, req->prefix ? "starting with " : "",
				req->prefix ? req->prefix : req->metrics[0], req->job);
	rdb_sort(m->v, m->n, sizeof(*m->v), cmp_series);
	return 0;
}

void qry_match_free(struct qry_match *m)
{
	if (!m)
		return;
	free(m->v);
	memset(m, 0, sizeof(*m));
}
