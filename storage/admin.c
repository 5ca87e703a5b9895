/* admin.c - the data-lifecycle operations that work through the engine's
 * public parts rather than its internals (contract: storage/admin.h):
 * verification and quarantine, WAL checks, backup and restore. Deletion,
 * retention and compaction live in lifecycle.c and compact.c because they move
 * head data and own the segment writer.
 *
 * Verification reads every segment file from start to end (header, then
 * each record's magic, length and XXH3 checksum; a length that runs past
 * the end or a bad magic ends the walk of that file, reported with its
 * offset), then checks every index entry against its record (magic, series
 * id / uid, length, checksum, decode, point count). Supersede records
 * (SUP1, storage/format.h) are checked like any record and their shape
 * parsed; each supersede db entry must match its record. They hold no
 * points, so nothing is quarantined for them: the index entry holds their
 * whole content and compaction writes them again from it. It holds the
 * compaction lock so that records do not move underneath it. Problems are
 * reported one line each; nothing is changed unless quarantine is asked,
 * which moves the entries of damaged chunks to the quarantine db.
 *
 * Backup: checkpoint, pause compaction, copy the LMDB environment
 * (mdb_env_copy2, compacted, a consistent snapshot), then hard-link (copy
 * when the backup is on another file system) every segment file. Segment
 * files only ever grow by appends and are removed only by compaction, so
 * the links hold every record the copied index points at. The job metadata
 * documents (<data_dir>/meta/, storage/jobmeta/) are copied file by file by
 * their module: each is replaced only by an atomic rename, so every copy is
 * one whole document (a document stored during the backup may or may not be
 * in it). Verification checks each document's checksum the same way.
 */
#include "storage/admin.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"
#include "storage/chunk/codec.h"
#include "storage/events/evstore.h"
#include "storage/chunk/group.h"
#include "storage/index/index.h"
#include "storage/chunk/segment.h"
#include "storage/engine/engine.h"
#include "storage/jobmeta/jobmeta.h"
#include "storage/wal/batch_codec.h"
#include "storage/format.h"
#include "common/rdb_map.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define REC_MAX (STO_CHUNK_HEADER_SIZE + STO_CHUNK_MAX_PAYLOAD)

struct vctx {
	struct sto *s;
	struct sto_admin_parts p;
	bool quarantine;
	sto_problem_fn fn;
	void *arg;
	struct sto_verify_report *rep;
	struct rdb_buf rec;
	struct mdl_cols cols;
	struct sto_chunk_ref *bad; /* damaged point chunks, quarantined afterwards */
	size_t nbad;
	struct sto_chunk_ref *fix; /* damaged entries of sound chunks, rewritten */
	size_t nfix;
};

static void problem(struct vctx *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void problem(struct vctx *v, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	v->rep->problems++;
	if (v->fn)
		v->fn(v->arg, msg);
}

/* Checks one record of a segment walk (read into v->rec). */
static void walk_record(struct vctx *v, const char *path, uint64_t off, const uint8_t *hdr,
			size_t len)
{
	uint32_t magic = rdb_get_le32(hdr);
	uint64_t uid = rdb_get_le64(hdr + 16);
	const uint8_t *payload;
	size_t pl;
	const char *why = NULL;
	int rc;
	if (magic == STO_SUP_MAGIC) {
		struct sto_sup sup;
		rc = sto_sup_parse(v->rec.data, len, &sup, &why);
		if (rc == 0)
			free(sup.src);
		if (rc == 0)
			v->rep->supersede_records++;
		else
			problem(v,
				"segment %s: supersede record at offset %llu (merged chunk %llu, "
				"%zu bytes): %s",
				path, (unsigned long long)off, (unsigned long long)uid, len,
				why ? why : rdb_strerror(rc));
		return;
	}
	if (magic == STO_GROUP_MAGIC) {
		uint32_t head_len;
		rc = sto_group_check(v->rec.data, len, uid, &head_len, &why);
	} else {
		rc = sto_chunk_check(v->rec.data, len, magic, rdb_get_le64(hdr + 8), uid, &payload,
				     &pl, &why);
	}
	if (rc)
		problem(v, "segment %s: record at offset %llu (chunk %llu, %zu bytes): %s", path,
			(unsigned long long)off, (unsigned long long)uid, len,
			why ? why : rdb_strerror(rc));
}

/* Walks one segment file record by record. */
static int walk_segment(struct vctx *v, const char *path, uint64_t id)
{
	uint8_t hdr[STO_CHUNK_HEADER_SIZE];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		problem(v, "segment %s: cannot open: %s", path, strerror(errno));
		return 0;
	}
	struct stat st;
	uint64_t size = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0, off = STO_SEG_HEADER_SIZE;
	if (pread(fd, hdr, 32, 0) != 32 || memcmp(hdr, STO_SEG_MAGIC, 8) != 0 ||
	    rdb_get_le64(hdr + 16) != id) {
		problem(v, "segment %s: bad file header (magic or segment id)", path);
		close(fd);
		return 0;
	}
	v->rep->segments++;
	while (off < size) {
		if (pread(fd, hdr, sizeof(hdr), (off_t)off) != (ssize_t)sizeof(hdr)) {
			problem(v, "segment %s: truncated record header at offset %llu", path,
				(unsigned long long)off);
			break;
		}
		uint32_t magic = rdb_get_le32(hdr), plen = rdb_get_le32(hdr + 4);
		uint64_t len = STO_CHUNK_HEADER_SIZE + (uint64_t)plen;
		if ((magic != STO_CHUNK_MAGIC && magic != STO_EVCHUNK_MAGIC &&
		     magic != STO_SUP_MAGIC && magic != STO_GROUP_MAGIC) ||
		    len > REC_MAX || off + len > size) {
			problem(v,
				"segment %s: unreadable record at offset %llu (bad magic or "
				"length); the rest of the file (%llu bytes) cannot be walked",
				path, (unsigned long long)off, (unsigned long long)(size - off));
			break;
		}
		v->rec.len = 0;
		int rc = rdb_buf_reserve(&v->rec, len);
		if (rc == 0 && pread(fd, v->rec.data, len, (off_t)off) != (ssize_t)len)
			rc = -EIO;
		if (rc == 0)
			walk_record(v, path, off, hdr, (size_t)len);
		else
			problem(v,
				"segment %s: record at offset %llu (%llu bytes) cannot be read: %s",
				path, (unsigned long long)off, (unsigned long long)len,
				rdb_strerror(rc));
		v->rep->records++;
		off += len;
	}
	close(fd);
	return 0;
}

