/* wal.c - the write-ahead log: group-committed, checksummed records, one
 * file per generation (wal/wal-<gen %016llx>.log; layout in storage/format.h,
 * normative text in docs/FORMAT.md).
 *
 * Design: sto_wal_append builds the 16-byte record header (length, type,
 * zero bytes, XXH3-64 seeded with the generation over header bytes 0..7 and
 * the payload) on the caller's stack, so hashing runs in parallel on the
 * callers, and queues a request that points at that header and at the
 * caller's payload (no copy). The caller then sleeps until its request is
 * done. The WAL thread takes every queued request at once (a group), writes
 * them with one writev at the end of the file and, with STO_SYNC_FDATASYNC,
 * one fdatasync linked to it (storage/io/uring.h); then it stores the result in
 * each request and wakes all callers. While a group is in flight the next
 * one accumulates: that is the group commit, and under load many appends
 * share one fdatasync.
 *
 * Invariants:
 *  - `size` is the end of the last durable record: the file holds exactly
 *    the header plus whole, checksummed records up to `size`. A group is
 *    written at `size`; `size` moves past it only after the write (and the
 *    fdatasync, by policy) succeeded.
 *  - The queue never holds more than queue_max_records requests (0 in the
 *    options means 1024); a caller beyond that waits (backpressure). A group
 *    is thus at most queue_max_records records and 3x as many iovecs (a
 *    record's definitions, its header, its payload), and the iovec array
 *    is allocated once at open.
 *  - Series definitions (wal.h, sto_wal_defs_fn): when a group is taken,
 *    the WAL thread calls each record's hook, framing what it returns as a
 *    STO_WAL_REC_DEFS record (header and XXH3-64 seeded with the
 *    generation, as any record) in `defs`, a buffer of the WAL thread that
 *    lives until the group is finished; the iovecs point into it only once
 *    all of the group's definitions are in it (it may move while it grows).
 *    Each definition record goes right before its record, in the same
 *    writev. `epoch` (process-unique, from epoch_next) changes at every
 *    rotation and after every failed group, so hooks define anew whatever
 *    a truncate or a new file took away.
 *  - A blocking request lives on its caller's stack; the WAL thread stops
 *    touching it once it has set `done` under the mutex. An asynchronous
 *    one (sto_wal_append_async) lives in the caller's struct
 *    sto_wal_async; the WAL thread calls its completion after the group's
 *    outcome is published and with mu dropped, and stops touching it then.
 *    So one fdatasync covers every record queued meanwhile, however many
 *    threads (or none) wait for them.
 *
 * Threading: any thread may append. The WAL thread alone uses the ring and
 * the file descriptor for writes. Everything shared (queue, fd, stats,
 * broken flag) is under `mu`; gen and size are also atomics so that the
 * const getters need no lock. sto_wal_rotate and sto_wal_close are not
 * called concurrently with appends (the engine's rwlock), which is also why
 * the generation an append seeds its checksum with is the file it lands in.
 * sto_wal_prepare may be: it makes the next file (next_fd, under mu, never
 * used by the WAL thread) without the engine's lock, so that a rotation
 * under that lock only swaps descriptors.
 *
 * Failure: when a group's write or fdatasync fails, all its records get the
 * error (they are not in the log and will not be replayed), stats.errors
 * counts them, and the file is truncated back to `size` so no later record
 * ever follows torn bytes. If that truncate fails, the WAL is broken: every
 * append returns RDB_EIO until sto_wal_rotate succeeds (a fresh file is
 * clean again; replay ignores the old file's bad tail).
 *
 * Reading the files back (replay, listing, damage kept aside) is
 * wal_read.c; what both halves share is wal_int.h.
 */
