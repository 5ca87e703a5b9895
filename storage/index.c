/* index.c - the LMDB index and catalog: series ids, chunk entries with their
 * statistics, pending chunks and meta counters (the contract is index.h).
 * This is the only file that includes lmdb.h; MDB_* codes become negative
 * errno / RDB_E* here and nowhere else.
 *
 * Design
 *   One LMDB environment (index/) with named databases, all opened
 *   with MDB_CREATE in a single write transaction by sto_index_open() (the
 *   main five below; the data-lifecycle ones and `supersede` are described
 *   with their functions):
 *     meta     key: the name's bytes (no NUL)      value: u64 LE (8 bytes)
 *     series   key: job, 0x00, rank be32, metric   value: series id u64 LE
 *     sid      key: series id be64                 value: the series key bytes
 *     chunks   key: chunk key (24 bytes, below)    value: chunk entry (120 bytes)
 *     pending  key: gen be64 + chunk key (32)      value: empty
 *   Chunk key: series id be64, min_ts as be64 of ((uint64_t)min_ts ^ 2^63)
 *   (so negative timestamps sort first), uid be64. Keys are big-endian so
 *   LMDB's memcmp order is numeric order; values are little-endian.
 *
 * Chunk entry value, version 1, 128 bytes, little-endian:
 *     0  u8      entry version (1)
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
 *   series id and uid live only in the key.
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
#include "storage/index.h"

#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"

#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define SUBSYS "index"

#define IX_MAXDBS	16
#define IX_MAXREADERS	256
#define IX_META_KEY_MAX 255u

#define CHUNK_KEY_SIZE	 24u
#define PENDING_KEY_SIZE (8u + CHUNK_KEY_SIZE)
#define SERIES_KEY_MAX	 (MDL_JOB_MAX + 1u + 4u + MDL_METRIC_MAX)

/* Chunk entry value v1: byte offsets (see the top comment). */
#define ENTRY_VERSION 1u
enum {
	E_VERSION = 0,
	E_GROUP_N = 1, /* 0, or the member count of the group record */
	E_MEMBER = 2,  /* member number within the group record */
	E_LENGTH = 4,
	E_SEGMENT = 8,
	E_OFFSET = 16,
	E_GEN = 24,
	E_COUNT = 32,
	E_NAN_COUNT = 36,
	E_MIN_TS = 40,
	E_MAX_TS = 48,
	E_MIN_STEP = 56,
	E_MAX_STEP = 64,
	E_MIN_ATTEMPT = 72,
	E_MAX_ATTEMPT = 76,
	E_MIN = 80,
	E_MAX = 88,
	E_SUM = 96,
	E_FIRST = 104,
	E_LAST = 112,
	E_STEP_COUNT = 120,
	E_HEAD_LEN = 124, /* group members: head length H of the group record */
	ENTRY_SIZE = 128,
};
_Static_assert(ENTRY_SIZE == 128 && E_HEAD_LEN + 4 == ENTRY_SIZE, "chunk entry v1 is 128 bytes");
_Static_assert(SERIES_KEY_MAX <= 511u, "series key fits LMDB's default max key size");

#define TS_FLIP 0x8000000000000000ull

struct sto_index {
	MDB_env *env;
	MDB_dbi meta, series, sid, chunks, pending;
	MDB_dbi events, evpending, batch_ids, batch_time;
	MDB_dbi tombstones, retention, quarantine, seg_trash; /* data lifecycle */
	MDB_dbi rollups;    /* aggregates of data retention dropped (not derived) */
	MDB_dbi supersede;  /* merged uid -> supersede entry (small-chunk merges) */
	uint64_t map_bytes; /* as configured, for the map-full log line */
	char *dir;	    /* owned copy, for log lines */
	void *map_addr;	    /* LMDB's map of the file (find_map); NULL: unknown */
	size_t map_len;
};

struct sto_txn {
	MDB_txn *txn;
	struct sto_index *ix;
	bool write;
};

/* ---- error border -------------------------------------------------------- */

static int ix_err(const struct sto_index *ix, int rc, const char *op)
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
		if (rc > 0)
			return -rc;
		rdb_log_limited(&rl_other, 10, RDB_LOG_ERROR, SUBSYS,
				"%s: LMDB index %s: unexpected error %d (%s)", op, dir, rc,
				mdb_strerror(rc));
		return RDB_EIO;
	}
}

static int corrupt(const struct sto_txn *t, const char *what, size_t size)
{
	static struct rdb_log_ratelimit rl;

	rdb_log_limited(&rl, 10, RDB_LOG_ERROR, SUBSYS,
			"LMDB index %s: %s (%zu bytes) is malformed; the operation failed; "
			"the index is derived data: rebuild it from the segment files",
			t->ix->dir, what, size);
	return RDB_ECORRUPT;
}

/* ---- encoding ------------------------------------------------------------ */

static void chunk_key_put(uint8_t *p, uint64_t series_id, int64_t min_ts_ns, uint64_t uid)
{
	rdb_put_be64(p, series_id);
	rdb_put_be64(p + 8, (uint64_t)min_ts_ns ^ TS_FLIP);
	rdb_put_be64(p + 16, uid);
}

static void chunk_key_get(const uint8_t *p, uint64_t *series_id, int64_t *min_ts_ns, uint64_t *uid)
{
	*series_id = rdb_get_be64(p);
	*min_ts_ns = (int64_t)(rdb_get_be64(p + 8) ^ TS_FLIP);
	*uid = rdb_get_be64(p + 16);
}

static void entry_encode(const struct sto_chunk_ref *r, uint8_t *p)
{
	const struct sto_chunk_stats *s = &r->stats;

	memset(p, 0, ENTRY_SIZE);
	p[E_VERSION] = ENTRY_VERSION;
	p[E_GROUP_N] = r->group_n;
	p[E_MEMBER] = r->member;
	rdb_put_le32(p + E_LENGTH, r->length);
	rdb_put_le64(p + E_SEGMENT, r->segment_id);
	rdb_put_le64(p + E_OFFSET, r->offset);
	rdb_put_le64(p + E_GEN, r->gen);
	rdb_put_le32(p + E_COUNT, s->count);
	rdb_put_le32(p + E_NAN_COUNT, s->nan_count);
	rdb_put_le64(p + E_MIN_TS, (uint64_t)s->min_ts_ns);
	rdb_put_le64(p + E_MAX_TS, (uint64_t)s->max_ts_ns);
	rdb_put_le64(p + E_MIN_STEP, (uint64_t)s->min_step);
	rdb_put_le64(p + E_MAX_STEP, (uint64_t)s->max_step);
	rdb_put_le32(p + E_MIN_ATTEMPT, s->min_attempt);
	rdb_put_le32(p + E_MAX_ATTEMPT, s->max_attempt);
	rdb_put_le64(p + E_MIN, rdb_f64_bits(s->min));
	rdb_put_le64(p + E_MAX, rdb_f64_bits(s->max));
	rdb_put_le64(p + E_SUM, rdb_f64_bits(s->sum));
	rdb_put_le64(p + E_FIRST, s->first);
	rdb_put_le64(p + E_LAST, s->last);
	rdb_put_le32(p + E_STEP_COUNT, s->step_count);
	rdb_put_le32(p + E_HEAD_LEN, r->head_len);
}

/* Fills everything but series_id, uid and stats.min_ts_ns (taken from the
 * key by the caller, who checks the duplicate). RDB_ECORRUPT if malformed. */
