/* series.h - chunk statistics, index entries and the on-disk series key
 * record. Plain value types. The key itself is the data model's
 * (model/series.h). */
#ifndef STO_SERIES_H
#define STO_SERIES_H

#include "model/cols.h"
#include "model/series.h"
#include "storage/format.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Statistics of one chunk, kept in its index entry so that queries over
 * whole chunks need not decode them. min/max/sum ignore NaN values;
 * first/last are the values (bits) of the points with the smallest/largest
 * (ts, step) and do not ignore NaN. */
struct sto_chunk_stats {
	uint32_t count;	    /* points */
	uint32_t nan_count; /* points whose value is NaN */
	int64_t min_ts_ns, max_ts_ns;
	int64_t min_step, max_step; /* MDL_STEP_NONE if no point has a step */
	uint32_t min_attempt, max_attempt;
	double min, max, sum; /* over non-NaN values; min=max=sum=0 if none */
	uint64_t first, last; /* value bits */
	uint32_t step_count;  /* points that have a step */
};

/* Where a chunk lives and what it holds: one index entry. */
struct sto_chunk_ref {
	uint64_t series_id;
	uint64_t uid;	     /* unique chunk id */
	uint64_t segment_id; /* chunks/seg-<segment_id>.dat */
	uint64_t offset;     /* of the chunk record header in the segment */
	uint32_t length;     /* header + payload bytes (of the whole group record) */
	uint8_t group_n;     /* 0: a chunk record of its own; else the member count
			      * of the group record (format.h) this chunk is in */
	uint8_t member;	     /* index of this series among the group's members */
	uint32_t head_len;   /* group only: payload bytes of the group's head */
	uint64_t gen;	     /* WAL generation whose records produced the chunk */
	struct sto_chunk_stats stats;
	bool damaged; /* the index entry failed its checksum (only with
		       * sto_txn_pass_damaged): series_id, uid and stats.min_ts_ns
		       * come from the key; the location is the entry's, to be
		       * checked by reading the record; no other statistic holds */
};

/* Disk bytes a chunk accounts for: its record, or its share of a group
 * record (members split the record evenly). */
static inline uint64_t sto_chunk_ref_bytes(const struct sto_chunk_ref *r)
{
	return r->group_n ? r->length / r->group_n : r->length;
}

/* The series key record of segment records (storage/format.h): u8 J, job,
 * u32 rank, u16 M, metric (M = 0 in event chunks' records). */
size_t sto_key_rec_len(const struct mdl_series_key *k);
/* Writes k's key record at p (sto_key_rec_len(k) bytes). */
void sto_key_rec_put(uint8_t *p, const struct mdl_series_key *k);
/* Parses one key record at the start of p[0..len) into *k (zeroed first);
 * *used gets its length. The job must be valid, the metric valid or empty.
 * RDB_ECORRUPT otherwise. */
int sto_key_rec_get(const uint8_t *p, size_t len, struct mdl_series_key *k, size_t *used);

/* Computes stats over cols (n >= 1). */
void sto_chunk_stats_compute(const struct mdl_cols *c, struct sto_chunk_stats *out);

#endif
