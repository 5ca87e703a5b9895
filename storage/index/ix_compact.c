/* ix_compact.c - space accounting of the LMDB environment and its online
 * compaction (the contract is index.h, "space accounting and compaction").
 *
 * Why: LMDB never shrinks data.mdb. Pages freed by deletes (compaction and
 * merges repoint or drop chunk entries, checkpoints clear `pending`,
 * retention drops entries) go to the freelist and are reused by later
 * writes, but the file keeps its high-water size. After a load with many
 * checkpoints followed by a compaction that merges small chunks, most of
 * the file can be freelist.
 *
 * Design
 *   1. Copy: every database of one read snapshot is copied in key order
 *      with MDB_APPEND into a new single-file environment
 *      <index>/data.mdb.compact (a leftover is removed first; no lock file;
 *      synced once at the end). Appending fills every page, where
 *      mdb_env_copy2(MDB_CP_COMPACT) would keep the pages as they are
 *      (half empty after inserts in the middle of the key space: the
 *      chunks table at 512 ranks was at 62 %). The freelist is not copied.
 *      Readers and writers go on; the snapshot's txn id is kept.
 *   2. Drain: the transaction gate of index.c (sto_txn_begin waits while
 *      the gate is held) is closed and every open transaction of this
 *      process must end within drain_timeout_ms, else the gate reopens and
 *      the call returns RDB_EBUSY (the copy is removed). If a write
 *      committed since the copy began, the copy is stale: it is made again
 *      with only writers held (readers go on), then the readers are drained.
 *   3. Swap: the environment is closed, data.mdb.compact is renamed over
 *      data.mdb, the directory is fsynced, the environment is reopened
 *      (same flags, the same databases) and the gate reopens.
 *
 * Crash safety: until the rename, data.mdb is untouched (a leftover copy is
 * removed by the next sto_index_open). rename(2) is atomic: after it,
 * data.mdb is the complete, synced copy of the last committed state — the
 * same content as the old file (no commit happened since the copy's
 * snapshot, checked under the drained gate). lock.mdb holds no data: LMDB
 * resets it at the first open of a process. So a crash at any step leaves
 * a valid index with every committed entry.
 *
 * Threading: sto_index_compact must be called by a thread holding no
 * transaction (the drain would wait for it until the timeout). One call at
 * a time per environment (the caller serialises; the rankdb store runs it
 * on its flusher thread). sto_index_stat is a read transaction.
 *
 * Failure: disk full is checked up front with statvfs (need: the live pages
 * plus 1 MiB); errors before the rename leave everything as it was; a
 * failed reopen after the rename leaves the environment closed, every later
 * transaction fails with RDB_EIO, and the log says to restart rankdbd (the
 * file on disk is the valid copy).
 */
#include "storage/index/index.h"
#include "storage/index/ix_int.h"

#include "common/rdb_err.h"
#include "common/rdb_log.h"
#include "common/rdb_time.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define IXC_COPY_NAME	   "data.mdb.compact"
#define IXC_SPACE_MARGIN_B (1u << 20)

/* ---- statistics ---------------------------------------------------------- */

static void db_stat_of(const MDB_stat *ms, const char *name, struct sto_index_db_stat *d)
{
	d->name = name;
	d->entries = ms->ms_entries;
	d->depth = ms->ms_depth;
	d->branch_pages = ms->ms_branch_pages;
	d->leaf_pages = ms->ms_leaf_pages;
	d->overflow_pages = ms->ms_overflow_pages;
}

/* Pages on the freelist: each freelist value is an IDL, its first word the
 * number of page numbers that follow (what mdb_stat -f counts). */
static int free_pages_of(struct sto_txn *t, uint64_t *out)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	uint64_t n = 0;
	int ret = ix_cursor_open(t, 0 /* FREE_DBI */, &cur);

	if (ret != 0)
		return ret;
	for (ret = ix_cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
	     ret = ix_cursor_next(t, cur, &k, &v)) {
		if (v.mv_size < sizeof(size_t)) {
			ret = ix_corrupt(t, "freelist entry", v.mv_size);
			break;
		}
		size_t cnt;
		memcpy(&cnt, v.mv_data, sizeof(cnt));
		n += cnt;
	}
	mdb_cursor_close(cur);
	if (ret == RDB_ENOTFOUND) {
		*out = n;
		ret = 0;
	}
	return ret;
}

