/* store_write.c - the storage engine's write path (contract: sto.h):
 * client batch ids, heads and sto_write_req / sto_write_submit. Series ids
 * come from store_series.c (the series cache, their creation and the
 * series creator thread).
 *
 * Write path: resolve series ids (cache, then LMDB) -> encode one WAL
 * record -> sto_wal_append (group commit; blocks until durable) -> apply to
 * the active head. The record (STO_WAL_REC_CBATCH, format.h) names its
 * series by id, so it is encoded after they are resolved (and again if a
 * job delete made us resolve them anew). The WAL file defines those ids:
 * the record's definitions hook (wal_defs, run on the WAL thread when the
 * group is laid out) writes a STO_WAL_REC_DEFS record right before it for
 * its series not yet defined in the WAL's current epoch, marking them in
 * series_ent.wal_def_epoch. The write rwlock is held shared across append+apply so
 * that a WAL rotation (exclusive) sees no write half done: every record in
 * WAL generation g is in head g.
 *
 * sto_write_submit is the same write without the wait: the record is
 * queued (write lock shared only until then), and the WAL thread's
 * completion applies it to the head it was prepared in and then tells the
 * caller. A pending write is counted in async_pending; whoever takes the
 * write lock exclusively (rotation, job delete, close) waits for that count
 * to reach 0 (sti_write_exclusive), so the invariant holds for both kinds.
 * A submitted write whose series are not all in the cache does not create
 * them on the submitting thread: it is queued for the series creator
 * thread (store_series.c), which creates the series of every write queued
 * meanwhile in one group (one LMDB commit) and hands each back here
 * (sti_write_created) to queue its WAL record; a refusal (max_series)
 * reaches the write's completion. Series are in LMDB before their first
 * WAL record, as for a blocking write.
 *
 * Threading: any number of writer threads, plus the creator; the locks
 * are in struct sto (store_int.h, with the lock order).
 *
 * Failure: a WAL failure fails the write (nothing applied). Writers get
 * RDB_EBUSY once the head is over head_max_bytes.
 */
#include "storage/engine/engine.h"
#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_recycle.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"
#include "common/rdb_map.h"
#include "common/rdb_time.h"
#include "storage/admin.h"
#include "storage/wal/batch_codec.h"
#include "storage/chunk/codec.h"
#include "storage/events/evstore.h"
#include "storage/chunk/segment.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- heads --------------------------------------------------------------- */

struct head *sti_head_new(uint64_t gen)
{
	if (sto_fault_hit(STO_FP_HEAD_NEW))
		return NULL;
	struct head *h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	h->gen = gen;
	h->ev = evh_new();
	if (!h->ev) {
		free(h);
		return NULL;
	}
	return h;
}

void sti_head_free(struct head *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->series.cap; i++) {
		if (!h->series.keys[i])
			continue;
		struct head_series *hs = h->series.vals[i];
		mdl_cols_free(&hs->pts);
		free(hs);
	}
	rdb_map_free(&h->series);
	evh_free(h->ev);
	free(h);
}

uint64_t sti_cols_bytes(const struct mdl_cols *c)
{
	return (uint64_t)c->cap * (8 + 8 + 4 + 8);
}

/* The capacity a series' columns in head h grow to by their second
 * growth (head_prepare allocates half of it first, so that the new head's
 * memory grows while the frozen one is sealed and freed): what its
 * columns held in the frozen head (the generation being sealed) plus an
 * eighth, when that is more than want; else want. Growing by half from
 * empty took five reallocs of four arrays per series per checkpoint at
 * 512 ranks (~64 points each), on the HTTP workers under head_lock. Only
 * for series of at most HEAD_HINT_MAX_POINTS points in the frozen head
 * (many series per checkpoint): at 64 ranks (~500 points each, columns
 * that grow a batch at a time) the hint bought no ingest and raised the
 * peak RSS by a third. The frozen head holds a series until its seal
 * round commits, long after a rank's next step arrived; a series sealed
 * earlier grows by half as before. Bounded: all hints together are at
 * most an eighth above the frozen head's points, and the capacity is
 * counted in head_bytes like any other. Caller holds head_lock (which
 * guards s->frozen and its map). */
#define HEAD_HINT_MAX_POINTS 256u

static size_t head_first_cap(const struct sto *s, const struct head *h, uint64_t id, size_t want)
{
	if (!s->frozen || s->frozen == h)
		return want;
	const struct head_series *prev = rdb_map_get(&s->frozen->series, id);
	if (!prev || prev->pts.n > HEAD_HINT_MAX_POINTS)
		return want;
	size_t cap = prev->pts.n + prev->pts.n / 8;
	return cap > want ? cap : want;
}

/* Asks for the head series of ents[0..n) (their map slots, then the
 * structs) before head_prepare reads any: at 16,384 series each is a
 * cache miss, and one after the other they were most of its time. */
static void prefetch_heads(const struct head *h, struct series_ent **ents, size_t n)
{
	for (size_t i = 0; i < n; i++)
		rdb_map_prefetch(&h->series, ents[i]->id);
	for (size_t i = 0; i < n; i++)
		__builtin_prefetch(rdb_map_get(&h->series, ents[i]->id));
}

/* Makes room in h for every point of b (series ents[i] for batch series
 * i): creates missing head series, grows their columns past the points in
 * them and those already reserved by other in-flight writes, and reserves
 * b's points. hs[i] gets series i's head series. On failure the series
 * reserved so far are released (*done says how many were) and -ENOMEM is
 * returned. Caller holds head_lock. */
