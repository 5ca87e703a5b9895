/* rebuild.c - recreates the LMDB index from the segment files alone
 * (contract: storage/rebuild.h; rule: docs/FORMAT.md, "Rebuilding the
 * index").
 *
 * Offline only: it takes the data directory's LOCK and never opens the
 * store, so nothing is replayed or checkpointed meanwhile. Segment files are
 * walked in id order, record by record, exactly like `verify`: the file
 * header, then per record magic, length and XXH3 checksum. A record whose
 * checksum fails is reported and skipped; a header that cannot be read or a
 * length running past the end of the file (a torn tail, or damage) is
 * reported and ends the walk of that file. Only records whose checksum holds
 * and whose payload decodes are indexed:
 *   - point chunks: the key record after the codec payload names the
 *     series; the series id of the record header is kept; statistics are
 *     recomputed by decoding (sto_codec_decode + sto_chunk_stats_compute);
 *   - group records (storage/chunk/group.h): checked whole (head and every
 *     section checksum), then one entry per member, as for a point chunk;
 *   - event chunks: decoded (evc_decode) and re-encoded with evc_encode
 *     only to recompute the entry (stats, kinds/levels, token filter);
 *   - a record of generation g > ckpt_gen whose WAL file wal-g.log exists
 *     is not indexed: the next start replays that file (ckpt_gen =
 *     oldest WAL generation - 1, or the newest generation seen when wal/
 *     is empty);
 *   - a uid already indexed (a compaction copy) is skipped;
 *   - when one series key appears with two ids (the job was deleted and
 *     written again), the highest id wins and the older id's chunks are
 *     dropped (they are the deleted incarnation);
 *   - supersede records (SUP1) go into the supersede db as read; after the
 *     walk, those that take effect (their merged chunk is indexed, or is a
 *     source of one that takes effect) remove their sources from chunks,
 *     and the db keeps the entries that still hide a valid record, with
 *     the segments of those records. A damaged supersede record is
 *     reported, and reported again when its merged chunk got indexed
 *     (its sources may then be counted twice).
 * Counters next_series_id, next_chunk_uid and next_segment_id go above
 * the maxima seen. The new index is built in index.rebuild/ (one LMDB
 * transaction per segment file), then swapped in with two renames and a
 * directory fsync; the old index is kept as index.old-<ns>.
 *
 * Failure: I/O and LMDB errors abort the rebuild before the swap (index/
 * is untouched); damaged data is never an error, only a report.
 */
#include "storage/rebuild.h"
#include "common/rdb_buf.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"
#include "common/rdb_map.h"
#include "common/rdb_sort.h"
#include "storage/chunk/codec.h"
#include "storage/events/evstore.h"
#include "storage/chunk/group.h"
#include "storage/index/index.h"
#include "storage/chunk/segment.h"
#include "storage/wal/wal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define REC_MAX	    (STO_CHUNK_HEADER_SIZE + STO_CHUNK_MAX_PAYLOAD)
#define FORMAT_TEXT "rankdb data directory\nformat %u\n"
#define KEY_TAIL    6u /* u32 rank + u16 metric length of an event chunk's key */

struct rb {
	const struct sto_rebuild_options *o;
	struct sto_rebuild_result *r;
	struct sto_index *ix;
	struct sto_txn *t;
	uint64_t *wal_gens; /* ascending */
	size_t nwal;
	uint64_t ckpt_gen;
	uint64_t max_sid, max_uid, max_gen, max_seg;
	struct id_set {
		uint64_t *v;
		size_t n, cap;
	} losers; /* series ids replaced by a newer id of the same key */
	struct dup_list {
		struct dup {
			uint64_t uid, seg;
		} * v;
		size_t n, cap;
	} dups;			  /* valid point chunk copies not indexed (another copy was) */
	struct dup_list bad_sups; /* damaged supersede records: (merged uid, series id) */
	struct rdb_buf rec, evpayload, bloom, entry;
	struct mdl_cols cols;
	struct ev_decoded dec;
	char seg_path[PATH_MAX + 300];
};

static void report(struct rb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void report(struct rb *b, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (b->o->fn)
		b->o->fn(b->o->arg, msg);
}

static bool wal_has(const struct rb *b, uint64_t gen)
{
	for (size_t i = 0; i < b->nwal; i++)
		if (b->wal_gens[i] == gen)
			return true;
	return false;
}

static int dup_push(struct dup_list *l, uint64_t uid, uint64_t seg)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct dup *p = realloc(l->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		l->v = p;
		l->cap = cap;
	}
	l->v[l->n++] = (struct dup){uid, seg};
	return 0;
}

static int id_push(struct id_set *s, uint64_t v)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		uint64_t *p = realloc(s->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		s->v = p;
		s->cap = cap;
	}
	s->v[s->n++] = v;
	return 0;
}

