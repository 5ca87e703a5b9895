/* codec.c - lossless columnar encoding of one chunk's points.
 *
 * Design. Each column is encoded on its own. The encoder runs every
 * candidate encoding that applies to the column and keeps the smallest
 * output (ties keep the earlier candidate, which is the cheaper to decode).
 * Values are restored bit-exact: every transform below is a bijection on the
 * bits it accepts, and candidates that would lose bits are skipped.
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
 *   varint   unsigned LEB128, at most 10 bytes, low group first.
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
#include "storage/chunk/codec.h"

#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "storage/format.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

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

#define ZSTD_LEVEL     3
#define STEP_NONE_BITS ((uint64_t)1 << 63) /* MDL_STEP_NONE as uint64_t */
#define INT_LIMIT      ((uint64_t)1 << 53) /* largest |s| of the int encoding */
#define F32_LOW_MASK   (((uint64_t)1 << 29) - 1)

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

/* ---- primitives ---------------------------------------------------------- */

static inline uint64_t zz(uint64_t x)
{
	return (x << 1) ^ (0 - (x >> 63));
}

static inline uint64_t unzz(uint64_t z)
{
	return (z >> 1) ^ (0 - (z & 1));
}

static inline size_t put_varint(uint8_t *p, uint64_t v)
{
	size_t i = 0;
	while (v >= 0x80) {
		p[i++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[i++] = (uint8_t)v;
	return i;
}

/* A read cursor over an untrusted byte range. */
struct rd {
	const uint8_t *p, *end;
};

static inline int get_varint(struct rd *r, uint64_t *v)
{
	uint64_t x = 0;
	for (unsigned shift = 0; shift < 70; shift += 7) {
		if (r->p == r->end)
			return RDB_ECORRUPT;
		uint8_t b = *r->p++;
		x |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*v = x;
			return 0;
		}
	}
	return RDB_ECORRUPT;
}

/* Converts uint64 to int64 two's complement without implementation-defined casts. */
static inline int64_t u2s(uint64_t u)
{
	return u <= INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
}

static uint64_t f32_to_f64_bits(uint32_t f)
{
	uint64_t sign = (uint64_t)(f >> 31) << 63;
	uint32_t exp = (f >> 23) & 0xff, man = f & 0x7fffff;
	if (exp == 0xff)
		return sign | (uint64_t)0x7ff << 52 | (uint64_t)man << 29;
	if (exp != 0)
		return sign | (uint64_t)(exp - 127 + 1023) << 52 | (uint64_t)man << 29;
	if (man == 0)
		return sign;
	/* float32 denormal man * 2^-149 becomes a normal double */
	unsigned top = 31 - (unsigned)__builtin_clz(man);
	uint64_t frac = ((uint64_t)man << (52 - top)) & (((uint64_t)1 << 52) - 1);
	return sign | (uint64_t)(top - 149 + 1023) << 52 | frac;
}

/* out[i] (float32 patterns) become their float64 patterns, in place. A
 * normal float32 (exponent 1..254) only moves its fields: the exponent is
 * rebased by 1023 - 127 = 896, which adds 896 << 52 to the shifted
 * pattern; a first pass finds whether any value is zero, denormal, Inf or
 * NaN (which need f32_to_f64_bits), so that the common loop has no branch
 * and vectorizes. */
static void widen_f32(uint64_t *out, size_t n)
{
	bool special = false;
	for (size_t i = 0; i < n; i++) {
		uint32_t e = (uint32_t)out[i] & 0x7f800000u;
		special |= e == 0 || e == 0x7f800000u;
	}
	if (special) {
		for (size_t i = 0; i < n; i++)
			out[i] = f32_to_f64_bits((uint32_t)out[i]);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t f = (uint32_t)out[i];
		out[i] = (f >> 31) << 63 | (((f & 0x7fffffffu) << 29) + ((uint64_t)896 << 52));
	}
}

static bool f64_to_f32_exact(uint64_t d, uint32_t *f)
{
	uint32_t sign = (uint32_t)(d >> 63) << 31;
	int exp = (int)((d >> 52) & 0x7ff);
	uint64_t man = d & (((uint64_t)1 << 52) - 1);
	if (exp == 0x7ff || exp == 0) {
		if (man & F32_LOW_MASK || (exp == 0 && man))
			return false;
		*f = sign | (exp ? 0x7f800000u : 0) | (uint32_t)(man >> 29);
		return true;
	}
	int e = exp - 1023;
	if (e > 127 || e < -149)
		return false;
	if (e >= -126) {
		if (man & F32_LOW_MASK)
			return false;
		*f = sign | (uint32_t)(e + 127) << 23 | (uint32_t)(man >> 29);
		return true;
	}
	uint64_t sig = man | (uint64_t)1 << 52;
	unsigned shift = 29 + (unsigned)(-126 - e); /* 30..52 */
	if (sig & (((uint64_t)1 << shift) - 1))
		return false;
	*f = sign | (uint32_t)(sig >> shift);
	return true;
}

/* ---- encoder scratch ------------------------------------------------------ */

/* One candidate's output. cap is computed up front as a worst-case bound, so
 * the writers never check capacity. p == NULL means "no candidate". */
struct blob {
	uint8_t enc;
	uint8_t *p;
	size_t len, cap;
};

static int blob_alloc(struct blob *b, uint8_t enc, size_t cap)
{
	b->enc = enc;
	b->len = 0;
	b->cap = cap;
	b->p = malloc(cap ? cap : 1);
	return b->p ? 0 : -ENOMEM;
}

static void blob_free(struct blob *b)
{
	free(b->p);
	b->p = NULL;
	b->len = 0;
}

/* Keeps the smaller of *best and *cand in *best; frees the other. */
static void keep_smaller(struct blob *best, struct blob *cand)
{
	if (cand->p && (!best->p || cand->len < best->len)) {
		struct blob t = *best;
		*best = *cand;
		*cand = t;
	}
	blob_free(cand);
}

/* ---- zstd contexts ----------------------------------------------------------
 * One compression and one decompression context per thread, made on first
 * use and freed by the thread-exit destructor: the one-shot ZSTD_compress /
 * ZSTD_decompress allocate and initialise a context (hundreds of KiB) per
 * call, which dominated decoding small columns. When a context cannot be
 * made, the one-shot calls are used. */
struct zctx {
	ZSTD_CCtx *c;
	ZSTD_DCtx *d;
};

static pthread_key_t zctx_key;
static pthread_once_t zctx_once = PTHREAD_ONCE_INIT;
static bool zctx_key_ok;

static void zctx_free(void *p)
{
	struct zctx *z = p;
	ZSTD_freeCCtx(z->c);
	ZSTD_freeDCtx(z->d);
	free(z);
}

static void zctx_key_make(void)
{
	zctx_key_ok = pthread_key_create(&zctx_key, zctx_free) == 0;
}

static struct zctx *zctx_get(void)
{
	pthread_once(&zctx_once, zctx_key_make);
	if (!zctx_key_ok)
		return NULL;
	struct zctx *z = pthread_getspecific(zctx_key);
	if (z)
		return z;
	z = calloc(1, sizeof(*z));
	if (z && pthread_setspecific(zctx_key, z) != 0) {
		free(z);
		z = NULL;
	}
	return z;
}

static size_t z_compress(void *dst, size_t cap, const void *src, size_t len)
{
	struct zctx *z = zctx_get();
	if (z && !z->c)
		z->c = ZSTD_createCCtx();
	if (z && z->c)
		return ZSTD_compressCCtx(z->c, dst, cap, src, len, ZSTD_LEVEL);
	return ZSTD_compress(dst, cap, src, len, ZSTD_LEVEL);
}

static size_t z_decompress(void *dst, size_t cap, const void *src, size_t len)
{
	struct zctx *z = zctx_get();
	if (z && !z->d)
		z->d = ZSTD_createDCtx();
	if (z && z->d)
		return ZSTD_decompressDCtx(z->d, dst, cap, src, len);
	return ZSTD_decompress(dst, cap, src, len);
}

/* Compresses src into a new blob of encoding enc whose body is prefix (if
 * prefix_len) then the frame. A zstd failure only drops the candidate. */
static int zstd_blob(struct blob *b, uint8_t enc, const uint8_t *prefix, size_t prefix_len,
		     const void *src, size_t len)
{
	size_t bound = ZSTD_compressBound(len);
	int rc = blob_alloc(b, enc, prefix_len + bound);
	if (rc)
		return rc;
	if (prefix_len)
		memcpy(b->p, prefix, prefix_len);
	size_t z = z_compress(b->p + prefix_len, bound, src, len);
	if (ZSTD_isError(z)) {
		blob_free(b);
		return 0;
	}
	b->len = prefix_len + z;
	return 0;
}

/* Decompresses one frame of exactly `want` bytes (or, if !exact, at most
 * `want` bytes) into a new buffer. RDB_ECORRUPT unless the frame fills the
 * whole of [p, p + len). */
static int zstd_unframe(const uint8_t *p, size_t len, size_t want, bool exact, uint8_t **out,
			size_t *out_len)
{
	unsigned long long sz = ZSTD_getFrameContentSize(p, len);
	if (sz == ZSTD_CONTENTSIZE_UNKNOWN || sz == ZSTD_CONTENTSIZE_ERROR || sz == 0)
		return RDB_ECORRUPT;
	if (exact ? sz != want : sz > want)
		return RDB_ECORRUPT;
	size_t fsz = ZSTD_findFrameCompressedSize(p, len);
	if (ZSTD_isError(fsz) || fsz != len)
		return RDB_ECORRUPT;
	uint8_t *buf = malloc((size_t)sz);
	if (!buf)
		return -ENOMEM;
	size_t got = z_decompress(buf, (size_t)sz, p, len);
	if (ZSTD_isError(got) || got != sz) {
		free(buf);
		return RDB_ECORRUPT;
	}
	*out = buf;
	*out_len = (size_t)sz;
	return 0;
}

/* ---- int64 streams: encoders --------------------------------------------- */

static int enc_raw64(const uint64_t *v, size_t k, struct blob *b)
{
	int rc = blob_alloc(b, ENC_RAW64, 8 * k);
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

static int enc_const64(const uint64_t *v, size_t k, struct blob *b)
{
	if (!all_equal64(v, k))
		return 0;
	int rc = blob_alloc(b, ENC_CONST64, 8);
	if (rc)
		return rc;
	rdb_put_le64(b->p, v[0]);
	b->len = 8;
	return 0;
}

static int enc_delta(const uint64_t *v, size_t k, struct blob *b)
{
	int rc = blob_alloc(b, ENC_DELTA, 10 * k);
	if (rc)
		return rc;
	size_t o = put_varint(b->p, zz(v[0]));
	for (size_t i = 1; i < k; i++)
		o += put_varint(b->p + o, zz(v[i] - v[i - 1]));
	b->len = o;
	return 0;
}

static int enc_dod(const uint64_t *v, size_t k, struct blob *b)
{
	int rc = blob_alloc(b, ENC_DOD, 10 * k);
	if (rc)
		return rc;
	size_t o = put_varint(b->p, zz(v[0]));
	uint64_t prev_d = 0;
	for (size_t i = 1; i < k; i++) {
		uint64_t d = v[i] - v[i - 1];
		o += put_varint(b->p + o, zz(d - prev_d));
		prev_d = d;
	}
	b->len = o;
	return 0;
}

static int enc_delta_rle(const uint64_t *v, size_t k, struct blob *b)
{
	int rc = blob_alloc(b, ENC_DELTA_RLE, 10 + 20 * k);
	if (rc)
		return rc;
	size_t o = put_varint(b->p, zz(v[0]));
	for (size_t i = 1; i < k;) {
		uint64_t d = v[i] - v[i - 1];
		size_t run = 1;
		while (i + run < k && v[i + run] - v[i + run - 1] == d)
			run++;
		o += put_varint(b->p + o, zz(d));
		o += put_varint(b->p + o, run);
		i += run;
	}
	b->len = o;
	return 0;
}

static int best_i64(const uint64_t *v, size_t k, struct blob *best);

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
		rc = best_i64(q, k, &inner);
	if (!rc)
		rc = blob_alloc(b, ENC_SCALED, 21 + inner.len);
	if (!rc) {
		b->len = put_varint(b->p, g);
		b->len += put_varint(b->p + b->len, zz(v[0]));
		b->p[b->len++] = inner.enc;
		memcpy(b->p + b->len, inner.p, inner.len);
		b->len += inner.len;
	}
	blob_free(&inner);
	free(q);
	return rc;
}

/* Best int64 stream encoding of v[0..k), k >= 1, into *best; "scaled" is
 * tried only when allow_scaled (it recurses once for its quotients). */
static int best_i64_opt(const uint64_t *v, size_t k, bool allow_scaled, struct blob *best)
{
	int (*const fns[])(const uint64_t *, size_t, struct blob *) = {
	    enc_const64, enc_delta_rle, enc_delta, enc_dod, enc_raw64,
	};
	struct blob cand = {0}, varint = {0};
	int rc = 0;
	*best = (struct blob){0};
	for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]) && !rc; i++) {
		rc = fns[i](v, k, &cand);
		if (!rc && cand.p && cand.enc != ENC_RAW64 && cand.enc != ENC_CONST64)
			keep_smaller(&varint, &cand); /* best varint stream, for zstd */
		else if (!rc && cand.p)
			keep_smaller(best, &cand);
	}
	if (!rc && varint.p && varint.len >= 64) {
		uint8_t inner = varint.enc;
		rc = zstd_blob(&cand, ENC_ZSTD, &inner, 1, varint.p, varint.len);
		if (!rc)
			keep_smaller(best, &cand);
	}
	keep_smaller(best, &varint);
	if (!rc && allow_scaled)
		rc = enc_scaled(v, k, &cand);
	keep_smaller(best, &cand);
	if (rc)
		blob_free(best);
	return rc;
}

