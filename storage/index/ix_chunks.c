/* ix_chunks.c - the chunks table (chunk key -> chunk entry with stats)
 * and the pending table (chunks of generations newer than the checkpoint);
 * the chunk key and entry encodings, shared with the quarantine table.
 *
 * One file per LMDB table (or table family) of the index; the environment,
 * transactions, error border and cursor helpers are index.c's (ix_int.h).
 * Contracts: storage/index/index.h; key/value layouts: index.c's top comment
 * and storage/format.h. Threading and failure as in index.c: the caller's
 * transaction, RDB_ECORRUPT for malformed data, poisoned write txn on error.
 */
#include "storage/index/ix_int.h"

#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- encoding ------------------------------------------------------------ */

void ix_chunk_key_put(uint8_t *p, uint64_t series_id, int64_t min_ts_ns, uint64_t uid)
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

static uint64_t entry_checksum(const uint8_t *key, const uint8_t *p)
{
	uint8_t buf[CHUNK_KEY_SIZE + ENTRY_SIZE_V1];
	memcpy(buf, key, CHUNK_KEY_SIZE);
	memcpy(buf + CHUNK_KEY_SIZE, p, ENTRY_SIZE_V1);
	return rdb_hash64(buf, sizeof(buf), 0);
}

void ix_entry_encode(const struct sto_chunk_ref *r, uint8_t *p)
{
	const struct sto_chunk_stats *s = &r->stats;
	uint8_t key[CHUNK_KEY_SIZE];

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
	ix_chunk_key_put(key, r->series_id, s->min_ts_ns, r->uid);
	rdb_put_le64(p + E_CHECKSUM, entry_checksum(key, p));
}

/* The location fields of an entry (bytes 0..31). */
static void entry_location(const uint8_t *p, struct sto_chunk_ref *r)
{
	r->group_n = p[E_GROUP_N];
	r->member = p[E_MEMBER];
	r->head_len = rdb_get_le32(p + E_HEAD_LEN);
	r->length = rdb_get_le32(p + E_LENGTH);
	r->segment_id = rdb_get_le64(p + E_SEGMENT);
	r->offset = rdb_get_le64(p + E_OFFSET);
	r->gen = rdb_get_le64(p + E_GEN);
}

/* Fills everything but series_id, uid and stats.min_ts_ns (taken from the
 * key by the caller, who checks the duplicate). *why says what is wrong:
 * RDB_ECORRUPT if malformed or its checksum does not match. A version 1
 * entry (no checksum) is read only while legacy. */
static int entry_decode(const uint8_t *key, const uint8_t *p, size_t n, bool legacy,
			struct sto_chunk_ref *r, const char **why)
{
	struct sto_chunk_stats *s = &r->stats;

	*why = "wrong size or version";
	if (n == ENTRY_SIZE && p[E_VERSION] == ENTRY_VERSION) {
		*why = "checksum mismatch";
		if (rdb_get_le64(p + E_CHECKSUM) != entry_checksum(key, p))
			return RDB_ECORRUPT;
	} else if (!(legacy && n == ENTRY_SIZE_V1 && p[E_VERSION] == ENTRY_VERSION_V1)) {
		return RDB_ECORRUPT;
	}
	*why = "inconsistent fields";
	entry_location(p, r);
	if (r->group_n == 1 || (r->group_n && r->member >= r->group_n))
		return RDB_ECORRUPT;
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

/* Decodes a chunks-db key/value pair into *r. A damaged entry is
 * RDB_ECORRUPT, or with t->pass_damaged a ref marked damaged (key fields,
 * the entry's location when it has the size of one, no statistics). */
static int chunk_decode(const struct sto_txn *t, const MDB_val *k, const MDB_val *v,
			struct sto_chunk_ref *r)
{
	static struct rdb_log_ratelimit rl;
	int64_t key_min_ts;
	const char *why;

