/* events_routes.c - routes of the log and span queries:
 *
 *   GET /api/v1/logs          filtered logs, newest first, paginated by cursor
 *   GET /api/v1/logs/around   the logs of one rank around one step, oldest first
 *   GET /api/v1/spans         the per-rank phase timeline of a step or step range
 *
 * Parameters come from one table of names; each endpoint accepts a subset
 * (plus field.KEY=VALUE on /logs), anything else is a 400 naming it. The
 * work is done by query/events.h, whose typed results server/events_json.c
 * writes as JSON; error codes become statuses there (400 bad cursor, 404
 * unknown job, 422 too many events, 413 response too large, 500 corrupt
 * data). The rows are in srv_events_routes (route.h).
 */
#include "common/rdb_err.h"
#include "common/rdb_time.h"
#include "query/events.h"
#include "server/json_out.h"
#include "server/route.h"
#include "server/srv.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum endpoint { EP_LOGS, EP_AROUND, EP_SPANS };

enum param {
	P_JOB,
	P_RANK,
	P_LEVEL,
	P_FROM,
	P_TO,
	P_STEP_FROM,
	P_STEP_TO,
	P_STEP,
	P_Q,
	P_ATTEMPT,
	P_LIMIT,
	P_CURSOR,
	P_BEFORE,
	P_AFTER,
	P_WINDOW,
	P_COUNT
};

static const char *const param_names[P_COUNT] = {
    "job", "rank",    "level", "from",	 "to",	   "step_from", "step_to",     "step",
    "q",   "attempt", "limit", "cursor", "before", "after",	"window_steps"};

#define BIT(p) (1u << (p))
static const uint32_t allowed[] = {
    [EP_LOGS] = BIT(P_JOB) | BIT(P_RANK) | BIT(P_LEVEL) | BIT(P_FROM) | BIT(P_TO) |
		BIT(P_STEP_FROM) | BIT(P_STEP_TO) | BIT(P_Q) | BIT(P_ATTEMPT) | BIT(P_LIMIT) |
		BIT(P_CURSOR),
    [EP_AROUND] = BIT(P_JOB) | BIT(P_RANK) | BIT(P_LEVEL) | BIT(P_STEP) | BIT(P_BEFORE) |
		  BIT(P_AFTER) | BIT(P_WINDOW),
    [EP_SPANS] =
	BIT(P_JOB) | BIT(P_RANK) | BIT(P_STEP) | BIT(P_STEP_FROM) | BIT(P_STEP_TO) | BIT(P_ATTEMPT),
};

#define MAX_RANKS      4096
#define MAX_FIELDS     16
#define AROUND_DEFAULT 50

struct evparams {
	uint32_t seen; /* BIT(param) of the parameters given */
	const char *job, *text, *cursor;
	uint32_t ranks[MAX_RANKS];
	size_t nranks;
	uint8_t min_level;
	int64_t num[P_COUNT]; /* numeric parameters, by enum param */
	const char *fkeys[MAX_FIELDS], *fvals[MAX_FIELDS];
	size_t nfields;
	char *owned[SRV_MAX_ARGS];
	int nowned;
	char why[600];
};

static int bad(struct evparams *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int bad(struct evparams *p, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->why, sizeof(p->why), fmt, ap);
	va_end(ap);
	return RDB_EINVAL;
}

static int add_ranks(struct evparams *p, const char *val)
{
	char *copy = srv_arg_copy(val, p->owned, &p->nowned);
	if (!copy)
		return bad(p, "out of memory");
	const char *badtok = NULL;
	int rc = srv_parse_rank_list(copy, p->ranks, MAX_RANKS, &p->nranks, &badtok);
	if (rc == RDB_EINVAL)
		return bad(p, "parameter rank: a rank is an integer >= 0 or \"job\", got '%.32s'",
			   badtok);
	if (rc == RDB_ELIMIT)
		return bad(p, "parameter rank: at most %d ranks per query", MAX_RANKS);
	return 0;
}

