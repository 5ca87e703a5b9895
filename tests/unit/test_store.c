/* test_store.c - the storage engine end to end in one process: writes,
 * reads across head and chunks, checkpoints, reopen, and crash recovery
 * (a forked child writes and _exit()s without closing, so the WAL and
 * uncheckpointed chunks are exactly what a kill -9 leaves behind). */
#include "check.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "storage/admin.h"
#include "storage/chunk/segment.h"
#include "storage/sto.h"
#include "storage/format.h"
#include "storage/index/index.h"
#include "storage/wal/batch_codec.h"
#include "storage/wal/wal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char base[4096];
static int dir_seq;

static void new_dir(char *out, size_t len)
{
	snprintf(out, len, "%s/store.%d", base, dir_seq++);
}

static void opts(struct sto_options *o, const char *dir, uint32_t chunk_max)
{
	sto_options_default(o);
	o->data_dir = dir;
	o->chunk_max_points = chunk_max;
	o->sync = STO_SYNC_NONE;
	o->index_map_bytes = 64ull << 20;
}

/* Writes n points to (job, rank, metric) with ts = t0 + i, step = i,
 * value = i * 0.5, in batches of `per` points. */
static int write_points(struct sto *s, const char *job, uint32_t rank, const char *metric,
			int64_t t0, size_t n, size_t per)
{
	struct mdl_batch *b;
	int rc = mdl_batch_new(1 << 20, 1024, &b);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		rc = mdl_batch_add(b, job, strlen(job), rank, metric, strlen(metric),
				   t0 + (int64_t)i, (int64_t)i, 0, rdb_f64_bits((double)i * 0.5));
		if (rc == 0 && (mdl_batch_points(b) == per || i + 1 == n)) {
			rc = sto_write(s, b);
			mdl_batch_reset(b);
		}
	}
	mdl_batch_free(b);
	return rc;
}

static uint64_t series_id(struct sto *s, const char *job, uint32_t rank, const char *metric)
{
	struct mdl_series_key k = {0};
	snprintf(k.job, sizeof(k.job), "%s", job);
	k.rank = rank;
	snprintf(k.metric, sizeof(k.metric), "%s", metric);
	uint64_t id = 0;
	if (sto_lookup_series(s, &k, &id))
		return 0;
	return id;
}

/* Reads the whole series and checks it is exactly 0..n-1 as written. */
static void check_series(struct sto *s, const char *job, uint32_t rank, const char *metric,
			 int64_t t0, size_t n)
{
	uint64_t id = series_id(s, job, rank, metric);
	CHECK(id != 0);
	struct sto_range r = {INT64_MIN, INT64_MAX, false, 0, 0};
	struct mdl_cols c = MDL_COLS_INIT;
	struct sto_read_error err;
	int rc = sto_read(s, id, &r, 10000000, &c, &err);
	CHECK_EQ_INT(rc, 0);
	CHECK_EQ_INT(c.n, n);
	size_t bad = 0;
	for (size_t i = 0; i < c.n && i < n; i++)
		bad += c.ts_ns[i] != t0 + (int64_t)i || c.step[i] != (int64_t)i ||
		       c.value[i] != rdb_f64_bits((double)i * 0.5);
	CHECK_EQ_INT(bad, 0);
	mdl_cols_free(&c);
}

static void test_head_and_chunks(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 100);
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	CHECK_EQ_INT(write_points(s, "j1", 0, "loss", 1000, 1050, 70), 0);
	check_series(s, "j1", 0, "loss", 1000, 1050); /* head + size-sealed chunks */
	{
		/* the bound over head and chunks together */
		struct mdl_cols hc = MDL_COLS_INIT;
		struct sto_read_error herr;
		struct sto_range hall = {INT64_MIN, INT64_MAX, false, 0, 0};
		uint64_t hid = series_id(s, "j1", 0, "loss");
		CHECK_EQ_INT(sto_read(s, hid, &hall, 1050, &hc, &herr), 0);
		CHECK_EQ_INT(hc.n, 1050);
		CHECK_EQ_INT(sto_read(s, hid, &hall, 1049, &hc, &herr), RDB_ELIMIT);
		mdl_cols_free(&hc);
		/* one point of a chunk of 100, and one of the head: room is made
		 * for what is returned, not for every point read (a range query
		 * keeps each series' result until it answers) */
		struct sto_range one = {1000 + 500, 1000 + 500, false, 0, 0};
		CHECK_EQ_INT(sto_read(s, hid, &one, 1050, &hc, &herr), 0);
		CHECK_EQ_INT(hc.n, 1);
		CHECK(hc.cap < 50);
		mdl_cols_free(&hc);
		struct sto_range last = {1000 + 1049, 1000 + 1049, false, 0, 0};
		CHECK_EQ_INT(sto_read(s, hid, &last, 1050, &hc, &herr), 0);
		CHECK_EQ_INT(hc.n, 1);
		CHECK(hc.cap < 50);
		mdl_cols_free(&hc);
	}
	CHECK_EQ_INT(sto_checkpoint(s), 0);
	struct sto_stats st;
	sto_get_stats(s, &st);
	CHECK_EQ_INT(st.head_points, 0);
	CHECK(st.chunks_sealed >= 10);
	check_series(s, "j1", 0, "loss", 1000, 1050); /* all in chunks */

	/* step and time ranges are inclusive */
	uint64_t id = series_id(s, "j1", 0, "loss");
	struct mdl_cols c = MDL_COLS_INIT;
	struct sto_read_error err;
	struct sto_range r = {INT64_MIN, INT64_MAX, true, 99, 201};
	CHECK_EQ_INT(sto_read(s, id, &r, 1000, &c, &err), 0);
	CHECK_EQ_INT(c.n, 103);
	CHECK_EQ_INT(c.step[0], 99);
	struct sto_range t = {1000 + 500, 1000 + 509, false, 0, 0};
	CHECK_EQ_INT(sto_read(s, id, &t, 1000, &c, &err), 0);
	CHECK_EQ_INT(c.n, 10);
	/* the point bound is enforced */
	struct sto_range all = {INT64_MIN, INT64_MAX, false, 0, 0};
	CHECK_EQ_INT(sto_read(s, id, &all, 1000, &c, &err), RDB_ELIMIT);
	/* right at the bound every point is read; one less is refused */
	CHECK_EQ_INT(sto_read(s, id, &all, 1050, &c, &err), 0);
	CHECK_EQ_INT(c.n, 1050);
	CHECK_EQ_INT(c.ts_ns[1049], 1000 + 1049);
	CHECK_EQ_INT(sto_read(s, id, &all, 1049, &c, &err), RDB_ELIMIT);
	/* a bound inside the first chunk, and none at all */
	CHECK_EQ_INT(sto_read(s, id, &all, 7, &c, &err), RDB_ELIMIT);
	CHECK_EQ_INT(sto_read(s, id, &all, 0, &c, &err), RDB_ELIMIT);
	mdl_cols_free(&c);
	sto_close(s);

	CHECK_EQ_INT(sto_open(&o, &s), 0);
	check_series(s, "j1", 0, "loss", 1000, 1050);
	sto_close(s);
}

/* A series in one chunk is read by taking the decoded chunk's columns
 * whole (no copy); the caller's columns, already holding another read,
 * come back right, and so do reads of part of the chunk, of the chunk
 * plus head points, and of two chunks. */
static void test_single_chunk_reads(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 100);
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	CHECK_EQ_INT(write_points(s, "j1", 0, "a", 1000, 60, 60), 0);
	CHECK_EQ_INT(write_points(s, "j1", 1, "a", 5000, 300, 100), 0);
	CHECK_EQ_INT(sto_checkpoint(s), 0);
	uint64_t one = series_id(s, "j1", 0, "a"), many = series_id(s, "j1", 1, "a");
	struct mdl_cols c = MDL_COLS_INIT;
	struct sto_read_error err;
	struct sto_range all = {INT64_MIN, INT64_MAX, false, 0, INT64_MAX};
	CHECK_EQ_INT(sto_read(s, many, &all, 1000, &c, &err), 0);
	CHECK_EQ_INT(c.n, 300);
	for (int round = 0; round < 2; round++) {
		CHECK_EQ_INT(sto_read(s, one, &all, 1000, &c, &err), 0);
		CHECK_EQ_INT(c.n, 60);
		size_t bad = 0;
		for (size_t i = 0; i < c.n; i++)
			bad += c.ts_ns[i] != 1000 + (int64_t)i || c.step[i] != (int64_t)i ||
			       c.value[i] != rdb_f64_bits((double)i * 0.5) || c.attempt[i] != 0;
		CHECK_EQ_INT(bad, 0);
	}
	CHECK_EQ_INT(sto_read(s, one, &all, 60, &c, &err), 0);
	CHECK_EQ_INT(sto_read(s, one, &all, 59, &c, &err), RDB_ELIMIT);
	struct sto_range part = {1010, 1019, false, 0, INT64_MAX};
	CHECK_EQ_INT(sto_read(s, one, &part, 1000, &c, &err), 0);
	CHECK_EQ_INT(c.n, 10);
	CHECK_EQ_INT(c.step[0], 10);
	struct sto_range steps = {INT64_MIN, INT64_MAX, true, 0, 59};
	CHECK_EQ_INT(sto_read(s, one, &steps, 1000, &c, &err), 0);
	CHECK_EQ_INT(c.n, 60);
	/* head points after the chunk: head first, then the chunk, sorted */
	struct mdl_batch *b;
	CHECK_EQ_INT(mdl_batch_new(1 << 20, 1024, &b), 0);
	for (int i = 60; i < 70; i++)
		CHECK_EQ_INT(mdl_batch_add(b, "j1", 2, 0, "a", 1, 1000 + i, i, 0,
					   rdb_f64_bits((double)i * 0.5)),
			     0);
	CHECK_EQ_INT(sto_write(s, b), 0);
	mdl_batch_free(b);
	CHECK_EQ_INT(sto_read(s, one, &all, 1000, &c, &err), 0);
	CHECK_EQ_INT(c.n, 70);
	CHECK_EQ_INT(c.ts_ns[0], 1000);
	CHECK_EQ_INT(c.ts_ns[69], 1069);
	mdl_cols_free(&c);
	sto_close(s);
}

