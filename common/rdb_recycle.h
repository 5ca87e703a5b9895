/* rdb_recycle.h - objects that one thread frees handed back to the threads
 * that allocate them, instead of a free on the one thread and a malloc on
 * the other (glibc's per-thread caches do not help a free on another thread,
 * which takes the allocating arena's lock).
 *
 * A pool is a static struct rdb_recycle: RDB_RECYCLE_INIT(max_shared,
 * max_n, max_bytes, free_fn). rdb_recycle_put (any thread) pushes an object
 * on a shared lock-free stack of at most max_shared objects; rdb_recycle_get
 * (any thread) takes from the calling thread's own stack (an rdb_tcache of
 * at most max_n objects and max_bytes), and when that is empty moves the
 * whole shared stack to it and takes one of those. What does not fit is
 * freed with free_fn. So at most max_shared + threads * max_n objects are
 * kept.
 *
 * While an object is kept its first RDB_RECYCLE_HDR bytes are the pool's
 * (a link and the object's byte count): an object must be at least that
 * large, and its owner must not rely on those bytes across a put/get. */
#ifndef RDB_RECYCLE_H
#define RDB_RECYCLE_H

#include "common/rdb_tcache.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#define RDB_RECYCLE_HDR (2 * sizeof(void *))

struct rdb_recycle {
	struct rdb_tcache tc; /* each getter's own stack; tc.free_fn frees */
	size_t max_shared;    /* objects on the shared stack */
	_Atomic(void *) top;  /* the shared stack (linked through each object) */
	_Atomic size_t n;     /* objects on it (a bound, not exact while moving) */
};
#define RDB_RECYCLE_INIT(max_shared, max_n, max_bytes, free_fn)                                    \
	{                                                                                          \
		RDB_TCACHE_INIT_BYTES(max_n, max_bytes, free_fn), (max_shared), NULL, 0            \
	}

/* Keeps obj (bytes long as the caller counts it, >= RDB_RECYCLE_HDR) for a
 * later rdb_recycle_get on any thread: true. False when the shared stack
 * is full or obj is NULL or too small: the caller still owns obj. Lock-free. */
bool rdb_recycle_put(struct rdb_recycle *r, void *obj, size_t bytes);

/* An object some thread put, or NULL. *bytes (may be NULL) is what it was
 * put as. The caller owns it; all but its first RDB_RECYCLE_HDR bytes are
 * as they were put. Does not block (the first call per pool takes a mutex
 * once). */
void *rdb_recycle_get(struct rdb_recycle *r, size_t *bytes);

#endif
