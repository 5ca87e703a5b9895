/* test_wal.c - the write-ahead log and the io_uring layer: round trips,
 * group commit under concurrent appenders, rotation, torn and corrupt tails,
 * bad file headers, injected write/truncate failures, directory listing.
 * Every test works in its own directory under $RDB_TEST_TMP (or /tmp),
 * removed at the end. */
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "storage/format.h"
#include "storage/io/uring.h"
#include "storage/wal/wal.h"
#include "storage/wal/batch_codec.h"
#include "tests/unit/check.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_RECS 5000
#define PATH_CAP (PATH_MAX + 64) /* a directory plus a file name */

/* ---- helpers ---------------------------------------------------------------- */

static void make_dir(char *out, size_t cap)
{
	const char *base = getenv("RDB_TEST_TMP");
	snprintf(out, cap, "%s/walXXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(out)) {
		perror("mkdtemp");
		exit(2);
	}
}

static void remove_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlinkat(dirfd(d), e->d_name, 0);
	}
	closedir(d);
	rmdir(dir);
}

static void file_path(char *out, size_t cap, const char *dir, uint64_t gen)
{
	snprintf(out, cap, "%s/wal-%016llx.log", dir, (unsigned long long)gen);
}

static uint64_t file_size(const char *dir, uint64_t gen)
{
	char path[PATH_CAP];
	struct stat st;
	file_path(path, sizeof(path), dir, gen);
	return stat(path, &st) == 0 ? (uint64_t)st.st_size : UINT64_MAX;
}

/* Deterministic payload: 8-byte id (when it fits), then a pattern of it. */
static void fill(uint8_t *p, size_t len, uint64_t id)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(id * 131u + i * 7u + (i >> 8));
	if (len >= 8)
		rdb_put_le64(p, id);
}

static int payload_ok(const uint8_t *p, size_t len, uint64_t id)
{
	for (size_t i = len >= 8 ? 8 : 0; i < len; i++)
		if (p[i] != (uint8_t)(id * 131u + i * 7u + (i >> 8)))
			return 0;
	return len < 8 || rdb_get_le64(p) == id;
}

static int open_wal(const char *dir, uint64_t gen, enum sto_sync_policy sync, size_t qmax,
		    struct sto_wal **w)
{
	struct sto_wal_options o = {
	    .dir = dir, .gen = gen, .sync = sync, .queue_max_records = qmax};
	return sto_wal_open(&o, w);
}

/* Collects replayed records in order. */
struct seen {
	size_t n;
	uint64_t gen;
	uint8_t type[MAX_RECS];
	uint32_t len[MAX_RECS];
	uint64_t id[MAX_RECS]; /* first 8 bytes, or UINT64_MAX if shorter */
	int content_ok[MAX_RECS];
	uint64_t expect_id[MAX_RECS]; /* for ordered checks: id used by fill() */
};

static int collect(void *arg, uint64_t gen, uint8_t type, const uint8_t *p, size_t len)
{
	struct seen *s = arg;
	if (s->n >= MAX_RECS)
		return -ENOSPC;
	s->gen = gen;
	s->type[s->n] = type;
	s->len[s->n] = (uint32_t)len;
	s->id[s->n] = len >= 8 ? rdb_get_le64(p) : UINT64_MAX;
	s->content_ok[s->n] = payload_ok(p, len, s->expect_id[s->n]);
	s->n++;
	return 0;
}

static struct seen *seen_new(void)
{
	struct seen *s = calloc(1, sizeof(*s));
	if (!s)
		exit(2);
	for (size_t i = 0; i < MAX_RECS; i++)
		s->expect_id[i] = i;
	return s;
}

static int replay(const char *dir, uint64_t gen, struct seen *s, struct sto_wal_replay_result *r)
{
	s->n = 0;
	memset(r, 0, sizeof(*r));
	return sto_wal_replay(dir, gen, collect, s, r);
}

/* Writes records with lengths lens[0..n) and ids 0..n-1 into a fresh file. */
static void write_records(const char *dir, uint64_t gen, const size_t *lens, size_t n,
			  uint64_t *ends)
{
	struct sto_wal *w;
	CHECK_EQ_INT(open_wal(dir, gen, STO_SYNC_FDATASYNC, 0, &w), 0);
	for (size_t i = 0; i < n; i++) {
		uint8_t *p = malloc(lens[i] + 1);
		fill(p, lens[i], i);
		CHECK_EQ_INT(sto_wal_append(w, STO_WAL_REC_POINTS, p, lens[i]), 0);
		free(p);
		if (ends)
			ends[i] = sto_wal_size(w);
	}
	sto_wal_close(w);
}

/* ---- tests ------------------------------------------------------------------- */

static void test_round_trip(void)
{
	char dir[PATH_MAX];
	make_dir(dir, sizeof(dir));
	enum { N = 400 };
	static size_t lens[N];
	uint64_t bytes = 0;
	srand(42);
	for (size_t i = 0; i < N; i++) {
		lens[i] = i % 17 == 0 ? 0 : (size_t)(rand() % 6000);
		if (i == 100 || i == 300)
			lens[i] = (3u << 20) + 5; /* larger than the replay read block */
		bytes += STO_WAL_REC_HEADER_SIZE + lens[i];
	}
	struct sto_wal *w;
	CHECK_EQ_INT(open_wal(dir, 7, STO_SYNC_FDATASYNC, 0, &w), 0);
	CHECK_EQ_INT(sto_wal_gen(w), 7);
	CHECK_EQ_INT(sto_wal_size(w), STO_WAL_HEADER_SIZE);
	for (size_t i = 0; i < N; i++) {
		uint8_t *p = malloc(lens[i] + 1);
		fill(p, lens[i], i);
		CHECK_EQ_INT(sto_wal_append(w, (uint8_t)(i % 3), lens[i] ? p : NULL, lens[i]), 0);
		free(p);
	}
	struct sto_wal_stats st;
	sto_wal_get_stats(w, &st);
	CHECK_EQ_INT(st.records, N);
	CHECK_EQ_INT(st.bytes, bytes);
	CHECK_EQ_INT(st.errors, 0);
	CHECK(st.syncs >= 1 && st.syncs <= N);
	CHECK(st.sync_ns_max <= st.sync_ns_total);
	CHECK_EQ_INT(sto_wal_size(w), STO_WAL_HEADER_SIZE + bytes);
	sto_wal_close(w);

	struct seen *s = seen_new();
	struct sto_wal_replay_result r;
	CHECK_EQ_INT(replay(dir, 7, s, &r), 0);
	CHECK_EQ_INT(r.records, N);
	CHECK_EQ_INT(s->n, N);
	CHECK_EQ_INT(r.tail, 0);
	CHECK_EQ_INT(r.valid_bytes, STO_WAL_HEADER_SIZE + bytes);
	CHECK_EQ_INT(r.file_bytes, STO_WAL_HEADER_SIZE + bytes);
	CHECK_EQ_INT(s->gen, 7);
	int bad = 0;
	for (size_t i = 0; i < N; i++)
		bad += s->len[i] != lens[i] || s->type[i] != i % 3 || !s->content_ok[i];
	CHECK_EQ_INT(bad, 0);
	free(s);
	remove_dir(dir);
}

enum { THREADS = 8, PER_THREAD = 500 };

struct appender {
	struct sto_wal *w;
	uint32_t tid;
	int failures;
};