static int best_i64(const uint64_t *v, size_t k, struct blob *best)
{
	return best_i64_opt(v, k, false, best);
}

/* ---- int64 streams: decoders --------------------------------------------- */

static int dec_delta(struct rd *r, size_t k, uint64_t *out)
{
	uint64_t z;
	if (get_varint(r, &z))
		return RDB_ECORRUPT;
	out[0] = unzz(z);
	for (size_t i = 1; i < k; i++) {
		if (get_varint(r, &z))
			return RDB_ECORRUPT;
		out[i] = out[i - 1] + unzz(z);
	}
	return 0;
}

static int dec_dod(struct rd *r, size_t k, uint64_t *out)
{
	uint64_t z, d = 0;
	if (get_varint(r, &z))
		return RDB_ECORRUPT;
	out[0] = unzz(z);
	for (size_t i = 1; i < k; i++) {
		if (get_varint(r, &z))
			return RDB_ECORRUPT;
		d += unzz(z);
		out[i] = out[i - 1] + d;
	}
	return 0;
}

static int dec_delta_rle(struct rd *r, size_t k, uint64_t *out)
{
	uint64_t z, run;
	if (get_varint(r, &z))
		return RDB_ECORRUPT;
	out[0] = unzz(z);
	for (size_t i = 1; i < k;) {
		if (get_varint(r, &z) || get_varint(r, &run))
			return RDB_ECORRUPT;
		if (run == 0 || run > k - i)
			return RDB_ECORRUPT;
		uint64_t d = unzz(z);
		for (size_t end = i + (size_t)run; i < end; i++)
			out[i] = out[i - 1] + d;
	}
	return 0;
}

