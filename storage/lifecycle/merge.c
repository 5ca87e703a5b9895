/* merge.c - merging runs of small chunks, and of small group records, into
 * full ones: the first step of a compaction (contract: storage/admin.h;
 * called by compact.c on the flusher thread under compact_lock).
 *
 * For each series, a run of consecutive chunks (index order: min_ts, uid)
 * each holding fewer than chunk_max_points / 4 points, together at most
 * chunk_max_points, all of checkpointed generations (a pending chunk is
 * dropped and replayed at recovery, so it must stay as it is), is decoded,
 * merged by time (stable) and re-encoded as one chunk with a new uid (gen:
 * the largest of the run) into a new segment, under compaction's
 * compact_out protocol: the segment is synced, then one transaction deletes
 * the run's entries, puts the merged ones, stores next_chunk_uid and clears
 * compact_out. A crash before it leaves the old entries (the new file is
 * removed at open); after it, only the merged ones: no point is lost or
 * doubled. The replaced records are dead bytes of their segments. Each
 * merged chunk is preceded, in the same append and sync, by its supersede
 * record (compact.c, docs/FORMAT.md). Runs of small group records with the
 * same members merge into one group record the same way. A run that cannot
 * be merged (a damaged chunk) is left as it is; the others go on.
 */
#include "storage/lifecycle/lifecycle.h"
#include "common/rdb_err.h"
#include "common/rdb_log.h"
#include "common/rdb_map.h"
#include "common/rdb_sort.h"
#include "storage/admin.h"
#include "storage/chunk/codec.h"
#include "storage/chunk/group.h"
#include "storage/chunk/segment.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- merging small chunks ------------------------------------------------------------- */

/* Runs of small chunks to merge: all chunk entries (key order), and the
 * output of the current batch. */
struct merge_set {
	struct key_list all;	    /* every chunk entry, in (series, min_ts, uid) order */
	struct mdl_cols pts, one;   /* the run's points; one chunk's points */
	struct rdb_buf rec, codec;  /* scratch: a record read; a codec payload */
	struct rdb_buf out;	    /* framed supersede + merged records of the batch */
	struct key_list olds;	    /* entries the batch replaces */
	struct key_list news;	    /* the merged entries */
	struct sup_list sups;	    /* supersede entries of the merged chunks */
	struct id_list absorbed;    /* merged uids whose entries a new one absorbed */
	struct rdb_map groups;	    /* group record uid -> struct grp_info * */
	struct mdl_cols *gpts;	    /* a group run's points, per member */
	struct sto_chunk_ref *gsrc; /* a group run's chunks of one member */
};

/* The entries of one group record (members k at all.v[idx[k]]), m slots. */
struct grp_info {
	uint8_t m, have;
	uint32_t idx[];
};

static int cmp_src(const void *a, const void *b)
{
	uint64_t x = ((const struct sto_sup_src *)a)->uid, y = ((const struct sto_sup_src *)b)->uid;
	return x < y ? -1 : x > y;
}

/* Sorts and deduplicates the sources and segments of e. */
static void sup_normalize(struct sto_sup_entry *e)
{
	size_t k = 0;
	rdb_sort(e->sup.src, e->sup.nsrc, sizeof(*e->sup.src), cmp_src);
	for (size_t i = 0; i < e->sup.nsrc; i++)
		if (k == 0 || e->sup.src[i].uid != e->sup.src[k - 1].uid)
			e->sup.src[k++] = e->sup.src[i];
	e->sup.nsrc = (uint32_t)k;
	k = 0;
	rdb_sort(e->seg, e->nseg, sizeof(*e->seg), sti_cmp_u64);
	for (size_t i = 0; i < e->nseg; i++)
		if (k == 0 || e->seg[i] != e->seg[k - 1])
			e->seg[k++] = e->seg[i];
	e->nseg = (uint32_t)k;
}

/* Grows e's arrays by nsrc sources and nseg segments. */
static int sup_grow(struct sto_sup_entry *e, size_t nsrc, size_t nseg)
{
	struct sto_sup_src *src = realloc(e->sup.src, (e->sup.nsrc + nsrc) * sizeof(*src));
	if (src)
		e->sup.src = src;
	uint64_t *seg = realloc(e->seg, (e->nseg + nseg + 1) * sizeof(*seg));
	if (seg)
		e->seg = seg;
	return src && seg ? 0 : -ENOMEM;
}

