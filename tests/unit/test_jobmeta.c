/* test_jobmeta.c - unit tests for job metadata documents owned by storage
 * (storage/jobmeta/jobmeta.h): the file image and its checksum (every single
 * byte flip is caught), put/get/list/delete through a store, a damaged file
 * never served and reported by verify, the in-place upgrade of legacy
 * <job>.json documents (and a crash in the middle of it), deletion with the
 * job, and backup -> restore keeping the documents. Data directories live
 * under a mkdtemp directory in $RDB_TEST_TMP (or /tmp).
 */
#include "common/rdb_err.h"
#include "storage/admin.h"
#include "storage/jobmeta/jobmeta.h"
#include "storage/sto.h"
#include "tests/unit/check.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char base[512];

static struct sto *open_dir(const char *dir, bool read_only)
{
	struct sto_options o;
	sto_options_default(&o);
	o.data_dir = dir;
	o.sync = STO_SYNC_NONE;
	o.index_map_bytes = 64ull << 20;
	o.read_only = read_only;
	struct sto *s = NULL;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	return s;
}

static void path_of(char *out, size_t n, const char *dir, const char *name)
{
	snprintf(out, n, "%s/%s", dir, name);
}

static void write_file(const char *path, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	CHECK_EQ_INT(write(fd, p, n), (long long)n);
	close(fd);
}

/* Flips one bit of the byte at off of the file at path. */
static void flip_byte(const char *path, off_t off)
{
	int fd = open(path, O_RDWR);
	uint8_t b = 0;
	CHECK(fd >= 0);
	CHECK_EQ_INT(pread(fd, &b, 1, off), 1);
	b ^= 0x10;
	CHECK_EQ_INT(pwrite(fd, &b, 1, off), 1);
	close(fd);
}

static const char DOC[] = "{\"world_size\":512,\"lr\":3e-4,\"status\":\"running\"}";

static void test_image(void)
{
	struct rdb_buf img;
	const uint8_t *doc;
	size_t len;
	const char *why;
	rdb_buf_init(&img, 1 << 21);
	CHECK_EQ_INT(sto_jobmeta_encode("j1", DOC, strlen(DOC), &img), 0);
	CHECK_EQ_INT(img.len, STO_JOBMETA_HEADER_SIZE + strlen(DOC));
	CHECK_EQ_INT(sto_jobmeta_decode("j1", img.data, img.len, &doc, &len, &why), 0);
	CHECK(len == strlen(DOC) && memcmp(doc, DOC, len) == 0);
	/* Every bit that matters is covered: each single-byte change fails. */
	int caught = 0;
	for (size_t i = 0; i < img.len; i++) {
		img.data[i] ^= 0x01;
		caught += sto_jobmeta_decode("j1", img.data, img.len, &doc, &len, &why) != 0;
		img.data[i] ^= 0x01;
	}
	CHECK_EQ_INT(caught, img.len);
	/* The same bytes under another job's name, cut or extended: refused. */
	CHECK_EQ_INT(sto_jobmeta_decode("j2", img.data, img.len, &doc, &len, &why), RDB_ECORRUPT);
	CHECK_EQ_INT(sto_jobmeta_decode("j1", img.data, img.len - 1, &doc, &len, &why),
		     RDB_ECORRUPT);
	CHECK_EQ_INT(sto_jobmeta_decode("j1", img.data, 10, &doc, &len, &why), RDB_ECORRUPT);
	CHECK_EQ_INT(rdb_buf_append(&img, "x", 1), 0);
	CHECK_EQ_INT(sto_jobmeta_decode("j1", img.data, img.len, &doc, &len, &why), RDB_ECORRUPT);
	/* An empty document is a document. */
	img.len = 0;
	CHECK_EQ_INT(sto_jobmeta_encode("j1", "", 0, &img), 0);
	CHECK_EQ_INT(sto_jobmeta_decode("j1", img.data, img.len, &doc, &len, &why), 0);
	CHECK_EQ_INT(len, 0);
	rdb_buf_free(&img);
}

static int list_cb(void *arg, const char *job)
{
	char *seen = arg;
	strcat(seen, job);
	strcat(seen, ";");
	return 0;
}

