/* codec_i64.c - the chunk codec's int64 streams (encodings 1-6 and 9).
 *
 * Design. Used for ts_ns, step, the value column's IEEE bit patterns and
 * the quotients of the int and scaled encodings. The encoder keeps the
 * smallest candidate: const64, raw64, the shortest of the varint streams
 * (all three measured in one pass, only the shortest written), that
 * stream through zstd when it may win (VARINT_ZSTD_PCT), "scaled" once
 * over its quotients; all delta arithmetic is modulo 2^64, so any
 * sequence round-trips. Layouts: codec.c's FORMAT comment.
 *
 * Threading: no shared state.
 * Failure: encoders return 0 or -ENOMEM (*best empty then); decoders
 * return RDB_ECORRUPT on any overlong varint, run past k, trailing byte,
 * unknown or nested-where-refused encoding, or -ENOMEM.
 */
#include "storage/chunk/codec_int.h"

#include "common/rdb_err.h"
#include "common/rdb_le.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ---- int64 streams: encoders --------------------------------------------- */

static int enc_raw64(const uint64_t *v, size_t k, struct blob *b)
{
	int rc = sto_codec_blob_alloc(b, ENC_RAW64, 8 * k);
	if (rc)
		return rc;
	for (size_t i = 0; i < k; i++)
		rdb_put_le64(b->p + 8 * i, v[i]);
	b->len = 8 * k;
	return 0;
}

static bool all_equal64(const uint64_t *v, size_t k)
{
	for (size_t i = 1; i < k; i++)
		if (v[i] != v[0])
			return false;
	return true;
}

int sto_codec_enc_const64(const uint64_t *v, size_t k, struct blob *b)
{
	if (!all_equal64(v, k))
		return 0;
	int rc = sto_codec_blob_alloc(b, ENC_CONST64, 8);
	if (rc)
		return rc;
	rdb_put_le64(b->p, v[0]);
	b->len = 8;
	return 0;
}

static int enc_delta(const uint64_t *v, size_t k, struct blob *b)
{
	int rc = sto_codec_blob_alloc(b, ENC_DELTA, 10 * k);
	if (rc)
		return rc;
	size_t o = rdb_varint_put(b->p, rdb_zigzag(v[0]));
	for (size_t i = 1; i < k; i++)
		o += rdb_varint_put(b->p + o, rdb_zigzag(v[i] - v[i - 1]));
	b->len = o;
	return 0;
}

static int enc_dod(const uint64_t *v, size_t k, struct blob *b)
{
	int rc = sto_codec_blob_alloc(b, ENC_DOD, 10 * k);
	if (rc)
		return rc;
	size_t o = rdb_varint_put(b->p, rdb_zigzag(v[0]));
	uint64_t prev_d = 0;
	for (size_t i = 1; i < k; i++) {
		uint64_t d = v[i] - v[i - 1];
		o += rdb_varint_put(b->p + o, rdb_zigzag(d - prev_d));
		prev_d = d;
	}
	b->len = o;
	return 0;
}

static int enc_delta_rle(const uint64_t *v, size_t k, struct blob *b)
{
	int rc = sto_codec_blob_alloc(b, ENC_DELTA_RLE, 10 + 20 * k);
	if (rc)
		return rc;
	size_t o = rdb_varint_put(b->p, rdb_zigzag(v[0]));
	for (size_t i = 1; i < k;) {
		uint64_t d = v[i] - v[i - 1];
		size_t run = 1;
		while (i + run < k && v[i + run] - v[i + run - 1] == d)
			run++;
		o += rdb_varint_put(b->p + o, rdb_zigzag(d));
		o += rdb_varint_put(b->p + o, run);
		i += run;
	}
	b->len = o;
	return 0;
}

/* The body lengths of delta, dod and delta_rle over v[0..k), k >= 1, in
 * one pass without writing them (each is as long as its varints). */
static void measure_varint_streams(const uint64_t *v, size_t k, size_t len[3])
{
	size_t head = rdb_varint_len(rdb_zigzag(v[0])), delta = head, dod = head, rle = head;
	uint64_t prev_d = 0, run_d = 0;
	size_t run = 0;
	for (size_t i = 1; i < k; i++) {
		uint64_t d = v[i] - v[i - 1];
		delta += rdb_varint_len(rdb_zigzag(d));
		dod += rdb_varint_len(rdb_zigzag(d - prev_d));
		prev_d = d;
		if (run && d == run_d) {
			run++;
			continue;
		}
		if (run)
			rle += rdb_varint_len(rdb_zigzag(run_d)) + rdb_varint_len(run);
		run_d = d;
		run = 1;
	}
	if (run)
		rle += rdb_varint_len(rdb_zigzag(run_d)) + rdb_varint_len(run);
	len[0] = rle;
	len[1] = delta;
	len[2] = dod;
}

