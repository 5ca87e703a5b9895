/* rdb_ptab.h - open-addressing table of (hash, pointer) pairs for caches
 * keyed by something longer than 64 bits: the caller hashes its key, the
 * table finds the pointers stored under that hash, and the caller compares
 * the full keys. Several pointers may share a hash (each has its own slot).
 * A slot holds the hash next to the pointer, so a lookup touches one slot
 * line and then only the objects whose hash matches, where a chained map
 * touches a key array, a value array and every object of the chain.
 *
 * Linear probing, power-of-two capacity, load factor <= 1/2, backward-shift
 * deletion (no tombstones). Bounded by its caller: rdb_ptab_put refuses
 * (RDB_ELIMIT) past the max_n given to rdb_ptab_init. Single owner: callers
 * lock. Memory: 16 bytes a slot; after growth 2-4 slots per entry. The
 * table never shrinks: deleting entries leaves the slots of its largest
 * size (a job of 131,072 series deleted keeps >= 262,144 slots, 4 MiB).
 */
#ifndef RDB_PTAB_H
#define RDB_PTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rdb_ptab_slot {
	uint64_t hash;
	void *val; /* NULL: empty slot */
};

struct rdb_ptab {
	struct rdb_ptab_slot *slots; /* [mask + 1], or NULL while empty */
	size_t mask;		     /* capacity - 1 */
	size_t n;		     /* entries */
	size_t max_n;		     /* entries allowed (rdb_ptab_init) */
};

/* An empty table holding at most max_n entries (allocates nothing). */
void rdb_ptab_init(struct rdb_ptab *t, size_t max_n);

/* Lookup: for (size_t i = rdb_ptab_home(t, h); i != RDB_PTAB_END; i = rdb_ptab_next(t, h, i))
 *             compare t->slots[i].val's key with yours
 * visits exactly the slots whose hash is h (in probe order), then stops.
 * Pure; the table must not change during the walk. */
#define RDB_PTAB_END SIZE_MAX

/* The probe start of hash h: any well-spread 64-bit hash (the table
 * multiplies it again, so low-entropy low bits are fine). */
static inline size_t rdb_ptab_slot_of(const struct rdb_ptab *t, uint64_t h)
{
	return (size_t)((h * UINT64_C(0x9e3779b97f4a7c15)) >> 32) & t->mask;
}

/* The first slot at or after probe position i holding hash h, or
 * RDB_PTAB_END at the first empty slot. */
static inline size_t rdb_ptab_scan(const struct rdb_ptab *t, uint64_t h, size_t i)
{
	for (;; i = (i + 1) & t->mask) {
		const struct rdb_ptab_slot *s = &t->slots[i];
		if (!s->val)
			return RDB_PTAB_END;
		if (s->hash == h)
			return i;
	}
}

static inline size_t rdb_ptab_home(const struct rdb_ptab *t, uint64_t h)
{
	return t->slots ? rdb_ptab_scan(t, h, rdb_ptab_slot_of(t, h)) : RDB_PTAB_END;
}

static inline size_t rdb_ptab_next(const struct rdb_ptab *t, uint64_t h, size_t i)
{
	return rdb_ptab_scan(t, h, (i + 1) & t->mask);
}

/* Asks the CPU for h's home slot without waiting (see rdb_map_prefetch):
 * prefetch the slots of a batch of lookups first, then walk them. */
static inline void rdb_ptab_prefetch(const struct rdb_ptab *t, uint64_t h)
{
	if (t->slots)
		__builtin_prefetch(&t->slots[rdb_ptab_slot_of(t, h)]);
}

/* Adds val (not NULL) under h; entries already under h stay (the caller
 * checked its key is not there). 0, -ENOMEM or RDB_ELIMIT (max_n entries
 * already): the table unchanged. */
int rdb_ptab_put(struct rdb_ptab *t, uint64_t h, void *val);
/* Removes the entry (h, val); returns whether it was there. */
bool rdb_ptab_del(struct rdb_ptab *t, uint64_t h, const void *val);
/* Frees the slots (not the values); the table is empty, max_n kept.
 * NULL ok. Iteration over every entry: for (i = 0; t->slots && i <= t->mask;
 * i++) if (t->slots[i].val) ... */
void rdb_ptab_free(struct rdb_ptab *t);

#endif
