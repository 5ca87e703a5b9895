/* store_read.c - the storage engine's read side (contract: sto.h): point
 * reads and series views, event reads, the catalog, engine statistics, and
 * the segment-read hooks of admin.c (admin.h).
 *
 * Read consistency: moving points from head to chunk (index commit + head
 * removal) happens under the exclusive view lock; a reader takes the view
 * lock shared while it opens its LMDB snapshot and copies head points, so
 * it sees every point exactly once.
 *
 * Per-job extent summaries (sto_job_extent_get, for GET /api/v1/jobs): one
 * small struct per job under head_lock; a write folds its points in where
 * they become visible (head_commit), anything that removes points or chunk
 * entries forgets them all, and a reader rebuilds one by a walk that starts
 * after its build began (writes meanwhile are folded into the build).
 *
 * Threading: any number of reader threads. Segment reads take seg_lock
 * shared; a reader whose snapshot predates a compaction switch gets ENOENT
 * and looks its chunk up again (compact.c).
 *
 * Failure: a damaged chunk or an I/O error fails the read with an error;
 * nothing is changed.
 */
#include "storage/engine/engine.h"
#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"
#include "common/rdb_map.h"
#include "common/rdb_time.h"
#include "common/rdb_sort.h"
#include "storage/admin.h"
#include "storage/chunk/codec.h"
#include "storage/events/evstore.h"
#include "storage/chunk/group.h"
#include "storage/chunk/segment.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- read ---------------------------------------------------------------- */

static bool in_range(const struct sto_range *r, int64_t ts, int64_t step)
{
	if (ts < r->from_ns || ts > r->to_ns)
		return false;
	if (!r->by_step)
		return true;
	return step != MDL_STEP_NONE && step >= r->step_from && step <= r->step_to;
}

/* How many points of c are in r. */
static size_t count_in_range(const struct mdl_cols *c, const struct sto_range *r)
{
	if (r->from_ns == INT64_MIN && r->to_ns == INT64_MAX && !r->by_step)
		return c->n;
	size_t in = 0;
	for (size_t i = 0; i < c->n; i++)
		in += in_range(r, c->ts_ns[i], c->step[i]);
	return in;
}

/* Appends the `in` points of c in range (count_in_range) to out;
 * RDB_ELIMIT past max_points. Room for them (at most max_points in all) is
 * made first: one growth per chunk, not the dozen 1.5x steps of a
 * point-by-point push (each moving every column so far, most of a raw
 * range read's copying). Only the points in range: a caller may keep many
 * series' results at once (query/range.c), so room for a whole chunk or
 * head per series, for a few points each, would grow with what was read,
 * not returned. */
static int filter_into(const struct mdl_cols *c, const struct sto_range *r, size_t in,
		       size_t max_points, struct mdl_cols *out)
{
	size_t want = out->n + in;
	if (want > max_points)
		want = max_points > out->n ? max_points : out->n;
	int rc = mdl_cols_reserve(out, want);
	if (rc)
		return rc;
	size_t n = out->n;
	for (size_t i = 0; i < c->n; i++) {
		if (!in_range(r, c->ts_ns[i], c->step[i]))
			continue;
		if (n >= max_points) {
			out->n = n;
			return RDB_ELIMIT;
		}
		/* n < want <= out->cap: the room made above */
		out->ts_ns[n] = c->ts_ns[i];
		out->step[n] = c->step[i];
		out->attempt[n] = c->attempt[i];
		out->value[n] = c->value[i];
		n++;
	}
	out->n = n;
	return 0;
}

struct read_ctx {
	struct sto *s;
	const struct sto_range *r;
	size_t max_points;
	struct mdl_cols *out;
	struct mdl_cols tmp;
	struct rdb_buf rec;
	struct sto_read_error *err;
	uint64_t series_id;
};

/* Reads len bytes at `at` of the record of ref. A segment compacted away
 * after the caller's snapshot (ENOENT) is retried once where the index
 * now says the record is (same key, same uid); *cur keeps that place for
 * the caller's next read. */
static int read_record_bytes(struct sto *s, const struct sto_chunk_ref *ref,
			     struct sto_chunk_ref *cur, uint64_t at, void *buf, size_t len,
			     const char **why)
{
	int rc = sti_seg_read(s, cur->segment_id, cur->offset + at, buf, len);
	if (rc == -ENOENT && cur->segment_id == ref->segment_id && cur->offset == ref->offset) {
		rc = sto_admin_relookup(s, ref, cur);
		if (rc == 0)
			rc = sti_seg_read(s, cur->segment_id, cur->offset + at, buf, len);
	}
	if (rc == RDB_ECORRUPT)
		*why = "segment file is shorter than the index says";
	return rc;
}

