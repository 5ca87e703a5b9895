/* alerts.c - the alert lifecycle (alerts.h): Prometheus' pending -> firing
 * -> resolved model applied to the complete condition set of each detector
 * evaluation.
 *
 * Design: every active (pending or firing) alert is one heap entry. Entries
 * are found by identity through an open-addressing table of entry pointers
 * (linear probing on a 64-bit hash of the identity, backward-shift deletion;
 * a probe compares the full identity, so hash collisions are harmless). The
 * table is allocated once for max_active entries at load <= 1/2, so the
 * lifecycle never allocates anything but the entries themselves. A dense
 * array of the active entries makes the sweep for absent identities O(active).
 * Each update bumps an epoch; an entry whose seen_epoch is not the current
 * epoch after the set has been applied was absent from the set. Resolved
 * entries move (pointer, no copy) into a ring of max_resolved; the oldest is
 * freed when the ring is full.
 *
 * Threading: one mutex guards everything; callbacks run with it held.
 * Failure: an entry that cannot be allocated is skipped like a refused one
 * (the next evaluation retries); nothing else here can fail.
 */
#include "detect/alerts.h"

#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_log.h"
#include "common/rdb_sort.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_ACTIVE   10000
#define DEFAULT_MAX_RESOLVED 1000
#define DEFAULT_RESEND_S     60
#define NS_PER_S	     1000000000LL

struct entry {
	struct det_alert al;
	uint64_t key;	      /* identity hash */
	uint64_t seen_epoch;  /* last update whose set held the identity */
	uint64_t born_epoch;  /* update that created it (0: restored) */
	int64_t last_sent_ns; /* INT64_MIN = never sent (due for re-send at once) */
	size_t slot;	      /* index in act[] while active */
};

struct det_alerts {
	pthread_mutex_t mu;
	uint32_t max_active;
	uint32_t max_resolved;
	int64_t resend_ns;
	struct entry **tab; /* identity table, tab_mask + 1 slots */
	size_t tab_mask;
	struct entry **act; /* active entries, dense, nact of max_active */
	size_t nact;
	struct entry **ring; /* recently resolved, max_resolved slots */
	size_t ring_start;
	size_t ring_n;
	uint64_t epoch;
	uint64_t next_id;
	struct det_alerts_stats st; /* the *_total counters */
	struct rdb_log_ratelimit refused_rl;
};

/* ---- identity ------------------------------------------------------------ */

/* Makes every string of c NUL-terminated inside its array. */
static void cond_normalize(struct det_cond *c)
{
	c->alertname[sizeof(c->alertname) - 1] = 0;
	c->job[sizeof(c->job) - 1] = 0;
	c->phase[sizeof(c->phase) - 1] = 0;
	c->metric[sizeof(c->metric) - 1] = 0;
	c->summary[sizeof(c->summary) - 1] = 0;
	c->description[sizeof(c->description) - 1] = 0;
	if (c->nwebhooks > DET_WEBHOOKS_MAX)
		c->nwebhooks = DET_WEBHOOKS_MAX;
	for (uint32_t i = 0; i < DET_WEBHOOKS_MAX; i++)
		c->webhooks[i][DET_URL_MAX - 1] = 0;
}

static size_t put_str(char *dst, const char *s)
{
	size_t n = strlen(s) + 1; /* the NUL separates fields */
	memcpy(dst, s, n);
	return n;
}

static uint64_t ident_key(const struct det_cond *c)
{
	char buf[DET_NAME_MAX * 2 + DET_JOB_MAX + DET_METRIC_MAX + sizeof(int64_t)];
	size_t n = put_str(buf, c->alertname);
	n += put_str(buf + n, c->job);
	memcpy(buf + n, &c->rank, sizeof(c->rank));
	n += sizeof(c->rank);
	n += put_str(buf + n, c->phase);
	n += put_str(buf + n, c->metric);
	return rdb_hash64(buf, n, 0x616c65727473ULL);
}

static int ident_eq(const struct det_cond *x, const struct det_cond *y)
{
	return x->rank == y->rank && strcmp(x->alertname, y->alertname) == 0 &&
	       strcmp(x->job, y->job) == 0 && strcmp(x->phase, y->phase) == 0 &&
	       strcmp(x->metric, y->metric) == 0;
}

static struct entry *tab_find(struct det_alerts *a, uint64_t key, const struct det_cond *c)
{
	for (size_t i = key & a->tab_mask; a->tab[i]; i = (i + 1) & a->tab_mask) {
		struct entry *e = a->tab[i];
		if (e->key == key && ident_eq(&e->al.c, c))
			return e;
	}
	return NULL;
}