/* Adds source ref (and where its record is) to e; a source that is itself
 * a merged chunk with a live supersede entry brings that entry's sources
 * and segments along (the entry is then absorbed: deleted at the switch),
 * so that every entry names all the records its chunk replaces, directly. */
static int sup_add_source(struct sto_txn *t, struct merge_set *m, struct sto_sup_entry *e,
			  const struct sto_chunk_ref *ref)
{
	struct sto_sup_entry old = {0};
	int rc = sto_sup_get(t, ref->uid, &old);
	if (rc && rc != RDB_ENOTFOUND)
		return rc;
	bool merged = rc == 0; /* old is ref's own (absent: old stays empty) */
	rc = sup_grow(e, 1 + (size_t)old.sup.nsrc, 1 + (size_t)old.nseg);
	if (rc == 0) {
		e->sup.src[e->sup.nsrc++] = (struct sto_sup_src){ref->uid, ref->stats.min_ts_ns};
		e->seg[e->nseg++] = ref->segment_id;
		for (uint32_t i = 0; i < old.sup.nsrc; i++)
			e->sup.src[e->sup.nsrc++] = old.sup.src[i];
		for (uint32_t i = 0; i < old.nseg; i++)
			e->seg[e->nseg++] = old.seg[i];
		if (merged)
			rc = sti_id_push(&m->absorbed, ref->uid);
	}
	sto_sup_entry_free(&old);
	return rc;
}

/* The supersede entry of merged chunk ref made of the n chunks src. */
static int sup_build(struct sto *s, struct merge_set *m, const struct sto_chunk_ref *src, size_t n,
		     const struct sto_chunk_ref *ref, struct sto_sup_entry *e)
{
	struct sto_txn *t;
	memset(e, 0, sizeof(*e));
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = sup_add_source(t, m, e, &src[i]);
	sto_txn_abort(t);
	if (rc == 0) {
		sup_normalize(e);
		e->sup.series_id = ref->series_id;
		e->sup.merged_uid = ref->uid;
		e->sup.merged_min_ts_ns = ref->stats.min_ts_ns;
		e->sup.gen = ref->gen;
		if (e->sup.nsrc > STO_SUP_MAX_SOURCES)
			rc = RDB_ELIMIT;
	}
	if (rc)
		sto_sup_entry_free(e);
	return rc;
}

/* Frames the supersede record of ref into m->out, right before the merged
 * chunk: one append and one sync carry both, and a record cut short by a
 * crash hides whatever follows it from rebuild-index, so the merged chunk
 * is never seen without its supersede record. */
static int sup_write(struct sto *s, struct merge_set *m, const struct sto_chunk_ref *src, size_t n,
		     struct sto_seg_writer *w, const struct sto_chunk_ref *ref)
{
	struct sto_sup_entry e;
	size_t absorbed = m->absorbed.n;
	int rc = sup_build(s, m, src, n, ref, &e);
	if (rc)
		return rc;
	e.segment_id = sto_seg_id(w);
	e.offset = sto_seg_size(w) + m->out.len;
	size_t before = m->out.len;
	rc = sto_sup_frame(&m->out, &e.sup);
	e.length = (uint32_t)(m->out.len - before);
	if (rc == 0)
		rc = sti_sup_list_push(&m->sups, &e);
	if (rc) {
		m->out.len = before;
		m->absorbed.n = absorbed;
		sto_sup_entry_free(&e);
	}
	return rc;
}

static bool merge_small(const struct sto *s, const struct sto_chunk_ref *r)
{
	/* Group members merge as whole groups (below): merged into lone chunks
	 * they would store their time columns once per series again. */
	return r->group_n == 0 && r->stats.count < s->opt.chunk_max_points / 4 &&
	       r->gen <= s->ckpt_gen;
}

/* Decodes refs [a, b) of m->all, merges them by time (stable), frames one
 * chunk into m->out for the new segment w. */
