/* codec.c - lossless columnar encoding of one chunk's points.
 *
 * Design. Each column is encoded on its own. The encoder tries the
 * candidate encodings that apply to the column and keeps the smallest
 * output (ties keep the earlier candidate, which is the cheaper to decode);
 * candidates that cannot win are measured or skipped rather than written
 * (codec_i64.c, codec_values.c).
 * Values are restored bit-exact: every transform below is a bijection on the
 * bits it accepts, and candidates that would lose bits are skipped.
 *
 * This file holds the format (below), the encoder scratch, the step and
 * attempt columns and the payload; the int64 streams, float bit streams,
 * value column, blocked value column and zstd frames have files of their
 * own (storage/chunk/codec_int.h lists them and what they share).
 *
 * FORMAT (all integers little-endian unless said otherwise)
 *
 *   payload  := u32 n (1..STO_CHUNK_MAX_POINTS)  column(ts) column(step)
 *               column(attempt) column(value)
 *   column   := u8 enc  u32 L  u8[L] body
 *
 * The payload ends after the value column; bytes after it belong to the
 * caller (*used reports where it ends). Inside a column every byte must be
 * consumed: trailing bytes are corruption. Primitives:
 *   varint   unsigned LEB128, at most 10 bytes, low group first; a 10th
 *            byte is 0 or 1 (64 bits). common/rdb_varint.h reads and writes
 *            them, for the WAL too.
 *   zz(x)    zigzag of a 64-bit two's complement x: (x << 1) ^ (x >> 63),
 *            so small magnitudes get short varints. All delta arithmetic is
 *            modulo 2^64 (uint64_t), so any int64 sequence round-trips.
 *   frame    one zstd frame that records its content size; the decoder
 *            requires the content size to be present, within the bound the
 *            encoding gives, and the frame to end exactly at the body's end.
 *
 * Int64 streams. Used for ts_ns, step, and the value column (where the
 * "integers" are the IEEE bit patterns, good for smooth float64 such as a
 * learning-rate schedule). A stream of k >= 1 values v[0..k):
 *    1 raw64      k * u64
 *    2 const64    u64 v (all k values equal)
 *    3 delta      varint zz(v0), then for i >= 1: varint zz(v[i] - v[i-1])
 *    4 dod        varint zz(v0); if k >= 2 varint zz(v1 - v0); then for
 *                 i >= 2: varint zz(d[i] - d[i-1]), d[i] = v[i] - v[i-1]
 *    5 delta_rle  varint zz(v0), then pairs (varint zz(delta), varint run),
 *                 run >= 1, meaning "run more values, each previous + delta";
 *                 the runs sum to exactly k - 1 (0,1,2,... is 4 bytes)
 *    6 zstd       u8 inner enc (1..5), frame; the frame's content (at most
 *                 20 * k + 16 bytes) is the inner encoding's body
 *    9 scaled     varint g >= 2, varint zz(b), u8 inner enc (1..6), inner
 *                 body of k values q[i]: v[i] = b + q[i] * g (mod 2^64).
 *                 For values on a grid: timestamps in whole us or ms.
 * Step column, additionally:
 *    7 absent     empty body: every step is MDL_STEP_NONE
 *    8 masked     u8 mask kind, mask, u8 inner enc, inner body (to the end).
 *                 The mask says which points have a step. Kind 0: bitmap of
 *                 ceil(n / 8) bytes, bit i (byte i / 8, LSB first) set when
 *                 point i has a step, unused high bits zero. Kind 1: varint
 *                 run lengths alternating present, absent, present, ...
 *                 (the first may be 0), summing to exactly n. The inner
 *                 int64 stream (1..6, 9) holds the c >= 1 present steps in order;
 *                 absent points read back as MDL_STEP_NONE.
 * Attempt column (u32):
 *   16 const32    u32 a (all n equal)
 *   17 rle32      pairs (varint a <= UINT32_MAX, varint run >= 1) summing to n
 *   18 raw32      n * u32
 * Value column (u64 IEEE-754 binary64 bits): the int64 streams (1..6, 9)
 * over the bit patterns, and:
 *   32 xor        Gorilla XOR bit stream, width W = 64 (below)
 *   33 f32_xor    the same with W = 32 over the float32 patterns of values
 *                 that are exactly float32 (see "float32-exact")
 *   34 f32_shuf_zstd  frame of 4 * n bytes: byte plane b (b = 0 least
 *                 significant) of every float32 pattern, plane after plane
 *   35 int        u8 inner enc (1..6, 9), inner int64 stream body: each value is
 *                 an integer s, |s| <= 2^53, stored as the double (s) (+0.0
 *                 for 0; -0.0 is never "int"); |s| > 2^53 is corruption
 *   36 shuf_zstd  frame of 8 * n bytes: byte planes of the 64-bit patterns
 *   37 blocked    varint B (BLOCK_POINTS_MIN <= B < n), then nb = ceil(n / B)
 *                 u32 block lengths L[0..nb), then nb blocks back to back,
 *                 each u8 inner enc (any value encoding but 37) and L[b] - 1
 *                 bytes of inner body: block b holds points [b * B,
 *                 min(n, (b + 1) * B)). The lengths must sum to exactly the
 *                 rest of the body. A reader that needs only the points from
 *                 some index on decodes only the blocks holding them (seek
 *                 points: a query over the last steps of a long chunk).
 *
 * Gorilla XOR stream (MSB-first bit stream, zero-padded to a byte; padding
 * must be zero). F = log2(W) bits for the field widths (6, or 5 for W = 32).
 *   W bits v0; then for each next value x = v ^ prev:
 *   '0'                       x == 0
 *   '10' + len bits           reuse the previous window (lead, len); an
 *                             error when no window was set yet
 *   '11' + F bits lead + F bits (len - 1) + len bits   new window; lead +
 *                             len <= W else corruption
 *   the len bits are x >> (W - lead - len).
 *
 * float32-exact: a double is float32-exact when its bits are the widening of
 * some float32 pattern, done here on bits (not by the FPU) so that NaN
 * payloads, signalling NaNs, -0.0 and denormals map exactly: sign kept,
 * exponent rebased (float32 denormals become normal doubles), mantissa
 * shifted left 29, NaN/Inf exponent all ones with the payload shifted 29.
 * The candidate is skipped if any value of the chunk is not float32-exact.
 *
 * Invariants: decoding never reads outside [src, src + len), never
 * allocates more than O(max_points) (output columns, plus one scratch
 * buffer of at most 20 * n + 16 bytes), and fails with RDB_ECORRUPT on any
 * unknown encoding, length mismatch, overlong varint, run past n, or frame
 * whose size is not the expected one. decode(encode(c)) == c bit for bit.
 *
 * Threading: no shared state; any number of threads may encode and decode.
 * Failure: encode leaves out->len unchanged; decode sets out->n = 0 (the
 * arrays' contents are then unspecified) and returns the error.
 */
