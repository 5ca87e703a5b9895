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
 * Merging small chunks runs first, before the segment pass: storage/lifecycle/merge.c.
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
#include "storage/lifecycle/lifecycle.h"
#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"
#include "common/rdb_map.h"
#include "common/rdb_time.h"
#include "common/rdb_sort.h"
#include "storage/admin.h"
#include "storage/chunk/codec.h"
#include "storage/events/evstore.h"
#include "storage/chunk/group.h"
#include "storage/chunk/segment.h"

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
	char job[MDL_JOB_MAX + 1];
	int64_t min_ts_ns;
	uint64_t uid;
	struct ev_entry e;
	uint8_t *val; /* owned copy of the entry (bloom inside) */
	size_t len;
};

struct seg_set {
	uint64_t seg;		/* the segment being compacted */
	struct key_list chunks; /* its point chunks */
	struct ev_move *ev;	/* its event chunks */
	size_t nev, evcap;
	struct sup_list sups; /* its supersede records (tracked ones) */
	size_t ncarry;	      /* sups[0, ncarry) go along, the rest are dropped */
	struct rdb_map live;  /* all segments: id + 1 -> live bytes (as a pointer value) */
};

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
		     const uint8_t *val, size_t len, bool damaged)
{
	(void)damaged; /* never set: not a pass_damaged transaction */
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
	rc = eve_decode(m->val, len, &m->e);
	if (rc == 0 && !eve_filter_intact(&m->e)) {
		/* The switch re-encodes the entry: a damaged filter would come out
		 * of it with a fresh checksum. */
		rdb_warn("store",
			 "compaction of segment %llu: the token filter of the index entry of "
			 "event chunk %llu (job %s) failed its checksum; the segment is left as "
			 "it is ('rankctl verify --quarantine' rewrites the entry from its chunk)",
			 (unsigned long long)ss->seg, (unsigned long long)uid, job);
		rc = RDB_ECORRUPT;
	}
	return rc;
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
	if (rc == 0 && (rc = sti_sup_list_push(&ss->sups, &copy)) != 0)
		sto_sup_entry_free(&copy);
	return rc;
}

static void set_free(struct seg_set *ss)
{
	for (size_t i = 0; i < ss->nev; i++)
		free(ss->ev[i].val);
	free(ss->ev);
	sti_sup_list_clear(&ss->sups);
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
/* Whether segment id may still hold records that count: its file exists
 * and it is not compacted away (seg_trash: kept only for the grace). */
static bool segment_exists(struct sto *s, uint64_t id)
{
	char path[PATH_MAX + 64];
	struct stat st;
	struct sto_txn *t;
	sto_seg_path(s->seg_dir, id, path, sizeof(path));
	if (stat(path, &st) != 0 && errno == ENOENT)
		return false;
	if (sto_txn_begin(s->ix, false, &t) != 0)
		return true;
	int rc = sto_trash_has(t, id);
	sto_txn_abort(t);
	return rc != 1;
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
		rc = s->eng->seg_read(s, seg, off, buf->data + at, len);
	if (rc == 0 && magic == STO_GROUP_MAGIC)
		rc = sto_group_prune(buf->data + at, len, uid, live, &removed, &why);
	else if (rc == 0)
		rc = sto_chunk_check(buf->data + at, len, magic, series_id, uid, &payload, &plen,
				     &why);
	if (rc == 0 && removed)
		rdb_warn("store",
			 "compaction of segment %llu: group record at offset %llu: %u "
			 "damaged member section(s) without index entries (quarantined) marked "
			 "removed in the copy",
			 (unsigned long long)seg, (unsigned long long)off, removed);
	if (rc == 0)
		buf->len = at + len;
	else
		rdb_warn("store",
			 "compaction of segment %llu: record at offset %llu is unusable "
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
			uintptr_t done =
			    r->group_n ? (uintptr_t)rdb_map_get(&moved, r->offset + 1) : 0;
			if (done) {
				/* another member of a group record already copied */
				r->segment_id = sto_seg_id(w);
				r->offset = (uint64_t)done - 1;
				continue;
			}
			rc = copy_record(s, &buf, ss->seg, r->offset, r->length,
					 r->group_n ? STO_GROUP_MAGIC : STO_CHUNK_MAGIC,
					 r->series_id, r->uid - r->member,
					 (uintptr_t)rdb_map_get(&live, r->offset + 1));
			if (rc == 0 && r->group_n)
				rc = rdb_map_put(&moved, r->offset + 1,
						 (void *)(uintptr_t)(new_off + 1));
			r->segment_id = sto_seg_id(w);
			r->offset = new_off;
		} else {
			struct ev_move *m = &ss->ev[i - ss->chunks.n];
			rc = copy_record(s, &buf, ss->seg, m->e.offset, m->e.length,
					 STO_EVCHUNK_MAGIC, 0, m->uid, 0);
			m->e.segment_id = sto_seg_id(w);
			m->e.offset = new_off;
		}
		if (rc == 0 && buf.len >= SEAL_BUF_MAX) {
			rc = sto_seg_append_at(w, buf.data, buf.len, STO_FP_COMPACT_WRITE);
			buf.len = 0;
		}
	}
	if (rc == 0 && buf.len)
		rc = sto_seg_append_at(w, buf.data, buf.len, STO_FP_COMPACT_WRITE);
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
		rc = i < ss->ncarry ? sto_sup_put(t, &ss->sups.v[i])
				    : sto_sup_del(t, ss->sups.v[i].sup.merged_uid);
	if (rc == 0)
		rc = sto_trash_add(t, ss->seg);
	if (rc == 0)
		rc = sto_meta_put(t, "compact_out", 0);
	if (rc) {
		sto_txn_abort(t);
		goto out;
	}
	pthread_rwlock_wrlock(&s->view_lock);
	rc = sto_txn_commit_at(t, STO_FP_COMPACT_COMMIT);
	pthread_rwlock_unlock(&s->view_lock);
out:
	rdb_buf_free(&entry);
	return rc;
}

