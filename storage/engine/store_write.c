/* store_write.c - the storage engine's write path (contract: sto.h):
 * the series cache, client batch ids, heads and sto_write_req.
 *
 * Write path: resolve series ids (cache, then LMDB) -> encode one WAL
 * record -> sto_wal_append (group commit; blocks until durable) -> apply to
 * the active head. The write rwlock is held shared across append+apply so
 * that a WAL rotation (exclusive) sees no write half done: every record in
 * WAL generation g is in head g.
 *
 * Threading: any number of writer threads; the locks are in struct sto
 * (store_int.h, with the lock order).
 *
 * Failure: a WAL failure fails the write (nothing applied). Writers get
 * RDB_EBUSY once the head is over head_max_bytes.
 */
#include "storage/engine/engine.h"
#include "common/rdb_err.h"
#include "common/rdb_hash.h"
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- series cache ---------------------------------------------------------- */

static uint64_t series_hash(const struct mdl_series_key *k)
{
	uint8_t buf[MDL_JOB_MAX + 5 + MDL_METRIC_MAX];
	size_t jl = strlen(k->job), ml = strlen(k->metric);
	memcpy(buf, k->job, jl);
	buf[jl] = 0;
	rdb_put_le32(buf + jl + 1, k->rank);
	memcpy(buf + jl + 5, k->metric, ml);
	uint64_t h = rdb_hash64(buf, jl + 5 + ml, 0);
	return h ? h : 1;
}

static bool key_eq(const struct mdl_series_key *a, const struct mdl_series_key *b)
{
	return a->rank == b->rank && strcmp(a->job, b->job) == 0 &&
	       strcmp(a->metric, b->metric) == 0;
}

/* Caller holds series_lock. */
static struct series_ent *cache_find(struct sto *s, const struct mdl_series_key *k, uint64_t h)
{
	for (struct series_ent *e = rdb_map_get(&s->series_by_hash, h); e; e = e->next)
		if (key_eq(&e->key, k))
			return e;
	return NULL;
}

/* Caller holds series_lock. */
static int cache_add(struct sto *s, const struct mdl_series_key *k, uint64_t h, uint64_t id,
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
	char job[MDL_JOB_MAX + 1];
};

static int count_series_cb(void *arg, const struct mdl_series_key *k, uint64_t id)
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
void sti_job_counts_reset(struct sto *s)
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

void sti_cache_free(struct sto *s)
{
	sti_job_counts_reset(s);
	for (size_t i = 0; i < s->series_by_id.cap; i++)
		if (s->series_by_id.keys[i])
			free(s->series_by_id.vals[i]);
	rdb_map_free(&s->series_by_id);
	rdb_map_free(&s->series_by_hash);
}

/* Resolves (creating if needed) the series of every key in b into ents[].
 * New series are created in one LMDB write transaction. */
