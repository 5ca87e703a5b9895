/* sto.h - the storage engine: the public face of storage/.
 *
 * A write (sto_write) is appended to the WAL and acknowledged once durable
 * per the sync policy, then applied to the in-memory head. The head is
 * sealed into compressed chunks (segment files + LMDB index entries) by a
 * background flusher, by size (chunk_max_points per series) and by age /
 * WAL size (checkpoint: the WAL generation is rotated, the frozen head is
 * sealed, the checkpoint is recorded in LMDB, then the old WAL file is
 * deleted). Reads see WAL-acknowledged points immediately (head) and sealed
 * chunks (index), consistently: a point is never seen twice nor missed while
 * it moves from head to chunk.
 *
 * Threading: every function is thread-safe. sto_write blocks until the
 * batch is durable. Reads do not block writes for longer than a head copy.
 */
#ifndef STO_STO_H
#define STO_STO_H

#include "model/batch.h"
#include "model/cols.h"
#include "model/events.h"
#include "storage/format.h"
#include "storage/index/index.h"
#include "storage/series.h"
#include "storage/wal/wal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sto_options {
	const char *data_dir;
	enum sto_sync_policy sync;
	uint64_t wal_rotate_bytes;	/* checkpoint once the WAL file passes this */
	uint32_t checkpoint_interval_s; /* ... or once head data is this old */
	uint64_t head_max_bytes;	/* memory bound of the head; beyond: RDB_EBUSY */
	uint32_t chunk_max_points;	/* seal a series' head once it holds this many */
	uint64_t segment_max_bytes;	/* start a new segment file past this */
	uint64_t index_map_bytes;	/* LMDB map size */
	uint64_t max_series;		/* bound on distinct series; beyond: RDB_ELIMIT */
	uint64_t max_series_per_job;	/* bound on one job's series; beyond: RDB_ELIMIT */
	uint32_t batch_id_ttl_s;	/* client batch ids are remembered this long */
	bool io_uring;			/* false: pwritev/fdatasync instead of io_uring
					 * (process-wide); default true unless the
					 * environment has RANKDB_IO_URING=off */
	bool read_only;			/* inspect only (rankctl verify): no recovery, no
					 * WAL, no flusher; nothing in data_dir is created,
					 * changed or deleted, and writes fail */
};

/* Sane defaults for every option (data_dir "./data"). */
void sto_options_default(struct sto_options *o);

struct sto;

/* Opens or creates the data directory: checks FORMAT, takes the LOCK,
 * opens the index, recovers (drops uncheckpointed chunks, replays the WAL,
 * checkpoints what it replayed), opens a fresh WAL generation and starts
 * the flusher. Blocks. 0, or -errno / RDB_EFORMAT / RDB_ECORRUPT with the
 * reason logged. With opt->read_only it only takes the LOCK (if the file
 * exists) and opens the index read-only: the WAL is neither replayed nor
 * removed, chunks written after the last checkpoint stay as they are, an
 * older format is not upgraded, and sto_close writes nothing; only reads
 * and sto_verify without quarantine may be used. */
int sto_open(const struct sto_options *opt, struct sto **out);

/* Stops accepting writes, seals the whole head, checkpoints, removes the
 * WAL, closes everything. NULL ok. */
void sto_close(struct sto *s);
/* sto_close that says whether the final checkpoint succeeded: 0, or its
 * error (the WAL then still holds every acknowledged point and is replayed
 * at the next open). Everything is closed and freed either way. */
int sto_close_rc(struct sto *s);

/* Makes the batch durable and visible. Blocks until durable per the sync
 * policy. 0; RDB_EBUSY when the head is over its memory bound (retry
 * later); RDB_ELIMIT when the batch would create more series than allowed;
 * -errno / RDB_EIO on WAL failure (nothing applied). */
int sto_write(struct sto *s, const struct mdl_batch *b);

/* A write with everything a client can send at once: points, events (logs
 * and spans) and an optional client batch id that makes retries
 * idempotent. Points and events of one request are one WAL record: all or
 * nothing. */
struct sto_write_req {
	const struct mdl_batch *points;	 /* NULL or empty: none */
	const struct mdl_events *events; /* NULL or empty: none */
	const char *batch_id;		 /* NULL: no idempotency */
	size_t batch_id_len;		 /* 1..STO_BATCH_ID_MAX (storage/format.h) */
};

struct sto_write_result {
	bool duplicate; /* the batch id was seen before: nothing applied, ack it */
};

/* Like sto_write for points + events + batch id. Same blocking and errors;
 * additionally RDB_EBUSY when a request with the same batch id is in flight
 * (retry; it will then be acknowledged as a duplicate). */