#include "storage/wal/wal.h"
#include "storage/wal/wal_int.h"
#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"
#include "common/rdb_time.h"
#include "storage/io/fault.h"
#include "storage/format.h"
#include "storage/io/uring.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define SUBSYS	      STO_WAL_SUBSYS
#define QUEUE_DEFAULT 1024u
#define RING_DEPTH    8u
#define NAME_LEN      STO_WAL_NAME_LEN
#define PREALLOC_MIN  (1u << 20) /* a generation shorter than this: no zeros ahead */
#define IOV_PER_REC   3u	 /* definitions, header, payload */
#define DEFS_KEEP     (4u << 20) /* the definitions buffer is freed past this after a group */

/* Epochs of every WAL in the process: one never repeats. */
static _Atomic uint64_t epoch_next = 1;

/* One queued append: on the caller's stack (sto_wal_append, fn NULL) or in
 * the caller's struct sto_wal_async (fn set). Fields: next, payload (the
 * caller's, read until done), len (payload bytes), hdr, result (set by the
 * WAL thread with done), fn/arg (the completion of an async append). */
_Static_assert(sizeof(((struct sto_wal_async *)0)->hdr) == STO_WAL_REC_HEADER_SIZE,
	       "struct sto_wal_async.hdr holds one record header");

struct sto_wal {
	char *dir;
	enum sto_sync_policy sync;
	size_t queue_max;  /* requests; also the largest group */
	uint64_t prealloc; /* bytes sto_wal_prepare zero-fills a file to */
	void (*group_done)(void *arg, struct sto_wal_async *done); /* options */
	void *group_arg;
	struct sto_ring *ring; /* WAL thread only */
	struct iovec *iov;     /* WAL thread only, IOV_PER_REC * queue_max entries */
	struct rdb_buf defs;   /* WAL thread only: the group's definition records */
	pthread_t thread;
	bool thread_started;
	bool sync_inited;
	pthread_mutex_t mu;
	pthread_cond_t work_cv;	 /* WAL thread: queue not empty or stopping */
	pthread_cond_t done_cv;	 /* appenders: a group finished */
	pthread_cond_t space_cv; /* appenders: queue has room or WAL broken */
	/* Under mu. */
	struct sto_wal_async *head, *tail;
	size_t queued;
	bool stopping;
	bool broken;
	int fd;
	struct sto_wal_stats stats;
	int next_fd; /* -1, or wal-<next_gen>.log made by sto_wal_prepare */
	uint64_t next_gen;
	int inject_write_err; /* test hook, consumed by the next group */
	int inject_truncate_err;
	uint64_t epoch; /* of what definition hooks have written to this file */
	/* Under mu for writers; atomics for the const getters. */
	_Atomic uint64_t gen;
	_Atomic uint64_t size; /* bytes: end of the last durable record */
};

/* A group taken from the queue, with what the WAL thread needs unlocked. */
struct group {
	struct sto_wal_async *first;
	size_t n;
	int fd;
	uint64_t gen;
	uint64_t off; /* file offset the group is written at */
	uint64_t bytes;
	uint64_t epoch;
	uint64_t def_records, def_bytes;
	bool broken;
	int inject_write_err;
	int inject_truncate_err;
	/* Outcome. */
	int result;
	bool now_broken;
	bool synced; /* an fdatasync was issued */
	uint64_t ns; /* time in write + fdatasync */
};

/* ---- Files ---------------------------------------------------------------- */

int sto_wal_path(char *buf, size_t cap, const char *dir, uint64_t gen)
{
	int n = snprintf(buf, cap, "%s/wal-%016llx.log", dir, (unsigned long long)gen);
	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	return 0;
}

int sto_wal_fsync_dir(const char *dir)
{
	int result = 0;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fsync(fd) != 0)
		result = -errno;
	close(fd);
	if (result)
		rdb_error(SUBSYS, "fsync of directory %s failed: %s", dir, rdb_strerror(result));
	return result;
}

