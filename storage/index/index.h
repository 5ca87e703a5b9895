/* index.h - the LMDB index and catalog (the only file that includes lmdb.h
 * is index.c).
 *
 * Named databases in the environment index/:
 *   meta     string key -> u64 LE   (format_version, next_series_id,
 *                                     next_chunk_uid, next_segment_id,
 *                                     ckpt_gen, ...)
 *   series   job \0 rank(be32) metric  -> series id (u64 LE)
 *   sid      series id (be64)          -> job \0 rank(be32) metric
 *   chunks   series id (be64) min_ts (be64, sign bit flipped) uid (be64)
 *                                      -> chunk entry (see index.c, LE fields)
 *   pending  gen (be64) series (be64) min_ts (be64 flipped) uid (be64) -> empty
 *            chunks written by a generation not yet checkpointed
 *   supersede  merged chunk uid (be64) -> supersede entry (below)
 * Values of every table but series, sid, chunks and rollups (whose layouts
 * hold their checksums) carry a checksum trailer, checked on every read and
 * hidden from callers (storage/index/ix_seal.c, docs/FORMAT.md "Sealed
 * values"). The index is derived data: it can be rebuilt from the segment
 * files.
 *
 * Threading: LMDB rules. One write transaction at a time (others block);
 * read transactions run concurrently with it. A transaction is used by one
 * thread. Values read are copied out before the transaction ends.
 */
#ifndef STO_INDEX_H
#define STO_INDEX_H

#include "storage/series.h"
#include "storage/io/fault.h"

#include <stdbool.h>
#include <stdint.h>

struct sto_index;
struct sto_txn;

/* Opens (creating if missing) the environment in dir with the given map
 * size. On a new environment writes meta format_version; on an existing one
 * checks it: a different version returns RDB_EFORMAT. 0 or -errno/RDB_E*. */
int sto_index_open(const char *dir, uint64_t map_bytes, struct sto_index **out);
/* Opens an existing environment read-only and without LMDB's lock file
 * (the caller holds the data directory's LOCK): nothing in dir is created
 * or written, and every write transaction fails. A database missing from
 * an older index is an error (start rankdbd once to upgrade it). */
int sto_index_open_ro(const char *dir, uint64_t map_bytes, struct sto_index **out);
void sto_index_close(struct sto_index *ix); /* NULL ok */

/* Unmaps the index file's pages from this process (they stay in the page
 * cache; the next read of a page maps it again, a minor fault). LMDB reads
 * through a shared read-only map, and every checkpoint's inserts touch
 * pages all over the chunk tree, so without this the whole file (live and
 * free pages) ends up counted in the server's resident memory. Safe with
 * concurrent readers and writers. Called after a checkpoint. NULL ok. */
void sto_index_release_pages(struct sto_index *ix);

int sto_txn_begin(struct sto_index *ix, bool write, struct sto_txn **out);
/* Commits (write txn: durably, LMDB's default sync) and frees. 0 or -errno;
 * the txn is freed either way. */
int sto_txn_commit(struct sto_txn *t);
/* sto_txn_commit at a named write site: when fault point `point` (or
 * STO_FP_INDEX_COMMIT, storage/io/fault.h) is armed and fires, the txn is
 * aborted instead and the injected -errno returned (nothing committed). */
int sto_txn_commit_at(struct sto_txn *t, enum sto_fault_point point);
void sto_txn_abort(struct sto_txn *t); /* frees; NULL ok */
/* From now on, a chunk entry of t that fails its checksum or shape does not
 * fail the chunk scan or get that meets it: the callback gets a ref marked
 * damaged (key fields and the entry's location, no statistics) for the
 * caller to decode the chunk itself (queries, verify). Without it (every
 * writer: compaction, retention, merge) such an entry is RDB_ECORRUPT. The
 * same for event chunk entries (sto_evidx_fn's damaged); sto_sup_scan
 * skips a damaged supersede entry instead. */
