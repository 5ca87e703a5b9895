/* test_alerts.c - the alert lifecycle (detect/alerts.h): for durations,
 * pending alerts that clear, resolution, one alert per identity, the bounds,
 * restore after a restart, listing filters and order, periodic re-send. */
#include "check.h"

#include "common/rdb_err.h"
#include "detect/alerts.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define S  1000000000LL
#define T0 (1700000000LL * S)

static struct det_cond mk(const char *name, const char *job, int64_t rank, uint32_t for_s)
{
	struct det_cond c;
	memset(&c, 0, sizeof(c));
	snprintf(c.alertname, sizeof(c.alertname), "%s", name);
	snprintf(c.job, sizeof(c.job), "%s", job);
	c.rank = rank;
	c.for_s = for_s;
	c.severity = DET_SEV_WARNING;
	c.value = NAN;
	c.baseline = NAN;
	c.step = INT64_MIN;
	return c;
}

/* Records transitions. */
struct rec {
	int n;
	struct det_alert last;
	uint8_t last_old;
	int fired, resolved, pending;
};

static int on_change(void *arg, const struct det_alert *al, uint8_t old_state)
{
	struct rec *r = arg;
	r->n++;
	r->last = *al;
	r->last_old = old_state;
	if (al->state == DET_ALERT_FIRING)
		r->fired++;
	else if (al->state == DET_ALERT_RESOLVED)
		r->resolved++;
	else
		r->pending++;
	return 0;
}

/* Collects a listing. */
struct lst {
	int n;
	struct det_alert v[64];
};

static int on_list(void *arg, const struct det_alert *al)
{
	struct lst *l = arg;
	if (l->n < 64)
		l->v[l->n] = *al;
	l->n++;
	return 0;
}

static struct lst list_all(struct det_alerts *a, const struct det_alert_filter *f)
{
	struct lst l;
	memset(&l, 0, sizeof(l));
	CHECK_EQ_INT(det_alerts_list(a, f, on_list, &l), 0);
	return l;
}

static struct det_alerts *mk_alerts(uint32_t max_active, uint32_t max_resolved)
{
	struct det_alerts_options o = {max_active, max_resolved, 60};
	struct det_alerts *a = NULL;
	CHECK_EQ_INT(det_alerts_new(&o, &a), 0);
	return a;
}

static void test_for_duration(void)
{
	struct det_alerts *a = mk_alerts(0, 0);
	struct det_cond c = mk("Straggler", "j1", 7, 30);
	struct rec r = {0};
	CHECK_EQ_INT(det_alerts_update(a, &c, 1, T0, on_change, &r), 0);
	CHECK_EQ_INT(r.n, 1);
	CHECK_EQ_INT(r.last.state, DET_ALERT_PENDING);
	CHECK_EQ_INT(r.last_old, DET_ALERT_NONE);
	CHECK_EQ_INT(r.last.active_ns, T0);
	CHECK_EQ_INT(r.last.starts_ns, 0);
	uint64_t id = r.last.id;
	CHECK(id != 0);

	/* Still pending one second before for_s: no transition. */
	CHECK_EQ_INT(det_alerts_update(a, &c, 1, T0 + 29 * S, on_change, &r), 0);
	CHECK_EQ_INT(r.n, 1);
	struct lst l = list_all(a, NULL);
	CHECK_EQ_INT(l.n, 1);
	CHECK_EQ_INT(l.v[0].state, DET_ALERT_PENDING);
	CHECK_EQ_INT(l.v[0].updated_ns, T0 + 29 * S);

	/* Exactly for_s after it became active: firing. */
	CHECK_EQ_INT(det_alerts_update(a, &c, 1, T0 + 30 * S, on_change, &r), 0);
	CHECK_EQ_INT(r.n, 2);
	CHECK_EQ_INT(r.last.state, DET_ALERT_FIRING);
	CHECK_EQ_INT(r.last_old, DET_ALERT_PENDING);
	CHECK_EQ_INT(r.last.starts_ns, T0 + 30 * S);
	CHECK_EQ_INT(r.last.active_ns, T0);
	CHECK_EQ_INT(r.last.id, id);

	/* Staying firing is no transition. */
	CHECK_EQ_INT(det_alerts_update(a, &c, 1, T0 + 31 * S, on_change, &r), 0);
	CHECK_EQ_INT(r.n, 2);
	struct det_alerts_stats st;
	det_alerts_stats(a, &st);
	CHECK_EQ_INT(st.firing, 1);
	CHECK_EQ_INT(st.pending, 0);
	CHECK_EQ_INT(st.fired_total, 1);
	det_alerts_free(a);
}