int sto_wal_pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
	while (n > 0) {
		ssize_t w = pwrite(fd, p, n, (off_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		if (w == 0)
			return -EIO;
		p += w;
		n -= (size_t)w;
		off += (uint64_t)w;
	}
	return 0;
}

int sto_wal_datasync_fd(int fd)
{
	while (fdatasync(fd) != 0) {
		if (errno != EINTR)
			return -errno;
	}
	return 0;
}

static int truncate_fd(int fd, uint64_t size)
{
	while (ftruncate(fd, (off_t)size) != 0) {
		if (errno != EINTR)
			return -errno;
	}
	return 0;
}

static void encode_file_header(uint8_t *h, uint64_t gen)
{
	memcpy(h, STO_WAL_MAGIC, 8);
	rdb_put_le32(h + 8, STO_WAL_VERSION);
	rdb_put_le32(h + 12, STO_WAL_HEADER_SIZE);
	rdb_put_le64(h + 16, gen);
	rdb_put_le64(h + 24, (uint64_t)rdb_now_ns());
}

/* Writes zeros over [from, to) of fd. */
static int zero_fill(int fd, uint64_t from, uint64_t to)
{
	static const uint8_t zeros[64 * 1024];
	int result = 0;
	for (uint64_t off = from; result == 0 && off < to; off += sizeof(zeros)) {
		size_t n = to - off < sizeof(zeros) ? (size_t)(to - off) : sizeof(zeros);
		result = sto_wal_pwrite_all(fd, zeros, n, off);
	}
	return result;
}

/* Creates wal-<gen>.log with a synced header (and, if prealloc is past it,
 * zeros up to prealloc bytes) and a synced directory entry. On failure no
 * file is left behind (unless it existed: -EEXIST). */
static int create_file(const char *dir, uint64_t gen, uint64_t prealloc, int *fd_out)
{
	char path[PATH_MAX];
	uint8_t hdr[STO_WAL_HEADER_SIZE];
	int result = sto_wal_path(path, sizeof(path), dir, gen);
	if (result)
		return result;
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		result = -errno;
		rdb_error(SUBSYS, "cannot create %s: %s", path, rdb_strerror(result));
		return result;
	}
	encode_file_header(hdr, gen);
	result = sto_wal_pwrite_all(fd, hdr, sizeof(hdr), 0);
	if (!result && prealloc > sizeof(hdr))
		result = zero_fill(fd, sizeof(hdr), prealloc);
	if (!result)
		result = sto_wal_datasync_fd(fd);
	if (!result)
		result = sto_wal_fsync_dir(dir);
	if (result) {
		rdb_error(SUBSYS, "cannot write the header of %s: %s; removed the file", path,
			  rdb_strerror(result));
		close(fd);
		unlink(path);
		goto out;
	}
	*fd_out = fd;
out:
	return result;
}

/* ---- Append (caller threads) ---------------------------------------------- */

uint64_t sto_wal_rec_hash(const uint8_t *hdr, const uint8_t *payload, size_t len, uint64_t gen)
{
	return rdb_hash64_2(hdr, 8, payload, len, gen);
}

/* Fills the STO_WAL_REC_HEADER_SIZE bytes at hdr with the header of a
 * record of type whose len payload bytes are at payload: length, type,
 * zero reserved bytes, checksum. */
static void build_rec_header(uint8_t *hdr, uint8_t type, const void *payload, uint32_t len,
			     uint64_t gen)
{
	rdb_put_le32(hdr, len);
	hdr[4] = type;
	memset(hdr + 5, 0, 3);
	rdb_put_le64(hdr + 8, sto_wal_rec_hash(hdr, payload, len, gen));
}

/* Queues req (header built) unless the WAL is broken. Under mu. */
static int enqueue(struct sto_wal *w, struct sto_wal_async *req)
{
	while (!w->broken && w->queued >= w->queue_max)
		pthread_cond_wait(&w->space_cv, &w->mu);
	if (w->broken) {
		w->stats.errors++;
		return RDB_EIO;
	}
	if (w->tail)
		w->tail->next = req;
	else
		w->head = req;
	w->tail = req;
	w->queued++;
	pthread_cond_signal(&w->work_cv);
	return 0;
}

