/* codec_values.c - the chunk codec's value column: which encoding a
 * column gets, and the decoder's dispatch over value encodings.
 *
 * Design. The encoder tries const64, the int64 streams over the bit
 * patterns, the XOR stream, byte planes, the float32 candidates and the
 * "int" encoding (35), keeps the smallest, keeps an XOR stream only when it
 * beats the rest by SLOW_MARGIN_PCT (it decodes slower), and for long
 * columns whose best encoding is slow to decode tries the blocked form
 * (codec_block.c). The encodings are in codec.c's FORMAT comment.
 * Cost (sealing is most of the flusher's CPU with many series): the
 * byte planes and "int" go first; then the varint stream is measured and
 * written only when it may win, its zstd frame only when the stream is
 * within VARINT_ZSTD_PCT of the best candidate so far. The zstd frames
 * (byte planes, varint frame) are probes (codec_zstd.c: cheap, without
 * Huffman literals) kept apart from the best; the XOR stream is measured
 * (stopping once it is longer than the best); then only the smallest
 * probe, and only when it can still win against both, is compressed at
 * the full level; the XOR stream is written only when it wins. A
 * float32-exact column skips the 64-bit XOR stream, and below
 * F32_PLANES64_MIN points the 64-bit byte planes.
 *
 * Threading: no shared state.
 * Failure: the encoder returns 0 or -ENOMEM (*best empty then); the
 * decoder returns RDB_ECORRUPT on an unknown encoding or malformed body
 * (an "int" value with |s| > 2^53 included), or -ENOMEM.
 */
#include "storage/chunk/codec_int.h"

#include "common/rdb_err.h"
#include "common/rdb_le.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define INT_LIMIT ((uint64_t)1 << 53) /* largest |s| of the int encoding */

/* ---- "int" candidate ------------------------------------------------------------ */

static int enc_values_int(const uint64_t *v, size_t n, struct blob *best)
{
	uint64_t *s = malloc(n * sizeof(*s));
	if (!s)
		return -ENOMEM;
	struct blob inner = {0}, cand = {0};
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		double d = rdb_bits_f64(v[i]);
		if (!(d >= -9007199254740992.0 && d <= 9007199254740992.0))
			goto out;
		int64_t si = (int64_t)d;
		if (rdb_f64_bits((double)si) != v[i])
			goto out; /* a fraction, or -0.0 */
		s[i] = (uint64_t)si;
	}
	rc = sto_codec_best_i64_opt(s, n, true, &inner);
	if (!rc)
		rc = sto_codec_blob_alloc(&cand, ENC_INT, 1 + inner.len);
	if (!rc) {
		cand.p[0] = inner.enc;
		memcpy(cand.p + 1, inner.p, inner.len);
		cand.len = 1 + inner.len;
		sto_codec_keep_smaller(best, &cand);
	}
out:
	sto_codec_blob_free(&inner);
	free(s);
	return rc;
}

/* ---- candidate choice and dispatch ---------------------------------------------- */

/* XOR streams decode bit by bit, about three times slower than the other
 * value encodings (10 vs 3 ns per point for float32 loss curves); queries
 * decode every point they read, so an XOR stream is kept only when it is
 * smaller than the best other candidate by more than this fraction. */
#define SLOW_MARGIN_PCT 3u

/* The 64-bit byte planes of float32-exact values can beat their float32
 * planes (the 11-bit exponent cuts the planes elsewhere): by 1.6 % on a
 * 65536-point loss curve. On the short columns a checkpoint seals with
 * many series (~200 points) and on blocks, skipping them cost 0.03-0.06 %
 * of the float32 columns' bytes on the 512-rank benchmark and saves one
 * zstd compression per column; columns from this many points on (those
 * that can be stored in blocks) still try them. */
#define F32_PLANES64_MIN (2 * BLOCK_POINTS)

/* The varint stream of v[0..n) into *best when it is shorter, and its
 * zstd frame's probe into *zc (the smallest probed frame) when the stream
 * is within VARINT_ZSTD_PCT of the best candidate so far. */
static int enc_varint_late(const uint64_t *v, size_t n, struct blob *best, struct blob *zc)
{
	unsigned which;
	size_t len = sto_codec_i64_varint_measure(v, n, &which);
	size_t least = zc->p && zc->len < best->len ? zc->len : best->len;
	bool zstd = sto_codec_i64_zstd_worth(len, len < least ? len : least);
	if (len >= best->len && !zstd)
		return 0;
	struct blob varint, cand = {0};
	int rc = sto_codec_i64_varint_write(v, n, which, &varint);
	if (!rc && zstd)
		rc = sto_codec_i64_zstd(&varint, &cand, 0);
	sto_codec_keep_smaller(best, &varint);
	sto_codec_keep_smaller(zc, &cand);
	return rc;
}

/* The XOR stream (f32_xor over the float32 patterns f32 when there are
 * some, else xor) of len bytes (xor_len_of): written only when it beats
 * *best by SLOW_MARGIN_PCT. A float32-exact column's 64-bit stream carries
 * the same windows as its 32-bit one in wider fields: not tried. */
static size_t xor_len_of(const uint64_t *v, const uint64_t *f32, size_t n, size_t limit)
{
	return sto_codec_xor_len(f32 ? f32 : v, n, f32 ? 32 : 64, limit);
}

static int enc_xor_late(const uint64_t *v, const uint64_t *f32, size_t n, size_t len,
			struct blob *best)
{
	const uint64_t *x = f32 ? f32 : v;
	unsigned width = f32 ? 32 : 64;
	if (len * 100 >= best->len * (100 - SLOW_MARGIN_PCT))
		return 0;
	struct blob cand = {0};
	int rc = sto_codec_enc_xor(x, n, width, f32 ? ENC_F32_XOR : ENC_XOR, &cand);
	sto_codec_keep_smaller(best, &cand);
	return rc;
}