/* A group member: the group's head, then only this member's section. */
static int read_member(struct sto *s, const struct sto_chunk_ref *ref, unsigned flags,
		       int64_t min_step, struct rdb_buf *rec, struct mdl_cols *out,
		       const char **why)
{
	struct sto_chunk_ref cur = *ref;
	struct sto_group_sect sect;
	size_t head = STO_CHUNK_HEADER_SIZE + (size_t)ref->head_len;
	if (head > ref->length) {
		*why = "group head length in the index exceeds the record";
		return RDB_ECORRUPT;
	}
	int rc = rdb_buf_reserve(rec, head);
	if (rc == 0)
		rc = read_record_bytes(s, ref, &cur, 0, rec->data, head, why);
	if (rc == 0)
		rc = sto_group_head_check(rec->data, ref, &sect, why);
	if (rc == 0)
		rc = rdb_buf_reserve(rec, head + sect.length);
	if (rc == 0)
		rc = read_record_bytes(s, ref, &cur, sect.offset, rec->data + head, sect.length,
				       why);
	if (rc == 0)
		rc = sto_group_member_decode_tail(rec->data, rec->data + head, ref, &sect, flags,
						  min_step, out, why);
	return rc;
}

/* Reads, verifies and decodes one chunk into out. */
int sto_read_chunk(struct sto *s, const struct sto_chunk_ref *ref, struct rdb_buf *rec,
		   struct mdl_cols *out, struct sto_read_error *err)
{
	return sto_read_chunk_flags(s, ref, 0, rec, out, err);
}

/* Timestamps not decoded (STO_READ_NO_TS): the chunk's first point gets
 * its min_ts, the others its max_ts (points are sorted by time); when
 * leading points were left out (tail), every point gets max_ts. */
static void bound_ts(const struct sto_chunk_ref *ref, bool whole, struct mdl_cols *out)
{
	for (size_t i = 0; i < out->n; i++)
		out->ts_ns[i] = i || !whole ? ref->stats.max_ts_ns : ref->stats.min_ts_ns;
}

int sto_read_chunk_flags(struct sto *s, const struct sto_chunk_ref *ref, unsigned flags,
			 struct rdb_buf *rec, struct mdl_cols *out, struct sto_read_error *err)
{
	return sto_read_chunk_tail(s, ref, flags, INT64_MIN, rec, out, err);
}

int sto_read_chunk_tail(struct sto *s, const struct sto_chunk_ref *ref, unsigned flags,
			int64_t min_step, struct rdb_buf *rec, struct mdl_cols *out,
			struct sto_read_error *err)
{
	unsigned cflags = (flags & STO_READ_NO_TS) ? STO_CODEC_SKIP_TS : 0;
	rec->len = 0;
	const char *why = "read failed";
	char path[PATH_MAX + 64];
	struct sto_chunk_ref cur = *ref;
	int rc;
	if (ref->group_n) {
		rc = read_member(s, ref, cflags, min_step, rec, out, &why);
	} else {
		rc = rdb_buf_reserve(rec, ref->length);
		if (rc == 0)
			rc = read_record_bytes(s, ref, &cur, 0, rec->data, ref->length, &why);
		if (rc == 0)
			rc = sto_record_decode_tail(rec->data, ref, cflags, min_step, out, &why);
	}
	if (rc == 0 && cflags)
		bound_ts(ref, min_step == INT64_MIN || out->n == ref->stats.count, out);
	if (rc == 0)
		return 0;
	sto_seg_path(s->seg_dir, ref->segment_id, path, sizeof(path));
	snprintf(err->msg, sizeof(err->msg),
		 "%s: %s (chunk %llu of series %llu, offset %llu, %u bytes, in %s)",
		 rc == RDB_ECORRUPT ? "corrupt data" : "I/O error",
		 rc == RDB_ECORRUPT ? why : rdb_strerror(rc), (unsigned long long)ref->uid,
		 (unsigned long long)ref->series_id, (unsigned long long)ref->offset, ref->length,
		 path);
	static struct rdb_log_ratelimit rl;
	rdb_log_limited(&rl, 10, RDB_LOG_ERROR, "store",
			"%s; the chunk is not served, "
			"queries touching it fail, the rest of the data is served",
			err->msg);
	return rc;
}

/* Counts and logs a chunk whose index entry failed its checksum. */
static void note_damaged_entry(struct sto *s, const struct sto_chunk_ref *ref)
{
	static struct rdb_log_ratelimit rl;
	atomic_fetch_add(&s->st_index_damaged, 1);
	rdb_log_limited(&rl, 10, RDB_LOG_ERROR, "store",
			"LMDB index: the entry of chunk %llu (series %llu) failed its checksum; "
			"its statistics are not used, the chunk is decoded instead. 'rankctl "
			"verify --quarantine' rewrites the entry from the chunk",
			(unsigned long long)ref->uid, (unsigned long long)ref->series_id);
}

int sto_chunk_ref_repair(struct sto *s, const struct sto_chunk_ref *ref, struct sto_chunk_ref *out,
			 struct sto_read_error *err)
{
	struct rdb_buf rec;
	struct mdl_cols cols = {0};
	rdb_buf_init(&rec, STO_CHUNK_HEADER_SIZE + STO_CHUNK_MAX_PAYLOAD);
	int rc = sto_read_chunk(s, ref, &rec, &cols, err);
	if (rc == 0 && cols.n == 0) {
		snprintf(err->msg, sizeof(err->msg), "chunk %llu of series %llu holds no point",
			 (unsigned long long)ref->uid, (unsigned long long)ref->series_id);
		rc = RDB_ECORRUPT;
	}
	if (rc == 0) {
		*out = *ref;
		sto_chunk_stats_compute(&cols, &out->stats);
		out->damaged = false;
	}
	if (rc == 0 && out->stats.min_ts_ns != ref->stats.min_ts_ns) {
		snprintf(err->msg, sizeof(err->msg),
			 "chunk %llu of series %llu starts at %lld, its index key says %lld",
			 (unsigned long long)ref->uid, (unsigned long long)ref->series_id,
			 (long long)out->stats.min_ts_ns, (long long)ref->stats.min_ts_ns);
		rc = RDB_ECORRUPT;
	}
	mdl_cols_free(&cols);
	rdb_buf_free(&rec);
	return rc;
}