int sto_wal_append(struct sto_wal *w, uint8_t type, const void *payload, size_t len)
{
	struct sto_wal_rec rec = {.type = type, .payload = payload, .len = len};
	return sto_wal_append_rec(w, &rec);
}

int sto_wal_append_rec(struct sto_wal *w, const struct sto_wal_rec *rec)
{
	if (rec->len > STO_WAL_MAX_PAYLOAD)
		return RDB_ELIMIT;
	if (rec->len > 0 && !rec->payload)
		return -EINVAL;
	struct sto_wal_async req = {.payload = rec->payload,
				    .len = (uint32_t)rec->len,
				    .defs_fn = rec->defs_fn,
				    .defs_arg = rec->defs_arg};
	build_rec_header(req.hdr, rec->type, req.payload, req.len, atomic_load(&w->gen));

	pthread_mutex_lock(&w->mu);
	int result = enqueue(w, &req);
	while (result == 0 && !req.done)
		pthread_cond_wait(&w->done_cv, &w->mu);
	if (result == 0)
		result = req.result;
	pthread_mutex_unlock(&w->mu);
	return result;
}

int sto_wal_append_async(struct sto_wal *w, uint8_t type, const void *payload, size_t len,
			 struct sto_wal_async *a, sto_wal_done_fn fn, void *arg)
{
	struct sto_wal_rec rec = {.type = type, .payload = payload, .len = len};
	return sto_wal_append_rec_async(w, &rec, a, fn, arg);
}

int sto_wal_append_rec_async(struct sto_wal *w, const struct sto_wal_rec *rec,
			     struct sto_wal_async *a, sto_wal_done_fn fn, void *arg)
{
	if (rec->len > STO_WAL_MAX_PAYLOAD)
		return RDB_ELIMIT;
	if ((rec->len > 0 && !rec->payload) || !fn)
		return -EINVAL;
	*a = (struct sto_wal_async){.payload = rec->payload,
				    .len = (uint32_t)rec->len,
				    .fn = fn,
				    .arg = arg,
				    .defs_fn = rec->defs_fn,
				    .defs_arg = rec->defs_arg};
	build_rec_header(a->hdr, rec->type, a->payload, a->len, atomic_load(&w->gen));
	pthread_mutex_lock(&w->mu);
	int result = enqueue(w, a);
	pthread_mutex_unlock(&w->mu);
	return result;
}

/* ---- Group commit (WAL thread) -------------------------------------------- */

/* Under mu: moves the whole queue into g. */
static void take_group(struct sto_wal *w, struct group *g)
{
	memset(g, 0, sizeof(*g));
	g->first = w->head;
	g->n = w->queued;
	g->fd = w->fd;
	g->gen = atomic_load(&w->gen);
	g->off = atomic_load(&w->size);
	g->epoch = w->epoch;
	g->broken = w->broken;
	g->inject_write_err = w->inject_write_err;
	g->inject_truncate_err = w->inject_truncate_err;
	w->inject_write_err = 0;
	w->inject_truncate_err = 0;
	w->head = w->tail = NULL;
	w->queued = 0;
	pthread_cond_broadcast(&w->space_cv);
}

/* Runs r's definitions hook and frames its output as one STO_WAL_REC_DEFS
 * record at the end of w->defs (r->defs_len 0 when it wrote nothing). */
static int frame_defs(struct sto_wal *w, struct group *g, struct sto_wal_async *r)
{
	size_t start = w->defs.len;
	r->defs_off = start;
	r->defs_len = 0;
	int rc = rdb_buf_append(&w->defs, (uint8_t[STO_WAL_REC_HEADER_SIZE]){0},
				STO_WAL_REC_HEADER_SIZE);
	if (rc == 0)
		rc = r->defs_fn(r->defs_arg, g->epoch, &w->defs);
	size_t len = w->defs.len - start - STO_WAL_REC_HEADER_SIZE;
	if (rc == 0 && len > STO_WAL_MAX_PAYLOAD)
		rc = RDB_ELIMIT;
	if (rc || len == 0) {
		w->defs.len = start;
		return rc;
	}
	uint8_t *h = w->defs.data + start;
	build_rec_header(h, STO_WAL_REC_DEFS, h + STO_WAL_REC_HEADER_SIZE, (uint32_t)len, g->gen);
	r->defs_len = STO_WAL_REC_HEADER_SIZE + len;
	g->def_records++;
	g->def_bytes += r->defs_len;
	return 0;
}

