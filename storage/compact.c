/* compact.c - online, crash-safe compaction of segment files (contract:
 * storage/admin.h).
 *
 * Compaction: on the flusher thread under compact_lock. A segment other
 * than the one being written whose live bytes (index entries pointing into
 * it) are below compact_min_live of its size is copied, record by record
 * (each verified), into a new segment; meta compact_out = new id + 1 is
 * committed first. The new segment is synced, then one transaction
 * repoints every entry (same key and uid, new segment/offset), adds the old
 * id to seg_trash and clears compact_out. Then the segment readers are
 * swapped (no fd keeps the old file), the old file is unlinked and its
 * trash entry removed. At open, a set compact_out means an unfinished copy
 * (its file is removed) and every seg_trash id is unlinked.
 *
 * Merging small chunks (first, before the segment pass): for each series,
 * a run of consecutive chunks (index order: min_ts, uid) each holding
 * fewer than chunk_max_points / 4 points, together at most
 * chunk_max_points, all of checkpointed generations (a pending chunk is
 * dropped and replayed at recovery, so it must stay as it is), is decoded,
 * merged by time (stable) and re-encoded as one chunk with a new uid (gen:
 * the largest of the run) into a new segment, under the same compact_out
 * protocol: the segment is synced, then one transaction deletes the run's
 * entries, puts the merged ones, stores next_chunk_uid and clears
 * compact_out. A crash before it leaves the old entries (the new file is
 * removed at open); after it, only the merged ones: no point is lost or
 * doubled. The replaced records are dead bytes of their segments. A reader whose
 * snapshot predates the switch gets ENOENT and looks its chunk up again.
 *
 * Supersede records: the replaced records stay on disk until their segments
 * are rewritten, and rebuild-index reads only the disk. So each merged chunk
 * is preceded, in the same append and sync, by a SUP1 record naming every
 * chunk it replaces (transitively: a source that was itself merged brings
 * its sources along and its supersede entry is absorbed), and the switch
 * transaction puts its `supersede` index entry. The segment pass writes the
 * tracked records of a segment it rewrites into the new one (framed again
 * from the entry) while a segment named in the entry as holding a source
 * still exists, and drops the entry otherwise. Segments go oldest first, so
 * sources go before their records. Rules: docs/FORMAT.md.
 */
#include "storage/store_int.h"
#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"
#include "common/rdb_map.h"
#include "common/rdb_time.h"
#include "storage/admin.h"
#include "storage/codec.h"
#include "storage/evstore.h"
#include "storage/group.h"
#include "storage/segment.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(sizeof(uintptr_t) * 8 >= STO_GROUP_MAX_MEMBERS,
	       "a pointer-sized mask holds one bit per group member");

/* ---- compaction ------------------------------------------------------------------------- */

struct ev_move {
	char job[STO_JOB_MAX + 1];
	int64_t min_ts_ns;
	uint64_t uid;
	struct ev_entry e;
	uint8_t *val; /* owned copy of the entry (bloom inside) */
	size_t len;
};

struct sup_list {
	struct sto_sup_entry *v; /* each owns its arrays */
	size_t n, cap;
};

struct seg_set {
	uint64_t seg;              /* the segment being compacted */
	struct key_list chunks;    /* its point chunks */
	struct ev_move *ev;        /* its event chunks */
	size_t nev, evcap;
	struct sup_list sups;      /* its supersede records (tracked ones) */
	size_t ncarry;             /* sups[0, ncarry) go along, the rest are dropped */
	struct rdb_map live;       /* all segments: id + 1 -> live bytes (as a pointer value) */
};

/* Frees the entries from `keep` on. */
static void sup_list_trim(struct sup_list *l, size_t keep)
{
	for (size_t i = keep; i < l->n; i++)
		sto_sup_entry_free(&l->v[i]);
	l->n = keep < l->n ? keep : l->n;
}

static void sup_list_clear(struct sup_list *l)
{
	sup_list_trim(l, 0);
}

/* Appends *e (taking its arrays) to l; on failure e still owns them. */
static int sup_list_push(struct sup_list *l, struct sto_sup_entry *e)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct sto_sup_entry *p = realloc(l->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		l->v = p;
		l->cap = cap;
	}
	l->v[l->n++] = *e;
	return 0;
}


