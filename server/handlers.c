/* handlers.c - the HTTP endpoints of rankdbd's core (health, metrics, JSON
 * write, raw range, catalog), the order of the route table, and the
 * translation of storage/ingest/query results into status codes.
 *
 * Every route, by table (route.h; tried in this order, first match wins):
 *   core (here)
 *     GET  /healthz                      liveness
 *     GET  /metrics                      Prometheus text exposition
 *     POST /api/v1/write                 JSON array / NDJSON records (client batch
 *                                        id: X-Rankdb-Batch-Id or ?batch_id=)
 *   ingest_routes.c
 *     POST /write                        InfluxDB 1.x line protocol
 *     POST /api/v2/write                 InfluxDB 2.x line protocol
 *   influx_routes.c (listed last: the InfluxDB 1.x read side)
 *     GET|HEAD /ping                     204 + X-Influxdb-Version
 *     GET|POST /query                    CREATE DATABASE, SHOW DATABASES,
 *                                        SHOW MEASUREMENTS, SELECT fn(f) ... GROUP BY time()
 *   grafana.c (Grafana JSON datasource; a trailing slash is tolerated)
 *     GET|POST /grafana                  datasource test
 *     POST /grafana/metrics, /metric-payload-options, /query, /variable,
 *          /tag-keys, /tag-values, /search, /annotations
 *   admin_routes.c (token-protected, audited; routes its own endpoints)
 *     *    /api/v1/admin/...             stats, jobs/<job>/delete, retention,
 *                                        compact, verify, backup, checkpoint,
 *                                        rules/reload
 *   events_routes.c
 *     GET  /api/v1/logs                  filtered logs, newest first, by cursor
 *     GET  /api/v1/logs/around           one rank's logs around a step
 *     GET  /api/v1/spans                 per-rank phase timeline of steps
 *   detect_routes.c (503 when detection is off)
 *     GET  /api/v1/alerts                active and recently resolved alerts
 *     GET  /api/v1/jobs/<job>/health     the run at a glance, per rank
 *   ui_routes.c (the built-in dashboard, compiled in)
 *     GET  /                             302 to /ui/
 *     GET  /ui                           301 to /ui/
 *     GET  /ui/, /ui/<name>              the dashboard's files
 *   query_routes.c
 *     GET  /api/v1/query/downsample      buckets by step or time
 *     GET  /api/v1/query/crossrank       per bucket across ranks
 *     GET  /api/v1/query/outliers        robust straggler report
 *     GET|PUT /api/v1/jobs/<job>/meta    the job's metadata document
 *   catalog (here)
 *     GET  /api/v1/query/range           raw points by time and/or step range
 *     GET  /api/v1/jobs                  job listing
 *     GET  /api/v1/jobs/<job>/metrics    a job's metric names
 *     GET  /api/v1/jobs/<job>/ranks      a job's ranks
 * GET routes answer HEAD too (not /api/v1/alerts and /health, nor the
 * Grafana endpoints). 404 (no route) and 405 (route, not that
 * method; with Allow) are answered in route.c.
 *
 * Errors are JSON {"error": "..."} with the status that says whose fault it
 * is: 4xx for the client (with what to change), 5xx for the server, 503 +
 * Retry-After when saturated. Repeating client errors are logged
 * rate-limited.
 */
#include "server/srv.h"
#include "server/auth.h"
#include "server/udp_auth.h"
#include "common/rdb_err.h"
#include "common/rdb_log.h"
#include "common/rdb_time.h"
#include "ingest/protocol.h"
#include "query/qry.h"
#include "query/bucket.h"
#include "server/json_out.h"
#include "server/route.h"
#include "storage/jobmeta/jobmeta.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

void srv_error(struct srv_resp *resp, int status, const char *fmt, ...)
{
	char msg[6000];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	resp->status = status;
	resp->body.len = 0;
	if (rdb_buf_puts(&resp->body, "{\"error\":") ||
	    rdb_buf_json_str(&resp->body, msg, strlen(msg)) || rdb_buf_putc(&resp->body, '}'))
		resp->body.len = 0;
}

static void ok_json(struct srv_resp *resp)
{
	resp->status = 200;
}

/* ---- write ---------------------------------------------------------------- */

static void write_error(struct srv_resp *resp, const struct ing_error *e)
{
	char msg[512];
	snprintf(msg, sizeof(msg), "%s", e->msg);
	resp->body.len = 0;
	rdb_buf_puts(&resp->body, "{\"error\":");
	rdb_buf_json_str(&resp->body, msg, strlen(msg));
	rdb_buf_printf(&resp->body, ",\"record\":%ld,\"line\":%ld,\"field\":", e->record, e->line);
	rdb_buf_json_str(&resp->body, e->field, strlen(e->field));
	rdb_buf_putc(&resp->body, '}');
}

static bool batch_id_ok(const char *s, size_t len)
{
	if (len == 0 || len > STO_BATCH_ID_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < 0x21 || s[i] > 0x7e)
			return false;
	}
	return true;
}