struct tail_ctx {
	struct sto *s;
	struct rdb_buf rec;
	size_t chunks, checked;
};

/* A chunk read whole and from steps inside it: the tail read is the whole
 * read's suffix from that step on, bit for bit. */
static int tail_cb(void *arg, const struct sto_chunk_ref *ref)
{
	struct tail_ctx *t = arg;
	struct mdl_cols whole = MDL_COLS_INIT, tail = MDL_COLS_INIT;
	struct sto_read_error err;
	t->chunks++;
	int rc = sto_read_chunk_flags(t->s, ref, 0, &t->rec, &whole, &err);
	CHECK_EQ_INT(rc, 0);
	int64_t from[] = {INT64_MIN, ref->stats.min_step, ref->stats.min_step + 300,
			  ref->stats.max_step - 10, ref->stats.max_step + 1};
	for (size_t f = 0; rc == 0 && f < sizeof(from) / sizeof(from[0]); f++) {
		size_t lead = 0;
		while (lead < whole.n && whole.step[lead] < from[f])
			lead++;
		CHECK_EQ_INT(sto_read_chunk_tail(t->s, ref, 0, from[f], &t->rec, &tail, &err), 0);
		CHECK_EQ_INT(tail.n, whole.n - lead);
		size_t bad = 0;
		for (size_t i = 0; i < tail.n && i + lead < whole.n; i++)
			bad += tail.ts_ns[i] != whole.ts_ns[i + lead] ||
			       tail.step[i] != whole.step[i + lead] ||
			       tail.value[i] != whole.value[i + lead];
		CHECK_EQ_INT(bad, 0);
		/* without timestamps: the stand-ins stay inside the chunk's span */
		CHECK_EQ_INT(
		    sto_read_chunk_tail(t->s, ref, STO_READ_NO_TS, from[f], &t->rec, &tail, &err),
		    0);
		CHECK_EQ_INT(tail.n, whole.n - lead);
		for (size_t i = 0; i < tail.n; i++)
			bad += tail.ts_ns[i] < ref->stats.min_ts_ns ||
			       tail.ts_ns[i] > ref->stats.max_ts_ns;
		CHECK_EQ_INT(bad, 0);
		t->checked++;
	}
	mdl_cols_free(&whole);
	mdl_cols_free(&tail);
	return 0;
}

/* Long chunks (a group record of two metrics sharing their steps, and a
 * lone chunk) read from a step inside them: sto_read_chunk_tail. */
static void test_tail_reads(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 4096);
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	struct mdl_batch *b;
	CHECK_EQ_INT(mdl_batch_new(1 << 22, 1 << 16, &b), 0);
	uint64_t x = 88172645463325252ull;
	for (int64_t i = 0; i < 1500; i++) {
		for (int m = 0; m < 3; m++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			float v = (float)(2.0 + 8.0 / (1.0 + (double)i / 300.0) +
					  (double)(x % 1000) / 5000.0);
			static const char *const names[] = {"loss", "grad", "lone"};
			/* "lone" has its own timestamps: not in the group */
			int64_t ts = 1000 + i * 10 + (m == 2 ? 3 : 0);
			CHECK_EQ_INT(mdl_batch_add(b, "jt", 2, 0, names[m], strlen(names[m]), ts, i,
						   0, rdb_f64_bits((double)v)),
				     0);
		}
	}
	CHECK_EQ_INT(sto_write(s, b), 0);
	mdl_batch_free(b);
	CHECK_EQ_INT(sto_checkpoint(s), 0);
	struct tail_ctx t = {.s = s};
	rdb_buf_init(&t.rec, STO_CHUNK_HEADER_SIZE + STO_CHUNK_MAX_PAYLOAD);
	static const char *const names[] = {"loss", "grad", "lone"};
	struct sto_range all = {INT64_MIN, INT64_MAX, false, 0, 0};
	for (int m = 0; m < 3; m++) {
		struct sto_series_view v;
		CHECK_EQ_INT(sto_view_series(s, series_id(s, "jt", 0, names[m]), &all, 100000, &v),
			     0);
		for (size_t i = 0; i < v.nchunks; i++)
			tail_cb(&t, &v.chunks[i]);
		sto_view_free(&v);
	}
	CHECK(t.chunks >= 3);
	CHECK_EQ_INT(t.checked, t.chunks * 5);
	rdb_buf_free(&t.rec);
	sto_close(s);
}

static void test_out_of_order(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 64);
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	/* second half first, then first half: reads come back sorted */
	struct mdl_batch *b;
	CHECK_EQ_INT(mdl_batch_new(10000, 10, &b), 0);
	for (int half = 1; half >= 0; half--) {
		for (int i = half * 150; i < (half + 1) * 150; i++)
			mdl_batch_add(b, "j", 1, 3, "m", 1, 1000 + i, i, 0,
				      rdb_f64_bits((double)i * 0.5));
		CHECK_EQ_INT(sto_write(s, b), 0);
		mdl_batch_reset(b);
		if (half == 1)
			CHECK_EQ_INT(sto_checkpoint(s), 0);
	}
	mdl_batch_free(b);
	check_series(s, "j", 3, "m", 1000, 300);
	sto_close(s);
}

/* A child writes, some of it size-sealed into uncheckpointed chunks, then
 * dies without closing. Every acknowledged point must come back once. */
static void test_crash_recovery(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 50);
	o.sync = STO_SYNC_FDATASYNC;
	pid_t pid = fork();
	if (pid == 0) {
		struct sto *s;
		if (sto_open(&o, &s))
			_exit(3);
		if (write_points(s, "crash", 0, "a", 0, 500, 7))
			_exit(4);
		if (sto_checkpoint(s))
			_exit(5);
		if (write_points(s, "crash", 1, "b", 0, 777, 13))
			_exit(6);
		/* give the flusher time to size-seal some of rank 1 */
		usleep(300 * 1000);
		_exit(0); /* no sto_close: like kill -9 */
	}
	int status = 0;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	check_series(s, "crash", 0, "a", 0, 500);
	check_series(s, "crash", 1, "b", 0, 777);
	sto_close(s);
	/* and again after a clean close */
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	check_series(s, "crash", 1, "b", 0, 777);
	sto_close(s);
}

static void test_lock_and_format(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 100);
	struct sto *s, *s2;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	CHECK_EQ_INT(sto_open(&o, &s2), -EBUSY); /* second opener refused */
	sto_close(s);
	char path[4300];
	snprintf(path, sizeof(path), "%s/FORMAT", dir);
	FILE *f = fopen(path, "w");
	fputs("rankdb data directory\nformat 99\n", f);
	fclose(f);
	CHECK_EQ_INT(sto_open(&o, &s2), RDB_EFORMAT);
}

/* Segments without an index: refuse, never start on an empty index. */
static void test_missing_index_refused(void)
{
	char dir[4200], cmd[4400];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 100);
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	CHECK_EQ_INT(write_points(s, "j", 0, "m", 0, 10, 10), 0);
	sto_close(s); /* seals into a segment */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s/index'", dir);
	CHECK_EQ_INT(system(cmd), 0);
	CHECK_EQ_INT(sto_open(&o, &s), -ENOENT);
}

static void test_special_values_and_series_limit(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 100);
	o.max_series = 3;
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	uint64_t vals[] = {MDL_VALUE_NULL_BITS,
			   MDL_VALUE_NAN_BITS,
			   0x7ff0000000000001ull,
			   rdb_f64_bits(-0.0),
			   rdb_f64_bits(INFINITY),
			   rdb_f64_bits(-INFINITY),
			   1};
	struct mdl_batch *b;
	CHECK_EQ_INT(mdl_batch_new(100, 10, &b), 0);
	for (int i = 0; i < 7; i++)
		mdl_batch_add(b, "v", 1, MDL_RANK_JOB, "x", 1, i, MDL_STEP_NONE, 2, vals[i]);
	CHECK_EQ_INT(sto_write(s, b), 0);
	CHECK_EQ_INT(sto_checkpoint(s), 0);
	struct sto_range all = {INT64_MIN, INT64_MAX, false, 0, 0};
	struct mdl_cols c = MDL_COLS_INIT;
	struct sto_read_error err;
	CHECK_EQ_INT(sto_read(s, series_id(s, "v", MDL_RANK_JOB, "x"), &all, 100, &c, &err), 0);
	CHECK_EQ_INT(c.n, 7);
	for (size_t i = 0; i < c.n; i++) {
		CHECK(c.value[i] == vals[i]);
		CHECK(c.step[i] == MDL_STEP_NONE);
		CHECK_EQ_INT(c.attempt[i], 2);
	}
	/* step range selects no step-less points */
	struct sto_range st = {INT64_MIN, INT64_MAX, true, 0, INT64_MAX};
	CHECK_EQ_INT(sto_read(s, series_id(s, "v", MDL_RANK_JOB, "x"), &st, 100, &c, &err), 0);
	CHECK_EQ_INT(c.n, 0);
	mdl_cols_free(&c);
	/* max_series = 3: two more series are fine, a fourth is refused whole */
	mdl_batch_reset(b);
	mdl_batch_add(b, "v", 1, 0, "y", 1, 1, 1, 0, 1);
	mdl_batch_add(b, "v", 1, 0, "z", 1, 1, 1, 0, 1);
	CHECK_EQ_INT(sto_write(s, b), 0);
	mdl_batch_reset(b);
	mdl_batch_add(b, "v", 1, 0, "w", 1, 1, 1, 0, 1);
	CHECK_EQ_INT(sto_write(s, b), RDB_ELIMIT);
	mdl_batch_free(b);
	sto_close(s);
}

static int add_log(struct mdl_events *ev, const char *job, uint32_t rank, int64_t ts, uint8_t level,
		   const char *msg, const char *fields)
{
	struct mdl_event e = {.kind = MDL_EV_LOG,
			      .level = level,
			      .rank = rank,
			      .ts_ns = ts,
			      .step = ts / 10,
			      .job = job,
			      .job_len = strlen(job),
			      .text = msg,
			      .text_len = strlen(msg),
			      .fields = fields,
			      .fields_len = strlen(fields)};
	return mdl_events_add(ev, &e);
}