#include "storage/chunk/codec_int.h"

#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "storage/format.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define STEP_NONE_BITS ((uint64_t)1 << 63) /* MDL_STEP_NONE as uint64_t */
const char *sto_codec_name(uint8_t enc)
{
	switch (enc) {
	case ENC_RAW64:
		return "raw64";
	case ENC_CONST64:
		return "const64";
	case ENC_DELTA:
		return "delta";
	case ENC_DOD:
		return "dod";
	case ENC_DELTA_RLE:
		return "delta_rle";
	case ENC_ZSTD:
		return "zstd";
	case ENC_ABSENT:
		return "absent";
	case ENC_MASKED:
		return "masked";
	case ENC_SCALED:
		return "scaled";
	case ENC_CONST32:
		return "const32";
	case ENC_RLE32:
		return "rle32";
	case ENC_RAW32:
		return "raw32";
	case ENC_XOR:
		return "xor";
	case ENC_F32_XOR:
		return "f32_xor";
	case ENC_F32_SHUF_ZSTD:
		return "f32_shuf_zstd";
	case ENC_INT:
		return "int";
	case ENC_SHUF_ZSTD:
		return "shuf_zstd";
	case ENC_BLOCKED:
		return "blocked";
	default:
		return "unknown";
	}
}

/* ---- encoder scratch ------------------------------------------------------ */

/* struct blob: codec_int.h */

