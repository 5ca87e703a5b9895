/* test_faults.c - the storage fault-point registry (storage/io/fault.h) and
 * exactly-once after injected I/O errors at the store's write sites: a
 * final checkpoint that fails on a full disk (issue 10, item 8), and each
 * point failing under concurrent writers followed by a close or a crash
 * (a forked child that _exit()s: what kill -9 leaves) and a restart. */
#include "check.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "storage/admin.h"
#include "storage/io/fault.h"
#include "storage/sto.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static char base[4096];
static int dir_seq;

/* ---- the registry ------------------------------------------------------- */

static void test_names_are_a_complete_table(void)
{
	for (int i = 0; i < STO_FP_COUNT; i++) {
		const char *n = sto_fault_name((enum sto_fault_point)i);
		CHECK(n != NULL);
		enum sto_fault_point p = STO_FP_COUNT;
		CHECK_EQ_INT(sto_fault_lookup(n, &p), 0);
		CHECK_EQ_INT(p, i);
		for (int j = 0; n && j < i; j++)
			CHECK(strcmp(n, sto_fault_name((enum sto_fault_point)j)) != 0);
	}
	CHECK(sto_fault_name(STO_FP_COUNT) == NULL);
	enum sto_fault_point p;
	CHECK_EQ_INT(sto_fault_lookup("no_such_point", &p), -ENOENT);
	CHECK_EQ_INT(sto_fault_lookup(NULL, &p), -ENOENT);
}

static void test_nth_hit_and_every_from(void)
{
	sto_fault_reset();
	CHECK_EQ_INT(sto_fault_hit(STO_FP_SEG_APPEND), 0); /* disarmed: counted, passes */
	CHECK_EQ_INT(sto_fault_hits(STO_FP_SEG_APPEND), 1);
	CHECK_EQ_INT(sto_fault_set(STO_FP_SEG_APPEND, ENOSPC, 3, false), 0);
	CHECK_EQ_INT(sto_fault_hits(STO_FP_SEG_APPEND), 0); /* set resets */
	int got[6];
	for (int i = 0; i < 6; i++)
		got[i] = sto_fault_hit(STO_FP_SEG_APPEND);
	CHECK_EQ_INT(got[0], 0);
	CHECK_EQ_INT(got[1], 0);
	CHECK_EQ_INT(got[2], -ENOSPC);
	CHECK_EQ_INT(got[3], 0);
	CHECK_EQ_INT(sto_fault_fired(STO_FP_SEG_APPEND), 1);
	CHECK_EQ_INT(sto_fault_hits(STO_FP_SEG_APPEND), 6);
	/* other points are not affected */
	CHECK_EQ_INT(sto_fault_hit(STO_FP_WAL_APPEND), 0);

	CHECK_EQ_INT(sto_fault_set(STO_FP_INDEX_COMMIT, EIO, 2, true), 0);
	CHECK_EQ_INT(sto_fault_hit(STO_FP_INDEX_COMMIT), 0);
	for (int i = 0; i < 5; i++)
		CHECK_EQ_INT(sto_fault_hit(STO_FP_INDEX_COMMIT), -EIO);
	CHECK_EQ_INT(sto_fault_fired(STO_FP_INDEX_COMMIT), 5);
	sto_fault_clear(STO_FP_INDEX_COMMIT);
	CHECK_EQ_INT(sto_fault_hit(STO_FP_INDEX_COMMIT), 0);
	CHECK_EQ_INT(sto_fault_fired(STO_FP_INDEX_COMMIT), 5); /* clear keeps counters */

	CHECK_EQ_INT(sto_fault_set(STO_FP_COUNT, EIO, 1, false), -EINVAL);
	CHECK_EQ_INT(sto_fault_set(STO_FP_WAL_TRIM, 0, 1, false), -EINVAL);
	CHECK_EQ_INT(sto_fault_set(STO_FP_WAL_TRIM, EIO, 0, false), -EINVAL);
	CHECK_EQ_INT(sto_fault_hit(STO_FP_COUNT), 0);
	sto_fault_reset();
	CHECK_EQ_INT(sto_fault_hits(STO_FP_SEG_APPEND), 0);
}

