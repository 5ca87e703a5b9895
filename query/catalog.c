/* catalog.c - listings of jobs, and of a job's metrics and ranks.
 * Each call runs one LMDB read transaction through the storage API; output
 * is bounded by the caller's buffer (RDB_ELIMIT -> 413). */
#include "query/qry.h"
#include "common/rdb_err.h"
#include "query/agg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(struct qry_error *err, int status, int rc, const char *what)
{
	err->status = status;
	if (rc == RDB_ELIMIT && status == 413)
		snprintf(err->msg, sizeof(err->msg), "response would exceed max_response_bytes; "
			 "%s", what);
	else
		snprintf(err->msg, sizeof(err->msg), "%s: %s", what, rdb_strerror(rc));
	return rc;
}

struct jobs_ctx {
	struct rdb_buf *out;
	const char *data_dir; /* for job metadata documents; NULL: none */
	int n;
};

static int job_cb(void *arg, const char *job, uint64_t nseries)
{
	struct jobs_ctx *c = arg;
	int rc = rdb_buf_puts(c->out, c->n++ ? ",{\"job\":" : "{\"job\":");
	if (rc == 0)
		rc = rdb_buf_json_str(c->out, job, strlen(job));
	if (rc == 0)
		rc = rdb_buf_printf(c->out, ",\"series\":%llu", (unsigned long long)nseries);
	if (rc == 0 && c->data_dir) {
		/* the job's metadata document (PUT /api/v1/jobs/{job}/meta), if any */
		struct qry_error e;
		size_t at = c->out->len;
		rc = rdb_buf_puts(c->out, ",\"meta\":");
		int mr = rc ? rc : qry_meta_get(c->data_dir, job, c->out, &e);
		if (mr == RDB_ENOTFOUND) {
			c->out->len = at;
			rc = 0;
		} else {
			rc = mr;
		}
	}
	if (rc == 0)
		rc = rdb_buf_putc(c->out, '}');
	return rc;
}

int qry_jobs(struct sto *s, const char *data_dir, struct rdb_buf *out, struct qry_error *err)
{
	struct jobs_ctx c = {out, data_dir, 0};
	int rc = rdb_buf_puts(out, "{\"jobs\":[");
	if (rc == 0)
		rc = sto_list_jobs(s, job_cb, &c);
	if (rc == 0)
		rc = rdb_buf_puts(out, "]}");
	if (rc)
		return fail(err, rc == RDB_ELIMIT ? 413 : 500, rc, "listing jobs");
	return 0;
}

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

/* Lists the job's series (key order: rank, metric). 404 if none. */
static int job_series(struct sto *s, const char *job, struct series_list *l,
		      struct qry_error *err)
{
	l->max = 1000000;
	int rc = sto_list_series(s, job, collect_cb, l);
	if (rc)
		return fail(err, rc == RDB_ELIMIT ? 413 : 500, rc, "listing the job's series");
	if (l->n == 0) {
		err->status = 404;
		snprintf(err->msg, sizeof(err->msg), "unknown job '%.128s' (GET /api/v1/jobs "
			 "lists the jobs)", job);
		return RDB_ENOTFOUND;
	}
	return 0;
}

int qry_job_metrics(struct sto *s, const char *job, struct rdb_buf *out, struct qry_error *err)
{
	struct series_list l = {0};
	int rc = job_series(s, job, &l, err);
	if (rc)
		goto out;
	qsort(l.keys, l.n, sizeof(*l.keys), cmp_metric);
	rc = rdb_buf_puts(out, "{\"job\":");
	if (rc == 0)
		rc = rdb_buf_json_str(out, job, strlen(job));
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"metrics\":[");
	for (size_t i = 0, n = 0; rc == 0 && i < l.n; i++) {
		if (i && strcmp(l.keys[i].metric, l.keys[i - 1].metric) == 0)
			continue;
		if (n++)
			rc = rdb_buf_putc(out, ',');
		if (rc == 0)
			rc = rdb_buf_json_str(out, l.keys[i].metric, strlen(l.keys[i].metric));
	}
	if (rc == 0)
		rc = rdb_buf_puts(out, "]}");
	if (rc)
		fail(err, rc == RDB_ELIMIT ? 413 : 500, rc, "listing metrics");
out:
	free(l.keys);
	return rc;
}

int qry_job_ranks(struct sto *s, const char *job, struct rdb_buf *out, struct qry_error *err)
{
	struct series_list l = {0};
	int rc = job_series(s, job, &l, err);
	if (rc)
		goto out;
	bool job_level = false;
	rc = rdb_buf_puts(out, "{\"job\":");
	if (rc == 0)
		rc = rdb_buf_json_str(out, job, strlen(job));
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"ranks\":[");
	/* Keys come sorted by rank; the job-level pseudo-rank sorts last. */
	for (size_t i = 0, n = 0; rc == 0 && i < l.n; i++) {
		uint32_t r = l.keys[i].rank;
		if (r == MDL_RANK_JOB) {
			job_level = true;
			continue;
		}
		if (i && l.keys[i - 1].rank == r)
			continue;
		rc = rdb_buf_printf(out, n++ ? ",%u" : "%u", r);
	}
	if (rc == 0)
		rc = rdb_buf_printf(out, "],\"job_level\":%s}", job_level ? "true" : "false");
	if (rc)
		fail(err, rc == RDB_ELIMIT ? 413 : 500, rc, "listing ranks");
out:
	free(l.keys);
	return rc;
}