int sto_write_req(struct sto *s, const struct sto_write_req *req, struct sto_write_result *res);

/* The completion of sto_write_submit: rc 0 once the write is durable (per
 * the sync policy) and applied to the head, or the error that refused it
 * (nothing of it stored). Called exactly once, on the WAL thread, on the
 * series creator thread (a write that needed new series and was refused,
 * e.g. past max_series), or on the submitting thread before
 * sto_write_submit returns (an injected fault); never under a storage
 * lock. It must not block for long (it delays the next group commit) and
 * must not call into the write path. */
typedef void (*sto_write_done_fn)(void *arg, int rc);
#define STO_PENDING 1

/* sto_write_req without waiting for the WAL: makes room in the head (so
 * applying cannot fail), queues the WAL record and returns STO_PENDING.
 * A write that needs series not created yet does not wait for their LMDB
 * commit either: it is queued for the engine's series creator thread,
 * which creates the series of every write queued meanwhile in one
 * transaction and then queues their WAL records (STO_PENDING at once).
 * When the record's group commit is durable the engine applies the write
 * to the head, then calls fn(arg, 0); on a WAL failure it releases the
 * room and calls fn(arg, error). Never acknowledge before fn. The
 * request's points, events and batch id must stay valid until fn ran.
 * Returns 0 when the write needs no WAL record (empty, or a duplicate
 * batch id: res->duplicate), or an error as sto_write_req (nothing stored);
 * fn is not called in either case. Blocks only while the WAL queue is full.
 * Any number of writes may be pending; a checkpoint waits for them. */
int sto_write_submit(struct sto *s, const struct sto_write_req *req, struct sto_write_result *res,
		     sto_write_done_fn fn, void *arg);

/* Catalog. Callbacks run inside a read transaction: copy what you keep. */
int sto_list_jobs(struct sto *s, sto_job_fn fn, void *arg);
int sto_list_series(struct sto *s, const char *job, sto_series_fn fn, void *arg);
/* sto_list_series calling fn only for the series whose metric name
 * want(arg, name, len) accepts (storage/index/index.h: the other entries
 * are skipped on their key alone). For selections by exact metric names
 * in a job of many metrics. */
int sto_list_series_metric(struct sto *s, const char *job, sto_metric_want_fn want,
			   sto_series_fn fn, void *arg);
int sto_lookup_series(struct sto *s, const struct mdl_series_key *k, uint64_t *id);

/* A point range. Time bounds are inclusive; with by_step, only points with
 * a step in [step_from, step_to] (inclusive) are selected and the time
 * bounds still apply. */
struct sto_range {
	int64_t from_ns, to_ns;
	bool by_step;
	int64_t step_from, step_to;
};

/* Why a read failed, for the operator and the client. */
struct sto_read_error {
	char msg[4608]; /* long enough for a path and the reason */
};

/* Reads the points of series_id in range into out (replacing its
 * contents), sorted by (ts, step, attempt). At most max_points: beyond,
 * RDB_ELIMIT. A chunk that fails its checksum or decode gives RDB_ECORRUPT
 * with err naming the file, offset and series; no data of it is returned.
 * 0, RDB_ELIMIT, RDB_ECORRUPT, -errno. */
int sto_read(struct sto *s, uint64_t series_id, const struct sto_range *r, size_t max_points,
	     struct mdl_cols *out, struct sto_read_error *err);

/* Reads, verifies and decodes the chunk ref into out. rec is scratch
 * memory. RDB_ECORRUPT (err says which file, offset, what) or -errno. */
int sto_read_chunk(struct sto *s, const struct sto_chunk_ref *ref, struct rdb_buf *rec,
		   struct mdl_cols *out, struct sto_read_error *err);

/* sto_read_chunk with flags. STO_READ_NO_TS: the timestamp column is not
 * decoded (checksums are still checked); out->ts_ns[0] is the chunk's
 * stats.min_ts_ns and every later point's ts_ns its stats.max_ts_ns (the
 * true timestamps are sorted and lie between those). For readers that
 * need steps and values only. */
#define STO_READ_NO_TS 1u
int sto_read_chunk_flags(struct sto *s, const struct sto_chunk_ref *ref, unsigned flags,
			 struct rdb_buf *rec, struct mdl_cols *out, struct sto_read_error *err);
