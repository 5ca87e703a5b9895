/* rdb_tcache.h - a per-thread stack of freed objects of one kind, handed
 * back to the next request on the same thread instead of a malloc/free
 * pair per request.
 *
 * A cache is a static struct rdb_tcache with its bounds and the function
 * that frees an object: RDB_TCACHE_INIT(max_n, free_fn), or
 * RDB_TCACHE_INIT_BYTES(max_n, max_bytes, free_fn) for objects whose size
 * varies (grown scratch buffers). Each thread that gives gets its own
 * stack of at most max_n objects, and with a byte bound at most max_bytes
 * together as the giver counts them (rdb_tcache_give_bytes); what a
 * thread keeps is freed with free_fn when the thread exits. Thread-safe: a
 * thread only touches its own stack. */
#ifndef RDB_TCACHE_H
#define RDB_TCACHE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct rdb_tcache {
	size_t max_n;		    /* objects kept per thread */
	size_t max_bytes;	    /* their bytes per thread together; 0: max_n only */
	void (*free_fn)(void *obj); /* frees one object; also at thread exit */
	/* set up on first use */
	pthread_mutex_t mu;
	_Atomic int state; /* 0 no key yet, 1 key, -1 no key possible: never cache */
	pthread_key_t key;
};
#define RDB_TCACHE_INIT_BYTES(max_n, max_bytes, free_fn)                                           \
	{                                                                                          \
		(max_n), (max_bytes), (free_fn), PTHREAD_MUTEX_INITIALIZER, 0, 0                   \
	}
#define RDB_TCACHE_INIT(max_n, free_fn) RDB_TCACHE_INIT_BYTES(max_n, 0, free_fn)

/* An object the calling thread gave before, or NULL (none kept). The
 * caller owns it and resets what it needs. Does not block (but the first
 * call of a process takes a mutex once). */
void *rdb_tcache_take(struct rdb_tcache *c);

/* Keeps obj for the calling thread's next take: true. False when the
 * thread's stack is full or cannot be made: the caller still owns obj (and
 * frees it). Counts obj as 0 bytes. */
bool rdb_tcache_give(struct rdb_tcache *c, void *obj);

/* rdb_tcache_give for an object the caller counts as bytes (its grown
 * memory, say): also false when the thread's kept objects and this one
 * would pass c->max_bytes (when set). A take gives the bytes back. */
bool rdb_tcache_give_bytes(struct rdb_tcache *c, void *obj, size_t bytes);

#endif
