/* segment.c - segment files of chunk records.
 *
 * A segment starts with a 32-byte header and holds chunk records back to
 * back (storage/format.h). Records are appended through the flusher's
 * io_uring ring; a failed append truncates the file back to its previous
 * size so that a record is either whole or absent. The index (LMDB) says
 * which records are live; bytes of records no index entry points at (a
 * crash before the index commit, dropped chunks) are dead space that
 * compaction reclaims.
 *
 * Reads verify everything: the record header must match the index entry
 * (magic, series id, uid, lengths) and the XXH3 checksum must match, else
 * RDB_ECORRUPT; corrupt data is never returned as points.
 *
 * Supersede records (magic SUP1) share the chunk record header; they carry
 * no points, only the list of chunks a merged chunk replaces, and are never
 * read by queries: only by rebuild-index, verify and compaction.
 */
#include "storage/chunk/segment.h"
#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"
#include "common/rdb_map.h"
#include "common/rdb_time.h"
#include "storage/io/fault.h"
#include "storage/format.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct sto_seg_writer {
	int fd;
	uint64_t id;
	uint64_t size; /* bytes written so far, header included */
	struct sto_ring *ring;
	char path[4096];
};

void sto_seg_path(const char *dir, uint64_t id, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s/seg-%016llx.dat", dir, (unsigned long long)id);
}

static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) ? -errno : 0;
	close(fd);
	return rc;
}

int sto_seg_create(const char *dir, uint64_t id, struct sto_ring *ring, struct sto_seg_writer **out)
{
	struct sto_seg_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->id = id;
	w->ring = ring;
	sto_seg_path(dir, id, w->path, sizeof(w->path));
	int rc = sto_fault_hit(STO_FP_SEG_CREATE);
	w->fd = rc ? -1 : open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (w->fd < 0) {
		rc = rc ? rc : -errno;
		rdb_error("segment", "cannot create %s: %s", w->path, strerror(-rc));
		free(w);
		return rc;
	}
	uint8_t hdr[STO_SEG_HEADER_SIZE] = {0};
	memcpy(hdr, STO_SEG_MAGIC, 8);
	rdb_put_le32(hdr + 8, STO_SEG_VERSION);
	rdb_put_le32(hdr + 12, STO_SEG_HEADER_SIZE);
	rdb_put_le64(hdr + 16, id);
	rdb_put_le64(hdr + 24, (uint64_t)rdb_now_ns());
	struct iovec iov = {hdr, sizeof(hdr)};
	rc = sto_ring_writev(ring, w->fd, &iov, 1, 0, true);
	if (rc == 0)
		rc = fsync_dir(dir);
	if (rc) {
		rdb_error("segment", "cannot initialize %s: %s", w->path, rdb_strerror(rc));
		close(w->fd);
		unlink(w->path);
		free(w);
		return rc;
	}
	w->size = STO_SEG_HEADER_SIZE;
	*out = w;
	return 0;
}

uint64_t sto_seg_id(const struct sto_seg_writer *w)
{
	return w->id;
}

uint64_t sto_seg_size(const struct sto_seg_writer *w)
{
	return w->size;
}

int sto_seg_append(struct sto_seg_writer *w, const void *buf, size_t len)
{
	return sto_seg_append_at(w, buf, len, STO_FP_SEG_APPEND);
}

int sto_seg_append_at(struct sto_seg_writer *w, const void *buf, size_t len,
		      enum sto_fault_point point)
{
	struct iovec iov = {(void *)buf, len};
	int rc = sto_fault_hit(point);
	if (rc == 0 && point != STO_FP_SEG_APPEND)
		rc = sto_fault_hit(STO_FP_SEG_APPEND);
	if (rc) { /* as a full disk would: a torn part lands, then the error */
		iov.iov_len = len / 2;
		(void)sto_ring_writev(w->ring, w->fd, &iov, 1, w->size, false);
	} else {
		rc = sto_ring_writev(w->ring, w->fd, &iov, 1, w->size, false);
	}
	if (rc) {
		static struct rdb_log_ratelimit rl; /* the flusher retries every 200 ms */
		rdb_log_limited(&rl, 10, RDB_LOG_ERROR, "segment",
				"append of %zu bytes to %s at offset %llu failed: %s; "
				"truncating back, the chunks stay in memory and the WAL",
				len, w->path, (unsigned long long)w->size, rdb_strerror(rc));
		if (ftruncate(w->fd, (off_t)w->size) != 0)
			rdb_error("segment", "truncate of %s failed too: %s", w->path,
				  strerror(errno));
		return rc;
	}
	w->size += len;
	return 0;
}

int sto_seg_truncate(struct sto_seg_writer *w, uint64_t size)
{
	int rc = sto_fault_hit(STO_FP_SEG_TRUNCATE);
	if (rc == 0 && ftruncate(w->fd, (off_t)size) != 0)
		rc = -errno;
	if (rc) {
		rdb_error("segment", "cutting %s back to %llu bytes failed: %s", w->path,
			  (unsigned long long)size, rdb_strerror(rc));
		return rc;
	}
	w->size = size;
	return 0;
}

