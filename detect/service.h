/* service.h - detection as a running part of rankdbd: the first subscriber
 * of the ingest pipeline. It feeds every acknowledged write to the engine
 * (detect/engine.h), evaluates the detectors every eval_interval_ms, runs the
 * alert lifecycle (detect/alerts.h), delivers transitions to Alertmanager and
 * webhooks (detect/notify.h), writes each transition into the job's event
 * store (so logs, logs-around-step, Grafana annotations and the dashboard
 * show it) and stores the derived job-level series (mfu, checkpoint.age).
 *
 * It runs beside ingest, never in front of it: everything happens on the
 * pipeline's subscriber thread; a slow receiver, a slow engine or a flood of
 * alerts costs the detector its queue (counted drops), never a write.
 *
 * Restart: alerts that were firing (their last transition in the event
 * store is "firing") are restored without a new transition, and the
 * engine's state is warmed up from the last minutes of stored data (no
 * single-point alert is raised from history), so a restart neither re-sends
 * nor loses what was firing.
 *
 * Threading: det_service_* calls are thread-safe (HTTP threads list alerts
 * and health while the subscriber thread evaluates). Ownership: borrowed
 * sto and pipeline must outlive the service.
 */
#ifndef DET_SERVICE_H
#define DET_SERVICE_H

#include "detect/alerts.h"
#include "detect/engine.h"
#include "detect/notify.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sto;
struct ing_pipeline;

struct det_service_options {
	struct sto *sto;	       /* borrowed: history for warm-up and alert restore */
	struct ing_pipeline *pipe;     /* borrowed: subscribed to; internal writes go through it */
	const char *rules_path;	       /* operator rules file; NULL or "" = built-in rules */
	const char *alertmanager_urls; /* comma-separated base URLs; NULL or "" = none */
	const char *generator_url;     /* rankdbd's base URL for generatorURL; may be NULL */
	uint32_t eval_interval_ms;     /* detectors run at least this often; 0 = 250 */
	uint32_t resend_interval_s;    /* firing alerts re-sent to Alertmanager; 0 = 60 */
	uint32_t warmup_window_s;      /* history replayed at start; 0 = 900 */
	size_t queue_bytes;	       /* the subscriber queue bound; 0 = 64 MiB */
	struct det_limits limits;      /* engine bounds (zero fields: defaults) */
	/* Reads the parsed metadata of job; 0, RDB_ENOTFOUND (none) or an error.
	 * Called on the subscriber thread (first sight of a job) and from
	 * det_service_meta_changed. NULL: no metadata. */
	int (*meta_fn)(void *arg, const char *job, struct det_job_meta *out);
	void *meta_arg;
};

struct det_service;

/* Loads the rules (a bad file: RDB_EINVAL with err naming file:line),
 * starts delivery and subscribes to the pipeline. 0, RDB_EINVAL, -ENOMEM,
 * -errno. *out owned by the caller (det_service_stop). */
int det_service_start(const struct det_service_options *o, struct det_service **out, char *err,
		      size_t errlen);

/* Frees the service. Call after ing_pipeline_free (the subscriber thread
 * is gone then). Delivery drains for a bounded time. NULL ok. */
void det_service_stop(struct det_service *d);

/* Re-reads the rules file. A bad file is refused (RDB_EINVAL, err says
 * where) and the rules in force stay. 0 on success (err then holds a
 * summary line). */
int det_service_reload_rules(struct det_service *d, char *err, size_t errlen);

/* The job's metadata document changed (PUT meta): re-read it. */
void det_service_meta_changed(struct det_service *d, const char *job);

/* Alerts matching f, newest first (det_alerts_list). */
int det_service_alerts(struct det_service *d, const struct det_alert_filter *f,
		       int (*fn)(void *arg, const struct det_alert *al), void *arg);

/* A job's health (det_engine_health at now). RDB_ENOTFOUND: no state. */
int det_service_health(struct det_service *d, const char *job, struct det_job_health *out);

/* Summaries of every job the engine holds (det_engine_jobs at now). */
int det_service_jobs(struct det_service *d,
		     int (*fn)(void *arg, const struct det_job_health *summary), void *arg);

struct det_service_stats {
	struct det_engine_stats engine;
	struct det_alerts_stats alerts;
	struct det_notify_stats notify;
	uint64_t events_written; /* alert transitions written to the event store */
	uint64_t events_failed;	 /* ... that could not be written */
	uint64_t derived_points; /* mfu / checkpoint.age points stored */
	uint64_t restored;	 /* alerts restored as firing at start */
	uint64_t rules_reloads, rules_reload_failures;
	uint64_t eval_ns_last; /* time the last evaluation took */
};
void det_service_stats(struct det_service *d, struct det_service_stats *out);

#endif
