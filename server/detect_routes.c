/* detect_routes.c - the HTTP face of detection (detect/service.h):
 *
 *   GET  /api/v1/alerts[?job=J&state=pending|firing|resolved&alertname=A&rank=R&limit=N]
 *        active and recently resolved alerts, newest first
 *   GET  /api/v1/jobs/<job>/health
 *        the run at a glance: job state, step, progress rate, MFU,
 *        checkpoint age, ranks seen / alive / declared, active alerts, and
 *        per rank: last seen age, last step, steps/s, state, alerts
 *   POST /api/v1/admin/rules/reload (admin_routes.c calls srv_detect_reload)
 *   SIGHUP (main.c calls srv_detect_reload)
 *
 * With detection off (detect = off) these answer 503 with a message saying
 * so. Threading: HTTP pool threads; the service's lists are copied out
 * under its locks.
 */
#include "server/route.h"
#include "server/srv.h"
#include "common/rdb_err.h"
#include "common/rdb_log.h"
#include "common/rdb_time.h"
#include "detect/service.h"
#include "query/agg.h"
#include "query/qry.h"

#include <errno.h>
#include <jansson.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALERTS_LIMIT_MAX 10000
#define RANK_ALERTS_MAX	 8 /* alert names listed per rank in the health answer */

/* ---- JSON ------------------------------------------------------------------ */

/* A value as stored or observed: exact (17 significant digits). */
static void json_num_or_null(struct rdb_buf *b, double v)
{
	if (isfinite(v))
		rdb_buf_printf(b, "%.17g", v);
	else
		rdb_buf_puts(b, "null");
}

/* A derived rate, age or ratio: 6 significant digits say all it knows. */
static void json_stat_or_null(struct rdb_buf *b, double v)
{
	if (isfinite(v))
		rdb_buf_printf(b, "%.6g", v);
	else
		rdb_buf_puts(b, "null");
}

static void json_key_str(struct rdb_buf *b, const char *key, const char *v)
{
	rdb_buf_printf(b, "\"%s\":", key);
	rdb_buf_json_str(b, v, strlen(v));
}

/* One alert as GET /api/v1/alerts lists it (docs/API.md). */
static void alert_json(struct rdb_buf *b, const struct det_alert *al)
{
	const struct det_cond *c = &al->c;
	rdb_buf_putc(b, '{');
	json_key_str(b, "alertname", c->alertname);
	rdb_buf_putc(b, ',');
	json_key_str(b, "job", c->job);
	if (c->rank >= 0)
		rdb_buf_printf(b, ",\"rank\":%lld,", (long long)c->rank);
	else
		rdb_buf_puts(b, ",\"rank\":null,");
	json_key_str(b, "phase", c->phase);
	rdb_buf_putc(b, ',');
	json_key_str(b, "metric", c->metric);
	rdb_buf_putc(b, ',');
	json_key_str(b, "severity", c->severity == DET_SEV_CRITICAL ? "critical" : "warning");
	rdb_buf_putc(b, ',');
	json_key_str(b, "state", det_alert_state_name(al->state));
	rdb_buf_putc(b, ',');
	json_key_str(b, "summary", c->summary);
	rdb_buf_putc(b, ',');
	json_key_str(b, "description", c->description);
	rdb_buf_puts(b, ",\"value\":");
	json_num_or_null(b, c->value);
	rdb_buf_puts(b, ",\"baseline\":");
	json_num_or_null(b, c->baseline);
	if (c->step != INT64_MIN)
		rdb_buf_printf(b, ",\"step\":%lld", (long long)c->step);
	else
		rdb_buf_puts(b, ",\"step\":null");
	rdb_buf_printf(b, ",\"active_at\":%lld,\"starts_at\":%s", (long long)al->active_ns,
		       al->starts_ns ? "" : "null");
	if (al->starts_ns)
		rdb_buf_printf(b, "%lld", (long long)al->starts_ns);
	rdb_buf_printf(b, ",\"ends_at\":%s", al->ends_ns ? "" : "null");
	if (al->ends_ns)
		rdb_buf_printf(b, "%lld", (long long)al->ends_ns);
	rdb_buf_printf(b, ",\"updated_at\":%lld}", (long long)al->updated_ns);
}

