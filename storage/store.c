/* store.c - the storage engine (see sto.h for the contract).
 *
 * Write path: resolve series ids (cache, then LMDB) -> encode one WAL
 * record -> sto_wal_append (group commit; blocks until durable) -> apply to
 * the active head. The write rwlock is held shared across append+apply so
 * that a WAL rotation (exclusive) sees no write half done: every record in
 * WAL generation g is in head g.
 *
 * Heads: `active` takes writes; at a checkpoint it becomes `frozen`, a new
 * active head starts with the next WAL generation, and the flusher seals the
 * frozen head into chunks, fsyncs the segment, records ckpt_gen = g in LMDB
 * and deletes wal-g. A series whose active-head column reaches
 * chunk_max_points is sealed early (size seal).
 *
 * Recovery invariant: every chunk written by a generation newer than
 * ckpt_gen has a `pending` index entry. At open, those chunks are dropped
 * from the index and the WAL generations newer than ckpt_gen are replayed:
 * each acknowledged point ends up in exactly one chunk, never two.
 *
 * Read consistency: moving points from head to chunk (index commit + head
 * removal) happens under the exclusive view lock; a reader takes the view
 * lock shared while it opens its LMDB snapshot and copies head points, so
 * it sees every point exactly once.
 *
 * Lock order: write_lock -> head_lock; LMDB write txn -> view_lock ->
 * head_lock; view_lock -> (LMDB read txn) -> head_lock. series_lock is a
 * leaf (never held while taking another).
 *
 * Failure: a WAL failure fails the write (nothing applied). A seal failure
 * (segment I/O, index) is logged; the points stay in the head and the WAL,
 * and the flusher retries. Writers get RDB_EBUSY once the head is over
 * head_max_bytes.
 */
#include "storage/sto.h"
#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"
#include "common/rdb_map.h"
#include "common/rdb_time.h"
#include "storage/admin.h"
#include "storage/codec.h"
#include "storage/evstore.h"
#include "storage/segment.h"

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

#define SEAL_BUF_MAX (8u * 1024 * 1024) /* segment bytes written per seal round */
#define HEAD_SERIES_OVERHEAD 96u
#define FORMAT_FILE_TEXT "rankdb data directory\nformat 1\n"

/* A known series (cache entry): never freed while the store is open. */
struct series_ent {
	struct series_ent *next; /* same-hash chain */
	uint64_t hash;
	uint64_t id;
	struct sto_series_key key;
};

struct head_series {
	struct series_ent *ent;
	struct sto_cols pts; /* append-only until sealed; unsorted */
	bool queued;         /* in the size-seal queue */
};

struct head {
	uint64_t gen;
	struct rdb_map series; /* series id -> struct head_series * */
	uint64_t points;
	uint64_t bytes;
	int64_t first_mono_ns; /* when the first point arrived; 0 if empty */
	struct ev_head *ev;    /* logs and spans of this generation */
};

/* A client batch id seen in a generation not yet checkpointed (then it
 * moves to LMDB) or in flight right now. */
struct batch_ent {
	struct batch_ent *next; /* same-hash chain */
	uint64_t hash;
	uint64_t gen;
	bool done; /* false: a request with this id is being written */
	uint64_t seen_ns;
	size_t len;
	char id[STO_BATCH_ID_MAX];
};

struct sto {
	struct sto_options opt;
	char dir[PATH_MAX];
	char wal_dir[PATH_MAX + 8];
	char seg_dir[PATH_MAX + 8];
	int lock_fd;
	struct sto_index *ix;
	struct sto_wal *wal;
	struct sto_seg_readers *readers;

	pthread_rwlock_t write_lock; /* shared: a write; exclusive: rotation */
	pthread_rwlock_t view_lock;  /* shared: a read snapshot; exclusive: head -> chunk */
	pthread_mutex_t head_lock;   /* heads, their series, the seal queue */
	struct head *active, *frozen;
	uint64_t *seal_queue; /* series ids of active-head series that are full */
	size_t seal_queue_n, seal_queue_cap;
	_Atomic uint64_t head_bytes;

	pthread_mutex_t batch_lock; /* batch_ids */
	struct rdb_map batch_ids;   /* id hash -> struct batch_ent chain */

	pthread_mutex_t series_lock; /* the series cache */
	struct rdb_map series_by_hash; /* key hash -> series_ent chain */
	struct rdb_map series_by_id;   /* id -> series_ent */
	struct rdb_map job_counts;     /* job hash -> struct job_count chain (max_series_per_job) */
	uint64_t nseries;              /* series ever created */

	/* flusher thread state (owned by it, or by open/close when it is not running) */
	pthread_t flusher;
	bool flusher_running;
	pthread_mutex_t flush_lock;
	pthread_cond_t flush_cond; /* wakes the flusher */
	pthread_cond_t ckpt_cond;  /* checkpoint finished */
	bool stop, ckpt_wanted;
	uint64_t ckpt_started, ckpt_done;
	int ckpt_last_rc;
	struct sto_ring *ring;
	struct sto_seg_writer *seg;
	uint64_t next_uid;
	uint64_t ckpt_gen;

	/* data lifecycle (the last sections of this file) */
	pthread_rwlock_t seg_lock;     /* shared: a segment read; exclusive: swap readers */
	pthread_mutex_t compact_lock;  /* held by compaction; a backup pauses it */
	_Atomic uint64_t del_epoch;    /* bumped when a job's series are deleted */
	struct series_ent *dead_ents;  /* deleted series' cache entries, freed at close */
	struct tomb *tombs;            /* job tombstones, for WAL replay */
	size_t ntombs;
	struct admin_op *ops;          /* flusher work queued by admin calls (flush_lock) */
	struct sto_lifecycle life;
	int64_t last_retention_mono_ns;

	_Atomic bool closing;
	_Atomic uint64_t st_points_written, st_batches_written, st_write_busy;
	_Atomic uint64_t st_chunks, st_points_sealed, st_chunk_bytes, st_checkpoints;
	_Atomic uint64_t st_events_written, st_event_chunks, st_batch_dups;
};

struct tomb {
	char job[STO_JOB_MAX + 1];
	uint64_t gen;
};

static int seg_read(struct sto *s, uint64_t id, uint64_t off, void *buf, size_t len);
static bool tomb_skips(const struct sto *s, const char *job, size_t jl, uint64_t gen);
static void run_admin_ops(struct sto *s);
static void lifecycle_tick(struct sto *s);
static int lifecycle_open(struct sto *s);
static void lifecycle_free(struct sto *s);

void sto_options_default(struct sto_options *o)
{
	o->data_dir = "./data";
	o->sync = STO_SYNC_FDATASYNC;
	o->wal_rotate_bytes = 64ull << 20;
	o->checkpoint_interval_s = 60;
	o->head_max_bytes = 512ull << 20;
	o->chunk_max_points = 4096;
	o->segment_max_bytes = 256ull << 20;
	o->index_map_bytes = 16ull << 30;
	o->max_series = 10000000;
	o->max_series_per_job = 1000000;
	o->batch_id_ttl_s = 7 * 86400;
}

/* ---- series cache ---------------------------------------------------------- */

static uint64_t series_hash(const struct sto_series_key *k)
{
	uint8_t buf[STO_JOB_MAX + 5 + STO_METRIC_MAX];
	size_t jl = strlen(k->job), ml = strlen(k->metric);
	memcpy(buf, k->job, jl);
	buf[jl] = 0;
	rdb_put_le32(buf + jl + 1, k->rank);
	memcpy(buf + jl + 5, k->metric, ml);
	uint64_t h = rdb_hash64(buf, jl + 5 + ml, 0);
	return h ? h : 1;
}

static bool key_eq(const struct sto_series_key *a, const struct sto_series_key *b)
{
	return a->rank == b->rank && strcmp(a->job, b->job) == 0 &&
	       strcmp(a->metric, b->metric) == 0;
}

/* Caller holds series_lock. */
static struct series_ent *cache_find(struct sto *s, const struct sto_series_key *k, uint64_t h)
{
	for (struct series_ent *e = rdb_map_get(&s->series_by_hash, h); e; e = e->next)
		if (key_eq(&e->key, k))
			return e;
	return NULL;
}

/* Caller holds series_lock. */
static int cache_add(struct sto *s, const struct sto_series_key *k, uint64_t h, uint64_t id,
		     struct series_ent **out)
{
	struct series_ent *e = malloc(sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->key = *k;
	e->hash = h;
	e->id = id;
	e->next = rdb_map_get(&s->series_by_hash, h);
	int rc = rdb_map_put(&s->series_by_hash, h, e);
	if (rc == 0)
		rc = rdb_map_put(&s->series_by_id, id, e);
	if (rc) {
		if (e->next)
			rdb_map_put(&s->series_by_hash, h, e->next);
		else
			rdb_map_del(&s->series_by_hash, h);
		free(e);
		return rc;
	}
	*out = e;
	return 0;
}

/* Series count of one job, cached for the max_series_per_job check. */
struct job_count {
	struct job_count *next; /* same-hash chain */
	uint64_t hash;
	uint64_t n;
	char job[STO_JOB_MAX + 1];
};

static int count_series_cb(void *arg, const struct sto_series_key *k, uint64_t id)
{
	(void)k;
	(void)id;
	(*(uint64_t *)arg)++;
	return 0;
}

/* The job's entry, counted from the index (in t) the first time. Caller
 * holds series_lock. */
static int job_count_get(struct sto *s, struct sto_txn *t, const char *job, struct job_count **out)
{
	uint64_t h = rdb_hash64(job, strlen(job), 0x10b5) | 1;
	struct job_count *c = rdb_map_get(&s->job_counts, h);
	for (; c; c = c->next)
		if (strcmp(c->job, job) == 0) {
			*out = c;
			return 0;
		}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	int rc = sto_series_scan(t, job, count_series_cb, &c->n);
	if (rc == 0) {
		memcpy(c->job, job, strlen(job) + 1);
		c->hash = h;
		c->next = rdb_map_get(&s->job_counts, h);
		rc = rdb_map_put(&s->job_counts, h, c);
	}
	if (rc) {
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* Forgets every cached count (after a job delete); recounted on demand.
 * Caller holds series_lock. */
static void job_counts_reset(struct sto *s)
{
	for (size_t i = 0; i < s->job_counts.cap; i++) {
		struct job_count *c = s->job_counts.keys[i] ? s->job_counts.vals[i] : NULL;
		while (c) {
			struct job_count *next = c->next;
			free(c);
			c = next;
		}
	}
	rdb_map_free(&s->job_counts);
}

static void cache_free(struct sto *s)
{
	job_counts_reset(s);
	for (size_t i = 0; i < s->series_by_id.cap; i++)
		if (s->series_by_id.keys[i])
			free(s->series_by_id.vals[i]);
	rdb_map_free(&s->series_by_id);
	rdb_map_free(&s->series_by_hash);
}

/* Resolves (creating if needed) the series of every key in b into ents[].
 * New series are created in one LMDB write transaction. */
static int resolve_series(struct sto *s, const struct sto_batch *b, struct series_ent **ents)
{
	size_t n = sto_batch_nseries(b), missing = 0;
	int rc = 0;
	pthread_mutex_lock(&s->series_lock);
	for (size_t i = 0; i < n; i++) {
		const struct sto_batch_series *bs = sto_batch_series_at(b, i);
		if (!bs) {
			rc = -ENOMEM;
			goto out;
		}
		ents[i] = cache_find(s, &bs->key, series_hash(&bs->key));
		missing += ents[i] == NULL;
	}
	if (missing == 0)
		goto out;
	struct sto_txn *t = NULL;
	rc = sto_txn_begin(s->ix, true, &t);
	if (rc)
		goto out;
	uint64_t created = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (ents[i])
			continue;
		const struct sto_batch_series *bs = sto_batch_series_at(b, i);
		uint64_t id;
		bool is_new = false;
		rc = sto_series_lookup(t, &bs->key, &id);
		if (rc == RDB_ENOTFOUND) {
			struct job_count *jc = NULL;
			if (s->nseries + created >= s->opt.max_series) {
				rc = RDB_ELIMIT;
				break;
			}
			/* counted inside this txn: includes series created just before */
			rc = job_count_get(s, t, bs->key.job, &jc);
			if (rc == 0 && jc->n >= s->opt.max_series_per_job)
				rc = RDB_ELIMIT;
			if (rc == 0)
				rc = sto_series_get_or_create(t, &bs->key, &id, &is_new);
			created += is_new;
			if (rc == 0 && is_new)
				jc->n++;
		}
	}
	if (rc) {
		sto_txn_abort(t);
		job_counts_reset(s); /* counts may include series of the aborted txn */
		goto out;
	}
	rc = sto_txn_commit(t);
	if (rc) {
		job_counts_reset(s);
		goto out;
	}
	s->nseries += created;
	/* Now cache them (ids are durable). A second pass reads the ids back. */
	rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		goto out;
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (ents[i])
			continue;
		const struct sto_batch_series *bs = sto_batch_series_at(b, i);
		uint64_t h = series_hash(&bs->key), id;
		ents[i] = cache_find(s, &bs->key, h); /* duplicates within b */
		if (ents[i])
			continue;
		rc = sto_series_lookup(t, &bs->key, &id);
		if (rc == 0)
			rc = cache_add(s, &bs->key, h, id, &ents[i]);
	}
	sto_txn_abort(t);
out:
	pthread_mutex_unlock(&s->series_lock);
	return rc;
}

/* ---- heads --------------------------------------------------------------- */

static struct head *head_new(uint64_t gen)
{
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

static void head_free(struct head *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->series.cap; i++) {
		if (!h->series.keys[i])
			continue;
		struct head_series *hs = h->series.vals[i];
		sto_cols_free(&hs->pts);
		free(hs);
	}
	rdb_map_free(&h->series);
	evh_free(h->ev);
	free(h);
}

static uint64_t cols_bytes(const struct sto_cols *c)
{
	return (uint64_t)c->cap * (8 + 8 + 4 + 8);
}

/* Appends b's points to head h. Caller holds head_lock. */
static int head_apply(struct sto *s, struct head *h, const struct sto_batch *b,
		      struct series_ent **ents, bool queue_full)
{
	size_t n = sto_batch_nseries(b);
	for (size_t i = 0; i < n; i++) {
		const struct sto_batch_series *bs = sto_batch_series_at(b, i);
		struct head_series *hs = rdb_map_get(&h->series, ents[i]->id);
		if (!hs) {
			hs = calloc(1, sizeof(*hs));
			if (!hs || rdb_map_put(&h->series, ents[i]->id, hs) != 0) {
				free(hs);
				return -ENOMEM;
			}
			hs->ent = ents[i];
			h->bytes += HEAD_SERIES_OVERHEAD;
			atomic_fetch_add(&s->head_bytes, HEAD_SERIES_OVERHEAD);
		}
		uint64_t before = cols_bytes(&hs->pts);
		int rc = sto_cols_reserve(&hs->pts, hs->pts.n + bs->pts.n);
		if (rc)
			return rc;
		size_t at = hs->pts.n;
		memcpy(hs->pts.ts_ns + at, bs->pts.ts_ns, bs->pts.n * sizeof(int64_t));
		memcpy(hs->pts.step + at, bs->pts.step, bs->pts.n * sizeof(int64_t));
		memcpy(hs->pts.attempt + at, bs->pts.attempt, bs->pts.n * sizeof(uint32_t));
		memcpy(hs->pts.value + at, bs->pts.value, bs->pts.n * sizeof(uint64_t));
		hs->pts.n += bs->pts.n;
		h->points += bs->pts.n;
		uint64_t grown = cols_bytes(&hs->pts) - before;
		h->bytes += grown;
		atomic_fetch_add(&s->head_bytes, grown);
		if (queue_full && !hs->queued && hs->pts.n >= s->opt.chunk_max_points) {
			if (s->seal_queue_n == s->seal_queue_cap) {
				size_t cap = s->seal_queue_cap ? s->seal_queue_cap * 2 : 64;
				uint64_t *q = realloc(s->seal_queue, cap * sizeof(*q));
				if (!q)
					continue; /* sealed at the next checkpoint instead */
				s->seal_queue = q;
				s->seal_queue_cap = cap;
			}
			s->seal_queue[s->seal_queue_n++] = ents[i]->id;
			hs->queued = true;
		}
	}
	if (h->first_mono_ns == 0 && h->points)
		h->first_mono_ns = rdb_now_mono_ns();
	return 0;
}

static void wake_flusher(struct sto *s)
{
	pthread_mutex_lock(&s->flush_lock);
	pthread_cond_signal(&s->flush_cond);
	pthread_mutex_unlock(&s->flush_lock);
}

/* ---- write --------------------------------------------------------------- */

/* ---- batch ids ---------------------------------------------------------------- */

static uint64_t batch_hash(const char *id, size_t len)
{
	uint64_t h = rdb_hash64(id, len, 0xba7c4);
	return h ? h : 1;
}

/* Caller holds batch_lock. */
static struct batch_ent *batch_find(struct sto *s, const char *id, size_t len, uint64_t h)
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
static int batch_add(struct sto *s, const char *id, size_t len, uint64_t h, bool done,
		     uint64_t gen, struct batch_ent **out)
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
	uint64_t h = batch_hash(id, len), seen;
	int rc;
	pthread_mutex_lock(&s->batch_lock);
	struct batch_ent *e = batch_find(s, id, len, h);
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
		rc = batch_add(s, id, len, h, false, 0, ent);
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
static int batch_persist(struct sto *s, struct sto_txn *t, uint64_t gen)
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
		uint64_t now = (uint64_t)rdb_now_ns(), ttl = (uint64_t)s->opt.batch_id_ttl_s * 1000000000ull;
		rc = sto_batchid_prune(t, now > ttl ? now - ttl : 0, 100000, NULL);
	}
	return rc;
}

