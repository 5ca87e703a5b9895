/* test_pipeline.c - the ingest pipeline: a write is durable before it is
 * published; each subscriber gets every acknowledged write once, in order,
 * on its own thread, with points and events intact; a duplicate batch id is
 * acknowledged and not published again; a refused write is not published;
 * a subscriber that stalls never blocks submit (its queue overflows and
 * the misses are counted); ticks arrive while no write comes; a subscriber
 * with a want filter gets the series it wants plus one per run of series
 * that repeat a rank's progress, while one without gets every series. */
#include "check.h"
#include "common/rdb_err.h"
#include "common/rdb_time.h"
#include "ingest/pipeline.h"
#include "storage/io/fault.h"
#include "storage/sto.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char base[1024];
static int dir_seq;

struct rec {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	size_t writes, points, events, ticks;
	double last_value;
	uint8_t last_source;
	bool stall; /* deliver() blocks while set */
	bool in_deliver;
};

static void rec_deliver(void *arg, const struct ing_ack *ack)
{
	struct rec *r = arg;
	pthread_mutex_lock(&r->mu);
	r->in_deliver = true;
	pthread_cond_broadcast(&r->cv);
	while (r->stall)
		pthread_cond_wait(&r->cv, &r->mu);
	r->in_deliver = false;
	r->writes++;
	r->points += mdl_batch_points(ack->points);
	r->events += mdl_events_count(ack->events);
	r->last_source = ack->source;
	if (mdl_batch_nseries(ack->points)) {
		const struct mdl_batch_series *s = mdl_batch_series_at(ack->points, 0);
		uint64_t bits = s->pts.value[s->pts.n - 1];
		memcpy(&r->last_value, &bits, sizeof(bits));
	}
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

static void rec_tick(void *arg, int64_t now_ns)
{
	struct rec *r = arg;
	(void)now_ns;
	pthread_mutex_lock(&r->mu);
	r->ticks++;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

/* Waits (bounded: 30 s) until the recorder has seen n writes. */
static bool wait_writes(struct rec *r, size_t n)
{
	int64_t deadline = rdb_now_mono_ns() + 30000000000LL;
	pthread_mutex_lock(&r->mu);
	while (r->writes < n && rdb_now_mono_ns() < deadline) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 10000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&r->cv, &r->mu, &ts);
	}
	bool ok = r->writes >= n;
	pthread_mutex_unlock(&r->mu);
	return ok;
}

static struct sto *open_store(void)
{
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/pipeline.%d", base, dir_seq++);
	struct sto_options o;
	sto_options_default(&o);
	o.data_dir = dir;
	o.sync = STO_SYNC_NONE;
	o.index_map_bytes = 64ull << 20;
	struct sto *s = NULL;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	return s;
}

static void rec_init(struct rec *r)
{
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
}

static void add_points(struct mdl_batch *b, int step, size_t n)
{
	mdl_batch_reset(b);
	for (size_t i = 0; i < n; i++) {
		double v = step + (double)i / 1000.0;
		uint64_t bits;
		memcpy(&bits, &v, sizeof(v));
		mdl_batch_add(b, "job1", 4, (uint32_t)i, "loss", 4, 1700000000000000000LL + step,
			      step, 0, bits);
	}
}

