/* agg.h - the partial aggregate of a set of points: what a downsampling
 * bucket, a chunk's index statistics, a rollup record and a cross-rank cell
 * hold, and what two partial aggregates of the same bucket combine into.
 * Plain value type: the body is public.
 *
 * Mergeable by design: a bucket read from two places (two chunks, a chunk
 * and the head, a rollup and the head, two nodes of a scale-out that each
 * hold part of a series) is the mdl_agg_merge of the parts, in any order,
 * with the same result as one pass over all the points except for the
 * rounding of sum (floating point addition is not associative; sums of
 * values that add exactly, such as small multiples of a power of two, are
 * equal in any order). first/last are the values of the points with the
 * smallest/largest (ts, step); ties keep the earlier first and the later
 * merged last.
 */
#ifndef MDL_AGG_H
#define MDL_AGG_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

struct mdl_agg {
	uint64_t count;			 /* non-NaN values (null and NaN are not counted) */
	uint64_t nan_count;		 /* NaN and null values */
	double min, max, sum;		 /* over the non-NaN values; meaningful when count > 0 */
	int64_t first_ts_ns, first_step; /* the point with the smallest (ts, step) */
	int64_t last_ts_ns, last_step;	 /* the point with the largest (ts, step) */
	uint64_t first_bits, last_bits;	 /* their values (IEEE-754 bits), NaN included */
};

/* True when a holds no point (count + nan_count == 0); first/last are then
 * undefined. A zeroed struct mdl_agg is empty. */
static inline bool mdl_agg_empty(const struct mdl_agg *a)
{
	return a->count + a->nan_count == 0;
}

/* Sets a to the aggregate of one point (value as IEEE-754 bits). Inline:
 * it runs once per bucket of a pass over points. */
static inline void mdl_agg_point(struct mdl_agg *a, int64_t ts_ns, int64_t step, uint64_t bits)
{
	double v;
	memcpy(&v, &bits, sizeof(v));
	bool num = v == v;
	*a = (struct mdl_agg){.count = num,
			      .nan_count = !num,
			      .min = num ? v : 0,
			      .max = num ? v : 0,
			      .sum = num ? v : 0,
			      .first_ts_ns = ts_ns,
			      .first_step = step,
			      .last_ts_ns = ts_ns,
			      .last_step = step,
			      .first_bits = bits,
			      .last_bits = bits};
}

/* Merges p into a: a becomes the aggregate of the points of both. a may be
 * empty (it becomes p); an empty p leaves a as it is. The one merge of
 * partial aggregates: chunk statistics, rollups, buckets and the partial
 * results of other nodes all go through it. */
void mdl_agg_merge(struct mdl_agg *a, const struct mdl_agg *p);

/* mdl_agg_merge(a, <the point>) for a non-empty a whose points all come at
 * or before (ts_ns, step): the point is never first and always last. The
 * fast path of a pass over sorted points (inline: it runs per point). */
static inline void mdl_agg_append(struct mdl_agg *a, int64_t ts_ns, int64_t step, uint64_t bits)
{
	double v;
	memcpy(&v, &bits, sizeof(v));
	if (v == v) {
		a->min = a->count && a->min <= v ? a->min : v;
		a->max = a->count && a->max >= v ? a->max : v;
		a->sum += v;
		a->count++;
	} else {
		a->nan_count++;
	}
	a->last_ts_ns = ts_ns;
	a->last_step = step;
	a->last_bits = bits;
}

#endif
