/* rdbc_spool: batches the server has not acknowledged, on disk.
 *
 * Format (shared with clients/python/rankdb/_spool.py, so either client
 * replays the other's): <root>/<job>/r<rank>/<session>/ holds "lock"
 * (flock()ed by the owning process for its life) and one file per batch,
 * "<seq:012>.batch", written as "<name>.tmp" and renamed, so a .batch file
 * is always complete. A file is the line "#rankdb-batch <id> <records>\n"
 * followed by the NDJSON body exactly as POSTed.
 *
 * Exactly once: a file is deleted only after a 2xx (or a final refusal);
 * a resent batch carries its original id, which the server deduplicates.
 * Crash recovery: rdbc_spool_adopt() takes every other session directory of
 * the same job and rank whose lock is free, oldest batches first.
 * Bound: at most max_bytes of batch files; rdbc_spool_put drops the oldest
 * (counted, warned) to make room.
 *
 * Threading: every function takes s->lock; the batcher (put) and the sender
 * (adopt, oldest, remove) call it. File I/O happens under the lock, in those
 * background threads only.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rdbc_int.h"

#define SPOOL_HEADER   "#rankdb-batch "
#define SPOOL_DIRS_MAX 64u /* session directories held (own + adopted) */

struct entry {
	uint64_t token;
	uint64_t seq; /* the batch's sealing order; 0 for adopted batches (older) */
	unsigned dir; /* index in dirs[] */
	char path[512];
	char id[RDBC_ID_MAX + 1];
	size_t nrec;
	uint64_t size_bytes;
};

struct sdir {
	char path[400];
	int lock_fd; /* -1: released */
};

struct rdbc_spool {
	pthread_mutex_t lock;
	char rank_dir[400];
	struct sdir dirs[SPOOL_DIRS_MAX]; /* [0] is this process's session */
	unsigned ndirs;
	struct entry *ents; /* oldest first: ents[head .. head+n) */
	size_t head, n, cap;
	uint64_t bytes, max_bytes, next_token;
	uint64_t dropped_batches, dropped_records, adopted;
};

