/* ix_events.c - the events table (event chunk entries per job) and the
 * evpending table (event chunks of generations newer than the checkpoint).
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
#include "storage/format.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- event chunks ------------------------------------------------------------
 * events     key: job, 0x00, min_ts be64 (sign flipped), uid be64
 *            value: the event chunk entry (layout in storage/format.h)
 * evpending  key: gen be64, then the events key; value: empty
 * Both sealed (ix_seal.c: a checksum trailer since format 5; of an events
 * value it covers the key and the entry's fixed part, which holds the
 * checksum of its token filter: eve_filter_intact, checked by whoever
 * consults the filter); callers see the entry without the trailer. A
 * damaged events entry is RDB_ECORRUPT, or, in a sto_txn_pass_damaged
 * transaction, reaches the callback marked damaged (its bytes without the
 * trailer, for the caller to find the chunk through it and check that
 * instead). A damaged evpending entry fails the scan.
 */

#define EV_REMEDY                                                                                  \
	"queries decode its chunk instead; 'verify --quarantine' rewrites it from the chunk"

/* The entry of an events pair: 0 with *body (and *damaged false), or with
 * *damaged when t passes damaged entries; else RDB_ECORRUPT (logged). */
static int ev_value(const struct sto_txn *t, const MDB_val *k, const MDB_val *v, MDB_val *body,
		    bool *damaged)
{
	*damaged = false;
	if (ix_unseal_part(t, k, v, STO_EVENTRY_FIXED, body) >= 0)
		return 0;
	if (!t->pass_damaged)
		return ix_damaged(t, "events", k, EV_REMEDY);
	*damaged = true;
	body->mv_data = v->mv_data;
	body->mv_size = v->mv_size >= IX_SUM_SIZE ? v->mv_size - IX_SUM_SIZE : v->mv_size;
	return 0;
}

size_t ix_ev_key_put(uint8_t *p, const char *job, int64_t min_ts_ns, uint64_t uid)
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
		return ix_corrupt(t, "event chunk key", n);
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
	MDB_val k = {.mv_size = ix_ev_key_put(kb, job, min_ts_ns, uid), .mv_data = kb};
	return ix_put_sealed(t, t->ix->events, &k, val, len, "event chunk put");
}

int sto_evidx_del(struct sto_txn *t, const char *job, int64_t min_ts_ns, uint64_t uid)
{
	uint8_t kb[MDL_JOB_MAX + 17];
	MDB_val k = {.mv_size = ix_ev_key_put(kb, job, min_ts_ns, uid), .mv_data = kb};
	return ix_err(t->ix, mdb_del(t->txn, t->ix->events, &k, NULL), "event chunk del");
}

int sto_evidx_scan(struct sto_txn *t, const char *job, int64_t to_ns, sto_evidx_fn fn, void *arg)
{
	uint8_t seek[MDL_JOB_MAX + 17];
	size_t plen = strlen(job) + 1;
	char kjob[MDL_JOB_MAX + 1];
	int64_t min_ts = 0;
	uint64_t uid = 0;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	ix_ev_key_put(seek, job, INT64_MIN, 0);
	int ret = ix_cursor_open(t, t->ix->events, &cur);
	if (ret != 0)
		return ret;
	for (ret = ix_cursor_seek(t, cur, seek, plen + 16, &k, &v); ret == 0;
	     ret = ix_cursor_next(t, cur, &k, &v)) {
		if (!ix_has_prefix(&k, seek, plen))
			break;
		ret = ev_key_get(t, k.mv_data, k.mv_size, kjob, &min_ts, &uid);
		if (ret != 0)
			goto out;
		if (min_ts > to_ns)
			break;
		MDB_val body;
		bool damaged;
		ret = ev_value(t, &k, &v, &body, &damaged);
		if (ret == 0)
			ret = fn(arg, min_ts, uid, body.mv_data, body.mv_size, damaged);
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
	MDB_val k = {.mv_size = 8 + ix_ev_key_put(kb + 8, job, min_ts_ns, uid), .mv_data = kb};
	return ix_put_sealed(t, t->ix->evpending, &k, NULL, 0, "event pending add");
}

int sto_evpending_scan(struct sto_txn *t, uint64_t after_gen, sto_evpending_fn fn, void *arg)
{
	uint8_t seek[8];
	char job[MDL_JOB_MAX + 1];
	int64_t min_ts = 0;
	uint64_t uid = 0;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	if (after_gen == UINT64_MAX)
		return 0;
	rdb_put_be64(seek, after_gen + 1);
	int ret = ix_cursor_open(t, t->ix->evpending, &cur);
	if (ret != 0)
		return ret;
	for (ret = ix_cursor_seek(t, cur, seek, sizeof(seek), &k, &v); ret == 0;
	     ret = ix_cursor_next(t, cur, &k, &v)) {
		if (k.mv_size < 8 + 18) {
			ret = ix_corrupt(t, "event pending key", k.mv_size);
			goto out;
		}
		MDB_val body;
		if (ix_unseal(t, &k, &v, &body) < 0) {
			ret = ix_damaged(t, "evpending", &k,
					 "'rankctl rebuild-index' recreates the index from the "
					 "segment files");
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
	return ix_gen_delete_range(t, t->ix->evpending, "event pending key", 0, upto_gen);
}

int sto_evpending_drop_after(struct sto_txn *t, uint64_t after_gen)
{
	if (after_gen == UINT64_MAX)
		return 0;
	return ix_gen_delete_range(t, t->ix->evpending, "event pending key", after_gen + 1,
				   UINT64_MAX);
}

int sto_evidx_get(struct sto_txn *t, const char *job, int64_t min_ts_ns, uint64_t uid,
		  sto_evidx_fn fn, void *arg)
{
	uint8_t kb[MDL_JOB_MAX + 17];
	MDB_val k = {.mv_size = ix_ev_key_put(kb, job, min_ts_ns, uid), .mv_data = kb}, v;
	MDB_val body;
	bool damaged;
	int ret = ix_err(t->ix, mdb_get(t->txn, t->ix->events, &k, &v), "event chunk get");
	if (ret == 0)
		ret = ev_value(t, &k, &v, &body, &damaged);
	if (ret == 0)
		ret = fn(arg, min_ts_ns, uid, body.mv_data, body.mv_size, damaged);
	return ret;
}

int sto_evidx_scan_all(struct sto_txn *t, sto_evidx_all_fn fn, void *arg)
{
	char job[MDL_JOB_MAX + 1];
	int64_t min_ts = 0;
	uint64_t uid = 0;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int ret = ix_cursor_open(t, t->ix->events, &cur);
	if (ret != 0)
		return ret;
	for (ret = ix_cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
	     ret = ix_cursor_next(t, cur, &k, &v)) {
		MDB_val body;
		bool damaged = false;
		ret = ev_key_get(t, k.mv_data, k.mv_size, job, &min_ts, &uid);
		if (ret == 0)
			ret = ev_value(t, &k, &v, &body, &damaged);
		if (ret == 0)
			ret = fn(arg, job, min_ts, uid, body.mv_data, body.mv_size, damaged);
		if (ret != 0)
			goto out;
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
out:
	mdb_cursor_close(cur);
	return ret;
}
