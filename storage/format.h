/* format.h - every magic number, version and on-disk record layout of
 * rankdb's data directory, in one place. docs/FORMAT.md is the normative
 * description; this header must agree with it. All integers on disk are
 * little-endian (rdb_get_le32 and friends), except LMDB keys, which are
 * big-endian so that they sort numerically.
 *
 * Data directory:
 *   FORMAT                text: "rankdb data directory\nformat 5\n"
 *   LOCK                  flock(2)ed by the running server
 *   index/                LMDB environment (derived: rebuildable from chunks/)
 *   wal/wal-<gen %016x>.log  write-ahead log, one file per generation
 *   chunks/seg-<id %016x>.dat segment files holding chunk records
 *   meta/<job>.meta       job metadata documents (checksummed, see below)
 */
#ifndef STO_FORMAT_H
#define STO_FORMAT_H

#include "model/series.h"

#include <stdint.h>

#define STO_FORMAT_VERSION 5u
/* The oldest version this build reads. A directory of format 1 (before
 * group and supersede records), 2 (before checksums in index values), 3
 * (before blocked value columns, codec encoding 37) or 4 (before checksums
 * in the other index values) is upgraded in place at its first open:
 * FORMAT says 5 from then on, so that an older rankdbd refuses it instead
 * of misreading group records, 136-byte chunk entries or sealed values, or
 * reporting blocked chunks as corrupt; the index's format_version says 5
 * once every value has its checksum (rewritten in bounded transactions,
 * storage/index/index.c; until then values without one are read as they
 * are, and a crash in the middle is finished at the next open). WAL and
 * segment files of formats 1 to 4 are read as they are (their layouts did
 * not change). */
#define STO_FORMAT_VERSION_OLDEST 1u
/* The first format whose index values carry checksums. */
#define STO_FORMAT_INDEX_CHECKSUMS 3u
/* The first format in which every other index value carries one too (the
 * meta, events, evpending, pending, batch_ids, batch_time, tombstones,
 * retention, quarantine, seg_trash and supersede tables: a trailer,
 * storage/index/ix_seal.c). A format 1 to 4 index is upgraded at its first
 * open (not read-only): every such value is rewritten with its trailer in
 * bounded transactions before format_version says 5. */
#define STO_FORMAT_SEALED_VALUES 5u
/* What segment headers written by this build say: the format of the last
 * change to segment files (4: encoding 37). Readers check the magic only. */
#define STO_SEG_VERSION 4u

/* ---- WAL file ------------------------------------------------------------
 * Header (32 bytes):
 *   0  magic[8]   "RDBWAL\0\1"
 *   8  u32        format version (STO_FORMAT_VERSION)
 *   12 u32        header length (32)
 *   16 u64        generation (equals the file name's)
 *   24 u64        creation time, ns since epoch
 * Then records, back to back:
 *   0  u32        payload length L (<= STO_WAL_MAX_PAYLOAD)
 *   4  u8         record type (STO_WAL_REC_*)
 *   5  u8[3]      zero
 *   8  u64        XXH3-64, seed = generation, over bytes 0..7 of this header
 *                 followed by the L payload bytes
 *   16 u8[L]      payload
 * At a record whose header is incomplete, whose length is out of range, or
 * whose checksum does not match, replay looks for the next intact record:
 * if one follows, the bytes in between are damage (kept in quarantine/, the
 * records after them applied); if none does, they are the file's tail (torn
 * by a crash when it is the newest file). docs/FORMAT.md has the rule. */
#define STO_WAL_MAGIC		"RDBWAL\0\1"
#define STO_WAL_HEADER_SIZE	32u
#define STO_WAL_REC_HEADER_SIZE 16u
#define STO_WAL_MAX_PAYLOAD	(256u * 1024u * 1024u)

/* The version a WAL file header says. Files of versions 1 to 4 (the
 * directory format versions up to 4: records of types 1 to 3 only) are
 * read as they are; 5 adds record types 4 and 5. It is above every version
 * an older build accepts, so such a build refuses a file that may hold
 * them with its format error instead of skipping them as damage. */
