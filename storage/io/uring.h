/* uring.h - file writes through io_uring, with a pwrite/fdatasync fallback
 * when the kernel refuses io_uring. The only file that includes liburing.h
 * is uring.c.
 *
 * A ring is owned by exactly one thread; other threads hand that thread work
 * through a bounded queue (see wal.c, store.c). Calls block until the kernel
 * has completed the I/O.
 */
#ifndef STO_URING_H
#define STO_URING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct sto_ring;

/* Creates a ring of `depth` entries; falls back to synchronous syscalls if
 * io_uring is unavailable (logged once). 0 or -errno. */
int sto_ring_open(unsigned depth, struct sto_ring **out);
/* Makes every ring opened from now on use the synchronous fallback (for
 * kernels or sandboxes that forbid io_uring, and for the CI pass that tests
 * the fallback). Process-wide. */
void sto_ring_set_fallback(bool fallback);
void sto_ring_close(struct sto_ring *r); /* NULL ok */
bool sto_ring_is_uring(const struct sto_ring *r);

/* Writes all of iov[0..iovcnt) at file offset off, then, if datasync,
 * fdatasync(fd) - submitted together (linked) in one io_uring_enter.
 * Retries short writes. Returns 0 or -errno (-ENOSPC, -EIO ...); on failure
 * an unknown prefix of the data may be on disk. */
int sto_ring_writev(struct sto_ring *r, int fd, const struct iovec *iov, int iovcnt, uint64_t off,
		    bool datasync);
/* fdatasync(fd) through the ring. 0 or -errno. */
int sto_ring_datasync(struct sto_ring *r, int fd);

#endif
