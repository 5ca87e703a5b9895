/* test_index.c - unit tests for the LMDB index (storage/index/index.h): open and
 * reopen, format version check, meta counters, series ids and key layout,
 * job prefix isolation, chunk overlap scans, stats bit-exactness, pending
 * entries and map-full behaviour. Each test uses its own index directory
 * under a mkdtemp directory in $RDB_TEST_TMP (or /tmp), removed at the end.
 */
#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_le.h"
#include "storage/events/evstore.h"
#include "storage/index/index.h"
#include "tests/unit/check.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAP_BYTES (64ull << 20)

static char tmp_root[512];
static int dir_seq;

/* Removes every file in dir (LMDB writes only data.mdb and lock.mdb), then dir. */
static void rm_dir(const char *dir)
{
	char path[1024];
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

/* A fresh, not yet existing index directory path (sto_index_open creates it). */
static void new_dir(char *path, size_t size)
{
	snprintf(path, size, "%s/ix%d", tmp_root, dir_seq++);
}

static struct sto_index *open_ok(const char *dir, uint64_t map_bytes)
{
	struct sto_index *ix = NULL;
	int ret = sto_index_open(dir, map_bytes, &ix);

	CHECK_EQ_INT(ret, 0);
	CHECK(ix != NULL);
	return ix;
}

static struct sto_txn *begin(struct sto_index *ix, bool write)
{
	struct sto_txn *t = NULL;

	CHECK_EQ_INT(sto_txn_begin(ix, write, &t), 0);
	return t;
}

static void make_key(struct mdl_series_key *k, const char *job, uint32_t rank, const char *metric)
{
	memset(k, 0, sizeof(*k));
	snprintf(k->job, sizeof(k->job), "%s", job);
	k->rank = rank;
	snprintf(k->metric, sizeof(k->metric), "%s", metric);
}

static uint64_t create_series(struct sto_txn *t, const char *job, uint32_t rank, const char *metric)
{
	struct mdl_series_key k;
	uint64_t id = 0;
	bool created = false;

	make_key(&k, job, rank, metric);
	CHECK_EQ_INT(sto_series_get_or_create(t, &k, &id, &created), 0);
	CHECK(created);
	return id;
}

static struct sto_chunk_ref make_ref(uint64_t series, int64_t min_ts, int64_t max_ts, uint64_t uid)
{
	struct sto_chunk_ref r;

	memset(&r, 0, sizeof(r));
	r.series_id = series;
	r.uid = uid;
	r.segment_id = uid * 3;
	r.offset = uid * 1000;
	r.length = (uint32_t)(uid + 48);
	r.gen = uid / 2;
	r.stats.count = 1;
	r.stats.min_ts_ns = min_ts;
	r.stats.max_ts_ns = max_ts;
	r.stats.min_step = MDL_STEP_NONE;
	r.stats.max_step = MDL_STEP_NONE;
	return r;
}

/* Collects chunk refs a scan reports. */
#define MAX_GOT 1024
struct got {
	size_t n;
	int stop_after; /* return 99 after this many calls; 0 = never */
	struct sto_chunk_ref refs[MAX_GOT];
};

static int collect_chunk(void *arg, const struct sto_chunk_ref *ref)
{
	struct got *g = arg;

	if (g->n < MAX_GOT)
		g->refs[g->n] = *ref;
	g->n++;
	return g->stop_after && (int)g->n >= g->stop_after ? 99 : 0;
}

static size_t scan_chunks(struct sto_index *ix, uint64_t series, int64_t from, int64_t to,
			  struct got *g)
{
	struct sto_txn *t = begin(ix, false);

	memset(g, 0, sizeof(*g));
	CHECK_EQ_INT(sto_chunk_scan(t, series, from, to, collect_chunk, g), 0);
	sto_txn_abort(t);
	return g->n;
}

static void test_open_reopen(void)
{
	char dir[600];
	struct sto_index *ix;
	struct sto_txn *t;
	struct sto_chunk_ref r = make_ref(0, 100, 200, 7);
	struct got g;
	uint64_t v = 0, id, id2 = 0;
	struct mdl_series_key k;

	new_dir(dir, sizeof(dir));
	ix = open_ok(dir, MAP_BYTES);
	t = begin(ix, true);
	CHECK_EQ_INT(sto_meta_put(t, "ckpt_gen", 42), 0);
	id = create_series(t, "job1", 3, "loss");
	r.series_id = id;
	CHECK_EQ_INT(sto_chunk_put(t, &r), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	sto_index_close(ix);

	ix = open_ok(dir, MAP_BYTES);
	t = begin(ix, false);
	CHECK_EQ_INT(sto_meta_get(t, "ckpt_gen", &v), 0);
	CHECK_EQ_INT(v, 42);
	CHECK_EQ_INT(sto_meta_get(t, "format_version", &v), 0);
	CHECK_EQ_INT(v, STO_FORMAT_VERSION);
	make_key(&k, "job1", 3, "loss");
	CHECK_EQ_INT(sto_series_lookup(t, &k, &id2), 0);
	CHECK_EQ_INT(id2, id);
	sto_txn_abort(t);
	CHECK_EQ_INT(scan_chunks(ix, id, 0, 1000, &g), 1);
	CHECK_EQ_INT(g.refs[0].uid, 7);
	CHECK_EQ_INT(g.refs[0].offset, 7000);
	sto_index_close(ix);
	sto_index_close(NULL);
	sto_txn_abort(NULL);
	rm_dir(dir);
}

static void test_format_mismatch(void)
{
	char dir[600];
	struct sto_index *ix, *ix2 = NULL;
	struct sto_txn *t;

	new_dir(dir, sizeof(dir));
	ix = open_ok(dir, MAP_BYTES);
	t = begin(ix, true);
	CHECK_EQ_INT(sto_meta_put(t, "format_version", STO_FORMAT_VERSION + 1), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	sto_index_close(ix);

	CHECK_EQ_INT(sto_index_open(dir, MAP_BYTES, &ix2), RDB_EFORMAT);
	CHECK(ix2 == NULL);
	rm_dir(dir);
}

/* A format 3 index (checksums already in chunk, series and rollup values)
 * opens as the current format without rewriting those (format 5 seals the
 * other tables' values; these, written by this build, have their trailers
 * already): its entries read back checked, format_version says 5.
 * Read-only opens leave it at 3. */
static void test_format3_raised(void)
{
	char dir[600];
	struct sto_index *ix;
	struct sto_txn *t;
	struct sto_chunk_ref r = make_ref(0, 100, 200, 7);
	struct got g;
	uint64_t v = 0, id;

	new_dir(dir, sizeof(dir));
	ix = open_ok(dir, MAP_BYTES);
	t = begin(ix, true);
	id = create_series(t, "job1", 3, "loss");
	r.series_id = id;
	CHECK_EQ_INT(sto_chunk_put(t, &r), 0);
	CHECK_EQ_INT(sto_meta_put(t, "format_version", STO_FORMAT_INDEX_CHECKSUMS), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	sto_index_close(ix);

	ix = NULL;
	CHECK_EQ_INT(sto_index_open_ro(dir, MAP_BYTES, &ix), 0);
	t = begin(ix, false);
	CHECK_EQ_INT(sto_meta_get(t, "format_version", &v), 0);
	CHECK_EQ_INT(v, STO_FORMAT_INDEX_CHECKSUMS);
	sto_txn_abort(t);
	sto_index_close(ix);

	ix = open_ok(dir, MAP_BYTES);
	t = begin(ix, false);
	CHECK_EQ_INT(sto_meta_get(t, "format_version", &v), 0);
	CHECK_EQ_INT(v, STO_FORMAT_VERSION);
	sto_txn_abort(t);
	CHECK_EQ_INT(scan_chunks(ix, id, 0, 1000, &g), 1);
	CHECK(!g.refs[0].damaged && g.refs[0].uid == 7);
	sto_index_close(ix);
	rm_dir(dir);
}

static void test_open_errors(void)
{
	char dir[600];
	struct sto_index *ix = NULL;

	snprintf(dir, sizeof(dir), "%s/no/such/parent", tmp_root);
	CHECK_EQ_INT(sto_index_open(dir, MAP_BYTES, &ix), -ENOENT);
	new_dir(dir, sizeof(dir));
	CHECK_EQ_INT(sto_index_open(dir, 0, &ix), -EINVAL);
	CHECK(ix == NULL);
}

static void test_meta_counters(void)
{
	char dir[600];
	struct sto_index *ix;
	struct sto_txn *t;
	uint64_t v = 77;

	new_dir(dir, sizeof(dir));
	ix = open_ok(dir, MAP_BYTES);
	t = begin(ix, true);
	CHECK_EQ_INT(sto_meta_get(t, "next_chunk_uid", &v), RDB_ENOTFOUND);
	CHECK_EQ_INT(v, 77); /* untouched on failure */
	for (uint64_t i = 0; i < 5; i++) {
		CHECK_EQ_INT(sto_meta_next(t, "next_chunk_uid", &v), 0);
		CHECK_EQ_INT(v, i);
	}
	CHECK_EQ_INT(sto_meta_get(t, "next_chunk_uid", &v), 0);
	CHECK_EQ_INT(v, 5);
	CHECK_EQ_INT(sto_meta_put(t, "next_segment_id", 1000), 0);
	CHECK_EQ_INT(sto_meta_next(t, "next_segment_id", &v), 0);
	CHECK_EQ_INT(v, 1000);
	CHECK(sto_meta_get(t, "", &v) < 0);
	CHECK_EQ_INT(create_series(t, "j", 0, "m"), 1); /* ids start at 1 */
	CHECK_EQ_INT(create_series(t, "j", 1, "m"), 2);
	CHECK_EQ_INT(sto_txn_commit(t), 0);

	t = begin(ix, false);
	CHECK_EQ_INT(sto_meta_get(t, "next_segment_id", &v), 0);
	CHECK_EQ_INT(v, 1001);
	CHECK_EQ_INT(sto_meta_get(t, "next_series_id", &v), 0);
	CHECK_EQ_INT(v, 3);
	CHECK(sto_meta_next(t, "next_segment_id", &v) < 0); /* read txn */
	sto_txn_abort(t);
	sto_index_close(ix);
	rm_dir(dir);
}

static void check_round_trip(struct sto_txn *t, const char *job, uint32_t rank, const char *metric)
{
	struct mdl_series_key k, back;
	uint64_t id = 0, id2 = 0, id3 = 0;
	bool created = false;

	make_key(&k, job, rank, metric);
	CHECK_EQ_INT(sto_series_lookup(t, &k, &id), RDB_ENOTFOUND);
	CHECK_EQ_INT(sto_series_get_or_create(t, &k, &id, &created), 0);
	CHECK(created);
	CHECK(id != 0);
	CHECK_EQ_INT(sto_series_get_or_create(t, &k, &id2, &created), 0);
	CHECK(!created);
	CHECK_EQ_INT(id2, id);
	CHECK_EQ_INT(sto_series_lookup(t, &k, &id3), 0);
	CHECK_EQ_INT(id3, id);
	memset(&back, 0x55, sizeof(back));
	CHECK_EQ_INT(sto_series_key_of(t, id, &back), 0);
	CHECK(strcmp(back.job, job) == 0);
	CHECK_EQ_INT(back.rank, rank);
	CHECK(strcmp(back.metric, metric) == 0);
}

static void test_series(void)
{
	char dir[600], long_job[MDL_JOB_MAX + 1], long_metric[MDL_METRIC_MAX + 1];
	struct sto_index *ix;
	struct sto_txn *t;
	struct mdl_series_key k, out;
	uint64_t id;
	bool created;

	memset(long_job, 'J', MDL_JOB_MAX);
	long_job[MDL_JOB_MAX] = 0;
	memset(long_metric, 'm', MDL_METRIC_MAX);
	long_metric[MDL_METRIC_MAX] = 0;
	new_dir(dir, sizeof(dir));
	ix = open_ok(dir, MAP_BYTES);
	t = begin(ix, true);
	check_round_trip(t, "run-7", 0, "loss");
	check_round_trip(t, "run-7", MDL_RANK_JOB, "loss");
	check_round_trip(t, "run-7", MDL_RANK_MAX, "loss");
	check_round_trip(t, "run-7", 0, "loss.x{}=,");
	check_round_trip(t, long_job, 1, long_metric);
	check_round_trip(t, long_job, MDL_RANK_JOB, "m");

	CHECK_EQ_INT(sto_series_key_of(t, 0, &out), RDB_ENOTFOUND);
	CHECK_EQ_INT(sto_series_key_of(t, 999, &out), RDB_ENOTFOUND);
	make_key(&k, "", 0, "loss");
	CHECK_EQ_INT(sto_series_get_or_create(t, &k, &id, &created), RDB_EINVAL);
	make_key(&k, "j", 0, "");
	CHECK_EQ_INT(sto_series_lookup(t, &k, &id), RDB_EINVAL);
	make_key(&k, "j", 0, "m");
	memset(k.job, 'x', sizeof(k.job)); /* no terminator within bounds */
	CHECK_EQ_INT(sto_series_lookup(t, &k, &id), RDB_EINVAL);
	make_key(&k, "j", 0, "m");
	memset(k.metric, 'x', sizeof(k.metric));
	CHECK_EQ_INT(sto_series_lookup(t, &k, &id), RDB_EINVAL);
	CHECK_EQ_INT(sto_txn_commit(t), 0);

	t = begin(ix, false);
	make_key(&k, "run-7", MDL_RANK_JOB, "loss");
	CHECK_EQ_INT(sto_series_get_or_create(t, &k, &id, &created), -EACCES);
	sto_txn_abort(t);
	sto_index_close(ix);
	rm_dir(dir);
}

/* Ids reserved in a block: consecutive, past every id in use, the series
 * created with them read back both ways; an id already used is refused as
 * corruption, and the next get_or_create continues after the block. */
static void test_series_id_block(void)
{
	char dir[600];
	struct sto_index *ix;
	struct sto_txn *t;
	struct mdl_series_key k, back;
	uint64_t first = 0, id = 0, id2 = 0;
	bool created = false;

	new_dir(dir, sizeof(dir));
	ix = open_ok(dir, MAP_BYTES);
	t = begin(ix, true);
	make_key(&k, "blk", 0, "a");
	CHECK_EQ_INT(sto_series_get_or_create(t, &k, &id, &created), 0);
	CHECK_EQ_INT(id, 1);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	t = begin(ix, true);
	CHECK_EQ_INT(sto_series_ids_reserve(t, 3, &first), 0);
	CHECK_EQ_INT(first, 2);
	CHECK_EQ_INT(sto_series_ids_reserve(t, 0, &first), RDB_EINVAL);
	for (uint32_t r = 1; r <= 3; r++) {
		make_key(&k, "blk", r, "a");
		CHECK_EQ_INT(sto_series_create_id(t, &k, 1 + r), 0);
		CHECK_EQ_INT(sto_series_lookup(t, &k, &id2), 0);
		CHECK_EQ_INT(id2, 1 + r);
		CHECK_EQ_INT(sto_series_key_of(t, 1 + r, &back), 0);
		CHECK_EQ_INT(back.rank, r);
	}
	make_key(&k, "blk", 9, "a");
	CHECK_EQ_INT(sto_series_create_id(t, &k, 3), RDB_ECORRUPT); /* id 3 is rank 2's */
	sto_txn_abort(t);
	t = begin(ix, true);
	make_key(&k, "blk", 0, "a");
	CHECK_EQ_INT(sto_series_lookup(t, &k, &id), 0);
	CHECK_EQ_INT(sto_series_ids_reserve(t, 2, &first), 0);
	CHECK_EQ_INT(first, 2);				       /* the aborted block was not kept */
	CHECK_EQ_INT(sto_meta_put(t, "next_series_id", 2), 0); /* given back */
	make_key(&k, "blk", 5, "b");
	CHECK_EQ_INT(sto_series_get_or_create(t, &k, &id, &created), 0);
	CHECK(created);
	CHECK_EQ_INT(id, 2);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	t = begin(ix, false);
	CHECK_EQ_INT(sto_series_ids_reserve(t, 1, &first), -EACCES);
	CHECK_EQ_INT(sto_series_create_id(t, &k, 7), -EACCES);
	sto_txn_abort(t);
	sto_index_close(ix);
	rm_dir(dir);
}

/* Collects series scan results. */
struct series_got {
	size_t n;
	int stop_after;
	struct mdl_series_key keys[32];
	uint64_t ids[32];
};

static int collect_series(void *arg, const struct mdl_series_key *k, uint64_t id)
{
	struct series_got *g = arg;

	if (g->n < 32) {
		g->keys[g->n] = *k;
		g->ids[g->n] = id;
	}
	g->n++;
	return g->stop_after && (int)g->n >= g->stop_after ? 42 : 0;
}

struct jobs_got {
	size_t n;
	char jobs[8][MDL_JOB_MAX + 1];
	uint64_t counts[8];
};

static int collect_job(void *arg, const char *job, uint64_t nseries)
{
	struct jobs_got *g = arg;

	if (g->n < 8) {
		snprintf(g->jobs[g->n], sizeof(g->jobs[0]), "%s", job);
		g->counts[g->n] = nseries;
	}
	g->n++;
	return 0;
}

static bool want_loss(void *arg, const char *metric, size_t len)
{
	(void)arg;
	return len == 4 && memcmp(metric, "loss", 4) == 0;
}

static bool want_none(void *arg, const char *metric, size_t len)
{
	(void)arg;
	(void)metric;
	(void)len;
	return false;
}

static void check_job_scan(struct sto_txn *t, const char *job, size_t want)
{
	struct series_got g;

	memset(&g, 0, sizeof(g));
	CHECK_EQ_INT(sto_series_scan(t, job, collect_series, &g), 0);
	CHECK_EQ_INT(g.n, want);
	for (size_t i = 0; i < g.n && i < 32; i++)
		CHECK(strcmp(g.keys[i].job, job) == 0);
}

static void test_prefix_jobs(void)
{
	char dir[600];
	struct sto_index *ix;
	struct sto_txn *t;
	struct series_got g;
	struct jobs_got jg;
	uint64_t id_a_job;

	new_dir(dir, sizeof(dir));
	ix = open_ok(dir, MAP_BYTES);
	t = begin(ix, true);
	/* Created out of order: scans must return key order. */
	id_a_job = create_series(t, "a", MDL_RANK_JOB, "events");
	create_series(t, "ab", 0, "loss");
	create_series(t, "a", 1, "loss");
	create_series(t, "a.b", 0, "loss");
	create_series(t, "a", 0, "lr");
	create_series(t, "a", 0, "loss");
	create_series(t, "a.b", 256, "loss");
	CHECK_EQ_INT(sto_txn_commit(t), 0);

	t = begin(ix, false);
	check_job_scan(t, "a", 4);
	check_job_scan(t, "a.b", 2);
	check_job_scan(t, "ab", 1);
	check_job_scan(t, "b", 0);
	check_job_scan(t, "zzz", 0);

	memset(&g, 0, sizeof(g));
	CHECK_EQ_INT(sto_series_scan(t, "a", collect_series, &g), 0);
	CHECK_EQ_INT(g.keys[0].rank, 0);
	CHECK(strcmp(g.keys[0].metric, "loss") == 0);
	CHECK_EQ_INT(g.keys[1].rank, 0);
	CHECK(strcmp(g.keys[1].metric, "lr") == 0);
	CHECK_EQ_INT(g.keys[2].rank, 1);
	CHECK_EQ_INT(g.keys[3].rank, MDL_RANK_JOB);
	CHECK_EQ_INT(g.ids[3], id_a_job);

	memset(&g, 0, sizeof(g));
	CHECK_EQ_INT(sto_series_scan(t, NULL, collect_series, &g), 0);
	CHECK_EQ_INT(g.n, 7);
	CHECK(strcmp(g.keys[4].job, "a.b") == 0);
	CHECK_EQ_INT(g.keys[5].rank, 256); /* big-endian rank: 0 < 256 */
	CHECK(strcmp(g.keys[6].job, "ab") == 0);

	memset(&g, 0, sizeof(g));
	g.stop_after = 2;
	CHECK_EQ_INT(sto_series_scan(t, NULL, collect_series, &g), 42);
	CHECK_EQ_INT(g.n, 2);

	/* by metric name: only "loss" of job "a" (not "lr", not job "ab" or
	 * "a.b"), in key order, the ids of the full scan */
	memset(&g, 0, sizeof(g));
	CHECK_EQ_INT(sto_series_scan_metric(t, "a", want_loss, collect_series, &g), 0);
	CHECK_EQ_INT(g.n, 2);
	CHECK_EQ_INT(g.keys[0].rank, 0);
	CHECK_EQ_INT(g.keys[1].rank, 1);
	CHECK(strcmp(g.keys[0].metric, "loss") == 0 && strcmp(g.keys[1].metric, "loss") == 0);
	CHECK(strcmp(g.keys[0].job, "a") == 0 && strcmp(g.keys[1].job, "a") == 0);
	struct series_got all;
	memset(&all, 0, sizeof(all));
	CHECK_EQ_INT(sto_series_scan(t, "a", collect_series, &all), 0);
	CHECK(g.ids[0] == all.ids[0] && g.ids[1] == all.ids[2]);
	memset(&g, 0, sizeof(g));
	CHECK_EQ_INT(sto_series_scan_metric(t, "a", want_none, collect_series, &g), 0);
	CHECK_EQ_INT(g.n, 0);
	CHECK_EQ_INT(sto_series_scan_metric(t, NULL, want_loss, collect_series, &g), RDB_EINVAL);

	memset(&jg, 0, sizeof(jg));
	CHECK_EQ_INT(sto_jobs_scan(t, collect_job, &jg), 0);
	CHECK_EQ_INT(jg.n, 3);
	CHECK(strcmp(jg.jobs[0], "a") == 0);
	CHECK_EQ_INT(jg.counts[0], 4);
	CHECK(strcmp(jg.jobs[1], "a.b") == 0);
	CHECK_EQ_INT(jg.counts[1], 2);
	CHECK(strcmp(jg.jobs[2], "ab") == 0);
	CHECK_EQ_INT(jg.counts[2], 1);
	sto_txn_abort(t);
	sto_index_close(ix);
	rm_dir(dir);
}

static void test_jobs_scan_empty(void)
{
	char dir[600];
	struct sto_index *ix;
	struct sto_txn *t;
	struct jobs_got jg;

	new_dir(dir, sizeof(dir));
	ix = open_ok(dir, MAP_BYTES);
	t = begin(ix, false);
	memset(&jg, 0, sizeof(jg));
	CHECK_EQ_INT(sto_jobs_scan(t, collect_job, &jg), 0);
	CHECK_EQ_INT(jg.n, 0);
	sto_txn_abort(t);
	sto_index_close(ix);
	rm_dir(dir);
}

static void put_chunk(struct sto_index *ix, uint64_t series, int64_t min_ts, int64_t max_ts,
		      uint64_t uid)
{
	struct sto_txn *t = begin(ix, true);
	struct sto_chunk_ref r = make_ref(series, min_ts, max_ts, uid);

	CHECK_EQ_INT(sto_chunk_put(t, &r), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
}

static void test_chunk_overlap(void)
{
	char dir[600];
	struct sto_index *ix;
	struct got g;

	new_dir(dir, sizeof(dir));
	ix = open_ok(dir, MAP_BYTES);
	put_chunk(ix, 5, 0, 10, 1);
	put_chunk(ix, 5, 10, 20, 2);
	put_chunk(ix, 5, 21, 30, 3);
	put_chunk(ix, 5, -100, -50, 4);
	put_chunk(ix, 5, INT64_MIN, INT64_MIN + 5, 5);
	put_chunk(ix, 5, INT64_MAX - 1, INT64_MAX, 6);
	put_chunk(ix, 4, 0, 100, 7); /* neighbours that must not leak in */
	put_chunk(ix, 6, 0, 100, 8);

	CHECK_EQ_INT(scan_chunks(ix, 5, 10, 10, &g), 2);
	CHECK_EQ_INT(g.refs[0].uid, 1);
	CHECK_EQ_INT(g.refs[1].uid, 2);
	CHECK_EQ_INT(scan_chunks(ix, 5, 20, 20, &g), 1);
	CHECK_EQ_INT(g.refs[0].uid, 2);
	CHECK_EQ_INT(scan_chunks(ix, 5, 20, 21, &g), 2);
	CHECK_EQ_INT(g.refs[1].uid, 3);
	CHECK_EQ_INT(scan_chunks(ix, 5, 31, 1000, &g), 0);
	CHECK_EQ_INT(scan_chunks(ix, 5, -49, -1, &g), 0);
	CHECK_EQ_INT(scan_chunks(ix, 5, -60, -60, &g), 1);
	CHECK_EQ_INT(g.refs[0].uid, 4);
	CHECK_EQ_INT(g.refs[0].stats.min_ts_ns, -100);
	CHECK_EQ_INT(scan_chunks(ix, 5, -50, 0, &g), 2);
	CHECK_EQ_INT(scan_chunks(ix, 5, 11, 5, &g), 0); /* empty range */

	CHECK_EQ_INT(scan_chunks(ix, 5, INT64_MIN, INT64_MAX, &g), 6);
	CHECK_EQ_INT(g.refs[0].uid, 5); /* negative timestamps first */
	CHECK_EQ_INT(g.refs[1].uid, 4);
	CHECK_EQ_INT(g.refs[2].uid, 1);
	CHECK_EQ_INT(g.refs[5].uid, 6);
	for (size_t i = 0; i < g.n; i++)
		CHECK_EQ_INT(g.refs[i].series_id, 5);
	CHECK_EQ_INT(scan_chunks(ix, 5, INT64_MIN, INT64_MIN, &g), 1);
	CHECK_EQ_INT(scan_chunks(ix, 5, INT64_MAX, INT64_MAX, &g), 1);
	CHECK_EQ_INT(scan_chunks(ix, 99, INT64_MIN, INT64_MAX, &g), 0);
	sto_index_close(ix);
	rm_dir(dir);
}

static void test_chunk_many(void)
{
	char dir[600];
	struct sto_index *ix;
	struct sto_txn *t;
	struct got g;
	uint64_t uid = 0;

	new_dir(dir, sizeof(dir));
	ix = open_ok(dir, MAP_BYTES);
	t = begin(ix, true);
	/* 3 series x 300 chunks, interleaved, timestamps inserted descending,
	 * pairs sharing a min_ts so that uid breaks the tie. */
	for (int i = 299; i >= 0; i--) {
		for (uint64_t s = 1; s <= 3; s++) {
			int64_t ts = (int64_t)(i / 2) * 1000 - 50000;
			struct sto_chunk_ref r = make_ref(s, ts, ts + 999, 1000000 - uid++);

			CHECK_EQ_INT(sto_chunk_put(t, &r), 0);
		}
	}
	CHECK_EQ_INT(sto_txn_commit(t), 0);

	CHECK_EQ_INT(scan_chunks(ix, 2, INT64_MIN, INT64_MAX, &g), 300);
	for (size_t i = 0; i < g.n; i++) {
		CHECK_EQ_INT(g.refs[i].series_id, 2);
		if (i == 0)
			continue;
		const struct sto_chunk_ref *a = &g.refs[i - 1], *b = &g.refs[i];
		CHECK(a->stats.min_ts_ns < b->stats.min_ts_ns ||
		      (a->stats.min_ts_ns == b->stats.min_ts_ns && a->uid < b->uid));
	}
	/* [0, 0] overlaps the chunks starting at 0 only (2 of them). */
	CHECK_EQ_INT(scan_chunks(ix, 3, 0, 0, &g), 2);

	t = begin(ix, false);
	memset(&g, 0, sizeof(g));
	g.stop_after = 3;
	CHECK_EQ_INT(sto_chunk_scan(t, 1, INT64_MIN, INT64_MAX, collect_chunk, &g), 99);
	CHECK_EQ_INT(g.n, 3);
	sto_txn_abort(t);
	sto_index_close(ix);
	rm_dir(dir);
}

static void test_chunk_del(void)
{
	char dir[600];
	struct sto_index *ix;
	struct sto_txn *t;
	struct got g;

	new_dir(dir, sizeof(dir));
	ix = open_ok(dir, MAP_BYTES);
	put_chunk(ix, 1, -5, 5, 10);
	put_chunk(ix, 1, -5, 5, 11);
	t = begin(ix, true);
	CHECK_EQ_INT(sto_chunk_del(t, 1, -5, 10), 0);
	CHECK_EQ_INT(sto_chunk_del(t, 1, -5, 10), RDB_ENOTFOUND);
	CHECK_EQ_INT(sto_chunk_del(t, 1, -4, 11), RDB_ENOTFOUND); /* wrong min_ts */
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	CHECK_EQ_INT(scan_chunks(ix, 1, INT64_MIN, INT64_MAX, &g), 1);
	CHECK_EQ_INT(g.refs[0].uid, 11);
	sto_index_close(ix);
	rm_dir(dir);
}

static void test_stats_bits(void)
{
	char dir[600];
	struct sto_index *ix;
	struct sto_txn *t;
	struct sto_chunk_ref r = make_ref(9, -7, INT64_MAX, UINT64_MAX), *b;
	struct got g;

	r.segment_id = UINT64_MAX - 1;
	r.offset = 0x0123456789abcdefull;
	r.length = UINT32_MAX;
	r.gen = 0xfedcba9876543210ull;
	r.stats.count = 65536;
	r.stats.nan_count = 3;
	r.stats.min_step = INT64_MIN;
	r.stats.max_step = -1;
	r.stats.min_attempt = 0;
	r.stats.max_attempt = UINT32_MAX;
	r.stats.min = -0.0;
	r.stats.max = rdb_bits_f64(0x7ff0000000000000ull); /* +inf */
	r.stats.sum = 1e308;
	r.stats.first = MDL_VALUE_NULL_BITS;
	r.stats.last = 0xfff0000000000001ull; /* negative signalling NaN */

	new_dir(dir, sizeof(dir));
	ix = open_ok(dir, MAP_BYTES);
	t = begin(ix, true);
	CHECK_EQ_INT(sto_chunk_put(t, &r), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	CHECK_EQ_INT(scan_chunks(ix, 9, 0, 0, &g), 1);
	b = &g.refs[0];
	CHECK(b->series_id == 9 && b->uid == UINT64_MAX);
	CHECK(b->segment_id == r.segment_id && b->offset == r.offset);
	CHECK(b->length == r.length && b->gen == r.gen);
	CHECK(b->stats.count == r.stats.count && b->stats.nan_count == r.stats.nan_count);
	CHECK(b->stats.min_ts_ns == -7 && b->stats.max_ts_ns == INT64_MAX);
	CHECK(b->stats.min_step == INT64_MIN && b->stats.max_step == -1);
	CHECK(b->stats.min_attempt == 0 && b->stats.max_attempt == UINT32_MAX);
	CHECK(rdb_f64_bits(b->stats.min) == 0x8000000000000000ull);
	CHECK(rdb_f64_bits(b->stats.max) == 0x7ff0000000000000ull);
	CHECK(rdb_f64_bits(b->stats.sum) == rdb_f64_bits(1e308));
	CHECK(b->stats.first == MDL_VALUE_NULL_BITS);
	CHECK(b->stats.last == 0xfff0000000000001ull);

	t = begin(ix, true);
	r.stats.max_ts_ns = -8; /* max < min is refused */
	CHECK_EQ_INT(sto_chunk_put(t, &r), -EINVAL);
	sto_txn_abort(t);
	sto_index_close(ix);
	rm_dir(dir);
}

static void pending_add(struct sto_txn *t, uint64_t gen, uint64_t series, int64_t min_ts,
			uint64_t uid)
{
	struct sto_chunk_ref r = make_ref(series, min_ts, min_ts + 10, uid);

	CHECK_EQ_INT(sto_pending_add(t, gen, &r), 0);
}

static size_t scan_pending(struct sto_index *ix, uint64_t after, struct got *g)
{
	struct sto_txn *t = begin(ix, false);

	memset(g, 0, sizeof(*g));
	CHECK_EQ_INT(sto_pending_scan(t, after, collect_chunk, g), 0);
	sto_txn_abort(t);
	return g->n;
}

static void test_pending(void)
{
	char dir[600];
	struct sto_index *ix;
	struct sto_txn *t;
	struct got g;
	const struct sto_chunk_ref *p;

	new_dir(dir, sizeof(dir));
	ix = open_ok(dir, MAP_BYTES);
	t = begin(ix, true);
	pending_add(t, 5, 1, 0, 50);
	pending_add(t, 2, 3, -20, 21);
	pending_add(t, 1, 7, 100, 10);
	pending_add(t, 2, 1, 5, 20);
	pending_add(t, 3, 2, 0, 30);
	CHECK_EQ_INT(sto_txn_commit(t), 0);

	CHECK_EQ_INT(scan_pending(ix, 0, &g), 5);
	CHECK_EQ_INT(g.refs[0].gen, 1);
	CHECK_EQ_INT(g.refs[1].gen, 2);
	CHECK_EQ_INT(g.refs[1].series_id, 1); /* gen 2: series 1 before 3 */
	CHECK_EQ_INT(g.refs[2].series_id, 3);
	CHECK_EQ_INT(g.refs[2].stats.min_ts_ns, -20);
	CHECK_EQ_INT(g.refs[4].gen, 5);
	p = &g.refs[0];
	CHECK(p->series_id == 7 && p->uid == 10 && p->stats.min_ts_ns == 100);
	CHECK(p->segment_id == 0 && p->offset == 0 && p->length == 0);
	CHECK(p->stats.max_ts_ns == 0 && p->stats.count == 0);

	CHECK_EQ_INT(scan_pending(ix, 2, &g), 2);
	CHECK_EQ_INT(g.refs[0].gen, 3);
	CHECK_EQ_INT(scan_pending(ix, 5, &g), 0);
	CHECK_EQ_INT(scan_pending(ix, UINT64_MAX, &g), 0);

	t = begin(ix, true);
	CHECK_EQ_INT(sto_pending_clear(t, 2), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	CHECK_EQ_INT(scan_pending(ix, 0, &g), 2);
	CHECK_EQ_INT(g.refs[0].gen, 3);
	CHECK_EQ_INT(g.refs[1].gen, 5);

	t = begin(ix, true);
	CHECK_EQ_INT(sto_pending_drop_after(t, 3), 0);
	CHECK_EQ_INT(sto_pending_drop_after(t, UINT64_MAX), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	CHECK_EQ_INT(scan_pending(ix, 0, &g), 1);
	CHECK_EQ_INT(g.refs[0].gen, 3);
	CHECK_EQ_INT(g.refs[0].uid, 30);

	t = begin(ix, true);
	CHECK_EQ_INT(sto_pending_clear(t, UINT64_MAX), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	CHECK_EQ_INT(scan_pending(ix, 0, &g), 0);
	sto_index_close(ix);
	rm_dir(dir);
}

/* Adds one long-named series in its own write txn; returns the error. */
static int add_big_series(struct sto_index *ix, int i)
{
	struct mdl_series_key k;
	struct sto_txn *t = NULL;
	uint64_t id;
	bool created;
	int ret = sto_txn_begin(ix, true, &t);

	if (ret != 0)
		return ret;
	memset(&k, 0, sizeof(k));
	snprintf(k.job, sizeof(k.job), "job-%d", i);
	memset(k.metric, 'm', MDL_METRIC_MAX);
	ret = sto_series_get_or_create(t, &k, &id, &created);
	if (ret != 0) {
		sto_txn_abort(t);
		return ret;
	}
	return sto_txn_commit(t);
}

static void test_map_full(void)
{
	char dir[600];
	struct sto_index *ix;
	struct sto_txn *t;
	struct mdl_series_key k;
	uint64_t id = 0;
	int i, ret = 0;

	new_dir(dir, sizeof(dir));
	ix = open_ok(dir, 64u << 10);
	for (i = 0; i < 100000; i++) {
		ret = add_big_series(ix, i);
		if (ret != 0)
			break;
	}
	CHECK_EQ_INT(ret, RDB_ELIMIT);
	CHECK(i > 0);

	t = begin(ix, false);
	memset(&k, 0, sizeof(k));
	snprintf(k.job, sizeof(k.job), "job-%d", 0);
	memset(k.metric, 'm', MDL_METRIC_MAX);
	CHECK_EQ_INT(sto_series_lookup(t, &k, &id), 0);
	CHECK_EQ_INT(id, 1);
	snprintf(k.job, sizeof(k.job), "job-%d", i);
	CHECK_EQ_INT(sto_series_lookup(t, &k, &id), RDB_ENOTFOUND);
	sto_txn_abort(t);
	sto_index_close(ix);
	rm_dir(dir);
}

struct sup_seen {
	int n;
	uint64_t uids[4];
	uint32_t nsrc[4], nseg[4];
	int64_t last_src_ts;
};

static int sup_seen_cb(void *arg, const struct sto_sup_entry *e)
{
	struct sup_seen *s = arg;
	if (s->n < 4) {
		s->uids[s->n] = e->sup.merged_uid;
		s->nsrc[s->n] = e->sup.nsrc;
		s->nseg[s->n] = e->nseg;
	}
	s->last_src_ts = e->sup.src[e->sup.nsrc - 1].min_ts_ns;
	s->n++;
	return 0;
}

/* Supersede entries: put, get (exact copy), replace, scan in uid order, del. */
/* seg_trash membership is a lookup, not a scan of the list. */
static void test_trash_has(void)
{
	char dir[600];
	new_dir(dir, sizeof(dir));
	struct sto_index *ix = open_ok(dir, MAP_BYTES);
	struct sto_txn *t = begin(ix, true);
	CHECK_EQ_INT(sto_trash_has(t, 5), 0);
	CHECK_EQ_INT(sto_trash_add(t, 5), 0);
	CHECK_EQ_INT(sto_trash_add(t, 0x100000000ull), 0);
	CHECK_EQ_INT(sto_trash_has(t, 5), 1);
	CHECK_EQ_INT(sto_trash_has(t, 4), 0);
	CHECK_EQ_INT(sto_trash_has(t, 0x100000000ull), 1);
	CHECK_EQ_INT(sto_trash_del(t, 5), 0);
	CHECK_EQ_INT(sto_trash_has(t, 5), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	sto_index_close(ix);
}

static void test_supersede(void)
{
	char dir[600];
	struct sto_sup_src src[3] = {{7, INT64_MIN}, {8, -1}, {9, INT64_MAX}};
	uint64_t seg[2] = {1, 4};
	struct sto_sup_entry e = {.sup = {.series_id = 2,
					  .merged_uid = 300,
					  .merged_min_ts_ns = -5,
					  .gen = 6,
					  .nsrc = 3,
					  .src = src},
				  .segment_id = 9,
				  .offset = 4096,
				  .length = 104,
				  .nseg = 2,
				  .seg = seg};
	struct sto_sup_entry got = {0};
	struct sup_seen seen = {0};

	new_dir(dir, sizeof(dir));
	struct sto_index *ix = open_ok(dir, MAP_BYTES);
	struct sto_txn *t = begin(ix, true);
	CHECK_EQ_INT(sto_sup_put(t, &e), 0);
	e.sup.merged_uid = 0x100000000ull; /* sorts after 300 (big-endian key) */
	e.sup.nsrc = 2;
	e.nseg = 0;
	CHECK_EQ_INT(sto_sup_put(t, &e), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	t = begin(ix, false);
	CHECK_EQ_INT(sto_sup_get(t, 301, &got), RDB_ENOTFOUND);
	CHECK_EQ_INT(sto_sup_get(t, 300, &got), 0);
	CHECK(got.sup.series_id == 2 && got.sup.merged_min_ts_ns == -5 && got.sup.gen == 6);
	CHECK(got.segment_id == 9 && got.offset == 4096 && got.length == 104);
	CHECK(got.sup.nsrc == 3 && memcmp(got.sup.src, src, sizeof(src)) == 0);
	CHECK(got.nseg == 2 && got.seg[0] == 1 && got.seg[1] == 4);
	sto_sup_entry_free(&got);
	CHECK_EQ_INT(sto_sup_scan(t, sup_seen_cb, &seen), 0);
	CHECK_EQ_INT(seen.n, 2);
	CHECK(seen.uids[0] == 300 && seen.uids[1] == 0x100000000ull);
	CHECK(seen.nsrc[1] == 2 && seen.nseg[1] == 0 && seen.last_src_ts == -1);
	sto_txn_abort(t);
	t = begin(ix, true);
	CHECK_EQ_INT(sto_sup_del(t, 300), 0);
	CHECK_EQ_INT(sto_sup_del(t, 300), 0); /* absent is fine */
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	t = begin(ix, false);
	seen.n = 0;
	CHECK_EQ_INT(sto_sup_scan(t, sup_seen_cb, &seen), 0);
	CHECK_EQ_INT(seen.n, 1);
	sto_txn_abort(t);
	sto_index_close(ix);
	rm_dir(dir);
}

/* Flips bit `mask` of byte `at` of every copy of pattern in the file at
 * path (LMDB keeps older copies of a page until reused); returns copies. */
static int flip_pattern(const char *path, const uint8_t *pat, size_t plen, size_t at, uint8_t mask)
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
	for (long i = 0; i + (long)plen <= size; i++) {
		if (memcmp(buf + i, pat, plen) != 0)
			continue;
		buf[i + (long)at] ^= mask;
		copies++;
	}
	fseek(f, 0, SEEK_SET);
	CHECK_EQ_INT(fwrite(buf, 1, (size_t)size, f), size);
	fclose(f);
	free(buf);
	return copies;
}

/* Every chunk entry carries a checksum over its key and value: the flip of
 * one statistic byte (min 1000 -> 744) is RDB_ECORRUPT for writers, and a
 * ref marked damaged (key fields and location, no statistics) for readers
 * that asked for it; the neighbouring entry is untouched. */
static void test_entry_checksum(void)
{
	char dir[600], mdb[700];
	new_dir(dir, sizeof(dir));
	struct sto_index *ix = open_ok(dir, MAP_BYTES);
	struct sto_txn *t = begin(ix, true);
	uint64_t sid = create_series(t, "cs", 0, "m");
	struct sto_chunk_ref a = make_ref(sid, 100, 200, 7), b = make_ref(sid, 300, 400, 8), got;
	a.stats.count = 1000;
	a.stats.min = 1000.0;
	a.stats.max = 1999.0;
	b.stats.min = 5.0;
	b.stats.max = 6.0;
	CHECK_EQ_INT(sto_chunk_put(t, &a), 0);
	CHECK_EQ_INT(sto_chunk_put(t, &b), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	t = begin(ix, false);
	CHECK_EQ_INT(sto_chunk_get(t, sid, 100, 7, &got), 0);
	CHECK(got.stats.min == 1000.0 && !got.damaged);
	sto_txn_abort(t);
	sto_index_close(ix);

	uint8_t pat[16];
	rdb_put_le64(pat, rdb_f64_bits(1000.0));
	rdb_put_le64(pat + 8, rdb_f64_bits(1999.0));
	snprintf(mdb, sizeof(mdb), "%s/data.mdb", dir);
	CHECK(flip_pattern(mdb, pat, sizeof(pat), 6, 0x08) >= 1); /* 1000.0 -> 744.0 */

	ix = open_ok(dir, MAP_BYTES);
	t = begin(ix, false);
	CHECK_EQ_INT(sto_chunk_get(t, sid, 100, 7, &got), RDB_ECORRUPT);
	struct got *g = calloc(1, sizeof(*g));
	CHECK_EQ_INT(sto_chunk_scan(t, sid, INT64_MIN, INT64_MAX, collect_chunk, g), RDB_ECORRUPT);
	sto_txn_pass_damaged(t);
	g->n = 0;
	CHECK_EQ_INT(sto_chunk_scan(t, sid, INT64_MIN, INT64_MAX, collect_chunk, g), 0);
	CHECK_EQ_INT(g->n, 2);
	CHECK(g->refs[0].damaged && g->refs[0].uid == 7 && g->refs[0].series_id == sid);
	CHECK_EQ_INT(g->refs[0].stats.min_ts_ns, 100);
	CHECK(g->refs[0].stats.min != 744.0);
	CHECK_EQ_INT(g->refs[0].segment_id, a.segment_id); /* location kept, to be checked */
	CHECK_EQ_INT(g->refs[0].offset, a.offset);
	CHECK(!g->refs[1].damaged && g->refs[1].stats.min == 5.0);
	free(g);
	sto_txn_abort(t);
	/* A rewrite (verify --quarantine, from the chunk) heals it. */
	t = begin(ix, true);
	CHECK_EQ_INT(sto_chunk_put(t, &a), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	t = begin(ix, false);
	CHECK_EQ_INT(sto_chunk_get(t, sid, 100, 7, &got), 0);
	CHECK(got.stats.min == 1000.0);
	sto_txn_abort(t);
	sto_index_close(ix);
	rm_dir(dir);
}

static void count_problem(void *arg, const char *msg)
{
	(void)msg;
	(*(int *)arg)++;
}

/* Series catalog values and rollup records carry checksums too: a flipped
 * series id (which would answer a query with another series' points) and a
 * flipped rollup min are RDB_ECORRUPT on read and found by the value check. */
static void test_value_checksums(void)
{
	char dir[600], mdb[700];
	new_dir(dir, sizeof(dir));
	struct sto_index *ix = open_ok(dir, MAP_BYTES);
	struct sto_txn *t = begin(ix, true);
	uint64_t a = create_series(t, "vc", 0, "alpha"), b = create_series(t, "vc", 0, "beta");
	CHECK(a == 1 && b == 2);
	struct sto_rollup r = {.count = 10, .sum = 12345.0, .min = 1000.0, .max = 1999.0};
	CHECK_EQ_INT(sto_rollup_put(t, a, 0, 60, &r), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	t = begin(ix, false);
	int problems = 0;
	uint64_t damaged = 0;
	CHECK_EQ_INT(sto_index_check_values(t, count_problem, &problems, &damaged), 0);
	CHECK_EQ_INT(damaged, 0);
	sto_txn_abort(t);
	sto_index_close(ix);

	/* the series db pair: key "vc\0" rank 0 "alpha", then the id 1 (LE):
	 * id 1 -> 2 would be series beta */
	uint8_t key[3 + 4 + 5 + 1] = {'v', 'c', 0, 0, 0, 0, 0, 'a', 'l', 'p', 'h', 'a', 1};
	uint8_t pat[16];
	snprintf(mdb, sizeof(mdb), "%s/data.mdb", dir);
	CHECK(flip_pattern(mdb, key, sizeof(key), 12, 0x03) >= 1);
	rdb_put_le64(pat, rdb_f64_bits(12345.0));
	rdb_put_le64(pat + 8, rdb_f64_bits(1000.0));
	CHECK(flip_pattern(mdb, pat, sizeof(pat), 14, 0x08) >= 1); /* min 1000 -> 744 */

	ix = open_ok(dir, MAP_BYTES);
	t = begin(ix, false);
	struct mdl_series_key k;
	uint64_t id = 0;
	make_key(&k, "vc", 0, "alpha");
	CHECK_EQ_INT(sto_series_lookup(t, &k, &id), RDB_ECORRUPT);
	CHECK_EQ_INT(id, 0);
	make_key(&k, "vc", 0, "beta");
	CHECK_EQ_INT(sto_series_lookup(t, &k, &id), 0);
	CHECK_EQ_INT(id, b);
	struct sto_rollup got;
	CHECK_EQ_INT(sto_rollup_get(t, a, 0, 60, &got), RDB_ECORRUPT);
	problems = 0;
	damaged = 0;
	CHECK_EQ_INT(sto_index_check_values(t, count_problem, &problems, &damaged), 0);
	CHECK_EQ_INT(damaged, 2);
	CHECK_EQ_INT(problems, 2);
	sto_txn_abort(t);
	sto_index_close(ix);
	rm_dir(dir);
}

/* Format 5: every other table's values carry a checksum trailer (XXH3-64
 * of the key, then the body). One entry per table, one byte of each flipped
 * in data.mdb: each read refuses it (RDB_ECORRUPT), scans that must not act
 * on a damaged entry skip it (seg_trash, quarantine), a pass_damaged read of
 * an event chunk entry gets it marked damaged, verify's value check names
 * every table but events (whose entries it checks with their chunks), and
 * pruning drops a damaged batch_time entry. */
struct sealed_obs {
	int calls, damaged;
	size_t len;
	char msgs[8192];
};

static int ev_get_cb(void *arg, int64_t min_ts_ns, uint64_t uid, const uint8_t *val, size_t len,
		     bool damaged)
{
	struct sealed_obs *o = arg;
	(void)min_ts_ns;
	(void)uid;
	(void)val;
	o->calls++;
	o->damaged += damaged;
	o->len = len;
	return 0;
}

static int count_u64(void *arg, uint64_t v)
{
	(void)v;
	((struct sealed_obs *)arg)->calls++;
	return 0;
}

static int count_ref(void *arg, const struct sto_chunk_ref *r)
{
	(void)r;
	((struct sealed_obs *)arg)->calls++;
	return 0;
}

static int count_evp(void *arg, uint64_t gen, const char *job, int64_t min_ts_ns, uint64_t uid)
{
	(void)gen;
	(void)job;
	(void)min_ts_ns;
	(void)uid;
	((struct sealed_obs *)arg)->calls++;
	return 0;
}

static int count_sup(void *arg, const struct sto_sup_entry *e)
{
	(void)e;
	((struct sealed_obs *)arg)->calls++;
	return 0;
}

static void keep_problem(void *arg, const char *msg)
{
	struct sealed_obs *o = arg;
	size_t n = strlen(o->msgs);
	snprintf(o->msgs + n, sizeof(o->msgs) - n, "%s\n", msg);
}

/* Flips the first byte of the value (body, then trailer) stored under key. */
static int flip_sealed(const char *mdb, const void *key, size_t klen, const void *body, size_t blen)
{
	uint8_t pat[256];
	if (blen)
		memcpy(pat, body, blen);
	rdb_put_le64(pat + blen, rdb_hash64_2(key, klen, pat, blen, 0));
	return flip_pattern(mdb, pat, blen + 8, 0, 0x01);
}

static void put_sealed_tables(struct sto_index *ix, const uint8_t *evbody, size_t evlen)
{
	struct sto_txn *t = begin(ix, true);
	CHECK_EQ_INT(sto_meta_put(t, "ckpt_gen", 42), 0);
	CHECK_EQ_INT(sto_jobval_put(t, STO_JOBDB_TOMBSTONE, "tj", 7), 0);
	CHECK_EQ_INT(sto_jobval_put(t, STO_JOBDB_RETENTION, "rj", 3600), 0);
	CHECK_EQ_INT(sto_batchid_put(t, "bid-1", 5, 123456789), 0);
	struct sto_chunk_ref r = make_ref(5, 100, 200, 9);
	CHECK_EQ_INT(sto_pending_add(t, 3, &r), 0);
	CHECK_EQ_INT(sto_evpending_add(t, 3, "ej", 100, 10), 0);
	CHECK_EQ_INT(sto_evidx_put(t, "ej", 100, 10, evbody, evlen), 0);
	CHECK_EQ_INT(sto_quarantine_evchunk(t, "qj", 50, 11, evbody, evlen), 0);
	CHECK_EQ_INT(sto_trash_add(t, 77), 0);
	struct sto_sup_src src[2] = {{.uid = 1, .min_ts_ns = 10}, {.uid = 2, .min_ts_ns = 20}};
	uint64_t seg = 3;
	struct sto_sup_entry e = {.sup = {.series_id = 0x1122334455667788ull,
					  .merged_uid = 12,
					  .merged_min_ts_ns = 10,
					  .gen = 1,
					  .nsrc = 2,
					  .src = src},
				  .segment_id = 3,
				  .offset = 32,
				  .length = 100,
				  .nseg = 1,
				  .seg = &seg};
	CHECK_EQ_INT(sto_sup_put(t, &e), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
}

static void flip_sealed_tables(const char *mdb, const uint8_t *evbody, size_t evlen)
{
	uint8_t b8[8], k[64];
	rdb_put_le64(b8, 42);
	CHECK(flip_sealed(mdb, "ckpt_gen", 8, b8, 8) >= 1);
	rdb_put_le64(b8, 7);
	CHECK(flip_sealed(mdb, "tj", 2, b8, 8) >= 1);
	rdb_put_le64(b8, 3600);
	CHECK(flip_sealed(mdb, "rj", 2, b8, 8) >= 1);
	rdb_put_le64(b8, 123456789);
	CHECK(flip_sealed(mdb, "bid-1", 5, b8, 8) >= 1);
	rdb_put_be64(k, 123456789);
	memcpy(k + 8, "bid-1", 5);
	CHECK(flip_sealed(mdb, k, 13, NULL, 0) >= 1); /* batch_time */
	rdb_put_be64(k, 3);			      /* pending: gen, series, min_ts, uid */
	rdb_put_be64(k + 8, 5);
	rdb_put_be64(k + 16, 100ull ^ 0x8000000000000000ull);
	rdb_put_be64(k + 24, 9);
	CHECK(flip_sealed(mdb, k, 32, NULL, 0) >= 1);
	memcpy(k + 8, "ej", 3); /* evpending: gen, job, 0, min_ts, uid */
	rdb_put_be64(k + 11, 100ull ^ 0x8000000000000000ull);
	rdb_put_be64(k + 19, 10);
	CHECK(flip_sealed(mdb, k, 27, NULL, 0) >= 1);
	CHECK(flip_sealed(mdb, k + 8, 19, evbody, evlen) >= 1); /* events */
	k[0] = 'E';						/* quarantine */
	memcpy(k + 1, "qj", 3);
	rdb_put_be64(k + 4, 50ull ^ 0x8000000000000000ull);
	rdb_put_be64(k + 12, 11);
	CHECK(flip_sealed(mdb, k, 20, evbody, evlen) >= 1);
	rdb_put_be64(k, 77);
	CHECK(flip_sealed(mdb, k, 8, NULL, 0) >= 1); /* seg_trash */
	rdb_put_le64(b8, 0x1122334455667788ull);     /* supersede: its series id */
	CHECK(flip_pattern(mdb, b8, 8, 0, 0x01) >= 1);
}

/* Format 5 seals an events entry's key and fixed part only (reading an
 * entry must not hash its token filter, up to 64 KiB): the filter has its
 * own checksum inside the fixed part, checked by eve_filter_intact when a
 * query consults it. A flipped filter byte leaves the entry readable with
 * the filter failing; a flipped byte of the fixed part fails the read. */
struct filter_obs {
	int calls, damaged, intact;
	uint64_t offset;
};

static int filter_cb(void *arg, int64_t min_ts_ns, uint64_t uid, const uint8_t *val, size_t len,
		     bool damaged)
{
	struct filter_obs *o = arg;
	struct ev_entry d;
	(void)min_ts_ns;
	(void)uid;
	o->calls++;
	o->damaged += damaged;
	CHECK_EQ_INT(eve_decode(val, len, &d), 0);
	o->intact = eve_filter_intact(&d);
	o->offset = d.offset;
	return 0;
}

/* Copies the entry (the size the test expects) into arg. */
static int filter_cb_raw(void *arg, int64_t min_ts_ns, uint64_t uid, const uint8_t *val, size_t len,
			 bool damaged)
{
	(void)min_ts_ns;
	(void)uid;
	(void)damaged;
	CHECK_EQ_INT(len, 88 + 64);
	memcpy(arg, val, len);
	return 0;
}

static void test_event_filter_sealed_apart(void)
{
	char dir[600], mdb[700];
	uint8_t bloom[64], fixed[88];
	for (size_t i = 0; i < sizeof(bloom); i++)
		bloom[i] = (uint8_t)(0xc3 ^ (i * 37));
	struct ev_entry e = {.kinds = 1,
			     .length = 100,
			     .segment_id = 3,
			     .offset = 4096,
			     .count = 5,
			     .bloom_log2 = 9, /* 64 bytes */
			     .min_ts_ns = 100,
			     .max_ts_ns = 200};
	struct rdb_buf b;
	rdb_buf_init(&b, 4096);
	CHECK_EQ_INT(eve_encode(&e, bloom, &b), 0);
	CHECK_EQ_INT(b.len, 88 + sizeof(bloom));
	memcpy(fixed, b.data, sizeof(fixed));
	new_dir(dir, sizeof(dir));
	snprintf(mdb, sizeof(mdb), "%s/data.mdb", dir);
	struct sto_index *ix = open_ok(dir, MAP_BYTES);
	struct sto_txn *t = begin(ix, true);
	CHECK_EQ_INT(sto_evidx_put(t, "fj", 100, 21, b.data, b.len), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	t = begin(ix, false);
	struct filter_obs o = {0};
	CHECK_EQ_INT(sto_evidx_get(t, "fj", 100, 21, filter_cb, &o), 0);
	CHECK(o.calls == 1 && o.damaged == 0 && o.intact == 1);
	sto_txn_abort(t);
	sto_index_close(ix);

	CHECK(flip_pattern(mdb, bloom, sizeof(bloom), 10, 0x04) >= 1);
	ix = open_ok(dir, MAP_BYTES);
	t = begin(ix, false);
	o = (struct filter_obs){0};
	CHECK_EQ_INT(sto_evidx_get(t, "fj", 100, 21, filter_cb, &o), 0);
	CHECK(o.calls == 1 && o.damaged == 0 && o.intact == 0 && o.offset == 4096);
	sto_txn_abort(t);
	sto_index_close(ix);

	CHECK(flip_pattern(mdb, fixed, sizeof(fixed), 16, 0x01) >= 1); /* the offset */
	ix = open_ok(dir, MAP_BYTES);
	t = begin(ix, false);
	o = (struct filter_obs){0};
	CHECK_EQ_INT(sto_evidx_get(t, "fj", 100, 21, filter_cb, &o), RDB_ECORRUPT);
	CHECK_EQ_INT(o.calls, 0);
	sto_txn_abort(t);
	sto_index_close(ix);
	rdb_buf_free(&b);
}

/* Replaces every copy of old (n bytes) in the file by new; returns copies. */
static int replace_bytes(const char *path, const uint8_t *old, const uint8_t *new, size_t n)
{
	int copies = 0;
	for (size_t i = 0; i < n; i++) {
		uint8_t mask = old[i] ^ new[i];
		if (!mask)
			continue;
		uint8_t pat[64];
		memcpy(pat, old, n);
		memcpy(pat, new, i); /* bytes before i are already replaced */
		copies = flip_pattern(path, pat, n, i, mask);
	}
	return copies;
}

/* An events entry of a format 4 index (version 1: the filter at byte 80,
 * no trailer; made here by writing a 136-byte body through the API, whose
 * trailer then ends the 144-byte value, and breaking that trailer; the
 * index's format_version set back to 4 in the file) is rewritten by the
 * upgrade at the next open as version 2 (the filter's checksum at byte
 * 80, the filter at 88), sealed, with its fields unchanged. */
static void test_event_entry_v1_upgraded(void)
{
	char dir[600], mdb[700];
	uint8_t v1[80 + 56], val[80 + 64], fv5[16], fv4[16];
	memset(v1, 0, sizeof(v1));
	v1[0] = 1;
	v1[1] = 1;
	rdb_put_le32(v1 + 4, 100);
	rdb_put_le64(v1 + 8, 3);
	rdb_put_le64(v1 + 16, 4096);
	rdb_put_le32(v1 + 32, 5);
	rdb_put_le32(v1 + 36, 9); /* 64 filter bytes */
	rdb_put_le64(v1 + 40, 100);
	rdb_put_le64(v1 + 48, 200);
	for (size_t i = 80; i < sizeof(v1); i++)
		v1[i] = (uint8_t)(0x5a ^ (i * 11));
	new_dir(dir, sizeof(dir));
	snprintf(mdb, sizeof(mdb), "%s/data.mdb", dir);
	struct sto_index *ix = open_ok(dir, MAP_BYTES);
	struct sto_txn *t = begin(ix, true);
	CHECK_EQ_INT(sto_evidx_put(t, "uj", 100, 31, v1, sizeof(v1)), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	sto_index_close(ix);
	uint8_t kb[3 + 16]; /* the stored value: v1, then the seal of key + 88 bytes */
	memcpy(kb, "uj", 3);
	rdb_put_be64(kb + 3, 100ull ^ 0x8000000000000000ull);
	rdb_put_be64(kb + 11, 31);
	memcpy(val, v1, sizeof(v1));
	rdb_put_le64(val + sizeof(v1), rdb_hash64_2(kb, sizeof(kb), v1, 88, 0));
	/* the trailer broken: to a format 4 reader, 144 bytes of version 1 */
	CHECK(flip_pattern(mdb, val, sizeof(val), sizeof(val) - 1, 0x10) >= 1);
	val[sizeof(val) - 1] ^= 0x10;
	for (int f = 5; f >= 4; f--) {
		uint8_t *b = f == 5 ? fv5 : fv4;
		rdb_put_le64(b, (uint64_t)f);
		rdb_put_le64(b + 8, rdb_hash64_2("format_version", 14, b, 8, 0));
	}
	CHECK(replace_bytes(mdb, fv5, fv4, sizeof(fv5)) >= 1);

	ix = open_ok(dir, MAP_BYTES); /* upgrades */
	t = begin(ix, false);
	uint64_t fmt = 0;
	CHECK_EQ_INT(sto_meta_get(t, "format_version", &fmt), 0);
	CHECK_EQ_INT(fmt, 5);
	struct filter_obs o = {0};
	CHECK_EQ_INT(sto_evidx_get(t, "uj", 100, 31, filter_cb, &o), 0);
	CHECK(o.calls == 1 && o.damaged == 0 && o.intact == 1 && o.offset == 4096);
	uint8_t v2[88 + 64];
	CHECK_EQ_INT(sto_evidx_get(t, "uj", 100, 31, filter_cb_raw, v2), 0);
	CHECK(v2[0] == 2 && memcmp(v2 + 1, val + 1, 79) == 0 && memcmp(v2 + 88, val + 80, 64) == 0);
	CHECK(rdb_get_le64(v2 + 80) == rdb_hash64(val + 80, 64, 0));
	sto_txn_abort(t);
	sto_index_close(ix);
}

/* One upgrade of 200 version 1 events entries, each with a filter of
 * filter_bytes (made as in test_event_entry_v1_upgraded, all with the same
 * body so that one pass over the file breaks every trailer): the index
 * commits it took. */
static uint64_t upgrade_commits(size_t filter_bytes, uint32_t log2)
{
	char dir[600], mdb[700];
	size_t n = 80 + filter_bytes - 8;
	uint8_t *body = calloc(1, n), fv5[16], fv4[16];
	CHECK(body != NULL);
	if (!body)
		return 0;
	body[0] = 1;
	rdb_put_le32(body + 36, log2);
	for (size_t i = 80; i < n; i++)
		body[i] = (uint8_t)(0x3c ^ (i * 13));
	new_dir(dir, sizeof(dir));
	snprintf(mdb, sizeof(mdb), "%s/data.mdb", dir);
	struct sto_index *ix = open_ok(dir, 256ull << 20);
	struct sto_txn *t = begin(ix, true);
	for (uint64_t i = 0; i < 200; i++)
		CHECK_EQ_INT(sto_evidx_put(t, "bj", 100 + (int64_t)i, i, body, n), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	sto_index_close(ix);
	CHECK(flip_pattern(mdb, body, 88, 3, 0x01) >= 200);
	for (int f = 5; f >= 4; f--) {
		uint8_t *b = f == 5 ? fv5 : fv4;
		rdb_put_le64(b, (uint64_t)f);
		rdb_put_le64(b + 8, rdb_hash64_2("format_version", 14, b, 8, 0));
	}
	CHECK(replace_bytes(mdb, fv5, fv4, sizeof(fv5)) >= 1);
	uint64_t before = sto_fault_hits(STO_FP_INDEX_COMMIT);
	ix = open_ok(dir, 256ull << 20); /* upgrades */
	uint64_t commits = sto_fault_hits(STO_FP_INDEX_COMMIT) - before;
	t = begin(ix, false);
	struct filter_obs o = {0};
	CHECK_EQ_INT(sto_evidx_get(t, "bj", 199 + 100, 199, filter_cb, &o), 0);
	CHECK(o.calls == 1 && o.damaged == 0 && o.intact == 1);
	sto_txn_abort(t);
	sto_index_close(ix);
	free(body);
	return commits;
}

/* The upgrade's write transactions are bounded in bytes as well as in
 * pairs: 200 entries of 64 KiB (12.8 MiB) take one more than 200 small
 * ones. */
static void test_upgrade_batches_by_bytes(void)
{
	uint64_t small = upgrade_commits(64, 9), large = upgrade_commits(65536, 19);
	CHECK(small > 0);
	CHECK_EQ_INT(large, small + 1);
}

static void test_sealed_values(void)
{
	char dir[600], mdb[700];
	uint8_t evbody[40];
	for (size_t i = 0; i < sizeof(evbody); i++)
		evbody[i] = (uint8_t)(0xa0 + i);
	new_dir(dir, sizeof(dir));
	struct sto_index *ix = open_ok(dir, MAP_BYTES);
	put_sealed_tables(ix, evbody, sizeof(evbody));
	struct sto_txn *t = begin(ix, false);
	struct sealed_obs o = {0};
	uint64_t damaged = 0, v;
	CHECK_EQ_INT(sto_index_check_values(t, keep_problem, &o, &damaged), 0);
	CHECK_EQ_INT(damaged, 0);
	CHECK_EQ_INT(sto_evidx_get(t, "ej", 100, 10, ev_get_cb, &o), 0);
	CHECK(o.calls == 1 && o.damaged == 0 &&
	      o.len == sizeof(evbody)); /* the trailer is hidden */
	CHECK_EQ_INT(sto_trash_has(t, 77), 1);
	CHECK_EQ_INT(sto_meta_check(t), 0);
	sto_txn_abort(t);
	sto_index_close(ix);

	snprintf(mdb, sizeof(mdb), "%s/data.mdb", dir);
	flip_sealed_tables(mdb, evbody, sizeof(evbody));

	ix = open_ok(dir, MAP_BYTES);
	t = begin(ix, false);
	CHECK_EQ_INT(sto_meta_get(t, "ckpt_gen", &v), RDB_ECORRUPT);
	CHECK_EQ_INT(sto_meta_get(t, "format_version", &v), 0);
	CHECK_EQ_INT(sto_meta_check(t), RDB_ECORRUPT); /* the store's open fails on it */
	CHECK_EQ_INT(sto_jobval_get(t, STO_JOBDB_TOMBSTONE, "tj", &v), RDB_ECORRUPT);
	CHECK_EQ_INT(sto_jobval_get(t, STO_JOBDB_RETENTION, "rj", &v), RDB_ECORRUPT);
	CHECK_EQ_INT(sto_batchid_get(t, "bid-1", 5, &v), RDB_ECORRUPT);
	o = (struct sealed_obs){0};
	CHECK_EQ_INT(sto_pending_scan(t, 0, count_ref, &o), RDB_ECORRUPT);
	CHECK_EQ_INT(sto_evpending_scan(t, 0, count_evp, &o), RDB_ECORRUPT);
	CHECK_EQ_INT(sto_evidx_get(t, "ej", 100, 10, ev_get_cb, &o), RDB_ECORRUPT);
	CHECK_EQ_INT(sto_trash_has(t, 77), RDB_ECORRUPT);
	CHECK_EQ_INT(sto_trash_scan(t, count_u64, &o), 0); /* skipped: never unlinked */
	CHECK_EQ_INT(sto_quarantine_scan(t, count_u64, &o), 0);
	struct sto_sup_entry se;
	CHECK_EQ_INT(sto_sup_get(t, 12, &se), RDB_ECORRUPT);
	CHECK_EQ_INT(sto_sup_scan(t, count_sup, &o), RDB_ECORRUPT);
	CHECK_EQ_INT(o.calls, 0);
	sto_txn_pass_damaged(t);
	CHECK_EQ_INT(sto_evidx_get(t, "ej", 100, 10, ev_get_cb, &o), 0);
	CHECK(o.calls == 1 && o.damaged == 1 && o.len == sizeof(evbody));
	CHECK_EQ_INT(sto_sup_scan(t, count_sup, &o), 0); /* skipped */
	CHECK_EQ_INT(o.calls, 1);
	damaged = 0;
	o.msgs[0] = 0;
	CHECK_EQ_INT(sto_index_check_values(t, keep_problem, &o, &damaged), 0);
	CHECK_EQ_INT(damaged, 10);
	const char *tables[] = {"meta entry",	   "evpending entry",  "pending entry",
				"batch_ids entry", "batch_time entry", "tombstones entry",
				"retention entry", "quarantine entry", "seg_trash entry",
				"supersede entry"};
	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
		CHECK(strstr(o.msgs, tables[i]) != NULL);
	CHECK(strstr(o.msgs, "key 'ckpt_gen'") != NULL);
	CHECK(strstr(o.msgs, "events entry") == NULL);
	sto_txn_abort(t);
	/* pruning drops the damaged batch_time entry (its time may be wrong) */
	t = begin(ix, true);
	size_t deleted = 0;
	CHECK_EQ_INT(sto_batchid_prune(t, 1, 100, &deleted), 0);
	CHECK_EQ_INT(deleted, 1);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	t = begin(ix, false);
	damaged = 0;
	CHECK_EQ_INT(sto_index_check_values(t, NULL, NULL, &damaged), 0);
	CHECK_EQ_INT(damaged, 9);
	sto_txn_abort(t);
	/* a rewrite heals: the value gets a new checksum */
	t = begin(ix, true);
	CHECK_EQ_INT(sto_meta_put(t, "ckpt_gen", 43), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	t = begin(ix, false);
	CHECK_EQ_INT(sto_meta_get(t, "ckpt_gen", &v), 0);
	CHECK_EQ_INT(v, 43);
	CHECK_EQ_INT(sto_meta_check(t), 0);
	sto_txn_abort(t);
	sto_index_close(ix);
	rm_dir(dir);
}

/* The index of a format 2 directory (tests/integration/fixtures: written
 * by the release before index checksums) is upgraded at its first
 * read-write open. A commit failing at each step of the upgrade in turn
 * (the format 3 rewrite, then the sealing of each table, then
 * format_version) fails that open and leaves an index that a read-only open
 * reads whole (no value damaged, sealed or not yet), and the next open
 * finishes the upgrade. */
static void test_upgrade_cut_short(void)
{
	const char *root = getenv("RDB_SOURCE_ROOT");
	char dir[600], cmd[2048], ixdir[700];
	if (!root) {
		printf("skip test_upgrade_cut_short: RDB_SOURCE_ROOT is not set\n");
		return;
	}
	new_dir(dir, sizeof(dir));
	CHECK_EQ_INT(mkdir(dir, 0755), 0);
	snprintf(cmd, sizeof(cmd),
		 "tar -xzf '%s/tests/integration/fixtures/format2-datadir.tar.gz' -C '%s'", root,
		 dir);
	CHECK_EQ_INT(system(cmd), 0);
	snprintf(ixdir, sizeof(ixdir), "%s/data/index", dir);
	int cuts = 0;
	struct sto_index *ix = NULL;
	struct sto_txn *t;
	uint64_t v, damaged;
	for (uint64_t k = 2; k < 100; k++) {
		CHECK_EQ_INT(sto_fault_set(STO_FP_INDEX_COMMIT, EIO, k, false), 0);
		int rc = sto_index_open(ixdir, MAP_BYTES, &ix);
		sto_fault_clear(STO_FP_INDEX_COMMIT);
		if (rc == 0)
			break;
		CHECK_EQ_INT(rc, -EIO);
		cuts++;
		CHECK_EQ_INT(sto_index_open_ro(ixdir, MAP_BYTES, &ix), 0);
		t = begin(ix, false);
		damaged = 0;
		CHECK_EQ_INT(sto_index_check_values(t, NULL, NULL, &damaged), 0);
		CHECK_EQ_INT(damaged, 0);
		CHECK_EQ_INT(sto_meta_get(t, "next_chunk_uid", &v), 0);
		CHECK_EQ_INT(sto_meta_get(t, "format_version", &v), 0);
		CHECK_EQ_INT(v, 2);
		sto_txn_abort(t);
		sto_index_close(ix);
		ix = NULL;
	}
	CHECK(cuts >= 10); /* 4 tables of the format 3 rewrite, 11 sealed ones */
	CHECK(ix != NULL);
	if (!ix)
		return;
	t = begin(ix, false);
	CHECK_EQ_INT(sto_meta_get(t, "format_version", &v), 0);
	CHECK_EQ_INT(v, STO_FORMAT_VERSION);
	damaged = 0;
	CHECK_EQ_INT(sto_index_check_values(t, NULL, NULL, &damaged), 0);
	CHECK_EQ_INT(damaged, 0);
	struct got *g = calloc(1, sizeof(*g));
	CHECK_EQ_INT(sto_chunk_scan_all(t, collect_chunk, g), 0);
	CHECK(g->n == 1 && !g->refs[0].damaged && g->refs[0].stats.count == 1000);
	free(g);
	sto_txn_abort(t);
	sto_index_close(ix);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK_EQ_INT(system(cmd), 0);
}

/* ---- index compaction (ix_compact.c) ------------------------------------- */

static uint64_t file_size_of(const char *dir, const char *name)
{
	char path[1024];
	FILE *f;
	long n;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "rb");
	if (!f)
		return 0;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fclose(f);
	return n > 0 ? (uint64_t)n : 0;
}

/* Puts n entries of one series (uids 1..n), then deletes all but every
 * keep-th: the deletes leave free pages. */
static uint64_t fill_and_thin(struct sto_index *ix, uint64_t n, uint64_t keep)
{
	struct sto_txn *t = begin(ix, true);
	uint64_t series = create_series(t, "job", 0, "loss");

	for (uint64_t u = 1; u <= n; u++) {
		struct sto_chunk_ref r = make_ref(series, (int64_t)u * 10, (int64_t)u * 10 + 5, u);
		CHECK_EQ_INT(sto_chunk_put(t, &r), 0);
	}
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	t = begin(ix, true);
	for (uint64_t u = 1; u <= n; u++)
		if (u % keep != 0)
			CHECK_EQ_INT(sto_chunk_del(t, series, (int64_t)u * 10, u), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	return series;
}

struct count_arg {
	uint64_t n, bad;
	uint64_t keep;
};

static int count_kept(void *arg, const struct sto_chunk_ref *ref)
{
	struct count_arg *c = arg;
	c->n++;
	if (ref->uid % c->keep != 0 || ref->stats.min_ts_ns != (int64_t)ref->uid * 10 ||
	    ref->offset != ref->uid * 1000)
		c->bad++;
	return 0;
}

static uint64_t count_entries(struct sto_index *ix, uint64_t keep, uint64_t *bad)
{
	struct sto_txn *t = begin(ix, false);
	struct count_arg c = {.keep = keep};
	CHECK_EQ_INT(sto_chunk_scan_all(t, count_kept, &c), 0);
	sto_txn_abort(t);
	*bad = c.bad;
	return c.n;
}

/* Deletes leave the file at its high-water size; the compaction rewrites it
 * without the free pages, keeps every entry, and the index stays usable. */
static void test_compact_shrinks(void)
{
	char dir[600];
	struct sto_index *ix;
	struct sto_index_stat st;
	struct sto_index_compact_result r;
	uint64_t bad = 0;

	new_dir(dir, sizeof(dir));
	ix = open_ok(dir, MAP_BYTES);
	uint64_t series = fill_and_thin(ix, 20000, 20);
	CHECK_EQ_INT(sto_index_stat(ix, &st), 0);
	CHECK(st.free_pages > st.used_pages / 2);
	CHECK_EQ_INT(st.file_bytes, file_size_of(dir, "data.mdb"));
	CHECK_EQ_INT(st.db[3].entries, 1000);
	CHECK(strcmp(st.db[3].name, "chunks") == 0);
	uint64_t before = st.file_bytes;

	/* Not worth it under the thresholds: nothing happens. */
	CHECK_EQ_INT(sto_index_compact(ix, false, 0.99, 0, 1000, &r), 0);
	CHECK(!r.swapped);
	CHECK_EQ_INT(sto_index_compact(ix, false, 0.25, before + 1, 1000, &r), 0);
	CHECK(!r.swapped);
	CHECK_EQ_INT(file_size_of(dir, "data.mdb"), before);

	CHECK_EQ_INT(sto_index_compact(ix, false, 0.25, 0, 1000, &r), 0);
	CHECK(r.swapped);
	CHECK_EQ_INT(r.bytes_before, before);
	CHECK(r.bytes_after < before / 4);
	CHECK_EQ_INT(file_size_of(dir, "data.mdb"), r.bytes_after);
	CHECK_EQ_INT(file_size_of(dir, "data.mdb.compact"), 0);
	CHECK_EQ_INT(count_entries(ix, 20, &bad), 1000);
	CHECK_EQ_INT(bad, 0);

	/* Still writable, and the writes survive a reopen. */
	struct sto_txn *t = begin(ix, true);
	struct sto_chunk_ref nr = make_ref(series, 400000, 400005, 40000);
	CHECK_EQ_INT(sto_chunk_put(t, &nr), 0);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	sto_index_close(ix);
	ix = open_ok(dir, MAP_BYTES);
	CHECK_EQ_INT(count_entries(ix, 20, &bad), 1001);
	CHECK_EQ_INT(bad, 0);
	struct mdl_series_key k;
	t = begin(ix, false);
	CHECK_EQ_INT(sto_series_key_of(t, series, &k), 0);
	CHECK(strcmp(k.metric, "loss") == 0);
	sto_txn_abort(t);
	sto_index_close(ix);
	rm_dir(dir);
}

/* A transaction that does not end keeps the old file: RDB_EBUSY, nothing
 * changed, no copy left behind; once it ends the compaction goes through. */
static void test_compact_busy(void)
{
	char dir[600];
	struct sto_index *ix;
	struct sto_index_compact_result r;
	uint64_t bad = 0;

	new_dir(dir, sizeof(dir));
	ix = open_ok(dir, MAP_BYTES);
	fill_and_thin(ix, 5000, 10);
	uint64_t before = file_size_of(dir, "data.mdb");
	struct sto_txn *held = begin(ix, false);
	CHECK_EQ_INT(sto_index_compact(ix, true, 0, 0, 50, &r), RDB_EBUSY);
	CHECK(!r.swapped);
	CHECK_EQ_INT(file_size_of(dir, "data.mdb"), before);
	CHECK_EQ_INT(file_size_of(dir, "data.mdb.compact"), 0);
	/* The gate is open again: new transactions start. */
	struct sto_txn *t = begin(ix, true);
	CHECK_EQ_INT(sto_txn_commit(t), 0);
	sto_txn_abort(held);
	CHECK_EQ_INT(sto_index_compact(ix, true, 0, 0, 1000, &r), 0);
	CHECK(r.swapped);
	CHECK(file_size_of(dir, "data.mdb") < before);
	CHECK_EQ_INT(count_entries(ix, 10, &bad), 500);
	CHECK_EQ_INT(bad, 0);
	sto_index_close(ix);
	rm_dir(dir);
}

struct writer_arg {
	struct sto_index *ix;
	uint64_t series;
	uint64_t written; /* entries committed, uids 100001.. */
	int errors;
};

static void *writer_main(void *p)
{
	struct writer_arg *w = p;
	for (uint64_t i = 0; i < 400; i++) {
		struct sto_txn *t = NULL;
		if (sto_txn_begin(w->ix, true, &t) != 0) {
			w->errors++;
			continue;
		}
		uint64_t u = 100001 + i;
		struct sto_chunk_ref r = make_ref(w->series, (int64_t)u * 10, (int64_t)u * 10, u);
		r.offset = u * 1000;
		if (sto_chunk_put(t, &r) != 0 || sto_txn_commit(t) != 0)
			w->errors++;
		else
			w->written++;
	}
	return NULL;
}

/* Writers committing during the copy: every committed entry is in the
 * compacted file (the copy is redone with writers held when one committed). */
static void test_compact_concurrent_writes(void)
{
	char dir[600];
	struct sto_index *ix;
	struct sto_index_compact_result r;
	pthread_t th;
	int swapped = 0;

	new_dir(dir, sizeof(dir));
	ix = open_ok(dir, MAP_BYTES);
	struct writer_arg w = {.ix = ix};
	w.series = fill_and_thin(ix, 20000, 20);
	CHECK_EQ_INT(pthread_create(&th, NULL, writer_main, &w), 0);
	for (int i = 0; i < 5; i++) {
		int rc = sto_index_compact(ix, true, 0, 0, 5000, &r);
		CHECK(rc == 0 || rc == RDB_EBUSY);
		swapped += r.swapped;
	}
	pthread_join(th, NULL);
	CHECK(swapped > 0);
	CHECK_EQ_INT(w.errors, 0);
	/* uids 100001.. are multiples of 20 only sometimes: count separately. */
	struct sto_txn *t = begin(ix, false);
	struct got g;
	memset(&g, 0, sizeof(g));
	CHECK_EQ_INT(sto_chunk_scan(t, w.series, 1000010, INT64_MAX, collect_chunk, &g), 0);
	sto_txn_abort(t);
	CHECK_EQ_INT(g.n, w.written);
	CHECK_EQ_INT(w.written, 400);
	sto_index_close(ix);
	ix = open_ok(dir, MAP_BYTES);
	t = begin(ix, false);
	memset(&g, 0, sizeof(g));
	CHECK_EQ_INT(sto_chunk_scan(t, w.series, 1000010, INT64_MAX, collect_chunk, &g), 0);
	sto_txn_abort(t);
	CHECK_EQ_INT(g.n, 400);
	sto_index_close(ix);
	rm_dir(dir);
}

/* A copy left by a crash before its rename is removed at open; the index
 * in use is untouched. */
static void test_compact_leftover(void)
{
	char dir[600], path[700];
	struct sto_index *ix;
	uint64_t bad = 0;

	new_dir(dir, sizeof(dir));
	ix = open_ok(dir, MAP_BYTES);
	fill_and_thin(ix, 1000, 10);
	sto_index_close(ix);
	snprintf(path, sizeof(path), "%s/data.mdb.compact", dir);
	FILE *f = fopen(path, "wb");
	CHECK(f != NULL);
	if (f) {
		fputs("half a copy", f);
		fclose(f);
	}
	ix = open_ok(dir, MAP_BYTES);
	CHECK_EQ_INT(file_size_of(dir, "data.mdb.compact"), 0);
	CHECK_EQ_INT(count_entries(ix, 10, &bad), 100);
	CHECK_EQ_INT(bad, 0);
	sto_index_close(ix);
	rm_dir(dir);
}

int main(void)
{
	const char *base = getenv("RDB_TEST_TMP");

	snprintf(tmp_root, sizeof(tmp_root), "%s/test_index.XXXXXX", base ? base : "/tmp");
	if (!mkdtemp(tmp_root)) {
		perror("mkdtemp");
		return 1;
	}
	RUN(test_open_reopen);
	RUN(test_format_mismatch);
	RUN(test_format3_raised);
	RUN(test_open_errors);
	RUN(test_meta_counters);
	RUN(test_series);
	RUN(test_series_id_block);
	RUN(test_prefix_jobs);
	RUN(test_jobs_scan_empty);
	RUN(test_chunk_overlap);
	RUN(test_chunk_many);
	RUN(test_chunk_del);
	RUN(test_stats_bits);
	RUN(test_pending);
	RUN(test_map_full);
	RUN(test_trash_has);
	RUN(test_supersede);
	RUN(test_entry_checksum);
	RUN(test_value_checksums);
	RUN(test_sealed_values);
	RUN(test_event_filter_sealed_apart);
	RUN(test_event_entry_v1_upgraded);
	RUN(test_upgrade_batches_by_bytes);
	RUN(test_upgrade_cut_short);
	RUN(test_compact_shrinks);
	RUN(test_compact_busy);
	RUN(test_compact_concurrent_writes);
	RUN(test_compact_leftover);
	rmdir(tmp_root);
	return check_summary("index");
}
