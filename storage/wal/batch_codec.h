/* batch_codec.h - WAL payload encoding of point and event batches: the
 * points payload that names series by their strings (type 1, also the
 * ingest pipeline's subscriber blobs), the compact one that names them by
 * series id (type 5) and the series definitions that bind those ids to
 * keys within one WAL file (type 4). Layouts in storage/format.h. */
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
/* Bytes sto_batch_encode_sel appends for b (series with keep[i]; keep
 * NULL: all); *nkept (when not NULL) gets how many series that is. */
size_t sto_batch_encoded_size(const struct mdl_batch *b, const bool *keep, size_t *nkept);
/* sto_batch_encode of the series i of b with keep[i] (keep NULL: all):
 * the same payload as encoding a batch holding just those series. */
int sto_batch_encode_sel(const struct mdl_batch *b, const bool *keep, struct rdb_buf *out);
/* Parses a STO_WAL_REC_POINTS payload (untrusted) into b (reset first).
 * 0, RDB_ECORRUPT (malformed), or b's errors (RDB_ELIMIT, -ENOMEM); b's
 * content is unspecified on failure. */
int sto_batch_decode(struct mdl_batch *b, const uint8_t *p, size_t len);

/* The parts of a STO_WAL_REC_BATCH or STO_WAL_REC_CBATCH payload
 * (format.h), pointing into it; a part of length 0 is absent. */
struct sto_batch_parts {
	const char *id; /* client batch id, not NUL-terminated */
	size_t id_len;	/* 0..STO_BATCH_ID_MAX (storage/format.h); 0: none */
	const uint8_t *points;
	size_t points_len; /* points (type 3) or compact points (type 5) */
	const uint8_t *events;
	size_t events_len; /* an events payload */
};

/* Splits a batch payload (untrusted) into *out. Replay and verify both
 * split with it, so that they refuse the same records. 0, or RDB_ECORRUPT
 * (an id longer than STO_BATCH_ID_MAX, a part running past len, or bytes
 * after the events part); *out unspecified then. The parts are not
 * parsed. */
int sto_batch_split(const uint8_t *p, size_t len, struct sto_batch_parts *out);

/* Appends ev as an events payload (format.h, STO_WAL_REC_BATCH) to out.
 * 0 or -ENOMEM. */
int sto_events_encode(const struct mdl_events *ev, struct rdb_buf *out);
/* Parses an events payload (untrusted) into ev (reset first). 0,
 * RDB_ECORRUPT, RDB_ELIMIT, -ENOMEM; ev unspecified on failure. */
int sto_events_decode(struct mdl_events *ev, const uint8_t *p, size_t len);

/* ---- Series definitions and compact points (STO_WAL_REC_DEFS and the
 * points part of STO_WAL_REC_CBATCH, format.h) ---- */

/* A series key as a definition names it: job and metric point into the
 * payload they were decoded from (not NUL-terminated). */
struct sto_wal_key {
	const char *job;
	const char *metric;
	uint32_t rank;
	uint16_t job_len, metric_len;
};

/* Bytes one definition (STO_WAL_REC_DEFS entry) takes besides its names
 * (u64 sid, u8 J, u32 rank, u16 M): it takes this + job_len + metric_len,
 * and at most STO_WAL_DEF_MAX_BYTES. */
#define STO_WAL_DEF_FIXED_BYTES (8u + 1u + 4u + 2u)
#define STO_WAL_DEF_MAX_BYTES	(STO_WAL_DEF_FIXED_BYTES + MDL_JOB_MAX + MDL_METRIC_MAX)

/* Appends one definition (sid -> key) to the definitions payload that
 * starts at out->data + start: writes its u32 count first when out->len ==
 * start, then bumps it. sid must not be 0 and the names must be valid
 * (mdl_job_valid, mdl_metric_valid). 0, -EINVAL (sid 0 or a name length
 * out of range), -ENOMEM or RDB_ELIMIT (out's length unchanged). */
int sto_defs_add(struct rdb_buf *out, size_t start, uint64_t sid, const struct sto_wal_key *k);

/* Parses a definitions payload (untrusted): checks all of it first
 * (layout, valid names, no series id 0, no trailing bytes), then calls fn
 * once per definition in order, with sid != 0 and k pointing into p (an
 * id may come again; the later definition holds). So fn sees a record
 * whole or not at all, unless fn itself fails. 0, RDB_ECORRUPT
 * (malformed: fn never called), or fn's first non-zero return. */
typedef int (*sto_defs_fn)(void *arg, uint64_t sid, const struct sto_wal_key *k);
int sto_defs_decode(const uint8_t *p, size_t len, sto_defs_fn fn, void *arg);

/* Appends b as a compact points payload to out, series i named by sids[i].
 * 0, -ENOMEM or RDB_ELIMIT (out's length unchanged). */
int sto_batch_encode_compact(const struct mdl_batch *b, const uint64_t *sids, struct rdb_buf *out);

/* The key of sid (never 0) for sto_batch_decode_compact, or NULL when the
 * file defined none (the decoder then fails with RDB_ENOTFOUND). */
typedef const struct sto_wal_key *(*sto_sid_lookup_fn)(void *arg, uint64_t sid);

/* Parses a compact points payload (untrusted) into b (reset first),
 * naming series through lookup. 0, RDB_ECORRUPT (malformed, a series id
 * 0, or a defined key that is not valid), RDB_ENOTFOUND (a series id lookup does not
 * know; *missing_sid says which), or b's errors (RDB_ELIMIT, -ENOMEM); b's
 * content is unspecified on failure. */
int sto_batch_decode_compact(struct mdl_batch *b, const uint8_t *p, size_t len,
			     sto_sid_lookup_fn lookup, void *arg, uint64_t *missing_sid);

/* What replay does with an intact WAL record of type (format.h
 * STO_WAL_REC_*) whose parse returned rc: the one rule behind replay
 * (storage/engine/store.c) and `rankctl verify` (storage/admin.c), so that
 * verify reports exactly what replay skips. */
enum sto_wal_fate {
	STO_WAL_TAKE,		/* rc 0: apply it */
	STO_WAL_SKIP_UNDEFINED, /* a batch naming an id its file never defined */
	STO_WAL_SKIP_UNPARSED,	/* does not parse (RDB_ECORRUPT; RDB_EINVAL of type 1) */
	STO_WAL_SKIP_UNKNOWN,	/* a type this build does not know */
	STO_WAL_STOP,		/* anything else (-ENOMEM, an apply error): stop */
};
enum sto_wal_fate sto_wal_rec_fate(uint8_t type, int rc);

#endif
