/* ix_rollups.c - the rollups table: per (series, tier, bucket) aggregates of
 * the data retention dropped (not derived: kept by backups).
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
	R_CHECKSUM = 120, /* XXH3-64 of the key, then bytes 0..119 (0 before format 3) */
	ROLLUP_SIZE = 128,
};
_Static_assert(ROLLUP_SIZE == STO_ROLLUP_RECORD_SIZE && R_CHECKSUM + 8 == ROLLUP_SIZE,
	       "rollup record is 128 bytes");

static uint64_t rollup_checksum(const uint8_t *key, const uint8_t *p)
{
	uint8_t buf[RK_SIZE + R_CHECKSUM];
	memcpy(buf, key, RK_SIZE);
	memcpy(buf + RK_SIZE, p, R_CHECKSUM);
	return rdb_hash64(buf, sizeof(buf), 0);
}

static void rollup_key(uint8_t *kb, uint64_t series_id, unsigned tier, int64_t bucket)
{
	rdb_put_be64(kb, series_id);
	kb[8] = (uint8_t)tier;
	rdb_put_be64(kb + 9, (uint64_t)bucket ^ TS_FLIP);
}

static void rollup_encode(const uint8_t *key, uint8_t *p, const struct sto_rollup *r)
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
	rdb_put_le64(p + R_CHECKSUM, rollup_checksum(key, p));
}

int ix_rollup_check(const struct sto_txn *t, const MDB_val *k, const MDB_val *v, uint8_t *fixed,
		    size_t *fixed_len, const char **why)
{
	const uint8_t *p = v->mv_data;
	*why = "wrong size";
	if (k->mv_size != RK_SIZE || v->mv_size != ROLLUP_SIZE)
		return RDB_ECORRUPT;
	uint64_t sum = rdb_get_le64(p + R_CHECKSUM);
	if (sum == 0 && t->ix->legacy_values) { /* written before format 3 */
		memcpy(fixed, p, ROLLUP_SIZE);
		rdb_put_le64(fixed + R_CHECKSUM, rollup_checksum(k->mv_data, p));
		*fixed_len = ROLLUP_SIZE;
		return 1;
	}
	*why = "checksum mismatch";
	return sum == rollup_checksum(k->mv_data, p) ? 0 : RDB_ECORRUPT;
}

/* Decodes a record after its check: a damaged one is RDB_ECORRUPT (no
 * fallback: rollups are the only copy of what retention dropped). */
static int rollup_decode(struct sto_txn *t, const MDB_val *k, const MDB_val *v,
			 struct sto_rollup *r)
{
	static struct rdb_log_ratelimit rl;
	const uint8_t *p = v->mv_data;
	uint8_t fixed[ROLLUP_SIZE];
	size_t fixed_len;
	const char *why;
	if (ix_rollup_check(t, k, v, fixed, &fixed_len, &why) < 0) {
		const uint8_t *kb = k->mv_data;
		bool key_ok = k->mv_size == RK_SIZE;
		rdb_log_limited(
		    &rl, 10, RDB_LOG_ERROR, SUBSYS,
		    "LMDB index %s: rollup record of series %llu, tier %u, bucket %lld is "
		    "damaged (%s); the query fails rather than answer from it. Rollups "
		    "are not derived data: restore index/ from a backup",
		    t->ix->dir, key_ok ? (unsigned long long)rdb_get_be64(kb) : 0ull,
		    key_ok ? kb[8] : 0u, key_ok ? (long long)(rdb_get_be64(kb + 9) ^ TS_FLIP) : 0ll,
		    why);
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
	return ret ? ret : rollup_decode(t, &k, &v, out);
}

int sto_rollup_put(struct sto_txn *t, uint64_t series_id, unsigned tier, int64_t bucket,
		   const struct sto_rollup *r)
{
	uint8_t kb[RK_SIZE], vb[ROLLUP_SIZE];
	MDB_val k = {.mv_size = sizeof(kb), .mv_data = kb},
		v = {.mv_size = sizeof(vb), .mv_data = vb};
	rollup_key(kb, series_id, tier, bucket);
	rollup_encode(kb, vb, r);
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
	ret = ix_cursor_open(t, t->ix->rollups, &cur);
	if (ret != 0)
		return ret;
	for (ret = ix_cursor_seek(t, cur, seek, sizeof(seek), &k, &v); ret == 0;
	     ret = ix_cursor_next(t, cur, &k, &v)) {
		if (!ix_has_prefix(&k, seek, 9) || k.mv_size != RK_SIZE)
			break;
		int64_t bucket = (int64_t)(rdb_get_be64((const uint8_t *)k.mv_data + 9) ^ TS_FLIP);
		if (bucket > to_bucket)
			break;
		ret = rollup_decode(t, &k, &v, &r);
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
	int ret = ix_cursor_open(t, t->ix->rollups, &cur);
	if (ret != 0)
		return ret;
	for (ret = ix_cursor_seek(t, cur, seek, sizeof(seek), &k, &v); ret == 0;
	     ret = ix_cursor_next(t, cur, &k, &v)) {
		if (!ix_has_prefix(&k, seek, 8))
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
