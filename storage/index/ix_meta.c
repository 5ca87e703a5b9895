/* ix_meta.c - the meta table: named u64 counters and settings
 * (format_version, next_series_id, next_chunk_uid, checkpoint gen, ...).
 * Values: u64 LE, sealed (ix_seal.c: a checksum trailer since format 5).
 *
 * One file per LMDB table (or table family) of the index; the environment,
 * transactions, error border and cursor helpers are index.c's (ix_int.h).
 * Contracts: storage/index/index.h; key/value layouts: index.c's top comment
 * and storage/format.h. Threading and failure as in index.c: the caller's
 * transaction, RDB_ECORRUPT for malformed data, poisoned write txn on error.
 */
#include "storage/index/ix_int.h"

#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- meta ---------------------------------------------------------------- */

#define META_REMEDY "the store does not open on it; 'rankctl rebuild-index' recreates the counters"

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
	MDB_val body;
	if (ix_unseal(t, &k, &v, &body) < 0)
		return ix_damaged(t, "meta", &k, META_REMEDY);
	return ix_u64_value(t, &body, "meta value", out);
}

int sto_meta_put(struct sto_txn *t, const char *key, uint64_t val)
{
	uint8_t buf[8];
	MDB_val k;
	int ret = meta_key(key, &k);

	if (ret != 0)
		return ret;
	rdb_put_le64(buf, val);
	return ix_put_sealed(t, t->ix->meta, &k, buf, sizeof(buf), "meta put");
}

/* Counter read-and-increment; absent reads as absent_val. */
int ix_meta_next(struct sto_txn *t, const char *key, uint64_t absent_val, uint64_t *out)
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
	return ix_meta_next(t, key, 0, out);
}

int sto_meta_check(struct sto_txn *t)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v, body;
	int ret = ix_cursor_open(t, t->ix->meta, &cur);
	if (ret != 0)
		return ret;
	for (ret = ix_cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
	     ret = ix_cursor_next(t, cur, &k, &v)) {
		if (ix_unseal(t, &k, &v, &body) < 0) {
			ret = ix_damaged(t, "meta", &k, META_REMEDY);
			break;
		}
	}
	mdb_cursor_close(cur);
	return ret == RDB_ENOTFOUND ? 0 : ret;
}
