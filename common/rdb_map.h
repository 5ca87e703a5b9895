/* rdb_map.h - open-addressing hash map from a non-zero uint64_t key to a
 * pointer. Linear probing, power-of-two capacity, load factor <= 1/2,
 * backward-shift deletion (no tombstones). Single owner: callers lock. */
#ifndef RDB_MAP_H
#define RDB_MAP_H

#include <stddef.h>
#include <stdint.h>

struct rdb_map {
	uint64_t *keys; /* 0 = empty slot */
	void **vals;
	size_t cap; /* power of two, or 0 */
	size_t n;
};

#define RDB_MAP_INIT                                                                               \
	{                                                                                          \
		NULL, NULL, 0, 0                                                                   \
	}

/* Returns the value for key (non-zero), or NULL. */
void *rdb_map_get(const struct rdb_map *m, uint64_t key);
/* Asks the CPU for the lines rdb_map_get(m, key) reads first (its home
 * slot's key and value), without waiting: a caller about to look up many
 * keys of a large map prefetches them all first, so the cache misses
 * overlap instead of queueing. Pure (no effect on the map). */
void rdb_map_prefetch(const struct rdb_map *m, uint64_t key);
/* Inserts or replaces. 0 or -ENOMEM (map unchanged). key must be non-zero. */
int rdb_map_put(struct rdb_map *m, uint64_t key, void *val);
/* Removes key; returns its value or NULL. */
void *rdb_map_del(struct rdb_map *m, uint64_t key);
/* Frees the table (not the values). NULL ok. */
void rdb_map_free(struct rdb_map *m);
/* Iteration: for (size_t i = 0; i < m->cap; i++) if (m->keys[i]) ... */

#endif