/* Encodings an int64 stream nested in another may not use. */
#define DENY_ZSTD   1u
#define DENY_SCALED 2u

static int dec_i64(uint8_t enc, const uint8_t *p, size_t len, size_t k, uint64_t *out,
		   unsigned deny);

static int dec_i64_zstd(const uint8_t *p, size_t len, size_t k, uint64_t *out)
{
	if (len < 1)
		return RDB_ECORRUPT;
	uint8_t *buf = NULL;
	size_t blen = 0;
	int rc = zstd_unframe(p + 1, len - 1, 20 * k + 16, false, &buf, &blen);
	if (rc)
		return rc;
	rc = dec_i64(p[0], buf, blen, k, out, DENY_ZSTD | DENY_SCALED);
	free(buf);
	return rc;
}

static int dec_i64_scaled(const uint8_t *p, size_t len, size_t k, uint64_t *out, unsigned deny)
{
	struct rd r = {p, p + len};
	uint64_t g, zb;
	if (get_varint(&r, &g) || g < 2 || get_varint(&r, &zb) || r.p == r.end)
		return RDB_ECORRUPT;
	int rc = dec_i64(r.p[0], r.p + 1, (size_t)(r.end - r.p) - 1, k, out, deny | DENY_SCALED);
	uint64_t base = unzz(zb);
	for (size_t i = 0; rc == 0 && i < k; i++)
		out[i] = base + out[i] * g;
	return rc;
}