/* A compacted-away segment waiting out its grace (seg_trash): nothing in it
 * counts any more, so it is not verified. */
static bool in_trash(struct vctx *v, uint64_t id)
{
	struct sto_txn *t;
	if (sto_txn_begin(v->p.ix, false, &t) != 0)
		return false;
	int rc = sto_trash_has(t, id);
	sto_txn_abort(t);
	return rc == 1;
}

static int walk_segments(struct vctx *v)
{
	DIR *d = opendir(v->p.seg_dir);
	struct dirent *de;
	if (!d)
		return -errno;
	while ((de = readdir(d)) != NULL) {
		unsigned long long id;
		char path[PATH_MAX + 300], tail[8];
		if (sscanf(de->d_name, "seg-%16llx.%4s", &id, tail) != 2 || strcmp(tail, "dat"))
			continue;
		if (in_trash(v, id))
			continue;
		snprintf(path, sizeof(path), "%s/%s", v->p.seg_dir, de->d_name);
		walk_segment(v, path, id);
	}
	closedir(d);
	return 0;
}

static int bad_push(struct vctx *v, const struct sto_chunk_ref *ref)
{
	struct sto_chunk_ref *p = realloc(v->bad, (v->nbad + 1) * sizeof(*p));
	if (!p)
		return -ENOMEM;
	v->bad = p;
	p[v->nbad++] = *ref;
	return 0;
}

static int fix_push(struct vctx *v, const struct sto_chunk_ref *ref)
{
	struct sto_chunk_ref *p = realloc(v->fix, (v->nfix + 1) * sizeof(*p));
	if (!p)
		return -ENOMEM;
	v->fix = p;
	p[v->nfix++] = *ref;
	return 0;
}

/* A system error (EIO, EMFILE, EISDIR...) reading a chunk says nothing
 * about the chunk: verify fails on it (check_index) rather than quarantine
 * the entry. A missing segment file (ENOENT) is the chunk provably gone. */
static bool io_error(int rc)
{
	return rc < 0 && rc > -4096 && rc != -ENOENT;
}

/* An index entry that failed its checksum: a problem either way; with
 * quarantine, rewritten from its chunk when that reads back whole, else
 * quarantined like a damaged chunk. */
static int check_damaged_entry(struct vctx *v, const struct sto_chunk_ref *ref)
{
	struct sto_read_error err;
	struct sto_chunk_ref fixed;
	v->rep->index_damaged++;
	int rc = sto_chunk_ref_repair(v->s, ref, &fixed, &err);
	if (io_error(rc) && rc != -ENOMEM) /* ENOMEM: a damaged length, maybe */
		return rc;
	if (rc == 0) {
		problem(
		    v,
		    "index entry of chunk %llu (series %llu): its statistics fail their "
		    "checksum; queries decode the chunk instead; 'verify --quarantine' rewrites "
		    "the entry from the chunk (which is intact)",
		    (unsigned long long)ref->uid, (unsigned long long)ref->series_id);
		return fix_push(v, &fixed);
	}
	problem(v,
		"index entry of chunk %llu (series %llu): fails its checksum and does not lead "
		"to its chunk (%s); queries of that series fail until 'verify --quarantine' "
		"moves it aside or the index is rebuilt",
		(unsigned long long)ref->uid, (unsigned long long)ref->series_id, err.msg);
	return bad_push(v, ref);
}

static bool same_f64(double a, double b)
{
	return rdb_f64_bits(a) == rdb_f64_bits(b);
}

/* The first statistic of a that differs from b, or NULL. */
static const char *stats_diff(const struct sto_chunk_stats *a, const struct sto_chunk_stats *b)
{
	if (a->count != b->count || a->nan_count != b->nan_count || a->step_count != b->step_count)
		return "point counts";
	if (a->min_ts_ns != b->min_ts_ns || a->max_ts_ns != b->max_ts_ns)
		return "time range";
	if (a->min_step != b->min_step || a->max_step != b->max_step)
		return "step range";
	if (a->min_attempt != b->min_attempt || a->max_attempt != b->max_attempt)
		return "attempt range";
	if (!same_f64(a->min, b->min) || !same_f64(a->max, b->max) || !same_f64(a->sum, b->sum))
		return "min, max or sum";
	if (a->first != b->first || a->last != b->last)
		return "first or last value";
	return NULL;
}

