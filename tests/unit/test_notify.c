/* test_notify.c - alert delivery (detect/notify.h) against in-process fake
 * receivers (fake_http.c): the exact Alertmanager and webhook documents,
 * batching, retries on 5xx / refused / dropped / timed-out requests, giving
 * up, the queue bound and its drop policy, coalescing, isolation of a slow
 * receiver, det_notify_send returning while a receiver is blocked, and
 * shutdown while a receiver hangs. No timing assertions: waits are for
 * conditions, with a generous bound. */
#include "check.h"
#include "fake_http.h"

#include "common/rdb_err.h"
#include "detect/notify.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define S  1000000000LL
#define T0 1700000000123456789LL /* 2023-11-14T22:13:20.123456789Z */

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* Polls the counters until cond holds (at most 60 s), then checks it. */
#define WAIT_UNTIL(n, st, cond)                                                                    \
	do {                                                                                       \
		for (int w_ = 0; w_ < 30000; w_++) {                                               \
			det_notify_stats((n), &(st));                                              \
			if (cond)                                                                  \
				break;                                                             \
			sleep_ms(2);                                                               \
		}                                                                                  \
		CHECK(cond);                                                                       \
	} while (0)

static struct det_alert mk(uint64_t id, int64_t rank, uint8_t state)
{
	struct det_alert a;
	memset(&a, 0, sizeof(a));
	snprintf(a.c.alertname, sizeof(a.c.alertname), "LossNonFinite");
	snprintf(a.c.job, sizeof(a.c.job), "j1");
	a.c.rank = rank;
	snprintf(a.c.metric, sizeof(a.c.metric), "loss");
	a.c.severity = DET_SEV_CRITICAL;
	snprintf(a.c.summary, sizeof(a.c.summary), "loss is NaN on rank %lld", (long long)rank);
	snprintf(a.c.description, sizeof(a.c.description), "loss=NaN at step 1200");
	a.c.value = NAN;
	a.c.baseline = 2.5;
	a.c.step = 1200;
	a.state = state;
	a.active_ns = T0;
	a.starts_ns = T0;
	a.updated_ns = T0;
	if (state == DET_ALERT_RESOLVED)
		a.ends_ns = T0 + 5 * S;
	a.id = id;
	return a;
}

static struct det_notify_options opts(const char *am)
{
	struct det_notify_options o;
	memset(&o, 0, sizeof(o));
	o.alertmanager_urls = am;
	o.generator_url = "http://rankdb:8086/";
	o.resend_interval_s = 60;
	o.eval_interval_ms = 1000;
	o.timeout_ms = 60000;
	o.retry_min_ms = 5;
	o.retry_max_ms = 20;
	return o;
}

static struct det_notify *mk_notify(const struct det_notify_options *o)
{
	struct det_notify *n = NULL;
	CHECK_EQ_INT(det_notify_new(o, &n), 0);
	return n;
}

/* Every queued delivery is accounted for exactly once. */
static void check_balance(struct det_notify *n)
{
	struct det_notify_stats st;
	det_notify_stats(n, &st);
	uint64_t in = 0, out = st.depth;
	for (int k = 0; k < 2; k++) {
		in += st.queued[k];
		out += st.sent[k] + st.failed[k] + st.dropped_full[k] + st.coalesced[k] +
		       st.dropped_shutdown[k];
	}
	CHECK_EQ_INT(in, out);
}

static size_t count_substr(const char *s, const char *sub)
{
	size_t n = 0;
	for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub))
		n++;
	return n;
}

static const char *AM_FIRING =
    "{\"labels\":{\"alertname\":\"LossNonFinite\",\"job\":\"j1\",\"rank\":\"3\","
    "\"severity\":\"critical\",\"metric\":\"loss\"},"
    "\"annotations\":{\"summary\":\"loss is NaN on rank 3\","
    "\"description\":\"loss=NaN at step 1200\",\"baseline\":\"2.5\",\"step\":\"1200\"},"
    "\"startsAt\":\"2023-11-14T22:13:20.123Z\",\"endsAt\":\"2023-11-14T22:17:20.123Z\","
    "\"generatorURL\":\"http://rankdb:8086/api/v1/alerts?job=j1&alertname=LossNonFinite\"}";