#define STO_WAL_VERSION	       5u
#define STO_WAL_VERSION_OLDEST 1u

enum sto_wal_rec_type {
	STO_WAL_REC_POINTS = 1, /* a batch of points, see below (read, no longer written) */
	STO_WAL_REC_EVENTS = 2, /* reserved */
	STO_WAL_REC_BATCH = 3,	/* points and/or events, with an optional batch id (read) */
	STO_WAL_REC_DEFS = 4,	/* series definitions: sid -> key for the rest of the file */
	STO_WAL_REC_CBATCH = 5, /* a batch record whose points name series by id */
	STO_WAL_REC_LAST = 5,	/* the highest known type */
};

/* STO_WAL_REC_POINTS payload:
 *   u32 nseries
 *   nseries times:
 *     u8  job length J (1..MDL_JOB_MAX), J bytes job id
 *     u32 rank (MDL_RANK_JOB for the job-level pseudo-rank)
 *     u16 metric length M (1..MDL_METRIC_MAX), M bytes metric name
 *     u32 npoints
 *     npoints times STO_WAL_POINT_SIZE bytes:
 *       i64 ts_ns, i64 step (MDL_STEP_NONE if absent), u32 attempt, u64 value bits
 */
#define STO_WAL_POINT_SIZE 28u

/* The longest client batch id (bytes): what a write may carry (storage/sto.h,
 * sto_write_req) and what a batch record may hold (below). */
#define STO_BATCH_ID_MAX 128u

/* STO_WAL_REC_BATCH payload:
 *   u8  id length I (0 = no client batch id, else 1..STO_BATCH_ID_MAX),
 *       I bytes id
 *   u32 P, P bytes: a STO_WAL_REC_POINTS payload (P = 0: no points)
 *   u32 E, E bytes: an events payload (storage/events.c; E = 0: none):
 *     u32 count, then per event: u8 kind, u8 level, u32 rank, u32 attempt,
 *     i64 ts_ns, i64 step, i64 duration_ns, u8 job length, job,
 *     u32 text length, text, u32 fields length, fields (JSON object text)
 */

/* STO_WAL_REC_DEFS payload (series definitions):
 *   u32 n, then n times: u64 sid (>= 1), u8 J (1..MDL_JOB_MAX) + J bytes
 *   job, u32 rank, u16 M (1..MDL_METRIC_MAX) + M bytes metric; nothing after
 * Binds each sid to its key for the records after it in the same file
 * (a later definition of the same sid replaces it). A record with one
 * malformed definition (sid 0 included) binds none of them. The ids are the
 * writer's series ids, but replay never takes them for index ids: it
 * resolves the key anew (rankctl rebuild-index may renumber series).
 *
 * STO_WAL_REC_CBATCH payload: as STO_WAL_REC_BATCH (u8 I + id, u32 P +
 * points, u32 E + events) with P bytes of compact points:
 *   u32 nseries, then per series:
 *     varint zigzag(sid - previous series' sid; the first: - 0)
 *     varint npoints
 *     npoints times: varint zigzag(ts_ns delta), varint zigzag(step
 *       delta), varint zigzag(attempt delta), u64 value bits
 * Varints are LEB128 (7 bits per byte, low group first, <= 10 bytes).
 * Deltas are taken modulo 2^64 (steps of MDL_STEP_NONE included) against
 * the previous point of the series, and for a series' first point against
 * the first point of the series before it in the record (the record's
 * first series: against 0). Every sid (never 0) must have been defined
 * earlier in the same file. A per-rank record (32 metrics x 1 point) takes ~14 bytes
 * per point instead of 54-66 (docs/BENCHMARKS.md). */

