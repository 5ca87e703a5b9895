/* rdb_tcache.c - per-thread stacks of freed objects (rdb_tcache.h).
 *
 * Each thread's stack is one allocation (header + max_n slots) held in a
 * pthread key whose destructor frees the objects and the stack at thread
 * exit. Failure: no key or no memory for a stack means nothing is cached
 * (give returns false), never an error for the caller.
 */
#include "common/rdb_tcache.h"

#include <stdlib.h>

struct stack {
	struct rdb_tcache *c;
	size_t n;
	void *obj[];
};

static void stack_destroy(void *arg)
{
	struct stack *st = arg;
	for (size_t i = 0; i < st->n; i++)
		st->c->free_fn(st->obj[i]);
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
	return st && st->n ? st->obj[--st->n] : NULL;
}

bool rdb_tcache_give(struct rdb_tcache *c, void *obj)
{
	if (!obj || c->max_n == 0 || !key_ready(c))
		return false;
	struct stack *st = pthread_getspecific(c->key);
	if (!st) {
		st = malloc(sizeof(*st) + c->max_n * sizeof(st->obj[0]));
		if (!st)
			return false;
		st->c = c;
		st->n = 0;
		if (pthread_setspecific(c->key, st) != 0) {
			free(st);
			return false;
		}
	}
	if (st->n == c->max_n)
		return false;
	st->obj[st->n++] = obj;
	return true;
}
