/* engine.h - internal to storage/engine/: the functions the engine's files
 * (store.c, store_write.c, store_series.c, store_seal.c, store_read.c)
 * share. Included only by storage/engine/ (tools/checksrc.sh fails the
 * build otherwise): the layers below reach the engine only through struct
 * sti_engine_ops (lifecycle/lifecycle.h), which store.c fills at open.
 *
 * Threading and failure: as each declaration says; the locks and the
 * recovery invariant are store_int.h's.
 */
#ifndef STO_ENGINE_H
#define STO_ENGINE_H

#include "storage/store_int.h"
#include "storage/lifecycle/lifecycle.h"

/* A write waiting for the series creator thread to create its series.
 * Owned by the write (embedded in it); the creator borrows it from
 * sti_creator_enqueue (store_series.c) until it passes it to
 * sti_write_created (store_write.c). */
struct sti_create_req {
	struct sti_create_req *next; /* the creator's queue (cq_mu) */
	const struct mdl_batch *b;   /* the write's points (borrowed) */
	struct series_ent **ents;    /* [nseries of b], filled by the creator */
};

/* ---- store_write.c ---- */
/* Takes write_lock exclusively and waits until no asynchronous write is
 * pending (sto_write_submit): what a WAL rotation, a job delete or close
 * needs. Release with pthread_rwlock_unlock(&s->write_lock). */
void sti_write_exclusive(struct sto *s);
/* Memory a head column accounts for (its capacity, not its length). */
uint64_t sti_cols_bytes(const struct mdl_cols *c);
/* A new empty head for WAL generation gen; NULL when out of memory. */
struct head *sti_head_new(uint64_t gen);
/* Frees h and everything it owns; accepts NULL. */
void sti_head_free(struct head *h);
/* Applies a durable request to head h (WAL replay): prepare + commit.
 * Caller holds write_lock shared and head_lock. 0 or -ENOMEM (nothing
 * applied). */
int sti_apply_request(struct sto *s, struct head *h, const struct mdl_batch *pts,
		      struct series_ent **ents, const struct mdl_events *ev, bool queue_full);

/* A write's room in a head, made before its WAL append (see
 * sti_prepare_request). */
struct sti_prep {
	const struct mdl_batch *points; /* borrowed from the request */
	const struct mdl_events *events;
	struct head_series **hs; /* [nseries] where each batch series goes */
	struct ev_job **jobs;	 /* [nev] */
	struct ev_rec **recs;	 /* [nev] records allocated, not yet linked */
	size_t nseries, nev;
	bool borrowed; /* hs's block is the caller's (sti_prepare_request_in) */
};
/* Makes room in h for every point and event of the request (creates head
 * series and event jobs, grows their arrays, allocates event records) and
 * reserves it, so that sti_commit_request cannot fail. 0, or -ENOMEM with
 * nothing reserved. Caller holds head_lock (and write_lock shared, so h
 * stays the active head until commit or unprepare). */
int sti_prepare_request(struct sto *s, struct head *h, const struct mdl_batch *pts,
			struct series_ent **ents, const struct mdl_events *ev, struct sti_prep *pp);
/* sti_prepare_request with the caller's block of blk_n pointers for pp's
 * arrays when it holds sti_prep_slots of them (else one is allocated as
 * there); the block stays the caller's (sti_prep_free leaves it). */
int sti_prepare_request_in(struct sto *s, struct head *h, const struct mdl_batch *pts,
			   struct series_ent **ents, const struct mdl_events *ev,
			   struct sti_prep *pp, void **blk, size_t blk_n);
/* The WAL's group_done hook (wal.h): applies to the head every
 * sto_write_submit write of a completed group, in group order, in slices
 * of 64 writes per head_lock hold (readers get the lock between slices);
 * their completions then only finish them. WAL thread; arg is the store. */
void sti_wal_group_done(void *arg, struct sto_wal_async *done);
/* Pointers a prepared request's arrays take (sti_prepare_request_in). */
size_t sti_prep_slots(const struct mdl_batch *pts, const struct mdl_events *ev);
/* Applies the prepared request (cannot fail) and frees pp. Caller holds
 * head_lock. */
void sti_commit_request(struct sto *s, struct head *h, struct sti_prep *pp, bool queue_full);
/* Releases the room of a request that was not written (WAL append failed)
 * and frees pp. Caller holds head_lock. */
void sti_unprepare_request(struct sto *s, struct head *h, struct sti_prep *pp);
void sti_prep_free(struct sti_prep *pp);
/* The creator's hand-back of a queued write (creator thread, no lock
 * held): with rc 0 its series are in ents[] and its record goes on to the
 * WAL (the caller is told at the WAL completion); otherwise, or if that
 * fails at once, the write is dropped (batch id released) and its caller
 * told rc now. r (and its write) may be freed on return. */
void sti_write_created(struct sti_create_req *r, int rc);
/* Hash of a client batch id (never 0). */
uint64_t sti_batch_hash(const char *id, size_t len);
/* The entry of batch id, or NULL. Caller holds batch_lock. */
struct batch_ent *sti_batch_find(struct sto *s, const char *id, size_t len, uint64_t h);
/* Adds batch id for generation gen; *out owned by s. Caller holds batch_lock. */
int sti_batch_add(struct sto *s, const char *id, size_t len, uint64_t h, bool done, uint64_t gen,
		  struct batch_ent **out);
