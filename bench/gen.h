/* gen.h - deterministic generator of a realistic training-telemetry workload.
 *
 * Shared by rdb-gen (writes bodies to a file) and rdb-load (builds HTTP
 * bodies in memory). Every value is a pure function of (seed, rank, step,
 * metric), so bodies can be built in any order and two runs with the same
 * options produce the same bytes. C11 + libc only.
 */
#ifndef RANKDB_BENCH_GEN_H
#define RANKDB_BENCH_GEN_H

#include <stddef.h>
#include <stdint.h>

#define GEN_MAX_METRICS 32u

/* Workload shape: ranks x metrics x steps, one record per (rank, step). */
struct gen_opts {
	uint64_t seed;	  /* drives every random choice; job id is "bench-<seed>" */
	uint32_t ranks;	  /* >= 1 */
	uint32_t metrics; /* 1..GEN_MAX_METRICS; the first `metrics` of the list */
	uint32_t steps;	  /* >= 1 */
};

enum gen_format {
	GEN_JSON,   /* one JSON array of records per body */
	GEN_NDJSON, /* one record per line */
	GEN_LP,	    /* InfluxDB line protocol, one line per record */
};

/* Growable byte buffer with a hard bound (max). Plain value type. */
struct gen_buf {
	char *data; /* owned; NULL until the first append */
	size_t len; /* bytes in use */
	size_t cap; /* bytes allocated */
	size_t max; /* appends past this fail with -ENOBUFS */
};

struct gen;

/* Fills *o for size "small", "default" or "large" (seed 1). 0 or -EINVAL. */
int gen_preset(const char *size, struct gen_opts *o);

/* Builds the per-step tables (O(ranks x steps) time, O(steps) memory).
 * 0, -EINVAL (bad opts) or -ENOMEM. On success the caller owns *out. */
int gen_create(const struct gen_opts *o, struct gen **out);
void gen_destroy(struct gen *g); /* NULL ok */
const struct gen_opts *gen_opts_of(const struct gen *g);

/* Name of metric i (i < GEN_MAX_METRICS), static storage. */
const char *gen_metric_name(uint32_t i);

/* Appends the JSON object of record (rank, step), without separator or
 * newline. 0, -EINVAL (out of range) or -ENOMEM/-ENOBUFS (b unchanged in
 * content up to its previous len). Thread-safe: g is read-only here. */
int gen_record(const struct gen *g, uint32_t rank, uint32_t step, struct gen_buf *b);

/* Appends record (rank, step) as one InfluxDB line-protocol line, without
 * the newline: `train,job=<job>,rank=<r> <m>=<v>,...,step=<s>i <ts_ns>`.
 * Values are printed exactly as in the JSON record; integer-valued metrics
 * carry no `i` suffix, so every peer stores every metric as float64 (only
 * `step` is an integer field). Same errors and thread safety as gen_record. */
int gen_record_lp(const struct gen *g, uint32_t rank, uint32_t step, struct gen_buf *b);

/* Timestamp (ns) of record (rank, step); 0 when out of range. */
int64_t gen_record_ts(const struct gen *g, uint32_t rank, uint32_t step);
/* Job id ("bench-<seed>") and the straggler rank (computes slowest). */
const char *gen_job(const struct gen *g);
uint32_t gen_straggler(const struct gen *g);

/* Appends one body holding ranks [rank_lo, rank_hi) x steps [step_lo,
 * step_hi), step-major (as ranks would send them), in format fmt.
 * NDJSON and line-protocol lines end in '\n'. Same errors as gen_record. */
struct gen_range {
	uint32_t rank_lo, rank_hi; /* half-open */
	uint32_t step_lo, step_hi; /* half-open */
};
int gen_body(const struct gen *g, const struct gen_range *r, enum gen_format fmt,
	     struct gen_buf *b);

void gen_buf_init(struct gen_buf *b, size_t max_bytes);
void gen_buf_free(struct gen_buf *b); /* NULL ok; buffer is empty afterwards */
int gen_buf_append(struct gen_buf *b, const void *p, size_t n);
int gen_buf_printf(struct gen_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses a decimal unsigned integer that must fill s and fit in max.
 * 0 or -EINVAL. (strtoull wrapper; used by both CLIs.) */
int gen_parse_u64(const char *s, uint64_t max, uint64_t *out);

#endif
