/* index.c - the LMDB index and catalog: series ids, chunk entries with their
 * statistics, pending chunks and meta counters (the contract is index.h).
 * This file is the wrapper: it owns the LMDB environment, transactions, the
 * error border (MDB_* codes become negative errno / RDB_E* in ix_err and
 * nowhere else) and the cursor helpers; each table (or table family) has
 * its own ix_<table>.c beside it. lmdb.h is included only by ix_int.h,
 * which only storage/index/ includes (tools/checksrc.sh keeps it so).
 *
 * Design
 *   One LMDB environment (index/) with named databases, all opened
 *   with MDB_CREATE in a single write transaction by sto_index_open() (the
 *   main five below; the data-lifecycle ones and `supersede` are described
 *   with their functions):
 *     meta     key: the name's bytes (no NUL)      value: u64 LE, sealed (16 bytes)
 *     series   key: job, 0x00, rank be32, metric   value: series id u64 LE,
 *                                                  u64 XXH3-64 of key + id bytes
 *     sid      key: series id be64                 value: the series key bytes,
 *                                                  u64 XXH3-64 of key + those
 *     chunks   key: chunk key (24 bytes, below)    value: chunk entry (136 bytes)
 *     pending  key: gen be64 + chunk key (32)      value: empty, sealed (8 bytes)
 *   "Sealed": the value ends with a checksum trailer of key and value
 *   (ix_seal.c, format 5), as does every value of the other tables but
 *   series, sid, chunks and rollups.
 *   Chunk key: series id be64, min_ts as be64 of ((uint64_t)min_ts ^ 2^63)
 *   (so negative timestamps sort first), uid be64. Keys are big-endian so
 *   LMDB's memcmp order is numeric order; values are little-endian.
 *
 * Chunk entry value, version 2, 136 bytes, little-endian:
 *     0  u8      entry version (2; 1 = the first 128 bytes, no checksum:
 *                read only while an upgrade to format 3 is under way)
 *     1  u8      group member count m: 0 for a chunk record of its own,
 *                2..STO_GROUP_MAX_MEMBERS for a member of a group record
 *     2  u8      member number (< m; 0 when m = 0)
 *     3  u8      zero (ignored on read)
 *     4  u32     length: chunk (or whole group) record bytes (header + payload)
 *     8  u64     segment id
 *    16  u64     offset of the chunk record header in the segment
 *    24  u64     WAL generation
 *    32  u32     count
 *    36  u32     nan_count
 *    40  i64     min_ts_ns (duplicates the key; must equal it)
 *    48  i64     max_ts_ns (>= min_ts_ns)
 *    56  i64     min_step (MDL_STEP_NONE if no point has a step)
 *    64  i64     max_step
 *    72  u32     min_attempt
 *    76  u32     max_attempt
 *    80  u64     min, IEEE-754 bits
 *    88  u64     max, IEEE-754 bits
 *    96  u64     sum, IEEE-754 bits
 *   104  u64     first value bits
 *   112  u64     last value bits
 *   120  u32     step_count: points that have a step (== count: every point)
 *   124  u32     group members: head length H of the group record (0 otherwise)
 *   128  u64     XXH3-64 (seed 0) of the 24-byte key, then bytes 0..127
 *   series id and uid live only in the key. A damaged entry (checksum,
 *   size, version or fields) is RDB_ECORRUPT, or, in a transaction marked
 *   sto_txn_pass_damaged (queries, verify), a ref marked damaged whose
 *   statistics the caller recomputes by decoding the chunk.
 *
 * Invariants
 *   - Series id 0 is never assigned: meta next_series_id absent means 1.
 *   - series and sid are exact inverses; get_or_create writes both in one txn.
 *   - A job id never contains 0x00, so the prefix "job\0" selects exactly
 *     that job's series ("a\0" never matches "a.b\0" or "ab\0").
 *   - Every value is copied into caller memory before a call returns; no
 *     pointer into the map escapes.
 *
 * Threading
 *   LMDB rules: one write txn at a time (sto_txn_begin(write) blocks while
 *   another is open); read txns run concurrently. The env is opened with
 *   MDB_NOTLS so a read txn may move between pool threads, but a txn is used
 *   by one thread at a time. All transactions must end before close.
 *
 * Failure
 *   Disk data is hostile: a key or value of the wrong size, version or shape
 *   is RDB_ECORRUPT with a log line naming it, never a crash. MDB_MAP_FULL is
 *   RDB_ELIMIT and tells the operator to raise index_map_bytes. After an
 *   error other than RDB_ENOTFOUND inside a write txn, LMDB has poisoned the
 *   txn: the caller must abort it. The index is derived data: it can be
 *   rebuilt from the segment files.
 */
