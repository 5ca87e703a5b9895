/* range.c - raw range queries: the points of the series of one job that
 * match a metric set and a rank set, by time and/or step range.
 *
 * The points of every selected series are read (storage merges head and
 * chunks, verified) and written as columnar JSON. The total is bounded by
 * max_points (422, telling how to narrow the query) and the response by the
 * output buffer's bound (413).
 */
#include "query/qry.h"
#include "common/rdb_err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct match_ctx {
	const struct qry_range_req *req;
	struct sto_series_key *keys;
	uint64_t *ids;
	size_t n, cap;
	bool job_seen;
};

static bool wanted(const struct qry_range_req *req, const struct sto_series_key *k)
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

static int match_cb(void *arg, const struct sto_series_key *k, uint64_t id)
{
	struct match_ctx *c = arg;
	c->job_seen = true;
	if (!wanted(c->req, k))
		return 0;
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 32;
		struct sto_series_key *kk = realloc(c->keys, cap * sizeof(*kk));
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

static int write_series(struct rdb_buf *out, const struct sto_series_key *k,
			const struct sto_cols *p, bool first)
{
	int rc = rdb_buf_puts(out, first ? "{\"job\":" : ",{\"job\":");
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
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"timestamps\":[");
	for (size_t i = 0; rc == 0 && i < p->n; i++)
		rc = rdb_buf_printf(out, i ? ",%lld" : "%lld", (long long)p->ts_ns[i]);
	if (rc == 0)
		rc = rdb_buf_puts(out, "],\"steps\":[");
	for (size_t i = 0; rc == 0 && i < p->n; i++) {
		if (i)
			rc = rdb_buf_putc(out, ',');
		if (rc == 0 && p->step[i] == STO_STEP_NONE)
			rc = rdb_buf_append(out, "null", 4);
		else if (rc == 0)
			rc = rdb_buf_printf(out, "%lld", (long long)p->step[i]);
	}
	if (rc == 0)
		rc = rdb_buf_puts(out, "],\"attempts\":[");
	for (size_t i = 0; rc == 0 && i < p->n; i++)
		rc = rdb_buf_printf(out, i ? ",%u" : "%u", p->attempt[i]);
	if (rc == 0)
		rc = rdb_buf_puts(out, "],\"values\":[");
	for (size_t i = 0; rc == 0 && i < p->n; i++) {
		if (i)
			rc = rdb_buf_putc(out, ',');
		if (rc == 0)
			rc = qry_json_value(out, p->value[i]);
	}
	if (rc == 0)
		rc = rdb_buf_puts(out, "]}");
	return rc;
}

static void key_text(const struct sto_series_key *k, char *buf, size_t len)
{
	if (k->rank == STO_RANK_JOB)
		snprintf(buf, len, "job=%s rank=job metric=%s", k->job, k->metric);
	else
		snprintf(buf, len, "job=%s rank=%u metric=%s", k->job, k->rank, k->metric);
}

static int read_error(struct qry_error *err, int rc, const struct sto_series_key *k,
		      const struct sto_read_error *re, size_t max_points)
{
	char key[512];
	key_text(k, key, sizeof(key));
	if (rc == RDB_ELIMIT) {
		err->status = 422;
		snprintf(err->msg, sizeof(err->msg),
			 "the query selects more than max_query_points (%zu) points; narrow the "
			 "time range (from/to) or step range (step_from/step_to), select fewer "
			 "ranks or metrics, or use a downsampling query", max_points);
	} else {
		err->status = 500;
		snprintf(err->msg, sizeof(err->msg), "series %s: %s", key,
			 re->msg[0] ? re->msg : rdb_strerror(rc));
	}
	return rc;
}

int qry_range(struct sto *s, const struct qry_range_req *req, struct rdb_buf *out,
	      struct qry_error *err)
{
	struct match_ctx m = {.req = req};
	struct sto_cols pts = STO_COLS_INIT;
	struct sto_read_error *re = malloc(sizeof(*re));
	size_t total = 0, nonempty = 0;
	int rc = re ? sto_list_series(s, req->job, match_cb, &m) : -ENOMEM;
	if (rc) {
		err->status = 500;
		snprintf(err->msg, sizeof(err->msg), "listing series: %s", rdb_strerror(rc));
		goto out;
	}
	if (!m.job_seen) {
		err->status = 404;
		snprintf(err->msg, sizeof(err->msg), "unknown job '%.128s' (GET /api/v1/jobs "
			 "lists the jobs)", req->job);
		rc = RDB_ENOTFOUND;
		goto out;
	}
	rc = rdb_buf_puts(out, "{\"series\":[");
	for (size_t i = 0; rc == 0 && i < m.n; i++) {
		rc = sto_read(s, m.ids[i], &req->range, req->max_points - total, &pts, re);
		if (rc) {
			read_error(err, rc, &m.keys[i], re, req->max_points);
			goto out;
		}
		total += pts.n;
		if (pts.n)
			rc = write_series(out, &m.keys[i], &pts, nonempty++ == 0);
	}
	if (rc == 0)
		rc = rdb_buf_printf(out, "],\"points\":%zu}", total);
	if (rc) {
		err->status = rc == RDB_ELIMIT ? 413 : 500;
		snprintf(err->msg, sizeof(err->msg), rc == RDB_ELIMIT ?
			 "the response would exceed max_response_bytes; narrow the query" :
			 "writing the response: %s", rdb_strerror(rc));
	}
out:
	free(m.keys);
	free(m.ids);
	free(re);
	sto_cols_free(&pts);
	return rc;
}