/* An entry whose checksum holds must still describe its chunk: statistics
 * written before format 3 (or damaged before the upgrade gave them a
 * checksum) are compared with the ones the decoded points give (every
 * writer computes them with sto_chunk_stats_compute from these same points,
 * so they match bit for bit). A difference is a problem; with quarantine
 * the entry is rewritten from the chunk. */
static int check_stats(struct vctx *v, const struct sto_chunk_ref *ref)
{
	struct sto_chunk_ref fixed = *ref;
	sto_chunk_stats_compute(&v->cols, &fixed.stats);
	const char *what = stats_diff(&ref->stats, &fixed.stats);
	if (!what)
		return 0;
	v->rep->index_damaged++;
	problem(v,
		"index entry of chunk %llu (series %llu): its statistics (%s) differ from the "
		"chunk's points; queries answering from them would be wrong; 'verify "
		"--quarantine' rewrites the entry from the chunk",
		(unsigned long long)ref->uid, (unsigned long long)ref->series_id, what);
	return fix_push(v, &fixed);
}

static int check_chunk_cb(void *arg, const struct sto_chunk_ref *ref)
{
	struct vctx *v = arg;
	struct sto_read_error err;
	v->rep->chunks++;
	if (ref->damaged)
		return check_damaged_entry(v, ref);
	int rc = sto_read_chunk(v->s, ref, &v->rec, &v->cols, &err);
	if (rc == 0)
		return check_stats(v, ref);
	if (io_error(rc))
		return rc;
	problem(v, "index entry: %s", err.msg);
	return bad_push(v, ref);
}

struct ev_bad {
	char job[MDL_JOB_MAX + 1];
	int64_t min_ts_ns;
	uint64_t uid;
	uint8_t *val;
	size_t len;
};

struct evv {
	struct vctx *v;
	struct ev_bad *bad; /* entries to quarantine */
	size_t nbad;
	struct ev_bad *fix; /* damaged entries of sound chunks, rewritten */
	size_t nfix;
	struct rdb_buf entry; /* scratch: a recomputed entry */
};

/* Keeps an event chunk entry (a copy of val) for verify --quarantine. */
static int ev_keep(struct ev_bad **arr, size_t *n, const char *job, int64_t min_ts_ns, uint64_t uid,
		   const uint8_t *val, size_t len)
{
	struct ev_bad *p = realloc(*arr, (*n + 1) * sizeof(*p));
	if (!p)
		return -ENOMEM;
	*arr = p;
	p += (*n)++;
	snprintf(p->job, sizeof(p->job), "%s", job);
	p->min_ts_ns = min_ts_ns;
	p->uid = uid;
	p->len = len;
	p->val = malloc(len ? len : 1);
	if (!p->val)
		return -ENOMEM;
	if (len)
		memcpy(p->val, val, len);
	return 0;
}

static void ev_kept_free(struct ev_bad *arr, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(arr[i].val);
	free(arr);
}

/* The entry of event chunk (job, min_ts_ns, uid) recomputed from the chunk
 * that the damaged entry val leads to (its location only is used; the
 * record's checksum, uid and job are checked): 0 with the encoded entry in
 * out; RDB_ECORRUPT when it leads to no such chunk; any other error (the
 * chunk could not be read) as it is. */
static int ev_entry_repair(struct vctx *v, const char *job, int64_t min_ts_ns, uint64_t uid,
			   const uint8_t *val, size_t len, struct rdb_buf *out)
{
	struct ev_entry loc, e;
	struct ev_decoded dec = {0};
	struct rdb_buf payload, bloom;
	const uint8_t *pl = NULL;
	size_t plen = 0, jl = strlen(job), keylen = 1 + jl + 4 + 2;
	const char *why;
	int rc = eve_decode(val, len, &loc);
	v->rec.len = 0;
	if (rc == 0 && (loc.length < STO_CHUNK_HEADER_SIZE ||
			loc.length > STO_CHUNK_HEADER_SIZE + 3 * STO_EVCHUNK_MAX_RAW))
		rc = RDB_ECORRUPT; /* no event chunk record is that long (as store_read.c) */
	if (rc == 0)
		rc = rdb_buf_reserve(&v->rec, loc.length);
	if (rc == 0)
		rc = sto_admin_seg_read(v->s, loc.segment_id, loc.offset, v->rec.data, loc.length);
	if (rc == 0)
		rc = sto_chunk_check(v->rec.data, loc.length, STO_EVCHUNK_MAGIC, 0, uid, &pl, &plen,
				     &why);
	if (rc == 0 && !evc_payload_of_job(pl, plen, job))
		rc = RDB_ECORRUPT;
	if (rc == 0)
		rc = evc_decode(pl, plen - keylen, job, &dec);
	rdb_buf_init(&payload, STO_CHUNK_MAX_PAYLOAD);
	rdb_buf_init(&bloom, 1u << 20);
	if (rc == 0)
		rc = evc_entry_of(&dec, &payload, &e, &bloom);
	if (rc == 0 && e.min_ts_ns != min_ts_ns)
		rc = RDB_ECORRUPT; /* the chunk would be indexed under another key */
	if (rc == 0) {
		e.uid = uid;
		e.segment_id = loc.segment_id;
		e.offset = loc.offset;
		e.length = loc.length;
		e.gen = rdb_get_le64(v->rec.data + 24); /* the record header's */
		out->len = 0;
		rc = eve_encode(&e, e.bloom, out);
	}
	evc_decoded_free(&dec);
	rdb_buf_free(&payload);
	rdb_buf_free(&bloom);
	/* Only a chunk that provably is not there condemns the entry (a missing
	 * segment file: -ENOENT); EIO, EMFILE, ENOMEM... leave it as it is. */
	return rc == -ENOENT || rc == RDB_ENOTFOUND ? RDB_ECORRUPT : rc;
}

