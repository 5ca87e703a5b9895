/* json_out.c - JSON text for stored values and integers. Pure functions.
 *
 * A number is written as printf's %.15g, %.16g or %.17g, the first of the
 * three whose text reads back (strtod, round-to-nearest-even) to the same
 * bits: exact, and short (a subnormal, which holds fewer digits, is written
 * with the first of %.1g .. %.17g that reads back). Integral values below 1e15 are written as
 * integers, 0 as "0", -0.0 as "-0.0".
 *
 * printf and strtod cost several microseconds per number (arbitrary
 * precision arithmetic in glibc), which dominated raw range answers. The
 * common case is computed here exactly with 128-bit integers instead, with
 * the same result text byte for byte:
 *
 *   v = m * 2^-k with the 53-bit significand m (normal numbers, 1 <= k <=
 *   125), X = floor(log10 |v|) and s = P - 1 - X in 0..22. Then
 *   N = m * 10^s < 2^127 exactly, q = N >> k holds the first P digits and
 *   r = N mod 2^k the rest: rounding q by r against 2^(k-1) (ties to even,
 *   as glibc's printf does in the default rounding mode) gives printf's
 *   P digits D. D * 10^-s reads back to v iff it lies in v's rounding
 *   interval: with delta = |D * 2^k - N| (r or 2^k - r), in units where
 *   one ulp of v is 10^s, 2 * delta < 10^s, or == with m even (strtod's
 *   tie goes to the even significand); below a power of two (m = 2^52) the
 *   lower neighbour is half an ulp away: 4 * delta <= 10^s there.
 *
 * Everything else (subnormals, |v| < ~1e-6, integral values >= 2^53) goes
 * through snprintf + strtod as before. tests/unit/test_json_out.c compares
 * both paths on millions of values.
 */
#include "server/json_out.h"
#include "common/rdb_le.h"
#include "server/json_array.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned __int128 u128;

static const uint64_t pow10_u64[20] = {
    1ull,
    10ull,
    100ull,
    1000ull,
    10000ull,
    100000ull,
    1000000ull,
    10000000ull,
    100000000ull,
    1000000000ull,
    10000000000ull,
    100000000000ull,
    1000000000000ull,
    10000000000000ull,
    100000000000000ull,
    1000000000000000ull,
    10000000000000000ull,
    100000000000000000ull,
    1000000000000000000ull,
    10000000000000000000ull,
};

static u128 pow10_128(int s)
{
	return s < 20 ? (u128)pow10_u64[s] : (u128)pow10_u64[19] * pow10_u64[s - 19];
}

static const char digit_pairs[201] = "00010203040506070809"
				     "10111213141516171819"
				     "20212223242526272829"
				     "30313233343536373839"
				     "40414243444546474849"
				     "50515253545556575859"
				     "60616263646566676869"
				     "70717273747576777879"
				     "80818283848586878889"
				     "90919293949596979899";

/* Writes the decimal digits of v < 10^8 (no sign) at p; returns their count.
 * The length first, then the pairs from the end, in place. */
static inline size_t fmt_u32_small(char *p, uint32_t v)
{
	size_t n = v < 10	  ? 1
		   : v < 100	  ? 2
		   : v < 1000	  ? 3
		   : v < 10000	  ? 4
		   : v < 100000	  ? 5
		   : v < 1000000  ? 6
		   : v < 10000000 ? 7
				  : 8;
	char *e = p + n;
	while (v >= 100) {
		unsigned d = (v % 100) * 2;
		v /= 100;
		*--e = digit_pairs[d + 1];
		*--e = digit_pairs[d];
	}
	if (v >= 10) {
		*--e = digit_pairs[v * 2 + 1];
		*--e = digit_pairs[v * 2];
	} else {
		*--e = (char)('0' + v);
	}
	return n;
}

/* The eight decimal digits of v < 10^8 (leading zeros kept) as the bytes
 * 0..9 of a word, the first digit in its lowest byte (SWAR): the two
 * halves of four digits, then their pairs, then their digits are split in
 * parallel lanes, each division an exact multiply-shift within its lane
 * (x / 100 = (x * 5243) >> 19 for x < 10^4, x / 10 = (x * 103) >> 10 for
 * x < 100; no lane carries into the next). A handful of multiplications
 * instead of a table lookup per pair. */
