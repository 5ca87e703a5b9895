/* rdb_recycle.c - objects freed on one thread reused by others
 * (rdb_recycle.h).
 *
 * The shared stack is a Treiber stack that is only ever pushed one object
 * at a time and emptied whole (an exchange with NULL), never popped one at
 * a time: so no ABA problem, and no lock. A getter moves what it emptied
 * into its own rdb_tcache stack. The count n is raised before a push and
 * lowered after a getter has counted what it took, so it never reads lower
 * than what the stack holds: the bound max_shared holds.
 * Failure: none (a full stack or tcache means the object is not kept).
 */
#include "common/rdb_recycle.h"

#include <string.h>

struct link {
	void *next;
	size_t bytes;
};

bool rdb_recycle_put(struct rdb_recycle *r, void *obj, size_t bytes)
{
	if (!obj || bytes < RDB_RECYCLE_HDR)
		return false;
	if (atomic_fetch_add(&r->n, 1) >= r->max_shared) {
		atomic_fetch_sub(&r->n, 1);
		return false;
	}
	struct link l = {.next = atomic_load_explicit(&r->top, memory_order_relaxed),
			 .bytes = bytes};
	do {
		memcpy(obj, &l, sizeof(l));
	} while (!atomic_compare_exchange_weak_explicit(&r->top, &l.next, obj, memory_order_release,
							memory_order_relaxed));
	return true;
}

void *rdb_recycle_get(struct rdb_recycle *r, size_t *bytes)
{
	/* the own stack first; an empty shared stack needs no exchange */
	void *obj = rdb_tcache_take(&r->tc);
	if (!obj && atomic_load_explicit(&r->n, memory_order_relaxed) > 0) {
		void *p = atomic_exchange_explicit(&r->top, NULL, memory_order_acquire);
		size_t taken = 0;
		while (p) {
			struct link l;
			memcpy(&l, p, sizeof(l));
			taken++;
			if (!obj)
				obj = p;
			else if (!rdb_tcache_give_bytes(&r->tc, p, l.bytes))
				r->tc.free_fn(p);
			p = l.next;
		}
		atomic_fetch_sub(&r->n, taken);
	}
	if (bytes) {
		struct link l = {0};
		if (obj)
			memcpy(&l, obj, sizeof(l));
		*bytes = l.bytes;
	}
	return obj;
}