/* An event chunk entry that failed its checksum: a problem either way;
 * with quarantine, rewritten from its chunk when that reads back whole
 * through it, else quarantined (as check_damaged_entry for chunks). */
static int check_damaged_ev(struct evv *ev, const char *job, int64_t min_ts_ns, uint64_t uid,
			    const uint8_t *val, size_t len)
{
	struct vctx *v = ev->v;
	v->rep->index_damaged++;
	int rc = ev_entry_repair(v, job, min_ts_ns, uid, val, len, &ev->entry);
	if (rc != 0 && rc != RDB_ECORRUPT)
		return rc; /* verify fails; the entry stays */
	if (rc == 0) {
		problem(v,
			"index entry of event chunk %llu of job %s failed its checksum; queries "
			"decode the chunk instead of trusting it; the chunk is intact: 'verify "
			"--quarantine' rewrites the entry from it",
			(unsigned long long)uid, job);
		return ev_keep(&ev->fix, &ev->nfix, job, min_ts_ns, uid, ev->entry.data,
			       ev->entry.len);
	}
	problem(v,
		"index entry of event chunk %llu of job %s failed its checksum and does not lead "
		"to its chunk; queries of the job fail; 'verify --quarantine' moves it to the "
		"quarantine, 'rankctl rebuild-index' recreates it from the chunk",
		(unsigned long long)uid, job);
	return ev_keep(&ev->bad, &ev->nbad, job, min_ts_ns, uid, val, len);
}

static int check_ev_cb(void *arg, const char *job, int64_t min_ts_ns, uint64_t uid,
		       const uint8_t *val, size_t len, bool damaged)
{
	struct evv *ev = arg;
	struct vctx *v = ev->v;
	struct ev_entry e;
	const uint8_t *payload;
	size_t plen;
	const char *why = NULL;
	v->rep->event_chunks++;
	if (damaged)
		return check_damaged_ev(ev, job, min_ts_ns, uid, val, len);
	int rc = eve_decode(val, len, &e);
	if (rc) {
		problem(v, "index entry of event chunk %llu of job %s does not decode",
			(unsigned long long)uid, job);
		return ev_keep(&ev->bad, &ev->nbad, job, min_ts_ns, uid, val, len);
	}
	if (!eve_filter_intact(&e)) /* damage after all: rewritten from the chunk */
		return check_damaged_ev(ev, job, min_ts_ns, uid, val, len);
	v->rec.len = 0;
	if (rc == 0)
		rc = rdb_buf_reserve(&v->rec, e.length);
	if (rc == 0)
		rc = sto_admin_seg_read(v->s, e.segment_id, e.offset, v->rec.data, e.length);
	if (rc == 0)
		rc = sto_chunk_check(v->rec.data, e.length, STO_EVCHUNK_MAGIC, 0, uid, &payload,
				     &plen, &why);
	if (rc == 0)
		return 0;
	problem(v, "event chunk %llu of job %s (segment %llu, offset %llu): %s",
		(unsigned long long)uid, job, (unsigned long long)e.segment_id,
		(unsigned long long)e.offset, why ? why : rdb_strerror(rc));
	return ev_keep(&ev->bad, &ev->nbad, job, min_ts_ns, uid, val, len);
}

static int quarantine_all(struct vctx *v, struct evv *ev)
{
	struct sto_txn *t;
	int rc = sto_txn_begin(v->p.ix, true, &t);
	if (rc)
		return rc;
	for (size_t i = 0; rc == 0 && i < v->nbad; i++)
		rc = sto_quarantine_chunk(t, &v->bad[i]);
	for (size_t i = 0; rc == 0 && i < v->nfix; i++)
		rc = sto_chunk_put(t, &v->fix[i]);
	for (size_t i = 0; rc == 0 && i < ev->nbad; i++)
		rc = sto_quarantine_evchunk(t, ev->bad[i].job, ev->bad[i].min_ts_ns, ev->bad[i].uid,
					    ev->bad[i].val, ev->bad[i].len);
	for (size_t i = 0; rc == 0 && i < ev->nfix; i++)
		rc = sto_evidx_put(t, ev->fix[i].job, ev->fix[i].min_ts_ns, ev->fix[i].uid,
				   ev->fix[i].val, ev->fix[i].len);
	if (rc) {
		sto_txn_abort(t);
		return rc;
	}
	rc = sto_txn_commit(t);
	if (rc == 0)
		v->rep->quarantined = v->nbad + ev->nbad;
	return rc;
}

static bool sup_same(const struct sto_sup *a, const struct sto_sup *b)
{
	return a->series_id == b->series_id && a->merged_uid == b->merged_uid &&
	       a->merged_min_ts_ns == b->merged_min_ts_ns && a->gen == b->gen &&
	       a->nsrc == b->nsrc && memcmp(a->src, b->src, a->nsrc * sizeof(*a->src)) == 0;
}