/* Decodes an int64 stream of k >= 1 values; deny lists refused encodings. */
static int dec_i64(uint8_t enc, const uint8_t *p, size_t len, size_t k, uint64_t *out,
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

/* ---- Gorilla XOR bit streams ---------------------------------------------- */

struct bitwr {
	uint8_t *p;
	size_t len;
	uint64_t acc;  /* pending bits, right-aligned */
	unsigned nacc; /* number of pending bits, < 8 between calls */
};

/* Appends the low k bits of v, 1 <= k <= 32. */
static inline void bw_put(struct bitwr *w, uint64_t v, unsigned k)
{
	w->acc = (w->acc << k) | (v & ((((uint64_t)1) << k) - 1));
	w->nacc += k;
	while (w->nacc >= 8) {
		w->nacc -= 8;
		w->p[w->len++] = (uint8_t)(w->acc >> w->nacc);
	}
}

static inline void bw_put_wide(struct bitwr *w, uint64_t v, unsigned k)
{
	if (k > 32) {
		bw_put(w, v >> 32, k - 32);
		k = 32;
	}
	bw_put(w, v, k);
}

static void bw_flush(struct bitwr *w)
{
	if (w->nacc)
		w->p[w->len++] = (uint8_t)(w->acc << (8 - w->nacc));
	w->nacc = 0;
}

struct bitrd {
	const uint8_t *p;
	size_t len; /* bytes */
	size_t pos; /* bits consumed */
};

/* Reads k bits, 1 <= k <= 32, MSB first. */
static inline int br_get(struct bitrd *b, unsigned k, uint64_t *v)
{
	if (k > b->len * 8 - b->pos)
		return RDB_ECORRUPT;
	size_t at = b->pos >> 3;
	uint64_t w = 0;
	if (at + 8 <= b->len) {
		w = rdb_get_be64(b->p + at);
	} else {
		for (size_t i = 0; i < 8; i++)
			w = (w << 8) | (at + i < b->len ? b->p[at + i] : 0);
	}
	*v = (w << (b->pos & 7)) >> (64 - k);
	b->pos += k;
	return 0;
}

static inline int br_get_wide(struct bitrd *b, unsigned k, uint64_t *v)
{
	uint64_t hi = 0, lo;
	if (k > 32) {
		if (br_get(b, k - 32, &hi))
			return RDB_ECORRUPT;
		k = 32;
	}
	if (br_get(b, k, &lo))
		return RDB_ECORRUPT;
	*v = (hi << 32) | lo;
	return 0;
}

static inline unsigned clz_w(uint64_t x, unsigned width)
{
	return (unsigned)__builtin_clzll(x) - (64 - width);
}

/* XOR-encodes v[0..k) of the given width (32 or 64) into b. */
static int enc_xor(const uint64_t *v, size_t k, unsigned width, uint8_t enc, struct blob *b)
{
	unsigned fbits = width == 64 ? 6 : 5;
	int rc = blob_alloc(b, enc, (2 + 2 * fbits + width) * k / 8 + 16);
	if (rc)
		return rc;
	struct bitwr w = {b->p, 0, 0, 0};
	unsigned wlead = 0, wlen = 0; /* wlen == 0: no window yet */
	bw_put_wide(&w, v[0], width);
	for (size_t i = 1; i < k; i++) {
		uint64_t x = v[i] ^ v[i - 1];
		if (x == 0) {
			bw_put(&w, 0, 1);
			continue;
		}
		unsigned lead = clz_w(x, width), trail = (unsigned)__builtin_ctzll(x);
		unsigned len = width - lead - trail;
		if (wlen && lead >= wlead && trail >= width - wlead - wlen &&
		    wlen - len <= 2 * fbits) {
			bw_put(&w, 2, 2);
			bw_put_wide(&w, x >> (width - wlead - wlen), wlen);
			continue;
		}
		bw_put(&w, 3, 2);
		bw_put(&w, lead, fbits);
		bw_put(&w, len - 1, fbits);
		bw_put_wide(&w, x >> trail, len);
		wlead = lead;
		wlen = len;
	}
	bw_flush(&w);
	b->len = w.len;
	return 0;
}

/* One XOR step after the first value: updates *v and the window. */
static inline int dec_xor_one(struct bitrd *b, unsigned width, unsigned fbits, uint64_t *v,
			      unsigned *wlead, unsigned *wlen)
{
	uint64_t c, x;
	if (br_get(b, 1, &c))
		return RDB_ECORRUPT;
	if (c == 0)
		return 0;
	if (br_get(b, 1, &c))
		return RDB_ECORRUPT;
	if (c) {
		uint64_t lead, len1;
		if (br_get(b, fbits, &lead) || br_get(b, fbits, &len1))
			return RDB_ECORRUPT;
		if (lead + len1 + 1 > width)
			return RDB_ECORRUPT;
		*wlead = (unsigned)lead;
		*wlen = (unsigned)len1 + 1;
	} else if (*wlen == 0) {
		return RDB_ECORRUPT;
	}
	if (br_get_wide(b, *wlen, &x))
		return RDB_ECORRUPT;
	*v ^= x << (width - *wlead - *wlen);
	return 0;
}

/* The 32-bit stream's values from out[1] on while 8 bytes can be loaded at
 * the read position: one load per value (a value takes at most 2 + 5 + 5
 * + 32 = 44 bits, and a load holds at least 57), the same checks as
 * dec_xor_one. Returns the index of the next value to decode (the rest
 * goes the bit-by-bit way), or 0 on corruption. */
static size_t dec_xor32_run(struct bitrd *b, size_t k, uint64_t *v, unsigned *wlead, unsigned *wlen,
			    uint64_t *out)
{
	size_t i = 1, pos = b->pos;
	unsigned lead = *wlead, len = *wlen;
	uint64_t x = *v;
	for (; i < k && (pos >> 3) + 8 <= b->len; i++) {
		uint64_t w = rdb_get_be64(b->p + (pos >> 3)) << (pos & 7);
		if (!(w >> 63)) {
			pos++;
			out[i] = x;
			continue;
		}
		unsigned used = 2;
		if ((w >> 62) & 1) {
			lead = (unsigned)(w >> 57) & 31;
			len = ((unsigned)(w >> 52) & 31) + 1;
			if (lead + len > 32)
				return 0;
			used = 12;
		} else if (len == 0) {
			return 0;
		}
		x ^= ((w << used) >> (64 - len)) << (32 - lead - len);
		pos += used + len;
		out[i] = x;
	}
	b->pos = pos;
	*v = x;
	*wlead = lead;
	*wlen = len;
	return i;
}

static int dec_xor(const uint8_t *p, size_t len, size_t k, unsigned width, uint64_t *out)
{
	struct bitrd b = {p, len, 0};
	unsigned fbits = width == 64 ? 6 : 5, wlead = 0, wlen = 0;
	uint64_t v;
	if (br_get_wide(&b, width, &v))
		return RDB_ECORRUPT;
	out[0] = v;
	size_t i = 1;
	if (width == 32)
		i = dec_xor32_run(&b, k, &v, &wlead, &wlen, out);
	if (i == 0)
		return RDB_ECORRUPT;
	for (; i < k; i++) {
		if (dec_xor_one(&b, width, fbits, &v, &wlead, &wlen))
			return RDB_ECORRUPT;
		out[i] = v;
	}
	size_t rest = len * 8 - b.pos;
	uint64_t pad = 0;
	if (rest >= 8 || (rest && br_get(&b, (unsigned)rest, &pad)) || pad)
		return RDB_ECORRUPT; /* trailing bytes or non-zero padding */
	return 0;
}

/* ---- byte shuffle ----------------------------------------------------------- */

static void shuffle(const uint64_t *v, size_t k, unsigned width_bytes, uint8_t *planes)
{
	for (unsigned b = 0; b < width_bytes; b++)
		for (size_t i = 0; i < k; i++)
			planes[b * k + i] = (uint8_t)(v[i] >> (8 * b));
}

static void unshuffle(const uint8_t *planes, size_t k, unsigned width_bytes, uint64_t *out)
{
	memset(out, 0, k * sizeof(*out));
	for (unsigned b = 0; b < width_bytes; b++)
		for (size_t i = 0; i < k; i++)
			out[i] |= (uint64_t)planes[b * k + i] << (8 * b);
}

static int enc_shuf_zstd(const uint64_t *v, size_t k, unsigned width_bytes, uint8_t enc,
			 struct blob *b)
{
	uint8_t *planes = malloc(k * width_bytes);
	if (!planes)
		return -ENOMEM;
	shuffle(v, k, width_bytes, planes);
	int rc = zstd_blob(b, enc, NULL, 0, planes, k * width_bytes);
	free(planes);
	return rc;
}

static int dec_shuf_zstd(const uint8_t *p, size_t len, size_t k, unsigned width_bytes,
			 uint64_t *out)
{
	uint8_t *planes = NULL;
	size_t plen = 0;
	int rc = zstd_unframe(p, len, k * width_bytes, true, &planes, &plen);
	if (rc)
		return rc;
	unshuffle(planes, k, width_bytes, out);
	free(planes);
	return 0;
}

/* ---- blocked value column ------------------------------------------------------------
 * Values of a long chunk in blocks of BLOCK_POINTS, each encoded on its own
 * (the smallest candidate per block), so that a read of the chunk's tail
 * decodes only the blocks it needs. Tried only when the best whole-column
 * encoding is slow to decode (slow_to_decode), and kept only when it costs
 * at most BLOCK_MARGIN_PCT more bytes than that encoding (byte planes and
 * XOR streams lose little when cut). */
#define BLOCK_POINTS	 256u
#define BLOCK_POINTS_MIN 64u
#define BLOCK_MARGIN_PCT 4u

static int enc_values(const uint64_t *v, size_t n, struct blob *best);

/* Encodings whose decoding costs enough per point (a zstd frame, a bit
 * stream) for blocks to pay off in tail reads; the integer streams decode
 * in about a nanosecond a point and are left whole, which also spares the
 * encoder the second candidate search for them. */
static bool slow_to_decode(uint8_t enc)
{
	return enc == ENC_ZSTD || enc == ENC_XOR || enc == ENC_F32_XOR ||
	       enc == ENC_F32_SHUF_ZSTD || enc == ENC_SHUF_ZSTD;
}

static int enc_blocked(const uint64_t *v, size_t n, struct blob *b)
{
	size_t nb = (n + BLOCK_POINTS - 1) / BLOCK_POINTS;
	struct blob *blk = calloc(nb, sizeof(*blk));
	size_t total = 10 + 4 * nb;
	int rc = blk ? 0 : -ENOMEM;
	for (size_t i = 0; rc == 0 && i < nb; i++) {
		size_t k = i + 1 < nb ? BLOCK_POINTS : n - i * BLOCK_POINTS;
		rc = enc_values(v + i * BLOCK_POINTS, k, &blk[i]);
		total += 1 + blk[i].len;
	}
	if (rc == 0)
		rc = blob_alloc(b, ENC_BLOCKED, total);
	if (rc == 0) {
		size_t o = put_varint(b->p, BLOCK_POINTS);
		for (size_t i = 0; i < nb; i++, o += 4)
			rdb_put_le32(b->p + o, (uint32_t)(1 + blk[i].len));
		for (size_t i = 0; i < nb; i++) {
			b->p[o++] = blk[i].enc;
			memcpy(b->p + o, blk[i].p, blk[i].len);
			o += blk[i].len;
		}
		b->len = o;
	}
	for (size_t i = 0; blk && i < nb; i++)
		blob_free(&blk[i]);
	free(blk);
	return rc;
}

static int dec_values(uint8_t enc, const uint8_t *p, size_t len, size_t n, uint64_t *out);

/* Decodes the blocks holding points [from, n) into out[their first point
 * ..n); the values before are left as they were. */
static int dec_blocked(const uint8_t *p, size_t len, size_t n, size_t from, uint64_t *out)
{
	struct rd r = {p, p + len};
	uint64_t bp;
	if (get_varint(&r, &bp) || bp < BLOCK_POINTS_MIN || bp >= n)
		return RDB_ECORRUPT;
	size_t nb = (n + (size_t)bp - 1) / (size_t)bp;
	if ((size_t)(r.end - r.p) / 4 < nb)
		return RDB_ECORRUPT;
	const uint8_t *dir = r.p, *at = r.p + 4 * nb;
	size_t left = (size_t)(r.end - at);
	for (size_t i = 0; i < nb; i++) {
		size_t blen = rdb_get_le32(dir + 4 * i), k = i + 1 < nb ? (size_t)bp : n - i * bp;
		if (blen < 1 || blen > left)
			return RDB_ECORRUPT;
		if ((i + 1) * bp > from) {
			if (at[0] == ENC_BLOCKED)
				return RDB_ECORRUPT;
			int rc = dec_values(at[0], at + 1, blen - 1, k, out + i * bp);
			if (rc)
				return rc;
		}
		at += blen;
		left -= blen;
	}
	return left ? RDB_ECORRUPT : 0;
}

/* ---- value column ------------------------------------------------------------ */

/* Candidates over the float32 patterns, if every value is float32-exact. */
/* The float32 candidates: the XOR stream into *slow, the planes into *best. */
static int enc_values_f32(const uint64_t *v, size_t n, struct blob *best, struct blob *slow)
{
	uint64_t *f = malloc(n * sizeof(*f));
	if (!f)
		return -ENOMEM;
	struct blob cand = {0};
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t x;
		if (!f64_to_f32_exact(v[i], &x))
			goto out;
		f[i] = x;
	}
	rc = enc_xor(f, n, 32, ENC_F32_XOR, &cand);
	if (!rc) {
		keep_smaller(slow, &cand);
		rc = enc_shuf_zstd(f, n, 4, ENC_F32_SHUF_ZSTD, &cand);
	}
	if (!rc)
		keep_smaller(best, &cand);
out:
	free(f);
	return rc;
}

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
	rc = best_i64_opt(s, n, true, &inner);
	if (!rc)
		rc = blob_alloc(&cand, ENC_INT, 1 + inner.len);
	if (!rc) {
		cand.p[0] = inner.enc;
		memcpy(cand.p + 1, inner.p, inner.len);
		cand.len = 1 + inner.len;
		keep_smaller(best, &cand);
	}
