/* ix_series.c - the series and sid tables (series key <-> series id,
 * exact inverses) and the job listing derived from series.
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

/* Encodes k into buf (SERIES_KEY_MAX bytes); RDB_EINVAL on bad lengths. */
static int series_key_encode(const struct mdl_series_key *k, uint8_t *buf, size_t *len)
{
	size_t jl = strnlen(k->job, MDL_JOB_MAX + 1);
	size_t ml = strnlen(k->metric, MDL_METRIC_MAX + 1);

	if (jl == 0 || jl > MDL_JOB_MAX || ml == 0 || ml > MDL_METRIC_MAX)
		return RDB_EINVAL;
	memcpy(buf, k->job, jl);
	buf[jl] = 0;
	rdb_put_be32(buf + jl + 1, k->rank);
	memcpy(buf + jl + 5, k->metric, ml);
	*len = jl + 5 + ml;
	return 0;
}

static int series_key_decode(const struct sto_txn *t, const MDB_val *v, struct mdl_series_key *out)
{
	const uint8_t *p = v->mv_data;
	size_t n = v->mv_size;
	size_t scan = n < MDL_JOB_MAX + 1 ? n : MDL_JOB_MAX + 1;
	const uint8_t *nul = memchr(p, 0, scan);
	size_t jl, ml;

	if (!nul || nul == p || n - (size_t)(nul - p) - 1 < 5)
		return ix_corrupt(t, "series key", n);
	jl = (size_t)(nul - p);
	ml = n - jl - 5;
	if (ml > MDL_METRIC_MAX || memchr(p + jl + 5, 0, ml))
		return ix_corrupt(t, "series key", n);
	memcpy(out->job, p, jl);
	out->job[jl] = 0;
	out->rank = rdb_get_be32(p + jl + 1);
	memcpy(out->metric, p + jl + 5, ml);
	out->metric[ml] = 0;
	return 0;
}

/* ---- values with checksums (format 3) ------------------------------------ *
 * series value: id u64 LE, then XXH3-64 of the series key and those 8 bytes.
 * sid value: the series key bytes, then XXH3-64 of the sid key (be64) and
 * those bytes. Before format 3: the id alone / the key bytes alone. */

#define SERIES_VALUE_SIZE 16u
#define SUM_SIZE	  8u

static uint64_t pair_sum(const void *k, size_t kn, const void *v, size_t vn)
{
	uint8_t buf[8 + SERIES_KEY_MAX + 8];
	if (kn + vn > sizeof(buf))
		return 0; /* callers pass bounded keys; a mismatch follows */
	memcpy(buf, k, kn);
	memcpy(buf + kn, v, vn);
	return rdb_hash64(buf, kn + vn, 0);
}

static void series_value_put(const MDB_val *skey, uint64_t id, uint8_t *out)
{
	rdb_put_le64(out, id);
	rdb_put_le64(out + 8, pair_sum(skey->mv_data, skey->mv_size, out, 8));
}

/* The sid value of (idbe, skey) into out (skey->mv_size + 8 bytes). */
static void sid_value_put(const uint8_t *idbe, const MDB_val *skey, uint8_t *out)
{
	memcpy(out, skey->mv_data, skey->mv_size);
	rdb_put_le64(out + skey->mv_size, pair_sum(idbe, 8, skey->mv_data, skey->mv_size));
}

int ix_series_check(const struct sto_txn *t, const MDB_val *k, const MDB_val *v, uint8_t *fixed,
		    size_t *fixed_len, const char **why)
{
	*why = "wrong size";
	if (k->mv_size > SERIES_KEY_MAX)
		return RDB_ECORRUPT;
	if (v->mv_size == 8 && t->ix->legacy_values) {
		series_value_put(k, rdb_get_le64(v->mv_data), fixed);
		*fixed_len = SERIES_VALUE_SIZE;
		return 1;
	}
	if (v->mv_size != SERIES_VALUE_SIZE)
		return RDB_ECORRUPT;
	*why = "checksum mismatch";
	const uint8_t *p = v->mv_data;
	return rdb_get_le64(p + 8) == pair_sum(k->mv_data, k->mv_size, p, 8) ? 0 : RDB_ECORRUPT;
}

