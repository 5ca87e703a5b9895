/* uring.c - file writes through io_uring, with a pwritev/fdatasync fallback.
 * The only file that includes liburing.h; liburing's error convention
 * (negative errno in cqe->res) is already ours, so it passes through as is.
 *
 * Design: sto_ring_writev writes iov[0..iovcnt) in windows of at most
 * IOV_MAX iovecs. The window that reaches the end of the data carries a
 * linked fdatasync (IOSQE_IO_LINK + IORING_FSYNC_DATASYNC), so write and sync
 * go to the kernel in one io_uring_enter. A short write breaks the link (the
 * kernel completes the fsync with -ECANCELED); the remainder is resubmitted
 * without a link and followed by a separate fdatasync. A -ECANCELED fsync
 * is never reported: the write's own result is the real error.
 *
 * Invariants: the ring never holds an SQE across calls: every call submits
 * what it prepared and reaps every CQE it expects before returning. If a
 * submit fails in a way that leaves that in doubt, the ring is torn down and
 * the handle switches to the fallback for good (logged).
 *
 * Threading: a struct sto_ring is used by one thread at a time (its owner);
 * the scratch iovec array lives in the handle for that reason.
 *
 * Failure: every function returns 0 or -errno. When a write fails, an
 * unknown prefix of the data may be on disk; the caller decides what to do
 * (the WAL truncates). io_uring being unavailable (-ENOSYS in old kernels or
 * seccomp'ed containers, -EPERM with io_uring_disabled) is not a failure:
 * it is logged once per process and the synchronous syscalls are used.
 */
#include "storage/io/uring.h"
#include "common/rdb_err.h"
#include "common/rdb_log.h"

#include <errno.h>
#include <limits.h>
#include <liburing.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SUBSYS	  "uring"
#define TAG_WRITE 1u
#define TAG_FSYNC 2u

struct sto_ring {
	struct io_uring ring;
	bool uring;		       /* false: pwritev/fdatasync fallback */
	struct iovec scratch[IOV_MAX]; /* the current window, adjusted for progress */
};

/* The outcome of one submitted window. */
struct window_result {
	ssize_t written; /* bytes, or -errno */
	int fsync_res;	 /* 0, -errno, or 1 when no fsync was linked/completed */
};

static atomic_bool fallback_logged;
static atomic_bool uring_off; /* sto_ring_set_fallback */

void sto_ring_set_fallback(bool fallback)
{
	atomic_store(&uring_off, fallback);
}

int sto_ring_open(unsigned depth, struct sto_ring **out)
{
	struct sto_ring *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	if (depth < 2)
		depth = 2; /* a write and its linked fsync */
	if (atomic_load(&uring_off)) {
		if (!atomic_exchange(&fallback_logged, true))
			rdb_info(SUBSYS, "io_uring is off (io_uring = off or RANKDB_IO_URING=off); "
					 "file writes use pwritev+fdatasync");
		*out = r;
		return 0;
	}
	int rc = io_uring_queue_init(depth, &r->ring, 0);
	if (rc == 0) {
		r->uring = true;
	} else if (!atomic_exchange(&fallback_logged, true)) {
		rdb_warn(SUBSYS,
			 "io_uring_queue_init(depth %u) failed: %s; using pwritev+fdatasync "
			 "instead (slower, still durable)",
			 depth, rdb_strerror(rc));
	}
	*out = r;
	return 0;
}

void sto_ring_close(struct sto_ring *r)
{
	if (!r)
		return;
	if (r->uring)
		io_uring_queue_exit(&r->ring);
	free(r);
}

bool sto_ring_is_uring(const struct sto_ring *r)
{
	return r->uring;
}

static void ring_give_up(struct sto_ring *r, const char *what, int err)
{
	rdb_error(SUBSYS,
		  "%s failed: %s; tearing the io_uring down and using pwritev+fdatasync "
		  "from now on",
		  what, rdb_strerror(err));
	io_uring_queue_exit(&r->ring);
	r->uring = false;
}

static int sync_datasync(int fd)
{
	while (fdatasync(fd) != 0) {
		if (errno != EINTR)
			return -errno;
	}
	return 0;
}

static ssize_t sync_pwritev(int fd, const struct iovec *iov, int n, uint64_t off)
{
	for (;;) {
		ssize_t w = pwritev(fd, iov, n, (off_t)off);
		if (w >= 0)
			return w;
		if (errno != EINTR)
			return -errno;
	}
}

static int wait_cqe(struct io_uring *ring, struct io_uring_cqe **cqe)
{
	int rc;
	do {
		rc = io_uring_wait_cqe(ring, cqe);
	} while (rc == -EINTR);
	return rc;
}

/* Reaps `n` CQEs into res. Returns 0 or a wait error. */
static int reap(struct sto_ring *r, int n, struct window_result *res)
{
	for (int i = 0; i < n; i++) {
		struct io_uring_cqe *cqe;
		int rc = wait_cqe(&r->ring, &cqe);
		if (rc < 0)
			return rc;
		if (io_uring_cqe_get_data64(cqe) == TAG_WRITE)
			res->written = cqe->res;
		else
			res->fsync_res = cqe->res;
		io_uring_cqe_seen(&r->ring, cqe);
	}
	return 0;
}

static int submit_and_wait(struct sto_ring *r, int want)
{
	int rc;
	do {
		rc = io_uring_submit_and_wait(&r->ring, (unsigned)want);
	} while (rc == -EINTR);
	return rc;
}

/* Submits one window through the ring. Returns 0 (outcome in res), or a
 * negative value when the ring failed and was torn down: the caller then
 * redoes the window with pwritev (rewriting the same bytes is harmless). */
