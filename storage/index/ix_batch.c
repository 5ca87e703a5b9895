/* ix_batch.c - the batch_ids and batch_time tables: client batch ids
 * already stored (exactly-once retries), pruned by age.
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

/* ---- client batch ids ----------------------------------------------------------
 * batch_ids   key: the id bytes           value: u64 LE, ns when first seen
 * batch_time  key: ns be64, then the id   value: empty (for pruning by age)
 * Both sealed (ix_seal.c: a checksum trailer since format 5). Pruning drops
 * a damaged batch_time entry without deleting the id it seems to name.
 */

int sto_batchid_get(struct sto_txn *t, const char *id, size_t len, uint64_t *seen_ns)
{
	MDB_val k = {.mv_size = len, .mv_data = (void *)id}, v, body;
	int ret = ix_err(t->ix, mdb_get(t->txn, t->ix->batch_ids, &k, &v), "batch id get");
	if (ret != 0)
		return ret;
	if (ix_unseal(t, &k, &v, &body) < 0)
		return ix_damaged(t, "batch_ids", &k,
				  "writes with that batch id fail until it expires");
	return ix_u64_value(t, &body, "batch id value", seen_ns);
}

int sto_batchid_put(struct sto_txn *t, const char *id, size_t len, uint64_t seen_ns)
{
	uint8_t vb[8], kb[8 + 512];
	if (len == 0 || len > 512)
		return -EINVAL;
	rdb_put_le64(vb, seen_ns);
	MDB_val k = {.mv_size = len, .mv_data = (void *)id};
	int ret = ix_put_sealed(t, t->ix->batch_ids, &k, vb, sizeof(vb), "batch id put");
	if (ret != 0)
		return ret;
	rdb_put_be64(kb, seen_ns);
	memcpy(kb + 8, id, len);
	MDB_val tk = {.mv_size = 8 + len, .mv_data = kb};
	return ix_put_sealed(t, t->ix->batch_time, &tk, NULL, 0, "batch time put");
}

int sto_batchid_prune(struct sto_txn *t, uint64_t older_than_ns, size_t max_delete, size_t *deleted)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	size_t n = 0;
	int ret = ix_cursor_open(t, t->ix->batch_time, &cur);
	if (ret != 0)
		return ret;
	while (n < max_delete) {
		ret = ix_err(t->ix, mdb_cursor_get(cur, &k, &v, MDB_FIRST), "batch time first");
		if (ret != 0)
			break;
		if (k.mv_size < 9) {
			ret = ix_corrupt(t, "batch time key", k.mv_size);
			break;
		}
		MDB_val body;
		bool damaged = ix_unseal(t, &k, &v, &body) < 0;
		if (damaged) /* its time and id may be wrong: dropped, its id left alone */
			ix_damaged(t, "batch_time", &k, "it is removed now");
		else if (rdb_get_be64(k.mv_data) >= older_than_ns)
			break;
		MDB_val ik = {.mv_size = k.mv_size - 8, .mv_data = (uint8_t *)k.mv_data + 8};
		ret = damaged ? 0
			      : ix_err(t->ix, mdb_del(t->txn, t->ix->batch_ids, &ik, NULL),
				       "batch id del");
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
