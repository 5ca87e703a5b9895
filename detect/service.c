/* service.c - detection wired into rankdbd (see service.h).
 *
 * Data flow, all on the pipeline's subscriber thread:
 *   deliver(ack)  -> det_engine_feed per series, det_engine_feed_span per span
 *   every eval_interval_ms (from deliver or tick):
 *       det_engine_eval -> conditions -> det_alerts_update -> transitions
 *       transitions (firing, resolved) -> det_notify_send + one event each
 *       written to the job's event store through the pipeline (internal)
 *   tick          -> also the periodic re-send (det_alerts_due) and the
 *                    derived series (det_engine_derived), stored likewise
 * The first callback of the thread first restores firing alerts from the
 * event store and warms the engine up from stored history: the points and
 * spans of the last warmup_window_s whose (client) time is before the
 * service started. What was written since is delivered live by the
 * pipeline and judged as live (a NaN sent just after a restart raises its
 * alert); the engine takes a point it has already seen only once.
 *
 * Alert events: a log record at the alert's rank (the job's pseudo-rank for
 * job-level alerts), level warn (warning) or error (critical), message
 * "alert <alertname> <state>: <summary>", fields
 *   {"rankdb":"alert","alertname","state","severity","rank","phase","metric",
 *    "value","baseline","step","active_at","starts_at","ends_at","summary",
 *    "description"}
 * (times in ns; value/baseline null when unknown). Restore reads them back
 * (field rankdb = alert): the newest record of an identity decides.
 *
 * Failure: nothing here fails a write. A transition whose event cannot be
 * stored is counted and logged (rate-limited); delivery failures are
 * notify.c's. Threading: d->mu guards the rules pointer and the stats that
 * are not atomic; engine, alerts and notify have their own locks.
 */
#include "detect/service.h"
#include "common/rdb_buf.h"
#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_log.h"
#include "common/rdb_map.h"
#include "common/rdb_time.h"
#include "detect/rules.h"
#include "ingest/pipeline.h"
#include "storage/sto.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CONDS	   16384  /* conditions one evaluation may hold */
#define MAX_TRANSITIONS	   4096	  /* transitions handled per evaluation */
#define KNOWN_JOBS_MAX	   100000 /* jobs whose metadata was read; then reset */
#define META_REFRESH_S	   60	  /* metadata re-read while a job sends */
#define RESTORE_MAX_EVENTS 20000  /* alert records read back per job at start */
#define RESTORE_WINDOW_NS  (7LL * 24 * 3600 * 1000000000LL)
#define WARM_MAX_POINTS	   100000 /* points replayed per series at start */
#define WARM_MAX_SPANS	   200000 /* spans replayed per job at start */

struct det_service {
	struct det_service_options o;
	char rules_path[4096];
	char am_urls[4096];
	char gen_url[512];
	pthread_mutex_t mu; /* rules pointer, reload counters */
	/* rules pointer too: read by want() on the writing threads, written
	 * (write-locked) by a reload; the old set is freed after the swap */
	pthread_rwlock_t rules_rw;
	struct det_rules *rules;
	struct det_engine *engine;
	struct det_alerts *alerts;
	struct det_notify *notify;
	int64_t started_ns; /* wall time det_service_start ran: warm-up reads before it */
	/* subscriber-thread state */
	bool warm_done;
	int64_t last_eval_mono_ns;
	struct det_cond *conds;
	size_t nconds, conds_cap;
	struct det_alert *trans; /* transitions of one evaluation */
	size_t ntrans;
	struct rdb_map known_jobs; /* hash of job -> (void *)(second it was read) */
	struct mdl_batch *derived;
	struct mdl_events *events;
	/* counters */
	_Atomic uint64_t events_written, events_failed, derived_points, restored;
	_Atomic uint64_t reloads, reload_failures, eval_ns_last;
};

/* ---- metadata -------------------------------------------------------------- */

