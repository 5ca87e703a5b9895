/* admin.h - data lifecycle operations of the storage engine: statistics,
 * job deletion (with WAL tombstones), retention, compaction, verification
 * and quarantine, index rebuild, backup and restore. rankctl (directly on a
 * data directory) and the admin API (on a running server) both call these.
 *
 * Online operations that move data (delete, retention, compaction) run on
 * the engine's flusher thread, which owns the segment writer and the WAL
 * rotation; the calling thread blocks until they finish. Offline ones
 * (sto_rebuild_index, sto_restore, sto_verify_wal) work on a data
 * directory no rankdbd has open (they take its LOCK).
 */
#ifndef STO_ADMIN_H
#define STO_ADMIN_H

#include "storage/sto.h"

#include <stdbool.h>
#include <stdint.h>

/* Lifecycle settings of an open store (defaults: keep forever, check every
 * hour, compact below 50 % live). */
struct sto_lifecycle {
	uint64_t retention_s;	      /* global default; 0 = keep forever */
	uint32_t retention_check_s;   /* background retention + compaction period; 0 = never */
	double compact_min_live;      /* rewrite segments whose live fraction is below */
	uint32_t rollup_time_width_s; /* time tier bucket width; 0 = no time tier */
	uint64_t rollup_step_width;   /* step tier bucket width; 0 = no step tier */
	/* Index compaction (sto_compact_index): after a checkpoint or a
	 * compaction, when the LMDB freelist holds at least this fraction of
	 * the index file's pages (0 = never on its own) and the file is at
	 * least index_compact_min_bytes. */
	double index_compact_free_ratio;
	uint64_t index_compact_min_bytes;
};
void sto_lifecycle_default(struct sto_lifecycle *l);
void sto_set_lifecycle(struct sto *s, const struct sto_lifecycle *l);

/* ---- statistics ---- */
struct sto_job_stats {
	char job[MDL_JOB_MAX + 1];
	uint64_t series, chunks, points, chunk_bytes; /* sealed points */
	uint64_t event_chunks, events, event_bytes;
	uint64_t head_points; /* not sealed yet */
	uint64_t retention_s; /* effective */
};
typedef int (*sto_job_stats_fn)(void *arg, const struct sto_job_stats *js);
/* Calls fn for job (or every job when NULL), from one snapshot. */
int sto_stats_jobs(struct sto *s, const char *job, sto_job_stats_fn fn, void *arg);
struct sto_disk_stats {
	uint64_t segment_files, segment_bytes, live_bytes, wal_bytes, index_bytes;
	uint64_t quarantined;
};
int sto_disk_stats(struct sto *s, struct sto_disk_stats *out);

/* ---- deletion and retention ---- */
struct sto_delete_result {
	uint64_t series, chunks, event_chunks, tombstone_gen;
};
/* Deletes every chunk, event chunk, series entry and head point of job and
 * records a tombstone so that the WAL never brings it back, then its
 * metadata document (storage/jobmeta/jobmeta.h). Blocks writes for the time
 * of one index transaction. RDB_ENOTFOUND if the job has no series, no
 * events and no metadata document. */
int sto_delete_job(struct sto *s, const char *job, struct sto_delete_result *r);

/* Per-job retention override (seconds; 0 = keep forever). */
int sto_retention_set(struct sto *s, const char *job, uint64_t seconds);
int sto_retention_clear(struct sto *s, const char *job);
int sto_retention_list(struct sto *s, sto_jobval_fn fn, void *arg);
struct sto_retention_result {
	uint64_t chunks, points, event_chunks, events;
};
/* Checkpoints, then drops the index entries of chunks whose max time is
 * older than now - retention (per job). Space returns at compaction. */
int sto_retention_run(struct sto *s, struct sto_retention_result *r);

/* ---- compaction ---- */
struct sto_compact_result {
	uint64_t segments, chunks, bytes_before, bytes_after, skipped;
	uint64_t merged_from, merged_into; /* small chunks merged, chunks they became */
	uint64_t index_bytes_before, index_bytes_after; /* index/data.mdb (index compaction) */
	uint64_t quarantined; /* non-zero: refused, nothing done (quarantine entries) */
};
/* While the quarantine table holds an entry, nothing is merged or rewritten
 * (r->quarantined says how many; logged and counted in
 * sto_stats.compactions_refused): the records of quarantined entries are
 * not live to compaction, and rankctl rebuild-index recovers them only
 * while they are still in their segments. Else: first merges each
 * series' runs of consecutive small chunks (each under chunk_max_points / 4
 * points, together at most chunk_max_points, all checkpointed) into one
 * chunk each, then rewrites every closed segment
 * whose live fraction is below min_live (a negative value: the configured
 * one) into a new one. */
int sto_compact(struct sto *s, double min_live, struct sto_compact_result *r);
/* Index compaction (storage/index/index.h, sto_index_compact): rewrites
 * index/data.mdb without its free pages when force, or when the thresholds
 * of struct sto_lifecycle say so. Runs on the flusher thread; readers and
 * writers wait only while the environment is closed and reopened (writers
 * also during a second copy when one committed during the first). Needs
 * free disk space for the live index (-ENOSPC otherwise, logged).
 * RDB_EBUSY when transactions did not end in time (nothing changed). */
