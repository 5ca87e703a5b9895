/* wal.h - the write-ahead log: group-committed, checksummed records in one
 * file per generation (wal/wal-<gen>.log, format in storage/format.h).
 *
 * Threading: any number of threads call sto_wal_append concurrently; one WAL
 * thread owns the io_uring ring, gathers every record queued while the
 * previous write+fdatasync was in flight, writes them with one writev and
 * shares one fdatasync among them (group commit). sto_wal_rotate and
 * sto_wal_close must not run concurrently with sto_wal_append (the storage
 * engine's rwlock guarantees it).
 *
 * Failure: if a write or fdatasync fails, every record of that group gets the
 * error, the file is truncated back to the end of the last durable record (so
 * later records never follow a torn one), and the WAL keeps serving. If the
 * truncate fails too, the WAL refuses further appends with RDB_EIO until a
 * successful sto_wal_rotate starts a clean file (replay ignores the old
 * file's bad tail).
 */
#ifndef STO_WAL_H
#define STO_WAL_H

#include "common/rdb_buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum sto_sync_policy {
	STO_SYNC_FDATASYNC = 0, /* ack after fdatasync: survives power loss (default) */
	STO_SYNC_NONE = 1,	/* ack after write(2): survives kill -9, not power loss */
};

struct sto_wal_async;

struct sto_wal_options {
	const char *dir; /* the wal/ directory; must exist */
	uint64_t gen;	 /* generation of the first file, created fresh */
	enum sto_sync_policy sync;
	size_t queue_max_records; /* appends waiting beyond this block (backpressure) */
	/* Files made ahead by sto_wal_prepare are zero-filled to at most this
	 * many bytes (0: not at all; as far as the current file got, +1/8, when
	 * that is 1 MiB or more), so that the group commits into them overwrite
	 * allocated blocks: each fdatasync then writes the data alone, not the
	 * inode and block maps of a growing file. Replay reads zeros after the
	 * last record as the file's end (docs/FORMAT.md). */
	uint64_t prealloc_bytes;
	/* Optional: called on the WAL thread, under no WAL lock, with the
	 * asynchronous appends one group completed (linked through next, each
	 * with its result), right before their done_fns are called in that
	 * order; so a caller can do what every completion does under one lock
	 * hold. It must not free or unlink them, nor append. */
	void (*group_done)(void *arg, struct sto_wal_async *done);
	void *group_arg;
};

struct sto_wal;

/* Creates wal-<gen>.log (O_EXCL: an existing file is an error, -EEXIST),
 * writes and syncs its header, fsyncs the directory and starts the WAL
 * thread. 0 or -errno. */
int sto_wal_open(const struct sto_wal_options *opt, struct sto_wal **out);

/* Appends one record and blocks until it is durable per the sync policy.
 * payload is only read during the call (no copy is kept). Returns 0 when
 * durable, -errno / RDB_EIO on failure (the record is then not in the log:
 * it will not be replayed). len must be <= STO_WAL_MAX_PAYLOAD (RDB_ELIMIT). */
int sto_wal_append(struct sto_wal *w, uint8_t type, const void *payload, size_t len);

/* Called once per asynchronous append, on the WAL thread (never under a
 * WAL lock), with 0 when the record is durable per the sync policy or the
 * error that refused it (the record is then not in the log). It may call
 * sto_wal_append_async again, never sto_wal_append (that would wait on the
 * thread running it) nor rotate/close. */
typedef void (*sto_wal_done_fn)(void *arg, int result);

/* The definitions hook of one record (series definitions, format.h
 * STO_WAL_REC_DEFS). Called on the WAL thread when the record's group is
 * laid out, before any of it is written, never under a WAL lock: it
 * appends to out a definitions payload for whatever the record needs
 * defined that is not yet defined in `epoch`, or nothing. The WAL frames
 * a non-empty payload as a record of its own placed right before the
 * record, in the same write, so a definition always precedes its first
 * use in the file. `epoch` is process-unique and changes whenever what
 * was defined before may be gone from the file being written: at every
 * rotation (a new file) and after every failed group (the file was
 * truncated back, its definitions with it). So a hook marks what it
 * defined with the epoch and compares; the marks are touched on the WAL
 * thread only. 0, or an error (-ENOMEM, RDB_ELIMIT): then the record's
 * whole group fails with it (nothing written) and the epoch changes. */