int sto_codec_blob_alloc(struct blob *b, uint8_t enc, size_t cap)
{
	b->enc = enc;
	b->probe = false;
	b->len = 0;
	b->cap = cap;
	b->p = malloc(cap ? cap : 1);
	return b->p ? 0 : -ENOMEM;
}

void sto_codec_blob_free(struct blob *b)
{
	free(b->p);
	b->p = NULL;
	b->len = 0;
}

/* Keeps the smaller of *best and *cand in *best; frees the other. */
void sto_codec_keep_smaller(struct blob *best, struct blob *cand)
{
	if (cand->p && (!best->p || cand->len < best->len)) {
		struct blob t = *best;
		*best = *cand;
		*cand = t;
	}
	sto_codec_blob_free(cand);
}

/* ---- step column ---------------------------------------------------------------- */

/* Mask kind 1: alternating present/absent run lengths; NULL p only measures. */
static size_t put_mask_runs(const uint64_t *step, size_t n, uint8_t *p)
{
	uint8_t tmp[10];
	size_t o = 0;
	bool present = true;
	for (size_t i = 0; i < n;) {
		size_t run = 0;
		while (i + run < n && (step[i + run] != STEP_NONE_BITS) == present)
			run++;
		o += rdb_varint_put(p ? p + o : tmp, run);
		i += run;
		present = !present;
	}
	return o;
}

/* Body: mask kind, mask, inner enc, inner body. */
static int enc_step_masked(const uint64_t *step, size_t n, size_t count, struct blob *best)
{
	uint64_t *vals = malloc(count * sizeof(*vals));
	struct blob inner = {0};
	int rc = -ENOMEM;
	if (!vals)
		goto out;
	for (size_t i = 0, j = 0; i < n; i++)
		if (step[i] != STEP_NONE_BITS)
			vals[j++] = step[i];
	rc = sto_codec_best_i64_opt(vals, count, true, &inner);
	size_t bitmap_len = (n + 7) / 8, runs_len = put_mask_runs(step, n, NULL);
	size_t mask_len = runs_len < bitmap_len ? runs_len : bitmap_len;
	if (!rc)
		rc = sto_codec_blob_alloc(best, ENC_MASKED, 2 + mask_len + inner.len);
	if (rc)
		goto out;
	best->p[0] = runs_len < bitmap_len;
	if (runs_len < bitmap_len) {
		put_mask_runs(step, n, best->p + 1);
	} else {
		memset(best->p + 1, 0, bitmap_len);
		for (size_t i = 0; i < n; i++)
			if (step[i] != STEP_NONE_BITS)
				best->p[1 + i / 8] |= (uint8_t)(1u << (i % 8));
	}
	best->p[1 + mask_len] = inner.enc;
	memcpy(best->p + 2 + mask_len, inner.p, inner.len);
	best->len = 2 + mask_len + inner.len;
out:
	sto_codec_blob_free(&inner);
	free(vals);
	return rc;
}

static int enc_steps(const uint64_t *step, size_t n, struct blob *best)
{
	size_t count = 0;
	for (size_t i = 0; i < n; i++)
		count += step[i] != STEP_NONE_BITS;
	if (count == 0)
		return sto_codec_blob_alloc(best, ENC_ABSENT, 0);
	if (count == n)
		return sto_codec_best_i64_opt(step, n, true, best);
	return enc_step_masked(step, n, count, best);
}

/* Reads the mask at r into bitmap (ceil(n/8) bytes, zeroed); counts present. */
static int dec_mask(struct rd *r, size_t n, uint8_t *bitmap, size_t *count)
{
	size_t bytes = (n + 7) / 8, c = 0;
	if (r->p == r->end)
		return RDB_ECORRUPT;
	uint8_t kind = *r->p++;
	if (kind == 0) {
		if ((size_t)(r->end - r->p) < bytes)
			return RDB_ECORRUPT;
		memcpy(bitmap, r->p, bytes);
		r->p += bytes;
		if (n % 8 && bitmap[bytes - 1] >> (n % 8))
			return RDB_ECORRUPT; /* bits past n */
		for (size_t i = 0; i < bytes; i++)
			c += (size_t)__builtin_popcount(bitmap[i]);
	} else if (kind == 1) {
		bool present = true;
		for (size_t i = 0; i < n; present = !present) {
			uint64_t run;
			if (rdb_varint_get(&r->p, r->end, &run) || run > n - i)
				return RDB_ECORRUPT;
			for (size_t k = i; present && k < i + (size_t)run; k++)
				bitmap[k / 8] |= (uint8_t)(1u << (k % 8));
			c += present ? (size_t)run : 0;
			i += (size_t)run;
		}
	} else {
		return RDB_ECORRUPT;
	}
	*count = c;
	return c ? 0 : RDB_ECORRUPT;
}

