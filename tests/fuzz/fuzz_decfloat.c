/* fuzz_decfloat.c - libFuzzer target for ing_decfloat (ingest/decfloat.c).
 *
 * The input, when it is a float literal of the line-protocol grammar
 * (['-'] digits ['.' digits] [('e'|'E') ['+'|'-'] digits], at least one
 * mantissa digit, at most 64 bytes), is converted by ing_decfloat and by
 * strtod; if ing_decfloat takes it, the two doubles must be identical bit
 * for bit, or the target aborts. Other inputs are ignored. Also builds as
 * a replay program (fuzz_main.c) run over corpus/decfloat.
 */
#include "ingest/decfloat.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool literal(const char *t, size_t n)
{
	size_t i = 0, digits = 0;
	if (i < n && t[i] == '-')
		i++;
	for (; i < n && digit(t[i]); i++)
		digits++;
	if (i < n && t[i] == '.')
		for (i++; i < n && digit(t[i]); i++)
			digits++;
	if (digits == 0)
		return false;
	if (i < n && (t[i] == 'e' || t[i] == 'E')) {
		i++;
		if (i < n && (t[i] == '+' || t[i] == '-'))
			i++;
		size_t e = 0;
		for (; i < n && digit(t[i]); i++)
			e++;
		if (e == 0)
			return false;
	}
	return i == n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char lit[65];
	if (size == 0 || size >= sizeof(lit))
		return 0;
	memcpy(lit, data, size);
	lit[size] = 0;
	if (!literal(lit, size))
		return 0;
	double fast;
	if (!ing_decfloat(lit, size, &fast))
		return 0;
	double ref = strtod(lit, NULL);
	if (memcmp(&fast, &ref, sizeof(fast)) != 0)
		abort();
	return 0;
}