static bool detection_on(struct srv_req *req, struct srv_resp *resp)
{
	if (req->ctx->detect)
		return true;
	srv_error(resp, 503,
		  "detection is off (detect = off in the configuration): no alerts "
		  "or job health are computed");
	return false;
}

/* ---- GET /api/v1/alerts ------------------------------------------------------ */

struct list_ctx {
	struct rdb_buf *b;
	size_t n, limit;
};

static int list_one(void *arg, const struct det_alert *al)
{
	struct list_ctx *l = arg;
	if (l->n == l->limit)
		return 1;
	if (l->n++)
		rdb_buf_putc(l->b, ',');
	alert_json(l->b, al);
	return 0;
}

static int alert_filter(const struct srv_req *req, struct det_alert_filter *f, size_t *limit,
			char *why, size_t whylen)
{
	memset(f, 0, sizeof(*f));
	f->rank = DET_FILTER_ANY_RANK;
	*limit = 1000;
	for (int i = 0; i < req->nargs; i++) {
		const char *k = req->args[i].key, *v = req->args[i].val;
		int64_t n;
		uint8_t st;
		if (strcmp(k, "job") == 0) {
			f->job = v;
		} else if (strcmp(k, "alertname") == 0) {
			f->alertname = v;
		} else if (strcmp(k, "state") == 0) {
			if (det_alert_state_parse(v, &st)) {
				snprintf(why, whylen,
					 "state must be pending, firing or resolved, got "
					 "'%.32s'",
					 v);
				return RDB_EINVAL;
			}
			f->state_mask |= (uint8_t)(1u << st);
		} else if (strcmp(k, "rank") == 0) {
			if (strcmp(v, "job") == 0) {
				f->rank = DET_RANK_NONE;
			} else if (srv_parse_i64(v, &n) || n < 0 || n > MDL_RANK_MAX) {
				snprintf(why, whylen,
					 "rank must be an integer >= 0 or \"job\" (job-level "
					 "alerts), got '%.32s'",
					 v);
				return RDB_EINVAL;
			} else {
				f->rank = n;
			}
		} else if (strcmp(k, "limit") == 0) {
			if (srv_parse_i64(v, &n) || n < 1 || n > ALERTS_LIMIT_MAX) {
				snprintf(why, whylen, "limit must be 1..%d, got '%.32s'",
					 ALERTS_LIMIT_MAX, v);
				return RDB_EINVAL;
			}
			*limit = (size_t)n;
		} else {
			snprintf(why, whylen,
				 "unknown parameter '%.64s' (known: job, state, "
				 "alertname, rank, limit)",
				 k);
			return RDB_EINVAL;
		}
	}
	return 0;
}

static void handle_alerts(struct srv_req *req, struct srv_resp *resp)
{
	struct det_alert_filter f;
	size_t limit;
	char why[256];
	if (alert_filter(req, &f, &limit, why, sizeof(why))) {
		srv_error(resp, 400, "%s", why);
		return;
	}
	struct list_ctx l = {.b = &resp->body, .limit = limit};
	rdb_buf_puts(&resp->body, "{\"alerts\":[");
	det_service_alerts(req->ctx->detect, &f, list_one, &l);
	if (rdb_buf_puts(&resp->body, "]}")) {
		srv_error(resp, 413,
			  "the answer exceeds max_response_bytes; narrow the filter "
			  "or lower limit");
		return;
	}
	resp->status = 200;
}

/* ---- GET /api/v1/jobs/<job>/health --------------------------------------------- */

static const char *job_state_name(uint8_t s)
{
	static const char *const names[] = {"ok", "degraded", "hung", "down", "finished", "failed"};
	return s < sizeof(names) / sizeof(names[0]) ? names[s] : "unknown";
}

/* ---- the detection fields of GET /api/v1/jobs ---------------------------------- */

