/* batch.h - a write batch: points grouped by series key, built by ingest,
 * applied atomically by the engine (one WAL record).
 *
 * Not thread-safe: one builder. Bounded: sto_batch_new takes the maximum
 * number of points and series; sto_batch_add beyond them returns RDB_ELIMIT.
 */
#ifndef STO_BATCH_H
#define STO_BATCH_H

#include "common/rdb_buf.h"
#include "storage/cols.h"
#include "storage/series.h"

#include <stddef.h>
#include <stdint.h>

struct sto_batch;

struct sto_batch_series {
	struct sto_series_key key;
	struct sto_cols pts; /* a non-owning view (cap 0) of this series' points,
			      * in arrival order */
};

int sto_batch_new(size_t max_points, size_t max_series, struct sto_batch **out);
void sto_batch_free(struct sto_batch *b); /* NULL ok */
/* Empties the batch, keeping its bounds and memory. */
void sto_batch_reset(struct sto_batch *b);

/* Adds one point to series (job, rank, metric). The names must already be
 * validated (sto_job_valid/sto_metric_valid). 0, -ENOMEM, RDB_ELIMIT. */
int sto_batch_add(struct sto_batch *b, const char *job, size_t job_len, uint32_t rank,
		  const char *metric, size_t metric_len, int64_t ts_ns, int64_t step,
		  uint32_t attempt, uint64_t value_bits);

size_t sto_batch_points(const struct sto_batch *b);
size_t sto_batch_nseries(const struct sto_batch *b);
/* i < sto_batch_nseries(b); pointer valid until the next add/reset/free. */
const struct sto_batch_series *sto_batch_series_at(const struct sto_batch *b, size_t i);

/* Serializes into a STO_WAL_REC_POINTS payload (format.h), appended to out.
 * 0, -ENOMEM, RDB_ELIMIT. */
int sto_batch_encode(const struct sto_batch *b, struct rdb_buf *out);
/* Parses a STO_WAL_REC_POINTS payload (untrusted) into b (reset first).
 * 0, RDB_ECORRUPT, -ENOMEM, RDB_ELIMIT. */
int sto_batch_decode(struct sto_batch *b, const uint8_t *p, size_t len);

#endif