int srv_req_batch_id(const struct srv_req *req, const char **id, size_t *len, char *why,
		     size_t whylen)
{
	const char *h = srv_req_header(req, "X-Rankdb-Batch-Id"), *q = NULL;
	for (int i = 0; i < req->nargs; i++) {
		if (strcmp(req->args[i].key, "batch_id") == 0)
			q = req->args[i].val;
	}
	const char *v = h ? h : q;
	*id = NULL;
	*len = 0;
	if (!v)
		return 0;
	if (h && q && strcmp(h, q) != 0) {
		snprintf(why, whylen,
			 "header X-Rankdb-Batch-Id and parameter batch_id differ; "
			 "send the batch id once");
		return RDB_EINVAL;
	}
	if (!batch_id_ok(v, strlen(v))) {
		snprintf(why, whylen,
			 "batch id must be 1..%u printable ASCII characters without "
			 "spaces, got %zu bytes",
			 STO_BATCH_ID_MAX, strlen(v));
		return RDB_EINVAL;
	}
	*id = v;
	*len = strlen(v);
	return 0;
}

void srv_count_outcome(struct srv_ctx *ctx, const struct ing_outcome *o)
{
	struct srv_counters *c = &ctx->counters;
	switch (o->reason) {
	case ING_OK:
		break;
	case ING_BUSY:
	case ING_SHUTDOWN:
		atomic_fetch_add(&c->write_rejected_busy, 1);
		break;
	case ING_LIMIT:
		atomic_fetch_add(&c->write_rejected_limit, 1);
		break;
	case ING_INVALID:
		atomic_fetch_add(&c->write_rejected_invalid, 1);
		break;
	case ING_NOSPACE:
		atomic_fetch_add(&c->write_rejected_nospace, 1);
		break;
	default:
		atomic_fetch_add(&c->write_failed, 1);
		break;
	}
}

/* Parses a JSON body into b / ev; answers and returns non-zero on failure. */
static int parse_json_body(struct srv_req *req, struct srv_resp *resp, int64_t precision_ns,
			   struct mdl_batch *b, struct mdl_events *ev, struct ing_parse_result *res)
{
	struct srv_ctx *ctx = req->ctx;
	struct rdb_buf inflated;
	const uint8_t *body;
	size_t len;
	int status = 0;
	char why[512];
	int rc = srv_req_body(req, &inflated, &body, &len, &status, why, sizeof(why));
	if (rc) {
		atomic_fetch_add(status == 413 ? &ctx->counters.write_rejected_too_large
					       : &ctx->counters.write_rejected_invalid,
				 1);
		srv_error(resp, status, "%s", why);
		rdb_buf_free(&inflated);
		return rc;
	}
	struct ing_parse_opts po = {.lim = &ctx->limits};
	ing_lp_options_default(&po.lp);
	po.lp.default_ts_ns = rdb_now_ns();
	po.lp.precision_ns = precision_ns;
	/* In ns, a time before 2001 is a unit mistake (seconds, ms, us). */
	po.json_min_ts_ns = precision_ns == 1 ? ING_JSON_MIN_TS_S * INT64_C(1000000000) : 0;
	rc = ing_proto_json.parse(body, len, &po, b, ev, res);
	rdb_buf_free(&inflated);
	if (rc == RDB_ENOTFOUND)
		return 0; /* an empty array: nothing to store, acknowledged */
	if (rc == RDB_EINVAL || rc == RDB_ELIMIT) {
		const struct ing_error *e = &res->errors[0];
		atomic_fetch_add(rc == RDB_ELIMIT ? &ctx->counters.write_rejected_too_large
						  : &ctx->counters.write_rejected_invalid,
				 1);
		resp->status = rc == RDB_ELIMIT ? 413 : 400;
		write_error(resp, e);
		static struct rdb_log_ratelimit rl;
		rdb_log_limited(&rl, 10, RDB_LOG_INFO, "write",
				"refused a write (%d): record %ld line %ld field '%s': %s",
				resp->status, e->record, e->line, e->field, e->msg);
		return rc;
	}
	if (rc) {
		atomic_fetch_add(&ctx->counters.write_failed, 1);
		srv_error(resp, 500, "parsing the body failed: %s", rdb_strerror(rc));
	}
	return rc;
}

static const char *req_arg(const struct srv_req *req, const char *key)
{
	for (int i = 0; i < req->nargs; i++)
		if (strcmp(req->args[i].key, key) == 0)
			return req->args[i].val;
	return NULL;
}

/* A JSON write between its submit and its answer. */
struct json_write {
	struct srv_ctx *ctx;
	struct mdl_batch *b;
	struct mdl_events *ev;
	size_t records_ok;
};

static void json_write_free(struct json_write *jw)
{
	mdl_events_free(jw->ev);
	mdl_batch_free(jw->b);
	free(jw);
}

/* Answers a submitted JSON write (now, or when its parked request
 * resumes: srv_submit) and frees jw. */