static void live_add(struct rdb_map *m, uint64_t seg, uint64_t bytes)
{
	uintptr_t cur = (uintptr_t)rdb_map_get(m, seg + 1);
	rdb_map_put(m, seg + 1, (void *)(cur + (uintptr_t)bytes));
}

static int set_chunk_cb(void *arg, const struct sto_chunk_ref *ref)
{
	struct seg_set *ss = arg;
	live_add(&ss->live, ref->segment_id, sto_chunk_ref_bytes(ref));
	return ref->segment_id == ss->seg ? sti_key_push(&ss->chunks, ref) : 0;
}

static int set_ev_cb(void *arg, const char *job, int64_t min_ts_ns, uint64_t uid,
		     const uint8_t *val, size_t len)
{
	struct seg_set *ss = arg;
	struct ev_entry e;
	int rc = eve_decode(val, len, &e);
	if (rc)
		return rc;
	live_add(&ss->live, e.segment_id, e.length);
	if (e.segment_id != ss->seg)
		return 0;
	if (ss->nev == ss->evcap) {
		size_t cap = ss->evcap ? ss->evcap * 2 : 16;
		struct ev_move *p = realloc(ss->ev, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		ss->ev = p;
		ss->evcap = cap;
	}
	struct ev_move *m = &ss->ev[ss->nev];
	m->val = malloc(len);
	if (!m->val)
		return -ENOMEM;
	memcpy(m->val, val, len);
	m->len = len;
	snprintf(m->job, sizeof(m->job), "%s", job);
	m->min_ts_ns = min_ts_ns;
	m->uid = uid;
	ss->nev++;
	return eve_decode(m->val, len, &m->e);
}

/* Supersede records count as live bytes: they go along while needed. */
static int set_sup_cb(void *arg, const struct sto_sup_entry *e)
{
	struct seg_set *ss = arg;
	struct sto_sup_entry copy;
	live_add(&ss->live, e->segment_id, e->length);
	if (e->segment_id != ss->seg)
		return 0;
	int rc = sto_sup_entry_copy(e, &copy);
	if (rc == 0 && (rc = sup_list_push(&ss->sups, &copy)) != 0)
		sto_sup_entry_free(&copy);
	return rc;
}

static void set_free(struct seg_set *ss)
{
	for (size_t i = 0; i < ss->nev; i++)
		free(ss->ev[i].val);
	free(ss->ev);
	sup_list_clear(&ss->sups);
	free(ss->sups.v);
	free(ss->chunks.v);
	rdb_map_free(&ss->live);
	memset(ss, 0, sizeof(*ss));
}

/* Index snapshot: live bytes of every segment, entries of segment seg. */
static int set_collect(struct sto *s, struct seg_set *ss, uint64_t seg)
{
	struct sto_txn *t;
	set_free(ss);
	ss->seg = seg;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	rc = sto_chunk_scan_all(t, set_chunk_cb, ss);
	if (rc == 0)
		rc = sto_evidx_scan_all(t, set_ev_cb, ss);
	if (rc == 0)
		rc = sto_sup_scan(t, set_sup_cb, ss);
	sto_txn_abort(t);
	return rc;
}

/* True unless segment id's file is known to be gone. */
static bool segment_exists(struct sto *s, uint64_t id)
{
	char path[PATH_MAX + 64];
	struct stat st;
	sto_seg_path(s->seg_dir, id, path, sizeof(path));
	return stat(path, &st) == 0 || errno != ENOENT;
}

/* Keeps in e->seg the segments, other than the one being rewritten, that
 * still exist: the source records that can still be there. Dead records
 * are never copied, so a source lives on only in those files. */
static void sup_prune(struct sto *s, struct sto_sup_entry *e, uint64_t rewritten)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < e->nseg; i++)
		if (e->seg[i] != rewritten && segment_exists(s, e->seg[i]))
			e->seg[k++] = e->seg[i];
	e->nseg = k;
}

/* Orders ss->sups: those still needed (a source may still exist on disk,
 * so a rebuild of the index would see it) first, ss->ncarry of them. */
