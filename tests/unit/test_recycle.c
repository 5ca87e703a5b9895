/* test_recycle.c - unit tests for common/rdb_recycle.c: an object put on
 * one thread is got back on another, with the bytes it was put as and the
 * rest of its contents intact; the shared stack holds at most max_shared
 * objects (put says false past it, the caller keeps the object); a get
 * moves the whole shared stack to the getter's own stack and what does
 * not fit there is freed (counted here, and ASan's leak check); objects
 * too small for the pool's header are refused; many threads putting while
 * others get lose and duplicate nothing. */
#include "common/rdb_recycle.h"
#include "tests/unit/check.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic int freed;

static void count_free(void *p)
{
	atomic_fetch_add(&freed, 1);
	free(p);
}

struct obj {
	char hdr[RDB_RECYCLE_HDR];
	int tag;
};

static struct obj *obj_new(int tag)
{
	struct obj *o = calloc(1, sizeof(*o));
	o->tag = tag;
	return o;
}

/* shared stack of 3, own stacks of 2 */
static struct rdb_recycle pool = RDB_RECYCLE_INIT(3, 2, 0, count_free);

/* failures on other threads, checked by the main one (CHECK's counters
 * are not atomic) */
static _Atomic int thread_fails;

static void *putter(void *arg)
{
	struct obj **objs = arg;
	for (int i = 0; i < 3; i++)
		if (!rdb_recycle_put(&pool, objs[i], sizeof(struct obj) + (size_t)i))
			atomic_fetch_add(&thread_fails, 1);
	return NULL;
}

static void test_put_get_across_threads(void)
{
	size_t bytes = 99;
	CHECK(rdb_recycle_get(&pool, &bytes) == NULL);
	CHECK(bytes == 0);
	CHECK(!rdb_recycle_put(&pool, NULL, 64));
	struct obj *small = obj_new(0);
	CHECK(!rdb_recycle_put(&pool, small, RDB_RECYCLE_HDR - 1)); /* too small: ours */
	free(small);

	struct obj *objs[3] = {obj_new(1), obj_new(2), obj_new(3)};
	pthread_t t;
	CHECK(pthread_create(&t, NULL, putter, objs) == 0);
	pthread_join(t, NULL);
	CHECK_EQ_INT(atomic_load(&thread_fails), 0);
	struct obj *extra = obj_new(4);
	CHECK(!rdb_recycle_put(&pool, extra, sizeof(*extra))); /* shared stack full */
	free(extra);

	/* the first get takes all three: one returned, two kept as ours */
	int seen = 0;
	for (int i = 0; i < 3; i++) {
		struct obj *o = rdb_recycle_get(&pool, &bytes);
		CHECK(o != NULL);
		if (!o)
			break;
		CHECK(o->tag >= 1 && o->tag <= 3);
		CHECK_EQ_INT((int)bytes, (int)sizeof(struct obj) + o->tag - 1);
		seen |= 1 << o->tag;
		free(o);
	}
	CHECK_EQ_INT(seen, 2 | 4 | 8);
	CHECK(rdb_recycle_get(&pool, NULL) == NULL);
	CHECK_EQ_INT(atomic_load(&freed), 0);
}

/* shared stack of 4, own stacks of 2: a move of 4 keeps 2, frees 1 */
static struct rdb_recycle narrow = RDB_RECYCLE_INIT(4, 2, 0, count_free);

static void test_own_stack_overflow_frees(void)
{
	atomic_store(&freed, 0);
	for (int i = 0; i < 4; i++)
		CHECK(rdb_recycle_put(&narrow, obj_new(i), sizeof(struct obj)));
	struct obj *o = rdb_recycle_get(&narrow, NULL);
	CHECK(o != NULL);
	free(o);
	CHECK_EQ_INT(atomic_load(&freed), 1);
	/* the shared stack has room again; ours is got first */
	CHECK(rdb_recycle_put(&narrow, obj_new(7), sizeof(struct obj)));
	for (int i = 0; i < 3; i++) {
		o = rdb_recycle_get(&narrow, NULL);
		CHECK(o != NULL);
		if (i == 2)
			CHECK(o && o->tag == 7);
		free(o);
	}
	CHECK(rdb_recycle_get(&narrow, NULL) == NULL);
	CHECK_EQ_INT(atomic_load(&freed), 1);
}

/* many threads: each round a thread gets an object (or makes one), tags it
 * as its own, checks nobody else holds it, and puts it back */
#define THREADS 4
#define ROUNDS	20000
static struct rdb_recycle busy = RDB_RECYCLE_INIT(8, 4, 0, count_free);
static _Atomic int made, dropped;

static void *churn(void *arg)
{
	int me = (int)(size_t)arg;
	for (int r = 0; r < ROUNDS; r++) {
		struct obj *o = rdb_recycle_get(&busy, NULL);
		if (!o) {
			o = obj_new(0);
			atomic_fetch_add(&made, 1);
		}
		_Atomic int *tag = (_Atomic int *)(void *)&o->tag;
		if (atomic_exchange(tag, me + 1) != 0) /* somebody else holds it */
			atomic_fetch_add(&thread_fails, 1);
		atomic_store(tag, 0);
		if (!rdb_recycle_put(&busy, o, sizeof(*o))) {
			atomic_fetch_add(&dropped, 1);
			free(o);
		}
	}
	return NULL; /* what this thread keeps is freed by the key's destructor */
}

static void test_threads(void)
{
	atomic_store(&freed, 0);
	pthread_t t[THREADS];
	for (size_t i = 0; i < THREADS; i++)
		CHECK(pthread_create(&t[i], NULL, churn, (void *)i) == 0);
	for (size_t i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	CHECK_EQ_INT(atomic_load(&thread_fails), 0);
	/* every object made is accounted for: dropped, freed at a thread's exit
	 * or by a move that did not fit, or still on the shared stack */
	int left = 0;
	for (struct obj *o; (o = rdb_recycle_get(&busy, NULL)) != NULL; left++)
		free(o);
	CHECK_EQ_INT(atomic_load(&made), atomic_load(&dropped) + atomic_load(&freed) + left);
	CHECK(left <= 8);
}

int main(void)
{
	RUN(test_put_get_across_threads);
	RUN(test_own_stack_overflow_frees);
	RUN(test_threads);
	return check_summary("recycle");
}