static void json_write_answer(void *state, const struct ing_outcome *o, struct srv_resp *resp)
{
	struct json_write *jw = state;
	struct srv_ctx *ctx = jw->ctx;
	if (o->rc == 0) {
		atomic_fetch_add(&ctx->counters.write_records, jw->records_ok);
		resp->status = 200;
		rdb_buf_printf(
		    &resp->body,
		    "{\"accepted_points\":%zu,\"accepted_events\":%zu,\"records\":%zu%s}",
		    mdl_batch_points(jw->b), mdl_events_count(jw->ev), jw->records_ok,
		    o->duplicate ? ",\"duplicate\":true" : "");
	} else {
		srv_count_outcome(ctx, o);
		srv_error(resp, o->status, "%s", o->msg);
		resp->retry_after = o->retry_after;
	}
	json_write_free(jw);
}

static void h_write(struct srv_req *req, struct srv_resp *resp, const struct srv_route *r)
{
	(void)r;
	struct srv_ctx *ctx = req->ctx;
	atomic_fetch_add(&ctx->counters.write_requests, 1);
	struct ing_parse_result res = {0};
	struct ing_write w = {.source = ING_SRC_HTTP_JSON};
	struct ing_outcome o;
	char why[256];
	size_t max_points = ctx->cfg->max_records_per_request * ctx->cfg->max_metrics_per_record;
	int64_t precision_ns = 1;
	const char *prec = req_arg(req, "precision");
	if (prec && (!(strcmp(prec, "ns") == 0 || strcmp(prec, "us") == 0 ||
		       strcmp(prec, "ms") == 0 || strcmp(prec, "s") == 0) ||
		     ing_lp_precision(prec, &precision_ns))) {
		atomic_fetch_add(&ctx->counters.write_rejected_invalid, 1);
		srv_error(resp, 400, "precision must be one of ns, us, ms, s, got '%.32s'", prec);
		return;
	}
	if (srv_req_batch_id(req, &w.batch_id, &w.batch_id_len, why, sizeof(why))) {
		atomic_fetch_add(&ctx->counters.write_rejected_invalid, 1);
		srv_error(resp, 400, "%s", why);
		return;
	}
	struct json_write *jw = calloc(1, sizeof(*jw));
	int rc = jw ? 0 : -ENOMEM;
	if (rc == 0) {
		jw->ctx = ctx;
		rc = mdl_batch_new(max_points, max_points, &jw->b);
	}
	if (rc == 0)
		rc = mdl_events_new(ctx->cfg->max_records_per_request, ctx->cfg->max_body_bytes * 2,
				    &jw->ev);
	if (rc) {
		atomic_fetch_add(&ctx->counters.write_failed, 1);
		srv_error(resp, 500, "out of memory; nothing of this request was stored");
		goto out;
	}
	if (parse_json_body(req, resp, precision_ns, jw->b, jw->ev, &res))
		goto out;
	jw->records_ok = res.records_ok;
	w.points = jw->b;
	w.events = jw->ev;
	if (!srv_auth_write_ok(req, jw->b, jw->ev)) {
		srv_error(resp, 403, "forbidden");
		goto out;
	}
	if (srv_submit(req, &w, &o, json_write_answer, jw) == SRV_PARKED)
		return;
	json_write_answer(jw, &o, resp); /* frees jw */
	return;
out:
	if (jw)
		json_write_free(jw);
}

/* ---- query parameters -------------------------------------------------------- */