static inline uint64_t digits8(uint32_t v)
{
	uint64_t x = (uint64_t)(v / 10000) | (uint64_t)(v % 10000) << 32;
	uint64_t h = ((x * 5243) >> 19) & 0x0000007f0000007full;
	uint64_t y = h | (x - h * 100) << 16;
	uint64_t t = ((y * 103) >> 10) & 0x000f000f000f000full;
	return t | (y - t * 10) << 8;
}

#define ASCII_ZEROS 0x3030303030303030ull

/* Stores the eight bytes of a digit word, lowest first: one store. */
static inline void put_word(char *p, uint64_t w)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy(p, &w, 8);
#else
	rdb_put_le64((uint8_t *)p, w);
#endif
}

/* Writes exactly 8 digits of v < 10^8 (leading zeros kept) at p: two
 * halves of four digits, each two pairs, computed independently (shorter
 * dependency chains than digits8, which integers in a row pay for). */
static inline void fmt_8digits(char *p, uint32_t v)
{
	uint32_t hi = v / 10000, lo = v % 10000;
	memcpy(p, digit_pairs + (hi / 100) * 2, 2);
	memcpy(p + 2, digit_pairs + (hi % 100) * 2, 2);
	memcpy(p + 4, digit_pairs + (lo / 100) * 2, 2);
	memcpy(p + 6, digit_pairs + (lo % 100) * 2, 2);
}

/* Writes the decimal digits of v (no sign) at p; returns their count.
 * Eight digits at a time in 32-bit arithmetic (nanosecond timestamps have
 * 19 digits: a 64-bit division per pair was most of a raw range answer). */
static inline size_t fmt_u64(char *p, uint64_t v)
{
	if (v < 100000000u)
		return fmt_u32_small(p, (uint32_t)v);
	uint64_t q = v / 100000000u;
	uint32_t r = (uint32_t)(v % 100000000u);
	size_t n;
	if (q < 100000000u) {
		n = fmt_u32_small(p, (uint32_t)q);
	} else {
		n = fmt_u32_small(p, (uint32_t)(q / 100000000u));
		fmt_8digits(p + n, (uint32_t)(q % 100000000u));
		n += 8;
	}
	fmt_8digits(p + n, r);
	return n + 8;
}

size_t srv_fmt_u64(char *p, uint64_t v)
{
	return fmt_u64(p, v);
}

size_t srv_fmt_i64(char *p, int64_t v)
{
	if (v >= 0)
		return fmt_u64(p, (uint64_t)v);
	*p = '-';
	return 1 + fmt_u64(p + 1, (uint64_t)0 - (uint64_t)v);
}

/* Writes I = d / 10^nf (nf <= 16) in decimal, then, unless the other nf
 * digits F (leading zeros kept) are all zero, '.' (when dot) and F without
 * its trailing zeros; returns the length. F's 16 digits (zero-padded) are
 * made as one 128-bit word, shifted down to its nf digits, its trailing
 * zeros counted as the word's high zero bytes, and stored whole: no byte
 * is read back (a copy out of a digit buffer stalled on store forwarding).
 * Up to 16 bytes of p past the returned length may be overwritten. */
static inline size_t put_split(char *p, uint64_t d, size_t nf, bool dot)
{
	uint64_t ip;
	switch (nf) { /* the usual ones with a constant divisor */
	case 16:
		ip = d / 10000000000000000ull;
		break;
	case 15:
		ip = d / 1000000000000000ull;
		break;
	case 14:
		ip = d / 100000000000000ull;
		break;
	default:
		ip = d / pow10_u64[nf];
		break;
	}
	uint64_t f = d - ip * pow10_u64[nf];
	size_t o = fmt_u64(p, ip);
	if (f == 0)
		return o;
	u128 g = (u128)digits8((uint32_t)(f / 100000000u)) |
		 (u128)digits8((uint32_t)(f % 100000000u)) << 64;
	g >>= 8 * (16 - nf);
	uint64_t g_lo = (uint64_t)g, g_hi = (uint64_t)(g >> 64);
	size_t zeros =
	    g_hi ? (size_t)__builtin_clzll(g_hi) / 8 : 8 + (size_t)__builtin_clzll(g_lo) / 8;
	if (dot)
		p[o++] = '.';
	put_word(p + o, g_lo + ASCII_ZEROS);
	put_word(p + o + 8, g_hi + ASCII_ZEROS);
	return o + 16 - zeros;
}

