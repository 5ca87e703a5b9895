/* ingest_routes.c - InfluxDB-compatible line-protocol endpoints, so that the
 * InfluxDB client libraries and Telegraf write to rankdb unchanged:
 *
 *   POST /write          InfluxDB 1.x: db, rp, u, p, consistency (accepted,
 *                        ignored), precision = n|ns|u|us|ms|s|m|h, batch_id
 *   POST /api/v2/write   InfluxDB 2.x: org, orgID, bucket (accepted, ignored),
 *                        precision = ns|us|ms|s, batch_id
 *
 * Any other query parameter is a 400. The body is line protocol
 * (ingest/lp.h has the mapping onto job / rank / metric), plain or
 * Content-Encoding: gzip; the inflated body is bounded by max_body_bytes
 * (413 past it, so a gzip bomb costs at most that much memory and work).
 * A request becomes one pipeline write (points and events, one WAL record),
 * with the client batch id of header X-Rankdb-Batch-Id or ?batch_id= so a
 * retried request is stored once.
 *
 * Answers, as InfluxDB's own (clients branch on them):
 *   204            every line stored (or a duplicate batch id: stored before)
 *   400            some lines bad: the good ones are stored, the body names
 *                  the first bad lines ("partial write: ..."), with
 *                  lines_ok / lines_bad / errors[]; every line bad: nothing
 *                  stored ("unable to parse: ...")
 *   413            inflated body over max_body_bytes, or more points than a
 *                  batch takes
 *   415            a Content-Encoding other than gzip / identity
 *   422            series limit; 503 + Retry-After saturated; 500 I/O failure
 * The error body is {"error": "..."} on /write and {"code": "...",
 * "message": "..."} on /api/v2/write, plus the fields above.
 *
 * Bodies are read through srv_req_body (server/body.c: gzip) and stored
 * through the ingest pipeline (ingest/pipeline.h), whose outcome gives the
 * status. Threading: runs on the HTTP worker
 * threads; each request's memory (struct lp_req) is released in one place
 * (lp_req_free: kept for the thread's next request, or freed).
 */
#include "server/route.h"
#include "server/srv.h"
#include "server/auth.h"
#include "common/rdb_err.h"
#include "common/rdb_log.h"
#include "common/rdb_tcache.h"
#include "common/rdb_time.h"
#include "ingest/lp.h"
#include "ingest/protocol.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MSG_BAD_LINES 5 /* bad lines named in the message text */

enum api { API_V1, API_V2 };

/* One request's state; lp_req_free releases all of it. res and why come
 * last: lp_req_new zeroes only what comes before them (res.errors alone is
 * 5 KiB, read up to res.nerrors; why is a C string written before read). */
struct lp_req {
	struct srv_ctx *ctx;
	enum api api;
	int64_t precision_ns;
	const char *batch_id;
	size_t batch_id_len;
	const char *body; /* the request body, or inflated */
	size_t len;
	struct rdb_buf inflated;
	struct mdl_batch *b;
	struct mdl_events *ev;
	struct ing_parse_result res;
	char why[512];
};

/* A worker keeps up to LP_REQ_CACHE_N freed request states (~6.5 KiB
 * each) for its next requests: no malloc/free pair per write. */
#define LP_REQ_CACHE_N 16
static struct rdb_tcache lp_req_cache = RDB_TCACHE_INIT(LP_REQ_CACHE_N, free);

static struct lp_req *lp_req_new(void)
{
	struct lp_req *r = rdb_tcache_take(&lp_req_cache);
	if (!r)
		r = malloc(sizeof(*r));
	if (!r)
		return NULL;
	memset(r, 0, offsetof(struct lp_req, res));
	memset(&r->res, 0, offsetof(struct ing_parse_result, errors));
	r->why[0] = 0;
	return r;
}

static void lp_req_free(struct lp_req *r)
{
	if (!r)
		return;
	rdb_buf_free(&r->inflated);
	mdl_batch_give(r->b);
	mdl_events_give(r->ev);
	if (!rdb_tcache_give(&lp_req_cache, r))
		free(r);
}

/* ---- answers ---------------------------------------------------------------- */

