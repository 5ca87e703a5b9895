/* test_batch.c - unit tests for storage/batch.c: interning and grouped
 * views, bounds, the WAL payload round trip, hostile payloads, reset, the
 * per-thread cache (a given batch comes back empty with the new bounds, the
 * cache holds at most MDL_BATCH_CACHE_N small batches, a big one is freed,
 * a thread's cache is freed when it exits: ASan's leak check); point
 * columns (model/cols.h) grow by at most half their size, and a moving
 * reserve keeps the points in use. */
#include "storage/wal/batch_codec.h"
#include "storage/format.h"
#include "model/batch.h"
#include "model/cols.h"
#include "common/rdb_buf.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include <errno.h>
#include "tests/unit/check.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int add(struct mdl_batch *b, const char *job, uint32_t rank, const char *metric, int64_t ts,
	       int64_t step, uint64_t v)
{
	return mdl_batch_add(b, job, strlen(job), rank, metric, strlen(metric), ts, step, 1, v);
}

static const struct mdl_batch_series *find(const struct mdl_batch *b, const char *job,
					   uint32_t rank, const char *metric)
{
	for (size_t i = 0; i < mdl_batch_nseries(b); i++) {
		const struct mdl_batch_series *s = mdl_batch_series_at(b, i);
		if (s && s->key.rank == rank && strcmp(s->key.job, job) == 0 &&
		    strcmp(s->key.metric, metric) == 0)
			return s;
	}
	return NULL;
}

/* Three series, interleaved: each view holds its points in arrival order. */
static void fill(struct mdl_batch *b)
{
	for (int i = 0; i < 10; i++) {
		CHECK_EQ_INT(add(b, "job", 0, "loss", 100 - i, i, (uint64_t)i), 0);
		CHECK_EQ_INT(add(b, "job", 1, "loss", 100 + i, i, (uint64_t)(i + 100)), 0);
		if (i % 2 == 0)
			CHECK_EQ_INT(add(b, "job", MDL_RANK_JOB, "lr", i, MDL_STEP_NONE,
					 0x7ff8000000000001ull),
				     0);
	}
}

static void test_add_group(void)
{
	struct mdl_batch *b;
	CHECK_EQ_INT(mdl_batch_new(1000, 100, &b), 0);
	CHECK(mdl_batch_series_at(b, 0) == NULL);
	fill(b);
	CHECK_EQ_INT(mdl_batch_points(b), 25);
	CHECK_EQ_INT(mdl_batch_nseries(b), 3);
	CHECK(mdl_batch_series_at(b, 3) == NULL);
	const struct mdl_batch_series *s = find(b, "job", 0, "loss");
	CHECK(s && s->pts.n == 10 && s->pts.cap == 0);
	for (size_t k = 0; s && k < s->pts.n; k++) {
		CHECK_EQ_INT(s->pts.ts_ns[k], 100 - (int64_t)k);
		CHECK_EQ_INT(s->pts.step[k], k);
		CHECK_EQ_INT(s->pts.attempt[k], 1);
		CHECK_EQ_INT(s->pts.value[k], k);
	}
	s = find(b, "job", MDL_RANK_JOB, "lr");
	CHECK(s && s->pts.n == 5 && s->pts.step[4] == MDL_STEP_NONE && s->pts.ts_ns[4] == 8);
	/* Adding after a view regroups. */
	CHECK_EQ_INT(add(b, "job", 1, "loss", 5, 50, 7), 0);
	s = find(b, "job", 1, "loss");
	CHECK(s && s->pts.n == 11 && s->pts.step[10] == 50 && s->pts.value[0] == 100);
	/* Keys differing only by rank, job or metric are distinct. */
	CHECK_EQ_INT(add(b, "jo", 0, "loss", 0, 0, 0), 0);
	CHECK_EQ_INT(add(b, "job", 0, "los", 0, 0, 0), 0);
	CHECK_EQ_INT(add(b, "job", 2, "loss", 0, 0, 0), 0);
	CHECK_EQ_INT(mdl_batch_nseries(b), 6);
	mdl_batch_free(b);
	mdl_batch_free(NULL);
}

/* Enough series to grow the hash table several times. */
static void test_many_series(void)
{
	struct mdl_batch *b;
	CHECK_EQ_INT(mdl_batch_new(100000, 5000, &b), 0);
	char metric[32];
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 5000; i++) {
			snprintf(metric, sizeof(metric), "m%d", i);
			CHECK_EQ_INT(add(b, "j", (uint32_t)(i % 7), metric, round, i, (uint64_t)i),
				     0);
		}
	}
	CHECK_EQ_INT(mdl_batch_nseries(b), 5000);
	CHECK_EQ_INT(mdl_batch_points(b), 15000);
	int bad = 0;
	for (size_t i = 0; i < mdl_batch_nseries(b); i++) {
		const struct mdl_batch_series *s = mdl_batch_series_at(b, i);
		if (!s || s->pts.n != 3 || s->pts.ts_ns[0] != 0 || s->pts.ts_ns[2] != 2)
			bad++;
	}
	CHECK_EQ_INT(bad, 0);
	mdl_batch_free(b);
}

static void test_bounds(void)
{
	struct mdl_batch *b;
	CHECK_EQ_INT(mdl_batch_new(5, 2, &b), 0);
	for (int i = 0; i < 5; i++)
		CHECK_EQ_INT(add(b, "j", 0, i % 2 ? "a" : "b", i, i, 0), 0);
	CHECK_EQ_INT(add(b, "j", 0, "a", 9, 9, 0), RDB_ELIMIT);
	CHECK_EQ_INT(mdl_batch_points(b), 5);
	mdl_batch_reset(b);
	CHECK_EQ_INT(add(b, "j", 0, "a", 0, 0, 0), 0);
	CHECK_EQ_INT(add(b, "j", 1, "a", 0, 0, 0), 0);
	CHECK_EQ_INT(add(b, "j", 2, "a", 0, 0, 0), RDB_ELIMIT);
	CHECK_EQ_INT(add(b, "j", 1, "a", 0, 0, 0), 0); /* existing series still fine */
	CHECK_EQ_INT(mdl_batch_nseries(b), 2);
	CHECK_EQ_INT(mdl_batch_points(b), 3);
	/* Longest names are accepted. */
	char job[MDL_JOB_MAX + 1], metric[MDL_METRIC_MAX + 1];
	memset(job, 'j', MDL_JOB_MAX);
	job[MDL_JOB_MAX] = 0;
	memset(metric, 'm', MDL_METRIC_MAX);
	metric[MDL_METRIC_MAX] = 0;
	mdl_batch_reset(b);
	CHECK_EQ_INT(add(b, job, 0, metric, 0, 0, 0), 0);
	const struct mdl_batch_series *s = mdl_batch_series_at(b, 0);
	CHECK(s && strlen(s->key.job) == MDL_JOB_MAX && strlen(s->key.metric) == MDL_METRIC_MAX);
	CHECK(s && s->job_len == MDL_JOB_MAX && s->metric_len == MDL_METRIC_MAX);
	mdl_batch_free(b);
}

