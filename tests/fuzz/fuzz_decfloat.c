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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char lit[65];
	if (size == 0 || size >= sizeof(lit))
		return 0;
	memcpy(lit, data, size);
	lit[size] = 0;
	if (!ing_decfloat_syntax(lit, size))
		return 0;
	double fast;
	if (!ing_decfloat(lit, size, &fast))
		return 0;
	double ref = strtod(lit, NULL);
	if (memcmp(&fast, &ref, sizeof(fast)) != 0)
		abort();
	return 0;
}
