/* store_series.c - the storage engine's series: the series cache (key ->
 * id, in memory), their creation in LMDB, and the series creator thread
 * (internal; engine.h, state in store_int.h).
 *
 * Design: a write needs an id for each series of its batch. Known series
 * come from the cache (series_by_key, an open-addressing table of (hash,
 * entry) slots looked up with the hash the batch already holds:
 * mdl_batch_series_hash). New ones are created in LMDB
 * group-committed, like the WAL: the writers that need new series queue
 * (create_q) and one of them, the leader, creates the series of every
 * queued writer in one write transaction, with one id reservation per
 * group (next_series_id; the unused ids are given back in the same
 * transaction, so ids have no gaps). max_series and max_series_per_job
 * are checked inside that transaction; if anything in the group fails,
 * the transaction is dropped and each writer is done alone, so a refused
 * write never leaves a series behind.
 *
 * Two ways in: sti_resolve_series (the blocking write, WAL replay, the
 * caller leads groups itself) and the creator thread. sto_write_submit
 * (store_write.c) never creates series on its submitting (HTTP) thread: a
 * write whose series are not all cached is queued on the creator
 * (sti_creator_enqueue), which takes every write queued meanwhile, creates
 * their series in one group and hands each back to the write path
 * (sti_write_created), which queues its WAL record or tells its caller
 * the error.
 *
 * Threading: series_lock guards the cache and is held only to read it and,
 * after the commit, to add the new ids, never across an LMDB transaction:
 * writers of known series never wait for a creation. create_mu/create_cv
 * guard the queue and the `creating` flag (one leader at a time); the
 * per-job counts (job_counts) belong to the leader, and a job delete
 * becomes the leader before it resets them (sti_series_exclusive).
 * cq_mu/cq_cv guard the creator's FIFO (cq_head/cq_tail); cq_mu is a leaf.
 * Lock order: create_mu before series_lock, never the other way.
 *
 * Failure: a series is durable once the group's transaction committed
 * (STO_FP_SERIES_CREATE is its fault point), and it is cached only then,
 * before the write's first WAL record is queued: a series is in LMDB
 * before any record that uses it, for both write kinds. A failed or
 * refused creation (-errno, RDB_ELIMIT) reaches the write's caller with
 * nothing created for it and nothing of it in the WAL; the cached per-job
 * counts are dropped (recounted from LMDB on demand), as they may count
 * series of the dropped transaction. If the creator thread could not be
 * started, or is stopping, writes create their series on the submitting
 * thread instead (sti_resolve_series). Close stops the creator
 * (sti_creator_stop) before waiting for pending writes: the creator drains
 * its queue first, so every queued write went on to the WAL or was told
 * its error before the thread exits.
 */
#include "storage/engine/engine.h"
#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_map.h"
#include "common/rdb_ptab.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- series cache ---------------------------------------------------------- */

/* The cache's key hash is the batch's (mdl_series_key_hash), so a batch's
 * series are looked up with the hash it already holds. Never 0. */
static uint64_t cache_hash(uint64_t h)
{
	return h ? h : 1;
}

static uint64_t series_hash(const struct mdl_batch_series *bs)
{
	return cache_hash(mdl_series_key_hash(bs->key.job, bs->job_len, bs->key.rank,
					      bs->key.metric, bs->metric_len));
}

/* Cheap fields first (the hash, which tells apart nearly every pair of a
 * chain, then rank and lengths), bytes last: no strcmp on the write path,
 * the batch already knows its lengths. */
static bool key_eq(const struct series_ent *e, const struct mdl_batch_series *bs, uint64_t h)
{
	return e->hash == h && e->rank == bs->key.rank && e->job_len == bs->job_len &&
	       e->metric_len == bs->metric_len &&
	       memcmp(sti_ent_job(e), bs->key.job, bs->job_len) == 0 &&
	       memcmp(sti_ent_metric(e), bs->key.metric, bs->metric_len) == 0;
}

/* Caller holds series_lock. h is cache_hash of bs's key hash. One slot
 * line per probe, and only entries of the same hash are read. */
static struct series_ent *cache_find(struct sto *s, const struct mdl_batch_series *bs, uint64_t h)
{
	const struct rdb_ptab *t = &s->series_by_key;
	for (size_t i = rdb_ptab_home(t, h); i != RDB_PTAB_END; i = rdb_ptab_next(t, h, i)) {
		struct series_ent *e = t->slots[i].val;
		if (key_eq(e, bs, h))
			return e;
	}
	return NULL;
}

