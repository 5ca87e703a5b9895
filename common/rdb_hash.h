/* rdb_hash.h - checksums and hashing (xxHash behind one wrapper). */
#ifndef RDB_HASH_H
#define RDB_HASH_H

#include <stddef.h>
#include <stdint.h>

/* XXH3 64-bit of buf with seed. Used for every on-disk checksum. */
uint64_t rdb_hash64(const void *buf, size_t len, uint64_t seed);

/* Streaming variant for checksums over several pieces. */
struct rdb_hash_state {
	void *xxh; /* XXH3_state_t, owned */
};
int rdb_hash_begin(struct rdb_hash_state *st, uint64_t seed);
void rdb_hash_update(struct rdb_hash_state *st, const void *buf, size_t len);
uint64_t rdb_hash_end(struct rdb_hash_state *st); /* frees the state */

#endif