/* sto_read_chunk_flags keeping only the chunk's points from the first one
 * whose step is >= min_step on (points without a step count as below):
 * the leading points are left out, and where the chunk's value column is
 * stored in blocks (docs/FORMAT.md, codec encoding 37) their blocks are
 * not decoded. For readers that drop points below min_step anyway (a step
 * range starting inside the chunk). With STO_READ_NO_TS and points left
 * out, every point's ts_ns is stats.max_ts_ns. INT64_MIN: every point. */
int sto_read_chunk_tail(struct sto *s, const struct sto_chunk_ref *ref, unsigned flags,
			int64_t min_step, struct rdb_buf *rec, struct mdl_cols *out,
			struct sto_read_error *err);

/* For a ref marked damaged (its index entry failed its checksum): reads the
 * chunk at the entry's location, checked like any read (record checksum,
 * series id, uid), and fills out with ref and statistics recomputed from the
 * points. 0, or RDB_ECORRUPT / -errno with err filled (the entry cannot be
 * trusted to locate its chunk: nothing is answered from it). Blocks on I/O. */
int sto_chunk_ref_repair(struct sto *s, const struct sto_chunk_ref *ref, struct sto_chunk_ref *out,
			 struct sto_read_error *err);

/* A consistent view of one series over a range, for queries that answer
 * from chunk statistics and decode only what they must: the head points in
 * range (copied, unsorted) and the index entries of the chunks overlapping
 * the range (time, and step when r->by_step), taken from one snapshot so no
 * point is in both. A chunk's stats cover all of its points, not only the
 * ones in range: check stats.min_ts_ns/max_ts_ns (and steps) against the
 * range before answering from them. Decode with sto_read_chunk. */
struct sto_rollup_rec {
	int64_t bucket; /* start of the bucket in its tier */
	struct sto_rollup r;
};
struct sto_series_view {
	struct mdl_cols head;	      /* owned */
	struct sto_chunk_ref *chunks; /* owned, ordered by (min_ts, uid) */
	size_t nchunks;
	struct sto_rollup_rec *rollups; /* owned, by bucket; see sto_view_series_rollups */
	size_t nrollups;
};
/* 0, RDB_ELIMIT (more than max_head_points head points in range), -errno.
 * out is filled on success, empty on failure. */
int sto_view_series(struct sto *s, uint64_t series_id, const struct sto_range *r,
		    size_t max_head_points, struct sto_series_view *out);
void sto_view_free(struct sto_series_view *v); /* NULL ok */

/* What a series view over every time holds, folded without copying it:
 * first/last timestamp over the head points and the chunk statistics
 * (min_ts_ns/max_ts_ns), and the highest step (head points' steps and the
 * chunks' max_step; MDL_STEP_NONE left out). Exactly what folding
 * sto_view_series(id, every time and step) of each series would give, a
 * damaged index entry included (its statistics are recomputed from the
 * chunk, or the call fails). The caller initialises *ext (has_points false,
 * last_step MDL_STEP_NONE) and may fold several calls into one. One
 * snapshot (LMDB read transaction plus the heads, taken under the view
 * lock shared) per call: call with at most a few thousand ids so a seal is
 * not held up long. 0 or -errno / RDB_ECORRUPT (ext then partly folded).
 * Blocks on the file system only for damaged entries. Thread-safe. */
struct sto_extent {
	bool has_points;
	int64_t first_ts_ns, last_ts_ns; /* when has_points */
	int64_t last_step;		 /* highest step; MDL_STEP_NONE if none */
};
int sto_extent_series(struct sto *s, const uint64_t *series_ids, size_t n, struct sto_extent *ext);

/* A per-job summary of that fold over every series of the job, kept in
 * memory so a listing of jobs need not walk every series each time.
 *
 * sto_job_extent_get: 0 and *out = the job's summary when one is valid.
 * Otherwise RDB_ENOTFOUND and *ticket names a build: the caller folds
 * every series of the job with sto_extent_series (its own selection of
 * series; the summary is whatever the caller computes) and hands the
 * result to sto_job_extent_put with the ticket. From the get on, every
 * point a write makes visible is folded into the build too, so walk plus
 * those points is exact even with writes running meanwhile; the put makes
 * it the summary unless it was forgotten meanwhile (then the put does
 * nothing and the next get starts another build). A caller that fails
 * to walk just does not put. -ENOMEM: no summary can be kept now (*ticket
 * is 0; walk, and a put does nothing).
 *
 * Kept up to date: every write folds its points into the job's summary
 * where they become visible (the head), under head_lock, O(points) with
 * no allocation. Forgotten (all jobs' summaries; recomputed on next use)
 * by everything that removes points or chunk entries or changes chunk
 * statistics: a job delete, a retention run's chunk drops, verify's
 * quarantine and entry repair, and close. Sealing, merging and compaction
 * move points between head and chunks without changing the fold; WAL
 * replay and dropping uncheckpointed chunks run at open, before any
 * summary exists. Bounded: at most 65536 jobs' summaries (more: all are
 * forgotten and rebuilt on demand), one small struct each. Thread-safe;
 * neither blocks on I/O. */
