/* store_seal.c - sealing: points of a head into chunks, and a head's logs
 * and spans into event chunks (internal; store_int.h).
 *
 * A series whose active-head column reaches chunk_max_points is sealed
 * early (size seal); at a checkpoint the whole frozen head is sealed
 * (store.c). Moving points from head to chunk (index commit + head removal)
 * happens under the exclusive view lock, so a reader sees every point
 * exactly once.
 *
 * Threading: the flusher thread only (it owns the segment writer).
 *
 * Failure: a seal failure (segment I/O, index) is logged; the points stay
 * in the head and the WAL, and the flusher retries.
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

/* ---- sealing: head -> chunks ------------------------------------------------ */

#define UID_BLOCK 65536u /* uids reserved per meta write */

int sti_uid_reserve(struct sto *s, uint64_t n)
{
	if (n <= s->uid_limit - s->next_uid)
		return 0;
	struct sto_txn *t;
	uint64_t limit = s->next_uid + n + UID_BLOCK;
	int rc = sto_txn_begin(s->ix, true, &t);
	if (rc)
		return rc;
	rc = sto_meta_put(t, "next_chunk_uid", limit);
	if (rc) {
		sto_txn_abort(t);
		return rc;
	}
	rc = sto_txn_commit_at(t, STO_FP_META_COMMIT);
	if (rc == 0)
		s->uid_limit = limit;
	return rc;
}

/* A run: consecutive items (sorted) of one (job, rank), sealed together so
 * that series with identical time columns share a group record. Bounded by
 * STO_GROUP_MAX_MEMBERS series and RUN_MAX_POINTS copied points (a single
 * larger series still makes a run of its own). */
#define RUN_MAX_POINTS (1u << 20)

#define RELEASE_EVERY 1024u /* index entries put between two releases of the map */

/* Index entries per seal round (one LMDB transaction). A transaction keeps
 * a malloc'd copy of every page it changes until it commits, and LMDB keeps
 * those copies for reuse after that: at 512 ranks x 32 metrics one
 * transaction for a whole checkpoint changed ~12k leaf pages (~48 MB held
 * for the server's life). Smaller rounds bound that to ~8 MB for a few
 * more commits per checkpoint. */
#define SEAL_REFS_MAX 2048u

/* Head memory (column capacity) whose points one checkpoint seal round may
 * hold. A round frees its series' columns only when it commits, and until
 * then the active head grows next to the frozen one: a 64-rank checkpoint
 * of 112 MiB was one round (2,048 refs, < SEAL_BUF_MAX of chunks), and the
 * process peaked at frozen + everything written during the seal. In rounds
 * of 16 MiB the frozen head shrinks as the seal goes and the active head
 * reuses its memory (columns grow in the writer's malloc arena:
 * mdl_cols_reserve_moving in store_write.c); at 512 ranks SEAL_REFS_MAX
 * already made rounds of about this size. Each round is one more segment
 * append and LMDB commit (two fsyncs), so a head larger than
 * SEAL_ROUNDS_MEM x this (a seal that fell behind on a loaded machine) is
 * sealed in SEAL_ROUNDS_MEM rounds of its size / SEAL_ROUNDS_MEM instead:
 * more commits would slow the seal and let the next head grow further. */
#define SEAL_ROUND_HEAD_BYTES (16u * 1024 * 1024)
#define SEAL_ROUNDS_MEM	      8u

struct seal_round {
	struct rdb_buf buf;	    /* framed chunk records for the segment */
	struct rdb_buf codec;	    /* scratch: one chunk's codec payload */
	struct sto_chunk_ref *refs; /* chunks in buf */
	size_t nrefs, refs_cap;
	struct mdl_cols copy[STO_GROUP_MAX_MEMBERS]; /* the run's points, sorted */
	bool done[STO_GROUP_MAX_MEMBERS];	     /* member already sealed */
	/* scratch: the keys of the record being framed (the cache entries
	 * keep compact names, sto_chunk_frame and sto_group_frame take keys) */
	struct mdl_series_key keys[STO_GROUP_MAX_MEMBERS];
};