static void test_parse_spec(void)
{
	char err[256];
	sto_fault_reset();
	CHECK_EQ_INT(sto_fault_parse("", err, sizeof(err)), 0);
	CHECK_EQ_INT(sto_fault_parse("seg_append=ENOSPC@2+,wal_rotate=EIO@1,ckpt_commit=5@1", err,
				     sizeof(err)),
		     0);
	CHECK_EQ_INT(sto_fault_hit(STO_FP_SEG_APPEND), 0);
	CHECK_EQ_INT(sto_fault_hit(STO_FP_SEG_APPEND), -ENOSPC);
	CHECK_EQ_INT(sto_fault_hit(STO_FP_SEG_APPEND), -ENOSPC);
	CHECK_EQ_INT(sto_fault_hit(STO_FP_WAL_ROTATE), -EIO);
	CHECK_EQ_INT(sto_fault_hit(STO_FP_WAL_ROTATE), 0);
	CHECK_EQ_INT(sto_fault_hit(STO_FP_CKPT_COMMIT), -5);
	static const char *const bad[] = {
	    "nope=EIO@1",	"seg_append",	     "seg_append=EIO",
	    "seg_append=EIO@0", "seg_append=EIO@x",  "seg_append=EBOGUS@1",
	    "seg_append=@1",	"seg_append=EIO@-1", "seg_append=EIO@1++",
	    "=EIO@1",		"seg_append=0@1",    "wal_trim=EIO@1,bad",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		CHECK_EQ_INT(sto_fault_parse(bad[i], err, sizeof(err)), -EINVAL);
		CHECK(strstr(err, "RANKDB_FAULTS") != NULL);
	}
	/* a spec that fails arms nothing of it */
	sto_fault_reset();
	CHECK_EQ_INT(sto_fault_parse("wal_trim=EIO@1,bad", err, sizeof(err)), -EINVAL);
	CHECK_EQ_INT(sto_fault_hit(STO_FP_WAL_TRIM), 0);
	sto_fault_reset();
}

/* ---- the store: exactly once after a fault ------------------------------ */

#define NWRITERS  4
#define PER_BATCH 50u
#define CHUNK_MAX 64u
#define MAX_BATCH 4096u
#define EV_WRITER 3u /* writes one log event with each batch */

static void opts(struct sto_options *o, const char *dir)
{
	sto_options_default(o);
	o->data_dir = dir;
	o->chunk_max_points = CHUNK_MAX; /* size seals while writing */
	o->sync = STO_SYNC_NONE;
	o->index_map_bytes = 64ull << 20;
	o->checkpoint_interval_s = 1;
	o->segment_max_bytes = 8u << 10; /* new segments often: closed ones compact */
}

struct writer {
	struct sto *s;
	unsigned id;
	unsigned first, nbatches; /* writes batches [first, nbatches) */
	bool with_ids;
	/* outcome per batch: 0 not sent, 1 acknowledged, 2 error */
	unsigned char state[MAX_BATCH];
	unsigned acked;
};

/* Batch b of writer w: PER_BATCH points of series (job "f", rank w, "m"),
 * step = b * PER_BATCH + i, ts = 1e9 + step, value = step. */
static int write_batch(struct writer *w, unsigned b)
{
	struct mdl_batch *mb;
	int rc = mdl_batch_new(1 << 20, 1024, &mb);
	for (unsigned i = 0; rc == 0 && i < PER_BATCH; i++) {
		int64_t step = (int64_t)b * PER_BATCH + i;
		rc = mdl_batch_add(mb, "f", 1, w->id, "m", 1, 1000000000 + step, step, 0,
				   rdb_f64_bits((double)step));
	}
	struct mdl_events *ev = NULL;
	if (rc == 0 && w->id == EV_WRITER) { /* one log event per batch: event seals */
		rc = mdl_events_new(16, 1 << 16, &ev);
		struct mdl_event e = {.kind = MDL_EV_LOG,
				      .rank = w->id,
				      .ts_ns = 1000000000 + (int64_t)b,
				      .step = (int64_t)b,
				      .job = "f",
				      .job_len = 1,
				      .text = "ev",
				      .text_len = 2,
				      .fields = "{}",
				      .fields_len = 2};
		if (rc == 0)
			rc = mdl_events_add(ev, &e);
	}
	char id[64];
	int il = snprintf(id, sizeof(id), "w%u-b%u", w->id, b);
	struct sto_write_req req = {.points = mb,
				    .events = ev,
				    .batch_id = w->with_ids ? id : NULL,
				    .batch_id_len = w->with_ids ? (size_t)il : 0};
	struct sto_write_result res;
	if (rc == 0)
		rc = sto_write_req(w->s, &req, &res);
	mdl_batch_free(mb);
	mdl_events_free(ev);
	return rc;
}

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	for (unsigned b = w->first; b < w->nbatches; b++) {
		int rc = write_batch(w, b);
		if (rc == RDB_EBUSY) {
			usleep(1000);
			rc = write_batch(w, b);
		}
		w->acked += rc == 0;
		__atomic_store_n(&w->state[b], rc == 0 ? 1 : 2, __ATOMIC_RELEASE);
	}
	return NULL;
}