static int read_chunk_cb(void *arg, const struct sto_chunk_ref *ref)
{
	struct read_ctx *c = arg;
	const struct sto_range *r = c->r;
	if (ref->damaged)
		note_damaged_entry(c->s, ref); /* read in full below: filter_into selects */
	else if (r->by_step &&
		 (ref->stats.max_step == MDL_STEP_NONE || ref->stats.max_step < r->step_from ||
		  ref->stats.min_step > r->step_to))
		return 0;
	int rc = sto_read_chunk(c->s, ref, &c->rec, &c->tmp, c->err);
	if (rc)
		return rc;
	size_t in = count_in_range(&c->tmp, r);
	if (c->out->n == 0 && in == c->tmp.n && in <= c->max_points) {
		/* the whole chunk is the answer so far (one chunk, no head
		 * points: a raw range read of a settled series): take its
		 * columns instead of copying them; tmp gets out's to reuse */
		struct mdl_cols was = *c->out;
		*c->out = c->tmp;
		c->tmp = was;
		return 0;
	}
	return filter_into(&c->tmp, r, in, c->max_points, c->out);
}

/* Copies head points of series_id in range. Caller holds view_lock shared. */
static int read_heads(struct sto *s, uint64_t series_id, const struct sto_range *r,
		      size_t max_points, struct mdl_cols *out)
{
	int rc = 0;
	pthread_mutex_lock(&s->head_lock);
	struct head *heads[2] = {s->frozen, s->active};
	for (int i = 0; i < 2 && rc == 0; i++) {
		if (!heads[i])
			continue;
		struct head_series *hs = rdb_map_get(&heads[i]->series, series_id);
		if (hs)
			rc = filter_into(&hs->pts, r, count_in_range(&hs->pts, r), max_points, out);
	}
	pthread_mutex_unlock(&s->head_lock);
	return rc;
}

int sto_read(struct sto *s, uint64_t series_id, const struct sto_range *r, size_t max_points,
	     struct mdl_cols *out, struct sto_read_error *err)
{
	struct read_ctx c = {.s = s,
			     .r = r,
			     .max_points = max_points,
			     .out = out,
			     .err = err,
			     .series_id = series_id};
	rdb_buf_init(&c.rec, STO_CHUNK_HEADER_SIZE + STO_CHUNK_MAX_PAYLOAD);
	out->n = 0;
	err->msg[0] = 0;
	struct sto_txn *t = NULL;
	pthread_rwlock_rdlock(&s->view_lock);
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc == 0) {
		sto_txn_pass_damaged(t);
		rc = read_heads(s, series_id, r, max_points, out);
	}
	pthread_rwlock_unlock(&s->view_lock);
	if (rc == 0)
		rc = sto_chunk_scan(t, series_id, r->from_ns, r->to_ns, read_chunk_cb, &c);
	sto_txn_abort(t);
	if (rc == 0)
		rc = mdl_cols_sort_by_time(out);
	if (rc == RDB_ELIMIT)
		snprintf(err->msg, sizeof(err->msg), "more than %zu points", max_points);
	mdl_cols_free(&c.tmp);
	rdb_buf_free(&c.rec);
	return rc;
}

struct view_ctx {
	struct sto *s;
	struct sto_series_view *v;
	const struct sto_range *r;
	size_t cap;
};

/* A chunk entry whose checksum failed: its statistics answer queries
 * without decoding, so they are recomputed from the chunk (checked like any
 * read) into *fixed and *ref pointed at it, or the read fails; they are
 * never used. Counts and logs the damage. */
static int repair_damaged(struct sto *s, const struct sto_chunk_ref **ref,
			  struct sto_chunk_ref *fixed)
{
	struct sto_read_error *err = malloc(sizeof(*err));
	note_damaged_entry(s, *ref);
	int rc = err ? sto_chunk_ref_repair(s, *ref, fixed, err) : -ENOMEM;
	free(err);
	if (rc == 0)
		*ref = fixed;
	return rc;
}

