/* rdb_le.h - explicit little-endian get/put helpers for on-disk records.
 * Never cast a packed struct onto a buffer: use these. */
#ifndef RDB_LE_H
#define RDB_LE_H

#include <stdint.h>
#include <string.h>

static inline void rdb_put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}
static inline void rdb_put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline void rdb_put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t rdb_get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t rdb_get_le32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}
static inline uint64_t rdb_get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}
/* Big-endian 64-bit, for LMDB keys that must sort numerically. */
static inline void rdb_put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (56 - 8 * i));
}
static inline uint64_t rdb_get_be64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = (v << 8) | p[i];
	return v;
}
static inline void rdb_put_be32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (24 - 8 * i));
}
static inline uint32_t rdb_get_be32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v = (v << 8) | p[i];
	return v;
}
/* Bit casts between double and its IEEE-754 representation. */
static inline uint64_t rdb_f64_bits(double d)
{
	uint64_t u;
	memcpy(&u, &d, 8);
	return u;
}
static inline double rdb_bits_f64(uint64_t u)
{
	double d;
	memcpy(&d, &u, 8);
	return d;
}

#endif
