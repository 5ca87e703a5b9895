/* rdb_tcache.c - per-thread stacks of freed objects (rdb_tcache.h).
 *
 * Each thread's stack is one allocation (header + max_n slots, each an
 * object and the bytes it was given as) held in a pthread key whose
 * destructor frees the objects and the stack at thread exit. The stack's
 * bytes are the sum of its slots', so a take returns an object's bytes.
 * Failure: no key or no memory for a stack means nothing is cached (give
 * returns false), never an error for the caller.
 */
#include "common/rdb_tcache.h"

#include <stdlib.h>

struct slot {
	void *obj;
	size_t bytes;
};

struct stack {
	struct rdb_tcache *c;
	size_t n, bytes;
	struct slot slot[];
};

static void stack_destroy(void *arg)
{
	struct stack *st = arg;
	for (size_t i = 0; i < st->n; i++)
		st->c->free_fn(st->slot[i].obj);
	free(st);
}

static bool key_ready(struct rdb_tcache *c)
{
	int s = atomic_load_explicit(&c->state, memory_order_acquire);
	if (s)
		return s > 0;
	pthread_mutex_lock(&c->mu);
	s = atomic_load(&c->state);
	if (s == 0) {
		s = pthread_key_create(&c->key, stack_destroy) == 0 ? 1 : -1;
		atomic_store_explicit(&c->state, s, memory_order_release);
	}
	pthread_mutex_unlock(&c->mu);
	return s > 0;
}

void *rdb_tcache_take(struct rdb_tcache *c)
{
	if (!key_ready(c))
		return NULL;
	struct stack *st = pthread_getspecific(c->key);
	if (!st || st->n == 0)
		return NULL;
	struct slot *s = &st->slot[--st->n];
	st->bytes -= s->bytes;
	return s->obj;
}

bool rdb_tcache_give_bytes(struct rdb_tcache *c, void *obj, size_t bytes)
{
	if (!obj || c->max_n == 0 || (c->max_bytes && bytes > c->max_bytes) || !key_ready(c))
		return false;
	struct stack *st = pthread_getspecific(c->key);
	if (!st) {
		st = malloc(sizeof(*st) + c->max_n * sizeof(st->slot[0]));
		if (!st)
			return false;
		st->c = c;
		st->n = 0;
		st->bytes = 0;
		if (pthread_setspecific(c->key, st) != 0) {
			free(st);
			return false;
		}
	}
	if (st->n == c->max_n || (c->max_bytes && bytes > c->max_bytes - st->bytes))
		return false;
	st->slot[st->n++] = (struct slot){obj, bytes};
	st->bytes += bytes;
	return true;
}

bool rdb_tcache_give(struct rdb_tcache *c, void *obj)
{
	return rdb_tcache_give_bytes(c, obj, 0);
}