static int head_prepare(struct sto *s, struct head *h, const struct mdl_batch *b,
			struct series_ent **ents, struct head_series **hs_out, size_t *done)
{
	size_t n = mdl_batch_nseries(b);
	prefetch_heads(h, ents, n);
	for (*done = 0; *done < n; (*done)++) {
		size_t i = *done;
		const struct mdl_batch_series *bs = mdl_batch_series_at(b, i);
		struct head_series *hs = rdb_map_get(&h->series, ents[i]->id);
		if (!hs) {
			hs = calloc(1, sizeof(*hs));
			if (!hs || rdb_map_put(&h->series, ents[i]->id, hs) != 0) {
				free(hs);
				return -ENOMEM;
			}
			hs->ent = ents[i];
			hs->creator_cols = sti_on_creator;
			h->bytes += HEAD_SERIES_OVERHEAD;
			atomic_fetch_add(&s->head_bytes, HEAD_SERIES_OVERHEAD);
		}
		uint64_t before = sti_cols_bytes(&hs->pts);
		/* A new series' first head columns are made on the series creator
		 * thread and grown on the HTTP workers; realloc keeps a block in
		 * its first malloc arena, so the whole first head stayed in the
		 * creator's arena, and the next head, made on the workers, could
		 * not reuse that memory as the checkpoint freed it (+40 MiB peak
		 * at 64 ranks). Their first growth off the creator moves them
		 * into the growing thread's arena; other growths realloc. */
		size_t want = hs->pts.n + hs->reserved + bs->pts.n, cap = hs->pts.cap;
		if (cap == 0) {
			/* half the frozen head's size first, then all of it:
			 * two allocations, and the new head's memory grows
			 * while the frozen one is sealed and freed */
			size_t hint = head_first_cap(s, h, ents[i]->id, want);
			hs->cap_hint = (uint32_t)hint;
			if (want < hint / 2)
				want = hint / 2;
		} else if (want > cap && want < hs->cap_hint) {
			want = hs->cap_hint;
		}
		bool move = hs->creator_cols && !sti_on_creator;
		if (move ? mdl_cols_reserve_moving(&hs->pts, want)
			 : mdl_cols_reserve(&hs->pts, want))
			return -ENOMEM;
		if (move && hs->pts.cap != cap)
			hs->creator_cols = false;
		uint64_t grown = sti_cols_bytes(&hs->pts) - before;
		h->bytes += grown;
		atomic_fetch_add(&s->head_bytes, grown);
		hs->reserved += bs->pts.n;
		hs_out[i] = hs;
	}
	return 0;
}

/* Releases the reservations of the first n series of b. */
static void head_unprepare(const struct mdl_batch *b, struct head_series **hs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		hs[i]->reserved -= mdl_batch_series_at(b, i)->pts.n;
}

/* Queues hs for a size seal once it holds chunk_max_points. */
static void queue_seal(struct sto *s, struct head_series *hs)
{
	if (hs->queued || hs->pts.n < s->opt.chunk_max_points)
		return;
	if (s->seal_queue_n == s->seal_queue_cap) {
		size_t cap = s->seal_queue_cap ? s->seal_queue_cap * 2 : 64;
		uint64_t *q = realloc(s->seal_queue, cap * sizeof(*q));
		if (!q)
			return; /* sealed at the next checkpoint instead */
		s->seal_queue = q;
		s->seal_queue_cap = cap;
	}
	s->seal_queue[s->seal_queue_n++] = hs->ent->id;
	hs->queued = true;
}

/* Copies b's points into the room head_prepare made. Cannot fail. Caller
 * holds head_lock. */
static void head_commit(struct sto *s, struct head *h, const struct mdl_batch *b,
			struct head_series **hs_of, bool queue_full)
{
	size_t n = mdl_batch_nseries(b);
	struct sti_extent_cursor cur = {0};
	/* This runs on the WAL thread, long after head_prepare touched the
	 * head series on a worker: each series' struct and the slots its
	 * point goes to are cache misses. Asked for all at once (two passes
	 * of prefetches) they overlap instead of stalling one after the
	 * other (~30 % of this function's time was the wait for hs). */
	for (size_t i = 0; i < n; i++)
		__builtin_prefetch(hs_of[i], 1);
	for (size_t i = 0; i < n; i++) {
		const struct mdl_cols *c = &hs_of[i]->pts;
		__builtin_prefetch(c->ts_ns + c->n, 1);
		__builtin_prefetch(c->step + c->n, 1);
		__builtin_prefetch(c->attempt + c->n, 1);
		__builtin_prefetch(c->value + c->n, 1);
	}
	for (size_t i = 0; i < n; i++) {
		const struct mdl_batch_series *bs = mdl_batch_series_at(b, i);
		struct head_series *hs = hs_of[i];
		size_t at = hs->pts.n, k = bs->pts.n;
		if (s->job_extents.n && k)
			sti_extent_note(s, &cur, sti_ent_job(hs->ent), &bs->pts, k);
		if (k == 1) {
			/* One point per series is the per-rank shape (one step per
			 * request): four stores, not four memcpy calls. */
			hs->pts.ts_ns[at] = bs->pts.ts_ns[0];
			hs->pts.step[at] = bs->pts.step[0];
			hs->pts.attempt[at] = bs->pts.attempt[0];
			hs->pts.value[at] = bs->pts.value[0];
		} else {
			memcpy(hs->pts.ts_ns + at, bs->pts.ts_ns, k * sizeof(int64_t));
			memcpy(hs->pts.step + at, bs->pts.step, k * sizeof(int64_t));
			memcpy(hs->pts.attempt + at, bs->pts.attempt, k * sizeof(uint32_t));
			memcpy(hs->pts.value + at, bs->pts.value, k * sizeof(uint64_t));
		}
		hs->pts.n += k;
		hs->reserved -= k;
		h->points += k;
		if (queue_full)
			queue_seal(s, hs);
	}
	if (h->first_mono_ns == 0 && h->points)
		h->first_mono_ns = rdb_now_mono_ns();
}