	if (k->mv_size != CHUNK_KEY_SIZE)
		return ix_corrupt(t, "chunk key", k->mv_size);
	memset(r, 0, sizeof(*r));
	chunk_key_get(k->mv_data, &r->series_id, &key_min_ts, &r->uid);
	int rc = entry_decode(k->mv_data, v->mv_data, v->mv_size, t->ix->legacy_values, r, &why);
	if (rc == 0 && r->stats.min_ts_ns != key_min_ts) {
		why = "min_ts differs from the key's";
		rc = RDB_ECORRUPT;
	}
	if (rc == 0)
		return 0;
	if (!t->pass_damaged) {
		rdb_log_limited(&rl, 10, RDB_LOG_ERROR, SUBSYS,
				"LMDB index %s: the entry of chunk %llu (series %llu) is damaged "
				"(%s); the operation failed. 'rankctl verify' lists such entries, "
				"'verify --quarantine' rewrites them from their chunks",
				t->ix->dir, (unsigned long long)r->uid,
				(unsigned long long)r->series_id, why);
		return RDB_ECORRUPT;
	}
	uint64_t sid = r->series_id, uid = r->uid;
	memset(r, 0, sizeof(*r));
	r->series_id = sid;
	r->uid = uid;
	r->stats.min_ts_ns = key_min_ts;
	r->stats.max_ts_ns = INT64_MAX; /* unknown: overlaps every range after it */
	if (v->mv_size == ENTRY_SIZE || v->mv_size == ENTRY_SIZE_V1)
		entry_location(v->mv_data, r);
	r->damaged = true;
	return 0;
}

void sto_txn_pass_damaged(struct sto_txn *t)
{
	t->pass_damaged = true;
}

/* ---- chunks -------------------------------------------------------------- */

int sto_chunk_put(struct sto_txn *t, const struct sto_chunk_ref *ref)
{
	uint8_t kb[CHUNK_KEY_SIZE], vb[ENTRY_SIZE];
	MDB_val k = {.mv_size = sizeof(kb), .mv_data = kb};
	MDB_val v = {.mv_size = sizeof(vb), .mv_data = vb};

	if (ref->stats.max_ts_ns < ref->stats.min_ts_ns)
		return -EINVAL;
	ix_chunk_key_put(kb, ref->series_id, ref->stats.min_ts_ns, ref->uid);
	ix_entry_encode(ref, vb);
	return ix_err(t->ix, mdb_put(t->txn, t->ix->chunks, &k, &v, 0), "chunk put");
}

int sto_chunk_del(struct sto_txn *t, uint64_t series_id, int64_t min_ts_ns, uint64_t uid)
{
	uint8_t kb[CHUNK_KEY_SIZE];
	MDB_val k = {.mv_size = sizeof(kb), .mv_data = kb};

	ix_chunk_key_put(kb, series_id, min_ts_ns, uid);
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
	ix_chunk_key_put(seek, series_id, INT64_MIN, 0);
	ret = ix_cursor_open(t, t->ix->chunks, &cur);
	if (ret != 0)
		return ret;
	for (ret = ix_cursor_seek(t, cur, seek, sizeof(seek), &k, &v); ret == 0;
	     ret = ix_cursor_next(t, cur, &k, &v)) {
		if (!ix_has_prefix(&k, seek, 8))
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

/* ---- pending ------------------------------------------------------------- *
 * Values: empty, sealed (ix_seal.c: a checksum trailer of the key since
 * format 5). A damaged entry fails the scan: recovery must not drop the
 * wrong chunk, nor keep one it should drop. */

int sto_pending_add(struct sto_txn *t, uint64_t gen, const struct sto_chunk_ref *ref)
{
	uint8_t kb[PENDING_KEY_SIZE];
	MDB_val k = {.mv_size = sizeof(kb), .mv_data = kb};

	rdb_put_be64(kb, gen);
	ix_chunk_key_put(kb + 8, ref->series_id, ref->stats.min_ts_ns, ref->uid);
	return ix_put_sealed(t, t->ix->pending, &k, NULL, 0, "pending add");
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
	ret = ix_cursor_open(t, t->ix->pending, &cur);
	if (ret != 0)
		return ret;
	for (ret = ix_cursor_seek(t, cur, seek, sizeof(seek), &k, &v); ret == 0;
	     ret = ix_cursor_next(t, cur, &k, &v)) {
		if (k.mv_size != PENDING_KEY_SIZE) {
			ret = ix_corrupt(t, "pending key", k.mv_size);
			goto out;
		}
		MDB_val body;
		if (ix_unseal(t, &k, &v, &body) < 0) {
			ret = ix_damaged(t, "pending", &k,
					 "'rankctl rebuild-index' recreates the index from the "
					 "segment files");
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

int sto_pending_clear(struct sto_txn *t, uint64_t upto_gen)
{
	return ix_gen_delete_range(t, t->ix->pending, "pending key", 0, upto_gen);
}

int sto_pending_drop_after(struct sto_txn *t, uint64_t after_gen)
{
	if (after_gen == UINT64_MAX)
		return 0;
	return ix_gen_delete_range(t, t->ix->pending, "pending key", after_gen + 1, UINT64_MAX);
}

int sto_chunk_get(struct sto_txn *t, uint64_t series_id, int64_t min_ts_ns, uint64_t uid,
		  struct sto_chunk_ref *out)
{
	uint8_t kb[CHUNK_KEY_SIZE];
	MDB_val k = {.mv_size = sizeof(kb), .mv_data = kb}, v;
	ix_chunk_key_put(kb, series_id, min_ts_ns, uid);
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
	int ret = ix_cursor_open(t, t->ix->chunks, &cur);
	if (ret != 0)
		return ret;
	for (ret = ix_cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
	     ret = ix_cursor_next(t, cur, &k, &v)) {
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

/* ---- upgrade to entries with checksums (format 3) ------------------------ */

struct up_batch {
	uint8_t (*keys)[CHUNK_KEY_SIZE];
	struct sto_chunk_ref *refs;
	size_t n;
};

/* Reads up to max version 1 entries after *from (all when !*have_from)
 * into b; *more says whether the table goes on. */
static int up_collect(struct sto_txn *t, uint8_t *from, bool *have_from, size_t max,
		      struct up_batch *b, bool *more, uint64_t *damaged)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	size_t seen = 0;
	int ret = ix_cursor_open(t, t->ix->chunks, &cur);
	if (ret != 0)
		return ret;
	b->n = 0;
	*more = false;
	for (ret = ix_cursor_seek(t, cur, from, *have_from ? CHUNK_KEY_SIZE : 0, &k, &v); ret == 0;
	     ret = ix_cursor_next(t, cur, &k, &v)) {
		if (*have_from && k.mv_size == CHUNK_KEY_SIZE &&
		    memcmp(k.mv_data, from, CHUNK_KEY_SIZE) == 0)
			continue;
		if (seen++ == max) {
			*more = true;
			break;
		}
		if (k.mv_size == CHUNK_KEY_SIZE) {
			memcpy(from, k.mv_data, CHUNK_KEY_SIZE);
			*have_from = true;
		}
		if (v.mv_size == ENTRY_SIZE)
			continue; /* already has its checksum (or is damaged: verify says) */
		if (chunk_decode(t, &k, &v, &b->refs[b->n]) != 0) {
			(*damaged)++;
			continue;
		}
		memcpy(b->keys[b->n++], k.mv_data, CHUNK_KEY_SIZE);
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
	mdb_cursor_close(cur);
	return ret;
}

int ix_chunks_upgrade(struct sto_index *ix, size_t batch, uint64_t *rewritten, uint64_t *damaged)
{
	struct up_batch b = {.keys = calloc(batch, CHUNK_KEY_SIZE),
			     .refs = calloc(batch, sizeof(*b.refs))};
	uint8_t from[CHUNK_KEY_SIZE];
	bool have_from = false, more = true;
	int ret = b.keys && b.refs ? 0 : -ENOMEM;
	while (ret == 0 && more) {
		struct sto_txn *t;
		ret = sto_txn_begin(ix, true, &t);
		if (ret != 0)
			break;
		ret = up_collect(t, from, &have_from, batch, &b, &more, damaged);
		for (size_t i = 0; ret == 0 && i < b.n; i++)
			ret = sto_chunk_put(t, &b.refs[i]);
		if (ret != 0) {
			sto_txn_abort(t);
			break;
		}
		ret = sto_txn_commit(t);
		if (ret == 0)
			*rewritten += b.n;
	}
	free(b.keys);
	free(b.refs);
	return ret;
}