static void test_new_checks_options(void)
{
	struct det_notify *n = NULL;
	struct det_notify_options o = opts("ftp://127.0.0.1:9093");
	CHECK_EQ_INT(det_notify_new(&o, &n), RDB_EINVAL);
	char longurl[DET_URL_MAX + 20];
	memset(longurl, 'a', sizeof(longurl));
	memcpy(longurl, "http://", 7);
	longurl[sizeof(longurl) - 1] = 0;
	o = opts(longurl);
	CHECK_EQ_INT(det_notify_new(&o, &n), RDB_EINVAL);
	o = opts("http://a:1,http://b:1,http://c:1,http://d:1,http://e:1,http://f:1,"
		 "http://g:1,http://h:1,http://i:1");
	CHECK_EQ_INT(det_notify_new(&o, &n), RDB_EINVAL); /* more than DET_NOTIFY_MAX_AM */
	o = opts(NULL);
	o.generator_url = "rankdb:8086";
	CHECK_EQ_INT(det_notify_new(&o, &n), RDB_EINVAL);
	CHECK(n == NULL);

	/* No receivers at all: sending is a no-op; pending is never sent. */
	o = opts(" , ");
	n = mk_notify(&o);
	struct det_alert a = mk(1, 3, DET_ALERT_FIRING);
	CHECK_EQ_INT(det_notify_send(n, &a, T0), 0);
	a.state = DET_ALERT_PENDING;
	CHECK_EQ_INT(det_notify_send(n, &a, T0), RDB_EINVAL);
	struct det_notify_stats st;
	det_notify_stats(n, &st);
	CHECK_EQ_INT(st.queued[0] + st.queued[1], 0);
	det_notify_free(n);
	det_notify_free(NULL);
}

static void test_render(void)
{
	struct det_notify_options o = opts(NULL);
	struct det_notify *n = mk_notify(&o);
	char buf[4096];
	struct det_alert a = mk(1, 3, DET_ALERT_FIRING);
	CHECK(det_notify_render_am(n, &a, T0, buf, sizeof(buf)) > 0);
	CHECK(strcmp(buf, AM_FIRING) == 0);
	if (strcmp(buf, AM_FIRING) != 0)
		fprintf(stderr, "got      %s\nexpected %s\n", buf, AM_FIRING);

	/* Resolved: endsAt is the resolution time. Job-level: no rank label. */
	a = mk(2, DET_RANK_NONE, DET_ALERT_RESOLVED);
	a.c.metric[0] = 0;
	snprintf(a.c.phase, sizeof(a.c.phase), "forward");
	a.c.severity = DET_SEV_WARNING;
	a.c.value = 1.0 / 3.0;
	a.c.baseline = -INFINITY;
	a.c.step = INT64_MIN;
	snprintf(a.c.summary, sizeof(a.c.summary), "a \"q\"\n\\ \xc3\xa9 \xff end");
	a.c.description[0] = 0;
	CHECK(det_notify_render_am(n, &a, T0, buf, sizeof(buf)) > 0);
	const char *want =
	    "{\"labels\":{\"alertname\":\"LossNonFinite\",\"job\":\"j1\",\"severity\":\"warning\","
	    "\"phase\":\"forward\"},\"annotations\":{\"summary\":\"a \\\"q\\\"\\u000a\\\\ \xc3\xa9 "
	    "\xef\xbf\xbd end\",\"value\":\"0.33333333333333331\",\"baseline\":\"-Inf\"},"
	    "\"startsAt\":\"2023-11-14T22:13:20.123Z\",\"endsAt\":\"2023-11-14T22:13:25.123Z\","
	    "\"generatorURL\":\"http://rankdb:8086/api/v1/alerts?job=j1&alertname=LossNonFinite\"}";
	CHECK(strcmp(buf, want) == 0);
	if (strcmp(buf, want) != 0)
		fprintf(stderr, "got      %s\nexpected %s\n", buf, want);

	a = mk(7, 3, DET_ALERT_FIRING);
	CHECK(det_notify_render_webhook(n, &a, T0 + S, buf, sizeof(buf)) > 0);
	want =
	    "{\"version\":\"1\",\"source\":\"rankdb\",\"id\":\"7\",\"state\":\"firing\","
	    "\"labels\":{\"alertname\":\"LossNonFinite\",\"job\":\"j1\",\"rank\":\"3\","
	    "\"severity\":\"critical\",\"metric\":\"loss\"},"
	    "\"annotations\":{\"summary\":\"loss is NaN on rank 3\","
	    "\"description\":\"loss=NaN at step 1200\",\"baseline\":\"2.5\",\"step\":\"1200\"},"
	    "\"at\":\"2023-11-14T22:13:21.123Z\",\"activeAt\":\"2023-11-14T22:13:20.123Z\","
	    "\"startsAt\":\"2023-11-14T22:13:20.123Z\",\"endsAt\":null,\"value\":null,"
	    "\"baseline\":2.5,\"step\":1200,"
	    "\"generatorURL\":\"http://rankdb:8086/api/v1/alerts?job=j1&alertname=LossNonFinite\"}";
	CHECK(strcmp(buf, want) == 0);
	if (strcmp(buf, want) != 0)
		fprintf(stderr, "got      %s\nexpected %s\n", buf, want);
	CHECK_EQ_INT(det_notify_render_am(n, &a, T0, buf, 16), RDB_ELIMIT);
	det_notify_free(n);
}

