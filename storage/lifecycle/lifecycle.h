/* lifecycle.h - internal to storage/: the data-lifecycle sub-module
 * (storage/lifecycle/): the flusher work queue (flushq.c), segment-file
 * helpers shared by compaction and merge (segfiles.c), small-chunk merge
 * (merge.c), compaction (compact.c), rollups (rollup.c), and tombstones,
 * statistics, job deletion, retention and the background tick
 * (lifecycle.c). The engine (engine/) calls down into it; it never calls
 * the engine directly, only through struct sti_engine_ops below.
 *
 * Direction inside: lifecycle.c -> compact.c -> merge.c -> {segfiles.c,
 * flushq.c, rollup.c}; nothing calls back up.
 *
 * Threading: every operation runs on the flusher thread (sti_run_on_flusher
 * queues it and waits), unless its comment says otherwise.
 * Failure: negative errno / RDB_E*, as each declaration says.
 */
#ifndef STO_LIFECYCLE_H
#define STO_LIFECYCLE_H

#include "storage/store_int.h"

/* ---- what lifecycle/ needs from the engine above it ----
 * Filled by engine/store.c at open (s->eng); each member is the engine
 * function named in its comment, with that function's contract. */
struct sti_engine_ops {
	int (*checkpoint)(struct sto *s);		  /* sti_checkpoint */
	int (*finish_checkpoint)(struct sto *s);	  /* sti_finish_checkpoint */
	struct head *(*head_new)(uint64_t gen);		  /* sti_head_new */
	void (*head_free)(struct head *h);		  /* sti_head_free */
	uint64_t (*cols_bytes)(const struct mdl_cols *c); /* sti_cols_bytes */
	void (*job_counts_reset)(struct sto *s);	  /* sti_job_counts_reset */
	void (*extent_reset_locked)(struct sto *s);	  /* sti_extent_reset_locked */
	int (*uid_reserve)(struct sto *s, uint64_t n);	  /* sti_uid_reserve */
	int (*seg_read)(struct sto *s, uint64_t id, uint64_t off, void *buf,
			size_t len); /* sti_seg_read */
	int (*read_chunk)(struct sto *s, const struct sto_chunk_ref *ref, struct rdb_buf *rec,
			  struct mdl_cols *out, struct sto_read_error *err); /* sto_read_chunk */
	void (*write_exclusive)(struct sto *s);		     /* sti_write_exclusive */
	void (*series_exclusive)(struct sto *s, bool begin); /* sti_series_exclusive */
};

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

/* ---- lifecycle.c, segfiles.c, flushq.c ---- */
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