/* Starts NWRITERS threads writing batches [first, n) (odd writers with
 * batch ids); ws keeps their outcomes across calls (zero it first). */
static void start_writers(struct writer *ws, pthread_t *th, struct sto *s, unsigned first,
			  unsigned n)
{
	for (unsigned i = 0; i < NWRITERS; i++) {
		ws[i].s = s;
		ws[i].id = i;
		ws[i].with_ids = i % 2 == 1;
		ws[i].first = first;
		ws[i].nbatches = n;
		pthread_create(&th[i], NULL, writer_main, &ws[i]);
	}
}

static void join_writers(pthread_t *th)
{
	for (unsigned i = 0; i < NWRITERS; i++)
		pthread_join(th[i], NULL);
}

static int ev_count_cb(void *arg, const struct mdl_event *e)
{
	unsigned *count = arg;
	if (e->step >= 0 && e->step < (int64_t)MAX_BATCH && e->text_len == 2 &&
	    memcmp(e->text, "ev", 2) == 0)
		count[e->step]++;
	else
		count[MAX_BATCH]++; /* never written */
	return 0;
}

/* The events of writer EV_WRITER: one per batch, exactly once likewise. */
static unsigned check_events(struct sto *s, const struct writer *w, unsigned *dups_out)
{
	static unsigned count[MAX_BATCH + 1];
	memset(count, 0, sizeof(count));
	struct sto_ev_filter f = {.job = "f",
				  .kinds = 1u << MDL_EV_LOG,
				  .from_ns = INT64_MIN,
				  .to_ns = INT64_MAX,
				  .attempt = -1};
	struct sto_read_error err;
	if (sto_events_read(s, &f, 10 * MAX_BATCH, ev_count_cb, count, &err) != 0)
		return 1;
	unsigned bad = count[MAX_BATCH] != 0, dups = 0;
	for (unsigned b = 0; b < MAX_BATCH; b++) {
		unsigned char state = b < w->nbatches ? w->state[b] : 0;
		dups += count[b] > 1;
		bad +=
		    count[b] > 1 || (state == 1 && count[b] != 1) || (state == 0 && count[b] != 0);
	}
	if (bad)
		fprintf(stderr, "events of writer %u: %u problems (%u twice or more)\n", w->id, bad,
			dups);
	*dups_out += dups;
	return bad;
}

/* Reads writer w's series and checks exactly-once: each point of an
 * acknowledged batch once, a failed batch's points 0 or 1 times, nothing
 * twice, nothing that was never sent. Returns the number of problems. */
static unsigned check_writer(struct sto *s, const struct writer *w, unsigned *dups_out)
{
	struct mdl_series_key k = {0};
	snprintf(k.job, sizeof(k.job), "f");
	k.rank = w->id;
	snprintf(k.metric, sizeof(k.metric), "m");
	uint64_t sid = 0;
	if (sto_lookup_series(s, &k, &sid) != 0)
		return w->acked ? 1 : 0;
	struct sto_range r = {INT64_MIN, INT64_MAX, false, 0, 0};
	struct mdl_cols c = MDL_COLS_INIT;
	struct sto_read_error err;
	if (sto_read(s, sid, &r, 100000000, &c, &err) != 0)
		return 1;
	size_t nsteps = (size_t)w->nbatches * PER_BATCH;
	unsigned *count = calloc(nsteps + 1, sizeof(*count));
	unsigned bad = 0, dups = 0;
	for (size_t i = 0; i < c.n; i++) {
		int64_t st = c.step[i];
		if (st < 0 || (size_t)st >= nsteps || c.ts_ns[i] != 1000000000 + st ||
		    c.value[i] != rdb_f64_bits((double)st)) {
			bad++;
			continue;
		}
		count[st]++;
	}
	for (size_t st = 0; st < nsteps; st++) {
		unsigned char state = w->state[st / PER_BATCH];
		dups += count[st] > 1;
		bad += count[st] > 1 || (state == 1 && count[st] != 1) ||
		       (state == 0 && count[st] != 0);
	}
	if (bad)
		fprintf(stderr,
			"writer %u: %zu points read, %u problems (%u steps twice or more)\n", w->id,
			c.n, bad, dups);
	*dups_out += dups;
	free(count);
	mdl_cols_free(&c);
	return bad;
}