int ix_sid_check(const struct sto_txn *t, const MDB_val *k, const MDB_val *v, uint8_t *fixed,
		 size_t *fixed_len, const char **why)
{
	const uint8_t *p = v->mv_data;
	size_t n = v->mv_size;
	*why = "wrong size";
	if (k->mv_size != 8 || n > SERIES_KEY_MAX + SUM_SIZE)
		return RDB_ECORRUPT;
	if (n > SUM_SIZE &&
	    rdb_get_le64(p + n - SUM_SIZE) == pair_sum(k->mv_data, 8, p, n - SUM_SIZE))
		return 0;
	if (t->ix->legacy_values && n <= SERIES_KEY_MAX) {
		MDB_val skey = {.mv_size = n, .mv_data = (void *)p};
		sid_value_put(k->mv_data, &skey, fixed);
		*fixed_len = n + SUM_SIZE;
		return 1;
	}
	*why = "checksum mismatch";
	return RDB_ECORRUPT;
}

static int damaged_value(const struct sto_txn *t, const char *what, const char *why)
{
	static struct rdb_log_ratelimit rl;
	rdb_log_limited(&rl, 10, RDB_LOG_ERROR, SUBSYS,
			"LMDB index %s: a %s is damaged (%s); the operation failed rather than "
			"answer from it. 'rankctl verify' names it; 'rankctl rebuild-index' "
			"recreates the series catalog from the segment files",
			t->ix->dir, what, why);
	return RDB_ECORRUPT;
}

/* The series id of a series-db pair, checked. */
static int series_id_of(const struct sto_txn *t, const MDB_val *k, const MDB_val *v, uint64_t *id)
{
	uint8_t fixed[SERIES_VALUE_SIZE];
	size_t n;
	const char *why;
	if (ix_series_check(t, k, v, fixed, &n, &why) < 0)
		return damaged_value(t, "series catalog entry (series key -> id)", why);
	*id = rdb_get_le64(v->mv_data);
	return 0;
}

/* ---- series -------------------------------------------------------------- */

int sto_series_lookup(struct sto_txn *t, const struct mdl_series_key *k, uint64_t *id)
{
	uint8_t buf[SERIES_KEY_MAX];
	MDB_val key = {.mv_data = buf}, v;
	int ret = series_key_encode(k, buf, &key.mv_size);

	if (ret != 0)
		return ret;
	ret = ix_err(t->ix, mdb_get(t->txn, t->ix->series, &key, &v), "series lookup");
	if (ret != 0)
		return ret;
	return series_id_of(t, &key, &v, id);
}

/* Puts series skey -> nid and sid nid -> skey (nid not yet used). A new id
 * is normally past every sid (ids only grow), so the sid goes in with
 * MDB_APPEND, which skips the tree descent; should an older sid sort after
 * it, the ordinary put decides. */
static int series_insert(struct sto_txn *t, const MDB_val *skey, uint64_t nid)
{
	uint8_t idle[SERIES_VALUE_SIZE], idbe[8], sidv[SERIES_KEY_MAX + SUM_SIZE];
	MDB_val k = *skey, v = {.mv_size = sizeof(idle), .mv_data = idle};
	MDB_val sk = {.mv_size = 8, .mv_data = idbe};
	MDB_val sv = {.mv_size = skey->mv_size + SUM_SIZE, .mv_data = sidv};
	if (nid == 0)
		return ix_corrupt(t, "meta next_series_id (0)", 8);
	series_value_put(skey, nid, idle);
	rdb_put_be64(idbe, nid);
	sid_value_put(idbe, skey, sidv);
	int rc = mdb_put(t->txn, t->ix->sid, &sk, &sv, MDB_APPEND);
	if (rc == MDB_KEYEXIST)
		rc = mdb_put(t->txn, t->ix->sid, &sk, &sv, MDB_NOOVERWRITE);
	int ret = ix_err(t->ix, rc, "sid put");
	if (ret == -EEXIST)
		return ix_corrupt(t, "meta next_series_id (already used)", 8);
	if (ret != 0)
		return ret;
	return ix_err(t->ix, mdb_put(t->txn, t->ix->series, &k, &v, MDB_NOOVERWRITE), "series put");
}