int srv_parse_i64(const char *s, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

int srv_parse_rank(const char *s, uint32_t *rank)
{
	int64_t r;
	if (strcmp(s, "job") == 0)
		r = MDL_RANK_JOB;
	else if (srv_parse_i64(s, &r) || r < 0 || r > MDL_RANK_MAX)
		return -EINVAL;
	*rank = (uint32_t)r;
	return 0;
}

struct range_params {
	const char *job;
	size_t nmetrics;
	size_t nranks;
	struct sto_range range;
	int64_t attempt; /* QRY_ATTEMPT_LATEST (default), QRY_ATTEMPT_ALL or one */
	int nowned;
	/* Not zeroed (range_params_new): each is read only below its count. */
	const char *metrics[256];
	uint32_t ranks[4096];
	char *owned[SRV_MAX_ARGS]; /* copies of the comma lists the arrays point into */
};

/* A struct range_params zeroed up to its lists (~19 KB that calloc
 * cleared on every raw range query, for a handful of entries). */
static struct range_params *range_params_new(void)
{
	struct range_params *p = malloc(sizeof(*p));
	if (p)
		memset(p, 0, offsetof(struct range_params, metrics));
	return p;
}

static void range_params_free(struct range_params *p)
{
	for (int i = 0; i < p->nowned; i++)
		free(p->owned[i]);
}

char *srv_arg_copy(const char *val, char **owned, int *nowned)
{
	size_t len = strlen(val);
	char *copy = malloc(len + 1);
	if (!copy)
		return NULL;
	memcpy(copy, val, len + 1);
	owned[(*nowned)++] = copy; /* one per query argument: cannot overflow */
	return copy;
}

int srv_split_commas(char *s, const char **tok, size_t max, size_t *n)
{
	for (char *t = s, *next; t; t = next) {
		next = strchr(t, ',');
		if (next)
			*next++ = 0;
		if (*t == 0)
			continue;
		if (*n == max)
			return RDB_ELIMIT;
		tok[(*n)++] = t;
	}
	return 0;
}

int srv_parse_rank_list(char *s, uint32_t *ranks, size_t max, size_t *n, const char **bad)
{
	for (char *t = s, *next; t; t = next) {
		next = strchr(t, ',');
		if (next)
			*next++ = 0;
		if (*t == 0)
			continue;
		uint32_t r;
		if (srv_parse_rank(t, &r)) {
			*bad = t;
			return RDB_EINVAL;
		}
		if (*n == max)
			return RDB_ELIMIT;
		ranks[(*n)++] = r;
	}
	return 0;
}

/* Splits a metric or rank comma list into the param arrays (the arrays
 * point into an owned copy). */
static int split_list(struct range_params *p, const char *val, bool metric, char *why,
		      size_t whylen)
{
	char *copy = srv_arg_copy(val, p->owned, &p->nowned);
	if (!copy)
		return -ENOMEM;
	const char *badtok = NULL;
	int rc = metric ? srv_split_commas(copy, p->metrics, 256, &p->nmetrics)
			: srv_parse_rank_list(copy, p->ranks, 4096, &p->nranks, &badtok);
	if (rc == RDB_EINVAL)
		snprintf(why, whylen, "rank must be an integer >= 0 or \"job\", got '%.32s'",
			 badtok);
	else if (rc == RDB_ELIMIT)
		snprintf(why, whylen, "at most %s per query",
			 metric ? "256 metrics" : "4096 ranks");
	return rc ? -EINVAL : 0;
}

static int parse_range(const struct srv_req *req, struct range_params *p, char *why, size_t whylen)
{
	p->range.from_ns = INT64_MIN;
	p->range.to_ns = INT64_MAX;
	p->attempt = QRY_ATTEMPT_LATEST; /* as the aggregates */
	p->range.step_from = 0;
	p->range.step_to = INT64_MAX;
	if (req->args_overflow) {
		snprintf(why, whylen, "too many query parameters (at most %d)", SRV_MAX_ARGS);
		return -EINVAL;
	}
	for (int i = 0; i < req->nargs; i++) {
		const char *k = req->args[i].key, *v = req->args[i].val;
		int rc = 0;
		int64_t *num = NULL;
		if (strcmp(k, "job") == 0) {
			p->job = v;
		} else if (strcmp(k, "metric") == 0) {
			rc = split_list(p, v, true, why, whylen);
		} else if (strcmp(k, "rank") == 0) {
			rc = split_list(p, v, false, why, whylen);
		} else if (strcmp(k, "from") == 0) {
			num = &p->range.from_ns;
		} else if (strcmp(k, "to") == 0) {
			num = &p->range.to_ns;
		} else if (strcmp(k, "step_from") == 0) {
			num = &p->range.step_from;
			p->range.by_step = true;
		} else if (strcmp(k, "step_to") == 0) {
			num = &p->range.step_to;
			p->range.by_step = true;
		} else if (strcmp(k, "attempt") == 0) {
			int64_t a;
			if (strcmp(v, "latest") == 0) {
				p->attempt = QRY_ATTEMPT_LATEST;
			} else if (strcmp(v, "all") == 0) {
				p->attempt = QRY_ATTEMPT_ALL;
			} else if (srv_parse_i64(v, &a) == 0 && a >= 0 && a <= UINT32_MAX) {
				p->attempt = a;
			} else {
				snprintf(why, whylen,
					 "parameter attempt must be \"latest\", \"all\" or "
					 "an attempt number >= 0, got '%.64s'",
					 v);
				return -EINVAL;
			}
		} else {
			snprintf(why, whylen,
				 "unknown parameter '%.64s' (known: job, metric, rank, "
				 "from, to, step_from, step_to, attempt)",
				 k);
			return -EINVAL;
		}
		if (num && k[0] != 's' && srv_parse_time_ns(v, rdb_now_ns(), num)) {
			snprintf(why, whylen, "parameter %s must be a time (%s), got '%.64s'", k,
				 SRV_TIME_HELP, v);
			return -EINVAL;
		}
		if (num && k[0] == 's' && srv_parse_i64(v, num)) {
			snprintf(why, whylen,
				 "parameter %s must be an integer (a training step), "
				 "got '%.64s'",
				 k, v);
			return -EINVAL;
		}
		if (rc)
			return rc;
	}
	if (!p->job || !*p->job) {
		snprintf(why, whylen, "parameter job is required");
		return -EINVAL;
	}
	if (p->nmetrics == 0) {
		snprintf(why, whylen,
			 "parameter metric is required (one or more, comma-separated "
			 "or repeated)");
		return -EINVAL;
	}
	if (p->range.from_ns > p->range.to_ns || p->range.step_from > p->range.step_to) {
		snprintf(why, whylen, "empty range: from must be <= to and step_from <= step_to");
		return -EINVAL;
	}
	return 0;
}

void srv_query_failed(struct srv_ctx *ctx, struct srv_resp *resp, const struct qry_error *e)
{
	atomic_fetch_add(&ctx->counters.query_errors, 1);
	srv_error(resp, srv_qry_status(e->code), "%s", e->msg);
}

static void h_range(struct srv_req *req, struct srv_resp *resp, const struct srv_route *route)
{
	(void)route;
	struct srv_ctx *ctx = req->ctx;
	struct range_params *p = range_params_new();
	struct qry_error *e = qry_error_new();
	char why[512];
	if (!p || !e) {
		srv_error(resp, 500, "out of memory");
		goto out;
	}
	if (parse_range(req, p, why, sizeof(why))) {
		srv_error(resp, 400, "%s", why);
		goto out;
	}
	struct qry_range_req q = {.job = p->job,
				  .metrics = p->metrics,
				  .nmetrics = p->nmetrics,
				  .ranks = p->ranks,
				  .nranks = p->nranks,
				  .range = p->range,
				  .attempt = p->attempt,
				  .max_points = ctx->cfg->max_query_points};
	struct qry_points r;
	if (qry_range(ctx->sto, &q, &r, e) || srv_write_points(&resp->body, &r, e))
		srv_query_failed(ctx, resp, e);
	else
		ok_json(resp);
	qry_points_free(&r);
out:
	if (p)
		range_params_free(p);
	free(p);
	free(e);
}

enum { JOB_METRICS, JOB_RANKS };

/* /api/v1/jobs/{job}/metrics and /ranks */
static void handle_job(struct srv_req *req, struct srv_resp *resp, const struct srv_route *r)
{
	struct qry_error *e = calloc(1, sizeof(*e));
	int rc;
	if (!e) {
		srv_error(resp, 500, "out of memory");
		return;
	}
	if (r->arg == JOB_METRICS) {
		struct qry_metrics m;
		rc = qry_job_metrics(req->ctx->sto, req->param, &m, e);
		rc = rc ? rc : srv_write_metrics(&resp->body, &m, e);
		qry_metrics_free(&m);
	} else {
		struct qry_ranks k;
		rc = qry_job_ranks(req->ctx->sto, req->param, &k, e);
		rc = rc ? rc : srv_write_ranks(&resp->body, &k, e);
		qry_ranks_free(&k);
	}
	if (rc)
		srv_query_failed(req->ctx, resp, e);
	else
		ok_json(resp);
	free(e);
}

static void h_jobs(struct srv_req *req, struct srv_resp *resp, const struct srv_route *route)
{
	(void)route;
	struct qry_error *e = calloc(1, sizeof(*e));
	if (!e) {
		srv_error(resp, 500, "out of memory");
		return;
	}
	struct qry_jobs r;
	if (qry_jobs(req->ctx->sto, true, req->ctx->cfg->max_response_bytes, &r, e) ||
	    srv_write_jobs(&resp->body, &r, req->ctx->detect ? srv_detect_job_fields : NULL,
			   req->ctx, e))
		srv_query_failed(req->ctx, resp, e);
	else
		ok_json(resp);
	qry_jobs_free(&r);
	free(e);
}

/* ---- /metrics ---------------------------------------------------------------- */

static void metric(struct rdb_buf *b, const char *name, const char *type, const char *help,
		   uint64_t v)
{
	rdb_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name,
		       (unsigned long long)v);
}