#include "storage/index/index.h"
#include "storage/index/ix_int.h"

#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* ---- error border -------------------------------------------------------- */

int ix_err(const struct sto_index *ix, int rc, const char *op)
{
	static struct rdb_log_ratelimit rl_full, rl_corrupt, rl_other;
	const char *dir = ix && ix->dir ? ix->dir : "?";

	switch (rc) {
	case MDB_SUCCESS:
		return 0;
	case MDB_NOTFOUND:
		return RDB_ENOTFOUND;
	case MDB_KEYEXIST:
		return -EEXIST;
	case MDB_MAP_FULL:
	case MDB_TXN_FULL:
		rdb_log_limited(&rl_full, 10, RDB_LOG_ERROR, SUBSYS,
				"%s: LMDB index %s is full (%s, index_map_bytes = %llu); the write "
				"transaction is rolled back; raise index_map_bytes in the config "
				"and restart rankdbd",
				op, dir, mdb_strerror(rc),
				(unsigned long long)(ix ? ix->map_bytes : 0));
		return RDB_ELIMIT;
	case MDB_CORRUPTED:
	case MDB_PAGE_NOTFOUND:
	case MDB_INVALID:
		rdb_log_limited(&rl_corrupt, 10, RDB_LOG_ERROR, SUBSYS,
				"%s: LMDB index %s is corrupt (%s); the operation failed; the "
				"index is derived data: rebuild it from the segment files",
				op, dir, mdb_strerror(rc));
		return RDB_ECORRUPT;
	case MDB_VERSION_MISMATCH:
		rdb_error(SUBSYS,
			  "%s: LMDB index %s was written by an incompatible LMDB "
			  "version (%s); refusing to open it",
			  op, dir, mdb_strerror(rc));
		return RDB_EFORMAT;
	case MDB_READERS_FULL:
		rdb_log_limited(&rl_other, 10, RDB_LOG_WARN, SUBSYS,
				"%s: LMDB index %s: all %d reader slots in use; request refused",
				op, dir, IX_MAXREADERS);
		return RDB_EBUSY;
	default:
		if (rc > 0) {
			/* LMDB turns a short write (a full disk) into EIO */
			rdb_log_limited(&rl_other, 10, RDB_LOG_ERROR, SUBSYS,
					"%s: LMDB index %s: %s%s", op, dir, strerror(rc),
					rc == EIO ? " (LMDB reports a full disk this way too: "
						    "check free space)"
						  : "");
			return -rc;
		}
		rdb_log_limited(&rl_other, 10, RDB_LOG_ERROR, SUBSYS,
				"%s: LMDB index %s: unexpected error %d (%s)", op, dir, rc,
				mdb_strerror(rc));
		return RDB_EIO;
	}
}

int ix_corrupt(const struct sto_txn *t, const char *what, size_t size)
{
	static struct rdb_log_ratelimit rl;

	rdb_log_limited(&rl, 10, RDB_LOG_ERROR, SUBSYS,
			"LMDB index %s: %s (%zu bytes) is malformed; the operation failed; "
			"the index is derived data: rebuild it from the segment files",
			t->ix->dir, what, size);
	return RDB_ECORRUPT;
}

int ix_u64_value(const struct sto_txn *t, const MDB_val *v, const char *what, uint64_t *out)
{
	if (v->mv_size != 8)
		return ix_corrupt(t, what, v->mv_size);
	*out = rdb_get_le64(v->mv_data);
	return 0;
}

/* ---- environment and transactions ---------------------------------------- */

void ix_db_names(struct sto_index *ix, struct ix_db_name *names)
{
	const struct ix_db_name v[IX_NDBS] = {{"meta", &ix->meta},
					      {"series", &ix->series},
					      {"sid", &ix->sid},
					      {"chunks", &ix->chunks},
					      {"pending", &ix->pending},
					      {"events", &ix->events},
					      {"evpending", &ix->evpending},
					      {"batch_ids", &ix->batch_ids},
					      {"batch_time", &ix->batch_time},
					      {"tombstones", &ix->tombstones},
					      {"retention", &ix->retention},
					      {"quarantine", &ix->quarantine},
					      {"seg_trash", &ix->seg_trash},
					      {"rollups", &ix->rollups},
					      {"supersede", &ix->supersede}};
	memcpy(names, v, sizeof(v));
}