static void test_for_zero_fires_at_once(void)
{
	struct det_alerts *a = mk_alerts(0, 0);
	struct det_cond c = mk("LossNonFinite", "j1", 3, 0);
	snprintf(c.metric, sizeof(c.metric), "loss");
	struct rec r = {0};
	CHECK_EQ_INT(det_alerts_update(a, &c, 1, T0, on_change, &r), 0);
	CHECK_EQ_INT(r.n, 1); /* one callback, straight to firing */
	CHECK_EQ_INT(r.last.state, DET_ALERT_FIRING);
	CHECK_EQ_INT(r.last_old, DET_ALERT_NONE);
	CHECK_EQ_INT(r.last.starts_ns, T0);
	CHECK_EQ_INT(r.last.active_ns, T0);
	det_alerts_free(a);
}

static void test_pending_that_clears_is_dropped(void)
{
	struct det_alerts *a = mk_alerts(0, 0);
	struct det_cond c = mk("GpuOverheat", "j1", 2, 30);
	struct rec r = {0};
	det_alerts_update(a, &c, 1, T0, on_change, &r);
	CHECK_EQ_INT(r.pending, 1);
	/* Absent from the next complete set, before for_s: dropped, no callback. */
	CHECK_EQ_INT(det_alerts_update(a, NULL, 0, T0 + 10 * S, on_change, &r), 0);
	CHECK_EQ_INT(r.n, 1);
	CHECK_EQ_INT(r.resolved, 0);
	struct lst l = list_all(a, NULL);
	CHECK_EQ_INT(l.n, 0); /* not even in the recently-resolved list */
	struct det_alerts_stats st;
	det_alerts_stats(a, &st);
	CHECK_EQ_INT(st.pending_dropped_total, 1);
	CHECK_EQ_INT(st.pending, 0);
	CHECK_EQ_INT(st.resolved_kept, 0);

	/* Coming back starts the for_s clock again. */
	det_alerts_update(a, &c, 1, T0 + 20 * S, on_change, &r);
	det_alerts_update(a, &c, 1, T0 + 45 * S, on_change, &r);
	CHECK_EQ_INT(r.fired, 0);
	det_alerts_update(a, &c, 1, T0 + 50 * S, on_change, &r);
	CHECK_EQ_INT(r.fired, 1);
	CHECK_EQ_INT(r.last.active_ns, T0 + 20 * S);
	det_alerts_free(a);
}