static int dec_step_masked(const uint8_t *p, size_t len, size_t n, uint64_t *out)
{
	struct rd r = {p, p + len};
	size_t count = 0;
	uint8_t *bitmap = calloc((n + 7) / 8, 1);
	int rc = bitmap ? dec_mask(&r, n, bitmap, &count) : -ENOMEM;
	if (rc == 0 && r.p == r.end)
		rc = RDB_ECORRUPT; /* no inner encoding */
	if (rc == 0)
		rc = sto_codec_dec_i64(r.p[0], r.p + 1, (size_t)(r.end - r.p) - 1, count, out, 0u);
	/* spread the count present values to their places, from the back */
	for (size_t i = n, j = count; rc == 0 && i-- > 0;)
		out[i] = bitmap[i / 8] >> (i % 8) & 1 ? out[--j] : STEP_NONE_BITS;
	free(bitmap);
	return rc;
}

static int dec_steps(uint8_t enc, const uint8_t *p, size_t len, size_t n, uint64_t *out)
{
	if (enc == ENC_ABSENT) {
		if (len)
			return RDB_ECORRUPT;
		for (size_t i = 0; i < n; i++)
			out[i] = STEP_NONE_BITS;
		return 0;
	}
	if (enc == ENC_MASKED)
		return dec_step_masked(p, len, n, out);
	return sto_codec_dec_i64(enc, p, len, n, out, 0u);
}

/* ---- attempt column ------------------------------------------------------------ */

static int enc_attempts(const uint32_t *a, size_t n, struct blob *best)
{
	size_t runs = 1;
	for (size_t i = 1; i < n; i++)
		runs += a[i] != a[i - 1];
	int rc;
	if (runs == 1) {
		rc = sto_codec_blob_alloc(best, ENC_CONST32, 4);
		if (!rc) {
			rdb_put_le32(best->p, a[0]);
			best->len = 4;
		}
		return rc;
	}
	rc = sto_codec_blob_alloc(best, ENC_RLE32, runs * 8); /* pair: <= 5 + 3 bytes */
	for (size_t i = 0; i < n && !rc;) {
		size_t run = 1;
		while (i + run < n && a[i + run] == a[i])
			run++;
		best->len += rdb_varint_put(best->p + best->len, a[i]);
		best->len += rdb_varint_put(best->p + best->len, run);
		i += run;
	}
	if (rc || best->len < 4 * n)
		return rc;
	sto_codec_blob_free(best);
	rc = sto_codec_blob_alloc(best, ENC_RAW32, 4 * n);
	for (size_t i = 0; i < n && !rc; i++)
		rdb_put_le32(best->p + 4 * i, a[i]);
	best->len = rc ? 0 : 4 * n;
	return rc;
}

static int dec_attempt_rle(const uint8_t *p, size_t len, size_t n, uint32_t *out)
{
	struct rd r = {p, p + len};
	for (size_t i = 0; i < n;) {
		uint64_t a, run;
		if (rdb_varint_get(&r.p, r.end, &a) || rdb_varint_get(&r.p, r.end, &run))
			return RDB_ECORRUPT;
		if (a > UINT32_MAX || run == 0 || run > n - i)
			return RDB_ECORRUPT;
		for (size_t end = i + (size_t)run; i < end; i++)
			out[i] = (uint32_t)a;
	}
	return r.p == r.end ? 0 : RDB_ECORRUPT;
}

