/* fault.h - storage I/O fault injection: one named point per write site.
 *
 * Every place where storage writes to disk (WAL, segment files, LMDB index,
 * each step of a checkpoint, compaction, retention, rollups, event seals,
 * metadata) asks sto_fault_hit(point) first. Unarmed, that is one relaxed
 * atomic increment (the hit counter) and one load. Armed, the point fails
 * with a chosen errno on its Nth hit, or on every hit from the Nth on, the
 * way a full or failing disk would; where a real failure can leave a torn
 * write behind (WAL group, segment append), the site writes part of the
 * data first and then fails, so the recovery code runs for real.
 *
 * Who can arm a point: tests (sto_fault_set) and rankdbd at start-up when
 * the environment variable RANKDB_FAULTS is set (sto_fault_parse; rankdbd
 * logs a WARN saying so). Nothing reachable over the network arms or reads
 * a point. docs/OPERATIONS.md ("Fault injection") says never to set it in
 * production; docs/ARCHITECTURE.md says how to add a point for a new write
 * site.
 *
 * State is process-wide (one registry for every open store): tests that
 * arm points run one store at a time. Threading: every function is
 * thread-safe and never blocks.
 */
#ifndef STO_FAULT_H
#define STO_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The write sites. Keep sto_fault_name()'s table (io/fault.c) in this order. */
enum sto_fault_point {
	STO_FP_PREPARE,		 /* making room in the head before a WAL append (ENOMEM) */
	STO_FP_WAL_APPEND,	 /* a WAL group write: half written, then the error */
	STO_FP_WAL_SYNC,	 /* a WAL group written whole, then its fdatasync fails */
	STO_FP_WAL_TRUNCATE,	 /* cutting a failed group off the WAL (the WAL breaks) */
	STO_FP_WAL_ROTATE,	 /* creating the next WAL generation file */
	STO_FP_WAL_TRIM,	 /* deleting checkpointed WAL files (checkpoint step 4) */
	STO_FP_SEG_CREATE,	 /* creating a segment file */
	STO_FP_SEG_APPEND,	 /* appending chunk records: half written, then the error */
	STO_FP_SEG_SYNC,	 /* fdatasync of a segment file */
	STO_FP_SEG_TRUNCATE,	 /* cutting records whose index commit failed off a segment */
	STO_FP_INDEX_COMMIT,	 /* any LMDB write transaction's commit */
	STO_FP_SERIES_CREATE,	 /* committing new series to the index */
	STO_FP_META_COMMIT,	 /* meta counters (segment id, chunk uid block), job settings */
	STO_FP_CKPT_SEAL,	 /* checkpoint step 1: sealing the frozen head */
	STO_FP_CKPT_COMMIT,	 /* checkpoint step 3: recording ckpt_gen (LMDB) */
	STO_FP_EVENT_SEAL,	 /* appending event chunk records */
	STO_FP_COMPACT_WRITE,	 /* compaction / small-chunk merge writing its segment */
	STO_FP_COMPACT_COMMIT,	 /* compaction / merge switching the index */
	STO_FP_RETENTION_COMMIT, /* retention dropping chunks from the index */
	STO_FP_ROLLUP_WRITE,	 /* retention storing rollup records */
	STO_FP_JOB_DELETE,	 /* a job deletion's index commit */
	STO_FP_HEAD_NEW,	 /* the next generation's head at a WAL rotation (ENOMEM) */
	STO_FP_COUNT
};

/* The point's name as RANKDB_FAULTS spells it ("seg_append"); NULL when p
 * is out of range. */
const char *sto_fault_name(enum sto_fault_point p);

/* The point called name; -ENOENT if none. */
int sto_fault_lookup(const char *name, enum sto_fault_point *out);

/* Arms p: its hit number `nth` (1 = the next hit after this call) fails
 * with -err, and with every_from also each later hit. Resets p's hit and
 * fired counters. err is a positive errno (ENOSPC, EIO, ENOMEM, ...).
 * 0, or -EINVAL (p out of range, err <= 0, nth == 0). */
int sto_fault_set(enum sto_fault_point p, int err, uint64_t nth, bool every_from);

/* Disarms p (counters are kept). */
void sto_fault_clear(enum sto_fault_point p);
/* Disarms every point and zeroes every counter. */
void sto_fault_reset(void);

/* Called by a write site before it writes: 0 (go on), or the armed -errno
 * (do not write, or write a torn part and fail; return it like the real
 * error). Logs a WARN the first time a point fires after sto_fault_set. */
int sto_fault_hit(enum sto_fault_point p);

/* Hits of p since it was last set (or since start / sto_fault_reset), and
 * how many of them failed. */
uint64_t sto_fault_hits(enum sto_fault_point p);
uint64_t sto_fault_fired(enum sto_fault_point p);

/* Arms points from a text spec: comma-separated `name=ERR@N` (the Nth hit
 * fails) or `name=ERR@N+` (the Nth and every later hit), ERR one of
 * ENOSPC, EIO, EDQUOT, ENOMEM or a positive number. "" arms nothing.
 * 0, or -EINVAL with a message for the operator in err (errlen bytes);
 * points of a spec that fails are left as they were. */
int sto_fault_parse(const char *spec, char *err, size_t errlen);

#endif
