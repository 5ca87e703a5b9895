/* jobmeta.c - job metadata documents owned by the storage engine
 * (contract: jobmeta.h; layout: storage/format.h and docs/FORMAT.md).
 *
 * Files in <data_dir>/meta/, told apart by their name's ending:
 *   <job>.meta              a document: 24-byte header (magic, version,
 *                           length, XXH3-64 over header, job id and bytes),
 *                           then the bytes the client sent
 *   <job>.json              legacy document (format version 0: the bare
 *                           bytes, no checksum), upgraded at open
 *   anything with ".tmp-"   a temporary file of an interrupted write
 * Temporary names end in six characters of [A-Za-z0-9] (mkostemp), so they
 * never end in ".meta" or ".json"; job ids cannot contain '/'.
 *
 * A write goes to a unique temporary file in meta/, is fsynced, renamed over
 * <job>.meta, and meta/ is fsynced: a crash leaves the old document or the
 * new one, never a mix. Upgrade at open (the LOCK is held, no other writer):
 * for each legacy <job>.json, <job>.meta is written that way first (unless it
 * exists: it is newer), then <job>.json is unlinked and meta/ fsynced, so a
 * crash in between leaves both and the next open finishes the job.
 *
 * Every read checks the file whole (exact length, magic, version, checksum)
 * before one byte is returned. Threading: no shared mutable state but
 * atomic counters. Failure: errors are returned; damage is logged once per
 * read with what to do.
 */
#include "storage/jobmeta/jobmeta.h"
#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"
#include "storage/store_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILE_MAX     (STO_JOBMETA_HEADER_SIZE + STO_JOBMETA_MAX_BYTES)
#define SUFFIX_DOC   ".meta"
#define SUFFIX_OLD   ".json"
#define DIR_PATH_MAX (PATH_MAX + 8)
#define FILE_PATH    (DIR_PATH_MAX + 300) /* a dir, "/", a d_name */

struct sto_jobmeta {
	char dir[DIR_PATH_MAX]; /* <data_dir>/meta */
	bool read_only;
	uint64_t damaged_at_open, upgraded;
	_Atomic uint64_t damaged_reads;
};

/* ---- encoding ----------------------------------------------------------------------- */

/* XXH3-64 of the document, seeded with XXH3-64 (seed 0) of header bytes
 * 0..15 followed by the job id: one value covers all three, no allocation. */
static uint64_t doc_hash(const uint8_t *hdr, const char *job, const void *doc, size_t len)
{
	uint8_t pre[16 + MDL_JOB_MAX];
	size_t n = strlen(job);
	if (n > MDL_JOB_MAX)
		n = MDL_JOB_MAX; /* callers pass valid ids */
	memcpy(pre, hdr, 16);
	memcpy(pre + 16, job, n);
	return rdb_hash64(doc, len, rdb_hash64(pre, 16 + n, 0));
}

int sto_jobmeta_encode(const char *job, const void *doc, size_t len, struct rdb_buf *out)
{
	uint8_t hdr[STO_JOBMETA_HEADER_SIZE];
	if (len > STO_JOBMETA_MAX_BYTES)
		return RDB_ELIMIT;
	memcpy(hdr, STO_JOBMETA_MAGIC, 8);
	rdb_put_le32(hdr + 8, STO_JOBMETA_VERSION);
	rdb_put_le32(hdr + 12, (uint32_t)len);
	rdb_put_le64(hdr + 16, doc_hash(hdr, job, doc, len));
	int rc = rdb_buf_reserve(out, sizeof(hdr) + len);
	if (rc == 0)
		rc = rdb_buf_append(out, hdr, sizeof(hdr));
	if (rc == 0)
		rc = rdb_buf_append(out, doc, len);
	return rc;
}

int sto_jobmeta_decode(const char *job, const uint8_t *img, size_t img_len, const uint8_t **doc,
		       size_t *len, const char **why)
{
	if (img_len < STO_JOBMETA_HEADER_SIZE || memcmp(img, STO_JOBMETA_MAGIC, 8) != 0) {
		*why = "not a job metadata file (bad magic or shorter than its header)";
		return RDB_ECORRUPT;
	}
	if (rdb_get_le32(img + 8) != STO_JOBMETA_VERSION) {
		*why = "unknown job metadata version";
		return RDB_EFORMAT;
	}
	uint32_t n = rdb_get_le32(img + 12);
	if (n > STO_JOBMETA_MAX_BYTES || (size_t)n + STO_JOBMETA_HEADER_SIZE != img_len) {
		*why = "the file's length does not match the length in its header";
		return RDB_ECORRUPT;
	}
	const uint8_t *body = img + STO_JOBMETA_HEADER_SIZE;
	if (doc_hash(img, job, body, n) != rdb_get_le64(img + 16)) {
		*why = "checksum mismatch (the bytes changed after they were written)";
		return RDB_ECORRUPT;
	}
	*doc = body;
	*len = n;
	return 0;
}