static int open_dbs(struct sto_index *ix, MDB_txn *txn, bool read_only)
{
	struct ix_db_name names[IX_NDBS];

	ix_db_names(ix, names);
	for (size_t i = 0; i < IX_NDBS; i++) {
		int rc = mdb_dbi_open(txn, names[i].name, read_only ? 0 : MDB_CREATE, names[i].dbi);
		if (rc == MDB_NOTFOUND && read_only)
			rdb_error(SUBSYS,
				  "LMDB index %s has no database '%s' (written by an older "
				  "rankdbd): start rankdbd on it once to upgrade it, then retry",
				  ix->dir, names[i].name);
		if (rc != 0)
			return ix_err(ix, rc, "open database");
	}
	return 0;
}

/* Writes format_version into a new index or checks an existing one
 * (read-only: checks only). */
static int check_format(struct sto_txn *t, bool read_only)
{
	uint64_t found;
	MDB_val k = {.mv_size = 14, .mv_data = (void *)"format_version"}, v, body;
	/* 16 bytes is the sealed layout (format 5; before, 8): one that fails
	 * its checksum is damage, not a value of the old layout. */
	int ret = ix_err(t->ix, mdb_get(t->txn, t->ix->meta, &k, &v), "meta get");
	if (ret == 0 && v.mv_size == 8 + IX_SUM_SIZE && ix_unseal(t, &k, &v, &body) < 0) {
		ix_damaged(t, "meta", &k,
			   read_only ? "read as format 5 meanwhile; 'rankctl rebuild-index' "
				       "recreates the index"
				     : "the store does not open on it; 'rankctl rebuild-index' "
				       "recreates the index");
		return read_only ? 0 : RDB_ECORRUPT; /* verify goes on and names it */
	}
	t->ix->legacy_small = true; /* format_version itself may predate format 5 */
	ret = sto_meta_get(t, "format_version", &found);
	t->ix->legacy_small = false;

	if (ret == RDB_ENOTFOUND && read_only)
		return 0;
	if (ret == RDB_ENOTFOUND)
		return sto_meta_put(t, "format_version", STO_FORMAT_VERSION);
	if (ret != 0)
		return ret;
	if (found < STO_FORMAT_VERSION_OLDEST || found > STO_FORMAT_VERSION) {
		rdb_error(SUBSYS,
			  "LMDB index %s has format version %llu, this rankdbd reads %u..%u; "
			  "refusing to open it (rebuild the index from the segment files)",
			  t->ix->dir, (unsigned long long)found, STO_FORMAT_VERSION_OLDEST,
			  STO_FORMAT_VERSION);
		return RDB_EFORMAT;
	}
	/* Before format 3: values without checksums are read as they are
	 * until upgrade_values (not read-only) has rewritten them (format.h). */
	t->ix->legacy_values = found < STO_FORMAT_INDEX_CHECKSUMS;
	/* Before format 5: the values ix_seal.c seals are read without their
	 * trailer until upgrade_values has given them one. Format 4 only added
	 * a chunk encoding: from 3 or 4 the upgrade seals and nothing else. */
	t->ix->legacy_small = found < STO_FORMAT_SEALED_VALUES;
	return 0;
}

#define UPGRADE_BATCH 4096u /* entries rewritten per write transaction */

struct rw_slot {
	uint16_t klen, vlen;
	uint8_t k[SERIES_KEY_MAX + 1];
	uint8_t v[IX_VALUE_MAX];
};

/* Reads the pairs after from (all when !*have_from) into slots (up to max
 * scanned); *more says whether the table goes on. */
static int rw_collect(struct sto_txn *t, MDB_dbi dbi, ix_check_fn check, struct rw_slot *slots,
		      size_t max, size_t *n, uint8_t *from, size_t *from_len, bool *more,
		      uint64_t *damaged)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	size_t seen = 0;
	int ret = ix_cursor_open(t, dbi, &cur);
	if (ret != 0)
		return ret;
	*n = 0;
	*more = false;
	for (ret = ix_cursor_seek(t, cur, from, *from_len, &k, &v); ret == 0;
	     ret = ix_cursor_next(t, cur, &k, &v)) {
		if (*from_len && k.mv_size == *from_len && memcmp(k.mv_data, from, *from_len) == 0)
			continue;
		if (seen++ == max) {
			*more = true;
			break;
		}
		if (k.mv_size == 0 || k.mv_size > SERIES_KEY_MAX + 1) {
			(*damaged)++;
			continue;
		}
		memcpy(from, k.mv_data, k.mv_size);
		*from_len = k.mv_size;
		struct rw_slot *sl = &slots[*n];
		size_t vlen = 0;
		const char *why;
		int rc = check(t, &k, &v, sl->v, &vlen, &why);
		if (rc < 0)
			(*damaged)++;
		if (rc != 1)
			continue;
		sl->klen = (uint16_t)k.mv_size;
		sl->vlen = (uint16_t)vlen;
		memcpy(sl->k, k.mv_data, k.mv_size);
		(*n)++;
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
	mdb_cursor_close(cur);
	return ret;
}