static void round_free(struct seal_round *r)
{
	rdb_buf_free(&r->buf);
	rdb_buf_free(&r->codec);
	free(r->refs);
	for (size_t i = 0; i < STO_GROUP_MAX_MEMBERS; i++)
		mdl_cols_free(&r->copy[i]);
}

/* Makes sure a segment is open with room; rolls it past segment_max_bytes. */
static int ensure_segment(struct sto *s)
{
	if (s->seg && sto_seg_size(s->seg) < s->opt.segment_max_bytes)
		return 0;
	if (s->seg) {
		int rc = sto_seg_close(s->seg);
		s->seg = NULL;
		if (rc)
			return rc;
	}
	struct sto_txn *t;
	uint64_t id;
	int rc = sto_txn_begin(s->ix, true, &t);
	if (rc)
		return rc;
	rc = sto_meta_next(t, "next_segment_id", &id);
	if (rc) {
		sto_txn_abort(t);
		return rc;
	}
	rc = sto_txn_commit_at(t, STO_FP_META_COMMIT);
	if (rc == 0)
		rc = sto_seg_create(s->seg_dir, id, s->ring, &s->seg);
	return rc;
}

static int add_ref(struct seal_round *r, const struct sto_chunk_ref *ref)
{
	if (r->nrefs == r->refs_cap) {
		size_t cap = r->refs_cap ? r->refs_cap * 2 : 256;
		struct sto_chunk_ref *p = realloc(r->refs, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		r->refs = p;
		r->refs_cap = cap;
	}
	r->refs[r->nrefs++] = *ref;
	return 0;
}

/* Points [from, from + n) of c, without copying. */
static struct mdl_cols cols_view(const struct mdl_cols *c, size_t from, size_t n)
{
	return (struct mdl_cols){.n = n,
				 .cap = n,
				 .ts_ns = c->ts_ns + from,
				 .step = c->step + from,
				 .attempt = c->attempt + from,
				 .value = c->value + from};
}

/* Encodes points [from, from+n) of c as one chunk record into r->buf. */
static int encode_piece(struct sto *s, struct seal_round *r, struct series_ent *ent, uint64_t gen,
			const struct mdl_cols *c, size_t from, size_t n)
{
	struct mdl_cols p = cols_view(c, from, n);
	r->codec.len = 0;
	int rc = sto_codec_encode(&p, &r->codec, NULL);
	if (rc)
		return rc;
	struct sto_chunk_ref ref = {0};
	ref.series_id = ent->id;
	ref.uid = s->next_uid++;
	ref.segment_id = sto_seg_id(s->seg);
	ref.offset = sto_seg_size(s->seg) + r->buf.len;
	ref.gen = gen;
	sto_chunk_stats_compute(&p, &ref.stats);
	size_t before = r->buf.len;
	sti_ent_key(ent, &r->keys[0]); /* once per chunk: cold next to its encoding */
	rc = sto_chunk_frame(&r->buf, STO_CHUNK_MAGIC, ent->id, ref.uid, gen, (uint32_t)n,
			     r->codec.data, r->codec.len, &r->keys[0]);
	if (rc)
		return rc;
	ref.length = (uint32_t)(r->buf.len - before);
	return add_ref(r, &ref);
}

/* Encodes points [from, from+n) of the m run members mi[] (identical time
 * columns) as one group record into r->buf, one ref per member. */
static int encode_group_piece(struct sto *s, struct seal_round *r, const struct seal_item *run,
			      const size_t *mi, size_t m, uint64_t gen, size_t from, size_t n)
{
	struct mdl_cols views[STO_GROUP_MAX_MEMBERS];
	struct sto_group_member mem[STO_GROUP_MAX_MEMBERS];
	for (size_t k = 0; k < m; k++) {
		const struct series_ent *e = run[mi[k]].hs->ent;
		views[k] = cols_view(&r->copy[mi[k]], from, n);
		sti_ent_key(e, &r->keys[k]); /* once per member of a group record */
		mem[k] = (struct sto_group_member){e->id, &r->keys[k], &views[k]};
	}
	/* m consecutive uids: member k's chunk is uid + k (the record holds uid) */
	uint64_t uid = s->next_uid, offset = sto_seg_size(s->seg) + r->buf.len;
	s->next_uid += m;
	size_t before = r->buf.len;
	uint32_t head_len = 0;
	int rc = sto_group_frame(&r->buf, &r->codec, uid, gen, mem, m, &head_len);
	for (size_t k = 0; rc == 0 && k < m; k++) {
		struct sto_chunk_ref ref = {.series_id = mem[k].series_id,
					    .uid = uid + k,
					    .segment_id = sto_seg_id(s->seg),
					    .offset = offset,
					    .length = (uint32_t)(r->buf.len - before),
					    .group_n = (uint8_t)m,
					    .member = (uint8_t)k,
					    .head_len = head_len,
					    .gen = gen};
		sto_chunk_stats_compute(&views[k], &ref.stats);
		rc = add_ref(r, &ref);
	}
	return rc;
}

/* Seals the run's members (points copied and sorted in r->copy): those
 * with identical time columns as group records, the others on their own,
 * each in pieces of at most chunk_max_points. */
static int encode_run(struct sto *s, struct seal_round *r, const struct seal_item *run, size_t nrun,
		      uint64_t gen)
{
	size_t mi[STO_GROUP_MAX_MEMBERS];
	memset(r->done, 0, sizeof(r->done));
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < nrun; i++) {
		if (r->done[i] || r->copy[i].n == 0)
			continue;
		size_t m = 0;
		for (size_t j = i; j < nrun; j++)
			if (!r->done[j] &&
			    (j == i || mdl_cols_same_time(&r->copy[i], &r->copy[j]))) {
				mi[m++] = j;
				r->done[j] = true;
			}
		size_t total = r->copy[i].n;
		for (size_t at = 0; rc == 0 && at < total; at += s->opt.chunk_max_points) {
			size_t n = total - at;
			if (n > s->opt.chunk_max_points)
				n = s->opt.chunk_max_points;
			if (m == 1)
				rc = encode_piece(s, r, run[i].hs->ent, gen, &r->copy[i], at, n);
			else
				rc = encode_group_piece(s, r, run, mi, m, gen, at, n);
		}
	}
	return rc;
}