struct ev_seen {
	int n;
	int64_t ts[64];
	char text[64][64];
};

static int ev_cb(void *arg, const struct mdl_event *e)
{
	struct ev_seen *v = arg;
	if (v->n < 64) {
		v->ts[v->n] = e->ts_ns;
		snprintf(v->text[v->n], sizeof(v->text[0]), "%.*s", (int)e->text_len, e->text);
	}
	v->n++;
	return 0;
}

static int count_events(struct sto *s, const char *job, const char *text, uint8_t min_level,
			struct ev_seen *v)
{
	struct sto_ev_filter f = {.job = job,
				  .kinds = 1u << MDL_EV_LOG,
				  .min_level = min_level,
				  .from_ns = INT64_MIN,
				  .to_ns = INT64_MAX,
				  .text = text,
				  .attempt = -1};
	struct sto_read_error err;
	memset(v, 0, sizeof(*v));
	int rc = sto_events_read(s, &f, 1000, ev_cb, v, &err);
	return rc ? -1 : v->n;
}

/* Logs: stored in the head and in event chunks, filtered by level, text
 * (token filter) and fields, newest first; kept across restarts and a
 * crash; batch ids make a retried batch a no-op, across restarts. */
static void test_events_and_batch_ids(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 100);
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	struct mdl_events *ev;
	CHECK_EQ_INT(mdl_events_new(100, 1 << 20, &ev), 0);
	add_log(ev, "jl", 0, 100, MDL_LEVEL_INFO, "loading shard 7", "{\"shard\":7}");
	add_log(ev, "jl", 3, 300, MDL_LEVEL_ERROR, "NCCL timeout in allreduce", "{\"op\":\"ar\"}");
	add_log(ev, "jl", 1, 200, MDL_LEVEL_WARN, "slow dataloader", "{}");
	struct sto_write_req req = {.events = ev, .batch_id = "b-1", .batch_id_len = 3};
	struct sto_write_result res;
	CHECK_EQ_INT(sto_write_req(s, &req, &res), 0);
	CHECK(!res.duplicate);
	CHECK_EQ_INT(sto_write_req(s, &req, &res), 0); /* a retry */
	CHECK(res.duplicate);
	struct ev_seen v;
	CHECK_EQ_INT(count_events(s, "jl", NULL, 0, &v), 3);
	CHECK_EQ_INT(v.ts[0], 300); /* newest first */
	CHECK_EQ_INT(v.ts[2], 100);
	CHECK_EQ_INT(sto_checkpoint(s), 0); /* into event chunks */
	CHECK_EQ_INT(count_events(s, "jl", NULL, 0, &v), 3);
	CHECK_EQ_INT(count_events(s, "jl", "nccl TIMEOUT", 0, &v), 1);
	CHECK(strcmp(v.text[0], "NCCL timeout in allreduce") == 0);
	CHECK_EQ_INT(count_events(s, "jl", "timeo", 0, &v), 0); /* whole words only */
	CHECK_EQ_INT(count_events(s, "jl", NULL, MDL_LEVEL_WARN, &v), 2);
	CHECK_EQ_INT(count_events(s, "jl", "7", 0, &v), 1); /* field values are words too */
	CHECK_EQ_INT(count_events(s, "other", NULL, 0, &v), 0);
	struct sto_ev_filter f = {.job = "jl",
				  .kinds = 1u << MDL_EV_LOG,
				  .from_ns = INT64_MIN,
				  .to_ns = INT64_MAX,
				  .attempt = -1};
	const char *keys[] = {"op"}, *vals[] = {"ar"};
	f.field_keys = keys;
	f.field_vals = vals;
	f.nfields = 1;
	struct sto_read_error err;
	memset(&v, 0, sizeof(v));
	CHECK_EQ_INT(sto_events_read(s, &f, 1000, ev_cb, &v, &err), 0);
	CHECK_EQ_INT(v.n, 1);
	CHECK_EQ_INT(sto_events_read(s, &f, 0, ev_cb, &v, &err), RDB_ELIMIT);
	CHECK_EQ_INT(sto_write_req(s, &req, &res), 0); /* the id is in the index now */
	CHECK(res.duplicate);
	sto_close(s);

	/* a child writes a new batch and dies before any checkpoint */
	pid_t pid = fork();
	if (pid == 0) {
		if (sto_open(&o, &s))
			_exit(3);
		mdl_events_reset(ev);
		add_log(ev, "jl", 2, 400, MDL_LEVEL_FATAL, "rank 2 died", "{}");
		struct sto_write_req r2 = {.events = ev, .batch_id = "b-2", .batch_id_len = 3};
		struct sto_write_result res2;
		_exit(sto_write_req(s, &r2, &res2) == 0 && !res2.duplicate ? 0 : 4);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	CHECK_EQ_INT(count_events(s, "jl", NULL, 0, &v), 4);
	CHECK_EQ_INT(v.ts[0], 400);
	mdl_events_reset(ev);
	add_log(ev, "jl", 2, 400, MDL_LEVEL_FATAL, "rank 2 died", "{}");
	struct sto_write_req r3 = {.events = ev, .batch_id = "b-2", .batch_id_len = 3};
	CHECK_EQ_INT(sto_write_req(s, &r3, &res), 0);
	CHECK(res.duplicate); /* replayed from the WAL: still known */
	CHECK_EQ_INT(count_events(s, "jl", NULL, 0, &v), 4);
	mdl_events_free(ev);
	sto_close(s);
}

/* XORs mask into byte `at` of every copy of pat in the file; returns copies. */
static int flip_in_file(const char *path, const uint8_t *pat, size_t plen, size_t at, uint8_t mask)
{
	FILE *f = fopen(path, "r+b");
	int copies = 0;
	CHECK(f != NULL);
	if (!f)
		return 0;
	fseek(f, 0, SEEK_END);
	long size = ftell(f);
	uint8_t *buf = malloc((size_t)size);
	fseek(f, 0, SEEK_SET);
	CHECK_EQ_INT(fread(buf, 1, (size_t)size, f), size);
	for (long i = 0; i + (long)plen <= size; i++)
		if (memcmp(buf + i, pat, plen) == 0) {
			buf[i + (long)at] ^= mask;
			copies++;
		}
	fseek(f, 0, SEEK_SET);
	CHECK_EQ_INT(fwrite(buf, 1, (size_t)size, f), size);
	fclose(f);
	free(buf);
	return copies;
}

/* Recovery never acts on a damaged index entry it reads. (a) A batch_ids
 * entry of a batch id the WAL replays: "stored" or "not stored" would both
 * be guesses (apply it twice, or drop it), so the start fails. (b) An
 * events entry named by an evpending entry of an uncheckpointed generation:
 * deleting it unread would leave its record out of the recovery rewrite
 * (recovery_seg), so the start fails. Both after a clean start of the same
 * directory before the damage. */
static void test_recovery_refuses_damaged_entries(void)
{
	char dir[4200], ixdir[4300], mdb[4400];
	struct sto_options o;
	struct sto *s;
	struct sto_index *ix;
	struct sto_txn *t;
	uint8_t pat[8];
	for (int part = 0; part < 2; part++) {
		new_dir(dir, sizeof(dir));
		snprintf(ixdir, sizeof(ixdir), "%s/index", dir);
		snprintf(mdb, sizeof(mdb), "%s/index/data.mdb", dir);
		opts(&o, dir, 100);
		CHECK_EQ_INT(sto_open(&o, &s), 0);
		sto_close(s);
		if (part == 0) { /* a child writes batch b-9 and dies: it is in the WAL */
			pid_t pid = fork();
			if (pid == 0) {
				struct mdl_events *ev;
				if (sto_open(&o, &s) || mdl_events_new(100, 1 << 20, &ev))
					_exit(3);
				add_log(ev, "jb", 0, 100, MDL_LEVEL_INFO, "once", "{}");
				struct sto_write_req r = {
				    .events = ev, .batch_id = "b-9", .batch_id_len = 3};
				struct sto_write_result res;
				_exit(sto_write_req(s, &r, &res) == 0 ? 0 : 4);
			}
			int status = 0;
			waitpid(pid, &status, 0);
			CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		}
		CHECK_EQ_INT(sto_index_open(ixdir, 64ull << 20, &ix), 0);
		CHECK_EQ_INT(sto_txn_begin(ix, true, &t), 0);
		rdb_put_le64(pat, 0x1122334455667788ull);
		if (part == 0) {
			CHECK_EQ_INT(sto_batchid_put(t, "b-9", 3, 0x1122334455667788ull), 0);
		} else {
			uint64_t ckpt = 0;
			uint8_t val[STO_EVENTRY_FIXED + 64];
			memset(val, 0, sizeof(val));
			val[0] = 2;
			rdb_put_le64(val + 8, 0x1122334455667788ull); /* segment id */
			rdb_put_le32(val + 36, 9);
			CHECK_EQ_INT(sto_meta_get(t, "ckpt_gen", &ckpt), 0);
			CHECK_EQ_INT(sto_evidx_put(t, "je", 50, 77, val, sizeof(val)), 0);
			CHECK_EQ_INT(sto_evpending_add(t, ckpt + 1, "je", 50, 77), 0);
		}
		CHECK_EQ_INT(sto_txn_commit(t), 0);
		sto_index_close(ix);
		CHECK(flip_in_file(mdb, pat, sizeof(pat), 2, 0x01) >= 1);
		CHECK_EQ_INT(sto_open(&o, &s), RDB_ECORRUPT);
	}
}

/* An events entry whose checksum holds but which does not decode (written
 * so by a bug, not by damage) is a problem that verify names by its chunk
 * and job, without a segment and offset it never decoded. */
static void keep_msg(void *arg, const char *msg)
{
	char *out = arg;
	size_t n = strlen(out);
	snprintf(out + n, 4096 - n, "%s\n", msg);
}