static int merge_run(struct sto *s, struct merge_set *m, size_t a, size_t b,
		     struct sto_seg_writer *w, const struct mdl_series_key *key)
{
	struct sto_read_error err;
	struct sto_chunk_ref ref = {0};
	m->pts.n = 0;
	for (size_t i = a; i < b; i++) {
		int rc = s->eng->read_chunk(s, &m->all.v[i], &m->rec, &m->one, &err);
		if (rc) {
			rdb_warn("store", "merging small chunks: %s; that run is left as it is",
				 err.msg);
			return rc;
		}
		for (size_t k = 0; k < m->one.n && rc == 0; k++)
			rc = mdl_cols_push(&m->pts, m->one.ts_ns[k], m->one.step[k],
					   m->one.attempt[k], m->one.value[k]);
		if (rc)
			return rc;
		if (m->all.v[i].gen > ref.gen)
			ref.gen = m->all.v[i].gen;
	}
	int rc = mdl_cols_sort_by_time(&m->pts);
	m->codec.len = 0;
	if (rc == 0)
		rc = sto_codec_encode(&m->pts, &m->codec, NULL);
	if (rc == 0)
		rc = s->eng->uid_reserve(s, 1);
	if (rc)
		return rc;
	ref.series_id = m->all.v[a].series_id;
	ref.uid = s->next_uid++;
	ref.segment_id = sto_seg_id(w);
	sto_chunk_stats_compute(&m->pts, &ref.stats);
	rc = sup_write(s, m, &m->all.v[a], b - a, w, &ref);
	if (rc)
		return rc;
	ref.offset = sto_seg_size(w) + m->out.len;
	size_t before = m->out.len;
	rc = sto_chunk_frame(&m->out, STO_CHUNK_MAGIC, ref.series_id, ref.uid, ref.gen,
			     (uint32_t)m->pts.n, m->codec.data, m->codec.len, key);
	if (rc)
		return rc;
	ref.length = (uint32_t)(m->out.len - before);
	for (size_t i = a; i < b && rc == 0; i++)
		rc = sti_key_push(&m->olds, &m->all.v[i]);
	return rc ? rc : sti_key_push(&m->news, &ref);
}

/* The index switch of a merge batch: old entries out, merged ones in. */
static int merge_switch(struct sto *s, struct merge_set *m)
{
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, true, &t);
	if (rc)
		return rc;
	for (size_t i = 0; rc == 0 && i < m->olds.n; i++) {
		const struct sto_chunk_ref *o = &m->olds.v[i];
		rc = sto_chunk_del(t, o->series_id, o->stats.min_ts_ns, o->uid);
	}
	for (size_t i = 0; rc == 0 && i < m->news.n; i++)
		rc = sto_chunk_put(t, &m->news.v[i]);
	for (size_t i = 0; rc == 0 && i < m->absorbed.n; i++)
		rc = sto_sup_del(t, m->absorbed.v[i]);
	for (size_t i = 0; rc == 0 && i < m->sups.n; i++)
		rc = sto_sup_put(t, &m->sups.v[i]);
	if (rc == 0)
		rc = sto_meta_put(t, "next_chunk_uid", s->uid_limit);
	if (rc == 0)
		rc = sto_meta_put(t, "compact_out", 0);
	if (rc) {
		sto_txn_abort(t);
		return rc;
	}
	pthread_rwlock_wrlock(&s->view_lock);
	rc = sto_txn_commit_at(t, STO_FP_COMPACT_COMMIT);
	pthread_rwlock_unlock(&s->view_lock);
	return rc;
}

static int series_key(struct sto *s, uint64_t id, struct mdl_series_key *key)
{
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	rc = sto_series_key_of(t, id, key);
	sto_txn_abort(t);
	return rc;
}

/* End of the run of small chunks starting at i (exclusive). */
static size_t run_end(struct sto *s, const struct merge_set *m, size_t i)
{
	uint64_t pts = 0;
	size_t j = i;
	while (j < m->all.n && m->all.v[j].series_id == m->all.v[i].series_id &&
	       merge_small(s, &m->all.v[j]) &&
	       pts + m->all.v[j].stats.count <= s->opt.chunk_max_points)
		pts += m->all.v[j++].stats.count;
	return j;
}