typedef int (*sto_wal_defs_fn)(void *arg, uint64_t epoch, struct rdb_buf *out);

/* One record to append. */
struct sto_wal_rec {
	uint8_t type;
	const void *payload;	 /* len bytes, read until the append is done */
	size_t len;		 /* <= STO_WAL_MAX_PAYLOAD */
	sto_wal_defs_fn defs_fn; /* NULL: the record needs no definitions */
	void *defs_arg;		 /* valid until the append is done */
};

/* One asynchronous append: caller-owned storage that must stay valid (and
 * unmoved) from sto_wal_append_async until its done_fn has been called.
 * The fields are private to wal.c, but for a group_done hook (options),
 * which may read next, result, fn and arg. */
struct sto_wal_async {
	struct sto_wal_async *next;
	const void *payload;
	uint32_t len;
	uint8_t hdr[16]; /* STO_WAL_REC_HEADER_SIZE */
	int result;
	bool done;
	sto_wal_done_fn fn; /* NULL: a blocking sto_wal_append */
	void *arg;
	sto_wal_defs_fn defs_fn;
	void *defs_arg;
	size_t defs_off, defs_len; /* its definitions record in the group's buffer */
};

/* Queues one record like sto_wal_append but does not wait for it: 0 means
 * queued, and fn(arg, result) will be called exactly once from the WAL
 * thread after the record's group commit (its fdatasync) finished; payload
 * and *a must stay valid until then. Blocks only while the queue is at
 * queue_max_records (backpressure). A non-zero return (RDB_ELIMIT,
 * -EINVAL, or RDB_EIO when the WAL is broken) means
 * nothing was queued and fn is never called. Same rules as sto_wal_append
 * against rotate/close. */
int sto_wal_append_async(struct sto_wal *w, uint8_t type, const void *payload, size_t len,
			 struct sto_wal_async *a, sto_wal_done_fn fn, void *arg);

/* sto_wal_append and sto_wal_append_async of a record that may carry a
 * definitions hook (rec->defs_fn); same contracts. */
int sto_wal_append_rec(struct sto_wal *w, const struct sto_wal_rec *rec);
int sto_wal_append_rec_async(struct sto_wal *w, const struct sto_wal_rec *rec,
			     struct sto_wal_async *a, sto_wal_done_fn fn, void *arg);

/* Closes the current file (all its records are already durable) and starts
 * wal-<new_gen>.log: the one sto_wal_prepare made for new_gen if there is
 * one (no file I/O then, so the caller's lock is held only for the swap),
 * else it creates it. Must not race with sto_wal_append. 0 or -errno (on
 * failure the current file stays in use). */
int sto_wal_rotate(struct sto_wal *w, uint64_t new_gen);

/* Creates wal-<new_gen>.log ahead of sto_wal_rotate(w, new_gen): its header
 * and directory entry synced, nothing appended. May run concurrently with
 * appends (it blocks only its caller, on file I/O), not with rotate or
 * close. A file prepared for another generation is removed first; one no
 * rotation used is removed by sto_wal_close (after a crash it is an empty
 * generation, which replays to nothing). 0 (also when new_gen is already
 * prepared) or -errno (nothing prepared). */
int sto_wal_prepare(struct sto_wal *w, uint64_t new_gen);

/* Generation and size in bytes of the current file. */
uint64_t sto_wal_gen(const struct sto_wal *w);
uint64_t sto_wal_size(const struct sto_wal *w);

struct sto_wal_stats {
	uint64_t records;	/* appended (durable) */
	uint64_t bytes;		/* appended, incl. headers */
	uint64_t syncs;		/* fdatasync calls */
	uint64_t sync_ns_total; /* time spent in write+fdatasync */
	uint64_t sync_ns_max;
	uint64_t errors;
	uint64_t group_max;   /* most records one write(+fdatasync) covered */
	uint64_t def_records; /* definition records the WAL framed (not in records) */
	uint64_t def_bytes;   /* their bytes, incl. headers (also in bytes) */
};
void sto_wal_get_stats(struct sto_wal *w, struct sto_wal_stats *out);