/* ---- Segment file ----------------------------------------------------------
 * Header (32 bytes):
 *   0  magic[8]   "RDBSEG\0\1"
 *   8  u32        format version
 *   12 u32        header length (32)
 *   16 u64        segment id (equals the file name's)
 *   24 u64        creation time, ns since epoch
 * Then chunk records, back to back, each:
 *   0  u32        magic "CHK1" (0x314b4843 read as u32 LE)
 *   4  u32        payload length P
 *   8  u64        series id
 *   16 u64        chunk uid (unique over the data directory's life)
 *   24 u64        WAL generation that produced the chunk
 *   32 u32        point count
 *   36 u32        zero
 *   40 u64        XXH3-64, seed 0, over bytes 0..39 and the payload
 *   48 u8[P]      payload: codec output (storage/chunk/codec.h), then the series
 *                 key record (u8 J, job, u32 rank, u16 M, metric) so that the
 *                 index can be rebuilt from segment files alone
 */
#define STO_SEG_MAGIC	      "RDBSEG\0\1"
#define STO_SEG_HEADER_SIZE   32u
#define STO_CHUNK_MAGIC	      0x314b4843u
#define STO_CHUNK_HEADER_SIZE 48u
#define STO_CHUNK_MAX_PAYLOAD (64u * 1024u * 1024u)

/* Group records hold one chunk of each of several series that share their
 * timestamps, steps and attempts (the metrics of one (job, rank) sent in the
 * same records), so those columns are stored once. Same record header with
 * magic "GRP1", series id 0, uid U (member k's chunk is uid U + k), point
 * count n (of each member), and at 36 the u32 head length H. The checksum
 * at 40 covers bytes 0..39 and the first H payload bytes only (the head);
 * each member's section has its own checksum, so a member is read without
 * its siblings. Payload:
 *   0  u8   member count m (2..STO_GROUP_MAX_MEMBERS)    1 u8[3] zero
 *   4  shared part: u32 n, column(ts), column(step), column(attempt)
 *      (storage/chunk/codec.h)
 *   H - 24m  directory, m entries in member order: u64 series id, u32
 *      section offset (from the payload start), u32 section length, u64
 *      XXH3-64 (seed 0) of the section
 *   H  sections back to back (the first at H, the last ending at P): the
 *      series key record (u8 J, job, u32 rank, u16 M, metric), column(value)
 * Each member has its own chunk index entry: byte 1 = m, byte 2 = k, u32 at
 * 124 = H; its length and offset are the whole record's. */
#define STO_GROUP_MAGIC	      0x31505247u
#define STO_GROUP_MAX_MEMBERS 64u

/* Event chunks (logs and spans of one job) use the same record header with
 * magic "EVC1", series id 0 and point count = event count. The payload is
 * one zstd frame (content size recorded) of the columns
 *   u32 n, u8 kind[n], u8 level[n], u32 rank[n], u32 attempt[n],
 *   i64 ts_ns[n], i64 step[n], i64 duration_ns[n], u32 text_len[n],
 *   u32 fields_len[n], the texts back to back, the fields back to back
 * followed (outside the frame) by the key record with the job, rank
 * MDL_RANK_JOB and an empty metric. At most STO_EVCHUNK_MAX_EVENTS events
 * and STO_EVCHUNK_MAX_RAW bytes before compression. */
#define STO_EVCHUNK_MAGIC      0x31435645u
#define STO_EVCHUNK_MAX_EVENTS 4096u
#define STO_EVCHUNK_MAX_RAW    (8u * 1024u * 1024u)

/* Supersede records (compaction's small-chunk merge, storage/lifecycle/compact.c).
 * A merged chunk replaces a run of source chunks of the same series; their
 * records stay in older segments until those are rewritten, so the merge
 * writes, in the same append and immediately before the merged chunk
 * record, one supersede record with the same record header:
 *   0  u32  magic "SUP1" (0x31505553)
 *   4  u32  payload length P = 8 + 16 * n
 *   8  u64  series id of the merged chunk (never 0)
 *   16 u64  uid of the merged chunk
 *   24 u64  WAL generation of the merged chunk
 *   32 u32  n: source count, 2..STO_SUP_MAX_SOURCES
 *   36 u32  zero
 *   40 u64  XXH3-64, seed 0, over bytes 0..39 and the payload
 *   48      payload: i64 min_ts_ns of the merged chunk, then n times
 *           (u64 source uid, i64 source min_ts_ns), strictly ascending by
 *           uid, every uid below the merged uid
 * The sources are every chunk of the series whose points the merged chunk
 * holds, transitively (a source that was itself a merged chunk brings its
 * own sources along). It takes effect only if its merged chunk is indexed.
 * Rules: docs/FORMAT.md, "Supersede records". */