static void test_am_batch(void)
{
	struct fake *f = fake_start();
	int script[] = {FAKE_HOLD};
	fake_script(f, script, 1, 200);
	char url[64];
	fake_url(f, url, sizeof(url));
	struct det_notify_options o = opts(url);
	struct det_notify *n = mk_notify(&o);
	struct det_alert a = mk(1, 3, DET_ALERT_FIRING);
	CHECK_EQ_INT(det_notify_send(n, &a, T0), 0);
	CHECK_EQ_INT(fake_wait(f, 1), 1); /* held: the first request is in flight */
	struct det_alert b = mk(2, 4, DET_ALERT_FIRING), c = mk(3, 5, DET_ALERT_RESOLVED);
	CHECK_EQ_INT(det_notify_send(n, &b, T0), 0);
	CHECK_EQ_INT(det_notify_send(n, &c, T0), 0);
	struct det_notify_stats st;
	det_notify_stats(n, &st);
	CHECK_EQ_INT(st.depth, 3);
	CHECK_EQ_INT(st.in_flight, 1);
	fake_release(f);
	WAIT_UNTIL(n, st, st.depth == 0);
	CHECK_EQ_INT(st.sent[DET_NOTIFY_AM], 3);
	CHECK_EQ_INT(st.requests[DET_NOTIFY_AM], 2); /* b and c went together */
	CHECK_EQ_INT(fake_count(f), 2);
	struct fake_req r0 = fake_get(f, 0), r1 = fake_get(f, 1);
	CHECK(strcmp(r0.path, "/api/v2/alerts") == 0);
	char want[8192];
	snprintf(want, sizeof(want), "[%s]", AM_FIRING);
	CHECK(strcmp(r0.body, want) == 0);
	char one[2048], two[2048];
	det_notify_render_am(n, &b, T0, one, sizeof(one));
	det_notify_render_am(n, &c, T0, two, sizeof(two));
	snprintf(want, sizeof(want), "[%s,%s]", one, two);
	CHECK(strcmp(r1.body, want) == 0);
	CHECK(strstr(r1.body, "\"endsAt\":\"2023-11-14T22:13:25.123Z\"") != NULL);
	free(r0.body);
	free(r1.body);
	check_balance(n);
	det_notify_free(n);
	fake_stop(f);
}