static void tab_insert(struct det_alerts *a, struct entry *e)
{
	size_t i = e->key & a->tab_mask;
	while (a->tab[i])
		i = (i + 1) & a->tab_mask;
	a->tab[i] = e;
}

static void tab_delete(struct det_alerts *a, struct entry *e)
{
	size_t mask = a->tab_mask, i = e->key & mask;
	while (a->tab[i] != e)
		i = (i + 1) & mask;
	/* Backward shift: move later members of the probe run into the hole
	 * unless their home slot lies cyclically in (hole, their slot]. */
	for (size_t j = (i + 1) & mask; a->tab[j]; j = (j + 1) & mask) {
		size_t home = a->tab[j]->key & mask;
		int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
		if (!stays) {
			a->tab[i] = a->tab[j];
			i = j;
		}
	}
	a->tab[i] = NULL;
}

/* ---- active set and resolved ring ----------------------------------------- */

static void act_add(struct det_alerts *a, struct entry *e)
{
	e->slot = a->nact;
	a->act[a->nact++] = e;
	tab_insert(a, e);
}

static void act_remove(struct det_alerts *a, struct entry *e)
{
	tab_delete(a, e);
	struct entry *last = a->act[--a->nact];
	a->act[e->slot] = last;
	last->slot = e->slot;
}

static void ring_push(struct det_alerts *a, struct entry *e)
{
	if (a->max_resolved == 0) {
		free(e);
		return;
	}
	if (a->ring_n == a->max_resolved) {
		free(a->ring[a->ring_start]);
		a->ring[a->ring_start] = e;
		a->ring_start = (a->ring_start + 1) % a->max_resolved;
		return;
	}
	a->ring[(a->ring_start + a->ring_n) % a->max_resolved] = e;
	a->ring_n++;
}

/* ---- public --------------------------------------------------------------- */

int det_alerts_new(const struct det_alerts_options *o, struct det_alerts **out)
{
	struct det_alerts_options d = {0};
	if (o)
		d = *o;
	struct det_alerts *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->max_active = d.max_active ? d.max_active : DEFAULT_MAX_ACTIVE;
	a->max_resolved = d.max_resolved ? d.max_resolved : DEFAULT_MAX_RESOLVED;
	a->resend_ns =
	    (int64_t)(d.resend_interval_s ? d.resend_interval_s : DEFAULT_RESEND_S) * NS_PER_S;
	size_t cap = 16;
	while (cap < (size_t)a->max_active * 2)
		cap *= 2;
	a->tab_mask = cap - 1;
	a->tab = calloc(cap, sizeof(*a->tab));
	a->act = calloc(a->max_active, sizeof(*a->act));
	a->ring = calloc(a->max_resolved, sizeof(*a->ring));
	if (!a->tab || !a->act || !a->ring || pthread_mutex_init(&a->mu, NULL) != 0) {
		free(a->tab);
		free(a->act);
		free(a->ring);
		free(a);
		return -ENOMEM;
	}
	*out = a;
	return 0;
}

void det_alerts_free(struct det_alerts *a)
{
	if (!a)
		return;
	for (size_t i = 0; i < a->nact; i++)
		free(a->act[i]);
	for (size_t i = 0; i < a->ring_n; i++)
		free(a->ring[(a->ring_start + i) % a->max_resolved]);
	free(a->tab);
	free(a->act);
	free(a->ring);
	pthread_mutex_destroy(&a->mu);
	free(a);
}

/* now - then, saturating (clocks and inputs are not trusted to be sane). */
static int64_t elapsed_ns(int64_t now, int64_t then)
{
	int64_t d;
	if (__builtin_sub_overflow(now, then, &d))
		return now > then ? INT64_MAX : INT64_MIN;
	return d;
}

struct update_ctx {
	int (*fn)(void *arg, const struct det_alert *al, uint8_t old_state);
	void *arg;
	int rc; /* first non-zero callback return, or -ENOMEM */
};

static void notify_cb(struct update_ctx *u, const struct entry *e, uint8_t old_state)
{
	if (!u->fn)
		return;
	int rc = u->fn(u->arg, &e->al, old_state);
	if (rc && !u->rc)
		u->rc = rc;
}

static void make_firing(struct det_alerts *a, struct entry *e, int64_t now_ns)
{
	e->al.state = DET_ALERT_FIRING;
	e->al.starts_ns = now_ns;
	e->last_sent_ns = now_ns;
	a->st.fired_total++;
}