/* After the checkpoint committed: forget the ids now in the index. */
static void batch_forget(struct sto *s, uint64_t gen)
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

static void batch_free_all(struct sto *s)
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

/* Encodes a request as one WAL record: plain points, or a batch record. */
static int encode_request(const struct sto_write_req *req, struct rdb_buf *rec, uint8_t *type)
{
	bool has_ev = req->events && sto_events_count(req->events) > 0;
	if (!has_ev && !req->batch_id) {
		*type = STO_WAL_REC_POINTS;
		return sto_batch_encode(req->points, rec);
	}
	*type = STO_WAL_REC_BATCH;
	uint8_t il = (uint8_t)(req->batch_id ? req->batch_id_len : 0);
	int rc = rdb_buf_putc(rec, (char)il);
	if (rc == 0)
		rc = rdb_buf_append(rec, req->batch_id, il);
	for (int part = 0; part < 2 && rc == 0; part++) {
		size_t at = rec->len;
		rc = rdb_buf_append(rec, "\0\0\0\0", 4);
		if (rc == 0 && part == 0 && req->points && sto_batch_nseries(req->points))
			rc = sto_batch_encode(req->points, rec);
		if (rc == 0 && part == 1 && has_ev)
			rc = sto_events_encode(req->events, rec);
		if (rc == 0)
			rdb_put_le32(rec->data + at, (uint32_t)(rec->len - at - 4));
	}
	return rc;
}

/* Applies a durable request to the active head. Caller holds write_lock
 * shared and head_lock. */
