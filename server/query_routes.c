/* query_routes.c - routes of the aggregating queries and job metadata:
 *
 *   GET     /api/v1/query/downsample   buckets by step or time, aggregates
 *   GET     /api/v1/query/crossrank    per step (or time bucket) across ranks
 *   GET     /api/v1/query/outliers     robust straggler report
 *   GET/PUT /api/v1/jobs/<job>/meta    the job's metadata document
 *
 * Parameters are parsed here from one table of names; each endpoint accepts
 * a subset, and anything else is a 400 naming the parameter. The work is
 * done by query/agg.h, whose typed results server/query_json.c writes as
 * JSON; error codes become statuses there (404 unknown job/metric, 422 too
 * many points, 413 response too large, 500 corrupt data). The rows are in
 * srv_query_routes (route.h).
 */
#include "common/rdb_err.h"
#include "common/rdb_time.h"
#include "query/agg.h"
#include "server/json_out.h"
#include "server/route.h"
#include "server/srv.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

enum endpoint { EP_DOWNSAMPLE, EP_CROSSRANK, EP_OUTLIERS };

enum param {
	P_JOB,
	P_METRIC,
	P_RANK,
	P_RANKS,
	P_FROM,
	P_TO,
	P_STEP_FROM,
	P_STEP_TO,
	P_STEP_WIDTH,
	P_TIME_WIDTH,
	P_POINTS,
	P_AGG,
	P_ATTEMPT,
	P_QUANTILES,
	P_LAST_STEPS,
	P_LIMIT,
	P_DIRECTION,
	P_MODE,
	P_PHASES,
	P_WAIT_PHASES,
	P_COUNT
};

static const char *const param_names[P_COUNT] = {
    "job",	  "metric",	"rank",		 "ranks",  "from",   "to",	   "step_from",
    "step_to",	  "step_width", "time_width_ns", "points", "agg",    "attempt",	   "quantiles",
    "last_steps", "limit",	"direction",	 "mode",   "phases", "wait_phases"};

#define BIT(p) (1u << (p))
#define COMMON                                                                                     \
	(BIT(P_JOB) | BIT(P_METRIC) | BIT(P_RANK) | BIT(P_RANKS) | BIT(P_FROM) | BIT(P_TO) |       \
	 BIT(P_STEP_FROM) | BIT(P_STEP_TO) | BIT(P_ATTEMPT))
static const uint32_t allowed[] = {
    [EP_DOWNSAMPLE] = COMMON | BIT(P_STEP_WIDTH) | BIT(P_TIME_WIDTH) | BIT(P_POINTS) | BIT(P_AGG),
    [EP_CROSSRANK] = COMMON | BIT(P_STEP_WIDTH) | BIT(P_TIME_WIDTH) | BIT(P_POINTS) | BIT(P_AGG) |
		     BIT(P_QUANTILES),
    [EP_OUTLIERS] = COMMON | BIT(P_LAST_STEPS) | BIT(P_LIMIT) | BIT(P_DIRECTION) | BIT(P_MODE) |
		    BIT(P_PHASES) | BIT(P_WAIT_PHASES),
};

#define MAX_LIST  256
#define MAX_RANKS 4096

struct qparams {
	const char *job;
	size_t nmetrics, nphases, nwaits;
	size_t nranks;
	struct qry_bucket_spec spec;
	uint32_t aggs;
	uint32_t xr_cols; /* crossrank: QRY_XR_* asked with agg= (0: all) */
	enum endpoint ep;
	double q[QRY_MAX_QUANTILES];
	size_t nq;
	int64_t last_steps, limit;
	enum qry_direction direction;
	bool phases_mode;
	int nowned;
	char why[600];
	/* Not zeroed (params_new): each is read only below its count. */
	const char *metrics[MAX_LIST], *phases[MAX_LIST], *waits[MAX_LIST];
	uint32_t ranks[MAX_RANKS];
	char *owned[SRV_MAX_ARGS];
};