static void test_verify_names_undecodable_event_entry(void)
{
	char dir[4200], ixdir[4300], msgs[4096] = "";
	struct sto_options o;
	struct sto *s;
	struct sto_index *ix;
	struct sto_txn *t;
	struct sto_verify_report rep;
	uint8_t val[STO_EVENTRY_FIXED];
	new_dir(dir, sizeof(dir));
	snprintf(ixdir, sizeof(ixdir), "%s/index", dir);
	opts(&o, dir, 100);
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	sto_close(s);
	memset(val, 0x77, sizeof(val));
	val[0] = 2; /* log2(bloom bits) 0x77777777: no such filter */
	CHECK_EQ_INT(sto_index_open(ixdir, 64ull << 20, &ix), 0);
	CHECK_EQ_INT(sto_txn_begin(ix, true, &t), 0);
	CHECK_EQ_INT(sto_evidx_put(t, "jd", 5, 6, val, sizeof(val)), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	sto_index_close(ix);
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	CHECK_EQ_INT(sto_verify(s, false, keep_msg, msgs, &rep), 0);
	CHECK(rep.problems >= 1);
	CHECK(strstr(msgs, "index entry of event chunk 6 of job jd does not decode") != NULL);
	CHECK(strstr(msgs, "segment") == NULL);
	sto_close(s);
}

/* max_series_per_job bounds each job on its own; the count survives a
 * reopen (it is taken from the index). */
static void test_series_per_job_limit(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 100);
	o.max_series_per_job = 2;
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	struct mdl_batch *b;
	CHECK_EQ_INT(mdl_batch_new(100, 10, &b), 0);
	mdl_batch_add(b, "a", 1, 0, "x", 1, 1, 1, 0, 1);
	mdl_batch_add(b, "a", 1, 0, "y", 1, 1, 1, 0, 1);
	CHECK_EQ_INT(sto_write(s, b), 0);
	mdl_batch_reset(b);
	mdl_batch_add(b, "b", 1, 0, "x", 1, 1, 1, 0, 1); /* another job: fine */
	mdl_batch_add(b, "a", 1, 0, "x", 1, 2, 2, 0, 1); /* existing series: fine */
	CHECK_EQ_INT(sto_write(s, b), 0);
	mdl_batch_reset(b);
	mdl_batch_add(b, "b", 1, 0, "y", 1, 1, 1, 0, 1);
	mdl_batch_add(b, "a", 1, 1, "x", 1, 1, 1, 0, 1); /* a third series of a */
	CHECK_EQ_INT(sto_write(s, b), RDB_ELIMIT);	 /* refused whole */
	sto_close(s);
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	CHECK_EQ_INT(sto_write(s, b), RDB_ELIMIT);
	CHECK(series_id(s, "b", 0, "y") == 0);
	mdl_batch_reset(b);
	mdl_batch_add(b, "b", 1, 0, "y", 1, 1, 1, 0, 1);
	CHECK_EQ_INT(sto_write(s, b), 0);
	mdl_batch_free(b);
	sto_close(s);
}

/* Writes points from..to-1 of series (sup, 0, metric) as chunks of `per`
 * points (a checkpoint after each), ts 1000 + i as check_series wants. */
static int write_tiny_chunks(struct sto *s, const char *metric, size_t from, size_t n, size_t per)
{
	int rc = 0;
	for (size_t i = from; rc == 0 && i < n; i += per) {
		struct mdl_batch *b;
		rc = mdl_batch_new(1 << 20, 1024, &b);
		for (size_t k = i; rc == 0 && k < i + per && k < n; k++)
			rc =
			    mdl_batch_add(b, "sup", 3, 0, metric, strlen(metric), 1000 + (int64_t)k,
					  (int64_t)k, 0, rdb_f64_bits((double)k * 0.5));
		if (rc == 0)
			rc = sto_write(s, b);
		mdl_batch_free(b);
		if (rc == 0)
			rc = sto_checkpoint(s);
	}
	return rc;
}

/* A merge leaves its source records in their segment: rebuild-index must
 * leave them out (supersede records), also after a second merge of the
 * merged chunk and after the merge segment was rewritten alone. */
static void test_merge_then_rebuild(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 40);
	struct sto *s;
	struct sto_compact_result cr;
	struct sto_rebuild_result rr;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	CHECK_EQ_INT(write_tiny_chunks(s, "a", 0, 24, 3), 0); /* 8 chunks of 3 */
	CHECK_EQ_INT(sto_compact(s, 0.0, &cr), 0);	      /* merge only */
	CHECK_EQ_INT(cr.merged_from, 8);
	CHECK_EQ_INT(cr.merged_into, 1);
	CHECK_EQ_INT(cr.segments, 0);
	check_series(s, "sup", 0, "a", 1000, 24);
	sto_close(s);
	CHECK_EQ_INT(sto_rebuild_index(dir, o.index_map_bytes, NULL, NULL, &rr), 0);
	CHECK_EQ_INT(rr.skipped_superseded, 8);
	CHECK_EQ_INT(rr.supersede_records, 1);
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	check_series(s, "sup", 0, "a", 1000, 24);

	/* Chained merges: a merged chunk of 6 points (small: < 40 / 4) is
	 * merged again with two newer chunks; its entry is absorbed. */
	CHECK_EQ_INT(write_tiny_chunks(s, "b", 0, 6, 3), 0);
	CHECK_EQ_INT(sto_compact(s, 0.0, &cr), 0);
	CHECK_EQ_INT(cr.merged_from, 2);
	CHECK_EQ_INT(write_tiny_chunks(s, "b", 6, 12, 3), 0);
	CHECK_EQ_INT(sto_compact(s, 0.0, &cr), 0);
	CHECK_EQ_INT(cr.merged_from, 3);
	check_series(s, "sup", 0, "b", 1000, 12);
	sto_close(s);
	CHECK_EQ_INT(sto_rebuild_index(dir, o.index_map_bytes, NULL, NULL, &rr), 0);
	CHECK_EQ_INT(rr.supersede_records, 3); /* a, b (absorbed, still on disk), b again */
	CHECK_EQ_INT(rr.skipped_superseded, 8 + 5);
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	check_series(s, "sup", 0, "a", 1000, 24);
	check_series(s, "sup", 0, "b", 1000, 12);

	/* Everything rewritten: sources gone, supersede records dropped. */
	CHECK_EQ_INT(sto_compact(s, 1.0, &cr), 0);
	CHECK(cr.segments >= 1);
	sto_close(s);
	CHECK_EQ_INT(sto_rebuild_index(dir, o.index_map_bytes, NULL, NULL, &rr), 0);
	CHECK_EQ_INT(rr.skipped_superseded, 0);
	CHECK_EQ_INT(rr.supersede_records, 0);
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	check_series(s, "sup", 0, "a", 1000, 24);
	check_series(s, "sup", 0, "b", 1000, 12);
	sto_close(s);
}

/* Supersede record framing: round trip, every byte checksummed, shape
 * rules on both sides. */
static void test_supersede_record(void)
{
	struct sto_sup_src src[3] = {{5, -7}, {9, 100}, {12, INT64_MAX}};
	struct sto_sup sup = {.series_id = 3,
			      .merged_uid = 20,
			      .merged_min_ts_ns = -7,
			      .gen = 4,
			      .nsrc = 3,
			      .src = src};
	struct rdb_buf b;
	rdb_buf_init(&b, 1 << 20);
	CHECK_EQ_INT(sto_sup_frame(&b, &sup), 0);
	CHECK_EQ_INT(b.len, 48 + 8 + 3 * 16);
	CHECK_EQ_INT(rdb_get_le32(b.data), 0x31505553);
	struct sto_sup got = {0};
	const char *why = NULL;
	CHECK_EQ_INT(sto_sup_parse(b.data, b.len, &got, &why), 0);
	CHECK(got.series_id == 3 && got.merged_uid == 20 && got.merged_min_ts_ns == -7 &&
	      got.gen == 4 && got.nsrc == 3);
	CHECK(got.src && memcmp(got.src, src, sizeof(src)) == 0);
	free(got.src);
	size_t bad = 0;
	for (size_t i = 0; i < b.len; i++) {
		b.data[i] ^= 0x10;
		struct sto_sup x = {0};
		int rc = sto_sup_parse(b.data, b.len, &x, &why);
		bad += rc != RDB_ECORRUPT || x.src != NULL;
		b.data[i] ^= 0x10;
	}
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(sto_sup_parse(b.data, b.len - 1, &got, &why), RDB_ECORRUPT);
	src[1].uid = 5; /* not ascending */
	CHECK_EQ_INT(sto_sup_frame(&b, &sup), RDB_EINVAL);
	src[1].uid = 25; /* above the merged uid */
	CHECK_EQ_INT(sto_sup_frame(&b, &sup), RDB_EINVAL);
	src[1].uid = 9;
	sup.nsrc = 1;
	CHECK_EQ_INT(sto_sup_frame(&b, &sup), RDB_EINVAL);
	rdb_buf_free(&b);
}

/* A query's view taken before a compaction that merges its chunks and
 * rewrites their segment still reads every chunk afterwards: the old file
 * stays for the grace (STI_TRASH_GRACE_NS), the merged-away chunks are
 * read from it. */
static void test_view_survives_merge(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 40);
	struct sto *s;
	struct sto_compact_result cr;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	CHECK_EQ_INT(write_tiny_chunks(s, "v", 0, 24, 3), 0); /* 8 chunks of 3 */
	uint64_t id = series_id(s, "sup", 0, "v");
	struct sto_range r = {INT64_MIN, INT64_MAX, false, 0, 0};
	struct sto_series_view v = {0};
	CHECK_EQ_INT(sto_view_series(s, id, &r, 1000, &v), 0);
	CHECK_EQ_INT(v.nchunks, 8);
	CHECK_EQ_INT(sto_compact(s, 1.0, &cr), 0); /* merge, then rewrite every segment */
	CHECK(cr.merged_from == 8 && cr.segments >= 1);
	struct rdb_buf rec;
	struct mdl_cols c = MDL_COLS_INIT;
	struct sto_read_error err;
	size_t points = 0;
	rdb_buf_init(&rec, 1u << 24);
	for (size_t i = 0; i < v.nchunks; i++) {
		int rc = sto_read_chunk(s, &v.chunks[i], &rec, &c, &err);
		CHECK_EQ_INT(rc, 0);
		points += rc == 0 ? c.n : 0;
	}
	CHECK_EQ_INT(points, 24);
	rdb_buf_free(&rec);
	mdl_cols_free(&c);
	sto_view_free(&v);
	check_series(s, "sup", 0, "v", 1000, 24);
	sto_close(s);
}