static void labeled(struct rdb_buf *b, const char *name, const char *label, const char *val,
		    _Atomic uint64_t *v)
{
	rdb_buf_printf(b, "%s{%s=\"%s\"} %llu\n", name, label, val,
		       (unsigned long long)atomic_load(v));
}

/* Line protocol and UDP listener counters. */
static void metrics_ingest(struct rdb_buf *b, struct srv_counters *c)
{
	const char *lp = "rankdb_lp_lines_total", *drop = "rankdb_udp_dropped_total";
	rdb_buf_printf(b,
		       "# HELP %s Line-protocol lines (HTTP and UDP) by result.\n"
		       "# TYPE %s counter\n",
		       lp, lp);
	labeled(b, lp, "result", "ok", &c->lp_lines_ok);
	labeled(b, lp, "result", "bad", &c->lp_lines_bad);
	metric(b, "rankdb_lp_string_fields_skipped_total", "counter",
	       "Line-protocol string fields skipped (not numbers).",
	       atomic_load(&c->lp_string_fields_skipped));
	metric(b, "rankdb_udp_datagrams_received_total", "counter", "UDP datagrams received.",
	       atomic_load(&c->udp_received));
	rdb_buf_printf(b,
		       "# HELP %s UDP datagrams dropped whole, by reason.\n"
		       "# TYPE %s counter\n",
		       drop, drop);
	labeled(b, drop, "reason", "queue_full", &c->udp_dropped_queue_full);
	labeled(b, drop, "reason", "oversize", &c->udp_dropped_oversize);
	labeled(b, drop, "reason", "socket_buffer", &c->udp_dropped_socket);
	labeled(b, drop, "reason", "parse_error", &c->udp_dropped_parse_error);
	labeled(b, drop, "reason", "busy", &c->udp_dropped_busy);
	labeled(b, drop, "reason", "series_limit", &c->udp_dropped_limit);
	labeled(b, drop, "reason", "error", &c->udp_dropped_error);
	srv_udp_auth_metrics(b); /* unsigned, bad_mac, stale, replay, ... */
	metric(b, "rankdb_udp_lines_dropped_total", "counter",
	       "Bad lines skipped in UDP datagrams whose other lines were stored.",
	       atomic_load(&c->udp_lines_bad));
	metric(b, "rankdb_udp_queue_depth", "gauge", "UDP datagrams waiting to be parsed.",
	       atomic_load(&c->udp_queue_depth));
	metric(b, "rankdb_udp_points_total", "counter", "Points stored from UDP datagrams.",
	       atomic_load(&c->udp_points));
}