static void load_meta(struct det_service *d, const char *job)
{
	if (!d->o.meta_fn)
		return;
	struct det_job_meta m;
	if (d->o.meta_fn(d->o.meta_arg, job, &m) == 0)
		det_engine_set_meta(d->engine, job, &m);
}

/* Reads a job's metadata the first time the thread sees the job, and
 * again every META_REFRESH_S while it sends (the engine may have evicted
 * the job's state, metadata included, to stay within its memory bound; a
 * PUT of the document is seen at once through det_service_meta_changed). */
static void note_job(struct det_service *d, const char *job, int64_t now_ns)
{
	uint64_t h = rdb_hash64(job, strlen(job), 0x6a6f62);
	uintptr_t now_s = (uintptr_t)(now_ns / 1000000000LL);
	uintptr_t loaded_s = (uintptr_t)rdb_map_get(&d->known_jobs, h);
	if (loaded_s && now_s - loaded_s < META_REFRESH_S)
		return;
	if (!loaded_s && d->known_jobs.n >= KNOWN_JOBS_MAX) {
		rdb_map_free(&d->known_jobs);
		memset(&d->known_jobs, 0, sizeof(d->known_jobs));
	}
	if (rdb_map_put(&d->known_jobs, h, (void *)(now_s ? now_s : 1)) == 0)
		load_meta(d, job);
}

void det_service_meta_changed(struct det_service *d, const char *job)
{
	if (d)
		load_meta(d, job);
}

/* ---- alert events ------------------------------------------------------------ */

static void put_num(struct rdb_buf *b, const char *key, double v)
{
	if (isfinite(v))
		rdb_buf_printf(b, ",\"%s\":%.17g", key, v);
	else
		rdb_buf_printf(b, ",\"%s\":null", key);
}

static void put_str(struct rdb_buf *b, const char *key, const char *v)
{
	rdb_buf_printf(b, ",\"%s\":", key);
	rdb_buf_json_str(b, v, strlen(v));
}

/* The fields object of an alert record (see the top of this file). */
static int alert_fields(const struct det_alert *al, struct rdb_buf *b)
{
	const struct det_cond *c = &al->c;
	rdb_buf_puts(b, "{\"rankdb\":\"alert\"");
	put_str(b, "alertname", c->alertname);
	put_str(b, "state", det_alert_state_name(al->state));
	put_str(b, "severity", c->severity == DET_SEV_CRITICAL ? "critical" : "warning");
	if (c->rank >= 0)
		rdb_buf_printf(b, ",\"rank\":%lld", (long long)c->rank);
	else
		rdb_buf_puts(b, ",\"rank\":null");
	put_str(b, "phase", c->phase);
	put_str(b, "metric", c->metric);
	put_num(b, "value", c->value);
	put_num(b, "baseline", c->baseline);
	if (c->step != INT64_MIN)
		rdb_buf_printf(b, ",\"step\":%lld", (long long)c->step);
	rdb_buf_printf(b, ",\"active_at\":%lld,\"starts_at\":%lld,\"ends_at\":%lld",
		       (long long)al->active_ns, (long long)al->starts_ns, (long long)al->ends_ns);
	put_str(b, "summary", c->summary);
	put_str(b, "description", c->description);
	return rdb_buf_putc(b, '}');
}