static void wake_flusher(struct sto *s)
{
	pthread_mutex_lock(&s->flush_lock);
	pthread_cond_signal(&s->flush_cond);
	pthread_mutex_unlock(&s->flush_lock);
}

/* What a finished write saw of its head, under head_lock, for
 * kick_checkpoint. */
struct write_kick {
	bool seal_queued; /* a seal is queued (the head filled a chunk) */
	bool points_over; /* sti_head_points_over of the head it went to */
};

/* After a write, sync or async, with the head lock released: wakes the
 * checkpoint thread when a seal is queued, or, for a write that was
 * applied (rc 0), when the WAL file is due for rotation or the head for a
 * checkpoint (sti_head_kick: its memory or its point count). */
static void kick_checkpoint(struct sto *s, const struct write_kick *k, int rc)
{
	if (k->seal_queued || (rc == 0 && (sto_wal_size(s->wal) > s->opt.wal_rotate_bytes ||
					   sti_head_kick(s, k->points_over))))
		wake_flusher(s);
}

/* ---- write --------------------------------------------------------------- */

/* ---- batch ids ---------------------------------------------------------------- */

uint64_t sti_batch_hash(const char *id, size_t len)
{
	uint64_t h = rdb_hash64(id, len, 0xba7c4);
	return h ? h : 1;
}

/* Caller holds batch_lock. */
struct batch_ent *sti_batch_find(struct sto *s, const char *id, size_t len, uint64_t h)
{
	for (struct batch_ent *e = rdb_map_get(&s->batch_ids, h); e; e = e->next)
		if (e->len == len && memcmp(e->id, id, len) == 0)
			return e;
	return NULL;
}

/* Caller holds batch_lock. */
static void batch_unlink(struct sto *s, struct batch_ent *e)
{
	struct batch_ent *first = rdb_map_get(&s->batch_ids, e->hash);
	if (first == e) {
		if (e->next)
			rdb_map_put(&s->batch_ids, e->hash, e->next);
		else
			rdb_map_del(&s->batch_ids, e->hash);
	} else {
		for (struct batch_ent *p = first; p; p = p->next)
			if (p->next == e) {
				p->next = e->next;
				break;
			}
	}
	free(e);
}

/* Caller holds batch_lock. Adds id (done = false) for generation gen. */
int sti_batch_add(struct sto *s, const char *id, size_t len, uint64_t h, bool done, uint64_t gen,
		  struct batch_ent **out)
{
	struct batch_ent *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	memcpy(e->id, id, len);
	e->len = len;
	e->hash = h;
	e->done = done;
	e->gen = gen;
	e->seen_ns = (uint64_t)rdb_now_ns();
	e->next = rdb_map_get(&s->batch_ids, h);
	if (rdb_map_put(&s->batch_ids, h, e) != 0) {
		free(e);
		return -ENOMEM;
	}
	*out = e;
	return 0;
}

/* Reserves a batch id for a write. 0 (reserved: *ent), 1 (a duplicate of
 * an acknowledged batch), RDB_EBUSY (the same id is being written now). */
static int batch_reserve(struct sto *s, const char *id, size_t len, struct batch_ent **ent)
{
	uint64_t h = sti_batch_hash(id, len), seen;
	int rc;
	pthread_mutex_lock(&s->batch_lock);
	struct batch_ent *e = sti_batch_find(s, id, len, h);
	if (e) {
		rc = e->done ? 1 : RDB_EBUSY;
		goto out;
	}
	struct sto_txn *t;
	rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		goto out;
	rc = sto_batchid_get(t, id, len, &seen);
	sto_txn_abort(t);
	if (rc == 0) {
		rc = 1;
		goto out;
	}
	if (rc == RDB_ENOTFOUND)
		rc = sti_batch_add(s, id, len, h, false, 0, ent);
out:
	pthread_mutex_unlock(&s->batch_lock);
	return rc;
}

static void batch_finish(struct sto *s, struct batch_ent *e, bool ok, uint64_t gen)
{
	pthread_mutex_lock(&s->batch_lock);
	if (ok) {
		e->done = true;
		e->gen = gen;
	} else {
		batch_unlink(s, e);
	}
	pthread_mutex_unlock(&s->batch_lock);
}

/* Moves the ids of generations <= gen into the index (inside the
 * checkpoint's transaction) and prunes ids older than the TTL there. */
int sti_batch_persist(struct sto *s, struct sto_txn *t, uint64_t gen)
{
	int rc = 0;
	pthread_mutex_lock(&s->batch_lock);
	for (size_t i = 0; rc == 0 && i < s->batch_ids.cap; i++) {
		if (!s->batch_ids.keys[i])
			continue;
		for (struct batch_ent *e = s->batch_ids.vals[i]; e && rc == 0; e = e->next)
			if (e->done && e->gen <= gen)
				rc = sto_batchid_put(t, e->id, e->len, e->seen_ns);
	}
	pthread_mutex_unlock(&s->batch_lock);
	if (rc == 0 && s->opt.batch_id_ttl_s) {
		uint64_t now = (uint64_t)rdb_now_ns(),
			 ttl = (uint64_t)s->opt.batch_id_ttl_s * 1000000000ull;
		rc = sto_batchid_prune(t, now > ttl ? now - ttl : 0, 100000, NULL);
	}
	return rc;
}