void sto_txn_pass_damaged(struct sto_txn *t);

/* Checks the checksum of every series catalog value (series, sid), rollup
 * record and value of the other tables but events (meta, pending,
 * evpending, batch_ids, batch_time, tombstones, retention, quarantine,
 * seg_trash, supersede; chunk and event entries: sto_chunk_scan_all and
 * sto_evidx_scan_all with pass_damaged); calls fn with a one-line
 * description of each damaged one and counts it in *damaged. Read-only. 0
 * or the error that stopped the walk. */
typedef void (*sto_index_problem_fn)(void *arg, const char *msg);
int sto_index_check_values(struct sto_txn *t, sto_index_problem_fn fn, void *arg,
			   uint64_t *damaged);

/* meta: RDB_ENOTFOUND if the key is absent; RDB_ECORRUPT (logged) if its
 * value fails its checksum. */
int sto_meta_get(struct sto_txn *t, const char *key, uint64_t *out);
/* Checks every meta value: 0, or RDB_ECORRUPT (logged, naming the key) for
 * the first that fails its checksum. The table is a few dozen keys. */
int sto_meta_check(struct sto_txn *t);
int sto_meta_put(struct sto_txn *t, const char *key, uint64_t val);
/* Returns the current value of a counter (0 if absent) in *out and stores
 * value+1. Write txn only. */
int sto_meta_next(struct sto_txn *t, const char *key, uint64_t *out);

/* series */
int sto_series_lookup(struct sto_txn *t, const struct mdl_series_key *k, uint64_t *id);
/* Looks the key up; creates it with id = meta next_series_id if absent.
 * *created tells which. Write txn only. */
int sto_series_get_or_create(struct sto_txn *t, const struct mdl_series_key *k, uint64_t *id,
			     bool *created);
/* Reserves n (> 0) consecutive series ids: *first .. *first + n - 1, taken
 * from meta next_series_id, which moves past them (ids never used are a
 * harmless gap). Write txn only; RDB_ELIMIT past 2^64 - 1. */
int sto_series_ids_reserve(struct sto_txn *t, uint64_t n, uint64_t *first);
/* Creates series k with id (reserved with sto_series_ids_reserve); the
 * caller has looked k up in t and not found it. RDB_ECORRUPT when the id
 * is already used (next_series_id is behind). Write txn only. */
int sto_series_create_id(struct sto_txn *t, const struct mdl_series_key *k, uint64_t id);
int sto_series_key_of(struct sto_txn *t, uint64_t id, struct mdl_series_key *out);
/* Calls fn for every series of job (all series when job is NULL), in key
 * order (job, rank, metric). fn returning non-zero stops the scan and is
 * returned. */
typedef int (*sto_series_fn)(void *arg, const struct mdl_series_key *k, uint64_t id);
int sto_series_scan(struct sto_txn *t, const char *job, sto_series_fn fn, void *arg);
/* sto_series_scan of one job (not NULL) calling fn only for series whose
 * metric name want(arg, name, len) accepts (name not NUL-terminated, taken
 * from the index key before it is decoded or its entry's checksum is
 * checked: entries of other metrics cost a key comparison, and a damaged
 * one is not noticed). */
typedef bool (*sto_metric_want_fn)(void *arg, const char *metric, size_t len);
int sto_series_scan_metric(struct sto_txn *t, const char *job, sto_metric_want_fn want,
			   sto_series_fn fn, void *arg);
/* Calls fn once per distinct job, in order, with the number of series. */
typedef int (*sto_job_fn)(void *arg, const char *job, uint64_t nseries);
int sto_jobs_scan(struct sto_txn *t, sto_job_fn fn, void *arg);

/* chunks */
int sto_chunk_put(struct sto_txn *t, const struct sto_chunk_ref *ref);
int sto_chunk_del(struct sto_txn *t, uint64_t series_id, int64_t min_ts_ns, uint64_t uid);
/* Calls fn for each chunk of series_id whose [min_ts, max_ts] overlaps
 * [from_ns, to_ns] (inclusive), in (min_ts, uid) order. */