/* A struct qparams zeroed up to its lists (~23 KB that calloc cleared on
 * every query, for a handful of entries). */
static struct qparams *params_new(void)
{
	struct qparams *p = malloc(sizeof(*p));
	if (p)
		memset(p, 0, offsetof(struct qparams, metrics));
	return p;
}

static int bad(struct qparams *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int bad(struct qparams *p, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->why, sizeof(p->why), fmt, ap);
	va_end(ap);
	return RDB_EINVAL;
}

/* Splits an owned copy of val at commas (srv_split_commas). */
static int tokens(struct qparams *p, const char *val, const char **out, size_t max, size_t *n)
{
	char *copy = srv_arg_copy(val, p->owned, &p->nowned);
	if (!copy)
		return -ENOMEM;
	*n = 0;
	return srv_split_commas(copy, out, max, n);
}

static int add_names(struct qparams *p, const char *key, const char *val, const char **arr,
		     size_t *n)
{
	const char *tok[MAX_LIST];
	size_t nt;
	int rc = tokens(p, val, tok, MAX_LIST - *n, &nt);
	if (rc == RDB_ELIMIT)
		return bad(p, "parameter %s: at most %s names", key, "256");
	for (size_t i = 0; rc == 0 && i < nt; i++)
		arr[(*n)++] = tok[i];
	return rc;
}

static int add_ranks(struct qparams *p, const char *key, const char *val)
{
	char *copy = srv_arg_copy(val, p->owned, &p->nowned);
	if (!copy)
		return -ENOMEM;
	const char *badtok = NULL;
	int rc = srv_parse_rank_list(copy, p->ranks, MAX_RANKS, &p->nranks, &badtok);
	if (rc == RDB_EINVAL)
		return bad(p, "parameter %s: a rank is an integer >= 0 or \"job\", got '%.32s'",
			   key, badtok);
	if (rc == RDB_ELIMIT)
		return bad(p, "parameter %s: at most %d ranks per query", key, MAX_RANKS);
	return rc;
}

static int add_quantile(struct qparams *p, const char *key, const char *tok, double q)
{
	if (!(q >= 0 && q <= 1))
		return bad(p, "parameter %s: a quantile is in 0..1 (pNN: 0..100), got '%.32s'", key,
			   tok);
	if (p->nq == QRY_MAX_QUANTILES)
		return bad(p, "parameter %s: at most %s quantiles", key, "8");
	p->q[p->nq++] = q;
	return 0;
}

static int parse_aggs(struct qparams *p, const char *key, const char *val)
{
	static const struct {
		const char *name;
		uint32_t bits;
	} names[] = {{"avg", QRY_AGG_AVG},     {"min", QRY_AGG_MIN},
		     {"max", QRY_AGG_MAX},     {"sum", QRY_AGG_SUM},
		     {"count", QRY_AGG_COUNT}, {"first", QRY_AGG_FIRST},
		     {"last", QRY_AGG_LAST},   {"minmax", QRY_AGG_MIN | QRY_AGG_MAX}};
	const char *tok[64];
	size_t nt;
	int rc = tokens(p, val, tok, 64, &nt);
	for (size_t i = 0; rc == 0 && i < nt; i++) {
		bool found = false;
		for (size_t j = 0; j < sizeof(names) / sizeof(names[0]) && !found; j++)
			if (strcmp(tok[i], names[j].name) == 0) {
				p->aggs |= names[j].bits;
				found = true;
			}
		char *end;
		if (!found && tok[i][0] == 'p' && tok[i][1]) {
			double q = strtod(tok[i] + 1, &end);
			if (*end == 0)
				rc = add_quantile(p, key, tok[i], q / 100);
			found = true;
		}
		if (!found)
			rc = bad(p,
				 "parameter %s: unknown aggregate '%.32s' (known: avg, min, max, "
				 "sum, count, first, last, minmax, p<0..100> such as p50, p99)",
				 key, tok[i]);
	}
	return rc;
}