static void *append_thread(void *arg)
{
	struct appender *a = arg;
	uint8_t buf[8 + 64];
	for (uint32_t seq = 0; seq < PER_THREAD; seq++) {
		uint64_t id = ((uint64_t)a->tid << 32) | seq;
		size_t len = 8 + seq % 64;
		fill(buf, len, id);
		if (sto_wal_append(a->w, STO_WAL_REC_POINTS, buf, len) != 0)
			a->failures++;
	}
	return NULL;
}

/* Replay callback for the concurrent test: each (tid, seq) exactly once, in
 * per-thread order, with intact contents. */
struct conc_seen {
	int count[THREADS][PER_THREAD];
	int32_t last_seq[THREADS];
	int bad;
};

static int conc_collect(void *arg, uint64_t gen, uint8_t type, const uint8_t *p, size_t len)
{
	struct conc_seen *c = arg;
	(void)gen;
	if (type != STO_WAL_REC_POINTS || len < 8) {
		c->bad++;
		return 0;
	}
	uint64_t id = rdb_get_le64(p);
	uint32_t tid = (uint32_t)(id >> 32), seq = (uint32_t)id;
	if (tid >= THREADS || seq >= PER_THREAD || len != 8 + seq % 64 || !payload_ok(p, len, id) ||
	    (int32_t)seq <= c->last_seq[tid]) {
		c->bad++;
		return 0;
	}
	c->last_seq[tid] = (int32_t)seq;
	c->count[tid][seq]++;
	return 0;
}

static void test_concurrent_group_commit(void)
{
	char dir[PATH_MAX];
	make_dir(dir, sizeof(dir));
	struct sto_wal *w;
	/* A small queue so that backpressure is exercised too. */
	CHECK_EQ_INT(open_wal(dir, 1, STO_SYNC_FDATASYNC, 16, &w), 0);
	pthread_t th[THREADS];
	struct appender a[THREADS];
	for (uint32_t i = 0; i < THREADS; i++) {
		a[i] = (struct appender){.w = w, .tid = i};
		CHECK_EQ_INT(pthread_create(&th[i], NULL, append_thread, &a[i]), 0);
	}
	int failures = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		failures += a[i].failures;
	}
	CHECK_EQ_INT(failures, 0);
	struct sto_wal_stats st;
	sto_wal_get_stats(w, &st);
	CHECK_EQ_INT(st.records, THREADS * PER_THREAD);
	CHECK(st.syncs < st.records); /* group commit: fsyncs were shared */
	CHECK(st.syncs > 0);
	fprintf(stderr, "  concurrent: %llu records, %llu fdatasyncs\n",
		(unsigned long long)st.records, (unsigned long long)st.syncs);
	sto_wal_close(w);

	struct conc_seen *c = calloc(1, sizeof(*c));
	for (int i = 0; i < THREADS; i++)
		c->last_seq[i] = -1;
	struct sto_wal_replay_result r;
	CHECK_EQ_INT(sto_wal_replay(dir, 1, conc_collect, c, &r), 0);
	CHECK_EQ_INT(r.records, THREADS * PER_THREAD);
	CHECK_EQ_INT(r.tail, 0);
	CHECK_EQ_INT(c->bad, 0);
	int not_once = 0;
	for (int t = 0; t < THREADS; t++)
		for (int q = 0; q < PER_THREAD; q++)
			not_once += c->count[t][q] != 1;
	CHECK_EQ_INT(not_once, 0);
	free(c);
	remove_dir(dir);
}

static void test_rotate(void)
{
	char dir[PATH_MAX];
	make_dir(dir, sizeof(dir));
	struct sto_wal *w;
	uint8_t buf[100];
	CHECK_EQ_INT(open_wal(dir, 10, STO_SYNC_FDATASYNC, 0, &w), 0);
	for (uint64_t i = 0; i < 5; i++) {
		fill(buf, 20, i);
		CHECK_EQ_INT(sto_wal_append(w, 1, buf, 20), 0);
	}
	CHECK_EQ_INT(sto_wal_rotate(w, 10), -EEXIST); /* stays on 10 */
	CHECK_EQ_INT(sto_wal_gen(w), 10);
	CHECK_EQ_INT(sto_wal_rotate(w, 11), 0);
	CHECK_EQ_INT(sto_wal_gen(w), 11);
	CHECK_EQ_INT(sto_wal_size(w), STO_WAL_HEADER_SIZE);
	for (uint64_t i = 0; i < 7; i++) {
		fill(buf, 30, i);
		CHECK_EQ_INT(sto_wal_append(w, 1, buf, 30), 0);
	}
	CHECK_EQ_INT(sto_wal_size(w), STO_WAL_HEADER_SIZE + 7 * (16 + 30));
	sto_wal_close(w);

	uint64_t *gens = NULL;
	size_t n = 0;
	CHECK_EQ_INT(sto_wal_list(dir, &gens, &n), 0);
	CHECK_EQ_INT(n, 2);
	if (n == 2) {
		CHECK_EQ_INT(gens[0], 10);
		CHECK_EQ_INT(gens[1], 11);
	}
	free(gens);
	struct seen *s = seen_new();
	struct sto_wal_replay_result r;
	CHECK_EQ_INT(replay(dir, 10, s, &r), 0);
	CHECK_EQ_INT(s->n, 5);
	CHECK_EQ_INT(s->gen, 10);
	CHECK(s->len[4] == 20 && s->content_ok[4]);
	CHECK_EQ_INT(replay(dir, 11, s, &r), 0);
	CHECK_EQ_INT(s->n, 7);
	CHECK_EQ_INT(s->gen, 11);
	CHECK(s->len[6] == 30 && s->content_ok[6]);
	CHECK_EQ_INT(r.tail, 0);
	free(s);
	remove_dir(dir);
}

/* sto_wal_prepare makes the next file while appends go on into the current
 * one; the rotation then uses it; a prepared file no rotation used is gone
 * after close. */
static void test_prepare(void)
{
	char dir[PATH_MAX];
	make_dir(dir, sizeof(dir));
	struct sto_wal *w;
	uint8_t buf[100];
	CHECK_EQ_INT(open_wal(dir, 3, STO_SYNC_FDATASYNC, 0, &w), 0);
	fill(buf, 20, 0);
	CHECK_EQ_INT(sto_wal_append(w, 1, buf, 20), 0);
	CHECK_EQ_INT(sto_wal_prepare(w, 4), 0);
	CHECK_EQ_INT(sto_wal_prepare(w, 4), 0); /* already prepared */
	CHECK_EQ_INT(file_size(dir, 4), STO_WAL_HEADER_SIZE);
	fill(buf, 20, 1);
	CHECK_EQ_INT(sto_wal_append(w, 1, buf, 20), 0); /* still into 3 */
	CHECK_EQ_INT(sto_wal_gen(w), 3);
	CHECK_EQ_INT(file_size(dir, 3), STO_WAL_HEADER_SIZE + 2 * (16 + 20));
	CHECK_EQ_INT(sto_wal_rotate(w, 4), 0);
	CHECK_EQ_INT(sto_wal_gen(w), 4);
	fill(buf, 30, 0);
	CHECK_EQ_INT(sto_wal_append(w, 1, buf, 30), 0);
	CHECK_EQ_INT(file_size(dir, 4), STO_WAL_HEADER_SIZE + 16 + 30);
	CHECK_EQ_INT(sto_wal_prepare(w, 6), 0);
	CHECK_EQ_INT(sto_wal_prepare(w, 5), 0); /* replaces the one for 6 */
	CHECK_EQ_INT(file_size(dir, 6), UINT64_MAX);
	CHECK_EQ_INT(file_size(dir, 5), STO_WAL_HEADER_SIZE);
	sto_wal_close(w); /* 5 was never used: removed */

	uint64_t *gens = NULL;
	size_t n = 0;
	CHECK_EQ_INT(sto_wal_list(dir, &gens, &n), 0);
	CHECK_EQ_INT(n, 2);
	if (n == 2)
		CHECK(gens[0] == 3 && gens[1] == 4);
	free(gens);
	struct seen *s = seen_new();
	struct sto_wal_replay_result r;
	CHECK_EQ_INT(replay(dir, 3, s, &r), 0);
	CHECK_EQ_INT(s->n, 2);
	CHECK(s->content_ok[0] && s->content_ok[1]);
	CHECK_EQ_INT(replay(dir, 4, s, &r), 0);
	CHECK_EQ_INT(s->n, 1);
	CHECK(s->len[0] == 30 && s->content_ok[0]);
	CHECK_EQ_INT(r.tail, 0);
	free(s);
	remove_dir(dir);
}