typedef int (*sto_chunk_fn)(void *arg, const struct sto_chunk_ref *ref);
int sto_chunk_scan(struct sto_txn *t, uint64_t series_id, int64_t from_ns, int64_t to_ns,
		   sto_chunk_fn fn, void *arg);

/* pending: chunks of generations after the last checkpoint */
int sto_pending_add(struct sto_txn *t, uint64_t gen, const struct sto_chunk_ref *ref);
/* Calls fn for each pending chunk with gen > after_gen (as a ref holding
 * series_id, stats.min_ts_ns, uid and gen only). */
int sto_pending_scan(struct sto_txn *t, uint64_t after_gen, sto_chunk_fn fn, void *arg);
/* Deletes pending entries with gen <= upto_gen. */
int sto_pending_clear(struct sto_txn *t, uint64_t upto_gen);
/* Deletes pending entries with gen > after_gen (after the caller dropped
 * their chunks at recovery). */
int sto_pending_drop_after(struct sto_txn *t, uint64_t after_gen);

/* event chunks (logs and spans) of a job: the value is the event chunk
 * entry of storage/format.h, opaque here. */
int sto_evidx_put(struct sto_txn *t, const char *job, int64_t min_ts_ns, uint64_t uid,
		  const void *val, size_t len);
int sto_evidx_del(struct sto_txn *t, const char *job, int64_t min_ts_ns, uint64_t uid);
/* Calls fn for each event chunk of job with min_ts <= to_ns, in (min_ts,
 * uid) order. The value pointer is valid only during the call. An entry
 * that fails its checksum is RDB_ECORRUPT, or, in a transaction marked
 * sto_txn_pass_damaged, reaches fn with damaged set: its bytes may be
 * wrong anywhere (the caller may find the chunk through them and check the
 * chunk's own checksum and uid, never trust the statistics or filter). */
typedef int (*sto_evidx_fn)(void *arg, int64_t min_ts_ns, uint64_t uid, const uint8_t *val,
			    size_t len, bool damaged);
int sto_evidx_scan(struct sto_txn *t, const char *job, int64_t to_ns, sto_evidx_fn fn, void *arg);
int sto_evpending_add(struct sto_txn *t, uint64_t gen, const char *job, int64_t min_ts_ns,
		      uint64_t uid);
typedef int (*sto_evpending_fn)(void *arg, uint64_t gen, const char *job, int64_t min_ts_ns,
				uint64_t uid);
int sto_evpending_scan(struct sto_txn *t, uint64_t after_gen, sto_evpending_fn fn, void *arg);
int sto_evpending_clear(struct sto_txn *t, uint64_t upto_gen);
int sto_evpending_drop_after(struct sto_txn *t, uint64_t after_gen);

/* client batch ids (idempotent retries) */
int sto_batchid_get(struct sto_txn *t, const char *id, size_t len, uint64_t *seen_ns);
int sto_batchid_put(struct sto_txn *t, const char *id, size_t len, uint64_t seen_ns);
/* Deletes ids first seen before older_than_ns, at most max_delete. */
int sto_batchid_prune(struct sto_txn *t, uint64_t older_than_ns, size_t max_delete,
		      size_t *deleted);

/* ---- data lifecycle (rankctl / admin API) ---------------------------------
 *   tombstones  job -> u64 WAL generation T of its deletion: WAL records of
 *               the job in generations <= T are never replayed
 *   retention   job -> u64 seconds (per-job override of retention_s)
 *   quarantine  damaged chunk entries, moved out of chunks/events
 *   seg_trash   segment ids compacted away whose file is still to unlink
 *   rollups     series id (be64) tier (u8) bucket start (be64, sign bit
 *               flipped) -> struct sto_rollup (128 bytes LE, docs/FORMAT.md):
 *               aggregates of points retention dropped. Not derived from the
 *               segment files: rebuild-index cannot recreate them. */
