/* codec_int.h - what the chunk codec's files share (storage/chunk/ only).
 *
 * Design. The codec (storage/chunk/codec.h) is one module in six files:
 *   codec.c         the format (its top comment), the encoder scratch, the
 *                   step and attempt columns, the payload and the public
 *                   encode/decode calls;
 *   codec_i64.c     int64 streams (raw64 .. scaled, encodings 1-6, 9);
 *   codec_float.c   float bit streams: Gorilla XOR, byte planes, float32;
 *   codec_values.c  the value column: candidate choice and dispatch;
 *   codec_block.c   the blocked value column (37) and tail reads;
 *   codec_zstd.c    zstd frames and per-thread contexts (the one file that
 *                   includes zstd.h).
 * Encoding numbers and the byte layouts are documented once, in codec.c.
 *
 * Threading: nothing here holds shared state except codec_zstd.c's
 * per-thread contexts; every function may run on any number of threads.
 * Failure: encoders return 0 or -ENOMEM (a candidate that does not apply
 * leaves its blob empty); decoders return 0, RDB_ECORRUPT on malformed
 * input, or -ENOMEM; on failure outputs are unspecified.
 */
#ifndef STO_CODEC_INT_H
#define STO_CODEC_INT_H

#include "common/rdb_err.h"
#include "common/rdb_varint.h"
#include "storage/chunk/codec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
	ENC_RAW64 = 1,
	ENC_CONST64 = 2,
	ENC_DELTA = 3,
	ENC_DOD = 4,
	ENC_DELTA_RLE = 5,
	ENC_ZSTD = 6,
	ENC_ABSENT = 7,
	ENC_MASKED = 8,
	ENC_SCALED = 9,
	ENC_CONST32 = 16,
	ENC_RLE32 = 17,
	ENC_RAW32 = 18,
	ENC_XOR = 32,
	ENC_F32_XOR = 33,
	ENC_F32_SHUF_ZSTD = 34,
	ENC_INT = 35,
	ENC_SHUF_ZSTD = 36,
	ENC_BLOCKED = 37,
};

/* Blocked value column (codec_block.c): points per block the encoder
 * writes, the least a reader accepts, and how many percent more bytes
 * than the best whole-column encoding the blocked one may cost. */
#define BLOCK_POINTS	 256u
#define BLOCK_POINTS_MIN 64u
#define BLOCK_MARGIN_PCT 4u

/* The zstd frame over a varint stream (encoding 6) is compressed only
 * when the stream has at least VARINT_ZSTD_MIN bytes and at most
 * VARINT_ZSTD_PCT percent of the best candidate found without it. Over
 * the float bit patterns of training metrics, zstd took at most 13 % off a
 * varint stream where the frame won, and it won only where the stream was
 * already the best candidate; the other compressions were wasted (about a
 * third of the codec's CPU at 512 ranks). */
#define VARINT_ZSTD_MIN 64u
#define VARINT_ZSTD_PCT 125u

/* ---- primitives ---------------------------------------------------------- *
 * Varints and zigzag: common/rdb_varint.h (rdb_varint_put/get/len,
 * rdb_zigzag/rdb_unzigzag), shared with the WAL. */

/* A read cursor over an untrusted byte range. */
struct rd {
	const uint8_t *p, *end;
};

/* Converts uint64 to int64 two's complement without implementation-defined casts. */
static inline int64_t u2s(uint64_t u)
{
	return u <= INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
}

/* ---- encoder scratch (codec.c) --------------------------------------------- */

/* One candidate's output. cap is computed up front as a worst-case bound, so
 * the writers never check capacity. p == NULL means "no candidate". */
struct blob {
	uint8_t enc;
	bool probe; /* a zstd frame compressed at the probe level only */
	uint8_t *p;
	size_t len, cap;
};

/* Allocates cap bytes (at least 1) for a candidate of encoding enc, len 0.
 * 0 or -ENOMEM (then b->p is NULL). */
int sto_codec_blob_alloc(struct blob *b, uint8_t enc, size_t cap);
/* Frees b's bytes; b becomes "no candidate". */
void sto_codec_blob_free(struct blob *b);
/* Keeps the smaller of *best and *cand in *best (ties keep *best); frees
 * the other, so *cand is always empty after. */