/* After the switch: no cached fd may keep the old file alive, and the file
 * goes after the grace (lifecycle.h, STI_TRASH_GRACE_NS). */
static int drop_old_segment(struct sto *s)
{
	s->trash_due_mono_ns = rdb_now_mono_ns() + STI_TRASH_GRACE_NS;
	return sti_readers_refresh(s);
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
	rc = sti_compact_begin(s, &new_id);
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
		sti_compact_abandon(s, new_id);
		return rc;
	}
switch_index:
	rc = compact_switch(s, ss);
	if (rc) {
		if (moved)
			sti_compact_abandon(s, new_id);
		return rc;
	}
	r->segments++;
	r->chunks += ss->chunks.n + ss->nev;
	return drop_old_segment(s);
}

static int list_segments(struct sto *s, struct id_list *ids)
{
	DIR *d = opendir(s->seg_dir);
	struct dirent *de;
	int rc = d ? 0 : -errno;
	while (rc == 0 && (de = readdir(d)) != NULL) {
		unsigned long long id;
		char tail[8];
		if (sscanf(de->d_name, "seg-%16llx.%4s", &id, tail) == 2 &&
		    strcmp(tail, "dat") == 0)
			rc = sti_id_push(ids, id);
	}
	if (d)
		closedir(d);
	/* Oldest first: the sources of a supersede record are always in older
	 * segments than the record, so one pass can drop both. */
	if (rc == 0 && ids->n)
		rdb_sort(ids->v, ids->n, sizeof(*ids->v), sti_cmp_u64);
	return rc;
}

