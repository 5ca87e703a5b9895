/* ix_quarantine.c - the quarantine table: index entries of chunks and
 * event chunks found damaged, kept as they were for the operator. Values
 * are sealed (ix_seal.c); the scan skips a damaged one (logged; verify
 * names it).
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

int sto_quarantine_chunk(struct sto_txn *t, const struct sto_chunk_ref *ref)
{
	uint8_t kb[1 + CHUNK_KEY_SIZE], vb[ENTRY_SIZE];
	MDB_val k = {.mv_size = sizeof(kb), .mv_data = kb};
	kb[0] = 'C';
	ix_chunk_key_put(kb + 1, ref->series_id, ref->stats.min_ts_ns, ref->uid);
	ix_entry_encode(ref, vb);
	int ret = ix_put_sealed(t, t->ix->quarantine, &k, vb, sizeof(vb), "quarantine put");
	if (ret == 0)
		ret = sto_chunk_del(t, ref->series_id, ref->stats.min_ts_ns, ref->uid);
	return ret == RDB_ENOTFOUND ? 0 : ret;
}

int sto_quarantine_evchunk(struct sto_txn *t, const char *job, int64_t min_ts_ns, uint64_t uid,
			   const void *val, size_t len)
{
	uint8_t kb[1 + MDL_JOB_MAX + 17];
	kb[0] = 'E';
	MDB_val k = {.mv_size = 1 + ix_ev_key_put(kb + 1, job, min_ts_ns, uid), .mv_data = kb};
	int ret = ix_put_sealed(t, t->ix->quarantine, &k, val, len, "quarantine put");
	if (ret == 0)
		ret = sto_evidx_del(t, job, min_ts_ns, uid);
	return ret == RDB_ENOTFOUND ? 0 : ret;
}

int sto_quarantine_scan(struct sto_txn *t, sto_u64_fn fn, void *arg)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int ret = ix_cursor_open(t, t->ix->quarantine, &cur);
	if (ret != 0)
		return ret;
	for (ret = ix_cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
	     ret = ix_cursor_next(t, cur, &k, &v)) {
		if (k.mv_size < 9) {
			ret = ix_corrupt(t, "quarantine key", k.mv_size);
			goto out;
		}
		MDB_val body;
		if (ix_unseal(t, &k, &v, &body) < 0) { /* its uid may be another's */
			ix_damaged(t, "quarantine", &k,
				   "rebuild-index forgets the quarantine list");
			continue;
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

int sto_quarantine_count(struct sto_txn *t, uint64_t *n)
{
	MDB_stat st;
	int ret = ix_err(t->ix, mdb_stat(t->txn, t->ix->quarantine, &st), "quarantine stat");
	*n = ret == 0 ? (uint64_t)st.ms_entries : 0;
	return ret;
}