static void test_webhooks(void)
{
	struct fake *w1 = fake_start(), *w2 = fake_start(), *am = fake_start();
	char u1[64], u2[64], ua[64];
	fake_url(w1, u1, sizeof(u1));
	fake_url(w2, u2, sizeof(u2));
	fake_url(am, ua, sizeof(ua));
	struct det_notify_options o = opts(ua);
	struct det_notify *n = mk_notify(&o);
	struct det_alert a = mk(7, 3, DET_ALERT_FIRING);
	a.c.nwebhooks = 2;
	snprintf(a.c.webhooks[0], DET_URL_MAX, "%s/hook?x=1", u1);
	snprintf(a.c.webhooks[1], DET_URL_MAX, "%s", u2);
	CHECK_EQ_INT(det_notify_send(n, &a, T0 + S), 0);
	struct det_notify_stats st;
	WAIT_UNTIL(n, st, st.sent[DET_NOTIFY_WEBHOOK] == 2 && st.sent[DET_NOTIFY_AM] == 1);
	a.state = DET_ALERT_RESOLVED;
	a.ends_ns = T0 + 9 * S;
	CHECK_EQ_INT(det_notify_send(n, &a, T0 + 9 * S), 0);
	/* A periodic re-send goes to Alertmanager only. */
	struct det_alert b = mk(8, 4, DET_ALERT_FIRING);
	b.c.nwebhooks = 1;
	snprintf(b.c.webhooks[0], DET_URL_MAX, "%s", u2);
	CHECK_EQ_INT(det_notify_resend(n, &b, T0), 0);
	WAIT_UNTIL(n, st, st.depth == 0 && st.sent[DET_NOTIFY_WEBHOOK] == 4);
	CHECK_EQ_INT(st.queued[DET_NOTIFY_WEBHOOK], 4);
	CHECK_EQ_INT(st.sent[DET_NOTIFY_AM], 3);
	CHECK_EQ_INT(fake_count(w1), 2);
	CHECK_EQ_INT(fake_count(w2), 2);
	struct fake_req r = fake_get(w1, 0);
	CHECK(strcmp(r.path, "/hook?x=1") == 0);
	char want[4096];
	a.state = DET_ALERT_FIRING;
	a.ends_ns = 0;
	det_notify_render_webhook(n, &a, T0 + S, want, sizeof(want));
	CHECK(strcmp(r.body, want) == 0);
	CHECK(strstr(r.body, "\"state\":\"firing\"") != NULL);
	free(r.body);
	r = fake_get(w2, 1);
	CHECK(strstr(r.body, "\"state\":\"resolved\"") != NULL);
	CHECK(strstr(r.body, "\"endsAt\":\"2023-11-14T22:13:29.123Z\"") != NULL);
	free(r.body);
	check_balance(n);
	det_notify_free(n);
	fake_stop(w1);
	fake_stop(w2);
	fake_stop(am);
}

static void test_retry_5xx_then_ok(void)
{
	struct fake *f = fake_start();
	int script[] = {500, 503, 429};
	fake_script(f, script, 3, 200);
	char url[64];
	fake_url(f, url, sizeof(url));
	struct det_notify_options o = opts(url);
	struct det_notify *n = mk_notify(&o);
	struct det_alert a = mk(1, 3, DET_ALERT_FIRING);
	CHECK_EQ_INT(det_notify_send(n, &a, T0), 0);
	struct det_notify_stats st;
	WAIT_UNTIL(n, st, st.depth == 0);
	CHECK_EQ_INT(st.sent[DET_NOTIFY_AM], 1);
	CHECK_EQ_INT(st.retried[DET_NOTIFY_AM], 3);
	CHECK_EQ_INT(st.attempts_failed[DET_NOTIFY_AM], 3);
	CHECK_EQ_INT(st.failed[DET_NOTIFY_AM], 0);
	CHECK_EQ_INT(st.requests[DET_NOTIFY_AM], 4);
	CHECK_EQ_INT(fake_count(f), 4);
	struct fake_req r0 = fake_get(f, 0), r3 = fake_get(f, 3);
	CHECK(strcmp(r0.body, r3.body) == 0); /* the same document each time */
	free(r0.body);
	free(r3.body);
	check_balance(n);
	det_notify_free(n);
	fake_stop(f);
}

