/* meta.c - job metadata documents: one JSON object per job (config,
 * hyperparameters, world size, versions, rank map ...), at most 1 MiB.
 *
 * Storage: <data_dir>/meta/<job>.json, the document's bytes as the client
 * sent them (validated as a JSON object by jansson: this is the only file of
 * query/ that includes jansson.h). A write is atomic and durable: the bytes
 * go to a unique temp file in the same directory, which is fsynced, renamed
 * over the old document and the directory fsynced, so a crash leaves the old
 * or the new document, never a mix. Stray temp files (".tmp-*") of a crash
 * are ignored. Concurrent writers of one job: the last rename wins.
 * The storage engine does not know these files: whoever deletes a job
 * (server/admin_routes.c, rankctl) deletes its document with
 * qry_meta_delete. Threading: every call is independent.
 */
#include "query/agg.h"
#include "common/rdb_err.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int validate(const char *job, const void *doc, size_t len, struct qry_error *err)
{
	if (!mdl_job_valid(job, strlen(job)))
		return qry_fail(err, QRY_E_INVALID, RDB_EINVAL, "job id '%.128s' is invalid: %s",
				job, "[A-Za-z0-9._-]{1,128}");
	if (len > QRY_META_MAX_BYTES)
		return qry_fail(err, QRY_E_TOO_LARGE, RDB_ELIMIT,
				"the metadata document exceeds %u bytes (1 MiB)",
				QRY_META_MAX_BYTES);
	json_error_t je;
	json_t *v = json_loadb(doc, len, JSON_REJECT_DUPLICATES, &je);
	if (!v) {
		char where[64];
		snprintf(where, sizeof(where), " (line %d, column %d)", je.line, je.column);
		return qry_fail(err, QRY_E_INVALID, RDB_EINVAL,
				"the metadata document is not valid JSON: "
				"%.200s%s",
				je.text, where);
	}
	bool obj = json_is_object(v);
	json_decref(v);
	if (!obj)
		return qry_fail(err, QRY_E_INVALID, RDB_EINVAL,
				"the metadata document must be a JSON object");
	return 0;
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

static int fsync_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) ? -errno : 0;
	close(fd);
	return rc;
}

/* Creates <data_dir>/meta if needed (durably). */
static int meta_dir(const char *data_dir, char *dir, size_t len)
{
	if ((size_t)snprintf(dir, len, "%s/meta", data_dir) >= len)
		return -ENAMETOOLONG;
	if (mkdir(dir, 0755) == 0)
		return fsync_path(data_dir);
	return errno == EEXIST ? 0 : -errno;
}

static int store(const char *data_dir, const char *job, const void *doc, size_t len)
{
	char dir[4200], tmp[4400], path[4400];
	int fd = -1;
	int rc = meta_dir(data_dir, dir, sizeof(dir));
	if (rc)
		return rc;
	snprintf(tmp, sizeof(tmp), "%s/.tmp-%s-XXXXXX", dir, job);
	snprintf(path, sizeof(path), "%s/%s.json", dir, job);
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	rc = write_all(fd, doc, len);
	if (rc == 0 && fsync(fd))
		rc = -errno;
	if (close(fd) && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path))
		rc = -errno;
	if (rc)
		unlink(tmp);
	else
		rc = fsync_path(dir);
	return rc;
}

int qry_meta_put(const char *data_dir, const char *job, const void *doc, size_t len,
		 struct qry_error *err)
{
	int rc = validate(job, doc, len, err);
	if (rc)
		return rc;
	rc = store(data_dir, job, doc, len);
	if (rc)
		return qry_fail(err, QRY_E_INTERNAL, rc,
				"storing the metadata of job %.128s: %s; the previous "
				"document (if any) is unchanged",
				job, rdb_strerror(rc));
	return 0;
}

static int read_into(int fd, struct rdb_buf *out)
{
	uint8_t buf[65536];
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return 0;
		int rc = rdb_buf_append(out, buf, (size_t)n);
		if (rc)
			return rc;
	}
}

int qry_meta_get(const char *data_dir, const char *job, struct rdb_buf *out, struct qry_error *err)
{
	char path[4400];
	if (!mdl_job_valid(job, strlen(job)))
		return qry_fail(err, QRY_E_INVALID, RDB_EINVAL, "job id '%.128s' is invalid: %s",
				job, "[A-Za-z0-9._-]{1,128}");
	snprintf(path, sizeof(path), "%s/meta/%s.json", data_dir, job);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return qry_fail(err, QRY_E_NOT_FOUND, RDB_ENOTFOUND,
				"job %.128s has no metadata document "
				"(store one with PUT /api/v1/jobs/<job>/meta)",
				job);
	if (fd < 0)
		return qry_fail(err, QRY_E_INTERNAL, -errno,
				"reading the metadata of job %.128s: %s", job,
				rdb_strerror(-errno));
	size_t before = out->len;
	int rc = read_into(fd, out);
	close(fd);
	if (rc) {
		out->len = before;
		return qry_fail(err, rc == RDB_ELIMIT ? QRY_E_TOO_LARGE : QRY_E_INTERNAL, rc,
				"reading the metadata of job "
				"%.128s: %s",
				job, rdb_strerror(rc));
	}
	return 0;
}

int qry_meta_delete(const char *data_dir, const char *job)
{
	char dir[4200], path[4400];
	if (!mdl_job_valid(job, strlen(job)))
		return RDB_EINVAL;
	snprintf(dir, sizeof(dir), "%s/meta", data_dir);
	snprintf(path, sizeof(path), "%s/%s.json", dir, job);
	if (unlink(path) != 0)
		return errno == ENOENT ? RDB_ENOTFOUND : -errno;
	return fsync_path(dir);
}