static bool same(const struct mdl_batch *a, const struct mdl_batch *b)
{
	if (mdl_batch_nseries(a) != mdl_batch_nseries(b) ||
	    mdl_batch_points(a) != mdl_batch_points(b))
		return false;
	for (size_t i = 0; i < mdl_batch_nseries(a); i++) {
		const struct mdl_batch_series *x = mdl_batch_series_at(a, i);
		const struct mdl_batch_series *y = find(b, x->key.job, x->key.rank, x->key.metric);
		if (!y || x->pts.n != y->pts.n)
			return false;
		size_t n = x->pts.n;
		if (memcmp(x->pts.ts_ns, y->pts.ts_ns, n * 8) ||
		    memcmp(x->pts.step, y->pts.step, n * 8) ||
		    memcmp(x->pts.attempt, y->pts.attempt, n * 4) ||
		    memcmp(x->pts.value, y->pts.value, n * 8))
			return false;
	}
	return true;
}

static void test_round_trip(void)
{
	struct mdl_batch *a, *b;
	CHECK_EQ_INT(mdl_batch_new(1000, 100, &a), 0);
	CHECK_EQ_INT(mdl_batch_new(1000, 100, &b), 0);
	fill(a);
	CHECK_EQ_INT(add(a, "job", 0, "neg", INT64_MIN, INT64_MAX, 0x8000000000000000ull), 0);
	struct rdb_buf buf;
	rdb_buf_init(&buf, 1 << 20);
	CHECK_EQ_INT(rdb_buf_append(&buf, "pre", 3), 0);
	CHECK_EQ_INT(sto_batch_encode(a, &buf), 0);
	size_t want = 4;
	for (size_t i = 0; i < mdl_batch_nseries(a); i++) {
		const struct mdl_batch_series *s = mdl_batch_series_at(a, i);
		want +=
		    11 + strlen(s->key.job) + strlen(s->key.metric) + s->pts.n * STO_WAL_POINT_SIZE;
	}
	CHECK_EQ_INT(buf.len, 3 + want);
	CHECK(memcmp(buf.data, "pre", 3) == 0);
	CHECK_EQ_INT(sto_batch_decode(b, buf.data + 3, buf.len - 3), 0);
	CHECK(same(a, b));
	CHECK(same(b, a));
	/* Encoding an empty batch gives nseries = 0, which decodes to empty. */
	mdl_batch_reset(a);
	buf.len = 0;
	CHECK_EQ_INT(sto_batch_encode(a, &buf), 0);
	CHECK_EQ_INT(buf.len, 4);
	CHECK_EQ_INT(sto_batch_decode(b, buf.data, buf.len), 0);
	CHECK_EQ_INT(mdl_batch_points(b), 0);
	/* A bounded output buffer refuses, it does not grow. */
	fill(a);
	struct rdb_buf tiny;
	rdb_buf_init(&tiny, 64);
	CHECK_EQ_INT(sto_batch_encode(a, &tiny), RDB_ELIMIT);
	rdb_buf_free(&tiny);
	rdb_buf_free(&buf);
	mdl_batch_free(a);
	mdl_batch_free(b);
}

static void test_decode_hostile(void)
{
	struct mdl_batch *a, *b;
	CHECK_EQ_INT(mdl_batch_new(1000, 100, &a), 0);
	CHECK_EQ_INT(mdl_batch_new(1000, 100, &b), 0);
	fill(a);
	struct rdb_buf buf;
	rdb_buf_init(&buf, 1 << 20);
	CHECK_EQ_INT(sto_batch_encode(a, &buf), 0);
	int bad = 0;
	for (size_t n = 0; n < buf.len; n++)
		if (sto_batch_decode(b, buf.data, n) != RDB_ECORRUPT)
			bad++;
	CHECK_EQ_INT(bad, 0);
	/* Trailing garbage. */
	CHECK_EQ_INT(rdb_buf_putc(&buf, 0), 0);
	CHECK_EQ_INT(sto_batch_decode(b, buf.data, buf.len), RDB_ECORRUPT);
	buf.len--;
	/* Every single-byte flip: an error or a (different) valid batch, never a crash. */
	for (size_t i = 0; i < buf.len; i++) {
		for (int bit = 0; bit < 8; bit += 3) {
			buf.data[i] ^= (uint8_t)(1u << bit);
			int rc = sto_batch_decode(b, buf.data, buf.len);
			CHECK(rc == 0 || rc == RDB_ECORRUPT || rc == RDB_ELIMIT);
			buf.data[i] ^= (uint8_t)(1u << bit);
		}
	}
	/* Hand-made payloads: zero-length job, bad job byte, huge point count. */
	static const uint8_t zero_job[] = {1, 0, 0, 0, 0};
	CHECK_EQ_INT(sto_batch_decode(b, zero_job, sizeof(zero_job)), RDB_ECORRUPT);
	static const uint8_t bad_job[] = {1, 0, 0, 0, 1, ' ', 0, 0, 0, 0, 1, 0, 'm', 0, 0, 0, 0};
	CHECK_EQ_INT(sto_batch_decode(b, bad_job, sizeof(bad_job)), RDB_ECORRUPT);
	static const uint8_t ok[] = {1, 0, 0, 0, 1, 'j', 0, 0, 0, 0, 1, 0, 'm', 0, 0, 0, 0};
	CHECK_EQ_INT(sto_batch_decode(b, ok, sizeof(ok)), 0);
	static const uint8_t huge[] = {1, 0, 0, 0,   1,	   'j',	 0,    0,   0,
				       0, 1, 0, 'm', 0xff, 0xff, 0xff, 0xff};
	CHECK_EQ_INT(sto_batch_decode(b, huge, sizeof(huge)), RDB_ECORRUPT);
	static const uint8_t many_series[] = {0xff, 0xff, 0xff, 0xff};
	CHECK_EQ_INT(sto_batch_decode(b, many_series, sizeof(many_series)), RDB_ECORRUPT);
	/* A valid payload over the decoding batch's bounds is RDB_ELIMIT. */
	struct mdl_batch *small;
	CHECK_EQ_INT(mdl_batch_new(3, 100, &small), 0);
	CHECK_EQ_INT(sto_batch_decode(small, buf.data, buf.len), RDB_ELIMIT);
	mdl_batch_free(small);
	rdb_buf_free(&buf);
	mdl_batch_free(a);
	mdl_batch_free(b);
}