out:
	blob_free(&inner);
	free(s);
	return rc;
}

/* XOR streams decode bit by bit, about three times slower than the other
 * value encodings (10 vs 3 ns per point for float32 loss curves); queries
 * decode every point they read, so an XOR stream is kept only when it is
 * smaller than the best other candidate by more than this fraction. */
#define SLOW_MARGIN_PCT 3u

static int enc_values(const uint64_t *v, size_t n, struct blob *best)
{
	struct blob cand = {0}, slow = {0};
	int rc = enc_const64(v, n, best);
	if (rc || best->p)
		return rc; /* constant: nothing is smaller */
	rc = best_i64(v, n, best);
	if (!rc)
		rc = enc_xor(v, n, 64, ENC_XOR, &slow);
	if (!rc)
		rc = enc_shuf_zstd(v, n, 8, ENC_SHUF_ZSTD, &cand);
	if (!rc) {
		keep_smaller(best, &cand);
		rc = enc_values_f32(v, n, best, &slow);
	}
	if (!rc)
		rc = enc_values_int(v, n, best);
	if (!rc && slow.p && slow.len * 100 < best->len * (100 - SLOW_MARGIN_PCT))
		keep_smaller(best, &slow);
	blob_free(&slow);
	if (!rc && n >= 2 * BLOCK_POINTS && slow_to_decode(best->enc))
		rc = enc_blocked(v, n, &cand);
	if (!rc && cand.p && cand.len * 100 <= best->len * (100 + BLOCK_MARGIN_PCT)) {
		blob_free(best);
		*best = cand;
		cand = (struct blob){0};
	}
	blob_free(&cand);
	if (rc)
		blob_free(best);
	return rc;
}