static int view_chunk_cb(void *arg, const struct sto_chunk_ref *ref_in)
{
	struct view_ctx *c = arg;
	const struct sto_range *r = c->r;
	const struct sto_chunk_ref *ref = ref_in;
	struct sto_chunk_ref fixed;
	if (ref->damaged) {
		int rc = repair_damaged(c->s, &ref, &fixed);
		if (rc)
			return rc;
		if (ref->stats.max_ts_ns < r->from_ns)
			return 0;
	}
	if (r->by_step && (ref->stats.max_step == MDL_STEP_NONE ||
			   ref->stats.max_step < r->step_from || ref->stats.min_step > r->step_to))
		return 0;
	struct sto_series_view *v = c->v;
	if (v->nchunks == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 16;
		struct sto_chunk_ref *p = realloc(v->chunks, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		v->chunks = p;
		c->cap = cap;
	}
	v->chunks[v->nchunks++] = *ref;
	return 0;
}

struct rollup_ctx {
	struct sto_series_view *v;
	size_t cap, max;
};

static int view_rollup_cb(void *arg, int64_t bucket, const struct sto_rollup *r)
{
	struct rollup_ctx *c = arg;
	struct sto_series_view *v = c->v;
	if (v->nrollups >= c->max)
		return RDB_ELIMIT;
	if (v->nrollups == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 16;
		struct sto_rollup_rec *p = realloc(v->rollups, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		v->rollups = p;
		c->cap = cap;
	}
	v->rollups[v->nrollups++] = (struct sto_rollup_rec){.bucket = bucket, .r = *r};
	return 0;
}

/* Rollup records of tier that may overlap r (a bucket starts at most one
 * configured width before the range; older widths: the caller checks). */
static int view_rollups(struct sto *s, struct sto_txn *t, uint64_t series_id,
			const struct sto_range *r, unsigned tier, size_t max,
			struct sto_series_view *out)
{
	struct rollup_ctx c = {.v = out, .max = max};
	int64_t lo, hi, w;
	if (tier == STO_TIER_TIME) {
		w = (int64_t)s->life.rollup_time_width_s * 1000000000;
		lo = r->from_ns;
		hi = r->to_ns;
	} else {
		w = (int64_t)s->life.rollup_step_width;
		lo = r->by_step ? r->step_from : INT64_MIN;
		hi = r->by_step ? r->step_to : INT64_MAX;
	}
	lo = lo > INT64_MIN + w ? lo - w : INT64_MIN;
	return sto_rollup_scan(t, series_id, tier, lo, hi, view_rollup_cb, &c);
}

static int view_series(struct sto *s, uint64_t series_id, const struct sto_range *r,
		       size_t max_head_points, int tier, size_t max_rollups,
		       struct sto_series_view *out)
{
	memset(out, 0, sizeof(*out));
	struct view_ctx c = {.s = s, .v = out, .r = r};
	struct sto_txn *t = NULL;
	pthread_rwlock_rdlock(&s->view_lock);
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc == 0) {
		sto_txn_pass_damaged(t);
		rc = read_heads(s, series_id, r, max_head_points, &out->head);
	}
	pthread_rwlock_unlock(&s->view_lock);
	if (rc == 0)
		rc = sto_chunk_scan(t, series_id, r->from_ns, r->to_ns, view_chunk_cb, &c);
	if (rc == 0 && tier >= 0)
		rc = view_rollups(s, t, series_id, r, (unsigned)tier, max_rollups, out);
	sto_txn_abort(t);
	if (rc)
		sto_view_free(out);
	return rc;
}

int sto_view_series(struct sto *s, uint64_t series_id, const struct sto_range *r,
		    size_t max_head_points, struct sto_series_view *out)
{
	return view_series(s, series_id, r, max_head_points, -1, 0, out);
}

int sto_view_series_rollups(struct sto *s, uint64_t series_id, const struct sto_range *r,
			    size_t max_head_points, unsigned tier, size_t max_rollups,
			    struct sto_series_view *out)
{
	return view_series(s, series_id, r, max_head_points, (int)tier, max_rollups, out);
}

/* ---- extent --------------------------------------------------------------- */

static void extent_fold(struct sto_extent *e, int64_t lo, int64_t hi, int64_t step)
{
	if (!e->has_points || lo < e->first_ts_ns)
		e->first_ts_ns = lo;
	if (!e->has_points || hi > e->last_ts_ns)
		e->last_ts_ns = hi;
	e->has_points = true;
	if (step != MDL_STEP_NONE && (e->last_step == MDL_STEP_NONE || step > e->last_step))
		e->last_step = step;
}

struct extent_ctx {
	struct sto *s;
	struct sto_extent *e;
};

/* view_chunk_cb over every time, folding instead of copying. */
static int extent_chunk_cb(void *arg, const struct sto_chunk_ref *ref)
{
	struct extent_ctx *c = arg;
	struct sto_chunk_ref fixed;
	if (ref->damaged) {
		int rc = repair_damaged(c->s, &ref, &fixed);
		if (rc)
			return rc;
	}
	extent_fold(c->e, ref->stats.min_ts_ns, ref->stats.max_ts_ns, ref->stats.max_step);
	return 0;
}

int sto_extent_series(struct sto *s, const uint64_t *series_ids, size_t n, struct sto_extent *ext)
{
	struct extent_ctx c = {.s = s, .e = ext};
	struct sto_txn *t = NULL;
	pthread_rwlock_rdlock(&s->view_lock);
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc == 0) {
		sto_txn_pass_damaged(t);
		/* the heads, as read_heads sees them, in the same snapshot */
		pthread_mutex_lock(&s->head_lock);
		struct head *heads[2] = {s->frozen, s->active};
		for (int i = 0; i < 2; i++) {
			if (!heads[i])
				continue;
			for (size_t k = 0; k < n; k++) {
				struct head_series *hs =
				    rdb_map_get(&heads[i]->series, series_ids[k]);
				if (!hs)
					continue;
				for (size_t j = 0; j < hs->pts.n; j++)
					extent_fold(ext, hs->pts.ts_ns[j], hs->pts.ts_ns[j],
						    hs->pts.step[j]);
			}
		}
		pthread_mutex_unlock(&s->head_lock);
	}
	pthread_rwlock_unlock(&s->view_lock);
	for (size_t k = 0; rc == 0 && k < n; k++)
		rc = sto_chunk_scan(t, series_ids[k], INT64_MIN, INT64_MAX, extent_chunk_cb, &c);
	sto_txn_abort(t);
	return rc;
}