static void test_publish_after_ack(void)
{
	struct sto *s = open_store();
	struct ing_pipeline *p = NULL;
	struct rec r;
	rec_init(&r);
	CHECK_EQ_INT(ing_pipeline_new(s, NULL, &p), 0);
	struct ing_subscriber sub = {.name = "rec", .deliver = rec_deliver, .arg = &r};
	CHECK_EQ_INT(ing_pipeline_subscribe(p, &sub), 0);
	struct mdl_batch *b = NULL;
	struct mdl_events *ev = NULL;
	CHECK_EQ_INT(mdl_batch_new(1000, 1000, &b), 0);
	CHECK_EQ_INT(mdl_events_new(10, 1 << 16, &ev), 0);
	struct mdl_event e = {.kind = MDL_EV_LOG,
			      .level = MDL_LEVEL_WARN,
			      .rank = 3,
			      .ts_ns = 1700000000000000000LL,
			      .step = 7,
			      .job = "job1",
			      .job_len = 4,
			      .text = "hello",
			      .text_len = 5,
			      .fields = "{}",
			      .fields_len = 2};
	CHECK_EQ_INT(mdl_events_add(ev, &e), 0);
	struct ing_outcome o;
	for (int step = 1; step <= 50; step++) {
		add_points(b, step, 8);
		struct ing_write w = {
		    .points = b, .events = step == 50 ? ev : NULL, .source = ING_SRC_HTTP_JSON};
		CHECK_EQ_INT(ing_submit(p, &w, &o), 0);
		CHECK_EQ_INT(o.status, 200);
	}
	CHECK(wait_writes(&r, 50));
	pthread_mutex_lock(&r.mu);
	CHECK_EQ_INT(r.writes, 50);
	CHECK_EQ_INT(r.points, 400);
	CHECK_EQ_INT(r.events, 1);
	CHECK(r.last_value == 50.0); /* in order: the last write's first point */
	pthread_mutex_unlock(&r.mu);

	/* a duplicate batch id is acknowledged and not published twice */
	struct ing_write w = {
	    .points = b, .batch_id = "batch-1", .batch_id_len = 7, .source = ING_SRC_UDP};
	CHECK_EQ_INT(ing_submit(p, &w, &o), 0);
	CHECK(!o.duplicate);
	CHECK_EQ_INT(ing_submit(p, &w, &o), 0);
	CHECK(o.duplicate);
	CHECK(wait_writes(&r, 51));
	ing_pipeline_free(p); /* joins the subscriber: counts are final */
	CHECK_EQ_INT(r.writes, 51);
	CHECK_EQ_INT(r.last_source, ING_SRC_UDP);
	mdl_batch_free(b);
	mdl_events_free(ev);
	sto_close(s);
}

struct count_arg {
	uint64_t delivered, dropped;
};

static void count_stats(void *arg, const struct ing_subscriber_stats *st)
{
	struct count_arg *c = arg;
	c->delivered = st->delivered;
	c->dropped = st->dropped;
}

static void test_stalled_subscriber_never_blocks(void)
{
	struct sto *s = open_store();
	struct ing_pipeline *p = NULL;
	struct rec r;
	rec_init(&r);
	r.stall = true;
	CHECK_EQ_INT(ing_pipeline_new(s, NULL, &p), 0);
	/* a tiny queue: a few writes fit, the rest overflow */
	struct ing_subscriber sub = {
	    .name = "slow", .deliver = rec_deliver, .arg = &r, .queue_bytes = 4096};
	CHECK_EQ_INT(ing_pipeline_subscribe(p, &sub), 0);
	struct mdl_batch *b = NULL;
	CHECK_EQ_INT(mdl_batch_new(1000, 1000, &b), 0);
	struct ing_outcome o;
	size_t n = 200;
	for (size_t i = 0; i < n; i++) {
		add_points(b, (int)i + 1, 16);
		struct ing_write w = {.points = b};
		CHECK_EQ_INT(ing_submit(p, &w, &o), 0); /* returns although deliver() is stuck */
	}
	struct count_arg c = {0};
	ing_pipeline_stats(p, count_stats, &c);
	CHECK(c.dropped > 0);
	pthread_mutex_lock(&r.mu);
	r.stall = false;
	pthread_cond_broadcast(&r.cv);
	pthread_mutex_unlock(&r.mu);
	/* every write is either delivered or counted as dropped, exactly once */
	int64_t deadline = rdb_now_mono_ns() + 30000000000LL;
	do {
		usleep(1000);
		ing_pipeline_stats(p, count_stats, &c);
	} while (c.delivered + c.dropped < n && rdb_now_mono_ns() < deadline);
	CHECK_EQ_INT(c.delivered + c.dropped, n);
	ing_pipeline_free(p);
	CHECK_EQ_INT(r.writes, c.delivered);
	/* and every write is stored, whatever the subscriber missed */
	struct sto_stats st;
	sto_get_stats(s, &st);
	CHECK_EQ_INT(st.points_written, n * 16);
	mdl_batch_free(b);
	sto_close(s);
}

