/* rebuild.h - offline recreation of the LMDB index (index/) from the
 * segment files alone (`rankctl rebuild-index`). The rule is in
 * docs/FORMAT.md ("Rebuilding the index"); storage/rebuild.c implements it.
 * The short form, sto_rebuild_index(), is declared in storage/admin.h.
 */
#ifndef STO_REBUILD_H
#define STO_REBUILD_H

#include "storage/admin.h"

#include <stddef.h>
#include <stdint.h>

struct sto_rebuild_options {
	const char *data_dir; /* a data directory no process has open */
	uint64_t map_bytes;   /* LMDB map size of the new index */
	sto_problem_fn fn;    /* called once per damaged record or file; may be NULL */
	void *arg;
};

/* Takes data_dir's LOCK (-EBUSY when a rankdbd or rankctl holds it), walks
 * every chunks/seg-*.dat record by record, builds the new index in
 * index.rebuild/, then renames index/ (when present) to index.old-<ns> and
 * index.rebuild/ to index/, and fsyncs data_dir. The path of the kept old
 * index (empty string: there was none) goes to old_index (old_len bytes,
 * may be NULL). Blocks for the whole walk. On failure index/ is untouched
 * (index.rebuild/ may remain; the next run removes it) and *r holds the
 * counts so far. 0, -errno, RDB_EFORMAT. */
int sto_rebuild_index_opt(const struct sto_rebuild_options *o, struct sto_rebuild_result *r,
			  char *old_index, size_t old_len);

#endif
