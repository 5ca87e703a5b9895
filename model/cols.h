/* cols.h - a set of points as four parallel columns (struct of arrays).
 * Plain value type: the body is public. */
#ifndef MDL_COLS_H
#define MDL_COLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mdl_cols {
	size_t n;	   /* points in use */
	size_t cap;	   /* capacity of each array, in points */
	int64_t *ts_ns;	   /* timestamp, ns since epoch */
	int64_t *step;	   /* training step, MDL_STEP_NONE where absent */
	uint32_t *attempt; /* attempt (restart count) */
	uint64_t *value;   /* IEEE-754 binary64 bits, stored bit-exact */
};

/* Zero-initialized cols are valid and empty. */
#define MDL_COLS_INIT                                                                              \
	{                                                                                          \
		0, 0, NULL, NULL, NULL, NULL                                                       \
	}

/* Ensures cap >= want. Keeps contents. 0 or -ENOMEM (cols unchanged).
 * The four arrays are one allocation (ts_ns is its address): only these
 * functions allocate, grow or free them. */
int mdl_cols_reserve(struct mdl_cols *c, size_t want);
/* Like mdl_cols_reserve, but growing allocates fresh arrays (malloc, copy
 * of the n points in use, free) instead of realloc. glibc's realloc keeps
 * a block in the arena (per-thread heap) it was first allocated in, so
 * columns made on one thread and grown on others would all stay in the
 * first thread's arena; these move to the growing thread's. Only the n
 * points in use are kept: contents past n are not. 0 or -ENOMEM (cols
 * unchanged). */
int mdl_cols_reserve_moving(struct mdl_cols *c, size_t want);
/* Appends one point, growing as needed. 0 or -ENOMEM. */
int mdl_cols_push(struct mdl_cols *c, int64_t ts_ns, int64_t step, uint32_t attempt,
		  uint64_t value);
/* Frees the arrays; c becomes empty. NULL ok. */
void mdl_cols_free(struct mdl_cols *c);
/* Sorts the points by (ts_ns, step, attempt), stable for equal keys. 0 or -ENOMEM. */
int mdl_cols_sort_by_time(struct mdl_cols *c);
/* Whether a and b have the same n and identical ts, step and attempt
 * columns (values aside): such series can share a group record. */
bool mdl_cols_same_time(const struct mdl_cols *a, const struct mdl_cols *b);

#endif
