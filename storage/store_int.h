/* store_int.h - internal to storage/: the storage engine's private state
 * (struct sto, heads, the series cache), shared by engine/ and lifecycle/.
 * Data only (and the inline accessors of struct series_ent's packed
 * names): the functions of engine/ are declared in engine/engine.h, the
 * ones of lifecycle/ in lifecycle/lifecycle.h. Must not be included outside
 * storage/; the engine's public face is sto.h (and admin.h).
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
#include "common/rdb_ptab.h"
#include "storage/admin.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SEAL_BUF_MAX (8u * 1024 * 1024) /* segment bytes written per seal round */
/* What a series in a head costs besides its columns' capacity
 * (sti_cols_bytes): its struct head_series, its slot in the head's map (16
 * bytes, up to 4 slots per entry just after the map doubled), and malloc's
 * 16-byte header and rounding of the struct and its four column arrays. */
#define HEAD_SERIES_OVERHEAD (sizeof(struct head_series) + 4u * 16u + 5u * 24u)

/* A known series (cache entry): never freed while the store is open. One
 * allocation sized to its names (sti_ent_size): job and metric are stored
 * back to back, each NUL-terminated, instead of a struct mdl_series_key of
 * ~392 bytes, mostly padding (one entry per series ever seen: 131k at
 * 4,096 ranks x 32 metrics). Read the names with sti_ent_job and
 * sti_ent_metric. */
struct series_ent {
	struct series_ent *next; /* dead_ents list, once deleted */
	uint64_t hash;
	uint64_t id;
	/* The WAL epoch (wal.h, sto_wal_defs_fn) in which this series was last
	 * defined in the WAL file (a STO_WAL_REC_DEFS record); 0: never. Read
	 * and written only on the WAL thread (store_write.c, wal_defs). */
	uint64_t wal_def_epoch;
	uint32_t rank;		      /* MDL_RANK_JOB for the job-level pseudo-rank */
	uint16_t job_len, metric_len; /* bytes, without their NULs */
	char names[];		      /* job, NUL, metric, NUL */
};

_Static_assert(MDL_JOB_MAX <= UINT16_MAX && MDL_METRIC_MAX <= UINT16_MAX,
	       "series_ent name lengths are u16");

/* Bytes of the entry whose names have these lengths. */
static inline size_t sti_ent_size(size_t job_len, size_t metric_len)
{
	return sizeof(struct series_ent) + job_len + 1 + metric_len + 1;
}

/* The entry's job id (NUL-terminated, e->job_len bytes). */
static inline const char *sti_ent_job(const struct series_ent *e)
{
	return e->names;
}

/* The entry's metric name (NUL-terminated, e->metric_len bytes). */
static inline const char *sti_ent_metric(const struct series_ent *e)
{
	return e->names + e->job_len + 1;
}

/* Builds e's struct mdl_series_key in *k, for the cold callees that take
 * one (a chunk's key record, once per sealed chunk): copies the names and
 * their NULs, not the whole ~392 bytes. */
static inline void sti_ent_key(const struct series_ent *e, struct mdl_series_key *k)
{
	memcpy(k->job, sti_ent_job(e), (size_t)e->job_len + 1);
	k->rank = e->rank;
	memcpy(k->metric, sti_ent_metric(e), (size_t)e->metric_len + 1);
}

struct head_series {
	struct series_ent *ent;
	struct mdl_cols pts; /* append-only until sealed; unsorted */
	size_t reserved;     /* capacity past pts.n promised to prepared writes
			      * (sti_prepare_request); never dropped while > 0 */
	bool queued;	     /* in the size-seal queue */
	bool creator_cols;   /* columns allocated on the series creator thread */
	uint32_t cap_hint;   /* capacity the columns grow to at their second
			      * growth (head_prepare in store_write.c) */
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
	struct sto_jobmeta *jobmeta; /* job metadata documents (jobmeta/jobmeta.h) */

