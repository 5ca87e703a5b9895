/* meta.c - job metadata documents: one JSON object per job (config,
 * hyperparameters, world size, versions, rank map ...), at most 1 MiB.
 *
 * This file checks that a document is a JSON object (jansson: the only file
 * of query/ that includes jansson.h) and maps errors to query errors; the
 * storage engine owns the documents (storage/jobmeta/jobmeta.h: checksummed
 * files under <data_dir>/meta/, atomic and durable writes, a checksum check
 * on every read, backup/restore/verify, deletion with the job).
 * Threading: every call is independent.
 */
#include "query/agg.h"
#include "common/rdb_err.h"
#include "storage/jobmeta/jobmeta.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(QRY_META_MAX_BYTES == STO_JOBMETA_MAX_BYTES, "one bound for metadata documents");

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

int qry_meta_put(struct sto *s, const char *job, const void *doc, size_t len, struct qry_error *err)
{
	int rc = validate(job, doc, len, err);
	if (rc)
		return rc;
	rc = sto_jobmeta_put(s, job, doc, len);
	if (rc)
		return qry_fail(err, QRY_E_INTERNAL, rc,
				"storing the metadata of job %.128s: %s; the previous "
				"document (if any) is unchanged",
				job, rdb_strerror(rc));
	return 0;
}

int qry_meta_get(struct sto *s, const char *job, struct rdb_buf *out, struct qry_error *err)
{
	if (!mdl_job_valid(job, strlen(job)))
		return qry_fail(err, QRY_E_INVALID, RDB_EINVAL, "job id '%.128s' is invalid: %s",
				job, "[A-Za-z0-9._-]{1,128}");
	struct sto_read_error *re = malloc(sizeof(*re));
	if (!re)
		return qry_fail(err, QRY_E_INTERNAL, -ENOMEM, "out of memory");
	int rc = sto_jobmeta_get(s, job, out, re);
	if (rc == RDB_ENOTFOUND)
		qry_fail(err, QRY_E_NOT_FOUND, rc,
			 "job %.128s has no metadata document "
			 "(store one with PUT /api/v1/jobs/<job>/meta)",
			 job);
	else if (rc == RDB_ECORRUPT)
		qry_fail(err, QRY_E_INTERNAL, rc, "%.4600s", re->msg);
	else if (rc)
		qry_fail(err, rc == RDB_ELIMIT ? QRY_E_TOO_LARGE : QRY_E_INTERNAL, rc,
			 "reading the metadata of job %.128s: %s", job, rdb_strerror(rc));
	free(re);
	return rc;
}