/* ---- per-job extent summaries (sto_job_extent_get) ------------------------- */

#define JOB_EXTENTS_MAX 65536u

struct job_extent {
	struct job_extent *next; /* same-hash chain */
	uint64_t hash;
	bool valid;	 /* ext is the job's summary */
	uint64_t ticket; /* !valid: the build in progress; ext: writes since it began */
	struct sto_extent ext;
	char job[MDL_JOB_MAX + 1];
};

static uint64_t extent_hash(const char *job)
{
	return rdb_hash64(job, strlen(job), 0xe7e7) | 1;
}

static struct job_extent *extent_find(struct sto *s, const char *job, uint64_t h)
{
	struct job_extent *e = rdb_map_get(&s->job_extents, h);
	while (e && strcmp(e->job, job) != 0)
		e = e->next;
	return e;
}

void sti_extent_reset_locked(struct sto *s)
{
	for (size_t i = 0; i < s->job_extents.cap; i++) {
		struct job_extent *e = s->job_extents.keys[i] ? s->job_extents.vals[i] : NULL;
		while (e) {
			struct job_extent *next = e->next;
			free(e);
			e = next;
		}
	}
	rdb_map_free(&s->job_extents);
}

void sti_extent_reset(struct sto *s)
{
	pthread_mutex_lock(&s->head_lock);
	sti_extent_reset_locked(s);
	pthread_mutex_unlock(&s->head_lock);
}

void sti_extent_note(struct sto *s, struct sti_extent_cursor *cur, const char *job,
		     const struct mdl_cols *c, size_t n)
{
	if (!cur->job || strcmp(cur->job, job) != 0) {
		cur->e = extent_find(s, job, extent_hash(job));
		cur->job = job;
	}
	if (!cur->e)
		return;
	for (size_t i = 0; i < n; i++)
		extent_fold(&cur->e->ext, c->ts_ns[i], c->ts_ns[i], c->step[i]);
}

int sto_job_extent_get(struct sto *s, const char *job, struct sto_extent *out, uint64_t *ticket)
{
	uint64_t h = extent_hash(job);
	int rc = RDB_ENOTFOUND;
	*ticket = 0;
	pthread_mutex_lock(&s->head_lock);
	struct job_extent *e = extent_find(s, job, h);
	if (e && e->valid) {
		*out = e->ext;
		rc = 0;
	} else if (e) {
		*ticket = e->ticket; /* its writes are folded since before our walk */
	} else {
		if (s->job_extents.n >= JOB_EXTENTS_MAX)
			sti_extent_reset_locked(s);
		e = calloc(1, sizeof(*e));
		if (e) {
			memcpy(e->job, job, strnlen(job, MDL_JOB_MAX));
			e->hash = h;
			e->ticket = ++s->extent_ticket;
			e->ext.last_step = MDL_STEP_NONE;
			e->next = rdb_map_get(&s->job_extents, h);
			if (rdb_map_put(&s->job_extents, h, e) != 0) {
				free(e);
				e = NULL;
			}
		}
		if (e)
			*ticket = e->ticket;
		else
			rc = -ENOMEM;
	}
	pthread_mutex_unlock(&s->head_lock);
	return rc;
}

void sto_job_extent_put(struct sto *s, const char *job, uint64_t ticket,
			const struct sto_extent *walked)
{
	if (ticket == 0)
		return;
	pthread_mutex_lock(&s->head_lock);
	struct job_extent *e = extent_find(s, job, extent_hash(job));
	if (e && !e->valid && e->ticket == ticket) {
		if (walked->has_points) /* a step comes with a point */
			extent_fold(&e->ext, walked->first_ts_ns, walked->last_ts_ns,
				    walked->last_step);
		e->valid = true;
	}
	pthread_mutex_unlock(&s->head_lock);
}

void sto_rollup_widths(struct sto *s, int64_t *time_width_ns, int64_t *step_width)
{
	pthread_mutex_lock(&s->flush_lock);
	*time_width_ns = (int64_t)s->life.rollup_time_width_s * 1000000000;
	*step_width = (int64_t)s->life.rollup_step_width;
	pthread_mutex_unlock(&s->flush_lock);
}