/* %.<P>g of the P digits D (10^(P-1) <= D < 10^P, P <= 17) times
 * 10^(X - P + 1): trailing zeros dropped, exponent style when X < -4 or
 * X >= P. Bytes of p past the returned length, up to SRV_FMT_VALUE_MAX,
 * may be overwritten. */
static size_t fmt_g(char *p, bool neg, uint64_t d, int prec, int x)
{
	size_t o = 0;
	if (neg)
		p[o++] = '-';
	if (x >= 0 && x < prec) /* the integer digits, '.', the others */
		return o + put_split(p + o, d, (size_t)(prec - 1 - x), true);
	if (x < 0 && x >= -4) { /* 0.000ddd */
		memcpy(p + o, "0.000", 5);
		o += 2 + (size_t)(-x - 1);
		return o + put_split(p + o, d, (size_t)prec - 1, false);
	}
	o += put_split(p + o, d, (size_t)prec - 1, true);
	p[o++] = 'e';
	p[o++] = x < 0 ? '-' : '+';
	unsigned ax = (unsigned)(x < 0 ? -x : x);
	if (ax < 10)
		p[o++] = '0';
	return o + fmt_u32_small(p + o, ax);
}

/* Whether the prec-digit candidate (q, rounded up when up) reads back as
 * the double m * 2^-k: delta is its distance from the exact value and ulp
 * one unit in its last digit, both scaled by 2^k. Halfway reads back only
 * to an even mantissa; below a power of two (tight_below) the gap under
 * the value is half as wide. */
static inline bool reads_back(u128 delta, u128 ulp, bool up, bool tight_below, uint64_t m)
{
	if (delta == 0)
		return true;
	if (!up && tight_below)
		return 4 * delta <= ulp;
	return 2 * delta < ulp || (2 * delta == ulp && !(m & 1));
}

/* Writes the candidate q (+1 when up) of prec digits, decimal exponent x
 * (rounding up to 10^prec carries into the exponent). */
static inline size_t emit_rounded(char *p, bool neg, uint64_t q, bool up, int prec, int x)
{
	uint64_t d = q + up;
	if (d == pow10_u64[prec]) {
		d = pow10_u64[prec - 1];
		x++;
	}
	return fmt_g(p, neg, d, prec, x);
}

/* fmt_shortest_fast's common case in one multiplication: N17 = m * 10^s17
 * gives q17 = N17 >> k and r17; the P = 15 and 16 digit candidates are
 * q17 / 100 and q17 / 10 (floor of floor), and their remainders scaled by
 * 100 or 10, R = (q17 mod div) * 2^k + r17 = div * r_P, decide rounding and
 * read-back exactly as in the loop below (all its comparisons multiplied by
 * div: half becomes div * 2^(k-1), an ulp 10^s17). Needs s17 >= 2 and k <=
 * 119 (div * 2^k and 4 * div * delta below 2^128). Returns the length, or
 * 0 when outside that domain (the loop decides). */
