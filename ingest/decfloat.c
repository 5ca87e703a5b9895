/* decfloat.c - exact decimal -> double for short literals (decfloat.h).
 *
 * Design: a literal is m * 10^e with m < 10^19 (at most 19 significant
 * digits, so m fits 64 bits). Three cases, each exact:
 *  - Clinger's fast path: m <= 2^53 and |e| <= 22. m and 10^|e| are exact
 *    doubles, so one IEEE multiply or divide rounds correctly (needs
 *    FLT_EVAL_METHOD == 0: no wider intermediate).
 *  - 0 <= e <= 27: m * 5^e is an exact integer below 2^127 (5^27 < 2^63);
 *    it is rounded to 53 bits in integer arithmetic and scaled by 2^e.
 *  - -27 <= e < 0: m * 10^e = (m * 2^(64+z) / 5^k) * 2^-(64+z+k) with k = -e
 *    and z the leading zeros of m; the 128-by-64-bit quotient has at least
 *    65 significant bits and the remainder says whether anything was
 *    dropped below them (sticky), so rounding it to 53 bits (nearest, ties
 *    to even) is the correctly rounded result.
 * No case can reach a subnormal or overflow (the magnitudes stay within
 * 10^-27 .. 10^46), so ldexp of the 53-bit integer is exact. Everything
 * else (longer mantissas, larger exponents) is left to strtod. The unit
 * test and fuzz target compare it with strtod bit for bit.
 */
#include "ingest/decfloat.h"

#include <float.h>
#include <math.h>
#include <stdint.h>

__extension__ typedef unsigned __int128 u128;

static const uint64_t pow5[28] = {UINT64_C(1),
				  UINT64_C(5),
				  UINT64_C(25),
				  UINT64_C(125),
				  UINT64_C(625),
				  UINT64_C(3125),
				  UINT64_C(15625),
				  UINT64_C(78125),
				  UINT64_C(390625),
				  UINT64_C(1953125),
				  UINT64_C(9765625),
				  UINT64_C(48828125),
				  UINT64_C(244140625),
				  UINT64_C(1220703125),
				  UINT64_C(6103515625),
				  UINT64_C(30517578125),
				  UINT64_C(152587890625),
				  UINT64_C(762939453125),
				  UINT64_C(3814697265625),
				  UINT64_C(19073486328125),
				  UINT64_C(95367431640625),
				  UINT64_C(476837158203125),
				  UINT64_C(2384185791015625),
				  UINT64_C(11920928955078125),
				  UINT64_C(59604644775390625),
				  UINT64_C(298023223876953125),
				  UINT64_C(1490116119384765625),
				  UINT64_C(7450580596923828125)};

/* n (> 0) rounded to 53 significant bits, nearest, ties to even, with
 * sticky saying the exact value is a little above n; times 2^e2. */
static double round_scaled(u128 n, bool sticky, int e2)
{
	uint64_t hi = (uint64_t)(n >> 64);
	int bits = hi ? 128 - __builtin_clzll(hi) : 64 - __builtin_clzll((uint64_t)n);
	if (bits <= 53)
		return ldexp((double)(uint64_t)n, e2); /* exact (never sticky here) */
	int shift = bits - 53;
	uint64_t mant = (uint64_t)(n >> shift);
	u128 dropped = n & (((u128)1 << shift) - 1);
	u128 half = (u128)1 << (shift - 1);
	if (dropped > half || (dropped == half && (sticky || (mant & 1)))) {
		mant++;
		if (mant == (UINT64_C(1) << 53)) {
			mant >>= 1;
			shift++;
		}
	}
	return ldexp((double)mant, e2 + shift);
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

bool ing_decfloat_syntax(const char *t, size_t n)
{
	size_t i = 0, digits = 0;
	if (i < n && t[i] == '-')
		i++;
	for (; i < n && is_digit(t[i]); i++)
		digits++;
	if (i < n && t[i] == '.')
		for (i++; i < n && is_digit(t[i]); i++)
			digits++;
	if (digits == 0)
		return false;
	if (i < n && (t[i] == 'e' || t[i] == 'E')) {
		i++;
		if (i < n && (t[i] == '+' || t[i] == '-'))
			i++;
		size_t e = 0;
		for (; i < n && is_digit(t[i]); i++)
			e++;
		if (e == 0)
			return false;
	}
	return i == n;
}

bool ing_decfloat(const char *t, size_t n, double *out)
{
	size_t i = 0;
	bool neg = n > 0 && t[0] == '-';
	uint64_t m = 0;
	int ndig = 0, exp10 = 0;
	bool frac = false;
	if (neg)
		i++;
	for (; i < n && ((t[i] >= '0' && t[i] <= '9') || t[i] == '.'); i++) {
		if (t[i] == '.') {
			frac = true;
			continue;
		}
		if (ndig == 19)
			return false;
		m = m * 10 + (uint64_t)(t[i] - '0');
		ndig += m != 0; /* leading zeros are not significant */
		exp10 -= frac;
	}
	if (i < n) { /* exponent */
		i++;
		bool eneg = i < n && t[i] == '-';
		if (i < n && (t[i] == '-' || t[i] == '+'))
			i++;
		int e = 0;
		for (; i < n; i++) {
			if (e > 100000)
				return false;
			e = e * 10 + (t[i] - '0');
		}
		exp10 += eneg ? -e : e;
	}
	double d;
	if (exp10 >= -22 && exp10 <= 22 && m == 0) {
		d = 0.0; /* other zeros go to strtod, which bounds the literal's length */
#if FLT_EVAL_METHOD == 0
	} else if (m <= (UINT64_C(1) << 53) && exp10 >= -22 && exp10 <= 22) {
		static const double p10[] = {1e0,  1e1,	 1e2,  1e3,  1e4,  1e5,	 1e6,  1e7,
					     1e8,  1e9,	 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
					     1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
		d = (double)m;
		d = exp10 < 0 ? d / p10[-exp10] : d * p10[exp10];
#endif
	} else if (m == 0) {
		return false;
	} else if (exp10 >= 0 && exp10 <= 27) {
		d = round_scaled((u128)m * pow5[exp10], false, exp10);
	} else if (exp10 < 0 && exp10 >= -27) {
		int k = -exp10, z = __builtin_clzll(m);
		u128 num = (u128)(m << z) << 64;
		u128 q = num / pow5[k];
		bool sticky = num - q * pow5[k] != 0;
		d = round_scaled(q, sticky, -64 - z - k);
	} else {
		return false;
	}
	*out = neg ? -d : d;
	return true;
}