enum sto_jobdb { STO_JOBDB_TOMBSTONE, STO_JOBDB_RETENTION };
typedef int (*sto_jobval_fn)(void *arg, const char *job, uint64_t val);
int sto_jobval_put(struct sto_txn *t, enum sto_jobdb which, const char *job, uint64_t val);
/* RDB_ENOTFOUND if absent. */
int sto_jobval_get(struct sto_txn *t, enum sto_jobdb which, const char *job, uint64_t *val);
int sto_jobval_del(struct sto_txn *t, enum sto_jobdb which, const char *job);
int sto_jobval_scan(struct sto_txn *t, enum sto_jobdb which, sto_jobval_fn fn, void *arg);

/* One chunk entry by its key; RDB_ENOTFOUND if absent. */
int sto_chunk_get(struct sto_txn *t, uint64_t series_id, int64_t min_ts_ns, uint64_t uid,
		  struct sto_chunk_ref *out);
/* Every chunk entry, in key order. */
int sto_chunk_scan_all(struct sto_txn *t, sto_chunk_fn fn, void *arg);
/* One event chunk entry (fn called once); RDB_ENOTFOUND if absent. */
int sto_evidx_get(struct sto_txn *t, const char *job, int64_t min_ts_ns, uint64_t uid,
		  sto_evidx_fn fn, void *arg);
typedef int (*sto_evidx_all_fn)(void *arg, const char *job, int64_t min_ts_ns, uint64_t uid,
				const uint8_t *val, size_t len, bool damaged);
int sto_evidx_scan_all(struct sto_txn *t, sto_evidx_all_fn fn, void *arg);

/* Removes a series from series and sid (absent: 0). */
int sto_series_del(struct sto_txn *t, const struct mdl_series_key *k, uint64_t id);
/* Writes series and sid for a known id (index rebuild). */
int sto_series_put(struct sto_txn *t, const struct mdl_series_key *k, uint64_t id);

/* Moves an entry to quarantine (deleting it from chunks / events). */
int sto_quarantine_chunk(struct sto_txn *t, const struct sto_chunk_ref *ref);
int sto_quarantine_evchunk(struct sto_txn *t, const char *job, int64_t min_ts_ns, uint64_t uid,
			   const void *val, size_t len);
typedef int (*sto_u64_fn)(void *arg, uint64_t v);
/* Calls fn with the uid of each quarantined chunk. */
int sto_quarantine_scan(struct sto_txn *t, sto_u64_fn fn, void *arg);
/* The number of quarantine entries, damaged ones included (one B-tree stat,
 * no scan). */
int sto_quarantine_count(struct sto_txn *t, uint64_t *n);

int sto_trash_add(struct sto_txn *t, uint64_t segment_id);
int sto_trash_del(struct sto_txn *t, uint64_t segment_id);
int sto_trash_scan(struct sto_txn *t, sto_u64_fn fn, void *arg);
/* Whether segment_id is in seg_trash (compacted away, file kept for the
 * grace): 1, 0, or -errno/RDB_E*. */
int sto_trash_has(struct sto_txn *t, uint64_t segment_id);

/* A rollup record: the exact, mergeable aggregate of the points of one
 * series in one bucket of one tier (bucket start = the smallest axis value
 * of the bucket: ts in ns for STO_TIER_TIME, step for STO_TIER_STEP). */