/* Stops the thread (after the queued records are written) and closes the
 * file. NULL ok. */
void sto_wal_close(struct sto_wal *w);

/* ---- Test only: fault injection (tests/unit/test_wal.c). Never call it in
 * production code. ----
 * Makes the next group commit fail as a torn write: half of the group's bytes
 * are written, then the write "fails" with write_err (e.g. -ENOSPC, -EIO).
 * If truncate_err is non-zero, the truncate back to the last durable record
 * fails with it too, which puts the WAL in its broken state (RDB_EIO). */
void sto_wal_test_fail_next(struct sto_wal *w, int write_err, int truncate_err);

/* ---- Replay (single-threaded, at start-up) ---- */

typedef int (*sto_wal_replay_fn)(void *arg, uint64_t gen, uint8_t type, const uint8_t *payload,
				 size_t len);

#define STO_WAL_DAMAGE_KEEP 8 /* damaged ranges whose position a replay keeps */

/* A damaged byte range in the middle of a WAL file: intact records follow. */
struct sto_wal_damage {
	uint64_t off, len; /* file offset and length in bytes */
	const char *why;   /* static text: "checksum mismatch", ... */
};

struct sto_wal_replay_result {
	uint64_t records;     /* applied */
	uint64_t valid_bytes; /* file offset just past the last good record */
	uint64_t file_bytes;  /* file size */
	int tail;	      /* 0 clean end, 1 torn (incomplete) record, 2 corrupt record:
			       * bad bytes [valid_bytes, file_bytes) with nothing intact after */
	uint32_t ndamaged;    /* damaged ranges in the middle (intact records follow) */
	uint64_t damaged_bytes;
	struct sto_wal_damage damaged[STO_WAL_DAMAGE_KEEP]; /* the first ndamaged of them */
};

/* Reads wal-<gen>.log in dir and calls fn for each intact record in order.
 * A record that is incomplete or fails its checks is skipped together with
 * the bytes up to the next intact record (damage in the middle: in
 * res->damaged, logged as an ERROR), or, when no intact record follows,
 * ends the replay (the tail: res->tail, logged as a WARN). Neither is an
 * error; a bad file header (magic, version, generation) returns
 * RDB_ECORRUPT or RDB_EFORMAT. If fn returns non-zero, replay stops and
 * returns that value. Reads only: the file is never changed. */
int sto_wal_replay(const char *dir, uint64_t gen, sto_wal_replay_fn fn, void *arg,
		   struct sto_wal_replay_result *res);

/* Copies bytes [off, off + len) of wal-<gen>.log in dir into a new file
 * keep_dir/wal-<gen>-<off>.damaged (created if needed; an existing copy is
 * kept as it is), fsyncs it and keep_dir, so that damaged WAL bytes are
 * never lost with the WAL file. 0 or -errno. Blocks (I/O). */
int sto_wal_keep_range(const char *dir, uint64_t gen, uint64_t off, uint64_t len,
		       const char *keep_dir);

/* Calls fn for every kept damaged range (keep_dir/wal-*.damaged, written
 * by sto_wal_keep_range) with its path and size. A missing keep_dir has
 * none. Reads only. */
typedef void (*sto_wal_kept_fn)(void *arg, const char *path, uint64_t bytes);
void sto_wal_kept_each(const char *keep_dir, sto_wal_kept_fn fn, void *arg);

/* Lists the generations of the wal-*.log files in dir, ascending, into a
 * malloc'ed array (caller frees). Ignores other names. 0 or -errno. */
int sto_wal_list(const char *dir, uint64_t **gens, size_t *n);

/* Deletes wal-<gen>.log. 0, or -errno (-ENOENT is returned too). */
int sto_wal_remove(const char *dir, uint64_t gen);

#endif