/* A supersede db entry against the record it points at. */
static int check_sup_cb(void *arg, const struct sto_sup_entry *e)
{
	struct vctx *v = arg;
	struct sto_sup disk = {0};
	const char *why = NULL;
	v->rec.len = 0;
	int rc = rdb_buf_reserve(&v->rec, e->length);
	if (rc == 0)
		rc = sto_admin_seg_read(v->s, e->segment_id, e->offset, v->rec.data, e->length);
	if (rc == 0)
		rc = sto_sup_parse(v->rec.data, e->length, &disk, &why);
	if (rc == 0 && !sup_same(&disk, &e->sup)) {
		rc = RDB_ECORRUPT;
		why = "the record says something else than the index entry";
	}
	free(disk.src);
	if (rc == -ENOMEM)
		return rc;
	if (rc)
		problem(v,
			"supersede record of merged chunk %llu (series %llu, segment %llu, offset "
			"%llu): %s; the index still holds its content: the next rewrite of that "
			"segment writes it again (rankctl compact --min-live-pct 100 forces one); "
			"until then a rebuild-index may count the merged points twice",
			(unsigned long long)e->sup.merged_uid, (unsigned long long)e->sup.series_id,
			(unsigned long long)e->segment_id, (unsigned long long)e->offset,
			why ? why : rdb_strerror(rc));
	return 0;
}

static void value_problem(void *arg, const char *msg)
{
	problem(arg, "LMDB index: %s", msg);
}

static int check_index(struct vctx *v, struct evv *ev)
{
	struct sto_txn *t;
	uint64_t keys = 0;
	int rc = sto_txn_begin(v->p.ix, false, &t);
	if (rc)
		return rc;
	sto_txn_pass_damaged(t); /* each damaged entry is a problem, not the end */
	rc = sto_index_check_all(t, &keys);
	if (rc)
		problem(v, "LMDB index: a database cannot be read (%s)", rdb_strerror(rc));
	int rc2 = sto_chunk_scan_all(t, check_chunk_cb, v);
	if (rc2)
		problem(v, "LMDB index: the chunk database cannot be read (%s)", rdb_strerror(rc2));
	int rc3 = sto_evidx_scan_all(t, check_ev_cb, ev);
	if (rc3)
		problem(v, "LMDB index: the event database cannot be read (%s)", rdb_strerror(rc3));
	int rc5 = sto_index_check_values(t, value_problem, v, &v->rep->index_damaged);
	if (rc5)
		problem(
		    v,
		    "LMDB index: the series catalog, rollups or other tables cannot be read (%s)",
		    rdb_strerror(rc5));
	int rc4 = sto_sup_scan(t, check_sup_cb, v);
	if (rc4)
		problem(v, "LMDB index: the supersede database cannot be read (%s)",
			rdb_strerror(rc4));
	sto_txn_abort(t);
	/* A system error (ENOMEM, or EIO / EMFILE reading a chunk to judge a
	 * damaged entry: ev_entry_repair) fails verify before anything is
	 * quarantined on an unfinished scan; malformed data is a problem. */
	int sys[] = {rc2, rc3, rc4};
	for (size_t i = 0; i < 3; i++)
		if (sys[i] == -ENOMEM || io_error(sys[i]))
			return sys[i];
	return 0;
}

static void problem_kept_wal(void *arg, const char *path, uint64_t bytes)
{
	struct vctx *v = arg;
	v->rep->wal_kept_files++;
	problem(v,
		"WAL damage kept in %s (%llu bytes): acknowledged writes in it were not "
		"replayed; inspect it, then remove the file",
		path, (unsigned long long)bytes);
}

/* Every quarantine/wal-*.damaged file (damaged WAL bytes a recovery kept)
 * is a problem until the operator removes it. */
static void verify_kept_wal(struct vctx *v, const char *data_dir)
{
	char qdir[PATH_MAX];
	snprintf(qdir, sizeof(qdir), "%s/quarantine", data_dir);
	sto_wal_kept_each(qdir, problem_kept_wal, v);
}

int sto_verify(struct sto *s, bool quarantine, sto_problem_fn fn, void *arg,
	       struct sto_verify_report *rep)
{
	struct vctx v = {.s = s, .quarantine = quarantine, .fn = fn, .arg = arg, .rep = rep};
	struct evv ev = {.v = &v};
	memset(rep, 0, sizeof(*rep));
	rdb_buf_init(&ev.entry, STO_EVENTRY_FIXED + (1u << 20));
	sto_admin_parts(s, &v.p);
	rdb_buf_init(&v.rec, REC_MAX);
	sto_compact_pause(s);
	int rc = walk_segments(&v);
	if (rc == 0)
		rc = check_index(&v, &ev);
	if (rc == 0 && quarantine && (v.nbad || ev.nbad || v.nfix || ev.nfix)) {
		rc = quarantine_all(&v, &ev);
		sti_extent_reset(s); /* chunk entries removed or their stats recomputed */
	}
	if (rc == 0)
		verify_kept_wal(&v, v.p.dir);
	if (rc == 0)
		sto_jobmeta_verify(v.p.dir, fn, arg, rep);
	sto_compact_resume(s);
	ev_kept_free(ev.bad, ev.nbad);
	ev_kept_free(ev.fix, ev.nfix);
	rdb_buf_free(&ev.entry);
	free(v.bad);
	free(v.fix);
	mdl_cols_free(&v.cols);
	rdb_buf_free(&v.rec);
	return rc;
}