void sto_view_free(struct sto_series_view *v)
{
	if (!v)
		return;
	mdl_cols_free(&v->head);
	free(v->chunks);
	free(v->rollups);
	memset(v, 0, sizeof(*v));
}

/* ---- events read ------------------------------------------------------------ */

struct ev_read {
	struct sto *s;
	struct evf filt;
	size_t max_events;
	struct ev_rec **hits; /* owned copies */
	size_t n, cap;
	struct ev_entry *chunks; /* chunks that may match */
	size_t nchunks, chunks_cap;
	int rc;
};

static int hit_add(struct ev_read *r, const struct mdl_event *e)
{
	if (r->n >= r->max_events)
		return RDB_ELIMIT;
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 64;
		struct ev_rec **p = realloc(r->hits, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		r->hits = p;
		r->cap = cap;
	}
	struct ev_rec *c = malloc(sizeof(*c) + e->text_len + e->fields_len);
	if (!c)
		return -ENOMEM;
	c->kind = e->kind;
	c->level = e->level;
	c->rank = e->rank;
	c->attempt = e->attempt;
	c->ts_ns = e->ts_ns;
	c->step = e->step;
	c->duration_ns = e->duration_ns;
	c->text_len = (uint32_t)e->text_len;
	c->fields_len = (uint32_t)e->fields_len;
	memcpy(c->data, e->text, e->text_len);
	memcpy(c->data + e->text_len, e->fields, e->fields_len);
	r->hits[r->n++] = c;
	return 0;
}

/* Matching head events of the job. Caller holds view_lock shared. */
static int read_head_events(struct ev_read *r)
{
	struct sto *s = r->s;
	const char *job = r->filt.f->job;
	size_t jl = strlen(job);
	int rc = 0;
	pthread_mutex_lock(&s->head_lock);
	struct head *heads[2] = {s->frozen, s->active};
	for (int i = 0; i < 2 && rc == 0; i++) {
		struct ev_job *j = heads[i] ? evh_job(heads[i]->ev, job) : NULL;
		for (size_t k = 0; j && k < j->n && rc == 0; k++) {
			struct mdl_event e;
			ev_rec_view(j->recs[k], job, jl, &e);
			if (evf_match(&r->filt, &e))
				rc = hit_add(r, &e);
		}
	}
	pthread_mutex_unlock(&s->head_lock);
	return rc;
}

/* Counts and logs an event chunk whose index entry failed its checksum;
 * used: whether the chunk is read through it anyway. */
static void note_damaged_ev_entry(struct sto *s, const char *job, uint64_t uid, bool used)
{
	static struct rdb_log_ratelimit rl;
	atomic_fetch_add(&s->st_index_damaged, 1);
	rdb_log_limited(&rl, 10, RDB_LOG_ERROR, "store",
			"LMDB index: the entry of event chunk %llu (job %s) failed its checksum; "
			"%s. 'rankctl verify --quarantine' rewrites it from the chunk (or moves "
			"it to the quarantine when it does not lead there)",
			(unsigned long long)uid, job,
			used ? "its statistics and token filter are not used, the chunk is "
			       "decoded instead"
			     : "it does not say where its chunk is: the query fails");
}

/* The same for an entry whose token filter alone failed its checksum. */
static void note_damaged_ev_filter(struct sto *s, const char *job, uint64_t uid)
{
	static struct rdb_log_ratelimit rl;
	atomic_fetch_add(&s->st_index_damaged, 1);
	rdb_log_limited(&rl, 10, RDB_LOG_ERROR, "store",
			"LMDB index: the token filter of the entry of event chunk %llu (job %s) "
			"failed its checksum; it is not used, the chunk is decoded instead. "
			"'rankctl verify --quarantine' rewrites the entry from the chunk",
			(unsigned long long)uid, job);
}

