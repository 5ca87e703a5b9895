/* wal_read.c - reading the write-ahead log's files back: replay of one
 * generation, the directory's generations, removal, and damaged bytes kept
 * aside (wal.h; the layout is storage/format.h, normative text in
 * docs/FORMAT.md). The writer is wal.c.
 *
 * Design: a file is read in windows of READ_BLOCK bytes (struct reader);
 * each record's header and XXH3-64 (seeded with the generation) are checked
 * before its payload is handed to the caller.
 *
 * Replay tells a torn tail from damage: at a record that is incomplete or
 * fails its checks it scans forward, byte by byte, for the next intact
 * record (plausible header, known type, payload inside the file, matching
 * XXH3-64). If one exists, the bad bytes in between are damage in the
 * middle of the log: they are reported (sto_wal_replay_result.damaged, an
 * ERROR line) and replay goes on with the intact records after them. If
 * none exists, the bad bytes are the file's tail: the expected result of a
 * crash mid-write when it is the newest file, logged as a WARN. A file
 * made by sto_wal_prepare may be zero-filled ahead (prealloc_bytes, so that
 * group commits overwrite allocated blocks): a bad record from which only
 * zeros follow is that file's clean end, and one cut short by zeros that
 * run on past its length is a torn record (docs/FORMAT.md). Keeping
 * damaged bytes aside (sto_wal_keep_range) is the caller's decision; only a
 * bad file header is an error.
 *
 * Threading: no shared state; replay runs before the WAL is opened for
 * writing, `rankctl verify` reads the same way without replaying.
 */
#include "storage/wal/wal.h"
#include "storage/wal/wal_int.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"
#include "common/rdb_sort.h"
#include "storage/format.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define SUBSYS	   STO_WAL_SUBSYS
#define NAME_LEN   STO_WAL_NAME_LEN
#define READ_BLOCK (1u << 20) /* replay reads the file in pieces of this size */

/* ---- Replay --------------------------------------------------------------- */

/* A window of the file: bytes [buf_off, buf_off + buf_len) are in buf. */
struct reader {
	int fd;
	uint64_t file_bytes;
	uint8_t *buf;
	size_t buf_cap;
	size_t buf_len;
	uint64_t buf_off;
};