int sto_compact_index(struct sto *s, bool force, struct sto_index_compact_result *r);
/* Page accounting of the index (one read snapshot). */
int sto_index_info(struct sto *s, struct sto_index_stat *out);
/* Pauses / resumes compaction (backup). */
void sto_compact_pause(struct sto *s);
void sto_compact_resume(struct sto *s);

/* ---- verification ---- */
struct sto_verify_report {
	uint64_t segments, records, dead_records, chunks, event_chunks, wal_files;
	uint64_t problems, quarantined;
	uint64_t supersede_records;  /* SUP1 records found in segment files */
	uint64_t wal_damaged_ranges; /* sto_verify_wal: damage in the middle of WAL files */
	uint64_t wal_kept_files;     /* sto_verify: quarantine/wal-*.damaged files */
	uint64_t index_damaged;	     /* chunk index entries failing their checksum */
	uint64_t meta_docs;	     /* job metadata documents checked */
	uint64_t meta_damaged;	     /* ... of them damaged (each one a problem) */
	uint64_t meta_unchecked;     /* legacy documents without a checksum (not a
				      * problem: the next start gives them one) */
};
/* Called once per problem with a one-line description. */
typedef void (*sto_problem_fn)(void *arg, const char *msg);
/* Checks every record of every segment file (magic, checksum), every index
 * entry against its record (ids, length, decode, point count), the index
 * databases and every job metadata document (checksum); each
 * quarantine/wal-*.damaged file (damaged WAL bytes a recovery kept aside) is
 * a problem until removed. With quarantine, damaged
 * index entries are moved to the quarantine db (never served again). */
int sto_verify(struct sto *s, bool quarantine, sto_problem_fn fn, void *arg,
	       struct sto_verify_report *rep);
/* Offline, read-only: checks every WAL file of data_dir (header, every
 * record's checksum, and every intact record parsed as replay parses it).
 * Damage in the middle of a file (intact records after it), a bad tail of
 * any file but the newest, and intact records the next start would skip
 * (they do not parse, have an unknown type, or name a series id their
 * file does not define: one problem line per file for each kind) are
 * problems; a torn tail of the newest file is what a crash leaves and is
 * not. Reads only. 0, or -ENOMEM (a file that cannot be read is a
 * problem, not an error). */
int sto_verify_wal(const char *data_dir, sto_problem_fn fn, void *arg,
		   struct sto_verify_report *rep);

/* ---- rebuild, backup, restore ---- */
struct sto_rebuild_result {
	uint64_t segments, series, chunks, event_chunks, skipped_uncheckpointed, skipped_duplicate,
	    skipped_deleted, skipped_damaged, ckpt_gen;
	uint64_t supersede_records;  /* distinct valid supersede records read */
	uint64_t skipped_superseded; /* chunks left out: a merged chunk holds their points */
	uint64_t suspect_merges;     /* merged chunks indexed whose supersede record is damaged */
};
/* Offline: recreates index/ from the segment files (the old one is kept as
 * index.old-<ns>). Rules in docs/FORMAT.md ("Rebuilding the index"). */
int sto_rebuild_index(const char *data_dir, uint64_t map_bytes, sto_problem_fn fn, void *arg,
		      struct sto_rebuild_result *r);
struct sto_backup_result {
	uint64_t segments, bytes, ckpt_gen;
	uint64_t meta_docs;    /* job metadata documents copied (<data_dir>/meta/) */
	uint64_t meta_damaged; /* ... of them damaged (copied as they are, logged) */
};
/* Consistent backup of an open store into dir (must not exist or be
 * empty, and must not be or lie inside the data directory: RDB_EINVAL):
 * checkpoint, LMDB copy (compacted), hard links (or copies) of the segment
 * files, compaction paused meanwhile; copies of the job metadata documents
 * (meta/, each one whole). */
int sto_backup(struct sto *s, const char *dir, struct sto_backup_result *r);
/* Offline: copies a backup (index, segments, job metadata documents) into a
 * new data directory dir. */
int sto_restore(const char *backup_dir, const char *dir);

/* ---- internal to storage/ (store.c <-> admin.c) ---- */
int sto_admin_relookup(struct sto *s, const struct sto_chunk_ref *old, struct sto_chunk_ref *cur);
int sto_admin_ev_relookup(struct sto *s, const char *job, int64_t min_ts_ns, uint64_t uid,
			  uint64_t *segment_id, uint64_t *offset);
struct sto_admin_parts {
	struct sto_index *ix;
	const char *dir, *seg_dir, *wal_dir;
};
void sto_admin_parts(struct sto *s, struct sto_admin_parts *out);
/* Reads a segment range under the segment lock (compaction-safe). */
int sto_admin_seg_read(struct sto *s, uint64_t id, uint64_t off, void *buf, size_t len);

#endif