/* Points of the series in timestamp order: n of them with ts t0 + i. */
static void check_times(struct sto *s, const char *job, uint32_t rank, const char *metric,
			int64_t t0, size_t n)
{
	struct sto_range r = {INT64_MIN, INT64_MAX, false, 0, 0};
	struct mdl_cols c = MDL_COLS_INIT;
	struct sto_read_error err;
	CHECK_EQ_INT(sto_read(s, series_id(s, job, rank, metric), &r, 10000000, &c, &err), 0);
	CHECK_EQ_INT(c.n, n);
	size_t bad = 0;
	for (size_t i = 0; i < c.n && i < n; i++)
		bad += c.ts_ns[i] != t0 + (int64_t)i;
	CHECK_EQ_INT(bad, 0);
	mdl_cols_free(&c);
}

/* A write that fails is never half-stored: a refused write is not in the
 * WAL either, so a client that retries it WITHOUT a batch id stores it
 * exactly once, before and after a restart (issue: "failed after WAL"). The
 * head apply cannot fail once the WAL append succeeded: its room is made
 * before the append. */
static void test_failed_write_retry_is_exactly_once(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 1000);
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	CHECK_EQ_INT(write_points(s, "j1", 0, "loss", 1000, 10, 10), 0);
	/* memory runs out while making room: nothing appended, error returned */
	sto_fault_set(STO_FP_PREPARE, ENOMEM, 1, false);
	CHECK_EQ_INT(write_points(s, "j1", 0, "loss", 1010, 10, 10), -ENOMEM);
	/* the WAL append fails after the room was made: released, error */
	sto_fault_set(STO_FP_WAL_APPEND, EIO, 1, false);
	CHECK_EQ_INT(write_points(s, "j1", 0, "loss", 1010, 10, 10), -EIO);
	/* the client retries without a batch id */
	CHECK_EQ_INT(write_points(s, "j1", 0, "loss", 1010, 10, 10), 0);
	check_times(s, "j1", 0, "loss", 1000, 20);
	struct sto_stats st;
	sto_get_stats(s, &st);
	CHECK_EQ_INT(st.head_points, 20);
	CHECK_EQ_INT(st.points_written, 20);
	/* a crash: the WAL replays exactly what was acknowledged */
	sto_close(s);
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	check_times(s, "j1", 0, "loss", 1000, 20);
	sto_close(s);
}

/* sto_write_submit: completions fire once each, after which the points
 * are readable; checkpoints (WAL rotations) run while writes are pending
 * and lose none; an injected WAL failure reaches the completion and
 * stores nothing; a duplicate batch id is answered at once. */
struct sub_done {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int calls, errors, last_rc;
};

static void sub_cb(void *arg, int rc)
{
	struct sub_done *d = arg;
	pthread_mutex_lock(&d->mu);
	d->calls++;
	d->errors += rc != 0;
	d->last_rc = rc;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
}

static void sub_wait(struct sub_done *d, int calls)
{
	pthread_mutex_lock(&d->mu);
	while (d->calls < calls)
		pthread_cond_wait(&d->cv, &d->mu);
	pthread_mutex_unlock(&d->mu);
}

static void test_async_submit(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 1000);
	o.sync = STO_SYNC_FDATASYNC;
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	enum { N = 300 };
	struct mdl_batch *b[N];
	struct sub_done d = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
	int pending = 0;
	for (int i = 0; i < N; i++) {
		CHECK_EQ_INT(mdl_batch_new(16, 16, &b[i]), 0);
		CHECK_EQ_INT(mdl_batch_add(b[i], "ja", 2, 0, "loss", 4, 5000 + i, i, 0,
					   rdb_f64_bits(i * 0.25)),
			     0);
		struct sto_write_req req = {.points = b[i]};
		struct sto_write_result res;
		int rc = sto_write_submit(s, &req, &res, sub_cb, &d);
		CHECK(rc == STO_PENDING);
		pending += rc == STO_PENDING;
		if (i % 100 == 50)
			CHECK_EQ_INT(sto_checkpoint(s), 0); /* waits for the pending ones */
	}
	sub_wait(&d, pending);
	CHECK_EQ_INT(d.errors, 0);
	check_times(s, "ja", 0, "loss", 5000, N);
	/* an injected WAL failure: the completion gets it, nothing is stored */
	sto_fault_set(STO_FP_WAL_APPEND, EIO, 1, false);
	struct mdl_batch *extra;
	CHECK_EQ_INT(mdl_batch_new(16, 16, &extra), 0);
	CHECK_EQ_INT(mdl_batch_add(extra, "ja", 2, 0, "loss", 4, 5000 + N, N, 0, 0), 0);
	struct sto_write_req req = {.points = extra, .batch_id = "b-1", .batch_id_len = 3};
	struct sto_write_result res;
	CHECK_EQ_INT(sto_write_submit(s, &req, &res, sub_cb, &d), STO_PENDING);
	sub_wait(&d, pending + 1);
	CHECK_EQ_INT(d.last_rc, -EIO);
	check_times(s, "ja", 0, "loss", 5000, N);
	/* the retry with the same batch id stores it; a second one is a duplicate */
	CHECK_EQ_INT(sto_write_submit(s, &req, &res, sub_cb, &d), STO_PENDING);
	sub_wait(&d, pending + 2);
	CHECK_EQ_INT(d.last_rc, 0);
	CHECK_EQ_INT(sto_write_submit(s, &req, &res, sub_cb, &d), 0);
	CHECK(res.duplicate);
	check_times(s, "ja", 0, "loss", 5000, N + 1);
	sto_close(s);
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	check_times(s, "ja", 0, "loss", 5000, N + 1);
	sto_close(s);
	for (int i = 0; i < N; i++)
		mdl_batch_free(b[i]);
	mdl_batch_free(extra);
}

/* A group of completed writes is applied to the head in slices of 64, with
 * head_lock dropped between slices: the hook runs there and reads the
 * series (which takes head_lock; it would deadlock on the WAL thread if the
 * lock were still held) and sees a prefix of the group, every write of which
 * is visible while none of the group's completions has run yet. The first
 * group is held in the hook until every other write is queued, so the
 * second group holds them all. */
struct slice_obs {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool release;
	int calls;
	size_t max_slice;
	int bad;	    /* a read between slices that saw the wrong prefix */
	struct sub_done *d; /* completions so far */
	uint64_t sid;	    /* the series read */
	size_t at_slice0;   /* points visible at the group's slice 0 */
	int acks_at_slice0; /* completions at the group's slice 0 */
};

static void slice_hook(void *arg, struct sto *s, size_t slice)
{
	struct slice_obs *o = arg;
	struct sto_range r = {INT64_MIN, INT64_MAX, false, 0, 0};
	struct mdl_cols c = MDL_COLS_INIT;
	struct sto_read_error err;
	int rc = sto_read(s, o->sid, &r, 10000000, &c, &err);
	pthread_mutex_lock(&o->d->mu);
	int acks = o->d->calls;
	pthread_mutex_unlock(&o->d->mu);
	pthread_mutex_lock(&o->mu);
	if (o->calls++ == 0) /* the first group: wait for the test to queue the rest */
		while (!o->release)
			pthread_cond_wait(&o->cv, &o->mu);
	if (slice > o->max_slice)
		o->max_slice = slice;
	if (rc != 0) {
		o->bad++;
	} else if (slice == 0) {
		o->at_slice0 = c.n;
		o->acks_at_slice0 = acks;
	} else if (c.n != o->at_slice0 + 64 * slice || acks != o->acks_at_slice0) {
		o->bad++;
	}
	pthread_mutex_unlock(&o->mu);
	mdl_cols_free(&c);
}

static void test_async_apply_slices(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 1000);
	o.sync = STO_SYNC_FDATASYNC;
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	enum { N = 300 };
	struct mdl_batch *b[N];
	struct sub_done d = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
	struct slice_obs obs = {
	    .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .d = &d};
	/* the series exists before the hook reads it */
	CHECK_EQ_INT(write_points(s, "js", 0, "loss", 999, 1, 1), 0);
	obs.sid = series_id(s, "js", 0, "loss");
	sto_test_set_apply_hook(slice_hook, &obs);
	for (int i = 0; i < N; i++) {
		CHECK_EQ_INT(mdl_batch_new(16, 16, &b[i]), 0);
		CHECK_EQ_INT(mdl_batch_add(b[i], "js", 2, 0, "loss", 4, 1000 + i, i, 0,
					   rdb_f64_bits(i * 0.5)),
			     0);
		struct sto_write_req req = {.points = b[i]};
		struct sto_write_result res;
		CHECK_EQ_INT(sto_write_submit(s, &req, &res, sub_cb, &d), STO_PENDING);
	}
	pthread_mutex_lock(&obs.mu);
	obs.release = true;
	pthread_cond_broadcast(&obs.cv);
	pthread_mutex_unlock(&obs.mu);
	sub_wait(&d, N);
	sto_test_set_apply_hook(NULL, NULL);
	CHECK_EQ_INT(d.errors, 0);
	CHECK_EQ_INT(obs.bad, 0);
	CHECK(obs.max_slice >= 2); /* the second group held >= 129 writes */
	check_times(s, "js", 0, "loss", 999, N + 1);
	sto_close(s);
	for (int i = 0; i < N; i++)
		mdl_batch_free(b[i]);
}

/* Series created by concurrent writers are group-committed; a writer
 * refused by max_series never leaves a series behind, whatever else was in
 * its group, and every accepted writer's series all exist. */
struct creator {
	struct sto *s;
	uint32_t rank;
	int rc;
};