static void sup_sort_carry(struct sto *s, struct seg_set *ss)
{
	size_t k = 0;
	for (size_t i = 0; i < ss->sups.n; i++) {
		sup_prune(s, &ss->sups.v[i], ss->seg);
		if (ss->sups.v[i].nseg == 0)
			continue;
		struct sto_sup_entry tmp = ss->sups.v[k];
		ss->sups.v[k++] = ss->sups.v[i];
		ss->sups.v[i] = tmp;
	}
	ss->ncarry = k;
}

/* Frames the supersede records that go along into buf (fresh from their
 * index entries, which hold the whole content: a damaged copy on disk is
 * healed here) and repoints their entries. */
static int sup_carry(struct seg_set *ss, struct rdb_buf *buf, struct sto_seg_writer *w)
{
	for (size_t i = 0; i < ss->ncarry; i++) {
		struct sto_sup_entry *e = &ss->sups.v[i];
		size_t before = buf->len;
		int rc = sto_sup_frame(buf, &e->sup);
		if (rc)
			return rc;
		e->segment_id = sto_seg_id(w);
		e->offset = sto_seg_size(w) + before;
		e->length = (uint32_t)(buf->len - before);
	}
	return 0;
}

/* Copies one verified record into buf. magic STO_GROUP_MAGIC: a group
 * record whose members in `live` have index entries; their sections are
 * checked, and a damaged section of a member without an entry (quarantined)
 * is marked removed in the copy (sto_group_prune). */
static int copy_record(struct sto *s, struct rdb_buf *buf, uint64_t seg, uint64_t off, uint32_t len,
		       uint32_t magic, uint64_t series_id, uint64_t uid, uint64_t live)
{
	const uint8_t *payload;
	size_t plen;
	unsigned removed = 0;
	const char *why = NULL;
	size_t at = buf->len;
	int rc = rdb_buf_reserve(buf, len);
	if (rc == 0)
		rc = sti_seg_read(s, seg, off, buf->data + at, len);
	if (rc == 0 && magic == STO_GROUP_MAGIC)
		rc = sto_group_prune(buf->data + at, len, uid, live, &removed, &why);
	else if (rc == 0)
		rc = sto_chunk_check(buf->data + at, len, magic, series_id, uid, &payload, &plen, &why);
	if (rc == 0 && removed)
		rdb_warn("store", "compaction of segment %llu: group record at offset %llu: %u "
			 "damaged member section(s) without index entries (quarantined) marked "
			 "removed in the copy", (unsigned long long)seg, (unsigned long long)off,
			 removed);
	if (rc == 0)
		buf->len = at + len;
	else
		rdb_warn("store", "compaction of segment %llu: record at offset %llu is unusable "
			 "(%s); the segment is left as it is (run rankctl verify)",
			 (unsigned long long)seg, (unsigned long long)off,
			 why ? why : rdb_strerror(rc));
	return rc;
}

/* Writes every live record of ss->seg into the new segment w, updating
 * the refs / entries in place to their new place. */
static int compact_copy(struct sto *s, struct seg_set *ss, struct sto_seg_writer *w)
{
	struct rdb_buf buf;
	rdb_buf_init(&buf, SEAL_BUF_MAX + STO_CHUNK_HEADER_SIZE + STO_CHUNK_MAX_PAYLOAD);
	size_t total = ss->chunks.n + ss->nev;
	struct rdb_map moved = {0}; /* group records copied: old offset + 1 -> new + 1 */
	struct rdb_map live = {0};  /* group records: old offset + 1 -> members with entries */
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < ss->chunks.n; i++) {
		const struct sto_chunk_ref *r = &ss->chunks.v[i];
		uintptr_t mask = r->group_n ? (uintptr_t)rdb_map_get(&live, r->offset + 1) : 0;
		if (r->group_n)
			rc = rdb_map_put(&live, r->offset + 1,
					 (void *)(mask | (uintptr_t)1 << r->member));
	}
	/* Supersede records first, as at the merge: before any merged chunk. */
	if (rc == 0)
		rc = sup_carry(ss, &buf, w);
	for (size_t i = 0; rc == 0 && i < total; i++) {
		uint64_t new_off = sto_seg_size(w) + buf.len;
		if (i < ss->chunks.n) {
			struct sto_chunk_ref *r = &ss->chunks.v[i];
			uintptr_t done = r->group_n ? (uintptr_t)rdb_map_get(&moved, r->offset + 1) : 0;
			if (done) {
				/* another member of a group record already copied */
				r->segment_id = sto_seg_id(w);
				r->offset = (uint64_t)done - 1;
				continue;
			}
			rc = copy_record(s, &buf, ss->seg, r->offset, r->length,
					 r->group_n ? STO_GROUP_MAGIC : STO_CHUNK_MAGIC, r->series_id,
					 r->uid - r->member,
					 (uintptr_t)rdb_map_get(&live, r->offset + 1));
			if (rc == 0 && r->group_n)
				rc = rdb_map_put(&moved, r->offset + 1, (void *)(uintptr_t)(new_off + 1));
			r->segment_id = sto_seg_id(w);
			r->offset = new_off;
		} else {
			struct ev_move *m = &ss->ev[i - ss->chunks.n];
			rc = copy_record(s, &buf, ss->seg, m->e.offset, m->e.length, STO_EVCHUNK_MAGIC, 0,
					 m->uid, 0);
			m->e.segment_id = sto_seg_id(w);
			m->e.offset = new_off;
		}
		if (rc == 0 && buf.len >= SEAL_BUF_MAX) {
			rc = sto_seg_append(w, buf.data, buf.len);
			buf.len = 0;
		}
	}
	if (rc == 0 && buf.len)
		rc = sto_seg_append(w, buf.data, buf.len);
	rdb_buf_free(&buf);
	rdb_map_free(&moved);
	rdb_map_free(&live);
	return rc;
}

