/* codec.h - lossless columnar encoding of one chunk's points.
 *
 * A chunk payload holds the four columns of struct mdl_cols, each encoded
 * with the encoding that is smallest for that column of that chunk (the
 * encoder tries the candidates and keeps the winner). Values are restored
 * bit-exact: NaN payloads, +-Inf, -0.0 and denormals included.
 * The only file that includes zstd.h is codec.c.
 */
#ifndef STO_CODEC_H
#define STO_CODEC_H

#include "common/rdb_buf.h"
#include "model/cols.h"

#include <stdint.h>

/* What the encoder chose, for statistics and benchmarks. */
struct sto_codec_info {
	uint8_t enc_ts, enc_step, enc_attempt, enc_value; /* encoding ids, see codec.c */
	uint32_t bytes_ts, bytes_step, bytes_attempt, bytes_value;
	uint8_t enc_value_block0; /* enc_value "blocked": its first block's encoding */
};

/* Appends the encoded form of cols (cols->n >= 1, <= STO_CHUNK_MAX_POINTS)
 * to out. info may be NULL. Does not block on I/O. Thread-safe (no shared
 * state). Returns 0, -ENOMEM, RDB_ELIMIT (out's bound) or RDB_EINVAL
 * (n out of range). On failure out->len is restored. */
int sto_codec_encode(const struct mdl_cols *cols, struct rdb_buf *out, struct sto_codec_info *info);

/* Decodes a payload made by sto_codec_encode into out (out->n set; arrays
 * grown as needed; previous contents replaced). src is untrusted: any
 * malformed input returns RDB_ECORRUPT, never crashes, never reads out of
 * bounds, never allocates more than max_points points. Returns 0,
 * RDB_ECORRUPT, -ENOMEM. *used (may be NULL) gets the bytes consumed. On
 * failure out->n is 0 and the arrays' contents are unspecified. */
int sto_codec_decode(const uint8_t *src, size_t len, uint32_t max_points, struct mdl_cols *out,
		     size_t *used);

/* Decode flags. STO_CODEC_SKIP_TS: the ts column's bounds are checked but
 * its body is not decoded; out->ts_ns is left as it was (the caller fills
 * it). For readers that need no timestamps: the ts column is often the
 * costliest to decode. */
#define STO_CODEC_SKIP_TS 1u

/* sto_codec_decode with flags (STO_CODEC_*). */
int sto_codec_decode_flags(const uint8_t *src, size_t len, uint32_t max_points, unsigned flags,
			   struct mdl_cols *out, size_t *used);

/* Tail reads. sto_codec_decode_flags that keeps only the points from the
 * first one whose step is >= min_step on (points without a step count as
 * below any min_step): the leading points are dropped from out (out->n is
 * the count kept, *dropped the count dropped), and their values are not
 * decoded where the value column is blocked (encoding 37: only the blocks
 * holding kept points are). INT64_MIN keeps every point. Same errors. */
int sto_codec_decode_tail(const uint8_t *src, size_t len, uint32_t max_points, unsigned flags,
			  int64_t min_step, struct mdl_cols *out, size_t *used, size_t *dropped);
/* The number of leading points of c whose step is below min_step. */
size_t sto_codec_lead_below(const struct mdl_cols *c, int64_t min_step);
/* Drops the first k points of c (the ts column left alone with
 * STO_CODEC_SKIP_TS in flags). */
void sto_codec_drop_lead(struct mdl_cols *c, size_t k, unsigned flags);

/* Group records (storage/chunk/group.h) store the point columns that their
 * members share once and each member's value column on its own:
 *   shared := u32 n  column(ts) column(step) column(attempt)
 *   values := column(value)
 * (the same `column` items and encodings as a chunk payload). Encoders:
 * same contract as sto_codec_encode. */
int sto_codec_encode_shared(const struct mdl_cols *cols, struct rdb_buf *out);
int sto_codec_encode_values(const struct mdl_cols *cols, struct rdb_buf *out);
/* Decodes a shared part into out (n, ts, step, attempt; values untouched,
 * room for them reserved). Same contract as sto_codec_decode. */
int sto_codec_decode_shared(const uint8_t *src, size_t len, uint32_t max_points,
			    struct mdl_cols *out, size_t *used);
/* sto_codec_decode_shared with flags (STO_CODEC_*). */
int sto_codec_decode_shared_flags(const uint8_t *src, size_t len, uint32_t max_points,
				  unsigned flags, struct mdl_cols *out, size_t *used);
/* Decodes one value column of out->n points (out->n >= 1, set by
 * sto_codec_decode_shared) into out->value. RDB_ECORRUPT, RDB_EINVAL. */
int sto_codec_decode_values(const uint8_t *src, size_t len, struct mdl_cols *out, size_t *used);
/* sto_codec_decode_values, where the values of points before `from` may be
 * left undecoded (blocked columns; their contents are then unspecified). */
int sto_codec_decode_values_from(const uint8_t *src, size_t len, size_t from, struct mdl_cols *out,
				 size_t *used);

/* One zstd frame (content size recorded) of src, appended to out.
 * 0, -ENOMEM, RDB_ELIMIT. */
int sto_codec_zstd_pack(const void *src, size_t len, struct rdb_buf *out);
/* Decompresses exactly one frame occupying all of src into out (replacing
 * its contents). The frame must record a content size <= max_out.
 * 0, RDB_ECORRUPT, -ENOMEM. */
int sto_codec_zstd_unpack(const uint8_t *src, size_t len, size_t max_out, struct rdb_buf *out);

/* Name of an encoding id, for logs and `rankctl stats`. */
const char *sto_codec_name(uint8_t enc);

#endif