static int uring_window(struct sto_ring *r, int fd, int n, uint64_t off, bool link_fsync,
			struct window_result *res)
{
	int want = link_fsync ? 2 : 1;
	if (io_uring_sq_space_left(&r->ring) < (unsigned)want) {
		ring_give_up(r, "io_uring_get_sqe", -EBUSY);
		return -EBUSY;
	}
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
	io_uring_prep_writev(sqe, fd, r->scratch, (unsigned)n, off);
	io_uring_sqe_set_data64(sqe, TAG_WRITE);
	if (link_fsync) {
		sqe->flags |= IOSQE_IO_LINK;
		sqe = io_uring_get_sqe(&r->ring);
		io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
		io_uring_sqe_set_data64(sqe, TAG_FSYNC);
	}
	int rc = submit_and_wait(r, want);
	if (rc <= 0) {
		ring_give_up(r, "io_uring_submit", rc < 0 ? rc : -EAGAIN);
		return rc < 0 ? rc : -EAGAIN;
	}
	int got = rc < want ? rc : want;
	rc = reap(r, got, res);
	if (rc < 0 || got < want) {
		/* A leftover fsync SQE or a lost CQE: the ring's state is in doubt.
		 * With the write reaped, res->fsync_res == 1 makes the caller
		 * issue a separate fdatasync. */
		ring_give_up(r, rc < 0 ? "io_uring_wait_cqe" : "io_uring_submit (partial)",
			     rc < 0 ? rc : -EAGAIN);
		return rc;
	}
	return 0;
}

/* Writes one window (r->scratch[0..n)), optionally with a linked fsync;
 * res->fsync_res stays 1 unless a linked fsync completed. */
static void write_window(struct sto_ring *r, int fd, int n, uint64_t off, bool link_fsync,
			 struct window_result *res)
{
	res->written = 0;
	res->fsync_res = 1;
	if (r->uring && uring_window(r, fd, n, off, link_fsync, res) == 0)
		return;
	res->fsync_res = 1;
	res->written = sync_pwritev(fd, r->scratch, n, off);
}

/* Fills r->scratch from iov[idx..) skipping `skip` bytes of iov[idx];
 * returns the number of entries and sets *bytes to their total. */
static int fill_window(struct sto_ring *r, const struct iovec *iov, int iovcnt, int idx,
		       size_t skip, size_t *bytes)
{
	int n = 0;
	*bytes = 0;
	for (int i = idx; i < iovcnt && n < IOV_MAX; i++, n++) {
		r->scratch[n] = iov[i];
		if (i == idx) {
			r->scratch[n].iov_base = (char *)iov[i].iov_base + skip;
			r->scratch[n].iov_len -= skip;
		}
		*bytes += r->scratch[n].iov_len;
	}
	return n;
}

/* Advances (idx, skip) past `done` bytes of iov. */
static void advance(const struct iovec *iov, int iovcnt, int *idx, size_t *skip, size_t done)
{
	while (*idx < iovcnt && done > 0) {
		size_t left = iov[*idx].iov_len - *skip;
		if (done < left) {
			*skip += done;
			return;
		}
		done -= left;
		(*idx)++;
		*skip = 0;
	}
	/* Skip empty entries so that a finished write ends with idx == iovcnt. */
	while (*idx < iovcnt && iov[*idx].iov_len == *skip) {
		(*idx)++;
		*skip = 0;
	}
}

int sto_ring_writev(struct sto_ring *r, int fd, const struct iovec *iov, int iovcnt, uint64_t off,
		    bool datasync)
{
	int idx = 0, result = 0;
	size_t skip = 0;
	bool synced = false, short_seen = false;

	advance(iov, iovcnt, &idx, &skip, 0);
	while (idx < iovcnt) {
		size_t bytes;
		int n = fill_window(r, iov, iovcnt, idx, skip, &bytes);
		bool last = idx + n == iovcnt;
		bool link = datasync && last && !short_seen;
		struct window_result res;
		write_window(r, fd, n, off, link, &res);
		if (res.written < 0) {
			result = (int)res.written; /* a -ECANCELED fsync is only its echo */
			goto out;
		}
		if (res.written == 0 && bytes > 0) {
			result = -EIO; /* no progress and no error: never spin */
			goto out;
		}
		if ((size_t)res.written < bytes) {
			short_seen = true;
		} else if (link && res.fsync_res <= 0) {
			if (res.fsync_res < 0 && res.fsync_res != -ECANCELED) {
				result = res.fsync_res;
				goto out;
			}
			synced = res.fsync_res == 0;
		}
		off += (uint64_t)res.written;
		advance(iov, iovcnt, &idx, &skip, (size_t)res.written);
	}
	if (datasync && !synced)
		result = sto_ring_datasync(r, fd);
out:
	return result;
}

int sto_ring_datasync(struct sto_ring *r, int fd)
{
	if (!r->uring)
		return sync_datasync(fd);
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
	if (!sqe) {
		ring_give_up(r, "io_uring_get_sqe", -EBUSY);
		return sync_datasync(fd);
	}
	io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
	io_uring_sqe_set_data64(sqe, TAG_FSYNC);
	int rc = submit_and_wait(r, 1);
	if (rc <= 0) {
		ring_give_up(r, "io_uring_submit", rc < 0 ? rc : -EAGAIN);
		return sync_datasync(fd);
	}
	struct window_result res = {.written = 0, .fsync_res = 1};
	rc = reap(r, 1, &res);
	if (rc < 0) {
		ring_give_up(r, "io_uring_wait_cqe", rc);
		return sync_datasync(fd);
	}
	return res.fsync_res;
}
