/* json_array.h - the one way the JSON writers of server/ (json_out.c,
 * query_json.c) write a comma-separated array of formatted elements
 * straight into a bounded struct rdb_buf. Internal to server/.
 *
 * Elements are formatted in place: room for a block of at most
 * SRV_JSON_BLOCK_ELEMS elements of at most `width` bytes each (comma
 * included) is reserved, then they are written. Within `width` of the
 * buffer's bound an element goes through a stack copy and rdb_buf_append,
 * so the bound is hit exactly where appending the text element by element
 * would hit it: the same text, or the same RDB_ELIMIT, either way.
 */
#ifndef SRV_JSON_ARRAY_H
#define SRV_JSON_ARRAY_H

#include "common/rdb_buf.h"
#include "server/json_out.h"

#include <stddef.h>
#include <stdint.h>

#define SRV_JSON_BLOCK_ELEMS 256
/* The widest element (comma included) an array may have: a stored value
 * (SRV_FMT_VALUE_MAX) and its comma. */
#define SRV_JSON_ELEM_MAX (SRV_FMT_VALUE_MAX + 1)

/* The body of a function returning int: writes elements i = 0 .. n-1 of
 * an array (no brackets) into out, then returns 0, or returns the
 * rdb_buf error (RDB_ELIMIT past the bound, -ENOMEM) with a partial text
 * in out. WRITE is a statement that formats element i at `char *p`, at
 * most width - 1 bytes, and advances p past them. width is an integer
 * constant expression, at most SRV_JSON_ELEM_MAX. */
#define SRV_JSON_ARRAY(out, n, width, WRITE)                                                       \
	do {                                                                                       \
		_Static_assert((width) <= SRV_JSON_ELEM_MAX, "element wider than the stack copy"); \
		for (size_t i = 0; i < (n);) {                                                     \
			size_t k = (n)-i < SRV_JSON_BLOCK_ELEMS ? (n)-i : SRV_JSON_BLOCK_ELEMS;    \
			size_t fit = ((out)->max - (out)->len) / (width);                          \
			if (fit == 0) {                                                            \
				char tmp_[SRV_JSON_ELEM_MAX], *p = tmp_;                           \
				if (i)                                                             \
					*p++ = ',';                                                \
				WRITE;                                                             \
				int rc_ = rdb_buf_append((out), tmp_, (size_t)(p - tmp_));         \
				if (rc_)                                                           \
					return rc_;                                                \
				i++;                                                               \
				continue;                                                          \
			}                                                                          \
			k = k < fit ? k : fit;                                                     \
			int rc_ = rdb_buf_reserve((out), k * (width));                             \
			if (rc_)                                                                   \
				return rc_;                                                        \
			char *p = (char *)(out)->data + (out)->len;                                \
			for (size_t end = i + k; i < end; i++) {                                   \
				if (i)                                                             \
					*p++ = ',';                                                \
				WRITE;                                                             \
			}                                                                          \
			(out)->len = (size_t)((uint8_t *)p - (out)->data);                         \
		}                                                                                  \
		return 0;                                                                          \
	} while (0)

#endif
