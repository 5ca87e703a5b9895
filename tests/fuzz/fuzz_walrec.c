/* fuzz_walrec.c - fuzz target for the WAL's series definitions decoder
 * (sto_defs_decode, record type 4) and compact points decoder
 * (sto_batch_decode_compact, the points of record type 5), the two
 * payloads that replay takes from disk since WAL version 5.
 *
 * Input: u16 LE D, then D bytes of a definitions payload, then the rest as
 * a compact points payload. The definitions that decode fill the lookup
 * table (at most TABLE_MAX ids, later ones replace earlier ones as replay
 * does); the points are decoded through it. A compact payload that decodes
 * is encoded again with the ids it was decoded from and must decode to the
 * same points. The target must never crash, leak or read out of bounds,
 * whatever the bytes. */
#include "storage/wal/batch_codec.h"
#include "common/rdb_err.h"
#include "model/batch.h"

#include <stdlib.h>
#include <string.h>

#define TABLE_MAX 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct table {
	size_t n;
	uint64_t sid[TABLE_MAX];
	struct sto_wal_key k[TABLE_MAX];
};

static int table_add(void *arg, uint64_t sid, const struct sto_wal_key *k)
{
	struct table *t = arg;
	for (size_t i = 0; i < t->n; i++)
		if (t->sid[i] == sid) {
			t->k[i] = *k;
			return 0;
		}
	if (t->n == TABLE_MAX)
		return RDB_ELIMIT;
	t->sid[t->n] = sid;
	t->k[t->n++] = *k;
	return 0;
}

static const struct sto_wal_key *table_get(void *arg, uint64_t sid)
{
	struct table *t = arg;
	for (size_t i = 0; i < t->n; i++)
		if (t->sid[i] == sid)
			return &t->k[i];
	return NULL;
}

/* The id the table gives series s of b (the first matching key). */
static uint64_t sid_of(const struct table *t, const struct mdl_batch_series *s)
{
	for (size_t i = 0; i < t->n; i++) {
		const struct sto_wal_key *k = &t->k[i];
		if (k->rank == s->key.rank && k->job_len == s->job_len &&
		    k->metric_len == s->metric_len && !memcmp(k->job, s->key.job, k->job_len) &&
		    !memcmp(k->metric, s->key.metric, k->metric_len))
			return t->sid[i];
	}
	abort(); /* the decoder named a series the table does not hold */
}

static void same_or_abort(const struct mdl_batch *a, const struct mdl_batch *b)
{
	if (mdl_batch_nseries(a) != mdl_batch_nseries(b) ||
	    mdl_batch_points(a) != mdl_batch_points(b))
		abort();
	for (size_t i = 0; i < mdl_batch_nseries(a); i++) {
		const struct mdl_batch_series *x = mdl_batch_series_at(a, i);
		const struct mdl_batch_series *y = mdl_batch_series_at(b, i);
		size_t n = x->pts.n;
		/* the same series, not only the same points under another one */
		if (x->key.rank != y->key.rank || x->job_len != y->job_len ||
		    x->metric_len != y->metric_len || memcmp(x->key.job, y->key.job, x->job_len) ||
		    memcmp(x->key.metric, y->key.metric, x->metric_len))
			abort();
		if (y->pts.n != n || memcmp(x->pts.ts_ns, y->pts.ts_ns, n * 8) ||
		    memcmp(x->pts.step, y->pts.step, n * 8) ||
		    memcmp(x->pts.attempt, y->pts.attempt, n * 4) ||
		    memcmp(x->pts.value, y->pts.value, n * 8))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct table t = {0};
	struct mdl_batch *b = NULL, *again = NULL;
	struct rdb_buf buf;
	rdb_buf_init(&buf, 1u << 24);
	uint64_t *sids = NULL, missing = 0;
	if (size < 2)
		return 0;
	size_t d = (size_t)data[0] | (size_t)data[1] << 8;
	if (d > size - 2)
		d = size - 2;
	(void)sto_defs_decode(data + 2, d, table_add, &t);
	if (mdl_batch_new(1u << 16, 4096, &b) || mdl_batch_new(1u << 16, 4096, &again))
		goto out;
	const uint8_t *p = data + 2 + d;
	int rc = sto_batch_decode_compact(b, p, size - 2 - d, table_get, &t, &missing);
	if (rc == RDB_ENOTFOUND && table_get(&t, missing))
		abort();
	if (rc)
		goto out;
	size_t n = mdl_batch_nseries(b);
	sids = malloc((n ? n : 1) * sizeof(*sids));
	if (!sids)
		goto out;
	for (size_t i = 0; i < n; i++)
		sids[i] = sid_of(&t, mdl_batch_series_at(b, i));
	if (sto_batch_encode_compact(b, sids, &buf) == 0) {
		if (sto_batch_decode_compact(again, buf.data, buf.len, table_get, &t, &missing))
			abort();
		same_or_abort(b, again);
	}
out:
	free(sids);
	rdb_buf_free(&buf);
	mdl_batch_free(b);
	mdl_batch_free(again);
	return 0;
}