static int apply_request(struct sto *s, struct head *h, const struct sto_batch *pts,
			 struct series_ent **ents, const struct sto_events *ev, bool queue_full)
{
	int rc = 0;
	if (pts && sto_batch_nseries(pts))
		rc = head_apply(s, h, pts, ents, queue_full);
	if (rc == 0 && ev && sto_events_count(ev)) {
		uint64_t added = 0;
		rc = evh_apply(h->ev, ev, &added);
		h->bytes += added;
		atomic_fetch_add(&s->head_bytes, added);
		if (h->first_mono_ns == 0)
			h->first_mono_ns = rdb_now_mono_ns();
	}
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

int sto_write_req(struct sto *s, const struct sto_write_req *req, struct sto_write_result *res)
{
	res->duplicate = false;
	size_t n = req->points ? sto_batch_nseries(req->points) : 0;
	size_t nev = req->events ? sto_events_count(req->events) : 0;
	if (req->batch_id && (req->batch_id_len == 0 || req->batch_id_len > STO_BATCH_ID_MAX))
		return RDB_EINVAL;
	if (n == 0 && nev == 0 && !req->batch_id)
		return 0;
	if (atomic_load(&s->closing))
		return -ESHUTDOWN;
	if (over_memory(s))
		return RDB_EBUSY;
	struct batch_ent *bent = NULL;
	if (req->batch_id) {
		int r = batch_reserve(s, req->batch_id, req->batch_id_len, &bent);
		if (r == 1) {
			res->duplicate = true;
			atomic_fetch_add(&s->st_batch_dups, 1);
			return 0;
		}
		if (r)
			return r;
	}
	struct rdb_buf rec;
	rdb_buf_init(&rec, STO_WAL_MAX_PAYLOAD);
	uint8_t type = 0;
	uint64_t gen = 0;
	struct series_ent **ents = malloc((n ? n : 1) * sizeof(*ents));
	int rc = ents ? 0 : -ENOMEM;
	if (rc == 0 && n)
		rc = resolve_series(s, req->points, ents);
	if (rc == 0)
		rc = encode_request(req, &rec, &type);
	bool wake = false;
	uint64_t epoch = atomic_load(&s->del_epoch);
	if (rc == 0) {
		pthread_rwlock_rdlock(&s->write_lock);
		/* A job deleted since we resolved our series ids: resolve again so
		 * that no point goes to a deleted series id. */
		while (rc == 0 && n && epoch != atomic_load(&s->del_epoch)) {
			pthread_rwlock_unlock(&s->write_lock);
			epoch = atomic_load(&s->del_epoch);
			rc = resolve_series(s, req->points, ents);
			pthread_rwlock_rdlock(&s->write_lock);
		}
		if (rc == 0)
			rc = sto_wal_append(s->wal, type, rec.data, rec.len);
		if (rc == 0) {
			pthread_mutex_lock(&s->head_lock);
			gen = s->active->gen;
			rc = apply_request(s, s->active, req->points, ents, req->events, true);
			wake = s->seal_queue_n > 0;
			pthread_mutex_unlock(&s->head_lock);
			if (rc)
				rdb_error("store", "out of memory applying an acknowledged batch to the "
					  "head; it is in the WAL and will be recovered at restart");
			/* Marked inside the write lock: a rotation sees it done. */
			if (bent)
				batch_finish(s, bent, true, gen);
			bent = NULL;
		}
		pthread_rwlock_unlock(&s->write_lock);
	}
	if (bent)
		batch_finish(s, bent, false, 0);
	if (rc == 0) {
		atomic_fetch_add(&s->st_points_written, req->points ? sto_batch_points(req->points) : 0);
		atomic_fetch_add(&s->st_events_written, nev);
		atomic_fetch_add(&s->st_batches_written, 1);
	}
	if (wake || (rc == 0 && sto_wal_size(s->wal) > s->opt.wal_rotate_bytes))
		wake_flusher(s);
	free(ents);
	rdb_buf_free(&rec);
	return rc;
}

int sto_write(struct sto *s, const struct sto_batch *b)
{
	struct sto_write_req req = {.points = b};
	struct sto_write_result res;
	return sto_write_req(s, &req, &res);
}

/* ---- sealing: head -> chunks ------------------------------------------------ */

/* One series' points being sealed: a private, sorted copy of the first
 * `taken` points of its head column. */
struct seal_item {
	struct head_series *hs;
	size_t taken;
};

struct seal_round {
	struct rdb_buf buf;          /* framed chunk records for the segment */
	struct rdb_buf codec;        /* scratch: one chunk's codec payload */
	struct sto_chunk_ref *refs;  /* chunks in buf */
	size_t nrefs, refs_cap;
	struct sto_cols copy, piece; /* scratch */
};

static void round_free(struct seal_round *r)
{
	rdb_buf_free(&r->buf);
	rdb_buf_free(&r->codec);
	free(r->refs);
	sto_cols_free(&r->copy);
	sto_cols_free(&r->piece);
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
	rc = sto_txn_commit(t);
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

/* Encodes points [from, from+n) of r->copy as one chunk into r->buf. */
static int encode_piece(struct sto *s, struct seal_round *r, struct series_ent *ent,
			uint64_t gen, size_t from, size_t n)
{
	struct sto_cols *p = &r->piece;
	int rc = sto_cols_reserve(p, n);
	if (rc)
		return rc;
	memcpy(p->ts_ns, r->copy.ts_ns + from, n * sizeof(int64_t));
	memcpy(p->step, r->copy.step + from, n * sizeof(int64_t));
	memcpy(p->attempt, r->copy.attempt + from, n * sizeof(uint32_t));
	memcpy(p->value, r->copy.value + from, n * sizeof(uint64_t));
	p->n = n;
	r->codec.len = 0;
	rc = sto_codec_encode(p, &r->codec, NULL);
	if (rc)
		return rc;
	struct sto_chunk_ref ref = {0};
	ref.series_id = ent->id;
	ref.uid = s->next_uid++;
	ref.segment_id = sto_seg_id(s->seg);
	ref.offset = sto_seg_size(s->seg) + r->buf.len;
	ref.gen = gen;
	sto_chunk_stats_compute(p, &ref.stats);
	size_t before = r->buf.len;
	rc = sto_chunk_frame(&r->buf, STO_CHUNK_MAGIC, ent->id, ref.uid, gen, (uint32_t)n, r->codec.data,
			     r->codec.len, &ent->key);
	if (rc)
		return rc;
	ref.length = (uint32_t)(r->buf.len - before);
	return add_ref(r, &ref);
}

/* Copies the first `taken` points of hs (caller holds head_lock). */
static int copy_points(struct seal_round *r, const struct head_series *hs, size_t taken)
{
	r->copy.n = 0;
	if (taken == 0)
		return 0; /* a series emptied by size seals: nothing to copy */
	int rc = sto_cols_reserve(&r->copy, taken);
	if (rc)
		return rc;
	memcpy(r->copy.ts_ns, hs->pts.ts_ns, taken * sizeof(int64_t));
	memcpy(r->copy.step, hs->pts.step, taken * sizeof(int64_t));
	memcpy(r->copy.attempt, hs->pts.attempt, taken * sizeof(uint32_t));
	memcpy(r->copy.value, hs->pts.value, taken * sizeof(uint64_t));
	r->copy.n = taken;
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
	if (rest == 0 && drop_empty) {
		uint64_t freed = cols_bytes(&hs->pts) + HEAD_SERIES_OVERHEAD;
		rdb_map_del(&h->series, hs->ent->id);
		sto_cols_free(&hs->pts);
		free(hs);
		h->bytes -= freed;
		atomic_fetch_sub(&s->head_bytes, freed);
	}
}

/* Writes the round's chunks to the segment, indexes them (with pending
 * entries: they belong to a generation newer than ckpt_gen) and removes
 * the sealed points from the head, atomically for readers. */
static int commit_round(struct sto *s, struct head *h, struct seal_round *r,
			struct seal_item *items, size_t nitems, bool drop_empty)
{
	if (r->nrefs == 0)
		return 0;
	int rc = sto_seg_append(s->seg, r->buf.data, r->buf.len);
	if (rc)
		return rc;
	struct sto_txn *t;
	rc = sto_txn_begin(s->ix, true, &t);
	if (rc)
		return rc;
	for (size_t i = 0; i < r->nrefs && rc == 0; i++) {
		rc = sto_chunk_put(t, &r->refs[i]);
		if (rc == 0)
			rc = sto_pending_add(t, r->refs[i].gen, &r->refs[i]);
	}
	if (rc == 0)
		rc = sto_meta_put(t, "next_chunk_uid", s->next_uid);
	if (rc) {
		sto_txn_abort(t);
		return rc;
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
		return rc;
	uint64_t pts = 0;
	for (size_t i = 0; i < r->nrefs; i++)
		pts += r->refs[i].stats.count;
	atomic_fetch_add(&s->st_chunks, r->nrefs);
	atomic_fetch_add(&s->st_points_sealed, pts);
	atomic_fetch_add(&s->st_chunk_bytes, r->buf.len);
	return 0;
}

/* Seals items (series of head h) in rounds of at most SEAL_BUF_MAX bytes.
 * For each item, `taken` points are sealed into chunks of at most
 * chunk_max_points. Flusher thread only. */
static int seal_items(struct sto *s, struct head *h, struct seal_item *items, size_t nitems,
		      bool drop_empty)
{
	struct seal_round r = {0};
	rdb_buf_init(&r.buf, SEAL_BUF_MAX + STO_CHUNK_MAX_PAYLOAD);
	rdb_buf_init(&r.codec, STO_CHUNK_MAX_PAYLOAD);
	int rc = 0;
	size_t first = 0;
	for (size_t i = 0; i < nitems && rc == 0; i++) {
		if (!s->seg || r.buf.len == 0) {
			rc = ensure_segment(s);
			if (rc)
				break;
		}
		pthread_mutex_lock(&s->head_lock);
		rc = copy_points(&r, items[i].hs, items[i].taken);
		pthread_mutex_unlock(&s->head_lock);
		if (rc == 0)
			rc = sto_cols_sort_by_time(&r.copy);
		for (size_t at = 0; rc == 0 && at < items[i].taken; at += s->opt.chunk_max_points) {
			size_t n = items[i].taken - at;
			if (n > s->opt.chunk_max_points)
				n = s->opt.chunk_max_points;
			rc = encode_piece(s, &r, items[i].hs->ent, h->gen, at, n);
		}
		if (rc == 0 && (r.buf.len >= SEAL_BUF_MAX || i + 1 == nitems)) {
			rc = commit_round(s, h, &r, items + first, i + 1 - first, drop_empty);
			r.buf.len = 0;
			r.nrefs = 0;
			first = i + 1;
		}
	}
	round_free(&r);
	return rc;
}

/* Seals the full series queued by writers (size seal of the active head). */
static int seal_full(struct sto *s)
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
	int rc = seal_items(s, h, items, k, false);
	if (rc) {
		rdb_error("store", "size seal of %zu series failed: %s; points stay in the head "
			  "and the WAL, retrying at the next checkpoint", k, rdb_strerror(rc));
		pthread_mutex_lock(&s->head_lock);
		for (size_t i = 0; i < k; i++)
			if (items[i].hs->pts.n >= items[i].taken)
				items[i].hs->queued = false;
		pthread_mutex_unlock(&s->head_lock);
	}
	free(items);
	return rc;
}

static int remove_wal_upto(struct sto *s, uint64_t gen)
{
	uint64_t *gens = NULL;
	size_t n = 0;
	int rc = sto_wal_list(s->wal_dir, &gens, &n);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		if (gens[i] > gen)
			continue;
		int r2 = sto_wal_remove(s->wal_dir, gens[i]);
		if (r2 && r2 != -ENOENT)
			rdb_warn("store", "cannot remove checkpointed WAL generation %llu in %s: %s",
				 (unsigned long long)gens[i], s->wal_dir, rdb_strerror(r2));
	}
	free(gens);
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
	int rc = sto_seg_append(s->seg, es->buf.data, es->buf.len);
	if (rc == 0)
		rc = sto_meta_put(t, "next_chunk_uid", s->next_uid);
	if (rc) {
		sto_txn_abort(t);
		return rc;
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
	struct sto_series_key key = {0};
	memcpy(key.job, j->job, strlen(j->job) + 1);
	key.rank = STO_RANK_JOB;
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
		rc = sto_evidx_put(es->t, j->job, e.min_ts_ns, e.uid, es->entry.data, es->entry.len);
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
static int seal_events(struct sto *s, struct head *h)
{
	if (h->ev->events == 0)
		return 0;
	struct ev_seal es = {.s = s, .h = h};
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

/* Seals everything in s->frozen, makes it durable, records the checkpoint
 * and deletes the WAL files it covered. Flusher (or open/close) only. */
static int finish_checkpoint(struct sto *s)
{
	struct head *h = s->frozen;
	size_t n = 0, k = 0;
	pthread_mutex_lock(&s->head_lock);
	n = h->series.n;
	struct seal_item *items = calloc(n ? n : 1, sizeof(*items));
	for (size_t i = 0; items && i < h->series.cap; i++) {
		if (!h->series.keys[i])
			continue;
		struct head_series *hs = h->series.vals[i];
		items[k].hs = hs;
		items[k].taken = hs->pts.n;
		k++;
	}
	pthread_mutex_unlock(&s->head_lock);
	if (!items)
		return -ENOMEM;
	int rc = seal_items(s, h, items, k, true);
	free(items);
	if (rc == 0)
		rc = seal_events(s, h);
	if (rc == 0 && s->seg)
		rc = sto_seg_sync(s->seg);
	struct sto_txn *t = NULL;
	if (rc == 0)
		rc = sto_txn_begin(s->ix, true, &t);
	if (rc == 0) {
		rc = sto_meta_put(t, "ckpt_gen", h->gen);
		if (rc == 0)
			rc = sto_pending_clear(t, h->gen);
		if (rc == 0)
			rc = sto_evpending_clear(t, h->gen);
		if (rc == 0)
			rc = batch_persist(s, t, h->gen);
		if (rc == 0)
			rc = sto_txn_commit(t);
		else
			sto_txn_abort(t);
	}
	if (rc) {
		rdb_error("store", "checkpoint of WAL generation %llu failed: %s; its points stay "
			  "in memory and in the WAL, retrying", (unsigned long long)h->gen,
			  rdb_strerror(rc));
		return rc;
	}
	s->ckpt_gen = h->gen;
	batch_forget(s, h->gen);
	pthread_rwlock_wrlock(&s->view_lock);
	pthread_mutex_lock(&s->head_lock);
	s->frozen = NULL;
	atomic_fetch_sub(&s->head_bytes, h->bytes);
	pthread_mutex_unlock(&s->head_lock);
	pthread_rwlock_unlock(&s->view_lock);
	head_free(h);
	remove_wal_upto(s, s->ckpt_gen);
	atomic_fetch_add(&s->st_checkpoints, 1);
	return 0;
}

/* Finishes a checkpoint left over from an earlier failure, then rotates the
 * WAL and the active head and seals the frozen head. */
static int checkpoint(struct sto *s)
{
	if (s->frozen) {
		int rc = finish_checkpoint(s);
		if (rc)
			return rc;
	}
	pthread_rwlock_wrlock(&s->write_lock);
	uint64_t gen = s->active->gen + 1;
	int rc = sto_wal_rotate(s->wal, gen);
	struct head *fresh = rc == 0 ? head_new(gen) : NULL;
	if (rc == 0 && fresh) {
		pthread_mutex_lock(&s->head_lock);
		s->frozen = s->active;
		s->active = fresh;
		s->seal_queue_n = 0;
		pthread_mutex_unlock(&s->head_lock);
	}
	pthread_rwlock_unlock(&s->write_lock);
	if (rc || !fresh) {
		rdb_error("store", "cannot rotate the WAL to generation %llu: %s",
			  (unsigned long long)gen, rdb_strerror(rc ? rc : -ENOMEM));
		return rc ? rc : -ENOMEM;
	}
	return finish_checkpoint(s);
}

static bool checkpoint_due(struct sto *s)
{
	pthread_mutex_lock(&s->head_lock);
	struct head *h = s->active;
	bool due = h->points > 0 &&
		   rdb_now_mono_ns() - h->first_mono_ns >=
			   (int64_t)s->opt.checkpoint_interval_s * 1000000000;
	bool over = atomic_load(&s->head_bytes) > s->opt.head_max_bytes / 2 && h->points > 0;
	pthread_mutex_unlock(&s->head_lock);
	return due || over || s->frozen || sto_wal_size(s->wal) > s->opt.wal_rotate_bytes;
}

static void *flusher_main(void *arg)
{
	struct sto *s = arg;
	pthread_mutex_lock(&s->flush_lock);
	while (!s->stop) {
		bool want = s->ckpt_wanted;
		pthread_mutex_unlock(&s->flush_lock);

		pthread_mutex_lock(&s->head_lock);
		bool full = s->seal_queue_n > 0;
		pthread_mutex_unlock(&s->head_lock);
		if (full)
			seal_full(s);
		run_admin_ops(s);
		lifecycle_tick(s);
		bool due = want || checkpoint_due(s);

		pthread_mutex_lock(&s->flush_lock);
		if (due) {
			/* Counted before the rotation: a sto_checkpoint caller that saw
			 * the old count gets a checkpoint that starts after its call. */
			uint64_t mine = ++s->ckpt_started;
			s->ckpt_wanted = false;
			pthread_mutex_unlock(&s->flush_lock);
			int rc = checkpoint(s);
			pthread_mutex_lock(&s->flush_lock);
			s->ckpt_last_rc = rc;
			s->ckpt_done = mine;
			pthread_cond_broadcast(&s->ckpt_cond);
			if (rc == 0)
				continue;
		}
		if (s->stop || s->ckpt_wanted || s->ops)
			continue;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 200 * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&s->flush_cond, &s->flush_lock, &ts);
	}
	pthread_mutex_unlock(&s->flush_lock);
	return NULL;
}

int sto_checkpoint(struct sto *s)
{
	pthread_mutex_lock(&s->flush_lock);
	uint64_t target = s->ckpt_started + 1;
	s->ckpt_wanted = true;
	pthread_cond_signal(&s->flush_cond);
	while (s->ckpt_done < target && !s->stop)
		pthread_cond_wait(&s->ckpt_cond, &s->flush_lock);
	int rc = s->ckpt_done >= target ? s->ckpt_last_rc : -ESHUTDOWN;
	pthread_mutex_unlock(&s->flush_lock);
	return rc;
}

/* ---- read ---------------------------------------------------------------- */

static bool in_range(const struct sto_range *r, int64_t ts, int64_t step)
{
	if (ts < r->from_ns || ts > r->to_ns)
		return false;
	if (!r->by_step)
		return true;
	return step != STO_STEP_NONE && step >= r->step_from && step <= r->step_to;
}

/* Appends the points of c in range to out; RDB_ELIMIT past max_points. */
static int filter_into(const struct sto_cols *c, const struct sto_range *r, size_t max_points,
		       struct sto_cols *out)
{
	for (size_t i = 0; i < c->n; i++) {
		if (!in_range(r, c->ts_ns[i], c->step[i]))
			continue;
		if (out->n >= max_points)
			return RDB_ELIMIT;
		int rc = sto_cols_push(out, c->ts_ns[i], c->step[i], c->attempt[i], c->value[i]);
		if (rc)
			return rc;
	}
	return 0;
}

struct read_ctx {
	struct sto *s;
	const struct sto_range *r;
	size_t max_points;
	struct sto_cols *out;
	struct sto_cols tmp;
	struct rdb_buf rec;
	struct sto_read_error *err;
	uint64_t series_id;
};

/* Reads, verifies and decodes one chunk into ctx->tmp. */
int sto_read_chunk(struct sto *s, const struct sto_chunk_ref *ref, struct rdb_buf *rec,
		   struct sto_cols *out, struct sto_read_error *err)
{
	rec->len = 0;
	int rc = rdb_buf_reserve(rec, ref->length);
	const char *why = "read failed";
	char path[PATH_MAX + 64];
	if (rc)
		goto fail;
	rc = seg_read(s, ref->segment_id, ref->offset, rec->data, ref->length);
	if (rc == -ENOENT) {
		/* The segment was compacted away after our snapshot: the chunk
		 * (same key, same uid) lives in another segment now. */
		struct sto_chunk_ref cur;
		rc = sto_admin_relookup(s, ref, &cur);
		if (rc == 0)
			rc = seg_read(s, cur.segment_id, cur.offset, rec->data, ref->length);
	}
	if (rc == RDB_ECORRUPT)
		why = "segment file is shorter than the index says";
	const uint8_t *payload;
	size_t plen, used = 0;
	if (rc == 0)
		rc = sto_chunk_check(rec->data, ref->length, STO_CHUNK_MAGIC, ref->series_id, ref->uid, &payload,
				     &plen, &why);
	if (rc == 0) {
		rc = sto_codec_decode(payload, plen, STO_CHUNK_MAX_POINTS, out, &used);
		if (rc == RDB_ECORRUPT)
			why = "chunk payload does not decode";
		else if (rc == 0 && out->n != ref->stats.count) {
			rc = RDB_ECORRUPT;
			why = "chunk point count differs from its index entry";
		}
	}
	if (rc == 0)
		return 0;
fail:
	sto_seg_path(s->seg_dir, ref->segment_id, path, sizeof(path));
	snprintf(err->msg, sizeof(err->msg),
		 "%s: %s (chunk %llu of series %llu, offset %llu, %u bytes, in %s)",
		 rc == RDB_ECORRUPT ? "corrupt data" : "I/O error",
		 rc == RDB_ECORRUPT ? why : rdb_strerror(rc), (unsigned long long)ref->uid,
		 (unsigned long long)ref->series_id, (unsigned long long)ref->offset, ref->length,
		 path);
	static struct rdb_log_ratelimit rl;
	rdb_log_limited(&rl, 10, RDB_LOG_ERROR, "store", "%s; the chunk is not served, "
			"queries touching it fail, the rest of the data is served", err->msg);
	return rc;
}

static int read_chunk_cb(void *arg, const struct sto_chunk_ref *ref)
{
	struct read_ctx *c = arg;
	const struct sto_range *r = c->r;
	if (r->by_step && (ref->stats.max_step == STO_STEP_NONE || ref->stats.max_step < r->step_from ||
			   ref->stats.min_step > r->step_to))
		return 0;
	int rc = sto_read_chunk(c->s, ref, &c->rec, &c->tmp, c->err);
	if (rc)
		return rc;
	return filter_into(&c->tmp, r, c->max_points, c->out);
}

/* Copies head points of series_id in range. Caller holds view_lock shared. */
static int read_heads(struct sto *s, uint64_t series_id, const struct sto_range *r,
		      size_t max_points, struct sto_cols *out)
{
	int rc = 0;
	pthread_mutex_lock(&s->head_lock);
	struct head *heads[2] = {s->frozen, s->active};
	for (int i = 0; i < 2 && rc == 0; i++) {
		if (!heads[i])
			continue;
		struct head_series *hs = rdb_map_get(&heads[i]->series, series_id);
		if (hs)
			rc = filter_into(&hs->pts, r, max_points, out);
	}
	pthread_mutex_unlock(&s->head_lock);
	return rc;
}

int sto_read(struct sto *s, uint64_t series_id, const struct sto_range *r, size_t max_points,
	     struct sto_cols *out, struct sto_read_error *err)
{
	struct read_ctx c = {.s = s, .r = r, .max_points = max_points, .out = out, .err = err,
			     .series_id = series_id};
	rdb_buf_init(&c.rec, STO_CHUNK_HEADER_SIZE + STO_CHUNK_MAX_PAYLOAD);
	out->n = 0;
	err->msg[0] = 0;
	struct sto_txn *t = NULL;
	pthread_rwlock_rdlock(&s->view_lock);
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc == 0)
		rc = read_heads(s, series_id, r, max_points, out);
	pthread_rwlock_unlock(&s->view_lock);
	if (rc == 0)
		rc = sto_chunk_scan(t, series_id, r->from_ns, r->to_ns, read_chunk_cb, &c);
	sto_txn_abort(t);
	if (rc == 0)
		rc = sto_cols_sort_by_time(out);
	if (rc == RDB_ELIMIT)
		snprintf(err->msg, sizeof(err->msg), "more than %zu points", max_points);
	sto_cols_free(&c.tmp);
	rdb_buf_free(&c.rec);
	return rc;
}

struct view_ctx {
	struct sto_series_view *v;
	const struct sto_range *r;
	size_t cap;
};

static int view_chunk_cb(void *arg, const struct sto_chunk_ref *ref)
{
	struct view_ctx *c = arg;
	const struct sto_range *r = c->r;
	if (r->by_step && (ref->stats.max_step == STO_STEP_NONE || ref->stats.max_step < r->step_from ||
			   ref->stats.min_step > r->step_to))
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

int sto_view_series(struct sto *s, uint64_t series_id, const struct sto_range *r,
		    size_t max_head_points, struct sto_series_view *out)
{
	memset(out, 0, sizeof(*out));
	struct view_ctx c = {.v = out, .r = r};
	struct sto_txn *t = NULL;
	pthread_rwlock_rdlock(&s->view_lock);
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc == 0)
		rc = read_heads(s, series_id, r, max_head_points, &out->head);
	pthread_rwlock_unlock(&s->view_lock);
	if (rc == 0)
		rc = sto_chunk_scan(t, series_id, r->from_ns, r->to_ns, view_chunk_cb, &c);
	sto_txn_abort(t);
	if (rc)
		sto_view_free(out);
	return rc;
}

void sto_view_free(struct sto_series_view *v)
{
	if (!v)
		return;
	sto_cols_free(&v->head);
	free(v->chunks);
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

static int hit_add(struct ev_read *r, const struct sto_event *e)
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
			struct sto_event e;
			ev_rec_view(j->recs[k], job, jl, &e);
			if (evf_match(&r->filt, &e))
				rc = hit_add(r, &e);
		}
	}
	pthread_mutex_unlock(&s->head_lock);
	return rc;
}