static void *creator_main(void *arg)
{
	struct creator *c = arg;
	struct mdl_batch *b;
	c->rc = mdl_batch_new(64, 64, &b);
	for (int m = 0; c->rc == 0 && m < 8; m++) {
		char name[8];
		snprintf(name, sizeof(name), "m%d", m);
		c->rc = mdl_batch_add(b, "cj", 2, c->rank, name, strlen(name), 1000, 0, 0, 0);
	}
	if (c->rc == 0)
		c->rc = sto_write(c->s, b);
	mdl_batch_free(b);
	return NULL;
}

static void test_concurrent_series_creation(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 1000);
	o.sync = STO_SYNC_FDATASYNC;
	o.max_series = 60; /* room for 7 writers of 8 series */
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	enum { W = 16 };
	struct creator c[W];
	pthread_t th[W];
	for (int i = 0; i < W; i++) {
		c[i] = (struct creator){.s = s, .rank = (uint32_t)i};
		CHECK_EQ_INT(pthread_create(&th[i], NULL, creator_main, &c[i]), 0);
	}
	int ok = 0, bad = 0;
	for (int i = 0; i < W; i++) {
		pthread_join(th[i], NULL);
		CHECK(c[i].rc == 0 || c[i].rc == RDB_ELIMIT);
		ok += c[i].rc == 0;
		int found = 0;
		for (int m = 0; m < 8; m++) {
			struct mdl_series_key k = {.rank = (uint32_t)i};
			snprintf(k.job, sizeof(k.job), "cj");
			snprintf(k.metric, sizeof(k.metric), "m%d", m);
			uint64_t id;
			found += sto_lookup_series(s, &k, &id) == 0;
		}
		bad += found != (c[i].rc == 0 ? 8 : 0);
	}
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(ok, 7);
	sto_close(s);
}

/* sto_write_submit with new series: the series are created off the
 * submitting thread (the creator), in one group for the writes queued
 * together; a write refused by max_series hears RDB_ELIMIT through its
 * completion and leaves no series behind; every accepted write is readable
 * and survives a reopen; close waits for the queued writes' completions. */
static void test_async_submit_new_series(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 1000);
	o.sync = STO_SYNC_FDATASYNC;
	o.max_series = 200; /* room for 50 writers of 4 series */
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	enum { W = 64 };
	struct mdl_batch *b[W];
	struct sub_done d[W];
	for (int i = 0; i < W; i++) {
		d[i] = (struct sub_done){.mu = PTHREAD_MUTEX_INITIALIZER,
					 .cv = PTHREAD_COND_INITIALIZER};
		CHECK_EQ_INT(mdl_batch_new(16, 16, &b[i]), 0);
		for (int m = 0; m < 4; m++) {
			char name[8];
			snprintf(name, sizeof(name), "m%d", m);
			CHECK_EQ_INT(mdl_batch_add(b[i], "nj", 2, (uint32_t)i, name, strlen(name),
						   7000 + i, i, 0, rdb_f64_bits(m)),
				     0);
		}
		struct sto_write_req req = {.points = b[i]};
		struct sto_write_result res;
		CHECK_EQ_INT(sto_write_submit(s, &req, &res, sub_cb, &d[i]), STO_PENDING);
	}
	int ok = 0, bad = 0;
	for (int i = 0; i < W; i++) {
		sub_wait(&d[i], 1);
		CHECK(d[i].last_rc == 0 || d[i].last_rc == RDB_ELIMIT);
		ok += d[i].last_rc == 0;
		int found = 0;
		for (int m = 0; m < 4; m++) {
			struct mdl_series_key k = {.rank = (uint32_t)i};
			snprintf(k.job, sizeof(k.job), "nj");
			snprintf(k.metric, sizeof(k.metric), "m%d", m);
			uint64_t id;
			found += sto_lookup_series(s, &k, &id) == 0;
		}
		bad += found != (d[i].last_rc == 0 ? 4 : 0);
		if (d[i].last_rc == 0)
			check_times(s, "nj", (uint32_t)i, "m0", 7000 + i, 1);
	}
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(ok, 50);
	/* writes still waiting for their series when the store closes: every
	 * completion has run when sto_close returns */
	struct sub_done late = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
	struct mdl_batch *lb[8];
	o.max_series = 1000;
	sto_close(s);
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	for (int i = 0; i < 8; i++) {
		CHECK_EQ_INT(mdl_batch_new(16, 16, &lb[i]), 0);
		CHECK_EQ_INT(mdl_batch_add(lb[i], "late", 4, (uint32_t)i, "x", 1, 100, 1, 0, 0), 0);
		struct sto_write_req req = {.points = lb[i]};
		struct sto_write_result res;
		CHECK_EQ_INT(sto_write_submit(s, &req, &res, sub_cb, &late), STO_PENDING);
	}
	sto_close(s);
	CHECK_EQ_INT(late.calls, 8);
	CHECK_EQ_INT(late.errors, 0);
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	for (int i = 0; i < W; i++)
		if (d[i].last_rc == 0)
			check_times(s, "nj", (uint32_t)i, "m3", 7000 + i, 1);
	for (int i = 0; i < 8; i++)
		check_times(s, "late", (uint32_t)i, "x", 100, 1);
	sto_close(s);
	for (int i = 0; i < W; i++)
		mdl_batch_free(b[i]);
	for (int i = 0; i < 8; i++)
		mdl_batch_free(lb[i]);
}

/* The compaction that merges small chunks frees index pages; with the
 * lifecycle thresholds met it rewrites index/data.mdb smaller (the hook in
 * lifecycle/compact.c), and every point stays readable, also after a
 * forced index compaction and a reopen. */
static void test_index_compact_after_merge(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 40);
	struct sto *s;
	struct sto_compact_result cr;
	struct sto_index_compact_result ir;
	struct sto_lifecycle l;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	sto_lifecycle_default(&l);
	l.index_compact_free_ratio = 0.25;
	l.index_compact_min_bytes = 0;
	sto_set_lifecycle(s, &l);
	static const char *const metrics[] = {"a", "b", "c", "d", "e", "f", "g", "h"};
	for (size_t m = 0; m < 8; m++)
		CHECK_EQ_INT(write_tiny_chunks(s, metrics[m], 0, 36, 3), 0); /* 12 chunks each */
	CHECK_EQ_INT(sto_compact(s, 0.0, &cr), 0);
	CHECK_EQ_INT(cr.merged_from, 8 * 12);
	CHECK(cr.index_bytes_before > 0);
	CHECK(cr.index_bytes_after < cr.index_bytes_before);
	for (size_t m = 0; m < 8; m++)
		check_series(s, "sup", 0, metrics[m], 1000, 36);
	CHECK_EQ_INT(sto_compact_index(s, true, &ir), 0);
	CHECK(ir.swapped);
	CHECK_EQ_INT(write_tiny_chunks(s, "a", 36, 39, 3), 0);
	sto_close(s);
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	check_series(s, "sup", 0, "a", 1000, 39);
	for (size_t m = 1; m < 8; m++)
		check_series(s, "sup", 0, metrics[m], 1000, 36);
	sto_close(s);
}

static uint64_t index_entries(struct sto *s, const char *db)
{
	struct sto_index_stat st;
	CHECK_EQ_INT(sto_index_info(s, &st), 0);
	for (unsigned i = 0; i < st.ndb; i++)
		if (strcmp(st.db[i].name, db) == 0)
			return st.db[i].entries;
	CHECK(!"database not found");
	return 0;
}

/* A merge at the default min_live leaves its output segment fully live (it
 * is never rewritten) while the sources' segments are compacted away: the
 * supersede entries have nothing left to protect and are trimmed; the
 * points read the same, also from a rebuilt index. */
static void test_supersede_entries_trimmed(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 40);
	struct sto *s;
	struct sto_compact_result cr;
	struct sto_rebuild_result rr;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	CHECK_EQ_INT(write_tiny_chunks(s, "a", 0, 24, 3), 0);
	CHECK_EQ_INT(write_tiny_chunks(s, "b", 0, 24, 3), 0);
	CHECK_EQ_INT(sto_compact(s, 0.0, &cr), 0); /* merge only: sources stay */
	CHECK_EQ_INT(cr.merged_into, 2);
	CHECK_EQ_INT(index_entries(s, "supersede"), 2);
	CHECK_EQ_INT(sto_compact(s, 0.5, &cr), 0); /* the sources' segments go */
	CHECK(cr.segments >= 1);
	CHECK_EQ_INT(index_entries(s, "supersede"), 0);
	check_series(s, "sup", 0, "a", 1000, 24);
	check_series(s, "sup", 0, "b", 1000, 24);
	sto_close(s);
	CHECK_EQ_INT(sto_rebuild_index(dir, o.index_map_bytes, NULL, NULL, &rr), 0);
	CHECK_EQ_INT(rr.skipped_superseded, 0);
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	check_series(s, "sup", 0, "a", 1000, 24);
	check_series(s, "sup", 0, "b", 1000, 24);
	sto_close(s);
}

/* Series keys that hold the same bytes split differently, or one a
 * prefix of another, or that differ only in rank, are different series:
 * the series cache compares lengths and bytes, not whole keys. Each
 * series gets its own t0, so a write or a sealed chunk that landed in the
 * wrong series shows as wrong timestamps or counts. */
static const struct {
	const char *job;
	uint32_t rank;
	const char *metric;
} mixup_keys[] = {
    {"a", 0, "bc"},  {"ab", 0, "c"},  {"a", 0, "b"},
    {"a", 0, "bcd"}, {"a", 1, "bc"},  {"a", MDL_RANK_JOB, "bc"},
    {"abc", 0, "x"}, {"ab", 0, "cx"},
};
#define MIXUP_N (sizeof(mixup_keys) / sizeof(mixup_keys[0]))

/* Points from..to-1 of every mixup series, one batch per step (every
 * series in it, like one step of every rank). */
static int write_mixup(struct sto *s, size_t from, size_t to)
{
	struct mdl_batch *b;
	int rc = mdl_batch_new(1024, 1024, &b);
	for (size_t i = from; rc == 0 && i < to; i++) {
		for (size_t k = 0; rc == 0 && k < MIXUP_N; k++)
			rc = mdl_batch_add(b, mixup_keys[k].job, strlen(mixup_keys[k].job),
					   mixup_keys[k].rank, mixup_keys[k].metric,
					   strlen(mixup_keys[k].metric),
					   (int64_t)(100000 * (k + 1) + i), (int64_t)i, 0,
					   rdb_f64_bits((double)i * 0.5));
		if (rc == 0)
			rc = sto_write(s, b);
		mdl_batch_reset(b);
	}
	mdl_batch_free(b);
	return rc;
}