static unsigned check_all(struct sto *s, const struct writer *ws, unsigned *dups)
{
	unsigned bad = 0;
	for (unsigned i = 0; i < NWRITERS; i++)
		bad += check_writer(s, &ws[i], dups);
	return bad + check_events(s, &ws[EV_WRITER], dups);
}

/* Issue 10, item 8: SIGTERM on a full disk whose final checkpoint fails
 * with segment append ENOSPC ("the WAL still holds every acknowledged
 * point"); after space returns, a restart must store every acknowledged
 * point once, not twice. */
static void test_final_checkpoint_enospc_is_exactly_once(void)
{
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/store.%d", base, dir_seq++);
	struct sto_options o;
	opts(&o, dir);
	struct sto *s;
	sto_fault_reset();
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	static struct writer ws[NWRITERS];
	pthread_t th[NWRITERS];
	memset(ws, 0, sizeof(ws));
	start_writers(ws, th, s, 0, 300); /* batches 0..299, size seals */
	join_writers(th);
	CHECK_EQ_INT(sto_checkpoint(s), 0);
	/* the disk fills: every segment append fails from now on; writes go on */
	sto_fault_set(STO_FP_SEG_APPEND, ENOSPC, 1, true);
	for (unsigned i = 0; i < NWRITERS; i++) {
		ws[i].nbatches = 600;
		for (unsigned b = 300; b < 600; b++) {
			int rc = write_batch(&ws[i], b);
			ws[i].state[b] = rc == 0 ? 1 : 2;
			ws[i].acked += rc == 0;
		}
	}
	int rc = sto_close_rc(s); /* SIGTERM */
	CHECK(rc != 0);		  /* the final checkpoint failed */
	CHECK(sto_fault_fired(STO_FP_SEG_APPEND) > 0);
	sto_fault_reset(); /* space returns */
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	unsigned dups = 0;
	CHECK_EQ_INT(check_all(s, ws, &dups), 0);
	CHECK_EQ_INT(dups, 0);
	sto_close(s);
	/* and once more after a clean restart */
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	dups = 0;
	CHECK_EQ_INT(check_all(s, ws, &dups), 0);
	sto_close(s);
}

static const char *point_name(enum sto_fault_point p)
{
	return p == STO_FP_COUNT ? "disk_full(all points)" : sto_fault_name(p);
}

/* ---- the walk: every point, under writers and background work --------- */

struct walk_shared {
	struct writer ws[NWRITERS];
	uint64_t fired;
};

/* Writes 60 points of a job with 1970 timestamps whose retention is 1 s
 * (retention drops them, with rollup tiers on) and of a job that gets
 * deleted: retention, rollups and job deletes run at the fault too. */
static void side_jobs(struct sto *s)
{
	struct mdl_batch *mb;
	if (mdl_batch_new(1 << 20, 1024, &mb) != 0)
		return;
	for (int i = 0; i < 60; i++) {
		mdl_batch_add(mb, "old", 3, 0, "m", 1, 1000 + i, i, 0, rdb_f64_bits(1.0));
		mdl_batch_add(mb, "gone", 4, 0, "m", 1, 1000 + i, i, 0, rdb_f64_bits(1.0));
	}
	(void)sto_write(s, mb);
	mdl_batch_free(mb);
}

/* A checkpoint, retention, a job delete and (compact) a compaction, with
 * the side jobs written again first. */
static void background_work(struct sto *s, bool compact)
{
	struct sto_retention_result rr;
	struct sto_compact_result cr;
	struct sto_delete_result dr;
	side_jobs(s);
	(void)sto_checkpoint(s);
	(void)sto_retention_run(s, &rr);
	(void)sto_delete_job(s, "gone", &dr);
	if (compact)
		(void)sto_compact(s, 0.99, &cr);
}

/* One run: writers and background work, then point p fails from its nth
 * hit (every hit on, or only that one) while they go on; then a close
 * (SIGTERM) or a crash (a child that _exit()s: kill -9); then the fault
 * is cleared, the store reopened and checked for exactly-once. *fired:
 * whether the fault was hit at all (the caller runs a scenario whose
 * fault never fired again: what the background threads do first decides
 * whether a point reached only after another failure, e.g. cutting
 * records off a segment after a failed index commit, is reached). */