/* What verify tracks in one WAL file while it walks the records the way
 * replay does (store.c, replay_cb): the series ids its definitions
 * records (type 4) define, the compact records (type 5) naming one that
 * is not defined before them, and the records with a valid checksum that
 * replay would skip because they do not parse or have an unknown type.
 * Both are skipped by the next start, so both are problems here. */
struct wal_ids {
	struct rdb_map defined;	 /* sid -> (void *)1 */
	struct mdl_batch *b;	 /* scratch: the points of every type are decoded */
	struct mdl_events *ev;	 /* scratch: events are decoded */
	uint64_t records;	 /* intact records seen in this file */
	uint64_t undefined;	 /* records naming an undefined id */
	uint64_t first_sid;	 /* the first such id, for the message */
	uint64_t unparsed;	 /* records replay skips as not parsing */
	uint64_t first_unparsed; /* the first one: its number among the file's records
				  * whose checksum holds (1..; damaged ranges not counted) */
	uint8_t first_type;	 /* and its type */
	const char *first_why;	 /* and why (static text) */
};

static int wal_id_define(void *arg, uint64_t sid, const struct sto_wal_key *k)
{
	struct wal_ids *w = arg;
	(void)k;
	return rdb_map_put(&w->defined, sid, (void *)1);
}

/* The key of a defined id: any valid one does (verify asks only whether
 * replay would take the record, not what it holds). */
static const struct sto_wal_key *wal_id_known(void *arg, uint64_t sid)
{
	static const struct sto_wal_key any = {
	    .job = "j", .metric = "m", .rank = 0, .job_len = 1, .metric_len = 1};
	struct wal_ids *w = arg;
	return rdb_map_get(&w->defined, sid) ? &any : NULL;
}

/* Checks a batch record (type 3, or compact: type 5) as replay_batch
 * parses it: the same split, then the points (compact ones through the
 * file's defined ids), then the events. 0, RDB_ENOTFOUND (*sid names an undefined id),
 * RDB_ECORRUPT, or -ENOMEM. */
static int wal_check_batch(struct wal_ids *w, const uint8_t *p, size_t len, bool compact,
			   uint64_t *sid)
{
	struct sto_batch_parts bp;
	int rc = sto_batch_split(p, len, &bp);
	if (rc == 0 && bp.points_len)
		rc = compact ? sto_batch_decode_compact(w->b, bp.points, bp.points_len,
							wal_id_known, w, sid)
			     : sto_batch_decode(w->b, bp.points, bp.points_len);
	if (rc == 0 && bp.events_len)
		rc = sto_events_decode(w->ev, bp.events, bp.events_len);
	return rc;
}

static int wal_ids_cb(void *arg, uint64_t gen, uint8_t type, const uint8_t *p, size_t len)
{
	struct wal_ids *w = arg;
	uint64_t sid = 0;
	int rc;
	(void)gen;
	w->records++;
	if (type == STO_WAL_REC_POINTS)
		rc = sto_batch_decode(w->b, p, len);
	else if (type == STO_WAL_REC_BATCH || type == STO_WAL_REC_CBATCH)
		rc = wal_check_batch(w, p, len, type == STO_WAL_REC_CBATCH, &sid);
	else if (type == STO_WAL_REC_DEFS)
		rc = sto_defs_decode(p, len, wal_id_define, w);
	else
		rc = RDB_EFORMAT;
	switch (sto_wal_rec_fate(type, rc)) { /* replay's own rule */
	case STO_WAL_TAKE:
		return 0;
	case STO_WAL_SKIP_UNDEFINED:
		if (w->undefined++ == 0)
			w->first_sid = sid;
		return 0;
	case STO_WAL_SKIP_UNPARSED:
	case STO_WAL_SKIP_UNKNOWN:
		if (w->unparsed++ == 0) {
			w->first_unparsed = w->records;
			w->first_type = type;
			w->first_why = rc == RDB_EFORMAT ? "unknown record type" : "does not parse";
		}
		return 0;
	case STO_WAL_STOP:
		break;
	}
	return rc; /* -ENOMEM: stop */
}

/* Reports one WAL file's replay result: damage in the middle, a bad tail of
 * an older file and a whole-length corrupt record ending the newest one are
 * problems; an incomplete record ending the newest file (a crash) is not. */
static void verify_wal_file(struct vctx *v, const char *dir, uint64_t gen, bool newest,
			    const struct sto_wal_replay_result *r)
{
	uint32_t shown = r->ndamaged < STO_WAL_DAMAGE_KEEP ? r->ndamaged : STO_WAL_DAMAGE_KEEP;
	for (uint32_t i = 0; i < shown; i++)
		problem(v,
			"WAL %s/wal-%016llx.log: damaged record (%s) at offset %llu, %llu bytes; "
			"intact records follow it. The next start replays them and keeps the "
			"damaged bytes in quarantine/",
			dir, (unsigned long long)gen, r->damaged[i].why,
			(unsigned long long)r->damaged[i].off,
			(unsigned long long)r->damaged[i].len);
	if (r->ndamaged > shown) {
		v->rep->problems += r->ndamaged - shown;
		if (v->fn)
			v->fn(v->arg, "... more damaged WAL ranges in the same file");
	}
	if (r->tail == 2 || (r->tail && !newest))
		problem(v,
			"WAL %s/wal-%016llx.log: %s record at offset %llu and %llu bytes after it, "
			"nothing intact after them: %s",
			dir, (unsigned long long)gen, r->tail == 1 ? "incomplete" : "corrupt",
			(unsigned long long)r->valid_bytes,
			(unsigned long long)(r->file_bytes - r->valid_bytes),
			newest ? "a whole record with a bad checksum (a crash leaves an incomplete "
				 "one; a power loss can leave this for an unacknowledged record)"
			       : "in a WAL file that is not the newest (no crash tears those)");
}