/* The index switch: every entry repointed, the old segment into trash. */
static int compact_switch(struct sto *s, struct seg_set *ss)
{
	struct rdb_buf entry;
	struct sto_txn *t;
	rdb_buf_init(&entry, 1u << 20);
	int rc = sto_txn_begin(s->ix, true, &t);
	if (rc)
		goto out;
	for (size_t i = 0; rc == 0 && i < ss->chunks.n; i++)
		rc = sto_chunk_put(t, &ss->chunks.v[i]);
	for (size_t i = 0; rc == 0 && i < ss->nev; i++) {
		struct ev_move *m = &ss->ev[i];
		entry.len = 0;
		m->e.uid = m->uid;
		rc = eve_encode(&m->e, m->e.bloom, &entry);
		if (rc == 0)
			rc = sto_evidx_put(t, m->job, m->min_ts_ns, m->uid, entry.data, entry.len);
	}
	for (size_t i = 0; rc == 0 && i < ss->sups.n; i++)
		rc = i < ss->ncarry ? sto_sup_put(t, &ss->sups.v[i]) :
				      sto_sup_del(t, ss->sups.v[i].sup.merged_uid);
	if (rc == 0)
		rc = sto_trash_add(t, ss->seg);
	if (rc == 0)
		rc = sto_meta_put(t, "compact_out", 0);
	if (rc) {
		sto_txn_abort(t);
		goto out;
	}
	pthread_rwlock_wrlock(&s->view_lock);
	rc = sto_txn_commit(t);
	pthread_rwlock_unlock(&s->view_lock);
out:
	rdb_buf_free(&entry);
	return rc;
}

/* After the switch: no cached fd may keep the old file alive. */
static int drop_old_segment(struct sto *s)
{
	struct sto_seg_readers *fresh = NULL, *old;
	int rc = sto_seg_readers_new(s->seg_dir, &fresh);
	if (rc)
		return rc;
	pthread_rwlock_wrlock(&s->seg_lock);
	old = s->readers;
	s->readers = fresh;
	pthread_rwlock_unlock(&s->seg_lock);
	sto_seg_readers_free(old);
	return sti_empty_trash(s);
}

static int compact_begin(struct sto *s, uint64_t *new_id)
{
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, true, &t);
	if (rc)
		return rc;
	rc = sto_meta_next(t, "next_segment_id", new_id);
	if (rc == 0)
		rc = sto_meta_put(t, "compact_out", *new_id + 1);
	if (rc == 0)
		return sto_txn_commit(t);
	sto_txn_abort(t);
	return rc;
}

static void compact_abandon(struct sto *s, uint64_t new_id)
{
	struct sto_txn *t;
	sti_unlink_segment(s, new_id);
	if (sto_txn_begin(s->ix, true, &t) != 0)
		return;
	if (sto_meta_put(t, "compact_out", 0) == 0)
		sto_txn_commit(t);
	else
		sto_txn_abort(t);
}