static int dec_attempts(uint8_t enc, const uint8_t *p, size_t len, size_t n, uint32_t *out)
{
	switch (enc) {
	case ENC_CONST32:
		if (len != 4)
			return RDB_ECORRUPT;
		for (size_t i = 0; i < n; i++)
			out[i] = rdb_get_le32(p);
		return 0;
	case ENC_RAW32:
		if (len != 4 * n)
			return RDB_ECORRUPT;
		for (size_t i = 0; i < n; i++)
			out[i] = rdb_get_le32(p + 4 * i);
		return 0;
	case ENC_RLE32:
		return dec_attempt_rle(p, len, n, out);
	default:
		return RDB_ECORRUPT;
	}
}

/* ---- payload --------------------------------------------------------------------- */

static int encode_columns(const struct mdl_cols *c, struct blob col[4])
{
	size_t n = c->n;
	int rc = sto_codec_best_i64_opt((const uint64_t *)c->ts_ns, n, true, &col[0]);
	if (!rc)
		rc = enc_steps((const uint64_t *)c->step, n, &col[1]);
	if (!rc)
		rc = enc_attempts(c->attempt, n, &col[2]);
	if (!rc)
		rc = sto_codec_enc_values(c->value, n, &col[3]);
	return rc;
}

/* Writes columns [first, first + count) of col as `column` items. */
static int put_columns(const struct blob *col, int first, int count, bool with_n, uint32_t n,
		       struct rdb_buf *out)
{
	size_t total = with_n ? 4 : 0;
	for (int i = first; i < first + count; i++)
		total += 5 + col[i].len;
	int rc = rdb_buf_reserve(out, total);
	if (rc)
		return rc;
	uint8_t *p = out->data + out->len;
	if (with_n) {
		rdb_put_le32(p, n);
		p += 4;
	}
	for (int i = first; i < first + count; i++) {
		p[0] = col[i].enc;
		rdb_put_le32(p + 1, (uint32_t)col[i].len);
		if (col[i].len)
			memcpy(p + 5, col[i].p, col[i].len);
		p += 5 + col[i].len;
	}
	out->len += total;
	return 0;
}

int sto_codec_encode(const struct mdl_cols *cols, struct rdb_buf *out, struct sto_codec_info *info)
{
	if (!cols || cols->n < 1 || cols->n > STO_CHUNK_MAX_POINTS)
		return RDB_EINVAL;
	struct blob col[4] = {{0}};
	int rc = encode_columns(cols, col);
	if (!rc)
		rc = put_columns(col, 0, 4, true, (uint32_t)cols->n, out);
	if (!rc && info)
		*info = (struct sto_codec_info){col[0].enc,
						col[1].enc,
						col[2].enc,
						col[3].enc,
						(uint32_t)col[0].len,
						(uint32_t)col[1].len,
						(uint32_t)col[2].len,
						(uint32_t)col[3].len,
						sto_codec_block0_enc(&col[3], cols->n)};
	for (int i = 0; i < 4; i++)
		sto_codec_blob_free(&col[i]);
	return rc;
}

int sto_codec_encode_shared(const struct mdl_cols *cols, struct rdb_buf *out)
{
	if (!cols || cols->n < 1 || cols->n > STO_CHUNK_MAX_POINTS)
		return RDB_EINVAL;
	size_t n = cols->n;
	struct blob col[3] = {{0}};
	int rc = sto_codec_best_i64_opt((const uint64_t *)cols->ts_ns, n, true, &col[0]);
	if (!rc)
		rc = enc_steps((const uint64_t *)cols->step, n, &col[1]);
	if (!rc)
		rc = enc_attempts(cols->attempt, n, &col[2]);
	if (!rc)
		rc = put_columns(col, 0, 3, true, (uint32_t)n, out);
	for (int i = 0; i < 3; i++)
		sto_codec_blob_free(&col[i]);
	return rc;
}

int sto_codec_encode_values(const struct mdl_cols *cols, struct rdb_buf *out)
{
	if (!cols || cols->n < 1 || cols->n > STO_CHUNK_MAX_POINTS)
		return RDB_EINVAL;
	struct blob col = {0};
	int rc = sto_codec_enc_values(cols->value, cols->n, &col);
	if (!rc)
		rc = put_columns(&col, 0, 1, false, 0, out);
	sto_codec_blob_free(&col);
	return rc;
}