static int ev_chunk_cb(void *arg, int64_t min_ts_ns, uint64_t uid, const uint8_t *val, size_t len)
{
	struct ev_read *r = arg;
	(void)min_ts_ns;
	struct ev_entry e;
	int rc = eve_decode(val, len, &e);
	if (rc)
		return rc;
	e.uid = uid;
	if (!evf_chunk_may_match(&r->filt, &e))
		return 0;
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
		rc = seg_read(r->s, e->segment_id, e->offset, rec->data, e->length);
	if (rc == -ENOENT) {
		uint64_t seg = 0, off = 0;
		rc = sto_admin_ev_relookup(r->s, job, e->min_ts_ns, e->uid, &seg, &off);
		if (rc == 0)
			rc = seg_read(r->s, seg, off, rec->data, e->length);
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

int sto_events_read(struct sto *s, const struct sto_ev_filter *f, size_t max_events,
		    sto_ev_fn fn, void *arg, struct sto_read_error *err)
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
	if (rc == 0)
		rc = read_head_events(&r);
	pthread_rwlock_unlock(&s->view_lock);
	if (rc == 0)
		rc = sto_evidx_scan(t, f->job, f->to_ns, ev_chunk_cb, &r);
	sto_txn_abort(t);
	for (size_t i = 0; rc == 0 && i < r.nchunks; i++)
		rc = read_event_chunk(&r, &r.chunks[i], &rec, &dec, err);
	if (rc == 0 && r.n > 1)
		qsort(r.hits, r.n, sizeof(*r.hits), cmp_hit);
	size_t jl = strlen(f->job);
	for (size_t i = 0; rc == 0 && i < r.n; i++) {
		struct sto_event e;
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

int sto_lookup_series(struct sto *s, const struct sto_series_key *k, uint64_t *id)
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
	if (s->wal)
		sto_wal_get_stats(s->wal, &out->wal);
}

/* ---- open, recovery, close ------------------------------------------------- */

static int make_dir(const char *path)
{
	if (mkdir(path, 0755) == 0 || errno == EEXIST)
		return 0;
	int rc = -errno;
	rdb_error("store", "cannot create directory %s: %s", path, strerror(-rc));
	return rc;
}

/* Creates FORMAT in a new data directory, or checks it in an existing one. */
static int check_format(const char *dir)
{
	char path[PATH_MAX + 16], buf[256];
	snprintf(path, sizeof(path), "%s/FORMAT", dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0)
			return -errno;
		ssize_t w = write(fd, FORMAT_FILE_TEXT, strlen(FORMAT_FILE_TEXT));
		int rc = (w == (ssize_t)strlen(FORMAT_FILE_TEXT) && fsync(fd) == 0) ? 0 : -EIO;
		close(fd);
		return rc;
	}
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	if (strcmp(buf, FORMAT_FILE_TEXT) != 0) {
		rdb_error("store", "%s says this data directory has a format this rankdbd does "
			  "not know (expected \"format %u\"); refusing to open it. Use the "
			  "rankdbd release that wrote it.", path, STO_FORMAT_VERSION);
		return RDB_EFORMAT;
	}
	return 0;
}

static int take_lock(struct sto *s)
{
	char path[PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/LOCK", s->dir);
	s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (s->lock_fd < 0)
		return -errno;
	if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
		int rc = -errno;
		rdb_error("store", "data directory %s is locked by another process (%s); is "
			  "another rankdbd or rankctl running on it?", s->dir, path);
		return rc == -EWOULDBLOCK ? -EBUSY : rc;
	}
	return 0;
}

static int drop_pending_cb(void *arg, const struct sto_chunk_ref *ref)
{
	struct sto_txn *t = arg;
	int rc = sto_chunk_del(t, ref->series_id, ref->stats.min_ts_ns, ref->uid);
	return rc == RDB_ENOTFOUND ? 0 : rc;
}

/* Drops index entries of chunks newer than the checkpoint: their points
 * will be replayed from the WAL. */
static int drop_evpending_cb(void *arg, uint64_t gen, const char *job, int64_t min_ts_ns,
			    uint64_t uid)
{
	(void)gen;
	int rc = sto_evidx_del(arg, job, min_ts_ns, uid);
	return rc == RDB_ENOTFOUND ? 0 : rc;
}

static int drop_uncheckpointed(struct sto *s)
{
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, true, &t);
	if (rc)
		return rc;
	rc = sto_pending_scan(t, s->ckpt_gen, drop_pending_cb, t);
	if (rc == 0)
		rc = sto_pending_drop_after(t, s->ckpt_gen);
	if (rc == 0)
		rc = sto_evpending_scan(t, s->ckpt_gen, drop_evpending_cb, t);
	if (rc == 0)
		rc = sto_evpending_drop_after(t, s->ckpt_gen);
	if (rc) {
		sto_txn_abort(t);
		return rc;
	}
	return sto_txn_commit(t);
}

struct replay_ctx {
	struct sto *s;
	struct sto_batch *b;
	struct sto_events *ev;
	uint64_t points, events;
	uint64_t gen;              /* of the record being replayed */
	struct sto_batch *keep_b;  /* scratch: the record minus deleted jobs */
	struct sto_events *keep_ev;
};

/* Copies the points and events of c->b / c->ev whose job has no tombstone
 * covering generation c->gen into keep_b / keep_ev and swaps them in. */
static int replay_filter(struct replay_ctx *c, bool has_points, bool has_events)
{
	int rc = 0;
	if (!c->keep_b)
		rc = sto_batch_new(SIZE_MAX, SIZE_MAX, &c->keep_b);
	if (rc == 0 && !c->keep_ev)
		rc = sto_events_new(SIZE_MAX, STO_WAL_MAX_PAYLOAD, &c->keep_ev);
	if (rc)
		return rc;
	sto_batch_reset(c->keep_b);
	sto_events_reset(c->keep_ev);
	size_t n = has_points ? sto_batch_nseries(c->b) : 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const struct sto_batch_series *bs = sto_batch_series_at(c->b, i);
		if (tomb_skips(c->s, bs->key.job, strlen(bs->key.job), c->gen))
			continue;
		for (size_t k = 0; rc == 0 && k < bs->pts.n; k++)
			rc = sto_batch_add(c->keep_b, bs->key.job, strlen(bs->key.job), bs->key.rank,
					   bs->key.metric, strlen(bs->key.metric), bs->pts.ts_ns[k],
					   bs->pts.step[k], bs->pts.attempt[k], bs->pts.value[k]);
	}
	size_t ne = has_events ? sto_events_count(c->ev) : 0;
	for (size_t i = 0; rc == 0 && i < ne; i++) {
		const struct sto_event *e = sto_events_at(c->ev, i);
		if (!tomb_skips(c->s, e->job, e->job_len, c->gen))
			rc = sto_events_add(c->keep_ev, e);
	}
	if (rc)
		return rc;
	struct sto_batch *tb = c->b;
	c->b = c->keep_b;
	c->keep_b = tb;
	struct sto_events *te = c->ev;
	c->ev = c->keep_ev;
	c->keep_ev = te;
	return 0;
}

/* Applies replayed points and events to the active head. */
static int replay_apply(struct replay_ctx *c, bool has_points, bool has_events)
{
	if (c->s->ntombs) {
		int frc = replay_filter(c, has_points, has_events);
		if (frc)
			return frc;
		has_points = has_points && sto_batch_nseries(c->b) > 0;
		has_events = has_events && sto_events_count(c->ev) > 0;
	}
	size_t n = has_points ? sto_batch_nseries(c->b) : 0;
	struct series_ent **ents = malloc((n ? n : 1) * sizeof(*ents));
	if (!ents)
		return -ENOMEM;
	int rc = n ? resolve_series(c->s, c->b, ents) : 0;
	if (rc == 0)
		rc = apply_request(c->s, c->s->active, has_points ? c->b : NULL, ents,
				   has_events ? c->ev : NULL, false);
	free(ents);
	c->points += n ? sto_batch_points(c->b) : 0;
	c->events += has_events ? sto_events_count(c->ev) : 0;
	return rc;
}

