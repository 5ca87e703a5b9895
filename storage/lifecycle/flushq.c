/* flushq.c - the flusher work queue: every online lifecycle operation
 * (compaction, merge, job delete, retention, checkpoint on demand) is a
 * queued item (struct admin_op: a function and its argument) that the
 * flusher thread runs between its own rounds; the caller blocks until its
 * item is done. Contracts: lifecycle/lifecycle.h.
 *
 * Threading: sti_run_on_flusher from any thread except the flusher;
 * sti_run_admin_ops on the flusher only. The queue is s->ops under
 * flush_lock; an item lives on its caller's stack (no allocation).
 * Failure: -ESHUTDOWN when the flusher is stopped; otherwise the item's
 * own result.
 */
#include "storage/lifecycle/lifecycle.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>

struct admin_op {
	admin_fn fn;
	void *arg;
	int rc;
	bool started, done;
	struct admin_op *next;
};

/* Runs fn(s, arg) on the flusher thread and waits for it. */
int sti_run_on_flusher(struct sto *s, admin_fn fn, void *arg)
{
	struct admin_op op = {.fn = fn, .arg = arg};
	pthread_mutex_lock(&s->flush_lock);
	if (s->stop || !s->flusher_running) {
		pthread_mutex_unlock(&s->flush_lock);
		return -ESHUTDOWN;
	}
	struct admin_op **pp = &s->ops;
	while (*pp)
		pp = &(*pp)->next;
	*pp = &op;
	pthread_cond_signal(&s->flush_cond);
	while (!op.done && !(s->stop && !op.started))
		pthread_cond_wait(&s->ckpt_cond, &s->flush_lock);
	if (!op.done) {
		for (pp = &s->ops; *pp; pp = &(*pp)->next)
			if (*pp == &op) {
				*pp = op.next;
				break;
			}
		op.rc = -ESHUTDOWN;
	}
	pthread_mutex_unlock(&s->flush_lock);
	return op.rc;
}

void sti_run_admin_ops(struct sto *s)
{
	for (;;) {
		pthread_mutex_lock(&s->flush_lock);
		struct admin_op *op = s->ops;
		if (op) {
			s->ops = op->next;
			op->started = true;
		}
		pthread_mutex_unlock(&s->flush_lock);
		if (!op)
			return;
		int rc = op->fn(s, op->arg);
		pthread_mutex_lock(&s->flush_lock);
		op->rc = rc;
		op->done = true;
		pthread_cond_broadcast(&s->ckpt_cond);
		pthread_mutex_unlock(&s->flush_lock);
	}
}