static int entry_decode(const uint8_t *p, size_t n, struct sto_chunk_ref *r)
{
	struct sto_chunk_stats *s = &r->stats;

	if (n != ENTRY_SIZE || p[E_VERSION] != ENTRY_VERSION)
		return RDB_ECORRUPT;
	r->group_n = p[E_GROUP_N];
	r->member = p[E_MEMBER];
	r->head_len = rdb_get_le32(p + E_HEAD_LEN);
	if (r->group_n == 1 || (r->group_n && r->member >= r->group_n))
		return RDB_ECORRUPT;
	r->length = rdb_get_le32(p + E_LENGTH);
	r->segment_id = rdb_get_le64(p + E_SEGMENT);
	r->offset = rdb_get_le64(p + E_OFFSET);
	r->gen = rdb_get_le64(p + E_GEN);
	s->count = rdb_get_le32(p + E_COUNT);
	s->nan_count = rdb_get_le32(p + E_NAN_COUNT);
	s->min_ts_ns = (int64_t)rdb_get_le64(p + E_MIN_TS);
	s->max_ts_ns = (int64_t)rdb_get_le64(p + E_MAX_TS);
	s->min_step = (int64_t)rdb_get_le64(p + E_MIN_STEP);
	s->max_step = (int64_t)rdb_get_le64(p + E_MAX_STEP);
	s->min_attempt = rdb_get_le32(p + E_MIN_ATTEMPT);
	s->max_attempt = rdb_get_le32(p + E_MAX_ATTEMPT);
	s->min = rdb_bits_f64(rdb_get_le64(p + E_MIN));
	s->max = rdb_bits_f64(rdb_get_le64(p + E_MAX));
	s->sum = rdb_bits_f64(rdb_get_le64(p + E_SUM));
	s->first = rdb_get_le64(p + E_FIRST);
	s->last = rdb_get_le64(p + E_LAST);
	s->step_count = rdb_get_le32(p + E_STEP_COUNT);
	if (s->max_ts_ns < s->min_ts_ns || s->step_count > s->count)
		return RDB_ECORRUPT;
	return 0;
}

/* Decodes a chunks-db key/value pair into *r. */
static int chunk_decode(const struct sto_txn *t, const MDB_val *k, const MDB_val *v,
			struct sto_chunk_ref *r)
{
	int64_t key_min_ts;

	if (k->mv_size != CHUNK_KEY_SIZE)
		return corrupt(t, "chunk key", k->mv_size);
	memset(r, 0, sizeof(*r));
	chunk_key_get(k->mv_data, &r->series_id, &key_min_ts, &r->uid);
	if (entry_decode(v->mv_data, v->mv_size, r) != 0 || r->stats.min_ts_ns != key_min_ts)
		return corrupt(t, "chunk entry", v->mv_size);
	return 0;
}

/* Encodes k into buf (SERIES_KEY_MAX bytes); RDB_EINVAL on bad lengths. */
static int series_key_encode(const struct mdl_series_key *k, uint8_t *buf, size_t *len)
{
	size_t jl = strnlen(k->job, MDL_JOB_MAX + 1);
	size_t ml = strnlen(k->metric, MDL_METRIC_MAX + 1);

	if (jl == 0 || jl > MDL_JOB_MAX || ml == 0 || ml > MDL_METRIC_MAX)
		return RDB_EINVAL;
	memcpy(buf, k->job, jl);
	buf[jl] = 0;
	rdb_put_be32(buf + jl + 1, k->rank);
	memcpy(buf + jl + 5, k->metric, ml);
	*len = jl + 5 + ml;
	return 0;
}

static int series_key_decode(const struct sto_txn *t, const MDB_val *v, struct mdl_series_key *out)
{
	const uint8_t *p = v->mv_data;
	size_t n = v->mv_size;
	size_t scan = n < MDL_JOB_MAX + 1 ? n : MDL_JOB_MAX + 1;
	const uint8_t *nul = memchr(p, 0, scan);
	size_t jl, ml;

	if (!nul || nul == p || n - (size_t)(nul - p) - 1 < 5)
		return corrupt(t, "series key", n);
	jl = (size_t)(nul - p);
	ml = n - jl - 5;
	if (ml > MDL_METRIC_MAX || memchr(p + jl + 5, 0, ml))
		return corrupt(t, "series key", n);
	memcpy(out->job, p, jl);
	out->job[jl] = 0;
	out->rank = rdb_get_be32(p + jl + 1);
	memcpy(out->metric, p + jl + 5, ml);
	out->metric[ml] = 0;
	return 0;
}

static int u64_value(const struct sto_txn *t, const MDB_val *v, const char *what, uint64_t *out)
{
	if (v->mv_size != 8)
		return corrupt(t, what, v->mv_size);
	*out = rdb_get_le64(v->mv_data);
	return 0;
}

/* ---- environment and transactions ---------------------------------------- */