/* ---- files -------------------------------------------------------------------------- */

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n > k && strcmp(s + n - k, suffix) == 0;
}

/* The job id of a document file name (".meta" or, with legacy, ".json"),
 * or false. */
static bool name_job(const char *name, bool legacy, char job[MDL_JOB_MAX + 1])
{
	const char *suffix = legacy ? SUFFIX_OLD : SUFFIX_DOC;
	if (!ends_with(name, suffix))
		return false;
	size_t n = strlen(name) - strlen(suffix);
	if (n > MDL_JOB_MAX || !mdl_job_valid(name, n))
		return false;
	memcpy(job, name, n);
	job[n] = 0;
	return true;
}

static int fsync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) ? -errno : 0;
	close(fd);
	return rc;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Reads the whole file at path into out (bounded by max bytes: RDB_ELIMIT
 * beyond). */
static int read_file(const char *path, size_t max, struct rdb_buf *out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	int rc = fstat(fd, &st) ? -errno : 0;
	if (rc == 0 && (uint64_t)st.st_size > max)
		rc = RDB_ELIMIT;
	out->len = 0;
	if (rc == 0)
		rc = rdb_buf_reserve(out, (size_t)st.st_size + 1);
	while (rc == 0) {
		size_t room = out->cap - out->len;
		ssize_t n = read(fd, out->data + out->len, room);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			rc = -errno;
		else if (n == 0)
			break;
		else if ((out->len += (size_t)n) > max)
			rc = RDB_ELIMIT; /* grew while read */
		else if (out->len == out->cap)
			rc = rdb_buf_reserve(out, 4096);
	}
	close(fd);
	return rc;
}

/* Writes img as dir/<job>.meta: temporary file, fsync, rename, dir fsync. */
static int write_doc_file(const char *dir, const char *job, const struct rdb_buf *img)
{
	char tmp[FILE_PATH], path[FILE_PATH];
	snprintf(tmp, sizeof(tmp), "%s/%s%s.tmp-XXXXXX", dir, job, SUFFIX_DOC);
	snprintf(path, sizeof(path), "%s/%s%s", dir, job, SUFFIX_DOC);
	int fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = write_all(fd, img->data, img->len);
	if (rc == 0 && fsync(fd))
		rc = -errno;
	if (close(fd) && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path))
		rc = -errno;
	if (rc)
		unlink(tmp);
	else
		rc = fsync_dir(dir);
	return rc;
}

/* Creates meta/ if needed (durably: the data directory is fsynced). */
static int make_meta_dir(const char *dir)
{
	if (mkdir(dir, 0755) != 0)
		return errno == EEXIST ? 0 : -errno;
	char parent[DIR_PATH_MAX];
	snprintf(parent, sizeof(parent), "%s", dir);
	char *slash = strrchr(parent, '/');
	if (slash)
		*slash = 0;
	return fsync_dir(slash ? parent : ".");
}

/* ---- checking one file -------------------------------------------------------------- */

/* Reads and checks dir/<job>.meta into buf. 0 with *doc / *len into buf;
 * -ENOENT; RDB_ECORRUPT / RDB_EFORMAT with *why; other -errno. */
static int load_doc(const char *dir, const char *job, struct rdb_buf *buf, const uint8_t **doc,
		    size_t *len, const char **why)
{
	char path[FILE_PATH];
	snprintf(path, sizeof(path), "%s/%s%s", dir, job, SUFFIX_DOC);
	*why = NULL;
	int rc = read_file(path, FILE_MAX, buf);
	if (rc == RDB_ELIMIT) {
		*why = "the file is longer than any document can be";
		return RDB_ECORRUPT;
	}
	if (rc)
		return rc;
	return sto_jobmeta_decode(job, buf->data, buf->len, doc, len, why);
}

