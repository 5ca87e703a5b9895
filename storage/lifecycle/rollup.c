/* rollup.c - rollup tiers: what retention keeps of the points it drops.
 *
 * Before retention deletes a chunk, its points are folded into per-bucket
 * aggregates (struct sto_rollup, index.h) of two tiers: time buckets of
 * rollup_time_width_s seconds and step buckets of rollup_step_width steps
 * (a width of 0 turns that tier off). Each bucket start is a multiple of
 * the width. Records are mergeable: merging the record of a set of points
 * with the record of a disjoint set gives exactly the record of their union
 * (sum up to floating-point rounding), so retention merges what it folds
 * into the stored record of the bucket, in the same LMDB transaction that
 * deletes the chunks: a point is in a chunk or in the rollups, never both
 * and never neither, even after a crash.
 *
 * Threading: the flusher thread (retention). Failure: a chunk that cannot
 * be read because it is corrupt is dropped without a rollup (logged); an
 * I/O error stops the retention pass (nothing of that batch is dropped).
 */
#include "storage/lifecycle/lifecycle.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"
#include "common/rdb_sort.h"
#include "storage/format.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool before(int64_t ts1, int64_t step1, int64_t ts2, int64_t step2)
{
	return ts1 < ts2 || (ts1 == ts2 && step1 < step2);
}

static int64_t min_step_of(int64_t a, int64_t b)
{
	if (a == MDL_STEP_NONE)
		return b;
	return b == MDL_STEP_NONE || a <= b ? a : b;
}

static int64_t max_step_of(int64_t a, int64_t b)
{
	if (a == MDL_STEP_NONE)
		return b;
	return b == MDL_STEP_NONE || a >= b ? a : b;
}

void sto_rollup_merge(struct sto_rollup *a, const struct sto_rollup *b)
{
	if (a->count + a->nan_count == 0) {
		*a = *b;
		return;
	}
	if (b->count) {
		a->min = a->count && a->min <= b->min ? a->min : b->min;
		a->max = a->count && a->max >= b->max ? a->max : b->max;
		a->sum += b->sum;
	}
	a->count += b->count;
	a->nan_count += b->nan_count;
	if (before(b->first_ts_ns, b->first_step, a->first_ts_ns, a->first_step)) {
		a->first_ts_ns = b->first_ts_ns;
		a->first_step = b->first_step;
		a->first_bits = b->first_bits;
	}
	if (!before(b->last_ts_ns, b->last_step, a->last_ts_ns, a->last_step)) {
		a->last_ts_ns = b->last_ts_ns;
		a->last_step = b->last_step;
		a->last_bits = b->last_bits;
	}
	a->min_step = min_step_of(a->min_step, b->min_step);
	a->max_step = max_step_of(a->max_step, b->max_step);
	a->nostep_count += b->nostep_count;
	a->min_attempt = a->min_attempt <= b->min_attempt ? a->min_attempt : b->min_attempt;
	a->max_attempt = a->max_attempt >= b->max_attempt ? a->max_attempt : b->max_attempt;
}

static void from_point(struct sto_rollup *r, const struct mdl_cols *c, size_t i)
{
	double v = rdb_bits_f64(c->value[i]);
	memset(r, 0, sizeof(*r));
	r->count = !isnan(v);
	r->nan_count = isnan(v);
	r->sum = r->min = r->max = r->count ? v : 0;
	r->first_bits = r->last_bits = c->value[i];
	r->first_ts_ns = r->last_ts_ns = c->ts_ns[i];
	r->first_step = r->last_step = c->step[i];
	r->min_step = r->max_step = c->step[i];
	r->nostep_count = c->step[i] == MDL_STEP_NONE;
	r->min_attempt = r->max_attempt = c->attempt[i];
}

static int64_t bucket_start(int64_t x, int64_t w)
{
	int64_t q = x / w;
	if (x % w != 0 && x < 0)
		q--;
	return q * w;
}