int sto_job_extent_get(struct sto *s, const char *job, struct sto_extent *out, uint64_t *ticket);
void sto_job_extent_put(struct sto *s, const char *job, uint64_t ticket,
			const struct sto_extent *walked);

/* Like sto_view_series, plus (same snapshot) the rollup records of tier
 * (STO_TIER_TIME or STO_TIER_STEP) that may hold points of r: the records
 * and the chunks never share a point. A record may extend past r: check its
 * first_ts_ns/last_ts_ns (and steps) before using it. More than
 * max_head_points head points or max_rollups records: RDB_ELIMIT. */
int sto_view_series_rollups(struct sto *s, uint64_t series_id, const struct sto_range *r,
			    size_t max_head_points, unsigned tier, size_t max_rollups,
			    struct sto_series_view *out);
/* The configured rollup tier widths (0: tier off). */
void sto_rollup_widths(struct sto *s, int64_t *time_width_ns, int64_t *step_width);

/* Which events a read selects. Everything given must hold. */
struct sto_ev_filter {
	const char *job;       /* required */
	uint8_t kinds;	       /* bits 1 << MDL_EV_LOG, 1 << MDL_EV_SPAN */
	uint8_t min_level;     /* logs: level >= this */
	const uint32_t *ranks; /* nranks == 0: every rank */
	size_t nranks;
	int64_t from_ns, to_ns; /* inclusive */
	bool by_step;		/* only events with a step in [step_from, step_to] */
	int64_t step_from, step_to;
	const char *text;	       /* NULL or words that must all appear as whole
					* words (case-insensitive, [A-Za-z0-9_]+) in the
					* message / span name or the field values */
	const char *const *field_keys; /* fields[key] == value (as written, strings */
	const char *const *field_vals; /* without quotes) for each i < nfields */
	size_t nfields;
	int64_t attempt; /* -1: every attempt; else only this one */
};

typedef int (*sto_ev_fn)(void *arg, const struct mdl_event *ev);

/* Calls fn for each event matching f, newest first (ts desc, then rank
 * asc, kind, text), from one consistent snapshot (head and chunks). Event
 * chunks are skipped using their index entries (time, step, rank, level,
 * kind ranges and the token filter) and decoded only when they may match.
 * At most max_events matches are collected: RDB_ELIMIT beyond (narrow the
 * filter). fn returning non-zero stops the walk and is returned. A corrupt
 * chunk gives RDB_ECORRUPT with err filled. */
int sto_events_read(struct sto *s, const struct sto_ev_filter *f, size_t max_events, sto_ev_fn fn,
		    void *arg, struct sto_read_error *err);

struct sto_stats {
	uint64_t series;
	uint64_t head_points, head_bytes;
	uint64_t chunks_sealed, points_sealed, chunk_bytes_written;
	uint64_t checkpoints;
	uint64_t points_written, batches_written;
	uint64_t write_busy; /* writes refused with RDB_EBUSY */
	uint64_t events_written, event_chunks_sealed, batch_duplicates;
	uint64_t wal_damaged_ranges;	/* damaged WAL ranges replay skipped at this start */
	uint64_t wal_undefined_records; /* replayed records naming an undefined series id */
	uint64_t wal_kept_files;      /* quarantine/wal-*.damaged files (damaged WAL bytes kept) */
	uint64_t wal_kept_bytes;      /* their bytes */
	uint64_t index_damaged;	      /* reads that met a chunk or event chunk index entry
				       * failing its checksum (answered by decoding the chunk) */
	uint64_t compactions_refused; /* compaction passes refused: quarantine not empty */
	struct sto_wal_stats wal;
};
void sto_get_stats(struct sto *s, struct sto_stats *out);

/* Fault injection at every write site: storage/io/fault.h (sto_fault_set). */

/* Test hook, process-wide (NULL: none): fn(arg, s, slice) runs on the WAL
 * thread before each slice of a completed group is applied to the head
 * (slice 0, 1, ...; 64 writes a slice), with no storage lock held. It may
 * read the store; it must not write. */
void sto_test_set_apply_hook(void (*fn)(void *arg, struct sto *s, size_t slice), void *arg);

/* Forces a checkpoint now (seals the whole head) and waits for it. */
int sto_checkpoint(struct sto *s);

#endif
