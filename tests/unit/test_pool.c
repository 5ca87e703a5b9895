/* test_pool.c - the query helper threads (query/pool.h): every task runs
 * exactly once whatever the number of tasks (more than the queue holds)
 * and of callers at once; no more tasks run at the same time than there
 * are helpers plus callers (the pool is bounded and never grows); a call
 * returns only when all of its tasks are done; without a second task
 * nothing is queued. No timing: tasks yield to let others interleave. */
#include "check.h"
#include "query/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_int running, max_running;

struct job {
	atomic_int runs;
	atomic_int *done_before_return; /* counts runs, read by the caller after the call */
	pthread_t ran_on;
};

static void task_fn(void *arg)
{
	struct job *j = arg;
	int now = atomic_fetch_add(&running, 1) + 1;
	int m = atomic_load(&max_running);
	while (now > m && !atomic_compare_exchange_weak(&max_running, &m, now))
		;
	for (int i = 0; i < 20; i++)
		sched_yield();
	j->ran_on = pthread_self();
	atomic_fetch_add(&j->runs, 1);
	atomic_fetch_add(j->done_before_return, 1);
	atomic_fetch_sub(&running, 1);
}

/* Runs n tasks in one call; checks each ran once, all before the return. */
static void run_batch(size_t n)
{
	struct job *jobs = calloc(n, sizeof(*jobs));
	struct qry_task *t = calloc(n, sizeof(*t));
	atomic_int done = 0;
	for (size_t i = 0; i < n; i++) {
		jobs[i].done_before_return = &done;
		t[i] = (struct qry_task){.fn = task_fn, .arg = &jobs[i]};
	}
	qry_pool_run(t, n);
	CHECK_EQ_INT(atomic_load(&done), n);
	size_t once = 0;
	for (size_t i = 0; i < n; i++)
		once += atomic_load(&jobs[i].runs) == 1;
	CHECK_EQ_INT(once, n);
	if (n)
		CHECK(pthread_equal(jobs[0].ran_on, pthread_self())); /* task 0: the caller */
	free(jobs);
	free(t);
}

static void test_threads_bounded(void)
{
	unsigned n = qry_pool_threads();
	CHECK(n >= 1 && n <= QRY_POOL_MAX_THREADS);
	CHECK_EQ_INT(qry_pool_threads(), n); /* started once */
}

static void test_one_caller(void)
{
	static const size_t sizes[] = {
	    0, 1, 2, 3, 8, QRY_POOL_QUEUE, QRY_POOL_QUEUE + 1, 3 * QRY_POOL_QUEUE + 5};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		run_batch(sizes[i]);
}

/* A single task is never queued: it runs on the caller. */
static void test_single_task_inline(void)
{
	atomic_int done = 0;
	struct job j = {.done_before_return = &done};
	struct qry_task t = {.fn = task_fn, .arg = &j};
	qry_pool_run(&t, 1);
	CHECK(pthread_equal(j.ran_on, pthread_self()));
	CHECK(!t.queued);
}

#define CALLERS 6

static void *caller(void *arg)
{
	(void)arg;
	for (int r = 0; r < 30; r++)
		run_batch(1 + (size_t)r % 12);
	return NULL;
}

/* Many callers at once: each gets every task of its own run once, and at
 * most helpers + callers tasks ever run at the same time. */
static void test_many_callers(void)
{
	pthread_t th[CALLERS];
	atomic_store(&max_running, 0);
	for (int i = 0; i < CALLERS; i++)
		CHECK_EQ_INT(pthread_create(&th[i], NULL, caller, NULL), 0);
	for (int i = 0; i < CALLERS; i++)
		pthread_join(th[i], NULL);
	int most = atomic_load(&max_running);
	fprintf(stderr, "  at most %d tasks at once (%u helpers, %d callers)\n", most,
		qry_pool_threads(), CALLERS);
	CHECK(most >= 1 && most <= (int)qry_pool_threads() + CALLERS);
	CHECK_EQ_INT(atomic_load(&running), 0);
}

int main(void)
{
	RUN(test_threads_bounded);
	RUN(test_one_caller);
	RUN(test_single_task_inline);
	RUN(test_many_callers);
	return check_summary("pool");
}