/* Adds the record of one transition to d->events. */
static int add_alert_event(struct det_service *d, const struct det_alert *al, int64_t now_ns,
			   struct rdb_buf *text, struct rdb_buf *fields)
{
	const struct det_cond *c = &al->c;
	text->len = 0;
	fields->len = 0;
	int rc = rdb_buf_printf(text, "alert %s %s: %s", c->alertname,
				det_alert_state_name(al->state), c->summary);
	if (rc == 0)
		rc = alert_fields(al, fields);
	if (rc)
		return rc;
	struct mdl_event ev = {
	    .kind = MDL_EV_LOG,
	    .level = c->severity == DET_SEV_CRITICAL ? MDL_LEVEL_ERROR : MDL_LEVEL_WARN,
	    .rank = c->rank >= 0 ? (uint32_t)c->rank : MDL_RANK_JOB,
	    .ts_ns = now_ns,
	    .step = c->step == INT64_MIN ? MDL_STEP_NONE : c->step,
	    .job = c->job,
	    .job_len = strlen(c->job),
	    .text = (const char *)text->data,
	    .text_len = text->len < MDL_EVENT_TEXT_MAX ? text->len : MDL_EVENT_TEXT_MAX,
	    .fields = (const char *)fields->data,
	    .fields_len = fields->len,
	};
	return mdl_events_add(d->events, &ev);
}

/* Delivers and records the transitions of one evaluation. */
static void handle_transitions(struct det_service *d, int64_t now_ns)
{
	struct rdb_buf text, fields;
	rdb_buf_init(&text, MDL_EVENT_TEXT_MAX);
	rdb_buf_init(&fields, MDL_EVENT_FIELDS_MAX);
	mdl_events_reset(d->events);
	size_t recorded = 0;
	for (size_t i = 0; i < d->ntrans; i++) {
		const struct det_alert *al = &d->trans[i];
		if (al->state == DET_ALERT_PENDING)
			continue;
		rdb_info("detect", "alert %s %s: job %s rank %lld%s%s: %s", al->c.alertname,
			 det_alert_state_name(al->state), al->c.job, (long long)al->c.rank,
			 al->c.phase[0] ? " phase " : "", al->c.phase, al->c.summary);
		det_notify_send(d->notify, al, now_ns);
		if (add_alert_event(d, al, now_ns, &text, &fields) == 0)
			recorded++;
		else
			atomic_fetch_add(&d->events_failed, 1);
	}
	rdb_buf_free(&text);
	rdb_buf_free(&fields);
	if (recorded == 0)
		return;
	struct ing_write w = {.events = d->events, .source = ING_SRC_INTERNAL};
	struct ing_outcome out;
	if (ing_submit(d->o.pipe, &w, &out) == 0) {
		atomic_fetch_add(&d->events_written, recorded);
		return;
	}
	atomic_fetch_add(&d->events_failed, recorded);
	static struct rdb_log_ratelimit rl;
	rdb_log_limited(&rl, 10, RDB_LOG_WARN, "detect",
			"could not store %zu alert transitions in the event store: %s (they were "
			"still delivered to Alertmanager / webhooks)",
			recorded, out.msg);
}

/* ---- evaluation ----------------------------------------------------------------- */

static int collect_cond(void *arg, const struct det_cond *c)
{
	struct det_service *d = arg;
	if (d->nconds == d->conds_cap) {
		if (d->conds_cap >= MAX_CONDS)
			return 0; /* the set is cut; logged by the caller */
		size_t cap = d->conds_cap ? d->conds_cap * 2 : 64;
		struct det_cond *p = realloc(d->conds, cap * sizeof(*p));
		if (!p)
			return 0;
		d->conds = p;
		d->conds_cap = cap;
	}
	d->conds[d->nconds++] = *c;
	return 0;
}

static int collect_transition(void *arg, const struct det_alert *al, uint8_t old_state)
{
	struct det_service *d = arg;
	(void)old_state;
	if (d->ntrans < MAX_TRANSITIONS)
		d->trans[d->ntrans++] = *al;
	return 0;
}