static void test_put_get_damage(void)
{
	char dir[700], file[900];
	struct rdb_buf out;
	struct sto_read_error err;
	struct sto_jobmeta_stats st;
	snprintf(dir, sizeof(dir), "%s/damage", base);
	struct sto *s = open_dir(dir, false);
	rdb_buf_init(&out, 1 << 21);
	CHECK_EQ_INT(sto_jobmeta_get(s, "j1", &out, &err), RDB_ENOTFOUND);
	CHECK_EQ_INT(sto_jobmeta_put(s, "j1", DOC, strlen(DOC)), 0);
	CHECK_EQ_INT(sto_jobmeta_put(s, "j2", "{}", 2), 0);
	CHECK_EQ_INT(sto_jobmeta_put(s, "../x", "{}", 2), RDB_EINVAL);
	CHECK_EQ_INT(sto_jobmeta_get(s, "j1", &out, &err), 0);
	CHECK(out.len == strlen(DOC) && memcmp(out.data, DOC, out.len) == 0);
	char seen[64] = "";
	CHECK_EQ_INT(sto_jobmeta_list(s, list_cb, seen), 0);
	CHECK(strlen(seen) == 6 && strstr(seen, "j1;") && strstr(seen, "j2;"));

	/* One flipped byte in the document: never served, counted, explained. */
	snprintf(file, sizeof(file), "%s/meta/j1.meta", dir);
	flip_byte(file, STO_JOBMETA_HEADER_SIZE + 15);
	out.len = 0;
	CHECK_EQ_INT(sto_jobmeta_get(s, "j1", &out, &err), RDB_ECORRUPT);
	CHECK_EQ_INT(out.len, 0);
	CHECK(strstr(err.msg, "job j1") && strstr(err.msg, "damaged") &&
	      strstr(err.msg, "PUT /api/v1/jobs/j1/meta"));
	sto_jobmeta_stats(s, &st);
	CHECK_EQ_INT(st.damaged_reads, 1);
	struct sto_verify_report rep;
	CHECK_EQ_INT(sto_verify(s, false, NULL, NULL, &rep), 0);
	CHECK_EQ_INT(rep.meta_docs, 2);
	CHECK_EQ_INT(rep.meta_damaged, 1);
	CHECK(rep.problems >= 1);
	sto_close(s);

	/* Found at the next open too; a verify on a read-only store changes
	 * nothing; a new put repairs the document. */
	s = open_dir(dir, true);
	CHECK_EQ_INT(sto_verify(s, false, NULL, NULL, &rep), 0);
	CHECK_EQ_INT(rep.meta_damaged, 1);
	CHECK_EQ_INT(sto_jobmeta_put(s, "j1", "{}", 2), RDB_EINVAL); /* read-only */
	sto_close(s);
	s = open_dir(dir, false);
	sto_jobmeta_stats(s, &st);
	CHECK_EQ_INT(st.damaged_at_open, 1);
	CHECK_EQ_INT(sto_jobmeta_put(s, "j1", DOC, strlen(DOC)), 0);
	out.len = 0;
	CHECK_EQ_INT(sto_jobmeta_get(s, "j1", &out, &err), 0);
	CHECK_EQ_INT(sto_verify(s, false, NULL, NULL, &rep), 0);
	CHECK_EQ_INT(rep.meta_damaged, 0);
	CHECK_EQ_INT(rep.problems, 0);

	/* A job with only a metadata document is deleted with its document. */
	struct sto_delete_result dr;
	CHECK_EQ_INT(sto_delete_job(s, "j2", &dr), 0);
	CHECK_EQ_INT(sto_jobmeta_get(s, "j2", &out, &err), RDB_ENOTFOUND);
	CHECK_EQ_INT(sto_delete_job(s, "j2", &dr), RDB_ENOTFOUND);
	CHECK_EQ_INT(sto_jobmeta_delete(s, "j1"), 0);
	CHECK_EQ_INT(sto_jobmeta_delete(s, "j1"), RDB_ENOTFOUND);
	rdb_buf_free(&out);
	sto_close(s);
}

/* A data directory of the previous layout: meta/<job>.json, bare bytes. */
static void make_legacy(const char *dir)
{
	char meta[800], path[900];
	struct sto *s = open_dir(dir, false);
	sto_close(s);
	snprintf(meta, sizeof(meta), "%s/meta", dir);
	CHECK_EQ_INT(mkdir(meta, 0755), 0);
	path_of(path, sizeof(path), meta, "old.json");
	write_file(path, DOC, strlen(DOC));
	path_of(path, sizeof(path), meta, ".tmp-old-Ab12Cd"); /* an interrupted write */
	write_file(path, "{", 1);
	/* A crash between the two steps of an upgrade: both files exist and the
	 * .meta one (written first) is the newer document. */
	path_of(path, sizeof(path), meta, "both.json");
	write_file(path, "{\"stale\":1}", 11);
	struct rdb_buf img;
	rdb_buf_init(&img, 1 << 21);
	CHECK_EQ_INT(sto_jobmeta_encode("both", "{\"new\":1}", 9, &img), 0);
	path_of(path, sizeof(path), meta, "both.meta");
	write_file(path, img.data, img.len);
	rdb_buf_free(&img);
}