int ix_rewrite_legacy(struct sto_index *ix, MDB_dbi dbi, ix_check_fn check, size_t batch,
		      uint64_t *rewritten, uint64_t *damaged)
{
	struct rw_slot *slots = calloc(batch, sizeof(*slots));
	uint8_t from[SERIES_KEY_MAX + 1];
	size_t from_len = 0, n = 0;
	bool more = true;
	int ret = slots ? 0 : -ENOMEM;
	while (ret == 0 && more) {
		struct sto_txn *t = NULL;
		ret = sto_txn_begin(ix, true, &t);
		if (ret != 0)
			break;
		ret = rw_collect(t, dbi, check, slots, batch, &n, from, &from_len, &more, damaged);
		for (size_t i = 0; ret == 0 && i < n; i++) {
			MDB_val k = {.mv_size = slots[i].klen, .mv_data = slots[i].k};
			MDB_val v = {.mv_size = slots[i].vlen, .mv_data = slots[i].v};
			ret = ix_err(ix, mdb_put(t->txn, dbi, &k, &v, 0), "upgrade put");
		}
		if (ret != 0) {
			sto_txn_abort(t);
			break;
		}
		ret = sto_txn_commit(t);
		if (ret == 0)
			*rewritten += n;
	}
	free(slots);
	return ret;
}

/* From format 1 or 2: every chunk entry, series catalog value and rollup
 * record gets its checksum; from format 1 to 4: every value of the tables
 * ix_seal.c covers gets its trailer; in bounded transactions, and
 * format_version says STO_FORMAT_VERSION only once all are rewritten, so a
 * crash in the middle is finished at the next open. */
static int upgrade_checksums(struct sto_index *ix, uint64_t *chunks, uint64_t *others,
			     uint64_t *damaged)
{
	int ret = ix_chunks_upgrade(ix, UPGRADE_BATCH, chunks, damaged);
	if (ret == 0)
		ret = ix_rewrite_legacy(ix, ix->series, ix_series_check, UPGRADE_BATCH, others,
					damaged);
	if (ret == 0)
		ret = ix_rewrite_legacy(ix, ix->sid, ix_sid_check, UPGRADE_BATCH, others, damaged);
	if (ret == 0)
		ret = ix_rewrite_legacy(ix, ix->rollups, ix_rollup_check, UPGRADE_BATCH, others,
					damaged);
	return ret;
}

static int upgrade_values(struct sto_index *ix)
{
	uint64_t chunks = 0, others = 0, damaged = 0, sealed = 0;
	struct sto_txn *t = NULL;
	struct ix_sealed_db dbs[IX_NSEALED];
	rdb_info(SUBSYS, "LMDB index %s: upgrading to format %u (checksums in index values)",
		 ix->dir, STO_FORMAT_VERSION);
	int ret = ix->legacy_values ? upgrade_checksums(ix, &chunks, &others, &damaged) : 0;
	ix_sealed_dbs(ix, dbs);
	for (size_t i = 0; ret == 0 && ix->legacy_small && i < IX_NSEALED; i++)
		ret = ix_seal_legacy(ix, dbs[i].dbi, UPGRADE_BATCH, &sealed);
	if (ret == 0)
		ret = sto_txn_begin(ix, true, &t);
	if (ret == 0)
		ret = sto_meta_put(t, "format_version", STO_FORMAT_VERSION);
	if (ret == 0)
		ret = sto_txn_commit(t);
	else
		sto_txn_abort(t);
	if (ret != 0) {
		rdb_error(SUBSYS,
			  "LMDB index %s: the upgrade to format %u failed (%s); it is "
			  "finished at the next start",
			  ix->dir, STO_FORMAT_VERSION, rdb_strerror(ret));
		return ret;
	}
	ix->legacy_values = false;
	ix->legacy_small = false;
	rdb_info(SUBSYS,
		 "LMDB index %s: format %u: %llu chunk entries, %llu series catalog and "
		 "rollup values and %llu values of the other tables given a checksum%s",
		 ix->dir, STO_FORMAT_VERSION, (unsigned long long)chunks,
		 (unsigned long long)others, (unsigned long long)sealed,
		 damaged ? "; some entries do not decode and were left as they are: run "
			   "'rankctl verify'"
			 : "");
	return 0;
}