int sto_seg_sync(struct sto_seg_writer *w)
{
	int rc = sto_fault_hit(STO_FP_SEG_SYNC);
	if (rc == 0)
		rc = sto_ring_datasync(w->ring, w->fd);
	if (rc)
		rdb_error("segment", "fdatasync of %s failed: %s", w->path, rdb_strerror(rc));
	return rc;
}

int sto_seg_close(struct sto_seg_writer *w)
{
	if (!w)
		return 0;
	int rc = sto_seg_sync(w);
	close(w->fd);
	free(w);
	return rc;
}

void sto_rec_header(uint8_t *h, uint32_t magic, uint32_t payload_len, uint64_t series_id,
		    uint64_t uid, uint64_t gen, uint32_t count, uint32_t extra)
{
	memset(h, 0, STO_CHUNK_HEADER_SIZE);
	rdb_put_le32(h, magic);
	rdb_put_le32(h + 4, payload_len);
	rdb_put_le64(h + 8, series_id);
	rdb_put_le64(h + 16, uid);
	rdb_put_le64(h + 24, gen);
	rdb_put_le32(h + 32, count);
	rdb_put_le32(h + 36, extra);
}

uint64_t sto_rec_hash(const uint8_t *rec, size_t hashed_payload)
{
	return rdb_hash64_2(rec, 40, rec + STO_CHUNK_HEADER_SIZE, hashed_payload, 0);
}

/* Stores the checksum of a record whose whole payload is checksummed. */
static void record_seal(uint8_t *h, size_t payload)
{
	rdb_put_le64(h + 40, sto_rec_hash(h, payload));
}

int sto_chunk_frame(struct rdb_buf *out, uint32_t magic, uint64_t series_id, uint64_t uid,
		    uint64_t gen, uint32_t npoints, const uint8_t *codec, size_t codec_len,
		    const struct mdl_series_key *key)
{
	size_t payload = codec_len + sto_key_rec_len(key);
	if (payload > STO_CHUNK_MAX_PAYLOAD)
		return RDB_ELIMIT;
	size_t start = out->len;
	int rc = rdb_buf_reserve(out, STO_CHUNK_HEADER_SIZE + payload);
	if (rc)
		return rc;
	uint8_t *h = out->data + start;
	sto_rec_header(h, magic, (uint32_t)payload, series_id, uid, gen, npoints, 0);
	uint8_t *p = h + STO_CHUNK_HEADER_SIZE;
	memcpy(p, codec, codec_len);
	sto_key_rec_put(p + codec_len, key);
	record_seal(h, payload);
	out->len = start + STO_CHUNK_HEADER_SIZE + payload;
	return 0;
}

int sto_chunk_check(const uint8_t *rec, size_t len, uint32_t magic, uint64_t series_id,
		    uint64_t uid, const uint8_t **payload, size_t *payload_len, const char **why)
{
	if (len < STO_CHUNK_HEADER_SIZE) {
		*why = "record shorter than a chunk header";
		return RDB_ECORRUPT;
	}
	uint32_t plen = rdb_get_le32(rec + 4);
	if (rdb_get_le32(rec) != magic) {
		*why = "bad chunk magic";
		return RDB_ECORRUPT;
	}
	if ((size_t)plen + STO_CHUNK_HEADER_SIZE != len) {
		*why = "chunk length does not match the index";
		return RDB_ECORRUPT;
	}
	if (rdb_get_le64(rec + 8) != series_id || rdb_get_le64(rec + 16) != uid) {
		*why = "chunk belongs to another series or chunk id than the index says";
		return RDB_ECORRUPT;
	}
	if (sto_rec_hash(rec, plen) != rdb_get_le64(rec + 40)) {
		*why = "chunk checksum mismatch";
		return RDB_ECORRUPT;
	}
	*payload = rec + STO_CHUNK_HEADER_SIZE;
	*payload_len = plen;
	return 0;
}

static bool sup_shape_ok(const struct sto_sup *sup)
{
	if (sup->series_id == 0 || sup->nsrc < 2 || sup->nsrc > STO_SUP_MAX_SOURCES)
		return false;
	for (uint32_t i = 0; i < sup->nsrc; i++)
		if (sup->src[i].uid >= sup->merged_uid ||
		    (i > 0 && sup->src[i].uid <= sup->src[i - 1].uid))
			return false;
	return true;
}

int sto_sup_frame(struct rdb_buf *out, const struct sto_sup *sup)
{
	if (!sup_shape_ok(sup))
		return RDB_EINVAL;
	size_t payload = STO_SUP_FIXED + (size_t)sup->nsrc * STO_SUP_SOURCE_SIZE;
	size_t start = out->len;
	int rc = rdb_buf_reserve(out, STO_CHUNK_HEADER_SIZE + payload);
	if (rc)
		return rc;
	uint8_t *h = out->data + start;
	sto_rec_header(h, STO_SUP_MAGIC, (uint32_t)payload, sup->series_id, sup->merged_uid,
		       sup->gen, sup->nsrc, 0);
	uint8_t *p = h + STO_CHUNK_HEADER_SIZE;
	rdb_put_le64(p, (uint64_t)sup->merged_min_ts_ns);
	p += STO_SUP_FIXED;
	for (uint32_t i = 0; i < sup->nsrc; i++, p += STO_SUP_SOURCE_SIZE) {
		rdb_put_le64(p, sup->src[i].uid);
		rdb_put_le64(p + 8, (uint64_t)sup->src[i].min_ts_ns);
	}
	record_seal(h, payload);
	out->len = start + STO_CHUNK_HEADER_SIZE + payload;
	return 0;
}