static void test_give_up(void)
{
	/* 503 forever: given up after max_attempts. */
	struct fake *f = fake_start();
	fake_script(f, NULL, 0, 503);
	char url[64];
	fake_url(f, url, sizeof(url));
	struct det_notify_options o = opts(url);
	o.max_attempts = 3;
	struct det_notify *n = mk_notify(&o);
	struct det_alert a = mk(1, 3, DET_ALERT_FIRING);
	det_notify_send(n, &a, T0);
	struct det_notify_stats st;
	WAIT_UNTIL(n, st, st.depth == 0);
	CHECK_EQ_INT(st.failed[DET_NOTIFY_AM], 1);
	CHECK_EQ_INT(st.retried[DET_NOTIFY_AM], 2);
	CHECK_EQ_INT(st.attempts_failed[DET_NOTIFY_AM], 3);
	CHECK_EQ_INT(st.requests[DET_NOTIFY_AM], 3);
	CHECK_EQ_INT(st.sent[DET_NOTIFY_AM], 0);
	check_balance(n);

	/* 400: the receiver rejects the document; no retry. */
	int script[] = {400};
	fake_script(f, script, 1, 200);
	a.id = 2;
	det_notify_send(n, &a, T0);
	WAIT_UNTIL(n, st, st.depth == 0 && st.failed[DET_NOTIFY_AM] == 2);
	CHECK_EQ_INT(st.requests[DET_NOTIFY_AM], 4);
	CHECK_EQ_INT(st.retried[DET_NOTIFY_AM], 2);
	check_balance(n);
	det_notify_free(n);
	fake_stop(f);
}

static void test_refused_and_good_receiver(void)
{
	struct fake *f = fake_start();
	char good[64], dead[64], both[160];
	fake_url(f, good, sizeof(good));
	int dfd = fake_dead_url(dead, sizeof(dead));
	snprintf(both, sizeof(both), "%s/, %s", dead, good);
	struct det_notify_options o = opts(both);
	o.max_attempts = 4;
	struct det_notify *n = mk_notify(&o);
	struct det_alert a = mk(1, 3, DET_ALERT_FIRING);
	CHECK_EQ_INT(det_notify_send(n, &a, T0), 0);
	struct det_notify_stats st;
	WAIT_UNTIL(n, st, st.depth == 0);
	CHECK_EQ_INT(st.queued[DET_NOTIFY_AM], 2);
	CHECK_EQ_INT(st.sent[DET_NOTIFY_AM], 1);   /* the good one */
	CHECK_EQ_INT(st.failed[DET_NOTIFY_AM], 1); /* the dead one, after 4 attempts */
	CHECK_EQ_INT(st.attempts_failed[DET_NOTIFY_AM], 4);
	CHECK_EQ_INT(st.retried[DET_NOTIFY_AM], 3);
	CHECK_EQ_INT(st.requests[DET_NOTIFY_AM], 5);
	CHECK_EQ_INT(fake_count(f), 1);
	check_balance(n);
	det_notify_free(n);
	close(dfd);
	fake_stop(f);
}

static void test_dropped_connection(void)
{
	struct fake *f = fake_start();
	int script[] = {FAKE_DROP, FAKE_DROP};
	fake_script(f, script, 2, 200);
	char url[64];
	fake_url(f, url, sizeof(url));
	struct det_notify_options o = opts(url);
	struct det_notify *n = mk_notify(&o);
	struct det_alert a = mk(1, 3, DET_ALERT_FIRING);
	det_notify_send(n, &a, T0);
	struct det_notify_stats st;
	WAIT_UNTIL(n, st, st.depth == 0);
	CHECK_EQ_INT(st.sent[DET_NOTIFY_AM], 1);
	CHECK_EQ_INT(st.retried[DET_NOTIFY_AM], 2);
	CHECK_EQ_INT(fake_count(f), 3);
	check_balance(n);
	det_notify_free(n);
	fake_stop(f);
}