static void subscriber_metric(void *arg, const struct ing_subscriber_stats *st)
{
	struct rdb_buf *b = arg;
	rdb_buf_printf(b,
		       "rankdb_subscriber_delivered_total{subscriber=\"%s\"} %llu\n"
		       "rankdb_subscriber_dropped_total{subscriber=\"%s\"} %llu\n"
		       "rankdb_subscriber_queue_writes{subscriber=\"%s\"} %llu\n",
		       st->name, (unsigned long long)st->delivered, st->name,
		       (unsigned long long)st->dropped, st->name, (unsigned long long)st->queued);
}

/* The pipeline's subscribers (detection, ...): writes handed over, writes
 * they missed because their queue was full, and their backlog. */
static void metrics_subscribers(struct rdb_buf *b, struct ing_pipeline *p)
{
	rdb_buf_puts(b, "# HELP rankdb_subscriber_delivered_total Acknowledged writes handed to a "
			"subscriber.\n# TYPE rankdb_subscriber_delivered_total counter\n"
			"# HELP rankdb_subscriber_dropped_total Acknowledged writes a subscriber "
			"missed (its queue was full; the writes are stored).\n"
			"# TYPE rankdb_subscriber_dropped_total counter\n"
			"# HELP rankdb_subscriber_queue_writes Writes waiting for a subscriber.\n"
			"# TYPE rankdb_subscriber_queue_writes gauge\n");
	ing_pipeline_stats(p, subscriber_metric, b);
}