static void evaluate(struct det_service *d, int64_t now_ns)
{
	int64_t t0 = rdb_now_mono_ns();
	d->nconds = 0;
	d->ntrans = 0;
	det_engine_eval(d->engine, now_ns, collect_cond, d);
	if (d->nconds >= MAX_CONDS) {
		/* a cut set would resolve alerts that still hold: skip this round */
		static struct rdb_log_ratelimit rl;
		rdb_log_limited(&rl, 60, RDB_LOG_WARN, "detect",
				"more than %d conditions hold at once; this evaluation is "
				"skipped (alerts keep their state)",
				MAX_CONDS);
		return;
	}
	det_alerts_update(d->alerts, d->conds, d->nconds, now_ns, collect_transition, d);
	handle_transitions(d, now_ns);
	atomic_store(&d->eval_ns_last, (uint64_t)(rdb_now_mono_ns() - t0));
}

static void maybe_evaluate(struct det_service *d, int64_t now_ns)
{
	int64_t mono = rdb_now_mono_ns();
	if (mono - d->last_eval_mono_ns < (int64_t)d->o.eval_interval_ms * 1000000)
		return;
	d->last_eval_mono_ns = mono;
	evaluate(d, now_ns);
}

static int resend_one(void *arg, const struct det_alert *al)
{
	struct det_service *d = arg;
	det_notify_resend(d->notify, al, rdb_now_ns());
	return 0;
}

static int add_derived(void *arg, const char *job, const char *metric, int64_t ts_ns, int64_t step,
		       double value)
{
	struct det_service *d = arg;
	uint64_t bits;
	memcpy(&bits, &value, sizeof(bits));
	mdl_batch_add(d->derived, job, strlen(job), MDL_RANK_JOB, metric, strlen(metric), ts_ns,
		      step == DET_STEP_NONE ? MDL_STEP_NONE : step, 0, bits);
	return 0;
}

static void store_derived(struct det_service *d, int64_t now_ns)
{
	mdl_batch_reset(d->derived);
	det_engine_derived(d->engine, now_ns, add_derived, d);
	size_t n = mdl_batch_points(d->derived);
	if (n == 0)
		return;
	struct ing_write w = {.points = d->derived, .source = ING_SRC_INTERNAL};
	struct ing_outcome out;
	if (ing_submit(d->o.pipe, &w, &out) == 0) {
		atomic_fetch_add(&d->derived_points, n);
		return;
	}
	static struct rdb_log_ratelimit rl;
	rdb_log_limited(&rl, 60, RDB_LOG_WARN, "detect",
			"could not store %zu derived points (mfu, checkpoint.age): %s", n, out.msg);
}

/* ---- restart: restore firing alerts, warm the engine up ----------------------- */

static void copy_str(char *dst, size_t cap, json_t *o, const char *key)
{
	const char *v = json_string_value(json_object_get(o, key));
	snprintf(dst, cap, "%s", v ? v : "");
}

static double get_num(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_number(v) ? json_number_value(v) : NAN;
}