static void test_resolve(void)
{
	struct det_alerts *a = mk_alerts(0, 0);
	struct det_cond c[2] = {mk("RankDown", "j1", 5, 0), mk("RankDown", "j1", 6, 0)};
	struct rec r = {0};
	det_alerts_update(a, c, 2, T0, on_change, &r);
	CHECK_EQ_INT(r.fired, 2);
	/* rank 6 recovers: only it resolves. */
	CHECK_EQ_INT(det_alerts_update(a, c, 1, T0 + 5 * S, on_change, &r), 0);
	CHECK_EQ_INT(r.resolved, 1);
	CHECK_EQ_INT(r.last.state, DET_ALERT_RESOLVED);
	CHECK_EQ_INT(r.last_old, DET_ALERT_FIRING);
	CHECK_EQ_INT(r.last.c.rank, 6);
	CHECK_EQ_INT(r.last.ends_ns, T0 + 5 * S);
	CHECK_EQ_INT(r.last.starts_ns, T0);
	uint64_t old_id = r.last.id;

	struct det_alerts_stats st;
	det_alerts_stats(a, &st);
	CHECK_EQ_INT(st.firing, 1);
	CHECK_EQ_INT(st.resolved_kept, 1);
	CHECK_EQ_INT(st.resolved_total, 1);

	/* The resolved alert is listed as resolved; a relapse is a new alert. */
	struct det_alert_filter f = {NULL, NULL, 6, 0};
	struct lst l = list_all(a, &f);
	CHECK_EQ_INT(l.n, 1);
	CHECK_EQ_INT(l.v[0].state, DET_ALERT_RESOLVED);
	det_alerts_update(a, c, 2, T0 + 9 * S, on_change, &r);
	CHECK_EQ_INT(r.fired, 3);
	CHECK(r.last.id != old_id);
	l = list_all(a, &f);
	CHECK_EQ_INT(l.n, 2);
	CHECK_EQ_INT(l.v[0].state, DET_ALERT_FIRING); /* newest first */
	CHECK_EQ_INT(l.v[1].state, DET_ALERT_RESOLVED);
	det_alerts_free(a);
}

static void test_one_alert_per_identity(void)
{
	struct det_alerts *a = mk_alerts(0, 0);
	struct det_cond c[6];
	for (int i = 0; i < 4; i++) {
		c[i] = mk("Straggler", "j1", 9, 0);
		snprintf(c[i].phase, sizeof(c[i].phase), "forward");
		snprintf(c[i].summary, sizeof(c[i].summary), "confirmation %d", i);
		c[i].value = i;
	}
	c[4] = c[0];
	snprintf(c[4].phase, sizeof(c[4].phase), "backward"); /* another phase: another alert */
	c[5] = mk("Straggler", "j2", 9, 0);		      /* another job */
	snprintf(c[5].phase, sizeof(c[5].phase), "forward");
	struct rec r = {0};
	det_alerts_update(a, c, 6, T0, on_change, &r);
	CHECK_EQ_INT(r.fired, 3);
	for (int k = 1; k <= 5; k++)
		det_alerts_update(a, c, 6, T0 + k * S, on_change, &r);
	CHECK_EQ_INT(r.n, 3); /* confirmations are not transitions */
	struct det_alert_filter f = {"j1", "Straggler", 9, 0};
	struct lst l = list_all(a, &f);
	CHECK_EQ_INT(l.n, 2);
	/* The latest condition's annotations are kept. */
	for (int i = 0; i < l.n; i++) {
		if (strcmp(l.v[i].c.phase, "forward") == 0) {
			CHECK(strcmp(l.v[i].c.summary, "confirmation 3") == 0);
			CHECK(l.v[i].c.value == 3.0);
			CHECK_EQ_INT(l.v[i].updated_ns, T0 + 5 * S);
		}
	}
	/* A metric label distinguishes too, and job-level differs from rank 0. */
	struct det_cond m[3] = {mk("LossNonFinite", "j1", 0, 0), mk("LossNonFinite", "j1", 0, 0),
				mk("LossNonFinite", "j1", DET_RANK_NONE, 0)};
	snprintf(m[0].metric, sizeof(m[0].metric), "loss");
	snprintf(m[1].metric, sizeof(m[1].metric), "grad_norm");
	snprintf(m[2].metric, sizeof(m[2].metric), "loss");
	struct det_alerts *b = mk_alerts(0, 0);
	struct rec rb = {0};
	det_alerts_update(b, m, 3, T0, on_change, &rb);
	CHECK_EQ_INT(rb.fired, 3);
	det_alerts_free(b);
	det_alerts_free(a);
}

