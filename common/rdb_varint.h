/* rdb_varint.h - LEB128 varints and zigzag: the one implementation the
 * on-disk formats share (the WAL's compact records, storage/wal/, and the
 * chunk codec's integer streams, storage/chunk/; layouts in
 * storage/format.h and docs/FORMAT.md).
 *
 * A varint holds 7 bits a byte, the low group first, the high bit set on
 * every byte but the last: at most RDB_VARINT_MAX (10) bytes for 64 bits.
 * Zigzag maps a signed 64-bit quantity held in a uint64_t (two's
 * complement) to an unsigned one, small magnitudes to small numbers:
 * (d << 1) ^ (d >> 63) with an arithmetic shift, all computed in uint64_t
 * so that any difference wraps instead of overflowing.
 *
 * Pure functions, any thread. Readers treat their input as hostile: they
 * never read at or past `end`, and refuse (RDB_ECORRUPT) a varint that runs
 * past end, is longer than 10 bytes, or whose 10th byte carries bits
 * beyond the 64th (anything but 0 or 1), so every accepted varint has
 * exactly one value and no bits are dropped.
 */
#ifndef RDB_VARINT_H
#define RDB_VARINT_H

#include "common/rdb_err.h"

#include <stddef.h>
#include <stdint.h>

#define RDB_VARINT_MAX 10u /* bytes of the longest varint (64 bits) */

/* Writes v as a varint at p, which has room for RDB_VARINT_MAX bytes (or
 * rdb_varint_len(v)); returns the bytes written (1..10). */
static inline size_t rdb_varint_put(uint8_t *p, uint64_t v)
{
	size_t i = 0;
	while (v >= 0x80) {
		p[i++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[i++] = (uint8_t)v;
	return i;
}

/* The bytes rdb_varint_put writes for v (1..10), without writing them. */
static inline size_t rdb_varint_len(uint64_t v)
{
	return 1 + (size_t)(63 - __builtin_clzll(v | 1)) / 7;
}

/* Reads the varint at *p (untrusted bytes before end) into *out and
 * advances *p past it. 0, or RDB_ECORRUPT (see the top comment: past end,
 * longer than 10 bytes, or past 64 bits); *p and *out are unspecified
 * then. */
static inline int rdb_varint_get(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
	uint64_t v = 0;
	for (unsigned shift = 0; shift < 63; shift += 7) { /* bytes 1..9: 63 bits */
		if (*p == end)
			return RDB_ECORRUPT;
		uint8_t c = *(*p)++;
		v |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80)) {
			*out = v;
			return 0;
		}
	}
	if (*p == end || **p > 1) /* the 10th byte: bit 63 alone, and the last */
		return RDB_ECORRUPT;
	uint64_t top = *(*p)++;
	*out = v | top << 63;
	return 0;
}

/* Zigzag of d (two's complement in a uint64_t). */
static inline uint64_t rdb_zigzag(uint64_t d)
{
	return (d << 1) ^ (0 - (d >> 63));
}

/* The inverse of rdb_zigzag. */
static inline uint64_t rdb_unzigzag(uint64_t z)
{
	return (z >> 1) ^ (0 - (z & 1));
}

#endif
