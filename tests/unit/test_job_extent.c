/* test_job_extent.c - the per-job extent summary behind qry_jobs
 * (sto_job_extent_get, storage/sto.h): after every event that can change a
 * job's first/last timestamp, last step or ranks, qry_jobs (answering from
 * the summary once it was built) must equal a full walk of the store done
 * here the way the listing used to do it (every series of the job, a
 * sto_view_series over all time each, head points and chunk statistics
 * folded), and, where the test knows them, the values written. The events:
 * writes (in order and out of order, into an existing summary), a
 * checkpoint (head -> chunks), a compaction (small chunks merged), a
 * retention run that drops a job's old chunks, a job delete and re-write
 * with a smaller extent, and a close and reopen (WAL replay). Each event is
 * checked to change the answer where it should, so a summary that misses
 * it fails. Links query, storage and model only. */
#include "check.h"
#include "common/rdb_err.h"
#include "common/rdb_time.h"
#include "query/qry.h"
#include "storage/admin.h"
#include "storage/sto.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DAY_NS 86400000000000ll

static char base[4096];
static char dir[4300];

static struct sto *open_store(void)
{
	struct sto_options o;
	sto_options_default(&o);
	o.data_dir = dir;
	o.chunk_max_points = 16;
	o.sync = STO_SYNC_NONE;
	o.index_map_bytes = 64ull << 20;
	struct sto *s = NULL;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	return s;
}

/* Writes steps [from, to) of nranks ranks x 2 metrics of job, step i at
 * t0 + i ms; steps given in reverse when backwards. */
static void write_job(struct sto *s, const char *job, uint32_t nranks, int64_t from, int64_t to,
		      int64_t t0, bool backwards)
{
	struct mdl_batch *b;
	CHECK_EQ_INT(mdl_batch_new(1 << 16, 64, &b), 0);
	for (int64_t k = from; k < to; k++) {
		int64_t i = backwards ? to - 1 - (k - from) : k;
		for (uint32_t r = 0; r < nranks; r++)
			for (int m = 0; m < 2; m++) {
				const char *name = m ? "gpu" : "loss";
				int rc =
				    mdl_batch_add(b, job, strlen(job), r, name, strlen(name),
						  t0 + i * 1000000, i, 0, 0x3ff0000000000000ull);
				CHECK_EQ_INT(rc, 0);
			}
		if (mdl_batch_points(b) >= 50 || k + 1 == to) {
			CHECK_EQ_INT(sto_write(s, b), 0);
			mdl_batch_reset(b);
		}
	}
	mdl_batch_free(b);
}

/* ---- the reference: the full walk, one view per series ---------------------------- */

struct ids {
	uint64_t v[4096];
	uint32_t rank[4096];
	size_t n;
};

static int id_cb(void *arg, const struct mdl_series_key *k, uint64_t id)
{
	struct ids *l = arg;
	if (l->n == 4096)
		return RDB_ELIMIT;
	l->rank[l->n] = k->rank;
	l->v[l->n++] = id;
	return 0;
}

static void walk(struct sto *s, const char *job, struct qry_job *out)
{
	static struct ids l;
	struct sto_range all = {INT64_MIN, INT64_MAX, false, 0, INT64_MAX};
	memset(out, 0, sizeof(*out));
	out->last_step = MDL_STEP_NONE;
	l.n = 0;
	CHECK_EQ_INT(sto_list_series(s, job, id_cb, &l), 0);
	for (size_t i = 0; i < l.n; i++) {
		bool seen = false;
		for (size_t j = 0; j < i; j++)
			seen |= l.rank[j] == l.rank[i];
		if (!seen && l.rank[i] != MDL_RANK_JOB)
			out->nranks++;
		struct sto_series_view v;
		CHECK_EQ_INT(sto_view_series(s, l.v[i], &all, SIZE_MAX, &v), 0);
		for (size_t k = 0; k < v.head.n + v.nchunks; k++) {
			bool head = k < v.head.n;
			const struct sto_chunk_stats *st =
			    head ? NULL : &v.chunks[k - v.head.n].stats;
			int64_t lo = head ? v.head.ts_ns[k] : st->min_ts_ns;
			int64_t hi = head ? v.head.ts_ns[k] : st->max_ts_ns;
			int64_t step = head ? v.head.step[k] : st->max_step;
			if (!out->has_points || lo < out->first_ts_ns)
				out->first_ts_ns = lo;
			if (!out->has_points || hi > out->last_ts_ns)
				out->last_ts_ns = hi;
			out->has_points = true;
			if (step != MDL_STEP_NONE &&
			    (out->last_step == MDL_STEP_NONE || step > out->last_step))
				out->last_step = step;
		}
		sto_view_free(&v);
	}
}