static int acc_push(struct sti_rollup_acc *a, uint64_t series, unsigned tier, int64_t bucket,
		    const struct sto_rollup *r)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 256;
		struct sti_rollup_ent *p = realloc(a->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		a->v = p;
		a->cap = cap;
	}
	a->v[a->n++] =
	    (struct sti_rollup_ent){.series_id = series, .tier = tier, .bucket = bucket, .r = *r};
	return 0;
}

/* Folds point i into tier's entry: the last one of that tier if it is the
 * same bucket (points come sorted), else a new one. */
static int fold_point(struct sti_rollup_acc *a, size_t *last, uint64_t series, unsigned tier,
		      int64_t bucket, const struct sto_rollup *p)
{
	if (*last < a->n && a->v[*last].series_id == series && a->v[*last].bucket == bucket) {
		sto_rollup_merge(&a->v[*last].r, p);
		return 0;
	}
	*last = a->n;
	return acc_push(a, series, tier, bucket, p);
}

static int fold_cols(struct sto *s, struct sti_rollup_acc *a, uint64_t series,
		     const struct mdl_cols *c)
{
	int64_t tw = (int64_t)s->life.rollup_time_width_s * 1000000000;
	int64_t sw = (int64_t)s->life.rollup_step_width;
	size_t last[2] = {SIZE_MAX, SIZE_MAX};
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < c->n; i++) {
		struct sto_rollup p;
		from_point(&p, c, i);
		if (tw > 0)
			rc = fold_point(a, &last[0], series, STO_TIER_TIME,
					bucket_start(c->ts_ns[i], tw), &p);
		if (rc == 0 && sw > 0 && c->step[i] != MDL_STEP_NONE)
			rc = fold_point(a, &last[1], series, STO_TIER_STEP,
					bucket_start(c->step[i], sw), &p);
	}
	return rc;
}

int sti_rollup_fold(struct sto *s, struct sti_rollup_acc *a, const struct sto_chunk_ref *ref)
{
	struct sto_read_error err;
	struct mdl_cols c = {0};
	if (s->life.rollup_time_width_s == 0 && s->life.rollup_step_width == 0)
		return 0;
	int rc = s->eng->read_chunk(s, ref, &a->rec, &c, &err);
	if (rc == RDB_ECORRUPT) {
		rdb_warn("store", "retention: %s; the chunk is dropped without a rollup", err.msg);
		rc = 0;
	} else if (rc == 0) {
		rc = fold_cols(s, a, ref->series_id, &c);
	}
	mdl_cols_free(&c);
	return rc;
}

static int cmp_ent(const void *x, const void *y)
{
	const struct sti_rollup_ent *a = x, *b = y;
	if (a->series_id != b->series_id)
		return a->series_id < b->series_id ? -1 : 1;
	if (a->tier != b->tier)
		return a->tier < b->tier ? -1 : 1;
	return (a->bucket > b->bucket) - (a->bucket < b->bucket);
}

int sti_rollup_commit(struct sti_rollup_acc *a, struct sto_txn *t)
{
	if (a->n == 0)
		return 0;
	rdb_sort(a->v, a->n, sizeof(*a->v), cmp_ent);
	int rc = sto_fault_hit(STO_FP_ROLLUP_WRITE);
	for (size_t i = 0; rc == 0 && i < a->n;) {
		struct sti_rollup_ent *e = &a->v[i];
		struct sto_rollup r = {0};
		size_t j = i + 1;
		for (; j < a->n && cmp_ent(e, &a->v[j]) == 0; j++)
			sto_rollup_merge(&e->r, &a->v[j].r);
		rc = sto_rollup_get(t, e->series_id, e->tier, e->bucket, &r);
		if (rc == RDB_ENOTFOUND)
			rc = 0;
		if (rc == 0) {
			sto_rollup_merge(&r, &e->r);
			rc = sto_rollup_put(t, e->series_id, e->tier, e->bucket, &r);
		}
		i = j;
	}
	return rc;
}

void sti_rollup_acc_free(struct sti_rollup_acc *a)
{
	free(a->v);
	rdb_buf_free(&a->rec);
	memset(a, 0, sizeof(*a));
}