/* ---- merging small group records -------------------------------------------------------
 * Runs of small group records with the same members (same series, same
 * order) merge into one group record: each member's chunks are decoded and
 * merged by time (stable), which permutes every member alike because their
 * time columns are identical, so the merged members still share them. Each
 * member gets its own supersede record (written before the group record),
 * exactly as a merged lone chunk; the index switch is the same. A run
 * starts at a member-0 entry; groups missing a member entry (quarantined)
 * are left alone. */

static int groups_collect(struct merge_set *m)
{
	if (m->all.n >= UINT32_MAX)
		return 0; /* no group merging past 4G index entries (idx is u32) */
	for (size_t i = 0; i < m->all.n; i++) {
		const struct sto_chunk_ref *r = &m->all.v[i];
		if (!r->group_n)
			continue;
		uint64_t base = r->uid - r->member;
		struct grp_info *g = rdb_map_get(&m->groups, base + 1);
		if (!g) {
			g = calloc(1, sizeof(*g) + r->group_n * sizeof(g->idx[0]));
			if (!g || rdb_map_put(&m->groups, base + 1, g) != 0) {
				free(g);
				return -ENOMEM;
			}
			g->m = r->group_n;
		}
		if (r->group_n != g->m || r->member >= g->m)
			continue;
		g->idx[r->member] = (uint32_t)i;
		g->have++;
	}
	return 0;
}

static void groups_free(struct merge_set *m)
{
	for (size_t i = 0; i < m->groups.cap; i++)
		if (m->groups.keys[i])
			free(m->groups.vals[i]);
	rdb_map_free(&m->groups);
}

/* The group of entry i if it is member 0 of a complete, small,
 * checkpointed group record; else NULL. */
static const struct grp_info *group_start(struct sto *s, const struct merge_set *m, size_t i)
{
	const struct sto_chunk_ref *r = &m->all.v[i];
	if (!r->group_n || r->member != 0 || r->stats.count >= s->opt.chunk_max_points / 4 ||
	    r->gen > s->ckpt_gen)
		return NULL;
	const struct grp_info *g = rdb_map_get(&m->groups, r->uid + 1);
	return g && g->have == g->m ? g : NULL;
}

static bool same_members(const struct merge_set *m, const struct grp_info *a,
			 const struct grp_info *b)
{
	if (a->m != b->m)
		return false;
	for (unsigned k = 0; k < a->m; k++)
		if (m->all.v[a->idx[k]].series_id != m->all.v[b->idx[k]].series_id)
			return false;
	return true;
}

/* End of the run of small group records whose member 0 is at i. */
static size_t group_run_end(struct sto *s, const struct merge_set *m, size_t i)
{
	const struct grp_info *g0 = group_start(s, m, i), *g;
	uint64_t pts = 0;
	size_t j = i;
	while (g0 && j < m->all.n && m->all.v[j].series_id == m->all.v[i].series_id &&
	       (g = group_start(s, m, j)) != NULL && same_members(m, g0, g) &&
	       pts + m->all.v[j].stats.count <= s->opt.chunk_max_points)
		pts += m->all.v[j++].stats.count;
	return j;
}

/* Member k's points of the groups whose member 0 is at [a, b), merged. */
static int group_member_points(struct sto *s, struct merge_set *m, size_t a, size_t b, unsigned k,
			       struct mdl_cols *out, uint64_t *gen)
{
	struct sto_read_error err;
	out->n = 0;
	for (size_t i = a; i < b; i++) {
		const struct grp_info *g = rdb_map_get(&m->groups, m->all.v[i].uid + 1);
		const struct sto_chunk_ref *r = &m->all.v[g->idx[k]];
		int rc = s->eng->read_chunk(s, r, &m->rec, &m->one, &err);
		if (rc) {
			rdb_warn("store",
				 "merging small group records: %s; that run is left as it is",
				 err.msg);
			return rc;
		}
		for (size_t p = 0; p < m->one.n && rc == 0; p++)
			rc = mdl_cols_push(out, m->one.ts_ns[p], m->one.step[p], m->one.attempt[p],
					   m->one.value[p]);
		if (rc)
			return rc;
		if (r->gen > *gen)
			*gen = r->gen;
	}
	return mdl_cols_sort_by_time(out);
}