static int open_dbs(struct sto_index *ix, MDB_txn *txn, bool read_only)
{
	static const char *const names[] = {"meta",	  "series",	"sid",	     "chunks",
					    "pending",	  "events",	"evpending", "batch_ids",
					    "batch_time", "tombstones", "retention", "quarantine",
					    "seg_trash",  "rollups",	"supersede"};
	MDB_dbi *dbis[] = {&ix->meta,	    &ix->series,     &ix->sid,	     &ix->chunks,
			   &ix->pending,    &ix->events,     &ix->evpending, &ix->batch_ids,
			   &ix->batch_time, &ix->tombstones, &ix->retention, &ix->quarantine,
			   &ix->seg_trash,  &ix->rollups,    &ix->supersede};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		int rc = mdb_dbi_open(txn, names[i], read_only ? 0 : MDB_CREATE, dbis[i]);
		if (rc == MDB_NOTFOUND && read_only)
			rdb_error(SUBSYS,
				  "LMDB index %s has no database '%s' (written by an older "
				  "rankdbd): start rankdbd on it once to upgrade it, then retry",
				  ix->dir, names[i]);
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
	int ret = sto_meta_get(t, "format_version", &found);

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
	if (found < STO_FORMAT_VERSION && !read_only) /* upgraded in place: see format.h */
		return sto_meta_put(t, "format_version", STO_FORMAT_VERSION);
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
		rc = mdb_env_open(ix->env, dir,
				  MDB_NOTLS | MDB_NORDAHEAD |
				      (read_only ? MDB_RDONLY | MDB_NOLOCK : 0),
				  0644);
	if (rc != 0) {
		rdb_error(SUBSYS, "cannot open LMDB index %s: %s", dir, mdb_strerror(rc));
		return ix_err(ix, rc, "open environment");
	}
	return 0;
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

void sto_index_release_pages(struct sto_index *ix)
{
	int fd;
	struct stat st;
	if (!ix || !ix->map_addr || mdb_env_get_fd(ix->env, &fd) != 0 || fstat(fd, &st) != 0)
		return;
	size_t len = (size_t)st.st_size < ix->map_len ? (size_t)st.st_size : ix->map_len;
	/* a shared, read-only file mapping: readers refault from the page cache */
	if (madvise(ix->map_addr, len, MADV_DONTNEED) != 0)
		rdb_debug(SUBSYS, "madvise of the index map failed: %s", strerror(errno));
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
	ix->map_bytes = map_bytes;
	ix->dir = strdup(dir);
	ret = ix->dir ? env_setup(ix, dir, map_bytes, read_only) : -ENOMEM;
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

void sto_index_close(struct sto_index *ix)
{
	if (!ix)
		return;
	if (ix->env)
		mdb_env_close(ix->env);
	free(ix->dir);
	free(ix);
}

int sto_txn_begin(struct sto_index *ix, bool write, struct sto_txn **out)
{
	struct sto_txn *t = calloc(1, sizeof(*t));
	int rc;

	if (!t)
		return -ENOMEM;
	rc = mdb_txn_begin(ix->env, NULL, write ? 0 : MDB_RDONLY, &t->txn);
	if (rc != 0) {
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
	int rc = mdb_txn_commit(t->txn);
	int ret = ix_err(t->ix, rc, "commit");

	free(t);
	return ret;
}

void sto_txn_abort(struct sto_txn *t)
{
	if (!t)
		return;
	mdb_txn_abort(t->txn);
	free(t);
}

/* ---- meta ---------------------------------------------------------------- */

static int meta_key(const char *key, MDB_val *k)
{
	size_t n = key ? strnlen(key, IX_META_KEY_MAX + 1) : 0;

	if (n == 0 || n > IX_META_KEY_MAX)
		return -EINVAL;
	k->mv_data = (void *)key;
	k->mv_size = n;
	return 0;
}

int sto_meta_get(struct sto_txn *t, const char *key, uint64_t *out)
{
	MDB_val k, v;
	int ret = meta_key(key, &k);

	if (ret != 0)
		return ret;
	ret = ix_err(t->ix, mdb_get(t->txn, t->ix->meta, &k, &v), "meta get");
	if (ret != 0)
		return ret;
	return u64_value(t, &v, "meta value", out);
}

int sto_meta_put(struct sto_txn *t, const char *key, uint64_t val)
{
	uint8_t buf[8];
	MDB_val k, v = {.mv_size = sizeof(buf), .mv_data = buf};
	int ret = meta_key(key, &k);

	if (ret != 0)
		return ret;
	rdb_put_le64(buf, val);
	return ix_err(t->ix, mdb_put(t->txn, t->ix->meta, &k, &v, 0), "meta put");
}

/* Counter read-and-increment; absent reads as absent_val. */
static int meta_next(struct sto_txn *t, const char *key, uint64_t absent_val, uint64_t *out)
{
	uint64_t cur;
	int ret;

	if (!t->write)
		return -EACCES;
	ret = sto_meta_get(t, key, &cur);
	if (ret == RDB_ENOTFOUND)
		cur = absent_val;
	else if (ret != 0)
		return ret;
	if (cur == UINT64_MAX)
		return RDB_ELIMIT;
	ret = sto_meta_put(t, key, cur + 1);
	if (ret == 0)
		*out = cur;
	return ret;
}

int sto_meta_next(struct sto_txn *t, const char *key, uint64_t *out)
{
	return meta_next(t, key, 0, out);
}

/* ---- series -------------------------------------------------------------- */

int sto_series_lookup(struct sto_txn *t, const struct mdl_series_key *k, uint64_t *id)
{
	uint8_t buf[SERIES_KEY_MAX];
	MDB_val key = {.mv_data = buf}, v;
	int ret = series_key_encode(k, buf, &key.mv_size);

	if (ret != 0)
		return ret;
	ret = ix_err(t->ix, mdb_get(t->txn, t->ix->series, &key, &v), "series lookup");
	if (ret != 0)
		return ret;
	return u64_value(t, &v, "series id value", id);
}

static int series_create(struct sto_txn *t, const MDB_val *skey, uint64_t *id)
{
	uint8_t idle[8], idbe[8];
	MDB_val k = *skey, v = {.mv_size = 8, .mv_data = idle};
	MDB_val sk = {.mv_size = 8, .mv_data = idbe}, sv = *skey;
	uint64_t nid;
	int ret = meta_next(t, "next_series_id", 1, &nid);

	if (ret != 0)
		return ret;
	if (nid == 0)
		return corrupt(t, "meta next_series_id (0)", 8);
	rdb_put_le64(idle, nid);
	rdb_put_be64(idbe, nid);
	ret = ix_err(t->ix, mdb_put(t->txn, t->ix->sid, &sk, &sv, MDB_NOOVERWRITE), "sid put");
	if (ret == -EEXIST)
		return corrupt(t, "meta next_series_id (already used)", 8);
	if (ret != 0)
		return ret;
	ret = ix_err(t->ix, mdb_put(t->txn, t->ix->series, &k, &v, MDB_NOOVERWRITE), "series put");
	if (ret == 0)
		*id = nid;
	return ret;
}

int sto_series_get_or_create(struct sto_txn *t, const struct mdl_series_key *k, uint64_t *id,
			     bool *created)
{
	uint8_t buf[SERIES_KEY_MAX];
	MDB_val key = {.mv_data = buf}, v;
	int ret = series_key_encode(k, buf, &key.mv_size);

	if (ret != 0)
		return ret;
	if (!t->write)
		return -EACCES;
	ret = ix_err(t->ix, mdb_get(t->txn, t->ix->series, &key, &v), "series lookup");
	if (ret == 0) {
		ret = u64_value(t, &v, "series id value", id);
		if (ret == 0)
			*created = false;
		return ret;
	}
	if (ret != RDB_ENOTFOUND)
		return ret;
	ret = series_create(t, &key, id);
	if (ret == 0)
		*created = true;
	return ret;
}

int sto_series_key_of(struct sto_txn *t, uint64_t id, struct mdl_series_key *out)
{
	uint8_t buf[8];
	MDB_val k = {.mv_size = 8, .mv_data = buf}, v;
	int ret;

	rdb_put_be64(buf, id);
	ret = ix_err(t->ix, mdb_get(t->txn, t->ix->sid, &k, &v), "sid get");
	if (ret != 0)
		return ret;
	return series_key_decode(t, &v, out);
}

static int cursor_open(struct sto_txn *t, MDB_dbi dbi, MDB_cursor **cur)
{
	return ix_err(t->ix, mdb_cursor_open(t->txn, dbi, cur), "cursor open");
}

/* Positions cur at the first key >= prefix (or the first key when plen is 0). */
static int cursor_seek(struct sto_txn *t, MDB_cursor *cur, const void *prefix, size_t plen,
		       MDB_val *k, MDB_val *v)
{
	k->mv_data = (void *)prefix;
	k->mv_size = plen;
	return ix_err(t->ix, mdb_cursor_get(cur, k, v, plen ? MDB_SET_RANGE : MDB_FIRST),
		      "cursor seek");
}

static int cursor_next(struct sto_txn *t, MDB_cursor *cur, MDB_val *k, MDB_val *v)
{
	return ix_err(t->ix, mdb_cursor_get(cur, k, v, MDB_NEXT), "cursor next");
}

static bool has_prefix(const MDB_val *k, const uint8_t *prefix, size_t plen)
{
	return k->mv_size >= plen && memcmp(k->mv_data, prefix, plen) == 0;
}

int sto_series_scan(struct sto_txn *t, const char *job, sto_series_fn fn, void *arg)
{
	uint8_t prefix[MDL_JOB_MAX + 1];
	size_t plen = 0;
	struct mdl_series_key key;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	uint64_t id;
	int ret;

	if (job) {
		plen = strnlen(job, MDL_JOB_MAX + 1);
		if (plen == 0 || plen > MDL_JOB_MAX)
			return RDB_EINVAL;
		memcpy(prefix, job, plen);
		prefix[plen++] = 0;
	}
	ret = cursor_open(t, t->ix->series, &cur);
	if (ret != 0)
		return ret;
	for (ret = cursor_seek(t, cur, prefix, plen, &k, &v); ret == 0;
	     ret = cursor_next(t, cur, &k, &v)) {
		if (!has_prefix(&k, prefix, plen))
			break;
		ret = series_key_decode(t, &k, &key);
		if (ret == 0)
			ret = u64_value(t, &v, "series id value", &id);
		if (ret == 0)
			ret = fn(arg, &key, id);
		if (ret != 0)
			goto out;
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
out:
	mdb_cursor_close(cur);
	return ret;
}

int sto_jobs_scan(struct sto_txn *t, sto_job_fn fn, void *arg)
{
	char job[MDL_JOB_MAX + 1] = "";
	uint64_t n = 0;
	struct mdl_series_key key;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int ret = cursor_open(t, t->ix->series, &cur);

	if (ret != 0)
		return ret;
	for (ret = cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
	     ret = cursor_next(t, cur, &k, &v)) {
		ret = series_key_decode(t, &k, &key);
		if (ret != 0)
			goto out;
		if (n > 0 && strcmp(job, key.job) != 0) {
			ret = fn(arg, job, n);
			if (ret != 0)
				goto out;
			n = 0;
		}
		if (n == 0)
			memcpy(job, key.job, sizeof(job));
		n++;
	}
	if (ret != RDB_ENOTFOUND)
		goto out;
	ret = n > 0 ? fn(arg, job, n) : 0;
out:
	mdb_cursor_close(cur);
	return ret;
}

/* ---- chunks -------------------------------------------------------------- */

int sto_chunk_put(struct sto_txn *t, const struct sto_chunk_ref *ref)
{
	uint8_t kb[CHUNK_KEY_SIZE], vb[ENTRY_SIZE];
	MDB_val k = {.mv_size = sizeof(kb), .mv_data = kb};
	MDB_val v = {.mv_size = sizeof(vb), .mv_data = vb};

	if (ref->stats.max_ts_ns < ref->stats.min_ts_ns)
		return -EINVAL;
	chunk_key_put(kb, ref->series_id, ref->stats.min_ts_ns, ref->uid);
	entry_encode(ref, vb);
	return ix_err(t->ix, mdb_put(t->txn, t->ix->chunks, &k, &v, 0), "chunk put");
}

int sto_chunk_del(struct sto_txn *t, uint64_t series_id, int64_t min_ts_ns, uint64_t uid)
{
	uint8_t kb[CHUNK_KEY_SIZE];
	MDB_val k = {.mv_size = sizeof(kb), .mv_data = kb};

	chunk_key_put(kb, series_id, min_ts_ns, uid);
	return ix_err(t->ix, mdb_del(t->txn, t->ix->chunks, &k, NULL), "chunk del");
}

int sto_chunk_scan(struct sto_txn *t, uint64_t series_id, int64_t from_ns, int64_t to_ns,
		   sto_chunk_fn fn, void *arg)
{
	uint8_t seek[CHUNK_KEY_SIZE];
	struct sto_chunk_ref ref;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int ret;

	if (from_ns > to_ns)
		return 0;
	chunk_key_put(seek, series_id, INT64_MIN, 0);
	ret = cursor_open(t, t->ix->chunks, &cur);
	if (ret != 0)
		return ret;
	for (ret = cursor_seek(t, cur, seek, sizeof(seek), &k, &v); ret == 0;
	     ret = cursor_next(t, cur, &k, &v)) {
		if (!has_prefix(&k, seek, 8))
			break;
		ret = chunk_decode(t, &k, &v, &ref);
		if (ret != 0)
			goto out;
		if (ref.stats.min_ts_ns > to_ns)
			break;
		if (ref.stats.max_ts_ns >= from_ns)
			ret = fn(arg, &ref);
		if (ret != 0)
			goto out;
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
out:
	mdb_cursor_close(cur);
	return ret;
}

/* ---- pending ------------------------------------------------------------- */

int sto_pending_add(struct sto_txn *t, uint64_t gen, const struct sto_chunk_ref *ref)
{
	uint8_t kb[PENDING_KEY_SIZE];
	MDB_val k = {.mv_size = sizeof(kb), .mv_data = kb}, v = {.mv_size = 0, .mv_data = kb};

	rdb_put_be64(kb, gen);
	chunk_key_put(kb + 8, ref->series_id, ref->stats.min_ts_ns, ref->uid);
	return ix_err(t->ix, mdb_put(t->txn, t->ix->pending, &k, &v, 0), "pending add");
}

int sto_pending_scan(struct sto_txn *t, uint64_t after_gen, sto_chunk_fn fn, void *arg)
{
	uint8_t seek[8];
	struct sto_chunk_ref ref;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int ret;

	if (after_gen == UINT64_MAX)
		return 0;
	rdb_put_be64(seek, after_gen + 1);
	ret = cursor_open(t, t->ix->pending, &cur);
	if (ret != 0)
		return ret;
	for (ret = cursor_seek(t, cur, seek, sizeof(seek), &k, &v); ret == 0;
	     ret = cursor_next(t, cur, &k, &v)) {
		if (k.mv_size != PENDING_KEY_SIZE) {
			ret = corrupt(t, "pending key", k.mv_size);
			goto out;
		}
		memset(&ref, 0, sizeof(ref));
		ref.gen = rdb_get_be64(k.mv_data);
		chunk_key_get((const uint8_t *)k.mv_data + 8, &ref.series_id, &ref.stats.min_ts_ns,
			      &ref.uid);
		ret = fn(arg, &ref);
		if (ret != 0)
			goto out;
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
out:
	mdb_cursor_close(cur);
	return ret;
}

/* Deletes the entries of a generation-keyed db (pending, evpending: keys
 * start with gen be64) with lo <= gen <= hi. Re-seeks after each delete
 * rather than relying on cursor position after mdb_cursor_del. */
static int gen_delete_range(struct sto_txn *t, MDB_dbi dbi, const char *what, uint64_t lo,
			    uint64_t hi)
{
	uint8_t seek[8];
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int ret = cursor_open(t, dbi, &cur);

	if (ret != 0)
		return ret;
	rdb_put_be64(seek, lo);
	for (;;) {
		ret = cursor_seek(t, cur, seek, sizeof(seek), &k, &v);
		if (ret != 0)
			break;
		if (k.mv_size < 8) {
			ret = corrupt(t, what, k.mv_size);
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

int sto_pending_clear(struct sto_txn *t, uint64_t upto_gen)
{
	return gen_delete_range(t, t->ix->pending, "pending key", 0, upto_gen);
}

int sto_pending_drop_after(struct sto_txn *t, uint64_t after_gen)
{
	if (after_gen == UINT64_MAX)
		return 0;
	return gen_delete_range(t, t->ix->pending, "pending key", after_gen + 1, UINT64_MAX);
}

/* ---- event chunks ------------------------------------------------------------
 * events     key: job, 0x00, min_ts be64 (sign flipped), uid be64
 *            value: the event chunk entry (layout in storage/format.h)
 * evpending  key: gen be64, then the events key; value: empty
 */

static size_t ev_key_put(uint8_t *p, const char *job, int64_t min_ts_ns, uint64_t uid)
{
	size_t jl = strlen(job);
	memcpy(p, job, jl);
	p[jl] = 0;
	rdb_put_be64(p + jl + 1, (uint64_t)min_ts_ns ^ TS_FLIP);
	rdb_put_be64(p + jl + 9, uid);
	return jl + 17;
}

static int ev_key_get(const struct sto_txn *t, const uint8_t *p, size_t n, char *job,
		      int64_t *min_ts_ns, uint64_t *uid)
{
	const uint8_t *nul = n > 17 ? memchr(p, 0, n - 16) : NULL;
	size_t jl = nul ? (size_t)(nul - p) : 0;
	if (!nul || jl == 0 || jl > MDL_JOB_MAX || jl + 17 != n)
		return corrupt(t, "event chunk key", n);
	memcpy(job, p, jl);
	job[jl] = 0;
	*min_ts_ns = (int64_t)(rdb_get_be64(p + jl + 1) ^ TS_FLIP);
	*uid = rdb_get_be64(p + jl + 9);
	return 0;
}

int sto_evidx_put(struct sto_txn *t, const char *job, int64_t min_ts_ns, uint64_t uid,
		  const void *val, size_t len)
{
	uint8_t kb[MDL_JOB_MAX + 17];
	MDB_val k = {.mv_size = ev_key_put(kb, job, min_ts_ns, uid), .mv_data = kb};
	MDB_val v = {.mv_size = len, .mv_data = (void *)val};
	return ix_err(t->ix, mdb_put(t->txn, t->ix->events, &k, &v, 0), "event chunk put");
}

int sto_evidx_del(struct sto_txn *t, const char *job, int64_t min_ts_ns, uint64_t uid)
{
	uint8_t kb[MDL_JOB_MAX + 17];
	MDB_val k = {.mv_size = ev_key_put(kb, job, min_ts_ns, uid), .mv_data = kb};
	return ix_err(t->ix, mdb_del(t->txn, t->ix->events, &k, NULL), "event chunk del");
}

int sto_evidx_scan(struct sto_txn *t, const char *job, int64_t to_ns, sto_evidx_fn fn, void *arg)
{
	uint8_t seek[MDL_JOB_MAX + 17];
	size_t plen = strlen(job) + 1;
	char kjob[MDL_JOB_MAX + 1];
	int64_t min_ts;
	uint64_t uid;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	ev_key_put(seek, job, INT64_MIN, 0);
	int ret = cursor_open(t, t->ix->events, &cur);
	if (ret != 0)
		return ret;
	for (ret = cursor_seek(t, cur, seek, plen + 16, &k, &v); ret == 0;
	     ret = cursor_next(t, cur, &k, &v)) {
		if (!has_prefix(&k, seek, plen))
			break;
		ret = ev_key_get(t, k.mv_data, k.mv_size, kjob, &min_ts, &uid);
		if (ret != 0)
			goto out;
		if (min_ts > to_ns)
			break;
		ret = fn(arg, min_ts, uid, v.mv_data, v.mv_size);
		if (ret != 0)
			goto out;
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
out:
	mdb_cursor_close(cur);
	return ret;
}

int sto_evpending_add(struct sto_txn *t, uint64_t gen, const char *job, int64_t min_ts_ns,
		      uint64_t uid)
{
	uint8_t kb[8 + MDL_JOB_MAX + 17];
	rdb_put_be64(kb, gen);
	MDB_val k = {.mv_size = 8 + ev_key_put(kb + 8, job, min_ts_ns, uid), .mv_data = kb};
	MDB_val v = {.mv_size = 0, .mv_data = kb};
	return ix_err(t->ix, mdb_put(t->txn, t->ix->evpending, &k, &v, 0), "event pending add");
}

int sto_evpending_scan(struct sto_txn *t, uint64_t after_gen, sto_evpending_fn fn, void *arg)
{
	uint8_t seek[8];
	char job[MDL_JOB_MAX + 1];
	int64_t min_ts;
	uint64_t uid;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	if (after_gen == UINT64_MAX)
		return 0;
	rdb_put_be64(seek, after_gen + 1);
	int ret = cursor_open(t, t->ix->evpending, &cur);
	if (ret != 0)
		return ret;
	for (ret = cursor_seek(t, cur, seek, sizeof(seek), &k, &v); ret == 0;
	     ret = cursor_next(t, cur, &k, &v)) {
		if (k.mv_size < 8 + 18) {
			ret = corrupt(t, "event pending key", k.mv_size);
			goto out;
		}
		ret = ev_key_get(t, (const uint8_t *)k.mv_data + 8, k.mv_size - 8, job, &min_ts,
				 &uid);
		if (ret == 0)
			ret = fn(arg, rdb_get_be64(k.mv_data), job, min_ts, uid);
		if (ret != 0)
			goto out;
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
out:
	mdb_cursor_close(cur);
	return ret;
}

int sto_evpending_clear(struct sto_txn *t, uint64_t upto_gen)
{
	return gen_delete_range(t, t->ix->evpending, "event pending key", 0, upto_gen);
}

int sto_evpending_drop_after(struct sto_txn *t, uint64_t after_gen)
{
	if (after_gen == UINT64_MAX)
		return 0;
	return gen_delete_range(t, t->ix->evpending, "event pending key", after_gen + 1,
				UINT64_MAX);
}

/* ---- client batch ids ----------------------------------------------------------
 * batch_ids   key: the id bytes           value: u64 LE, ns when first seen
 * batch_time  key: ns be64, then the id   value: empty (for pruning by age)
 */

int sto_batchid_get(struct sto_txn *t, const char *id, size_t len, uint64_t *seen_ns)
{
	MDB_val k = {.mv_size = len, .mv_data = (void *)id}, v;
	int ret = ix_err(t->ix, mdb_get(t->txn, t->ix->batch_ids, &k, &v), "batch id get");
	if (ret != 0)
		return ret;
	return u64_value(t, &v, "batch id value", seen_ns);
}

int sto_batchid_put(struct sto_txn *t, const char *id, size_t len, uint64_t seen_ns)
{
	uint8_t vb[8], kb[8 + 512];
	if (len == 0 || len > 512)
		return -EINVAL;
	rdb_put_le64(vb, seen_ns);
	MDB_val k = {.mv_size = len, .mv_data = (void *)id}, v = {.mv_size = 8, .mv_data = vb};
	int ret = ix_err(t->ix, mdb_put(t->txn, t->ix->batch_ids, &k, &v, 0), "batch id put");
	if (ret != 0)
		return ret;
	rdb_put_be64(kb, seen_ns);
	memcpy(kb + 8, id, len);
	MDB_val tk = {.mv_size = 8 + len, .mv_data = kb}, tv = {.mv_size = 0, .mv_data = kb};
	return ix_err(t->ix, mdb_put(t->txn, t->ix->batch_time, &tk, &tv, 0), "batch time put");
}

int sto_batchid_prune(struct sto_txn *t, uint64_t older_than_ns, size_t max_delete, size_t *deleted)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	size_t n = 0;
	int ret = cursor_open(t, t->ix->batch_time, &cur);
	if (ret != 0)
		return ret;
	while (n < max_delete) {
		ret = ix_err(t->ix, mdb_cursor_get(cur, &k, &v, MDB_FIRST), "batch time first");
		if (ret != 0)
			break;
		if (k.mv_size < 9) {
			ret = corrupt(t, "batch time key", k.mv_size);
			break;
		}
		if (rdb_get_be64(k.mv_data) >= older_than_ns)
			break;
		MDB_val ik = {.mv_size = k.mv_size - 8, .mv_data = (uint8_t *)k.mv_data + 8};
		ret = ix_err(t->ix, mdb_del(t->txn, t->ix->batch_ids, &ik, NULL), "batch id del");
		if (ret != 0 && ret != RDB_ENOTFOUND)
			break;
		ret = ix_err(t->ix, mdb_cursor_del(cur, 0), "batch time del");
		if (ret != 0)
			break;
		n++;
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
	mdb_cursor_close(cur);
	if (deleted)
		*deleted = n;
	return ret;
}

/* ---- data lifecycle ---------------------------------------------------------
 * tombstones  key: job                    value: u64 LE, WAL generation T of the
 *                                                delete (records of the job in
 *                                                generations <= T are not replayed)
 * retention   key: job                    value: u64 LE, retention in seconds
 *                                                (0 = keep forever)
 * quarantine  key: 'C' + chunk key | 'E' + events key   value: the entry as it was
 * seg_trash   key: segment id be64        value: empty (compacted away; unlink)
 */

static MDB_dbi jobdb(const struct sto_txn *t, enum sto_jobdb which)
{
	return which == STO_JOBDB_TOMBSTONE ? t->ix->tombstones : t->ix->retention;
}

static int job_key(const char *job, MDB_val *k)
{
	size_t n = job ? strnlen(job, MDL_JOB_MAX + 1) : 0;
	if (n == 0 || n > MDL_JOB_MAX)
		return RDB_EINVAL;
	k->mv_data = (void *)job;
	k->mv_size = n;
	return 0;
}

int sto_jobval_put(struct sto_txn *t, enum sto_jobdb which, const char *job, uint64_t val)
{
	uint8_t vb[8];
	MDB_val k, v = {.mv_size = 8, .mv_data = vb};
	int ret = job_key(job, &k);
	if (ret != 0)
		return ret;
	rdb_put_le64(vb, val);
	return ix_err(t->ix, mdb_put(t->txn, jobdb(t, which), &k, &v, 0), "job value put");
}

int sto_jobval_get(struct sto_txn *t, enum sto_jobdb which, const char *job, uint64_t *val)
{
	MDB_val k, v;
	int ret = job_key(job, &k);
	if (ret == 0)
		ret = ix_err(t->ix, mdb_get(t->txn, jobdb(t, which), &k, &v), "job value get");
	if (ret == 0)
		ret = u64_value(t, &v, "job value", val);
	return ret;
}

int sto_jobval_del(struct sto_txn *t, enum sto_jobdb which, const char *job)
{
	MDB_val k;
	int ret = job_key(job, &k);
	if (ret != 0)
		return ret;
	return ix_err(t->ix, mdb_del(t->txn, jobdb(t, which), &k, NULL), "job value del");
}

int sto_jobval_scan(struct sto_txn *t, enum sto_jobdb which, sto_jobval_fn fn, void *arg)
{
	char job[MDL_JOB_MAX + 1];
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	uint64_t val;
	int ret = cursor_open(t, jobdb(t, which), &cur);
	if (ret != 0)
		return ret;
	for (ret = cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
	     ret = cursor_next(t, cur, &k, &v)) {
		if (k.mv_size == 0 || k.mv_size > MDL_JOB_MAX) {
			ret = corrupt(t, "job key", k.mv_size);
			goto out;
		}
		memcpy(job, k.mv_data, k.mv_size);
		job[k.mv_size] = 0;
		ret = u64_value(t, &v, "job value", &val);
		if (ret == 0)
			ret = fn(arg, job, val);
		if (ret != 0)
			goto out;
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
out:
	mdb_cursor_close(cur);
	return ret;
}

int sto_chunk_get(struct sto_txn *t, uint64_t series_id, int64_t min_ts_ns, uint64_t uid,
		  struct sto_chunk_ref *out)
{
	uint8_t kb[CHUNK_KEY_SIZE];
	MDB_val k = {.mv_size = sizeof(kb), .mv_data = kb}, v;
	chunk_key_put(kb, series_id, min_ts_ns, uid);
	int ret = ix_err(t->ix, mdb_get(t->txn, t->ix->chunks, &k, &v), "chunk get");
	if (ret == 0)
		ret = chunk_decode(t, &k, &v, out);
	return ret;
}

int sto_chunk_scan_all(struct sto_txn *t, sto_chunk_fn fn, void *arg)
{
	struct sto_chunk_ref ref;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int ret = cursor_open(t, t->ix->chunks, &cur);
	if (ret != 0)
		return ret;
	for (ret = cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
	     ret = cursor_next(t, cur, &k, &v)) {
		ret = chunk_decode(t, &k, &v, &ref);
		if (ret == 0)
			ret = fn(arg, &ref);
		if (ret != 0)
			goto out;
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
out:
	mdb_cursor_close(cur);
	return ret;
}

int sto_evidx_get(struct sto_txn *t, const char *job, int64_t min_ts_ns, uint64_t uid,
		  sto_evidx_fn fn, void *arg)
{
	uint8_t kb[MDL_JOB_MAX + 17];
	MDB_val k = {.mv_size = ev_key_put(kb, job, min_ts_ns, uid), .mv_data = kb}, v;
	int ret = ix_err(t->ix, mdb_get(t->txn, t->ix->events, &k, &v), "event chunk get");
	if (ret == 0)
		ret = fn(arg, min_ts_ns, uid, v.mv_data, v.mv_size);
	return ret;
}

int sto_evidx_scan_all(struct sto_txn *t, sto_evidx_all_fn fn, void *arg)
{
	char job[MDL_JOB_MAX + 1];
	int64_t min_ts;
	uint64_t uid;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int ret = cursor_open(t, t->ix->events, &cur);
	if (ret != 0)
		return ret;
	for (ret = cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
	     ret = cursor_next(t, cur, &k, &v)) {
		ret = ev_key_get(t, k.mv_data, k.mv_size, job, &min_ts, &uid);
		if (ret == 0)
			ret = fn(arg, job, min_ts, uid, v.mv_data, v.mv_size);
		if (ret != 0)
			goto out;
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
out:
	mdb_cursor_close(cur);
	return ret;
}

int sto_series_del(struct sto_txn *t, const struct mdl_series_key *k, uint64_t id)
{
	uint8_t buf[SERIES_KEY_MAX], idbe[8];
	MDB_val key = {.mv_data = buf}, sk = {.mv_size = 8, .mv_data = idbe};
	int ret = series_key_encode(k, buf, &key.mv_size);
	if (ret != 0)
		return ret;
	rdb_put_be64(idbe, id);
	ret = ix_err(t->ix, mdb_del(t->txn, t->ix->series, &key, NULL), "series del");
	if (ret == 0 || ret == RDB_ENOTFOUND)
		ret = ix_err(t->ix, mdb_del(t->txn, t->ix->sid, &sk, NULL), "sid del");
	return ret == RDB_ENOTFOUND ? 0 : ret;
}

int sto_series_put(struct sto_txn *t, const struct mdl_series_key *k, uint64_t id)
{
	uint8_t buf[SERIES_KEY_MAX], idle[8], idbe[8];
	MDB_val key = {.mv_data = buf}, v = {.mv_size = 8, .mv_data = idle};
	MDB_val sk = {.mv_size = 8, .mv_data = idbe};
	int ret = series_key_encode(k, buf, &key.mv_size);
	if (ret != 0 || id == 0)
		return ret ? ret : RDB_EINVAL;
	rdb_put_le64(idle, id);
	rdb_put_be64(idbe, id);
	MDB_val sv = key;
	ret = ix_err(t->ix, mdb_put(t->txn, t->ix->series, &key, &v, 0), "series put");
	if (ret == 0)
		ret = ix_err(t->ix, mdb_put(t->txn, t->ix->sid, &sk, &sv, 0), "sid put");
	return ret;
}

int sto_quarantine_chunk(struct sto_txn *t, const struct sto_chunk_ref *ref)
{
	uint8_t kb[1 + CHUNK_KEY_SIZE], vb[ENTRY_SIZE];
	MDB_val k = {.mv_size = sizeof(kb), .mv_data = kb};
	MDB_val v = {.mv_size = sizeof(vb), .mv_data = vb};
	kb[0] = 'C';
	chunk_key_put(kb + 1, ref->series_id, ref->stats.min_ts_ns, ref->uid);
	entry_encode(ref, vb);
	int ret = ix_err(t->ix, mdb_put(t->txn, t->ix->quarantine, &k, &v, 0), "quarantine put");
	if (ret == 0)
		ret = sto_chunk_del(t, ref->series_id, ref->stats.min_ts_ns, ref->uid);
	return ret == RDB_ENOTFOUND ? 0 : ret;
}

int sto_quarantine_evchunk(struct sto_txn *t, const char *job, int64_t min_ts_ns, uint64_t uid,
			   const void *val, size_t len)
{
	uint8_t kb[1 + MDL_JOB_MAX + 17];
	kb[0] = 'E';
	MDB_val k = {.mv_size = 1 + ev_key_put(kb + 1, job, min_ts_ns, uid), .mv_data = kb};
	MDB_val v = {.mv_size = len, .mv_data = (void *)val};
	int ret = ix_err(t->ix, mdb_put(t->txn, t->ix->quarantine, &k, &v, 0), "quarantine put");
	if (ret == 0)
		ret = sto_evidx_del(t, job, min_ts_ns, uid);
	return ret == RDB_ENOTFOUND ? 0 : ret;
}

int sto_quarantine_scan(struct sto_txn *t, sto_u64_fn fn, void *arg)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int ret = cursor_open(t, t->ix->quarantine, &cur);
	if (ret != 0)
		return ret;
	for (ret = cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
	     ret = cursor_next(t, cur, &k, &v)) {
		if (k.mv_size < 9) {
			ret = corrupt(t, "quarantine key", k.mv_size);
			goto out;
		}
		ret = fn(arg, rdb_get_be64((const uint8_t *)k.mv_data + k.mv_size - 8));
		if (ret != 0)
			goto out;
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
out:
	mdb_cursor_close(cur);
	return ret;
}

int sto_trash_add(struct sto_txn *t, uint64_t segment_id)
{
	uint8_t kb[8];
	MDB_val k = {.mv_size = 8, .mv_data = kb}, v = {.mv_size = 0, .mv_data = kb};
	rdb_put_be64(kb, segment_id);
	return ix_err(t->ix, mdb_put(t->txn, t->ix->seg_trash, &k, &v, 0), "trash add");
}

int sto_trash_del(struct sto_txn *t, uint64_t segment_id)
{
	uint8_t kb[8];
	MDB_val k = {.mv_size = 8, .mv_data = kb};
	rdb_put_be64(kb, segment_id);
	int ret = ix_err(t->ix, mdb_del(t->txn, t->ix->seg_trash, &k, NULL), "trash del");
	return ret == RDB_ENOTFOUND ? 0 : ret;
}

int sto_trash_has(struct sto_txn *t, uint64_t segment_id)
{
	uint8_t kb[8];
	MDB_val k = {.mv_size = 8, .mv_data = kb}, v;
	rdb_put_be64(kb, segment_id);
	int ret = ix_err(t->ix, mdb_get(t->txn, t->ix->seg_trash, &k, &v), "trash get");
	return ret == 0 ? 1 : ret == RDB_ENOTFOUND ? 0 : ret;
}

int sto_trash_scan(struct sto_txn *t, sto_u64_fn fn, void *arg)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int ret = cursor_open(t, t->ix->seg_trash, &cur);
	if (ret != 0)
		return ret;
	for (ret = cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
	     ret = cursor_next(t, cur, &k, &v)) {
		ret = k.mv_size == 8 ? fn(arg, rdb_get_be64(k.mv_data))
				     : corrupt(t, "trash key", k.mv_size);
		if (ret != 0)
			goto out;
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
out:
	mdb_cursor_close(cur);
	return ret;
}

int sto_index_copy(struct sto_index *ix, const char *dir)
{
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		return -errno;
	int rc = mdb_env_copy2(ix->env, dir, MDB_CP_COMPACT);
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
		ret = cursor_open(t, dbs[i], &cur);
		if (ret != 0)
			break;
		for (ret = cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
		     ret = cursor_next(t, cur, &k, &v))
			n++;
		ret = ret == RDB_ENOTFOUND ? 0 : ret;
		mdb_cursor_close(cur);
	}
	*entries = n;
	return ret;
}

/* ---- rollups ------------------------------------------------------------- */

enum {
	RK_SIZE = 17, /* series be64, tier u8, bucket start be64 (sign flipped) */
	R_COUNT = 0,
	R_NAN = 8,
	R_SUM = 16,
	R_MIN = 24,
	R_MAX = 32,
	R_FIRST = 40,
	R_LAST = 48,
	R_FIRST_TS = 56,
	R_FIRST_STEP = 64,
	R_LAST_TS = 72,
	R_LAST_STEP = 80,
	R_MIN_STEP = 88,
	R_MAX_STEP = 96,
	R_NOSTEP = 104,
	R_MIN_ATT = 112,
	R_MAX_ATT = 116,
	R_RESERVED = 120,
	ROLLUP_SIZE = 128,
};
_Static_assert(ROLLUP_SIZE == STO_ROLLUP_RECORD_SIZE && R_RESERVED + 8 == ROLLUP_SIZE,
	       "rollup record v1 is 128 bytes");

static void rollup_key(uint8_t *kb, uint64_t series_id, unsigned tier, int64_t bucket)
{
	rdb_put_be64(kb, series_id);
	kb[8] = (uint8_t)tier;
	rdb_put_be64(kb + 9, (uint64_t)bucket ^ TS_FLIP);
}

static void rollup_encode(uint8_t *p, const struct sto_rollup *r)
{
	rdb_put_le64(p + R_COUNT, r->count);
	rdb_put_le64(p + R_NAN, r->nan_count);
	rdb_put_le64(p + R_SUM, rdb_f64_bits(r->sum));
	rdb_put_le64(p + R_MIN, rdb_f64_bits(r->min));
	rdb_put_le64(p + R_MAX, rdb_f64_bits(r->max));
	rdb_put_le64(p + R_FIRST, r->first_bits);
	rdb_put_le64(p + R_LAST, r->last_bits);
	rdb_put_le64(p + R_FIRST_TS, (uint64_t)r->first_ts_ns);
	rdb_put_le64(p + R_FIRST_STEP, (uint64_t)r->first_step);
	rdb_put_le64(p + R_LAST_TS, (uint64_t)r->last_ts_ns);
	rdb_put_le64(p + R_LAST_STEP, (uint64_t)r->last_step);
	rdb_put_le64(p + R_MIN_STEP, (uint64_t)r->min_step);
	rdb_put_le64(p + R_MAX_STEP, (uint64_t)r->max_step);
	rdb_put_le64(p + R_NOSTEP, r->nostep_count);
	rdb_put_le32(p + R_MIN_ATT, r->min_attempt);
	rdb_put_le32(p + R_MAX_ATT, r->max_attempt);
	rdb_put_le64(p + R_RESERVED, 0);
}

static int rollup_decode(struct sto_txn *t, const MDB_val *v, struct sto_rollup *r)
{
	const uint8_t *p = v->mv_data;
	if (v->mv_size != ROLLUP_SIZE) {
		rdb_warn("index", "%s: rollup record of %zu bytes (want %d): run rankctl verify",
			 t->ix->dir, v->mv_size, ROLLUP_SIZE);
		return RDB_ECORRUPT;
	}
	r->count = rdb_get_le64(p + R_COUNT);
	r->nan_count = rdb_get_le64(p + R_NAN);
	r->sum = rdb_bits_f64(rdb_get_le64(p + R_SUM));
	r->min = rdb_bits_f64(rdb_get_le64(p + R_MIN));
	r->max = rdb_bits_f64(rdb_get_le64(p + R_MAX));
	r->first_bits = rdb_get_le64(p + R_FIRST);
	r->last_bits = rdb_get_le64(p + R_LAST);
	r->first_ts_ns = (int64_t)rdb_get_le64(p + R_FIRST_TS);
	r->first_step = (int64_t)rdb_get_le64(p + R_FIRST_STEP);
	r->last_ts_ns = (int64_t)rdb_get_le64(p + R_LAST_TS);
	r->last_step = (int64_t)rdb_get_le64(p + R_LAST_STEP);
	r->min_step = (int64_t)rdb_get_le64(p + R_MIN_STEP);
	r->max_step = (int64_t)rdb_get_le64(p + R_MAX_STEP);
	r->nostep_count = rdb_get_le64(p + R_NOSTEP);
	r->min_attempt = rdb_get_le32(p + R_MIN_ATT);
	r->max_attempt = rdb_get_le32(p + R_MAX_ATT);
	return 0;
}

int sto_rollup_get(struct sto_txn *t, uint64_t series_id, unsigned tier, int64_t bucket,
		   struct sto_rollup *out)
{
	uint8_t kb[RK_SIZE];
	MDB_val k = {.mv_size = sizeof(kb), .mv_data = kb}, v;
	rollup_key(kb, series_id, tier, bucket);
	int ret = ix_err(t->ix, mdb_get(t->txn, t->ix->rollups, &k, &v), "rollup get");
	return ret ? ret : rollup_decode(t, &v, out);
}

int sto_rollup_put(struct sto_txn *t, uint64_t series_id, unsigned tier, int64_t bucket,
		   const struct sto_rollup *r)
{
	uint8_t kb[RK_SIZE], vb[ROLLUP_SIZE];
	MDB_val k = {.mv_size = sizeof(kb), .mv_data = kb},
		v = {.mv_size = sizeof(vb), .mv_data = vb};
	rollup_key(kb, series_id, tier, bucket);
	rollup_encode(vb, r);
	return ix_err(t->ix, mdb_put(t->txn, t->ix->rollups, &k, &v, 0), "rollup put");
}

int sto_rollup_scan(struct sto_txn *t, uint64_t series_id, unsigned tier, int64_t from_bucket,
		    int64_t to_bucket, sto_rollup_fn fn, void *arg)
{
	uint8_t seek[RK_SIZE];
	struct sto_rollup r;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int ret;
	if (from_bucket > to_bucket)
		return 0;
	rollup_key(seek, series_id, tier, from_bucket);
	ret = cursor_open(t, t->ix->rollups, &cur);
	if (ret != 0)
		return ret;
	for (ret = cursor_seek(t, cur, seek, sizeof(seek), &k, &v); ret == 0;
	     ret = cursor_next(t, cur, &k, &v)) {
		if (!has_prefix(&k, seek, 9) || k.mv_size != RK_SIZE)
			break;
		int64_t bucket = (int64_t)(rdb_get_be64((const uint8_t *)k.mv_data + 9) ^ TS_FLIP);
		if (bucket > to_bucket)
			break;
		ret = rollup_decode(t, &v, &r);
		if (ret == 0)
			ret = fn(arg, bucket, &r);
		if (ret != 0)
			goto out;
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
out:
	mdb_cursor_close(cur);
	return ret;
}

int sto_rollup_del_series(struct sto_txn *t, uint64_t series_id)
{
	uint8_t seek[8];
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	rdb_put_be64(seek, series_id);
	int ret = cursor_open(t, t->ix->rollups, &cur);
	if (ret != 0)
		return ret;
	for (ret = cursor_seek(t, cur, seek, sizeof(seek), &k, &v); ret == 0;
	     ret = cursor_next(t, cur, &k, &v)) {
		if (!has_prefix(&k, seek, 8))
			break;
		ret = ix_err(t->ix, mdb_cursor_del(cur, 0), "rollup del");
		if (ret != 0)
			goto out;
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
out:
	mdb_cursor_close(cur);
	return ret;
}

/* ---- supersede tracking --------------------------------------------------- */

/* Supersede entry value v1, little-endian:
 *    0 u8 version (1)  1 u8[3] zero  4 u32 record length  8 u64 segment id
 *   16 u64 offset  24 u64 series id  32 i64 merged min_ts  40 u64 gen
 *   48 u32 nsrc  52 u32 nseg  56 nsrc * (u64 uid, i64 min_ts), nseg * u64 */
enum {
	SUP_VERSION = 1,
	S_LENGTH = 4,
	S_SEGMENT = 8,
	S_OFFSET = 16,
	S_SERIES = 24,
	S_MIN_TS = 32,
	S_GEN = 40,
	S_NSRC = 48,
	S_NSEG = 52,
	S_FIXED = 56,
};

void sto_sup_entry_free(struct sto_sup_entry *e)
{
	if (!e)
		return;
	free(e->sup.src);
	free(e->seg);
	e->sup.src = NULL;
	e->seg = NULL;
}

int sto_sup_entry_copy(const struct sto_sup_entry *e, struct sto_sup_entry *out)
{
	*out = *e;
	out->sup.src = malloc(((size_t)e->sup.nsrc + 1) * sizeof(*out->sup.src));
	out->seg = malloc(((size_t)e->nseg + 1) * sizeof(*out->seg));
	if (!out->sup.src || !out->seg) {
		sto_sup_entry_free(out);
		out->sup.nsrc = out->nseg = 0;
		return -ENOMEM;
	}
	if (e->sup.nsrc)
		memcpy(out->sup.src, e->sup.src, e->sup.nsrc * sizeof(*out->sup.src));
	if (e->nseg)
		memcpy(out->seg, e->seg, e->nseg * sizeof(*out->seg));
	return 0;
}

int sto_sup_put(struct sto_txn *t, const struct sto_sup_entry *e)
{
	uint8_t kb[8];
	size_t len = S_FIXED + (size_t)e->sup.nsrc * 16 + (size_t)e->nseg * 8;
	uint8_t *p = calloc(1, len);
	if (!p)
		return -ENOMEM;
	p[0] = SUP_VERSION;
	rdb_put_le32(p + S_LENGTH, e->length);
	rdb_put_le64(p + S_SEGMENT, e->segment_id);
	rdb_put_le64(p + S_OFFSET, e->offset);
	rdb_put_le64(p + S_SERIES, e->sup.series_id);
	rdb_put_le64(p + S_MIN_TS, (uint64_t)e->sup.merged_min_ts_ns);
	rdb_put_le64(p + S_GEN, e->sup.gen);
	rdb_put_le32(p + S_NSRC, e->sup.nsrc);
	rdb_put_le32(p + S_NSEG, e->nseg);
	uint8_t *q = p + S_FIXED;
	for (uint32_t i = 0; i < e->sup.nsrc; i++, q += 16) {
		rdb_put_le64(q, e->sup.src[i].uid);
		rdb_put_le64(q + 8, (uint64_t)e->sup.src[i].min_ts_ns);
	}
	for (uint32_t i = 0; i < e->nseg; i++, q += 8)
		rdb_put_le64(q, e->seg[i]);
	rdb_put_be64(kb, e->sup.merged_uid);
	MDB_val k = {.mv_size = 8, .mv_data = kb}, v = {.mv_size = len, .mv_data = p};
	int ret = ix_err(t->ix, mdb_put(t->txn, t->ix->supersede, &k, &v, 0), "supersede put");
	free(p);
	return ret;
}

/* Decodes a value into *e with new arrays; untouched on failure. */
static int sup_decode(struct sto_txn *t, const MDB_val *k, const MDB_val *v,
		      struct sto_sup_entry *e)
{
	const uint8_t *p = v->mv_data;
	if (k->mv_size != 8 || v->mv_size < S_FIXED || p[0] != SUP_VERSION)
		return corrupt(t, "supersede entry", v->mv_size);
	uint32_t nsrc = rdb_get_le32(p + S_NSRC), nseg = rdb_get_le32(p + S_NSEG);
	if (nsrc < 2 || nsrc > STO_SUP_MAX_SOURCES || nseg > (1u << 24) ||
	    v->mv_size != S_FIXED + (size_t)nsrc * 16 + (size_t)nseg * 8)
		return corrupt(t, "supersede entry", v->mv_size);
	struct sto_sup_entry x = {.length = rdb_get_le32(p + S_LENGTH),
				  .segment_id = rdb_get_le64(p + S_SEGMENT),
				  .offset = rdb_get_le64(p + S_OFFSET),
				  .nseg = nseg};
	x.sup.series_id = rdb_get_le64(p + S_SERIES);
	x.sup.merged_uid = rdb_get_be64(k->mv_data);
	x.sup.merged_min_ts_ns = (int64_t)rdb_get_le64(p + S_MIN_TS);
	x.sup.gen = rdb_get_le64(p + S_GEN);
	x.sup.nsrc = nsrc;
	x.sup.src = malloc((size_t)nsrc * sizeof(*x.sup.src));
	x.seg = malloc((size_t)(nseg ? nseg : 1) * sizeof(*x.seg));
	if (!x.sup.src || !x.seg) {
		sto_sup_entry_free(&x);
		return -ENOMEM;
	}
	const uint8_t *q = p + S_FIXED;
	for (uint32_t i = 0; i < nsrc; i++, q += 16) {
		x.sup.src[i].uid = rdb_get_le64(q);
		x.sup.src[i].min_ts_ns = (int64_t)rdb_get_le64(q + 8);
	}
	for (uint32_t i = 0; i < nseg; i++, q += 8)
		x.seg[i] = rdb_get_le64(q);
	*e = x;
	return 0;
}

int sto_sup_get(struct sto_txn *t, uint64_t merged_uid, struct sto_sup_entry *out)
{
	uint8_t kb[8];
	MDB_val k = {.mv_size = 8, .mv_data = kb}, v;
	rdb_put_be64(kb, merged_uid);
	int ret = ix_err(t->ix, mdb_get(t->txn, t->ix->supersede, &k, &v), "supersede get");
	return ret ? ret : sup_decode(t, &k, &v, out);
}

int sto_sup_del(struct sto_txn *t, uint64_t merged_uid)
{
	uint8_t kb[8];
	MDB_val k = {.mv_size = 8, .mv_data = kb};
	rdb_put_be64(kb, merged_uid);
	int ret = ix_err(t->ix, mdb_del(t->txn, t->ix->supersede, &k, NULL), "supersede del");
	return ret == RDB_ENOTFOUND ? 0 : ret;
}

int sto_sup_scan(struct sto_txn *t, sto_sup_fn fn, void *arg)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int ret = cursor_open(t, t->ix->supersede, &cur);
	if (ret != 0)
		return ret;
	for (ret = cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
	     ret = cursor_next(t, cur, &k, &v)) {
		struct sto_sup_entry e;
		ret = sup_decode(t, &k, &v, &e);
		if (ret == 0) {
			ret = fn(arg, &e);
			sto_sup_entry_free(&e);
		}
		if (ret != 0)
			goto out;
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
out:
	mdb_cursor_close(cur);
	return ret;
}