/* After the checkpoint committed: forget the ids now in the index. */
void sti_batch_forget(struct sto *s, uint64_t gen)
{
	pthread_mutex_lock(&s->batch_lock);
	size_t n = 0;
	struct batch_ent **drop = malloc((s->batch_ids.n * 4 + 1) * sizeof(*drop));
	for (size_t i = 0; drop && i < s->batch_ids.cap; i++) {
		if (!s->batch_ids.keys[i])
			continue;
		for (struct batch_ent *e = s->batch_ids.vals[i]; e; e = e->next) {
			if (!e->done || e->gen > gen)
				continue;
			if (n == s->batch_ids.n * 4 + 1)
				break; /* the rest is forgotten at the next checkpoint */
			drop[n++] = e;
		}
	}
	for (size_t i = 0; i < n; i++)
		batch_unlink(s, drop[i]);
	free(drop);
	pthread_mutex_unlock(&s->batch_lock);
}

void sti_batch_free_all(struct sto *s)
{
	for (size_t i = 0; i < s->batch_ids.cap; i++) {
		struct batch_ent *e = s->batch_ids.keys[i] ? s->batch_ids.vals[i] : NULL;
		while (e) {
			struct batch_ent *next = e->next;
			free(e);
			e = next;
		}
	}
	rdb_map_free(&s->batch_ids);
}

/* ---- write ------------------------------------------------------------------ */

/* RDB_ELIMIT if the definitions of all n series of b could not fit one
 * WAL record (only a request of ~650k series or more comes near): the
 * WAL would fail the whole group it lands in, not just this write. */
static int check_defs_size(const struct mdl_batch *b, size_t n)
{
	if ((uint64_t)n * STO_WAL_DEF_MAX_BYTES + 4 <= STO_WAL_MAX_PAYLOAD)
		return 0;
	uint64_t bytes = 4;
	for (size_t i = 0; i < n; i++) {
		const struct mdl_batch_series *bs = mdl_batch_series_at(b, i);
		bytes += STO_WAL_DEF_FIXED_BYTES + bs->job_len + bs->metric_len;
	}
	return bytes <= STO_WAL_MAX_PAYLOAD ? 0 : RDB_ELIMIT;
}

/* Encodes a request as one STO_WAL_REC_CBATCH record (into rec, emptied
 * first), its series i named by ents[i]'s id. RDB_ELIMIT, before anything
 * is encoded, when the definitions its series may need could not fit one
 * WAL record. */
static int encode_request(const struct sto_write_req *req, struct series_ent **ents,
			  struct rdb_buf *rec)
{
	bool has_ev = req->events && mdl_events_count(req->events) > 0;
	size_t n = req->points ? mdl_batch_nseries(req->points) : 0;
	uint64_t sids_stack[64], *sids = sids_stack;
	rec->len = 0;
	int rc = check_defs_size(req->points, n);
	if (rc)
		return rc;
	if (n > 64 && !(sids = malloc(n * sizeof(*sids))))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		sids[i] = ents[i]->id;
	uint8_t il = (uint8_t)(req->batch_id ? req->batch_id_len : 0);
	/* Room for the usual record at once (a series of one point takes
	 * ~10-20 bytes): one allocation, not a 256-byte one and then the
	 * codec's growth. A hint only: more grows as before. */
	size_t pts = n ? mdl_batch_points(req->points) : 0;
	size_t hint = 16 + il + n * 24 + pts * 24;
	rc = rdb_buf_reserve(rec, hint < rec->max ? hint : rec->max);
	if (rc == 0)
		rc = rdb_buf_putc(rec, (char)il);
	if (rc == 0)
		rc = rdb_buf_append(rec, req->batch_id, il);
	for (int part = 0; part < 2 && rc == 0; part++) {
		size_t at = rec->len;
		rc = rdb_buf_append(rec, "\0\0\0\0", 4);
		if (rc == 0 && part == 0 && n)
			rc = sto_batch_encode_compact(req->points, sids, rec);
		if (rc == 0 && part == 1 && has_ev)
			rc = sto_events_encode(req->events, rec);
		if (rc == 0)
			rdb_put_le32(rec->data + at, (uint32_t)(rec->len - at - 4));
	}
	if (sids != sids_stack)
		free(sids);
	return rc;
}

/* What a record's definitions hook needs: its series, in batch order. */
struct defs_src {
	struct series_ent **ents;
	size_t n;
};

/* The definitions hook (wal.h) of every write record: defines each of its
 * series not defined in this epoch of the WAL file. WAL thread. */
static int wal_defs(void *arg, uint64_t epoch, struct rdb_buf *out)
{
	const struct defs_src *d = arg;
	size_t start = out->len;
	for (size_t i = 0; i < d->n; i++) {
		struct series_ent *e = d->ents[i];
		if (e->wal_def_epoch == epoch)
			continue;
		struct sto_wal_key k = {.job = sti_ent_job(e),
					.metric = sti_ent_metric(e),
					.rank = e->rank,
					.job_len = e->job_len,
					.metric_len = e->metric_len};
		int rc = sto_defs_add(out, start, e->id, &k);
		if (rc)
			return rc; /* the WAL fails the group and changes the epoch */
		e->wal_def_epoch = epoch;
	}
	return 0;
}

/* Resolves the request's series ids anew after a job delete (del_epoch
 * moved) and re-encodes its record with them. No lock held. */
static int resolve_again(struct sto *s, const struct sto_write_req *req, struct series_ent **ents,
			 struct rdb_buf *rec)
{
	int rc = sti_resolve_series(s, req->points, ents);
	return rc ? rc : encode_request(req, ents, rec);
}

size_t sti_prep_slots(const struct mdl_batch *pts, const struct mdl_events *ev)
{
	size_t n = pts ? mdl_batch_nseries(pts) : 0;
	size_t nev = ev ? mdl_events_count(ev) : 0;
	return n + 2 * nev + 1;
}

int sti_prepare_request(struct sto *s, struct head *h, const struct mdl_batch *pts,
			struct series_ent **ents, const struct mdl_events *ev, struct sti_prep *pp)
{
	return sti_prepare_request_in(s, h, pts, ents, ev, pp, NULL, 0);
}