static void test_timeout_then_ok(void)
{
	struct fake *f = fake_start();
	int script[] = {FAKE_HOLD};
	fake_script(f, script, 1, 200);
	char url[64];
	fake_url(f, url, sizeof(url));
	struct det_notify_options o = opts(url);
	o.timeout_ms = 200; /* the held request outlives it */
	struct det_notify *n = mk_notify(&o);
	struct det_alert a = mk(1, 3, DET_ALERT_FIRING);
	det_notify_send(n, &a, T0);
	struct det_notify_stats st;
	WAIT_UNTIL(n, st, st.retried[DET_NOTIFY_AM] == 1);
	CHECK_EQ_INT(st.sent[DET_NOTIFY_AM], 0);
	/* The single-threaded fake is still holding the first request; the retry
	 * waits in its listen backlog until we let go. */
	fake_release(f);
	WAIT_UNTIL(n, st, st.depth == 0);
	CHECK_EQ_INT(st.sent[DET_NOTIFY_AM], 1);
	CHECK_EQ_INT(st.failed[DET_NOTIFY_AM], 0);
	check_balance(n);
	det_notify_free(n);
	fake_stop(f);
}

static void test_slow_receiver_does_not_stall_others(void)
{
	struct fake *slow = fake_start(), *fast = fake_start(), *hook = fake_start();
	fake_script(slow, NULL, 0, FAKE_HOLD);
	char us[64], uf[64], uh[64], both[160];
	fake_url(slow, us, sizeof(us));
	fake_url(fast, uf, sizeof(uf));
	fake_url(hook, uh, sizeof(uh));
	snprintf(both, sizeof(both), "%s,%s", us, uf);
	struct det_notify_options o = opts(both);
	struct det_notify *n = mk_notify(&o);
	struct det_alert a = mk(1, 3, DET_ALERT_FIRING);
	a.c.nwebhooks = 1;
	snprintf(a.c.webhooks[0], DET_URL_MAX, "%s", uh);
	det_notify_send(n, &a, T0);
	CHECK_EQ_INT(fake_wait(slow, 1), 1);
	CHECK_EQ_INT(fake_wait(fast, 1), 1);
	CHECK_EQ_INT(fake_wait(hook, 1), 1);
	struct det_alert b = mk(2, 4, DET_ALERT_FIRING);
	det_notify_send(n, &b, T0);
	CHECK_EQ_INT(fake_wait(fast, 2), 2); /* while the slow one still holds the first */
	struct det_notify_stats st;
	WAIT_UNTIL(n, st, st.sent[DET_NOTIFY_AM] == 2 && st.sent[DET_NOTIFY_WEBHOOK] == 1);
	CHECK_EQ_INT(fake_count(slow), 1);
	CHECK_EQ_INT(st.in_flight, 1);
	fake_release(slow);
	WAIT_UNTIL(n, st, st.depth == 0);
	CHECK_EQ_INT(st.sent[DET_NOTIFY_AM], 4);
	check_balance(n);
	det_notify_free(n);
	fake_stop(slow);
	fake_stop(fast);
	fake_stop(hook);
}