int sti_resolve_series(struct sto *s, const struct mdl_batch *b, struct series_ent **ents)
{
	size_t n = mdl_batch_nseries(b), missing = 0;
	int rc = 0;
	pthread_mutex_lock(&s->series_lock);
	for (size_t i = 0; i < n; i++) {
		const struct mdl_batch_series *bs = mdl_batch_series_at(b, i);
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
		const struct mdl_batch_series *bs = mdl_batch_series_at(b, i);
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
		sti_job_counts_reset(s); /* counts may include series of the aborted txn */
		goto out;
	}
	rc = sto_txn_commit(t);
	if (rc) {
		sti_job_counts_reset(s);
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
		const struct mdl_batch_series *bs = mdl_batch_series_at(b, i);
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

struct head *sti_head_new(uint64_t gen)
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

/* Appends b's points to head h. Caller holds head_lock. */
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
			h->bytes += HEAD_SERIES_OVERHEAD;
			atomic_fetch_add(&s->head_bytes, HEAD_SERIES_OVERHEAD);
		}
		uint64_t before = sti_cols_bytes(&hs->pts);
		if (mdl_cols_reserve(&hs->pts, hs->pts.n + hs->reserved + bs->pts.n))
			return -ENOMEM;
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
	for (size_t i = 0; i < n; i++) {
		const struct mdl_batch_series *bs = mdl_batch_series_at(b, i);
		struct head_series *hs = hs_of[i];
		size_t at = hs->pts.n, k = bs->pts.n;
		memcpy(hs->pts.ts_ns + at, bs->pts.ts_ns, k * sizeof(int64_t));
		memcpy(hs->pts.step + at, bs->pts.step, k * sizeof(int64_t));
		memcpy(hs->pts.attempt + at, bs->pts.attempt, k * sizeof(uint32_t));
		memcpy(hs->pts.value + at, bs->pts.value, k * sizeof(uint64_t));
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

/* Encodes a request as one WAL record: plain points, or a batch record. */
static int encode_request(const struct sto_write_req *req, struct rdb_buf *rec, uint8_t *type)
{
	bool has_ev = req->events && mdl_events_count(req->events) > 0;
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
		if (rc == 0 && part == 0 && req->points && mdl_batch_nseries(req->points))
			rc = sto_batch_encode(req->points, rec);
		if (rc == 0 && part == 1 && has_ev)
			rc = sto_events_encode(req->events, rec);
		if (rc == 0)
			rdb_put_le32(rec->data + at, (uint32_t)(rec->len - at - 4));
	}
	return rc;
}

/* Whether an injected fault is due (and uses it up). */
static bool take_fault(_Atomic uint32_t *f)
{
	uint32_t v = atomic_load(f);
	while (v && !atomic_compare_exchange_weak(f, &v, v - 1))
		;
	return v != 0;
}

void sto_fault_inject(struct sto *s, enum sto_fault f, uint32_t count)
{
	atomic_store(f == STO_FAULT_PREPARE ? &s->fault_prepare : &s->fault_wal_append, count);
}

int sti_prepare_request(struct sto *s, struct head *h, const struct mdl_batch *pts,
			struct series_ent **ents, const struct mdl_events *ev, struct sti_prep *pp)
{
	memset(pp, 0, sizeof(*pp));
	if (take_fault(&s->fault_prepare))
		return -ENOMEM;
	size_t n = pts ? mdl_batch_nseries(pts) : 0;
	size_t nev = ev ? mdl_events_count(ev) : 0;
	pp->hs = calloc(n ? n : 1, sizeof(*pp->hs));
	pp->jobs = calloc(nev ? nev : 1, sizeof(*pp->jobs));
	pp->recs = calloc(nev ? nev : 1, sizeof(*pp->recs));
	if (!pp->hs || !pp->jobs || !pp->recs) {
		sti_prep_free(pp);
		return -ENOMEM;
	}
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
	free(pp->hs);
	free(pp->jobs);
	free(pp->recs);
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
 * so a rotation sees the batch id done; *wake says a size seal is queued. */
static int append_and_apply(struct sto *s, const struct sto_write_req *req,
			    struct series_ent **ents, const struct rdb_buf *rec, uint8_t type,
			    struct batch_ent **bent, bool *wake)
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
		rc = sti_resolve_series(s, req->points, ents);
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
		rc = take_fault(&s->fault_wal_append)
			 ? -EIO
			 : sto_wal_append(s->wal, type, rec->data, rec->len);
		pthread_mutex_lock(&s->head_lock);
		uint64_t gen = h->gen;
		if (rc == 0) {
			sti_commit_request(s, h, &pp, true);
			*wake = s->seal_queue_n > 0;
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

int sto_write_req(struct sto *s, const struct sto_write_req *req, struct sto_write_result *res)
{
	res->duplicate = false;
	size_t n = req->points ? mdl_batch_nseries(req->points) : 0;
	size_t nev = req->events ? mdl_events_count(req->events) : 0;
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
	struct series_ent **ents = malloc((n ? n : 1) * sizeof(*ents));
	int rc = ents ? 0 : -ENOMEM;
	if (rc == 0 && n)
		rc = sti_resolve_series(s, req->points, ents);
	if (rc == 0)
		rc = encode_request(req, &rec, &type);
	bool wake = false;
	if (rc == 0)
		rc = append_and_apply(s, req, ents, &rec, type, &bent, &wake);
	if (bent)
		batch_finish(s, bent, false, 0);
	if (rc == 0) {
		atomic_fetch_add(&s->st_points_written,
				 req->points ? mdl_batch_points(req->points) : 0);
		atomic_fetch_add(&s->st_events_written, nev);
		atomic_fetch_add(&s->st_batches_written, 1);
	}
	if (wake || (rc == 0 && sto_wal_size(s->wal) > s->opt.wal_rotate_bytes))
		wake_flusher(s);
	free(ents);
	rdb_buf_free(&rec);
	return rc;
}

int sto_write(struct sto *s, const struct mdl_batch *b)
{
	struct sto_write_req req = {.points = b};
	struct sto_write_result res;
	return sto_write_req(s, &req, &res);
}