static void test_unterminated_strings_are_cut(void)
{
	struct det_alerts *a = mk_alerts(0, 0);
	struct det_cond c = mk("x", "j1", 1, 0);
	memset(c.alertname, 'A', sizeof(c.alertname));
	memset(c.metric, 'm', sizeof(c.metric));
	memset(c.webhooks, 'w', sizeof(c.webhooks));
	c.nwebhooks = 99;
	struct rec r = {0};
	det_alerts_update(a, &c, 1, T0, on_change, &r);
	det_alerts_update(a, &c, 1, T0 + S, on_change, &r);
	CHECK_EQ_INT(r.n, 1);
	CHECK_EQ_INT(strlen(r.last.c.alertname), DET_NAME_MAX - 1);
	CHECK_EQ_INT(strlen(r.last.c.metric), DET_METRIC_MAX - 1);
	CHECK_EQ_INT(r.last.c.nwebhooks, DET_WEBHOOKS_MAX);
	CHECK_EQ_INT(strlen(r.last.c.webhooks[3]), DET_URL_MAX - 1);
	det_alerts_free(a);
}

static void test_bounds(void)
{
	struct det_alerts *a = mk_alerts(3, 2);
	struct det_cond c[5];
	for (int i = 0; i < 5; i++)
		c[i] = mk("RankDown", "j1", i, 0);
	struct rec r = {0};
	CHECK_EQ_INT(det_alerts_update(a, c, 5, T0, on_change, &r), 0);
	CHECK_EQ_INT(r.fired, 3);
	struct det_alerts_stats st;
	det_alerts_stats(a, &st);
	CHECK_EQ_INT(st.firing, 3);
	CHECK_EQ_INT(st.refused_total, 2);
	/* Same set again: the same two are refused again; nothing changes. */
	det_alerts_update(a, c, 5, T0 + S, on_change, &r);
	CHECK_EQ_INT(r.n, 3);
	det_alerts_stats(a, &st);
	CHECK_EQ_INT(st.refused_total, 4);

	/* Ranks 0 and 1 recover: room for ranks 3 and 4. */
	det_alerts_update(a, c + 2, 3, T0 + 2 * S, on_change, &r);
	CHECK_EQ_INT(r.resolved, 2);
	CHECK_EQ_INT(r.fired, 5);
	det_alerts_stats(a, &st);
	CHECK_EQ_INT(st.firing, 3);
	CHECK_EQ_INT(st.resolved_kept, 2);

	/* The recently-resolved ring keeps the newest max_resolved. */
	det_alerts_update(a, c + 4, 1, T0 + 3 * S, on_change, &r); /* resolves 2 and 3 */
	det_alerts_stats(a, &st);
	CHECK_EQ_INT(st.resolved_kept, 2);
	CHECK_EQ_INT(st.resolved_total, 4);
	struct det_alert_filter f = {NULL, NULL, DET_FILTER_ANY_RANK, 1u << DET_ALERT_RESOLVED};
	struct lst l = list_all(a, &f);
	CHECK_EQ_INT(l.n, 2);
	CHECK_EQ_INT(l.v[0].ends_ns, T0 + 3 * S);
	CHECK_EQ_INT(l.v[1].ends_ns, T0 + 3 * S);
	CHECK(l.v[0].c.rank >= 2 && l.v[1].c.rank >= 2);
	det_alerts_free(a);
}