static void h_metrics(struct srv_req *req, struct srv_resp *resp, const struct srv_route *r)
{
	(void)r;
	struct srv_ctx *ctx = req->ctx;
	struct srv_counters *c = &ctx->counters;
	struct sto_stats st;
	sto_get_stats(ctx->sto, &st);
	struct rdb_buf *b = &resp->body;
	metric(b, "rankdb_points_written_total", "counter", "Points acknowledged (durable).",
	       st.points_written);
	metric(b, "rankdb_write_batches_total", "counter", "Write batches acknowledged.",
	       st.batches_written);
	metric(b, "rankdb_write_records_total", "counter", "JSON records acknowledged.",
	       atomic_load(&c->write_records));
	rdb_buf_puts(b, "# HELP rankdb_write_rejected_total Write requests refused, by reason.\n"
			"# TYPE rankdb_write_rejected_total counter\n");
	rdb_buf_printf(b, "rankdb_write_rejected_total{reason=\"invalid\"} %llu\n",
		       (unsigned long long)atomic_load(&c->write_rejected_invalid));
	rdb_buf_printf(b, "rankdb_write_rejected_total{reason=\"busy\"} %llu\n",
		       (unsigned long long)atomic_load(&c->write_rejected_busy));
	rdb_buf_printf(b, "rankdb_write_rejected_total{reason=\"series_limit\"} %llu\n",
		       (unsigned long long)atomic_load(&c->write_rejected_limit));
	rdb_buf_printf(b, "rankdb_write_rejected_total{reason=\"too_large\"} %llu\n",
		       (unsigned long long)atomic_load(&c->write_rejected_too_large));
	rdb_buf_printf(b, "rankdb_write_rejected_total{reason=\"disk_full\"} %llu\n",
		       (unsigned long long)atomic_load(&c->write_rejected_nospace));
	rdb_buf_printf(b, "rankdb_write_rejected_total{reason=\"error\"} %llu\n",
		       (unsigned long long)atomic_load(&c->write_failed));
	metrics_subscribers(b, ctx->pipe);
	metric(b, "rankdb_series", "gauge", "Series ever created.", st.series);
	metric(b, "rankdb_head_points", "gauge", "Points in the in-memory head.", st.head_points);
	metric(b, "rankdb_head_bytes", "gauge", "Memory held by the head.", st.head_bytes);
	metric(b, "rankdb_chunks_sealed_total", "counter", "Chunks written.", st.chunks_sealed);
	metric(b, "rankdb_points_sealed_total", "counter", "Points written into chunks.",
	       st.points_sealed);
	metric(b, "rankdb_chunk_bytes_written_total", "counter", "Chunk bytes written.",
	       st.chunk_bytes_written);
	metric(b, "rankdb_checkpoints_total", "counter", "Checkpoints completed.", st.checkpoints);
	metric(b, "rankdb_wal_records_total", "counter", "WAL records written.", st.wal.records);
	metric(b, "rankdb_wal_bytes_total", "counter", "WAL bytes written.", st.wal.bytes);
	metric(b, "rankdb_wal_syncs_total", "counter", "WAL fdatasync calls (group commits).",
	       st.wal.syncs);
	metric(b, "rankdb_wal_errors_total", "counter", "WAL write or sync failures.",
	       st.wal.errors);
	metric(b, "rankdb_wal_group_records_max", "gauge",
	       "Most WAL records (write requests) one group commit (write + fdatasync) covered.",
	       st.wal.group_max);
	rdb_buf_printf(b,
		       "# HELP rankdb_wal_records_per_sync WAL records per fdatasync since start "
		       "(requests one sync acknowledged, on average).\n"
		       "# TYPE rankdb_wal_records_per_sync gauge\n"
		       "rankdb_wal_records_per_sync %.3f\n",
		       st.wal.syncs ? (double)st.wal.records / (double)st.wal.syncs : 0.0);
	metric(b, "rankdb_wal_damaged_ranges", "gauge",
	       "Damaged WAL ranges (not a torn tail) the recovery at this start skipped.",
	       st.wal_damaged_ranges);
	metric(b, "rankdb_wal_undefined_records", "gauge",
	       "WAL records the recovery at this start skipped because they name a series id "
	       "no earlier record of their file defines (its definition was in damaged bytes).",
	       st.wal_undefined_records);
	metric(b, "rankdb_wal_damage_kept_files", "gauge",
	       "Files of damaged WAL bytes kept in quarantine/ (remove them once inspected).",
	       st.wal_kept_files);
	metric(b, "rankdb_wal_damage_kept_bytes", "gauge", "Bytes of those files.",
	       st.wal_kept_bytes);
	metric(
	    b, "rankdb_index_damaged_reads_total", "counter",
	    "Reads that met a chunk or event chunk index entry failing its checksum (answered by "
	    "decoding the chunk, or failed).",
	    st.index_damaged);
	metric(b, "rankdb_compactions_refused_total", "counter",
	       "Compaction passes (background, admin, recovery) refused because the quarantine "
	       "table is not empty (run rankctl rebuild-index).",
	       st.compactions_refused);
	struct sto_jobmeta_stats jm;
	sto_jobmeta_stats(ctx->sto, &jm);
	metric(b, "rankdb_job_meta_damaged_documents", "gauge",
	       "Job metadata documents that failed their checksum at this start.",
	       jm.damaged_at_open);
	metric(b, "rankdb_job_meta_damaged_reads_total", "counter",
	       "Reads of a job metadata document refused: it failed its checksum.",
	       jm.damaged_reads);
	rdb_buf_printf(b,
		       "# HELP rankdb_wal_sync_seconds_total Time in WAL write+fdatasync.\n"
		       "# TYPE rankdb_wal_sync_seconds_total counter\n"
		       "rankdb_wal_sync_seconds_total %.6f\n"
		       "# HELP rankdb_wal_sync_seconds_max Longest WAL write+fdatasync.\n"
		       "# TYPE rankdb_wal_sync_seconds_max gauge\n"
		       "rankdb_wal_sync_seconds_max %.6f\n",
		       (double)st.wal.sync_ns_total / 1e9, (double)st.wal.sync_ns_max / 1e9);
	metric(b, "rankdb_queries_total", "counter", "Queries answered.", atomic_load(&c->queries));
	metric(b, "rankdb_query_errors_total", "counter", "Queries that failed.",
	       atomic_load(&c->query_errors));
	rdb_buf_printf(b,
		       "# HELP rankdb_query_seconds_total Time spent answering queries.\n"
		       "# TYPE rankdb_query_seconds_total counter\n"
		       "rankdb_query_seconds_total %.6f\n",
		       (double)atomic_load(&c->query_ns_total) / 1e9);
	metrics_ingest(b, c);
	srv_detect_metrics(ctx, b);
	srv_auth_metrics(b);
	metric(b, "rankdb_http_connections", "gauge", "Open HTTP connections.",
	       atomic_load(&c->http_connections));
	metric(b, "rankdb_http_parked", "gauge",
	       "Write requests parked (no thread held) until their WAL sync is done.",
	       atomic_load(&c->http_parked));
	metric(b, "rankdb_http_parked_max", "gauge", "Most write requests parked at once.",
	       atomic_load(&c->http_parked_max));
	metric(b, "rankdb_http_parked_total", "counter", "Write requests ever parked.",
	       atomic_load(&c->http_parked_total));
	metric(b, "rankdb_http_parked_refused_total", "counter",
	       "Write requests answered 503 because http_max_parked were already parked.",
	       atomic_load(&c->http_refused_parked));
	metric(b, "rankdb_http_connections_shed_total", "counter",
	       "Connections closed to make room past http_max_connections (the one that waited "
	       "longest for a request).",
	       atomic_load(&c->http_shed_idle));
	metric(b, "rankdb_http_connections_refused_total", "counter",
	       "Requests answered 503 because the connection was past http_max_connections.",
	       atomic_load(&c->http_refused_limit));
	metric(b, "rankdb_http_connections_timed_out_total", "counter",
	       "Connections closed because their request was not whole by its deadline "
	       "(http_timeout_s, http_min_body_rate_bytes).",
	       atomic_load(&c->http_timed_out));
	metric(b, "rankdb_http_body_budget_refused_total", "counter",
	       "Requests answered 503 because max_body_bytes_in_flight was reached.",
	       atomic_load(&c->http_refused_body_budget));
	metric(b, "rankdb_http_body_bytes", "gauge",
	       "Request-body bytes reserved by all connections (max_body_bytes_in_flight).",
	       atomic_load(&c->http_body_bytes));
	rdb_buf_puts(b, "# HELP rankdb_http_responses_total HTTP responses by status class.\n"
			"# TYPE rankdb_http_responses_total counter\n");
	for (int i = 1; i <= 5; i++)
		rdb_buf_printf(b, "rankdb_http_responses_total{code=\"%dxx\"} %llu\n", i,
			       (unsigned long long)atomic_load(&c->requests[i]));
	resp->status = 200;
	resp->content_type = "text/plain; version=0.0.4";
}