/* ---- directory handling ------------------------------------------------------------- */

static int take_lock(const char *dir, int *fd_out)
{
	char path[PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/LOCK", dir);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		int rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		close(fd);
		return rc;
	}
	*fd_out = fd;
	return 0;
}

static int check_format(const char *dir)
{
	char path[PATH_MAX + 16], buf[256];
	snprintf(path, sizeof(path), "%s/FORMAT", dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? RDB_EFORMAT : -errno;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	for (unsigned v = STO_FORMAT_VERSION_OLDEST; v <= STO_FORMAT_VERSION; v++) {
		char want[64];
		snprintf(want, sizeof(want), FORMAT_TEXT, v);
		if (strcmp(buf, want) == 0)
			return 0; /* rankdbd upgrades an older FORMAT at its next open */
	}
	return RDB_EFORMAT;
}

static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) == 0 ? 0 : -errno;
	close(fd);
	return rc;
}

/* Removes a leftover index.rebuild/ (LMDB files only; anything else there
 * is the operator's and makes the rebuild refuse). */
static int remove_leftover(const char *dir)
{
	static const char *const files[] = {"data.mdb", "lock.mdb"};
	char path[PATH_MAX + 64];
	for (size_t i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		if (unlink(path) != 0 && errno != ENOENT)
			return -errno;
	}
	if (rmdir(dir) != 0 && errno != ENOENT)
		return -errno;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Ids of the seg-*.dat files of seg_dir, ascending (caller frees). */
static int list_segments(const char *seg_dir, struct id_set *out)
{
	DIR *d = opendir(seg_dir);
	struct dirent *de;
	int rc = 0;
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while (rc == 0 && (de = readdir(d)) != NULL) {
		unsigned long long id;
		char tail[8];
		if (sscanf(de->d_name, "seg-%16llx.%4s", &id, tail) == 2 &&
		    strcmp(tail, "dat") == 0)
			rc = id_push(out, id);
	}
	closedir(d);
	if (rc == 0 && out->n)
		rdb_sort(out->v, out->n, sizeof(uint64_t), cmp_u64);
	return rc;
}

/* ---- series ------------------------------------------------------------------------- */

static bool same_key(const struct mdl_series_key *a, const struct mdl_series_key *b)
{
	return a->rank == b->rank && strcmp(a->job, b->job) == 0 &&
	       strcmp(a->metric, b->metric) == 0;
}

/* Records key -> sid. *live is false when sid is an older incarnation of
 * the key (its chunks are not indexed). RDB_ECORRUPT: sid names another key. */
static int series_note(struct rb *b, const struct mdl_series_key *k, uint64_t sid, bool *live)
{
	struct mdl_series_key other;
	uint64_t cur;
	*live = true;
	int rc = sto_series_key_of(b->t, sid, &other);
	if (rc == 0 && !same_key(&other, k))
		return RDB_ECORRUPT;
	if (rc == 0)
		return 0;
	if (rc != RDB_ENOTFOUND)
		return rc;
	rc = sto_series_lookup(b->t, k, &cur);
	if (rc == RDB_ENOTFOUND) {
		b->r->series++;
		return sto_series_put(b->t, k, sid);
	}
	if (rc)
		return rc;
	if (cur > sid) {
		*live = false;
		return 0;
	}
	rc = id_push(&b->losers, cur);
	if (rc == 0)
		rc = sto_series_del(b->t, k, cur);
	return rc ? rc : sto_series_put(b->t, k, sid);
}

/* Parses the key record that fills p[0..len) exactly. */
static int key_parse(const uint8_t *p, size_t len, struct mdl_series_key *k)
{
	size_t used;
	int rc = sto_key_rec_get(p, len, k, &used);
	return rc == 0 && used != len ? RDB_ECORRUPT : rc;
}

/* ---- one record --------------------------------------------------------------------- */

struct rec_at {
	uint64_t seg, off;
	uint32_t len;
	uint64_t sid, uid, gen;
	uint32_t count;
};

static void note_maxima(struct rb *b, const struct rec_at *a);

/* Where a decoded chunk sits: a lone chunk record, or a group member. */
struct chunk_at {
	uint64_t sid;
	uint8_t group_n, member;
	uint32_t head_len;
};

/* Indexes one decoded chunk (points in b->cols) of series key k. */
static int index_chunk(struct rb *b, const struct rec_at *a, const struct chunk_at *c,
		       const struct mdl_series_key *k, const char **why)
{
	bool live;
	int rc = series_note(b, k, c->sid, &live);
	if (rc == RDB_ECORRUPT)
		*why = "series id already names another series key";
	if (rc)
		return rc;
	if (c->sid > b->max_sid)
		b->max_sid = c->sid;
	if (!live) {
		b->r->skipped_deleted++;
		return 0;
	}
	if (a->gen > b->ckpt_gen && wal_has(b, a->gen)) {
		b->r->skipped_uncheckpointed++;
		return 0;
	}
	uint64_t uid = a->uid + c->member; /* group members: the record's uid + k */
	if (uid > b->max_uid)
		b->max_uid = uid;
	struct sto_chunk_ref ref = {.series_id = c->sid,
				    .uid = uid,
				    .segment_id = a->seg,
				    .offset = a->off,
				    .length = a->len,
				    .group_n = c->group_n,
				    .member = c->member,
				    .head_len = c->head_len,
				    .gen = a->gen};
	sto_chunk_stats_compute(&b->cols, &ref.stats);
	struct sto_chunk_ref old;
	rc = sto_chunk_get(b->t, c->sid, ref.stats.min_ts_ns, uid, &old);
	if (rc == 0) {
		b->r->skipped_duplicate++;
		return dup_push(&b->dups, uid, a->seg); /* where a source may also live */
	}
	if (rc != RDB_ENOTFOUND)
		return rc;
	b->r->chunks++;
	return sto_chunk_put(b->t, &ref);
}

static int index_points(struct rb *b, const struct rec_at *a, const uint8_t *pl, size_t plen,
			const char **why)
{
	struct mdl_series_key k;
	size_t used = 0;
	int rc = sto_codec_decode(pl, plen, STO_CHUNK_MAX_POINTS, &b->cols, &used);
	if (rc == RDB_ECORRUPT)
		*why = "chunk payload does not decode";
	if (rc == 0 && (b->cols.n != a->count || a->sid == 0)) {
		rc = RDB_ECORRUPT;
		*why = "point count or series id of the record header is wrong";
	}
	if (rc == 0 && (rc = key_parse(pl + used, plen - used, &k)) != 0)
		*why = "key record does not parse";
	if (rc)
		return rc;
	struct chunk_at c = {.sid = a->sid};
	return index_chunk(b, a, &c, &k, why);
}

struct group_walk {
	struct rb *b;
	const struct rec_at *a;
	uint32_t head_len;
	const char **why;
};

static int group_member_cb(void *arg, unsigned member, unsigned m, uint64_t sid,
			   const struct mdl_series_key *key, const struct mdl_cols *cols,
			   const char *damage)
{
	struct group_walk *g = arg;
	if (damage) {
		/* only this member is lost; its siblings are indexed */
		g->b->r->skipped_damaged++;
		report(g->b,
		       "segment %s: group record at offset %llu (chunk %llu, member %u of "
		       "%u, series %llu): %s; that member is not indexed",
		       g->b->seg_path, (unsigned long long)g->a->off,
		       (unsigned long long)(g->a->uid + member), member, m, (unsigned long long)sid,
		       damage);
		return 0;
	}
	if (cols->n != g->a->count) {
		*g->why = "point count of the group record header is wrong";
		return RDB_ECORRUPT;
	}
	struct chunk_at c = {
	    .sid = sid, .group_n = (uint8_t)m, .member = (uint8_t)member, .head_len = g->head_len};
	return index_chunk(g->b, g->a, &c, key, g->why);
}

/* A group record: head and layout checked, then one index entry per member
 * whose section is intact (a damaged section loses only its member). */
static int index_group(struct rb *b, const struct rec_at *a, const char **why)
{
	struct group_walk g = {b, a, rdb_get_le32(b->rec.data + 36), why};
	if (a->sid != 0 || a->len < STO_CHUNK_HEADER_SIZE + 1) {
		*why = "group record has a series id in its header";
		return RDB_ECORRUPT;
	}
	int rc = sto_group_each(b->rec.data, a->len, &b->cols, group_member_cb, &g, why);
	if (rc == 0) {
		/* every uid U..U+m-1 is taken, whether or not its member is indexed */
		note_maxima(b, a);
		uint64_t last = a->uid + b->rec.data[STO_CHUNK_HEADER_SIZE] - 1;
		if (last > b->max_uid)
			b->max_uid = last;
	}
	return rc;
}

/* Copies the decoded events into head records (freed by the caller). */
/* Finds the job of an event chunk: its key record (u8 J, job, u32 rank
 * 0xffffffff, u16 0) ends the payload, after a zstd frame that must decode
 * exactly. Fills b->dec. */
static int ev_find_job(struct rb *b, const uint8_t *pl, size_t plen, struct mdl_series_key *k)
{
	for (size_t jl = 1; jl <= MDL_JOB_MAX && jl + 1 + KEY_TAIL < plen; jl++) {
		size_t kl = 1 + jl + KEY_TAIL;
		if (pl[plen - kl] != jl || key_parse(pl + plen - kl, kl, k) != 0 ||
		    k->rank != MDL_RANK_JOB || k->metric[0] != 0)
			continue;
		if (evc_decode(pl, plen - kl, k->job, &b->dec) == 0)
			return 0;
	}
	return RDB_ECORRUPT;
}

static int ev_exists(void *arg, int64_t min_ts_ns, uint64_t uid, const uint8_t *val, size_t len,
		     bool damaged)
{
	(void)damaged; /* never set: not a pass_damaged transaction */
	(void)arg;
	(void)min_ts_ns;
	(void)uid;
	(void)val;
	(void)len;
	return 0;
}

static int index_events(struct rb *b, const struct rec_at *a, const uint8_t *pl, size_t plen,
			const char **why)
{
	struct mdl_series_key k;
	int rc = ev_find_job(b, pl, plen, &k);
	if (rc == 0 && (b->dec.n != a->count || a->sid != 0))
		rc = RDB_ECORRUPT;
	if (rc) {
		*why = "event chunk payload or key record does not decode";
		return rc;
	}
	if (a->gen > b->ckpt_gen && wal_has(b, a->gen)) {
		b->r->skipped_uncheckpointed++;
		return 0;
	}
	struct ev_entry e;
	rc = evc_entry_of(&b->dec, &b->evpayload, &e, &b->bloom);
	if (rc)
		return rc;
	e.uid = a->uid;
	e.segment_id = a->seg;
	e.offset = a->off;
	e.gen = a->gen;
	e.length = a->len;
	rc = sto_evidx_get(b->t, k.job, e.min_ts_ns, a->uid, ev_exists, NULL);
	if (rc == 0) {
		b->r->skipped_duplicate++;
		return 0;
	}
	if (rc != RDB_ENOTFOUND)
		return rc;
	rc = eve_encode(&e, e.bloom, &b->entry);
	if (rc == 0)
		rc = sto_evidx_put(b->t, k.job, e.min_ts_ns, e.uid, b->entry.data, b->entry.len);
	if (rc == 0)
		b->r->event_chunks++;
	return rc;
}

static void note_maxima(struct rb *b, const struct rec_at *a)
{
	if (a->uid > b->max_uid)
		b->max_uid = a->uid;
	if (a->gen > b->max_gen)
		b->max_gen = a->gen;
}

/* A valid supersede record goes into the supersede db as it is (its
 * segments are filled in by apply_supersede); a copy of one already
 * there (a compaction copy) is skipped like a chunk copy. */
static int index_sup(struct rb *b, const struct rec_at *a, const char **why)
{
	struct sto_sup_entry e = {.segment_id = a->seg, .offset = a->off, .length = a->len};
	struct sto_sup_entry old;
	int rc = sto_sup_parse(b->rec.data, a->len, &e.sup, why);
	if (rc)
		return rc;
	note_maxima(b, a);
	rc = sto_sup_get(b->t, e.sup.merged_uid, &old);
	if (rc == 0)
		sto_sup_entry_free(&old);
	if (rc == RDB_ENOTFOUND) {
		rc = sto_sup_put(b->t, &e);
		b->r->supersede_records += rc == 0;
	}
	free(e.sup.src);
	return rc;
}

/* Verifies and indexes the record at a (already read into b->rec). Damage
 * is reported and counted, never returned. */
static int one_record(struct rb *b, const struct rec_at *a, uint32_t magic)
{
	const uint8_t *pl;
	size_t plen;
	const char *why = NULL;
	int rc;
	if (magic == STO_SUP_MAGIC) {
		rc = index_sup(b, a, &why);
	} else if (magic == STO_GROUP_MAGIC) {
		rc = index_group(b, a, &why);
	} else {
		rc = sto_chunk_check(b->rec.data, a->len, magic, a->sid, a->uid, &pl, &plen, &why);
		if (rc == 0) {
			note_maxima(b, a);
			rc = magic == STO_CHUNK_MAGIC ? index_points(b, a, pl, plen, &why)
						      : index_events(b, a, pl, plen, &why);
		}
	}
	if (rc != RDB_ECORRUPT)
		return rc;
	b->r->skipped_damaged++;
	if (magic == STO_SUP_MAGIC) {
		report(b,
		       "segment %s: supersede record at offset %llu (merged chunk %llu, series "
		       "%llu, %u bytes): %s; not used (its sources may be counted twice: see "
		       "the lines that follow)",
		       b->seg_path, (unsigned long long)a->off, (unsigned long long)a->uid,
		       (unsigned long long)a->sid, a->len, why ? why : "corrupt");
		return a->sid ? dup_push(&b->bad_sups, a->uid, a->sid) : 0;
	}
	report(b, "segment %s: record at offset %llu (chunk %llu, %u bytes): %s; not indexed",
	       b->seg_path, (unsigned long long)a->off, (unsigned long long)a->uid, a->len,
	       why ? why : "corrupt");
	return 0;
}

/* Walks one segment file, indexing its records in the open transaction. */
static int walk_segment(struct rb *b, int fd, uint64_t id)
{
	uint8_t hdr[STO_CHUNK_HEADER_SIZE];
	struct stat st;
	if (fstat(fd, &st) != 0)
		return -errno;
	uint64_t size = (uint64_t)st.st_size, off = STO_SEG_HEADER_SIZE;
	if (pread(fd, hdr, 32, 0) != 32 || memcmp(hdr, STO_SEG_MAGIC, 8) != 0 ||
	    rdb_get_le64(hdr + 16) != id) {
		b->r->skipped_damaged++;
		report(b, "segment %s: bad file header (magic or segment id); file not indexed",
		       b->seg_path);
		return 0;
	}
	b->r->segments++;
	while (off < size) {
		ssize_t got = pread(fd, hdr, sizeof(hdr), (off_t)off);
		if (got < 0)
			return -errno;
		uint32_t magic = rdb_get_le32(hdr), plen = rdb_get_le32(hdr + 4);
		uint64_t len = STO_CHUNK_HEADER_SIZE + (uint64_t)plen;
		if (got != (ssize_t)sizeof(hdr) ||
		    (magic != STO_CHUNK_MAGIC && magic != STO_EVCHUNK_MAGIC &&
		     magic != STO_SUP_MAGIC && magic != STO_GROUP_MAGIC) ||
		    len > REC_MAX || off + len > size) {
			b->r->skipped_damaged++;
			report(b,
			       "segment %s: torn or unreadable record at offset %llu (incomplete "
			       "header, bad magic or length); the last %llu bytes of the file are "
			       "not indexed",
			       b->seg_path, (unsigned long long)off,
			       (unsigned long long)(size - off));
			break;
		}
		struct rec_at a = {.seg = id,
				   .off = off,
				   .len = (uint32_t)len,
				   .sid = rdb_get_le64(hdr + 8),
				   .uid = rdb_get_le64(hdr + 16),
				   .gen = rdb_get_le64(hdr + 24),
				   .count = rdb_get_le32(hdr + 32)};
		b->rec.len = 0;
		int rc = rdb_buf_reserve(&b->rec, len);
		if (rc)
			return rc;
		got = pread(fd, b->rec.data, len, (off_t)off);
		if (got != (ssize_t)len)
			return got < 0 ? -errno : -EIO;
		rc = one_record(b, &a, magic);
		if (rc)
			return rc;
		off += len;
	}
	return 0;
}

static int do_segment(struct rb *b, const char *seg_dir, uint64_t id)
{
	sto_seg_path(seg_dir, id, b->seg_path, sizeof(b->seg_path));
	int fd = open(b->seg_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = sto_txn_begin(b->ix, true, &b->t);
	if (rc == 0) {
		rc = walk_segment(b, fd, id);
		if (rc == 0)
			rc = sto_txn_commit(b->t);
		else
			sto_txn_abort(b->t);
		b->t = NULL;
	}
	close(fd);
	if (rc)
		rdb_error("rebuild", "segment %s: %s; rebuild stopped, index/ left as it was",
			  b->seg_path, rdb_strerror(rc));
	return rc;
}

/* ---- finishing ---------------------------------------------------------------------- */

struct ref_list {
	struct sto_chunk_ref *v;
	size_t n, cap;
};

static int ref_push(void *arg, const struct sto_chunk_ref *ref)
{
	struct ref_list *l = arg;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct sto_chunk_ref *p = realloc(l->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		l->v = p;
		l->cap = cap;
	}
	l->v[l->n++] = *ref;
	return 0;
}

/* Drops the chunks of series ids replaced by a newer id of the same key
 * (collected first: no deletion under a live cursor). */
static int drop_losers(struct rb *b)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < b->losers.n; i++) {
		struct ref_list l = {0};
		rc = sto_chunk_scan(b->t, b->losers.v[i], INT64_MIN, INT64_MAX, ref_push, &l);
		for (size_t k = 0; rc == 0 && k < l.n; k++)
			rc = sto_chunk_del(b->t, l.v[k].series_id, l.v[k].stats.min_ts_ns,
					   l.v[k].uid);
		if (rc == 0) {
			b->r->chunks -= l.n;
			b->r->skipped_deleted += l.n;
		}
		free(l.v);
	}
	return rc;
}

