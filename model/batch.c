/* batch.c - write batches.
 *
 * Points are appended to flat columns tagged with a series slot; series
 * keys are interned in an open-addressing hash table (XXH3 of the metric,
 * seeded by XXH3 of the job seeded by the rank: a record's metrics share
 * one (job, rank), hashed once). mdl_batch_series_at groups the points by
 * series (a stable counting sort; none when they arrived grouped) on first
 * use after an add, so adding stays O(1) per point and a record of 32
 * metrics does not cost 32 allocations.
 *
 * Bounds: max_points and max_series set at creation; RDB_ELIMIT beyond.
 * Single owner; not thread-safe. mdl_batch_take/give keep a few grown,
 * empty batches per thread (common/rdb_tcache, bounded in count and bytes,
 * freed at thread exit), so a request's batch does not cost a dozen
 * allocations and ~30 KiB of memset each time. The WAL encoding of a batch lives in
 * storage (storage/wal_codec.c).
 */
#include "model/batch.h"
#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_tcache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct series_slot {
	struct mdl_batch_series s;
	uint64_t hash;
	size_t count; /* points of this series */
	size_t start; /* first index in the grouped columns */
};

/* A (job, rank) and its hash seed: the metrics of one record share them,
 * so a record hashes its job once (series_hash). */
struct seed_cache {
	bool ok;
	uint32_t rank;
	uint16_t jl;
	uint32_t jr; /* its number (mdl_batch_series.jr) */
	uint64_t seed;
	char job[MDL_JOB_MAX];
};

struct mdl_batch {
	size_t max_points, max_series;
	struct series_slot *series; /* [nseries] */
	size_t nseries, series_cap;
	uint32_t *table;     /* hash table of series index + 1; 0 = empty */
	size_t table_cap;    /* power of two */
	struct mdl_cols pts; /* arrival order */
	uint32_t *pt_series; /* [pts.n] series index per point */
	size_t pt_series_cap;
	struct mdl_cols grouped; /* points grouped by series */
	bool dirty;		 /* grouped is stale */
	/* pt_series is non-decreasing: the points are grouped by series as
	 * they arrived, and the views point into pts (no copy into grouped).
	 * A batch of records that each name their series once, such as the
	 * per-rank shape's one record per request, always is. */
	bool in_order;
	struct seed_cache last; /* the (job, rank) of the last add */
	uint32_t jr_next;	/* the last (job, rank) number given out */
};

int mdl_batch_new(size_t max_points, size_t max_series, struct mdl_batch **out)
{
	struct mdl_batch *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->max_points = max_points;
	b->max_series = max_series > UINT32_MAX - 1 ? UINT32_MAX - 1 : max_series;
	b->in_order = true;
	*out = b;
	return 0;
}

void mdl_batch_free(struct mdl_batch *b)
{
	if (!b)
		return;
	free(b->series);
	free(b->table);
	free(b->pt_series);
	mdl_cols_free(&b->pts);
	mdl_cols_free(&b->grouped);
	free(b);
}

/* ---- per-thread cache (common/rdb_tcache) ------------------------------------------ */

static void batch_free_obj(void *b)
{
	mdl_batch_free(b);
}

static struct rdb_tcache batch_cache =
    RDB_TCACHE_INIT_BYTES(MDL_BATCH_CACHE_N, MDL_BATCH_CACHE_TOTAL_BYTES, batch_free_obj);

static size_t batch_bytes(const struct mdl_batch *b)
{
	size_t col = sizeof(int64_t) * 2 + sizeof(uint32_t) + sizeof(uint64_t);
	return b->series_cap * sizeof(struct series_slot) + b->table_cap * sizeof(uint32_t) +
	       b->pt_series_cap * sizeof(uint32_t) + (b->pts.cap + b->grouped.cap) * col;
}

int mdl_batch_take(size_t max_points, size_t max_series, struct mdl_batch **out)
{
	struct mdl_batch *b = rdb_tcache_take(&batch_cache);
	if (!b)
		return mdl_batch_new(max_points, max_series, out);
	mdl_batch_reset(b); /* here, not at the give: a refused give frees it */
	b->max_points = max_points;
	b->max_series = max_series > UINT32_MAX - 1 ? UINT32_MAX - 1 : max_series;
	*out = b;
	return 0;
}

void mdl_batch_give(struct mdl_batch *b)
{
	if (!b)
		return;
	size_t bytes = batch_bytes(b);
	if (bytes > MDL_BATCH_CACHE_BYTES) {
		mdl_batch_free(b);
		return;
	}
	if (!rdb_tcache_give_bytes(&batch_cache, b, bytes))
		mdl_batch_free(b);
}

