/* test_tcache.c - unit tests for common/rdb_tcache.c: a thread takes back
 * what it gave, newest first; a stack holds at most max_n objects (give
 * says false past it and the caller keeps the object); threads do not see
 * each other's objects; a thread's kept objects are freed when it exits
 * (free_fn is called for each: counted here, and ASan's leak check); with
 * a byte bound a stack also holds at most max_bytes, and a take frees the
 * room of what it takes. */
#include "common/rdb_tcache.h"
#include "tests/unit/check.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

static _Atomic int freed;

static void count_free(void *p)
{
	atomic_fetch_add(&freed, 1);
	free(p);
}

static struct rdb_tcache cache = RDB_TCACHE_INIT(3, count_free);

static void test_take_give(void)
{
	CHECK(rdb_tcache_take(&cache) == NULL);
	CHECK(!rdb_tcache_give(&cache, NULL));
	void *a = malloc(8), *b = malloc(8), *c = malloc(8), *d = malloc(8);
	CHECK(rdb_tcache_give(&cache, a));
	CHECK(rdb_tcache_give(&cache, b));
	CHECK(rdb_tcache_give(&cache, c));
	CHECK(!rdb_tcache_give(&cache, d)); /* full: still ours */
	free(d);
	CHECK(rdb_tcache_take(&cache) == c);
	CHECK(rdb_tcache_take(&cache) == b);
	CHECK(rdb_tcache_give(&cache, c));
	CHECK(rdb_tcache_take(&cache) == c);
	CHECK(rdb_tcache_take(&cache) == a);
	CHECK(rdb_tcache_take(&cache) == NULL);
	free(a);
	free(b);
	free(c);
	CHECK_EQ_INT(atomic_load(&freed), 0);
}

static struct rdb_tcache sized = RDB_TCACHE_INIT_BYTES(4, 100, count_free);

static void test_byte_bound(void)
{
	void *a = malloc(8), *b = malloc(8), *c = malloc(8), *d = malloc(8);
	CHECK(!rdb_tcache_give_bytes(&sized, a, 101)); /* alone over the bound */
	CHECK(rdb_tcache_give_bytes(&sized, a, 60));
	CHECK(!rdb_tcache_give_bytes(&sized, b, 41)); /* 101 together: still ours */
	CHECK(rdb_tcache_give_bytes(&sized, b, 40));  /* exactly 100 */
	CHECK(!rdb_tcache_give_bytes(&sized, c, 1));
	CHECK(rdb_tcache_give(&sized, c)); /* 0 bytes: the count bound only */
	CHECK(rdb_tcache_take(&sized) == c);
	CHECK(rdb_tcache_take(&sized) == b); /* 60 kept: 40 of room again */
	CHECK(!rdb_tcache_give_bytes(&sized, d, 41));
	CHECK(rdb_tcache_give_bytes(&sized, d, 40));
	CHECK(rdb_tcache_take(&sized) == d);
	CHECK(rdb_tcache_take(&sized) == a);
	CHECK(rdb_tcache_take(&sized) == NULL);
	/* the count bound still holds under the byte bound */
	void *e = malloc(8);
	void *all[] = {a, b, c, d};
	for (int i = 0; i < 4; i++)
		CHECK(rdb_tcache_give_bytes(&sized, all[i], 1));
	CHECK(!rdb_tcache_give_bytes(&sized, e, 1));
	for (int i = 3; i >= 0; i--)
		CHECK(rdb_tcache_take(&sized) == all[i]);
	free(a);
	free(b);
	free(c);
	free(d);
	free(e);
	CHECK_EQ_INT(atomic_load(&freed), 0);
}

static void *other_thread(void *arg)
{
	void *mine = arg;
	/* the main thread's objects are not this thread's */
	CHECK(rdb_tcache_take(&cache) == NULL);
	CHECK(rdb_tcache_give(&cache, mine));
	CHECK(rdb_tcache_give(&cache, malloc(16)));
	return NULL; /* both freed by the key's destructor */
}

static void test_threads(void)
{
	void *kept = malloc(8);
	CHECK(rdb_tcache_give(&cache, kept));
	pthread_t t;
	CHECK_EQ_INT(pthread_create(&t, NULL, other_thread, malloc(32)), 0);
	pthread_join(t, NULL);
	CHECK_EQ_INT(atomic_load(&freed), 2);
	CHECK(rdb_tcache_take(&cache) == kept);
	free(kept);
}

int main(void)
{
	RUN(test_take_give);
	RUN(test_byte_bound);
	RUN(test_threads);
	return check_summary("tcache");
}