static void test_reset_reuse(void)
{
	struct mdl_batch *b;
	CHECK_EQ_INT(mdl_batch_new(1000, 100, &b), 0);
	fill(b);
	CHECK(mdl_batch_series_at(b, 0) != NULL);
	mdl_batch_reset(b);
	CHECK_EQ_INT(mdl_batch_points(b), 0);
	CHECK_EQ_INT(mdl_batch_nseries(b), 0);
	CHECK(mdl_batch_series_at(b, 0) == NULL);
	CHECK(find(b, "job", 0, "loss") == NULL);
	CHECK_EQ_INT(add(b, "other", 4, "loss", 1, 2, 3), 0);
	CHECK_EQ_INT(add(b, "job", 0, "loss", 4, 5, 6), 0);
	CHECK_EQ_INT(mdl_batch_nseries(b), 2);
	const struct mdl_batch_series *s = find(b, "job", 0, "loss");
	CHECK(s && s->pts.n == 1 && s->pts.value[0] == 6);
	s = mdl_batch_series_at(b, 0);
	CHECK(s && strcmp(s->key.job, "other") == 0 && s->pts.n == 1);
	for (int r = 0; r < 50; r++) {
		mdl_batch_reset(b);
		fill(b);
	}
	CHECK_EQ_INT(mdl_batch_points(b), 25);
	CHECK_EQ_INT(mdl_batch_nseries(b), 3);
	mdl_batch_free(b);
}

static void test_cache(void)
{
	struct mdl_batch *b[MDL_BATCH_CACHE_N + 2];
	for (size_t i = 0; i < MDL_BATCH_CACHE_N + 2; i++) {
		CHECK_EQ_INT(mdl_batch_take(1000, 100, &b[i]), 0);
		fill(b[i]);
	}
	for (size_t i = 0; i < MDL_BATCH_CACHE_N + 2; i++)
		mdl_batch_give(b[i]); /* the last two are freed: the cache is full */
	/* taken back: the cached ones (last given first), empty, new bounds */
	struct mdl_batch *t[MDL_BATCH_CACHE_N + 1];
	for (size_t i = 0; i < MDL_BATCH_CACHE_N + 1; i++) {
		CHECK_EQ_INT(mdl_batch_take(3, 2, &t[i]), 0);
		CHECK_EQ_INT(mdl_batch_points(t[i]), 0);
		CHECK_EQ_INT(mdl_batch_nseries(t[i]), 0);
		CHECK(find(t[i], "job", 0, "loss") == NULL);
	}
	for (size_t i = 0; i < MDL_BATCH_CACHE_N; i++)
		CHECK(t[i] == b[MDL_BATCH_CACHE_N - 1 - i]);
	/* the bounds are the taker's */
	CHECK_EQ_INT(add(t[0], "job", 0, "a", 1, 1, 1), 0);
	CHECK_EQ_INT(add(t[0], "job", 0, "b", 1, 1, 1), 0);
	CHECK_EQ_INT(add(t[0], "job", 0, "c", 1, 1, 1), RDB_ELIMIT); /* max_series 2 */
	CHECK_EQ_INT(add(t[0], "job", 0, "a", 2, 2, 2), 0);
	CHECK_EQ_INT(add(t[0], "job", 0, "a", 3, 3, 3), RDB_ELIMIT); /* max_points 3 */
	const struct mdl_batch_series *s = find(t[0], "job", 0, "a");
	CHECK(s && s->pts.n == 2 && s->pts.value[1] == 2);
	/* a batch over MDL_BATCH_CACHE_BYTES is not kept */
	struct mdl_batch *big;
	CHECK_EQ_INT(mdl_batch_new(1u << 20, 1u << 20, &big), 0);
	char metric[32];
	for (int i = 0; i < 2000; i++) {
		snprintf(metric, sizeof(metric), "m%d", i);
		CHECK_EQ_INT(add(big, "job", 0, metric, 1, 1, 1), 0);
	}
	for (size_t i = 0; i < MDL_BATCH_CACHE_N + 1; i++)
		mdl_batch_give(t[i]);
	struct mdl_batch *again[MDL_BATCH_CACHE_N];
	for (size_t i = 0; i < MDL_BATCH_CACHE_N; i++)
		CHECK_EQ_INT(mdl_batch_take(10, 10, &again[i]), 0);
	mdl_batch_give(big); /* room for it, but too big: freed (ASan would see a leak) */
	struct mdl_batch *fresh;
	CHECK_EQ_INT(mdl_batch_take(10, 10, &fresh), 0);
	CHECK_EQ_INT(mdl_batch_nseries(fresh), 0);
	mdl_batch_free(fresh);
	for (size_t i = 0; i < MDL_BATCH_CACHE_N; i++)
		mdl_batch_give(again[i]); /* left in this thread's cache at exit */
}

/* A thread that leaves batches in its cache: freed when it exits. */
static void *cache_thread(void *arg)
{
	(void)arg;
	struct mdl_batch *b;
	if (mdl_batch_take(100, 100, &b) == 0) {
		fill(b);
		mdl_batch_give(b);
	}
	return NULL;
}

static void test_cache_thread_exit(void)
{
	pthread_t th;
	CHECK_EQ_INT(pthread_create(&th, NULL, cache_thread, NULL), 0);
	CHECK_EQ_INT(pthread_join(th, NULL), 0);
}

/* mdl_batch_reserve is a hint: the points added after it are the same,
 * it is capped at max_points, and adding past it still works. */
