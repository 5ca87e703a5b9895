/* cols.h - a set of points as four parallel columns (struct of arrays).
 * Plain value type: the body is public. */
#ifndef STO_COLS_H
#define STO_COLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sto_cols {
	size_t n;           /* points in use */
	size_t cap;         /* capacity of each array, in points */
	int64_t *ts_ns;     /* timestamp, ns since epoch */
	int64_t *step;      /* training step, STO_STEP_NONE where absent */
	uint32_t *attempt;  /* attempt (restart count) */
	uint64_t *value;    /* IEEE-754 binary64 bits, stored bit-exact */
};

/* Zero-initialized cols are valid and empty. */
#define STO_COLS_INIT {0, 0, NULL, NULL, NULL, NULL}

/* Ensures cap >= want. Keeps contents. 0 or -ENOMEM (cols unchanged). */
int sto_cols_reserve(struct sto_cols *c, size_t want);
/* Appends one point, growing as needed. 0 or -ENOMEM. */
int sto_cols_push(struct sto_cols *c, int64_t ts_ns, int64_t step, uint32_t attempt,
		  uint64_t value);
/* Frees the arrays; c becomes empty. NULL ok. */
void sto_cols_free(struct sto_cols *c);
/* Sorts the points by (ts_ns, step, attempt), stable for equal keys. 0 or -ENOMEM. */
int sto_cols_sort_by_time(struct sto_cols *c);
/* Whether a and b have the same n and identical ts, step and attempt
 * columns (values aside): such series can share a group record. */
bool sto_cols_same_time(const struct sto_cols *a, const struct sto_cols *b);

#endif
