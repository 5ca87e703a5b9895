/* rdb_ptab.c - (hash, pointer) table (see rdb_ptab.h).
 *
 * Invariant: every entry sits in the probe run from rdb_ptab_slot_of(its
 * hash) to its slot with no empty slot in between, so a walk from the home
 * slot to the first empty one sees every entry of a hash. Growth rehashes
 * into a table twice the size; deletion shifts later entries of the run
 * back into the hole. Allocation failure leaves the table as it was.
 */
#include "common/rdb_ptab.h"
#include "common/rdb_err.h"

#include <errno.h>
#include <stdlib.h>

void rdb_ptab_init(struct rdb_ptab *t, size_t max_n)
{
	*t = (struct rdb_ptab){.max_n = max_n};
}

/* Puts (h, val) into the first empty slot of its probe run. */
static void place(struct rdb_ptab *t, uint64_t h, void *val)
{
	size_t i = rdb_ptab_slot_of(t, h);
	while (t->slots[i].val)
		i = (i + 1) & t->mask;
	t->slots[i] = (struct rdb_ptab_slot){h, val};
}

static int grow(struct rdb_ptab *t)
{
	size_t cap = t->slots ? (t->mask + 1) * 2 : 16;
	struct rdb_ptab_slot *old = t->slots;
	size_t old_cap = old ? t->mask + 1 : 0;
	struct rdb_ptab_slot *slots = calloc(cap, sizeof(*slots));
	if (!slots)
		return -ENOMEM;
	t->slots = slots;
	t->mask = cap - 1;
	for (size_t i = 0; i < old_cap; i++)
		if (old[i].val)
			place(t, old[i].hash, old[i].val);
	free(old);
	return 0;
}

int rdb_ptab_put(struct rdb_ptab *t, uint64_t h, void *val)
{
	if (t->n >= t->max_n)
		return RDB_ELIMIT;
	if (!t->slots || (t->n + 1) * 2 > t->mask + 1) {
		int rc = grow(t);
		if (rc)
			return rc;
	}
	place(t, h, val);
	t->n++;
	return 0;
}

bool rdb_ptab_del(struct rdb_ptab *t, uint64_t h, const void *val)
{
	size_t i = rdb_ptab_home(t, h);
	while (i != RDB_PTAB_END && t->slots[i].val != val)
		i = rdb_ptab_next(t, h, i);
	if (i == RDB_PTAB_END)
		return false;
	t->slots[i] = (struct rdb_ptab_slot){0, NULL};
	t->n--;
	/* Backward shift: a later entry of the run may move into the hole
	 * when its home is not in (hole, j]. */
	for (size_t j = (i + 1) & t->mask; t->slots[j].val; j = (j + 1) & t->mask) {
		size_t home = rdb_ptab_slot_of(t, t->slots[j].hash);
		if (((j - home) & t->mask) >= ((j - i) & t->mask)) {
			t->slots[i] = t->slots[j];
			t->slots[j] = (struct rdb_ptab_slot){0, NULL};
			i = j;
		}
	}
	return true;
}

void rdb_ptab_free(struct rdb_ptab *t)
{
	if (!t)
		return;
	free(t->slots);
	t->slots = NULL;
	t->mask = 0;
	t->n = 0;
}