/* Rewrites segment ss->seg (entries collected) into a new segment. */
static int compact_segment(struct sto *s, struct seg_set *ss, struct sto_compact_result *r)
{
	uint64_t new_id = 0;
	struct sto_seg_writer *w = NULL;
	int rc = 0;
	sup_sort_carry(s, ss);
	size_t moved = ss->chunks.n + ss->nev + ss->ncarry;
	if (moved == 0)
		goto switch_index; /* nothing live: just remove it */
	rc = compact_begin(s, &new_id);
	if (rc)
		return rc;
	rc = sto_seg_create(s->seg_dir, new_id, s->ring, &w);
	if (rc == 0)
		rc = compact_copy(s, ss, w);
	if (rc == 0)
		r->bytes_after += sto_seg_size(w);
	int crc = w ? sto_seg_close(w) : 0; /* syncs */
	rc = rc ? rc : crc;
	if (rc) {
		compact_abandon(s, new_id);
		return rc;
	}
switch_index:
	rc = compact_switch(s, ss);
	if (rc) {
		if (moved)
			compact_abandon(s, new_id);
		return rc;
	}
	r->segments++;
	r->chunks += ss->chunks.n + ss->nev;
	return drop_old_segment(s);
}

/* ---- merging small chunks ------------------------------------------------------------- */

/* Runs of small chunks to merge: all chunk entries (key order), and the
 * output of the current batch. */
