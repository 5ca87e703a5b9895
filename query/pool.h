/* pool.h - the query engine's helper threads: a small process-wide pool
 * that the reads of many series (each.c) hand parts of one query to, so
 * that a query no longer starts and joins a thread of its own per pass.
 *
 * Bounded: at most QRY_POOL_MAX_THREADS helpers (one per online CPU past
 * the first, at least one), started on first use and living for the
 * process; at most QRY_POOL_QUEUE tasks wait for them. A task that finds
 * the queue full, or that no helper has taken when its caller is done with
 * its own work, runs on the calling thread: a query never waits behind
 * another query's parts, and the pool never grows.
 */
#ifndef QRY_POOL_H
#define QRY_POOL_H

#include <stdbool.h>
#include <stddef.h>

#define QRY_POOL_MAX_THREADS 7u
#define QRY_POOL_QUEUE	     64u

/* One piece of work: fn(arg). The other members belong to the pool. */
struct qry_task {
	void (*fn)(void *arg);
	void *arg;
	struct qry_pool_batch *batch; /* while queued or running on a helper */
	bool queued;		      /* in the queue, not yet taken */
};

/* The number of helper threads (starting them on the first call): 0 when
 * none could be started (then every task runs on its caller). Never more
 * than QRY_POOL_MAX_THREADS. Thread-safe. */
unsigned qry_pool_threads(void);

/* Runs every task of tasks[0..n) once and returns when all have run:
 * tasks[1..n) are offered to the helpers, tasks[0] runs on the calling
 * thread, then the calling thread runs those no helper has taken (in
 * order) and waits for the ones taken. tasks must stay valid until the
 * call returns; the tasks' fn run at the same time as each other and must
 * not call qry_pool_run. Never fails; blocks until done. Thread-safe. */
void qry_pool_run(struct qry_task *tasks, size_t n);

#endif
