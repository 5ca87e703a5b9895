/* test_hash.c - unit tests for common/rdb_hash.c: rdb_hash64_2 of two
 * pieces equals the streamed hash of the same pieces and rdb_hash64 of
 * their concatenation (the WAL and chunk checksums on disk must not change
 * with how they are computed), for empty pieces, pieces around XXH3's
 * internal block sizes, and several seeds. */
#include "common/rdb_hash.h"
#include "tests/unit/check.h"

#include <stdint.h>
#include <string.h>

static void test_two_pieces(void)
{
	static uint8_t buf[5000];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 131 + (i >> 7));
	static const size_t lens[] = {0, 1, 8, 16, 17, 128, 129, 240, 241, 255, 256, 1024, 2500};
	const size_t nl = sizeof(lens) / sizeof(lens[0]);
	static const uint64_t seeds[] = {0, 1, 0x9e3779b97f4a7c15ull};
	int bad = 0;
	for (size_t si = 0; si < 3; si++)
		for (size_t i = 0; i < nl; i++)
			for (size_t j = 0; j < nl; j++) {
				size_t a = lens[i], b = lens[j];
				uint64_t seed = seeds[si];
				uint64_t two = rdb_hash64_2(buf, a, buf + a, b, seed);
				struct rdb_hash_state st;
				CHECK_EQ_INT(rdb_hash_begin(&st, seed), 0);
				rdb_hash_update(&st, buf, a);
				rdb_hash_update(&st, buf + a, b);
				uint64_t streamed = rdb_hash_end(&st);
				bad += two != streamed || two != rdb_hash64(buf, a + b, seed);
			}
	CHECK_EQ_INT(bad, 0);
	/* the pieces need not be adjacent */
	uint8_t x[40], y[300];
	memcpy(x, buf, sizeof(x));
	memcpy(y, buf + sizeof(x), sizeof(y));
	CHECK(rdb_hash64_2(x, sizeof(x), y, sizeof(y), 7) == rdb_hash64(buf, 340, 7));
	CHECK(rdb_hash64_2(NULL, 0, NULL, 0, 3) == rdb_hash64(buf, 0, 3));
}

int main(void)
{
	RUN(test_two_pieces);
	return check_summary("hash");
}