enum { STO_TIER_TIME = 0, STO_TIER_STEP = 1 };
#define STO_ROLLUP_RECORD_SIZE 128
struct sto_rollup {
	uint64_t count;			/* non-NaN values */
	uint64_t nan_count;		/* NaN values */
	double sum, min, max;		/* over non-NaN values; 0 when count == 0 */
	uint64_t first_bits, last_bits; /* values of the smallest / largest (ts, step) */
	int64_t first_ts_ns, first_step, last_ts_ns, last_step;
	int64_t min_step, max_step; /* over points with a step; MDL_STEP_NONE if none */
	uint64_t nostep_count;	    /* points without a step */
	uint32_t min_attempt, max_attempt;
};
/* Merges b into a (a with count + nan_count == 0 is empty: becomes b). */
void sto_rollup_merge(struct sto_rollup *a, const struct sto_rollup *b);
/* RDB_ENOTFOUND if absent. */
int sto_rollup_get(struct sto_txn *t, uint64_t series_id, unsigned tier, int64_t bucket,
		   struct sto_rollup *out);
int sto_rollup_put(struct sto_txn *t, uint64_t series_id, unsigned tier, int64_t bucket,
		   const struct sto_rollup *r);
/* Calls fn for each record of (series_id, tier) with a bucket start in
 * [from_bucket, to_bucket], ascending. */
typedef int (*sto_rollup_fn)(void *arg, int64_t bucket, const struct sto_rollup *r);
int sto_rollup_scan(struct sto_txn *t, uint64_t series_id, unsigned tier, int64_t from_bucket,
		    int64_t to_bucket, sto_rollup_fn fn, void *arg);
/* Deletes every record of series_id (job deletion). */
int sto_rollup_del_series(struct sto_txn *t, uint64_t series_id);

/* ---- supersede tracking (small-chunk merges, docs/FORMAT.md) -------------
 *   supersede   merged chunk uid (be64) -> supersede entry (index.c): the
 *               content of a live supersede record (storage/format.h), where
 *               that record is, and the segment files that held valid
 *               source records when last known. An entry lives while a
 *               source may still exist physically; segment compaction
 *               carries its record along until then. */
struct sto_sup_src {
	uint64_t uid;
	int64_t min_ts_ns; /* the source's chunk key: (series, min_ts, uid) */
};
/* What a supersede record says: merged chunk (series_id, merged_min_ts_ns,
 * merged_uid) holds every point of the nsrc source chunks of the series. */
struct sto_sup {
	uint64_t series_id;
	uint64_t merged_uid;
	int64_t merged_min_ts_ns;
	uint64_t gen;		 /* of the merged chunk */
	uint32_t nsrc;		 /* 2..STO_SUP_MAX_SOURCES */
	struct sto_sup_src *src; /* nsrc, strictly ascending uid, all < merged_uid */
};
struct sto_sup_entry {
	struct sto_sup sup;
	uint64_t segment_id, offset; /* of the supersede record */
	uint32_t length;	     /* record bytes (header + payload) */
	uint32_t nseg;
	uint64_t *seg; /* nseg segment ids, ascending, no duplicates */
};
/* Frees the arrays of e (not e); NULL ok. */
void sto_sup_entry_free(struct sto_sup_entry *e);
/* Deep copy of e into *out (new arrays). 0 or -ENOMEM (*out then empty). */
int sto_sup_entry_copy(const struct sto_sup_entry *e, struct sto_sup_entry *out);
/* Puts (replaces) the entry of e->sup.merged_uid. */
int sto_sup_put(struct sto_txn *t, const struct sto_sup_entry *e);
/* RDB_ENOTFOUND if absent; on success *out owns new arrays (free them with
 * sto_sup_entry_free), on failure it is untouched. */
int sto_sup_get(struct sto_txn *t, uint64_t merged_uid, struct sto_sup_entry *out);
/* Absent: 0. */
int sto_sup_del(struct sto_txn *t, uint64_t merged_uid);
/* Calls fn for every entry in merged uid order; *e (arrays included) is
 * valid only during the call. A malformed value is RDB_ECORRUPT. */
typedef int (*sto_sup_fn)(void *arg, const struct sto_sup_entry *e);
int sto_sup_scan(struct sto_txn *t, sto_sup_fn fn, void *arg);

/* Consistent, compacted copy of the environment into dir (created if
 * missing, must hold no data.mdb): mdb_env_copy2 with MDB_CP_COMPACT.
 * Runs concurrently with writers (it uses a read snapshot). */