static unsigned walk_one(enum sto_fault_point p, uint64_t nth, bool every, bool crash,
			 unsigned *dups, bool *fired)
{
	*fired = false;
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/walk.%d", base, dir_seq++);
	struct sto_options o;
	opts(&o, dir);
	struct walk_shared *sh =
	    mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	memset(sh, 0, sizeof(*sh));
	sto_fault_reset();
	pid_t pid = crash ? fork() : 0;
	if (pid == 0) {
		struct sto *s;
		if (sto_open(&o, &s) != 0)
			_exit(3);
		struct sto_lifecycle l;
		sto_lifecycle_default(&l);
		l.rollup_time_width_s = 60;
		l.rollup_step_width = 100;
		sto_set_lifecycle(s, &l);
		sto_retention_set(s, "old", 1);
		pthread_t th[NWRITERS];
		start_writers(sh->ws, th, s, 0, 40);
		background_work(s, false); /* dead space for the compaction below */
		join_writers(th);
		if (p == STO_FP_COUNT) /* the disk is full: every write site fails */
			for (int i = STO_FP_WAL_APPEND; i < STO_FP_COUNT; i++)
				sto_fault_set((enum sto_fault_point)i, ENOSPC, nth, every);
		else
			sto_fault_set(p, p == STO_FP_PREPARE ? ENOMEM : ENOSPC, nth, every);
		if (p == STO_FP_WAL_TRUNCATE) /* it only runs after a failed group */
			sto_fault_set(STO_FP_WAL_SYNC, EIO, nth, every);
		if (p == STO_FP_SEG_TRUNCATE) /* ... after a failed index commit */
			sto_fault_set(STO_FP_INDEX_COMMIT, EIO, nth, true);
		start_writers(sh->ws, th, s, 40, 100);
		/* each writer's first batch is answered before the background work
		 * starts: its checkpoint then has points and events to seal */
		for (unsigned i = 0; i < NWRITERS; i++)
			while (__atomic_load_n(&sh->ws[i].state[40], __ATOMIC_ACQUIRE) == 0)
				usleep(100);
		background_work(s, true);
		join_writers(th);
		if (!crash)
			(void)sto_close_rc(s); /* SIGTERM: the final checkpoint hits points too */
		for (int i = 0; i < STO_FP_COUNT; i++)
			sh->fired += p == STO_FP_COUNT || (int)p == i
					 ? sto_fault_fired((enum sto_fault_point)i)
					 : 0;
		if (crash)
			_exit(0); /* kill -9: nothing closed, nothing flushed */
	} else {
		int st = 0;
		waitpid(pid, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "walk %s: the child failed (status %d)\n", point_name(p),
				st);
			munmap(sh, sizeof(*sh));
			return 1;
		}
	}
	sto_fault_reset();
	struct sto *s;
	unsigned bad = 0;
	if (sto_open(&o, &s) != 0) {
		fprintf(stderr, "walk %s: cannot reopen\n", point_name(p));
		bad = 1;
	} else {
		bad = check_all(s, sh->ws, dups);
		sto_close(s);
	}
	*fired = sh->fired != 0;
	if (bad)
		fprintf(stderr, "walk %s@%llu%s %s: %u problems\n", point_name(p),
			(unsigned long long)nth, every ? "+" : "", crash ? "crash" : "close", bad);
	munmap(sh, sizeof(*sh));
	return bad;
}

static int write_one(struct sto *s, const char *id, int64_t step0)
{
	struct mdl_batch *mb;
	int rc = mdl_batch_new(1 << 20, 1024, &mb);
	for (int i = 0; rc == 0 && i < 50; i++)
		rc = mdl_batch_add(mb, "x", 1, 0, "m", 1, 1000000000 + step0 + i, step0 + i, 0,
				   rdb_f64_bits(1.0));
	struct sto_write_req req = {
	    .points = mb, .batch_id = id, .batch_id_len = id ? strlen(id) : 0};
	struct sto_write_result res;
	if (rc == 0)
		rc = sto_write_req(s, &req, &res);
	mdl_batch_free(mb);
	return rc;
}