static int series_create(struct sto_txn *t, const MDB_val *skey, uint64_t *id)
{
	uint64_t nid;
	int ret = ix_meta_next(t, "next_series_id", 1, &nid);

	if (ret != 0)
		return ret;
	ret = series_insert(t, skey, nid);
	if (ret == 0)
		*id = nid;
	return ret;
}

int sto_series_ids_reserve(struct sto_txn *t, uint64_t n, uint64_t *first)
{
	uint64_t cur;
	if (!t->write)
		return -EACCES;
	int ret = sto_meta_get(t, "next_series_id", &cur);
	if (ret == RDB_ENOTFOUND)
		cur = 1; /* ids start at 1 */
	else if (ret != 0)
		return ret;
	if (n == 0)
		return RDB_EINVAL;
	if (cur == 0)
		return ix_corrupt(t, "meta next_series_id (0)", 8);
	if (n > UINT64_MAX - cur)
		return RDB_ELIMIT;
	ret = sto_meta_put(t, "next_series_id", cur + n);
	if (ret == 0)
		*first = cur;
	return ret;
}

int sto_series_create_id(struct sto_txn *t, const struct mdl_series_key *k, uint64_t id)
{
	uint8_t buf[SERIES_KEY_MAX];
	MDB_val key = {.mv_data = buf};
	int ret = series_key_encode(k, buf, &key.mv_size);
	if (ret != 0)
		return ret;
	if (!t->write)
		return -EACCES;
	return series_insert(t, &key, id);
}

int sto_series_get_or_create(struct sto_txn *t, const struct mdl_series_key *k, uint64_t *id,
			     bool *created)
{
	uint8_t buf[SERIES_KEY_MAX];
	MDB_val key = {.mv_data = buf}, v;
	int ret = series_key_encode(k, buf, &key.mv_size);

	if (ret != 0)
		return ret;
	if (!t->write)
		return -EACCES;
	ret = ix_err(t->ix, mdb_get(t->txn, t->ix->series, &key, &v), "series lookup");
	if (ret == 0) {
		ret = series_id_of(t, &key, &v, id);
		if (ret == 0)
			*created = false;
		return ret;
	}
	if (ret != RDB_ENOTFOUND)
		return ret;
	ret = series_create(t, &key, id);
	if (ret == 0)
		*created = true;
	return ret;
}

int sto_series_key_of(struct sto_txn *t, uint64_t id, struct mdl_series_key *out)
{
	uint8_t buf[8];
	MDB_val k = {.mv_size = 8, .mv_data = buf}, v;
	int ret;

	rdb_put_be64(buf, id);
	ret = ix_err(t->ix, mdb_get(t->txn, t->ix->sid, &k, &v), "sid get");
	if (ret != 0)
		return ret;
	uint8_t fixed[SERIES_KEY_MAX + SUM_SIZE];
	size_t n;
	const char *why;
	ret = ix_sid_check(t, &k, &v, fixed, &n, &why);
	if (ret < 0)
		return damaged_value(t, "series catalog entry (id -> series key)", why);
	if (ret == 0)
		v.mv_size -= SUM_SIZE; /* 1: a key without checksum (before format 3) */
	return series_key_decode(t, &v, out);
}

static int series_scan(struct sto_txn *t, const char *job, sto_metric_want_fn want,
		       sto_series_fn fn, void *arg)
{
	uint8_t prefix[MDL_JOB_MAX + 1];
	size_t plen = 0;
	struct mdl_series_key key;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	uint64_t id;
	int ret;

	if (job) {
		plen = strnlen(job, MDL_JOB_MAX + 1);
		if (plen == 0 || plen > MDL_JOB_MAX)
			return RDB_EINVAL;
		memcpy(prefix, job, plen);
		prefix[plen++] = 0;
	}
	ret = ix_cursor_open(t, t->ix->series, &cur);
	if (ret != 0)
		return ret;
	for (ret = ix_cursor_seek(t, cur, prefix, plen, &k, &v); ret == 0;
	     ret = ix_cursor_next(t, cur, &k, &v)) {
		if (!ix_has_prefix(&k, prefix, plen))
			break;
		/* the key: job, NUL (the prefix), rank (4 bytes), metric */
		if (want && k.mv_size > plen + 4 &&
		    !want(arg, (const char *)k.mv_data + plen + 4, k.mv_size - plen - 4))
			continue;
		ret = series_key_decode(t, &k, &key);
		if (ret == 0)
			ret = series_id_of(t, &k, &v, &id);
		if (ret == 0)
			ret = fn(arg, &key, id);
		if (ret != 0)
			goto out;
	}
	ret = ret == RDB_ENOTFOUND ? 0 : ret;
out:
	mdb_cursor_close(cur);
	return ret;
}

