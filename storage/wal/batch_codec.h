/* batch_codec.h - WAL payload encoding of point and event batches. */
#ifndef STO_BATCH_CODEC_H
#define STO_BATCH_CODEC_H

#include "common/rdb_buf.h"
#include "model/batch.h"
#include "model/events.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Appends b as a STO_WAL_REC_POINTS payload (format.h) to out. 0 or
 * -ENOMEM (out may have grown; its length is unchanged). */
int sto_batch_encode(const struct mdl_batch *b, struct rdb_buf *out);
/* sto_batch_encode of the series i of b with keep[i] (keep NULL: all):
 * the same payload as encoding a batch holding just those series. */
int sto_batch_encode_sel(const struct mdl_batch *b, const bool *keep, struct rdb_buf *out);
/* Parses a STO_WAL_REC_POINTS payload (untrusted) into b (reset first).
 * 0, RDB_ECORRUPT (malformed), or b's errors (RDB_ELIMIT, -ENOMEM); b's
 * content is unspecified on failure. */
int sto_batch_decode(struct mdl_batch *b, const uint8_t *p, size_t len);

/* Appends ev as an events payload (format.h, STO_WAL_REC_BATCH) to out.
 * 0 or -ENOMEM. */
int sto_events_encode(const struct mdl_events *ev, struct rdb_buf *out);
/* Parses an events payload (untrusted) into ev (reset first). 0,
 * RDB_ECORRUPT, RDB_ELIMIT, -ENOMEM; ev unspecified on failure. */
int sto_events_decode(struct mdl_events *ev, const uint8_t *p, size_t len);

#endif