/* A WAL group that landed whole although its write failed (its fdatasync
 * failed and so did cutting it off again), then the client retried with
 * the same batch id into the next WAL file (the checkpoint that rotated
 * could not finish, so both files are replayed after a crash): the batch is
 * stored once, not twice - replay skips a batch id it already has. */
static void test_landed_failed_write_retried_with_batch_id_is_once(void)
{
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/store.%d", base, dir_seq++);
	struct sto_options o;
	opts(&o, dir);
	sto_fault_reset();
	pid_t pid = fork();
	if (pid == 0) {
		struct sto *s;
		if (sto_open(&o, &s) != 0)
			_exit(3);
		sto_fault_set(STO_FP_WAL_SYNC, EIO, 1, false);
		sto_fault_set(STO_FP_WAL_TRUNCATE, EIO, 1, false);
		sto_fault_set(STO_FP_CKPT_COMMIT, ENOSPC, 1, true);
		int rc1 = write_one(s, "X", 0);	  /* fails, but its bytes stay */
		int rc2 = write_one(s, "Y", 100); /* the WAL is broken: refused */
		int rc3 = sto_checkpoint(s);	  /* rotates; the checkpoint fails */
		int rc4 = write_one(s, "X", 0);	  /* the retry */
		_exit(rc1 != 0 && rc2 != 0 && rc3 != 0 && rc4 == 0 ? 0 : 4); /* kill -9 */
	}
	int st = 0;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	struct mdl_series_key k = {.rank = 0};
	snprintf(k.job, sizeof(k.job), "x");
	snprintf(k.metric, sizeof(k.metric), "m");
	uint64_t sid = 0;
	CHECK_EQ_INT(sto_lookup_series(s, &k, &sid), 0);
	struct sto_range r = {INT64_MIN, INT64_MAX, false, 0, 0};
	struct mdl_cols c = MDL_COLS_INIT;
	struct sto_read_error err;
	CHECK_EQ_INT(sto_read(s, sid, &r, 1000000, &c, &err), 0);
	CHECK_EQ_INT(c.n, 50); /* batch X once; nothing of Y */
	for (size_t i = 0; i < c.n; i++)
		CHECK_EQ_INT(c.step[i], (int64_t)i);
	mdl_cols_free(&c);
	sto_close(s);
}

static void note_problem(void *arg, const char *msg)
{
	(void)arg;
	fprintf(stderr, "rebuild: %s\n", msg);
}

/* A seal whose segment append landed but whose index commit failed leaves
 * a record no index entry points at; the points stay in the head and the
 * WAL and are sealed again. rankctl rebuild-index later must not index
 * that record next to the one sealed again. */
static void test_orphan_record_after_failed_commit_not_rebuilt_twice(void)
{
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/store.%d", base, dir_seq++);
	struct sto_options o;
	opts(&o, dir);
	sto_fault_reset();
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	CHECK_EQ_INT(write_one(s, NULL, 0), 0);
	/* hits: the uid block, the segment id, then the seal round's commit */
	sto_fault_set(STO_FP_INDEX_COMMIT, EIO, 3, false);
	CHECK(sto_checkpoint(s) != 0);
	CHECK_EQ_INT(sto_checkpoint(s), 0); /* sealed again, committed */
	sto_close(s);
	sto_fault_reset();
	struct sto_rebuild_result rr;
	CHECK_EQ_INT(sto_rebuild_index(dir, 64ull << 20, note_problem, NULL, &rr), 0);
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	struct mdl_series_key k = {.rank = 0};
	snprintf(k.job, sizeof(k.job), "x");
	snprintf(k.metric, sizeof(k.metric), "m");
	uint64_t sid = 0;
	CHECK_EQ_INT(sto_lookup_series(s, &k, &sid), 0);
	struct sto_range r = {INT64_MIN, INT64_MAX, false, 0, 0};
	struct mdl_cols c = MDL_COLS_INIT;
	struct sto_read_error err;
	CHECK_EQ_INT(sto_read(s, sid, &r, 1000000, &c, &err), 0);
	CHECK_EQ_INT(c.n, 50);
	mdl_cols_free(&c);
	sto_close(s);
}

/* The same record left by a crash between the append and the index commit
 * (here: the cut back failed too, then kill -9): the restart that replays
 * the WAL rewrites the segments written since the last checkpoint, so the
 * record is gone before the WAL file is, and a rebuild stores 50 points. */
