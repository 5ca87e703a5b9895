/* segment.h - segment files: append-only files of checksummed chunk records
 * (layout in storage/format.h).
 *
 * Writing: one sto_seg_writer, owned by the flusher thread (it owns the
 * ring too). Reading: struct sto_seg_readers caches one read-only fd per
 * segment and is thread-safe (pread).
 */
#ifndef STO_SEGMENT_H
#define STO_SEGMENT_H

#include "common/rdb_buf.h"
#include "storage/io/fault.h"
#include "storage/index/index.h"
#include "storage/series.h"
#include "storage/io/uring.h"

#include <stddef.h>
#include <stdint.h>

struct sto_seg_writer;

/* Creates chunks/seg-<id>.dat fresh (O_EXCL) with its header, synced, and
 * the directory fsynced. 0 or -errno. */
int sto_seg_create(const char *dir, uint64_t id, struct sto_ring *ring,
		   struct sto_seg_writer **out);
uint64_t sto_seg_id(const struct sto_seg_writer *w);
/* Bytes in the file (header included): the offset of the next record. */
uint64_t sto_seg_size(const struct sto_seg_writer *w);
/* Appends buf (whole chunk records) at the end. Not synced. On failure the
 * file is truncated back so that it never ends in a torn record. 0/-errno. */
int sto_seg_append(struct sto_seg_writer *w, const void *buf, size_t len);
/* sto_seg_append at a named write site: fault point `point` (or
 * STO_FP_SEG_APPEND, storage/io/fault.h) armed and firing writes half of buf,
 * then fails like a full disk (truncated back, the injected -errno). */
int sto_seg_append_at(struct sto_seg_writer *w, const void *buf, size_t len,
		      enum sto_fault_point point);
int sto_seg_sync(struct sto_seg_writer *w);
/* Cuts the file back to size bytes (<= its size): records appended after
 * size whose index commit failed. 0, or -errno (the writer is then unusable:
 * close it). */
int sto_seg_truncate(struct sto_seg_writer *w, uint64_t size);
/* Syncs and closes. NULL ok. */
int sto_seg_close(struct sto_seg_writer *w);

/* Fills the 48-byte record header at h (layout in storage/format.h) with a
 * zero checksum; extra is the u32 at offset 36 (zero but in group records). */
void sto_rec_header(uint8_t *h, uint32_t magic, uint32_t payload_len, uint64_t series_id,
		    uint64_t uid, uint64_t gen, uint32_t count, uint32_t extra);
/* XXH3-64 (seed 0) of header bytes 0..39 followed by the first
 * hashed_payload payload bytes: a record's checksum. */
uint64_t sto_rec_hash(const uint8_t *rec, size_t hashed_payload);

/* Appends one framed chunk record to out: header (magic, lengths, ids,
 * checksum) + codec payload + series key. magic is STO_CHUNK_MAGIC (points)
 * or STO_EVCHUNK_MAGIC (events: series id 0, key with the job only).
 * 0, -ENOMEM, RDB_ELIMIT. */
int sto_chunk_frame(struct rdb_buf *out, uint32_t magic, uint64_t series_id, uint64_t uid,
		    uint64_t gen, uint32_t npoints, const uint8_t *codec, size_t codec_len,
		    const struct mdl_series_key *key);

/* Checks a chunk record read from disk against what the index says it is:
 * magic, lengths, series id, uid, checksum. On success *payload and *payload_len
 * point at the codec payload + key inside rec. RDB_ECORRUPT with why
 * (static string) in *why on failure. */
int sto_chunk_check(const uint8_t *rec, size_t len, uint32_t magic, uint64_t series_id,
		    uint64_t uid, const uint8_t **payload, size_t *payload_len, const char **why);

/* Appends one supersede record (magic STO_SUP_MAGIC, layout in
 * storage/format.h) stating *sup to out. sup->src must be strictly
 * ascending by uid, every uid below sup->merged_uid, 2..STO_SUP_MAX_SOURCES
 * of them: else RDB_EINVAL. 0, -ENOMEM, RDB_EINVAL. */
int sto_sup_frame(struct rdb_buf *out, const struct sto_sup *sup);

/* Checks a supersede record read from disk (magic, length, header, XXH3
 * checksum, then the payload's shape: the rules of sto_sup_frame) and
 * decodes it into *sup with a new src array (the caller frees sup->src).
 * RDB_ECORRUPT with why (static string) in *why; -ENOMEM. *sup is untouched
 * on failure. */
int sto_sup_parse(const uint8_t *rec, size_t len, struct sto_sup *sup, const char **why);

struct sto_seg_readers;
int sto_seg_readers_new(const char *dir, struct sto_seg_readers **out);
void sto_seg_readers_free(struct sto_seg_readers *r); /* NULL ok */
/* Reads exactly len bytes at off of segment id into buf. -errno, or
 * RDB_ECORRUPT if the file is shorter than that. Thread-safe. */
int sto_seg_read(struct sto_seg_readers *r, uint64_t id, uint64_t off, void *buf, size_t len);
/* Path of a segment file, for messages. */
void sto_seg_path(const char *dir, uint64_t id, char *out, size_t outlen);

#endif