static void test_reserve(void)
{
	struct mdl_batch *b;
	CHECK_EQ_INT(mdl_batch_new(100, 100, &b), 0);
	CHECK_EQ_INT(mdl_batch_reserve(b, 1u << 30), 0); /* capped at 100: no huge allocation */
	CHECK_EQ_INT(mdl_batch_reserve(b, 10), 0);
	char metric[16];
	for (int i = 0; i < 100; i++) {
		snprintf(metric, sizeof(metric), "m%d", i % 7);
		CHECK_EQ_INT(add(b, "job", (uint32_t)(i % 3), metric, i, i, (uint64_t)i), 0);
	}
	CHECK_EQ_INT(add(b, "job", 0, "m0", 1, 1, 1), RDB_ELIMIT);
	CHECK_EQ_INT(mdl_batch_points(b), 100);
	size_t total = 0;
	for (size_t i = 0; i < mdl_batch_nseries(b); i++) {
		const struct mdl_batch_series *s = mdl_batch_series_at(b, i);
		for (size_t k = 0; k < s->pts.n; k++) {
			int64_t v = (int64_t)s->pts.value[k];
			CHECK_EQ_INT(s->pts.ts_ns[k], v);
			CHECK_EQ_INT(v % 3, s->key.rank);
			CHECK(k == 0 || s->pts.ts_ns[k] > s->pts.ts_ns[k - 1]);
		}
		total += s->pts.n;
	}
	CHECK_EQ_INT(total, 100);
	mdl_batch_free(b);
}

/* Columns grow by half, not double: after any push, the capacity is at
 * most 1.5x the points that made it grow (the storage head keeps one set
 * per series, and the unused tail is resident memory). */
static void test_cols_growth(void)
{
	struct mdl_cols c = MDL_COLS_INIT;
	size_t grows = 0, over = 0, bad = 0;
	for (size_t i = 0; i < 100000; i++) {
		size_t cap = c.cap;
		CHECK_EQ_INT(mdl_cols_push(&c, (int64_t)i, (int64_t)i, 0, i), 0);
		if (c.cap == cap)
			continue;
		grows++;
		/* grown for point i + 1: at most 1.5x the i points before it */
		over += c.n > 16 && 2 * c.cap > 3 * (c.n - 1);
	}
	for (size_t i = 0; i < c.n; i++)
		bad += c.ts_ns[i] != (int64_t)i || c.value[i] != i;
	CHECK_EQ_INT(over, 0);
	CHECK_EQ_INT(bad, 0);
	CHECK(grows > 20); /* doubling from 16 would take 13 */
	mdl_cols_free(&c);
}

/* mdl_cols_reserve_moving: fresh arrays holding the n points in use. */
static void test_cols_reserve_moving(void)
{
	struct mdl_cols c = MDL_COLS_INIT;
	CHECK_EQ_INT(mdl_cols_reserve_moving(&c, 5), 0); /* from empty */
	CHECK(c.cap >= 5);
	CHECK_EQ_INT(c.n, 0);
	for (size_t i = 0; i < 300; i++)
		CHECK_EQ_INT(mdl_cols_push(&c, -(int64_t)i, (int64_t)i * 3, (uint32_t)i, ~i), 0);
	int64_t *before = c.ts_ns;
	CHECK_EQ_INT(mdl_cols_reserve_moving(&c, 10), 0); /* room enough: nothing moves */
	CHECK(c.ts_ns == before);
	CHECK_EQ_INT(mdl_cols_reserve_moving(&c, 5000), 0);
	CHECK(c.cap >= 5000);
	CHECK_EQ_INT(c.n, 300);
	size_t bad = 0;
	for (size_t i = 0; i < c.n; i++)
		bad += c.ts_ns[i] != -(int64_t)i || c.step[i] != (int64_t)i * 3 ||
		       c.attempt[i] != (uint32_t)i || c.value[i] != ~i;
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(mdl_cols_push(&c, 7, 7, 7, 7), 0);
	CHECK_EQ_INT(c.n, 301);
	mdl_cols_free(&c);
}

/* mdl_cols_reserve: the four columns are one block (ts_ns its address);
 * growing keeps every column's contents up to the old capacity (past n
 * too), and the columns do not overlap (filling one after a growth leaves
 * the others as they were). */
static void test_cols_one_block(void)
{
	struct mdl_cols c = MDL_COLS_INIT;
	CHECK_EQ_INT(mdl_cols_reserve(&c, 20), 0);
	size_t cap0 = c.cap;
	for (size_t i = 0; i < cap0; i++) {
		c.ts_ns[i] = (int64_t)i;
		c.step[i] = (int64_t)i * 2;
		c.attempt[i] = (uint32_t)i * 3;
		c.value[i] = i * 5;
	}
	c.n = 3; /* contents past n are kept by mdl_cols_reserve */
	size_t bad = 0;
	for (int round = 0; round < 6; round++) {
		CHECK_EQ_INT(mdl_cols_reserve(&c, c.cap + 1), 0);
		CHECK((void *)c.step >= (void *)(c.ts_ns + c.cap));
		CHECK((void *)c.value >= (void *)(c.step + c.cap));
		CHECK((void *)c.attempt >= (void *)(c.value + c.cap));
		for (size_t i = 0; i < cap0; i++)
			bad += c.ts_ns[i] != (int64_t)i || c.step[i] != (int64_t)i * 2 ||
			       c.attempt[i] != (uint32_t)i * 3 || c.value[i] != i * 5;
		/* fill the new tails: must not reach another column's points */
		for (size_t i = cap0; i < c.cap; i++) {
			c.ts_ns[i] = -1;
			c.step[i] = -1;
			c.attempt[i] = UINT32_MAX;
			c.value[i] = UINT64_MAX;
		}
		for (size_t i = 0; i < cap0; i++)
			bad += c.ts_ns[i] != (int64_t)i || c.step[i] != (int64_t)i * 2 ||
			       c.attempt[i] != (uint32_t)i * 3 || c.value[i] != i * 5;
	}
	CHECK_EQ_INT(bad, 0);
	mdl_cols_free(&c);
	CHECK(c.ts_ns == NULL && c.cap == 0);
}

/* The stored hash of a series is the key hash (the store's series cache
 * looks batches up with it); names that differ only in where the job ends
 * hash apart. */
static void test_series_hash(void)
{
	struct mdl_batch *b;
	CHECK_EQ_INT(mdl_batch_new(100, 100, &b), 0);
	CHECK_EQ_INT(add(b, "job", 7, "loss", 1, 1, 1), 0);
	CHECK_EQ_INT(add(b, "jo", 7, "bloss", 1, 1, 1), 0);
	CHECK_EQ_INT(add(b, "job", 8, "loss", 1, 1, 1), 0);
	for (size_t i = 0; i < mdl_batch_nseries(b); i++) {
		const struct mdl_batch_series *s = mdl_batch_series_at(b, i);
		CHECK(mdl_batch_series_hash(b, i) ==
		      mdl_series_key_hash(s->key.job, strlen(s->key.job), s->key.rank,
					  s->key.metric, strlen(s->key.metric)));
		CHECK(s->job_len == strlen(s->key.job) && s->metric_len == strlen(s->key.metric));
	}
	CHECK(mdl_batch_series_hash(b, 0) != mdl_batch_series_hash(b, 1));
	CHECK(mdl_batch_series_hash(b, 0) != mdl_batch_series_hash(b, 2));
	mdl_batch_free(b);
}