/* Moves the ids of generations <= gen into the index (inside txn t). */
int sti_batch_persist(struct sto *s, struct sto_txn *t, uint64_t gen);
/* After the checkpoint committed: forgets the ids of generations <= gen. */
void sti_batch_forget(struct sto *s, uint64_t gen);
/* Frees every batch id entry (close). */
void sti_batch_free_all(struct sto *s);

/* ---- store_series.c ---- */
/* Forgets every cached per-job series count. Caller holds series_lock. */
void sti_job_counts_reset(struct sto *s);
/* Frees the series cache (close). */
void sti_cache_free(struct sto *s);
/* begin: waits until no series creation runs and keeps new ones from
 * starting, then takes series_lock: the series cache and the per-job
 * counts are the caller's (a job delete). !begin: undoes that. */
void sti_series_exclusive(struct sto *s, bool begin);
/* Fills ents[] (one per series of b) from the series cache: NULL for a
 * series not in it. Returns how many are NULL. Takes series_lock; never
 * waits for a series creation. */
size_t sti_resolve_known(struct sto *s, const struct mdl_batch *b, struct series_ent **ents);
/* Resolves (creating if needed) the series of every key in b into ents[]:
 * blocks while a group creates them (this thread may lead it, one LMDB
 * commit). 0, or -errno/RDB_ELIMIT with none of b's missing series
 * created. */
int sti_resolve_series(struct sto *s, const struct mdl_batch *b, struct series_ent **ents);
/* Queues r for the creator thread; does not block on a creation. True:
 * the creator will call sti_write_created(r, rc) on its own thread. False
 * when the creator is not running (or stopping): r is untouched and the
 * caller resolves the series itself (sti_resolve_series). */
bool sti_creator_enqueue(struct sto *s, struct sti_create_req *r);
/* True on the series creator thread only (its writes make the first head
 * columns of new series: head_prepare in store_write.c). */
extern _Thread_local bool sti_on_creator;
/* Starts the series creator thread (sto_write_submit's writes that need
 * new series wait on it, not on their submitting thread). 0 or -errno;
 * without it those writes create their series on the submitting thread. */
int sti_creator_start(struct sto *s);
/* Stops the creator after every write queued on it went on to the WAL (or
 * failed and was told so); joins it. Call before waiting for pending
 * writes at close. Idempotent. */
void sti_creator_stop(struct sto *s);

/* ---- store_seal.c ---- */
/* Seals `taken` points of each item of head h into chunks. Flusher only. */
int sti_seal_items(struct sto *s, struct head *h, struct seal_item *items, size_t nitems,
		   bool drop_empty);
/* Seals the full series queued by writers (size seal). Flusher only. */
int sti_seal_full(struct sto *s);
/* Makes uids [next_uid, next_uid + n) safe to write: the committed meta
 * next_chunk_uid is raised past them (in blocks) before any record using
 * them reaches a segment file, so a crash never lets a uid on disk be
 * handed out again. Opens its own write transaction: call with none open
 * in this thread. Flusher thread only. 0 or -errno/RDB_E*. */
int sti_uid_reserve(struct sto *s, uint64_t n);
/* Seals every job's events of frozen head h. Flusher only. */
int sti_seal_events(struct sto *s, struct head *h);

/* ---- store.c ---- */
/* Finishes a pending checkpoint, rotates the WAL and seals the frozen head. Flusher only. */
int sti_checkpoint(struct sto *s);
/* Whether the head h has passed a checkpoint trigger of its own (its
 * memory, or its point count: points_over from sti_head_points_over) and
 * this caller is the first to see it since the flusher's last pass: then
 * the caller wakes the flusher (instead of the flusher noticing at its next
 * 200 ms poll, ~28 MiB of head later at 5 M points/s). Any thread. */
bool sti_head_kick(struct sto *s, bool points_over);
/* Whether h holds more points than the point trigger allows. Caller holds
 * head_lock. */
bool sti_head_points_over(const struct sto *s, const struct head *h);
/* Seals s->frozen, makes it durable and records the checkpoint. Flusher only. */
int sti_finish_checkpoint(struct sto *s);

/* ---- store_read.c ---- */
/* Reads a segment range under seg_lock (shared); -ENOENT if compacted away. */
int sti_seg_read(struct sto *s, uint64_t id, uint64_t off, void *buf, size_t len);
/* The per-job extent summaries (sto_job_extent_get). sti_extent_note
 * folds the n first points of c, a series of job, into the job's summary
 * (valid or being built; nothing when the job has none): called wherever
 * points become visible in a head. cur remembers the summary of the
 * previous call's job, so that the series of one batch (nearly always one
 * job) look it up once; start it zeroed, use it under one head_lock hold. sti_extent_reset[_locked]
 * forgets every summary, valid or being built (a build in progress then
 * installs nothing): called after anything that removes points or chunk
 * entries (job delete, retention, quarantine), and at close (_locked:
 * no other thread is left then). _locked and
 * note: caller holds head_lock; sti_extent_reset takes it. Cannot fail. */
struct job_extent;
struct sti_extent_cursor {
	const char *job;
	struct job_extent *e;
};
void sti_extent_note(struct sto *s, struct sti_extent_cursor *cur, const char *job,
		     const struct mdl_cols *c, size_t n);
void sti_extent_reset_locked(struct sto *s);
void sti_extent_reset(struct sto *s);

#endif