/* ---- routes ------------------------------------------------------------------------ */

static void h_health(struct srv_req *req, struct srv_resp *resp, const struct srv_route *r)
{
	(void)req;
	(void)r;
	resp->status = 200;
	rdb_buf_puts(&resp->body, "{\"status\":\"ok\"}");
}

static const struct srv_route core_rows[] = {
    {SRV_READ_METHODS, "/healthz", SRV_SCOPE_PUBLIC, h_health, 0, 0, NULL, NULL, NULL},
    {SRV_READ_METHODS, "/metrics", SRV_SCOPE_PUBLIC, h_metrics, 0, 0, NULL, NULL, NULL},
    {SRV_POST, "/api/v1/write", SRV_SCOPE_WRITE, h_write, 0, 0, NULL, NULL, NULL},
};
const struct srv_route_table srv_core_routes = {core_rows,
						sizeof(core_rows) / sizeof(core_rows[0])};

/* After the query module's rows: /api/v1/jobs/{name}/meta is theirs. */
static const struct srv_route catalog_rows[] = {
    {SRV_READ_METHODS, "/api/v1/query/range", SRV_SCOPE_READ, h_range, 0, SRV_ROUTE_QUERY, NULL,
     NULL, NULL},
    {SRV_READ_METHODS, "/api/v1/jobs/?", SRV_SCOPE_READ, h_jobs, 0, SRV_ROUTE_QUERY, NULL, NULL,
     NULL},
    {SRV_READ_METHODS, "/api/v1/jobs/{job}/metrics", SRV_SCOPE_READ, handle_job, JOB_METRICS,
     SRV_ROUTE_QUERY, NULL, NULL, NULL},
    {SRV_READ_METHODS, "/api/v1/jobs/{job}/ranks", SRV_SCOPE_READ, handle_job, JOB_RANKS,
     SRV_ROUTE_QUERY, NULL, NULL, NULL},
    {SRV_READ_METHODS, "/api/v1/jobs/{job}/*", SRV_SCOPE_READ, NULL, 0, 0, NULL,
     "no such endpoint: %.200s", NULL},
    {SRV_READ_METHODS, "/api/v1/jobs/*", SRV_SCOPE_READ, NULL, 0, 0, NULL,
     "no such endpoint: %.200s (try /api/v1/jobs/<job>/metrics or /ranks)", NULL},
};
const struct srv_route_table srv_catalog_routes = {catalog_rows,
						   sizeof(catalog_rows) / sizeof(catalog_rows[0])};

bool srv_req_add_arg(struct srv_req *req, const char *key, size_t key_len, const char *val,
		     size_t val_len)
{
	if (strlen(key) != key_len || strlen(val) != val_len) {
		req->args_nul = true;
		return false;
	}
	if (req->nargs == SRV_MAX_ARGS) {
		req->args_overflow = true;
		return false;
	}
	req->args[req->nargs].key = key;
	req->args[req->nargs].val = val;
	req->nargs++;
	return true;
}

void srv_dispatch(struct srv_req *req, struct srv_resp *resp)
{
	static const struct srv_route_table *const tables[] = {
	    &srv_core_routes,	 &srv_ingest_routes, &srv_grafana_routes, &srv_admin_routes,
	    &srv_events_routes,	 &srv_detect_routes, &srv_ui_routes,	  &srv_query_routes,
	    &srv_catalog_routes, &srv_influx_routes};
	if (req->args_nul) {
		srv_error(resp, 400,
			  "a query parameter holds a NUL byte (%%00); refused rather "
			  "than cut there");
		return;
	}
	srv_route_dispatch(tables, sizeof(tables) / sizeof(tables[0]), req, resp);
}