/* Each series carries its metric's hash (what the detector's name table
 * looks it up by), and a (job, rank) number: equal numbers mean equal jobs
 * and ranks, whatever order the records came in; a (job, rank) met again
 * after another may get a new number, never another's. Reset starts over. */
static void test_series_numbers(void)
{
	struct mdl_batch *b;
	CHECK_EQ_INT(mdl_batch_new(100, 100, &b), 0);
	for (int round = 0; round < 2; round++) {
		CHECK_EQ_INT(add(b, "job", 7, "loss", 1, 1, 1), 0);
		CHECK_EQ_INT(add(b, "job", 7, "grad_norm", 1, 1, 1), 0);
		CHECK_EQ_INT(add(b, "job", 8, "loss", 1, 1, 1), 0);
		CHECK_EQ_INT(add(b, "jo", 7, "bloss", 1, 1, 1), 0);
		CHECK_EQ_INT(add(b, "job", 7, "mfu", 1, 1, 1), 0);
		CHECK_EQ_INT(add(b, "job", 7, "loss", 2, 2, 1), 0); /* known series */
		CHECK_EQ_INT(mdl_batch_nseries(b), 5);
		for (size_t i = 0; i < mdl_batch_nseries(b); i++) {
			const struct mdl_batch_series *si = mdl_batch_series_at(b, i);
			CHECK(si->metric_hash == mdl_metric_hash(si->key.metric, si->metric_len));
			CHECK(si->jr != 0);
			for (size_t j = 0; j < mdl_batch_nseries(b); j++) {
				const struct mdl_batch_series *sj = mdl_batch_series_at(b, j);
				bool same = si->key.rank == sj->key.rank &&
					    strcmp(si->key.job, sj->key.job) == 0;
				if (si->jr == sj->jr)
					CHECK(same);
			}
		}
		const struct mdl_batch_series *a = find(b, "job", 7, "loss");
		const struct mdl_batch_series *g = find(b, "job", 7, "grad_norm");
		CHECK(a && g && a->jr == g->jr); /* one record: one number */
		CHECK(a->metric_hash == find(b, "job", 8, "loss")->metric_hash);
		CHECK(a->metric_hash != g->metric_hash);
		mdl_batch_reset(b);
	}
	mdl_batch_free(b);
}

/* Records that name each series once arrive grouped (views point at them
 * in place); a later point of an earlier series regroups; a failed append
 * that rolls back restores either case. Every view holds exactly its own
 * points, in arrival order, whichever way. */
static void check_view(const struct mdl_batch *b, const char *job, uint32_t rank,
		       const char *metric, size_t n, int64_t ts0)
{
	const struct mdl_batch_series *s = find(b, job, rank, metric);
	CHECK(s != NULL);
	if (!s)
		return;
	CHECK_EQ_INT(s->pts.n, n);
	for (size_t k = 0; k < s->pts.n && k < n; k++)
		CHECK(s->pts.ts_ns[k] == ts0 + (int64_t)k && s->pts.step[k] == ts0 + (int64_t)k &&
		      s->pts.value[k] == (uint64_t)(ts0 + (int64_t)k));
}

static void test_group_in_order(void)
{
	struct mdl_batch *b, *big;
	CHECK_EQ_INT(mdl_batch_new(1000, 100, &b), 0);
	CHECK_EQ_INT(mdl_batch_new(3, 100, &big), 0);
	const char *metrics[] = {"loss", "grad_norm", "lr"};
	/* two records of rank 3 then one of rank 4, each series in one run */
	for (int m = 0; m < 3; m++)
		for (int k = 0; k < 2; k++)
			CHECK_EQ_INT(add(b, "job", 3, metrics[m], 10 * m + k, 10 * m + k,
					 (uint64_t)(10 * m + k)),
				     0);
	for (int m = 0; m < 3; m++)
		CHECK_EQ_INT(add(b, "job", 4, metrics[m], 50 + m, 50 + m, (uint64_t)(50 + m)), 0);
	CHECK_EQ_INT(mdl_batch_nseries(b), 6);
	for (int m = 0; m < 3; m++) {
		check_view(b, "job", 3, metrics[m], 2, 10 * m);
		check_view(b, "job", 4, metrics[m], 1, 50 + m);
	}
	/* a point for the first series again: the views are regrouped */
	CHECK_EQ_INT(add(b, "job", 3, "loss", 2, 2, 2), 0);
	check_view(b, "job", 3, "loss", 3, 0);
	check_view(b, "job", 4, "lr", 1, 52);
	/* the same metric under another job of the same length, or another
	 * rank, is another series (the cached job seed must not leak) */
	CHECK_EQ_INT(add(b, "jab", 3, "loss", 70, 70, 70), 0);
	CHECK_EQ_INT(add(b, "job", 5, "loss", 80, 80, 80), 0);
	check_view(b, "jab", 3, "loss", 1, 70);
	check_view(b, "job", 5, "loss", 1, 80);
	check_view(b, "job", 3, "loss", 3, 0);
	/* an append that does not fit rolls back to the grouped state */
	struct mdl_batch *g;
	CHECK_EQ_INT(mdl_batch_new(1000, 100, &g), 0);
	CHECK_EQ_INT(add(g, "j", 1, "a", 6, 6, 6), 0); /* goes back to big's first series */
	CHECK_EQ_INT(add(g, "j", 9, "z", 7, 7, 7), 0); /* one point too many */
	CHECK_EQ_INT(add(big, "j", 1, "a", 5, 5, 5), 0);
	CHECK_EQ_INT(add(big, "j", 0, "a", 1, 1, 1), 0);
	CHECK_EQ_INT(mdl_batch_append(big, g), RDB_ELIMIT);
	CHECK_EQ_INT(mdl_batch_points(big), 2);
	check_view(big, "j", 1, "a", 1, 5);
	check_view(big, "j", 0, "a", 1, 1);
	mdl_batch_reset(b);
	CHECK_EQ_INT(add(b, "job", 3, "loss", 90, 90, 90), 0);
	check_view(b, "job", 3, "loss", 1, 90);
	mdl_batch_free(g);
	mdl_batch_free(big);
	mdl_batch_free(b);
}