/* Asks for the lines the next new series' slot is written in (its names'
 * starts, lengths and counters), for writing, without waiting: a batch
 * reused from the thread cache has usually left the caches since its last
 * request, and each new series stalled on those lines (~half of
 * mdl_batch_add's samples in the per-rank profile). A record's next
 * metric is most often a new series. */
static void prefetch_slot(const struct mdl_batch *b)
{
	if (b->nseries >= b->series_cap)
		return;
	const struct series_slot *s = &b->series[b->nseries];
	__builtin_prefetch(s->s.key.job, 1);
	__builtin_prefetch(s->s.key.metric, 1);
	__builtin_prefetch(&s->s.job_len, 1);
	__builtin_prefetch(&s->count, 1);
}

void mdl_batch_reset(struct mdl_batch *b)
{
	b->nseries = 0;
	b->pts.n = 0;
	b->grouped.n = 0;
	b->dirty = false;
	b->in_order = true;
	b->last.ok = false;
	b->jr_next = 0;
	if (b->table)
		memset(b->table, 0, b->table_cap * sizeof(*b->table));
	prefetch_slot(b);
}

/* The hash of a metric name alone: the first half of a series key hash,
 * and what name tables keyed by metric (the detector's vocabulary) use, so
 * a batch's series carry it and nobody hashes the name again. */
#define METRIC_SEED UINT64_C(0x6d6574726963a5a5)

uint64_t mdl_metric_hash(const char *metric, size_t len)
{
	return rdb_hash64(metric, len, METRIC_SEED);
}

/* Folds a metric hash into the seed of its (job, rank): a bijective mixer
 * (xor-shift-multiply, two rounds) of their xor, so that the low bits the
 * tables index by depend on every bit of both. */
static uint64_t key_mix(uint64_t metric_hash, uint64_t seed)
{
	uint64_t h = metric_hash ^ seed;
	h ^= h >> 32;
	h *= UINT64_C(0xd6e8feb86659fd93);
	h ^= h >> 32;
	h *= UINT64_C(0xd6e8feb86659fd93);
	h ^= h >> 32;
	return h;
}

/* The hashes of one series key (series_hash). */
struct key_hashes {
	uint64_t key;	 /* the series key hash (mdl_series_key_hash) */
	uint64_t metric; /* mdl_metric_hash of the metric */
	uint32_t jr;	 /* the batch's number of the (job, rank) (mdl_batch_series) */
};

/* The key hash of (job, rank, metric): the metric's hash (mdl_metric_hash)
 * folded into the seed of its (job, rank), XXH3 of the job seeded by the
 * rank, in which distinct ranks seed distinct hash functions, so the rank
 * needs no bytes of its own. The seed is taken from c when it holds this
 * (job, rank), else computed (and kept in c with a new (job, rank) number
 * from *jr_next, when c is not NULL). jl <= MDL_JOB_MAX. The one place the
 * hash is made: the batch's table and mdl_series_key_hash (the store's
 * series cache) must agree. */
static struct key_hashes series_hash(struct seed_cache *c, uint32_t *jr_next, const char *job,
				     size_t jl, uint32_t rank, const char *metric, size_t ml)
{
	struct key_hashes kh = {.metric = mdl_metric_hash(metric, ml)};
	if (c && c->ok && c->rank == rank && c->jl == jl && memcmp(c->job, job, jl) == 0) {
		kh.key = key_mix(kh.metric, c->seed);
		kh.jr = c->jr;
		return kh;
	}
	uint64_t seed = rdb_hash64(job, jl, UINT64_C(0x9e3779b97f4a7c15) + rank);
	if (c) {
		c->seed = seed;
		c->rank = rank;
		c->jl = (uint16_t)jl;
		memcpy(c->job, job, jl);
		c->jr = *jr_next < UINT32_MAX ? ++*jr_next : 0; /* 0: no number */
		c->ok = true;
		kh.jr = c->jr;
	}
	kh.key = key_mix(kh.metric, seed);
	return kh;
}

uint64_t mdl_batch_series_hash(const struct mdl_batch *b, size_t i)
{
	return b->series[i].hash;
}

uint64_t mdl_series_key_hash(const char *job, size_t jl, uint32_t rank, const char *metric,
			     size_t ml)
{
	return series_hash(NULL, NULL, job, jl, rank, metric, ml).key;
}

