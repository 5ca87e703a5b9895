/* cols.c - growable point columns. Single owner, not thread-safe.
 * Growth is by half the capacity (1.5x), or to exactly what is asked when
 * that is more, not doubling: the storage head keeps one set of columns
 * per series for up to a checkpoint interval, and the unused tail of each
 * is resident memory (doubling left a 64-rank load's head at 1.74x its
 * points at the checkpoint). Callers bound the total through their own
 * limits (chunk_max_points, batch bounds, query max_points). */
#include "model/cols.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The capacity c grows to for want points: half again what it has, or
 * want when that is more (so columns filled a batch at a time are sized
 * to the batch: 64, 128, 192, 288 ... for batches of 64, where growing
 * by half from 16 would give 81, 181, 271), at least 16. */
static size_t grown_cap(const struct mdl_cols *c, size_t want)
{
	size_t cap = c->cap + c->cap / 2;
	if (cap < 16)
		cap = 16;
	return cap < want ? want : cap;
}

int mdl_cols_reserve(struct mdl_cols *c, size_t want)
{
	if (want <= c->cap)
		return 0;
	size_t cap = grown_cap(c, want);
	int64_t *ts = realloc(c->ts_ns, cap * sizeof(*ts));
	if (!ts)
		return -ENOMEM;
	c->ts_ns = ts;
	int64_t *st = realloc(c->step, cap * sizeof(*st));
	if (!st)
		return -ENOMEM;
	c->step = st;
	uint32_t *at = realloc(c->attempt, cap * sizeof(*at));
	if (!at)
		return -ENOMEM;
	c->attempt = at;
	uint64_t *v = realloc(c->value, cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	c->value = v;
	c->cap = cap;
	return 0;
}

int mdl_cols_reserve_moving(struct mdl_cols *c, size_t want)
{
	if (want <= c->cap)
		return 0;
	size_t cap = grown_cap(c, want);
	int64_t *ts = malloc(cap * sizeof(*ts));
	int64_t *st = malloc(cap * sizeof(*st));
	uint32_t *at = malloc(cap * sizeof(*at));
	uint64_t *v = malloc(cap * sizeof(*v));
	if (!ts || !st || !at || !v) {
		free(ts);
		free(st);
		free(at);
		free(v);
		return -ENOMEM;
	}
	if (c->n) {
		memcpy(ts, c->ts_ns, c->n * sizeof(*ts));
		memcpy(st, c->step, c->n * sizeof(*st));
		memcpy(at, c->attempt, c->n * sizeof(*at));
		memcpy(v, c->value, c->n * sizeof(*v));
	}
	free(c->ts_ns);
	free(c->step);
	free(c->attempt);
	free(c->value);
	c->ts_ns = ts;
	c->step = st;
	c->attempt = at;
	c->value = v;
	c->cap = cap;
	return 0;
}

int mdl_cols_push(struct mdl_cols *c, int64_t ts_ns, int64_t step, uint32_t attempt, uint64_t value)
{
	if (c->n == c->cap) {
		int rc = mdl_cols_reserve(c, c->n + 1);
		if (rc)
			return rc;
	}
	c->ts_ns[c->n] = ts_ns;
	c->step[c->n] = step;
	c->attempt[c->n] = attempt;
	c->value[c->n] = value;
	c->n++;
	return 0;
}

void mdl_cols_free(struct mdl_cols *c)
{
	if (!c)
		return;
	free(c->ts_ns);
	free(c->step);
	free(c->attempt);
	free(c->value);
	memset(c, 0, sizeof(*c));
}

static int cmp_point(const struct mdl_cols *c, size_t a, size_t b)
{
	if (c->ts_ns[a] != c->ts_ns[b])
		return c->ts_ns[a] < c->ts_ns[b] ? -1 : 1;
	if (c->step[a] != c->step[b])
		return c->step[a] < c->step[b] ? -1 : 1;
	if (c->attempt[a] != c->attempt[b])
		return c->attempt[a] < c->attempt[b] ? -1 : 1;
	return 0;
}

/* Stable merge sort of the permutation idx[0..n) using tmp as scratch. */
static void msort(const struct mdl_cols *c, uint32_t *idx, uint32_t *tmp, size_t n)
{
	if (n < 2)
		return;
	size_t h = n / 2;
	msort(c, idx, tmp, h);
	msort(c, idx + h, tmp, n - h);
	if (cmp_point(c, idx[h - 1], idx[h]) <= 0)
		return;
	size_t i = 0, j = h, k = 0;
	while (i < h && j < n)
		tmp[k++] = cmp_point(c, idx[j], idx[i]) < 0 ? idx[j++] : idx[i++];
	while (i < h)
		tmp[k++] = idx[i++];
	while (j < n)
		tmp[k++] = idx[j++];
	memcpy(idx, tmp, n * sizeof(*idx));
}

#define PERMUTE(arr, type)                                                                         \
	do {                                                                                       \
		type *dst_ = scratch;                                                              \
		for (size_t i_ = 0; i_ < c->n; i_++)                                               \
			dst_[i_] = (arr)[idx[i_]];                                                 \
		memcpy((arr), dst_, c->n * sizeof(type));                                          \
	} while (0)

int mdl_cols_sort_by_time(struct mdl_cols *c)
{
	size_t i;
	for (i = 1; i < c->n; i++)
		if (cmp_point(c, i - 1, i) > 0)
			break;
	if (i >= c->n)
		return 0; /* already sorted: the common case */
	int rc = -ENOMEM;
	uint32_t *idx = malloc(c->n * sizeof(*idx));
	uint32_t *tmp = malloc(c->n * sizeof(*tmp));
	void *scratch = malloc(c->n * sizeof(uint64_t));
	if (!idx || !tmp || !scratch)
		goto out;
	for (i = 0; i < c->n; i++)
		idx[i] = (uint32_t)i;
	msort(c, idx, tmp, c->n);
	PERMUTE(c->ts_ns, int64_t);
	PERMUTE(c->step, int64_t);
	PERMUTE(c->attempt, uint32_t);
	PERMUTE(c->value, uint64_t);
	rc = 0;
out:
	free(idx);
	free(tmp);
	free(scratch);
	return rc;
}

bool mdl_cols_same_time(const struct mdl_cols *a, const struct mdl_cols *b)
{
	return a->n == b->n && memcmp(a->ts_ns, b->ts_ns, a->n * sizeof(int64_t)) == 0 &&
	       memcmp(a->step, b->step, a->n * sizeof(int64_t)) == 0 &&
	       memcmp(a->attempt, b->attempt, a->n * sizeof(uint32_t)) == 0;
}