static int parse_q(struct evparams *p, const char *val)
{
	size_t words = 0;
	for (size_t i = 0; val[i]; i++) {
		bool w = isalnum((unsigned char)val[i]) || val[i] == '_';
		bool prev = i > 0 && (isalnum((unsigned char)val[i - 1]) || val[i - 1] == '_');
		words += w && !prev;
	}
	if (words > QRY_TEXT_WORDS_MAX)
		return bad(p, "parameter q: at most %u words, got %zu", QRY_TEXT_WORDS_MAX, words);
	p->text = words ? val : NULL;
	return 0;
}

static int parse_field(struct evparams *p, const char *key, const char *val)
{
	const char *name = key + 6; /* after "field." */
	if (!*name || strlen(name) > 256)
		return bad(p,
			   "parameter %.64s: give field.<key>=<value> with a key of 1..256 "
			   "bytes",
			   key);
	if (p->nfields == MAX_FIELDS)
		return bad(p, "at most %d field.<key> parameters", MAX_FIELDS);
	p->fkeys[p->nfields] = name;
	p->fvals[p->nfields++] = val;
	return 0;
}

static int parse_number(struct evparams *p, enum param k, const char *val)
{
	int64_t v, min = INT64_MIN, max = INT64_MAX;
	switch (k) {
	case P_STEP_FROM:
	case P_STEP_TO:
	case P_STEP:
	case P_WINDOW:
	case P_BEFORE:
	case P_AFTER:
		min = 0;
		break;
	case P_ATTEMPT:
		min = 0;
		max = UINT32_MAX;
		break;
	case P_LIMIT:
		min = 1;
		max = QRY_LOGS_LIMIT_MAX;
		break;
	default:
		break;
	}
	if (k == P_BEFORE || k == P_AFTER)
		max = QRY_LOGS_LIMIT_MAX;
	if (k == P_FROM || k == P_TO) {
		if (srv_parse_time_ns(val, rdb_now_ns(), &v))
			return bad(p, "parameter %s must be a time (%s), got '%.64s'",
				   param_names[k], SRV_TIME_HELP, val);
	} else if (srv_parse_i64(val, &v) || v < min || v > max) {
		char range[64] = "";
		if (max != INT64_MAX)
			snprintf(range, sizeof(range), " in %lld..%lld", (long long)min,
				 (long long)max);
		else if (min == 0)
			snprintf(range, sizeof(range), " >= 0");
		return bad(p, "parameter %s must be an integer%s, got '%.64s'", param_names[k],
			   range, val);
	}
	p->num[k] = v;
	return 0;
}

static int parse_arg(struct evparams *p, enum endpoint ep, enum param k, const char *val)
{
	uint8_t level;
	switch (k) {
	case P_JOB:
		p->job = val;
		return 0;
	case P_RANK:
		return add_ranks(p, val);
	case P_Q:
		return parse_q(p, val);
	case P_CURSOR:
		p->cursor = val;
		return 0;
	case P_LEVEL:
		if (mdl_level_parse(val, strlen(val), &level))
			return bad(p,
				   "parameter level must be debug, info, warn, error or fatal, "
				   "got '%.32s'",
				   val);
		p->min_level = level;
		return 0;
	case P_ATTEMPT:
		if (ep == EP_SPANS && strcmp(val, "latest") == 0)
			return 0;
		return parse_number(p, k, val);
	default:
		return parse_number(p, k, val);
	}
}

static void known_list(enum endpoint ep, char *buf, size_t len)
{
	size_t off = 0;
	buf[0] = 0;
	for (int k = 0; k < P_COUNT && off < len; k++)
		if (allowed[ep] & BIT(k))
			off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? ", " : "",
						param_names[k]);
	if (ep == EP_LOGS && off < len)
		snprintf(buf + off, len - off, ", field.<key>");
}

static int check_logs(struct evparams *p)
{
	if (p->num[P_FROM] > p->num[P_TO] || p->num[P_STEP_FROM] > p->num[P_STEP_TO])
		return bad(p, "empty range: from must be <= to and step_from <= step_to");
	return 0;
}