/* Cheap fields first; the names by their known lengths (a name holds no
 * NUL: mdl_job_valid / mdl_metric_valid). */
static bool slot_matches(const struct series_slot *s, uint64_t h, const char *job, size_t jl,
			 uint32_t rank, const char *metric, size_t ml)
{
	return s->hash == h && s->s.key.rank == rank && s->s.job_len == jl &&
	       s->s.metric_len == ml && memcmp(s->s.key.metric, metric, ml) == 0 &&
	       memcmp(s->s.key.job, job, jl) == 0;
}

/* Enters series 0 .. n-1 into the empty table t of cap slots (linear
 * probing). */
static void table_fill(uint32_t *t, size_t cap, const struct series_slot *series, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		size_t pos = series[i].hash & (cap - 1);
		while (t[pos])
			pos = (pos + 1) & (cap - 1);
		t[pos] = (uint32_t)(i + 1);
	}
}

static int table_grow(struct mdl_batch *b)
{
	size_t cap = b->table_cap ? b->table_cap * 2 : 64;
	uint32_t *t = calloc(cap, sizeof(*t));
	if (!t)
		return -ENOMEM;
	table_fill(t, cap, b->series, b->nseries);
	free(b->table);
	b->table = t;
	b->table_cap = cap;
	return 0;
}

/* Finds or adds the series; *idx gets its index. */
static int intern(struct mdl_batch *b, const char *job, size_t jl, uint32_t rank,
		  const char *metric, size_t ml, uint32_t *idx)
{
	if (jl > MDL_JOB_MAX || ml > MDL_METRIC_MAX)
		return RDB_EINVAL;
	if ((b->nseries + 1) * 2 > b->table_cap) {
		int rc = table_grow(b);
		if (rc)
			return rc;
	}
	struct key_hashes kh = series_hash(&b->last, &b->jr_next, job, jl, rank, metric, ml);
	uint64_t h = kh.key;
	size_t pos = h & (b->table_cap - 1);
	while (b->table[pos]) {
		uint32_t i = b->table[pos] - 1;
		if (slot_matches(&b->series[i], h, job, jl, rank, metric, ml)) {
			*idx = i;
			return 0;
		}
		pos = (pos + 1) & (b->table_cap - 1);
	}
	if (b->nseries >= b->max_series)
		return RDB_ELIMIT;
	if (b->nseries == b->series_cap) {
		size_t cap = b->series_cap ? b->series_cap * 2 : 32;
		struct series_slot *s = realloc(b->series, cap * sizeof(*s));
		if (!s)
			return -ENOMEM;
		b->series = s;
		b->series_cap = cap;
	}
	struct series_slot *s = &b->series[b->nseries];
	/* Not a memset of the ~400-byte key: the names are NUL-terminated
	 * strings and nothing reads past the NUL. */
	memcpy(s->s.key.job, job, jl);
	s->s.key.job[jl] = 0;
	s->s.key.rank = rank;
	memcpy(s->s.key.metric, metric, ml);
	s->s.key.metric[ml] = 0;
	s->s.job_len = (uint16_t)jl; /* <= MDL_JOB_MAX, checked above */
	s->s.metric_len = (uint16_t)ml;
	s->s.pts = (struct mdl_cols)MDL_COLS_INIT;
	s->s.metric_hash = kh.metric;
	s->s.jr = kh.jr;
	s->hash = h;
	s->count = 0;
	b->table[pos] = (uint32_t)(b->nseries + 1);
	*idx = (uint32_t)b->nseries++;
	prefetch_slot(b);
	return 0;
}