static void test_torn_tail(void)
{
	char dir[PATH_MAX], path[PATH_CAP];
	make_dir(dir, sizeof(dir));
	const size_t lens[] = {10, 0, 100, 37, 50};
	uint64_t ends[5];
	write_records(dir, 3, lens, 5, ends);
	file_path(path, sizeof(path), dir, 3);
	struct seen *s = seen_new();
	struct sto_wal_replay_result r;
	int wrong = 0;
	/* Every cut inside the last record (header or payload). */
	for (uint64_t cut = ends[4] - 1; cut > ends[3]; cut--) {
		CHECK_EQ_INT(truncate(path, (off_t)cut), 0);
		int rc = replay(dir, 3, s, &r);
		wrong += rc != 0 || r.records != 4 || s->n != 4 || r.tail != 1 ||
			 r.valid_bytes != ends[3] || r.file_bytes != cut;
	}
	CHECK_EQ_INT(wrong, 0);
	CHECK_EQ_INT(truncate(path, (off_t)ends[3]), 0);
	CHECK_EQ_INT(replay(dir, 3, s, &r), 0);
	CHECK(r.records == 4 && r.tail == 0 && r.valid_bytes == ends[3]);
	CHECK(s->len[3] == 37 && s->content_ok[3] && s->len[1] == 0);
	/* A file whose header never made it: empty, torn, not an error. */
	CHECK_EQ_INT(truncate(path, 20), 0);
	CHECK_EQ_INT(replay(dir, 3, s, &r), 0);
	CHECK(r.records == 0 && r.tail == 1 && r.valid_bytes == 0 && r.file_bytes == 20);
	CHECK_EQ_INT(truncate(path, 0), 0);
	CHECK_EQ_INT(replay(dir, 3, s, &r), 0);
	CHECK(r.records == 0 && r.tail == 1);
	CHECK_EQ_INT(replay(dir, 4, s, &r), -ENOENT);
	free(s);
	remove_dir(dir);
}

static void poke(const char *path, uint64_t off, uint8_t xor_mask)
{
	int fd = open(path, O_RDWR);
	uint8_t b = 0;
	CHECK(fd >= 0);
	CHECK_EQ_INT(pread(fd, &b, 1, (off_t)off), 1);
	b ^= xor_mask;
	CHECK_EQ_INT(pwrite(fd, &b, 1, (off_t)off), 1);
	close(fd);
}

/* Damage in the middle: record 2 is skipped with exactly its bytes, the
 * intact records 3 and 4 after it are replayed. */
static void check_middle_damage(const char *dir, struct seen *s, uint64_t rec2, uint64_t end2)
{
	struct sto_wal_replay_result r;
	CHECK_EQ_INT(replay(dir, 3, s, &r), 0);
	CHECK_EQ_INT(r.records, 4);
	CHECK_EQ_INT(r.tail, 0);
	CHECK_EQ_INT(r.ndamaged, 1);
	CHECK_EQ_INT(r.damaged[0].off, rec2);
	CHECK_EQ_INT(r.damaged[0].len, end2 - rec2);
	CHECK_EQ_INT(r.damaged_bytes, end2 - rec2);
	CHECK(s->n == 4 && s->id[0] == 0 && s->id[1] == UINT64_MAX && s->id[2] == 3 &&
	      s->id[3] == 4);
}

static void test_corrupt_record(void)
{
	char dir[PATH_MAX], path[PATH_CAP];
	make_dir(dir, sizeof(dir));
	const size_t lens[] = {10, 0, 100, 37, 50};
	uint64_t ends[5];
	write_records(dir, 3, lens, 5, ends);
	file_path(path, sizeof(path), dir, 3);
	struct seen *s = seen_new();
	struct sto_wal_replay_result r;
	uint64_t rec2 = ends[1];
	/* Payload bytes of record 2, then its header bytes (every length byte,
	 * type, reserved, checksum). */
	const uint64_t offs[] = {rec2 + 16, rec2 + 16 + 50, rec2 + 16 + 99, rec2,
				 rec2 + 1,  rec2 + 2,	    rec2 + 3,	    rec2 + 4,
				 rec2 + 5,  rec2 + 7,	    rec2 + 8,	    rec2 + 15};
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		poke(path, offs[i], 0xff);
		check_middle_damage(dir, s, rec2, ends[2]);
		poke(path, offs[i], 0x01 ^ 0xff);
		check_middle_damage(dir, s, rec2, ends[2]);
		poke(path, offs[i], 0x01);
	}
	/* The last record damaged: nothing intact follows, so it is the tail. */
	poke(path, ends[3] + 20, 0x04);
	CHECK_EQ_INT(replay(dir, 3, s, &r), 0);
	CHECK(r.records == 4 && r.tail == 2 && r.ndamaged == 0 && r.valid_bytes == ends[3]);
	poke(path, ends[3] + 20, 0x04);
	CHECK_EQ_INT(replay(dir, 3, s, &r), 0);
	CHECK(r.records == 5 && r.tail == 0 && r.ndamaged == 0);
	/* Record 1 damaged, record 3 damaged and record 4 torn: 1 is damage in
	 * the middle (record 2 follows intact), 3 and 4 are the tail. */
	poke(path, ends[0] + 9, 0x80);
	poke(path, ends[2] + 16, 0x80);
	CHECK_EQ_INT(truncate(path, (off_t)(ends[4] - 3)), 0);
	CHECK_EQ_INT(replay(dir, 3, s, &r), 0);
	CHECK(r.records == 2 && r.ndamaged == 1 && r.tail == 2 && s->id[0] == 0 && s->id[1] == 2);
	CHECK(r.damaged[0].off == ends[0] && r.damaged[0].len == 16 && r.valid_bytes == ends[2]);
	/* keep_range copies the damaged bytes exactly, and once. */
	char keep[PATH_CAP], kept[PATH_CAP + 64];
	snprintf(keep, sizeof(keep), "%s/keep", dir);
	CHECK_EQ_INT(sto_wal_keep_range(dir, 3, ends[2], ends[3] - ends[2], keep), 0);
	CHECK_EQ_INT(sto_wal_keep_range(dir, 3, ends[2], ends[3] - ends[2], keep), 0);
	snprintf(kept, sizeof(kept), "%s/wal-%016llx-%llu.damaged", keep, 3ull,
		 (unsigned long long)ends[2]);
	uint8_t a[64], b[64];
	int fa = open(path, O_RDONLY), fb = open(kept, O_RDONLY);
	CHECK(fa >= 0 && fb >= 0);
	CHECK_EQ_INT(pread(fa, a, 53, (off_t)ends[2]), 53);
	CHECK_EQ_INT(pread(fb, b, sizeof(b), 0), 53);
	CHECK(memcmp(a, b, 53) == 0);
	close(fa);
	close(fb);
	CHECK_EQ_INT(unlink(kept), 0);
	CHECK_EQ_INT(rmdir(keep), 0);
	free(s);
	remove_dir(dir);
}