static int check_around(struct evparams *p)
{
	if (p->nranks != 1)
		return bad(p, "parameter rank is required: exactly one rank");
	if (!(p->seen & BIT(P_STEP)))
		return bad(p, "parameter step is required");
	if ((p->seen & BIT(P_WINDOW)) && (p->seen & (BIT(P_BEFORE) | BIT(P_AFTER))))
		return bad(p, "parameter window_steps: give window_steps (step rule) or "
			      "before/after (time rule), not both");
	return 0;
}

static int check_spans(struct evparams *p)
{
	bool range = p->seen & (BIT(P_STEP_FROM) | BIT(P_STEP_TO));
	if ((p->seen & BIT(P_STEP)) && range)
		return bad(p, "parameter step: give step, or step_from/step_to, not both");
	if (!(p->seen & BIT(P_STEP)) && !range)
		return bad(p, "parameter step (or step_from/step_to) is required");
	if (p->seen & BIT(P_STEP))
		p->num[P_STEP_FROM] = p->num[P_STEP_TO] = p->num[P_STEP];
	if (p->num[P_STEP_FROM] > p->num[P_STEP_TO])
		return bad(p, "empty range: step_from must be <= step_to");
	return 0;
}

static int parse_params(const struct srv_req *req, enum endpoint ep, struct evparams *p)
{
	char known[400];
	p->num[P_FROM] = p->num[P_STEP_FROM] = INT64_MIN;
	p->num[P_TO] = p->num[P_STEP_TO] = INT64_MAX;
	p->num[P_ATTEMPT] = -1;
	p->num[P_LIMIT] = QRY_LOGS_LIMIT_DEFAULT;
	p->num[P_BEFORE] = p->num[P_AFTER] = AROUND_DEFAULT;
	p->num[P_WINDOW] = -1;
	if (req->args_overflow)
		return bad(p, "too many query parameters (at most %d)", SRV_MAX_ARGS);
	for (int i = 0; i < req->nargs; i++) {
		const char *key = req->args[i].key;
		int k = 0, rc;
		while (k < P_COUNT && strcmp(param_names[k], key))
			k++;
		if (ep == EP_LOGS && k == P_COUNT && strncmp(key, "field.", 6) == 0) {
			rc = parse_field(p, key, req->args[i].val);
		} else if (k == P_COUNT || !(allowed[ep] & BIT(k))) {
			known_list(ep, known, sizeof(known));
			return bad(p, "unknown parameter '%.64s' (known: %s)", key, known);
		} else {
			p->seen |= BIT(k);
			rc = parse_arg(p, ep, (enum param)k, req->args[i].val);
		}
		if (rc)
			return rc;
	}
	if (!p->job || !mdl_job_valid(p->job, strlen(p->job)))
		return bad(p, "parameter job is required: a job id ([A-Za-z0-9._-]{1,128})");
	if (ep == EP_LOGS)
		return check_logs(p);
	return ep == EP_AROUND ? check_around(p) : check_spans(p);
}

static size_t scan_bound(const struct srv_ctx *ctx, size_t extra)
{
	uint64_t b = (uint64_t)QRY_EV_SCAN_MAX + extra;
	return (size_t)(b < ctx->cfg->max_query_points ? b : ctx->cfg->max_query_points);
}

static int run_logs(struct srv_ctx *ctx, const struct evparams *p, struct rdb_buf *out,
		    struct qry_error *e)
{
	bool by_step = p->seen & (BIT(P_STEP_FROM) | BIT(P_STEP_TO));
	struct qry_logs_req q = {.filter = {.job = p->job,
					    .min_level = p->min_level,
					    .ranks = p->ranks,
					    .nranks = p->nranks,
					    .from_ns = p->num[P_FROM],
					    .to_ns = p->num[P_TO],
					    .by_step = by_step,
					    .step_from = by_step ? p->num[P_STEP_FROM] : 0,
					    .step_to = p->num[P_STEP_TO],
					    .text = p->text,
					    .field_keys = p->fkeys,
					    .field_vals = p->fvals,
					    .nfields = p->nfields,
					    .attempt = p->num[P_ATTEMPT]},
				 .limit = (size_t)p->num[P_LIMIT],
				 .cursor = p->cursor,
				 .max_events = scan_bound(ctx, (size_t)p->num[P_LIMIT])};
	struct qry_log_page r;
	int rc = qry_logs(ctx->sto, &q, &r, e);
	if (rc == 0)
		rc = srv_write_log_page(out, &r, e);
	qry_log_page_free(&r);
	return rc;
}