int sto_index_copy(struct sto_index *ix, const char *dir);
/* Walks every key of every small database (everything but chunks and
 * events, which callers walk with their own scans): a page LMDB cannot read
 * gives RDB_ECORRUPT. *entries gets the number of keys. */
int sto_index_check_all(struct sto_txn *t, uint64_t *entries);

/* ---- space accounting and compaction of the environment (ix_compact.c) ----
 * LMDB never shrinks data.mdb: pages freed by deletes (compaction, merges,
 * retention, cleared pending entries) go to its freelist and are reused by
 * later writes, but the file keeps its high-water size. The compaction
 * below writes a compacted copy (live pages only) beside data.mdb and
 * renames it over, with every transaction of this process drained. */
#define STO_INDEX_NDBS 16 /* 15 databases and the freelist */
struct sto_index_db_stat {
	const char *name; /* static string: the database's name */
	uint64_t entries, depth, branch_pages, leaf_pages, overflow_pages;
};
struct sto_index_stat {
	uint64_t page_bytes;
	uint64_t file_bytes; /* data.mdb as stat(2) sees it */
	uint64_t used_pages; /* pages up to the high-water mark (last page + 1) */
	uint64_t free_pages; /* pages on the freelist (reusable, still in the file) */
	uint64_t last_txn_id;
	struct sto_index_db_stat db[STO_INDEX_NDBS]; /* main databases, then "freelist" */
	unsigned ndb;
};
/* Fills *out from one read snapshot (walks the freelist: O(freelist pages)).
 * Blocks like a read txn. 0 or -errno/RDB_E*; *out untouched on failure. */
int sto_index_stat(struct sto_index *ix, struct sto_index_stat *out);

struct sto_index_compact_result {
	uint64_t bytes_before, bytes_after; /* data.mdb file size */
	bool swapped;			    /* false: nothing was done (see the return) */
};
/* Test hook: a step at which sto_index_compact stops forever (pause(2)),
 * after logging "index compaction: test pause at step <name>", so that a
 * test can kill -9 the process there. Set from the environment variable
 * RANKDB_TEST_IXCOMPACT_PAUSE (a step name) at the first compaction. */
enum sto_ixc_step {
	STO_IXC_COPIED = 1,  /* the copy is written and fsynced, not renamed */
	STO_IXC_RENAMED = 2, /* renamed over data.mdb, directory not yet fsynced */
	STO_IXC_REOPENED = 3 /* the new environment is open */
};
/* Rewrites data.mdb as a compacted copy when force, or when the freelist
 * holds at least free_ratio of the used pages and the file is at least
 * min_file_bytes. Steps: copy (mdb_env_copyfd2 with MDB_CP_COMPACT) into
 * data.mdb.compact in the index directory while readers and writers go on;
 * fsync it; drain every transaction of this process (new ones wait, at most
 * drain_timeout_ms); if a write committed since the copy began, copy again
 * with writers held (readers still go on), then drain readers too; rename
 * over data.mdb, fsync the directory, reopen the environment, let
 * transactions go. A crash leaves data.mdb either the old file or the
 * complete copy (same content); a leftover data.mdb.compact is removed by
 * sto_index_open. Needs free disk space for the live pages: refused
 * (-ENOSPC, logged) when statvfs says there is not enough. Transactions
 * that this thread holds would deadlock the drain: call it holding none.
 * Returns 0 (r->swapped tells whether it compacted), RDB_EBUSY when
 * transactions did not drain in time (nothing changed; retry later), or
 * -errno/RDB_E*: then the old file is still in use, except when the reopen
 * failed (logged as an error): every later transaction fails until a
 * restart. */
int sto_index_compact(struct sto_index *ix, bool force, double free_ratio, uint64_t min_file_bytes,
		      uint32_t drain_timeout_ms, struct sto_index_compact_result *r);

#endif
