/* rdb_hash.h - checksums and hashing (xxHash behind one wrapper). */
#ifndef RDB_HASH_H
#define RDB_HASH_H

#include <stddef.h>
#include <stdint.h>

/* XXH3 64-bit of buf with seed. Used for every on-disk checksum. */
uint64_t rdb_hash64(const void *buf, size_t len, uint64_t seed);

/* rdb_hash64 of the bytes of a followed by those of b (the same value as
 * streaming them), without allocating: one per WAL and chunk record. */
uint64_t rdb_hash64_2(const void *a, size_t alen, const void *b, size_t blen, uint64_t seed);

/* Streaming variant for checksums over several pieces (allocates its
 * state: rdb_hash64_2 for two pieces). */
struct rdb_hash_state {
	void *xxh; /* XXH3_state_t, owned */
};
int rdb_hash_begin(struct rdb_hash_state *st, uint64_t seed);
void rdb_hash_update(struct rdb_hash_state *st, const void *buf, size_t len);
uint64_t rdb_hash_end(struct rdb_hash_state *st); /* frees the state */

#endif
