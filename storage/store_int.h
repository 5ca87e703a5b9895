/* store_int.h - internal to storage/: the storage engine's private structs
 * and the functions its files (store.c, store_write.c, store_seal.c,
 * store_read.c, lifecycle.c, compact.c) share. Must not be included
 * outside storage/; the engine's public face is sto.h (and admin.h).
 *
 * Recovery invariant: every chunk written by a generation newer than
 * ckpt_gen has a `pending` index entry. At open, those chunks are dropped
 * from the index and the WAL generations newer than ckpt_gen are replayed:
 * each acknowledged point ends up in exactly one chunk, never two.
 *
 * Lock order: write_lock -> head_lock; LMDB write txn -> view_lock ->
 * head_lock; view_lock -> (LMDB read txn) -> head_lock. series_lock is a
 * leaf (never held while taking another).
 */
#ifndef STO_STORE_INT_H
#define STO_STORE_INT_H

#include "storage/sto.h"
#include "common/rdb_map.h"
#include "storage/admin.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SEAL_BUF_MAX	     (8u * 1024 * 1024) /* segment bytes written per seal round */
/* What a series in a head costs besides its columns' capacity
 * (sti_cols_bytes): its struct head_series, its slot in the head's map (16
 * bytes, up to 4 slots per entry just after the map doubled), and malloc's
 * 16-byte header and rounding of the struct and its four column arrays. */
#define HEAD_SERIES_OVERHEAD (sizeof(struct head_series) + 4u * 16u + 5u * 24u)

/* A known series (cache entry): never freed while the store is open. */
struct series_ent {
	struct series_ent *next; /* same-hash chain */
	uint64_t hash;
	uint64_t id;
	struct mdl_series_key key;
};

struct head_series {
	struct series_ent *ent;
	struct mdl_cols pts; /* append-only until sealed; unsorted */
	size_t reserved;     /* capacity past pts.n promised to prepared writes
			      * (sti_prepare_request); never dropped while > 0 */
	bool queued;	     /* in the size-seal queue */
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

	pthread_mutex_t series_lock;   /* the series cache */
	struct rdb_map series_by_hash; /* key hash -> series_ent chain */
	struct rdb_map series_by_id;   /* id -> series_ent */
	struct rdb_map job_counts;     /* job hash -> struct job_count chain (max_series_per_job) */
	uint64_t nseries;	       /* series ever created */

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
	uint64_t uid_limit; /* meta next_chunk_uid as committed: uids < it are taken */
	uint64_t ckpt_gen;

	/* data lifecycle (lifecycle.c, compact.c) */
	pthread_rwlock_t seg_lock;    /* shared: a segment read; exclusive: swap readers */
	pthread_mutex_t compact_lock; /* held by compaction; a backup pauses it */
	_Atomic uint64_t del_epoch;   /* bumped when a job's series are deleted */
	struct series_ent *dead_ents; /* deleted series' cache entries, freed at close */
	struct tomb *tombs;	      /* job tombstones, for WAL replay */
	size_t ntombs;
	struct admin_op *ops; /* flusher work queued by admin calls (flush_lock) */
	struct sto_lifecycle life;
	int64_t last_retention_mono_ns;
	int64_t trash_due_mono_ns; /* 0, or when the compacted-away segments go */

	_Atomic bool closing;
	_Atomic uint32_t fault_prepare, fault_wal_append; /* sto_fault_inject */
	_Atomic uint64_t st_points_written, st_batches_written, st_write_busy;
	_Atomic uint64_t st_chunks, st_points_sealed, st_chunk_bytes, st_checkpoints;
	_Atomic uint64_t st_events_written, st_event_chunks, st_batch_dups;
	/* WAL damage (recovery): ranges found at this open, and the copies
	 * kept in quarantine/ (files and bytes, counted at open). */
	uint64_t st_wal_damaged_ranges, st_wal_kept_files, st_wal_kept_bytes;
};

struct tomb {
	char job[MDL_JOB_MAX + 1];
	uint64_t gen;
};

/* One series' points being sealed: a private, sorted copy of the first
 * `taken` points of its head column. */
struct seal_item {
	struct head_series *hs;
	size_t taken;
};

/* ---- shared functions (contracts: one line each) ---- */

/* Every chunk of one compaction or delete: index keys to move or drop. */
struct key_list {
	struct sto_chunk_ref *v; /* series_id, stats.min_ts_ns, uid (+ count) used */
	size_t n, cap;
};

struct id_list {
	uint64_t *v;
	size_t n, cap;
};

struct compact_args {
	double min_live;
	struct sto_compact_result *r;
};

typedef int (*admin_fn)(struct sto *s, void *arg);

/* ---- store_write.c ---- */
/* Memory a head column accounts for (its capacity, not its length). */
uint64_t sti_cols_bytes(const struct mdl_cols *c);
/* A new empty head for WAL generation gen; NULL when out of memory. */
struct head *sti_head_new(uint64_t gen);
/* Frees h and everything it owns; accepts NULL. */
void sti_head_free(struct head *h);
/* Forgets every cached per-job series count. Caller holds series_lock. */
void sti_job_counts_reset(struct sto *s);
/* Frees the series cache (close). */
void sti_cache_free(struct sto *s);
/* Resolves (creating if needed) the series of every key in b into ents[]. */
int sti_resolve_series(struct sto *s, const struct mdl_batch *b, struct series_ent **ents);
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
};
/* Makes room in h for every point and event of the request (creates head
 * series and event jobs, grows their arrays, allocates event records) and
 * reserves it, so that sti_commit_request cannot fail. 0, or -ENOMEM with
 * nothing reserved. Caller holds head_lock (and write_lock shared, so h
 * stays the active head until commit or unprepare). */