static int64_t get_i64(json_t *o, const char *key, int64_t dflt)
{
	json_t *v = json_object_get(o, key);
	return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

struct restore_ctx {
	struct det_service *d;
	const char *job;
	struct rdb_map seen; /* identity hash -> (void *)1: newest record handled */
};

/* Newest first: the first record of an identity is its last transition. */
static int restore_event(void *arg, const struct mdl_event *ev)
{
	struct restore_ctx *r = arg;
	json_t *o = json_loadb(ev->fields, ev->fields_len, 0, NULL);
	if (!o)
		return 0;
	struct det_alert al;
	memset(&al, 0, sizeof(al));
	copy_str(al.c.alertname, sizeof(al.c.alertname), o, "alertname");
	copy_str(al.c.phase, sizeof(al.c.phase), o, "phase");
	copy_str(al.c.metric, sizeof(al.c.metric), o, "metric");
	snprintf(al.c.job, sizeof(al.c.job), "%s", r->job);
	al.c.rank = get_i64(o, "rank", DET_RANK_NONE);
	char key[DET_NAME_MAX * 2 + DET_METRIC_MAX + 32];
	int kl = snprintf(key, sizeof(key), "%s|%lld|%s|%s", al.c.alertname, (long long)al.c.rank,
			  al.c.phase, al.c.metric);
	uint64_t h = rdb_hash64(key, (size_t)kl, 0);
	char state[16];
	copy_str(state, sizeof(state), o, "state");
	if (!rdb_map_get(&r->seen, h) && rdb_map_put(&r->seen, h, (void *)1) == 0 &&
	    strcmp(state, "firing") == 0 && al.c.alertname[0]) {
		char sev[16];
		copy_str(sev, sizeof(sev), o, "severity");
		al.c.severity = strcmp(sev, "critical") == 0 ? DET_SEV_CRITICAL : DET_SEV_WARNING;
		copy_str(al.c.summary, sizeof(al.c.summary), o, "summary");
		copy_str(al.c.description, sizeof(al.c.description), o, "description");
		al.c.value = get_num(o, "value");
		al.c.baseline = get_num(o, "baseline");
		al.c.step = get_i64(o, "step", INT64_MIN);
		al.state = DET_ALERT_FIRING;
		al.active_ns = get_i64(o, "active_at", ev->ts_ns);
		al.starts_ns = get_i64(o, "starts_at", ev->ts_ns);
		al.updated_ns = ev->ts_ns;
		if (det_alerts_restore(r->d->alerts, &al) == 0)
			atomic_fetch_add(&r->d->restored, 1);
	}
	json_decref(o);
	return 0;
}

static void restore_job(struct det_service *d, const char *job, int64_t now_ns)
{
	static const char *const keys[] = {"rankdb"};
	static const char *const vals[] = {"alert"};
	struct restore_ctx r = {.d = d, .job = job};
	struct sto_ev_filter f = {.job = job,
				  .kinds = 1u << MDL_EV_LOG,
				  .min_level = MDL_LEVEL_DEBUG,
				  .from_ns = now_ns - RESTORE_WINDOW_NS,
				  .to_ns = INT64_MAX,
				  .field_keys = keys,
				  .field_vals = vals,
				  .nfields = 1,
				  .attempt = -1};
	struct sto_read_error err;
	int rc = sto_events_read(d->o.sto, &f, RESTORE_MAX_EVENTS, restore_event, &r, &err);
	if (rc && rc != RDB_ELIMIT)
		rdb_warn("detect",
			 "job %s: reading its alert history failed (%s%s%s); alerts "
			 "that were firing before the restart may be sent again",
			 job, rdb_strerror(rc), rc == RDB_ECORRUPT ? ": " : "",
			 rc == RDB_ECORRUPT ? err.msg : "");
	rdb_map_free(&r.seen);
}

struct warm_ctx {
	struct det_service *d;
	const char *job;
	int64_t now_ns;
	struct mdl_cols cols;
	size_t series, points;
};

static int warm_series(void *arg, const struct mdl_series_key *k, uint64_t id)
{
	struct warm_ctx *w = arg;
	struct det_service *d = w->d;
	pthread_mutex_lock(&d->mu);
	struct det_metric_id m = det_rules_metric(d->rules, k->metric, strlen(k->metric));
	pthread_mutex_unlock(&d->mu);
	if (m.metric == DET_MET_NONE)
		return 0;
	int64_t window = (int64_t)d->o.warmup_window_s * 1000000000LL;
	struct sto_range r = {.from_ns = w->now_ns - window, .to_ns = d->started_ns - 1};
	struct sto_read_error err;
	if (sto_read(d->o.sto, id, &r, WARM_MAX_POINTS, &w->cols, &err) != 0 || w->cols.n == 0)
		return 0;
	det_engine_feed(d->engine, k->job, strlen(k->job), k->rank, k->metric, strlen(k->metric),
			w->cols.ts_ns, w->cols.step, w->cols.attempt, w->cols.value, w->cols.n,
			w->now_ns, true);
	w->series++;
	w->points += w->cols.n;
	return 0;
}

static int warm_span(void *arg, const struct mdl_event *ev)
{
	struct warm_ctx *w = arg;
	det_engine_feed_span(w->d->engine, ev->job, ev->job_len, ev->rank, ev->step, ev->text,
			     ev->text_len, ev->ts_ns, ev->duration_ns, ev->attempt, w->now_ns,
			     true);
	return 0;
}

static void warm_job(struct det_service *d, const char *job, int64_t now_ns, size_t *series,
		     size_t *points)
{
	struct warm_ctx w = {.d = d, .job = job, .now_ns = now_ns};
	sto_list_series(d->o.sto, job, warm_series, &w);
	mdl_cols_free(&w.cols);
	struct sto_ev_filter f = {.job = job,
				  .kinds = 1u << MDL_EV_SPAN,
				  .from_ns = now_ns - (int64_t)d->o.warmup_window_s * 1000000000LL,
				  .to_ns = d->started_ns - 1,
				  .attempt = -1};
	struct sto_read_error err;
	sto_events_read(d->o.sto, &f, WARM_MAX_SPANS, warm_span, &w, &err);
	if (w.series)
		note_job(d, job, now_ns);
	*series += w.series;
	*points += w.points;
}

struct job_list {
	char (*jobs)[MDL_JOB_MAX + 1];
	size_t n, cap;
};

static int list_job(void *arg, const char *job, uint64_t nseries)
{
	struct job_list *l = arg;
	(void)nseries;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		void *p = realloc(l->jobs, cap * sizeof(*l->jobs));
		if (!p)
			return -ENOMEM;
		l->jobs = p;
		l->cap = cap;
	}
	snprintf(l->jobs[l->n++], MDL_JOB_MAX + 1, "%s", job);
	return 0;
}