int sti_prepare_request_in(struct sto *s, struct head *h, const struct mdl_batch *pts,
			   struct series_ent **ents, const struct mdl_events *ev,
			   struct sti_prep *pp, void **own, size_t own_n)
{
	memset(pp, 0, sizeof(*pp));
	int frc = sto_fault_hit(STO_FP_PREPARE);
	if (frc)
		return frc;
	size_t n = pts ? mdl_batch_nseries(pts) : 0;
	size_t nev = ev ? mdl_events_count(ev) : 0;
	/* One block for the three arrays (hs, then jobs, then recs): it is
	 * allocated on the writer's thread and freed on the WAL thread, and
	 * each cross-thread free takes the allocating arena's lock. */
	_Static_assert(sizeof(*pp->hs) == sizeof(void *) && sizeof(*pp->jobs) == sizeof(void *) &&
			   sizeof(*pp->recs) == sizeof(void *),
		       "sti_prep arrays share one block of pointers");
	size_t slots = n + 2 * nev + 1;
	void **blk = own;
	if (own && own_n >= slots) {
		memset(own, 0, slots * sizeof(void *));
		pp->borrowed = true;
	} else if (!(blk = calloc(slots, sizeof(void *)))) {
		return -ENOMEM;
	}
	pp->hs = (struct head_series **)blk;
	pp->jobs = (struct ev_job **)(blk + n);
	pp->recs = (struct ev_rec **)(blk + n + nev);
	size_t done = 0;
	int rc = n ? head_prepare(s, h, pts, ents, pp->hs, &done) : 0;
	if (rc == 0 && nev) {
		uint64_t added = 0;
		rc = evh_prepare(h->ev, ev, pp->jobs, pp->recs, &added);
		atomic_fetch_add(&s->head_bytes, added);
		if (rc == 0 && h->first_mono_ns == 0)
			h->first_mono_ns = rdb_now_mono_ns();
	}
	if (rc) {
		head_unprepare(pts, pp->hs, done);
		sti_prep_free(pp);
		return rc;
	}
	pp->points = pts;
	pp->events = ev;
	pp->nseries = n;
	pp->nev = nev;
	return 0;
}

void sti_commit_request(struct sto *s, struct head *h, struct sti_prep *pp, bool queue_full)
{
	if (pp->nseries)
		head_commit(s, h, pp->points, pp->hs, queue_full);
	if (pp->nev)
		evh_commit(h->ev, pp->nev, pp->jobs, pp->recs);
	sti_prep_free(pp);
}

void sti_unprepare_request(struct sto *s, struct head *h, struct sti_prep *pp)
{
	head_unprepare(pp->points, pp->hs, pp->nseries);
	if (pp->nev) {
		uint64_t released = 0;
		evh_unprepare(h->ev, pp->nev, pp->jobs, pp->recs, &released);
		atomic_fetch_sub(&s->head_bytes, released);
	}
	sti_prep_free(pp);
}

void sti_prep_free(struct sti_prep *pp)
{
	if (!pp->borrowed)
		free(pp->hs); /* jobs and recs live in the same block */
	memset(pp, 0, sizeof(*pp));
}

int sti_apply_request(struct sto *s, struct head *h, const struct mdl_batch *pts,
		      struct series_ent **ents, const struct mdl_events *ev, bool queue_full)
{
	struct sti_prep pp;
	int rc = sti_prepare_request(s, h, pts, ents, ev, &pp);
	if (rc == 0)
		sti_commit_request(s, h, &pp, queue_full);
	return rc;
}

static bool over_memory(struct sto *s)
{
	if (atomic_load(&s->head_bytes) <= s->opt.head_max_bytes)
		return false;
	atomic_fetch_add(&s->st_write_busy, 1);
	pthread_mutex_lock(&s->flush_lock);
	s->ckpt_wanted = true;
	pthread_cond_signal(&s->flush_cond);
	pthread_mutex_unlock(&s->flush_lock);
	return true;
}

/* The locked part of a write: makes room in the active head, appends the
 * record to the WAL (group commit), then applies it, all under the write
 * lock held shared so the active head cannot rotate in between. Room is
 * made before the append: once the record is durable, applying it cannot
 * fail, so an answer is never "failed" for a write that restart would
 * replay. On success *bent is finished (and set to NULL) inside the lock,
 * so a rotation sees the batch id done, and *kick says what the head
 * needs (kick_checkpoint). */
static int append_and_apply(struct sto *s, const struct sto_write_req *req,
			    struct series_ent **ents, struct rdb_buf *rec, struct batch_ent **bent,
			    struct write_kick *kick)
{
	size_t n = req->points ? mdl_batch_nseries(req->points) : 0;
	uint64_t epoch = atomic_load(&s->del_epoch);
	int rc = 0;
	pthread_rwlock_rdlock(&s->write_lock);
	/* A job deleted since we resolved our series ids: resolve again so that
	 * no point goes to a deleted series id. */
	while (rc == 0 && n && epoch != atomic_load(&s->del_epoch)) {
		pthread_rwlock_unlock(&s->write_lock);
		epoch = atomic_load(&s->del_epoch);
		rc = resolve_again(s, req, ents, rec);
		pthread_rwlock_rdlock(&s->write_lock);
	}
	struct head *h = NULL;
	struct sti_prep pp;
	if (rc == 0) {
		pthread_mutex_lock(&s->head_lock);
		h = s->active;
		rc = sti_prepare_request(s, h, req->points, ents, req->events, &pp);
		pthread_mutex_unlock(&s->head_lock);
	}
	if (rc == 0) {
		struct defs_src d = {.ents = ents, .n = n};
		struct sto_wal_rec wr = {.type = STO_WAL_REC_CBATCH,
					 .payload = rec->data,
					 .len = rec->len,
					 .defs_fn = n ? wal_defs : NULL,
					 .defs_arg = &d};
		rc = sto_wal_append_rec(s->wal, &wr);
		pthread_mutex_lock(&s->head_lock);
		uint64_t gen = h->gen;
		if (rc == 0) {
			sti_commit_request(s, h, &pp, true);
			kick->seal_queued = s->seal_queue_n > 0;
			kick->points_over = sti_head_points_over(s, h);
		} else {
			sti_unprepare_request(s, h, &pp);
		}
		pthread_mutex_unlock(&s->head_lock);
		if (rc == 0 && *bent) {
			batch_finish(s, *bent, true, gen);
			*bent = NULL;
		}
	}
	pthread_rwlock_unlock(&s->write_lock);
	return rc;
}