/* ---- supersede records ------------------------------------------------------------ */

struct sup_all {
	struct sto_sup_entry *v; /* deep copies of every supersede entry */
	size_t n, cap;
	bool *eff; /* v[i] takes effect */
};

static int sup_collect_cb(void *arg, const struct sto_sup_entry *e)
{
	struct sup_all *l = arg;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct sto_sup_entry *p = realloc(l->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		l->v = p;
		l->cap = cap;
	}
	int rc = sto_sup_entry_copy(e, &l->v[l->n]);
	l->n += rc == 0;
	return rc;
}

static void sup_all_free(struct sup_all *l)
{
	for (size_t i = 0; i < l->n; i++)
		sto_sup_entry_free(&l->v[i]);
	free(l->v);
	free(l->eff);
}

/* 1 when the chunk (series, min_ts, uid) is indexed, 0 when not, <0 error. */
static int indexed(struct rb *b, uint64_t sid, int64_t min_ts_ns, uint64_t uid,
		   struct sto_chunk_ref *ref)
{
	int rc = sto_chunk_get(b->t, sid, min_ts_ns, uid, ref);
	return rc == 0 ? 1 : rc == RDB_ENOTFOUND ? 0 : rc;
}

/* A supersede record takes effect when its merged chunk is indexed, or is
 * itself a source of one that takes effect (a merged chunk merged again,
 * whose own record is damaged or gone, still has its points in the newer
 * one). Least fixed point over the entries. */
