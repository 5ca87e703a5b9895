/* codec_float.c - the chunk codec's float bit streams: Gorilla XOR
 * (encodings 32, 33), byte planes under zstd (34, 36) and the float32-exact
 * test and widening the float32 encodings rest on.
 *
 * Design. These transforms work on the value column's bit patterns, never
 * through the FPU, so NaN payloads, -0.0 and denormals survive bit-exact.
 * The XOR stream layout and the float32-exact rule are in codec.c's FORMAT
 * comment; the 32-bit XOR decoder has a fast path that reads one 8-byte
 * word per value while the stream has 8 bytes left.
 *
 * Threading: no shared state.
 * Failure: encoders return 0 or -ENOMEM (a candidate that does not apply
 * leaves its blob empty); decoders return RDB_ECORRUPT on a window past
 * the width, a reuse before any window, trailing bytes or non-zero
 * padding, or -ENOMEM.
 */
#include "storage/chunk/codec_int.h"

#include "common/rdb_err.h"
#include "common/rdb_le.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define F32_LOW_MASK (((uint64_t)1 << 29) - 1)

/* ---- float32-exact ----------------------------------------------------------- */

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
void sto_codec_widen_f32(uint64_t *out, size_t n)
{
	/* e = the exponent bits: e - 2^23 wraps below 0 (bit 63 of the
	 * difference, so bit 31 after >> 32) only for e = 0, and e + 2^23
	 * reaches bit 31 only for e = 0xff << 23; both are 0 for every normal
	 * exponent. An OR of integer lanes, which vectorizes (a test per value
	 * with || did not: a third of the widening's instructions). */
	uint64_t acc = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t e = out[i] & 0x7f800000u;
		acc |= ((e - 0x00800000u) >> 32) | (e + 0x00800000u);
	}
	bool special = (acc >> 31) & 1;
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

/* ---- Gorilla XOR bit streams ---------------------------------------------- */

struct bitwr {
	uint8_t *p;
	size_t len;
	uint64_t acc;  /* pending bits, right-aligned */
	unsigned nacc; /* number of pending bits, < 8 between calls */
};

/* Appends the low k bits of v, 1 <= k <= 32; a writer without p only
 * counts them. */
static inline void bw_put(struct bitwr *w, uint64_t v, unsigned k)
{
	if (!w->p) {
		w->len += (w->nacc + k) / 8;
		w->nacc = (w->nacc + k) % 8;
		return;
	}
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
	if (w->nacc && !w->p)
		w->len++;
	else if (w->nacc)
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

/* Writes the XOR stream of v[0..k) to p (room for its worst case), or
 * with p NULL only measures it; returns its length in bytes. Inlined into
 * both callers, so the measuring loop has no stores. */
static inline size_t put_xor(const uint64_t *v, size_t k, unsigned width, uint8_t *p, size_t limit)
{
	unsigned fbits = width == 64 ? 6 : 5;
	struct bitwr w = {p, 0, 0, 0};
	unsigned wlead = 0, wlen = 0; /* wlen == 0: no window yet */
	bw_put_wide(&w, v[0], width);
	for (size_t i = 1; i < k; i++) {
		uint64_t x = v[i] ^ v[i - 1];
		if (w.len >= limit)
			return w.len; /* measuring, and already too long */
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
	return w.len;
}

size_t sto_codec_xor_len(const uint64_t *v, size_t k, unsigned width, size_t limit)
{
	return put_xor(v, k, width, NULL, limit);
}

/* XOR-encodes v[0..k) of the given width (32 or 64) into b. */
int sto_codec_enc_xor(const uint64_t *v, size_t k, unsigned width, uint8_t enc, struct blob *b)
{
	unsigned fbits = width == 64 ? 6 : 5;
	int rc = sto_codec_blob_alloc(b, enc, (2 + 2 * fbits + width) * k / 8 + 16);
	if (rc)
		return rc;
	b->len = put_xor(v, k, width, b->p, SIZE_MAX);
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

int sto_codec_dec_xor(const uint8_t *p, size_t len, size_t k, unsigned width, uint64_t *out)
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

int sto_codec_enc_shuf_zstd(const uint64_t *v, size_t k, unsigned width_bytes, uint8_t enc,
			    struct blob *b, size_t beat)
{
	uint8_t *planes = malloc(k * width_bytes);
	if (!planes)
		return -ENOMEM;
	shuffle(v, k, width_bytes, planes);
	int rc = sto_codec_zstd_blob(b, enc, NULL, 0, planes, k * width_bytes, beat);
	free(planes);
	return rc;
}

int sto_codec_dec_shuf_zstd(const uint8_t *p, size_t len, size_t k, unsigned width_bytes,
			    uint64_t *out)
{
	uint8_t *planes = NULL;
	size_t plen = 0;
	int rc = sto_codec_zstd_unframe(p, len, k * width_bytes, true, &planes, &plen);
	if (rc)
		return rc;
	unshuffle(planes, k, width_bytes, out);
	free(planes);
	return 0;
}

/* ---- float32 candidates --------------------------------------------------------- */

/* v[0..n)'s float32 patterns into f, if every value is float32-exact. */
static bool f32_patterns(const uint64_t *v, size_t n, uint64_t *f)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t x;
		if (!f64_to_f32_exact(v[i], &x))
			return false;
		f[i] = x;
	}
	return true;
}

/* The float32 planes into *best and the patterns into *f32, if every value
 * is float32-exact (else *f32 NULL and no candidate). */
int sto_codec_enc_values_f32(const uint64_t *v, size_t n, struct blob *best, uint64_t **f32,
			     size_t beat)
{
	*f32 = NULL;
	uint64_t *f = malloc(n * sizeof(*f));
	if (!f)
		return -ENOMEM;
	if (!f32_patterns(v, n, f)) {
		free(f);
		return 0;
	}
	struct blob cand = {0};
	int rc = sto_codec_enc_shuf_zstd(f, n, 4, ENC_F32_SHUF_ZSTD, &cand, beat);
	sto_codec_keep_smaller(best, &cand);
	if (rc)
		free(f);
	else
		*f32 = f;
	return rc;
}