static void test_refused_write_not_published_and_ticks(void)
{
	struct sto *s = open_store();
	struct ing_pipeline *p = NULL;
	struct rec r;
	rec_init(&r);
	struct ing_pipeline_options po = {.max_series = 7, .max_series_per_job = 7};
	CHECK_EQ_INT(ing_pipeline_new(s, &po, &p), 0);
	struct ing_subscriber sub = {
	    .name = "rec", .deliver = rec_deliver, .tick = rec_tick, .tick_ms = 5, .arg = &r};
	CHECK_EQ_INT(ing_pipeline_subscribe(p, &sub), 0);
	struct ing_outcome o;
	struct ing_write w = {.batch_id = "", .batch_id_len = 0};
	w.batch_id = "x";
	w.batch_id_len = 500; /* over STO_BATCH_ID_MAX: refused by storage */
	CHECK(ing_submit(p, &w, &o) != 0);
	CHECK_EQ_INT(o.status, 400);
	CHECK_EQ_INT(o.reason, ING_INVALID);
	CHECK(o.msg[0] != 0);
	/* ticks come while nothing is written */
	int64_t deadline = rdb_now_mono_ns() + 30000000000LL;
	size_t ticks = 0;
	while (ticks < 3 && rdb_now_mono_ns() < deadline) {
		usleep(2000);
		pthread_mutex_lock(&r.mu);
		ticks = r.ticks;
		pthread_mutex_unlock(&r.mu);
	}
	CHECK(ticks >= 3);
	ing_pipeline_free(p);
	CHECK_EQ_INT(r.writes, 0);
	sto_close(s);
}

/* ing_submit_async + ing_finish give what ing_submit gives: the same
 * outcome for a stored write (published once), and for a failed WAL append
 * the same status, reason, Retry-After and message (not published). */
struct ready {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
};

static void on_ready(void *arg)
{
	struct ready *rd = arg;
	pthread_mutex_lock(&rd->mu);
	rd->done = true;
	pthread_cond_broadcast(&rd->cv);
	pthread_mutex_unlock(&rd->mu);
}

static int submit_async_wait(struct ing_pipeline *p, const struct ing_write *w,
			     struct ing_outcome *o)
{
	struct ready rd = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
	struct ing_ticket *tk = NULL;
	int rc = ing_submit_async(p, w, o, on_ready, &rd, &tk);
	if (rc != ING_PENDING)
		return rc;
	pthread_mutex_lock(&rd.mu);
	while (!rd.done)
		pthread_cond_wait(&rd.cv, &rd.mu);
	pthread_mutex_unlock(&rd.mu);
	return ing_finish(tk, o);
}