/* A file sto_wal_prepare zero-filled (prealloc_bytes): appends overwrite
 * the zeros, replay stops at the first zero header without calling it a
 * tail; a last record cut short (zeros run on past it) is torn, a whole
 * last record with a bad checksum is still corrupt. */
static void test_prealloc(void)
{
	char dir[PATH_MAX], path[PATH_CAP];
	make_dir(dir, sizeof(dir));
	struct sto_wal *w;
	static uint8_t buf[4096];
	const uint64_t prealloc = (1u << 20) + (1u << 19) + 5;
	struct sto_wal_options o = {
	    .dir = dir, .gen = 1, .sync = STO_SYNC_NONE, .prealloc_bytes = prealloc};
	CHECK_EQ_INT(sto_wal_open(&o, &w), 0);
	CHECK_EQ_INT(file_size(dir, 1), STO_WAL_HEADER_SIZE); /* the first file is not */
	CHECK_EQ_INT(sto_wal_prepare(w, 2), 0);		      /* nor after a short one */
	CHECK_EQ_INT(file_size(dir, 2), STO_WAL_HEADER_SIZE);
	for (uint64_t i = 0; i < 300; i++) { /* generation 1 past 1 MiB */
		fill(buf, sizeof(buf), i);
		CHECK_EQ_INT(sto_wal_append(w, 1, buf, sizeof(buf)), 0);
	}
	uint64_t used = sto_wal_size(w);
	CHECK_EQ_INT(sto_wal_prepare(w, 3), 0); /* replaces the one for 2 */
	CHECK_EQ_INT(file_size(dir, 2), UINT64_MAX);
	CHECK_EQ_INT(file_size(dir, 3), used + used / 8);
	CHECK_EQ_INT(sto_wal_rotate(w, 3), 0);
	for (uint64_t i = 0; i < 400; i++) { /* past its zeros: the file grows */
		fill(buf, sizeof(buf), i);
		CHECK_EQ_INT(sto_wal_append(w, 1, buf, sizeof(buf)), 0);
	}
	uint64_t used3 = sto_wal_size(w);
	CHECK_EQ_INT(file_size(dir, 3), used3);
	CHECK_EQ_INT(sto_wal_prepare(w, 4), 0); /* capped at prealloc_bytes */
	CHECK_EQ_INT(file_size(dir, 4), prealloc);
	CHECK_EQ_INT(sto_wal_rotate(w, 4), 0);
	for (uint64_t i = 0; i < 3; i++) {
		fill(buf, 40, i);
		CHECK_EQ_INT(sto_wal_append(w, 1, buf, 40), 0);
	}
	CHECK_EQ_INT(sto_wal_size(w), STO_WAL_HEADER_SIZE + 3 * (16 + 40));
	sto_wal_close(w);
	CHECK_EQ_INT(file_size(dir, 4), prealloc);

	struct seen *s = seen_new();
	struct sto_wal_replay_result r;
	uint64_t end = STO_WAL_HEADER_SIZE + 3 * (16 + 40);
	CHECK_EQ_INT(replay(dir, 4, s, &r), 0);
	CHECK(r.records == 3 && r.tail == 0 && r.ndamaged == 0 && r.valid_bytes == end);
	CHECK(s->content_ok[0] && s->content_ok[1] && s->content_ok[2]);
	CHECK_EQ_INT(replay(dir, 3, s, &r), 0);
	CHECK(r.records == 400 && r.tail == 0 && r.ndamaged == 0 && r.valid_bytes == used3);
	/* A whole last record with one bad byte: corrupt, as without zeros. */
	file_path(path, sizeof(path), dir, 4);
	poke(path, end - 20, 0x10);
	CHECK_EQ_INT(replay(dir, 4, s, &r), 0);
	CHECK(r.records == 2 && r.tail == 2 && r.valid_bytes == end - 56);
	poke(path, end - 20, 0x10);
	/* Its last 16 bytes never written (zeros): torn. */
	int fd = open(path, O_WRONLY);
	static const uint8_t zeros[16];
	CHECK(fd >= 0 && pwrite(fd, zeros, 16, (off_t)(end - 16)) == 16);
	close(fd);
	CHECK_EQ_INT(replay(dir, 4, s, &r), 0);
	CHECK(r.records == 2 && r.tail == 1 && r.ndamaged == 0 && r.valid_bytes == end - 56);
	/* A stray byte far past the records: not zeros to the end, so not
	 * the file's clean end. */
	poke(path, prealloc - 1, 0x01);
	CHECK_EQ_INT(replay(dir, 4, s, &r), 0);
	CHECK(r.records == 2 && r.tail != 0);
	free(s);
	remove_dir(dir);
}

static void test_bad_file_header(void)
{
	char dir[PATH_MAX], path[PATH_CAP];
	make_dir(dir, sizeof(dir));
	const size_t lens[] = {10, 20};
	write_records(dir, 5, lens, 2, NULL);
	file_path(path, sizeof(path), dir, 5);
	struct seen *s = seen_new();
	struct sto_wal_replay_result r;
	r.records = 12345;
	poke(path, 0, 0x20); /* magic */
	CHECK_EQ_INT(sto_wal_replay(dir, 5, collect, s, &r), RDB_ECORRUPT);
	CHECK_EQ_INT(r.records, 12345); /* untouched on failure */
	CHECK_EQ_INT(s->n, 0);
	poke(path, 0, 0x20);
	poke(path, 8, 0x40); /* a version no build knows (64 + the current one) */
	CHECK_EQ_INT(replay(dir, 5, s, &r), RDB_EFORMAT);
	poke(path, 8, 0x40);
	poke(path, 16, 0x01); /* generation 5 -> 4 */
	CHECK_EQ_INT(replay(dir, 5, s, &r), RDB_ECORRUPT);
	poke(path, 16, 0x01);
	CHECK_EQ_INT(replay(dir, 5, s, &r), 0);
	CHECK_EQ_INT(r.records, 2);
	free(s);
	remove_dir(dir);
}

static int stop_after_one(void *arg, uint64_t gen, uint8_t type, const uint8_t *p, size_t len)
{
	int *calls = arg;
	(void)gen, (void)type, (void)p, (void)len;
	return ++*calls == 2 ? -ECANCELED : 0;
}

static void test_callback_stops(void)
{
	char dir[PATH_MAX];
	make_dir(dir, sizeof(dir));
	const size_t lens[] = {1, 2, 3};
	write_records(dir, 9, lens, 3, NULL);
	int calls = 0;
	struct sto_wal_replay_result r = {0};
	CHECK_EQ_INT(sto_wal_replay(dir, 9, stop_after_one, &calls, &r), -ECANCELED);
	CHECK_EQ_INT(calls, 2);
	remove_dir(dir);
}

