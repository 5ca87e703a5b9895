/* rdb_map.c - uint64 -> pointer hash map (see rdb_map.h). */
#include "common/rdb_map.h"

#include <errno.h>
#include <stdlib.h>

static size_t slot_of(uint64_t key, size_t cap)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	return (size_t)key & (cap - 1);
}

void *rdb_map_get(const struct rdb_map *m, uint64_t key)
{
	if (m->cap == 0)
		return NULL;
	for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
		if (m->keys[i] == key)
			return m->vals[i];
		if (m->keys[i] == 0)
			return NULL;
	}
}

void rdb_map_prefetch(const struct rdb_map *m, uint64_t key)
{
	if (m->cap == 0)
		return;
	size_t i = slot_of(key, m->cap);
	__builtin_prefetch(&m->keys[i]);
	__builtin_prefetch(&m->vals[i]);
}

static int grow(struct rdb_map *m)
{
	size_t cap = m->cap ? m->cap * 2 : 16;
	uint64_t *keys = calloc(cap, sizeof(*keys));
	void **vals = calloc(cap, sizeof(*vals));
	if (!keys || !vals) {
		free(keys);
		free(vals);
		return -ENOMEM;
	}
	for (size_t j = 0; j < m->cap; j++) {
		if (!m->keys[j])
			continue;
		size_t i = slot_of(m->keys[j], cap);
		while (keys[i])
			i = (i + 1) & (cap - 1);
		keys[i] = m->keys[j];
		vals[i] = m->vals[j];
	}
	free(m->keys);
	free(m->vals);
	m->keys = keys;
	m->vals = vals;
	m->cap = cap;
	return 0;
}

int rdb_map_put(struct rdb_map *m, uint64_t key, void *val)
{
	if ((m->n + 1) * 2 > m->cap) {
		int rc = grow(m);
		if (rc)
			return rc;
	}
	size_t i = slot_of(key, m->cap);
	while (m->keys[i] && m->keys[i] != key)
		i = (i + 1) & (m->cap - 1);
	if (!m->keys[i])
		m->n++;
	m->keys[i] = key;
	m->vals[i] = val;
	return 0;
}

void *rdb_map_del(struct rdb_map *m, uint64_t key)
{
	if (m->cap == 0)
		return NULL;
	size_t mask = m->cap - 1, i = slot_of(key, m->cap);
	while (m->keys[i] != key) {
		if (m->keys[i] == 0)
			return NULL;
		i = (i + 1) & mask;
	}
	void *val = m->vals[i];
	m->keys[i] = 0;
	m->vals[i] = NULL;
	m->n--;
	/* Backward-shift: move later entries of the probe run into the hole. */
	for (size_t j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
		size_t home = slot_of(m->keys[j], m->cap);
		/* Entry at j may move to i if its home is not in (i, j]. */
		if (((j - home) & mask) >= ((j - i) & mask)) {
			m->keys[i] = m->keys[j];
			m->vals[i] = m->vals[j];
			m->keys[j] = 0;
			m->vals[j] = NULL;
			i = j;
		}
	}
	return val;
}

void rdb_map_free(struct rdb_map *m)
{
	if (!m)
		return;
	free(m->keys);
	free(m->vals);
	m->keys = NULL;
	m->vals = NULL;
	m->cap = 0;
	m->n = 0;
}