static void test_async_submit_same_outcome(void)
{
	struct sto *s = open_store();
	struct ing_pipeline *p = NULL;
	struct rec r;
	rec_init(&r);
	CHECK_EQ_INT(ing_pipeline_new(s, NULL, &p), 0);
	struct ing_subscriber sub = {.name = "rec", .deliver = rec_deliver, .arg = &r};
	CHECK_EQ_INT(ing_pipeline_subscribe(p, &sub), 0);
	struct mdl_batch *b = NULL;
	CHECK_EQ_INT(mdl_batch_new(1000, 1000, &b), 0);
	struct ing_outcome sync_o, async_o;
	add_points(b, 1, 8);
	struct ing_write w = {.points = b, .source = ING_SRC_HTTP_LP};
	CHECK_EQ_INT(submit_async_wait(p, &w, &async_o), 0);
	CHECK_EQ_INT(async_o.status, 200);
	CHECK(!async_o.duplicate);
	CHECK(wait_writes(&r, 1));
	/* a failed WAL append, once through each path */
	add_points(b, 2, 8);
	sto_fault_set(STO_FP_WAL_APPEND, EIO, 1, false);
	CHECK(ing_submit(p, &w, &sync_o) != 0);
	sto_fault_set(STO_FP_WAL_APPEND, EIO, 1, false);
	CHECK_EQ_INT(submit_async_wait(p, &w, &async_o), sync_o.rc);
	CHECK_EQ_INT(async_o.status, sync_o.status);
	CHECK_EQ_INT(async_o.status, 500);
	CHECK_EQ_INT(async_o.reason, sync_o.reason);
	CHECK(async_o.retry_after && sync_o.retry_after &&
	      strcmp(async_o.retry_after, sync_o.retry_after) == 0);
	CHECK(strcmp(async_o.msg, sync_o.msg) == 0);
	/* a duplicate batch id is answered without waiting */
	struct ing_write wb = {
	    .points = b, .batch_id = "b-7", .batch_id_len = 3, .source = ING_SRC_HTTP_LP};
	CHECK_EQ_INT(submit_async_wait(p, &wb, &async_o), 0);
	struct ing_ticket *tk = NULL;
	CHECK_EQ_INT(ing_submit_async(p, &wb, &async_o, on_ready, NULL, &tk), 0);
	CHECK(async_o.duplicate);
	CHECK_EQ_INT(async_o.status, 200);
	CHECK(wait_writes(&r, 2));
	ing_pipeline_free(p);
	CHECK_EQ_INT(r.writes, 2); /* the stored ones, once each */
	mdl_batch_free(b);
	sto_close(s);
}

/* Records "job/rank/metric:n" of every series delivered, in order. */
struct names {
	pthread_mutex_t mu;
	size_t writes;
	char text[4096];
};

static void names_deliver(void *arg, const struct ing_ack *ack)
{
	struct names *nm = arg;
	pthread_mutex_lock(&nm->mu);
	for (size_t i = 0; i < mdl_batch_nseries(ack->points); i++) {
		const struct mdl_batch_series *s = mdl_batch_series_at(ack->points, i);
		size_t l = strlen(nm->text);
		snprintf(nm->text + l, sizeof(nm->text) - l, "%s/%u/%s:%zu ", s->key.job,
			 s->key.rank, s->key.metric, s->pts.n);
	}
	size_t l = strlen(nm->text);
	snprintf(nm->text + l, sizeof(nm->text) - l, "| ");
	nm->writes++;
	pthread_mutex_unlock(&nm->mu);
}

static void want_loss(void *arg, const struct mdl_batch *points, bool *want)
{
	(void)arg;
	for (size_t i = 0; i < mdl_batch_nseries(points); i++)
		want[i] = strcmp(mdl_batch_series_at(points, i)->key.metric, "loss") == 0;
}

static void add1(struct mdl_batch *b, const char *job, uint32_t rank, const char *metric,
		 int64_t step, int64_t ts_ns, uint32_t attempt)
{
	CHECK_EQ_INT(mdl_batch_add(b, job, strlen(job), rank, metric, strlen(metric), ts_ns, step,
				   attempt, 0),
		     0);
}

static bool wait_names(struct names *nm, size_t n)
{
	for (int i = 0; i < 3000; i++) {
		pthread_mutex_lock(&nm->mu);
		bool done = nm->writes >= n;
		pthread_mutex_unlock(&nm->mu);
		if (done)
			return true;
		usleep(10000);
	}
	return false;
}