static void append_ids(struct sto_wal *w, uint64_t first, uint64_t n, int expect)
{
	uint8_t buf[64];
	for (uint64_t i = first; i < first + n; i++) {
		fill(buf, 40, i);
		CHECK_EQ_INT(sto_wal_append(w, 1, buf, 40), expect);
	}
}

static void test_failure_injection(void)
{
	char dir[PATH_MAX];
	make_dir(dir, sizeof(dir));
	struct sto_wal *w;
	CHECK_EQ_INT(open_wal(dir, 2, STO_SYNC_FDATASYNC, 0, &w), 0);
	append_ids(w, 0, 3, 0);
	uint64_t good = sto_wal_size(w);
	sto_wal_test_fail_next(w, -ENOSPC, 0);
	append_ids(w, 100, 1, -ENOSPC);
	CHECK_EQ_INT(sto_wal_size(w), good);
	CHECK_EQ_INT(file_size(dir, 2), good); /* torn half truncated away */
	append_ids(w, 3, 2, 0);
	sto_wal_test_fail_next(w, -EIO, 0);
	append_ids(w, 101, 1, -EIO);
	append_ids(w, 5, 1, 0);
	struct sto_wal_stats st;
	sto_wal_get_stats(w, &st);
	CHECK_EQ_INT(st.errors, 2);
	CHECK_EQ_INT(st.records, 6);
	sto_wal_close(w);

	struct seen *s = seen_new();
	struct sto_wal_replay_result r;
	CHECK_EQ_INT(replay(dir, 2, s, &r), 0);
	CHECK_EQ_INT(r.records, 6);
	CHECK_EQ_INT(r.tail, 0);
	int bad = 0;
	for (size_t i = 0; i < s->n; i++)
		bad += s->id[i] != i || !s->content_ok[i];
	CHECK_EQ_INT(bad, 0);
	free(s);
	remove_dir(dir);
}

/* Asynchronous appends: every completion fires once, after its group; a
 * failed group's records get the error in their completion and are not in
 * the log; the rest replay in order. */
struct async_rec {
	struct sto_wal_async a;
	uint8_t buf[40];
	_Atomic int calls;
	_Atomic int result;
};

static void async_cb(void *arg, int result)
{
	struct async_rec *r = arg;
	atomic_store(&r->result, result);
	atomic_fetch_add(&r->calls, 1);
}

static void test_async_append(void)
{
	char dir[PATH_MAX];
	make_dir(dir, sizeof(dir));
	struct sto_wal *w;
	CHECK_EQ_INT(open_wal(dir, 3, STO_SYNC_FDATASYNC, 0, &w), 0);
	enum { N = 200 };
	struct async_rec *recs = calloc(N + 1, sizeof(*recs));
	for (int i = 0; i < N; i++) {
		fill(recs[i].buf, 40, (uint64_t)i);
		CHECK_EQ_INT(
		    sto_wal_append_async(w, 1, recs[i].buf, 40, &recs[i].a, async_cb, &recs[i]), 0);
	}
	/* a blocking append returns after every group before it finished */
	append_ids(w, N, 1, 0);
	/* a failed group: its record's completion gets the error */
	sto_wal_test_fail_next(w, -EIO, 0);
	fill(recs[N].buf, 40, 999);
	CHECK_EQ_INT(sto_wal_append_async(w, 1, recs[N].buf, 40, &recs[N].a, async_cb, &recs[N]),
		     0);
	sto_wal_close(w); /* drains the queue: every completion has run */
	int bad = 0;
	for (int i = 0; i < N; i++)
		bad += atomic_load(&recs[i].calls) != 1 || atomic_load(&recs[i].result) != 0;
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(atomic_load(&recs[N].calls), 1);
	CHECK_EQ_INT(atomic_load(&recs[N].result), -EIO);
	free(recs);
	struct seen *s = seen_new();
	struct sto_wal_replay_result r;
	CHECK_EQ_INT(replay(dir, 3, s, &r), 0);
	CHECK_EQ_INT(r.records, N + 1);
	bad = 0;
	for (size_t i = 0; i < s->n; i++)
		bad += s->id[i] != i || !s->content_ok[i];
	CHECK_EQ_INT(bad, 0);
	free(s);
	remove_dir(dir);
}

/* The group_done hook: every asynchronous append is in exactly one call's
 * list, with its result set, before its own completion runs; a failed
 * group's list carries the error. */
struct group_seen {
	struct async_rec *recs;
	size_t n;
	int calls;
	int listed[201];      /* times each rec was in a list */
	int completed_before; /* recs whose completion ran before their list */
	int wrong_result;
};

static void group_hook(void *arg, struct sto_wal_async *done)
{
	struct group_seen *g = arg; /* the WAL thread only: no lock needed */
	g->calls++;
	for (struct sto_wal_async *a = done; a; a = a->next) {
		struct async_rec *r = (struct async_rec *)(void *)a; /* a is its first member */
		size_t i = (size_t)(r - g->recs);
		if (i >= g->n)
			continue;
		g->listed[i]++;
		g->completed_before += atomic_load(&r->calls) != 0;
		g->wrong_result += a->result != (i + 1 == g->n ? -EIO : 0);
	}
}

static void test_group_done_hook(void)
{
	char dir[PATH_MAX];
	make_dir(dir, sizeof(dir));
	enum { N = 200 };
	struct group_seen g = {.recs = calloc(N + 1, sizeof(*g.recs)), .n = N + 1};
	struct sto_wal_options o = {.dir = dir,
				    .gen = 1,
				    .sync = STO_SYNC_FDATASYNC,
				    .group_done = group_hook,
				    .group_arg = &g};
	struct sto_wal *w;
	CHECK_EQ_INT(sto_wal_open(&o, &w), 0);
	for (int i = 0; i < N; i++) {
		fill(g.recs[i].buf, 40, (uint64_t)i);
		CHECK_EQ_INT(sto_wal_append_async(w, 1, g.recs[i].buf, 40, &g.recs[i].a, async_cb,
						  &g.recs[i]),
			     0);
	}
	append_ids(w, N, 1, 0); /* blocking appends are in no list */
	sto_wal_test_fail_next(w, -EIO, 0);
	fill(g.recs[N].buf, 40, 999);
	CHECK_EQ_INT(
	    sto_wal_append_async(w, 1, g.recs[N].buf, 40, &g.recs[N].a, async_cb, &g.recs[N]), 0);
	sto_wal_close(w);
	int bad = 0;
	for (int i = 0; i <= N; i++)
		bad += g.listed[i] != 1 || atomic_load(&g.recs[i].calls) != 1;
	CHECK_EQ_INT(bad, 0);
	CHECK(g.calls >= 2 && g.calls <= N + 1);
	CHECK_EQ_INT(g.completed_before, 0);
	CHECK_EQ_INT(g.wrong_result, 0);
	free(g.recs);
	remove_dir(dir);
}