static void warm_up(struct det_service *d, int64_t now_ns)
{
	d->warm_done = true;
	struct job_list l = {0};
	if (sto_list_jobs(d->o.sto, list_job, &l) != 0)
		rdb_warn("detect", "cannot list the jobs at start: detection starts without "
				   "history and restored alerts");
	size_t series = 0, points = 0;
	int64_t t0 = rdb_now_mono_ns();
	for (size_t i = 0; i < l.n; i++) {
		restore_job(d, l.jobs[i], now_ns);
		warm_job(d, l.jobs[i], now_ns, &series, &points);
	}
	free(l.jobs);
	if (l.n)
		rdb_info("detect",
			 "started over %zu stored jobs: %llu alerts restored as firing, "
			 "%zu series (%zu points of the last %u s) replayed in %.1f ms",
			 l.n, (unsigned long long)atomic_load(&d->restored), series, points,
			 d->o.warmup_window_s, (double)(rdb_now_mono_ns() - t0) / 1e6);
}

/* ---- subscriber callbacks ------------------------------------------------------ */

static void on_ack(void *arg, const struct ing_ack *ack)
{
	struct det_service *d = arg;
	if (!d->warm_done)
		warm_up(d, rdb_now_ns());
	if (ack->source == ING_SRC_INTERNAL) /* our own alerts and derived series */
		return;
	for (size_t i = 0; i < mdl_batch_nseries(ack->points); i++) {
		const struct mdl_batch_series *s = mdl_batch_series_at(ack->points, i);
		if (!s)
			break;
		note_job(d, s->key.job, ack->ack_ns);
		det_engine_feed(d->engine, s->key.job, s->job_len, s->key.rank, s->key.metric,
				s->metric_len, s->pts.ts_ns, s->pts.step, s->pts.attempt,
				s->pts.value, s->pts.n, ack->ack_ns, false);
	}
	for (size_t i = 0; i < mdl_events_count(ack->events); i++) {
		const struct mdl_event *e = mdl_events_at(ack->events, i);
		if (e->kind != MDL_EV_SPAN)
			continue;
		det_engine_feed_span(d->engine, e->job, e->job_len, e->rank, e->step, e->text,
				     e->text_len, e->ts_ns, e->duration_ns, e->attempt, ack->ack_ns,
				     false);
	}
	maybe_evaluate(d, rdb_now_ns());
}