static void test_never_blocks_and_drops_oldest(void)
{
	struct fake *f = fake_start();
	int script[] = {FAKE_HOLD};
	fake_script(f, script, 1, 200);
	char url[64];
	fake_url(f, url, sizeof(url));
	struct det_notify_options o = opts(url);
	o.max_queue = 8;
	struct det_notify *n = mk_notify(&o);
	struct det_alert a = mk(1, 1, DET_ALERT_FIRING);
	det_notify_send(n, &a, T0);
	CHECK_EQ_INT(fake_wait(f, 1), 1); /* the receiver now blocks on the test's lock */
	for (int i = 2; i <= 21; i++) {
		a = mk((uint64_t)i, i, DET_ALERT_FIRING);
		CHECK_EQ_INT(det_notify_send(n, &a, T0), 0);
	}
	/* Every send returned while the receiver was blocked. */
	CHECK_EQ_INT(fake_count(f), 1);
	struct det_notify_stats st;
	det_notify_stats(n, &st);
	CHECK_EQ_INT(st.queued[DET_NOTIFY_AM], 21);
	CHECK_EQ_INT(st.dropped_full[DET_NOTIFY_AM], 13);
	CHECK_EQ_INT(st.depth, 8);
	CHECK_EQ_INT(st.in_flight, 1);
	check_balance(n);
	fake_release(f);
	WAIT_UNTIL(n, st, st.depth == 0);
	CHECK_EQ_INT(st.sent[DET_NOTIFY_AM], 8);
	CHECK_EQ_INT(st.failed[DET_NOTIFY_AM], 0);
	/* Delivered: the one in flight, then the newest seven (15..21). */
	CHECK_EQ_INT(fake_count(f), 2);
	struct fake_req r0 = fake_get(f, 0), r1 = fake_get(f, 1);
	CHECK(strstr(r0.body, "\"rank\":\"1\"") != NULL);
	CHECK_EQ_INT(count_substr(r1.body, "\"labels\""), 7);
	for (int i = 2; i <= 21; i++) {
		char needle[32];
		snprintf(needle, sizeof(needle), "\"rank\":\"%d\"", i);
		CHECK((strstr(r1.body, needle) != NULL) == (i >= 15));
	}
	free(r0.body);
	free(r1.body);
	check_balance(n);
	det_notify_free(n);
	fake_stop(f);
}

static void test_coalesce(void)
{
	struct fake *f = fake_start();
	int script[] = {FAKE_HOLD};
	fake_script(f, script, 1, 200);
	char url[64];
	fake_url(f, url, sizeof(url));
	struct det_notify_options o = opts(url);
	struct det_notify *n = mk_notify(&o);
	struct det_alert a = mk(1, 1, DET_ALERT_FIRING);
	det_notify_send(n, &a, T0);
	CHECK_EQ_INT(fake_wait(f, 1), 1);
	struct det_alert b = mk(2, 2, DET_ALERT_FIRING);
	det_notify_send(n, &b, T0);
	det_notify_resend(n, &b, T0 + 60 * S);
	b.state = DET_ALERT_RESOLVED;
	b.ends_ns = T0 + 61 * S;
	det_notify_send(n, &b, T0 + 61 * S);
	struct det_notify_stats st;
	det_notify_stats(n, &st);
	CHECK_EQ_INT(st.coalesced[DET_NOTIFY_AM], 2);
	CHECK_EQ_INT(st.depth, 2);
	fake_release(f);
	WAIT_UNTIL(n, st, st.depth == 0);
	CHECK_EQ_INT(st.sent[DET_NOTIFY_AM], 2);
	struct fake_req r = fake_get(f, 1);
	CHECK_EQ_INT(count_substr(r.body, "\"labels\""), 1);
	CHECK(strstr(r.body, "\"endsAt\":\"2023-11-14T22:14:21.123Z\"") != NULL);
	free(r.body);
	check_balance(n);
	det_notify_free(n);
	fake_stop(f);
}

static void test_webhook_receivers_bounded(void)
{
	struct fake *w[3];
	char u[3][64];
	for (int i = 0; i < 3; i++) {
		w[i] = fake_start();
		fake_url(w[i], u[i], sizeof(u[i]));
	}
	struct det_notify_options o = opts(NULL);
	o.max_webhooks = 2;
	struct det_notify *n = mk_notify(&o);
	struct det_alert a = mk(1, 1, DET_ALERT_FIRING);
	a.c.nwebhooks = 3;
	for (int i = 0; i < 3; i++)
		snprintf(a.c.webhooks[i], DET_URL_MAX, "%s", u[i]);
	CHECK_EQ_INT(det_notify_send(n, &a, T0), RDB_ELIMIT);
	struct det_notify_stats st;
	WAIT_UNTIL(n, st, st.depth == 0);
	CHECK_EQ_INT(st.refused, 1);
	CHECK_EQ_INT(st.sent[DET_NOTIFY_WEBHOOK], 2);
	CHECK_EQ_INT(fake_count(w[2]), 0);
	/* Both slots idle now: the least recently used one is recycled. */
	a.c.nwebhooks = 1;
	snprintf(a.c.webhooks[0], DET_URL_MAX, "%s", u[2]);
	CHECK_EQ_INT(det_notify_send(n, &a, T0), 0);
	WAIT_UNTIL(n, st, st.depth == 0 && st.sent[DET_NOTIFY_WEBHOOK] == 3);
	CHECK_EQ_INT(fake_count(w[2]), 1);
	/* Not an http(s) URL: refused. */
	snprintf(a.c.webhooks[0], DET_URL_MAX, "file:///etc/passwd");
	CHECK_EQ_INT(det_notify_send(n, &a, T0), RDB_EINVAL);
	det_notify_stats(n, &st);
	CHECK_EQ_INT(st.refused, 2);
	check_balance(n);
	det_notify_free(n);
	for (int i = 0; i < 3; i++)
		fake_stop(w[i]);
}