static void check_mixup(struct sto *s, size_t n)
{
	for (size_t k = 0; k < MIXUP_N; k++) {
		check_series(s, mixup_keys[k].job, mixup_keys[k].rank, mixup_keys[k].metric,
			     (int64_t)(100000 * (k + 1)), n);
		for (size_t j = 0; j < k; j++) /* one id per key */
			CHECK(series_id(s, mixup_keys[k].job, mixup_keys[k].rank,
					mixup_keys[k].metric) != series_id(s, mixup_keys[j].job,
									   mixup_keys[j].rank,
									   mixup_keys[j].metric));
	}
}

static void test_series_key_mixup(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 100);
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	CHECK_EQ_INT(write_mixup(s, 0, 1), 0);	/* created in one group */
	CHECK_EQ_INT(write_mixup(s, 1, 20), 0); /* from the cache */
	struct sto_stats st;
	sto_get_stats(s, &st);
	CHECK_EQ_INT(st.series, MIXUP_N);
	check_mixup(s, 20); /* in the head */
	CHECK_EQ_INT(sto_checkpoint(s), 0);
	check_mixup(s, 20); /* sealed: ("a", 0) is one group record, "ab" another */
	sto_close(s);

	CHECK_EQ_INT(sto_open(&o, &s), 0);
	CHECK_EQ_INT(write_mixup(s, 20, 30), 0); /* cached again from the index */
	check_mixup(s, 30);
	sto_close(s);
	CHECK_EQ_INT(sto_open(&o, &s), 0); /* WAL replay */
	check_mixup(s, 30);
	sto_close(s);
}

/* Opens a store with head_max_bytes / wal_rotate_bytes as given (no
 * interval checkpoint), writes nseries series of npts points under job,
 * waits (up to 60 s, no timing asserted) until a checkpoint ran and the
 * head holds at most head_below bytes, and returns the stats in *st; every
 * point is then checked readable once. The store stays open in *out. */
static void trigger_case(uint64_t head_max, uint64_t wal_rotate, const char *job, int nseries,
			 size_t npts, uint64_t head_below, struct sto **out, struct sto_stats *st)
{
	static char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 4096);
	o.head_max_bytes = head_max;
	o.wal_rotate_bytes = wal_rotate;
	o.checkpoint_interval_s = 3600;
	CHECK_EQ_INT(sto_open(&o, out), 0);
	struct sto *s = *out;
	sto_get_stats(s, st);
	uint64_t ckpt0 = st->checkpoints;
	char metric[16];
	for (int m = 0; m < nseries; m++) {
		snprintf(metric, sizeof(metric), "m%d", m);
		CHECK_EQ_INT(write_points(s, job, 0, metric, 1000, npts, 500), 0);
	}
	/* the flusher is woken by the write that passes the trigger, and polls
	 * every 200 ms besides */
	for (int i = 0; i < 600; i++) {
		sto_get_stats(s, st);
		if (st->checkpoints > ckpt0 && st->head_bytes <= head_below)
			break;
		usleep(100 * 1000);
	}
	CHECK(st->checkpoints > ckpt0);
	CHECK(st->head_bytes <= head_below);
	for (int m = 0; m < nseries; m++) {
		snprintf(metric, sizeof(metric), "m%d", m);
		check_series(s, job, 0, metric, 1000, npts);
	}
}

/* The head's memory starts a checkpoint by itself (a quarter of
 * head_max_bytes), with neither the WAL size nor the interval due: 64
 * series x 1,500 points (~3.6 MiB of head) against a 2 MiB trigger. The
 * store ends up with a checkpoint done, the head back under the trigger
 * and every point readable once. */
static void test_head_memory_trigger(void)
{
	struct sto *s;
	struct sto_stats st;
	trigger_case(8u << 20, 1ull << 30, "mem", 64, 1500, 2u << 20, &s, &st);
	CHECK(st.points_sealed > 0);
	sto_close(s);
}

/* The head's point count starts a checkpoint by itself (wal_rotate_bytes /
 * 64 points: 16,384 at 1 MiB), with neither the WAL size (compact records
 * of 40 x 500 points stay far below 1 MiB), the head's memory (1 GiB
 * limit) nor the interval due. Every point stays readable once. */
static void test_head_points_trigger(void)
{
	struct sto *s;
	struct sto_stats st;
	trigger_case(1ull << 30, 1u << 20, "pts", 40, 500, UINT64_MAX, &s, &st);
	CHECK(st.wal.bytes < (1u << 20));
	sto_close(s);
}

static void count_problem(void *arg, const char *msg)
{
	int *n = arg;
	if (strstr(msg, "name a series id that no earlier record"))
		(*n)++;
}

/* Builds into rec (emptied first) a batch payload (type 3 or, compact
 * with sids, type 5) holding b's points and no events. */
static int build_batch_record(struct rdb_buf *rec, const struct mdl_batch *b, const uint64_t *sids,
			      const char *id)
{
	size_t il = id ? strlen(id) : 0;
	rec->len = 0;
	int rc = rdb_buf_putc(rec, (char)il);
	if (rc == 0)
		rc = rdb_buf_append(rec, id, il);
	if (rc == 0)
		rc = rdb_buf_append(rec, "\0\0\0\0", 4);
	size_t at = rec->len;
	if (rc == 0)
		rc = sids ? sto_batch_encode_compact(b, sids, rec) : sto_batch_encode(b, rec);
	if (rc == 0) {
		rdb_put_le32(rec->data + at - 4, (uint32_t)(rec->len - at));
		rc = rdb_buf_append(rec, "\0\0\0\0", 4);
	}
	return rc;
}

/* Appends a batch record (type 3 or, compact with sids, type 5) holding
 * b's points and no events to w. */
static int append_batch_record(struct sto_wal *w, const struct mdl_batch *b, const uint64_t *sids,
			       const char *id)
{
	struct rdb_buf rec;
	rdb_buf_init(&rec, 1 << 20);
	int rc = build_batch_record(&rec, b, sids, id);
	if (rc == 0)
		rc = sto_wal_append(w, sids ? STO_WAL_REC_CBATCH : STO_WAL_REC_BATCH, rec.data,
				    rec.len);
	rdb_buf_free(&rec);
	return rc;
}

/* Points ts = t0 + i, step = i, value = i * 0.5 for i in [from, to). */
static void batch_range(struct mdl_batch *b, const char *job, uint32_t rank, const char *metric,
			size_t from, size_t to)
{
	mdl_batch_reset(b);
	for (size_t i = from; i < to; i++)
		CHECK_EQ_INT(mdl_batch_add(b, job, strlen(job), rank, metric, strlen(metric),
					   (int64_t)i, (int64_t)i, 0,
					   rdb_f64_bits((double)i * 0.5)),
			     0);
}

/* WAL files an earlier build wrote (header version 4, types 1 and 3,
 * series named by their strings) and files of this one (types 4 and 5,
 * series named by ids the file defines, ids that are not the index's)
 * replay side by side; a record naming an id its file does not define
 * (definitions hold within one file) is skipped and counted. */
static void test_replay_old_and_compact_wal(void)
{
	char dir[4200], wal_dir[4300], path[4400];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 1000);
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	CHECK_EQ_INT(write_points(s, "mix", 9, "first", 0, 3, 3), 0);
	CHECK_EQ_INT(sto_close_rc(s), 0);
	snprintf(wal_dir, sizeof(wal_dir), "%s/wal", dir);
	struct mdl_batch *b;
	CHECK_EQ_INT(mdl_batch_new(1000, 10, &b), 0);
	struct sto_wal_options wo = {.dir = wal_dir, .gen = 0x1000, .sync = STO_SYNC_NONE};
	struct sto_wal *w;
	/* An old file: type 1, then type 3 with a batch id. */
	CHECK_EQ_INT(sto_wal_open(&wo, &w), 0);
	struct rdb_buf rec;
	rdb_buf_init(&rec, 1 << 20);
	batch_range(b, "mix", 0, "a", 0, 5);
	CHECK_EQ_INT(sto_batch_encode(b, &rec), 0);
	CHECK_EQ_INT(sto_wal_append(w, STO_WAL_REC_POINTS, rec.data, rec.len), 0);
	batch_range(b, "mix", 0, "a", 5, 10);
	CHECK_EQ_INT(append_batch_record(w, b, NULL, "old-batch"), 0);
	sto_wal_close(w);
	snprintf(path, sizeof(path), "%s/wal-%016llx.log", wal_dir, 0x1000ull);
	FILE *f = fopen(path, "r+b");
	CHECK(f != NULL);
	uint8_t v4[4] = {4, 0, 0, 0};
	CHECK(f && fseek(f, 8, SEEK_SET) == 0 && fwrite(v4, 1, 4, f) == 4);
	if (f)
		fclose(f);
	/* A new file: definitions, then compact records naming sid 777 and
	 * 778 (not the index's ids), then one naming an undefined id. */
	wo.gen = 0x1001;
	CHECK_EQ_INT(sto_wal_open(&wo, &w), 0);
	rec.len = 0;
	struct sto_wal_key k1 = {
	    .job = "mix", .metric = "b", .rank = 1, .job_len = 3, .metric_len = 1};
	struct sto_wal_key k2 = {
	    .job = "mix", .metric = "a", .rank = 0, .job_len = 3, .metric_len = 1};
	CHECK_EQ_INT(sto_defs_add(&rec, 0, 777, &k1), 0);
	CHECK_EQ_INT(sto_defs_add(&rec, 0, 778, &k2), 0);
	CHECK_EQ_INT(sto_wal_append(w, STO_WAL_REC_DEFS, rec.data, rec.len), 0);
	uint64_t sid = 777;
	batch_range(b, "mix", 1, "b", 0, 10);
	CHECK_EQ_INT(append_batch_record(w, b, &sid, NULL), 0);
	sid = 778;
	batch_range(b, "mix", 0, "a", 10, 12);
	CHECK_EQ_INT(append_batch_record(w, b, &sid, "new-batch"), 0);
	sid = 779;
	batch_range(b, "mix", 2, "lost", 0, 1);
	CHECK_EQ_INT(append_batch_record(w, b, &sid, NULL), 0);
	sto_wal_close(w);
	/* The next file: 777 is not defined in it. */
	wo.gen = 0x1002;
	CHECK_EQ_INT(sto_wal_open(&wo, &w), 0);
	sid = 777;
	batch_range(b, "mix", 1, "b", 10, 11);
	CHECK_EQ_INT(append_batch_record(w, b, &sid, NULL), 0);
	sto_wal_close(w);
	rdb_buf_free(&rec);
	mdl_batch_free(b);

	/* rankctl verify's WAL check reports the two files naming undefined ids. */
	struct sto_verify_report vr = {0};
	int nproblems = 0;
	CHECK_EQ_INT(sto_verify_wal(dir, count_problem, &nproblems, &vr), 0);
	CHECK_EQ_INT(vr.wal_files, 3);
	CHECK_EQ_INT(vr.problems, 2);
	CHECK_EQ_INT(nproblems, 2);
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	check_series(s, "mix", 0, "a", 0, 12);
	check_series(s, "mix", 1, "b", 0, 10);
	check_series(s, "mix", 9, "first", 0, 3);
	CHECK_EQ_INT(series_id(s, "mix", 2, "lost"), 0);
	struct sto_stats st;
	sto_get_stats(s, &st);
	CHECK_EQ_INT(st.wal_undefined_records, 2);
	CHECK_EQ_INT(sto_close_rc(s), 0);
	/* What this build writes replays too (after a crash: no close). */
	pid_t pid = fork();
	if (pid == 0) {
		if (sto_open(&o, &s))
			_exit(3);
		if (write_points(s, "mix", 3, "c", 0, 40, 4) || sto_checkpoint(s) ||
		    write_points(s, "mix", 4, "c", 0, 40, 4) ||
		    write_points(s, "mix", 5, "c", 0, 10, 5))
			_exit(4);
		_exit(0);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	check_series(s, "mix", 3, "c", 0, 40);
	check_series(s, "mix", 4, "c", 0, 40);
	check_series(s, "mix", 5, "c", 0, 10);
	sto_get_stats(s, &st);
	CHECK_EQ_INT(st.wal_undefined_records, 0);
	sto_close(s);
}