void sto_codec_keep_smaller(struct blob *best, struct blob *cand);

/* ---- zstd frames (codec_zstd.c) ------------------------------------------- */

/* Compresses src into a new blob of encoding enc whose body is prefix (if
 * prefix_len) then one frame. beat is the length the frame must beat
 * (SIZE_MAX: always compress at the full level; 0: probe only): a small
 * frame whose probe does not beat it stays a probe (b->probe; a valid
 * frame, only larger). A zstd failure only drops the candidate (returns
 * 0, b->p NULL); -ENOMEM when the blob cannot be allocated. */
int sto_codec_zstd_blob(struct blob *b, uint8_t enc, const uint8_t *prefix, size_t prefix_len,
			const void *src, size_t len, size_t beat);
/* Decompresses one frame of exactly `want` bytes (or, if !exact, at most
 * `want` bytes) into a new malloc'd buffer *out (the caller frees it).
 * RDB_ECORRUPT unless the frame fills the whole of [p, p + len); -ENOMEM. */
int sto_codec_zstd_unframe(const uint8_t *p, size_t len, size_t want, bool exact, uint8_t **out,
			   size_t *out_len);

/* Whether a probed frame of probe_len bytes is worth compressing at the
 * full level against a candidate of best_len bytes: it is shorter (an
 * exclusive bound). A margin of 35 % (level -1 frames of literal-heavy
 * planes are up to that much larger than level 3) won back ~12 % on
 * low-cardinality fractional float32 columns in random order, but cost
 * +50 % codec CPU and no bytes on the benchmark's 64-point columns
 * (docs/FORMAT.md, codec_zstd.c). */
bool sto_codec_zstd_near(size_t probe_len, size_t best_len);

/* ---- int64 streams (codec_i64.c) ------------------------------------------ */

/* The const64 candidate of v[0..k): left empty unless all values are equal. */
int sto_codec_enc_const64(const uint64_t *v, size_t k, struct blob *b);
/* The plain int64 stream candidates of v[0..k), k >= 1: *fixed the
 * smaller of const64 and raw64, *varint the smallest varint stream (delta,
 * dod, delta_rle); both overwritten, either may stay empty. */
int sto_codec_i64_parts(const uint64_t *v, size_t k, struct blob *fixed, struct blob *varint);
/* The smaller of const64 and raw64 of v[0..k) into *fixed (overwritten). */
int sto_codec_i64_fixed(const uint64_t *v, size_t k, struct blob *fixed);
/* The length of the shortest varint stream of v[0..k), k >= 1, measured
 * without writing it; *which names it for sto_codec_i64_varint_write. */
size_t sto_codec_i64_varint_measure(const uint64_t *v, size_t k, unsigned *which);
/* Writes the varint stream `which` of v[0..k) into *b (overwritten). */
int sto_codec_i64_varint_write(const uint64_t *v, size_t k, unsigned which, struct blob *b);
/* The zstd candidate (6) over a varint stream from sto_codec_i64_parts
 * into *out (overwritten; left empty below VARINT_ZSTD_MIN bytes); beat as
 * for sto_codec_zstd_blob. */
int sto_codec_i64_zstd(const struct blob *varint, struct blob *out, size_t beat);
/* Whether that zstd frame is worth compressing against a best candidate
 * of best_len bytes (see VARINT_ZSTD_PCT). */
bool sto_codec_i64_zstd_worth(size_t varint_len, size_t best_len);
/* Best int64 stream encoding of v[0..k), k >= 1, into *best (which is
 * overwritten); "scaled" is tried only when allow_scaled, the zstd frame
 * only when sto_codec_i64_zstd_worth against the plain streams. */
int sto_codec_best_i64_opt(const uint64_t *v, size_t k, bool allow_scaled, struct blob *best);
/* sto_codec_best_i64_opt without "scaled". */
int sto_codec_best_i64(const uint64_t *v, size_t k, struct blob *best);
/* Decodes an int64 stream body [p, p + len) of encoding enc into out[0..k),
 * k >= 1; deny lists refused encodings (0 from outside codec_i64.c). */
