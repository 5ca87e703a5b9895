/* ix_supersede.c - the supersede table: merged chunk uid -> the source
 * chunks it replaced (small-chunk merges, so a query from an older snapshot
 * still finds them).
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

/* ---- supersede tracking --------------------------------------------------- */

/* Supersede entry value v1, little-endian:
 *    0 u8 version (1)  1 u8[3] zero  4 u32 record length  8 u64 segment id
 *   16 u64 offset  24 u64 series id  32 i64 merged min_ts  40 u64 gen
 *   48 u32 nsrc  52 u32 nseg  56 nsrc * (u64 uid, i64 min_ts), nseg * u64
 * sealed (ix_seal.c: a checksum trailer since format 5). A damaged entry is
 * RDB_ECORRUPT (writers refuse to act on it); sto_sup_scan skips it in a
 * sto_txn_pass_damaged transaction (verify, which names it). */
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
	MDB_val k = {.mv_size = 8, .mv_data = kb};
	int ret = ix_put_sealed(t, t->ix->supersede, &k, p, len, "supersede put");
	free(p);
	return ret;
}

#define SUP_REMEDY                                                                                 \
	"compaction and merges refuse to run; 'rankctl rebuild-index' recreates it from "          \
	"the segment files"

/* Decodes a value into *e with new arrays; untouched on failure. */
static int sup_decode(struct sto_txn *t, const MDB_val *k, const MDB_val *sealed,
		      struct sto_sup_entry *e)
{
	MDB_val body;
	if (ix_unseal(t, k, sealed, &body) < 0)
		return ix_damaged(t, "supersede", k, SUP_REMEDY);
	const MDB_val *v = &body;
	const uint8_t *p = v->mv_data;
	if (k->mv_size != 8 || v->mv_size < S_FIXED || p[0] != SUP_VERSION)
		return ix_corrupt(t, "supersede entry", v->mv_size);
	uint32_t nsrc = rdb_get_le32(p + S_NSRC), nseg = rdb_get_le32(p + S_NSEG);
	if (nsrc < 2 || nsrc > STO_SUP_MAX_SOURCES || nseg > (1u << 24) ||
	    v->mv_size != S_FIXED + (size_t)nsrc * 16 + (size_t)nseg * 8)
		return ix_corrupt(t, "supersede entry", v->mv_size);
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
	int ret = ix_cursor_open(t, t->ix->supersede, &cur);
	if (ret != 0)
		return ret;
	for (ret = ix_cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
	     ret = ix_cursor_next(t, cur, &k, &v)) {
		struct sto_sup_entry e;
		MDB_val body;
		if (t->pass_damaged && ix_unseal(t, &k, &v, &body) < 0)
			continue; /* verify names it (sto_index_check_values) */
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
