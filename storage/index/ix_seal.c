/* ix_seal.c - checksummed values of the tables format 5 covers: meta,
 * events, evpending, pending, batch_ids, batch_time, tombstones,
 * retention, quarantine, seg_trash and supersede.
 *
 * Each value of those tables is its body (the bytes it held before format
 * 5; empty for the key-only tables) followed by a trailer: u64 LE XXH3-64
 * (seed 0) of the key's bytes, then the body's (of an events entry: its
 * first STO_EVENTRY_FIXED bytes only, which hold the checksum of its token
 * filter; the upgrade also rewrites a version 1 entry as version 2). A
 * flipped bit in the key or the body fails it, and so does a value moved
 * under another key. Before
 * format 5 (t->ix->legacy_small) a value whose trailer does not match is
 * read as a body without one (the upgrade at open gives it one); afterwards
 * it is damage. The series, sid, chunks and rollups tables carry their
 * checksums inside their layouts (format 3: ix_series.c, ix_chunks.c,
 * ix_rollups.c).
 *
 * Threading and failure as in index.c.
 */
#include "storage/index/ix_int.h"

#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"
#include "storage/format.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The checksum of key k and the first `cover` bytes of the n-byte body (all
 * of it when it is shorter). */
static uint64_t seal_sum(const MDB_val *k, const void *body, size_t n, size_t cover)
{
	return rdb_hash64_2(k->mv_data, k->mv_size, body, n < cover ? n : cover, 0);
}

/* How much of a body of table dbi its trailer covers: an events entry's
 * fixed part only (its filter has a checksum of its own inside that part,
 * checked when a query consults it: reading one entry must not hash and
 * fault in up to 64 KiB of filter); all of it for the other tables. */
static size_t seal_cover(const struct sto_index *ix, MDB_dbi dbi)
{
	return dbi == ix->events ? STO_EVENTRY_FIXED : SIZE_MAX;
}

int ix_unseal(const struct sto_txn *t, const MDB_val *k, const MDB_val *v, MDB_val *body)
{
	return ix_unseal_part(t, k, v, SIZE_MAX, body);
}

int ix_unseal_part(const struct sto_txn *t, const MDB_val *k, const MDB_val *v, size_t cover,
		   MDB_val *body)
{
	size_t n = v->mv_size;
	if (n >= IX_SUM_SIZE) {
		const uint8_t *p = v->mv_data;
		if (rdb_get_le64(p + n - IX_SUM_SIZE) == seal_sum(k, p, n - IX_SUM_SIZE, cover)) {
			body->mv_data = v->mv_data;
			body->mv_size = n - IX_SUM_SIZE;
			return 0;
		}
	}
	if (!t->ix->legacy_small)
		return RDB_ECORRUPT;
	*body = *v;
	return 1;
}

int ix_put_sealed(struct sto_txn *t, MDB_dbi dbi, const MDB_val *k, const void *body, size_t n,
		  const char *op)
{
	uint8_t small[256];
	uint8_t *p = n + IX_SUM_SIZE <= sizeof(small) ? small : malloc(n + IX_SUM_SIZE);
	if (!p)
		return -ENOMEM;
	if (n)
		memcpy(p, body, n);
	rdb_put_le64(p + n, seal_sum(k, p, n, seal_cover(t->ix, dbi)));
	MDB_val v = {.mv_size = n + IX_SUM_SIZE, .mv_data = p};
	int ret = ix_err(t->ix, mdb_put(t->txn, dbi, (MDB_val *)k, &v, 0), op);
	if (p != small)
		free(p);
	return ret;
}

/* Up to 64 bytes of a key, printable bytes as they are, others as \xNN. */
void ix_key_text(const MDB_val *k, char *out, size_t size)
{
	const uint8_t *p = k->mv_data;
	size_t o = 0, n = k->mv_size > 64 ? 64 : k->mv_size;
	for (size_t i = 0; i < n && o + 5 < size; i++)
		if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\')
			out[o++] = (char)p[i];
		else
			o += (size_t)snprintf(out + o, size - o, "\\x%02x", p[i]);
	if (n < k->mv_size && o + 4 < size)
		o += (size_t)snprintf(out + o, size - o, "...");
	out[o < size ? o : size - 1] = 0;
}

int ix_damaged(const struct sto_txn *t, const char *table, const MDB_val *k, const char *remedy)
{
	static struct rdb_log_ratelimit rl;
	char key[300];
	ix_key_text(k, key, sizeof(key));
	rdb_log_limited(&rl, 10, RDB_LOG_ERROR, SUBSYS,
			"LMDB index %s: the %s entry with key '%s' failed its checksum; the "
			"operation failed rather than act on it. 'rankctl verify' names it; %s",
			t->ix->dir, table, key, remedy);
	return RDB_ECORRUPT;
}

/* ---- the upgrade to format 5 ------------------------------------------------ */

struct seal_slot {
	MDB_val k, v; /* owned copies */
};

static void slots_free(struct seal_slot *sl, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(sl[i].k.mv_data);
		free(sl[i].v.mv_data);
	}
}

static int dup_val(const MDB_val *src, MDB_val *dst)
{
	dst->mv_size = src->mv_size;
	dst->mv_data = malloc(src->mv_size ? src->mv_size : 1);
	if (!dst->mv_data)
		return -ENOMEM;
	if (src->mv_size)
		memcpy(dst->mv_data, src->mv_data, src->mv_size);
	return 0;
}

/* Bytes of keys and values one upgrade transaction copies and rewrites at
 * most (past the count limit's 4096 pairs, which events entries of up to
 * 64 KiB each would turn into 256 MiB of copies and dirty pages). */