/* Calls the group's definitions hooks in record order. On failure the
 * group is not written (the caller fails it, which changes the epoch:
 * hooks may have marked definitions that are now dropped). */
static int build_defs(struct sto_wal *w, struct group *g)
{
	w->defs.len = 0;
	for (struct sto_wal_async *r = g->first; r; r = r->next) {
		r->defs_len = 0;
		if (!r->defs_fn)
			continue;
		int rc = frame_defs(w, g, r);
		if (rc)
			return rc;
	}
	return 0;
}

static int build_iov(struct sto_wal *w, struct group *g)
{
	int cnt = 0;
	for (struct sto_wal_async *r = g->first; r; r = r->next) {
		if (r->defs_len) {
			w->iov[cnt].iov_base = w->defs.data + r->defs_off;
			w->iov[cnt++].iov_len = r->defs_len;
			g->bytes += r->defs_len;
		}
		w->iov[cnt].iov_base = r->hdr;
		w->iov[cnt++].iov_len = STO_WAL_REC_HEADER_SIZE;
		if (r->len) {
			w->iov[cnt].iov_base = (void *)r->payload;
			w->iov[cnt++].iov_len = r->len;
		}
		g->bytes += STO_WAL_REC_HEADER_SIZE + (uint64_t)r->len;
	}
	return cnt;
}

/* Test hook / fault point: a torn write of the first half of the group,
 * then err. */
static int injected_write(struct sto_wal *w, struct group *g, int cnt, int err)
{
	uint64_t left = g->bytes / 2;
	int n = 0;
	while (n < cnt && left >= w->iov[n].iov_len)
		left -= w->iov[n++].iov_len;
	if (n > 0)
		(void)sto_ring_writev(w->ring, g->fd, w->iov, n, g->off, false);
	return err;
}

static void undo_failed_write(struct sto_wal *w, struct group *g)
{
	char name[NAME_LEN + 1];
	snprintf(name, sizeof(name), "wal-%016llx.log", (unsigned long long)g->gen);
	int rc =
	    g->inject_truncate_err ? g->inject_truncate_err : sto_fault_hit(STO_FP_WAL_TRUNCATE);
	if (rc == 0)
		rc = truncate_fd(g->fd, g->off);
	if (rc == 0) {
		rdb_warn(SUBSYS,
			 "%s/%s: writing %zu records (%llu bytes) at offset %llu failed: %s; "
			 "refused them, truncated the file back to %llu, still serving",
			 w->dir, name, g->n, (unsigned long long)g->bytes,
			 (unsigned long long)g->off, rdb_strerror(g->result),
			 (unsigned long long)g->off);
		return;
	}
	g->now_broken = true;
	rdb_error(SUBSYS,
		  "%s/%s: writing %zu records at offset %llu failed (%s) and truncating "
		  "back to %llu failed too (%s); the WAL now refuses all appends until it is "
		  "rotated or the server restarts; records before offset %llu are intact",
		  w->dir, name, g->n, (unsigned long long)g->off, rdb_strerror(g->result),
		  (unsigned long long)g->off, rdb_strerror(rc), (unsigned long long)g->off);
}