static void test_upgrade(void)
{
	char dir[700], path[900];
	struct rdb_buf out;
	struct sto_read_error err;
	struct sto_verify_report rep;
	snprintf(dir, sizeof(dir), "%s/legacy", base);
	make_legacy(dir);
	rdb_buf_init(&out, 1 << 21);

	/* Read-only (rankctl verify): served as it is, nothing rewritten. */
	struct sto *s = open_dir(dir, true);
	CHECK_EQ_INT(sto_jobmeta_get(s, "old", &out, &err), 0);
	CHECK(out.len == strlen(DOC) && memcmp(out.data, DOC, out.len) == 0);
	CHECK_EQ_INT(sto_verify(s, false, NULL, NULL, &rep), 0);
	CHECK_EQ_INT(rep.meta_unchecked, 1);
	CHECK_EQ_INT(rep.meta_docs, 1);
	CHECK_EQ_INT(rep.problems, 0);
	sto_close(s);
	snprintf(path, sizeof(path), "%s/meta/old.json", dir);
	CHECK_EQ_INT(access(path, F_OK), 0);

	/* Open for writing: upgraded in place. */
	s = open_dir(dir, false);
	struct sto_jobmeta_stats st;
	sto_jobmeta_stats(s, &st);
	CHECK_EQ_INT(st.upgraded, 1);
	CHECK(access(path, F_OK) != 0);
	snprintf(path, sizeof(path), "%s/meta/old.meta", dir);
	CHECK_EQ_INT(access(path, F_OK), 0);
	snprintf(path, sizeof(path), "%s/meta/.tmp-old-Ab12Cd", dir);
	CHECK(access(path, F_OK) != 0);
	snprintf(path, sizeof(path), "%s/meta/both.json", dir);
	CHECK(access(path, F_OK) != 0);
	out.len = 0;
	CHECK_EQ_INT(sto_jobmeta_get(s, "old", &out, &err), 0);
	CHECK(out.len == strlen(DOC) && memcmp(out.data, DOC, out.len) == 0);
	out.len = 0;
	CHECK_EQ_INT(sto_jobmeta_get(s, "both", &out, &err), 0);
	CHECK(out.len == 9 && memcmp(out.data, "{\"new\":1}", 9) == 0);
	CHECK_EQ_INT(sto_verify(s, false, NULL, NULL, &rep), 0);
	CHECK_EQ_INT(rep.meta_docs, 2);
	CHECK_EQ_INT(rep.meta_unchecked, 0);
	CHECK_EQ_INT(rep.problems, 0);
	sto_close(s);
	rdb_buf_free(&out);
}

static void test_backup_restore(void)
{
	char dir[700], bak[700], res[700], res2[700];
	struct rdb_buf out;
	struct sto_read_error err;
	snprintf(dir, sizeof(dir), "%s/live", base);
	snprintf(bak, sizeof(bak), "%s/backup", base);
	snprintf(res, sizeof(res), "%s/restored", base);
	struct sto *s = open_dir(dir, false);
	CHECK_EQ_INT(sto_jobmeta_put(s, "j1", DOC, strlen(DOC)), 0);
	struct sto_backup_result br;
	CHECK_EQ_INT(sto_backup(s, bak, &br), 0);
	CHECK_EQ_INT(br.meta_docs, 1);
	CHECK_EQ_INT(br.meta_damaged, 0);
	sto_close(s);
	CHECK_EQ_INT(sto_restore(bak, res), 0);
	s = open_dir(res, false);
	rdb_buf_init(&out, 1 << 21);
	CHECK_EQ_INT(sto_jobmeta_get(s, "j1", &out, &err), 0);
	CHECK(out.len == strlen(DOC) && memcmp(out.data, DOC, out.len) == 0);
	sto_close(s);

	/* A backup made by the previous layout restores and is upgraded. */
	snprintf(res2, sizeof(res2), "%s/restored-old", base);
	char meta[800], path[900];
	snprintf(meta, sizeof(meta), "%s/meta", bak);
	path_of(path, sizeof(path), meta, "j1.meta");
	unlink(path);
	path_of(path, sizeof(path), meta, "j9.json");
	write_file(path, DOC, strlen(DOC));
	CHECK_EQ_INT(sto_restore(bak, res2), 0);
	s = open_dir(res2, false);
	out.len = 0;
	CHECK_EQ_INT(sto_jobmeta_get(s, "j9", &out, &err), 0);
	CHECK(out.len == strlen(DOC) && memcmp(out.data, DOC, out.len) == 0);
	struct sto_jobmeta_stats st;
	sto_jobmeta_stats(s, &st);
	CHECK_EQ_INT(st.upgraded, 1);
	sto_close(s);
	rdb_buf_free(&out);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int main(void)
{
	const char *tmp = getenv("RDB_TEST_TMP");
	snprintf(base, sizeof(base), "%s/test_jobmeta.XXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	RUN(test_image);
	RUN(test_put_get_damage);
	RUN(test_upgrade);
	RUN(test_backup_restore);
	nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return check_summary("jobmeta");
}