#define SEAL_BATCH_BYTES (8u << 20)

/* Copies out the next (at most max) pairs after *from (all when from is
 * empty) whose values have no trailer, stopping after the one that brings
 * the copies to SEAL_BATCH_BYTES; *more says whether the table goes on;
 * *from becomes the last key seen (owned). */
static int seal_collect(struct sto_txn *t, MDB_dbi dbi, struct seal_slot *sl, size_t max, size_t *n,
			MDB_val *from, bool *more)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v, body;
	size_t seen = 0, bytes = 0;
	int ret = ix_cursor_open(t, dbi, &cur);
	if (ret != 0)
		return ret;
	*n = 0;
	*more = false;
	for (ret = ix_cursor_seek(t, cur, from->mv_data, from->mv_size, &k, &v); ret == 0;
	     ret = ix_cursor_next(t, cur, &k, &v)) {
		if (from->mv_size && k.mv_size == from->mv_size &&
		    memcmp(k.mv_data, from->mv_data, k.mv_size) == 0)
			continue;
		if (seen++ == max) {
			*more = true;
			break;
		}
		free(from->mv_data);
		from->mv_data = NULL;
		from->mv_size = 0;
		ret = dup_val(&k, from);
		if (ret == 0 && ix_unseal_part(t, &k, &v, seal_cover(t->ix, dbi), &body) == 1) {
			ret = dup_val(&k, &sl[*n].k);
			if (ret == 0)
				ret = dup_val(&v, &sl[*n].v);
			(*n)++;
			bytes += k.mv_size + v.mv_size;
		}
		if (ret != 0)
			break;
		if (bytes >= SEAL_BATCH_BYTES) {
			*more = true;
			break;
		}
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
	mdb_cursor_close(cur);
	return ret;
}

/* A version 1 events entry (formats 1 to 4: the filter at byte 80, no
 * checksum of it) as version 2 (storage/format.h), in place of *v (owned);
 * anything else is left as it is (it fails its checks as before). */
static int ev_entry_v2(MDB_val *v)
{
	const uint8_t *p = v->mv_data;
	size_t n = v->mv_size;
	if (n < STO_EVENTRY_V1_FIXED || p[0] != 1)
		return 0;
	size_t bl = n - STO_EVENTRY_V1_FIXED;
	uint8_t *q = malloc(STO_EVENTRY_FIXED + bl);
	if (!q)
		return -ENOMEM;
	memcpy(q, p, STO_EVENTRY_V1_FIXED);
	q[0] = 2;
	rdb_put_le64(q + STO_EVENTRY_V1_FIXED, rdb_hash64(p + STO_EVENTRY_V1_FIXED, bl, 0));
	memcpy(q + STO_EVENTRY_FIXED, p + STO_EVENTRY_V1_FIXED, bl);
	free(v->mv_data);
	v->mv_data = q;
	v->mv_size = STO_EVENTRY_FIXED + bl;
	return 0;
}

int ix_seal_legacy(struct sto_index *ix, MDB_dbi dbi, size_t batch, uint64_t *rewritten)
{
	struct seal_slot *sl = calloc(batch, sizeof(*sl));
	MDB_val from = {0};
	size_t n = 0;
	bool more = true;
	int ret = sl ? 0 : -ENOMEM;
	while (ret == 0 && more) {
		struct sto_txn *t = NULL;
		ret = sto_txn_begin(ix, true, &t);
		if (ret != 0)
			break;
		ret = seal_collect(t, dbi, sl, batch, &n, &from, &more);
		for (size_t i = 0; ret == 0 && i < n; i++) {
			if (dbi == ix->events)
				ret = ev_entry_v2(&sl[i].v);
			if (ret == 0)
				ret = ix_put_sealed(t, dbi, &sl[i].k, sl[i].v.mv_data,
						    sl[i].v.mv_size, "upgrade put");
		}
		slots_free(sl, n);
		memset(sl, 0, batch * sizeof(*sl));
		if (ret != 0) {
			sto_txn_abort(t);
			break;
		}
		ret = sto_txn_commit(t);
		if (ret == 0)
			*rewritten += n;
	}
	free(from.mv_data);
	free(sl);
	return ret;
}

void ix_sealed_dbs(const struct sto_index *ix, struct ix_sealed_db *out)
{
	const char *rebuild = "'rankctl rebuild-index' recreates it from the segment files";
	const struct ix_sealed_db v[IX_NSEALED] = {
	    {"meta", ix->meta,
	     "the store does not open on it; 'rankctl rebuild-index' recreates the counters"},
	    {"events", ix->events,
	     "queries decode its chunk instead; 'verify --quarantine' rewrites it from the "
	     "chunk"},
	    {"evpending", ix->evpending, rebuild},
	    {"pending", ix->pending, rebuild},
	    {"batch_ids", ix->batch_ids,
	     "writes with that batch id fail until it expires (rebuild-index forgets batch "
	     "ids)"},
	    {"batch_time", ix->batch_time, "the next pruning of batch ids removes it"},
	    {"tombstones", ix->tombstones,
	     "the store does not open on it; delete the job again after 'rankctl "
	     "rebuild-index'"},
	    {"retention", ix->retention, "retention passes fail; set the job's retention again"},
	    {"quarantine", ix->quarantine, "rebuild-index forgets the quarantine list"},
	    {"seg_trash", ix->seg_trash,
	     "its segment file is not unlinked (dead space); rebuild-index forgets the list"},
	    {"supersede", ix->supersede,
	     "compaction and merges refuse to run; 'rankctl rebuild-index' recreates it "
	     "from the segment files"},
	};
	memcpy(out, v, sizeof(v));
}