/* ---- compact points and series definitions (types 5 and 4) ---- */

/* The test's series definitions: sid i of the table names keys[i]. */
struct key_table {
	size_t n;
	uint64_t sid[64];
	struct sto_wal_key k[64];
	char job[64][MDL_JOB_MAX + 1];
	char metric[64][MDL_METRIC_MAX + 1];
};

static const struct sto_wal_key *table_get(void *arg, uint64_t sid)
{
	struct key_table *t = arg;
	for (size_t i = 0; i < t->n; i++)
		if (t->sid[i] == sid)
			return &t->k[i];
	return NULL;
}

/* Defines the batch's series in t with ids from sids[] (same order). */
static void table_fill(struct key_table *t, const struct mdl_batch *b, const uint64_t *sids)
{
	t->n = mdl_batch_nseries(b);
	for (size_t i = 0; i < t->n; i++) {
		const struct mdl_batch_series *s = mdl_batch_series_at(b, i);
		memcpy(t->job[i], s->key.job, s->job_len + 1u);
		memcpy(t->metric[i], s->key.metric, s->metric_len + 1u);
		t->sid[i] = sids[i];
		t->k[i] = (struct sto_wal_key){.job = t->job[i],
					       .metric = t->metric[i],
					       .rank = s->key.rank,
					       .job_len = s->job_len,
					       .metric_len = s->metric_len};
	}
}

static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

/* A random batch: up to 40 series, 1..50 points each (interleaved), steps
 * going up and down and missing, attempts changing, extreme timestamps. */
static void random_batch(struct mdl_batch *b, uint64_t *sids)
{
	char job[MDL_JOB_MAX + 1], metric[MDL_METRIC_MAX + 1];
	mdl_batch_reset(b);
	size_t nseries = 1 + rnd() % 40;
	for (size_t i = 0; i < nseries; i++) {
		size_t jl = i == 0 ? MDL_JOB_MAX : 1 + rnd() % 20;
		size_t ml = i == 0 ? MDL_METRIC_MAX : 1 + rnd() % 30;
		memset(job, 'a' + (int)(i % 26), jl);
		job[jl] = 0;
		memset(metric, 'm', ml);
		metric[ml] = 0;
		uint32_t rank = i == 1 ? MDL_RANK_JOB : (uint32_t)(rnd() % 5000);
		size_t npts = 1 + rnd() % 50;
		for (size_t k = 0; k < npts; k++) {
			int64_t ts =
			    (int64_t)(rnd() % 4 == 0 ? rnd()
						     : 1700000000000000000ull + rnd() % 1000000);
			if (k == 3)
				ts = INT64_MIN;
			if (k == 4)
				ts = INT64_MAX;
			int64_t step =
			    rnd() % 3 == 0 ? MDL_STEP_NONE : (int64_t)(rnd() % 100000) - 500;
			uint32_t attempt = rnd() % 5 == 0 ? (uint32_t)rnd() : (uint32_t)(rnd() % 3);
			CHECK_EQ_INT(
			    mdl_batch_add(b, job, jl, rank, metric, ml, ts, step, attempt, rnd()),
			    0);
		}
	}
	for (size_t i = 0; i < mdl_batch_nseries(b); i++)
		sids[i] =
		    i % 7 == 3 ? UINT64_MAX - i : (rnd() % 2 ? 1 + i * 3 : 1 + rnd() % 1000000);
}

static void test_compact_round_trip(void)
{
	struct mdl_batch *a, *b;
	static struct key_table t;
	uint64_t sids[64];
	CHECK_EQ_INT(mdl_batch_new(100000, 64, &a), 0);
	CHECK_EQ_INT(mdl_batch_new(100000, 64, &b), 0);
	struct rdb_buf buf;
	rdb_buf_init(&buf, 1 << 24);
	int bad = 0;
	for (int iter = 0; iter < 300; iter++) {
		random_batch(a, sids);
		table_fill(&t, a, sids);
		buf.len = 0;
		CHECK_EQ_INT(rdb_buf_append(&buf, "pre", 3), 0);
		CHECK_EQ_INT(sto_batch_encode_compact(a, sids, &buf), 0);
		uint64_t missing = 0;
		if (sto_batch_decode_compact(b, buf.data + 3, buf.len - 3, table_get, &t,
					     &missing) != 0 ||
		    !same(a, b) || !same(b, a))
			bad++;
	}
	CHECK_EQ_INT(bad, 0);
	/* The per-rank shape: 32 metrics x 1 point with one ts/step/attempt
	 * and consecutive ids takes ~13.5 bytes per point, a quarter or less of
	 * the 54 the named layout takes. */
	mdl_batch_reset(a);
	char metric[32];
	for (int m = 0; m < 32; m++) {
		snprintf(metric, sizeof(metric), "train/metric_%02d", m);
		CHECK_EQ_INT(mdl_batch_add(a, "job-4096", 8, 1234, metric, strlen(metric),
					   1763900000123456789, 1000, 0, rnd()),
			     0);
		sids[m] = 131000 + (uint64_t)m;
	}
	table_fill(&t, a, sids);
	buf.len = 0;
	CHECK_EQ_INT(sto_batch_encode_compact(a, sids, &buf), 0);
	CHECK(buf.len <= 32 * 13 + 32);
	struct rdb_buf named;
	rdb_buf_init(&named, 1 << 20);
	CHECK_EQ_INT(sto_batch_encode(a, &named), 0);
	CHECK(buf.len * 4 <= named.len);
	uint64_t missing = 0;
	CHECK_EQ_INT(sto_batch_decode_compact(b, buf.data, buf.len, table_get, &t, &missing), 0);
	CHECK(same(a, b));
	/* A series id the table does not know. */
	t.sid[5] = 7;
	CHECK_EQ_INT(sto_batch_decode_compact(b, buf.data, buf.len, table_get, &t, &missing),
		     RDB_ENOTFOUND);
	CHECK_EQ_INT(missing, 131005);
	/* An empty batch. */
	mdl_batch_reset(a);
	buf.len = 0;
	CHECK_EQ_INT(sto_batch_encode_compact(a, sids, &buf), 0);
	CHECK_EQ_INT(buf.len, 4);
	CHECK_EQ_INT(sto_batch_decode_compact(b, buf.data, buf.len, table_get, &t, &missing), 0);
	CHECK_EQ_INT(mdl_batch_points(b), 0);
	rdb_buf_free(&named);
	rdb_buf_free(&buf);
	mdl_batch_free(a);
	mdl_batch_free(b);
}