static int sup_effective(struct rb *b, struct sup_all *l)
{
	struct rdb_map covered = RDB_MAP_INIT; /* uid + 1 of sources of effective entries */
	struct sto_chunk_ref ref;
	int rc = 0;
	bool changed = true;
	for (size_t i = 0; rc >= 0 && i < l->n; i++) {
		const struct sto_sup *u = &l->v[i].sup;
		rc = indexed(b, u->series_id, u->merged_min_ts_ns, u->merged_uid, &ref);
		l->eff[i] = rc == 1;
	}
	while (rc >= 0 && changed) {
		changed = false;
		for (size_t i = 0; rc >= 0 && i < l->n; i++) {
			const struct sto_sup *u = &l->v[i].sup;
			if (l->eff[i] && rdb_map_get(&covered, u->merged_uid + 1) == (void *)2)
				continue; /* sources already noted */
			if (!l->eff[i] && !rdb_map_get(&covered, u->merged_uid + 1))
				continue;
			l->eff[i] = true;
			for (uint32_t k = 0; rc >= 0 && k < u->nsrc; k++)
				if (!rdb_map_get(&covered, u->src[k].uid + 1)) {
					rc = rdb_map_put(&covered, u->src[k].uid + 1, (void *)1);
					changed = true;
				}
			if (rc >= 0)
				rc = rdb_map_put(&covered, u->merged_uid + 1, (void *)2);
		}
	}
	rdb_map_free(&covered);
	return rc < 0 ? rc : 0;
}