/* Copies the first `taken` points of hs into c (caller holds head_lock). */
static int copy_points(struct mdl_cols *c, const struct head_series *hs, size_t taken)
{
	c->n = 0;
	if (taken == 0)
		return 0; /* a series emptied by size seals: nothing to copy */
	int rc = mdl_cols_reserve(c, taken);
	if (rc)
		return rc;
	memcpy(c->ts_ns, hs->pts.ts_ns, taken * sizeof(int64_t));
	memcpy(c->step, hs->pts.step, taken * sizeof(int64_t));
	memcpy(c->attempt, hs->pts.attempt, taken * sizeof(uint32_t));
	memcpy(c->value, hs->pts.value, taken * sizeof(uint64_t));
	c->n = taken;
	return 0;
}

/* Drops the first `taken` points of hs; frees it if it becomes empty and
 * drop_empty. Caller holds head_lock. */
static void head_consume(struct sto *s, struct head *h, struct head_series *hs, size_t taken,
			 bool drop_empty)
{
	size_t rest = hs->pts.n - taken;
	memmove(hs->pts.ts_ns, hs->pts.ts_ns + taken, rest * sizeof(int64_t));
	memmove(hs->pts.step, hs->pts.step + taken, rest * sizeof(int64_t));
	memmove(hs->pts.attempt, hs->pts.attempt + taken, rest * sizeof(uint32_t));
	memmove(hs->pts.value, hs->pts.value + taken, rest * sizeof(uint64_t));
	hs->pts.n = rest;
	h->points -= taken;
	hs->queued = false;
	if (rest == 0 && drop_empty && hs->reserved == 0) {
		uint64_t freed = sti_cols_bytes(&hs->pts) + HEAD_SERIES_OVERHEAD;
		rdb_map_del(&h->series, hs->ent->id);
		mdl_cols_free(&hs->pts);
		free(hs);
		h->bytes -= freed;
		atomic_fetch_sub(&s->head_bytes, freed);
	}
}