/* qry_jobs' entry for job (an empty one with has_points false if absent). */
static struct qry_job listed(struct sto *s, const char *job)
{
	struct qry_jobs js;
	struct qry_error e;
	struct qry_job j;
	memset(&j, 0, sizeof(j));
	j.last_step = MDL_STEP_NONE;
	CHECK_EQ_INT(qry_jobs(s, false, 1 << 20, &js, &e), 0);
	for (size_t i = 0; i < js.n; i++)
		if (strcmp(js.v[i].job, job) == 0)
			j = js.v[i];
	j.meta = NULL;
	qry_jobs_free(&js);
	return j;
}

static bool same(const struct qry_job *a, const struct qry_job *b)
{
	return a->has_points == b->has_points && a->nranks == b->nranks &&
	       a->last_step == b->last_step &&
	       (!a->has_points ||
		(a->first_ts_ns == b->first_ts_ns && a->last_ts_ns == b->last_ts_ns));
}

/* qry_jobs twice (the second from the summary) equals the full walk. */
static struct qry_job check_job(struct sto *s, const char *job, int line)
{
	struct qry_job ref, a, b;
	walk(s, job, &ref);
	a = listed(s, job);
	b = listed(s, job);
	if (!same(&a, &ref) || !same(&b, &ref))
		fprintf(stderr,
			"line %d job %s: listed %lld..%lld step %lld ranks %u, again %lld..%lld "
			"step %lld, walk %lld..%lld step %lld ranks %u\n",
			line, job, (long long)a.first_ts_ns, (long long)a.last_ts_ns,
			(long long)a.last_step, a.nranks, (long long)b.first_ts_ns,
			(long long)b.last_ts_ns, (long long)b.last_step, (long long)ref.first_ts_ns,
			(long long)ref.last_ts_ns, (long long)ref.last_step, ref.nranks);
	CHECK(same(&a, &ref));
	CHECK(same(&b, &ref));
	return ref;
}

