/* agg.c - the partial aggregate's one merge (agg.h). Pure, no allocation,
 * thread-safe. */
#include "model/agg.h"

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