/* Checks shared by both write entry points. 0: go on (*bent reserved when
 * the request has a batch id); 1: nothing to write (res->duplicate says
 * whether it was a duplicate); else the error. */
static int write_begin(struct sto *s, const struct sto_write_req *req, struct sto_write_result *res,
		       struct batch_ent **bent)
{
	res->duplicate = false;
	*bent = NULL;
	size_t n = req->points ? mdl_batch_nseries(req->points) : 0;
	size_t nev = req->events ? mdl_events_count(req->events) : 0;
	if (req->batch_id && (req->batch_id_len == 0 || req->batch_id_len > STO_BATCH_ID_MAX))
		return RDB_EINVAL;
	if (n == 0 && nev == 0 && !req->batch_id)
		return 1;
	if (atomic_load(&s->closing))
		return -ESHUTDOWN;
	if (over_memory(s))
		return RDB_EBUSY;
	if (req->batch_id) {
		int r = batch_reserve(s, req->batch_id, req->batch_id_len, bent);
		if (r == 1) {
			res->duplicate = true;
			atomic_fetch_add(&s->st_batch_dups, 1);
		}
		return r;
	}
	return 0;
}

static void count_written(struct sto *s, const struct sto_write_req *req)
{
	atomic_fetch_add(&s->st_points_written, req->points ? mdl_batch_points(req->points) : 0);
	atomic_fetch_add(&s->st_events_written, req->events ? mdl_events_count(req->events) : 0);
	atomic_fetch_add(&s->st_batches_written, 1);
}

int sto_write_req(struct sto *s, const struct sto_write_req *req, struct sto_write_result *res)
{
	struct batch_ent *bent = NULL;
	int rc = write_begin(s, req, res, &bent);
	if (rc)
		return rc == 1 ? 0 : rc;
	size_t n = req->points ? mdl_batch_nseries(req->points) : 0;
	struct rdb_buf rec;
	rdb_buf_init(&rec, STO_WAL_MAX_PAYLOAD);
	struct series_ent **ents = malloc((n ? n : 1) * sizeof(*ents));
	rc = ents ? 0 : -ENOMEM;
	if (rc == 0 && n)
		rc = sti_resolve_series(s, req->points, ents);
	if (rc == 0)
		rc = encode_request(req, ents, &rec);
	struct write_kick kick = {0};
	if (rc == 0)
		rc = append_and_apply(s, req, ents, &rec, &bent, &kick);
	if (bent)
		batch_finish(s, bent, false, 0);
	if (rc == 0)
		count_written(s, req);
	kick_checkpoint(s, &kick, rc);
	free(ents);
	rdb_buf_free(&rec);
	return rc;
}

/* ---- asynchronous write ---------------------------------------------------------- */

/* One pending sto_write_submit, from its WAL append to its completion. */
struct async_write {
	char pool_hdr[RDB_RECYCLE_HDR]; /* the pool's while kept (rdb_recycle.h) */
	struct sto *s;
	struct sto_wal_async wa; /* the WAL's part; must not move */
	struct sto_write_req req;
	struct rdb_buf rec;
	struct defs_src defs; /* the record's definitions hook's argument */
	struct series_ent **ents;
	struct head *h; /* prepared in; stays active while we are pending */
	struct sti_prep pp;
	struct batch_ent *bent;
	sto_write_done_fn fn;
	void *arg;
	struct sti_create_req cr; /* while queued on the series creator */
	size_t ents_cap, blk_cap;
	void **blk; /* blk_cap pointers for pp's arrays, after ents_mem */
	/* set by sti_wal_group_done: applied (or released) with its group */
	bool applied;
	uint64_t applied_gen;
	struct write_kick applied_kick;
	/* ents points here: one allocation with the struct */
	struct series_ent *ents_mem[];
};

/* Finished writes are reused, not freed: the WAL thread finishes them and
 * the HTTP workers submit them, and a free on the WAL thread of what a
 * worker allocated takes the worker's malloc arena lock (the per-thread
 * caches of glibc do not help across threads). An object keeps its record
 * buffer (up to AW_KEEP_REC bytes) and its arrays (AW_MIN_CAP series, or
 * the most a write it carried had, up to AW_KEEP_CAP). Bound: AW_SHARED
 * objects waiting on the shared stack plus AW_PER_THREAD (and
 * AW_THREAD_BYTES) per submitting thread, each at most ~AW_KEEP_REC +
 * 16 * AW_KEEP_CAP bytes: with 1 MiB per thread and 256 shared objects of
 * <= 24 KiB, at most ~6 MiB plus 1 MiB per thread. */
#define AW_MIN_CAP	64
#define AW_KEEP_CAP	512
#define AW_KEEP_REC	(16u * 1024)
#define AW_SHARED	256
#define AW_PER_THREAD	256
#define AW_THREAD_BYTES (1u << 20)