	pthread_rwlock_t write_lock; /* shared: a write; exclusive: rotation */
	pthread_rwlock_t view_lock;  /* shared: a read snapshot; exclusive: head -> chunk */
	pthread_mutex_t head_lock;   /* heads, their series, the seal queue */
	struct head *active, *frozen;
	uint64_t *seal_queue; /* series ids of active-head series that are full */
	size_t seal_queue_n, seal_queue_cap;
	_Atomic uint64_t head_bytes;
	_Atomic bool head_kick; /* the flusher was woken for memory (sti_head_kick) */

	pthread_mutex_t batch_lock; /* batch_ids */
	struct rdb_map batch_ids;   /* id hash -> struct batch_ent chain */

	pthread_mutex_t series_lock; /* the series cache */
	/* Series creation queue (store_series.c, sti_resolve_series): requests
	 * that need new series, and whether a leader is creating a group.
	 * create_mu is taken before series_lock, never while holding it. */
	pthread_mutex_t create_mu;
	pthread_cond_t create_cv;
	struct series_waiter *create_q;
	bool creating;
	/* The series creator thread (store_series.c): asynchronous writes
	 * (sto_write_submit) whose request needs a series not yet created wait
	 * here instead of on their submitting thread; the creator takes all of
	 * them at once and creates their series in one group. cq_mu is a leaf. */
	pthread_mutex_t cq_mu;
	pthread_cond_t cq_cv;
	struct sti_create_req *cq_head, *cq_tail; /* FIFO, under cq_mu (engine.h) */
	bool cq_stop;				  /* under cq_mu: drain and exit */
	bool creator_running;			  /* set at open, cleared at close */
	pthread_t creator;
	struct rdb_ptab series_by_key; /* key hash (mdl_series_key_hash) -> series_ent */
	struct rdb_map series_by_id;   /* id -> series_ent */
	struct rdb_map job_counts;     /* job hash -> struct job_count chain (max_series_per_job) */
	/* Per-job extent summaries (sto_job_extent_get; engine/store_read.c):
	 * job hash -> struct job_extent chain, and the last build ticket
	 * handed out. Both under head_lock. */
	struct rdb_map job_extents;
	uint64_t extent_ticket;
	uint64_t nseries; /* series ever created */

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
	const struct sti_engine_ops *eng; /* engine steps lifecycle/ calls (set at open) */
	int64_t last_retention_mono_ns;
	int64_t trash_due_mono_ns; /* 0, or when the compacted-away segments go */

	_Atomic bool closing;
	/* Asynchronous writes (sto_write_submit) whose WAL record is queued but
	 * not yet applied: an exclusive holder of write_lock waits for 0
	 * (sti_write_exclusive), so every record of WAL generation g is in head
	 * g. Counted without a lock (under write_lock shared, so never while
	 * an exclusive holder waits); async_mu / async_cv only wake that
	 * waiter when the count reaches 0. async_mu is a leaf. */
	pthread_mutex_t async_mu;
	pthread_cond_t async_cv;
	_Atomic uint64_t async_pending;
	_Atomic uint64_t st_points_written, st_batches_written, st_write_busy;
	_Atomic uint64_t st_chunks, st_points_sealed, st_chunk_bytes, st_checkpoints;
	_Atomic uint64_t st_events_written, st_event_chunks, st_batch_dups;
	/* WAL damage (recovery): ranges found at this open, and the copies
	 * kept in quarantine/ (files and bytes, counted at open). */
	uint64_t st_wal_damaged_ranges, st_wal_kept_files, st_wal_kept_bytes;
	uint64_t st_wal_undefined; /* replayed records naming a series their file never defined */
	_Atomic uint64_t st_index_damaged;   /* reads that met a damaged chunk entry */
	_Atomic uint64_t st_compact_refused; /* compaction passes refused (quarantine) */
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

#endif