static void damage_msg(char *msg, size_t size, const char *dir, const char *job, const char *why)
{
	snprintf(msg, size,
		 "the metadata document of job %s (%.1024s/%s%s) is damaged: %s. It is not served. "
		 "Store it again (PUT /api/v1/jobs/%s/meta) or copy that file from a backup; "
		 "'rankctl verify' lists every damaged document",
		 job, dir, job, SUFFIX_DOC, why, job);
}

/* ---- the public calls --------------------------------------------------------------- */

static struct sto_jobmeta *jm_of(struct sto *s)
{
	return s->jobmeta;
}

int sto_jobmeta_put(struct sto *s, const char *job, const void *doc, size_t len)
{
	struct sto_jobmeta *m = jm_of(s);
	struct rdb_buf img;
	char old[FILE_PATH];
	if (!job || !mdl_job_valid(job, strlen(job)) || m->read_only)
		return RDB_EINVAL;
	if (len > STO_JOBMETA_MAX_BYTES)
		return RDB_ELIMIT;
	rdb_buf_init(&img, FILE_MAX);
	int rc = make_meta_dir(m->dir);
	if (rc == 0)
		rc = sto_jobmeta_encode(job, doc, len, &img);
	if (rc == 0)
		rc = write_doc_file(m->dir, job, &img);
	rdb_buf_free(&img);
	/* A legacy copy left by a failed upgrade is older: it must not come back
	 * as the document once this one is deleted. */
	snprintf(old, sizeof(old), "%s/%s%s", m->dir, job, SUFFIX_OLD);
	if (rc == 0 && unlink(old) == 0)
		rc = fsync_dir(m->dir);
	return rc;
}

/* The legacy document (no checksum), served only while its upgrade has not
 * happened (read-only store, or an upgrade that failed at open). */
static int get_legacy(struct sto_jobmeta *m, const char *job, struct rdb_buf *out)
{
	char path[FILE_PATH];
	struct rdb_buf buf;
	snprintf(path, sizeof(path), "%s/%s%s", m->dir, job, SUFFIX_OLD);
	rdb_buf_init(&buf, STO_JOBMETA_MAX_BYTES + 1);
	int rc = read_file(path, STO_JOBMETA_MAX_BYTES, &buf);
	if (rc == -ENOENT)
		rc = RDB_ENOTFOUND;
	if (rc == 0)
		rc = rdb_buf_append(out, buf.data, buf.len);
	rdb_buf_free(&buf);
	return rc;
}

int sto_jobmeta_get(struct sto *s, const char *job, struct rdb_buf *out, struct sto_read_error *err)
{
	struct sto_jobmeta *m = jm_of(s);
	struct rdb_buf buf;
	const uint8_t *doc;
	size_t len;
	const char *why;
	if (!job || !mdl_job_valid(job, strlen(job)))
		return RDB_EINVAL;
	rdb_buf_init(&buf, FILE_MAX + 1);
	int rc = load_doc(m->dir, job, &buf, &doc, &len, &why);
	if (rc == -ENOENT)
		rc = get_legacy(m, job, out);
	else if (rc == 0)
		rc = rdb_buf_append(out, doc, len);
	if (rc == RDB_ECORRUPT || rc == RDB_EFORMAT) {
		struct sto_read_error local;
		struct sto_read_error *e = err ? err : &local;
		atomic_fetch_add(&m->damaged_reads, 1);
		damage_msg(e->msg, sizeof(e->msg), m->dir, job, why);
		rdb_error("jobmeta", "%s", e->msg);
		rc = RDB_ECORRUPT;
	}
	rdb_buf_free(&buf);
	return rc;
}

int sto_jobmeta_delete(struct sto *s, const char *job)
{
	struct sto_jobmeta *m = jm_of(s);
	char path[FILE_PATH];
	bool found = false;
	int rc = 0;
	if (!job || !mdl_job_valid(job, strlen(job)) || m->read_only)
		return RDB_EINVAL;
	const char *suffixes[2] = {SUFFIX_DOC, SUFFIX_OLD};
	for (int i = 0; i < 2 && rc == 0; i++) {
		snprintf(path, sizeof(path), "%s/%s%s", m->dir, job, suffixes[i]);
		if (unlink(path) == 0)
			found = true;
		else if (errno != ENOENT)
			rc = -errno;
	}
	if (rc == 0 && !found)
		return RDB_ENOTFOUND;
	if (found) {
		int r2 = fsync_dir(m->dir);
		rc = rc ? rc : r2;
	}
	return rc;
}