static uint64_t file_size(struct sto *s, uint64_t id)
{
	char path[PATH_MAX + 64];
	struct stat st;
	sto_seg_path(s->seg_dir, id, path, sizeof(path));
	return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Quarantined entries (verify --quarantine) are not in chunks / events, so
 * a copy would leave their records behind and the segment's unlink would
 * delete them, while the docs promise that rebuild-index recovers them from
 * the segment files. Their uids are not trustworthy (the entries are
 * damaged) and their locations may not be either, so nothing is rewritten
 * at all while one exists: r->quarantined = how many (logged, counted). */
static int quarantine_guard(struct sto *s, const char *what, struct sto_compact_result *r)
{
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	rc = sto_quarantine_count(t, &r->quarantined);
	sto_txn_abort(t);
	if (rc == 0 && r->quarantined) {
		atomic_fetch_add(&s->st_compact_refused, 1);
		rdb_warn("store",
			 "%s refused: the quarantine table holds %llu index entr%s whose records "
			 "compaction would delete; run rankctl rebuild-index (it recreates them "
			 "from the segment files and empties the quarantine)",
			 what, (unsigned long long)r->quarantined,
			 r->quarantined == 1 ? "y" : "ies");
	}
	return rc;
}

int sti_compact_from(struct sto *s, uint64_t from, struct sto_compact_result *r)
{
	struct id_list ids = {0};
	struct seg_set ss = {0};
	int rc = quarantine_guard(s, "rewriting segments", r);
	if (rc || r->quarantined)
		return rc;
	rc = s->seg ? sto_seg_close(s->seg) : 0;
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

/* ---- supersede entries whose sources are gone ----------------------------
 * An entry tracks a live SUP1 record while a source record may still exist
 * (some segment listed in it is a file and not in seg_trash). The segment
 * pass drops it when it rewrites the record's segment, but the segment a
 * merge writes is fully live and is never rewritten: after one merge at 512
 * ranks x 32 metrics, 16384 entries (2.6 MB of index) stayed for good.
 * Trimmed at the end of a compaction pass with segment_exists, the rule the
 * segment pass uses. The record stays in its segment until that is
 * rewritten; a rebuild still applies it, with no source left to skip. */
struct sup_trim {
	struct sto *s;
	struct rdb_map known; /* segment id + 1 -> (void *)1 exists, 2 gone */
	struct id_list dead;  /* merged uids of entries to delete */
};

static bool trim_seg_exists(struct sup_trim *tr, uint64_t id)
{
	uintptr_t v = (uintptr_t)rdb_map_get(&tr->known, id + 1);
	if (!v) {
		v = segment_exists(tr->s, id) ? 1 : 2;
		if (rdb_map_put(&tr->known, id + 1, (void *)v) != 0)
			return true; /* no memory: keep the entry */
	}
	return v == 1;
}

static int sup_trim_cb(void *arg, const struct sto_sup_entry *e)
{
	struct sup_trim *tr = arg;
	for (uint32_t i = 0; i < e->nseg; i++)
		if (trim_seg_exists(tr, e->seg[i]))
			return 0;
	return sti_id_push(&tr->dead, e->sup.merged_uid);
}

static int sup_trim(struct sto *s)
{
	struct sup_trim tr = {.s = s};
	struct sto_txn *t;
	int rc = sto_txn_begin(s->ix, false, &t);
	if (rc)
		return rc;
	rc = sto_sup_scan(t, sup_trim_cb, &tr);
	sto_txn_abort(t);
	t = NULL;
	for (size_t i = 0; rc == 0 && i < tr.dead.n; i += 65536) {
		rc = sto_txn_begin(s->ix, true, &t);
		for (size_t k = i; rc == 0 && k < tr.dead.n && k < i + 65536; k++)
			rc = sto_sup_del(t, tr.dead.v[k]);
		if (rc == 0)
			rc = sto_txn_commit(t);
		else if (t)
			sto_txn_abort(t);
		t = NULL;
	}
	if (rc == 0 && tr.dead.n)
		rdb_info("store",
			 "dropped %zu supersede entries: none of their source records exists "
			 "any more",
			 tr.dead.n);
	rdb_map_free(&tr.known);
	free(tr.dead.v);
	return rc;
}

static void index_compact_after(struct sto *s, struct sto_compact_result *r);

int sti_compact_op(struct sto *s, void *arg)
{
	struct compact_args *a = arg;
	struct id_list ids = {0};
	struct seg_set ss = {0};
	int rc = quarantine_guard(s, "compaction", a->r);
	if (rc || a->r->quarantined)
		return rc;
	/* Roll the segment being written so that it can be compacted too (the
	 * next seal starts a new one). */
	rc = s->seg ? sto_seg_close(s->seg) : 0;
	s->seg = NULL;
	uint64_t writing = UINT64_MAX;
	if (rc == 0)
		rc = sti_merge_small_chunks(s, a->r);
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
		rdb_info(
		    "store", "compaction rewrote %llu segments (%llu chunks): %llu -> %llu bytes",
		    (unsigned long long)a->r->segments, (unsigned long long)a->r->chunks,
		    (unsigned long long)a->r->bytes_before, (unsigned long long)a->r->bytes_after);
	set_free(&ss);
	free(ids.v);
	if (rc == 0)
		rc = sup_trim(s);
	if (rc == 0)
		index_compact_after(s, a->r);
	return rc;
}

/* ---- index compaction ---------------------------------------------------
 * LMDB keeps the pages the deletes above free (merged and repointed chunk
 * entries, trimmed supersede entries) in data.mdb; sto_index_compact
 * (storage/index/ix_compact.c) rewrites the file without them. Here: when.
 * At the end of every compaction pass (admin or the background one), not
 * after checkpoints: a checkpoint's write transaction copies the pages it
 * touches (LMDB is copy-on-write), so right after one a large free fraction
 * is normal and the next one reuses it; after a merge the freed entries
 * are gone for good. On the flusher, so the engine's own seals and
 * checkpoints never commit during the copy; other writers (series
 * creation, admin) are rare. */
#define IXC_DRAIN_TIMEOUT_MS 2000u

struct ixc_args {
	bool force;
	struct sto_index_compact_result *r;
};

static int index_compact_op(struct sto *s, void *arg)
{
	struct ixc_args *a = arg;
	double ratio = s->life.index_compact_free_ratio;
	if (!a->force && ratio <= 0)
		return 0;
	return sto_index_compact(s->ix, a->force, ratio, s->life.index_compact_min_bytes,
				 IXC_DRAIN_TIMEOUT_MS, a->r);
}

/* After a compaction: the merges freed index pages (no transaction is open). */
static void index_compact_after(struct sto *s, struct sto_compact_result *r)
{
	struct sto_index_compact_result ir = {0};
	struct ixc_args a = {.force = false, .r = &ir};
	int rc = index_compact_op(s, &a);
	if (rc != 0 && rc != RDB_EBUSY && rc != -ENOSPC)
		rdb_warn("store",
			 "index compaction failed: %s; the index keeps its size, retried "
			 "after the next checkpoint",
			 rdb_strerror(rc));
	r->index_bytes_before = ir.bytes_before;
	r->index_bytes_after = ir.bytes_after;
}

int sto_compact_index(struct sto *s, bool force, struct sto_index_compact_result *r)
{
	struct ixc_args a = {.force = force, .r = r};
	memset(r, 0, sizeof(*r));
	return sti_run_on_flusher(s, index_compact_op, &a);
}

int sto_index_info(struct sto *s, struct sto_index_stat *out)
{
	return sto_index_stat(s->ix, out);
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