/* The pipeline's want filter (writing threads): the series whose metric a
 * detector watches. The others still reach on_ack for liveness and step
 * progress where they carry something new (pipeline.h). */
static void want_series(void *arg, const struct mdl_batch *points, bool *want)
{
	struct det_service *d = arg;
	size_t n = mdl_batch_nseries(points);
	pthread_rwlock_rdlock(&d->rules_rw);
	for (size_t i = 0; i < n; i++) {
		const struct mdl_batch_series *s = mdl_batch_series_at(points, i);
		if (!s)
			break;
		want[i] =
		    det_rules_metric_hashed(d->rules, s->key.metric, s->metric_len, s->metric_hash)
			.metric != DET_MET_NONE;
	}
	pthread_rwlock_unlock(&d->rules_rw);
}

static void on_tick(void *arg, int64_t now_ns)
{
	struct det_service *d = arg;
	if (!d->warm_done)
		warm_up(d, now_ns);
	maybe_evaluate(d, now_ns);
	det_alerts_due(d->alerts, now_ns, resend_one, d);
	store_derived(d, now_ns);
}

/* ---- lifecycle --------------------------------------------------------------------- */

static int load_rules(const char *path, struct det_rules **out, char *err, size_t errlen)
{
	if (!path || !*path)
		return det_rules_default(out);
	return det_rules_load_file(path, out, err, errlen);
}

static void set_defaults(struct det_service_options *o)
{
	if (!o->eval_interval_ms)
		o->eval_interval_ms = 250;
	if (!o->resend_interval_s)
		o->resend_interval_s = 60;
	if (!o->warmup_window_s)
		o->warmup_window_s = 900;
}

static int start_parts(struct det_service *d, char *err, size_t errlen)
{
	int rc = load_rules(d->rules_path, &d->rules, err, errlen);
	if (rc)
		return rc;
	rc = det_engine_new(&d->o.limits, d->rules, &d->engine);
	struct det_alerts_options ao = {.resend_interval_s = d->o.resend_interval_s};
	if (rc == 0)
		rc = det_alerts_new(&ao, &d->alerts);
	struct det_notify_options no = {.alertmanager_urls = d->am_urls,
					.generator_url = d->gen_url,
					.resend_interval_s = d->o.resend_interval_s,
					.eval_interval_ms = d->o.eval_interval_ms};
	if (rc == 0) {
		rc = det_notify_new(&no, &d->notify);
		if (rc)
			snprintf(err, errlen,
				 "alert delivery: alertmanager_url '%s' is not a list of "
				 "http(s) base URLs (%s)",
				 d->am_urls, rdb_strerror(rc));
	}
	if (rc == 0)
		rc = mdl_batch_new(1 << 20, 1 << 16, &d->derived);
	if (rc == 0)
		rc = mdl_events_new(MAX_TRANSITIONS, 64u << 20, &d->events);
	d->trans = rc == 0 ? calloc(MAX_TRANSITIONS, sizeof(*d->trans)) : NULL;
	if (rc == 0 && !d->trans)
		rc = -ENOMEM;
	return rc;
}