static void test_compact_hostile(void)
{
	struct mdl_batch *a, *b;
	static struct key_table t;
	uint64_t sids[64], missing;
	CHECK_EQ_INT(mdl_batch_new(100000, 64, &a), 0);
	CHECK_EQ_INT(mdl_batch_new(100000, 64, &b), 0);
	struct rdb_buf buf;
	rdb_buf_init(&buf, 1 << 24);
	random_batch(a, sids);
	table_fill(&t, a, sids);
	CHECK_EQ_INT(sto_batch_encode_compact(a, sids, &buf), 0);
	int bad = 0;
	for (size_t n = 0; n < buf.len; n++)
		if (sto_batch_decode_compact(b, buf.data, n, table_get, &t, &missing) !=
		    RDB_ECORRUPT)
			bad++;
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(rdb_buf_putc(&buf, 0), 0);
	CHECK_EQ_INT(sto_batch_decode_compact(b, buf.data, buf.len, table_get, &t, &missing),
		     RDB_ECORRUPT);
	buf.len--;
	/* Flipped bits: the decoder answers, never anything but its errors. */
	for (size_t i = 0; i < buf.len; i++) {
		for (int bit = 0; bit < 8; bit += 3) {
			buf.data[i] ^= (uint8_t)(1u << bit);
			int rc =
			    sto_batch_decode_compact(b, buf.data, buf.len, table_get, &t, &missing);
			CHECK(rc == 0 || rc == RDB_ECORRUPT || rc == RDB_ELIMIT ||
			      rc == RDB_ENOTFOUND);
			buf.data[i] ^= (uint8_t)(1u << bit);
		}
	}
	CHECK_EQ_INT(sto_batch_decode_compact(b, buf.data, buf.len, table_get, &t, &missing), 0);
	/* Hand-made: a huge series count, a huge point count, an 11-byte
	 * varint, a 10-byte varint past 64 bits, an attempt past 32 bits, an
	 * invalid defined key. */
	t.n = 1;
	t.sid[0] = 1;
	t.k[0] = (struct sto_wal_key){.job = "j", .metric = "m", .job_len = 1, .metric_len = 1};
	static const uint8_t many[] = {0xff, 0xff, 0xff, 0xff, 2, 1};
	CHECK_EQ_INT(sto_batch_decode_compact(b, many, sizeof(many), table_get, &t, &missing),
		     RDB_ECORRUPT);
	static const uint8_t npts[] = {1, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff, 0x0f, 0,
				       0, 0, 0, 0, 0, 0,    0,	  0,	0,    0,    0};
	CHECK_EQ_INT(sto_batch_decode_compact(b, npts, sizeof(npts), table_get, &t, &missing),
		     RDB_ECORRUPT);
	static const uint8_t ok[] = {1, 0, 0, 0, 2, 1, 2, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};
	CHECK_EQ_INT(sto_batch_decode_compact(b, ok, sizeof(ok), table_get, &t, &missing), 0);
	CHECK_EQ_INT(mdl_batch_points(b), 1);
	static const uint8_t longv[] = {1,    0,    0,	  0,	2,    1,    0x80, 0x80, 0x80,
					0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0,
					0,    1,    2,	  3,	4,    5,    6,	  7,	8};
	CHECK_EQ_INT(sto_batch_decode_compact(b, longv, sizeof(longv), table_get, &t, &missing),
		     RDB_ECORRUPT);
	static const uint8_t wide[] = {1,    0,	   0,	 0,    2,    1,	   0xff, 0xff, 0xff,
				       0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0,    0,
				       1,    2,	   3,	 4,    5,    6,	   7,	 8};
	CHECK_EQ_INT(sto_batch_decode_compact(b, wide, sizeof(wide), table_get, &t, &missing),
		     RDB_ECORRUPT);
	/* attempt delta zigzag(2^32) from 0 */
	static const uint8_t att[] = {1,    0,	  0, 0, 2, 1, 0, 0, 0x80, 0x80, 0x80,
				      0x80, 0x20, 1, 2, 3, 4, 5, 6, 7,	  8};
	CHECK_EQ_INT(sto_batch_decode_compact(b, att, sizeof(att), table_get, &t, &missing),
		     RDB_ECORRUPT);
	/* Series id 0 (a delta of 0 from the start) is invalid, not merely
	 * undefined: the lookup is never asked for it. */
	static const uint8_t sid0[] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};
	CHECK_EQ_INT(sto_batch_decode_compact(b, sid0, sizeof(sid0), table_get, &t, &missing),
		     RDB_ECORRUPT);
	t.k[0].job = "bad job";
	t.k[0].job_len = 7;
	CHECK_EQ_INT(sto_batch_decode_compact(b, ok, sizeof(ok), table_get, &t, &missing),
		     RDB_ECORRUPT);
	rdb_buf_free(&buf);
	mdl_batch_free(a);
	mdl_batch_free(b);
}

/* The split replay and verify share: the id bound, every part inside
 * the payload, nothing after the events part. */