/* Header checks of a supersede record; the count gives the length. */
static const char *sup_header_why(const uint8_t *rec, size_t len)
{
	if (len < STO_CHUNK_HEADER_SIZE)
		return "record shorter than a record header";
	if (rdb_get_le32(rec) != STO_SUP_MAGIC)
		return "bad supersede record magic";
	uint32_t n = rdb_get_le32(rec + 32);
	uint64_t want = STO_CHUNK_HEADER_SIZE + STO_SUP_FIXED + (uint64_t)n * STO_SUP_SOURCE_SIZE;
	if (rdb_get_le32(rec + 4) + (uint64_t)STO_CHUNK_HEADER_SIZE != len || want != len)
		return "supersede record length does not match its source count";
	if (rdb_get_le32(rec + 36) != 0)
		return "supersede record reserved bytes are not zero";
	return NULL;
}

int sto_sup_parse(const uint8_t *rec, size_t len, struct sto_sup *sup, const char **why)
{
	const uint8_t *payload;
	size_t plen;
	*why = sup_header_why(rec, len);
	if (*why)
		return RDB_ECORRUPT;
	int rc = sto_chunk_check(rec, len, STO_SUP_MAGIC, rdb_get_le64(rec + 8),
				 rdb_get_le64(rec + 16), &payload, &plen, why);
	if (rc)
		return rc;
	struct sto_sup x = {.series_id = rdb_get_le64(rec + 8),
			    .merged_uid = rdb_get_le64(rec + 16),
			    .merged_min_ts_ns = (int64_t)rdb_get_le64(payload),
			    .gen = rdb_get_le64(rec + 24),
			    .nsrc = rdb_get_le32(rec + 32)};
	if (x.nsrc < 2 || x.nsrc > STO_SUP_MAX_SOURCES) {
		*why = "supersede record source count out of range";
		return RDB_ECORRUPT;
	}
	x.src = malloc((size_t)x.nsrc * sizeof(*x.src));
	if (!x.src)
		return -ENOMEM;
	const uint8_t *p = payload + STO_SUP_FIXED;
	for (uint32_t i = 0; i < x.nsrc; i++, p += STO_SUP_SOURCE_SIZE) {
		x.src[i].uid = rdb_get_le64(p);
		x.src[i].min_ts_ns = (int64_t)rdb_get_le64(p + 8);
	}
	if (!sup_shape_ok(&x)) {
		free(x.src);
		*why = "supersede record names a bad series or unordered / too new source uids";
		return RDB_ECORRUPT;
	}
	*sup = x;
	return 0;
}

struct sto_seg_readers {
	pthread_mutex_t lock;
	struct rdb_map fds; /* segment id + 1 -> (void *)(intptr_t)fd */
	char dir[4096];
};

int sto_seg_readers_new(const char *dir, struct sto_seg_readers **out)
{
	struct sto_seg_readers *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	pthread_mutex_init(&r->lock, NULL);
	snprintf(r->dir, sizeof(r->dir), "%s", dir);
	*out = r;
	return 0;
}

void sto_seg_readers_free(struct sto_seg_readers *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->fds.cap; i++)
		if (r->fds.keys[i])
			close((int)(intptr_t)r->fds.vals[i]);
	rdb_map_free(&r->fds);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

static int reader_fd(struct sto_seg_readers *r, uint64_t id, int *fd)
{
	int rc = 0;
	pthread_mutex_lock(&r->lock);
	void *v = rdb_map_get(&r->fds, id + 1);
	if (v) {
		*fd = (int)(intptr_t)v;
		goto out;
	}
	char path[4200];
	sto_seg_path(r->dir, id, path, sizeof(path));
	int f = open(path, O_RDONLY | O_CLOEXEC);
	if (f < 0) {
		rc = -errno;
		goto out;
	}
	rc = rdb_map_put(&r->fds, id + 1, (void *)(intptr_t)f);
	if (rc) {
		close(f);
		goto out;
	}
	*fd = f;
out:
	pthread_mutex_unlock(&r->lock);
	return rc;
}

int sto_seg_read(struct sto_seg_readers *r, uint64_t id, uint64_t off, void *buf, size_t len)
{
	int fd;
	int rc = reader_fd(r, id, &fd);
	if (rc)
		return rc;
	size_t done = 0;
	while (done < len) {
		ssize_t n = pread(fd, (uint8_t *)buf + done, len - done, (off_t)(off + done));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return RDB_ECORRUPT; /* file shorter than the index says */
		done += (size_t)n;
	}
	return 0;
}
