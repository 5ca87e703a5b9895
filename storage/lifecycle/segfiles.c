/* segfiles.c - segment-file helpers the lifecycle operations share (moved
 * out of lifecycle.c and compact.c so that compact.c, merge.c and
 * lifecycle.c call down into one place instead of into each other):
 * unlinking a segment, the seg_trash grace and emptying, swapping segment
 * readers, the compact_out protocol (begin/abandon a new segment), and the
 * id, chunk-key and supersede lists. Contracts: lifecycle/lifecycle.h.
 *
 * Threading: flusher thread (or open/close when it is not running);
 * sti_readers_refresh takes seg_lock exclusively for the swap.
 * Failure: negative errno / RDB_E*; a failed unlink is logged and retried
 * by the caller (trash stays listed in the index).
 */
#include "storage/lifecycle/lifecycle.h"

#include "common/rdb_err.h"
#include "common/rdb_log.h"
#include "common/rdb_time.h"
#include "storage/chunk/segment.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fsync_dir_path(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) ? -errno : 0;
	close(fd);
	return rc;
}

int sti_unlink_segment(struct sto *s, uint64_t id)
{
	char path[PATH_MAX + 64];
	sto_seg_path(s->seg_dir, id, path, sizeof(path));
	if (unlink(path) != 0 && errno != ENOENT) {
		int rc = -errno;
		rdb_warn("store", "cannot remove compacted segment %s: %s", path, strerror(-rc));
		return rc;
	}
	return fsync_dir_path(s->seg_dir);
}

int sti_id_push(struct id_list *l, uint64_t v)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		uint64_t *p = realloc(l->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		l->v = p;
		l->cap = cap;
	}
	l->v[l->n++] = v;
	return 0;
}

static int id_push_cb(void *arg, uint64_t v)
{
	return sti_id_push(arg, v);
}

/* Unlinks the files in seg_trash and forgets them. */
int sti_empty_trash(struct sto *s)
{
	struct id_list l = {0};
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, true, &t);
	if (rc)
		return rc;
	rc = sto_trash_scan(t, id_push_cb, &l);
	for (size_t i = 0; rc == 0 && i < l.n; i++) {
		rc = sti_unlink_segment(s, l.v[i]);
		if (rc == 0)
			rc = sto_trash_del(t, l.v[i]);
	}
	if (rc == 0)
		rc = sto_txn_commit(t);
	else
		sto_txn_abort(t);
	free(l.v);
	return rc;
}

int sti_readers_refresh(struct sto *s)
{
	struct sto_seg_readers *fresh = NULL, *old;
	int rc = sto_seg_readers_new(s->seg_dir, &fresh);
	if (rc)
		return rc;
	pthread_rwlock_wrlock(&s->seg_lock);
	old = s->readers;
	s->readers = fresh;
	pthread_rwlock_unlock(&s->seg_lock);
	sto_seg_readers_free(old);
	return 0;
}

void sti_trash_tick(struct sto *s)
{
	if (!s->trash_due_mono_ns || rdb_now_mono_ns() < s->trash_due_mono_ns)
		return;
	/* fds opened during the grace (stale reads) would keep the files' space */
	int rc = sti_readers_refresh(s);
	if (rc == 0)
		rc = sti_empty_trash(s);
	if (rc == 0)
		s->trash_due_mono_ns = 0;
	else
		rdb_warn("store", "removing compacted-away segment files failed: %s; retrying",
			 rdb_strerror(rc));
}

int sti_key_push(void *arg, const struct sto_chunk_ref *ref)
{
	struct key_list *l = arg;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct sto_chunk_ref *p = realloc(l->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		l->v = p;
		l->cap = cap;
	}
	l->v[l->n++] = *ref;
	return 0;
}

/* Frees the entries from `keep` on. */
int sti_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

void sti_sup_list_trim(struct sup_list *l, size_t keep)
{
	for (size_t i = keep; i < l->n; i++)
		sto_sup_entry_free(&l->v[i]);
	l->n = keep < l->n ? keep : l->n;
}

void sti_sup_list_clear(struct sup_list *l)
{
	sti_sup_list_trim(l, 0);
}

/* Appends *e (taking its arrays) to l; on failure e still owns them. */
int sti_sup_list_push(struct sup_list *l, struct sto_sup_entry *e)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct sto_sup_entry *p = realloc(l->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		l->v = p;
		l->cap = cap;
	}
	l->v[l->n++] = *e;
	return 0;
}

int sti_compact_begin(struct sto *s, uint64_t *new_id)
{
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, true, &t);
	if (rc)
		return rc;
	rc = sto_meta_next(t, "next_segment_id", new_id);
	if (rc == 0)
		rc = sto_meta_put(t, "compact_out", *new_id + 1);
	if (rc == 0)
		return sto_txn_commit(t);
	sto_txn_abort(t);
	return rc;
}

void sti_compact_abandon(struct sto *s, uint64_t new_id)
{
	struct sto_txn *t;
	sti_unlink_segment(s, new_id);
	if (sto_txn_begin(s->ix, true, &t) != 0)
		return;
	if (sto_meta_put(t, "compact_out", 0) == 0)
		sto_txn_commit(t);
	else
		sto_txn_abort(t);
}