static void test_want_filter(void)
{
	struct sto *s = open_store();
	struct ing_pipeline *p = NULL;
	struct names sel = {0}, all = {0};
	pthread_mutex_init(&sel.mu, NULL);
	pthread_mutex_init(&all.mu, NULL);
	CHECK_EQ_INT(ing_pipeline_new(s, NULL, &p), 0);
	struct ing_subscriber a = {.name = "all", .deliver = names_deliver, .arg = &all};
	struct ing_subscriber f = {
	    .name = "sel", .deliver = names_deliver, .arg = &sel, .want = want_loss};
	CHECK_EQ_INT(ing_pipeline_subscribe(p, &a), 0);
	CHECK_EQ_INT(ing_pipeline_subscribe(p, &f), 0);
	struct mdl_batch *b = NULL;
	CHECK_EQ_INT(mdl_batch_new(1000, 1000, &b), 0);
	const int64_t t = 1700000000000000000LL;
	struct ing_outcome o;
	/* one record per rank (the per-rank shape): loss + 2 others at one step */
	add1(b, "j", 0, "lr", 5, t, 0);
	add1(b, "j", 0, "loss", 5, t, 0);
	add1(b, "j", 0, "gpu.util", 5, t, 0);
	add1(b, "j", 1, "lr", 5, t, 0);	      /* another rank: its own progress */
	add1(b, "j", 1, "gpu.util", 5, t, 0); /* repeats rank 1's lr */
	add1(b, "k", 1, "lr", 5, t, 0);	      /* another job */
	add1(b, "j", 1, "host.cpu", 6, t, 0); /* a newer step */
	add1(b, "j", 1, "host.rss", 6, t, 1); /* another attempt */
	struct ing_write w = {.points = b, .source = ING_SRC_HTTP_LP};
	CHECK_EQ_INT(ing_submit(p, &w, &o), 0);
	/* several points: equal arrays are left out only when they never go back */
	mdl_batch_reset(b);
	add1(b, "j", 2, "lr", 9, t + 2, 0);
	add1(b, "j", 2, "lr", 8, t + 1, 0);
	add1(b, "j", 2, "gpu.util", 9, t + 2, 0);
	add1(b, "j", 2, "gpu.util", 8, t + 1, 0);
	add1(b, "j", 3, "lr", 8, t + 1, 0);
	add1(b, "j", 3, "lr", 9, t + 2, 0);
	add1(b, "j", 3, "gpu.util", 8, t + 1, 0);
	add1(b, "j", 3, "gpu.util", 9, t + 2, 0);
	add1(b, "j", 3, "gpu.temp", 8, t + 1, 0); /* fewer points */
	CHECK_EQ_INT(ing_submit(p, &w, &o), 0);
	CHECK(wait_names(&sel, 2));
	CHECK(wait_names(&all, 2));
	ing_pipeline_free(p);
	const char *want_sel = "j/0/lr:1 j/0/loss:1 j/1/lr:1 k/1/lr:1 j/1/host.cpu:1 "
			       "j/1/host.rss:1 | j/2/lr:2 j/2/gpu.util:2 j/3/lr:2 "
			       "j/3/gpu.temp:1 | ";
	const char *want_all = "j/0/lr:1 j/0/loss:1 j/0/gpu.util:1 j/1/lr:1 j/1/gpu.util:1 "
			       "k/1/lr:1 j/1/host.cpu:1 j/1/host.rss:1 | j/2/lr:2 "
			       "j/2/gpu.util:2 j/3/lr:2 j/3/gpu.util:2 j/3/gpu.temp:1 | ";
	CHECK(strcmp(sel.text, want_sel) == 0);
	CHECK(strcmp(all.text, want_all) == 0);
	if (strcmp(sel.text, want_sel) || strcmp(all.text, want_all))
		fprintf(stderr, "filtered: %s\nall: %s\n", sel.text, all.text);
	mdl_batch_free(b);
	sto_close(s);
}

int main(void)
{
	const char *t = getenv("RDB_TEST_TMP");
	snprintf(base, sizeof(base), "%s/test_pipeline.%d", t ? t : "/tmp", (int)getpid());
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' && mkdir -p '%s'", base, base);
	if (system(cmd) != 0)
		return 1;
	RUN(test_publish_after_ack);
	RUN(test_stalled_subscriber_never_blocks);
	RUN(test_refused_write_not_published_and_ticks);
	RUN(test_async_submit_same_outcome);
	RUN(test_want_filter);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	if (check_failed_count == 0 && system(cmd) != 0)
		return 1;
	return check_summary("pipeline");
}
