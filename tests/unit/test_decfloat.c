/* test_decfloat.c - ing_decfloat (ingest/decfloat.c) against strtod: every
 * literal it converts must give strtod's double bit for bit. Hand-picked
 * hard cases (ties to even in both directions, 1e23, the ends of the
 * handled range, signed zeros), then a deterministic stream of random
 * literals: doubles printed with 1 to 19 significant digits, random digit
 * strings with a random point and exponent, and decimal midpoints between
 * adjacent doubles. It also checks that the fast conversion takes the
 * literals it is there for (17-digit round-trip output), so a regression
 * to strtod everywhere shows as a failure, not as a silent slowdown.
 */
#include "check.h"
#include "rng.h"
#include "ingest/decfloat.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static long mismatches, converted, tried;

/* Compares one literal; returns whether the fast conversion took it. */
static bool same_as_strtod(const char *lit)
{
	double fast = 0, ref = strtod(lit, NULL);
	tried++;
	if (!ing_decfloat(lit, strlen(lit), &fast))
		return false;
	converted++;
	uint64_t a, b;
	memcpy(&a, &fast, 8);
	memcpy(&b, &ref, 8);
	if (a != b) {
		if (mismatches++ < 10)
			fprintf(stderr, "decfloat: '%s' gives %a, strtod %a\n", lit, fast, ref);
		return true;
	}
	return true;
}

static void test_hard_cases(void)
{
	static const char *const lits[] = {"0",
					   "-0",
					   "0.0",
					   "-0.0",
					   "0e5",
					   "-0e-5",
					   "00000.000000",
					   "1",
					   "-1",
					   "0.1",
					   "0.2",
					   "0.3",
					   "1e23",
					   "1e22",
					   "9e22",
					   "1e-22",
					   "1e-23",
					   "1e27",
					   "1e-27",
					   "5e-27",
					   "9999999999999999999e27",
					   "9999999999999999999e-27",
					   "1000000000000000000e-27",
					   "9007199254740992",
					   "9007199254740993",
					   "9007199254740994",
					   "9007199254740995",
					   "9007199254740993.0",
					   "90071992547409930e-1",
					   "18014398509481986",
					   "18014398509481990",
					   "4503599627370496.5",
					   "4503599627370497.5",
					   "4503599627370496.50",
					   "-4503599627370497.5",
					   "11.560216903686523",
					   "2.9999999999999997e-06",
					   "9.691405466583092e-06",
					   "0.34173453246011165",
					   "47943.647608725034",
					   "1.7976931348623157e308",
					   "2.2250738585072014e-308",
					   "4.9e-324",
					   "123456789012345678.9",
					   "1234567890123456789",
					   "12345678901234567890",
					   "0.000000000000000000000000001",
					   "1E+5",
					   "1e+05",
					   "1.5E-3",
					   ".5",
					   "5.",
					   "-.5e1",
					   "0.9999999999999999999",
					   "7.450580596923828125e-9",
					   "3.0517578125e-05"};
	for (size_t i = 0; i < sizeof(lits) / sizeof(lits[0]); i++)
		same_as_strtod(lits[i]);
	CHECK_EQ_INT(mismatches, 0);
	/* the cases the fast path exists for, and its edges */
	double d;
	CHECK(ing_decfloat("11.560216903686523", 18, &d) && d == 11.560216903686523);
	CHECK(ing_decfloat("9999999999999999999e-27", 23, &d));
	CHECK(ing_decfloat("9999999999999999999e27", 22, &d));
	CHECK(!ing_decfloat("9999999999999999999e28", 22, &d));
	CHECK(!ing_decfloat("12345678901234567890", 20, &d));
	CHECK(ing_decfloat("-0", 2, &d) && d == 0 && signbit(d));
	/* ties go to even */
	CHECK(ing_decfloat("9007199254740993", 16, &d) && d == 9007199254740992.0);
	CHECK(ing_decfloat("9007199254740995", 16, &d) && d == 9007199254740996.0);
	CHECK(ing_decfloat("4503599627370496.5", 18, &d) && d == 4503599627370496.0);
	CHECK(ing_decfloat("4503599627370497.5", 18, &d) && d == 4503599627370498.0);
}

static void test_printed_doubles(void)
{
	char lit[64];
	long taken17 = 0, n17 = 0;
	for (int i = 0; i < 300000; i++) {
		/* magnitudes 1e-30 .. 1e30, where training metrics live */
		double v = ldexp((double)(rnd() >> 11), -53) * pow(10.0, (double)(rnd() % 61) - 30);
		if (rnd() & 1)
			v = -v;
		int prec = 1 + (int)(rnd() % 19);
		snprintf(lit, sizeof(lit), (rnd() & 1) ? "%.*g" : "%.*e", prec, v);
		bool took = same_as_strtod(lit);
		if (prec == 17 && fabs(v) >= 1e-9 && fabs(v) < 1e9) {
			n17++;
			taken17 += took;
		}
	}
	CHECK_EQ_INT(mismatches, 0);
	CHECK(n17 > 0 && taken17 == n17); /* round-trip output in that range: all fast */
}

static void test_random_digits(void)
{
	char lit[64];
	for (int i = 0; i < 600000; i++) {
		int ndig = 1 + (int)(rnd() % 20), point = (int)(rnd() % (unsigned)(ndig + 2)) - 1;
		size_t o = 0;
		if (rnd() & 1)
			lit[o++] = '-';
		for (int k = 0; k < ndig; k++) {
			if (k == point)
				lit[o++] = '.';
			/* runs of 0 and 9 reach the rounding boundaries more often */
			unsigned r = (unsigned)(rnd() % 14);
			lit[o++] = (char)('0' + (r >= 10 ? (r & 1 ? 9 : 0) : r));
		}
		if (rnd() % 3)
			o += (size_t)snprintf(lit + o, sizeof(lit) - o, "e%d",
					      (int)(rnd() % 81) - 40);
		lit[o] = 0;
		same_as_strtod(lit);
	}
	CHECK_EQ_INT(mismatches, 0);
}

/* The exact midpoint between a double and its successor, when it has at
 * most 19 significant digits (doubles near integers with a few fractional
 * bits): the ties-to-even rule decides every one. */
static void test_midpoints(void)
{
	char lit[80];
	for (int i = 0; i < 200000; i++) {
		int frac_bits = (int)(rnd() % 8);		  /* value = m / 2^frac_bits */
		uint64_t m = (UINT64_C(1) << 52) | (rnd() >> 12); /* 53 bits */
		/* midpoint = (2m + 1) / 2^(frac_bits + 1): exact decimal */
		uint64_t num = 2 * m + 1;
		int fb = frac_bits + 1;
		uint64_t ip = num >> fb, fr = num & ((UINT64_C(1) << fb) - 1);
		/* fr / 2^fb = fr * 5^fb / 10^fb */
		uint64_t f10 = fr;
		for (int k = 0; k < fb; k++)
			f10 *= 5;
		snprintf(lit, sizeof(lit), "%" PRIu64 ".%0*" PRIu64, ip, fb, f10);
		same_as_strtod(lit);
	}
	CHECK_EQ_INT(mismatches, 0);
}

int main(void)
{
	RUN(test_hard_cases);
	RUN(test_printed_doubles);
	RUN(test_random_digits);
	RUN(test_midpoints);
	fprintf(stderr, "decfloat: %ld of %ld literals converted without strtod\n", converted,
		tried);
	return check_summary("decfloat");
}