/* crossrank's agg: which columns to compute (default: every one). */
static int parse_xr_aggs(struct qparams *p, const char *key, const char *val)
{
	static const struct {
		const char *name;
		uint32_t bits;
	} names[] = {
	    {"count", QRY_XR_COUNT},   {"mean", QRY_XR_MEAN},	  {"avg", QRY_XR_MEAN},
	    {"min", QRY_XR_MIN},       {"max", QRY_XR_MAX},	  {"median", QRY_XR_MEDIAN},
	    {"stddev", QRY_XR_STDDEV}, {"argmin", QRY_XR_ARGMIN}, {"argmax", QRY_XR_ARGMAX}};
	const char *tok[64];
	size_t nt;
	int rc = tokens(p, val, tok, 64, &nt);
	for (size_t i = 0; rc == 0 && i < nt; i++) {
		bool found = false;
		for (size_t j = 0; j < sizeof(names) / sizeof(names[0]) && !found; j++)
			if (strcmp(tok[i], names[j].name) == 0) {
				p->xr_cols |= names[j].bits;
				found = true;
			}
		char *end;
		if (!found && tok[i][0] == 'p' && tok[i][1]) {
			double q = strtod(tok[i] + 1, &end);
			if (*end == 0) {
				rc = add_quantile(p, key, tok[i], q / 100);
				p->xr_cols |= QRY_XR_QUANTILES;
				found = true;
			}
		}
		if (!found)
			rc = bad(p,
				 "parameter %s: unknown aggregate '%.32s' (known: count, mean, "
				 "min, max, median, stddev, argmin, argmax, p<0..100> such as p90)",
				 key, tok[i]);
	}
	return rc;
}

static int parse_quantiles(struct qparams *p, const char *key, const char *val)
{
	const char *tok[64];
	size_t nt;
	int rc = tokens(p, val, tok, 64, &nt);
	for (size_t i = 0; rc == 0 && i < nt; i++) {
		char *end;
		bool pct = tok[i][0] == 'p';
		double q = strtod(tok[i] + pct, &end);
		if (*end || end == tok[i] + pct)
			return bad(p,
				   "parameter %s: a quantile is a number in 0..1 or p0..p100, got "
				   "'%.32s'",
				   key, tok[i]);
		rc = add_quantile(p, key, tok[i], pct ? q / 100 : q);
	}
	return rc;
}

static int parse_attempt(struct qparams *p, const char *key, const char *val)
{
	int64_t a;
	if (strcmp(val, "latest") == 0)
		p->spec.attempt = QRY_ATTEMPT_LATEST;
	else if (strcmp(val, "all") == 0)
		p->spec.attempt = QRY_ATTEMPT_ALL;
	else if (srv_parse_i64(val, &a) == 0 && a >= 0 && a <= UINT32_MAX)
		p->spec.attempt = a;
	else
		return bad(p,
			   "parameter %s must be \"latest\", \"all\" or an attempt number "
			   ">= 0, got '%.64s'",
			   key, val);
	return 0;
}

