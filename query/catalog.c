/* catalog.c - listings of jobs, and of a job's metrics and ranks, as typed
 * results (qry.h); the listing primitives the Grafana datasource selects
 * with. Each call runs one LMDB read transaction through the storage API;
 * results are bounded (series listed per job, metadata bytes per listing).
 * Threading: reentrant.
 */
#include "query/qry.h"
#include "query/bucket.h"
#include "common/rdb_err.h"
#include "common/rdb_sort.h"
#include "query/agg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SERIES_MAX 1000000u /* series one listing of a job may hold */

int qry_list_jobs(struct sto *s, int (*fn)(void *arg, const char *job, uint64_t nseries), void *arg)
{
	return sto_list_jobs(s, fn, arg);
}

int qry_list_series(struct sto *s, const char *job,
		    int (*fn)(void *arg, const struct mdl_series_key *k, uint64_t id), void *arg)
{
	return sto_list_series(s, job, fn, arg);
}

/* ---- jobs ------------------------------------------------------------------------ */

void qry_jobs_free(struct qry_jobs *j)
{
	if (!j)
		return;
	for (size_t i = 0; i < j->n; i++)
		free(j->v[i].meta);
	free(j->v);
	memset(j, 0, sizeof(*j));
}

struct jobs_ctx {
	struct sto *s;
	struct qry_jobs *out;
	bool with_meta; /* add each job's metadata document */
	size_t max_meta_bytes;
};

/* The job's metadata document (PUT /api/v1/jobs/{job}/meta) into jb, if any.
 * A damaged one is left out (the storage engine logged and counted it; GET
 * of the document answers why) rather than failing the whole list. */
static int job_meta(struct jobs_ctx *c, struct qry_job *jb)
{
	struct qry_error e;
	struct rdb_buf doc;
	rdb_buf_init(&doc, c->max_meta_bytes - c->out->meta_bytes);
	int rc = qry_meta_get(c->s, jb->job, &doc, &e);
	if (rc == 0) {
		jb->meta_len = doc.len;
		jb->meta = (char *)rdb_buf_steal(&doc);
		c->out->meta_bytes += jb->meta_len;
	}
	rdb_buf_free(&doc);
	return rc == RDB_ENOTFOUND || rc == RDB_ECORRUPT ? 0 : rc;
}

