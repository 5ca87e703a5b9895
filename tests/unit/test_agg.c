/* test_agg.c - the partial aggregate (model/agg.h), linking the model
 * layer only: every split of a random point sequence into two parts,
 * aggregated separately and merged (in either order), equals one pass over
 * all the points; the append fast path equals a merge of one point; empty
 * aggregates are neutral. Values are multiples of 0.25, so sums are exact
 * in any order; NaN and null values are mixed in. */
#include "check.h"
#include "common/rdb_le.h"
#include "model/agg.h"
#include "model/series.h"

#include <math.h>
#include <string.h>

#define N 64

struct p {
	int64_t ts, step;
	uint64_t bits;
};

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* The aggregate of p[lo..hi) in order, through mdl_agg_point + append. */
static struct mdl_agg fold(const struct p *p, size_t lo, size_t hi)
{
	struct mdl_agg a;
	memset(&a, 0, sizeof(a));
	for (size_t i = lo; i < hi; i++) {
		if (i == lo)
			mdl_agg_point(&a, p[i].ts, p[i].step, p[i].bits);
		else
			mdl_agg_append(&a, p[i].ts, p[i].step, p[i].bits);
	}
	return a;
}

/* The aggregate of p[lo..hi) as merges of single points, in reverse order. */
static struct mdl_agg merged_points(const struct p *p, size_t lo, size_t hi)
{
	struct mdl_agg a, one;
	memset(&a, 0, sizeof(a));
	for (size_t i = hi; i-- > lo;) {
		mdl_agg_point(&one, p[i].ts, p[i].step, p[i].bits);
		mdl_agg_merge(&a, &one);
	}
	return a;
}

static bool same(const struct mdl_agg *x, const struct mdl_agg *y)
{
	bool ok = x->count == y->count && x->nan_count == y->nan_count &&
		  x->first_ts_ns == y->first_ts_ns && x->first_step == y->first_step &&
		  x->last_ts_ns == y->last_ts_ns && x->last_step == y->last_step &&
		  x->first_bits == y->first_bits && x->last_bits == y->last_bits;
	if (x->count)
		ok = ok && x->min == y->min && x->max == y->max && x->sum == y->sum;
	return ok;
}

static void fill(struct p *p)
{
	for (size_t i = 0; i < N; i++) {
		uint64_t r = rnd() % 100;
		p[i].ts = 1000 + (int64_t)i * 10;
		p[i].step = (int64_t)i;
		p[i].bits = r < 8    ? MDL_VALUE_NAN_BITS
			    : r < 12 ? MDL_VALUE_NULL_BITS
				     : rdb_f64_bits((double)((int64_t)(rnd() % 801) - 400) * 0.25);
	}
}

static void test_split_merge(void)
{
	struct p p[N];
	for (int round = 0; round < 50; round++) {
		fill(p);
		struct mdl_agg whole = fold(p, 0, N);
		struct mdl_agg singles = merged_points(p, 0, N);
		CHECK(same(&whole, &singles));
		for (size_t cut = 0; cut <= N; cut++) {
			struct mdl_agg a = fold(p, 0, cut), b = fold(p, cut, N);
			struct mdl_agg ab = a, ba = b;
			mdl_agg_merge(&ab, &b);
			mdl_agg_merge(&ba, &a);
			CHECK(same(&ab, &whole));
			CHECK(same(&ba, &whole));
		}
	}
}

static void test_ties_and_empty(void)
{
	struct mdl_agg a, b, e;
	memset(&e, 0, sizeof(e));
	CHECK(mdl_agg_empty(&e));
	mdl_agg_point(&a, 5, 1, rdb_f64_bits(1.0));
	mdl_agg_point(&b, 5, 1, rdb_f64_bits(2.0));
	struct mdl_agg x = a;
	mdl_agg_merge(&x, &e);
	CHECK(same(&x, &a));
	x = e;
	mdl_agg_merge(&x, &a);
	CHECK(same(&x, &a));
	/* equal (ts, step): the earlier first stays, the merged last wins */
	mdl_agg_merge(&x, &b);
	CHECK(x.first_bits == rdb_f64_bits(1.0) && x.last_bits == rdb_f64_bits(2.0));
	CHECK(x.count == 2 && x.sum == 3.0 && x.min == 1.0 && x.max == 2.0);
	/* all NaN: counted apart, min/max/sum untouched by them */
	mdl_agg_point(&x, 1, 0, MDL_VALUE_NAN_BITS);
	mdl_agg_append(&x, 2, 0, MDL_VALUE_NULL_BITS);
	CHECK(x.count == 0 && x.nan_count == 2 && x.last_bits == MDL_VALUE_NULL_BITS);
	mdl_agg_merge(&x, &a);
	CHECK(x.count == 1 && x.min == 1.0 && x.max == 1.0 && x.sum == 1.0);
	CHECK(x.first_bits == MDL_VALUE_NAN_BITS && x.last_bits == rdb_f64_bits(1.0));
}

int main(void)
{
	RUN(test_split_merge);
	RUN(test_ties_and_empty);
	return check_summary("agg");
}
