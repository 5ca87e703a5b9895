/* agg.c - the partial aggregate's point constructor and its one merge
 * (agg.h). Pure functions, no allocation, thread-safe. */
#include "model/agg.h"

#include <math.h>

void mdl_agg_point(struct mdl_agg *a, int64_t ts_ns, int64_t step, uint64_t bits)
{
	double v;
	memcpy(&v, &bits, sizeof(v));
	memset(a, 0, sizeof(*a));
	a->count = !isnan(v);
	a->nan_count = isnan(v);
	a->min = a->max = a->sum = a->count ? v : 0;
	a->first_ts_ns = a->last_ts_ns = ts_ns;
	a->first_step = a->last_step = step;
	a->first_bits = a->last_bits = bits;
}

static bool before(int64_t ts1, int64_t step1, int64_t ts2, int64_t step2)
{
	return ts1 < ts2 || (ts1 == ts2 && step1 < step2);
}

void mdl_agg_merge(struct mdl_agg *a, const struct mdl_agg *p)
{
	if (mdl_agg_empty(p))
		return;
	if (mdl_agg_empty(a)) {
		*a = *p;
		return;
	}
	if (p->count) {
		a->min = a->count && a->min <= p->min ? a->min : p->min;
		a->max = a->count && a->max >= p->max ? a->max : p->max;
		a->sum += p->sum;
	}
	a->count += p->count;
	a->nan_count += p->nan_count;
	if (before(p->first_ts_ns, p->first_step, a->first_ts_ns, a->first_step)) {
		a->first_ts_ns = p->first_ts_ns;
		a->first_step = p->first_step;
		a->first_bits = p->first_bits;
	}
	if (!before(p->last_ts_ns, p->last_step, a->last_ts_ns, a->last_step)) {
		a->last_ts_ns = p->last_ts_ns;
		a->last_step = p->last_step;
		a->last_bits = p->last_bits;
	}
}