struct job_fields {
	const char *job;
	struct rdb_buf *out;
	bool first;
	int rc;
};

static int job_state_cb(void *arg, const struct det_job_health *h)
{
	struct job_fields *f = arg;
	if (strcmp(h->job, f->job) == 0 && f->rc == 0)
		f->rc = rdb_buf_printf(f->out, ",\"state\":\"%s\"", job_state_name(h->state));
	return 0;
}

static int job_alert_cb(void *arg, const struct det_alert *al)
{
	struct job_fields *f = arg;
	if (!f->first)
		rdb_buf_putc(f->out, ',');
	f->first = false;
	alert_json(f->out, al);
	return 0;
}

int srv_detect_job_fields(void *arg, const char *job, struct rdb_buf *out)
{
	struct srv_ctx *ctx = arg;
	struct job_fields f = {job, out, true, 0};
	struct det_alert_filter af = {
	    .job = job, .rank = DET_FILTER_ANY_RANK, .state_mask = 1u << DET_ALERT_FIRING};
	if (!ctx->detect)
		return 0;
	det_service_jobs(ctx->detect, job_state_cb, &f);
	if (f.rc)
		return f.rc;
	rdb_buf_puts(out, ",\"firing_alerts\":[");
	det_service_alerts(ctx->detect, &af, job_alert_cb, &f);
	return rdb_buf_putc(out, ']');
}

static const char *rank_state_name(uint8_t s)
{
	static const char *const names[] = {"ok", "straggler", "hung", "down"};
	return s < sizeof(names) / sizeof(names[0]) ? names[s] : "unknown";
}

/* The active alerts of one job, copied out for the health answer. */
struct job_alerts {
	struct det_alert *v;
	size_t n, cap;
};

static int keep_alert(void *arg, const struct det_alert *al)
{
	struct job_alerts *a = arg;
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 16;
		if (cap > ALERTS_LIMIT_MAX)
			return 1;
		struct det_alert *p = realloc(a->v, cap * sizeof(*p));
		if (!p)
			return 1;
		a->v = p;
		a->cap = cap;
	}
	a->v[a->n++] = *al;
	return 0;
}

static void rank_json(struct rdb_buf *b, const struct det_rank_health *r, int64_t now_ns,
		      const struct job_alerts *a)
{
	rdb_buf_printf(b, "{\"rank\":%u,\"last_seen_age_s\":", r->rank);
	json_stat_or_null(b, r->last_seen_ns ? (double)(now_ns - r->last_seen_ns) / 1e9 : NAN);
	if (r->last_step != DET_STEP_NONE)
		rdb_buf_printf(b, ",\"last_step\":%lld", (long long)r->last_step);
	else
		rdb_buf_puts(b, ",\"last_step\":null");
	rdb_buf_puts(b, ",\"steps_per_s\":");
	json_stat_or_null(b, r->steps_per_s);
	rdb_buf_printf(b, ",\"state\":\"%s\",\"attempt\":%u,", rank_state_name(r->state),
		       r->attempt);
	json_key_str(b, "last_phase", r->last_phase);
	rdb_buf_puts(b, ",\"alerts\":[");
	size_t k = 0;
	for (size_t i = 0; i < a->n && k < RANK_ALERTS_MAX; i++) {
		if (a->v[i].c.rank != (int64_t)r->rank)
			continue;
		if (k++)
			rdb_buf_putc(b, ',');
		rdb_buf_json_str(b, a->v[i].c.alertname, strlen(a->v[i].c.alertname));
	}
	rdb_buf_puts(b, "]}");
}