int sto_index_stat(struct sto_index *ix, struct sto_index_stat *out)
{
	struct sto_index_stat st;
	struct sto_txn *t = NULL;
	MDB_envinfo ei;
	MDB_stat ms;
	struct stat fs;
	char path[PATH_MAX];
	int ret = sto_txn_begin(ix, false, &t);

	if (ret != 0)
		return ret;
	memset(&st, 0, sizeof(st));
	struct ix_db_name names[IX_NDBS];
	ix_db_names(ix, names);
	for (unsigned i = 0; i < IX_NDBS && ret == 0; i++) {
		ret = ix_err(ix, mdb_stat(t->txn, *names[i].dbi, &ms), "stat");
		if (ret == 0)
			db_stat_of(&ms, names[i].name, &st.db[st.ndb++]);
	}
	if (ret == 0)
		ret = ix_err(ix, mdb_stat(t->txn, 0, &ms), "stat freelist");
	if (ret == 0) {
		db_stat_of(&ms, "freelist", &st.db[st.ndb++]);
		st.page_bytes = ms.ms_psize;
		ret = free_pages_of(t, &st.free_pages);
	}
	if (ret == 0)
		ret = ix_err(ix, mdb_env_info(ix->env, &ei), "env info");
	if (ret == 0) {
		st.used_pages = (uint64_t)ei.me_last_pgno + 1;
		st.last_txn_id = ei.me_last_txnid;
		snprintf(path, sizeof(path), "%s/data.mdb", ix->dir);
		st.file_bytes = stat(path, &fs) == 0 ? (uint64_t)fs.st_size : 0;
		*out = st;
	}
	sto_txn_abort(t);
	return ret;
}

/* ---- compaction ---------------------------------------------------------- */

static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int ret = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) != 0)
		ret = -errno;
	close(fd);
	return ret;
}

static enum sto_ixc_step pause_step(void)
{
	static int step = -1; /* read once: a test sets it before the server starts */
	if (step < 0) {
		const char *v = getenv("RANKDB_TEST_IXCOMPACT_PAUSE");
		step = !v			    ? 0
		       : strcmp(v, "copied") == 0   ? STO_IXC_COPIED
		       : strcmp(v, "renamed") == 0  ? STO_IXC_RENAMED
		       : strcmp(v, "reopened") == 0 ? STO_IXC_REOPENED
						    : 0;
	}
	return (enum sto_ixc_step)step;
}

static void test_pause(enum sto_ixc_step at, const char *name)
{
	if (pause_step() != at)
		return;
	rdb_warn(SUBSYS, "index compaction: test pause at step %s (RANKDB_TEST_IXCOMPACT_PAUSE)",
		 name);
	for (;;)
		pause();
}

#define IXC_TXN_PUTS 65536u /* puts per write txn of the copy (bounds its dirty pages) */

/* Copies every pair of src (in rt) into the database `name` of dst, in key
 * order with MDB_APPEND: LMDB then fills each page before starting the next
 * (a copy by mdb_env_copy keeps the pages as they are, often half empty
 * after inserts in the middle of the key space). */
static int repack_db(MDB_env *dst, MDB_txn *rt, MDB_dbi src, const char *name)
{
	MDB_cursor *cur = NULL;
	MDB_txn *wt = NULL;
	MDB_dbi d;
	MDB_val k, v;
	unsigned n = 0, flags = 0;
	int rc = mdb_dbi_flags(rt, src, &flags); /* the same flags (none today) */

	if (rc == 0)
		rc = mdb_txn_begin(dst, NULL, 0, &wt);
	if (rc == 0)
		rc = mdb_dbi_open(wt, name, MDB_CREATE | flags, &d);
	if (rc == 0)
		rc = mdb_cursor_open(rt, src, &cur);
	for (int op = MDB_FIRST; rc == 0; op = MDB_NEXT) {
		rc = mdb_cursor_get(cur, &k, &v, (MDB_cursor_op)op);
		if (rc != 0)
			break;
		rc = mdb_put(wt, d, &k, &v, MDB_APPEND);
		if (rc == 0 && ++n % IXC_TXN_PUTS == 0) {
			rc = mdb_txn_commit(wt);
			wt = NULL;
			if (rc == 0)
				rc = mdb_txn_begin(dst, NULL, 0, &wt);
		}
	}
	if (rc == MDB_NOTFOUND)
		rc = 0;
	if (cur)
		mdb_cursor_close(cur);
	if (wt && rc == 0)
		rc = mdb_txn_commit(wt);
	else if (wt)
		mdb_txn_abort(wt);
	return rc;
}