static uint64_t gcd64(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

/* The "scaled" candidate, when every v[i] - v[0] is a multiple of some g >= 2. */
static int enc_scaled(const uint64_t *v, size_t k, struct blob *b)
{
	uint64_t g = 0;
	for (size_t i = 1; i < k && g != 1; i++) {
		uint64_t d = v[i] - v[0];
		g = gcd64(g, d >> 63 ? 0 - d : d);
	}
	if (g < 2 || g > INT64_MAX)
		return 0;
	uint64_t *q = malloc(k * sizeof(*q));
	struct blob inner = {0};
	int rc = q ? 0 : -ENOMEM;
	for (size_t i = 0; i < k && !rc; i++)
		q[i] = (uint64_t)(u2s(v[i] - v[0]) / (int64_t)g);
	if (!rc)
		rc = sto_codec_best_i64(q, k, &inner);
	if (!rc)
		rc = sto_codec_blob_alloc(b, ENC_SCALED, 21 + inner.len);
	if (!rc) {
		b->len = rdb_varint_put(b->p, g);
		b->len += rdb_varint_put(b->p + b->len, rdb_zigzag(v[0]));
		b->p[b->len++] = inner.enc;
		memcpy(b->p + b->len, inner.p, inner.len);
		b->len += inner.len;
	}
	sto_codec_blob_free(&inner);
	free(q);
	return rc;
}

/* The varint streams in the order ties go to. */
static int (*const varint_fns[3])(const uint64_t *, size_t, struct blob *) = {
    enc_delta_rle,
    enc_delta,
    enc_dod,
};

size_t sto_codec_i64_varint_measure(const uint64_t *v, size_t k, unsigned *which)
{
	size_t len[3], pick = 0;
	measure_varint_streams(v, k, len);
	for (size_t i = 1; i < 3; i++)
		if (len[i] < len[pick])
			pick = i;
	*which = (unsigned)pick;
	return len[pick];
}

int sto_codec_i64_varint_write(const uint64_t *v, size_t k, unsigned which, struct blob *b)
{
	*b = (struct blob){0};
	return varint_fns[which < 3 ? which : 0](v, k, b);
}

int sto_codec_i64_fixed(const uint64_t *v, size_t k, struct blob *fixed)
{
	*fixed = (struct blob){0};
	int rc = sto_codec_enc_const64(v, k, fixed);
	if (!rc && !fixed->p)
		rc = enc_raw64(v, k, fixed);
	return rc;
}

int sto_codec_i64_parts(const uint64_t *v, size_t k, struct blob *fixed, struct blob *varint)
{
	unsigned which;
	*varint = (struct blob){0};
	int rc = sto_codec_i64_fixed(v, k, fixed);
	sto_codec_i64_varint_measure(v, k, &which);
	if (!rc)
		rc = sto_codec_i64_varint_write(v, k, which, varint);
	if (rc) {
		sto_codec_blob_free(fixed);
		sto_codec_blob_free(varint);
	}
	return rc;
}

int sto_codec_i64_zstd(const struct blob *varint, struct blob *out, size_t beat)
{
	*out = (struct blob){0};
	if (!varint->p || varint->len < VARINT_ZSTD_MIN)
		return 0;
	uint8_t inner = varint->enc;
	return sto_codec_zstd_blob(out, ENC_ZSTD, &inner, 1, varint->p, varint->len, beat);
}

/* Whether a zstd frame over a varint stream of varint_len bytes is worth
 * compressing when the best candidate so far takes best_len bytes. */
bool sto_codec_i64_zstd_worth(size_t varint_len, size_t best_len)
{
	return varint_len >= VARINT_ZSTD_MIN &&
	       (uint64_t)varint_len * 100 <= (uint64_t)best_len * VARINT_ZSTD_PCT;
}

/* Best int64 stream encoding of v[0..k), k >= 1, into *best; "scaled" is
 * tried only when allow_scaled (it recurses once for its quotients). */
int sto_codec_best_i64_opt(const uint64_t *v, size_t k, bool allow_scaled, struct blob *best)
{
	struct blob cand = {0}, varint = {0};
	int rc = sto_codec_i64_parts(v, k, best, &varint);
	size_t plain = best->len;
	if (varint.p && varint.len < plain)
		plain = varint.len;
	if (!rc && sto_codec_i64_zstd_worth(varint.len, plain)) {
		rc = sto_codec_i64_zstd(&varint, &cand, plain);
		if (!rc)
			sto_codec_keep_smaller(best, &cand);
	}
	sto_codec_keep_smaller(best, &varint);
	if (!rc && allow_scaled)
		rc = enc_scaled(v, k, &cand);
	sto_codec_keep_smaller(best, &cand);
	if (rc)
		sto_codec_blob_free(best);
	return rc;
}

int sto_codec_best_i64(const uint64_t *v, size_t k, struct blob *best)
{
	return sto_codec_best_i64_opt(v, k, false, best);
}

/* ---- int64 streams: decoders --------------------------------------------- */

static int dec_delta(struct rd *r, size_t k, uint64_t *out)
{
	uint64_t z;
	if (rdb_varint_get(&r->p, r->end, &z))
		return RDB_ECORRUPT;
	out[0] = rdb_unzigzag(z);
	for (size_t i = 1; i < k; i++) {
		if (rdb_varint_get(&r->p, r->end, &z))
			return RDB_ECORRUPT;
		out[i] = out[i - 1] + rdb_unzigzag(z);
	}
	return 0;
}

static int dec_dod(struct rd *r, size_t k, uint64_t *out)
{
	uint64_t z, d = 0;
	if (rdb_varint_get(&r->p, r->end, &z))
		return RDB_ECORRUPT;
	out[0] = rdb_unzigzag(z);
	for (size_t i = 1; i < k; i++) {
		if (rdb_varint_get(&r->p, r->end, &z))
			return RDB_ECORRUPT;
		d += rdb_unzigzag(z);
		out[i] = out[i - 1] + d;
	}
	return 0;
}

static int dec_delta_rle(struct rd *r, size_t k, uint64_t *out)
{
	uint64_t z, run;
	if (rdb_varint_get(&r->p, r->end, &z))
		return RDB_ECORRUPT;
	out[0] = rdb_unzigzag(z);
	for (size_t i = 1; i < k;) {
		if (rdb_varint_get(&r->p, r->end, &z) || rdb_varint_get(&r->p, r->end, &run))
			return RDB_ECORRUPT;
		if (run == 0 || run > k - i)
			return RDB_ECORRUPT;
		uint64_t d = rdb_unzigzag(z);
		for (size_t end = i + (size_t)run; i < end; i++)
			out[i] = out[i - 1] + d;
	}
	return 0;
}

/* Encodings an int64 stream nested in another may not use. */
#define DENY_ZSTD   1u
#define DENY_SCALED 2u

static int dec_i64_zstd(const uint8_t *p, size_t len, size_t k, uint64_t *out)
{
	if (len < 1)
		return RDB_ECORRUPT;
	uint8_t *buf = NULL;
	size_t blen = 0;
	int rc = sto_codec_zstd_unframe(p + 1, len - 1, 20 * k + 16, false, &buf, &blen);
	if (rc)
		return rc;
	rc = sto_codec_dec_i64(p[0], buf, blen, k, out, DENY_ZSTD | DENY_SCALED);
	free(buf);
	return rc;
}

static int dec_i64_scaled(const uint8_t *p, size_t len, size_t k, uint64_t *out, unsigned deny)
{
	struct rd r = {p, p + len};
	uint64_t g, zb;
	if (rdb_varint_get(&r.p, r.end, &g) || g < 2 || rdb_varint_get(&r.p, r.end, &zb) ||
	    r.p == r.end)
		return RDB_ECORRUPT;
	int rc = sto_codec_dec_i64(r.p[0], r.p + 1, (size_t)(r.end - r.p) - 1, k, out,
				   deny | DENY_SCALED);
	uint64_t base = rdb_unzigzag(zb);
	for (size_t i = 0; rc == 0 && i < k; i++)
		out[i] = base + out[i] * g;
	return rc;
}

/* Decodes an int64 stream of k >= 1 values; deny lists refused encodings. */
int sto_codec_dec_i64(uint8_t enc, const uint8_t *p, size_t len, size_t k, uint64_t *out,
		      unsigned deny)
{
	struct rd r = {p, p + len};
	int rc;
	switch (enc) {
	case ENC_RAW64:
		if (len != 8 * k)
			return RDB_ECORRUPT;
		for (size_t i = 0; i < k; i++)
			out[i] = rdb_get_le64(p + 8 * i);
		return 0;
	case ENC_CONST64:
		if (len != 8)
			return RDB_ECORRUPT;
		for (size_t i = 0; i < k; i++)
			out[i] = rdb_get_le64(p);
		return 0;
	case ENC_DELTA:
		rc = dec_delta(&r, k, out);
		break;
	case ENC_DOD:
		rc = dec_dod(&r, k, out);
		break;
	case ENC_DELTA_RLE:
		rc = dec_delta_rle(&r, k, out);
		break;
	case ENC_ZSTD:
		return deny & DENY_ZSTD ? RDB_ECORRUPT : dec_i64_zstd(p, len, k, out);
	case ENC_SCALED:
		return deny & DENY_SCALED ? RDB_ECORRUPT : dec_i64_scaled(p, len, k, out, deny);
	default:
		return RDB_ECORRUPT;
	}
	if (rc == 0 && r.p != r.end)
		rc = RDB_ECORRUPT; /* trailing bytes */
	return rc;
}