static void health_json(struct rdb_buf *b, const struct det_job_health *h, int64_t now_ns,
			const struct job_alerts *a)
{
	rdb_buf_putc(b, '{');
	json_key_str(b, "job", h->job);
	rdb_buf_printf(b, ",\"state\":\"%s\",\"step\":", job_state_name(h->state));
	if (h->step != DET_STEP_NONE)
		rdb_buf_printf(b, "%lld", (long long)h->step);
	else
		rdb_buf_puts(b, "null");
	rdb_buf_puts(b, ",\"steps_per_s\":");
	json_stat_or_null(b, h->steps_per_s);
	rdb_buf_puts(b, ",\"mfu\":");
	json_stat_or_null(b, h->mfu);
	rdb_buf_puts(b, ",\"checkpoint_age_s\":");
	json_stat_or_null(b, h->checkpoint_age_s);
	rdb_buf_printf(b, ",\"ranks_seen\":%u,\"ranks_alive\":%u,\"world_size\":", h->ranks_seen,
		       h->ranks_alive);
	if (h->world_size)
		rdb_buf_printf(b, "%u", h->world_size);
	else
		rdb_buf_puts(b, "null");
	rdb_buf_puts(b, ",\"median_step_time_s\":");
	json_stat_or_null(b, h->median_step_time_s);
	rdb_buf_printf(b, ",\"first_seen\":%lld,\"last_seen\":%lld,\"alerts\":[",
		       (long long)h->first_seen_ns, (long long)h->last_seen_ns);
	for (size_t i = 0; i < a->n; i++) {
		if (i)
			rdb_buf_putc(b, ',');
		alert_json(b, &a->v[i]);
	}
	rdb_buf_puts(b, "],\"ranks\":[");
	for (size_t i = 0; i < h->nranks; i++) {
		if (i)
			rdb_buf_putc(b, ',');
		rank_json(b, &h->ranks[i], now_ns, a);
	}
	rdb_buf_puts(b, "]}");
}

static void handle_health(struct srv_req *req, struct srv_resp *resp, const char *job)
{
	struct det_job_health h;
	int rc = det_service_health(req->ctx->detect, job, &h);
	if (rc == RDB_ENOTFOUND) {
		srv_error(resp, 404,
			  "no health for job '%s': the detector holds no state for it "
			  "(no data since the server started, or it was forgotten after being "
			  "silent)",
			  job);
		return;
	}
	if (rc) {
		srv_error(resp, 500, "computing the health of job '%s' failed: %s", job,
			  rdb_strerror(rc));
		return;
	}
	struct job_alerts a = {0};
	struct det_alert_filter f = {.job = job,
				     .rank = DET_FILTER_ANY_RANK,
				     .state_mask =
					 (1u << DET_ALERT_PENDING) | (1u << DET_ALERT_FIRING)};
	det_service_alerts(req->ctx->detect, &f, keep_alert, &a);
	health_json(&resp->body, &h, rdb_now_ns(), &a);
	free(a.v);
	det_job_health_free(&h);
	if (resp->body.len == 0 || resp->body.data[resp->body.len - 1] != '}') {
		srv_error(resp, 413, "the health answer exceeds max_response_bytes");
		return;
	}
	resp->status = 200;
}

/* ---- routing, reload, metrics ----------------------------------------------------- */

static void h_alerts(struct srv_req *req, struct srv_resp *resp, const struct srv_route *r)
{
	(void)r;
	if (detection_on(req, resp))
		handle_alerts(req, resp);
}

/* /api/v1/jobs/<job>/health: the job is whatever lies between (400 when it
 * is not a job id). */
static void h_health(struct srv_req *req, struct srv_resp *resp, const struct srv_route *r)
{
	static const char jobs[] = "/api/v1/jobs/", suffix[] = "/health";
	const char *p = req->path;
	size_t len = strlen(p), sl = sizeof(suffix) - 1, jl = sizeof(jobs) - 1;
	(void)r;
	if (!detection_on(req, resp))
		return;
	char job[MDL_JOB_MAX + 1];
	size_t n = len - jl - sl;
	if (n > MDL_JOB_MAX || !mdl_job_valid(p + jl, n)) {
		srv_error(resp, 400, "job id in the path is invalid: [A-Za-z0-9._-]{1,128}");
		return;
	}
	memcpy(job, p + jl, n);
	job[n] = 0;
	handle_health(req, resp, job);
}