/* Writes a compacted, repacked copy of one read snapshot of ix to path (a
 * single file, synced). *txn_id gets the snapshot's txn id. LMDB codes. */
static int repack_to(struct sto_index *ix, const char *path, uint64_t *txn_id)
{
	struct ix_db_name names[IX_NDBS];
	MDB_env *dst = NULL;
	MDB_txn *rt = NULL;
	int rc = mdb_env_create(&dst);

	ix_db_names(ix, names);
	if (rc == 0)
		rc = mdb_env_set_maxdbs(dst, IX_MAXDBS);
	if (rc == 0)
		rc = mdb_env_set_mapsize(dst, (size_t)ix->map_bytes);
	if (rc == 0) /* one file, no lock file, synced once at the end */
		rc = mdb_env_open(dst, path, MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOSYNC, 0644);
	if (rc == 0)
		rc = mdb_txn_begin(ix->env, NULL, MDB_RDONLY, &rt);
	if (rc == 0)
		*txn_id = mdb_txn_id(rt);
	for (unsigned i = 0; rc == 0 && i < IX_NDBS; i++)
		rc = repack_db(dst, rt, *names[i].dbi, names[i].name);
	if (rt)
		mdb_txn_abort(rt);
	if (rc == 0)
		rc = mdb_env_sync(dst, 1);
	if (dst)
		mdb_env_close(dst);
	return rc;
}

/* Writes the compacted copy of the current snapshot to path, synced.
 * *txn_id gets the txn id of the snapshot copied. */
static int copy_to(struct sto_index *ix, const char *path, uint64_t *txn_id)
{
	int rc, ret;

	unlink(path);
	rc = repack_to(ix, path, txn_id);
	ret = ix_err(ix, rc, "compacting copy");
	if (ret != 0) {
		rdb_error(SUBSYS,
			  "index compaction: writing the copy %s failed: %s; the index is "
			  "unchanged",
			  path, rc > 0 ? strerror(rc) : mdb_strerror(rc));
		unlink(path);
	}
	return ret;
}

static uint64_t last_txn_id(struct sto_index *ix)
{
	MDB_envinfo ei;
	return mdb_env_info(ix->env, &ei) == 0 ? ei.me_last_txnid : 0;
}

/* Space check: the copy needs the live pages. */
static int space_ok(struct sto_index *ix, const struct sto_index_stat *st)
{
	struct statvfs vfs;
	uint64_t need = (st->used_pages - st->free_pages) * st->page_bytes + IXC_SPACE_MARGIN_B;

	if (statvfs(ix->dir, &vfs) != 0)
		return -errno;
	uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	if (avail >= need)
		return 0;
	rdb_warn(SUBSYS,
		 "index compaction of %s skipped: it needs %llu bytes free for the copy, the "
		 "file system has %llu; the index keeps working at its current size (%llu "
		 "bytes); free disk space and it runs at the next check",
		 ix->dir, (unsigned long long)need, (unsigned long long)avail,
		 (unsigned long long)st->file_bytes);
	return -ENOSPC;
}

/* Closes the drained environment, renames the copy over data.mdb and
 * reopens. Called with the gate held and no transaction open. */