static int env_setup(struct sto_index *ix, const char *dir, uint64_t map_bytes, bool read_only)
{
	int rc = mdb_env_create(&ix->env);

	if (rc != 0)
		return ix_err(ix, rc, "create environment");
	rc = mdb_env_set_maxdbs(ix->env, IX_MAXDBS);
	if (rc == 0)
		rc = mdb_env_set_mapsize(ix->env, (size_t)map_bytes);
	if (rc == 0)
		rc = mdb_env_set_maxreaders(ix->env, IX_MAXREADERS);
	if (rc == 0)
		rc = mdb_env_open(
		    ix->env, dir,
		    MDB_NOTLS | MDB_NORDAHEAD | (read_only ? MDB_RDONLY | MDB_NOLOCK : 0), 0644);
	if (rc != 0) {
		rdb_error(SUBSYS, "cannot open LMDB index %s: %s", dir, mdb_strerror(rc));
		return ix_err(ix, rc, "open environment");
	}
	return 0;
}

/* Removes data.mdb.compact, an index compaction's copy that a crash left
 * before its rename (ix_compact.c): the index never used it. */
static int remove_compact_leftover(const char *dir)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/data.mdb.compact", dir);
	if (unlink(path) == 0) {
		rdb_warn(SUBSYS,
			 "removed %s, the copy of an interrupted index compaction "
			 "(the index in use is data.mdb)",
			 path);
		return 0;
	}
	return errno == ENOENT ? 0 : -errno;
}

/* Where LMDB mapped the file (it does not say): the mapping in
 * /proc/self/maps that holds a value read in a read transaction (those
 * point into the map). Left unknown (NULL) when anything fails. */
static void find_map(struct sto_index *ix)
{
	MDB_txn *txn = NULL;
	MDB_val k = {.mv_size = strlen("format_version"), .mv_data = (void *)"format_version"}, v;
	uintptr_t p = 0;
	if (mdb_txn_begin(ix->env, NULL, MDB_RDONLY, &txn) != 0)
		return;
	if (mdb_get(txn, ix->meta, &k, &v) == 0)
		p = (uintptr_t)v.mv_data;
	mdb_txn_abort(txn);
	FILE *f = p ? fopen("/proc/self/maps", "re") : NULL;
	char line[512];
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && p >= lo && p < hi) {
			ix->map_addr = (void *)lo;
			ix->map_len = hi - lo;
			break;
		}
	}
	if (f)
		fclose(f);
}

static void gate_enter(struct sto_index *ix, bool write);
static void gate_leave(struct sto_index *ix, bool write);

void sto_index_release_pages(struct sto_index *ix)
{
	int fd;
	struct stat st;
	if (!ix)
		return;
	gate_enter(ix, false); /* the map stays where it is (no index compaction swap) */
	if (ix->env && ix->map_addr && mdb_env_get_fd(ix->env, &fd) == 0 && fstat(fd, &st) == 0) {
		size_t len = (size_t)st.st_size < ix->map_len ? (size_t)st.st_size : ix->map_len;
		/* a shared, read-only file mapping: readers refault from the page cache */
		if (madvise(ix->map_addr, len, MADV_DONTNEED) != 0)
			rdb_debug(SUBSYS, "madvise of the index map failed: %s", strerror(errno));
	}
	gate_leave(ix, false);
}

static int index_open(const char *dir, uint64_t map_bytes, bool read_only, struct sto_index **out)
{
	struct sto_index *ix = NULL;
	struct sto_txn *t = NULL;
	int ret;

	if (!dir || map_bytes == 0 || map_bytes > SIZE_MAX)
		return -EINVAL;
	if (!read_only && mkdir(dir, 0755) != 0 && errno != EEXIST) {
		ret = -errno;
		rdb_error(SUBSYS, "cannot create index directory %s: %s", dir, strerror(-ret));
		return ret;
	}
	ix = calloc(1, sizeof(*ix));
	if (!ix)
		return -ENOMEM;
	pthread_mutex_init(&ix->gate_mu, NULL);
	pthread_cond_init(&ix->gate_cv, NULL);
	ix->read_only = read_only;
	ix->map_bytes = map_bytes;
	ix->dir = strdup(dir);
	ret = ix->dir ? 0 : -ENOMEM;
	if (ret == 0 && !read_only)
		ret = remove_compact_leftover(dir);
	if (ret == 0)
		ret = env_setup(ix, dir, map_bytes, read_only);
	if (ret != 0)
		goto out;
	ret = sto_txn_begin(ix, !read_only, &t);
	if (ret != 0)
		goto out;
	ret = open_dbs(ix, t->txn, read_only);
	if (ret == 0)
		ret = check_format(t, read_only);
	if (ret != 0)
		goto out;
	ret = sto_txn_commit(t); /* read-only too: an aborted txn closes its dbi handles */
	t = NULL;
	if (ret == 0 && (ix->legacy_values || ix->legacy_small) && !read_only)
		ret = upgrade_values(ix);
	if (ret != 0)
		goto out;
	find_map(ix);
	*out = ix;
	ix = NULL;
out:
	sto_txn_abort(t);
	sto_index_close(ix);
	return ret;
}