#define STO_SUP_MAGIC	    0x31505553u
#define STO_SUP_FIXED	    8u /* payload bytes before the source list */
#define STO_SUP_SOURCE_SIZE 16u
#define STO_SUP_MAX_SOURCES (2u * 65536u) /* a merge tree over <= 65536 points */

/* Event chunk index entry (LMDB db "events", key job \0 min_ts uid), LE:
 *   0  u8   entry version (2)    1 u8 kinds mask (1 << kind)
 *   2  u8   levels mask (1 << level, logs only)    3 u8 zero
 *   4  u32  record length        8 u64 segment id    16 u64 offset
 *   24 u64  WAL generation       32 u32 count        36 u32 log2(bloom bits)
 *   40 i64  min ts   48 i64 max ts   56 i64 min step   64 i64 max step
 *   72 u32  min rank             76 u32 max rank (MDL_RANK_JOB sorts last)
 *   80 u64  XXH3-64 (seed 0) of the bloom filter bytes (checked only when
 *           a query consults the filter: format 5's seal of the value covers
 *           the key and bytes 0..87 only, storage/index/ix_seal.c)
 *   88      bloom filter bytes (2^log2 / 8): tokens of messages, span names
 *           and field values; bit positions h1 + i * h2 (i = 0..2) mod bits,
 *           h = XXH3-64(token, seed 0x5eed), h1 = low 32 bits, h2 = high | 1
 * Version 1 (index formats 1 to 4) had no filter checksum: the filter
 * started at byte 80. The upgrade to format 5 rewrites it as version 2.
 */
#define STO_EVENTRY_FIXED    88u
#define STO_EVENTRY_V1_FIXED 80u

/* ---- Job metadata document (meta/<job>.meta) ----------------------------
 * One file per job, written whole (temporary file, fsync, rename, directory
 * fsync) by storage/jobmeta/jobmeta.c:
 *   0  magic[8]   "RDBJMETA"
 *   8  u32        version (STO_JOBMETA_VERSION)
 *   12 u32        document length L (<= STO_JOBMETA_MAX_BYTES)
 *   16 u64        XXH3-64 of the L document bytes, seed = XXH3-64 (seed 0) of
 *                 bytes 0..15 of this header followed by the job id's bytes
 *                 (as in the file name)
 *   24 u8[L]      the document, exactly as the client sent it (a JSON object)
 * The file is exactly 24 + L bytes. Version 0 is the legacy form
 * meta/<job>.json (the bare document, no checksum), upgraded in place at
 * open. */
#define STO_JOBMETA_MAGIC	"RDBJMETA"
#define STO_JOBMETA_VERSION	1u
#define STO_JOBMETA_HEADER_SIZE 24u
#define STO_JOBMETA_MAX_BYTES	(1u << 20)

/* ---- Data model bounds ----------------------------------------------------
 * The bounds of job ids, metric names, ranks and steps, and the value bits of
 * null, are the data model's (model/series.h); the on-disk layouts above
 * depend on them: a job length is one byte, a metric length two. */
_Static_assert(MDL_JOB_MAX <= 255, "job length is a u8 on disk");
_Static_assert(MDL_METRIC_MAX <= 65535, "metric length is a u16 on disk");
#define STO_CHUNK_MAX_POINTS 65536u /* hard bound a decoder accepts */

_Static_assert(sizeof(STO_WAL_MAGIC) - 1 == 8, "wal magic is 8 bytes");
_Static_assert(sizeof(STO_SEG_MAGIC) - 1 == 8, "segment magic is 8 bytes");
_Static_assert(sizeof(STO_JOBMETA_MAGIC) - 1 == 8, "job metadata magic is 8 bytes");

#endif