static void test_restore(void)
{
	struct det_alerts *a = mk_alerts(2, 0);
	struct det_alert al;
	memset(&al, 0, sizeof(al));
	al.c = mk("TrainingHang", "j1", DET_RANK_NONE, 0);
	al.state = DET_ALERT_FIRING;
	al.active_ns = T0 - 100 * S;
	al.starts_ns = T0 - 90 * S;
	al.updated_ns = T0 - 80 * S;
	CHECK_EQ_INT(det_alerts_restore(a, &al), 0);
	CHECK_EQ_INT(det_alerts_restore(a, &al), -EEXIST);

	struct det_alert pend = al;
	pend.state = DET_ALERT_PENDING;
	pend.c.rank = 4;
	CHECK_EQ_INT(det_alerts_restore(a, &pend), RDB_EINVAL);

	struct lst l = list_all(a, NULL);
	CHECK_EQ_INT(l.n, 1);
	CHECK_EQ_INT(l.v[0].state, DET_ALERT_FIRING);
	CHECK_EQ_INT(l.v[0].starts_ns, T0 - 90 * S);
	CHECK_EQ_INT(l.v[0].active_ns, T0 - 90 * S - 10 * S);

	/* The first evaluation after the restart confirms it: no transition,
	 * starts_ns unchanged. */
	struct rec r = {0};
	det_alerts_update(a, &al.c, 1, T0, on_change, &r);
	CHECK_EQ_INT(r.n, 0);
	l = list_all(a, NULL);
	CHECK_EQ_INT(l.v[0].starts_ns, T0 - 90 * S);
	struct det_alerts_stats st;
	det_alerts_stats(a, &st);
	CHECK_EQ_INT(st.fired_total, 0);

	/* Bound. */
	struct det_alert b = al;
	b.c.rank = 1;
	CHECK_EQ_INT(det_alerts_restore(a, &b), 0);
	b.c.rank = 2;
	CHECK_EQ_INT(det_alerts_restore(a, &b), RDB_ELIMIT);

	/* A restored alert absent from an evaluation resolves normally. */
	det_alerts_update(a, NULL, 0, T0 + S, on_change, &r);
	CHECK_EQ_INT(r.resolved, 2);
	CHECK_EQ_INT(r.last.state, DET_ALERT_RESOLVED);
	det_alerts_free(a);
}

static void test_list_filters_and_order(void)
{
	struct det_alerts *a = mk_alerts(0, 0);
	struct det_cond c[5] = {
	    mk("RankDown", "jA", 1, 0),	  mk("RankDown", "jA", 2, 0),
	    mk("Straggler", "jA", 1, 10), mk("JobDown", "jB", DET_RANK_NONE, 0),
	    mk("RankDown", "jB", 1, 0),
	};
	struct rec r = {0};
	/* Staggered: c[i] appears at T0 + i s, so firing times differ. */
	for (int i = 1; i <= 5; i++)
		det_alerts_update(a, c, (size_t)i, T0 + i * S, on_change, &r);
	/* Resolve jB's RankDown at T0+6. */
	det_alerts_update(a, c, 4, T0 + 6 * S, on_change, &r);

	struct lst l = list_all(a, NULL);
	CHECK_EQ_INT(l.n, 5);
	/* Newest transition first: resolved jB/1 (T0+6), JobDown (fired T0+4),
	 * Straggler (pending since T0+3), RankDown jA/2 (T0+2), jA/1 (T0+1). */
	CHECK(strcmp(l.v[0].c.job, "jB") == 0 && l.v[0].state == DET_ALERT_RESOLVED);
	CHECK(strcmp(l.v[1].c.alertname, "JobDown") == 0);
	CHECK(strcmp(l.v[2].c.alertname, "Straggler") == 0 && l.v[2].state == DET_ALERT_PENDING);
	CHECK_EQ_INT(l.v[3].c.rank, 2);
	CHECK_EQ_INT(l.v[4].c.rank, 1);

	struct det_alert_filter f = {"jA", NULL, DET_FILTER_ANY_RANK, 0};
	CHECK_EQ_INT(list_all(a, &f).n, 3);
	f = (struct det_alert_filter){NULL, "RankDown", DET_FILTER_ANY_RANK, 0};
	CHECK_EQ_INT(list_all(a, &f).n, 3);
	f = (struct det_alert_filter){NULL, NULL, 1, 0};
	CHECK_EQ_INT(list_all(a, &f).n, 3);
	f = (struct det_alert_filter){NULL, NULL, DET_RANK_NONE, 0};
	l = list_all(a, &f);
	CHECK_EQ_INT(l.n, 1);
	CHECK(strcmp(l.v[0].c.alertname, "JobDown") == 0);
	f = (struct det_alert_filter){NULL, NULL, DET_FILTER_ANY_RANK, 1u << DET_ALERT_FIRING};
	CHECK_EQ_INT(list_all(a, &f).n, 3);
	f.state_mask = (1u << DET_ALERT_FIRING) | (1u << DET_ALERT_PENDING);
	CHECK_EQ_INT(list_all(a, &f).n, 4);
	f = (struct det_alert_filter){"jA", "RankDown", 2, 1u << DET_ALERT_FIRING};
	l = list_all(a, &f);
	CHECK_EQ_INT(l.n, 1);
	CHECK_EQ_INT(l.v[0].c.rank, 2);
	f = (struct det_alert_filter){"nope", NULL, DET_FILTER_ANY_RANK, 0};
	CHECK_EQ_INT(list_all(a, &f).n, 0);

	uint8_t st = 9;
	CHECK_EQ_INT(det_alert_state_parse("resolved", &st), 0);
	CHECK_EQ_INT(st, DET_ALERT_RESOLVED);
	CHECK_EQ_INT(det_alert_state_parse("active", &st), RDB_EINVAL);
	CHECK(strcmp(det_alert_state_name(DET_ALERT_PENDING), "pending") == 0);
	det_alerts_free(a);
}