int sto_index_open(const char *dir, uint64_t map_bytes, struct sto_index **out)
{
	return index_open(dir, map_bytes, false, out);
}

int sto_index_open_ro(const char *dir, uint64_t map_bytes, struct sto_index **out)
{
	return index_open(dir, map_bytes, true, out);
}

int ix_reopen(struct sto_index *ix)
{
	MDB_txn *txn = NULL;
	int ret = env_setup(ix, ix->dir, ix->map_bytes, ix->read_only);

	if (ret == 0)
		ret = ix_err(ix, mdb_txn_begin(ix->env, NULL, ix->read_only ? MDB_RDONLY : 0, &txn),
			     "begin transaction");
	if (ret == 0) {
		ret = open_dbs(ix, txn, ix->read_only);
		int rc = ret == 0 ? mdb_txn_commit(txn) : (mdb_txn_abort(txn), 0);
		if (ret == 0)
			ret = ix_err(ix, rc, "commit");
	}
	if (ret != 0 && ix->env) {
		mdb_env_close(ix->env);
		ix->env = NULL;
	}
	if (ret == 0)
		find_map(ix); /* the new map is elsewhere */
	return ret;
}

void sto_index_close(struct sto_index *ix)
{
	if (!ix)
		return;
	if (ix->env)
		mdb_env_close(ix->env);
	pthread_cond_destroy(&ix->gate_cv);
	pthread_mutex_destroy(&ix->gate_mu);
	free(ix->dir);
	free(ix);
}

/* ---- transaction gate (see ix_int.h and ix_compact.c) --------------------- */

static void gate_enter(struct sto_index *ix, bool write)
{
	pthread_mutex_lock(&ix->gate_mu);
	while (ix->hold_all || (write && ix->hold_writers))
		pthread_cond_wait(&ix->gate_cv, &ix->gate_mu);
	if (write)
		ix->active_write++;
	else
		ix->active_read++;
	pthread_mutex_unlock(&ix->gate_mu);
}

static void gate_leave(struct sto_index *ix, bool write)
{
	pthread_mutex_lock(&ix->gate_mu);
	if (write)
		ix->active_write--;
	else
		ix->active_read--;
	if (ix->hold_writers)
		pthread_cond_broadcast(&ix->gate_cv);
	pthread_mutex_unlock(&ix->gate_mu);
}

/* Waits (gate_mu held) until the held kinds of transactions are all closed;
 * on timeout reopens the gate. */
static int gate_drain(struct sto_index *ix, uint32_t timeout_ms)
{
	struct timespec until;
	int ret = 0;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	while (ix->active_write || (ix->hold_all && ix->active_read)) {
		if (pthread_cond_timedwait(&ix->gate_cv, &ix->gate_mu, &until) == ETIMEDOUT &&
		    (ix->active_write || (ix->hold_all && ix->active_read))) {
			ix->hold_writers = ix->hold_all = false;
			pthread_cond_broadcast(&ix->gate_cv);
			ret = RDB_EBUSY;
			break;
		}
	}
	return ret;
}

int ix_gate_close(struct sto_index *ix, bool all, uint32_t timeout_ms)
{
	pthread_mutex_lock(&ix->gate_mu);
	ix->hold_writers = true;
	ix->hold_all = all;
	int ret = gate_drain(ix, timeout_ms);
	pthread_mutex_unlock(&ix->gate_mu);
	return ret;
}

int ix_gate_widen(struct sto_index *ix, uint32_t timeout_ms)
{
	return ix_gate_close(ix, true, timeout_ms);
}

void ix_gate_open(struct sto_index *ix)
{
	pthread_mutex_lock(&ix->gate_mu);
	ix->hold_writers = ix->hold_all = false;
	pthread_cond_broadcast(&ix->gate_cv);
	pthread_mutex_unlock(&ix->gate_mu);
}

