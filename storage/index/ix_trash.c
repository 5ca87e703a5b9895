/* ix_trash.c - the seg_trash table: segment files compacted away, to be
 * unlinked (survives a crash between switch and unlink).
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

/* Values are sealed (ix_seal.c: an empty body, a checksum trailer since
 * format 5). A damaged entry is skipped by the scan: its segment file is
 * never unlinked on the word of a key that may have been flipped. */
#define TRASH_REMEDY "its segment file is not unlinked (dead space); rebuild-index forgets the list"

int sto_trash_add(struct sto_txn *t, uint64_t segment_id)
{
	uint8_t kb[8];
	MDB_val k = {.mv_size = 8, .mv_data = kb};
	rdb_put_be64(kb, segment_id);
	return ix_put_sealed(t, t->ix->seg_trash, &k, NULL, 0, "trash add");
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
	MDB_val body;
	if (ret == 0 && ix_unseal(t, &k, &v, &body) < 0)
		return ix_damaged(t, "seg_trash", &k, TRASH_REMEDY);
	return ret == 0 ? 1 : ret == RDB_ENOTFOUND ? 0 : ret;
}

int sto_trash_scan(struct sto_txn *t, sto_u64_fn fn, void *arg)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int ret = ix_cursor_open(t, t->ix->seg_trash, &cur);
	if (ret != 0)
		return ret;
	for (ret = ix_cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
	     ret = ix_cursor_next(t, cur, &k, &v)) {
		MDB_val body;
		if (ix_unseal(t, &k, &v, &body) < 0) { /* never unlink on its word */
			ix_damaged(t, "seg_trash", &k, TRASH_REMEDY);
			continue;
		}
		ret = k.mv_size == 8 ? fn(arg, rdb_get_be64(k.mv_data))
				     : ix_corrupt(t, "trash key", k.mv_size);
		if (ret != 0)
			goto out;
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
out:
	mdb_cursor_close(cur);
	return ret;
}