static void aw_destroy(void *p)
{
	struct async_write *a = p;
	rdb_buf_free(&a->rec);
	free(a);
}

static struct rdb_recycle aw_pool =
    RDB_RECYCLE_INIT(AW_SHARED, AW_PER_THREAD, AW_THREAD_BYTES, aw_destroy);

static size_t aw_bytes(const struct async_write *a)
{
	return sizeof(*a) + (a->ents_cap + a->blk_cap) * sizeof(void *) + a->rec.cap;
}

/* A write for n series and slots prep pointers: reused when one that
 * fits is kept, else new. Its record buffer is empty (its memory kept). */
static struct async_write *aw_get(size_t n, size_t slots)
{
	struct async_write *a = rdb_recycle_get(&aw_pool, NULL);
	if (a && (a->ents_cap < n || a->blk_cap < slots)) {
		aw_destroy(a);
		a = NULL;
	}
	if (a) {
		struct rdb_buf rec = a->rec;
		size_t ents_cap = a->ents_cap, blk_cap = a->blk_cap;
		memset(a, 0, sizeof(*a));
		a->rec = rec;
		a->rec.len = 0;
		a->ents_cap = ents_cap;
		a->blk_cap = blk_cap;
	} else {
		size_t ents_cap = n < AW_MIN_CAP ? AW_MIN_CAP : n;
		size_t blk_cap = slots < 2 * AW_MIN_CAP + 1 ? 2 * AW_MIN_CAP + 1 : slots;
		a = calloc(1, sizeof(*a) + (ents_cap + blk_cap) * sizeof(a->ents_mem[0]));
		if (!a)
			return NULL;
		rdb_buf_init(&a->rec, STO_WAL_MAX_PAYLOAD);
		a->ents_cap = ents_cap;
		a->blk_cap = blk_cap;
	}
	a->ents = a->ents_mem;
	a->blk = (void **)(a->ents_mem + a->ents_cap);
	return a;
}

/* Hands a finished write back to the pool (any thread), or frees it. */
static void async_free(struct async_write *a)
{
	if (a->rec.cap > AW_KEEP_REC)
		rdb_buf_free(&a->rec);
	if (a->ents_cap > AW_KEEP_CAP || a->blk_cap > 2 * AW_KEEP_CAP + 1 ||
	    !rdb_recycle_put(&aw_pool, a, aw_bytes(a)))
		aw_destroy(a);
}

/* The head part of async_finish: applies (rc 0) or releases the prepared
 * write. Caller holds head_lock (sti_wal_group_done takes it for each
 * slice of a group, async_finish for a write no group hook applied). */
static void async_apply(struct async_write *a, int rc)
{
	struct sto *s = a->s;
	a->applied = true;
	a->applied_gen = a->h->gen;
	a->applied_kick = (struct write_kick){0};
	if (rc == 0) {
		sti_commit_request(s, a->h, &a->pp, true);
		a->applied_kick.seal_queued = s->seal_queue_n > 0;
		a->applied_kick.points_over = sti_head_points_over(s, a->h);
	} else {
		sti_unprepare_request(s, a->h, &a->pp);
	}
}

static void async_done(void *arg, int rc);

/* Test hook (sto_test_set_apply_hook): called before each slice of a
 * group, head_lock not held. */
static void (*_Atomic apply_hook)(void *arg, struct sto *s, size_t slice);
static void *_Atomic apply_hook_arg;

void sto_test_set_apply_hook(void (*fn)(void *arg, struct sto *s, size_t slice), void *arg)
{
	atomic_store(&apply_hook_arg, arg);
	atomic_store(&apply_hook, fn);
}

/* A group holds up to queue_max_records (4096) writes; applying them under
 * one head_lock hold stalled every query for the whole group. They are
 * applied in slices of APPLY_SLICE writes, head_lock dropped between
 * slices, so a reader waits for at most one slice. Visibility is unchanged:
 * every write of the group is applied (in group order) before the WAL
 * thread calls the first completion, so a write is still visible before its
 * ack; a reader between slices sees a prefix of the group, as it could see
 * one group and not the next. The writes stay pending (async_pending) until
 * their completions, so no rotation or job delete comes between slices:
 * each write's head is still the active one. */
#define APPLY_SLICE 64u

void sti_wal_group_done(void *arg, struct sto_wal_async *done)
{
	struct sto *s = arg;
	struct sto_wal_async *r = done;
	for (size_t slice = 0; r; slice++) {
		void (*hook)(void *, struct sto *, size_t) = atomic_load(&apply_hook);
		if (hook)
			hook(atomic_load(&apply_hook_arg), s, slice);
		pthread_mutex_lock(&s->head_lock);
		for (size_t n = 0; r && n < APPLY_SLICE; r = r->next) {
			if (r->fn != async_done)
				continue;
			async_apply(r->arg, r->result);
			n++;
		}
		pthread_mutex_unlock(&s->head_lock);
	}
}

/* Applies (rc 0) or releases a prepared write unless the group hook did,
 * stops counting it pending, frees it and, if tell, calls its completion.
 * Runs while async_pending counts it, so the head it prepared in is still
 * the active one. No lock held. */
static void async_finish(struct async_write *a, int rc, bool tell)
{
	struct sto *s = a->s;
	if (!a->applied) {
		pthread_mutex_lock(&s->head_lock);
		async_apply(a, rc);
		pthread_mutex_unlock(&s->head_lock);
	}
	uint64_t gen = a->applied_gen;
	struct write_kick kick = a->applied_kick;
	if (a->bent)
		batch_finish(s, a->bent, rc == 0, gen);
	if (rc == 0)
		count_written(s, &a->req);
	if (atomic_fetch_sub(&s->async_pending, 1) == 1) {
		pthread_mutex_lock(&s->async_mu);
		pthread_cond_broadcast(&s->async_cv);
		pthread_mutex_unlock(&s->async_mu);
	}
	kick_checkpoint(s, &kick, rc);
	sto_write_done_fn fn = a->fn;
	void *fn_arg = a->arg;
	async_free(a);
	if (tell)
		fn(fn_arg, rc);
}