int sto_txn_begin(struct sto_index *ix, bool write, struct sto_txn **out)
{
	struct sto_txn *t = calloc(1, sizeof(*t));
	int rc;

	if (!t)
		return -ENOMEM;
	gate_enter(ix, write);
	if (!ix->env) { /* a reopen after an index compaction failed (logged) */
		gate_leave(ix, write);
		free(t);
		return RDB_EIO;
	}
	rc = mdb_txn_begin(ix->env, NULL, write ? 0 : MDB_RDONLY, &t->txn);
	if (rc != 0) {
		gate_leave(ix, write);
		free(t);
		return ix_err(ix, rc, "begin transaction");
	}
	t->ix = ix;
	t->write = write;
	*out = t;
	return 0;
}

int sto_txn_commit(struct sto_txn *t)
{
	return sto_txn_commit_at(t, STO_FP_INDEX_COMMIT);
}

int sto_txn_commit_at(struct sto_txn *t, enum sto_fault_point point)
{
	int fault = t->write ? sto_fault_hit(point) : 0;
	if (fault == 0 && t->write && point != STO_FP_INDEX_COMMIT)
		fault = sto_fault_hit(STO_FP_INDEX_COMMIT);
	if (fault) {
		sto_txn_abort(t);
		return fault;
	}
	int rc = mdb_txn_commit(t->txn);
	int ret = ix_err(t->ix, rc, "commit");

	gate_leave(t->ix, t->write);
	free(t);
	return ret;
}

void sto_txn_abort(struct sto_txn *t)
{
	if (!t)
		return;
	mdb_txn_abort(t->txn);
	gate_leave(t->ix, t->write);
	free(t);
}

int ix_cursor_open(struct sto_txn *t, MDB_dbi dbi, MDB_cursor **cur)
{
	return ix_err(t->ix, mdb_cursor_open(t->txn, dbi, cur), "cursor open");
}

/* Positions cur at the first key >= prefix (or the first key when plen is 0). */
int ix_cursor_seek(struct sto_txn *t, MDB_cursor *cur, const void *prefix, size_t plen, MDB_val *k,
		   MDB_val *v)
{
	k->mv_data = (void *)prefix;
	k->mv_size = plen;
	return ix_err(t->ix, mdb_cursor_get(cur, k, v, plen ? MDB_SET_RANGE : MDB_FIRST),
		      "cursor seek");
}

int ix_cursor_next(struct sto_txn *t, MDB_cursor *cur, MDB_val *k, MDB_val *v)
{
	return ix_err(t->ix, mdb_cursor_get(cur, k, v, MDB_NEXT), "cursor next");
}

bool ix_has_prefix(const MDB_val *k, const uint8_t *prefix, size_t plen)
{
	return k->mv_size >= plen && memcmp(k->mv_data, prefix, plen) == 0;
}

/* Deletes the entries of a generation-keyed db (pending, evpending: keys
 * start with gen be64) with lo <= gen <= hi. Re-seeks after each delete
 * rather than relying on cursor position after mdb_cursor_del. */