static void test_orphan_record_after_crash_not_rebuilt_twice(void)
{
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/store.%d", base, dir_seq++);
	struct sto_options o;
	opts(&o, dir);
	sto_fault_reset();
	pid_t pid = fork();
	if (pid == 0) {
		struct sto *s;
		if (sto_open(&o, &s) != 0 || write_one(s, NULL, 0) != 0 || sto_checkpoint(s) != 0)
			_exit(3);
		if (write_one(s, NULL, 50) != 0)
			_exit(3);
		sto_fault_set(STO_FP_INDEX_COMMIT, EIO, 1, true);
		sto_fault_set(STO_FP_SEG_TRUNCATE, EIO, 1, true);
		_exit(sto_checkpoint(s) != 0 ? 0 : 4); /* kill -9 */
	}
	int st = 0;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	struct sto *s;
	CHECK_EQ_INT(sto_open(&o, &s), 0); /* replays the second batch */
	sto_close(s);
	struct sto_rebuild_result rr;
	CHECK_EQ_INT(sto_rebuild_index(dir, 64ull << 20, note_problem, NULL, &rr), 0);
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	struct mdl_series_key k = {.rank = 0};
	snprintf(k.job, sizeof(k.job), "x");
	snprintf(k.metric, sizeof(k.metric), "m");
	uint64_t sid = 0;
	CHECK_EQ_INT(sto_lookup_series(s, &k, &sid), 0);
	struct sto_range r = {INT64_MIN, INT64_MAX, false, 0, 0};
	struct mdl_cols c = MDL_COLS_INIT;
	struct sto_read_error err;
	CHECK_EQ_INT(sto_read(s, sid, &r, 1000000, &c, &err), 0);
	CHECK_EQ_INT(c.n, 100);
	for (size_t i = 0; i < c.n; i++)
		CHECK_EQ_INT(c.step[i], (int64_t)i);
	mdl_cols_free(&c);
	sto_close(s);
}

static void test_walk_every_fault_point(void)
{
	for (int p = 0; p <= STO_FP_COUNT; p++) { /* STO_FP_COUNT: all at once */
		/* from the 1st hit on (a full disk) or only then (a transient
		 * error), and from the 3rd on (after the site worked twice);
		 * then SIGTERM or kill -9 */
		static const struct {
			uint64_t nth;
			bool every, crash;
		} modes[] = {{1, true, false}, {1, true, true},	 {1, false, false},
			     {1, false, true}, {3, true, false}, {3, true, true}};
		for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
			/* from the 1st hit the fault must fire (later hits may not
			 * come in this workload); up to 3 runs to reach it */
			bool fired = false;
			for (int run = 0; run < 3 && !fired; run++) {
				unsigned dups = 0;
				unsigned bad =
				    walk_one((enum sto_fault_point)p, modes[m].nth, modes[m].every,
					     modes[m].crash, &dups, &fired);
				CHECK_EQ_INT(bad, 0);
				CHECK_EQ_INT(dups, 0);
				if (modes[m].nth != 1)
					fired = true;
				else if (!fired)
					fprintf(stderr,
						"walk %s@1%s %s: the fault never fired "
						"(run %d of 3)\n",
						point_name((enum sto_fault_point)p),
						modes[m].every ? "+" : "",
						modes[m].crash ? "crash" : "close", run + 1);
			}
			CHECK(fired);
		}
	}
}

/* A checkpoint seals a large head in rounds that each free their part of
 * it: 1,024 series x 1,000 points (~38 MiB of head, more than two rounds'
 * worth) with the second round's segment append failing. The first round's
 * points are sealed and its head memory freed, the rest stay in the head
 * and the WAL, every point is read exactly once, and the retry seals the
 * rest. */
#define ROUND_RANKS   32u
#define ROUND_METRICS 32u
#define ROUND_STEPS   1000u

static int write_round_head(struct sto *s)
{
	struct mdl_batch *b;
	int rc = mdl_batch_new(ROUND_RANKS * ROUND_METRICS, ROUND_RANKS * ROUND_METRICS, &b);
	char metric[16];
	for (uint32_t step = 0; rc == 0 && step < ROUND_STEPS; step++) {
		for (uint32_t r = 0; rc == 0 && r < ROUND_RANKS; r++)
			for (uint32_t m = 0; rc == 0 && m < ROUND_METRICS; m++) {
				snprintf(metric, sizeof(metric), "m%u", m);
				rc = mdl_batch_add(b, "rounds", 6, r, metric, strlen(metric),
						   1000 + step, step, 0,
						   rdb_f64_bits((double)(step * 7 + m + r)));
			}
		if (rc == 0)
			rc = sto_write(s, b);
		mdl_batch_reset(b);
	}
	mdl_batch_free(b);
	return rc;
}