/* Unlocked: writes (and syncs) the group; sets g->result. */
static void commit_group(struct sto_wal *w, struct group *g)
{
	if (g->broken) {
		g->result = RDB_EIO;
		return;
	}
	g->result = build_defs(w, g);
	if (g->result) {
		rdb_error(SUBSYS,
			  "%s: cannot lay out the series definitions of %zu records: %s; refused "
			  "them, nothing written, still serving",
			  w->dir, g->n, rdb_strerror(g->result));
		return;
	}
	int cnt = build_iov(w, g);
	bool datasync = w->sync == STO_SYNC_FDATASYNC;
	int64_t t0 = rdb_now_mono_ns();
	int fault = g->inject_write_err ? g->inject_write_err : sto_fault_hit(STO_FP_WAL_APPEND);
	if (fault)
		g->result = injected_write(w, g, cnt, fault);
	else
		g->result = sto_ring_writev(w->ring, g->fd, w->iov, cnt, g->off, datasync);
	if (!fault && g->result == 0) /* the group landed whole, then its sync "failed" */
		g->result = sto_fault_hit(STO_FP_WAL_SYNC);
	g->ns = (uint64_t)(rdb_now_mono_ns() - t0);
	g->synced = datasync;
	if (g->result)
		undo_failed_write(w, g);
}

/* Under mu: publishes the outcome and wakes the group's blocking callers;
 * returns the group's asynchronous appends (linked by next) for the WAL
 * thread to complete once it has dropped mu. */
static struct sto_wal_async *finish_group(struct sto_wal *w, struct group *g)
{
	struct sto_wal_stats *s = &w->stats;
	if (g->result == 0) {
		atomic_store(&w->size, g->off + g->bytes);
		s->records += g->n;
		s->bytes += g->bytes;
		s->def_records += g->def_records;
		s->def_bytes += g->def_bytes;
	} else {
		s->errors += g->n;
		/* The file is back where it was (or broken): what hooks defined
		 * in this group is not in it. */
		w->epoch = atomic_fetch_add(&epoch_next, 1);
	}
	if (w->defs.cap > DEFS_KEEP)
		rdb_buf_free(&w->defs);
	if (!g->broken) {
		s->group_max = g->n > s->group_max ? g->n : s->group_max;
		s->syncs += g->synced ? 1 : 0;
		s->sync_ns_total += g->ns;
		s->sync_ns_max = g->ns > s->sync_ns_max ? g->ns : s->sync_ns_max;
	}
	if (g->now_broken) {
		w->broken = true;
		pthread_cond_broadcast(&w->space_cv);
	}
	struct sto_wal_async *async = NULL, **tail = &async;
	for (struct sto_wal_async *r = g->first, *next; r; r = next) {
		next = r->next;
		r->result = g->result;
		if (r->fn) { /* ours until its fn runs */
			r->next = NULL;
			*tail = r;
			tail = &r->next;
		} else {
			r->done = true; /* the caller may return (and its stack go) */
		}
	}
	pthread_cond_broadcast(&w->done_cv);
	return async;
}