int sto_verify_wal(const char *data_dir, sto_problem_fn fn, void *arg,
		   struct sto_verify_report *rep)
{
	char dir[PATH_MAX];
	uint64_t *gens = NULL;
	size_t n = 0;
	struct vctx v = {.fn = fn, .arg = arg, .rep = rep};
	snprintf(dir, sizeof(dir), "%s/wal", data_dir);
	int rc = sto_wal_list(dir, &gens, &n);
	if (rc == -ENOENT)
		return 0;
	struct wal_ids ids = {0};
	if (rc == 0)
		rc = mdl_batch_new(SIZE_MAX, SIZE_MAX, &ids.b);
	if (rc == 0) /* the limits replay decodes with (store.c, recover) */
		rc = mdl_events_new(SIZE_MAX, STO_WAL_MAX_PAYLOAD, &ids.ev);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct sto_wal_replay_result res = {0};
		rdb_map_free(&ids.defined); /* definitions hold within their file */
		ids.records = ids.undefined = ids.unparsed = 0;
		int r2 = sto_wal_replay(dir, gens[i], wal_ids_cb, &ids, &res);
		if (r2 == -ENOMEM) {
			rc = r2;
			break;
		}
		rep->wal_files++;
		rep->wal_damaged_ranges += res.ndamaged;
		if (r2)
			problem(
			    &v,
			    "WAL %s/wal-%016llx.log: cannot be replayed (%s): its header is "
			    "unreadable, or a record stops replay; the next start fails on it too",
			    dir, (unsigned long long)gens[i], rdb_strerror(r2));
		else
			verify_wal_file(&v, dir, gens[i], i + 1 == n, &res);
		if (ids.undefined)
			problem(&v,
				"WAL %s/wal-%016llx.log: %llu record(s) name a series id that no "
				"earlier record of the file defines (the first: %llu); their "
				"definitions were lost with damaged bytes or in a record that does "
				"not parse, and the next start skips those records",
				dir, (unsigned long long)gens[i], (unsigned long long)ids.undefined,
				(unsigned long long)ids.first_sid);
		if (ids.unparsed)
			problem(&v,
				"WAL %s/wal-%016llx.log: %llu record(s) with a valid checksum that "
				"the next start skips, their writes lost (the first: checksummed "
				"record %llu of the file, counting only records whose checksum "
				"holds; type %u, %s); their checksums hold, so they were "
				"written that way",
				dir, (unsigned long long)gens[i], (unsigned long long)ids.unparsed,
				(unsigned long long)ids.first_unparsed, ids.first_type,
				ids.first_why);
	}
	rdb_map_free(&ids.defined);
	mdl_batch_free(ids.b);
	mdl_events_free(ids.ev);
	free(gens);
	return rc;
}

/* ---- backup and restore ----------------------------------------------------------- */

static int copy_file(const char *from, const char *to)
{
	char buf[1 << 16];
	int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, rc = 0;
	if (in < 0)
		return -errno;
	out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (out < 0)
		rc = -errno;
	for (ssize_t n; rc == 0 && (n = read(in, buf, sizeof(buf))) != 0;) {
		if (n < 0 || write(out, buf, (size_t)n) != n)
			rc = -EIO;
	}
	if (rc == 0 && fsync(out) != 0)
		rc = -errno;
	close(in);
	if (out >= 0)
		close(out);
	return rc;
}

static int link_or_copy(const char *from, const char *to)
{
	if (link(from, to) == 0)
		return 0;
	if (errno != EXDEV && errno != EPERM && errno != EMLINK)
		return -errno;
	return copy_file(from, to);
}

/* Links or copies every regular file of dir `from` whose name starts with
 * prefix into `to`. */
static int copy_dir(const char *from, const char *to, const char *prefix, bool link_ok,
		    uint64_t *files, uint64_t *bytes)
{
	DIR *d = opendir(from);
	struct dirent *de;
	int rc = d ? 0 : -errno;
	if (rc == 0 && mkdir(to, 0755) != 0 && errno != EEXIST)
		rc = -errno;
	while (rc == 0 && (de = readdir(d)) != NULL) {
		char a[PATH_MAX + 300], b[PATH_MAX + 300];
		struct stat st;
		if (strncmp(de->d_name, prefix, strlen(prefix)) != 0 || de->d_name[0] == '.')
			continue;
		snprintf(a, sizeof(a), "%s/%s", from, de->d_name);
		snprintf(b, sizeof(b), "%s/%s", to, de->d_name);
		if (stat(a, &st) != 0 || !S_ISREG(st.st_mode))
			continue;
		rc = link_ok ? link_or_copy(a, b) : copy_file(a, b);
		if (files)
			(*files)++;
		if (bytes)
			*bytes += (uint64_t)st.st_size;
	}
	if (d)
		closedir(d);
	return rc;
}