/* Splits a STO_WAL_REC_BATCH payload (format.h) and registers its id. */
static int replay_batch(struct replay_ctx *c, uint64_t gen, const uint8_t *p, size_t len)
{
	const uint8_t *end = p + len;
	if (len < 1 || (size_t)(end - p - 1) < p[0] || p[0] > STO_BATCH_ID_MAX)
		return RDB_ECORRUPT;
	const char *id = (const char *)p + 1;
	size_t il = p[0];
	p += 1 + il;
	const uint8_t *part[2];
	size_t plen[2];
	for (int i = 0; i < 2; i++) {
		if (end - p < 4 || (size_t)(end - p - 4) < rdb_get_le32(p))
			return RDB_ECORRUPT;
		plen[i] = rdb_get_le32(p);
		part[i] = p + 4;
		p += 4 + plen[i];
	}
	if (p != end)
		return RDB_ECORRUPT;
	int rc = plen[0] ? sto_batch_decode(c->b, part[0], plen[0]) : 0;
	if (rc == 0 && plen[1])
		rc = sto_events_decode(c->ev, part[1], plen[1]);
	if (rc == 0 && il) {
		struct batch_ent *e;
		uint64_t h = batch_hash(id, il);
		pthread_mutex_lock(&c->s->batch_lock);
		if (!batch_find(c->s, id, il, h))
			rc = batch_add(c->s, id, il, h, true, gen, &e);
		pthread_mutex_unlock(&c->s->batch_lock);
	}
	return rc ? rc : replay_apply(c, plen[0] > 0, plen[1] > 0);
}

static int replay_cb(void *arg, uint64_t gen, uint8_t type, const uint8_t *p, size_t len)
{
	struct replay_ctx *c = arg;
	int rc;
	c->gen = gen;
	if (type == STO_WAL_REC_POINTS) {
		rc = sto_batch_decode(c->b, p, len);
		if (rc == 0)
			return replay_apply(c, true, false);
	} else if (type == STO_WAL_REC_BATCH) {
		rc = replay_batch(c, gen, p, len);
		if (rc != RDB_ECORRUPT)
			return rc;
	} else {
		rdb_warn("store", "WAL generation %llu: skipping record of unknown type %u",
			 (unsigned long long)gen, type);
		return 0;
	}
	if (rc == RDB_ECORRUPT || rc == RDB_EINVAL) {
		rdb_error("store", "WAL generation %llu: a record with a valid checksum does not "
			  "parse (%s); skipping it", (unsigned long long)gen, rdb_strerror(rc));
		return 0;
	}
	return rc;
}

/* Replays WAL generations newer than the checkpoint into s->active and
 * checkpoints them. Sets s->active->gen to the newest generation seen. */
static int recover(struct sto *s)
{
	uint64_t *gens = NULL;
	size_t n = 0;
	int rc = drop_uncheckpointed(s);
	if (rc == 0)
		rc = sto_wal_list(s->wal_dir, &gens, &n);
	if (rc)
		return rc;
	uint64_t newest = s->ckpt_gen;
	struct replay_ctx c = {.s = s};
	rc = sto_batch_new(SIZE_MAX, SIZE_MAX, &c.b);
	if (rc == 0)
		rc = sto_events_new(SIZE_MAX, STO_WAL_MAX_PAYLOAD, &c.ev);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		if (gens[i] <= s->ckpt_gen)
			continue;
		struct sto_wal_replay_result res;
		rc = sto_wal_replay(s->wal_dir, gens[i], replay_cb, &c, &res);
		if (rc == 0)
			rdb_info("store", "replayed WAL generation %llu: %llu records, %llu of %llu "
				 "bytes", (unsigned long long)gens[i],
				 (unsigned long long)res.records,
				 (unsigned long long)res.valid_bytes,
				 (unsigned long long)res.file_bytes);
		newest = gens[i];
	}
	sto_batch_free(c.b);
	sto_events_free(c.ev);
	sto_batch_free(c.keep_b);
	sto_events_free(c.keep_ev);
	free(gens);
	if (rc)
		return rc;
	s->active->gen = newest;
	if (c.points || c.events)
		rdb_info("store", "recovered %llu points and %llu events from the WAL; sealing "
			 "them into chunks", (unsigned long long)c.points,
			 (unsigned long long)c.events);
	s->frozen = s->active;
	s->active = NULL;
	rc = finish_checkpoint(s);
	s->active = head_new(newest + 1);
	return rc ? rc : (s->active ? 0 : -ENOMEM);
}

static int open_index(struct sto *s)
{
	char path[PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/index", s->dir);
	int rc = sto_index_open(path, s->opt.index_map_bytes, &s->ix);
	if (rc)
		return rc;
	struct sto_txn *t;
	rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	uint64_t v;
	s->ckpt_gen = sto_meta_get(t, "ckpt_gen", &v) == 0 ? v : 0;
	s->next_uid = sto_meta_get(t, "next_chunk_uid", &v) == 0 ? v : 1;
	s->nseries = sto_meta_get(t, "next_series_id", &v) == 0 && v > 0 ? v - 1 : 0;
	sto_txn_abort(t);
	return 0;
}

static void init_locks(struct sto *s)
{
	pthread_rwlockattr_t a;
	pthread_rwlockattr_init(&a);
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&s->write_lock, &a);
	pthread_rwlock_init(&s->view_lock, &a);
	pthread_rwlock_init(&s->seg_lock, &a);
	pthread_rwlockattr_destroy(&a);
	pthread_mutex_init(&s->compact_lock, NULL);
	pthread_mutex_init(&s->head_lock, NULL);
	pthread_mutex_init(&s->series_lock, NULL);
	pthread_mutex_init(&s->batch_lock, NULL);
	pthread_mutex_init(&s->flush_lock, NULL);
	pthread_cond_init(&s->flush_cond, NULL);
	pthread_cond_init(&s->ckpt_cond, NULL);
}

static void destroy(struct sto *s)
{
	sto_wal_close(s->wal);
	sto_seg_close(s->seg);
	sto_ring_close(s->ring);
	sto_seg_readers_free(s->readers);
	head_free(s->active);
	head_free(s->frozen);
	sto_index_close(s->ix);
	cache_free(s);
	batch_free_all(s);
	free(s->seal_queue);
	lifecycle_free(s);
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	pthread_rwlock_destroy(&s->write_lock);
	pthread_rwlock_destroy(&s->view_lock);
	pthread_rwlock_destroy(&s->seg_lock);
	pthread_mutex_destroy(&s->compact_lock);
	pthread_mutex_destroy(&s->head_lock);
	pthread_mutex_destroy(&s->series_lock);
	pthread_mutex_destroy(&s->batch_lock);
	pthread_mutex_destroy(&s->flush_lock);
	pthread_cond_destroy(&s->flush_cond);
	pthread_cond_destroy(&s->ckpt_cond);
	free(s);
}

static int open_dirs(struct sto *s)
{
	int rc = make_dir(s->dir);
	if (rc == 0)
		rc = take_lock(s);
	if (rc == 0)
		rc = check_format(s->dir);
	if (rc == 0)
		rc = make_dir(s->wal_dir);
	if (rc == 0)
		rc = make_dir(s->seg_dir);
	return rc;
}

int sto_open(const struct sto_options *opt, struct sto **out)
{
	struct sto *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->opt = *opt;
	s->lock_fd = -1;
	init_locks(s);
	snprintf(s->dir, sizeof(s->dir), "%s", opt->data_dir);
	snprintf(s->wal_dir, sizeof(s->wal_dir), "%s/wal", s->dir);
	snprintf(s->seg_dir, sizeof(s->seg_dir), "%s/chunks", s->dir);
	s->opt.data_dir = s->dir;
	if (s->opt.chunk_max_points < 1 || s->opt.chunk_max_points > STO_CHUNK_MAX_POINTS)
		s->opt.chunk_max_points = STO_CHUNK_MAX_POINTS;
	int rc = open_dirs(s);
	if (rc == 0)
		rc = open_index(s);
	if (rc == 0)
		rc = lifecycle_open(s);
	if (rc == 0)
		rc = sto_seg_readers_new(s->seg_dir, &s->readers);
	if (rc == 0)
		rc = sto_ring_open(64, &s->ring);
	if (rc == 0) {
		s->active = head_new(s->ckpt_gen);
		rc = s->active ? recover(s) : -ENOMEM;
	}
	if (rc == 0) {
		struct sto_wal_options wo = {.dir = s->wal_dir, .gen = s->active->gen,
					     .sync = opt->sync, .queue_max_records = 4096};
		rc = sto_wal_open(&wo, &s->wal);
	}
	if (rc == 0) {
		rc = -pthread_create(&s->flusher, NULL, flusher_main, s);
		s->flusher_running = rc == 0;
	}
	if (rc) {
		rdb_error("store", "cannot open data directory %s: %s", s->dir, rdb_strerror(rc));
		destroy(s);
		return rc;
	}
	rdb_info("store", "opened %s: %llu series, checkpoint generation %llu, WAL generation "
		 "%llu, sync policy %s", s->dir, (unsigned long long)s->nseries,
		 (unsigned long long)s->ckpt_gen, (unsigned long long)s->active->gen,
		 opt->sync == STO_SYNC_NONE ? "none" : "fdatasync");
	*out = s;
	return 0;
}

void sto_close(struct sto *s)
{
	if (!s)
		return;
	atomic_store(&s->closing, true);
	/* Wait for writes in flight, then stop the flusher. */
	pthread_rwlock_wrlock(&s->write_lock);
	pthread_rwlock_unlock(&s->write_lock);
	pthread_mutex_lock(&s->flush_lock);
	s->stop = true;
	pthread_cond_broadcast(&s->flush_cond);
	pthread_cond_broadcast(&s->ckpt_cond);
	pthread_mutex_unlock(&s->flush_lock);
	if (s->flusher_running)
		pthread_join(s->flusher, NULL);
	/* Final checkpoint without rotation: seal the whole head under the
	 * current generation, then remove its WAL file. */
	int rc = 0;
	if (s->frozen)
		rc = finish_checkpoint(s);
	if (rc == 0) {
		s->frozen = s->active;
		s->active = NULL;
		sto_wal_close(s->wal);
		s->wal = NULL;
		rc = finish_checkpoint(s);
	}
	if (rc)
		rdb_error("store", "final checkpoint failed (%s); the WAL in %s still holds "
			  "every acknowledged point and is replayed at the next start",
			  rdb_strerror(rc), s->wal_dir);
	else
		rdb_info("store", "closed %s cleanly at checkpoint generation %llu", s->dir,
			 (unsigned long long)s->ckpt_gen);
	destroy(s);
}

/* ==== data lifecycle (storage/admin.h) ========================================
 *
 * Deletion: on the flusher thread, a checkpoint first (everything older is
 * in chunks), then, holding the write lock exclusively (no write in
 * flight): one LMDB transaction deletes the job's chunk entries, event
 * chunk entries and series entries and records the tombstone (job, T) with
 * T the active WAL generation; the job's head data is dropped; the WAL is
 * rotated to T + 1 before the write lock is released. So every record of
 * the job written before the delete is in a generation <= T (skipped at
 * replay) and every record written after it is in a generation > T.
 * Writers that resolved series ids before the delete see del_epoch change
 * and resolve again.
 *
 * Compaction: on the flusher thread under compact_lock. A segment other
 * than the one being written whose live bytes (index entries pointing into
 * it) are below compact_min_live of its size is copied, record by record
 * (each verified), into a new segment; meta compact_out = new id + 1 is
 * committed first. The new segment is synced, then one transaction
 * repoints every entry (same key and uid, new segment/offset), adds the old
 * id to seg_trash and clears compact_out. Then the segment readers are
 * swapped (no fd keeps the old file), the old file is unlinked and its
 * trash entry removed. At open, a set compact_out means an unfinished copy
 * (its file is removed) and every seg_trash id is unlinked. A reader whose
 * snapshot predates the switch gets ENOENT and looks its chunk up again.
 */

static int seg_read(struct sto *s, uint64_t id, uint64_t off, void *buf, size_t len)
{
	pthread_rwlock_rdlock(&s->seg_lock);
	int rc = sto_seg_read(s->readers, id, off, buf, len);
	pthread_rwlock_unlock(&s->seg_lock);
	return rc;
}