static size_t fmt_shortest_one_mul(char *p, uint64_t m, int k, bool neg, bool tight_below, int x)
{
	if (k > 119)
		return 0;
	uint64_t q17 = 0;
	u128 r17 = 0, mask = ((u128)1 << k) - 1;
	int s17 = 0;
	for (int tries = 0;; tries++) {
		s17 = 16 - x;
		if (s17 < 2 || s17 > 22 || tries > 3)
			return 0;
		u128 n = (u128)m * pow10_128(s17), qq = n >> k;
		r17 = n & mask;
		if (qq >= pow10_u64[17]) {
			x++;
			continue;
		}
		if (qq < pow10_u64[16]) {
			x--;
			continue;
		}
		q17 = (uint64_t)qq;
		break;
	}
	u128 ulp17 = pow10_128(s17);
	/* A P-digit candidate (rem = q17 mod div) is at least dmin * 2^k from
	 * N17, dmin = rem rounding down (delta = rem * 2^k + r17) or div - rem
	 * - 1 rounding up (delta = (div - rem) * 2^k - r17, r17 < 2^k); it can
	 * only read back when 2 * delta <= ulp17, so 2 * dmin <= ulp_hi =
	 * floor(ulp17 / 2^k) (ulp17 in whole units of 2^k: 2..22 for doubles
	 * with 17 digits). Most candidates of 15 digits, and many of 16, fail
	 * that in 64-bit integers, before the exact test in 128 bits. */
	uint64_t ulp_hi = (uint64_t)(ulp17 >> k);
	static const uint64_t divs[2] = {100, 10};
	for (int i = 0; i < 2; i++) {
		int prec = 15 + i;
		uint64_t div = divs[i], q = q17 / div, rem = q17 - q * div;
		uint64_t dmin = rem < div / 2 ? rem : div - rem - 1;
		if (2 * dmin > ulp_hi)
			continue;
		u128 big = ((u128)rem << k) + r17, half = (u128)(div / 2) << k;
		bool up = big > half || (big == half && (q & 1));
		u128 d_scaled = up ? ((u128)div << k) - big : big;
		if (reads_back(d_scaled, ulp17, up, tight_below, m))
			return emit_rounded(p, neg, q, up, prec, x);
	}
	u128 half17 = (u128)1 << (k - 1);
	return emit_rounded(p, neg, q17, r17 > half17 || (r17 == half17 && (q17 & 1)), 17, x);
}

/* The fast exact path: writes %.<P>g of the finite, non-zero, normal value
 * with these bits for the first P in 15..17 that reads back; returns the
 * length, or 0 when the value is outside the fast domain. */
static size_t fmt_shortest_fast(char *p, uint64_t bits)
{
	int exp_field = (int)((bits >> 52) & 0x7ff);
	uint64_t frac = bits & ((1ull << 52) - 1);
	if (exp_field == 0 || exp_field == 0x7ff)
		return 0;
	int k = 1075 - exp_field; /* v = m * 2^-k */
	if (k < 1 || k > 125)
		return 0;
	uint64_t m = frac | (1ull << 52);
	bool neg = bits >> 63;
	bool tight_below = frac == 0 && exp_field > 1;
	/* floor(log10 |v|) is this or one more (fixed up below). */
	int e2 = exp_field - 1023; /* floor(e2 * log10(2)) for |e2| < 1650, in integers */
	int x = e2 >= 0 ? (e2 * 78913) >> 18 : -((-e2 * 78913 + (1 << 18) - 1) >> 18);
	size_t one = fmt_shortest_one_mul(p, m, k, neg, tight_below, x);
	if (one)
		return one;
	u128 mask = ((u128)1 << k) - 1, half = (u128)1 << (k - 1);
	for (int prec = 15; prec <= 17; prec++) {
		uint64_t q;
		u128 r;
		int s;
		for (int tries = 0;; tries++) {
			s = prec - 1 - x;
			if (s < 0 || s > 22 || tries > 3)
				return 0;
			u128 n = (u128)m * pow10_128(s);
			u128 qq = n >> k;
			r = n & mask;
			if (qq >= pow10_u64[prec]) {
				x++;
				continue;
			}
			if (qq < pow10_u64[prec - 1]) {
				x--;
				continue;
			}
			q = (uint64_t)qq;
			break;
		}
		bool up = r > half || (r == half && (q & 1));
		u128 delta = up ? ((u128)1 << k) - r : r;
		if (prec == 17 || reads_back(delta, pow10_128(s), up, tight_below, m))
			return emit_rounded(p, neg, q, up, prec, x);
	}
	return 0;
}