static int dec_values_int(const uint8_t *p, size_t len, size_t n, uint64_t *out)
{
	if (len < 1)
		return RDB_ECORRUPT;
	int rc = dec_i64(p[0], p + 1, len - 1, n, out, 0u);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++) {
		if (out[i] + INT_LIMIT > 2 * INT_LIMIT)
			return RDB_ECORRUPT;
		out[i] = rdb_f64_bits((double)u2s(out[i]));
	}
	return 0;
}

static int dec_values(uint8_t enc, const uint8_t *p, size_t len, size_t n, uint64_t *out)
{
	int rc;
	switch (enc) {
	case ENC_XOR:
		return dec_xor(p, len, n, 64, out);
	case ENC_SHUF_ZSTD:
		return dec_shuf_zstd(p, len, n, 8, out);
	case ENC_INT:
		return dec_values_int(p, len, n, out);
	case ENC_F32_XOR:
		rc = dec_xor(p, len, n, 32, out);
		break;
	case ENC_F32_SHUF_ZSTD:
		rc = dec_shuf_zstd(p, len, n, 4, out);
		break;
	case ENC_BLOCKED:
		return dec_blocked(p, len, n, 0, out);
	default:
		return dec_i64(enc, p, len, n, out, 0u);
	}
	if (rc == 0)
		widen_f32(out, n);
	return rc;
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
		o += put_varint(p ? p + o : tmp, run);
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
	rc = best_i64_opt(vals, count, true, &inner);
	size_t bitmap_len = (n + 7) / 8, runs_len = put_mask_runs(step, n, NULL);
	size_t mask_len = runs_len < bitmap_len ? runs_len : bitmap_len;
	if (!rc)
		rc = blob_alloc(best, ENC_MASKED, 2 + mask_len + inner.len);
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
	blob_free(&inner);
	free(vals);
	return rc;
}