/* Caller holds series_lock. */
static int cache_add(struct sto *s, const struct mdl_batch_series *bs, uint64_t h, uint64_t id,
		     struct series_ent **out)
{
	struct series_ent *e = malloc(sti_ent_size(bs->job_len, bs->metric_len));
	if (!e)
		return -ENOMEM;
	e->next = NULL;
	e->hash = h;
	e->id = id;
	e->wal_def_epoch = 0;
	e->rank = bs->key.rank;
	e->job_len = bs->job_len;
	e->metric_len = bs->metric_len;
	memcpy(e->names, bs->key.job, bs->job_len);
	e->names[bs->job_len] = '\0';
	memcpy(e->names + bs->job_len + 1, bs->key.metric, bs->metric_len);
	e->names[bs->job_len + 1 + bs->metric_len] = '\0';
	int rc = rdb_ptab_put(&s->series_by_key, h, e);
	if (rc == 0) {
		rc = rdb_map_put(&s->series_by_id, id, e);
		if (rc)
			rdb_ptab_del(&s->series_by_key, h, e);
	}
	if (rc) {
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
	rdb_ptab_free(&s->series_by_key);
}

/* Asks for the cache lines the lookups of b's series read (their slots,
 * then the entries those slots name) before any lookup waits for one: at
 * 16,384 series each is a cache miss, and a record's 32 lookups one after
 * the other queued 64 of them. Caller holds series_lock. */
static void prefetch_cached(struct sto *s, const struct mdl_batch *b, size_t n)
{
	const struct rdb_ptab *t = &s->series_by_key;
	for (size_t i = 0; i < n; i++)
		rdb_ptab_prefetch(t, cache_hash(mdl_batch_series_hash(b, i)));
	for (size_t i = 0; i < n; i++) {
		uint64_t h = cache_hash(mdl_batch_series_hash(b, i));
		size_t at = rdb_ptab_home(t, h);
		if (at == RDB_PTAB_END)
			continue;
		/* the entry and its names' second line: a metric name
		 * usually starts past the first 64 bytes (40 of header, the
		 * job, its NUL), and key_eq compares it */
		const char *e = t->slots[at].val;
		__builtin_prefetch(e);
		__builtin_prefetch(e + 64);
	}
}

/* Fills ents[] from the cache; returns how many are missing (a batch
 * series that cannot be read counts as missing: create_missing reports
 * it). Caller holds series_lock. */
static size_t resolve_cached(struct sto *s, const struct mdl_batch *b, struct series_ent **ents)
{
	size_t n = mdl_batch_nseries(b), missing = 0;
	prefetch_cached(s, b, n);
	for (size_t i = 0; i < n; i++) {
		const struct mdl_batch_series *bs = mdl_batch_series_at(b, i);
		ents[i] = bs ? cache_find(s, bs, cache_hash(mdl_batch_series_hash(b, i))) : NULL;
		missing += ents[i] == NULL;
	}
	return missing;
}

/* ---- series creation ---------------------------------------------------- */

/* Series creation is group-committed like the WAL: requests that need new
 * series queue here, and one of them (the leader) creates the series of
 * every queued request in one LMDB write transaction (one sync), so a job
 * whose thousands of ranks all send their first step at once does not
 * pay one sync per rank, one after the other. If anything in the group
 * fails (a series limit, say), the transaction is dropped and each request
 * of the group is done alone, exactly as before: a refused request never
 * creates a series.
 *
 * The leader holds series_lock only to read the cache and, after the
 * commit, to add the new ids: writers whose series are known, and the
 * HTTP threads that answer them, never wait for an LMDB transaction. The
 * per-job counts (job_counts) are the leader's: whoever else resets them
 * (a job delete) first becomes the leader (sti_series_exclusive). */
struct series_waiter {
	struct series_waiter *next;
	const struct mdl_batch *b;
	struct series_ent **ents;
	uint64_t *ids; /* [nseries] the group's ids of the series ents[] lacks */
	int rc;
	bool done;
};

/* Ids reserved in the group's transaction, handed out in order. */
struct id_block {
	uint64_t next, end;
};

/* Creates in t the series of w that ents[] lacks (counting the limits
 * inside t); their ids (found or created) go to w->ids. New ids come from
 * blk, which reserves `want` at a time. *created counts the new series.
 * Leader only. */
static int create_missing(struct sto *s, struct sto_txn *t, struct series_waiter *w,
			  struct id_block *blk, uint64_t want, uint64_t *created)
{
	size_t n = mdl_batch_nseries(w->b);
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (w->ents[i])
			continue;
		const struct mdl_batch_series *bs = mdl_batch_series_at(w->b, i);
		if (!bs)
			return -ENOMEM;
		rc = sto_series_lookup(t, &bs->key, &w->ids[i]);
		if (rc != RDB_ENOTFOUND)
			continue; /* known (0) or an error */
		struct job_count *jc = NULL;
		if (s->nseries + *created >= s->opt.max_series)
			return RDB_ELIMIT;
		/* counted inside this txn: includes series created just before */
		rc = job_count_get(s, t, bs->key.job, &jc);
		if (rc == 0 && jc->n >= s->opt.max_series_per_job)
			rc = RDB_ELIMIT;
		if (rc == 0 && blk->next == blk->end) {
			rc = sto_series_ids_reserve(t, want, &blk->next);
			blk->end = rc == 0 ? blk->next + want : blk->next;
		}
		if (rc == 0)
			rc = sto_series_create_id(t, &bs->key, blk->next);
		if (rc == 0) {
			w->ids[i] = blk->next++;
			(*created)++;
			jc->n++;
		}
	}
	return rc;
}