static void test_max_age(void)
{
	char dead[64];
	int dfd = fake_dead_url(dead, sizeof(dead));
	struct det_notify_options o = opts(dead);
	o.max_attempts = 1000000;
	o.max_age_s = 1;
	o.retry_min_ms = 50;
	o.retry_max_ms = 100;
	struct det_notify *n = mk_notify(&o);
	struct det_alert a = mk(1, 1, DET_ALERT_FIRING);
	det_notify_send(n, &a, T0);
	struct det_notify_stats st;
	WAIT_UNTIL(n, st, st.depth == 0);
	CHECK_EQ_INT(st.failed[DET_NOTIFY_AM], 1);
	CHECK(st.retried[DET_NOTIFY_AM] >= 1);
	check_balance(n);
	det_notify_free(n);
	close(dfd);
}

static void test_shutdown_while_receiver_hangs(void)
{
	struct fake *f = fake_start();
	fake_script(f, NULL, 0, FAKE_HOLD);
	char url[64];
	fake_url(f, url, sizeof(url));
	struct det_notify_options o = opts(url);
	o.drain_timeout_ms = 100;
	struct det_notify *n = mk_notify(&o);
	for (int i = 1; i <= 3; i++) {
		struct det_alert a = mk((uint64_t)i, i, DET_ALERT_FIRING);
		det_notify_send(n, &a, T0);
	}
	CHECK_EQ_INT(fake_wait(f, 1), 1);
	det_notify_free(n); /* returns although the receiver still hangs */
	CHECK_EQ_INT(fake_count(f), 1);
	fake_release(f);
	fake_stop(f);

	/* Aborting at once works too, and so does a clean drain. */
	f = fake_start();
	fake_url(f, url, sizeof(url));
	o = opts(url);
	o.drain_timeout_ms = 10000;
	n = mk_notify(&o);
	struct det_alert a = mk(1, 1, DET_ALERT_FIRING);
	det_notify_send(n, &a, T0);
	det_notify_free(n); /* drains: the receiver answers */
	CHECK_EQ_INT(fake_count(f), 1);
	fake_stop(f);
}

int main(void)
{
	struct det_notify *n = NULL;
	struct det_notify_options o = opts(NULL);
	CHECK_EQ_INT(det_notify_new(&o, &n), RDB_EINVAL); /* before global init */
	if (det_notify_global_init() != 0)
		return 1;
	CHECK_EQ_INT(det_notify_global_init(), 0); /* idempotent */
	RUN(test_new_checks_options);
	RUN(test_render);
	RUN(test_am_batch);
	RUN(test_webhooks);
	RUN(test_retry_5xx_then_ok);
	RUN(test_give_up);
	RUN(test_refused_and_good_receiver);
	RUN(test_dropped_connection);
	RUN(test_timeout_then_ok);
	RUN(test_slow_receiver_does_not_stall_others);
	RUN(test_never_blocks_and_drops_oldest);
	RUN(test_coalesce);
	RUN(test_webhook_receivers_bounded);
	RUN(test_max_age);
	RUN(test_shutdown_while_receiver_hangs);
	det_notify_global_cleanup();
	return check_summary("notify");
}