static int enc_steps(const uint64_t *step, size_t n, struct blob *best)
{
	size_t count = 0;
	for (size_t i = 0; i < n; i++)
		count += step[i] != STEP_NONE_BITS;
	if (count == 0)
		return blob_alloc(best, ENC_ABSENT, 0);
	if (count == n)
		return best_i64_opt(step, n, true, best);
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
			if (get_varint(r, &run) || run > n - i)
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
		rc = dec_i64(r.p[0], r.p + 1, (size_t)(r.end - r.p) - 1, count, out, 0u);
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
	return dec_i64(enc, p, len, n, out, 0u);
}

/* ---- attempt column ------------------------------------------------------------ */

static int enc_attempts(const uint32_t *a, size_t n, struct blob *best)
{
	size_t runs = 1;
	for (size_t i = 1; i < n; i++)
		runs += a[i] != a[i - 1];
	int rc;
	if (runs == 1) {
		rc = blob_alloc(best, ENC_CONST32, 4);
		if (!rc) {
			rdb_put_le32(best->p, a[0]);
			best->len = 4;
		}
		return rc;
	}
	rc = blob_alloc(best, ENC_RLE32, runs * 8); /* pair: <= 5 + 3 bytes */
	for (size_t i = 0; i < n && !rc;) {
		size_t run = 1;
		while (i + run < n && a[i + run] == a[i])
			run++;
		best->len += put_varint(best->p + best->len, a[i]);
		best->len += put_varint(best->p + best->len, run);
		i += run;
	}
	if (rc || best->len < 4 * n)
		return rc;
	blob_free(best);
	rc = blob_alloc(best, ENC_RAW32, 4 * n);
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
		if (get_varint(&r, &a) || get_varint(&r, &run))
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
	int rc = best_i64_opt((const uint64_t *)c->ts_ns, n, true, &col[0]);
	if (!rc)
		rc = enc_steps((const uint64_t *)c->step, n, &col[1]);
	if (!rc)
		rc = enc_attempts(c->attempt, n, &col[2]);
	if (!rc)
		rc = enc_values(c->value, n, &col[3]);
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

/* The first block's encoding of a blocked value column (0 otherwise). */
static uint8_t block0_enc(const struct blob *b, size_t n)
{
	if (b->enc != ENC_BLOCKED)
		return 0;
	size_t nb = (n + BLOCK_POINTS - 1) / BLOCK_POINTS;
	size_t at = put_varint((uint8_t[10]){0}, BLOCK_POINTS) + 4 * nb;
	return at < b->len ? b->p[at] : 0;
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
		*info = (struct sto_codec_info){
		    col[0].enc,		  col[1].enc,		col[2].enc,
		    col[3].enc,		  (uint32_t)col[0].len, (uint32_t)col[1].len,
		    (uint32_t)col[2].len, (uint32_t)col[3].len, block0_enc(&col[3], cols->n)};
	for (int i = 0; i < 4; i++)
		blob_free(&col[i]);
	return rc;
}

int sto_codec_encode_shared(const struct mdl_cols *cols, struct rdb_buf *out)
{
	if (!cols || cols->n < 1 || cols->n > STO_CHUNK_MAX_POINTS)
		return RDB_EINVAL;
	size_t n = cols->n;
	struct blob col[3] = {{0}};
	int rc = best_i64_opt((const uint64_t *)cols->ts_ns, n, true, &col[0]);
	if (!rc)
		rc = enc_steps((const uint64_t *)cols->step, n, &col[1]);
	if (!rc)
		rc = enc_attempts(cols->attempt, n, &col[2]);
	if (!rc)
		rc = put_columns(col, 0, 3, true, (uint32_t)n, out);
	for (int i = 0; i < 3; i++)
		blob_free(&col[i]);
	return rc;
}

int sto_codec_encode_values(const struct mdl_cols *cols, struct rdb_buf *out)
{
	if (!cols || cols->n < 1 || cols->n > STO_CHUNK_MAX_POINTS)
		return RDB_EINVAL;
	struct blob col = {0};
	int rc = enc_values(cols->value, cols->n, &col);
	if (!rc)
		rc = put_columns(&col, 0, 1, false, 0, out);
	blob_free(&col);
	return rc;
}

/* Decodes column idx of n points; the value column only from the block
 * holding point `from` on where its encoding allows (else whole). */
static int decode_column(int idx, uint8_t enc, const uint8_t *p, size_t len, size_t n, size_t from,
			 struct mdl_cols *out)
{
	switch (idx) {
	case 0:
		return dec_i64(enc, p, len, n, (uint64_t *)out->ts_ns, 0);
	case 1:
		return dec_steps(enc, p, len, n, (uint64_t *)out->step);
	case 2:
		return dec_attempts(enc, p, len, n, out->attempt);
	default:
		if (enc == ENC_BLOCKED)
			return dec_blocked(p, len, n, from, out->value);
		return dec_values(enc, p, len, n, out->value);
	}
}

size_t sto_codec_lead_below(const struct mdl_cols *c, int64_t min_step)
{
	size_t i = 0;
	while (i < c->n && c->step[i] < min_step)
		i++;
	return i;
}

void sto_codec_drop_lead(struct mdl_cols *c, size_t k, unsigned flags)
{
	if (k == 0)
		return;
	k = k < c->n ? k : c->n;
	size_t rest = c->n - k;
	if (!(flags & STO_CODEC_SKIP_TS))
		memmove(c->ts_ns, c->ts_ns + k, rest * sizeof(*c->ts_ns));
	memmove(c->step, c->step + k, rest * sizeof(*c->step));
	memmove(c->attempt, c->attempt + k, rest * sizeof(*c->attempt));
	memmove(c->value, c->value + k, rest * sizeof(*c->value));
	c->n = rest;
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
static int decode_columns(const uint8_t *src, size_t len, size_t *pos, int first, int count,
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
static int decode_n(const uint8_t *src, size_t len, uint32_t max_points, struct mdl_cols *out,
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
	int rc = decode_n(src, len, max_points, out, &n);
	if (rc == 0)
		rc = decode_columns(src, len, &pos, 0, ncols, n, flags, 0, out);
	if (rc)
		return rc;
	out->n = n;
	if (used)
		*used = pos;
	return 0;
}

int sto_codec_decode_tail(const uint8_t *src, size_t len, uint32_t max_points, unsigned flags,
			  int64_t min_step, struct mdl_cols *out, size_t *used, size_t *dropped)
{
	out->n = 0;
	*dropped = 0;
	uint32_t n;
	size_t pos = 4;
	int rc = decode_n(src, len, max_points, out, &n);
	if (rc == 0)
		rc = decode_columns(src, len, &pos, 0, 3, n, flags, 0, out);
	out->n = rc == 0 ? n : 0;
	size_t from = rc == 0 ? sto_codec_lead_below(out, min_step) : 0;
	if (rc == 0)
		rc = decode_columns(src, len, &pos, 3, 1, n, flags, from, out);
	if (rc) {
		out->n = 0;
		return rc;
	}
	sto_codec_drop_lead(out, from, flags);
	*dropped = from;
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

int sto_codec_decode_values(const uint8_t *src, size_t len, struct mdl_cols *out, size_t *used)
{
	return sto_codec_decode_values_from(src, len, 0, out, used);
}

int sto_codec_decode_values_from(const uint8_t *src, size_t len, size_t from, struct mdl_cols *out,
				 size_t *used)
{
	size_t pos = 0;
	if (out->n == 0 || out->n > out->cap)
		return RDB_EINVAL;
	int rc = decode_columns(src, len, &pos, 3, 1, out->n, 0, from, out);
	if (rc)
		return rc;
	if (used)
		*used = pos;
	return 0;
}

/* ---- generic zstd blocks (event chunks) -------------------------------------- */

int sto_codec_zstd_pack(const void *src, size_t len, struct rdb_buf *out)
{
	size_t bound = ZSTD_compressBound(len);
	int rc = rdb_buf_reserve(out, bound);
	if (rc)
		return rc;
	size_t z = z_compress(out->data + out->len, bound, src, len);
	if (ZSTD_isError(z))
		return -ENOMEM;
	out->len += z;
	return 0;
}

int sto_codec_zstd_unpack(const uint8_t *src, size_t len, size_t max_out, struct rdb_buf *out)
{
	unsigned long long sz = ZSTD_getFrameContentSize(src, len);
	if (sz == ZSTD_CONTENTSIZE_ERROR || sz == ZSTD_CONTENTSIZE_UNKNOWN || sz > max_out)
		return RDB_ECORRUPT;
	if (ZSTD_findFrameCompressedSize(src, len) != len)
		return RDB_ECORRUPT; /* trailing bytes, or a truncated frame */
	out->len = 0;
	int rc = rdb_buf_reserve(out, (size_t)sz ? (size_t)sz : 1);
	if (rc)
		return rc == RDB_ELIMIT ? RDB_ECORRUPT : rc;
	size_t got = z_decompress(out->data, (size_t)sz, src, len);
	if (ZSTD_isError(got) || got != sz)
		return RDB_ECORRUPT;
	out->len = got;
	return 0;
}