static void test_batch_split(void)
{
	uint8_t rec[1 + 129 + 4 + 2 + 4 + 3 + 1];
	struct sto_batch_parts bp;
	for (size_t il = 127; il <= 129; il++) {
		size_t o = 0;
		rec[o++] = (uint8_t)il;
		memset(rec + o, 'i', il);
		o += il;
		rdb_put_le32(rec + o, 2);
		memcpy(rec + o + 4, "pp", 2);
		o += 6;
		rdb_put_le32(rec + o, 3);
		memcpy(rec + o + 4, "eee", 3);
		o += 7;
		int want = il <= STO_BATCH_ID_MAX ? 0 : RDB_ECORRUPT;
		CHECK_EQ_INT(sto_batch_split(rec, o, &bp), want);
		if (want == 0)
			CHECK(bp.id_len == il && bp.id == (const char *)rec + 1 &&
			      bp.points_len == 2 && !memcmp(bp.points, "pp", 2) &&
			      bp.events_len == 3 && !memcmp(bp.events, "eee", 3));
		int bad = 0;
		for (size_t n = 0; n < o; n++)
			bad += sto_batch_split(rec, n, &bp) != RDB_ECORRUPT;
		CHECK_EQ_INT(bad, 0);
		rec[o] = 0;
		CHECK_EQ_INT(sto_batch_split(rec, o + 1, &bp), RDB_ECORRUPT);
	}
	static const uint8_t empty[] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
	CHECK_EQ_INT(sto_batch_split(empty, sizeof(empty), &bp), 0);
	CHECK(bp.id_len == 0 && bp.points_len == 0 && bp.events_len == 0);
	static const uint8_t huge[] = {0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
	CHECK_EQ_INT(sto_batch_split(huge, sizeof(huge), &bp), RDB_ECORRUPT);
}

struct def_seen {
	size_t n;
	uint64_t sid[8];
	char key[8][400];
};

static int def_collect(void *arg, uint64_t sid, const struct sto_wal_key *k)
{
	struct def_seen *d = arg;
	if (d->n == 8)
		return -E2BIG;
	d->sid[d->n] = sid;
	snprintf(d->key[d->n], sizeof(d->key[0]), "%.*s/%u/%.*s", (int)k->job_len, k->job, k->rank,
		 (int)k->metric_len, k->metric);
	d->n++;
	return 0;
}

static void test_defs(void)
{
	char job[MDL_JOB_MAX + 1], metric[MDL_METRIC_MAX + 1];
	memset(job, 'j', MDL_JOB_MAX);
	job[MDL_JOB_MAX] = 0;
	memset(metric, 'm', MDL_METRIC_MAX);
	metric[MDL_METRIC_MAX] = 0;
	struct rdb_buf buf;
	rdb_buf_init(&buf, 1 << 20);
	CHECK_EQ_INT(rdb_buf_append(&buf, "xy", 2), 0);
	struct sto_wal_key k1 = {
	    .job = "job-1", .metric = "loss", .rank = 7, .job_len = 5, .metric_len = 4};
	struct sto_wal_key k2 = {.job = job,
				 .metric = metric,
				 .rank = MDL_RANK_JOB,
				 .job_len = MDL_JOB_MAX,
				 .metric_len = MDL_METRIC_MAX};
	CHECK_EQ_INT(sto_defs_add(&buf, 2, 42, &k1), 0);
	CHECK_EQ_INT(sto_defs_add(&buf, 2, UINT64_MAX, &k2), 0);
	CHECK_EQ_INT(buf.len, 2 + 4 + 15 + 9 + 15 + MDL_JOB_MAX + MDL_METRIC_MAX);
	CHECK(buf.len - 2 - 4 - 15 - 9 <= STO_WAL_DEF_MAX_BYTES);
	struct def_seen d = {0};
	CHECK_EQ_INT(sto_defs_decode(buf.data + 2, buf.len - 2, def_collect, &d), 0);
	CHECK_EQ_INT(d.n, 2);
	CHECK(d.sid[0] == 42 && strcmp(d.key[0], "job-1/7/loss") == 0);
	CHECK(d.sid[1] == UINT64_MAX && strlen(d.key[1]) == MDL_JOB_MAX + 12 + MDL_METRIC_MAX);
	/* Invalid keys are refused on the way in. */
	struct sto_wal_key empty = {.job = "", .metric = "m", .job_len = 0, .metric_len = 1};
	CHECK_EQ_INT(sto_defs_add(&buf, 2, 1, &empty), -EINVAL);
	/* Every prefix, trailing bytes, flips: rejected before any call. */
	int bad = 0;
	for (size_t n = 0; n < buf.len - 2; n++) {
		d.n = 0;
		if (sto_defs_decode(buf.data + 2, n, def_collect, &d) != RDB_ECORRUPT || d.n)
			bad++;
	}
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(rdb_buf_putc(&buf, 0), 0);
	CHECK_EQ_INT(sto_defs_decode(buf.data + 2, buf.len - 2, def_collect, &d), RDB_ECORRUPT);
	buf.len--;
	for (size_t i = 2; i < buf.len; i++) {
		buf.data[i] ^= 0x41;
		d.n = 0;
		int rc = sto_defs_decode(buf.data + 2, buf.len - 2, def_collect, &d);
		CHECK(rc == 0 || (rc == RDB_ECORRUPT && d.n == 0));
		buf.data[i] ^= 0x41;
	}
	static const uint8_t huge_n[] = {0xff, 0xff, 0xff, 0xff, 0, 0};
	CHECK_EQ_INT(sto_defs_decode(huge_n, sizeof(huge_n), def_collect, &d), RDB_ECORRUPT);
	/* The callback's error stops the walk. */
	struct def_seen full = {.n = 8};
	CHECK_EQ_INT(sto_defs_decode(buf.data + 2, buf.len - 2, def_collect, &full), -E2BIG);
	/* Series id 0 is invalid: refused on the way in, and a record whose
	 * third definition has it is refused whole (no definition of it is
	 * applied), so that replay never half-applies one. */
	CHECK_EQ_INT(sto_defs_add(&buf, 2, 0, &k1), -EINVAL);
	buf.len = 0;
	CHECK_EQ_INT(sto_defs_add(&buf, 0, 1, &k1), 0);
	CHECK_EQ_INT(sto_defs_add(&buf, 0, 2, &k1), 0);
	size_t third = buf.len;
	CHECK_EQ_INT(sto_defs_add(&buf, 0, 3, &k1), 0);
	CHECK_EQ_INT(sto_defs_add(&buf, 0, 4, &k1), 0);
	d.n = 0;
	CHECK_EQ_INT(sto_defs_decode(buf.data, buf.len, def_collect, &d), 0);
	CHECK_EQ_INT(d.n, 4);
	rdb_put_le64(buf.data + third, 0);
	d.n = 0;
	CHECK_EQ_INT(sto_defs_decode(buf.data, buf.len, def_collect, &d), RDB_ECORRUPT);
	CHECK_EQ_INT(d.n, 0);
	/* The same id twice in one record is valid: the later one holds. */
	rdb_put_le64(buf.data + third, 1);
	d.n = 0;
	CHECK_EQ_INT(sto_defs_decode(buf.data, buf.len, def_collect, &d), 0);
	CHECK(d.n == 4 && d.sid[0] == 1 && d.sid[2] == 1);
	rdb_buf_free(&buf);
}

int main(void)
{
	RUN(test_add_group);
	RUN(test_series_numbers);
	RUN(test_many_series);
	RUN(test_bounds);
	RUN(test_round_trip);
	RUN(test_decode_hostile);
	RUN(test_compact_round_trip);
	RUN(test_compact_hostile);
	RUN(test_defs);
	RUN(test_batch_split);
	RUN(test_reset_reuse);
	RUN(test_cache);
	RUN(test_reserve);
	RUN(test_cols_growth);
	RUN(test_cols_reserve_moving);
	RUN(test_cols_one_block);
	RUN(test_series_hash);
	RUN(test_group_in_order);
	RUN(test_cache_thread_exit);
	return check_summary("batch");
}