/* *zc, the smallest probed frame (the byte planes and the varint stream's
 * frame are compressed with beat 0: probes only), compressed again at the
 * full level when it is shorter than what it must beat (the best
 * candidate, and the XOR stream of xor_len bytes by SLOW_MARGIN_PCT), and
 * then competing in *best. At most that one frame of the column pays for
 * the full level. */
static int enc_zstd_full(const uint64_t *v, const uint64_t *f32, size_t n, size_t xor_len,
			 struct blob *zc, struct blob *best)
{
	struct blob cand = {0}, varint = {0};
	unsigned which;
	int rc = 0;
	/* What the frame must beat: the best candidate, and the XOR stream,
	 * which enc_xor_late keeps only when xor_len * 100 < L * (100 -
	 * SLOW_MARGIN_PCT): a frame of L <= xor_len * 100 / (100 -
	 * SLOW_MARGIN_PCT) bytes still wins against it. sto_codec_zstd_near's
	 * bound is exclusive, hence the + 1. */
	size_t target = best->len;
	size_t xor_keep = xor_len * 100 / (100 - SLOW_MARGIN_PCT) + 1;
	if (xor_len < target && xor_keep < target)
		target = xor_keep;
	if (!zc->p || !zc->probe || !sto_codec_zstd_near(zc->len, target))
		goto out;
	switch (zc->enc) {
	case ENC_F32_SHUF_ZSTD:
		rc = sto_codec_enc_shuf_zstd(f32, n, 4, ENC_F32_SHUF_ZSTD, &cand, SIZE_MAX);
		break;
	case ENC_SHUF_ZSTD:
		rc = sto_codec_enc_shuf_zstd(v, n, 8, ENC_SHUF_ZSTD, &cand, SIZE_MAX);
		break;
	default: /* ENC_ZSTD over the varint stream */
		sto_codec_i64_varint_measure(v, n, &which);
		rc = sto_codec_i64_varint_write(v, n, which, &varint);
		if (!rc)
			rc = sto_codec_i64_zstd(&varint, &cand, SIZE_MAX);
		sto_codec_blob_free(&varint);
		break;
	}
	sto_codec_keep_smaller(zc, &cand);
out:
	sto_codec_keep_smaller(best, zc);
	return rc;
}

int sto_codec_enc_values(const uint64_t *v, size_t n, struct blob *best)
{
	struct blob cand = {0}, zc = {0};
	uint64_t *f32 = NULL;
	int rc = sto_codec_enc_const64(v, n, best);
	if (rc || best->p)
		return rc; /* constant: nothing is smaller */
	rc = sto_codec_i64_fixed(v, n, best);
	if (!rc)
		rc = sto_codec_enc_values_f32(v, n, &zc, &f32, 0);
	if (!rc && (!f32 || n >= F32_PLANES64_MIN))
		rc = sto_codec_enc_shuf_zstd(v, n, 8, ENC_SHUF_ZSTD, &cand, 0);
	sto_codec_keep_smaller(&zc, &cand);
	if (!rc)
		rc = enc_values_int(v, n, best);
	if (!rc)
		rc = enc_varint_late(v, n, best, &zc);
	size_t xor_len = rc ? 0 : xor_len_of(v, f32, n, best->len);
	if (!rc)
		rc = enc_zstd_full(v, f32, n, xor_len, &zc, best);
	sto_codec_blob_free(&zc);
	if (!rc)
		rc = enc_xor_late(v, f32, n, xor_len, best);
	free(f32);
	if (!rc && n >= 2 * BLOCK_POINTS && sto_codec_slow_to_decode(best->enc))
		rc = sto_codec_enc_blocked(v, n, &cand);
	if (!rc && cand.p && cand.len * 100 <= best->len * (100 + BLOCK_MARGIN_PCT)) {
		sto_codec_blob_free(best);
		*best = cand;
		cand = (struct blob){0};
	}
	sto_codec_blob_free(&cand);
	if (rc)
		sto_codec_blob_free(best);
	return rc;
}

static int dec_values_int(const uint8_t *p, size_t len, size_t n, uint64_t *out)
{
	if (len < 1)
		return RDB_ECORRUPT;
	int rc = sto_codec_dec_i64(p[0], p + 1, len - 1, n, out, 0u);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++) {
		if (out[i] + INT_LIMIT > 2 * INT_LIMIT)
			return RDB_ECORRUPT;
		out[i] = rdb_f64_bits((double)u2s(out[i]));
	}
	return 0;
}

int sto_codec_dec_values(uint8_t enc, const uint8_t *p, size_t len, size_t n, uint64_t *out)
{
	int rc;
	switch (enc) {
	case ENC_XOR:
		return sto_codec_dec_xor(p, len, n, 64, out);
	case ENC_SHUF_ZSTD:
		return sto_codec_dec_shuf_zstd(p, len, n, 8, out);
	case ENC_INT:
		return dec_values_int(p, len, n, out);
	case ENC_F32_XOR:
		rc = sto_codec_dec_xor(p, len, n, 32, out);
		break;
	case ENC_F32_SHUF_ZSTD:
		rc = sto_codec_dec_shuf_zstd(p, len, n, 4, out);
		break;
	case ENC_BLOCKED:
		return sto_codec_dec_blocked(p, len, n, 0, out);
	default:
		return sto_codec_dec_i64(enc, p, len, n, out, 0u);
	}
	if (rc == 0)
		sto_codec_widen_f32(out, n);
	return rc;
}