/* Creates dir, which must not exist or be empty. */
static int fresh_dir(const char *dir)
{
	if (mkdir(dir, 0755) == 0)
		return 0;
	if (errno != EEXIST)
		return -errno;
	DIR *d = opendir(dir);
	struct dirent *de;
	int rc = d ? 0 : -errno;
	while (rc == 0 && (de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			rc = -ENOTEMPTY;
	if (d)
		closedir(d);
	return rc;
}

/* Whether dir (which may not exist yet; its parent must) is the data
 * directory or lies inside it: a backup there would be read as data (a
 * directory named like a WAL file stops the next start). */
static bool inside_data_dir(const char *dir, const char *data_dir)
{
	char data[PATH_MAX], parent[PATH_MAX], canon[PATH_MAX], full[PATH_MAX * 2 + 2];
	if (!realpath(data_dir, data))
		return false;
	if (!realpath(dir, full)) {
		snprintf(parent, sizeof(parent), "%s", dir);
		char *slash = strrchr(parent, '/');
		const char *base = slash ? slash + 1 : dir;
		if (slash == parent)
			snprintf(parent, sizeof(parent), "/");
		else if (slash)
			*slash = 0;
		else
			snprintf(parent, sizeof(parent), ".");
		if (!realpath(parent, canon))
			return false; /* the mkdir fails and says why */
		snprintf(full, sizeof(full), "%s/%s", strcmp(canon, "/") ? canon : "", base);
	}
	size_t n = strlen(data);
	return strncmp(full, data, n) == 0 && (full[n] == 0 || full[n] == '/');
}

int sto_backup(struct sto *s, const char *dir, struct sto_backup_result *r)
{
	struct sto_admin_parts p;
	char path[PATH_MAX + 32], from[PATH_MAX + 32];
	memset(r, 0, sizeof(*r));
	sto_admin_parts(s, &p);
	if (inside_data_dir(dir, p.dir)) {
		rdb_error("admin",
			  "backup into %s refused: it is inside the data directory %s "
			  "(a backup must live elsewhere)",
			  dir, p.dir);
		return RDB_EINVAL;
	}
	int rc = fresh_dir(dir);
	if (rc)
		return rc;
	rc = sto_checkpoint(s);
	if (rc)
		return rc;
	sto_compact_pause(s);
	snprintf(path, sizeof(path), "%s/index", dir);
	rc = sto_index_copy(p.ix, path);
	snprintf(path, sizeof(path), "%s/chunks", dir);
	if (rc == 0)
		rc = copy_dir(p.seg_dir, path, "seg-", true, &r->segments, &r->bytes);
	sto_compact_resume(s);
	snprintf(path, sizeof(path), "%s/wal", dir);
	if (rc == 0 && mkdir(path, 0755) != 0)
		rc = -errno;
	snprintf(from, sizeof(from), "%s/FORMAT", p.dir);
	snprintf(path, sizeof(path), "%s/FORMAT", dir);
	if (rc == 0)
		rc = copy_file(from, path);
	if (rc == 0)
		rc = sto_jobmeta_copy(p.dir, dir, &r->meta_docs, &r->meta_damaged);
	if (rc)
		rdb_error("admin", "backup into %s failed: %s", dir, rdb_strerror(rc));
	else
		rdb_info("admin",
			 "backup into %s: index snapshot, %llu segment files "
			 "(%llu bytes), %llu job metadata documents (%llu of them damaged, "
			 "copied as they are)",
			 dir, (unsigned long long)r->segments, (unsigned long long)r->bytes,
			 (unsigned long long)r->meta_docs, (unsigned long long)r->meta_damaged);
	return rc;
}

int sto_restore(const char *backup_dir, const char *dir)
{
	char a[PATH_MAX + 32], b[PATH_MAX + 32];
	snprintf(a, sizeof(a), "%s/FORMAT", backup_dir);
	if (access(a, R_OK) != 0) {
		rdb_error("admin", "%s is not a rankdb backup (no FORMAT file)", backup_dir);
		return RDB_EFORMAT;
	}
	int rc = fresh_dir(dir);
	snprintf(b, sizeof(b), "%s/FORMAT", dir);
	if (rc == 0)
		rc = copy_file(a, b);
	snprintf(a, sizeof(a), "%s/index", backup_dir);
	snprintf(b, sizeof(b), "%s/index", dir);
	if (rc == 0)
		rc = copy_dir(a, b, "data.mdb", false, NULL, NULL);
	snprintf(a, sizeof(a), "%s/chunks", backup_dir);
	snprintf(b, sizeof(b), "%s/chunks", dir);
	if (rc == 0)
		rc = copy_dir(a, b, "seg-", false, NULL, NULL);
	uint64_t docs = 0, damaged = 0;
	if (rc == 0)
		rc = sto_jobmeta_copy(backup_dir, dir, &docs, &damaged);
	snprintf(b, sizeof(b), "%s/wal", dir);
	if (rc == 0 && mkdir(b, 0755) != 0)
		rc = -errno;
	if (rc == 0 && damaged)
		rdb_warn("admin",
			 "restore into %s: %llu of %llu job metadata documents are damaged; they "
			 "are not served, 'rankctl verify' names them",
			 dir, (unsigned long long)damaged, (unsigned long long)docs);
	return rc;
}