static int stop_after_two(void *arg, const struct det_alert *al)
{
	(void)al;
	int *n = arg;
	return ++*n == 2 ? 42 : 0;
}

static void test_list_stops(void)
{
	struct det_alerts *a = mk_alerts(0, 0);
	struct det_cond c[3] = {mk("A", "j", 1, 0), mk("A", "j", 2, 0), mk("A", "j", 3, 0)};
	det_alerts_update(a, c, 3, T0, NULL, NULL);
	int n = 0;
	CHECK_EQ_INT(det_alerts_list(a, NULL, stop_after_two, &n), 42);
	CHECK_EQ_INT(n, 2);
	det_alerts_free(a);
}

struct due {
	int n;
	int64_t rank[8];
};

static int on_due(void *arg, const struct det_alert *al)
{
	struct due *d = arg;
	if (d->n < 8)
		d->rank[d->n] = al->c.rank;
	d->n++;
	CHECK_EQ_INT(al->state, DET_ALERT_FIRING);
	return 0;
}

static void test_resend_due(void)
{
	struct det_alerts *a = mk_alerts(0, 0); /* resend 60 s */
	struct det_cond c[2] = {mk("RankDown", "j", 1, 0), mk("Straggler", "j", 2, 30)};
	det_alerts_update(a, c, 2, T0, NULL, NULL); /* rank 1 fires (and counts as sent) */
	struct due d = {0};
	det_alerts_due(a, T0 + 59 * S, on_due, &d);
	CHECK_EQ_INT(d.n, 0); /* just sent; the pending one is never due */
	det_alerts_update(a, c, 2, T0 + 40 * S, NULL, NULL); /* rank 2 fires at T0+40 */
	det_alerts_due(a, T0 + 60 * S, on_due, &d);
	CHECK_EQ_INT(d.n, 1);
	CHECK_EQ_INT(d.rank[0], 1);
	d.n = 0;
	det_alerts_due(a, T0 + 61 * S, on_due, &d);
	CHECK_EQ_INT(d.n, 0); /* marked sent at T0+60 */
	det_alerts_due(a, T0 + 100 * S, on_due, &d);
	CHECK_EQ_INT(d.n, 1);
	CHECK_EQ_INT(d.rank[0], 2);
	d.n = 0;
	det_alerts_due(a, T0 + 120 * S, on_due, &d);
	CHECK_EQ_INT(d.n, 1);
	CHECK_EQ_INT(d.rank[0], 1);

	/* Resolved alerts are not re-sent. */
	det_alerts_update(a, NULL, 0, T0 + 130 * S, NULL, NULL);
	d.n = 0;
	det_alerts_due(a, T0 + 1000 * S, on_due, &d);
	CHECK_EQ_INT(d.n, 0);

	/* A restored alert is due at once, then every interval. */
	struct det_alert al;
	memset(&al, 0, sizeof(al));
	al.c = mk("JobDown", "j", DET_RANK_NONE, 0);
	al.state = DET_ALERT_FIRING;
	al.starts_ns = al.active_ns = T0;
	CHECK_EQ_INT(det_alerts_restore(a, &al), 0);
	det_alerts_due(a, T0 + 1001 * S, on_due, &d);
	CHECK_EQ_INT(d.n, 1);
	CHECK_EQ_INT(d.rank[0], DET_RANK_NONE);
	det_alerts_due(a, T0 + 1002 * S, on_due, &d);
	CHECK_EQ_INT(d.n, 1);
	det_alerts_free(a);
}

