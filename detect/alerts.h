/* alerts.h - the alert lifecycle: conditions in, pending -> firing ->
 * resolved transitions out, as Prometheus' alerting rules do it.
 *
 * One alert per identity (alertname, job, rank, phase, metric). The registry
 * is bounded (max_active alerts pending or firing; past it new identities are
 * refused and counted) and keeps a bounded ring of recently resolved alerts
 * for listing. Thread-safe: one mutex; the detection thread updates, HTTP
 * threads list. No function here reads the clock: now_ns is passed in.
 */
#ifndef DET_ALERTS_H
#define DET_ALERTS_H

#include <stddef.h>
#include <stdint.h>

#include "detect/cond.h"

/* old_state passed to the transition callback for an identity that had no
 * alert before this evaluation. */
#define DET_ALERT_NONE 255

/* Filter value meaning "any" for rank (ranks are >= 0, DET_RANK_NONE = -1
 * selects job-level alerts). */
#define DET_FILTER_ANY_RANK (-2)

struct det_alerts_options {
	uint32_t max_active;	    /* pending + firing alerts held; 0 = default 10000 */
	uint32_t max_resolved;	    /* recently resolved kept for listing; 0 = default 1000 */
	uint32_t resend_interval_s; /* firing alerts re-sent this often (det_alerts_due);
				       0 = default 60 (Prometheus' --rules.alert.resend-delay) */
};

struct det_alert_filter {
	const char *job;       /* exact job, or NULL = any */
	const char *alertname; /* exact alertname, or NULL = any */
	int64_t rank;	       /* exact rank, DET_RANK_NONE = job-level only,
				  DET_FILTER_ANY_RANK = any */
	uint8_t state_mask;    /* bit (1u << enum det_alert_state); 0 = any */
};

struct det_alerts_stats {
	uint64_t pending;		/* now */
	uint64_t firing;		/* now */
	uint64_t resolved_kept;		/* now, in the recently-resolved ring */
	uint64_t fired_total;		/* transitions to firing (restores not counted) */
	uint64_t resolved_total;	/* transitions firing -> resolved */
	uint64_t pending_dropped_total; /* pending alerts that cleared before firing */
	uint64_t refused_total;		/* new identities refused: max_active reached */
};

struct det_alerts;

/* Creates an empty registry. o may be NULL (all defaults). Returns 0 and
 * *out (caller owns; det_alerts_free), or -ENOMEM. Does not block. */
int det_alerts_new(const struct det_alerts_options *o, struct det_alerts **out);
/* Frees the registry and every alert it holds. NULL ok. No other thread may
 * use it during or after the call. */
void det_alerts_free(struct det_alerts *a);

/* Applies one evaluation's COMPLETE condition set at now_ns:
 *   - a new identity becomes pending (old_state DET_ALERT_NONE), or firing at
 *     once when its for_s is 0 (one callback, old_state DET_ALERT_NONE);
 *   - a pending alert present for >= for_s (the latest condition's for_s)
 *     becomes firing (starts_ns = now_ns);
 *   - an alert present in the set takes the condition's latest annotations,
 *     value, baseline, step, severity and webhooks (updated_ns = now_ns);
 *   - a firing alert absent from the set is resolved (ends_ns = now_ns) and
 *     moves to the recently-resolved ring (the oldest there is forgotten);
 *   - a pending alert absent from the set is dropped silently: no callback,
 *     never sent (counted in pending_dropped_total).
 * Conditions with the same identity in one set count as one (the last one's
 * annotations win). Order: active identities are updated first, then absent
 * ones resolve, then new identities are created, so room freed by this
 * evaluation's resolutions is available to its new alerts; a new identity
 * past max_active is refused (counted, logged rate-limited) and the rest of
 * the set is still applied. A firing transition counts as sent at now_ns for the
 * periodic re-send (det_alerts_due): the caller is expected to deliver it.
 * fn (may be NULL) is called once per transition with the alert after the
 * change and the state before it; it runs with the registry's lock held, so
 * it must not call det_alerts_* and should not block for long (listing
 * threads wait). A non-zero return from fn is remembered and returned after
 * the whole set has been applied (the set is applied either way).
 * Strings in conds need not be NUL-terminated within their arrays (they are
 * cut). Returns 0, fn's first non-zero return, or -ENOMEM (an alert could not
 * be allocated: that identity is skipped, as if refused). */
int det_alerts_update(struct det_alerts *a, const struct det_cond *conds, size_t n, int64_t now_ns,
		      int (*fn)(void *arg, const struct det_alert *al, uint8_t old_state),
		      void *arg);

/* Restores an alert that was firing before a restart (read back from the
 * event store) without a transition: it stays firing with its original
 * active_ns and starts_ns; it gets a new id. It is due for re-send at once
 * (det_alerts_due), because Alertmanager may have let it expire while
 * rankdbd was down; Alertmanager deduplicates by labels, so this is not a
 * new notification. Returns 0, RDB_EINVAL (al->state is not firing),
 * -EEXIST (the identity is already active; registry unchanged), RDB_ELIMIT
 * (max_active reached; counted as refused) or -ENOMEM. */
int det_alerts_restore(struct det_alerts *a, const struct det_alert *al);

/* Calls fn for each alert (active and recently resolved) matching f (NULL =
 * all), newest first: ordered by the time of the alert's last transition
 * (pending: active_ns, firing: starts_ns, resolved: ends_ns), then by id,
 * descending. The alert pointer is valid only during the call; fn runs with
 * the lock held (it must not call det_alerts_*). A non-zero return from fn
 * stops the listing and is returned. Returns 0, fn's return, or -ENOMEM. */
int det_alerts_list(struct det_alerts *a, const struct det_alert_filter *f,
		    int (*fn)(void *arg, const struct det_alert *al), void *arg);

/* Periodic re-send, as Prometheus does it: calls fn for each FIRING alert
 * not sent within resend_interval_s (never sent, restored, or last sent at
 * or before now_ns - resend_interval), and marks it sent at now_ns. The
 * caller hands each to det_notify_resend, which sets endsAt = now_ns +
 * 4 x max(resend interval, evaluation interval) so that Alertmanager keeps it
 * active across up to three missed re-sends but resolves it by itself if
 * rankdbd goes away. Resolved alerts are not re-sent. fn runs with the lock
 * held; a non-zero return stops (the remaining alerts stay due) and is
 * returned. Returns 0 or fn's return. */
int det_alerts_due(struct det_alerts *a, int64_t now_ns,
		   int (*fn)(void *arg, const struct det_alert *al), void *arg);

/* Counters and current sizes. Never fails. */
void det_alerts_stats(struct det_alerts *a, struct det_alerts_stats *out);

/* Static name of a state: "pending", "firing", "resolved" ("unknown"). */
const char *det_alert_state_name(uint8_t state);
/* Parses a state name; 0 and *out, or RDB_EINVAL. */
int det_alert_state_parse(const char *s, uint8_t *out);

#endif