int det_service_start(const struct det_service_options *o, struct det_service **out, char *err,
		      size_t errlen)
{
	struct det_service *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	err[0] = 0;
	d->started_ns = rdb_now_ns();
	d->o = *o;
	set_defaults(&d->o);
	snprintf(d->rules_path, sizeof(d->rules_path), "%s", o->rules_path ? o->rules_path : "");
	snprintf(d->am_urls, sizeof(d->am_urls), "%s",
		 o->alertmanager_urls ? o->alertmanager_urls : "");
	snprintf(d->gen_url, sizeof(d->gen_url), "%s", o->generator_url ? o->generator_url : "");
	d->o.rules_path = d->rules_path;
	pthread_mutex_init(&d->mu, NULL);
	pthread_rwlock_init(&d->rules_rw, NULL);
	int rc = start_parts(d, err, errlen);
	struct ing_subscriber sub = {.name = "detect",
				     .deliver = on_ack,
				     .tick = on_tick,
				     .tick_ms = d->o.eval_interval_ms,
				     .arg = d,
				     .queue_bytes = d->o.queue_bytes,
				     .want = want_series};
	if (rc == 0)
		rc = ing_pipeline_subscribe(d->o.pipe, &sub);
	if (rc) {
		if (!err[0])
			snprintf(err, errlen, "%s", rdb_strerror(rc));
		det_service_stop(d);
		return rc;
	}
	*out = d;
	return 0;
}

void det_service_stop(struct det_service *d)
{
	if (!d)
		return;
	det_notify_free(d->notify);
	det_alerts_free(d->alerts);
	det_engine_free(d->engine);
	det_rules_free(d->rules);
	rdb_map_free(&d->known_jobs);
	mdl_batch_free(d->derived);
	mdl_events_free(d->events);
	free(d->conds);
	free(d->trans);
	pthread_mutex_destroy(&d->mu);
	pthread_rwlock_destroy(&d->rules_rw);
	free(d);
}

int det_service_reload_rules(struct det_service *d, char *err, size_t errlen)
{
	struct det_rules *fresh = NULL;
	err[0] = 0;
	int rc = load_rules(d->rules_path, &fresh, err, errlen);
	if (rc) {
		atomic_fetch_add(&d->reload_failures, 1);
		if (!err[0])
			snprintf(err, errlen, "%s: %s", d->rules_path, rdb_strerror(rc));
		return rc;
	}
	pthread_mutex_lock(&d->mu);
	struct det_rules *old = d->rules;
	det_engine_set_rules(d->engine, fresh);
	pthread_rwlock_wrlock(&d->rules_rw);
	d->rules = fresh;
	pthread_rwlock_unlock(&d->rules_rw);
	pthread_mutex_unlock(&d->mu);
	det_rules_free(old);
	atomic_fetch_add(&d->reloads, 1);
	size_t jobs = 0, aliases = 0;
	det_rules_counts(fresh, &jobs, &aliases);
	snprintf(err, errlen, "rules reloaded from %s: %zu job sections, %zu aliases",
		 d->rules_path[0] ? d->rules_path : "(built-in defaults)", jobs, aliases);
	return 0;
}

int det_service_alerts(struct det_service *d, const struct det_alert_filter *f,
		       int (*fn)(void *arg, const struct det_alert *al), void *arg)
{
	return det_alerts_list(d->alerts, f, fn, arg);
}

int det_service_health(struct det_service *d, const char *job, struct det_job_health *out)
{
	return det_engine_health(d->engine, job, rdb_now_ns(), out);
}

int det_service_jobs(struct det_service *d,
		     int (*fn)(void *arg, const struct det_job_health *summary), void *arg)
{
	return det_engine_jobs(d->engine, rdb_now_ns(), fn, arg);
}

void det_service_stats(struct det_service *d, struct det_service_stats *out)
{
	memset(out, 0, sizeof(*out));
	det_engine_stats(d->engine, &out->engine);
	det_alerts_stats(d->alerts, &out->alerts);
	det_notify_stats(d->notify, &out->notify);
	out->events_written = atomic_load(&d->events_written);
	out->events_failed = atomic_load(&d->events_failed);
	out->derived_points = atomic_load(&d->derived_points);
	out->restored = atomic_load(&d->restored);
	out->rules_reloads = atomic_load(&d->reloads);
	out->rules_reload_failures = atomic_load(&d->reload_failures);
	out->eval_ns_last = atomic_load(&d->eval_ns_last);
}
