/* test_store.c - the storage engine end to end in one process: writes,
 * reads across head and chunks, checkpoints, reopen, and crash recovery
 * (a forked child writes and _exit()s without closing, so the WAL and
 * uncheckpointed chunks are exactly what a kill -9 leaves behind). */
#include "check.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "storage/sto.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
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
	struct sto_batch *b;
	int rc = sto_batch_new(1 << 20, 1024, &b);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		rc = sto_batch_add(b, job, strlen(job), rank, metric, strlen(metric),
				   t0 + (int64_t)i, (int64_t)i, 0, rdb_f64_bits((double)i * 0.5));
		if (rc == 0 && (sto_batch_points(b) == per || i + 1 == n)) {
			rc = sto_write(s, b);
			sto_batch_reset(b);
		}
	}
	sto_batch_free(b);
	return rc;
}

static uint64_t series_id(struct sto *s, const char *job, uint32_t rank, const char *metric)
{
	struct sto_series_key k = {0};
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
	struct sto_cols c = STO_COLS_INIT;
	struct sto_read_error err;
	int rc = sto_read(s, id, &r, 10000000, &c, &err);
	CHECK_EQ_INT(rc, 0);
	CHECK_EQ_INT(c.n, n);
	size_t bad = 0;
	for (size_t i = 0; i < c.n && i < n; i++)
		bad += c.ts_ns[i] != t0 + (int64_t)i || c.step[i] != (int64_t)i ||
		       c.value[i] != rdb_f64_bits((double)i * 0.5);
	CHECK_EQ_INT(bad, 0);
	sto_cols_free(&c);
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
	CHECK_EQ_INT(sto_checkpoint(s), 0);
	struct sto_stats st;
	sto_get_stats(s, &st);
	CHECK_EQ_INT(st.head_points, 0);
	CHECK(st.chunks_sealed >= 10);
	check_series(s, "j1", 0, "loss", 1000, 1050); /* all in chunks */

	/* step and time ranges are inclusive */
	uint64_t id = series_id(s, "j1", 0, "loss");
	struct sto_cols c = STO_COLS_INIT;
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
	sto_cols_free(&c);
	sto_close(s);

	CHECK_EQ_INT(sto_open(&o, &s), 0);
	check_series(s, "j1", 0, "loss", 1000, 1050);
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
	struct sto_batch *b;
	CHECK_EQ_INT(sto_batch_new(10000, 10, &b), 0);
	for (int half = 1; half >= 0; half--) {
		for (int i = half * 150; i < (half + 1) * 150; i++)
			sto_batch_add(b, "j", 1, 3, "m", 1, 1000 + i, i, 0,
				      rdb_f64_bits((double)i * 0.5));
		CHECK_EQ_INT(sto_write(s, b), 0);
		sto_batch_reset(b);
		if (half == 1)
			CHECK_EQ_INT(sto_checkpoint(s), 0);
	}
	sto_batch_free(b);
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

static void test_special_values_and_series_limit(void)
{
	char dir[4200];
	new_dir(dir, sizeof(dir));
	struct sto_options o;
	opts(&o, dir, 100);
	o.max_series = 3;
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	uint64_t vals[] = {STO_VALUE_NULL_BITS, STO_VALUE_NAN_BITS, 0x7ff0000000000001ull,
			   rdb_f64_bits(-0.0), rdb_f64_bits(INFINITY), rdb_f64_bits(-INFINITY), 1};
	struct sto_batch *b;
	CHECK_EQ_INT(sto_batch_new(100, 10, &b), 0);
	for (int i = 0; i < 7; i++)
		sto_batch_add(b, "v", 1, STO_RANK_JOB, "x", 1, i, STO_STEP_NONE, 2, vals[i]);
	CHECK_EQ_INT(sto_write(s, b), 0);
	CHECK_EQ_INT(sto_checkpoint(s), 0);
	struct sto_range all = {INT64_MIN, INT64_MAX, false, 0, 0};
	struct sto_cols c = STO_COLS_INIT;
	struct sto_read_error err;
	CHECK_EQ_INT(sto_read(s, series_id(s, "v", STO_RANK_JOB, "x"), &all, 100, &c, &err), 0);
	CHECK_EQ_INT(c.n, 7);
	for (size_t i = 0; i < c.n; i++) {
		CHECK(c.value[i] == vals[i]);
		CHECK(c.step[i] == STO_STEP_NONE);
		CHECK_EQ_INT(c.attempt[i], 2);
	}
	/* step range selects no step-less points */
	struct sto_range st = {INT64_MIN, INT64_MAX, true, 0, INT64_MAX};
	CHECK_EQ_INT(sto_read(s, series_id(s, "v", STO_RANK_JOB, "x"), &st, 100, &c, &err), 0);
	CHECK_EQ_INT(c.n, 0);
	sto_cols_free(&c);
	/* max_series = 3: two more series are fine, a fourth is refused whole */
	sto_batch_reset(b);
	sto_batch_add(b, "v", 1, 0, "y", 1, 1, 1, 0, 1);
	sto_batch_add(b, "v", 1, 0, "z", 1, 1, 1, 0, 1);
	CHECK_EQ_INT(sto_write(s, b), 0);
	sto_batch_reset(b);
	sto_batch_add(b, "v", 1, 0, "w", 1, 1, 1, 0, 1);
	CHECK_EQ_INT(sto_write(s, b), RDB_ELIMIT);
	sto_batch_free(b);
	sto_close(s);
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
	RUN(test_out_of_order);
	RUN(test_crash_recovery);
	RUN(test_lock_and_format);
	RUN(test_special_values_and_series_limit);
	int rc = check_summary("store");
	if (rc == 0) {
		char cmd[4200];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", base);
	}
	return rc;
}
