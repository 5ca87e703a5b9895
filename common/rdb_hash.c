/* rdb_hash.c - the only file that includes xxhash.h. */
#include "common/rdb_hash.h"

#include <errno.h>
/* XXH_INLINE_ALL: xxHash compiled into this file, so the XXH3_state_t on
 * the stack (rdb_hash64_2) has the layout the code using it was built
 * with; its layout is not part of libxxhash's ABI, and a state declared
 * against one version of xxhash.h but passed to another shared library
 * would be written past its end. The hashes are the same either way. */
#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t rdb_hash64(const void *buf, size_t len, uint64_t seed)
{
	return XXH3_64bits_withSeed(buf, len, seed);
}

uint64_t rdb_hash64_2(const void *a, size_t alen, const void *b, size_t blen, uint64_t seed)
{
	XXH3_state_t st;
	XXH3_INITSTATE(&st);
	XXH3_64bits_reset_withSeed(&st, seed);
	if (alen)
		XXH3_64bits_update(&st, a, alen);
	if (blen)
		XXH3_64bits_update(&st, b, blen);
	return XXH3_64bits_digest(&st);
}

int rdb_hash_begin(struct rdb_hash_state *st, uint64_t seed)
{
	XXH3_state_t *s = XXH3_createState();
	if (!s)
		return -ENOMEM;
	XXH3_64bits_reset_withSeed(s, seed);
	st->xxh = s;
	return 0;
}

void rdb_hash_update(struct rdb_hash_state *st, const void *buf, size_t len)
{
	XXH3_64bits_update(st->xxh, buf, len);
}

uint64_t rdb_hash_end(struct rdb_hash_state *st)
{
	uint64_t h = XXH3_64bits_digest(st->xxh);
	XXH3_freeState(st->xxh);
	st->xxh = NULL;
	return h;
}