/* Merges the group records whose member 0 is at [a, b) into one group
 * record in m->out (supersede records first), for the new segment w. */
static int merge_group_run(struct sto *s, struct merge_set *m, size_t a, size_t b,
			   struct sto_seg_writer *w)
{
	const struct grp_info *g0 = rdb_map_get(&m->groups, m->all.v[a].uid + 1);
	struct sto_group_member mem[STO_GROUP_MAX_MEMBERS];
	struct mdl_series_key keys[STO_GROUP_MAX_MEMBERS];
	struct sto_chunk_ref refs[STO_GROUP_MAX_MEMBERS];
	uint64_t gen = 0, uid = 0;
	unsigned nm = g0->m;
	int rc = 0;
	for (unsigned k = 0; rc == 0 && k < nm; k++) {
		rc = group_member_points(s, m, a, b, k, &m->gpts[k], &gen);
		if (rc == 0 && !mdl_cols_same_time(&m->gpts[0], &m->gpts[k]))
			return 0; /* cannot happen for records the seal made; leave them */
		if (rc == 0)
			rc = series_key(s, m->all.v[g0->idx[k]].series_id, &keys[k]);
		mem[k] = (struct sto_group_member){m->all.v[g0->idx[k]].series_id, &keys[k],
						   &m->gpts[k]};
	}
	if (rc == 0)
		rc = s->eng->uid_reserve(s, nm);
	if (rc)
		return rc;
	uid = s->next_uid;
	s->next_uid += nm;
	for (unsigned k = 0; rc == 0 && k < nm; k++) {
		refs[k] = (struct sto_chunk_ref){.series_id = mem[k].series_id,
						 .uid = uid + k,
						 .segment_id = sto_seg_id(w),
						 .group_n = (uint8_t)nm,
						 .member = (uint8_t)k,
						 .gen = gen};
		sto_chunk_stats_compute(&m->gpts[k], &refs[k].stats);
		for (size_t i = a; i < b; i++) {
			const struct grp_info *g = rdb_map_get(&m->groups, m->all.v[i].uid + 1);
			m->gsrc[i - a] = m->all.v[g->idx[k]];
		}
		rc = sup_write(s, m, m->gsrc, b - a, w, &refs[k]);
	}
	uint64_t offset = sto_seg_size(w) + m->out.len;
	size_t before = m->out.len;
	uint32_t head_len = 0;
	if (rc == 0)
		rc = sto_group_frame(&m->out, &m->codec, uid, gen, mem, nm, &head_len);
	for (unsigned k = 0; rc == 0 && k < nm; k++) {
		refs[k].offset = offset;
		refs[k].length = (uint32_t)(m->out.len - before);
		refs[k].head_len = head_len;
		rc = sti_key_push(&m->news, &refs[k]);
		for (size_t i = a; rc == 0 && i < b; i++) {
			const struct grp_info *g = rdb_map_get(&m->groups, m->all.v[i].uid + 1);
			rc = sti_key_push(&m->olds, &m->all.v[g->idx[k]]);
		}
	}
	return rc;
}

/* Where a batch's output stood before one run, to take that run back. */
struct merge_mark {
	size_t out, olds, news, sups, absorbed;
};

static struct merge_mark merge_mark(const struct merge_set *m)
{
	return (struct merge_mark){m->out.len, m->olds.n, m->news.n, m->sups.n, m->absorbed.n};
}

/* A run that cannot be merged (a damaged chunk in it, or an output past the
 * buffer's bound) is taken back and left as it is; the others go on. */
static int merge_undo(struct merge_set *m, const struct merge_mark *k, int rc)
{
	if (rc != RDB_ECORRUPT && rc != RDB_ELIMIT)
		return rc;
	m->out.len = k->out;
	m->olds.n = k->olds;
	m->news.n = k->news;
	sti_sup_list_trim(&m->sups, k->sups);
	m->absorbed.n = k->absorbed;
	return 0;
}

/* One batch: runs from *pos on into a new segment (synced), then the index
 * switch. Crash-safe like segment compaction (compact_out). */