struct merge_set {
	struct key_list all;        /* every chunk entry, in (series, min_ts, uid) order */
	struct sto_cols pts, one;   /* the run's points; one chunk's points */
	struct rdb_buf rec, codec;  /* scratch: a record read; a codec payload */
	struct rdb_buf out;         /* framed supersede + merged records of the batch */
	struct key_list olds;       /* entries the batch replaces */
	struct key_list news;       /* the merged entries */
	struct sup_list sups;       /* supersede entries of the merged chunks */
	struct id_list absorbed;    /* merged uids whose entries a new one absorbed */
	struct rdb_map groups;      /* group record uid -> struct grp_info * */
	struct sto_cols *gpts;      /* a group run's points, per member */
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

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Sorts and deduplicates the sources and segments of e. */
static void sup_normalize(struct sto_sup_entry *e)
{
	size_t k = 0;
	qsort(e->sup.src, e->sup.nsrc, sizeof(*e->sup.src), cmp_src);
	for (size_t i = 0; i < e->sup.nsrc; i++)
		if (k == 0 || e->sup.src[i].uid != e->sup.src[k - 1].uid)
			e->sup.src[k++] = e->sup.src[i];
	e->sup.nsrc = (uint32_t)k;
	k = 0;
	qsort(e->seg, e->nseg, sizeof(*e->seg), cmp_u64);
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
		rc = sup_list_push(&m->sups, &e);
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
		     struct sto_seg_writer *w, const struct sto_series_key *key)
{
	struct sto_read_error err;
	struct sto_chunk_ref ref = {0};
	m->pts.n = 0;
	for (size_t i = a; i < b; i++) {
		int rc = sto_read_chunk(s, &m->all.v[i], &m->rec, &m->one, &err);
		if (rc) {
			rdb_warn("store", "merging small chunks: %s; that run is left as it is", err.msg);
			return rc;
		}
		for (size_t k = 0; k < m->one.n && rc == 0; k++)
			rc = sto_cols_push(&m->pts, m->one.ts_ns[k], m->one.step[k], m->one.attempt[k],
					   m->one.value[k]);
		if (rc)
			return rc;
		if (m->all.v[i].gen > ref.gen)
			ref.gen = m->all.v[i].gen;
	}
	int rc = sto_cols_sort_by_time(&m->pts);
	m->codec.len = 0;
	if (rc == 0)
		rc = sto_codec_encode(&m->pts, &m->codec, NULL);
	if (rc == 0)
		rc = sti_uid_reserve(s, 1);
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
	rc = sto_txn_commit(t);
	pthread_rwlock_unlock(&s->view_lock);
	return rc;
}

static int series_key(struct sto *s, uint64_t id, struct sto_series_key *key)
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

static bool same_time(const struct sto_cols *a, const struct sto_cols *b)
{
	return a->n == b->n && memcmp(a->ts_ns, b->ts_ns, a->n * sizeof(int64_t)) == 0 &&
	       memcmp(a->step, b->step, a->n * sizeof(int64_t)) == 0 &&
	       memcmp(a->attempt, b->attempt, a->n * sizeof(uint32_t)) == 0;
}

/* Member k's points of the groups whose member 0 is at [a, b), merged. */
static int group_member_points(struct sto *s, struct merge_set *m, size_t a, size_t b, unsigned k,
			       struct sto_cols *out, uint64_t *gen)
{
	struct sto_read_error err;
	out->n = 0;
	for (size_t i = a; i < b; i++) {
		const struct grp_info *g = rdb_map_get(&m->groups, m->all.v[i].uid + 1);
		const struct sto_chunk_ref *r = &m->all.v[g->idx[k]];
		int rc = sto_read_chunk(s, r, &m->rec, &m->one, &err);
		if (rc) {
			rdb_warn("store", "merging small group records: %s; that run is left as it is",
				 err.msg);
			return rc;
		}
		for (size_t p = 0; p < m->one.n && rc == 0; p++)
			rc = sto_cols_push(out, m->one.ts_ns[p], m->one.step[p], m->one.attempt[p],
					   m->one.value[p]);
		if (rc)
			return rc;
		if (r->gen > *gen)
			*gen = r->gen;
	}
	return sto_cols_sort_by_time(out);
}

/* Merges the group records whose member 0 is at [a, b) into one group
 * record in m->out (supersede records first), for the new segment w. */
static int merge_group_run(struct sto *s, struct merge_set *m, size_t a, size_t b,
			   struct sto_seg_writer *w)
{
	const struct grp_info *g0 = rdb_map_get(&m->groups, m->all.v[a].uid + 1);
	struct sto_group_member mem[STO_GROUP_MAX_MEMBERS];
	struct sto_series_key keys[STO_GROUP_MAX_MEMBERS];
	struct sto_chunk_ref refs[STO_GROUP_MAX_MEMBERS];
	uint64_t gen = 0, uid = 0;
	unsigned nm = g0->m;
	int rc = 0;
	for (unsigned k = 0; rc == 0 && k < nm; k++) {
		rc = group_member_points(s, m, a, b, k, &m->gpts[k], &gen);
		if (rc == 0 && !same_time(&m->gpts[0], &m->gpts[k]))
			return 0; /* cannot happen for records the seal made; leave them */
		if (rc == 0)
			rc = series_key(s, m->all.v[g0->idx[k]].series_id, &keys[k]);
		mem[k] = (struct sto_group_member){m->all.v[g0->idx[k]].series_id, &keys[k],
						   &m->gpts[k]};
	}
	if (rc == 0)
		rc = sti_uid_reserve(s, nm);
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
	sup_list_trim(&m->sups, k->sups);
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
	sup_list_clear(&m->sups);
	int rc = compact_begin(s, &new_id);
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
		struct sto_series_key key;
		rc = series_key(s, m->all.v[i].series_id, &key);
		if (rc == 0)
			rc = merge_undo(m, &mark, merge_run(s, m, i, j, w, &key));
	}
	if (rc == 0 && m->out.len)
		rc = sto_seg_append(w, m->out.data, m->out.len);
	int crc = w ? sto_seg_close(w) : 0; /* syncs: the data is durable before the switch */
	rc = rc ? rc : crc;
	if (rc == 0 && m->news.n)
		rc = merge_switch(s, m);
	if (rc || m->news.n == 0) {
		compact_abandon(s, new_id);
		return rc;
	}
	r->merged_from += m->olds.n;
	r->merged_into += m->news.n;
	return 0;
}

/* Merges every series' runs of small checkpointed chunks. The replaced
 * chunks' bytes become dead in their segments (reclaimed by the segment
 * pass that follows). */
static int merge_small_chunks(struct sto *s, struct sto_compact_result *r)
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
	sup_list_clear(&m.sups);
	free(m.sups.v);
	free(m.absorbed.v);
	sto_cols_free(&m.pts);
	sto_cols_free(&m.one);
	for (size_t k = 0; m.gpts && k < STO_GROUP_MAX_MEMBERS; k++)
		sto_cols_free(&m.gpts[k]);
	free(m.gpts);
	free(m.gsrc);
	groups_free(&m);
	rdb_buf_free(&m.rec);
	rdb_buf_free(&m.codec);
	rdb_buf_free(&m.out);
	return rc;
}