/* Caches the ids of w's series that ents[] lacks (durable now). Caller
 * holds series_lock. */
static int cache_ids(struct sto *s, struct series_waiter *w)
{
	size_t n = mdl_batch_nseries(w->b);
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (w->ents[i])
			continue;
		const struct mdl_batch_series *bs = mdl_batch_series_at(w->b, i);
		uint64_t h = series_hash(bs);
		w->ents[i] = cache_find(s, bs, h); /* duplicates within the group */
		if (!w->ents[i])
			rc = cache_add(s, bs, h, w->ids[i], &w->ents[i]);
	}
	return rc;
}

/* Creates the series of every waiter of list g in one write transaction.
 * 0 with each waiter's rc set (its series cached), or the transaction's
 * error: nothing created, the waiters' rc untouched. Leader only. */
static int create_txn(struct sto *s, struct series_waiter *g)
{
	size_t missing = 0, total = 0;
	pthread_mutex_lock(&s->series_lock);
	for (struct series_waiter *w = g; w; w = w->next) {
		missing += resolve_cached(s, w->b, w->ents);
		total += mdl_batch_nseries(w->b);
		w->rc = 0;
	}
	pthread_mutex_unlock(&s->series_lock);
	if (missing == 0)
		return 0;
	uint64_t *ids = malloc(total * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	size_t at = 0;
	for (struct series_waiter *w = g; w; w = w->next) {
		w->ids = ids + at;
		at += mdl_batch_nseries(w->b);
	}
	struct sto_txn *t = NULL;
	struct id_block blk = {0};
	uint64_t created = 0;
	int rc = sto_txn_begin(s->ix, true, &t);
	for (struct series_waiter *w = g; w && rc == 0; w = w->next)
		rc = create_missing(s, t, w, &blk, missing, &created);
	if (rc == 0 && blk.next < blk.end) /* give back what was not used */
		rc = sto_meta_put(t, "next_series_id", blk.next);
	if (rc == 0)
		rc = sto_txn_commit_at(t, STO_FP_SERIES_CREATE);
	else if (t)
		sto_txn_abort(t);
	pthread_mutex_lock(&s->series_lock);
	if (rc) {
		sti_job_counts_reset(s); /* counts may include series of the dropped txn */
	} else {
		s->nseries += created;
		for (struct series_waiter *w = g; w; w = w->next)
			w->rc = cache_ids(s, w);
	}
	pthread_mutex_unlock(&s->series_lock);
	for (struct series_waiter *w = g; w; w = w->next)
		w->ids = NULL;
	free(ids);
	return rc;
}

/* The leader's work: creates the series of the whole group, or, if that
 * fails, of each waiter alone. Sets every waiter's rc. */
static void create_group(struct sto *s, struct series_waiter *g)
{
	if (create_txn(s, g) == 0)
		return;
	for (struct series_waiter *w = g; w; w = w->next) {
		struct series_waiter *next = w->next;
		w->next = NULL;
		int rc = create_txn(s, w);
		if (rc)
			w->rc = rc;
		w->next = next;
	}
}

void sti_series_exclusive(struct sto *s, bool begin)
{
	if (!begin) {
		pthread_mutex_unlock(&s->series_lock);
		pthread_mutex_lock(&s->create_mu);
		s->creating = false;
		pthread_cond_broadcast(&s->create_cv);
		pthread_mutex_unlock(&s->create_mu);
		return;
	}
	pthread_mutex_lock(&s->create_mu);
	while (s->creating)
		pthread_cond_wait(&s->create_cv, &s->create_mu);
	s->creating = true;
	pthread_mutex_unlock(&s->create_mu);
	pthread_mutex_lock(&s->series_lock);
}

/* Waits until the n waiters ws[] (all queued at once, so they always land
 * in the same group) have their series, leading groups as needed. Each
 * waiter's rc is its result. */
static void resolve_group(struct sto *s, struct series_waiter *ws, size_t n)
{
	pthread_mutex_lock(&s->create_mu);
	for (size_t i = 0; i < n; i++) {
		ws[i].next = s->create_q;
		s->create_q = &ws[i];
	}
	while (!ws[n - 1].done) {
		if (s->creating) {
			pthread_cond_wait(&s->create_cv, &s->create_mu);
			continue;
		}
		s->creating = true;
		struct series_waiter *g = s->create_q;
		s->create_q = NULL;
		pthread_mutex_unlock(&s->create_mu);
		create_group(s, g);
		pthread_mutex_lock(&s->create_mu);
		for (struct series_waiter *w = g, *next; w; w = next) {
			next = w->next;
			w->done = true; /* its owner may return (its stack goes) */
		}
		s->creating = false;
		pthread_cond_broadcast(&s->create_cv);
	}
	pthread_mutex_unlock(&s->create_mu);
}

size_t sti_resolve_known(struct sto *s, const struct mdl_batch *b, struct series_ent **ents)
{
	pthread_mutex_lock(&s->series_lock);
	size_t missing = resolve_cached(s, b, ents);
	pthread_mutex_unlock(&s->series_lock);
	return missing;
}

int sti_resolve_series(struct sto *s, const struct mdl_batch *b, struct series_ent **ents)
{
	if (sti_resolve_known(s, b, ents) == 0)
		return 0;
	struct series_waiter me = {.b = b, .ents = ents};
	resolve_group(s, &me, 1);
	return me.rc;
}

/* ---- the series creator thread ------------------------------------------ */

bool sti_creator_enqueue(struct sto *s, struct sti_create_req *r)
{
	pthread_mutex_lock(&s->cq_mu);
	bool ok = s->creator_running && !s->cq_stop;
	if (ok) {
		r->next = NULL;
		if (s->cq_tail)
			s->cq_tail->next = r;
		else
			s->cq_head = r;
		s->cq_tail = r;
		pthread_cond_signal(&s->cq_cv);
	}
	pthread_mutex_unlock(&s->cq_mu);
	return ok;
}

/* The creator's work on the writes it took (list q): creates the series of
 * all of them in one group (one LMDB commit unless a limit refuses one of
 * them, see create_group), then hands each back to the write path, which
 * queues it for the WAL or tells it its error. */
static void creator_run(struct sto *s, struct sti_create_req *q)
{
	size_t n = 0;
	for (struct sti_create_req *r = q; r; r = r->next)
		n++;
	struct series_waiter *ws = calloc(n, sizeof(*ws));
	size_t i = 0;
	for (struct sti_create_req *r = q; ws && r; r = r->next, i++)
		ws[i] = (struct series_waiter){.b = r->b, .ents = r->ents};
	if (ws)
		resolve_group(s, ws, n);
	i = 0;
	for (struct sti_create_req *r = q, *next; r; r = next, i++) {
		next = r->next;
		int rc = ws ? ws[i].rc : sti_resolve_series(s, r->b, r->ents);
		sti_write_created(r, rc); /* r may be gone after this */
	}
	free(ws);
}

_Thread_local bool sti_on_creator;

static void *creator_main(void *arg)
{
	struct sto *s = arg;
	sti_on_creator = true;
	pthread_setname_np(pthread_self(), "rdb-series");
	pthread_mutex_lock(&s->cq_mu);
	for (;;) {
		while (!s->cq_head && !s->cq_stop)
			pthread_cond_wait(&s->cq_cv, &s->cq_mu);
		struct sti_create_req *q = s->cq_head;
		if (!q)
			break; /* stopping, nothing left */
		s->cq_head = s->cq_tail = NULL;
		pthread_mutex_unlock(&s->cq_mu);
		creator_run(s, q);
		pthread_mutex_lock(&s->cq_mu);
	}
	pthread_mutex_unlock(&s->cq_mu);
	return NULL;
}

int sti_creator_start(struct sto *s)
{
	pthread_mutex_lock(&s->cq_mu);
	s->cq_stop = false;
	int rc = -pthread_create(&s->creator, NULL, creator_main, s);
	s->creator_running = rc == 0;
	pthread_mutex_unlock(&s->cq_mu);
	return rc;
}

void sti_creator_stop(struct sto *s)
{
	pthread_mutex_lock(&s->cq_mu);
	bool running = s->creator_running;
	s->cq_stop = true;
	pthread_cond_signal(&s->cq_cv);
	pthread_mutex_unlock(&s->cq_mu);
	if (!running)
		return;
	pthread_join(s->creator, NULL);
	pthread_mutex_lock(&s->cq_mu);
	s->creator_running = false;
	pthread_mutex_unlock(&s->cq_mu);
}