static void refuse(struct det_alerts *a, const struct det_cond *c, const char *why)
{
	a->st.refused_total++;
	rdb_log_limited(&a->refused_rl, 60, RDB_LOG_WARN, "detect",
			"alerts: new alert %s job=%s rank=%lld refused (%s; %llu refused in "
			"total); it is not listed or sent until an active alert clears",
			c->alertname, c->job, (long long)c->rank, why,
			(unsigned long long)a->st.refused_total);
}

/* Applies a condition (normalized) to its active alert. */
static void update_existing(struct det_alerts *a, struct entry *e, const struct det_cond *c,
			    int64_t now_ns, struct update_ctx *u)
{
	e->al.c = *c;
	e->al.updated_ns = now_ns;
	e->seen_epoch = a->epoch;
	if (e->al.state == DET_ALERT_PENDING &&
	    elapsed_ns(now_ns, e->al.active_ns) >= (int64_t)c->for_s * NS_PER_S) {
		make_firing(a, e, now_ns);
		notify_cb(u, e, DET_ALERT_PENDING);
	}
}

/* Creates the alert of a new identity (after the sweep, so that slots freed
 * by this evaluation's resolutions can be reused). */
static void create_new(struct det_alerts *a, uint64_t key, const struct det_cond *c, int64_t now_ns,
		       struct update_ctx *u)
{
	if (a->nact >= a->max_active) {
		refuse(a, c, "max_active alerts reached");
		return;
	}
	struct entry *e = calloc(1, sizeof(*e));
	if (!e) {
		refuse(a, c, "out of memory");
		if (!u->rc)
			u->rc = -ENOMEM;
		return;
	}
	e->al.c = *c;
	e->al.state = DET_ALERT_PENDING;
	e->al.active_ns = now_ns;
	e->al.updated_ns = now_ns;
	e->al.id = ++a->next_id;
	e->key = key;
	e->seen_epoch = a->epoch;
	e->born_epoch = a->epoch;
	act_add(a, e);
	if (c->for_s == 0)
		make_firing(a, e, now_ns);
	notify_cb(u, e, DET_ALERT_NONE);
}

/* Resolves firing and drops pending alerts absent from the current set. */
static void sweep_absent(struct det_alerts *a, int64_t now_ns, struct update_ctx *u)
{
	/* Backwards, because act_remove moves the last entry into the hole. */
	for (size_t i = a->nact; i-- > 0;) {
		struct entry *e = a->act[i];
		if (e->seen_epoch == a->epoch)
			continue;
		act_remove(a, e);
		if (e->al.state == DET_ALERT_PENDING) {
			a->st.pending_dropped_total++;
			free(e);
			continue;
		}
		e->al.state = DET_ALERT_RESOLVED;
		e->al.ends_ns = now_ns;
		e->al.updated_ns = now_ns;
		a->st.resolved_total++;
		notify_cb(u, e, DET_ALERT_FIRING);
		ring_push(a, e);
	}
}

int det_alerts_update(struct det_alerts *a, const struct det_cond *conds, size_t n, int64_t now_ns,
		      int (*fn)(void *arg, const struct det_alert *al, uint8_t old_state),
		      void *arg)
{
	struct update_ctx u = {fn, arg, 0};
	struct det_cond c; /* ~3.6 KiB: a normalized copy of one condition */
	pthread_mutex_lock(&a->mu);
	a->epoch++;
	/* 1: identities already active take their latest condition. */
	for (size_t i = 0; i < n; i++) {
		c = conds[i];
		cond_normalize(&c);
		struct entry *e = tab_find(a, ident_key(&c), &c);
		if (e)
			update_existing(a, e, &c, now_ns, &u);
	}
	/* 2: active identities absent from the set resolve or are dropped. */
	sweep_absent(a, now_ns, &u);
	/* 3: new identities, in the room that is left. */
	for (size_t i = 0; i < n; i++) {
		c = conds[i];
		cond_normalize(&c);
		uint64_t key = ident_key(&c);
		struct entry *e = tab_find(a, key, &c);
		if (!e)
			create_new(a, key, &c, now_ns, &u);
		else if (e->born_epoch == a->epoch)
			update_existing(a, e, &c, now_ns, &u); /* a repeat of a new identity */
	}
	pthread_mutex_unlock(&a->mu);
	return u.rc;
}