size_t srv_fmt_value(char *p, uint64_t bits)
{
	/* The common case first, from the exponent field alone: normal and
	 * finite (not zero, subnormal, Inf or NaN, which hold every special
	 * pattern below), and no integer: below 1 (exponent field < 1023), or
	 * bits below the binary point (an integer has none). 2^50 > 1e15, so
	 * the integers the checks below write as such all have a field of
	 * 1023..1072. */
	unsigned ef = (unsigned)(bits >> 52) & 0x7ff;
	if (ef - 1u < 0x7feu &&
	    (ef < 1023 || ef > 1072 || (bits & ((1ull << 52) - 1)) << (ef - 1011) != 0)) {
		size_t n = fmt_shortest_fast(p, bits);
		return n ? n : srv_fmt_value_slow(p, bits);
	}
	double v = rdb_bits_f64(bits);
	if (bits == MDL_VALUE_NULL_BITS) {
		memcpy(p, "null", 4);
		return 4;
	}
	if (bits == MDL_VALUE_NAN_BITS) {
		memcpy(p, "\"NaN\"", 5);
		return 5;
	}
	if (isinf(v)) {
		memcpy(p, v > 0 ? "\"+Inf\"" : "\"-Inf\"", 6);
		return 6;
	}
	if (isnan(v))
		return (size_t)snprintf(p, SRV_FMT_VALUE_MAX, "\"0x%016llx\"",
					(unsigned long long)bits);
	if (v == 0) {
		if (signbit(v)) {
			memcpy(p, "-0.0", 4);
			return 4;
		}
		*p = '0';
		return 1;
	}
	if (fabs(v) < 1e15 && v == (double)(int64_t)v)
		return srv_fmt_i64(p, (int64_t)v);
	size_t n = fmt_shortest_fast(p, bits);
	if (n)
		return n;
	return srv_fmt_value_slow(p, bits);
}

size_t srv_fmt_value_slow(char *p, uint64_t bits)
{
	double v = rdb_bits_f64(bits);
	char tmp[40];
	/* Subnormals hold fewer than 15 significant digits: the shortest text
	 * that reads back may be much shorter (1e-310, not 9.99999999999997e-311). */
	int prec0 = fpclassify(v) == FP_SUBNORMAL ? 1 : 15;
	for (int prec = prec0; prec <= 17; prec++) {
		snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
		if (prec == 17 || strtod(tmp, NULL) == v)
			break;
	}
	size_t n = strlen(tmp);
	memcpy(p, tmp, n);
	return n;
}

int srv_json_value(struct rdb_buf *out, uint64_t bits)
{
	char tmp[SRV_FMT_VALUE_MAX];
	return rdb_buf_append(out, tmp, srv_fmt_value(tmp, bits));
}

int srv_json_i64(struct rdb_buf *out, int64_t v)
{
	char tmp[24];
	return rdb_buf_append(out, tmp, srv_fmt_i64(tmp, v));
}

int srv_json_u64(struct rdb_buf *out, uint64_t v)
{
	char tmp[24];
	return rdb_buf_append(out, tmp, srv_fmt_u64(tmp, v));
}

size_t srv_fmt_rank(char *p, uint32_t rank)
{
	if (rank == MDL_RANK_JOB) {
		memcpy(p, "\"job\"", 5);
		return 5;
	}
	return fmt_u64(p, rank);
}

int srv_json_rank(struct rdb_buf *out, uint32_t rank)
{
	char tmp[24];
	return rdb_buf_append(out, tmp, srv_fmt_rank(tmp, rank));
}

/* ---- arrays (json_array.h) ---------------------------------------------------- */

int srv_json_i64s(struct rdb_buf *out, const int64_t *v, size_t n)
{
	SRV_JSON_ARRAY(out, n, 21, p += srv_fmt_i64(p, v[i]));
}

int srv_json_steps(struct rdb_buf *out, const int64_t *v, size_t n)
{
	SRV_JSON_ARRAY(out, n, 21, {
		if (v[i] == MDL_STEP_NONE) {
			memcpy(p, "null", 4);
			p += 4;
		} else {
			p += srv_fmt_i64(p, v[i]);
		}
	});
}

int srv_json_u32s(struct rdb_buf *out, const uint32_t *v, size_t n)
{
	SRV_JSON_ARRAY(out, n, 11, p += srv_fmt_u64(p, v[i]));
}

int srv_json_values(struct rdb_buf *out, const uint64_t *bits, size_t n)
{
	SRV_JSON_ARRAY(out, n, SRV_JSON_ELEM_MAX, p += srv_fmt_value(p, bits[i]));
}

size_t srv_fmt_f64(char *p, double v, bool defined)
{
	if (!defined) {
		memcpy(p, "null", 4);
		return 4;
	}
	return srv_fmt_value(p, rdb_f64_bits(v));
}

int srv_json_f64(struct rdb_buf *out, double v, bool defined)
{
	char tmp[SRV_FMT_VALUE_MAX];
	return rdb_buf_append(out, tmp, srv_fmt_f64(tmp, v, defined));
}