static int swap_in(struct sto_index *ix, const char *copy)
{
	char path[PATH_MAX];
	int ret;

	snprintf(path, sizeof(path), "%s/data.mdb", ix->dir);
	ix->map_addr = NULL; /* unmapped below: never madvise the old range */
	ix->map_len = 0;
	mdb_env_close(ix->env);
	ix->env = NULL;
	if (rename(copy, path) != 0) {
		ret = -errno;
		rdb_error(SUBSYS,
			  "index compaction: rename %s -> %s failed: %s; reopening the "
			  "old index",
			  copy, path, strerror(-ret));
		unlink(copy);
	} else {
		test_pause(STO_IXC_RENAMED, "renamed");
		ret = fsync_dir(ix->dir);
		if (ret != 0)
			ret = fsync_dir(ix->dir); /* once more: a transient error */
		if (ret != 0) {
			/* The rename may not be durable: a crash could bring the old
			 * file back, and checkpoints committed to the new one (whose
			 * WAL files are then deleted) would be lost. No commit may
			 * land until a restart settles which file is the index. */
			rdb_error(SUBSYS,
				  "index compaction: fsync of %s after renaming the compacted "
				  "index failed: %s; the index stays closed (writes and "
				  "checkpoints fail, acknowledged data is in the WAL) until "
				  "rankdbd is restarted - check the disk",
				  ix->dir, strerror(-ret));
			return ret;
		}
	}
	int rc = ix_reopen(ix);
	if (rc != 0) {
		rdb_error(SUBSYS,
			  "index compaction: cannot reopen LMDB index %s (%s); every index "
			  "operation fails until rankdbd is restarted (the file on disk is valid)",
			  ix->dir, rdb_strerror(rc));
		return rc;
	}
	test_pause(STO_IXC_REOPENED, "reopened");
	return ret;
}

static bool worth_it(const struct sto_index_stat *st, double free_ratio, uint64_t min_file_bytes)
{
	if (st->file_bytes < min_file_bytes || st->used_pages == 0)
		return false;
	return (double)st->free_pages >= free_ratio * (double)st->used_pages;
}

int sto_index_compact(struct sto_index *ix, bool force, double free_ratio, uint64_t min_file_bytes,
		      uint32_t drain_timeout_ms, struct sto_index_compact_result *r)
{
	struct sto_index_stat st;
	char copy[PATH_MAX];
	uint64_t txn_id = 0;
	int64_t t0 = rdb_now_mono_ns();
	int ret;

	memset(r, 0, sizeof(*r));
	ret = sto_index_stat(ix, &st);
	if (ret != 0)
		return ret;
	r->bytes_before = r->bytes_after = st.file_bytes;
	if (!force && !worth_it(&st, free_ratio, min_file_bytes))
		return 0;
	ret = space_ok(ix, &st);
	if (ret != 0)
		return ret;
	snprintf(copy, sizeof(copy), "%s/" IXC_COPY_NAME, ix->dir);
	ret = copy_to(ix, copy, &txn_id);
	if (ret != 0)
		return ret;
	test_pause(STO_IXC_COPIED, "copied");
	ret = ix_gate_close(ix, true, drain_timeout_ms); /* on RDB_EBUSY: open again */
	if (ret == 0 && last_txn_id(ix) != txn_id) {
		/* A write committed meanwhile: copy again with writers held. */
		ix_gate_open(ix);
		ret = ix_gate_close(ix, false, drain_timeout_ms);
		if (ret == 0) {
			ret = copy_to(ix, copy, &txn_id);
			if (ret == 0)
				ret = ix_gate_widen(ix, drain_timeout_ms);
			else
				ix_gate_open(ix);
		}
	}
	if (ret != 0) {
		if (ret == RDB_EBUSY)
			rdb_info(SUBSYS,
				 "index compaction of %s postponed: transactions did not end "
				 "within %u ms",
				 ix->dir, drain_timeout_ms);
		unlink(copy);
		return ret;
	}
	ret = swap_in(ix, copy);
	ix_gate_open(ix);
	if (ret != 0)
		return ret;
	struct stat fs;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/data.mdb", ix->dir);
	r->bytes_after = stat(path, &fs) == 0 ? (uint64_t)fs.st_size : 0;
	r->swapped = true;
	rdb_info(SUBSYS,
		 "index compaction of %s: %llu -> %llu bytes (%llu of %llu pages were free) "
		 "in %lld ms",
		 ix->dir, (unsigned long long)r->bytes_before, (unsigned long long)r->bytes_after,
		 (unsigned long long)st.free_pages, (unsigned long long)st.used_pages,
		 (long long)((rdb_now_mono_ns() - t0) / 1000000));
	return 0;
}