int det_alerts_restore(struct det_alerts *a, const struct det_alert *al)
{
	if (al->state != DET_ALERT_FIRING)
		return RDB_EINVAL;
	struct entry *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->al = *al;
	cond_normalize(&e->al.c);
	e->al.ends_ns = 0;
	e->key = ident_key(&e->al.c);
	int rc = 0;
	pthread_mutex_lock(&a->mu);
	if (tab_find(a, e->key, &e->al.c)) {
		rc = -EEXIST;
	} else if (a->nact >= a->max_active) {
		refuse(a, &e->al.c, "max_active alerts reached while restoring");
		rc = RDB_ELIMIT;
	} else {
		e->al.id = ++a->next_id;
		e->seen_epoch = a->epoch;    /* present until the next evaluation says otherwise */
		e->last_sent_ns = INT64_MIN; /* due for re-send at once */
		act_add(a, e);
		e = NULL;
	}
	pthread_mutex_unlock(&a->mu);
	free(e);
	return rc;
}

static int64_t transition_ns(const struct det_alert *al)
{
	if (al->state == DET_ALERT_RESOLVED)
		return al->ends_ns;
	if (al->state == DET_ALERT_FIRING)
		return al->starts_ns;
	return al->active_ns;
}

static int newest_first(const void *x, const void *y)
{
	const struct det_alert *p = &(*(struct entry *const *)x)->al;
	const struct det_alert *q = &(*(struct entry *const *)y)->al;
	int64_t tp = transition_ns(p), tq = transition_ns(q);
	if (tp != tq)
		return tp < tq ? 1 : -1;
	return p->id < q->id ? 1 : (p->id > q->id ? -1 : 0);
}

static int matches(const struct det_alert *al, const struct det_alert_filter *f)
{
	if (!f)
		return 1;
	if (f->job && strcmp(f->job, al->c.job) != 0)
		return 0;
	if (f->alertname && strcmp(f->alertname, al->c.alertname) != 0)
		return 0;
	if (f->rank != DET_FILTER_ANY_RANK && f->rank != al->c.rank)
		return 0;
	if (f->state_mask && !(f->state_mask & (1u << al->state)))
		return 0;
	return 1;
}

int det_alerts_list(struct det_alerts *a, const struct det_alert_filter *f,
		    int (*fn)(void *arg, const struct det_alert *al), void *arg)
{
	int rc = 0;
	pthread_mutex_lock(&a->mu);
	size_t cap = a->nact + a->ring_n, n = 0;
	struct entry **v = cap ? malloc(cap * sizeof(*v)) : NULL;
	if (cap && !v) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < a->nact; i++)
		if (matches(&a->act[i]->al, f))
			v[n++] = a->act[i];
	for (size_t i = 0; i < a->ring_n; i++) {
		struct entry *e = a->ring[(a->ring_start + i) % a->max_resolved];
		if (matches(&e->al, f))
			v[n++] = e;
	}
	if (n > 1)
		rdb_sort(v, n, sizeof(*v), newest_first);
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = fn(arg, &v[i]->al);
out:
	pthread_mutex_unlock(&a->mu);
	free(v);
	return rc;
}

int det_alerts_due(struct det_alerts *a, int64_t now_ns,
		   int (*fn)(void *arg, const struct det_alert *al), void *arg)
{
	int rc = 0;
	pthread_mutex_lock(&a->mu);
	for (size_t i = 0; i < a->nact && rc == 0; i++) {
		struct entry *e = a->act[i];
		if (e->al.state != DET_ALERT_FIRING)
			continue;
		if (elapsed_ns(now_ns, e->last_sent_ns) < a->resend_ns)
			continue;
		rc = fn(arg, &e->al);
		if (rc == 0)
			e->last_sent_ns = now_ns;
	}
	pthread_mutex_unlock(&a->mu);
	return rc;
}

void det_alerts_stats(struct det_alerts *a, struct det_alerts_stats *out)
{
	pthread_mutex_lock(&a->mu);
	*out = a->st;
	out->pending = out->firing = 0;
	for (size_t i = 0; i < a->nact; i++) {
		if (a->act[i]->al.state == DET_ALERT_PENDING)
			out->pending++;
		else
			out->firing++;
	}
	out->resolved_kept = a->ring_n;
	pthread_mutex_unlock(&a->mu);
}

static const char *const state_names[] = {"pending", "firing", "resolved"};

const char *det_alert_state_name(uint8_t state)
{
	return state <= DET_ALERT_RESOLVED ? state_names[state] : "unknown";
}

int det_alert_state_parse(const char *s, uint8_t *out)
{
	for (uint8_t i = 0; i <= DET_ALERT_RESOLVED; i++) {
		if (strcmp(s, state_names[i]) == 0) {
			*out = i;
			return 0;
		}
	}
	return RDB_EINVAL;
}