int sto_codec_dec_i64(uint8_t enc, const uint8_t *p, size_t len, size_t k, uint64_t *out,
		      unsigned deny);

/* ---- float bit streams (codec_float.c) ------------------------------------ */

/* XOR-encodes v[0..k), k >= 1, of the given width (32 or 64) into b. */
int sto_codec_enc_xor(const uint64_t *v, size_t k, unsigned width, uint8_t enc, struct blob *b);
/* Decodes an XOR stream of k >= 1 values of the given width into out. */
int sto_codec_dec_xor(const uint8_t *p, size_t len, size_t k, unsigned width, uint64_t *out);
/* Byte planes of the low width_bytes bytes of v[0..k) in one zstd frame;
 * beat as for sto_codec_zstd_blob. */
int sto_codec_enc_shuf_zstd(const uint64_t *v, size_t k, unsigned width_bytes, uint8_t enc,
			    struct blob *b, size_t beat);
/* Decodes a byte-plane frame of k values of width_bytes bytes into out. */
int sto_codec_dec_shuf_zstd(const uint8_t *p, size_t len, size_t k, unsigned width_bytes,
			    uint64_t *out);
/* The bytes the XOR stream of v[0..k) of the given width would take, or
 * some number >= limit once it is known to take at least limit. */
size_t sto_codec_xor_len(const uint64_t *v, size_t k, unsigned width, size_t limit);
/* The float32 planes candidate of v[0..n) when every value is
 * float32-exact: it competes in *best, and *f32 gets the float32 patterns
 * (malloc'd, n values; the caller frees them); *f32 NULL when some value
 * is not float32-exact (no candidate then). */
int sto_codec_enc_values_f32(const uint64_t *v, size_t n, struct blob *best, uint64_t **f32,
			     size_t beat);
/* out[0..n) (float32 patterns) become their float64 patterns, in place. */
void sto_codec_widen_f32(uint64_t *out, size_t n);

/* ---- value column (codec_values.c) ---------------------------------------- */

/* Best value column encoding of v[0..n), n >= 1, into *best (overwritten). */
int sto_codec_enc_values(const uint64_t *v, size_t n, struct blob *best);
/* Decodes a value column body of encoding enc, n >= 1 points, into out. */
int sto_codec_dec_values(uint8_t enc, const uint8_t *p, size_t len, size_t n, uint64_t *out);

/* ---- blocked value column (codec_block.c) --------------------------------- */

/* Whether a value column of encoding enc decodes slowly enough per point
 * for the blocked form to be worth a try. */
bool sto_codec_slow_to_decode(uint8_t enc);
/* The blocked candidate of v[0..n), n >= 2 * BLOCK_POINTS. */
int sto_codec_enc_blocked(const uint64_t *v, size_t n, struct blob *b);
/* Decodes the blocks holding points [from, n) into out[their first point
 * ..n); the values before are left as they were. */
int sto_codec_dec_blocked(const uint8_t *p, size_t len, size_t n, size_t from, uint64_t *out);
/* The first block's encoding of a blocked value column (0 otherwise). */
uint8_t sto_codec_block0_enc(const struct blob *b, size_t n);

/* ---- payload (codec.c) ---------------------------------------------------- */

/* Decodes columns [first, first + count) of n points from src after *pos,
 * advancing *pos past them; the value column from the block holding point
 * `from` on where its encoding allows. With STO_CODEC_SKIP_TS the ts
 * column's bounds are checked, its body is not decoded. */
int sto_codec_decode_columns(const uint8_t *src, size_t len, size_t *pos, int first, int count,
			     size_t n, unsigned flags, size_t from, struct mdl_cols *out);
/* Reads the payload's u32 point count into *n (RDB_ECORRUPT when 0 or
 * above max_points) and makes room for it in out (mdl_cols_reserve's
 * error when it cannot). */
int sto_codec_decode_n(const uint8_t *src, size_t len, uint32_t max_points, struct mdl_cols *out,
		       uint32_t *n);

#endif