/* After records were appended at `size` but their index commit failed (rc):
 * cuts them off again, so that no record without an index entry outlives
 * the WAL file that also holds its points (rankctl rebuild-index would
 * index it next to the points sealed again: issue 10, item 8). If the cut
 * fails, the segment is closed (the next seal starts a new one) and the
 * record stays until the next unclean start rewrites the segment. */
static int cut_back(struct sto *s, uint64_t size, int rc)
{
	if (sto_seg_truncate(s->seg, size) != 0) {
		rdb_error("store",
			  "segment %llu keeps chunk records without index entries past offset "
			  "%llu; closing it. Do not run rankctl rebuild-index before the next "
			  "restart has rewritten it",
			  (unsigned long long)sto_seg_id(s->seg), (unsigned long long)size);
		sto_seg_close(s->seg);
		s->seg = NULL;
	}
	return rc;
}

/* Writes the round's chunks to the segment, indexes them (with pending
 * entries: they belong to a generation newer than ckpt_gen) and removes
 * the sealed points from the head, atomically for readers. */
static int commit_round(struct sto *s, struct head *h, struct seal_round *r,
			struct seal_item *items, size_t nitems, bool drop_empty)
{
	if (r->nrefs == 0)
		return 0;
	uint64_t before = sto_seg_size(s->seg);
	int rc = sto_seg_append(s->seg, r->buf.data, r->buf.len);
	if (rc)
		return rc;
	struct sto_txn *t;
	rc = sto_txn_begin(s->ix, true, &t);
	if (rc)
		return cut_back(s, before, rc);
	for (size_t i = 0; i < r->nrefs && rc == 0; i++) {
		rc = sto_chunk_put(t, &r->refs[i]);
		if (rc == 0)
			rc = sto_pending_add(t, r->refs[i].gen, &r->refs[i]);
		/* the inserts read leaf pages all over the chunk tree through
		 * LMDB's map: unmap them as we go (sto_index_release_pages) */
		if (i % RELEASE_EVERY == RELEASE_EVERY - 1)
			sto_index_release_pages(s->ix);
	}
	if (rc == 0)
		rc = sto_meta_put(t, "next_chunk_uid", s->uid_limit);
	if (rc) {
		sto_txn_abort(t);
		return cut_back(s, before, rc);
	}
	pthread_rwlock_wrlock(&s->view_lock);
	rc = sto_txn_commit(t);
	if (rc == 0) {
		pthread_mutex_lock(&s->head_lock);
		for (size_t i = 0; i < nitems; i++)
			head_consume(s, h, items[i].hs, items[i].taken, drop_empty);
		pthread_mutex_unlock(&s->head_lock);
	}
	pthread_rwlock_unlock(&s->view_lock);
	if (rc)
		return cut_back(s, before, rc);
	uint64_t pts = 0;
	for (size_t i = 0; i < r->nrefs; i++)
		pts += r->refs[i].stats.count;
	atomic_fetch_add(&s->st_chunks, r->nrefs);
	atomic_fetch_add(&s->st_points_sealed, pts);
	atomic_fetch_add(&s->st_chunk_bytes, r->buf.len);
	return 0;
}

/* Orders names as strcmp does (they hold no NUL), from their lengths. */
static int name_cmp(const char *x, size_t xl, const char *y, size_t yl)
{
	int c = memcmp(x, y, xl < yl ? xl : yl);
	return c ? c : (xl > yl) - (xl < yl);
}

static int item_cmp(const void *a, const void *b)
{
	const struct series_ent *x = ((const struct seal_item *)a)->hs->ent;
	const struct series_ent *y = ((const struct seal_item *)b)->hs->ent;
	int c = name_cmp(sti_ent_job(x), x->job_len, sti_ent_job(y), y->job_len);
	if (c == 0)
		c = x->rank < y->rank ? -1 : x->rank > y->rank;
	return c ? c : name_cmp(sti_ent_metric(x), x->metric_len, sti_ent_metric(y), y->metric_len);
}