static void test_broken_state(void)
{
	char dir[PATH_MAX];
	make_dir(dir, sizeof(dir));
	struct sto_wal *w;
	CHECK_EQ_INT(open_wal(dir, 2, STO_SYNC_FDATASYNC, 0, &w), 0);
	append_ids(w, 0, 2, 0);
	sto_wal_test_fail_next(w, -EIO, -EIO);
	append_ids(w, 100, 1, -EIO);
	append_ids(w, 101, 2, RDB_EIO); /* refused: the file may end in torn bytes */
	struct sto_wal_stats st;
	sto_wal_get_stats(w, &st);
	CHECK_EQ_INT(st.errors, 3);
	CHECK_EQ_INT(sto_wal_rotate(w, 3), 0); /* a fresh file is clean again */
	append_ids(w, 0, 2, 0);
	sto_wal_close(w);

	struct seen *s = seen_new();
	struct sto_wal_replay_result r;
	CHECK_EQ_INT(replay(dir, 2, s, &r), 0);
	CHECK_EQ_INT(r.records, 2);
	CHECK(r.tail != 0); /* the torn half-group the failed truncate left */
	CHECK(r.file_bytes > r.valid_bytes);
	CHECK_EQ_INT(replay(dir, 3, s, &r), 0);
	CHECK(r.records == 2 && r.tail == 0 && s->content_ok[1]);
	free(s);
	remove_dir(dir);
}

/* A real short write: RLIMIT_FSIZE cuts the first write short, the retry of
 * the remainder fails with -EFBIG; the prefix up to the limit is on disk. */
static void test_ring_short_write(void)
{
	char dir[PATH_MAX], path[PATH_CAP];
	make_dir(dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/f", dir);
	static uint8_t data[3000];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 13);
	struct iovec iov[3] = {{data, 1000}, {data + 1000, 1000}, {data + 2000, 1000}};
	struct sto_ring *r;
	CHECK_EQ_INT(sto_ring_open(4, &r), 0);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	struct rlimit old, lim;
	CHECK_EQ_INT(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = 1500;
	void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
	CHECK_EQ_INT(setrlimit(RLIMIT_FSIZE, &lim), 0);
	CHECK_EQ_INT(sto_ring_writev(r, fd, iov, 3, 0, true), -EFBIG);
	CHECK_EQ_INT(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, prev);
	uint8_t back[3000];
	CHECK_EQ_INT(pread(fd, back, sizeof(back), 0), 1500);
	CHECK(memcmp(back, data, 1500) == 0);
	/* Without the limit the same call completes, the ring still works. */
	CHECK_EQ_INT(sto_ring_writev(r, fd, iov, 3, 0, true), 0);
	CHECK_EQ_INT(pread(fd, back, sizeof(back), 0), 3000);
	CHECK(memcmp(back, data, 3000) == 0);
	close(fd);
	sto_ring_close(r);
	remove_dir(dir);
}

/* A failed group among concurrent appenders: every failed append is counted
 * in stats.errors and absent from the log; every successful one is there. */
static void test_failure_concurrent(void)
{
	char dir[PATH_MAX];
	make_dir(dir, sizeof(dir));
	struct sto_wal *w;
	CHECK_EQ_INT(open_wal(dir, 1, STO_SYNC_FDATASYNC, 0, &w), 0);
	sto_wal_test_fail_next(w, -ENOSPC, 0);
	pthread_t th[THREADS];
	struct appender a[THREADS];
	for (uint32_t i = 0; i < THREADS; i++) {
		a[i] = (struct appender){.w = w, .tid = i};
		CHECK_EQ_INT(pthread_create(&th[i], NULL, append_thread, &a[i]), 0);
	}
	int failures = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		failures += a[i].failures;
	}
	struct sto_wal_stats st;
	sto_wal_get_stats(w, &st);
	CHECK(failures >= 1);
	CHECK_EQ_INT(st.errors, failures);
	CHECK_EQ_INT(st.records, THREADS * PER_THREAD - failures);
	sto_wal_close(w);
	struct conc_seen *c = calloc(1, sizeof(*c));
	for (int i = 0; i < THREADS; i++)
		c->last_seq[i] = -1;
	struct sto_wal_replay_result r;
	CHECK_EQ_INT(sto_wal_replay(dir, 1, conc_collect, c, &r), 0);
	CHECK_EQ_INT(r.records, THREADS * PER_THREAD - failures);
	CHECK_EQ_INT(r.tail, 0);
	CHECK_EQ_INT(c->bad, 0);
	int dup = 0;
	for (int t = 0; t < THREADS; t++)
		for (int q = 0; q < PER_THREAD; q++)
			dup += c->count[t][q] > 1;
	CHECK_EQ_INT(dup, 0);
	free(c);
	remove_dir(dir);
}

static void test_sync_none(void)
{
	char dir[PATH_MAX];
	make_dir(dir, sizeof(dir));
	struct sto_wal *w;
	CHECK_EQ_INT(open_wal(dir, 1, STO_SYNC_NONE, 4, &w), 0);
	append_ids(w, 0, 50, 0);
	struct sto_wal_stats st;
	sto_wal_get_stats(w, &st);
	CHECK_EQ_INT(st.syncs, 0);
	CHECK_EQ_INT(st.records, 50);
	CHECK_EQ_INT(sto_wal_rotate(w, 2), 0);
	append_ids(w, 0, 3, 0);
	sto_wal_close(w);
	struct seen *s = seen_new();
	struct sto_wal_replay_result r;
	CHECK_EQ_INT(replay(dir, 1, s, &r), 0);
	CHECK(r.records == 50 && r.tail == 0 && s->content_ok[49] && s->id[49] == 49);
	CHECK_EQ_INT(replay(dir, 2, s, &r), 0);
	CHECK_EQ_INT(r.records, 3);
	free(s);
	remove_dir(dir);
}

static void touch(const char *dir, const char *name)
{
	char path[PATH_CAP];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT, 0644);
	CHECK(fd >= 0);
	close(fd);
}

static void test_list_remove(void)
{
	char dir[PATH_MAX];
	make_dir(dir, sizeof(dir));
	const uint64_t gens_in[] = {3, 1, 0x20, 0xfedcba9876543210ull};
	for (size_t i = 0; i < 4; i++) {
		struct sto_wal *w;
		CHECK_EQ_INT(open_wal(dir, gens_in[i], STO_SYNC_FDATASYNC, 0, &w), 0);
		sto_wal_close(w);
	}
	touch(dir, "wal-xyz.log");
	touch(dir, "wal-0000000000000002.log.tmp");
	touch(dir, "wal-000000000000000G.log");
	touch(dir, "WAL-0000000000000004.log");
	touch(dir, "wal-00000000000000005.log");
	touch(dir, "seg-0000000000000001.dat");
	uint64_t *g = NULL;
	size_t n = 0;
	CHECK_EQ_INT(sto_wal_list(dir, &g, &n), 0);
	CHECK_EQ_INT(n, 4);
	if (n == 4) {
		CHECK_EQ_INT(g[0], 1);
		CHECK_EQ_INT(g[1], 3);
		CHECK_EQ_INT(g[2], 0x20);
		CHECK(g[3] == 0xfedcba9876543210ull);
	}
	free(g);
	CHECK_EQ_INT(sto_wal_remove(dir, 3), 0);
	CHECK_EQ_INT(sto_wal_remove(dir, 3), -ENOENT);
	CHECK_EQ_INT(sto_wal_list(dir, &g, &n), 0);
	CHECK(n == 3 && g[0] == 1 && g[1] == 0x20);
	free(g);
	char missing[PATH_CAP];
	snprintf(missing, sizeof(missing), "%s/nope", dir);
	CHECK_EQ_INT(sto_wal_list(missing, &g, &n), -ENOENT);
	remove_dir(dir);
}

