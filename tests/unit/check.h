/* check.h - the unit-test harness: CHECK macros that count and report,
 * and a summary line. Each test program returns non-zero if any check
 * failed; meson test runs each program with a timeout. */
#ifndef RDB_CHECK_H
#define RDB_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int check_failed_count;
static int check_passed_count;

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (cond) {                                                                        \
			check_passed_count++;                                                      \
		} else {                                                                           \
			check_failed_count++;                                                      \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
		}                                                                                  \
	} while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
	do {                                                                                       \
		long long va_ = (long long)(a), vb_ = (long long)(b);                              \
		if (va_ == vb_) {                                                                  \
			check_passed_count++;                                                      \
		} else {                                                                           \
			check_failed_count++;                                                      \
			fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld vs %lld)\n",          \
				__FILE__, __LINE__, #a, #b, va_, vb_);                             \
		}                                                                                  \
	} while (0)

/* Runs a test function and prints its name. */
#define RUN(fn)                                                                                    \
	do {                                                                                       \
		int before_ = check_failed_count;                                                  \
		fn();                                                                              \
		fprintf(stderr, "%s %s\n", check_failed_count == before_ ? "ok  " : "FAIL", #fn);  \
	} while (0)

static inline int check_summary(const char *suite)
{
	fprintf(stderr, "%s: %d checks passed, %d failed\n", suite, check_passed_count,
		check_failed_count);
	return check_failed_count ? 1 : 0;
}

#endif
