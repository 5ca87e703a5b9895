/* cols.c - growable point columns. Single owner, not thread-safe.
 * Growth is by half the capacity (1.5x), or to exactly what is asked when
 * that is more, not doubling: the storage head keeps one set of columns
 * per series for up to a checkpoint interval, and the unused tail of each
 * is resident memory (doubling left a 64-rank load's head at 1.74x its
 * points at the checkpoint). Callers bound the total through their own
 * limits (chunk_max_points, batch bounds, query max_points). */
#include "model/cols.h"

#include <errno.h>
#include <stdint.h>
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

/* The four columns of cap points are one block, ts_ns first (the block's
 * address), then step, value and attempt (the 8-byte columns before the
 * 4-byte one: all aligned): one allocation per growth, not four (the head
 * grows a series' columns a dozen times per checkpoint, on the HTTP
 * workers). */
#define COL_BYTES (sizeof(int64_t) + sizeof(int64_t) + sizeof(uint64_t) + sizeof(uint32_t))

static void cols_point(struct mdl_cols *c, void *block, size_t cap)
{
	c->ts_ns = block;
	c->step = c->ts_ns + cap;
	c->value = (uint64_t *)(c->step + cap);
	c->attempt = (uint32_t *)(c->value + cap);
}

int mdl_cols_reserve(struct mdl_cols *c, size_t want)
{
	if (want <= c->cap)
		return 0;
	size_t cap = grown_cap(c, want), old = c->cap;
	if (cap > SIZE_MAX / COL_BYTES)
		return -ENOMEM;
	void *block = realloc(c->ts_ns, cap * COL_BYTES);
	if (!block)
		return -ENOMEM;
	struct mdl_cols was;
	cols_point(&was, block, old);
	cols_point(c, block, cap);
	/* every column moves up (the last the most): last first */
	memmove(c->attempt, was.attempt, old * sizeof(uint32_t));
	memmove(c->value, was.value, old * sizeof(uint64_t));
	memmove(c->step, was.step, old * sizeof(int64_t));
	c->cap = cap;
	return 0;
}

int mdl_cols_reserve_moving(struct mdl_cols *c, size_t want)
{
	if (want <= c->cap)
		return 0;
	size_t cap = grown_cap(c, want);
	if (cap > SIZE_MAX / COL_BYTES)
		return -ENOMEM;
	void *block = malloc(cap * COL_BYTES);
	if (!block)
		return -ENOMEM;
	struct mdl_cols to = {.n = c->n, .cap = cap};
	cols_point(&to, block, cap);
	if (c->n) {
		memcpy(to.ts_ns, c->ts_ns, c->n * sizeof(int64_t));
		memcpy(to.step, c->step, c->n * sizeof(int64_t));
		memcpy(to.attempt, c->attempt, c->n * sizeof(uint32_t));
		memcpy(to.value, c->value, c->n * sizeof(uint64_t));
	}
	free(c->ts_ns);
	*c = to;
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
	free(c->ts_ns); /* the block of all four */
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