/* v2 "code" of a status, as InfluxDB 2.x spells it. */
static const char *v2_code(int status)
{
	switch (status) {
	case 401:
		return "unauthorized";
	case 403:
		return "forbidden";
	case 405:
		return "method not allowed";
	case 413:
		return "request too large";
	case 415:
		return "unsupported media type";
	case 422:
		return "unprocessable entity";
	case 429:
		return "too many requests";
	case 500:
		return "internal error";
	case 503:
		return "unavailable";
	default:
		return "invalid";
	}
}

/* Starts an error body ({"error":msg or {"code":..,"message":msg) without
 * the closing brace, so callers can add fields. */
static void open_error(struct srv_resp *resp, enum api api, int status, const char *msg)
{
	struct rdb_buf *b = &resp->body;
	resp->status = status;
	b->len = 0;
	if (api == API_V2) {
		rdb_buf_printf(b, "{\"code\":\"%s\",\"message\":", v2_code(status));
	} else {
		rdb_buf_puts(b, "{\"error\":");
	}
	rdb_buf_json_str(b, msg, strlen(msg));
}

static void lp_error(struct srv_resp *resp, enum api api, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void lp_error(struct srv_resp *resp, enum api api, int status, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	open_error(resp, api, status, msg);
	if (rdb_buf_putc(&resp->body, '}'))
		resp->body.len = 0;
}

/* "line 3: reason; line 7: reason" for the first bad lines. */
static void bad_lines_text(const struct ing_parse_result *res, char *out, size_t outlen)
{
	size_t used = 0;
	out[0] = 0;
	for (size_t i = 0; i < res->nerrors && i < MSG_BAD_LINES && used < outlen; i++) {
		int n = snprintf(out + used, outlen - used, "%sline %ld: %s", i ? "; " : "",
				 res->errors[i].line, res->errors[i].msg);
		used += n > 0 ? (size_t)n : 0;
	}
	if (res->records_bad > MSG_BAD_LINES && used < outlen)
		snprintf(out + used, outlen - used, "; ... (%zu bad lines in all)",
			 res->records_bad);
}

/* 400 for bad lines: partial write (good lines stored) or nothing stored. */
static void bad_lines_answer(struct srv_resp *resp, const struct lp_req *r, bool duplicate)
{
	const struct ing_parse_result *res = &r->res;
	char lines[3000], msg[3500];
	bad_lines_text(res, lines, sizeof(lines));
	if (res->records_ok)
		snprintf(msg, sizeof(msg),
			 "partial write: %zu of %zu lines bad and not stored, "
			 "the other %zu stored: %s",
			 res->records_bad, res->records_ok + res->records_bad, res->records_ok,
			 lines);
	else
		snprintf(msg, sizeof(msg), "unable to parse: every line is bad, nothing stored: %s",
			 lines);
	open_error(resp, r->api, 400, msg);
	struct rdb_buf *b = &resp->body;
	rdb_buf_printf(b, ",\"lines_ok\":%zu,\"lines_bad\":%zu,\"errors\":[", res->records_ok,
		       res->records_bad);
	for (size_t i = 0; i < res->nerrors; i++) {
		const struct ing_error *e = &res->errors[i];
		rdb_buf_printf(b, "%s{\"line\":%ld,\"field\":", i ? "," : "", e->line);
		rdb_buf_json_str(b, e->field, strlen(e->field));
		rdb_buf_puts(b, ",\"message\":");
		rdb_buf_json_str(b, e->msg, strlen(e->msg));
		rdb_buf_putc(b, '}');
	}
	if (rdb_buf_printf(b, "]%s}", duplicate ? ",\"duplicate\":true" : ""))
		b->len = 0;
	static struct rdb_log_ratelimit rl;
	rdb_log_limited(&rl, 10, RDB_LOG_INFO, "ingest",
			"line protocol: %zu bad lines (%zu "
			"stored), first: line %ld: %s",
			res->records_bad, res->records_ok, res->nerrors ? res->errors[0].line : 0L,
			res->nerrors ? res->errors[0].msg : "");
}

/* Translates a refused write into the answer; nothing was stored. */
static void store_failed(struct srv_ctx *ctx, struct srv_resp *resp, enum api api,
			 const struct ing_outcome *o)
{
	srv_count_outcome(ctx, o);
	lp_error(resp, api, o->status, "%s", o->msg);
	resp->retry_after = o->retry_after;
}

/* ---- parameters and body -------------------------------------------------------- */

static bool in_list(const char *s, const char *const *list)
{
	for (; *list; list++) {
		if (strcmp(s, *list) == 0)
			return true;
	}
	return false;
}

/* Checks the query parameters of the endpoint; sets the precision. */
static int parse_params(const struct srv_req *req, struct lp_req *r)
{
	static const char *const v1_keys[] = {"db",	     "rp",	  "u",	      "p",
					      "consistency", "precision", "batch_id", NULL};
	static const char *const v2_keys[] = {"org",	   "orgID",    "bucket",
					      "precision", "batch_id", NULL};
	static const char *const v1_prec[] = {"n", "ns", "u", "us", "ms", "s", "m", "h", NULL};
	static const char *const v2_prec[] = {"ns", "us", "ms", "s", NULL};
	const char *const *keys = r->api == API_V1 ? v1_keys : v2_keys;
	const char *const *precs = r->api == API_V1 ? v1_prec : v2_prec;
	r->precision_ns = 1;
	if (req->args_overflow) {
		snprintf(r->why, sizeof(r->why), "too many query parameters (at most %d)",
			 SRV_MAX_ARGS);
		return RDB_EINVAL;
	}
	for (int i = 0; i < req->nargs; i++) {
		const char *k = req->args[i].key, *v = req->args[i].val;
		if (!in_list(k, keys)) {
			snprintf(r->why, sizeof(r->why), "unknown parameter '%.64s' (known: %s)", k,
				 r->api == API_V1 ? "db, rp, u, p, consistency, precision, batch_id"
						  : "org, orgID, bucket, precision, batch_id");
			return RDB_EINVAL;
		}
		if (strcmp(k, "precision") != 0 || (*v == 0 && r->api == API_V1))
			continue;
		if (!in_list(v, precs) || ing_lp_precision(v, &r->precision_ns)) {
			snprintf(r->why, sizeof(r->why), "precision must be one of %s, got '%.32s'",
				 r->api == API_V1 ? "n, ns, u, us, ms, s, m, h" : "ns, us, ms, s",
				 v);
			return RDB_EINVAL;
		}
	}
	return srv_req_batch_id(req, &r->batch_id, &r->batch_id_len, r->why, sizeof(r->why));
}

/* Sets r->body: the request body, or its inflated form. Answers on failure. */
static int take_body(const struct srv_req *req, struct lp_req *r, struct srv_resp *resp)
{
	int status = 0;
	const uint8_t *body;
	int rc = srv_req_body(req, &r->inflated, &body, &r->len, &status, r->why, sizeof(r->why));
	if (rc) {
		lp_error(resp, r->api, status, "%s", r->why);
		return rc;
	}
	r->body = (const char *)body;
	return 0;
}

/* ---- the write ------------------------------------------------------------------ */

/* Parses r->body into r->b / r->ev. Answers on failure. */
static int parse_body(struct srv_ctx *ctx, struct lp_req *r, struct srv_resp *resp)
{
	const struct srv_config *cfg = ctx->cfg;
	struct ing_parse_opts po = {.lim = &ctx->limits};
	struct ing_lp_options *o = &po.lp;
	ing_lp_options_default(o);
	o->precision_ns = r->precision_ns;
	o->default_ts_ns = rdb_now_ns();
	o->default_job = cfg->lp_default_job[0] ? cfg->lp_default_job : NULL;
	o->max_line_bytes = cfg->max_line_bytes;
	o->max_fields_per_line = cfg->max_fields_per_line;
	o->max_tags_per_line = cfg->max_tags_per_line;
	/* A point takes at least 4 body bytes ("a=1,"), an event at least 8, and
	 * an event's stored text at most 6 bytes per body byte (JSON escapes). */
	size_t max_points = r->len / 2 + 64;
	int rc = mdl_batch_take(max_points, max_points, &r->b);
	/* A point of a typical record takes 20-40 body bytes: room for that
	 * many up front, not a doubling (realloc + copy) every so often. */
	if (rc == 0)
		rc = mdl_batch_reserve(r->b, r->len / 20 + 16);
	if (rc == 0)
		rc = mdl_events_take(r->len / 4 + 16, 6 * r->len + 65536, &r->ev);
	if (rc == 0)
		rc =
		    ing_proto_lp.parse((const uint8_t *)r->body, r->len, &po, r->b, r->ev, &r->res);
	if (rc == RDB_EINVAL || rc == RDB_ENOTFOUND)
		rc = 0; /* bad or blank lines: answered from r->res */
	if (rc == RDB_ELIMIT) {
		atomic_fetch_add(&ctx->counters.write_rejected_too_large, 1);
		lp_error(resp, r->api, 413,
			 "the body holds more points or events than one request "
			 "may carry; nothing of it was stored, split it");
	} else if (rc) {
		atomic_fetch_add(&ctx->counters.write_failed, 1);
		lp_error(resp, r->api, 500, "parsing failed: %s", rdb_strerror(rc));
	}
	return rc;
}

/* Answers a submitted write from its outcome (now, or when a parked
 * request resumes: srv_submit) and frees r. */
static void write_answer(void *state, const struct ing_outcome *o, struct srv_resp *resp)
{
	struct lp_req *r = state;
	struct srv_counters *c = &r->ctx->counters;
	const struct ing_parse_result *res = &r->res;
	if (o->rc) {
		store_failed(r->ctx, resp, r->api, o);
	} else {
		atomic_fetch_add(&c->write_records, res->records_ok);
		atomic_fetch_add(&c->lp_lines_ok, res->records_ok);
		atomic_fetch_add(&c->lp_string_fields_skipped, res->string_fields_skipped);
		if (res->records_bad)
			bad_lines_answer(resp, r, o->duplicate);
		else
			resp->status = 204;
	}
	lp_req_free(r);
}

/* Stores r's lines and answers; r is freed (now, or by the parked
 * request's answer). */
static void write_lines(struct srv_req *req, struct lp_req *r, struct srv_resp *resp)
{
	struct srv_counters *c = &r->ctx->counters;
	const struct ing_parse_result *res = &r->res;
	struct ing_write w = {.points = r->b,
			      .events = r->ev,
			      .batch_id = r->batch_id,
			      .batch_id_len = r->batch_id_len,
			      .source = ING_SRC_HTTP_LP};
	struct ing_outcome o;
	atomic_fetch_add(&c->lp_lines_bad, res->records_bad);
	if (res->points + res->events == 0) {
		if (res->records_bad) {
			atomic_fetch_add(&c->write_rejected_invalid, 1);
			bad_lines_answer(resp, r, false);
		} else {
			resp->status = 204; /* nothing but blank and comment lines */
		}
		lp_req_free(r);
		return;
	}
	if (srv_submit(req, &w, &o, write_answer, r) == SRV_PARKED)
		return;
	write_answer(r, &o, resp);
}

static void handle_lp_write(struct srv_req *req, struct srv_resp *resp, enum api api)
{
	struct srv_ctx *ctx = req->ctx;
	atomic_fetch_add(&ctx->counters.write_requests, 1);
	struct lp_req *r = lp_req_new();
	if (!r) {
		lp_error(resp, api, 500, "out of memory");
		return;
	}
	r->ctx = ctx;
	r->api = api;
	if (parse_params(req, r)) {
		atomic_fetch_add(&ctx->counters.write_rejected_invalid, 1);
		lp_error(resp, api, 400, "%s", r->why);
		goto out;
	}
	if (take_body(req, r, resp)) {
		if (resp->status == 413)
			atomic_fetch_add(&ctx->counters.write_rejected_too_large, 1);
		else
			atomic_fetch_add(&ctx->counters.write_rejected_invalid, 1);
		goto out;
	}
	if (parse_body(ctx, r, resp) != 0)
		goto out;
	if (!srv_auth_write_ok(req, r->b, r->ev)) { /* a job-limited token: every record's job */
		lp_error(resp, api, 403, "forbidden");
		goto out;
	}
	write_lines(req, r, resp); /* frees r */
	return;
out:
	lp_req_free(r);
}

static void h_write(struct srv_req *req, struct srv_resp *resp, const struct srv_route *r)
{
	handle_lp_write(req, resp, (enum api)r->arg);
}

/* A refused method in the body shape of the route's API. */
static void refuse(struct srv_resp *resp, const struct srv_route *r, int status, const char *msg)
{
	lp_error(resp, (enum api)r->arg, status, "%s", msg);
}

static const struct srv_route rows[] = {
    {SRV_POST, "/write", SRV_SCOPE_WRITE, h_write, API_V1, 0, NULL, NULL, refuse},
    {SRV_POST, "/api/v2/write", SRV_SCOPE_WRITE, h_write, API_V2, 0, NULL, NULL, refuse},
};
const struct srv_route_table srv_ingest_routes = {rows, sizeof(rows) / sizeof(rows[0])};