/* End of the run that starts at items[i] (see RUN_MAX_POINTS). */
static size_t run_end(const struct seal_item *items, size_t nitems, size_t i)
{
	const struct series_ent *k = items[i].hs->ent;
	size_t points = items[i].taken, j = i + 1;
	for (; j < nitems && j - i < STO_GROUP_MAX_MEMBERS; j++) {
		const struct series_ent *o = items[j].hs->ent;
		if (o->rank != k->rank || o->job_len != k->job_len ||
		    memcmp(sti_ent_job(o), sti_ent_job(k), k->job_len) != 0 ||
		    points + items[j].taken > RUN_MAX_POINTS)
			break;
		points += items[j].taken;
	}
	return j;
}

/* Copies and sorts the points of run [i, j) into r->copy; adds the head
 * memory (column capacity) of its series to *head_bytes. */
static int copy_run(struct sto *s, struct seal_round *r, const struct seal_item *items, size_t i,
		    size_t j, uint64_t *head_bytes)
{
	int rc = 0;
	pthread_mutex_lock(&s->head_lock);
	for (size_t k = i; rc == 0 && k < j; k++) {
		rc = copy_points(&r->copy[k - i], items[k].hs, items[k].taken);
		*head_bytes += sti_cols_bytes(&items[k].hs->pts);
	}
	pthread_mutex_unlock(&s->head_lock);
	for (size_t k = i; rc == 0 && k < j; k++)
		rc = mdl_cols_sort_by_time(&r->copy[k - i]);
	return rc;
}

/* Seals items (series of head h) in rounds of at most SEAL_BUF_MAX bytes
 * and SEAL_REFS_MAX chunks (and, when drop_empty, SEAL_ROUND_HEAD_BYTES of
 * head memory or an eighth of the head, whichever is more). For each
 * item, `taken` points are sealed into chunks of at most
 * chunk_max_points; the metrics of one (job, rank) whose points share
 * timestamps, steps and attempts go into group records. Items are sorted
 * by series key. Flusher thread only. */
int sti_seal_items(struct sto *s, struct head *h, struct seal_item *items, size_t nitems,
		   bool drop_empty)
{
	struct seal_round r = {0};
	rdb_buf_init(&r.buf, SEAL_BUF_MAX + STO_CHUNK_MAX_PAYLOAD);
	rdb_buf_init(&r.codec, STO_CHUNK_MAX_PAYLOAD);
	int rc = 0;
	size_t first = 0;
	uint64_t round_head_bytes = 0, round_max = SEAL_ROUND_HEAD_BYTES;
	if (drop_empty) {
		pthread_mutex_lock(&s->head_lock);
		if (h->bytes / SEAL_ROUNDS_MEM > round_max)
			round_max = h->bytes / SEAL_ROUNDS_MEM;
		pthread_mutex_unlock(&s->head_lock);
	}
	uint64_t uids = 0; /* at most one per chunk_max_points piece of each item */
	for (size_t i = 0; i < nitems; i++)
		uids += (items[i].taken + s->opt.chunk_max_points - 1) / s->opt.chunk_max_points;
	rc = sti_uid_reserve(s, uids);
	if (nitems > 1)
		rdb_sort(items, nitems, sizeof(*items), item_cmp);
	for (size_t i = 0; i < nitems && rc == 0;) {
		size_t j = run_end(items, nitems, i);
		if (!s->seg || r.buf.len == 0) {
			rc = ensure_segment(s);
			if (rc)
				break;
		}
		rc = copy_run(s, &r, items, i, j, &round_head_bytes);
		if (rc == 0)
			rc = encode_run(s, &r, items + i, j - i, h->gen);
		if (rc == 0 && (r.buf.len >= SEAL_BUF_MAX || r.nrefs >= SEAL_REFS_MAX ||
				j == nitems || (drop_empty && round_head_bytes >= round_max))) {
			rc = commit_round(s, h, &r, items + first, j - first, drop_empty);
			r.buf.len = 0;
			r.nrefs = 0;
			round_head_bytes = 0;
			first = j;
		}
		i = j;
	}
	round_free(&r);
	return rc;
}

