/* alias.h - the built-in metric aliases (../shared/DESIGN.md, "Metric
 * vocabulary"): other spellings of the canonical metric names, such as line
 * protocol's train.loss for loss and DCGM's exporter names for the gpu.*
 * metrics. Shared by detection (detect/rules.c puts them into its lookup
 * table) and queries (query/match.c: a metric asked for under one spelling
 * finds the job's series stored under another). Read-only static data:
 * thread-safe, no allocation.
 */
#ifndef MDL_ALIAS_H
#define MDL_ALIAS_H

#include <stdbool.h>
#include <stddef.h>

/* Alias i -> *canonical, for i < n; NULL past the end. Static strings. */
const char *mdl_metric_alias(size_t i, const char **canonical);

/* The canonical name of name when it is a built-in alias, else name itself. */
const char *mdl_metric_canonical(const char *name);

/* True when a and b are the same metric under the built-in aliases (equal,
 * or one an alias of the other, or both aliases of one canonical name). */
bool mdl_metric_same(const char *a, const char *b);

#endif