int sti_prepare_request(struct sto *s, struct head *h, const struct mdl_batch *pts,
			struct series_ent **ents, const struct mdl_events *ev, struct sti_prep *pp);
/* Applies the prepared request (cannot fail) and frees pp. Caller holds
 * head_lock. */
void sti_commit_request(struct sto *s, struct head *h, struct sti_prep *pp, bool queue_full);
/* Releases the room of a request that was not written (WAL append failed)
 * and frees pp. Caller holds head_lock. */
void sti_unprepare_request(struct sto *s, struct head *h, struct sti_prep *pp);
void sti_prep_free(struct sti_prep *pp);
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
/* Seals s->frozen, makes it durable and records the checkpoint. Flusher only. */
int sti_finish_checkpoint(struct sto *s);

/* ---- store_read.c ---- */
/* Reads a segment range under seg_lock (shared); -ENOENT if compacted away. */
int sti_seg_read(struct sto *s, uint64_t id, uint64_t off, void *buf, size_t len);

/* ---- lifecycle.c ---- */
/* True when a WAL record of job (jl bytes) in generation gen is tombstoned. */
bool sti_tomb_skips(const struct sto *s, const char *job, size_t jl, uint64_t gen);
/* Runs the admin work queued for the flusher. Flusher only. */
void sti_run_admin_ops(struct sto *s);
/* Background retention and compaction when due. Flusher only. */
void sti_lifecycle_tick(struct sto *s);
/* Open hook: tombstones into memory, leftovers of an interrupted compaction. */
int sti_lifecycle_open(struct sto *s);
/* Close hook: frees deleted cache entries and tombstones. */
void sti_lifecycle_free(struct sto *s);
/* Runs fn(s, arg) on the flusher thread and waits for it; -ESHUTDOWN if stopped. */
int sti_run_on_flusher(struct sto *s, admin_fn fn, void *arg);
/* Unlinks segment id (ENOENT is fine) and fsyncs the segment directory. */
int sti_unlink_segment(struct sto *s, uint64_t id);
/* Unlinks the files in seg_trash and forgets them. */
int sti_empty_trash(struct sto *s);
/* Appends v to l; -ENOMEM leaves l as it was. */
int sti_id_push(struct id_list *l, uint64_t v);
/* Chunk scan callback: appends *ref to the key_list arg. */
int sti_key_push(void *arg, const struct sto_chunk_ref *ref);

/* ---- rollup.c ---- */
struct sti_rollup_ent {
	uint64_t series_id;
	unsigned tier;
	int64_t bucket; /* start */
	struct sto_rollup r;
};
/* Rollup records folded from chunks about to be dropped, not yet stored.
 * Initialize with {0} then rdb_buf_init(&rec, ...). */
struct sti_rollup_acc {
	struct sti_rollup_ent *v;
	size_t n, cap;
	struct rdb_buf rec; /* scratch: a chunk record */
};
/* Reads chunk ref and folds its points into a (a corrupt chunk: logged,
 * nothing folded, 0). Flusher only. */
int sti_rollup_fold(struct sto *s, struct sti_rollup_acc *a, const struct sto_chunk_ref *ref);
/* Merges every record of a into the stored ones (inside write txn t). */
int sti_rollup_commit(struct sti_rollup_acc *a, struct sto_txn *t);
void sti_rollup_acc_free(struct sti_rollup_acc *a);

/* ---- compact.c ---- */
/* Compacts every segment below a->min_live (struct compact_args *arg). Flusher only. */
int sti_compact_op(struct sto *s, void *arg);
/* Supersede index entries being collected (each owns its arrays). */
struct sup_list {
	struct sto_sup_entry *v;
	size_t n, cap;
};
void sti_sup_list_trim(struct sup_list *l, size_t keep); /* frees entries from keep on */
int sti_cmp_u64(const void *a, const void *b);		 /* qsort order of uint64_t */
void sti_sup_list_clear(struct sup_list *l);
/* Appends *e (taking its arrays) to l; on failure e still owns them. */
int sti_sup_list_push(struct sup_list *l, struct sto_sup_entry *e);
/* compact_out protocol: a new segment id, meta compact_out set (committed);
 * abandon removes the file and clears compact_out. */
int sti_compact_begin(struct sto *s, uint64_t *new_id);
void sti_compact_abandon(struct sto *s, uint64_t new_id);
/* Swaps in fresh segment readers (no fd keeps an old file). 0 or -ENOMEM. */
int sti_readers_refresh(struct sto *s);
/* Compacted-away segment files (seg_trash) are unlinked STI_TRASH_GRACE_NS
 * after their switch, not at once: a query whose snapshot predates the
 * switch may still read a merged-away chunk from the old file (the reread
 * at the new place only finds chunks that were moved, not merged). The
 * flusher calls sti_trash_tick; close and recovery empty the trash at once. */
#define STI_TRASH_GRACE_NS (5ll * 1000000000)
void sti_trash_tick(struct sto *s);
/* merge.c: merges runs of small checkpointed chunks and group records. */
int sti_merge_small_chunks(struct sto *s, struct sto_compact_result *r);
/* Rewrites every segment file with id >= from (as listed at the call),
 * whatever its live fraction; counts into *r (skipped: left as they were).
 * Used by recovery. 0 or -errno/RDB_E*. */
int sti_compact_from(struct sto *s, uint64_t from, struct sto_compact_result *r);

#endif