/* Whether dir holds a document of job with the given suffix. */
static bool has_file(const char *dir, const char *job, const char *suffix)
{
	char path[FILE_PATH];
	snprintf(path, sizeof(path), "%s/%s%s", dir, job, suffix);
	return access(path, F_OK) == 0;
}

int sto_jobmeta_list(struct sto *s, sto_jobmeta_fn fn, void *arg)
{
	struct sto_jobmeta *m = jm_of(s);
	DIR *d = opendir(m->dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	int rc = 0;
	char job[MDL_JOB_MAX + 1];
	for (struct dirent *de; rc == 0 && (de = readdir(d)) != NULL;) {
		if (name_job(de->d_name, false, job) ||
		    (name_job(de->d_name, true, job) && !has_file(m->dir, job, SUFFIX_DOC)))
			rc = fn(arg, job);
	}
	closedir(d);
	return rc;
}

void sto_jobmeta_stats(struct sto *s, struct sto_jobmeta_stats *out)
{
	struct sto_jobmeta *m = jm_of(s);
	out->damaged_at_open = m->damaged_at_open;
	out->upgraded = m->upgraded;
	out->damaged_reads = atomic_load(&m->damaged_reads);
}

/* ---- open: clean-up, upgrade, check ------------------------------------------------- */

/* Gives the legacy document of job a checksum: <job>.meta first (unless a
 * newer one exists), then <job>.json goes. */
static int upgrade_one(struct sto_jobmeta *m, const char *job, struct rdb_buf *buf)
{
	char path[FILE_PATH];
	struct rdb_buf img;
	int rc = 0;
	snprintf(path, sizeof(path), "%s/%s%s", m->dir, job, SUFFIX_OLD);
	if (!has_file(m->dir, job, SUFFIX_DOC)) {
		rc = read_file(path, STO_JOBMETA_MAX_BYTES, buf);
		rdb_buf_init(&img, FILE_MAX);
		if (rc == 0)
			rc = sto_jobmeta_encode(job, buf->data, buf->len, &img);
		if (rc == 0)
			rc = write_doc_file(m->dir, job, &img);
		rdb_buf_free(&img);
		if (rc == 0)
			m->upgraded++;
	}
	if (rc == 0 && unlink(path) != 0)
		rc = -errno;
	if (rc == 0)
		rc = fsync_dir(m->dir);
	if (rc)
		rdb_warn("jobmeta",
			 "cannot give the legacy metadata document %s a checksum (%s); it is "
			 "served as it is and the upgrade is tried again at the next start",
			 path, rdb_strerror(rc));
	return rc;
}

/* One directory entry at open: temporary files go, legacy documents are
 * upgraded, documents are checked. */
static void open_entry(struct sto_jobmeta *m, const char *name, struct rdb_buf *buf)
{
	char job[MDL_JOB_MAX + 1], path[FILE_PATH], msg[2048];
	const uint8_t *doc;
	size_t len;
	const char *why;
	if (name_job(name, false, job)) {
		int rc = load_doc(m->dir, job, buf, &doc, &len, &why);
		if (rc == RDB_ECORRUPT || rc == RDB_EFORMAT) {
			m->damaged_at_open++;
			damage_msg(msg, sizeof(msg), m->dir, job, why);
			rdb_error("jobmeta", "%s", msg);
		}
	} else if (name_job(name, true, job)) {
		(void)upgrade_one(m, job, buf);
	} else if (strstr(name, ".tmp-")) {
		snprintf(path, sizeof(path), "%s/%s", m->dir, name);
		if (unlink(path) == 0)
			rdb_info("jobmeta",
				 "removed %s, left by a metadata write a crash interrupted", path);
	}
}

int sto_jobmeta_open(const char *data_dir, bool read_only, struct sto_jobmeta **out)
{
	struct sto_jobmeta *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	snprintf(m->dir, sizeof(m->dir), "%s/meta", data_dir);
	m->read_only = read_only;
	*out = m;
	DIR *d = read_only ? NULL : opendir(m->dir);
	if (!d)
		return 0;
	struct rdb_buf buf;
	rdb_buf_init(&buf, FILE_MAX + 1);
	for (struct dirent *de; (de = readdir(d)) != NULL;)
		open_entry(m, de->d_name, &buf);
	closedir(d);
	rdb_buf_free(&buf);
	if (m->upgraded)
		rdb_info("jobmeta",
			 "%s: gave %llu legacy job metadata documents a checksum (<job>.json -> "
			 "<job>.meta)",
			 m->dir, (unsigned long long)m->upgraded);
	return 0;
}

void sto_jobmeta_close(struct sto_jobmeta *m)
{
	free(m);
}

/* ---- verify and copy ---------------------------------------------------------------- */

void sto_jobmeta_verify(const char *data_dir, sto_problem_fn fn, void *arg,
			struct sto_verify_report *rep)
{
	char dir[DIR_PATH_MAX], job[MDL_JOB_MAX + 1], msg[2048];
	snprintf(dir, sizeof(dir), "%s/meta", data_dir);
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct rdb_buf buf;
	rdb_buf_init(&buf, FILE_MAX + 1);
	for (struct dirent *de; (de = readdir(d)) != NULL;) {
		const uint8_t *doc;
		size_t len;
		const char *why;
		if (name_job(de->d_name, true, job) && !has_file(dir, job, SUFFIX_DOC)) {
			rep->meta_unchecked++; /* legacy, no checksum: upgraded at the next start */
			continue;
		}
		if (!name_job(de->d_name, false, job))
			continue;
		rep->meta_docs++;
		int rc = load_doc(dir, job, &buf, &doc, &len, &why);
		if (rc == 0)
			continue;
		rep->meta_damaged++;
		rep->problems++;
		if (rc == RDB_ECORRUPT || rc == RDB_EFORMAT)
			damage_msg(msg, sizeof(msg), dir, job, why);
		else
			snprintf(msg, sizeof(msg),
				 "the metadata document of job %s cannot be read: %s", job,
				 rdb_strerror(rc));
		if (fn)
			fn(arg, msg);
	}
	closedir(d);
	rdb_buf_free(&buf);
}

/* Copies one document file (read whole, checked, written with fsync). */
static int copy_one(const char *from, const char *to, const char *name, struct rdb_buf *buf,
		    uint64_t *damaged)
{
	char a[FILE_PATH], b[FILE_PATH], job[MDL_JOB_MAX + 1];
	const uint8_t *doc;
	size_t len;
	const char *why = NULL;
	snprintf(a, sizeof(a), "%s/%s", from, name);
	snprintf(b, sizeof(b), "%s/%s", to, name);
	int rc = read_file(a, FILE_MAX, buf);
	if (rc == 0 && name_job(name, false, job) &&
	    sto_jobmeta_decode(job, buf->data, buf->len, &doc, &len, &why) != 0) {
		(*damaged)++;
		rdb_warn("jobmeta",
			 "%s is damaged (%s); copied as it is to %s, where it stays "
			 "detectable",
			 a, why, b);
	}
	int fd = rc == 0 ? open(b, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644) : -1;
	if (rc == 0 && fd < 0)
		rc = -errno;
	if (rc == 0)
		rc = write_all(fd, buf->data, buf->len);
	if (rc == 0 && fsync(fd))
		rc = -errno;
	if (fd >= 0 && close(fd) && rc == 0)
		rc = -errno;
	return rc;
}

int sto_jobmeta_copy(const char *from_data_dir, const char *to_data_dir, uint64_t *docs,
		     uint64_t *damaged)
{
	char from[DIR_PATH_MAX], to[DIR_PATH_MAX], job[MDL_JOB_MAX + 1];
	snprintf(from, sizeof(from), "%s/meta", from_data_dir);
	snprintf(to, sizeof(to), "%s/meta", to_data_dir);
	DIR *d = opendir(from);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	int rc = make_meta_dir(to);
	struct rdb_buf buf;
	rdb_buf_init(&buf, FILE_MAX + 1);
	for (struct dirent *de; rc == 0 && (de = readdir(d)) != NULL;) {
		if (!name_job(de->d_name, false, job) && !name_job(de->d_name, true, job))
			continue;
		rc = copy_one(from, to, de->d_name, &buf, damaged);
		if (rc == -ENOENT)
			rc = 0; /* deleted meanwhile */
		else if (rc == 0)
			(*docs)++;
	}
	closedir(d);
	rdb_buf_free(&buf);
	if (rc == 0)
		rc = fsync_dir(to);
	return rc;
}