/* Seals the full series queued by writers (size seal of the active head). */
int sti_seal_full(struct sto *s)
{
	pthread_mutex_lock(&s->head_lock);
	size_t n = s->seal_queue_n;
	struct seal_item *items = calloc(n ? n : 1, sizeof(*items));
	size_t k = 0;
	for (size_t i = 0; items && i < n; i++) {
		struct head_series *hs = rdb_map_get(&s->active->series, s->seal_queue[i]);
		if (!hs || hs->pts.n < s->opt.chunk_max_points)
			continue;
		items[k].hs = hs;
		items[k].taken = hs->pts.n - hs->pts.n % s->opt.chunk_max_points;
		k++;
	}
	if (items)
		s->seal_queue_n = 0;
	struct head *h = s->active;
	pthread_mutex_unlock(&s->head_lock);
	if (!items)
		return -ENOMEM;
	/* Only the flusher removes points or rotates heads, so h and the items
	 * stay valid while we work without the lock. */
	int rc = sti_seal_items(s, h, items, k, false);
	if (rc) {
		rdb_error("store",
			  "size seal of %zu series failed: %s; points stay in the head "
			  "and the WAL, retrying at the next checkpoint",
			  k, rdb_strerror(rc));
		pthread_mutex_lock(&s->head_lock);
		for (size_t i = 0; i < k; i++)
			if (items[i].hs->pts.n >= items[i].taken)
				items[i].hs->queued = false;
		pthread_mutex_unlock(&s->head_lock);
	}
	free(items);
	return rc;
}

/* ---- sealing events ------------------------------------------------------------- */

struct ev_seal {
	struct sto *s;
	struct head *h;
	struct sto_txn *t; /* open while a round is being built */
	struct rdb_buf buf, payload, bloom, entry;
	struct ev_job **jobs; /* sealed in this round, with how many events */
	size_t *counts;
	size_t n, cap;
};

/* Writes the round's event chunks, commits their index entries and drops
 * the sealed events from the head, atomically for readers. */
static int commit_events(struct ev_seal *es)
{
	struct sto *s = es->s;
	struct sto_txn *t = es->t;
	es->t = NULL;
	if (!t)
		return 0;
	uint64_t before = sto_seg_size(s->seg);
	int rc = sto_seg_append_at(s->seg, es->buf.data, es->buf.len, STO_FP_EVENT_SEAL);
	bool appended = rc == 0;
	if (rc == 0)
		rc = sto_meta_put(t, "next_chunk_uid", s->uid_limit);
	if (rc) {
		sto_txn_abort(t);
		return appended ? cut_back(s, before, rc) : rc;
	}
	pthread_rwlock_wrlock(&s->view_lock);
	rc = sto_txn_commit(t);
	if (rc == 0) {
		pthread_mutex_lock(&s->head_lock);
		for (size_t i = 0; i < es->n; i++) {
			uint64_t freed = evh_consume(es->h->ev, es->jobs[i], es->counts[i]);
			es->h->bytes -= freed;
			atomic_fetch_sub(&s->head_bytes, freed);
		}
		pthread_mutex_unlock(&s->head_lock);
	}
	pthread_rwlock_unlock(&s->view_lock);
	if (rc)
		return cut_back(s, before, rc);
	atomic_fetch_add(&s->st_chunk_bytes, es->buf.len);
	es->buf.len = 0;
	es->n = 0;
	return rc;
}

/* Encodes recs[0..k) of job j as one chunk into the round. */
static int seal_event_chunk(struct ev_seal *es, struct ev_job *j, size_t k)
{
	struct sto *s = es->s;
	struct ev_entry e;
	int rc = evc_encode(j->recs, k, &es->payload, &e, &es->bloom);
	if (rc)
		return rc;
	struct mdl_series_key key = {0};
	memcpy(key.job, j->job, strlen(j->job) + 1);
	key.rank = MDL_RANK_JOB;
	e.uid = s->next_uid++;
	e.segment_id = sto_seg_id(s->seg);
	e.offset = sto_seg_size(s->seg) + es->buf.len;
	e.gen = es->h->gen;
	size_t before = es->buf.len;
	rc = sto_chunk_frame(&es->buf, STO_EVCHUNK_MAGIC, 0, e.uid, e.gen, (uint32_t)k,
			     es->payload.data, es->payload.len, &key);
	if (rc)
		return rc;
	e.length = (uint32_t)(es->buf.len - before);
	rc = eve_encode(&e, e.bloom, &es->entry);
	if (rc == 0)
		rc =
		    sto_evidx_put(es->t, j->job, e.min_ts_ns, e.uid, es->entry.data, es->entry.len);
	if (rc == 0)
		rc = sto_evpending_add(es->t, e.gen, j->job, e.min_ts_ns, e.uid);
	if (rc == 0)
		atomic_fetch_add(&s->st_event_chunks, 1);
	return rc;
}