static int job_cb(void *arg, const char *job, uint64_t nseries)
{
	struct jobs_ctx *c = arg;
	struct qry_jobs *j = c->out;
	if (j->n == j->cap) {
		size_t cap = j->cap ? j->cap * 2 : 16;
		struct qry_job *v = realloc(j->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		j->v = v;
		j->cap = cap;
	}
	struct qry_job *jb = &j->v[j->n++];
	memset(jb, 0, sizeof(*jb));
	snprintf(jb->job, sizeof(jb->job), "%s", job);
	jb->nseries = nseries;
	return c->with_meta ? job_meta(c, jb) : 0;
}

#define EXTENT_GROUP 1024u /* series folded per storage snapshot */

/* The job's first/last timestamp, last step and ranks. The ranks come from
 * the job's series (as qry_match selects them); the rest from storage's
 * summary of the job (sto_job_extent_get), or, when it has none, from
 * folding every series with sto_extent_series, a group of series per
 * snapshot, which then becomes the summary. */
static int job_extent(struct sto *s, struct qry_job *jb)
{
	struct qry_match m;
	struct qry_error e;
	struct qry_match_req mr = {.job = jb->job, .prefix = ""};
	uint64_t ids[EXTENT_GROUP];
	uint64_t ticket = 0;
	struct sto_extent ext = {.has_points = false, .last_step = MDL_STEP_NONE};
	jb->last_step = MDL_STEP_NONE;
	/* The summary first: a build folds the writes from here on, so the
	 * series listed next include every one that had points before. */
	int have = sto_job_extent_get(s, jb->job, &ext, &ticket);
	int rc = qry_match(s, &mr, &m, &e);
	if (rc)
		return rc == RDB_ENOTFOUND ? 0 : rc;
	uint32_t prev_rank = MDL_RANK_JOB;
	size_t nids = 0;
	for (size_t i = 0; rc == 0 && i < m.n; i++) {
		uint32_t rank = m.v[i].key.rank;
		if (rank != MDL_RANK_JOB && (jb->nranks == 0 || rank != prev_rank)) {
			jb->nranks++;
			prev_rank = rank;
		}
		if (have == 0)
			continue;
		ids[nids++] = m.v[i].id;
		if (nids == EXTENT_GROUP || i + 1 == m.n) {
			rc = sto_extent_series(s, ids, nids, &ext);
			nids = 0;
		}
	}
	qry_match_free(&m);
	if (rc)
		return rc;
	if (have != 0)
		sto_job_extent_put(s, jb->job, ticket, &ext);
	jb->has_points = ext.has_points;
	jb->first_ts_ns = ext.has_points ? ext.first_ts_ns : 0;
	jb->last_ts_ns = ext.has_points ? ext.last_ts_ns : 0;
	jb->last_step = ext.last_step;
	return 0;
}

int qry_jobs(struct sto *s, bool with_meta, size_t max_meta_bytes, struct qry_jobs *out,
	     struct qry_error *err)
{
	struct jobs_ctx c = {s, out, with_meta, max_meta_bytes};
	memset(out, 0, sizeof(*out));
	int rc = sto_list_jobs(s, job_cb, &c);
	for (size_t i = 0; rc == 0 && i < out->n; i++)
		rc = job_extent(s, &out->v[i]);
	if (rc) {
		qry_jobs_free(out);
		return qry_fail_listing(err, rc, "listing jobs");
	}
	return 0;
}

/* ---- a job's series ---------------------------------------------------------------- */

struct series_list {
	struct mdl_series_key *keys;
	size_t n, cap, max;
};

static int collect_cb(void *arg, const struct mdl_series_key *k, uint64_t id)
{
	(void)id;
	struct series_list *l = arg;
	if (l->n >= l->max)
		return RDB_ELIMIT;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct mdl_series_key *p = realloc(l->keys, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		l->keys = p;
		l->cap = cap;
	}
	l->keys[l->n++] = *k;
	return 0;
}

static int cmp_metric(const void *a, const void *b)
{
	return strcmp(((const struct mdl_series_key *)a)->metric,
		      ((const struct mdl_series_key *)b)->metric);
}

/* Lists the job's series (key order: rank, metric). QRY_E_NOT_FOUND if none. */
static int job_series(struct sto *s, const char *job, struct series_list *l, struct qry_error *err)
{
	l->max = SERIES_MAX;
	int rc = sto_list_series(s, job, collect_cb, l);
	if (rc)
		return qry_fail_listing(err, rc, "listing the job's series");
	if (l->n == 0)
		return qry_fail(err, QRY_E_NOT_FOUND, RDB_ENOTFOUND,
				"unknown job '%.128s' (GET "
				"/api/v1/jobs lists the jobs)",
				job);
	return 0;
}

void qry_metrics_free(struct qry_metrics *m)
{
	if (!m)
		return;
	free(m->v);
	memset(m, 0, sizeof(*m));
}

int qry_job_metrics(struct sto *s, const char *job, struct qry_metrics *out, struct qry_error *err)
{
	struct series_list l = {0};
	memset(out, 0, sizeof(*out));
	int rc = job_series(s, job, &l, err);
	if (rc)
		goto out;
	rdb_sort(l.keys, l.n, sizeof(*l.keys), cmp_metric);
	out->v = malloc(l.n * sizeof(*out->v));
	if (!out->v) {
		rc = qry_fail_listing(err, -ENOMEM, "listing metrics");
		goto out;
	}
	snprintf(out->job, sizeof(out->job), "%s", job);
	for (size_t i = 0; i < l.n; i++)
		if (i == 0 || strcmp(l.keys[i].metric, l.keys[i - 1].metric) != 0)
			memcpy(out->v[out->n++], l.keys[i].metric, sizeof(out->v[0]));
out:
	free(l.keys);
	return rc;
}

void qry_ranks_free(struct qry_ranks *r)
{
	if (!r)
		return;
	free(r->v);
	memset(r, 0, sizeof(*r));
}

int qry_job_ranks(struct sto *s, const char *job, struct qry_ranks *out, struct qry_error *err)
{
	struct series_list l = {0};
	memset(out, 0, sizeof(*out));
	int rc = job_series(s, job, &l, err);
	if (rc)
		goto out;
	out->v = malloc(l.n * sizeof(*out->v));
	if (!out->v) {
		rc = qry_fail_listing(err, -ENOMEM, "listing ranks");
		goto out;
	}
	snprintf(out->job, sizeof(out->job), "%s", job);
	/* Keys come sorted by rank; the job-level pseudo-rank sorts last. */
	for (size_t i = 0; i < l.n; i++) {
		uint32_t r = l.keys[i].rank;
		if (r == MDL_RANK_JOB)
			out->job_level = true;
		else if (i == 0 || l.keys[i - 1].rank != r)
			out->v[out->n++] = r;
	}
out:
	free(l.keys);
	return rc;
}