/* Decodes column idx of n points; the value column only from the block
 * holding point `from` on where its encoding allows (else whole). */
static int decode_column(int idx, uint8_t enc, const uint8_t *p, size_t len, size_t n, size_t from,
			 struct mdl_cols *out)
{
	switch (idx) {
	case 0:
		return sto_codec_dec_i64(enc, p, len, n, (uint64_t *)out->ts_ns, 0);
	case 1:
		return dec_steps(enc, p, len, n, (uint64_t *)out->step);
	case 2:
		return dec_attempts(enc, p, len, n, out->attempt);
	default:
		if (enc == ENC_BLOCKED)
			return sto_codec_dec_blocked(p, len, n, from, out->value);
		return sto_codec_dec_values(enc, p, len, n, out->value);
	}
}

/* Reads one `column` header at src[*pos]: its encoding and body bounds. */
static int column_at(const uint8_t *src, size_t len, size_t *pos, uint8_t *enc, size_t *clen)
{
	if (len - *pos < 5)
		return RDB_ECORRUPT;
	*enc = src[*pos];
	*clen = rdb_get_le32(src + *pos + 1);
	*pos += 5;
	if (*clen > len - *pos)
		return RDB_ECORRUPT;
	return 0;
}

/* Decodes columns [first, first + count) of n points from src after *pos;
 * with STO_CODEC_SKIP_TS the ts column's bounds are checked, its body is
 * not decoded. */
int sto_codec_decode_columns(const uint8_t *src, size_t len, size_t *pos, int first, int count,
			     size_t n, unsigned flags, size_t from, struct mdl_cols *out)
{
	for (int i = first; i < first + count; i++) {
		uint8_t enc;
		size_t clen;
		int rc = column_at(src, len, pos, &enc, &clen);
		if (rc == 0 && !(i == 0 && (flags & STO_CODEC_SKIP_TS)))
			rc = decode_column(i, enc, src + *pos, clen, n, from, out);
		if (rc)
			return rc;
		*pos += clen;
	}
	return 0;
}

/* Reads the u32 point count and makes room for it in out. */
int sto_codec_decode_n(const uint8_t *src, size_t len, uint32_t max_points, struct mdl_cols *out,
		       uint32_t *n)
{
	if (len < 4)
		return RDB_ECORRUPT;
	*n = rdb_get_le32(src);
	if (*n == 0 || *n > max_points || *n > STO_CHUNK_MAX_POINTS)
		return RDB_ECORRUPT;
	return mdl_cols_reserve(out, *n);
}

/* A chunk payload of ncols columns from column 0 (4: its own time, step
 * and attempt columns and the values; 3: a group's shared columns). */
static int decode_chunk(const uint8_t *src, size_t len, uint32_t max_points, unsigned ncols,
			unsigned flags, struct mdl_cols *out, size_t *used)
{
	out->n = 0;
	uint32_t n;
	size_t pos = 4;
	int rc = sto_codec_decode_n(src, len, max_points, out, &n);
	if (rc == 0)
		rc = sto_codec_decode_columns(src, len, &pos, 0, ncols, n, flags, 0, out);
	if (rc)
		return rc;
	out->n = n;
	if (used)
		*used = pos;
	return 0;
}

int sto_codec_decode(const uint8_t *src, size_t len, uint32_t max_points, struct mdl_cols *out,
		     size_t *used)
{
	return sto_codec_decode_flags(src, len, max_points, 0, out, used);
}

int sto_codec_decode_flags(const uint8_t *src, size_t len, uint32_t max_points, unsigned flags,
			   struct mdl_cols *out, size_t *used)
{
	return decode_chunk(src, len, max_points, 4, flags, out, used);
}

int sto_codec_decode_shared(const uint8_t *src, size_t len, uint32_t max_points,
			    struct mdl_cols *out, size_t *used)
{
	return sto_codec_decode_shared_flags(src, len, max_points, 0, out, used);
}

int sto_codec_decode_shared_flags(const uint8_t *src, size_t len, uint32_t max_points,
				  unsigned flags, struct mdl_cols *out, size_t *used)
{
	return decode_chunk(src, len, max_points, 3, flags, out, used);
}