int ix_gen_delete_range(struct sto_txn *t, MDB_dbi dbi, const char *what, uint64_t lo, uint64_t hi)
{
	uint8_t seek[8];
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int ret = ix_cursor_open(t, dbi, &cur);

	if (ret != 0)
		return ret;
	rdb_put_be64(seek, lo);
	for (;;) {
		ret = ix_cursor_seek(t, cur, seek, sizeof(seek), &k, &v);
		if (ret != 0)
			break;
		if (k.mv_size < 8) {
			ret = ix_corrupt(t, what, k.mv_size);
			break;
		}
		if (rdb_get_be64(k.mv_data) > hi)
			break;
		ret = ix_err(t->ix, mdb_cursor_del(cur, 0), what);
		if (ret != 0)
			break;
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
	mdb_cursor_close(cur);
	return ret;
}

int sto_index_copy(struct sto_index *ix, const char *dir)
{
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		return -errno;
	gate_enter(ix, false); /* its read snapshot keeps the environment open */
	int rc = ix->env ? mdb_env_copy2(ix->env, dir, MDB_CP_COMPACT) : EIO;
	gate_leave(ix, false);
	if (rc != 0)
		rdb_error(SUBSYS, "copy of LMDB index %s to %s failed: %s", ix->dir, dir,
			  mdb_strerror(rc));
	return ix_err(ix, rc, "copy environment");
}

int sto_index_check_all(struct sto_txn *t, uint64_t *entries)
{
	MDB_dbi dbs[] = {t->ix->meta,	   t->ix->series,     t->ix->sid,	 t->ix->pending,
			 t->ix->evpending, t->ix->batch_ids,  t->ix->batch_time, t->ix->tombstones,
			 t->ix->retention, t->ix->quarantine, t->ix->seg_trash,	 t->ix->rollups,
			 t->ix->supersede};
	uint64_t n = 0;
	int ret = 0;
	for (size_t i = 0; ret == 0 && i < sizeof(dbs) / sizeof(dbs[0]); i++) {
		MDB_cursor *cur = NULL;
		MDB_val k, v;
		ret = ix_cursor_open(t, dbs[i], &cur);
		if (ret != 0)
			break;
		for (ret = ix_cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
		     ret = ix_cursor_next(t, cur, &k, &v))
			n++;
		ret = ret == RDB_ENOTFOUND ? 0 : ret;
		mdb_cursor_close(cur);
	}
	*entries = n;
	return ret;
}

/* ---- value checks for verify ---------------------------------------------- */

/* Damaged values of the sealed tables but events (whose entries verify
 * checks with their chunks, as it does chunk entries). */
static int check_sealed(struct sto_txn *t, sto_index_problem_fn fn, void *arg, uint64_t *damaged)
{
	struct ix_sealed_db dbs[IX_NSEALED];
	char msg[1024], key[300];
	int ret = 0;
	ix_sealed_dbs(t->ix, dbs);
	for (size_t i = 0; ret == 0 && i < IX_NSEALED; i++) {
		MDB_cursor *cur = NULL;
		MDB_val k, v, body;
		if (dbs[i].dbi == t->ix->events)
			continue;
		ret = ix_cursor_open(t, dbs[i].dbi, &cur);
		if (ret != 0)
			break;
		for (ret = ix_cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
		     ret = ix_cursor_next(t, cur, &k, &v)) {
			if (ix_unseal(t, &k, &v, &body) >= 0)
				continue;
			(*damaged)++;
			ix_key_text(&k, key, sizeof(key));
			snprintf(msg, sizeof(msg), "%s entry with key '%s': checksum mismatch; %s",
				 dbs[i].name, key, dbs[i].remedy);
			if (fn)
				fn(arg, msg);
		}
		ret = ret == RDB_ENOTFOUND ? 0 : ret;
		mdb_cursor_close(cur);
	}
	return ret;
}

static void describe(const MDB_val *k, int which, const char *why, char *msg, size_t size)
{
	const uint8_t *p = k->mv_data;
	if (which == 2 && k->mv_size == 17)
		snprintf(msg, size,
			 "rollup record of series %llu, tier %u, bucket %lld: %s; queries over it "
			 "fail; rollups are not derived data: restore index/ from a backup",
			 (unsigned long long)rdb_get_be64(p), p[8],
			 (long long)(rdb_get_be64(p + 9) ^ TS_FLIP), why);
	else if (which == 1 && k->mv_size == 8)
		snprintf(msg, size,
			 "series catalog entry of series id %llu (id -> key): %s; queries of it "
			 "fail; 'rankctl rebuild-index' recreates the catalog",
			 (unsigned long long)rdb_get_be64(p), why);
	else
		snprintf(msg, size,
			 "series catalog entry '%.*s' (key -> id; job, 0, rank, metric): %s; "
			 "queries of it fail; 'rankctl rebuild-index' recreates the catalog",
			 (int)(k->mv_size > 300 ? 300 : k->mv_size), (const char *)p, why);
}

int sto_index_check_values(struct sto_txn *t, sto_index_problem_fn fn, void *arg, uint64_t *damaged)
{
	MDB_dbi dbs[3] = {t->ix->series, t->ix->sid, t->ix->rollups};
	ix_check_fn checks[3] = {ix_series_check, ix_sid_check, ix_rollup_check};
	uint8_t fixed[IX_VALUE_MAX];
	char msg[1024];
	int ret = 0;
	for (int i = 0; ret == 0 && i < 3; i++) {
		MDB_cursor *cur = NULL;
		MDB_val k, v;
		ret = ix_cursor_open(t, dbs[i], &cur);
		if (ret != 0)
			break;
		for (ret = ix_cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
		     ret = ix_cursor_next(t, cur, &k, &v)) {
			size_t n;
			const char *why;
			if (checks[i](t, &k, &v, fixed, &n, &why) >= 0)
				continue;
			(*damaged)++;
			describe(&k, i, why, msg, sizeof(msg));
			if (fn)
				fn(arg, msg);
		}
		ret = ret == RDB_ENOTFOUND ? 0 : ret;
		mdb_cursor_close(cur);
	}
	return ret == 0 ? check_sealed(t, fn, arg, damaged) : ret;
}
