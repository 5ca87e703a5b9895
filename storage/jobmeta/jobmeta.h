/* jobmeta.h - job metadata documents, owned by the storage engine: one
 * checksummed file per job under <data_dir>/meta/ (layout: storage/format.h,
 * docs/FORMAT.md "Job metadata documents"). The engine stores the bytes it is
 * given; whether they are a JSON object is the caller's check (query/meta.c).
 *
 * Every read checks the checksum: a damaged document is never returned
 * (RDB_ECORRUPT with a message naming the job, the file and what to do).
 * Backup, restore, verify and job deletion (storage/admin.h) go through this
 * module; nothing else in the tree touches meta/.
 *
 * Threading: every call is independent and thread-safe; a put replaces the
 * document with one rename, so a concurrent get sees the old or the new one
 * whole, and of two concurrent puts of one job the last rename wins. Every
 * call blocks on the file system.
 */
#ifndef STO_JOBMETA_H
#define STO_JOBMETA_H

#include "common/rdb_buf.h"
#include "storage/admin.h"
#include "storage/format.h"
#include "storage/sto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Stores doc (len <= STO_JOBMETA_MAX_BYTES bytes, any bytes) as the job's
 * document, durably when it returns 0 (temporary file, fsync, rename,
 * directory fsync). Replaces any previous document; a failure leaves the
 * previous one as it was. 0; RDB_EINVAL (bad job id, read-only store);
 * RDB_ELIMIT (too large); -errno. */
int sto_jobmeta_put(struct sto *s, const char *job, const void *doc, size_t len);

/* Appends the job's document to out (whose bound the caller sets). 0;
 * RDB_ENOTFOUND when there is none; RDB_ECORRUPT when the stored file fails
 * its checksum or structure check (err says which file, what is wrong and
 * what the operator can do; counted in sto_jobmeta_stats; nothing appended);
 * RDB_ELIMIT past out's bound (out unchanged); RDB_EINVAL for a bad job id;
 * -errno. err may be NULL. */
int sto_jobmeta_get(struct sto *s, const char *job, struct rdb_buf *out,
		    struct sto_read_error *err);

/* Removes the job's document durably (unlink, directory fsync). 0;
 * RDB_ENOTFOUND when there was none; RDB_EINVAL (bad job id, read-only
 * store); -errno. sto_delete_job calls it. */
int sto_jobmeta_delete(struct sto *s, const char *job);

/* Calls fn with the id of every job that has a document (in directory
 * order, not sorted); fn returning non-zero stops the walk and is
 * returned. 0 when meta/ does not exist. Documents are not read. */
typedef int (*sto_jobmeta_fn)(void *arg, const char *job);
int sto_jobmeta_list(struct sto *s, sto_jobmeta_fn fn, void *arg);

struct sto_jobmeta_stats {
	uint64_t damaged_at_open; /* documents that failed their check at this open */
	uint64_t damaged_reads;	  /* gets refused with RDB_ECORRUPT since open */
	uint64_t upgraded;	  /* legacy documents given a checksum at this open */
};
void sto_jobmeta_stats(struct sto *s, struct sto_jobmeta_stats *out);

/* ---- encoding (pure; for tests and the fuzzer) ---- */

/* Appends the file image of doc for job (header + document) to out. 0,
 * RDB_ELIMIT (doc too large, or out's bound), -ENOMEM. */
int sto_jobmeta_encode(const char *job, const void *doc, size_t len, struct rdb_buf *out);
/* Checks a file image of job's document. 0 with *doc / *len pointing into
 * img; RDB_ECORRUPT with *why set (static text) when the magic, version,
 * length or checksum is wrong; RDB_EFORMAT for a version this build does
 * not know. */
int sto_jobmeta_decode(const char *job, const uint8_t *img, size_t img_len, const uint8_t **doc,
		       size_t *len, const char **why);

/* ---- internal to storage/ ---- */

struct sto_jobmeta;
/* At sto_open: remembers data_dir; unless read_only, removes leftover
 * temporary files, gives legacy documents (meta/<job>.json) a checksum in
 * place (the new file is durable before the old one goes) and checks every
 * document, logging each damaged one. An upgrade that fails is logged and
 * retried at the next open; the legacy document is served meanwhile. 0 or
 * -ENOMEM. */
int sto_jobmeta_open(const char *data_dir, bool read_only, struct sto_jobmeta **out);
void sto_jobmeta_close(struct sto_jobmeta *m); /* NULL ok */
/* Read-only check of every document for sto_verify: each damaged one is a
 * problem; counts go to rep (meta_docs, meta_damaged, meta_unchecked). */
void sto_jobmeta_verify(const char *data_dir, sto_problem_fn fn, void *arg,
			struct sto_verify_report *rep);
/* Copies every document file of from_data_dir/meta into to_data_dir/meta
 * (created), each read whole and written with fsync. A damaged document is
 * copied as it is (still detectable) and counted in *damaged with a WARN.
 * 0 when there is no meta/ to copy. */
int sto_jobmeta_copy(const char *from_data_dir, const char *to_data_dir, uint64_t *docs,
		     uint64_t *damaged);

#endif
