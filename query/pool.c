/* pool.c - the query engine's helper threads (pool.h).
 *
 * One mutex guards a ring of at most QRY_POOL_QUEUE task pointers and the
 * batches' counters. A caller queues its tasks 1..n-1 (those that do not
 * fit are run by the caller), runs task 0, then takes back every task of
 * its batch still queued (the slot is emptied; helpers skip empty slots)
 * and runs it, and at last waits until the tasks helpers took are done. A
 * helper pops a task, runs it without the lock, then counts it done in
 * its batch and wakes the batch's caller.
 *
 * Waking a sleeping thread takes tens of microseconds, and a query's
 * passes (extent, then read) are a few hundred: a caller polls for its
 * last tasks for WAIT_SPIN_NS before it sleeps. Helpers never poll: on a
 * machine with few cores a polling helper takes the core the client or
 * another query needs (measured: slower, docs/BENCHMARKS.md).
 *
 * Threading: helpers are started once (pthread_once) and never stop; they
 * hold no memory of their own. Failure: a helper that cannot be started
 * leaves fewer helpers (none: every task runs on its caller).
 */
#include "query/pool.h"
#include "common/rdb_log.h"
#include "common/rdb_time.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* How long a caller polls for the tasks helpers took before it sleeps:
 * waking a sleeping thread costs tens of microseconds (more in a VM, whose
 * idle vCPU has halted), and a helper that started late is often that
 * close to done. */
#define WAIT_SPIN_NS 50000

/* The tasks of one qry_pool_run call that helpers took. */
struct qry_pool_batch {
	size_t taken;
	atomic_size_t done;
	pthread_cond_t done_cv;
	bool caller_sleeps; /* the caller waits on done_cv (under the mutex) */
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t work_cv;
	struct qry_task *ring[QRY_POOL_QUEUE]; /* NULL: a task its caller took back */
	size_t head, count;		       /* ring[head], count slots after it */
	unsigned threads;
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .work_cv = PTHREAD_COND_INITIALIZER};

static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static struct qry_task *pop_locked(void)
{
	while (pool.count) {
		struct qry_task *t = pool.ring[pool.head];
		pool.head = (pool.head + 1) % QRY_POOL_QUEUE;
		pool.count--;
		if (t)
			return t;
	}
	return NULL;
}

static void *helper(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&pool.mu);
	for (;;) {
		struct qry_task *t = pop_locked();
		if (!t) {
			pthread_cond_wait(&pool.work_cv, &pool.mu);
			continue;
		}
		t->queued = false;
		struct qry_pool_batch *b = t->batch;
		b->taken++;
		pthread_mutex_unlock(&pool.mu);
		t->fn(t->arg);
		pthread_mutex_lock(&pool.mu);
		atomic_fetch_add(&b->done, 1);
		if (b->caller_sleeps && atomic_load(&b->done) == b->taken)
			pthread_cond_signal(&b->done_cv);
	}
	return NULL;
}

static void pool_start(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned want = cpus > 1 ? (unsigned)(cpus - 1) : 1;
	if (want > QRY_POOL_MAX_THREADS)
		want = QRY_POOL_MAX_THREADS;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	for (unsigned i = 0; i < want; i++) {
		pthread_t t;
		if (pthread_create(&t, &attr, helper, NULL) != 0) {
			rdb_log(RDB_LOG_WARN, "query",
				"started %u of %u query helper threads; queries over many "
				"series use fewer cores",
				i, want);
			break;
		}
		pthread_setname_np(t, "rdb-query"); /* as top and perf show it */
		pool.threads++;
	}
	pthread_attr_destroy(&attr);
}

unsigned qry_pool_threads(void)
{
	pthread_once(&pool_once, pool_start);
	return pool.threads;
}

/* Waits until every task of b that helpers took is done: polls a while,
 * then sleeps. Called with the mutex held; returns with it held. */
static void wait_done(struct qry_pool_batch *b)
{
	int64_t until = rdb_now_mono_ns() + WAIT_SPIN_NS;
	pthread_mutex_unlock(&pool.mu);
	for (unsigned i = 1; atomic_load(&b->done) < b->taken; i++) {
		cpu_relax();
		if (i % 64 == 0 && rdb_now_mono_ns() >= until)
			break;
	}
	pthread_mutex_lock(&pool.mu);
	b->caller_sleeps = true;
	while (atomic_load(&b->done) < b->taken)
		pthread_cond_wait(&b->done_cv, &pool.mu);
}

/* Runs the tasks of tasks[1..queued] still queued (their slots emptied),
 * then waits for those helpers took. */
static void take_back_and_wait(struct qry_task *tasks, size_t queued, struct qry_pool_batch *b)
{
	pthread_mutex_lock(&pool.mu);
	for (size_t i = 1; i <= queued; i++) {
		if (!tasks[i].queued)
			continue;
		for (size_t k = 0; k < pool.count; k++)
			if (pool.ring[(pool.head + k) % QRY_POOL_QUEUE] == &tasks[i])
				pool.ring[(pool.head + k) % QRY_POOL_QUEUE] = NULL;
		tasks[i].queued = false;
		pthread_mutex_unlock(&pool.mu);
		tasks[i].fn(tasks[i].arg);
		pthread_mutex_lock(&pool.mu);
	}
	wait_done(b);
	pthread_mutex_unlock(&pool.mu);
}

void qry_pool_run(struct qry_task *tasks, size_t n)
{
	if (n == 0)
		return;
	struct qry_pool_batch b = {.taken = 0};
	atomic_init(&b.done, 0);
	size_t queued = 0;
	bool pooled = n > 1 && qry_pool_threads() > 0;
	if (pooled) {
		pthread_cond_init(&b.done_cv, NULL);
		pthread_mutex_lock(&pool.mu);
		for (size_t i = 1; i < n && pool.count < QRY_POOL_QUEUE; i++) {
			tasks[i].batch = &b;
			tasks[i].queued = true;
			pool.ring[(pool.head + pool.count++) % QRY_POOL_QUEUE] = &tasks[i];
			queued++;
		}
		for (size_t i = 0; i < queued; i++)
			pthread_cond_signal(&pool.work_cv);
		pthread_mutex_unlock(&pool.mu);
	}
	tasks[0].fn(tasks[0].arg);
	/* tasks the queue had no room for, then those no helper took */
	for (size_t i = 1 + queued; i < n; i++)
		tasks[i].fn(tasks[i].arg);
	if (queued)
		take_back_and_wait(tasks, queued, &b);
	if (pooled)
		pthread_cond_destroy(&b.done_cv);
}
