/* batch.h - a write batch: points grouped by series key, built by ingest,
 * applied atomically by the engine (one WAL record).
 *
 * Not thread-safe: one builder. Bounded: mdl_batch_new takes the maximum
 * number of points and series; mdl_batch_add beyond them returns RDB_ELIMIT.
 */
#ifndef MDL_BATCH_H
#define MDL_BATCH_H

#include "common/rdb_buf.h"
#include "model/cols.h"
#include "model/series.h"

#include <stddef.h>
#include <stdint.h>

struct mdl_batch;

struct mdl_batch_series {
	struct mdl_series_key key;
	/* strlen of key.job and key.metric, so that encoders and filters
	 * walking every series of every request do not measure them again */
	uint16_t job_len, metric_len;
	/* The batch's number for this series' (job, rank): series with equal
	 * numbers other than 0 have equal jobs and ranks (unequal numbers, or 0,
	 * tell nothing), so a walk over a record's series compares them
	 * without their bytes. */
	uint32_t jr;
	uint64_t metric_hash; /* mdl_metric_hash(key.metric, metric_len) */
	struct mdl_cols pts;  /* a non-owning view (cap 0) of this series' points,
			       * in arrival order */
};

int mdl_batch_new(size_t max_points, size_t max_series, struct mdl_batch **out);
void mdl_batch_free(struct mdl_batch *b); /* NULL ok */
/* Per-thread reuse, for one batch per request: mdl_batch_take is
 * mdl_batch_new, but takes an empty batch from the calling thread's cache
 * when it holds one (its memory already grown; bounds set anew).
 * mdl_batch_give resets b and keeps it in the calling thread's cache
 * (at most MDL_BATCH_CACHE_N batches of at most MDL_BATCH_CACHE_BYTES
 * allocated each, MDL_BATCH_CACHE_TOTAL_BYTES together; the cache is freed
 * when the thread exits), or frees it. N is sized for parked writes: an
 * HTTP worker has a batch per request waiting for its WAL sync (8 each at
 * 64 connections on 8 workers, up to 64 at 512), and with a cache of 4
 * half of them were freed and allocated again per request. A batch of one
 * 32-metric record is ~17 KiB (its series slots hold the names inline),
 * so 64 of them fit the total. Any thread may give a batch
 * another took. NULL ok. Errors: -ENOMEM. */
#define MDL_BATCH_CACHE_N	    64
#define MDL_BATCH_CACHE_BYTES	    (256u * 1024)
#define MDL_BATCH_CACHE_TOTAL_BYTES (1536u * 1024)
int mdl_batch_take(size_t max_points, size_t max_series, struct mdl_batch **out);
/* Grows b's point columns to hold points points (capped at its
 * max_points) so that adding them does not reallocate and copy as it goes;
 * a hint: adding past it still works. 0 or -ENOMEM (b unchanged). */
int mdl_batch_reserve(struct mdl_batch *b, size_t points);
void mdl_batch_give(struct mdl_batch *b);
/* Empties the batch, keeping its bounds and memory. */
void mdl_batch_reset(struct mdl_batch *b);

/* Adds one point to series (job, rank, metric). The names must already be
 * validated (mdl_job_valid/mdl_metric_valid). 0, -ENOMEM, RDB_ELIMIT. */
int mdl_batch_add(struct mdl_batch *b, const char *job, size_t job_len, uint32_t rank,
		  const char *metric, size_t metric_len, int64_t ts_ns, int64_t step,
		  uint32_t attempt, uint64_t value_bits);

size_t mdl_batch_points(const struct mdl_batch *b);
size_t mdl_batch_nseries(const struct mdl_batch *b);
/* i < mdl_batch_nseries(b); pointer valid until the next add/reset/free. */
const struct mdl_batch_series *mdl_batch_series_at(const struct mdl_batch *b, size_t i);
/* The 64-bit hash of a metric name (XXH3 with a fixed seed; in memory
 * only, never stored). Pure. */
uint64_t mdl_metric_hash(const char *metric, size_t len);
/* The 64-bit hash of a series key the batch interns by: mdl_metric_hash of
 * metric, xor XXH3 of job seeded by 0x9e3779b97f4a7c15 + rank, through a
 * bijective 64-bit mixer (in memory only, never stored). mdl_batch_series_hash is the stored
 * hash of series i (i < mdl_batch_nseries(b)), so a caller keyed the same
 * way need not hash again. Pure. */
uint64_t mdl_series_key_hash(const char *job, size_t job_len, uint32_t rank, const char *metric,
			     size_t metric_len);
uint64_t mdl_batch_series_hash(const struct mdl_batch *b, size_t i);

/* Adds every point of src to dst (src unchanged). All or nothing: on
 * failure (-ENOMEM, RDB_ELIMIT) dst holds what it held before. */
int mdl_batch_append(struct mdl_batch *dst, const struct mdl_batch *src);

#endif