int sto_admin_seg_read(struct sto *s, uint64_t id, uint64_t off, void *buf, size_t len)
{
	return seg_read(s, id, off, buf, len);
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

static int ev_where_cb(void *arg, int64_t min_ts_ns, uint64_t uid, const uint8_t *val, size_t len)
{
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

void sto_lifecycle_default(struct sto_lifecycle *l)
{
	l->retention_s = 0;
	l->retention_check_s = 3600;
	l->compact_min_live = 0.5;
}

void sto_set_lifecycle(struct sto *s, const struct sto_lifecycle *l)
{
	pthread_mutex_lock(&s->flush_lock);
	s->life = *l;
	pthread_mutex_unlock(&s->flush_lock);
}

static bool tomb_skips(const struct sto *s, const char *job, size_t jl, uint64_t gen)
{
	for (size_t i = 0; i < s->ntombs; i++)
		if (gen <= s->tombs[i].gen && strlen(s->tombs[i].job) == jl &&
		    memcmp(s->tombs[i].job, job, jl) == 0)
			return true;
	return false;
}

static int tomb_note(struct sto *s, const char *job, uint64_t gen)
{
	for (size_t i = 0; i < s->ntombs; i++)
		if (strcmp(s->tombs[i].job, job) == 0) {
			s->tombs[i].gen = gen;
			return 0;
		}
	struct tomb *p = realloc(s->tombs, (s->ntombs + 1) * sizeof(*p));
	if (!p)
		return -ENOMEM;
	s->tombs = p;
	snprintf(p[s->ntombs].job, sizeof(p[s->ntombs].job), "%s", job);
	p[s->ntombs++].gen = gen;
	return 0;
}

static int tomb_load_cb(void *arg, const char *job, uint64_t gen)
{
	return tomb_note(arg, job, gen);
}

static int fsync_dir_path(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) ? -errno : 0;
	close(fd);
	return rc;
}

static int unlink_segment(struct sto *s, uint64_t id)
{
	char path[PATH_MAX + 64];
	sto_seg_path(s->seg_dir, id, path, sizeof(path));
	if (unlink(path) != 0 && errno != ENOENT) {
		int rc = -errno;
		rdb_warn("store", "cannot remove compacted segment %s: %s", path, strerror(-rc));
		return rc;
	}
	return fsync_dir_path(s->seg_dir);
}

struct id_list {
	uint64_t *v;
	size_t n, cap;
};

static int id_push(struct id_list *l, uint64_t v)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		uint64_t *p = realloc(l->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		l->v = p;
		l->cap = cap;
	}
	l->v[l->n++] = v;
	return 0;
}

static int id_push_cb(void *arg, uint64_t v)
{
	return id_push(arg, v);
}

/* Unlinks the files in seg_trash and forgets them. */
static int empty_trash(struct sto *s)
{
	struct id_list l = {0};
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, true, &t);
	if (rc)
		return rc;
	rc = sto_trash_scan(t, id_push_cb, &l);
	for (size_t i = 0; rc == 0 && i < l.n; i++) {
		rc = unlink_segment(s, l.v[i]);
		if (rc == 0)
			rc = sto_trash_del(t, l.v[i]);
	}
	if (rc == 0)
		rc = sto_txn_commit(t);
	else
		sto_txn_abort(t);
	free(l.v);
	return rc;
}

/* Open hook: tombstones into memory, leftovers of an interrupted compaction. */
static int lifecycle_open(struct sto *s)
{
	sto_lifecycle_default(&s->life);
	s->last_retention_mono_ns = rdb_now_mono_ns();
	struct sto_txn *t;
	uint64_t out = 0;
	int rc = sto_txn_begin(s->ix, true, &t);
	if (rc)
		return rc;
	rc = sto_jobval_scan(t, STO_JOBDB_TOMBSTONE, tomb_load_cb, s);
	if (rc == 0 && sto_meta_get(t, "compact_out", &out) == 0 && out) {
		rdb_warn("store", "a compaction was interrupted: removing its unfinished segment "
			 "%llu (the index never pointed at it)", (unsigned long long)(out - 1));
		unlink_segment(s, out - 1);
		rc = sto_meta_put(t, "compact_out", 0);
	}
	if (rc == 0)
		rc = sto_txn_commit(t);
	else
		sto_txn_abort(t);
	return rc ? rc : empty_trash(s);
}

static void lifecycle_free(struct sto *s)
{
	while (s->dead_ents) {
		struct series_ent *e = s->dead_ents;
		s->dead_ents = e->next;
		free(e);
	}
	free(s->tombs);
}

/* ---- flusher work queue -------------------------------------------------------- */

typedef int (*admin_fn)(struct sto *s, void *arg);

struct admin_op {
	admin_fn fn;
	void *arg;
	int rc;
	bool started, done;
	struct admin_op *next;
};

/* Runs fn(s, arg) on the flusher thread and waits for it. */
static int run_on_flusher(struct sto *s, admin_fn fn, void *arg)
{
	struct admin_op op = {.fn = fn, .arg = arg};
	pthread_mutex_lock(&s->flush_lock);
	if (s->stop || !s->flusher_running) {
		pthread_mutex_unlock(&s->flush_lock);
		return -ESHUTDOWN;
	}
	struct admin_op **pp = &s->ops;
	while (*pp)
		pp = &(*pp)->next;
	*pp = &op;
	pthread_cond_signal(&s->flush_cond);
	while (!op.done && !(s->stop && !op.started))
		pthread_cond_wait(&s->ckpt_cond, &s->flush_lock);
	if (!op.done) {
		for (pp = &s->ops; *pp; pp = &(*pp)->next)
			if (*pp == &op) {
				*pp = op.next;
				break;
			}
		op.rc = -ESHUTDOWN;
	}
	pthread_mutex_unlock(&s->flush_lock);
	return op.rc;
}

static void run_admin_ops(struct sto *s)
{
	for (;;) {
		pthread_mutex_lock(&s->flush_lock);
		struct admin_op *op = s->ops;
		if (op) {
			s->ops = op->next;
			op->started = true;
		}
		pthread_mutex_unlock(&s->flush_lock);
		if (!op)
			return;
		int rc = op->fn(s, op->arg);
		pthread_mutex_lock(&s->flush_lock);
		op->rc = rc;
		op->done = true;
		pthread_cond_broadcast(&s->ckpt_cond);
		pthread_mutex_unlock(&s->flush_lock);
	}
}

/* ---- statistics ------------------------------------------------------------------ */

struct name_list {
	char (*v)[STO_JOB_MAX + 1];
	size_t n, cap;
};

static int name_push(struct name_list *l, const char *job)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		void *p = realloc(l->v, cap * sizeof(*l->v));
		if (!p)
			return -ENOMEM;
		l->v = p;
		l->cap = cap;
	}
	snprintf(l->v[l->n++], STO_JOB_MAX + 1, "%s", job);
	return 0;
}

static int job_name_cb(void *arg, const char *job, uint64_t nseries)
{
	(void)nseries;
	return name_push(arg, job);
}

static int series_id_cb(void *arg, const struct sto_series_key *k, uint64_t id)
{
	(void)k;
	return id_push(arg, id);
}

static int stats_chunk_cb(void *arg, const struct sto_chunk_ref *ref)
{
	struct sto_job_stats *js = arg;
	js->chunks++;
	js->points += ref->stats.count;
	js->chunk_bytes += ref->length;
	return 0;
}

static int stats_ev_cb(void *arg, int64_t min_ts_ns, uint64_t uid, const uint8_t *val, size_t len)
{
	struct sto_job_stats *js = arg;
	struct ev_entry e;
	(void)min_ts_ns;
	(void)uid;
	int rc = eve_decode(val, len, &e);
	if (rc == 0) {
		js->event_chunks++;
		js->events += e.count;
		js->event_bytes += e.length;
	}
	return rc;
}

static uint64_t head_points_of(struct sto *s, const struct id_list *ids, const char *job)
{
	uint64_t n = 0;
	pthread_mutex_lock(&s->head_lock);
	struct head *heads[2] = {s->frozen, s->active};
	for (int h = 0; h < 2; h++) {
		if (!heads[h])
			continue;
		for (size_t i = 0; i < ids->n; i++) {
			struct head_series *hs = rdb_map_get(&heads[h]->series, ids->v[i]);
			n += hs ? hs->pts.n : 0;
		}
		struct ev_job *j = evh_job(heads[h]->ev, job);
		n += j ? j->n : 0;
	}
	pthread_mutex_unlock(&s->head_lock);
	return n;
}

static int job_stats(struct sto *s, struct sto_txn *t, const char *job, struct sto_job_stats *js)
{
	struct id_list ids = {0};
	uint64_t ret_s = 0;
	memset(js, 0, sizeof(*js));
	snprintf(js->job, sizeof(js->job), "%s", job);
	int rc = sto_series_scan(t, job, series_id_cb, &ids);
	for (size_t i = 0; rc == 0 && i < ids.n; i++)
		rc = sto_chunk_scan(t, ids.v[i], INT64_MIN, INT64_MAX, stats_chunk_cb, js);
	if (rc == 0)
		rc = sto_evidx_scan(t, job, INT64_MAX, stats_ev_cb, js);
	js->series = ids.n;
	js->head_points = head_points_of(s, &ids, job);
	js->retention_s = sto_jobval_get(t, STO_JOBDB_RETENTION, job, &ret_s) == 0 ?
				  ret_s : s->life.retention_s;
	free(ids.v);
	return rc;
}

int sto_stats_jobs(struct sto *s, const char *job, sto_job_stats_fn fn, void *arg)
{
	struct name_list names = {0};
	struct sto_txn *t;
	struct sto_job_stats js;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	rc = job ? name_push(&names, job) : sto_jobs_scan(t, job_name_cb, &names);
	for (size_t i = 0; rc == 0 && i < names.n; i++) {
		rc = job_stats(s, t, names.v[i], &js);
		if (rc == 0 && job && js.series == 0 && js.event_chunks == 0 && js.head_points == 0)
			rc = RDB_ENOTFOUND;
		if (rc == 0)
			rc = fn(arg, &js);
	}
	sto_txn_abort(t);
	free(names.v);
	return rc;
}

static uint64_t dir_bytes(const char *dir, const char *prefix, uint64_t *files)
{
	uint64_t total = 0;
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL) {
		char path[PATH_MAX + 300];
		struct stat st;
		if (strncmp(de->d_name, prefix, strlen(prefix)) != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
			total += (uint64_t)st.st_size;
			if (files)
				(*files)++;
		}
	}
	if (d)
		closedir(d);
	return total;
}

static int live_chunk_cb(void *arg, const struct sto_chunk_ref *ref)
{
	*(uint64_t *)arg += ref->length;
	return 0;
}

static int live_ev_cb(void *arg, const char *job, int64_t min_ts_ns, uint64_t uid,
		      const uint8_t *val, size_t len)
{
	struct ev_entry e;
	(void)job;
	(void)min_ts_ns;
	(void)uid;
	int rc = eve_decode(val, len, &e);
	if (rc == 0)
		*(uint64_t *)arg += e.length;
	return rc;
}

static int count_cb(void *arg, uint64_t v)
{
	(void)v;
	(*(uint64_t *)arg)++;
	return 0;
}

int sto_disk_stats(struct sto *s, struct sto_disk_stats *out)
{
	char ixdir[PATH_MAX + 16];
	memset(out, 0, sizeof(*out));
	snprintf(ixdir, sizeof(ixdir), "%s/index", s->dir);
	out->segment_bytes = dir_bytes(s->seg_dir, "seg-", &out->segment_files);
	out->wal_bytes = dir_bytes(s->wal_dir, "wal-", NULL);
	out->index_bytes = dir_bytes(ixdir, "", NULL);
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	rc = sto_chunk_scan_all(t, live_chunk_cb, &out->live_bytes);
	if (rc == 0)
		rc = sto_evidx_scan_all(t, live_ev_cb, &out->live_bytes);
	if (rc == 0)
		rc = sto_quarantine_scan(t, count_cb, &out->quarantined);
	sto_txn_abort(t);
	return rc;
}

/* ---- delete a job ------------------------------------------------------------------ */

struct key_list {
	struct sto_chunk_ref *v; /* series_id, stats.min_ts_ns, uid (+ count) used */
	size_t n, cap;
};

static int key_push(void *arg, const struct sto_chunk_ref *ref)
{
	struct key_list *l = arg;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct sto_chunk_ref *p = realloc(l->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		l->v = p;
		l->cap = cap;
	}
	l->v[l->n++] = *ref;
	return 0;
}

struct ev_key {
	char job[STO_JOB_MAX + 1];
	int64_t min_ts_ns, max_ts_ns;
	uint64_t uid, count;
};

struct evkey_list {
	struct ev_key *v;
	size_t n, cap;
	const char *job;  /* delete: only this job */
	int64_t cutoff;   /* retention: entries with max_ts < cutoff (job's own) */
	struct sto *s;
	struct sto_txn *t;
};

static int evkey_push(struct evkey_list *l, const char *job, int64_t min_ts, uint64_t uid,
		      const struct ev_entry *e)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct ev_key *p = realloc(l->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		l->v = p;
		l->cap = cap;
	}
	struct ev_key *k = &l->v[l->n++];
	snprintf(k->job, sizeof(k->job), "%s", job);
	k->min_ts_ns = min_ts;
	k->max_ts_ns = e->max_ts_ns;
	k->uid = uid;
	k->count = e->count;
	return 0;
}

static int del_ev_cb(void *arg, int64_t min_ts_ns, uint64_t uid, const uint8_t *val, size_t len)
{
	struct evkey_list *l = arg;
	struct ev_entry e;
	int rc = eve_decode(val, len, &e);
	return rc ? rc : evkey_push(l, l->job, min_ts_ns, uid, &e);
}

struct del_job {
	const char *job;
	struct sto_delete_result *res;
	struct key_list series;  /* series keys: ref.series_id = id */
	struct sto_series_key *keys;
	struct key_list chunks;
	struct evkey_list ev;
};

static int del_series_cb(void *arg, const struct sto_series_key *k, uint64_t id)
{
	struct del_job *d = arg;
	struct sto_series_key *p = realloc(d->keys, (d->series.n + 1) * sizeof(*p));
	if (!p)
		return -ENOMEM;
	d->keys = p;
	p[d->series.n] = *k;
	struct sto_chunk_ref ref = {.series_id = id};
	return key_push(&d->series, &ref);
}