static int ev_chunk_cb(void *arg, int64_t min_ts_ns, uint64_t uid, const uint8_t *val, size_t len,
		       bool damaged)
{
	struct ev_read *r = arg;
	struct ev_entry e;
	int rc = eve_decode(val, len, &e);
	if (rc == 0 && damaged && e.length > STO_CHUNK_HEADER_SIZE + 3 * STO_EVCHUNK_MAX_RAW)
		rc = RDB_ECORRUPT;
	if (rc && damaged)
		note_damaged_ev_entry(r->s, r->filt.f->job, uid, false);
	if (rc)
		return rc;
	e.uid = uid;
	bool filter_damaged = false;
	if (damaged) {
		/* Its statistics and token filter are not used: the chunk at its
		 * location is read (checksum, uid and job checked) and every event
		 * filtered on its own. */
		note_damaged_ev_entry(r->s, r->filt.f->job, uid, true);
		e.min_ts_ns = min_ts_ns;
	} else if (!evf_chunk_may_match(&r->filt, &e, &filter_damaged)) {
		return 0;
	} else if (filter_damaged) {
		/* The fixed part is sound (statistics used); only the token
		 * filter, consulted for this query's words, failed its own
		 * checksum: the chunk's events are filtered one by one. */
		note_damaged_ev_filter(r->s, r->filt.f->job, uid);
	}
	if (r->nchunks == r->chunks_cap) {
		size_t cap = r->chunks_cap ? r->chunks_cap * 2 : 16;
		struct ev_entry *p = realloc(r->chunks, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		r->chunks = p;
		r->chunks_cap = cap;
	}
	e.bloom = NULL; /* points into the snapshot; not needed any more */
	r->chunks[r->nchunks++] = e;
	return 0;
}

/* Reads, verifies and decodes one event chunk, adding its matches. */
static int read_event_chunk(struct ev_read *r, const struct ev_entry *e, struct rdb_buf *rec,
			    struct ev_decoded *dec, struct sto_read_error *err)
{
	const char *job = r->filt.f->job;
	size_t jl = strlen(job), plen = 0;
	const uint8_t *payload = NULL;
	const char *why = "read failed";
	rec->len = 0;
	int rc = rdb_buf_reserve(rec, e->length);
	if (rc == 0)
		rc = sti_seg_read(r->s, e->segment_id, e->offset, rec->data, e->length);
	if (rc == -ENOENT) {
		uint64_t seg = 0, off = 0;
		rc = sto_admin_ev_relookup(r->s, job, e->min_ts_ns, e->uid, &seg, &off);
		if (rc == 0)
			rc = sti_seg_read(r->s, seg, off, rec->data, e->length);
	}
	if (rc == 0)
		rc = sto_chunk_check(rec->data, e->length, STO_EVCHUNK_MAGIC, 0, e->uid, &payload,
				     &plen, &why);
	size_t keylen = 1 + jl + 4 + 2;
	if (rc == 0 && (plen < keylen || payload[plen - keylen] != jl ||
			memcmp(payload + plen - keylen + 1, job, jl) != 0)) {
		rc = RDB_ECORRUPT;
		why = "event chunk belongs to another job than the index says";
	}
	if (rc == 0) {
		rc = evc_decode(payload, plen - keylen, job, dec);
		if (rc == RDB_ECORRUPT)
			why = "event chunk payload does not decode";
	}
	for (size_t i = 0; rc == 0 && i < dec->n; i++)
		if (evf_match(&r->filt, &dec->ev[i]))
			rc = hit_add(r, &dec->ev[i]);
	if (rc && rc != RDB_ELIMIT) {
		char path[PATH_MAX + 64];
		sto_seg_path(r->s->seg_dir, e->segment_id, path, sizeof(path));
		snprintf(err->msg, sizeof(err->msg),
			 "%s: %s (event chunk %llu of job %s, offset %llu, %u bytes, in %s)",
			 rc == RDB_ECORRUPT ? "corrupt data" : "I/O error",
			 rc == RDB_ECORRUPT ? why : rdb_strerror(rc), (unsigned long long)e->uid,
			 job, (unsigned long long)e->offset, e->length, path);
		static struct rdb_log_ratelimit rl;
		rdb_log_limited(&rl, 10, RDB_LOG_ERROR, "store", "%s; the chunk is not served",
				err->msg);
	}
	return rc;
}

static int cmp_hit(const void *a, const void *b)
{
	const struct ev_rec *x = *(struct ev_rec *const *)a, *y = *(struct ev_rec *const *)b;
	if (x->ts_ns != y->ts_ns)
		return x->ts_ns > y->ts_ns ? -1 : 1; /* newest first */
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	if (x->kind != y->kind)
		return (int)x->kind - (int)y->kind;
	size_t n = x->text_len < y->text_len ? x->text_len : y->text_len;
	int c = memcmp(x->data, y->data, n);
	if (c)
		return c;
	return x->text_len == y->text_len ? 0 : (x->text_len < y->text_len ? -1 : 1);
}

int sto_events_read(struct sto *s, const struct sto_ev_filter *f, size_t max_events, sto_ev_fn fn,
		    void *arg, struct sto_read_error *err)
{
	struct ev_read r = {.s = s, .max_events = max_events};
	struct rdb_buf rec;
	struct ev_decoded dec = {0};
	struct sto_txn *t = NULL;
	err->msg[0] = 0;
	rdb_buf_init(&rec, STO_CHUNK_HEADER_SIZE + 3 * STO_EVCHUNK_MAX_RAW);
	evf_prepare(&r.filt, f);
	pthread_rwlock_rdlock(&s->view_lock);
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc == 0) {
		sto_txn_pass_damaged(t); /* ev_chunk_cb reads through a damaged entry */
		rc = read_head_events(&r);
	}
	pthread_rwlock_unlock(&s->view_lock);
	if (rc == 0)
		rc = sto_evidx_scan(t, f->job, f->to_ns, ev_chunk_cb, &r);
	sto_txn_abort(t);
	for (size_t i = 0; rc == 0 && i < r.nchunks; i++)
		rc = read_event_chunk(&r, &r.chunks[i], &rec, &dec, err);
	if (rc == 0 && r.n > 1)
		rdb_sort(r.hits, r.n, sizeof(*r.hits), cmp_hit);
	size_t jl = strlen(f->job);
	for (size_t i = 0; rc == 0 && i < r.n; i++) {
		struct mdl_event e;
		ev_rec_view(r.hits[i], f->job, jl, &e);
		rc = fn(arg, &e);
	}
	if (rc == RDB_ELIMIT && !err->msg[0])
		snprintf(err->msg, sizeof(err->msg), "more than %zu matching events", max_events);
	for (size_t i = 0; i < r.n; i++)
		free(r.hits[i]);
	free(r.hits);
	free(r.chunks);
	evc_decoded_free(&dec);
	rdb_buf_free(&rec);
	return rc;
}

