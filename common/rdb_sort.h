/* rdb_sort.h - qsort that is defined for empty arrays.
 *
 * qsort(NULL, 0, ...) is undefined behaviour in C (the pointer must be
 * valid even for zero elements), and a NULL array with n == 0 is exactly
 * what an empty result holds (a query that matched no rank, a batch with
 * no tags). UBSan aborts the server on it. Every sort in the product goes
 * through rdb_sort; tools/checksrc.sh bans bare qsort outside this file.
 */
#ifndef RDB_SORT_H
#define RDB_SORT_H

#include <stddef.h>
#include <stdlib.h>

/* Sorts n elements of size bytes at base with cmp. base may be NULL when
 * n < 2 (nothing to sort). Never fails, never allocates beyond qsort. */
static inline void rdb_sort(void *base, size_t n, size_t size,
			    int (*cmp)(const void *, const void *))
{
	if (n > 1)
		qsort(base, n, size, cmp);
}

#endif