/* Collects everything of the job in the index (read snapshot). */
static int del_collect(struct sto *s, struct del_job *d)
{
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	d->ev.job = d->job;
	rc = sto_series_scan(t, d->job, del_series_cb, d);
	for (size_t i = 0; rc == 0 && i < d->series.n; i++)
		rc = sto_chunk_scan(t, d->series.v[i].series_id, INT64_MIN, INT64_MAX, key_push,
				    &d->chunks);
	if (rc == 0)
		rc = sto_evidx_scan(t, d->job, INT64_MAX, del_ev_cb, &d->ev);
	sto_txn_abort(t);
	return rc;
}

static int del_index(struct sto *s, struct sto_txn *t, struct del_job *d, uint64_t gen)
{
	int rc = 0;
	(void)s;
	for (size_t i = 0; rc == 0 && i < d->chunks.n; i++) {
		const struct sto_chunk_ref *r = &d->chunks.v[i];
		rc = sto_chunk_del(t, r->series_id, r->stats.min_ts_ns, r->uid);
		rc = rc == RDB_ENOTFOUND ? 0 : rc;
	}
	for (size_t i = 0; rc == 0 && i < d->ev.n; i++) {
		rc = sto_evidx_del(t, d->job, d->ev.v[i].min_ts_ns, d->ev.v[i].uid);
		rc = rc == RDB_ENOTFOUND ? 0 : rc;
	}
	for (size_t i = 0; rc == 0 && i < d->series.n; i++)
		rc = sto_series_del(t, &d->keys[i], d->series.v[i].series_id);
	if (rc == 0)
		rc = sto_jobval_put(t, STO_JOBDB_TOMBSTONE, d->job, gen);
	return rc;
}

/* Drops the job's points and events from the active head. Caller holds
 * head_lock (and the write lock exclusively: frozen is NULL). */
static void del_head(struct sto *s, struct del_job *d)
{
	struct head *h = s->active;
	for (size_t i = 0; i < d->series.n; i++) {
		struct head_series *hs = rdb_map_get(&h->series, d->series.v[i].series_id);
		if (!hs)
			continue;
		uint64_t freed = cols_bytes(&hs->pts) + HEAD_SERIES_OVERHEAD;
		h->points -= hs->pts.n;
		rdb_map_del(&h->series, d->series.v[i].series_id);
		sto_cols_free(&hs->pts);
		free(hs);
		h->bytes -= freed;
		atomic_fetch_sub(&s->head_bytes, freed);
	}
	struct ev_job *j = evh_job(h->ev, d->job);
	if (j) {
		uint64_t freed = evh_consume(h->ev, j, j->n);
		h->bytes -= freed;
		atomic_fetch_sub(&s->head_bytes, freed);
	}
}

/* Unlinks the job's series from the cache (entries kept until close: a
 * writer may still hold them; del_epoch makes it resolve again). */
static void del_cache(struct sto *s, struct del_job *d)
{
	pthread_mutex_lock(&s->series_lock);
	job_counts_reset(s);
	for (size_t i = 0; i < d->series.n; i++) {
		struct series_ent *e = rdb_map_get(&s->series_by_id, d->series.v[i].series_id);
		if (!e)
			continue;
		rdb_map_del(&s->series_by_id, e->id);
		struct series_ent *first = rdb_map_get(&s->series_by_hash, e->hash);
		if (first == e) {
			if (e->next)
				rdb_map_put(&s->series_by_hash, e->hash, e->next);
			else
				rdb_map_del(&s->series_by_hash, e->hash);
		} else {
			for (struct series_ent *p = first; p; p = p->next)
				if (p->next == e) {
					p->next = e->next;
					break;
				}
		}
		e->next = s->dead_ents;
		s->dead_ents = e;
	}
	atomic_fetch_add(&s->del_epoch, 1);
	pthread_mutex_unlock(&s->series_lock);
}

/* Rotates the WAL and the active head. Caller holds the write lock
 * exclusively and frozen is NULL. */
static int rotate_locked(struct sto *s)
{
	uint64_t gen = s->active->gen + 1;
	struct head *fresh = head_new(gen);
	if (!fresh)
		return -ENOMEM;
	int rc = sto_wal_rotate(s->wal, gen);
	if (rc) {
		head_free(fresh);
		return rc;
	}
	pthread_mutex_lock(&s->head_lock);
	s->frozen = s->active;
	s->active = fresh;
	s->seal_queue_n = 0;
	pthread_mutex_unlock(&s->head_lock);
	return 0;
}

static bool head_has_job_events(struct sto *s, const char *job)
{
	pthread_mutex_lock(&s->head_lock);
	bool has = evh_job(s->active->ev, job) != NULL;
	pthread_mutex_unlock(&s->head_lock);
	return has;
}

static int delete_job_op(struct sto *s, void *arg)
{
	struct del_job *d = arg;
	int rc = checkpoint(s);
	if (rc == 0)
		rc = del_collect(s, d);
	if (rc == 0 && d->series.n == 0 && d->ev.n == 0 && !head_has_job_events(s, d->job))
		rc = RDB_ENOTFOUND;
	if (rc)
		return rc;
	struct sto_txn *t = NULL;
	pthread_rwlock_wrlock(&s->write_lock);
	uint64_t gen = s->active->gen;
	rc = sto_txn_begin(s->ix, true, &t);
	if (rc == 0)
		rc = del_index(s, t, d, gen);
	if (rc == 0)
		rc = tomb_note(s, d->job, gen);
	if (rc) {
		sto_txn_abort(t);
		pthread_rwlock_unlock(&s->write_lock);
		return rc;
	}
	pthread_rwlock_wrlock(&s->view_lock);
	rc = sto_txn_commit(t);
	if (rc == 0) {
		pthread_mutex_lock(&s->head_lock);
		del_head(s, d);
		pthread_mutex_unlock(&s->head_lock);
	}
	pthread_rwlock_unlock(&s->view_lock);
	if (rc == 0) {
		del_cache(s, d);
		rc = rotate_locked(s);
		if (rc)
			rdb_error("store", "job %s deleted, but the WAL could not be rotated (%s); "
				  "writes to it before the next checkpoint may be lost at a crash",
				  d->job, rdb_strerror(rc));
	}
	pthread_rwlock_unlock(&s->write_lock);
	if (rc)
		return rc;
	d->res->series = d->series.n;
	d->res->chunks = d->chunks.n;
	d->res->event_chunks = d->ev.n;
	d->res->tombstone_gen = gen;
	rdb_info("store", "deleted job %s: %zu series, %zu chunks, %zu event chunks (tombstone "
		 "at WAL generation %llu); compaction reclaims the space", d->job, d->series.n,
		 d->chunks.n, d->ev.n, (unsigned long long)gen);
	return finish_checkpoint(s);
}

int sto_delete_job(struct sto *s, const char *job, struct sto_delete_result *r)
{
	if (!job || !sto_job_valid(job, strlen(job)))
		return RDB_EINVAL;
	struct del_job d = {.job = job, .res = r};
	memset(r, 0, sizeof(*r));
	int rc = run_on_flusher(s, delete_job_op, &d);
	free(d.series.v);
	free(d.keys);
	free(d.chunks.v);
	free(d.ev.v);
	return rc;
}

/* ---- retention ------------------------------------------------------------------------ */

struct ret_ctx {
	struct sto *s;
	struct name_list jobs;   /* jobs with an override ... */
	uint64_t *secs;          /* ... and its seconds */
	int64_t now_ns;
	uint64_t ckpt_gen;
	struct key_list chunks;
	struct evkey_list ev;
	int64_t cutoff;          /* of the job being scanned */
};

static int ret_override_cb(void *arg, const char *job, uint64_t secs)
{
	struct ret_ctx *c = arg;
	uint64_t *p = realloc(c->secs, (c->jobs.n + 1) * sizeof(*p));
	if (!p)
		return -ENOMEM;
	c->secs = p;
	p[c->jobs.n] = secs;
	return name_push(&c->jobs, job);
}

/* INT64_MIN: keep everything of job. */
static int64_t ret_cutoff(const struct ret_ctx *c, const char *job)
{
	uint64_t secs = c->s->life.retention_s;
	for (size_t i = 0; i < c->jobs.n; i++)
		if (strcmp(c->jobs.v[i], job) == 0)
			secs = c->secs[i];
	if (secs == 0 || secs > (uint64_t)INT64_MAX / 1000000000ull)
		return INT64_MIN;
	return c->now_ns - (int64_t)(secs * 1000000000ull);
}

static int ret_chunk_cb(void *arg, const struct sto_chunk_ref *ref)
{
	struct ret_ctx *c = arg;
	if (ref->stats.max_ts_ns >= c->cutoff || ref->gen > c->ckpt_gen)
		return 0;
	return key_push(&c->chunks, ref);
}

static int ret_series_cb(void *arg, const struct sto_series_key *k, uint64_t id)
{
	struct ret_ctx *c = arg;
	(void)k;
	return sto_chunk_scan(c->ev.t, id, INT64_MIN, c->cutoff, ret_chunk_cb, c);
}

static int ret_ev_cb(void *arg, const char *job, int64_t min_ts_ns, uint64_t uid,
		     const uint8_t *val, size_t len)
{
	struct ret_ctx *c = arg;
	struct ev_entry e;
	int rc = eve_decode(val, len, &e);
	if (rc || e.max_ts_ns >= ret_cutoff(c, job) || e.gen > c->ckpt_gen)
		return rc;
	return evkey_push(&c->ev, job, min_ts_ns, uid, &e);
}

static int ret_job_cb(void *arg, const char *job, uint64_t nseries)
{
	struct ret_ctx *c = arg;
	(void)nseries;
	c->cutoff = ret_cutoff(c, job);
	if (c->cutoff == INT64_MIN)
		return 0;
	return sto_series_scan(c->ev.t, job, ret_series_cb, c);
}

/* Deletes the collected entries, at most 50000 per transaction. */
static int ret_drop(struct sto *s, struct ret_ctx *c, struct sto_retention_result *r)
{
	size_t i = 0, k = 0;
	int rc = 0;
	while (rc == 0 && (i < c->chunks.n || k < c->ev.n)) {
		struct sto_txn *t;
		rc = sto_txn_begin(s->ix, true, &t);
		if (rc)
			break;
		for (size_t n = 0; rc == 0 && n < 50000 && i < c->chunks.n; n++, i++) {
			const struct sto_chunk_ref *ref = &c->chunks.v[i];
			rc = sto_chunk_del(t, ref->series_id, ref->stats.min_ts_ns, ref->uid);
			rc = rc == RDB_ENOTFOUND ? 0 : rc;
			r->chunks++;
			r->points += ref->stats.count;
		}
		for (size_t n = 0; rc == 0 && n < 50000 && k < c->ev.n; n++, k++) {
			rc = sto_evidx_del(t, c->ev.v[k].job, c->ev.v[k].min_ts_ns, c->ev.v[k].uid);
			rc = rc == RDB_ENOTFOUND ? 0 : rc;
			r->event_chunks++;
			r->events += c->ev.v[k].count;
		}
		if (rc == 0)
			rc = sto_txn_commit(t);
		else
			sto_txn_abort(t);
	}
	return rc;
}

static int retention_op(struct sto *s, void *arg)
{
	struct sto_retention_result *r = arg;
	struct ret_ctx c = {.s = s, .now_ns = rdb_now_ns(), .ckpt_gen = s->ckpt_gen};
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	c.ev.t = t;
	rc = sto_jobval_scan(t, STO_JOBDB_RETENTION, ret_override_cb, &c);
	if (rc == 0)
		rc = sto_jobs_scan(t, ret_job_cb, &c);
	if (rc == 0)
		rc = sto_evidx_scan_all(t, ret_ev_cb, &c);
	sto_txn_abort(t);
	if (rc == 0)
		rc = ret_drop(s, &c, r);
	if (rc == 0 && (r->chunks || r->event_chunks))
		rdb_info("store", "retention dropped %llu chunks (%llu points) and %llu event "
			 "chunks; compaction reclaims the space", (unsigned long long)r->chunks,
			 (unsigned long long)r->points, (unsigned long long)r->event_chunks);
	free(c.jobs.v);
	free(c.secs);
	free(c.chunks.v);
	free(c.ev.v);
	return rc;
}

static int retention_run_op(struct sto *s, void *arg)
{
	int rc = checkpoint(s); /* everything sealed and checkpointed is eligible */
	return rc ? rc : retention_op(s, arg);
}

int sto_retention_run(struct sto *s, struct sto_retention_result *r)
{
	memset(r, 0, sizeof(*r));
	return run_on_flusher(s, retention_run_op, r);
}

static int retention_write(struct sto *s, const char *job, bool set, uint64_t seconds)
{
	if (!job || !sto_job_valid(job, strlen(job)))
		return RDB_EINVAL;
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, true, &t);
	if (rc)
		return rc;
	rc = set ? sto_jobval_put(t, STO_JOBDB_RETENTION, job, seconds) :
		   sto_jobval_del(t, STO_JOBDB_RETENTION, job);
	if (rc == 0)
		return sto_txn_commit(t);
	sto_txn_abort(t);
	return rc;
}

int sto_retention_set(struct sto *s, const char *job, uint64_t seconds)
{
	return retention_write(s, job, true, seconds);
}

int sto_retention_clear(struct sto *s, const char *job)
{
	return retention_write(s, job, false, 0);
}