/* Random sets against a model: the identity table (probing, backward-shift
 * deletion) must find exactly the active identities. */
static void test_random_against_model(void)
{
	enum { IDS = 200, ROUNDS = 400 };
	struct det_alerts *a = mk_alerts(64, 8);
	static struct det_cond all[IDS], set[IDS];
	bool active[IDS] = {0};
	for (int i = 0; i < IDS; i++)
		all[i] = mk(i % 3 ? "RankDown" : "Straggler", i % 2 ? "ja" : "jb", i, 0);
	uint64_t x = 88172645463325252ULL;
	for (int round = 0; round < ROUNDS; round++) {
		size_t n = 0;
		for (int i = 0; i < IDS && n < 64; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			if (x % 4 == 0 || (active[i] && x % 3))
				set[n++] = all[i];
		}
		struct rec r = {0};
		det_alerts_update(a, set, n, T0 + round * S, on_change, &r);
		bool now[IDS] = {0};
		int fired = 0, resolved = 0;
		for (size_t k = 0; k < n; k++)
			now[set[k].rank] = true;
		for (int i = 0; i < IDS; i++) {
			fired += now[i] && !active[i];
			resolved += active[i] && !now[i];
			active[i] = now[i];
		}
		CHECK_EQ_INT(r.fired, fired);
		CHECK_EQ_INT(r.resolved, resolved);
		struct det_alerts_stats st;
		det_alerts_stats(a, &st);
		CHECK_EQ_INT(st.firing, n);
	}
	det_alerts_free(a);
}

/* One thread updates while another lists (run under ASan/UBSan). */
static void *lister(void *arg)
{
	struct det_alerts *a = arg;
	for (int i = 0; i < 300; i++) {
		struct lst l;
		memset(&l, 0, sizeof(l));
		det_alerts_list(a, NULL, on_list, &l);
		struct det_alerts_stats st;
		det_alerts_stats(a, &st);
	}
	return NULL;
}

static void test_concurrent_list(void)
{
	struct det_alerts *a = mk_alerts(32, 16);
	pthread_t t;
	CHECK_EQ_INT(pthread_create(&t, NULL, lister, a), 0);
	struct det_cond c[16];
	for (int i = 0; i < 16; i++)
		c[i] = mk("RankDown", "j", i, (uint32_t)(i % 2));
	for (int round = 0; round < 300; round++)
		det_alerts_update(a, c, (size_t)(round % 17), T0 + round * S, NULL, NULL);
	pthread_join(t, NULL);
	det_alerts_free(a);
}

int main(void)
{
	RUN(test_for_duration);
	RUN(test_for_zero_fires_at_once);
	RUN(test_pending_that_clears_is_dropped);
	RUN(test_resolve);
	RUN(test_one_alert_per_identity);
	RUN(test_unterminated_strings_are_cut);
	RUN(test_bounds);
	RUN(test_restore);
	RUN(test_list_filters_and_order);
	RUN(test_list_stops);
	RUN(test_resend_due);
	RUN(test_random_against_model);
	RUN(test_concurrent_list);
	det_alerts_free(NULL);
	return check_summary("alerts");
}