/* Integer parameters: where they go and their minimum. */
static int parse_number(struct qparams *p, enum param k, const char *val)
{
	struct qry_bucket_spec *s = &p->spec;
	int64_t v, min = INT64_MIN, max = INT64_MAX;
	int64_t *dst = NULL;
	switch (k) {
	case P_FROM:
		dst = &s->range.from_ns;
		s->from_set = true;
		break;
	case P_TO:
		dst = &s->range.to_ns;
		s->to_set = true;
		break;
	case P_STEP_FROM:
		dst = &s->range.step_from;
		s->step_from_set = true;
		min = 0;
		break;
	case P_STEP_TO:
		dst = &s->range.step_to;
		s->step_to_set = true;
		min = 0;
		break;
	case P_STEP_WIDTH:
	case P_TIME_WIDTH:
		dst = &s->width;
		min = 1;
		break;
	case P_LAST_STEPS:
		dst = &p->last_steps;
		min = 1;
		break;
	case P_LIMIT:
		dst = &p->limit;
		min = 1;
		max = 100000;
		break;
	case P_POINTS:
		dst = &v;
		min = 1;
		max = QRY_MAX_BUCKETS;
		break;
	default:
		return 0;
	}
	if (k == P_FROM || k == P_TO) {
		if (srv_parse_time_ns(val, rdb_now_ns(), &v))
			return bad(p, "parameter %s must be a time (%s), got '%.64s'",
				   param_names[k], SRV_TIME_HELP, val);
	} else if (srv_parse_i64(val, &v) || v < min || v > max) {
		snprintf(p->why, sizeof(p->why), "parameter %s must be an integer%s%s, got '%.64s'",
			 param_names[k],
			 min == 1   ? " >= 1"
			 : min == 0 ? " >= 0"
				    : "",
			 max == INT64_MAX ? ""
			 : max == 100000  ? " and <= 100000"
					  : " and <= 1000000",
			 val);
		return RDB_EINVAL;
	}
	*dst = v;
	if (k == P_STEP_FROM || k == P_STEP_TO)
		s->range.by_step = true;
	if (k == P_STEP_WIDTH || k == P_TIME_WIDTH) {
		if (s->axis_set)
			return bad(p, "give one of step_width and time_width_ns, not both");
		s->axis_set = true;
		s->axis = k == P_STEP_WIDTH ? QRY_AXIS_STEP : QRY_AXIS_TIME;
	}
	if (k == P_POINTS)
		s->points = (uint32_t)v;
	return 0;
}

static int parse_words(struct qparams *p, enum param k, const char *val)
{
	if (k == P_DIRECTION) {
		if (strcmp(val, "both") && strcmp(val, "high") && strcmp(val, "low"))
			return bad(p, "parameter direction must be high, low or both, got '%.32s'",
				   val);
		p->direction = val[0] == 'h'   ? QRY_DIR_HIGH
			       : val[0] == 'l' ? QRY_DIR_LOW
					       : QRY_DIR_BOTH;
	} else if (k == P_MODE) {
		if (strcmp(val, "value") && strcmp(val, "phases"))
			return bad(p, "parameter mode must be value or phases, got '%.32s'", val);
		p->phases_mode = val[0] == 'p';
	}
	return 0;
}

