/* ix_jobs.c - the per-job value tables: tombstones (job deletes, for WAL
 * replay) and retention overrides.
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

/* ---- data lifecycle ---------------------------------------------------------
 * tombstones  key: job                    value: u64 LE, WAL generation T of the
 *                                                delete (records of the job in
 *                                                generations <= T are not replayed)
 * retention   key: job                    value: u64 LE, retention in seconds
 *                                                (0 = keep forever)
 * quarantine  key: 'C' + chunk key | 'E' + events key   value: the entry as it was
 * seg_trash   key: segment id be64        value: empty (compacted away; unlink)
 * Every value is sealed (ix_seal.c: a checksum trailer since format 5).
 */

static MDB_dbi jobdb(const struct sto_txn *t, enum sto_jobdb which)
{
	return which == STO_JOBDB_TOMBSTONE ? t->ix->tombstones : t->ix->retention;
}

/* The u64 of a checked pair. */
static int job_value(const struct sto_txn *t, enum sto_jobdb which, const MDB_val *k,
		     const MDB_val *v, uint64_t *out)
{
	MDB_val body;
	if (ix_unseal(t, k, v, &body) < 0)
		return which == STO_JOBDB_TOMBSTONE
			   ? ix_damaged(t, "tombstones", k,
					"the store does not open on it; delete the job again "
					"after 'rankctl rebuild-index'")
			   : ix_damaged(t, "retention", k,
					"retention passes fail; set the job's retention again");
	return ix_u64_value(t, &body, "job value", out);
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
	MDB_val k;
	int ret = job_key(job, &k);
	if (ret != 0)
		return ret;
	rdb_put_le64(vb, val);
	return ix_put_sealed(t, jobdb(t, which), &k, vb, sizeof(vb), "job value put");
}

int sto_jobval_get(struct sto_txn *t, enum sto_jobdb which, const char *job, uint64_t *val)
{
	MDB_val k, v;
	int ret = job_key(job, &k);
	if (ret == 0)
		ret = ix_err(t->ix, mdb_get(t->txn, jobdb(t, which), &k, &v), "job value get");
	if (ret == 0)
		ret = job_value(t, which, &k, &v, val);
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
	int ret = ix_cursor_open(t, jobdb(t, which), &cur);
	if (ret != 0)
		return ret;
	for (ret = ix_cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
	     ret = ix_cursor_next(t, cur, &k, &v)) {
		if (k.mv_size == 0 || k.mv_size > MDL_JOB_MAX) {
			ret = ix_corrupt(t, "job key", k.mv_size);
			goto out;
		}
		memcpy(job, k.mv_data, k.mv_size);
		job[k.mv_size] = 0;
		ret = job_value(t, which, &k, &v, &val);
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