static int round_note(struct ev_seal *es, struct ev_job *j, size_t k)
{
	if (es->n == es->cap) {
		size_t cap = es->cap ? es->cap * 2 : 16;
		struct ev_job **jj = realloc(es->jobs, cap * sizeof(*jj));
		if (!jj)
			return -ENOMEM;
		es->jobs = jj;
		size_t *cc = realloc(es->counts, cap * sizeof(*cc));
		if (!cc)
			return -ENOMEM;
		es->counts = cc;
		es->cap = cap;
	}
	es->jobs[es->n] = j;
	es->counts[es->n++] = k;
	return 0;
}

/* Seals job j chunk by chunk; rounds are committed when the buffer fills,
 * each consuming the events it wrote (j's events stay sorted meanwhile). */
static int seal_job_events(struct ev_seal *es, struct ev_job *j)
{
	evc_sort(j->recs, j->n);
	size_t at = 0, total = j->n;
	int rc = 0;
	while (rc == 0 && at < total) {
		rc = ensure_segment(es->s);
		if (rc == 0 && !es->t)
			rc = sto_txn_begin(es->s->ix, true, &es->t);
		/* Consumed rounds shift j's array: chunk from its current start. */
		size_t k = rc == 0 ? evc_chunk_len(j->recs, 0, j->n) : 0;
		if (rc == 0)
			rc = seal_event_chunk(es, j, k);
		if (rc == 0)
			rc = round_note(es, j, k);
		at += k;
		bool last = at >= total;
		if (rc == 0 && (es->buf.len >= SEAL_BUF_MAX || !last))
			rc = commit_events(es);
	}
	return rc;
}

static int collect_job(void *arg, struct ev_job *j)
{
	struct ev_seal *es = arg;
	return round_note(es, j, 0);
}

/* Seals every job's events of head h (frozen: no writer touches it). */
int sti_seal_events(struct sto *s, struct head *h)
{
	if (h->ev->events == 0)
		return 0;
	struct ev_seal es = {.s = s, .h = h};
	int rrc = sti_uid_reserve(s, h->ev->events); /* at most one chunk per event */
	if (rrc)
		return rrc;
	rdb_buf_init(&es.buf, SEAL_BUF_MAX + 2 * STO_EVCHUNK_MAX_RAW);
	rdb_buf_init(&es.payload, 2 * STO_EVCHUNK_MAX_RAW + STO_EVCHUNK_MAX_EVENTS * 64);
	rdb_buf_init(&es.bloom, 1u << 17);
	rdb_buf_init(&es.entry, 1u << 17);
	int rc = evh_each(h->ev, collect_job, &es); /* the job list, before any drop */
	size_t njobs = es.n;
	struct ev_job **jobs = malloc((njobs ? njobs : 1) * sizeof(*jobs));
	if (!jobs)
		rc = -ENOMEM;
	if (rc == 0)
		memcpy(jobs, es.jobs, njobs * sizeof(*jobs));
	es.n = 0;
	for (size_t i = 0; rc == 0 && i < njobs; i++)
		rc = seal_job_events(&es, jobs[i]);
	if (rc == 0)
		rc = commit_events(&es);
	if (es.t)
		sto_txn_abort(es.t);
	free(jobs);
	free(es.jobs);
	free(es.counts);
	rdb_buf_free(&es.buf);
	rdb_buf_free(&es.payload);
	rdb_buf_free(&es.bloom);
	rdb_buf_free(&es.entry);
	return rc;
}