static int parse_arg(struct qparams *p, enum param k, const char *val)
{
	switch (k) {
	case P_JOB:
		p->job = val;
		return 0;
	case P_METRIC:
		return add_names(p, "metric", val, p->metrics, &p->nmetrics);
	case P_PHASES:
		return add_names(p, "phases", val, p->phases, &p->nphases);
	case P_WAIT_PHASES:
		return add_names(p, "wait_phases", val, p->waits, &p->nwaits);
	case P_RANK:
	case P_RANKS:
		return add_ranks(p, param_names[k], val);
	case P_AGG:
		return p->ep == EP_CROSSRANK ? parse_xr_aggs(p, "agg", val)
					     : parse_aggs(p, "agg", val);
	case P_QUANTILES:
		return parse_quantiles(p, "quantiles", val);
	case P_ATTEMPT:
		return parse_attempt(p, "attempt", val);
	case P_DIRECTION:
	case P_MODE:
		return parse_words(p, k, val);
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
}

static int check_params(struct qparams *p, enum endpoint ep)
{
	const struct sto_range *r = &p->spec.range;
	if (!p->job || !*p->job)
		return bad(p, "parameter job is required");
	if (p->nmetrics == 0)
		return bad(p, "parameter metric is required");
	if (ep != EP_DOWNSAMPLE && p->nmetrics != 1)
		return bad(p, "parameter metric: this query takes exactly one metric");
	if (p->spec.axis_set && p->spec.points)
		return bad(p, "parameter points: give points or a width (step_width, "
			      "time_width_ns), not both");
	if (r->from_ns > r->to_ns || r->step_from > r->step_to)
		return bad(p, "empty range: from must be <= to and step_from <= step_to");
	if (p->last_steps && r->by_step)
		return bad(p, "parameter last_steps: give last_steps or step_from/step_to, not "
			      "both");
	return 0;
}

static int parse_params(const struct srv_req *req, enum endpoint ep, struct qparams *p)
{
	char known[400];
	p->spec.range = (struct sto_range){INT64_MIN, INT64_MAX, false, 0, INT64_MAX};
	p->spec.attempt = QRY_ATTEMPT_LATEST;
	p->limit = 10;
	p->ep = ep;
	if (req->args_overflow)
		return bad(p, "too many query parameters (at most %d)", SRV_MAX_ARGS);
	for (int i = 0; i < req->nargs; i++) {
		const char *key = req->args[i].key;
		int k = 0;
		while (k < P_COUNT && strcmp(param_names[k], key))
			k++;
		if (k == P_COUNT || !(allowed[ep] & BIT(k))) {
			known_list(ep, known, sizeof(known));
			return bad(p, "unknown parameter '%.64s' (known: %s)", key, known);
		}
		int rc = parse_arg(p, (enum param)k, req->args[i].val);
		if (rc == -ENOMEM)
			return bad(p, "out of memory");
		if (rc)
			return rc;
	}
	return check_params(p, ep);
}

static void free_params(struct qparams *p)
{
	for (int i = 0; p && i < p->nowned; i++)
		free(p->owned[i]);
	free(p);
}

static int run_downsample(struct srv_ctx *ctx, const struct qparams *p, struct rdb_buf *out,
			  struct qry_error *e)
{
	struct qry_ds_req q = {.job = p->job,
			       .metrics = p->metrics,
			       .nmetrics = p->nmetrics,
			       .ranks = p->ranks,
			       .nranks = p->nranks,
			       .spec = p->spec,
			       .aggs = p->aggs,
			       .nq = p->nq,
			       .max_points = ctx->cfg->max_query_points};
	struct qry_ds_result r;
	if (!p->aggs && !p->nq)
		q.aggs = QRY_AGG_MIN | QRY_AGG_MAX;
	memcpy(q.q, p->q, sizeof(q.q));
	int rc = qry_downsample(ctx->sto, &q, &r, e);
	if (rc == 0)
		rc = srv_write_downsample(out, &r, e);
	qry_ds_result_free(&r);
	return rc;
}

static int run_crossrank(struct srv_ctx *ctx, const struct qparams *p, struct rdb_buf *out,
			 struct qry_error *e)
{
	struct qry_xr_req q = {.job = p->job,
			       .metric = p->metrics[0],
			       .ranks = p->ranks,
			       .nranks = p->nranks,
			       .spec = p->spec,
			       .nq = p->nq,
			       .cols = p->xr_cols,
			       .max_points = ctx->cfg->max_query_points};
	struct qry_xr_result r;
	if (p->xr_cols && p->nq)
		q.cols |= QRY_XR_QUANTILES; /* quantiles= asks for them too */
	memcpy(q.q, p->q, sizeof(q.q));
	int rc = qry_crossrank(ctx->sto, &q, &r, e);
	if (rc == 0)
		rc = srv_write_crossrank(out, &r, e);
	qry_xr_result_free(&r);
	return rc;
}

static int run_outliers(struct srv_ctx *ctx, const struct qparams *p, struct rdb_buf *out,
			struct qry_error *e)
{
	struct qry_out_req q = {.job = p->job,
				.metric = p->metrics[0],
				.ranks = p->ranks,
				.nranks = p->nranks,
				.spec = p->spec,
				.last_steps = p->last_steps,
				.limit = (size_t)p->limit,
				.direction = p->direction,
				.phases_mode = p->phases_mode,
				.phases = p->phases,
				.nphases = p->nphases,
				.wait_phases = p->waits,
				.nwait = p->nwaits,
				.max_points = ctx->cfg->max_query_points};
	struct qry_out_result r;
	int rc = qry_outliers(ctx->sto, &q, &r, e);
	if (rc == 0)
		rc = srv_write_outliers(out, &r, e);
	qry_out_result_free(&r);
	return rc;
}

static int run(struct srv_ctx *ctx, enum endpoint ep, const struct qparams *p, struct rdb_buf *out,
	       struct qry_error *e)
{
	if (ep == EP_DOWNSAMPLE)
		return run_downsample(ctx, p, out, e);
	if (ep == EP_CROSSRANK)
		return run_crossrank(ctx, p, out, e);
	return run_outliers(ctx, p, out, e);
}

static void failed(struct srv_ctx *ctx, struct srv_resp *resp, int status, const char *msg)
{
	atomic_fetch_add(&ctx->counters.query_errors, 1);
	srv_error(resp, status, "%s", msg);
}

static void handle_query(struct srv_req *req, struct srv_resp *resp, enum endpoint ep)
{
	struct qparams *p = params_new();
	struct qry_error *e = qry_error_new();
	if (!p || !e)
		failed(req->ctx, resp, 500, "out of memory");
	else if (parse_params(req, ep, p))
		failed(req->ctx, resp, 400, p->why);
	else if (run(req->ctx, ep, p, &resp->body, e))
		srv_query_failed(req->ctx, resp, e);
	else
		resp->status = 200;
	free_params(p);
	free(e);
}

/* ---- metadata ------------------------------------------------------------------ */

static void handle_meta(struct srv_req *req, struct srv_resp *resp, const char *job)
{
	struct qry_error *e = calloc(1, sizeof(*e));
	int rc;
	if (!e) {
		failed(req->ctx, resp, 500, "out of memory");
		return;
	}
	if (strcmp(req->method, "PUT") == 0) {
		rc = qry_meta_put(req->ctx->sto, job, req->body, req->body_len, e);
		if (rc == 0)
			srv_detect_meta_changed(req->ctx, job);
		if (rc == 0)
			rdb_buf_printf(&resp->body, "{\"job\":\"%s\",\"bytes\":%zu}", job,
				       req->body_len);
	} else {
		rc = qry_meta_get(req->ctx->sto, job, &resp->body, e);
	}
	if (rc)
		srv_query_failed(req->ctx, resp, e);
	else
		resp->status = 200;
	free(e);
}

static void h_query(struct srv_req *req, struct srv_resp *resp, const struct srv_route *r)
{
	handle_query(req, resp, (enum endpoint)r->arg);
}

static void h_meta(struct srv_req *req, struct srv_resp *resp, const struct srv_route *r)
{
	(void)r;
	handle_meta(req, resp, req->param);
}

static const struct srv_route rows[] = {
    {SRV_READ_METHODS, "/api/v1/query/downsample", SRV_SCOPE_READ, h_query, EP_DOWNSAMPLE,
     SRV_ROUTE_QUERY, NULL, NULL, NULL},
    {SRV_READ_METHODS, "/api/v1/query/crossrank", SRV_SCOPE_READ, h_query, EP_CROSSRANK,
     SRV_ROUTE_QUERY, NULL, NULL, NULL},
    {SRV_READ_METHODS, "/api/v1/query/outliers", SRV_SCOPE_READ, h_query, EP_OUTLIERS,
     SRV_ROUTE_QUERY, NULL, NULL, NULL},
    {SRV_READ_METHODS, "/api/v1/jobs/{name}/meta", SRV_SCOPE_READ, h_meta, 0, SRV_ROUTE_QUERY,
     "GET, PUT", NULL, NULL},
    {SRV_PUT, "/api/v1/jobs/{name}/meta", SRV_SCOPE_WRITE, h_meta, 0, SRV_ROUTE_QUERY, "GET, PUT",
     NULL, NULL},
};
const struct srv_route_table srv_query_routes = {rows, sizeof(rows) / sizeof(rows[0])};