/* ---- catalog --------------------------------------------------------------- */

int sto_list_jobs(struct sto *s, sto_job_fn fn, void *arg)
{
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	rc = sto_jobs_scan(t, fn, arg);
	sto_txn_abort(t);
	return rc;
}

int sto_list_series(struct sto *s, const char *job, sto_series_fn fn, void *arg)
{
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	rc = sto_series_scan(t, job, fn, arg);
	sto_txn_abort(t);
	return rc;
}

int sto_list_series_metric(struct sto *s, const char *job, sto_metric_want_fn want,
			   sto_series_fn fn, void *arg)
{
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	rc = sto_series_scan_metric(t, job, want, fn, arg);
	sto_txn_abort(t);
	return rc;
}

int sto_lookup_series(struct sto *s, const struct mdl_series_key *k, uint64_t *id)
{
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	rc = sto_series_lookup(t, k, id);
	sto_txn_abort(t);
	return rc;
}

void sto_get_stats(struct sto *s, struct sto_stats *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&s->series_lock);
	out->series = s->nseries;
	pthread_mutex_unlock(&s->series_lock);
	pthread_mutex_lock(&s->head_lock);
	out->head_points = s->active ? s->active->points : 0;
	out->head_points += s->frozen ? s->frozen->points : 0;
	pthread_mutex_unlock(&s->head_lock);
	out->head_bytes = atomic_load(&s->head_bytes);
	out->chunks_sealed = atomic_load(&s->st_chunks);
	out->points_sealed = atomic_load(&s->st_points_sealed);
	out->chunk_bytes_written = atomic_load(&s->st_chunk_bytes);
	out->checkpoints = atomic_load(&s->st_checkpoints);
	out->points_written = atomic_load(&s->st_points_written);
	out->batches_written = atomic_load(&s->st_batches_written);
	out->write_busy = atomic_load(&s->st_write_busy);
	out->events_written = atomic_load(&s->st_events_written);
	out->event_chunks_sealed = atomic_load(&s->st_event_chunks);
	out->batch_duplicates = atomic_load(&s->st_batch_dups);
	out->wal_damaged_ranges = s->st_wal_damaged_ranges; /* set at open, then constant */
	out->wal_undefined_records = s->st_wal_undefined;
	out->wal_kept_files = s->st_wal_kept_files;
	out->wal_kept_bytes = s->st_wal_kept_bytes;
	out->index_damaged = atomic_load(&s->st_index_damaged);
	out->compactions_refused = atomic_load(&s->st_compact_refused);
	if (s->wal)
		sto_wal_get_stats(s->wal, &out->wal);
}

int sti_seg_read(struct sto *s, uint64_t id, uint64_t off, void *buf, size_t len)
{
	pthread_rwlock_rdlock(&s->seg_lock);
	int rc = sto_seg_read(s->readers, id, off, buf, len);
	pthread_rwlock_unlock(&s->seg_lock);
	return rc;
}

int sto_admin_seg_read(struct sto *s, uint64_t id, uint64_t off, void *buf, size_t len)
{
	return sti_seg_read(s, id, off, buf, len);
}

void sto_admin_parts(struct sto *s, struct sto_admin_parts *out)
{
	out->ix = s->ix;
	out->dir = s->dir;
	out->seg_dir = s->seg_dir;
	out->wal_dir = s->wal_dir;
}

int sto_admin_relookup(struct sto *s, const struct sto_chunk_ref *old, struct sto_chunk_ref *cur)
{
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	rc = sto_chunk_get(t, old->series_id, old->stats.min_ts_ns, old->uid, cur);
	sto_txn_abort(t);
	if (rc == 0 && cur->segment_id == old->segment_id)
		rc = -ENOENT; /* not moved: the file is really missing */
	return rc == RDB_ENOTFOUND ? -ENOENT : rc;
}

struct ev_where {
	uint64_t seg, off;
};

static int ev_where_cb(void *arg, int64_t min_ts_ns, uint64_t uid, const uint8_t *val, size_t len,
		       bool damaged)
{
	(void)damaged; /* never set: not a pass_damaged transaction */
	struct ev_where *w = arg;
	struct ev_entry e;
	(void)min_ts_ns;
	(void)uid;
	int rc = eve_decode(val, len, &e);
	w->seg = e.segment_id;
	w->off = e.offset;
	return rc;
}

int sto_admin_ev_relookup(struct sto *s, const char *job, int64_t min_ts_ns, uint64_t uid,
			  uint64_t *segment_id, uint64_t *offset)
{
	struct sto_txn *t;
	struct ev_where w = {0};
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	rc = sto_evidx_get(t, job, min_ts_ns, uid, ev_where_cb, &w);
	sto_txn_abort(t);
	if (rc == 0) {
		*segment_id = w.seg;
		*offset = w.off;
	}
	return rc == RDB_ENOTFOUND ? -ENOENT : rc;
}