static int run_around(struct srv_ctx *ctx, const struct evparams *p, struct rdb_buf *out,
		      struct qry_error *e)
{
	struct qry_around_req q = {.job = p->job,
				   .rank = p->ranks[0],
				   .step = p->num[P_STEP],
				   .min_level = p->min_level,
				   .window_steps = p->num[P_WINDOW],
				   .before = (size_t)p->num[P_BEFORE],
				   .after = (size_t)p->num[P_AFTER],
				   .max_events = scan_bound(ctx, 0)};
	struct qry_around r;
	int rc = qry_logs_around(ctx->sto, &q, &r, e);
	if (rc == 0)
		rc = srv_write_around(out, &r, e);
	qry_around_free(&r);
	return rc;
}

static int run_spans(struct srv_ctx *ctx, const struct evparams *p, struct rdb_buf *out,
		     struct qry_error *e)
{
	struct qry_spans_req q = {.job = p->job,
				  .ranks = p->ranks,
				  .nranks = p->nranks,
				  .step_from = p->num[P_STEP_FROM],
				  .step_to = p->num[P_STEP_TO],
				  .attempt = p->num[P_ATTEMPT],
				  .max_events = scan_bound(ctx, 0)};
	struct qry_spans r;
	int rc = qry_spans(ctx->sto, &q, &r, e);
	if (rc == 0)
		rc = srv_write_spans(out, &r, e);
	qry_spans_free(&r);
	return rc;
}

static int run(struct srv_ctx *ctx, enum endpoint ep, const struct evparams *p, struct rdb_buf *out,
	       struct qry_error *e)
{
	if (ep == EP_LOGS)
		return run_logs(ctx, p, out, e);
	return ep == EP_AROUND ? run_around(ctx, p, out, e) : run_spans(ctx, p, out, e);
}

static void handle(struct srv_req *req, struct srv_resp *resp, enum endpoint ep)
{
	struct srv_ctx *ctx = req->ctx;
	struct evparams *p = calloc(1, sizeof(*p));
	struct qry_error *e = calloc(1, sizeof(*e));
	int status = 200;
	if (!p || !e)
		srv_error(resp, status = 500, "out of memory");
	else if (parse_params(req, ep, p))
		srv_error(resp, status = 400, "%s", p->why);
	else if (run(ctx, ep, p, &resp->body, e))
		srv_error(resp, status = srv_qry_status(e->code), "%s", e->msg);
	else
		resp->status = 200;
	if (status != 200)
		atomic_fetch_add(&ctx->counters.query_errors, 1);
	for (int i = 0; p && i < p->nowned; i++)
		free(p->owned[i]);
	free(p);
	free(e);
}

static void h_events(struct srv_req *req, struct srv_resp *resp, const struct srv_route *r)
{
	handle(req, resp, (enum endpoint)r->arg);
}

static const struct srv_route rows[] = {
    {SRV_READ_METHODS, "/api/v1/logs", SRV_SCOPE_READ, h_events, EP_LOGS, SRV_ROUTE_QUERY, NULL,
     NULL, NULL},
    {SRV_READ_METHODS, "/api/v1/logs/around", SRV_SCOPE_READ, h_events, EP_AROUND, SRV_ROUTE_QUERY,
     NULL, NULL, NULL},
    {SRV_READ_METHODS, "/api/v1/spans", SRV_SCOPE_READ, h_events, EP_SPANS, SRV_ROUTE_QUERY, NULL,
     NULL, NULL},
};
const struct srv_route_table srv_events_routes = {rows, sizeof(rows) / sizeof(rows[0])};
