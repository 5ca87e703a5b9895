/* notify.h - alert delivery to Alertmanagers (v2 API) and webhooks.
 *
 * A bounded queue in front of one sender thread that drives every receiver
 * concurrently (libcurl multi interface), so a receiver that is down or slow
 * holds up only its own deliveries. Callers never block: det_notify_send and
 * det_notify_resend render the alert, queue it and return. Deliveries are
 * retried with exponential backoff and jitter per receiver, within a bounded
 * number of attempts and a bounded age. Formats: docs/API.md, "Alert
 * delivery".
 */
#ifndef DET_NOTIFY_H
#define DET_NOTIFY_H

#include <stddef.h>
#include <stdint.h>

#include "detect/cond.h"

struct det_notify_options {
	/* Comma-separated Alertmanager base URLs, e.g.
	 * "http://127.0.0.1:9093,http://am2:9093" (alerts go to
	 * BASE/api/v2/alerts). NULL or "" = no Alertmanager. At most
	 * DET_NOTIFY_MAX_AM, each shorter than DET_URL_MAX. */
	const char *alertmanager_urls;
	/* rankdbd's own base URL for each alert's generatorURL
	 * (BASE/api/v1/alerts?job=J&alertname=A); NULL or "" = omitted. */
	const char *generator_url;
	uint32_t resend_interval_s;  /* 0 = 60; endsAt of a firing alert is */
	uint32_t eval_interval_ms;   /* 0 = 1000; now + 4 x max(resend, eval) */
	uint32_t connect_timeout_ms; /* 0 = 3000 */
	uint32_t timeout_ms;	     /* whole request; 0 = 10000 */
	uint32_t max_queue;	     /* deliveries held (queued + in flight); 0 = 4096 */
	uint32_t max_batch;	     /* alerts per Alertmanager POST; 0 = 64 */
	uint32_t max_webhooks;	     /* distinct webhook URLs tracked; 0 = 64 */
	uint32_t retry_min_ms;	     /* first backoff; 0 = 500 */
	uint32_t retry_max_ms;	     /* backoff cap; 0 = 30000 */
	uint32_t max_attempts;	     /* per delivery, then given up; 0 = 10 */
	uint32_t max_age_s;	     /* a delivery older than this is given up; 0 = 600 */
	uint32_t drain_timeout_ms;   /* det_notify_free keeps delivering this long;
					0 = 2000; UINT32_MAX = abort at once */
};

#define DET_NOTIFY_MAX_AM 8

/* Receiver kinds for the per-kind counters. */
enum det_notify_kind {
	DET_NOTIFY_AM = 0,
	DET_NOTIFY_WEBHOOK = 1,
};

/* Counters since det_notify_new. Per kind, indexed by enum det_notify_kind.
 * A delivery is one alert for one receiver. Every queued delivery ends in
 * exactly one of sent, failed, dropped_full, coalesced, dropped_shutdown, or
 * is still counted in depth:
 *   queued = sent + failed + dropped_full + coalesced + dropped_shutdown + depth
 * (dropped_full counts evicted queued deliveries; refused ones were never
 * queued and are counted in refused). */
struct det_notify_stats {
	uint64_t queued[2];	      /* deliveries accepted into the queue */
	uint64_t sent[2];	      /* delivered (2xx) */
	uint64_t failed[2];	      /* given up: attempts/age exhausted, or a 4xx answer */
	uint64_t attempts_failed[2];  /* requests that failed, each counted once per
				       delivery in it (retried or not) */
	uint64_t retried[2];	      /* deliveries put back for another attempt */
	uint64_t dropped_full[2];     /* evicted (oldest first) to make room: queue full */
	uint64_t coalesced[2];	      /* Alertmanager: replaced by a newer state of the
					 same alert before it was sent */
	uint64_t dropped_shutdown[2]; /* still queued when det_notify_free gave up */
	uint64_t refused;	      /* det_notify_* calls that queued nothing for a
					 receiver (no memory, too many webhook URLs) */
	uint64_t requests[2];	      /* HTTP requests made */
	uint64_t depth;		      /* deliveries held now (queued + in flight) */
	uint64_t in_flight;	      /* deliveries in requests now */
};

struct det_notify;

/* Process-wide libcurl initialisation (curl_global_init), which is not
 * thread-safe: call it once from main() before any thread is started, and
 * det_notify_global_cleanup() once at exit after every det_notify is freed.
 * Returns 0 or RDB_EIO. det_notify_new fails with RDB_EINVAL before it. */
int det_notify_global_init(void);
void det_notify_global_cleanup(void);

/* Validates o (URLs must be http:// or https://), starts the sender thread.
 * Returns 0 and *out (caller owns; det_notify_free), RDB_EINVAL (bad option,
 * logged with the offending value; or det_notify_global_init not called),
 * -ENOMEM, or a negative errno from pthread_create. */
int det_notify_new(const struct det_notify_options *o, struct det_notify **out);

/* Stops the sender: keeps delivering what is queued for up to
 * drain_timeout_ms, then aborts requests in flight and drops the rest
 * (counted in dropped_shutdown); joins the thread and frees everything.
 * Blocks at most about drain_timeout_ms plus one poll. NULL ok. */
void det_notify_free(struct det_notify *n);

/* Queues a transition (al->state firing or resolved) for every Alertmanager
 * and for each webhook URL in al->c.webhooks. now_ns is the evaluation time:
 * a firing alert is sent with endsAt = now_ns + 4 x max(resend interval,
 * evaluation interval), a resolved one with endsAt = al->ends_ns. Never
 * blocks (a short mutex hold); copies what it needs from al. A full queue
 * evicts its oldest waiting delivery (counted in dropped_full): the newest
 * state of an alert is the one worth delivering. A waiting Alertmanager
 * delivery of the same alert (same id) is replaced in place (coalesced).
 * Returns 0 (queued for every receiver, or there are none), RDB_EINVAL
 * (pending alerts are never sent), or RDB_ELIMIT / -ENOMEM when at least one
 * receiver got nothing (counted in refused; the others are queued). */
int det_notify_send(struct det_notify *n, const struct det_alert *al, int64_t now_ns);

/* The periodic re-send of a firing alert (det_alerts_due): as
 * det_notify_send, but to the Alertmanagers only; webhooks see transitions
 * only. */
int det_notify_resend(struct det_notify *n, const struct det_alert *al, int64_t now_ns);

/* Counters and sizes. Never blocks for long, never fails. */
void det_notify_stats(struct det_notify *n, struct det_notify_stats *out);

/* Renders the Alertmanager v2 JSON object for al (as sent, without the
 * enclosing array) or the webhook document into buf (NUL-terminated).
 * For tests and for the API docs' examples. Returns the length, or
 * RDB_ELIMIT if it does not fit, or RDB_EINVAL for a pending alert. */
int det_notify_render_am(const struct det_notify *n, const struct det_alert *al, int64_t now_ns,
			 char *buf, size_t size);
int det_notify_render_webhook(const struct det_notify *n, const struct det_alert *al,
			      int64_t now_ns, char *buf, size_t size);

#endif