/* Series (rank, metric) holds exactly steps 0..ROUND_STEPS-1 with their values. */
static unsigned check_round_series(struct sto *s, uint32_t rank, uint32_t m)
{
	struct mdl_series_key k = {0};
	snprintf(k.job, sizeof(k.job), "rounds");
	k.rank = rank;
	snprintf(k.metric, sizeof(k.metric), "m%u", m);
	uint64_t id = 0;
	if (sto_lookup_series(s, &k, &id))
		return 1;
	struct sto_range all = {INT64_MIN, INT64_MAX, false, 0, 0};
	struct mdl_cols c = MDL_COLS_INIT;
	struct sto_read_error err;
	unsigned bad = sto_read(s, id, &all, 10 * ROUND_STEPS, &c, &err) != 0 || c.n != ROUND_STEPS;
	for (size_t i = 0; !bad && i < c.n; i++)
		bad += c.step[i] != (int64_t)i ||
		       c.value[i] != rdb_f64_bits((double)(i * 7 + m + rank));
	mdl_cols_free(&c);
	return bad;
}

static unsigned check_round_all(struct sto *s)
{
	unsigned bad = 0;
	for (uint32_t r = 0; r < ROUND_RANKS; r++)
		for (uint32_t m = 0; m < ROUND_METRICS; m++)
			bad += check_round_series(s, r, m);
	return bad;
}

static void test_checkpoint_frees_head_in_rounds(void)
{
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/store.%d", base, dir_seq++);
	struct sto_options o;
	opts(&o, dir);
	o.chunk_max_points = 4096; /* no size seals: the checkpoint seals it all */
	o.checkpoint_interval_s = 3600;
	o.segment_max_bytes = 256u << 20;
	struct sto *s;
	sto_fault_reset();
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	CHECK_EQ_INT(write_round_head(s), 0);
	struct sto_stats st;
	sto_get_stats(s, &st);
	const uint64_t total = (uint64_t)ROUND_RANKS * ROUND_METRICS * ROUND_STEPS;
	uint64_t head0 = st.head_bytes;
	CHECK_EQ_INT(st.head_points, total);
	CHECK(head0 > 32u << 20); /* more than two rounds of head memory */
	CHECK_EQ_INT(st.points_sealed, 0);

	/* round 2 on fails (each round appends its chunks to the segment once) */
	sto_fault_set(STO_FP_SEG_APPEND, EIO, 2, true);
	CHECK(sto_checkpoint(s) != 0);
	sto_get_stats(s, &st);
	CHECK(st.points_sealed > 0);	 /* round 1 is sealed ... */
	CHECK(st.points_sealed < total); /* ... the rest is not */
	CHECK_EQ_INT(st.head_points, total - st.points_sealed);
	CHECK(st.head_bytes < head0); /* and round 1's head memory is freed */
	CHECK_EQ_INT(check_round_all(s), 0);

	sto_fault_reset();
	CHECK_EQ_INT(sto_checkpoint(s), 0);
	sto_get_stats(s, &st);
	CHECK_EQ_INT(st.points_sealed, total);
	CHECK_EQ_INT(st.head_points, 0);
	CHECK_EQ_INT(check_round_all(s), 0);
	sto_close(s);
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	CHECK_EQ_INT(check_round_all(s), 0);
	sto_close(s);
}

int main(void)
{
	/* tmpfs when there is one: the walk tests logic, not the disk, and
	 * hundreds of LMDB fsyncs on a real disk take most of its time */
	const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("RDB_TEST_TMP");
	snprintf(base, sizeof(base), "%s/test_faults.XXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	RUN(test_names_are_a_complete_table);
	RUN(test_nth_hit_and_every_from);
	RUN(test_parse_spec);
	RUN(test_final_checkpoint_enospc_is_exactly_once);
	RUN(test_checkpoint_frees_head_in_rounds);
	RUN(test_landed_failed_write_retried_with_batch_id_is_once);
	RUN(test_orphan_record_after_failed_commit_not_rebuilt_twice);
	RUN(test_orphan_record_after_crash_not_rebuilt_twice);
	RUN(test_walk_every_fault_point);
	int rc = check_summary("faults");
	if (rc == 0) {
		char cmd[4200];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", base);
	}
	return rc;
}