static int list_segments(struct sto *s, struct id_list *ids)
{
	DIR *d = opendir(s->seg_dir);
	struct dirent *de;
	int rc = d ? 0 : -errno;
	while (rc == 0 && (de = readdir(d)) != NULL) {
		unsigned long long id;
		char tail[8];
		if (sscanf(de->d_name, "seg-%16llx.%4s", &id, tail) == 2 && strcmp(tail, "dat") == 0)
			rc = sti_id_push(ids, id);
	}
	if (d)
		closedir(d);
	/* Oldest first: the sources of a supersede record are always in older
	 * segments than the record, so one pass can drop both. */
	if (rc == 0 && ids->n)
		qsort(ids->v, ids->n, sizeof(*ids->v), cmp_u64);
	return rc;
}

static uint64_t file_size(struct sto *s, uint64_t id)
{
	char path[PATH_MAX + 64];
	struct stat st;
	sto_seg_path(s->seg_dir, id, path, sizeof(path));
	return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

int sti_compact_from(struct sto *s, uint64_t from, struct sto_compact_result *r)
{
	struct id_list ids = {0};
	struct seg_set ss = {0};
	int rc = s->seg ? sto_seg_close(s->seg) : 0;
	s->seg = NULL;
	if (rc == 0)
		rc = list_segments(s, &ids);
	for (size_t i = 0; rc == 0 && i < ids.n; i++) {
		if (ids.v[i] < from || file_size(s, ids.v[i]) == 0)
			continue;
		rc = set_collect(s, &ss, ids.v[i]);
		if (rc == 0 && compact_segment(s, &ss, r) != 0)
			r->skipped++;
	}
	set_free(&ss);
	free(ids.v);
	return rc;
}

int sti_compact_op(struct sto *s, void *arg)
{
	struct compact_args *a = arg;
	struct id_list ids = {0};
	struct seg_set ss = {0};
	/* Roll the segment being written so that it can be compacted too (the
	 * next seal starts a new one). */
	int rc = s->seg ? sto_seg_close(s->seg) : 0;
	s->seg = NULL;
	uint64_t writing = UINT64_MAX;
	if (rc == 0)
		rc = merge_small_chunks(s, a->r);
	if (rc == 0)
		rc = list_segments(s, &ids);
	for (size_t i = 0; rc == 0 && i < ids.n; i++) {
		uint64_t size = file_size(s, ids.v[i]);
		if (ids.v[i] == writing || size == 0)
			continue;
		rc = set_collect(s, &ss, ids.v[i]);
		uint64_t live = (uintptr_t)rdb_map_get(&ss.live, ids.v[i] + 1);
		if (rc || (double)live >= a->min_live * (double)size)
			continue;
		a->r->bytes_before += size;
		int crc = compact_segment(s, &ss, a->r);
		if (crc)
			a->r->skipped++;
	}
	if (a->r->segments)
		rdb_info("store", "compaction rewrote %llu segments (%llu chunks): %llu -> %llu bytes",
			 (unsigned long long)a->r->segments, (unsigned long long)a->r->chunks,
			 (unsigned long long)a->r->bytes_before,
			 (unsigned long long)a->r->bytes_after);
	set_free(&ss);
	free(ids.v);
	return rc;
}

static int compact_locked_op(struct sto *s, void *arg)
{
	pthread_mutex_lock(&s->compact_lock);
	int rc = sti_compact_op(s, arg);
	pthread_mutex_unlock(&s->compact_lock);
	return rc;
}

int sto_compact(struct sto *s, double min_live, struct sto_compact_result *r)
{
	memset(r, 0, sizeof(*r));
	struct compact_args a = {.min_live = min_live < 0 ? s->life.compact_min_live : min_live,
				 .r = r};
	return sti_run_on_flusher(s, compact_locked_op, &a);
}

void sto_compact_pause(struct sto *s)
{
	pthread_mutex_lock(&s->compact_lock);
}

void sto_compact_resume(struct sto *s)
{
	pthread_mutex_unlock(&s->compact_lock);
}