static void *wal_thread(void *arg)
{
	struct sto_wal *w = arg;
	pthread_setname_np(pthread_self(), "rdb-wal");
	struct group g;
	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (!w->head && !w->stopping)
			pthread_cond_wait(&w->work_cv, &w->mu);
		if (!w->head)
			break; /* stopping, and the queue is drained */
		take_group(w, &g);
		pthread_mutex_unlock(&w->mu);
		commit_group(w, &g);
		pthread_mutex_lock(&w->mu);
		struct sto_wal_async *async = finish_group(w, &g);
		if (async) {
			/* Completions run unlocked: they may queue more appends. */
			pthread_mutex_unlock(&w->mu);
			if (w->group_done)
				w->group_done(w->group_arg, async);
			for (struct sto_wal_async *r = async, *next; r; r = next) {
				next = r->next;
				r->fn(r->arg, r->result); /* r may be freed by it */
			}
			pthread_mutex_lock(&w->mu);
		}
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* ---- Lifecycle ------------------------------------------------------------ */

/* Under mu, or with the WAL thread gone: closes and removes the file a
 * sto_wal_prepare made that no rotation used (it holds only a header). */
static void drop_prepared(struct sto_wal *w)
{
	if (w->next_fd < 0)
		return;
	close(w->next_fd);
	w->next_fd = -1;
	char path[PATH_MAX];
	if (sto_wal_path(path, sizeof(path), w->dir, w->next_gen) == 0 && unlink(path) != 0 &&
	    errno != ENOENT)
		rdb_warn(SUBSYS, "cannot remove the unused prepared WAL file %s: %s", path,
			 rdb_strerror(-errno));
}

static void wal_free(struct sto_wal *w)
{
	drop_prepared(w);
	if (w->fd >= 0)
		close(w->fd);
	if (w->sync_inited) {
		pthread_cond_destroy(&w->space_cv);
		pthread_cond_destroy(&w->done_cv);
		pthread_cond_destroy(&w->work_cv);
		pthread_mutex_destroy(&w->mu);
	}
	sto_ring_close(w->ring);
	free(w->iov);
	rdb_buf_free(&w->defs);
	free(w->dir);
	free(w);
}

static int wal_init_sync(struct sto_wal *w)
{
	if (pthread_mutex_init(&w->mu, NULL) != 0)
		return -ENOMEM;
	if (pthread_cond_init(&w->work_cv, NULL) != 0)
		goto err_mu;
	if (pthread_cond_init(&w->done_cv, NULL) != 0)
		goto err_work;
	if (pthread_cond_init(&w->space_cv, NULL) != 0)
		goto err_done;
	w->sync_inited = true;
	return 0;
err_done:
	pthread_cond_destroy(&w->done_cv);
err_work:
	pthread_cond_destroy(&w->work_cv);
err_mu:
	pthread_mutex_destroy(&w->mu);
	return -ENOMEM;
}

static int wal_alloc(const struct sto_wal_options *opt, struct sto_wal **out)
{
	struct sto_wal *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->fd = -1;
	w->next_fd = -1;
	w->sync = opt->sync;
	w->group_done = opt->group_done;
	w->group_arg = opt->group_arg;
	w->queue_max = opt->queue_max_records ? opt->queue_max_records : QUEUE_DEFAULT;
	w->prealloc = opt->prealloc_bytes;
	w->dir = strdup(opt->dir);
	w->iov = calloc(IOV_PER_REC * w->queue_max, sizeof(*w->iov));
	/* A group's definitions: each record's fit one record (the writers
	 * check), several huge ones together may not (the group then fails). */
	rdb_buf_init(&w->defs, 4 * ((size_t)STO_WAL_MAX_PAYLOAD + STO_WAL_REC_HEADER_SIZE));
	w->epoch = atomic_fetch_add(&epoch_next, 1);
	int result = (w->dir && w->iov) ? wal_init_sync(w) : -ENOMEM;
	if (!result)
		result = sto_ring_open(RING_DEPTH, &w->ring);
	if (result) {
		wal_free(w);
		return result;
	}
	*out = w;
	return 0;
}

int sto_wal_open(const struct sto_wal_options *opt, struct sto_wal **out)
{
	struct sto_wal *w = NULL;
	if (!opt->dir || (opt->sync != STO_SYNC_FDATASYNC && opt->sync != STO_SYNC_NONE))
		return -EINVAL;
	if (opt->queue_max_records > SIZE_MAX / (IOV_PER_REC * sizeof(struct iovec)))
		return -EINVAL;
	int result = wal_alloc(opt, &w);
	if (result)
		return result;
	result = create_file(w->dir, opt->gen, 0, &w->fd);
	if (result)
		goto out;
	atomic_store(&w->gen, opt->gen);
	atomic_store(&w->size, STO_WAL_HEADER_SIZE);
	result = -pthread_create(&w->thread, NULL, wal_thread, w);
	if (result) {
		rdb_error(SUBSYS,
			  "cannot start the WAL thread for %s: %s; removing the new "
			  "file",
			  w->dir, rdb_strerror(result));
		(void)sto_wal_remove(w->dir, opt->gen);
		goto out;
	}
	w->thread_started = true;
	*out = w;
out:
	if (result)
		wal_free(w);
	return result;
}

int sto_wal_prepare(struct sto_wal *w, uint64_t new_gen)
{
	pthread_mutex_lock(&w->mu);
	bool ready = w->next_fd >= 0 && w->next_gen == new_gen;
	if (!ready)
		drop_prepared(w);
	pthread_mutex_unlock(&w->mu);
	if (ready)
		return 0;
	/* Unlocked: creating and syncing the file and its directory entry is
	 * the slow part of a rotation (a journal commit under I/O load); the
	 * WAL thread never touches next_fd, and prepare/rotate/close are
	 * called by one thread at a time (wal.h). */
	/* Zero-filled as far as the current generation got (+1/8), up to
	 * prealloc: a busy server's next file is as long, an idle one's (and a
	 * test's) gets no zeros to write. */
	uint64_t used = atomic_load(&w->size);
	uint64_t zeros = used < PREALLOC_MIN ? 0 : used + used / 8;
	int fd = -1;
	int result = create_file(w->dir, new_gen, zeros < w->prealloc ? zeros : w->prealloc, &fd);
	if (result)
		return result;
	pthread_mutex_lock(&w->mu);
	w->next_fd = fd;
	w->next_gen = new_gen;
	pthread_mutex_unlock(&w->mu);
	return 0;
}

int sto_wal_rotate(struct sto_wal *w, uint64_t new_gen)
{
	int fd = -1;
	int result = 0;
	/* STO_SYNC_NONE acked records without fdatasync; the file we close
	 * should still be durable before the engine can forget about it. */
	if (w->sync == STO_SYNC_NONE) {
		pthread_mutex_lock(&w->mu);
		result = sto_wal_datasync_fd(w->fd);
		pthread_mutex_unlock(&w->mu);
		if (result)
			goto out;
	}
	result = sto_fault_hit(STO_FP_WAL_ROTATE);
	if (result)
		goto out;
	pthread_mutex_lock(&w->mu);
	if (w->next_fd >= 0 && w->next_gen == new_gen) {
		fd = w->next_fd; /* made and synced by sto_wal_prepare */
		w->next_fd = -1;
	} else {
		drop_prepared(w);
	}
	pthread_mutex_unlock(&w->mu);
	if (fd < 0)
		result = create_file(w->dir, new_gen, 0, &fd);
	if (result)
		goto out;
	pthread_mutex_lock(&w->mu);
	int old = w->fd;
	w->fd = fd;
	w->broken = false;
	w->epoch = atomic_fetch_add(&epoch_next, 1); /* nothing is defined in the new file */
	atomic_store(&w->gen, new_gen);
	atomic_store(&w->size, STO_WAL_HEADER_SIZE);
	pthread_mutex_unlock(&w->mu);
	close(old);
out:
	if (result)
		rdb_error(SUBSYS,
			  "rotating %s to generation %016llx failed: %s; still writing "
			  "the current file",
			  w->dir, (unsigned long long)new_gen, rdb_strerror(result));
	return result;
}

uint64_t sto_wal_gen(const struct sto_wal *w)
{
	return atomic_load(&w->gen);
}

uint64_t sto_wal_size(const struct sto_wal *w)
{
	return atomic_load(&w->size);
}

void sto_wal_get_stats(struct sto_wal *w, struct sto_wal_stats *out)
{
	pthread_mutex_lock(&w->mu);
	*out = w->stats;
	pthread_mutex_unlock(&w->mu);
}

void sto_wal_test_fail_next(struct sto_wal *w, int write_err, int truncate_err)
{
	pthread_mutex_lock(&w->mu);
	w->inject_write_err = write_err;
	w->inject_truncate_err = truncate_err;
	pthread_mutex_unlock(&w->mu);
}

void sto_wal_close(struct sto_wal *w)
{
	if (!w)
		return;
	if (w->thread_started) {
		pthread_mutex_lock(&w->mu);
		w->stopping = true;
		pthread_cond_signal(&w->work_cv);
		pthread_mutex_unlock(&w->mu);
		pthread_join(w->thread, NULL);
	}
	wal_free(w);
}