static int pread_full(int fd, uint8_t *p, size_t n, uint64_t off, size_t *got)
{
	*got = 0;
	while (*got < n) {
		ssize_t r = pread(fd, p + *got, n - *got, (off_t)(off + *got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break; /* the file shrank under us: the caller sees a torn tail */
		*got += (size_t)r;
	}
	return 0;
}

/* Points *p at file bytes [off, off + n). 1 if the file ends first. */
static int reader_get(struct reader *rd, uint64_t off, size_t n, const uint8_t **p)
{
	if (off >= rd->buf_off && off - rd->buf_off + n <= rd->buf_len) {
		*p = rd->buf + (off - rd->buf_off);
		return 0;
	}
	size_t want = n > READ_BLOCK ? n : READ_BLOCK;
	if (want > rd->file_bytes - off)
		want = (size_t)(rd->file_bytes - off);
	if (want > rd->buf_cap) {
		uint8_t *nb = realloc(rd->buf, want);
		if (!nb)
			return -ENOMEM;
		rd->buf = nb;
		rd->buf_cap = want;
	}
	rd->buf_off = off;
	int rc = pread_full(rd->fd, rd->buf, want, off, &rd->buf_len);
	if (rc)
		return rc;
	if (rd->buf_len < n)
		return 1;
	*p = rd->buf;
	return 0;
}

static int check_file_header(const uint8_t *h, uint64_t gen, const char *path)
{
	if (memcmp(h, STO_WAL_MAGIC, 8) != 0) {
		rdb_error(SUBSYS, "%s: bad magic at offset 0, not a rankdb WAL file; not replayed",
			  path);
		return RDB_ECORRUPT;
	}
	uint32_t version = rdb_get_le32(h + 8);
	if (version < STO_WAL_VERSION_OLDEST || version > STO_WAL_VERSION) {
		rdb_error(SUBSYS,
			  "%s: WAL version %u, this rankdbd reads %u to %u; not replayed "
			  "(written by a newer rankdbd?)",
			  path, version, STO_WAL_VERSION_OLDEST, STO_WAL_VERSION);
		return RDB_EFORMAT;
	}
	uint32_t hlen = rdb_get_le32(h + 12);
	if (hlen != STO_WAL_HEADER_SIZE) {
		rdb_error(SUBSYS,
			  "%s: header length %u at offset 12, want %u; file header corrupt, "
			  "not replayed",
			  path, hlen, STO_WAL_HEADER_SIZE);
		return RDB_ECORRUPT;
	}
	uint64_t file_gen = rdb_get_le64(h + 16);
	if (file_gen != gen) {
		rdb_error(SUBSYS,
			  "%s: generation %016llx at offset 16 does not match the file "
			  "name; file header corrupt, not replayed",
			  path, (unsigned long long)file_gen);
		return RDB_ECORRUPT;
	}
	return 0;
}

/* Checks one record header; returns 0, or 2 (corrupt) with *why set. */
static int check_rec_header(const uint8_t *h, uint32_t *len, const char **why)
{
	*len = rdb_get_le32(h);
	if (*len > STO_WAL_MAX_PAYLOAD) {
		*why = "payload length out of range";
		return 2;
	}
	if (h[5] || h[6] || h[7]) {
		*why = "nonzero reserved bytes";
		return 2;
	}
	return 0;
}

static bool rec_checksum_ok(const uint8_t *rec, uint32_t len, uint64_t gen)
{
	return sto_wal_rec_hash(rec, rec + STO_WAL_REC_HEADER_SIZE, len, gen) ==
	       rdb_get_le64(rec + 8);
}

struct replay_ctx {
	struct reader rd;
	uint64_t gen;
	sto_wal_replay_fn fn;
	void *arg;
	struct sto_wal_replay_result res;
	const char *why;  /* the tail's reason, for the log */
	const char *path; /* the file, for the log */
	bool nz_known;	  /* nz_end found (nonzero_end) */
	uint64_t nz_end;  /* just past the file's last non-zero byte */
};

/* Reads the record at off. 0 and *rec_len, 1 torn, 2 corrupt, or < 0. */
static int read_record(struct replay_ctx *c, uint64_t off, const uint8_t **rec, uint32_t *len)
{
	uint64_t left = c->rd.file_bytes - off;
	c->why = "incomplete record";
	if (left < STO_WAL_REC_HEADER_SIZE)
		return 1;
	int rc = reader_get(&c->rd, off, STO_WAL_REC_HEADER_SIZE, rec);
	if (rc)
		return rc;
	rc = check_rec_header(*rec, len, &c->why);
	if (rc)
		return rc;
	if (left - STO_WAL_REC_HEADER_SIZE < *len)
		return 1;
	rc = reader_get(&c->rd, off, STO_WAL_REC_HEADER_SIZE + (size_t)*len, rec);
	if (rc)
		return rc;
	if (!rec_checksum_ok(*rec, *len, c->gen)) {
		c->why = "checksum mismatch";
		return 2;
	}
	return 0;
}

/* Whether an intact record starts at off: a plausible header of a known
 * type whose payload lies inside the file and whose checksum matches.
 * Used only to resynchronize after damage. 1 yes, 0 no, < 0 I/O error. */
static int intact_at(struct replay_ctx *c, uint64_t off)
{
	const uint8_t *h;
	uint32_t len;
	const char *why;
	if (c->rd.file_bytes - off < STO_WAL_REC_HEADER_SIZE)
		return 0;
	int rc = reader_get(&c->rd, off, STO_WAL_REC_HEADER_SIZE, &h);
	if (rc)
		return rc < 0 ? rc : 0;
	if (check_rec_header(h, &len, &why) || h[4] < STO_WAL_REC_POINTS || h[4] > STO_WAL_REC_LAST)
		return 0;
	if (c->rd.file_bytes - off - STO_WAL_REC_HEADER_SIZE < len)
		return 0;
	rc = reader_get(&c->rd, off, STO_WAL_REC_HEADER_SIZE + (size_t)len, &h);
	if (rc)
		return rc < 0 ? rc : 0;
	return rec_checksum_ok(h, len, c->gen);
}

/* The offset just past the file's last non-zero byte, but at least off;
 * < 0 on an I/O error. Found once per file, scanning back from its end
 * over the zeros only. */
static int64_t nonzero_end(struct replay_ctx *c, uint64_t off)
{
	if (!c->nz_known) {
		uint64_t end = c->rd.file_bytes;
		bool found = false;
		while (end > 0 && !found) {
			size_t n = end < READ_BLOCK ? (size_t)end : READ_BLOCK;
			const uint8_t *p;
			int rc = reader_get(&c->rd, end - n, n, &p);
			if (rc)
				return rc < 0 ? rc : -EIO;
			size_t i = n;
			while (i > 0 && !p[i - 1])
				i--;
			found = i > 0;
			end = end - n + i;
		}
		c->nz_end = end;
		c->nz_known = true;
	}
	return (int64_t)(c->nz_end > off ? c->nz_end : off);
}

/* The offset of the first intact record after a bad one at bad_off, or
 * the file size when none follows. 0 or < 0 (I/O error). The scan looks at
 * every byte offset; a false match needs a 64-bit checksum to agree. */
static int resync(struct replay_ctx *c, uint64_t bad_off, uint64_t *next)
{
	for (uint64_t off = bad_off + 1; off + STO_WAL_REC_HEADER_SIZE <= c->rd.file_bytes; off++) {
		int rc = intact_at(c, off);
		if (rc < 0)
			return rc;
		if (rc == 1) {
			*next = off;
			return 0;
		}
	}
	*next = c->rd.file_bytes;
	return 0;
}

static void note_damage(struct replay_ctx *c, uint64_t off, uint64_t len, int kind)
{
	struct sto_wal_replay_result *r = &c->res;
	if (r->ndamaged < STO_WAL_DAMAGE_KEEP)
		r->damaged[r->ndamaged] =
		    (struct sto_wal_damage){.off = off, .len = len, .why = c->why};
	r->ndamaged++;
	r->damaged_bytes += len;
	rdb_error(SUBSYS,
		  "%s: %s record (%s) at offset %llu, but intact records follow %llu bytes "
		  "later: this is damage, not a crash. Skipped the damaged bytes and replaying "
		  "the records after them",
		  c->path, kind == 1 ? "truncated" : "corrupt", c->why, (unsigned long long)off,
		  (unsigned long long)len);
}

static int replay_records(struct replay_ctx *c)
{
	uint64_t off = STO_WAL_HEADER_SIZE;
	int rc = 0;
	c->res.valid_bytes = off;
	while (off < c->rd.file_bytes) {
		const uint8_t *rec;
		uint32_t len = 0;
		rc = read_record(c, off, &rec, &len);
		if (rc < 0)
			return rc;
		if (rc > 0) {
			/* A preallocated file (sto_wal_prepare) holds zeros after its
			 * last record: that is its end, not a tail. A record cut short
			 * by a crash in such a file ends in zeros that run on past its
			 * length: that is a torn record, not a corrupt one. */
			int64_t end = nonzero_end(c, off);
			if (end < 0)
				return (int)end;
			if ((uint64_t)end == off) {
				rc = 0;
				break;
			}
			uint64_t rec_end = off + STO_WAL_REC_HEADER_SIZE + (uint64_t)len;
			if (rc == 2 && len <= STO_WAL_MAX_PAYLOAD && (uint64_t)end < rec_end &&
			    c->rd.file_bytes > rec_end) {
				c->why = "incomplete record, zeros after it";
				rc = 1;
				break;
			}
			uint64_t next;
			int kind = rc;
			rc = resync(c, off, &next);
			if (rc)
				return rc;
			if (next >= c->rd.file_bytes) {
				rc = kind; /* nothing intact after it: the tail */
				break;
			}
			note_damage(c, off, next - off, kind);
			off = next;
			rc = 0;
			continue;
		}
		rc = c->fn(c->arg, c->gen, rec[4], rec + STO_WAL_REC_HEADER_SIZE, len);
		if (rc)
			return rc;
		c->res.records++;
		off += STO_WAL_REC_HEADER_SIZE + (uint64_t)len;
		c->res.valid_bytes = off;
	}
	c->res.tail = rc;
	return 0;
}

static void log_tail(const struct replay_ctx *c, const char *path)
{
	const struct sto_wal_replay_result *r = &c->res;
	if (r->tail == 0)
		return;
	rdb_warn(
	    SUBSYS,
	    "%s: %s record (%s) at offset %llu and no intact record after it; ignored the "
	    "last %llu bytes after %llu good records. At the end of the newest WAL file this "
	    "is expected after a crash during a write (if rankdbd did not crash, check the "
	    "disk)",
	    path, r->tail == 1 ? "torn" : "corrupt", c->why, (unsigned long long)r->valid_bytes,
	    (unsigned long long)(r->file_bytes - r->valid_bytes), (unsigned long long)r->records);
}

static int replay_open(const char *path, struct reader *rd)
{
	struct stat st;
	rd->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (rd->fd < 0)
		return -errno;
	if (fstat(rd->fd, &st) != 0)
		return -errno;
	rd->file_bytes = (uint64_t)st.st_size;
	return 0;
}

int sto_wal_replay(const char *dir, uint64_t gen, sto_wal_replay_fn fn, void *arg,
		   struct sto_wal_replay_result *res)
{
	char path[PATH_MAX];
	const uint8_t *h;
	struct replay_ctx c = {.rd = {.fd = -1}, .gen = gen, .fn = fn, .arg = arg};
	int result = sto_wal_path(path, sizeof(path), dir, gen);
	c.path = path;
	if (!result)
		result = replay_open(path, &c.rd);
	if (result)
		goto out;
	c.res.file_bytes = c.rd.file_bytes;
	if (c.rd.file_bytes < STO_WAL_HEADER_SIZE) {
		c.res.tail = 1; /* created, crashed before its header was written */
		c.why = "incomplete file header";
		goto done;
	}
	result = reader_get(&c.rd, 0, STO_WAL_HEADER_SIZE, &h);
	if (result == 1) {
		c.res.tail = 1; /* shrank since fstat */
		c.why = "incomplete file header";
		result = 0;
		goto done;
	}
	if (!result)
		result = check_file_header(h, gen, path);
	if (!result)
		result = replay_records(&c);
	if (result)
		goto out;
done:
	log_tail(&c, path);
	*res = c.res;
out:
	if (c.rd.fd >= 0)
		close(c.rd.fd);
	free(c.rd.buf);
	return result;
}

/* ---- Directory ------------------------------------------------------------ */

/* Parses "wal-<16 hex>.log"; 0 and *gen, or -1 for any other name. */
static int parse_name(const char *name, uint64_t *gen)
{
	if (strlen(name) != NAME_LEN || memcmp(name, "wal-", 4) != 0 ||
	    memcmp(name + 20, ".log", 4) != 0)
		return -1;
	uint64_t v = 0;
	for (int i = 4; i < 20; i++) {
		char ch = name[i];
		int d;
		if (ch >= '0' && ch <= '9')
			d = ch - '0';
		else if (ch >= 'a' && ch <= 'f')
			d = ch - 'a' + 10;
		else
			return -1;
		v = (v << 4) | (uint64_t)d;
	}
	*gen = v;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static int push_gen(uint64_t **v, size_t *n, size_t *cap, uint64_t gen)
{
	if (*n == *cap) {
		size_t ncap = *cap ? *cap * 2 : 16;
		uint64_t *nv = realloc(*v, ncap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		*v = nv;
		*cap = ncap;
	}
	(*v)[(*n)++] = gen;
	return 0;
}

int sto_wal_list(const char *dir, uint64_t **gens, size_t *n)
{
	uint64_t *v = NULL;
	size_t cnt = 0, cap = 0;
	int result = 0;
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	for (;;) {
		errno = 0;
		struct dirent *e = readdir(d);
		if (!e) {
			result = -errno;
			break;
		}
		uint64_t gen;
		if (parse_name(e->d_name, &gen) == 0 && (result = push_gen(&v, &cnt, &cap, gen)))
			break;
	}
	closedir(d);
	if (result) {
		free(v);
		return result;
	}
	if (cnt > 1)
		rdb_sort(v, cnt, sizeof(*v), cmp_u64);
	*gens = v;
	*n = cnt;
	return 0;
}

int sto_wal_remove(const char *dir, uint64_t gen)
{
	char path[PATH_MAX];
	int result = sto_wal_path(path, sizeof(path), dir, gen);
	if (result)
		return result;
	if (unlink(path) != 0)
		return -errno;
	return sto_wal_fsync_dir(dir);
}

void sto_wal_kept_each(const char *keep_dir, sto_wal_kept_fn fn, void *arg)
{
	char path[PATH_MAX + 300];
	DIR *d = opendir(keep_dir);
	for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
		size_t l = strlen(e->d_name);
		struct stat st;
		if (strncmp(e->d_name, "wal-", 4) || l < 8 || strcmp(e->d_name + l - 8, ".damaged"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", keep_dir, e->d_name);
		if (stat(path, &st) == 0)
			fn(arg, path, (uint64_t)st.st_size);
	}
	if (d)
		closedir(d);
}

int sto_wal_keep_range(const char *dir, uint64_t gen, uint64_t off, uint64_t len,
		       const char *keep_dir)
{
	char from[PATH_MAX], to[PATH_MAX];
	int in = -1, out = -1;
	int result = sto_wal_path(from, sizeof(from), dir, gen);
	if (result)
		return result;
	int n = snprintf(to, sizeof(to), "%s/wal-%016llx-%llu.damaged", keep_dir,
			 (unsigned long long)gen, (unsigned long long)off);
	if (n < 0 || (size_t)n >= sizeof(to))
		return -ENAMETOOLONG;
	if (mkdir(keep_dir, 0755) != 0 && errno != EEXIST)
		return -errno;
	in = open(from, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (out < 0) {
		result = errno == EEXIST ? 0 : -errno; /* kept by an earlier start */
		goto out;
	}
	uint8_t buf[1 << 16];
	for (uint64_t done = 0; done < len && result == 0;) {
		size_t want = len - done < sizeof(buf) ? (size_t)(len - done) : sizeof(buf);
		size_t got = 0;
		result = pread_full(in, buf, want, off + done, &got);
		if (result == 0 && got != want)
			result = -EIO; /* the file shrank under us */
		if (result == 0)
			result = sto_wal_pwrite_all(out, buf, got, done);
		done += got;
	}
	if (result == 0)
		result = sto_wal_datasync_fd(out);
	if (result == 0)
		result = sto_wal_fsync_dir(keep_dir);
	if (result)
		(void)unlink(to); /* a partial copy would pass for the whole range */
out:
	if (out >= 0)
		close(out);
	close(in);
	return result;
}