static const struct srv_route rows[] = {
    {SRV_GET, "/api/v1/alerts", SRV_SCOPE_READ, h_alerts, 0, 0, NULL, NULL, NULL},
    {SRV_GET, "/api/v1/jobs/*/health", SRV_SCOPE_READ, h_health, 0, 0, NULL, NULL, NULL},
};
const struct srv_route_table srv_detect_routes = {rows, sizeof(rows) / sizeof(rows[0])};

int srv_detect_reload(struct srv_ctx *ctx, char *msg, size_t msglen)
{
	if (!ctx->detect) {
		snprintf(msg, msglen, "detection is off (detect = off): no rules to reload");
		return RDB_ENOTFOUND;
	}
	int rc = det_service_reload_rules(ctx->detect, msg, msglen);
	if (rc)
		rdb_error("detect", "rules reload refused, the rules in force stay: %s", msg);
	else
		rdb_info("detect", "%s", msg);
	return rc;
}

static void gauge(struct rdb_buf *b, const char *name, const char *help, const char *type,
		  uint64_t v)
{
	rdb_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name,
		       (unsigned long long)v);
}

void srv_detect_metrics(struct srv_ctx *ctx, struct rdb_buf *b)
{
	if (!ctx->detect)
		return;
	struct det_service_stats st;
	det_service_stats(ctx->detect, &st);
	rdb_buf_printf(b,
		       "# HELP rankdb_alerts Alerts held now, by state.\n"
		       "# TYPE rankdb_alerts gauge\n"
		       "rankdb_alerts{state=\"pending\"} %llu\n"
		       "rankdb_alerts{state=\"firing\"} %llu\n",
		       (unsigned long long)st.alerts.pending, (unsigned long long)st.alerts.firing);
	gauge(b, "rankdb_alerts_fired_total", "Alerts that started firing.", "counter",
	      st.alerts.fired_total);
	gauge(b, "rankdb_alerts_resolved_total", "Firing alerts that resolved.", "counter",
	      st.alerts.resolved_total);
	gauge(b, "rankdb_alerts_refused_total",
	      "New alerts refused because max active alerts was reached.", "counter",
	      st.alerts.refused_total);
	static const char *const kinds[] = {"alertmanager", "webhook"};
	rdb_buf_puts(b, "# HELP rankdb_alert_deliveries_total Alert deliveries by receiver "
			"kind and result.\n# TYPE rankdb_alert_deliveries_total counter\n");
	for (int k = 0; k < 2; k++)
		rdb_buf_printf(
		    b,
		    "rankdb_alert_deliveries_total{receiver=\"%s\",result=\"sent\"} %llu\n"
		    "rankdb_alert_deliveries_total{receiver=\"%s\",result=\"failed\"} %llu\n"
		    "rankdb_alert_deliveries_total{receiver=\"%s\",result=\"dropped\"} "
		    "%llu\n"
		    "rankdb_alert_deliveries_total{receiver=\"%s\",result=\"retried\"} "
		    "%llu\n",
		    kinds[k], (unsigned long long)st.notify.sent[k], kinds[k],
		    (unsigned long long)st.notify.failed[k], kinds[k],
		    (unsigned long long)(st.notify.dropped_full[k] + st.notify.dropped_shutdown[k]),
		    kinds[k], (unsigned long long)st.notify.retried[k]);
	gauge(b, "rankdb_alert_delivery_queue", "Alert deliveries waiting or in flight.", "gauge",
	      st.notify.depth);
	gauge(b, "rankdb_alert_events_written_total",
	      "Alert transitions written into the jobs' event store.", "counter",
	      st.events_written);
	gauge(b, "rankdb_alert_events_failed_total",
	      "Alert transitions that could not be written into the event store.", "counter",
	      st.events_failed);
	gauge(b, "rankdb_detect_jobs", "Jobs the detector holds state for.", "gauge",
	      st.engine.jobs);
	gauge(b, "rankdb_detect_ranks", "Ranks the detector holds state for.", "gauge",
	      st.engine.ranks);
	gauge(b, "rankdb_detect_state_bytes", "Memory of the detector's state.", "gauge",
	      st.engine.bytes);
	gauge(b, "rankdb_detect_jobs_evicted_total",
	      "Jobs dropped from the detector to stay within its memory bound.", "counter",
	      st.engine.jobs_evicted);
	gauge(b, "rankdb_detect_rules_reload_failures_total",
	      "Rules reloads refused (bad file; the old rules stayed).", "counter",
	      st.rules_reload_failures);
	rdb_buf_printf(b,
		       "# HELP rankdb_detect_eval_seconds Time the last evaluation took.\n"
		       "# TYPE rankdb_detect_eval_seconds gauge\n"
		       "rankdb_detect_eval_seconds %.6f\n",
		       (double)st.eval_ns_last / 1e9);
}