/* The WAL's completion of our record (WAL thread). */
static void async_done(void *arg, int rc)
{
	async_finish(arg, rc, true);
}

void sti_write_exclusive(struct sto *s)
{
	pthread_rwlock_wrlock(&s->write_lock);
	pthread_mutex_lock(&s->async_mu);
	while (atomic_load(&s->async_pending))
		pthread_cond_wait(&s->async_cv, &s->async_mu);
	pthread_mutex_unlock(&s->async_mu);
}

/* The locked part of an asynchronous write: append_and_apply up to the
 * append, which is queued instead of awaited. write_lock is held shared
 * only until the record is queued; a rotation then waits for
 * async_pending. STO_PENDING, or an error with a released (not yet
 * pending) or freed a: *freed says which. */
static int async_append(struct async_write *a, bool *freed)
{
	struct sto *s = a->s;
	const struct sto_write_req *req = &a->req;
	size_t n = req->points ? mdl_batch_nseries(req->points) : 0;
	uint64_t epoch = atomic_load(&s->del_epoch);
	int rc = 0;
	*freed = false;
	pthread_rwlock_rdlock(&s->write_lock);
	/* A job deleted since we resolved our series ids: resolve again. */
	while (rc == 0 && n && epoch != atomic_load(&s->del_epoch)) {
		pthread_rwlock_unlock(&s->write_lock);
		epoch = atomic_load(&s->del_epoch);
		rc = resolve_again(s, req, a->ents, &a->rec);
		pthread_rwlock_rdlock(&s->write_lock);
	}
	if (rc == 0) {
		pthread_mutex_lock(&s->head_lock);
		a->h = s->active;
		rc = sti_prepare_request_in(s, a->h, req->points, a->ents, req->events, &a->pp,
					    a->blk, a->blk_cap);
		pthread_mutex_unlock(&s->head_lock);
	}
	if (rc) {
		pthread_rwlock_unlock(&s->write_lock);
		return rc;
	}
	atomic_fetch_add(&s->async_pending, 1);
	a->defs = (struct defs_src){.ents = a->ents, .n = n};
	struct sto_wal_rec wr = {.type = STO_WAL_REC_CBATCH,
				 .payload = a->rec.data,
				 .len = a->rec.len,
				 .defs_fn = n ? wal_defs : NULL,
				 .defs_arg = &a->defs};
	rc = sto_wal_append_rec_async(s->wal, &wr, &a->wa, async_done, a);
	/* From here on a may be completed and freed by the WAL thread. */
	pthread_rwlock_unlock(&s->write_lock);
	if (rc) {
		*freed = true;
		async_finish(a, rc, false); /* not queued: the caller gets rc */
		return rc;
	}
	return STO_PENDING;
}

/* A write whose series are resolved goes on to the WAL. STO_PENDING, or
 * the error with a freed (fn not called; the batch id released). */
static int submit_resolved(struct async_write *a)
{
	bool freed = false;
	int rc = encode_request(&a->req, a->ents, &a->rec);
	if (rc == 0)
		rc = async_append(a, &freed);
	if (rc == STO_PENDING)
		return rc;
	/* Not queued: nothing of it is anywhere (async_finish released the
	 * batch id when it freed a). */
	if (!freed) {
		if (a->bent)
			batch_finish(a->s, a->bent, false, 0);
		async_free(a);
	}
	return rc;
}

void sti_write_created(struct sti_create_req *r, int rc)
{
	struct async_write *a =
	    (struct async_write *)(void *)((char *)r - offsetof(struct async_write, cr));
	struct sto *s = a->s;
	sto_write_done_fn fn = a->fn;
	void *arg = a->arg;
	if (rc == 0) {
		rc = submit_resolved(a);
	} else {
		if (a->bent)
			batch_finish(s, a->bent, false, 0);
		async_free(a);
	}
	if (rc != STO_PENDING)
		fn(arg, rc);
}

int sto_write_submit(struct sto *s, const struct sto_write_req *req, struct sto_write_result *res,
		     sto_write_done_fn fn, void *arg)
{
	struct batch_ent *bent = NULL;
	int rc = write_begin(s, req, res, &bent);
	if (rc)
		return rc == 1 ? 0 : rc;
	size_t n = req->points ? mdl_batch_nseries(req->points) : 0;
	struct async_write *a = aw_get(n, sti_prep_slots(req->points, req->events));
	if (a) {
		a->s = s;
		a->req = *req;
		a->fn = fn;
		a->arg = arg;
		a->bent = bent;
	}
	rc = a ? 0 : -ENOMEM;
	if (rc == 0 && n && sti_resolve_known(s, req->points, a->ents) > 0) {
		/* New series: created by the creator thread, with every other
		 * write waiting for some, while this thread goes on. */
		a->cr = (struct sti_create_req){.b = a->req.points, .ents = a->ents};
		if (sti_creator_enqueue(s, &a->cr))
			return STO_PENDING;
		rc = sti_resolve_series(s, req->points, a->ents);
	}
	if (rc == 0)
		return submit_resolved(a);
	if (bent)
		batch_finish(s, bent, false, 0);
	if (a)
		async_free(a);
	return rc;
}

int sto_write(struct sto *s, const struct mdl_batch *b)
{
	struct sto_write_req req = {.points = b};
	struct sto_write_result res;
	return sto_write_req(s, &req, &res);
}