int mdl_batch_add(struct mdl_batch *b, const char *job, size_t job_len, uint32_t rank,
		  const char *metric, size_t metric_len, int64_t ts_ns, int64_t step,
		  uint32_t attempt, uint64_t value_bits)
{
	if (b->pts.n >= b->max_points)
		return RDB_ELIMIT;
	uint32_t idx;
	int rc = intern(b, job, job_len, rank, metric, metric_len, &idx);
	if (rc)
		return rc;
	if (b->pts.n == b->pt_series_cap) {
		size_t cap = b->pt_series_cap ? b->pt_series_cap * 2 : 256;
		uint32_t *p = realloc(b->pt_series, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		b->pt_series = p;
		b->pt_series_cap = cap;
	}
	rc = mdl_cols_push(&b->pts, ts_ns, step, attempt, value_bits);
	if (rc)
		return rc;
	b->pt_series[b->pts.n - 1] = idx;
	b->series[idx].count++;
	b->dirty = true;
	if (b->pts.n > 1 && idx < b->pt_series[b->pts.n - 2])
		b->in_order = false;
	return 0;
}

int mdl_batch_reserve(struct mdl_batch *b, size_t points)
{
	if (points > b->max_points)
		points = b->max_points;
	if (points > b->pt_series_cap) {
		uint32_t *p = realloc(b->pt_series, points * sizeof(*p));
		if (!p)
			return -ENOMEM;
		b->pt_series = p;
		b->pt_series_cap = points;
	}
	return mdl_cols_reserve(&b->pts, points);
}

size_t mdl_batch_points(const struct mdl_batch *b)
{
	return b->pts.n;
}

size_t mdl_batch_nseries(const struct mdl_batch *b)
{
	return b->nseries;
}

/* Sets each series' start to the running sum of the counts before it:
 * where its points are (or go) in grouped columns. */
static void set_starts(struct mdl_batch *b)
{
	size_t off = 0;
	for (size_t i = 0; i < b->nseries; i++) {
		b->series[i].start = off;
		off += b->series[i].count;
	}
}

/* Points each series' view at its count points from its start in c. */
static void set_views(struct mdl_batch *b, const struct mdl_cols *c)
{
	for (size_t i = 0; i < b->nseries; i++) {
		struct series_slot *s = &b->series[i];
		s->s.pts.n = s->count;
		s->s.pts.cap = 0;
		s->s.pts.ts_ns = c->ts_ns + s->start;
		s->s.pts.step = c->step + s->start;
		s->s.pts.attempt = c->attempt + s->start;
		s->s.pts.value = c->value + s->start;
	}
	b->dirty = false;
}

/* Groups points by series (stable) and points each series' view at them:
 * in pts itself when they arrived grouped (in_order). */
static int regroup(struct mdl_batch *b)
{
	set_starts(b);
	if (b->in_order) {
		set_views(b, &b->pts);
		return 0;
	}
	int rc = mdl_cols_reserve(&b->grouped, b->pts.n);
	if (rc)
		return rc;
	for (size_t i = 0; i < b->nseries; i++)
		b->series[i].count = 0;
	struct mdl_cols *g = &b->grouped;
	for (size_t p = 0; p < b->pts.n; p++) {
		struct series_slot *s = &b->series[b->pt_series[p]];
		size_t at = s->start + s->count++;
		g->ts_ns[at] = b->pts.ts_ns[p];
		g->step[at] = b->pts.step[p];
		g->attempt[at] = b->pts.attempt[p];
		g->value[at] = b->pts.value[p];
	}
	g->n = b->pts.n;
	set_views(b, g);
	return 0;
}

const struct mdl_batch_series *mdl_batch_series_at(const struct mdl_batch *b, size_t i)
{
	if (i >= b->nseries)
		return NULL;
	if (b->dirty && regroup((struct mdl_batch *)b) != 0)
		return NULL;
	return &b->series[i].s;
}

/* Drops the points (and series) added after the first n points. */
static void truncate_points(struct mdl_batch *b, size_t n, size_t nseries)
{
	if (b->pts.n == n && b->nseries == nseries)
		return;
	b->pts.n = n;
	if (b->nseries > nseries) {
		/* rebuild the table from the series kept (linear probing has no
		 * tombstones) */
		b->nseries = nseries;
		memset(b->table, 0, b->table_cap * sizeof(*b->table));
		table_fill(b->table, b->table_cap, b->series, nseries);
	}
	for (size_t i = 0; i < b->nseries; i++)
		b->series[i].count = 0;
	b->in_order = true;
	for (size_t k = 0; k < n; k++) {
		b->series[b->pt_series[k]].count++;
		if (k && b->pt_series[k] < b->pt_series[k - 1])
			b->in_order = false;
	}
	b->dirty = true;
}

int mdl_batch_append(struct mdl_batch *dst, const struct mdl_batch *src)
{
	size_t n0 = dst->pts.n, s0 = dst->nseries;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < mdl_batch_nseries(src); i++) {
		const struct mdl_batch_series *s = mdl_batch_series_at(src, i);
		if (!s)
			return -ENOMEM;
		size_t jl = s->job_len, ml = s->metric_len;
		for (size_t j = 0; rc == 0 && j < s->pts.n; j++)
			rc = mdl_batch_add(dst, s->key.job, jl, s->key.rank, s->key.metric, ml,
					   s->pts.ts_ns[j], s->pts.step[j], s->pts.attempt[j],
					   s->pts.value[j]);
	}
	if (rc)
		truncate_points(dst, n0, s0);
	return rc;
}