/* What rankctl verify said about the WAL. */
struct wal_said {
	int undefined, skipped;
	char skipped_msg[1024];
};

static void note_wal_problem(void *arg, const char *msg)
{
	struct wal_said *w = arg;
	if (strstr(msg, "name a series id that no earlier record"))
		w->undefined++;
	if (strstr(msg, "with a valid checksum that the next start skips")) {
		w->skipped++;
		snprintf(w->skipped_msg, sizeof(w->skipped_msg), "%s", msg);
	}
}

/* A WAL file whose records all have valid checksums but some of which
 * replay must refuse: rankctl verify names exactly the records the next
 * start skips (their points are missing after it), and nothing else. The
 * definitions record whose third definition has series id 0 is refused
 * whole, so the record using its first id is one naming an undefined id
 * (it used to be half-applied and that record replayed). */
static void test_verify_wal_agrees_with_replay(void)
{
	char dir[4200], wal_dir[4300];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 1000);
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	CHECK_EQ_INT(sto_close_rc(s), 0);
	snprintf(wal_dir, sizeof(wal_dir), "%s/wal", dir);
	struct mdl_batch *b;
	CHECK_EQ_INT(mdl_batch_new(1000, 10, &b), 0);
	struct sto_wal_options wo = {.dir = wal_dir, .gen = 0x2000, .sync = STO_SYNC_NONE};
	struct sto_wal *w;
	CHECK_EQ_INT(sto_wal_open(&wo, &w), 0);
	struct rdb_buf rec;
	rdb_buf_init(&rec, 1 << 20);
	struct sto_wal_key k = {.job = "agree", .metric = "m", .job_len = 5, .metric_len = 1};
	/* 1: definitions of ids 1, 2, 0 (skipped: sid 0) */
	for (uint32_t r = 1; r <= 3; r++) {
		k.rank = r;
		CHECK_EQ_INT(sto_defs_add(&rec, 0, r, &k), 0);
	}
	rdb_put_le64(rec.data + rec.len - (8 + 1 + 5 + 4 + 2 + 1), 0);
	CHECK_EQ_INT(sto_wal_append(w, STO_WAL_REC_DEFS, rec.data, rec.len), 0);
	/* 2: names id 1 (undefined: its definition was refused) */
	uint64_t sid = 1;
	batch_range(b, "agree", 1, "m", 0, 5);
	CHECK_EQ_INT(append_batch_record(w, b, &sid, NULL), 0);
	/* 3: definitions of ids 5 and 6; 4: points of id 5 (applied) */
	rec.len = 0;
	for (uint32_t r = 5; r <= 6; r++) {
		k.rank = r;
		CHECK_EQ_INT(sto_defs_add(&rec, 0, r, &k), 0);
	}
	CHECK_EQ_INT(sto_wal_append(w, STO_WAL_REC_DEFS, rec.data, rec.len), 0);
	sid = 5;
	batch_range(b, "agree", 5, "m", 0, 4);
	CHECK_EQ_INT(append_batch_record(w, b, &sid, "ok-1"), 0);
	/* 5: a type 3 record with a 129-byte batch id (skipped) */
	char long_id[STO_BATCH_ID_MAX + 2];
	memset(long_id, 'x', STO_BATCH_ID_MAX + 1);
	long_id[STO_BATCH_ID_MAX + 1] = 0;
	batch_range(b, "agree", 7, "m", 0, 3);
	CHECK_EQ_INT(append_batch_record(w, b, NULL, long_id), 0);
	/* 6: a compact record with a byte after its events part (skipped) */
	sid = 6;
	batch_range(b, "agree", 6, "m", 0, 3);
	CHECK_EQ_INT(build_batch_record(&rec, b, &sid, NULL), 0);
	CHECK_EQ_INT(rdb_buf_putc(&rec, 0), 0);
	CHECK_EQ_INT(sto_wal_append(w, STO_WAL_REC_CBATCH, rec.data, rec.len), 0);
	/* 7: a compact record whose 3-byte events part cannot be events
	 * (skipped, although its points are sound) */
	CHECK_EQ_INT(build_batch_record(&rec, b, &sid, NULL), 0);
	rec.len -= 4;
	CHECK_EQ_INT(rdb_buf_append(&rec, "\3\0\0\0abc", 7), 0);
	CHECK_EQ_INT(sto_wal_append(w, STO_WAL_REC_CBATCH, rec.data, rec.len), 0);
	/* 8: a record of the reserved type 2 (skipped) */
	CHECK_EQ_INT(sto_wal_append(w, STO_WAL_REC_EVENTS, "\0\0\0\0", 4), 0);
	/* 9: the same points of id 6, sound (applied) */
	CHECK_EQ_INT(build_batch_record(&rec, b, &sid, "ok-2"), 0);
	CHECK_EQ_INT(sto_wal_append(w, STO_WAL_REC_CBATCH, rec.data, rec.len), 0);
	sto_wal_close(w);
	rdb_buf_free(&rec);
	mdl_batch_free(b);

	struct sto_verify_report vr = {0};
	struct wal_said said = {0};
	CHECK_EQ_INT(sto_verify_wal(dir, note_wal_problem, &said, &vr), 0);
	CHECK_EQ_INT(vr.wal_files, 1);
	CHECK_EQ_INT(vr.wal_damaged_ranges, 0);
	CHECK_EQ_INT(vr.problems, 2);
	CHECK_EQ_INT(said.undefined, 1);
	CHECK_EQ_INT(said.skipped, 1);
	CHECK(strstr(said.skipped_msg, ": 5 record(s)") != NULL);
	CHECK(strstr(said.skipped_msg,
		     "checksummed record 1 of the file, counting only records whose "
		     "checksum holds; type 4") != NULL);

	CHECK_EQ_INT(sto_open(&o, &s), 0);
	check_series(s, "agree", 5, "m", 0, 4);
	check_series(s, "agree", 6, "m", 0, 3);
	CHECK_EQ_INT(series_id(s, "agree", 1, "m"), 0);
	CHECK_EQ_INT(series_id(s, "agree", 2, "m"), 0);
	CHECK_EQ_INT(series_id(s, "agree", 7, "m"), 0);
	struct sto_stats st;
	sto_get_stats(s, &st);
	CHECK_EQ_INT(st.wal_undefined_records, 1);
	CHECK_EQ_INT(sto_close_rc(s), 0);
}

int main(void)
{
	const char *tmp = getenv("RDB_TEST_TMP");
	snprintf(base, sizeof(base), "%s/test_store.XXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	RUN(test_head_and_chunks);
	RUN(test_single_chunk_reads);
	RUN(test_out_of_order);
	RUN(test_tail_reads);
	RUN(test_crash_recovery);
	RUN(test_recovery_refuses_damaged_entries);
	RUN(test_verify_names_undecodable_event_entry);
	RUN(test_lock_and_format);
	RUN(test_missing_index_refused);
	RUN(test_special_values_and_series_limit);
	RUN(test_events_and_batch_ids);
	RUN(test_series_per_job_limit);
	RUN(test_supersede_record);
	RUN(test_merge_then_rebuild);
	RUN(test_view_survives_merge);
	RUN(test_failed_write_retry_is_exactly_once);
	RUN(test_async_submit);
	RUN(test_async_apply_slices);
	RUN(test_async_submit_new_series);
	RUN(test_concurrent_series_creation);
	RUN(test_index_compact_after_merge);
	RUN(test_supersede_entries_trimmed);
	RUN(test_series_key_mixup);
	RUN(test_head_memory_trigger);
	RUN(test_head_points_trigger);
	RUN(test_replay_old_and_compact_wal);
	RUN(test_verify_wal_agrees_with_replay);
	int rc = check_summary("store");
	if (rc == 0) {
		char cmd[4200];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", base);
	}
	return rc;
}