/* ---- start-up ---------------------------------------------------------------------- */

static uint64_t meta_u64(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	if (json_is_integer(v) && json_integer_value(v) > 0)
		return (uint64_t)json_integer_value(v);
	if (json_is_real(v) && json_real_value(v) > 0 && json_real_value(v) < 1e18)
		return (uint64_t)json_real_value(v);
	return 0;
}

static double meta_f64(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_number(v) && json_number_value(v) > 0 ? json_number_value(v) : NAN;
}

/* The numbers the detectors need from a job's metadata document. */
static int read_meta(void *arg, const char *job, struct det_job_meta *out)
{
	struct srv_ctx *ctx = arg;
	struct rdb_buf doc;
	struct qry_error *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	rdb_buf_init(&doc, QRY_META_MAX_BYTES + 1);
	int rc = qry_meta_get(ctx->sto, job, &doc, e);
	free(e);
	json_t *o = rc == 0 ? json_loadb((const char *)doc.data, doc.len, 0, NULL) : NULL;
	rdb_buf_free(&doc);
	if (rc)
		return rc;
	if (!o)
		return RDB_EINVAL;
	memset(out, 0, sizeof(*out));
	out->world_size = (uint32_t)meta_u64(o, "world_size");
	out->global_batch = meta_u64(o, "global_batch");
	out->micro_batch = meta_u64(o, "micro_batch");
	out->grad_accum = meta_u64(o, "grad_accum");
	out->flops_per_token = meta_f64(o, "flops_per_token");
	out->params = meta_f64(o, "params");
	out->gpu_peak_flops = meta_f64(o, "gpu_peak_flops");
	const char *st = json_string_value(json_object_get(o, "status"));
	out->status = !st			    ? DET_STATUS_UNKNOWN
		      : strcmp(st, "running") == 0  ? DET_STATUS_RUNNING
		      : strcmp(st, "finished") == 0 ? DET_STATUS_FINISHED
		      : strcmp(st, "failed") == 0   ? DET_STATUS_FAILED
						    : DET_STATUS_UNKNOWN;
	json_decref(o);
	return 0;
}

int srv_detect_start(struct srv_ctx *ctx, uint16_t http_port, char *err, size_t errlen)
{
	const struct srv_config *c = ctx->cfg;
	ctx->detect = NULL;
	if (strcmp(c->detect, "on") != 0)
		return 0;
	char gen[600];
	if (c->public_url[0])
		snprintf(gen, sizeof(gen), "%s", c->public_url);
	else if (http_port)
		snprintf(gen, sizeof(gen), "http://%s:%u", c->http_addr, http_port);
	else
		gen[0] = 0;
	struct det_service_options o = {.sto = ctx->sto,
					.pipe = ctx->pipe,
					.rules_path = c->rules_file,
					.alertmanager_urls = c->alertmanager_url,
					.generator_url = gen,
					.eval_interval_ms = c->detect_eval_interval_ms,
					.resend_interval_s = c->alert_resend_interval_s,
					.meta_fn = read_meta,
					.meta_arg = ctx};
	det_limits_default(&o.limits);
	o.limits.max_jobs = c->detect_max_jobs;
	o.limits.max_bytes = c->detect_max_bytes;
	return det_service_start(&o, &ctx->detect, err, errlen);
}

void srv_detect_meta_changed(struct srv_ctx *ctx, const char *job)
{
	det_service_meta_changed(ctx->detect, job);
}