int sto_series_scan(struct sto_txn *t, const char *job, sto_series_fn fn, void *arg)
{
	return series_scan(t, job, NULL, fn, arg);
}

int sto_series_scan_metric(struct sto_txn *t, const char *job, sto_metric_want_fn want,
			   sto_series_fn fn, void *arg)
{
	if (!job)
		return RDB_EINVAL;
	return series_scan(t, job, want, fn, arg);
}

int sto_jobs_scan(struct sto_txn *t, sto_job_fn fn, void *arg)
{
	char job[MDL_JOB_MAX + 1] = "";
	uint64_t n = 0;
	struct mdl_series_key key;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int ret = ix_cursor_open(t, t->ix->series, &cur);

	if (ret != 0)
		return ret;
	for (ret = ix_cursor_seek(t, cur, NULL, 0, &k, &v); ret == 0;
	     ret = ix_cursor_next(t, cur, &k, &v)) {
		ret = series_key_decode(t, &k, &key);
		if (ret != 0)
			goto out;
		if (n > 0 && strcmp(job, key.job) != 0) {
			ret = fn(arg, job, n);
			if (ret != 0)
				goto out;
			n = 0;
		}
		if (n == 0)
			memcpy(job, key.job, sizeof(job));
		n++;
	}
	if (ret != RDB_ENOTFOUND)
		goto out;
	ret = n > 0 ? fn(arg, job, n) : 0;
out:
	mdb_cursor_close(cur);
	return ret;
}

int sto_series_del(struct sto_txn *t, const struct mdl_series_key *k, uint64_t id)
{
	uint8_t buf[SERIES_KEY_MAX], idbe[8];
	MDB_val key = {.mv_data = buf}, sk = {.mv_size = 8, .mv_data = idbe};
	int ret = series_key_encode(k, buf, &key.mv_size);
	if (ret != 0)
		return ret;
	rdb_put_be64(idbe, id);
	ret = ix_err(t->ix, mdb_del(t->txn, t->ix->series, &key, NULL), "series del");
	if (ret == 0 || ret == RDB_ENOTFOUND)
		ret = ix_err(t->ix, mdb_del(t->txn, t->ix->sid, &sk, NULL), "sid del");
	return ret == RDB_ENOTFOUND ? 0 : ret;
}

int sto_series_put(struct sto_txn *t, const struct mdl_series_key *k, uint64_t id)
{
	uint8_t buf[SERIES_KEY_MAX], idle[SERIES_VALUE_SIZE], idbe[8],
	    sidv[SERIES_KEY_MAX + SUM_SIZE];
	MDB_val key = {.mv_data = buf}, v = {.mv_size = sizeof(idle), .mv_data = idle};
	MDB_val sk = {.mv_size = 8, .mv_data = idbe};
	int ret = series_key_encode(k, buf, &key.mv_size);
	if (ret != 0 || id == 0)
		return ret ? ret : RDB_EINVAL;
	series_value_put(&key, id, idle);
	rdb_put_be64(idbe, id);
	sid_value_put(idbe, &key, sidv);
	MDB_val sv = {.mv_size = key.mv_size + SUM_SIZE, .mv_data = sidv};
	ret = ix_err(t->ix, mdb_put(t->txn, t->ix->series, &key, &v, 0), "series put");
	if (ret == 0)
		ret = ix_err(t->ix, mdb_put(t->txn, t->ix->sid, &sk, &sv, 0), "sid put");
	return ret;
}