static int mkdirs(const char *path)
{
	char tmp[512];
	size_t len = strlen(path);
	if (len >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(tmp, path, len + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* flock()s <dir>/lock without waiting: the fd, or -1 (owned by a live process). */
static int take_lock(const char *dir)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/lock", dir);
	int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

struct rdbc_spool *rdbc_spool_open(const char *root, const char *job, int rank, const char *session,
				   uint64_t max_bytes)
{
	struct rdbc_spool *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	pthread_mutex_init(&s->lock, NULL);
	s->max_bytes = max_bytes;
	int n = snprintf(s->rank_dir, sizeof(s->rank_dir), "%s/%s/r%d", root, job, rank);
	int m = snprintf(s->dirs[0].path, sizeof(s->dirs[0].path), "%s/%s", s->rank_dir, session);
	if (n < 0 || (size_t)n >= sizeof(s->rank_dir) || m < 0 ||
	    (size_t)m >= sizeof(s->dirs[0].path) || mkdirs(s->dirs[0].path) != 0 ||
	    (s->dirs[0].lock_fd = take_lock(s->dirs[0].path)) < 0) {
		rdbc_warn("spool",
			  "rankdb: spool directory %s/%s/r%d is not usable: batches the "
			  "server does not take are kept in memory only",
			  root, job, rank);
		pthread_mutex_destroy(&s->lock);
		free(s);
		return NULL;
	}
	s->ndirs = 1;
	return s;
}

/* Caller holds the lock. Appends an entry, growing the array (bounded by
 * max_bytes / header size in practice). */
static int push_entry(struct rdbc_spool *s, const struct entry *e, bool front)
{
	if (s->head + s->n == s->cap || (front && s->head == 0)) {
		size_t ncap = s->cap ? s->cap * 2 : 64;
		struct entry *ne = malloc(ncap * sizeof(*ne));
		if (!ne)
			return -ENOMEM;
		size_t off = ncap / 4; /* room in front for adopted batches */
		if (s->n)
			memcpy(ne + off, s->ents + s->head, s->n * sizeof(*ne));
		free(s->ents);
		s->ents = ne;
		s->cap = ncap;
		s->head = off;
	}
	if (front)
		s->ents[--s->head] = *e;
	else
		s->ents[s->head + s->n] = *e;
	s->n++;
	s->bytes += e->size_bytes;
	return 0;
}

/* Caller holds the lock. Counts and reports one dropped batch. */
static void count_drop(struct rdbc_spool *s, const char *id, size_t nrec)
{
	s->dropped_batches++;
	s->dropped_records += nrec;
	rdbc_warn("spool-full",
		  "rankdb: spool %s is full (%" PRIu64 " bytes): dropped the oldest batch "
		  "%s (%zu records); %" PRIu64 " batches (%" PRIu64 " records) dropped so far",
		  s->rank_dir, s->max_bytes, id, nrec, s->dropped_batches, s->dropped_records);
}

static void drop_oldest(struct rdbc_spool *s)
{
	struct entry *e = &s->ents[s->head];
	unlink(e->path);
	s->bytes -= e->size_bytes;
	count_drop(s, e->id, e->nrec);
	s->head++;
	s->n--;
}

/* Caller holds the lock; the last entry was just pushed. Moves it back
 * past newer ones (nearly always none: one compare). */
static void sink_last(struct rdbc_spool *s)
{
	size_t i = s->head + s->n - 1;
	while (i > s->head && s->ents[i - 1].seq > s->ents[i].seq) {
		struct entry t = s->ents[i - 1];
		s->ents[i - 1] = s->ents[i];
		s->ents[i] = t;
		i--;
	}
}

int rdbc_spool_put(struct rdbc_spool *s, const struct rdbc_batch *b)
{
	char hdr[RDBC_ID_MAX + 64];
	int hl = snprintf(hdr, sizeof(hdr), SPOOL_HEADER "%s %zu\n", b->id, b->nrec);
	uint64_t size = (uint64_t)hl + b->len;
	struct entry e = {.dir = 0, .seq = b->seq, .nrec = b->nrec, .size_bytes = size};
	char tmp[520];
	int rc = 0, fd = -1;
	pthread_mutex_lock(&s->lock);
	while (s->n && s->bytes + size > s->max_bytes) {
		if (s->ents[s->head].seq > b->seq) { /* b is the oldest: it goes */
			count_drop(s, b->id, b->nrec);
			pthread_mutex_unlock(&s->lock);
			return 0;
		}
		drop_oldest(s);
	}
	/* named by seq: an adopting process sends them in sealing order too */
	snprintf(e.path, sizeof(e.path), "%s/%012" PRIu64 ".batch", s->dirs[0].path, b->seq);
	snprintf(tmp, sizeof(tmp), "%s.tmp", e.path);
	memcpy(e.id, b->id, sizeof(e.id));
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	const char *parts[2] = {hdr, b->body};
	size_t lens[2] = {(size_t)hl, b->len};
	for (int i = 0; i < 2; i++) {
		size_t off = 0;
		while (off < lens[i]) {
			ssize_t w = write(fd, parts[i] + off, lens[i] - off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				rc = w < 0 ? -errno : -EIO;
				goto out;
			}
			off += (size_t)w;
		}
	}
	if (close(fd) != 0) {
		fd = -1;
		rc = -errno;
		goto out;
	}
	fd = -1;
	if (rename(tmp, e.path) != 0) {
		rc = -errno;
		goto out;
	}
	e.token = ++s->next_token;
	rc = push_entry(s, &e, false);
	if (rc != 0)
		unlink(e.path);
	else
		sink_last(s);
out:
	if (fd >= 0)
		close(fd);
	if (rc != 0) {
		unlink(tmp);
		rdbc_warn("spool-write", "rankdb: cannot write spool file %s: %s", e.path,
			  strerror(-rc));
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* Reads the header of a spool file into e. 0 or -EINVAL (damaged). */
static int read_header(const char *path, struct entry *e)
{
	FILE *f = fopen(path, "rbe");
	char line[RDBC_ID_MAX + 64];
	struct stat st;
	int rc = -EINVAL;
	if (!f)
		return -errno;
	if (fgets(line, sizeof(line), f) &&
	    strncmp(line, SPOOL_HEADER, strlen(SPOOL_HEADER)) == 0 && fstat(fileno(f), &st) == 0) {
		char *id = line + strlen(SPOOL_HEADER), *sp = strchr(id, ' ');
		if (sp && (size_t)(sp - id) <= RDBC_ID_MAX && sp > id) {
			char *end;
			unsigned long long nrec = strtoull(sp + 1, &end, 10);
			if (*end == '\n') {
				memcpy(e->id, id, (size_t)(sp - id));
				e->id[sp - id] = 0;
				e->nrec = (size_t)nrec;
				e->size_bytes = (uint64_t)st.st_size;
				rc = 0;
			}
		}
	}
	fclose(f);
	return rc;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names in dir ending in suffix (max 100000); caller frees. */
static size_t list_dir(const char *dir, const char *suffix, bool dirs_only, char ***out)
{
	DIR *d = opendir(dir);
	size_t n = 0, cap = 0;
	char **v = NULL;
	struct dirent *de;
	*out = NULL;
	if (!d)
		return 0;
	while ((de = readdir(d)) && n < 100000) {
		size_t l = strlen(de->d_name), sl = strlen(suffix);
		if (de->d_name[0] == '.' || l < sl || strcmp(de->d_name + l - sl, suffix) != 0)
			continue;
		if (dirs_only && de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
			continue;
		if (n == cap) {
			char **nv = realloc(v, (cap = cap ? cap * 2 : 16) * sizeof(*v));
			if (!nv)
				break;
			v = nv;
		}
		if (!(v[n] = strdup(de->d_name)))
			break;
		n++;
	}
	closedir(d);
	if (n)
		qsort(v, n, sizeof(*v), cmp_names);
	*out = v;
	return n;
}

static void free_list(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* Caller holds the lock. Adds the batches of dirs[di] at the front. */
static size_t adopt_dir(struct rdbc_spool *s, unsigned di, struct entry **acc, size_t *nacc,
			size_t *cap)
{
	char **names;
	size_t n = list_dir(s->dirs[di].path, "", false, &names), got = 0;
	for (size_t i = 0; i < n; i++) {
		char p[512];
		struct entry e = {.dir = di};
		size_t l = strlen(names[i]);
		snprintf(p, sizeof(p), "%s/%s", s->dirs[di].path, names[i]);
		if (l > 4 && strcmp(names[i] + l - 4, ".tmp") == 0) {
			unlink(p); /* a write cut by a crash: never acknowledged, never complete */
			continue;
		}
		if (l < 6 || strcmp(names[i] + l - 6, ".batch") != 0)
			continue;
		snprintf(e.path, sizeof(e.path), "%s", p);
		if (read_header(p, &e) != 0) {
			rdbc_warn("spool-bad", "rankdb: spool file %s is damaged; deleted", p);
			unlink(p);
			continue;
		}
		if (*nacc == *cap) {
			struct entry *na =
			    realloc(*acc, (*cap = *cap ? *cap * 2 : 64) * sizeof(**acc));
			if (!na)
				break;
			*acc = na;
		}
		(*acc)[(*nacc)++] = e;
		got++;
	}
	free_list(names, n);
	return got;
}

static void remove_dir_if_empty(struct rdbc_spool *s, unsigned di)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->ents[s->head + i].dir == di)
			return;
	char **names, p[512];
	size_t n = list_dir(s->dirs[di].path, ".batch", false, &names);
	free_list(names, n);
	if (n == 0) {
		snprintf(p, sizeof(p), "%s/lock", s->dirs[di].path);
		unlink(p);
		rmdir(s->dirs[di].path);
	}
	if (di != 0 && s->dirs[di].lock_fd >= 0) {
		close(s->dirs[di].lock_fd);
		s->dirs[di].lock_fd = -1;
	}
}

size_t rdbc_spool_adopt(struct rdbc_spool *s)
{
	char **names;
	struct entry *acc = NULL;
	size_t nacc = 0, cap = 0;
	pthread_mutex_lock(&s->lock);
	size_t n = list_dir(s->rank_dir, "", true, &names);
	for (size_t i = 0; i < n && s->ndirs < SPOOL_DIRS_MAX; i++) {
		char p[400];
		if ((size_t)snprintf(p, sizeof(p), "%s/%s", s->rank_dir, names[i]) >= sizeof(p) ||
		    strcmp(p, s->dirs[0].path) == 0)
			continue;
		int fd = take_lock(p);
		if (fd < 0)
			continue; /* a live process owns it */
		unsigned di = s->ndirs++;
		memcpy(s->dirs[di].path, p, sizeof(p));
		s->dirs[di].lock_fd = fd;
		if (adopt_dir(s, di, &acc, &nacc, &cap) == 0)
			remove_dir_if_empty(s, di);
	}
	free_list(names, n);
	/* orphans are older than anything of this process; names sort by age
	 * (session = start time) and sequence */
	for (size_t i = nacc; i-- > 0;) {
		acc[i].token = ++s->next_token;
		if (push_entry(s, &acc[i], true) == 0)
			s->adopted++;
	}
	free(acc);
	pthread_mutex_unlock(&s->lock);
	return nacc;
}

struct rdbc_batch *rdbc_spool_oldest(struct rdbc_spool *s, uint64_t *token)
{
	struct rdbc_batch *b = NULL;
	pthread_mutex_lock(&s->lock);
	while (s->n && !b) {
		struct entry *e = &s->ents[s->head];
		FILE *f = fopen(e->path, "rbe");
		size_t hl = strlen(SPOOL_HEADER) + strlen(e->id) + 1 +
			    (size_t)snprintf(NULL, 0, "%zu", e->nrec) + 1;
		size_t len = e->size_bytes > hl ? (size_t)(e->size_bytes - hl) : 0;
		if (f && (b = malloc(sizeof(*b) + len + 1)) != NULL &&
		    fseek(f, (long)hl, SEEK_SET) == 0 && fread(b->body, 1, len, f) == len) {
			b->next = NULL;
			b->len = len;
			b->body[len] = 0;
			b->nrec = e->nrec;
			b->seq = e->seq;
			memcpy(b->id, e->id, sizeof(b->id));
			*token = e->token;
		} else {
			rdbc_warn("spool-read", "rankdb: spool file %s unreadable; skipped",
				  e->path);
			free(b);
			b = NULL;
			s->bytes -= e->size_bytes;
			s->head++;
			s->n--;
		}
		if (f)
			fclose(f);
	}
	pthread_mutex_unlock(&s->lock);
	return b;
}

void rdbc_spool_remove(struct rdbc_spool *s, uint64_t token)
{
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n; i++) {
		struct entry *e = &s->ents[s->head + i];
		if (e->token != token)
			continue;
		unsigned di = e->dir;
		unlink(e->path);
		s->bytes -= e->size_bytes;
		memmove(e, e + 1, (s->n - i - 1) * sizeof(*e));
		s->n--;
		if (di != 0)
			remove_dir_if_empty(s, di);
		break;
	}
	pthread_mutex_unlock(&s->lock);
}

size_t rdbc_spool_count(struct rdbc_spool *s)
{
	pthread_mutex_lock(&s->lock);
	size_t n = s->n;
	pthread_mutex_unlock(&s->lock);
	return n;
}

void rdbc_spool_stats(struct rdbc_spool *s, struct rdbc_stats *st)
{
	pthread_mutex_lock(&s->lock);
	st->spool_batches = s->n;
	st->spool_bytes = s->bytes;
	st->spool_dropped_batches = s->dropped_batches;
	st->spool_dropped_records = s->dropped_records;
	st->spool_adopted_batches = s->adopted;
	pthread_mutex_unlock(&s->lock);
}

void rdbc_spool_close(struct rdbc_spool *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < s->ndirs; i++) {
		remove_dir_if_empty(s, i);
		if (s->dirs[i].lock_fd >= 0)
			close(s->dirs[i].lock_fd);
	}
	free(s->ents);
	pthread_mutex_unlock(&s->lock);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