static int cmp_dup(const void *a, const void *b)
{
	const struct dup *x = a, *y = b;
	return x->uid < y->uid ? -1 : x->uid > y->uid;
}

static int cmp_u64s(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Appends to seg[*n] the segments of the skipped copies of uid (dups sorted). */
static void dup_segments(const struct rb *b, uint64_t uid, uint64_t *seg, uint32_t *n)
{
	struct dup key = {uid, 0};
	if (b->dups.n == 0)
		return; /* bsearch wants a non-NULL base */
	const struct dup *d = bsearch(&key, b->dups.v, b->dups.n, sizeof(key), cmp_dup);
	if (!d)
		return;
	while (d > b->dups.v && d[-1].uid == uid)
		d--;
	for (; d < b->dups.v + b->dups.n && d->uid == uid; d++)
		seg[(*n)++] = d->seg;
}

static uint32_t dup_count(const struct rb *b, uint64_t uid)
{
	uint32_t n = 0;
	for (size_t i = 0; i < b->dups.n; i++)
		n += b->dups.v[i].uid == uid;
	return n;
}

/* Where e's valid source records are (indexed copy and skipped copies);
 * when eff, their entries leave the index. Then the entry is stored with
 * those segments, or dropped when it hides nothing. */
static int sup_apply_one(struct rb *b, struct sto_sup_entry *e, bool eff)
{
	struct sto_chunk_ref ref;
	uint32_t cap = 0, n = 0;
	int rc = 0;
	for (uint32_t k = 0; k < e->sup.nsrc; k++)
		cap += 1 + (b->dups.n ? dup_count(b, e->sup.src[k].uid) : 0);
	uint64_t *seg = malloc(((size_t)cap + 1) * sizeof(*seg));
	if (!seg)
		return -ENOMEM;
	for (uint32_t k = 0; rc >= 0 && k < e->sup.nsrc; k++) {
		const struct sto_sup_src *src = &e->sup.src[k];
		rc = indexed(b, e->sup.series_id, src->min_ts_ns, src->uid, &ref);
		if (rc == 1) {
			seg[n++] = ref.segment_id;
			rc = eff ? sto_chunk_del(b->t, e->sup.series_id, src->min_ts_ns, src->uid)
				 : 0;
			b->r->chunks -= eff && rc == 0;
			b->r->skipped_superseded += eff && rc == 0;
		}
		if (rc >= 0)
			dup_segments(b, src->uid, seg, &n);
	}
	if (rc < 0 || !eff || n == 0) {
		free(seg);
		return rc < 0 ? rc : sto_sup_del(b->t, e->sup.merged_uid);
	}
	rdb_sort(seg, n, sizeof(*seg), cmp_u64s);
	uint32_t k = 0;
	for (uint32_t i = 0; i < n; i++)
		if (k == 0 || seg[i] != seg[k - 1])
			seg[k++] = seg[i];
	free(e->seg);
	e->seg = seg;
	e->nseg = k;
	return sto_sup_put(b->t, e);
}

/* After the walk: every chunk a merged chunk replaces leaves the index,
 * and the supersede db keeps the entries still needed (see FORMAT.md). */
static int apply_supersede(struct rb *b)
{
	struct sup_all l = {0};
	if (b->dups.n)
		rdb_sort(b->dups.v, b->dups.n, sizeof(*b->dups.v), cmp_dup);
	int rc = sto_sup_scan(b->t, sup_collect_cb, &l);
	if (rc == 0 && l.n && !(l.eff = calloc(l.n, sizeof(*l.eff))))
		rc = -ENOMEM;
	if (rc == 0)
		rc = sup_effective(b, &l);
	for (size_t i = 0; rc == 0 && i < l.n; i++)
		rc = sup_apply_one(b, &l.v[i], l.eff[i]);
	sup_all_free(&l);
	return rc;
}

struct find_uid {
	uint64_t uid;
	struct sto_chunk_ref ref;
	bool found;
};

static int find_uid_cb(void *arg, const struct sto_chunk_ref *ref)
{
	struct find_uid *f = arg;
	if (ref->uid == f->uid) {
		f->ref = *ref;
		f->found = true;
	}
	return 0;
}

/* A damaged supersede record whose merged chunk got indexed (and of which
 * no intact copy was read) may leave that chunk's sources indexed next to
 * it. Which chunks those are is not known any more, so this is reported
 * once per merged chunk, naming the series and time range to check. */
static int suspect_damaged_sups(struct rb *b)
{
	struct sto_sup_entry e;
	struct mdl_series_key k;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < b->bad_sups.n; i++) {
		struct find_uid f = {.uid = b->bad_sups.v[i].uid};
		uint64_t sid = b->bad_sups.v[i].seg; /* the series id, in this list */
		rc = sto_sup_get(b->t, f.uid, &e);
		if (rc == 0) {
			sto_sup_entry_free(&e);
			continue; /* an intact copy was read */
		}
		if (rc != RDB_ENOTFOUND)
			break;
		rc = sto_chunk_scan(b->t, sid, INT64_MIN, INT64_MAX, find_uid_cb, &f);
		if (rc || !f.found)
			continue;
		if (sto_series_key_of(b->t, sid, &k) != 0)
			snprintf(k.job, sizeof(k.job), "?");
		b->r->suspect_merges++;
		report(
		    b,
		    "merged chunk %llu of series %llu (job %s, rank %u, metric %s, time "
		    "%lld..%lld ns) is indexed but its supersede record is damaged: older chunks "
		    "of that series in that time range whose segments were not compacted since "
		    "the merge may be counted twice",
		    (unsigned long long)f.uid, (unsigned long long)sid, k.job, k.rank, k.metric,
		    (long long)f.ref.stats.min_ts_ns, (long long)f.ref.stats.max_ts_ns);
	}
	return rc;
}

