/* wal_int.h - what the WAL's writer (wal.c) and its reader (wal_read.c:
 * replay, the directory, damage kept aside) share. Not for use outside
 * storage/wal/.
 *
 * Contracts: every function returns 0 or -errno and retries EINTR; none
 * takes a lock or keeps state.
 */
#ifndef RDB_STORAGE_WAL_INT_H
#define RDB_STORAGE_WAL_INT_H

#include <stddef.h>
#include <stdint.h>

#define STO_WAL_SUBSYS	 "wal"
#define STO_WAL_NAME_LEN 24u /* "wal-" + 16 hex digits + ".log" */

/* buf (cap bytes) = "<dir>/wal-<gen %016llx>.log"; -ENAMETOOLONG if it
 * does not fit. */
int sto_wal_path(char *buf, size_t cap, const char *dir, uint64_t gen);

/* fsyncs the directory dir (a created, renamed or removed entry is
 * durable); logs an ERROR naming it on failure. */
int sto_wal_fsync_dir(const char *dir);

/* Writes all n bytes of p at off (a short write is retried; a write of 0
 * bytes is -EIO). */
int sto_wal_pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off);

/* fdatasync(fd). */
int sto_wal_datasync_fd(int fd);

/* The checksum of a record (format.h): XXH3-64 seeded with gen over the
 * first 8 header bytes hdr[0..8) (length, type, reserved), then the len
 * payload bytes. The writer stores it, the reader compares. */
uint64_t sto_wal_rec_hash(const uint8_t *hdr, const uint8_t *payload, size_t len, uint64_t gen);

#endif