static int merge_batch(struct sto *s, struct merge_set *m, size_t *pos,
		       struct sto_compact_result *r)
{
	uint64_t new_id = 0;
	struct sto_seg_writer *w = NULL;
	m->out.len = m->olds.n = m->news.n = m->absorbed.n = 0;
	sti_sup_list_clear(&m->sups);
	int rc = sti_compact_begin(s, &new_id);
	if (rc)
		return rc;
	rc = sto_seg_create(s->seg_dir, new_id, s->ring, &w);
	while (rc == 0 && *pos < m->all.n && m->out.len < SEAL_BUF_MAX) {
		size_t i = *pos, j = run_end(s, m, i), g = group_run_end(s, m, i);
		struct merge_mark mark = merge_mark(m);
		*pos = j > i ? j : g > i ? g : i + 1;
		if (g - i >= 2) {
			rc = merge_undo(m, &mark, merge_group_run(s, m, i, g, w));
			continue;
		}
		if (j - i < 2)
			continue;
		struct mdl_series_key key;
		rc = series_key(s, m->all.v[i].series_id, &key);
		if (rc == 0)
			rc = merge_undo(m, &mark, merge_run(s, m, i, j, w, &key));
	}
	if (rc == 0 && m->out.len)
		rc = sto_seg_append_at(w, m->out.data, m->out.len, STO_FP_COMPACT_WRITE);
	int crc = w ? sto_seg_close(w) : 0; /* syncs: the data is durable before the switch */
	rc = rc ? rc : crc;
	if (rc == 0 && m->news.n)
		rc = merge_switch(s, m);
	if (rc || m->news.n == 0) {
		sti_compact_abandon(s, new_id);
		return rc;
	}
	r->merged_from += m->olds.n;
	r->merged_into += m->news.n;
	return 0;
}

/* Merges every series' runs of small checkpointed chunks. The replaced
 * chunks' bytes become dead in their segments (reclaimed by the segment
 * pass that follows). */
int sti_merge_small_chunks(struct sto *s, struct sto_compact_result *r)
{
	struct merge_set m = {0};
	struct sto_txn *t;
	if (s->opt.chunk_max_points < 8)
		return 0;
	rdb_buf_init(&m.rec, STO_CHUNK_HEADER_SIZE + STO_CHUNK_MAX_PAYLOAD + 4096);
	rdb_buf_init(&m.codec, STO_CHUNK_MAX_PAYLOAD);
	rdb_buf_init(&m.out, SEAL_BUF_MAX + STO_CHUNK_HEADER_SIZE + STO_CHUNK_MAX_PAYLOAD + 4096);
	m.gpts = calloc(STO_GROUP_MAX_MEMBERS, sizeof(*m.gpts));
	m.gsrc = calloc(s->opt.chunk_max_points, sizeof(*m.gsrc));
	int rc = m.gpts && m.gsrc ? sto_txn_begin(s->ix, false, &t) : -ENOMEM;
	if (rc == 0) {
		rc = sto_chunk_scan_all(t, sti_key_push, &m.all);
		sto_txn_abort(t);
	}
	if (rc == 0)
		rc = groups_collect(&m);
	size_t pos = 0;
	while (rc == 0 && pos < m.all.n)
		rc = merge_batch(s, &m, &pos, r);
	if (r->merged_from)
		rdb_info("store", "compaction merged %llu small chunks into %llu",
			 (unsigned long long)r->merged_from, (unsigned long long)r->merged_into);
	free(m.all.v);
	free(m.olds.v);
	free(m.news.v);
	sti_sup_list_clear(&m.sups);
	free(m.sups.v);
	free(m.absorbed.v);
	mdl_cols_free(&m.pts);
	mdl_cols_free(&m.one);
	for (size_t k = 0; m.gpts && k < STO_GROUP_MAX_MEMBERS; k++)
		mdl_cols_free(&m.gpts[k]);
	free(m.gpts);
	free(m.gsrc);
	groups_free(&m);
	rdb_buf_free(&m.rec);
	rdb_buf_free(&m.codec);
	rdb_buf_free(&m.out);
	return rc;
}