static int write_meta(struct rb *b)
{
	int rc = apply_supersede(b);
	if (rc == 0)
		rc = suspect_damaged_sups(b);
	if (rc == 0)
		rc = drop_losers(b);
	if (rc == 0)
		rc = sto_meta_put(b->t, "next_series_id", b->max_sid + 1);
	if (rc == 0)
		rc = sto_meta_put(b->t, "next_chunk_uid", b->max_uid + 1);
	if (rc == 0)
		rc = sto_meta_put(b->t, "next_segment_id", b->max_seg + 1);
	if (rc == 0)
		rc = sto_meta_put(b->t, "ckpt_gen", b->ckpt_gen);
	return rc;
}

/* Builds index.rebuild/ from the segment files. */
static int build(struct rb *b, const char *tmp_dir)
{
	char seg_dir[PATH_MAX + 16], wal_dir[PATH_MAX + 16];
	struct id_set segs = {0};
	snprintf(seg_dir, sizeof(seg_dir), "%s/chunks", b->o->data_dir);
	snprintf(wal_dir, sizeof(wal_dir), "%s/wal", b->o->data_dir);
	int rc = sto_wal_list(wal_dir, &b->wal_gens, &b->nwal);
	if (rc == -ENOENT)
		rc = 0;
	/* Generations > ckpt_gen are replayed at the next start: that is the
	 * oldest WAL file present and everything after it. */
	b->ckpt_gen = b->nwal ? (b->wal_gens[0] ? b->wal_gens[0] - 1 : 0) : UINT64_MAX;
	if (rc == 0)
		rc = list_segments(seg_dir, &segs);
	if (rc == 0)
		rc = remove_leftover(tmp_dir);
	if (rc == 0)
		rc = sto_index_open(tmp_dir, b->o->map_bytes, &b->ix);
	for (size_t i = 0; rc == 0 && i < segs.n; i++) {
		b->max_seg = segs.v[i];
		rc = do_segment(b, seg_dir, segs.v[i]);
	}
	if (!b->nwal)
		b->ckpt_gen = b->max_gen;
	b->r->ckpt_gen = b->ckpt_gen;
	if (rc == 0)
		rc = sto_txn_begin(b->ix, true, &b->t);
	if (rc == 0) {
		rc = write_meta(b);
		if (rc == 0)
			rc = sto_txn_commit(b->t);
		else
			sto_txn_abort(b->t);
		b->t = NULL;
	}
	sto_index_close(b->ix);
	b->ix = NULL;
	free(segs.v);
	if (rc == 0)
		rc = fsync_dir(tmp_dir);
	return rc;
}