int sto_retention_list(struct sto *s, sto_jobval_fn fn, void *arg)
{
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	rc = sto_jobval_scan(t, STO_JOBDB_RETENTION, fn, arg);
	sto_txn_abort(t);
	return rc;
}

/* ---- compaction ------------------------------------------------------------------------- */

struct ev_move {
	char job[STO_JOB_MAX + 1];
	int64_t min_ts_ns;
	uint64_t uid;
	struct ev_entry e;
	uint8_t *val; /* owned copy of the entry (bloom inside) */
	size_t len;
};

struct seg_set {
	uint64_t seg;              /* the segment being compacted */
	struct key_list chunks;    /* its point chunks */
	struct ev_move *ev;        /* its event chunks */
	size_t nev, evcap;
	struct rdb_map live;       /* all segments: id + 1 -> live bytes (as a pointer value) */
};

static void live_add(struct rdb_map *m, uint64_t seg, uint64_t bytes)
{
	uintptr_t cur = (uintptr_t)rdb_map_get(m, seg + 1);
	rdb_map_put(m, seg + 1, (void *)(cur + (uintptr_t)bytes));
}

static int set_chunk_cb(void *arg, const struct sto_chunk_ref *ref)
{
	struct seg_set *ss = arg;
	live_add(&ss->live, ref->segment_id, ref->length);
	return ref->segment_id == ss->seg ? key_push(&ss->chunks, ref) : 0;
}

static int set_ev_cb(void *arg, const char *job, int64_t min_ts_ns, uint64_t uid,
		     const uint8_t *val, size_t len)
{
	struct seg_set *ss = arg;
	struct ev_entry e;
	int rc = eve_decode(val, len, &e);
	if (rc)
		return rc;
	live_add(&ss->live, e.segment_id, e.length);
	if (e.segment_id != ss->seg)
		return 0;
	if (ss->nev == ss->evcap) {
		size_t cap = ss->evcap ? ss->evcap * 2 : 16;
		struct ev_move *p = realloc(ss->ev, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		ss->ev = p;
		ss->evcap = cap;
	}
	struct ev_move *m = &ss->ev[ss->nev];
	m->val = malloc(len);
	if (!m->val)
		return -ENOMEM;
	memcpy(m->val, val, len);
	m->len = len;
	snprintf(m->job, sizeof(m->job), "%s", job);
	m->min_ts_ns = min_ts_ns;
	m->uid = uid;
	ss->nev++;
	return eve_decode(m->val, len, &m->e);
}

static void set_free(struct seg_set *ss)
{
	for (size_t i = 0; i < ss->nev; i++)
		free(ss->ev[i].val);
	free(ss->ev);
	free(ss->chunks.v);
	rdb_map_free(&ss->live);
	memset(ss, 0, sizeof(*ss));
}

/* Index snapshot: live bytes of every segment, entries of segment seg. */
static int set_collect(struct sto *s, struct seg_set *ss, uint64_t seg)
{
	struct sto_txn *t;
	set_free(ss);
	ss->seg = seg;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	rc = sto_chunk_scan_all(t, set_chunk_cb, ss);
	if (rc == 0)
		rc = sto_evidx_scan_all(t, set_ev_cb, ss);
	sto_txn_abort(t);
	return rc;
}

/* Copies one verified record into buf; *new_off is where it will land. */
static int copy_record(struct sto *s, struct rdb_buf *buf, uint64_t seg, uint64_t off, uint32_t len,
		       uint32_t magic, uint64_t series_id, uint64_t uid)
{
	const uint8_t *payload;
	size_t plen;
	const char *why = NULL;
	size_t at = buf->len;
	int rc = rdb_buf_reserve(buf, len);
	if (rc == 0)
		rc = seg_read(s, seg, off, buf->data + at, len);
	if (rc == 0)
		rc = sto_chunk_check(buf->data + at, len, magic, series_id, uid, &payload, &plen, &why);
	if (rc == 0)
		buf->len = at + len;
	else
		rdb_warn("store", "compaction of segment %llu: record at offset %llu is unusable "
			 "(%s); the segment is left as it is (run rankctl verify)",
			 (unsigned long long)seg, (unsigned long long)off,
			 why ? why : rdb_strerror(rc));
	return rc;
}

/* Writes every live record of ss->seg into the new segment w, updating
 * the refs / entries in place to their new place. */
static int compact_copy(struct sto *s, struct seg_set *ss, struct sto_seg_writer *w)
{
	struct rdb_buf buf;
	rdb_buf_init(&buf, SEAL_BUF_MAX + STO_CHUNK_HEADER_SIZE + STO_CHUNK_MAX_PAYLOAD);
	int rc = 0;
	size_t total = ss->chunks.n + ss->nev;
	for (size_t i = 0; rc == 0 && i < total; i++) {
		uint64_t new_off = sto_seg_size(w) + buf.len;
		if (i < ss->chunks.n) {
			struct sto_chunk_ref *r = &ss->chunks.v[i];
			rc = copy_record(s, &buf, ss->seg, r->offset, r->length, STO_CHUNK_MAGIC,
					 r->series_id, r->uid);
			r->segment_id = sto_seg_id(w);
			r->offset = new_off;
		} else {
			struct ev_move *m = &ss->ev[i - ss->chunks.n];
			rc = copy_record(s, &buf, ss->seg, m->e.offset, m->e.length, STO_EVCHUNK_MAGIC, 0,
					 m->uid);
			m->e.segment_id = sto_seg_id(w);
			m->e.offset = new_off;
		}
		if (rc == 0 && (buf.len >= SEAL_BUF_MAX || i + 1 == total)) {
			rc = sto_seg_append(w, buf.data, buf.len);
			buf.len = 0;
		}
	}
	rdb_buf_free(&buf);
	return rc;
}

/* The index switch: every entry repointed, the old segment into trash. */
static int compact_switch(struct sto *s, struct seg_set *ss)
{
	struct rdb_buf entry;
	struct sto_txn *t;
	rdb_buf_init(&entry, 1u << 20);
	int rc = sto_txn_begin(s->ix, true, &t);
	if (rc)
		goto out;
	for (size_t i = 0; rc == 0 && i < ss->chunks.n; i++)
		rc = sto_chunk_put(t, &ss->chunks.v[i]);
	for (size_t i = 0; rc == 0 && i < ss->nev; i++) {
		struct ev_move *m = &ss->ev[i];
		entry.len = 0;
		m->e.uid = m->uid;
		rc = eve_encode(&m->e, m->e.bloom, &entry);
		if (rc == 0)
			rc = sto_evidx_put(t, m->job, m->min_ts_ns, m->uid, entry.data, entry.len);
	}
	if (rc == 0)
		rc = sto_trash_add(t, ss->seg);
	if (rc == 0)
		rc = sto_meta_put(t, "compact_out", 0);
	if (rc) {
		sto_txn_abort(t);
		goto out;
	}
	pthread_rwlock_wrlock(&s->view_lock);
	rc = sto_txn_commit(t);
	pthread_rwlock_unlock(&s->view_lock);
out:
	rdb_buf_free(&entry);
	return rc;
}

/* After the switch: no cached fd may keep the old file alive. */
static int drop_old_segment(struct sto *s)
{
	struct sto_seg_readers *fresh = NULL, *old;
	int rc = sto_seg_readers_new(s->seg_dir, &fresh);
	if (rc)
		return rc;
	pthread_rwlock_wrlock(&s->seg_lock);
	old = s->readers;
	s->readers = fresh;
	pthread_rwlock_unlock(&s->seg_lock);
	sto_seg_readers_free(old);
	return empty_trash(s);
}

static int compact_begin(struct sto *s, uint64_t *new_id)
{
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, true, &t);
	if (rc)
		return rc;
	rc = sto_meta_next(t, "next_segment_id", new_id);
	if (rc == 0)
		rc = sto_meta_put(t, "compact_out", *new_id + 1);
	if (rc == 0)
		return sto_txn_commit(t);
	sto_txn_abort(t);
	return rc;
}

static void compact_abandon(struct sto *s, uint64_t new_id)
{
	struct sto_txn *t;
	unlink_segment(s, new_id);
	if (sto_txn_begin(s->ix, true, &t) != 0)
		return;
	if (sto_meta_put(t, "compact_out", 0) == 0)
		sto_txn_commit(t);
	else
		sto_txn_abort(t);
}

/* Rewrites segment ss->seg (entries collected) into a new segment. */
static int compact_segment(struct sto *s, struct seg_set *ss, struct sto_compact_result *r)
{
	uint64_t new_id = 0;
	struct sto_seg_writer *w = NULL;
	int rc = 0;
	if (ss->chunks.n + ss->nev == 0)
		goto switch_index; /* nothing live: just remove it */
	rc = compact_begin(s, &new_id);
	if (rc)
		return rc;
	rc = sto_seg_create(s->seg_dir, new_id, s->ring, &w);
	if (rc == 0)
		rc = compact_copy(s, ss, w);
	if (rc == 0)
		r->bytes_after += sto_seg_size(w);
	int crc = w ? sto_seg_close(w) : 0; /* syncs */
	rc = rc ? rc : crc;
	if (rc) {
		compact_abandon(s, new_id);
		return rc;
	}
switch_index:
	rc = compact_switch(s, ss);
	if (rc) {
		if (ss->chunks.n + ss->nev)
			compact_abandon(s, new_id);
		return rc;
	}
	r->segments++;
	r->chunks += ss->chunks.n + ss->nev;
	return drop_old_segment(s);
}

static int list_segments(struct sto *s, struct id_list *ids)
{
	DIR *d = opendir(s->seg_dir);
	struct dirent *de;
	int rc = d ? 0 : -errno;
	while (rc == 0 && (de = readdir(d)) != NULL) {
		unsigned long long id;
		char tail[8];
		if (sscanf(de->d_name, "seg-%16llx.%4s", &id, tail) == 2 && strcmp(tail, "dat") == 0)
			rc = id_push(ids, id);
	}
	if (d)
		closedir(d);
	return rc;
}

static uint64_t file_size(struct sto *s, uint64_t id)
{
	char path[PATH_MAX + 64];
	struct stat st;
	sto_seg_path(s->seg_dir, id, path, sizeof(path));
	return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

struct compact_args {
	double min_live;
	struct sto_compact_result *r;
};

static int compact_op(struct sto *s, void *arg)
{
	struct compact_args *a = arg;
	struct id_list ids = {0};
	struct seg_set ss = {0};
	/* Roll the segment being written so that it can be compacted too (the
	 * next seal starts a new one). */
	int rc = s->seg ? sto_seg_close(s->seg) : 0;
	s->seg = NULL;
	uint64_t writing = UINT64_MAX;
	if (rc == 0)
		rc = list_segments(s, &ids);
	for (size_t i = 0; rc == 0 && i < ids.n; i++) {
		uint64_t size = file_size(s, ids.v[i]);
		if (ids.v[i] == writing || size == 0)
			continue;
		rc = set_collect(s, &ss, ids.v[i]);
		uint64_t live = (uintptr_t)rdb_map_get(&ss.live, ids.v[i] + 1);
		if (rc || (double)live >= a->min_live * (double)size)
			continue;
		a->r->bytes_before += size;
		int crc = compact_segment(s, &ss, a->r);
		if (crc)
			a->r->skipped++;
	}
	if (a->r->segments)
		rdb_info("store", "compaction rewrote %llu segments (%llu chunks): %llu -> %llu bytes",
			 (unsigned long long)a->r->segments, (unsigned long long)a->r->chunks,
			 (unsigned long long)a->r->bytes_before,
			 (unsigned long long)a->r->bytes_after);
	set_free(&ss);
	free(ids.v);
	return rc;
}

static int compact_locked_op(struct sto *s, void *arg)
{
	pthread_mutex_lock(&s->compact_lock);
	int rc = compact_op(s, arg);
	pthread_mutex_unlock(&s->compact_lock);
	return rc;
}

int sto_compact(struct sto *s, double min_live, struct sto_compact_result *r)
{
	memset(r, 0, sizeof(*r));
	struct compact_args a = {.min_live = min_live < 0 ? s->life.compact_min_live : min_live,
				 .r = r};
	return run_on_flusher(s, compact_locked_op, &a);
}

void sto_compact_pause(struct sto *s)
{
	pthread_mutex_lock(&s->compact_lock);
}

void sto_compact_resume(struct sto *s)
{
	pthread_mutex_unlock(&s->compact_lock);
}

/* Background: retention and compaction every retention_check_s. Flusher. */
static void lifecycle_tick(struct sto *s)
{
	if (s->life.retention_check_s == 0)
		return;
	int64_t now = rdb_now_mono_ns();
	if (now - s->last_retention_mono_ns < (int64_t)s->life.retention_check_s * 1000000000)
		return;
	s->last_retention_mono_ns = now;
	struct sto_retention_result rr = {0};
	struct sto_compact_result cr = {0};
	struct compact_args a = {.min_live = s->life.compact_min_live, .r = &cr};
	int rc = retention_op(s, &rr);
	if (rc == 0 && pthread_mutex_trylock(&s->compact_lock) == 0) {
		rc = compact_op(s, &a);
		pthread_mutex_unlock(&s->compact_lock);
	}
	if (rc)
		rdb_warn("store", "background retention/compaction failed: %s; retrying in %u s",
			 rdb_strerror(rc), s->life.retention_check_s);
}