static void expect(const struct qry_job *j, int64_t first, int64_t last, int64_t step,
		   uint32_t nranks)
{
	CHECK(j->has_points);
	CHECK_EQ_INT(j->first_ts_ns, first);
	CHECK_EQ_INT(j->last_ts_ns, last);
	CHECK_EQ_INT(j->last_step, step);
	CHECK_EQ_INT(j->nranks, nranks);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void test_summary_follows_every_event(void)
{
	int64_t now = rdb_now_ns();
	int64_t old = now - 10 * DAY_NS, recent = now - DAY_NS / 24;
	struct sto *s = open_store();
	struct qry_job j;

	/* writes: a summary is built, then later writes extend it */
	write_job(s, "ja", 4, 0, 100, old, false);
	j = check_job(s, "ja", __LINE__);
	expect(&j, old, old + 99 * 1000000, 99, 4);
	write_job(s, "ja", 6, 100, 200, recent, true); /* newer, two more ranks, reversed */
	write_job(s, "jb", 3, 0, 300, recent, false);
	j = check_job(s, "ja", __LINE__);
	expect(&j, old, recent + 199 * 1000000, 199, 6);
	j = check_job(s, "jb", __LINE__);
	expect(&j, recent, recent + 299 * 1000000, 299, 3);
	write_job(s, "ja", 2, 500, 501, old - DAY_NS, false); /* earlier than all, higher step */
	j = check_job(s, "ja", __LINE__);
	expect(&j, old - DAY_NS + 500 * 1000000, recent + 199 * 1000000, 500, 6);

	/* a checkpoint moves points into chunks: same answers */
	CHECK_EQ_INT(sto_checkpoint(s), 0);
	j = check_job(s, "ja", __LINE__);
	expect(&j, old - DAY_NS + 500 * 1000000, recent + 199 * 1000000, 500, 6);
	check_job(s, "jb", __LINE__);

	/* a compaction merges the small chunks: same answers */
	struct sto_compact_result cr;
	CHECK_EQ_INT(sto_compact(s, 1.0, &cr), 0);
	j = check_job(s, "ja", __LINE__);
	expect(&j, old - DAY_NS + 500 * 1000000, recent + 199 * 1000000, 500, 6);

	/* retention drops old chunks: jr's first timestamp moves (its old
	 * points fill whole chunks of their own) */
	write_job(s, "jr", 2, 0, 64, old, false);
	CHECK_EQ_INT(sto_checkpoint(s), 0);
	write_job(s, "jr", 2, 64, 128, recent, false);
	CHECK_EQ_INT(sto_checkpoint(s), 0);
	j = check_job(s, "jr", __LINE__);
	expect(&j, old, recent + 127 * 1000000, 127, 2);
	struct sto_retention_result rr;
	CHECK_EQ_INT(sto_retention_set(s, "jr", 86400), 0);
	CHECK_EQ_INT(sto_retention_set(s, "ja", 86400), 0);
	CHECK_EQ_INT(sto_retention_run(s, &rr), 0);
	CHECK(rr.chunks > 0);
	check_job(s, "ja", __LINE__); /* a chunk of old and recent points stays */
	check_job(s, "jb", __LINE__);
	j = check_job(s, "jr", __LINE__);
	expect(&j, recent + 64 * 1000000, recent + 127 * 1000000, 127, 2);
	CHECK_EQ_INT(sto_retention_clear(s, "ja"), 0);
	CHECK_EQ_INT(sto_retention_clear(s, "jr"), 0);

	/* delete jb and write it again, smaller: nothing of the old one counts */
	struct sto_delete_result dr;
	CHECK_EQ_INT(sto_delete_job(s, "jb", &dr), 0);
	j = listed(s, "jb");
	CHECK(!j.has_points);
	write_job(s, "jb", 1, 10, 20, recent + DAY_NS / 48, false);
	j = check_job(s, "jb", __LINE__);
	expect(&j, recent + DAY_NS / 48 + 10 * 1000000, recent + DAY_NS / 48 + 19 * 1000000, 19, 1);

	/* points left in the head, then close and reopen: the WAL replay */
	write_job(s, "jb", 2, 20, 40, now, true);
	struct qry_job before_a = check_job(s, "ja", __LINE__);
	struct qry_job before_b = check_job(s, "jb", __LINE__);
	expect(&before_b, recent + DAY_NS / 48 + 10 * 1000000, now + 39 * 1000000, 39, 2);
	sto_close(s);
	s = open_store();
	j = check_job(s, "ja", __LINE__);
	CHECK(same(&j, &before_a));
	j = check_job(s, "jb", __LINE__);
	CHECK(same(&j, &before_b));
	write_job(s, "jb", 3, 40, 41, now, false); /* into the rebuilt summary */
	j = check_job(s, "jb", __LINE__);
	expect(&j, recent + DAY_NS / 48 + 10 * 1000000, now + 40 * 1000000, 40, 3);
	sto_close(s);
}

int main(void)
{
	const char *tmp = getenv("RDB_TEST_TMP");
	snprintf(base, sizeof(base), "%s/test_job_extent.XXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(dir, sizeof(dir), "%s/data", base);
	RUN(test_summary_follows_every_event);
	int rc = check_summary("job_extent");
	if (rc == 0)
		nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return rc;
}