/* index/ -> index.old-<ns> (when present), index.rebuild/ -> index/. */
static int swap_in(const char *dir, const char *tmp_dir, char *old_index, size_t old_len)
{
	char cur[PATH_MAX + 16], old[PATH_MAX + 48];
	struct timespec ts;
	struct stat st;
	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(cur, sizeof(cur), "%s/index", dir);
	snprintf(old, sizeof(old), "%s/index.old-%lld", dir,
		 (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec);
	if (old_index && old_len)
		old_index[0] = 0;
	if (lstat(cur, &st) == 0) {
		if (rename(cur, old) != 0)
			return -errno;
		if (old_index && old_len)
			snprintf(old_index, old_len, "%s", old);
	} else if (errno != ENOENT) {
		return -errno;
	}
	if (rename(tmp_dir, cur) != 0)
		return -errno;
	return fsync_dir(dir);
}

int sto_rebuild_index_opt(const struct sto_rebuild_options *o, struct sto_rebuild_result *r,
			  char *old_index, size_t old_len)
{
	struct rb b = {.o = o, .r = r};
	char tmp_dir[PATH_MAX + 32];
	int lock_fd = -1;
	memset(r, 0, sizeof(*r));
	if (old_index && old_len)
		old_index[0] = 0;
	int rc = take_lock(o->data_dir, &lock_fd);
	if (rc == 0)
		rc = check_format(o->data_dir);
	rdb_buf_init(&b.rec, REC_MAX);
	rdb_buf_init(&b.evpayload, STO_CHUNK_MAX_PAYLOAD);
	rdb_buf_init(&b.bloom, 1u << 20);
	rdb_buf_init(&b.entry, STO_EVENTRY_FIXED + (1u << 20));
	snprintf(tmp_dir, sizeof(tmp_dir), "%s/index.rebuild", o->data_dir);
	if (rc == 0)
		rc = build(&b, tmp_dir);
	if (rc == 0)
		rc = swap_in(o->data_dir, tmp_dir, old_index, old_len);
	if (rc)
		rdb_error("rebuild", "index rebuild of %s failed: %s; index/ was not replaced",
			  o->data_dir, rdb_strerror(rc));
	rdb_buf_free(&b.rec);
	rdb_buf_free(&b.evpayload);
	rdb_buf_free(&b.bloom);
	rdb_buf_free(&b.entry);
	mdl_cols_free(&b.cols);
	evc_decoded_free(&b.dec);
	free(b.losers.v);
	free(b.dups.v);
	free(b.bad_sups.v);
	free(b.wal_gens);
	if (lock_fd >= 0)
		close(lock_fd);
	return rc;
}

int sto_rebuild_index(const char *data_dir, uint64_t map_bytes, sto_problem_fn fn, void *arg,
		      struct sto_rebuild_result *r)
{
	struct sto_rebuild_options o = {
	    .data_dir = data_dir, .map_bytes = map_bytes, .fn = fn, .arg = arg};
	return sto_rebuild_index_opt(&o, r, NULL, 0);
}