static void test_limits_and_open_errors(void)
{
	char dir[PATH_MAX];
	make_dir(dir, sizeof(dir));
	struct sto_wal *w, *w2 = NULL;
	uint8_t b[4] = {0};
	CHECK_EQ_INT(open_wal(dir, 1, STO_SYNC_FDATASYNC, 0, &w), 0);
	CHECK_EQ_INT(sto_wal_append(w, 1, b, (size_t)STO_WAL_MAX_PAYLOAD + 1), RDB_ELIMIT);
	CHECK_EQ_INT(sto_wal_append(w, 1, NULL, 0), 0);
	CHECK_EQ_INT(open_wal(dir, 1, STO_SYNC_FDATASYNC, 0, &w2), -EEXIST);
	CHECK(w2 == NULL);
	struct sto_wal_stats st;
	sto_wal_get_stats(w, &st);
	CHECK_EQ_INT(st.records, 1);
	sto_wal_close(w);
	sto_wal_close(NULL);
	char missing[PATH_CAP];
	snprintf(missing, sizeof(missing), "%s/nope", dir);
	CHECK_EQ_INT(open_wal(missing, 1, STO_SYNC_FDATASYNC, 0, &w2), -ENOENT);
	remove_dir(dir);
}

/* The I/O layer alone: more iovecs than IOV_MAX, one write, read back. */
static void test_ring_writev_many_iovecs(void)
{
	char dir[PATH_MAX], path[PATH_CAP];
	make_dir(dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/f", dir);
	enum { NIOV = 3000 };
	static struct iovec iov[NIOV];
	static uint8_t data[NIOV * 3];
	size_t total = 0;
	for (int i = 0; i < NIOV; i++) {
		size_t len = (size_t)(i % 4); /* includes empty entries */
		for (size_t j = 0; j < len; j++)
			data[total + j] = (uint8_t)(i + j);
		iov[i] = (struct iovec){.iov_base = data + total, .iov_len = len};
		total += len;
	}
	struct sto_ring *r;
	CHECK_EQ_INT(sto_ring_open(4, &r), 0);
	fprintf(stderr, "  ring: %s\n", sto_ring_is_uring(r) ? "io_uring" : "fallback");
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	CHECK_EQ_INT(sto_ring_writev(r, fd, iov, NIOV, 10, true), 0);
	CHECK_EQ_INT(sto_ring_writev(r, fd, iov, 0, 0, true), 0);
	CHECK_EQ_INT(sto_ring_datasync(r, fd), 0);
	uint8_t *back = malloc(total + 10);
	CHECK_EQ_INT(pread(fd, back, total + 10, 0), total + 10);
	CHECK(memcmp(back + 10, data, total) == 0);
	CHECK_EQ_INT(sto_ring_writev(r, -1, iov, 3, 0, true), -EBADF);
	free(back);
	close(fd);
	sto_ring_close(r);
	sto_ring_close(NULL);
	remove_dir(dir);
}

/* ---- series definitions (sto_wal_defs_fn) ---------------------------------- */

#define DEF_SERIES 64
#define DEF_RECS   1200

/* A record naming up to 8 series (ids 1..DEF_SERIES-1) by id, as a
 * compact batch would; its hook defines those not defined in the epoch. */
struct def_rec {
	uint64_t *mark; /* per series: the epoch it was defined in (WAL thread only) */
	uint32_t ids[8];
	size_t n;
	int fail; /* the hook returns this */
	uint8_t payload[8 * 4];
	struct sto_wal_async a;
	_Atomic int calls, result;
};

static int def_hook(void *arg, uint64_t epoch, struct rdb_buf *out)
{
	struct def_rec *r = arg;
	size_t start = out->len;
	for (size_t i = 0; i < r->n; i++) {
		uint32_t id = r->ids[i];
		if (r->mark[id] == epoch)
			continue;
		char metric[16];
		snprintf(metric, sizeof(metric), "m%u", id);
		struct sto_wal_key k = {.job = "job",
					.metric = metric,
					.rank = id,
					.job_len = 3,
					.metric_len = (uint16_t)strlen(metric)};
		int rc = sto_defs_add(out, start, id, &k);
		if (rc)
			return rc;
		r->mark[id] = epoch;
	}
	return r->fail;
}

static void def_rec_init(struct def_rec *r, uint64_t *mark, const uint32_t *ids, size_t n)
{
	memset(r, 0, sizeof(*r));
	r->mark = mark;
	r->n = n;
	for (size_t i = 0; i < n; i++) {
		r->ids[i] = ids[i];
		rdb_put_le32(r->payload + 4 * i, ids[i]);
	}
}

static int def_append(struct sto_wal *w, struct def_rec *r)
{
	struct sto_wal_rec rec = {.type = STO_WAL_REC_CBATCH,
				  .payload = r->payload,
				  .len = 4 * r->n,
				  .defs_fn = def_hook,
				  .defs_arg = r};
	return sto_wal_append_rec(w, &rec);
}

/* What a replay of such records saw. */
struct def_check {
	uint64_t gen;
	bool defined[DEF_SERIES];
	uint64_t records, def_records, definitions, undefined, bad_def;
	bool defined_before[DEF_SERIES]; /* by the definitions record just before */
	bool last_was_defs;
	uint32_t last_ids[8]; /* of the last CBATCH record */
	size_t last_n;
	uint32_t redefined_last; /* ids of the last record defined right before it */
};

static int def_note(void *arg, uint64_t sid, const struct sto_wal_key *k)
{
	struct def_check *c = arg;
	if (sid == 0 || sid >= DEF_SERIES || k->rank != sid)
		c->bad_def++;
	else
		c->defined[sid] = c->defined_before[sid] = true;
	c->definitions++;
	return 0;
}

static int def_replay_cb(void *arg, uint64_t gen, uint8_t type, const uint8_t *p, size_t len)
{
	struct def_check *c = arg;
	if (gen != c->gen) {
		memset(c->defined, 0, sizeof(c->defined));
		c->gen = gen;
	}
	if (type == STO_WAL_REC_DEFS) {
		memset(c->defined_before, 0, sizeof(c->defined_before));
		c->def_records++;
		c->last_was_defs = true;
		return sto_defs_decode(p, len, def_note, c) ? -EBADMSG : 0;
	}
	if (type != STO_WAL_REC_CBATCH)
		return -EBADMSG;
	c->records++;
	c->last_n = len / 4;
	c->redefined_last = 0;
	for (size_t i = 0; i < len / 4; i++) {
		uint32_t id = rdb_get_le32(p + 4 * i);
		c->last_ids[i] = id;
		if (id >= DEF_SERIES || !c->defined[id])
			c->undefined++;
		else if (c->last_was_defs && c->defined_before[id])
			c->redefined_last++;
	}
	c->last_was_defs = false;
	return 0;
}

static void async_cb_def(void *arg, int result)
{
	struct def_rec *r = arg;
	atomic_store(&r->result, result);
	atomic_fetch_add(&r->calls, 1);
}

struct def_thread_arg {
	struct sto_wal *w;
	struct def_rec *recs;
	size_t n;
	_Atomic int failures;
};

static void *def_thread(void *arg)
{
	struct def_thread_arg *t = arg;
	for (size_t i = 0; i < t->n; i++)
		if (def_append(t->w, &t->recs[i]) != 0)
			atomic_fetch_add(&t->failures, 1);
	return NULL;
}

/* Concurrent blocking and asynchronous appends, each naming random series:
 * every series is defined once in the file, before its first use, however
 * the records fell into groups. */
static void test_defs_order(void)
{
	char dir[PATH_MAX];
	make_dir(dir, sizeof(dir));
	struct sto_wal *w;
	CHECK_EQ_INT(open_wal(dir, 4, STO_SYNC_FDATASYNC, 64, &w), 0);
	static uint64_t mark[DEF_SERIES];
	struct def_rec *recs = calloc(DEF_RECS, sizeof(*recs));
	uint64_t x = 88172645463325252ull;
	bool used[DEF_SERIES] = {false};
	for (size_t i = 0; i < DEF_RECS; i++) {
		uint32_t ids[8];
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		size_t n = 1 + x % 8;
		for (size_t k = 0; k < n; k++) {
			ids[k] = 1 + (uint32_t)((x >> (8 * k)) % (DEF_SERIES - 1));
			for (size_t j = 0; j < k; j++)
				ids[k] = ids[k] == ids[j] ? 1 + ids[k] % (DEF_SERIES - 1) : ids[k];
		}
		def_rec_init(&recs[i], mark, ids, n);
	}
	enum { DTHREADS = 3, PER = DEF_RECS / 4 };
	pthread_t th[DTHREADS];
	struct def_thread_arg ta[DTHREADS];
	for (int t = 0; t < DTHREADS; t++) {
		ta[t] = (struct def_thread_arg){.w = w, .recs = recs + t * PER, .n = PER};
		pthread_create(&th[t], NULL, def_thread, &ta[t]);
	}
	int queued = 0;
	for (size_t i = DTHREADS * PER; i < DEF_RECS; i++) {
		struct def_rec *r = &recs[i];
		struct sto_wal_rec rec = {.type = STO_WAL_REC_CBATCH,
					  .payload = r->payload,
					  .len = 4 * r->n,
					  .defs_fn = def_hook,
					  .defs_arg = r};
		queued += sto_wal_append_rec_async(w, &rec, &r->a, async_cb_def, r) == 0;
	}
	for (int t = 0; t < DTHREADS; t++) {
		pthread_join(th[t], NULL);
		CHECK_EQ_INT(atomic_load(&ta[t].failures), 0);
	}
	CHECK_EQ_INT(queued, DEF_RECS - DTHREADS * PER);
	sto_wal_close(w); /* drains the async appends */
	int bad = 0;
	for (size_t i = 0; i < DEF_RECS; i++) {
		for (size_t k = 0; k < recs[i].n; k++)
			used[recs[i].ids[k]] = true;
		if (i >= DTHREADS * PER)
			bad +=
			    atomic_load(&recs[i].calls) != 1 || atomic_load(&recs[i].result) != 0;
	}
	CHECK_EQ_INT(bad, 0);
	size_t distinct = 0;
	for (int i = 0; i < DEF_SERIES; i++)
		distinct += used[i];
	struct def_check c = {.gen = 4};
	struct sto_wal_replay_result r;
	CHECK_EQ_INT(sto_wal_replay(dir, 4, def_replay_cb, &c, &r), 0);
	CHECK_EQ_INT(c.records, DEF_RECS);
	CHECK_EQ_INT(c.undefined, 0);
	CHECK_EQ_INT(c.bad_def, 0);
	CHECK_EQ_INT(c.definitions, distinct); /* once each: no failure, no rotation */
	CHECK_EQ_INT(r.records, DEF_RECS + c.def_records);
	CHECK_EQ_INT(r.tail, 0);
	free(recs);
	remove_dir(dir);
}

/* After a failed group (a torn write truncated back, or a hook that
 * failed) and after a rotation, the next records define their series
 * again: the definitions written before are not in the file any more. */
static void test_defs_after_failure_and_rotate(void)
{
	char dir[PATH_MAX];
	make_dir(dir, sizeof(dir));
	struct sto_wal *w;
	CHECK_EQ_INT(open_wal(dir, 6, STO_SYNC_FDATASYNC, 0, &w), 0);
	static uint64_t mark[DEF_SERIES];
	struct def_rec a, b, c, d, e;
	def_rec_init(&a, mark, (uint32_t[]){1, 2}, 2);
	CHECK_EQ_INT(def_append(w, &a), 0);
	uint64_t good = sto_wal_size(w);
	sto_wal_test_fail_next(w, -EIO, 0);
	def_rec_init(&b, mark, (uint32_t[]){3}, 1);
	CHECK_EQ_INT(def_append(w, &b), -EIO);
	CHECK_EQ_INT(sto_wal_size(w), good);
	def_rec_init(&c, mark, (uint32_t[]){1, 3}, 2);
	CHECK_EQ_INT(def_append(w, &c), 0);
	struct def_check ck = {.gen = 6};
	struct sto_wal_replay_result r;
	CHECK_EQ_INT(sto_wal_replay(dir, 6, def_replay_cb, &ck, &r), 0);
	CHECK_EQ_INT(ck.records, 2);
	CHECK_EQ_INT(ck.undefined, 0);
	CHECK_EQ_INT(ck.redefined_last, 2); /* 1 (defined before the failure) and 3 */
	/* A hook that fails: its group is refused, nothing written; the
	 * series it marked are defined again by the next record. */
	def_rec_init(&d, mark, (uint32_t[]){4, 5}, 2);
	d.fail = -ENOMEM;
	good = sto_wal_size(w);
	CHECK_EQ_INT(def_append(w, &d), -ENOMEM);
	CHECK_EQ_INT(sto_wal_size(w), good);
	def_rec_init(&e, mark, (uint32_t[]){4, 1}, 2);
	CHECK_EQ_INT(def_append(w, &e), 0);
	memset(&ck, 0, sizeof(ck));
	ck.gen = 6;
	CHECK_EQ_INT(sto_wal_replay(dir, 6, def_replay_cb, &ck, &r), 0);
	CHECK_EQ_INT(ck.records, 3);
	CHECK_EQ_INT(ck.undefined, 0);
	CHECK_EQ_INT(ck.redefined_last, 2);
	/* Rotation: a new file, everything defined anew. */
	CHECK_EQ_INT(sto_wal_rotate(w, 7), 0);
	CHECK_EQ_INT(def_append(w, &a), 0);
	CHECK_EQ_INT(def_append(w, &a), 0);
	struct sto_wal_stats st;
	sto_wal_get_stats(w, &st);
	CHECK_EQ_INT(st.def_records, 4); /* a, c, e, a after the rotation */
	sto_wal_close(w);
	memset(&ck, 0, sizeof(ck));
	ck.gen = 7;
	CHECK_EQ_INT(sto_wal_replay(dir, 7, def_replay_cb, &ck, &r), 0);
	CHECK_EQ_INT(ck.records, 2);
	CHECK_EQ_INT(ck.def_records, 1);
	CHECK_EQ_INT(ck.definitions, 2);
	CHECK_EQ_INT(ck.undefined, 0);
	remove_dir(dir);
}

int main(void)
{
	RUN(test_ring_writev_many_iovecs);
	RUN(test_ring_short_write);
	RUN(test_round_trip);
	RUN(test_concurrent_group_commit);
	RUN(test_rotate);
	RUN(test_prepare);
	RUN(test_prealloc);
	RUN(test_torn_tail);
	RUN(test_corrupt_record);
	RUN(test_bad_file_header);
	RUN(test_callback_stops);
	RUN(test_failure_injection);
	RUN(test_async_append);
	RUN(test_group_done_hook);
	RUN(test_defs_order);
	RUN(test_defs_after_failure_and_rotate);
	RUN(test_broken_state);
	RUN(test_failure_concurrent);
	RUN(test_sync_none);
	RUN(test_list_remove);
	RUN(test_limits_and_open_errors);
	return check_summary("wal");
}
