/* The rdbc spool keeps batches in sealing order (rdbc_batch.seq), whatever
 * order they are put in: the sender spilling its memory list (older
 * batches) overlaps the batcher putting newer ones, and the bound must then
 * drop the oldest, never the newest. Compiled with rdbc_spool.c alone (its
 * internal interface); rdbc_warn is this file's, counting warnings.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rdbc_int.h"

static int failures, full_warnings;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			failures++;                                                                \
			fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);   \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
		}                                                                                  \
	} while (0)

void rdbc_warn(const char *key, const char *fmt, ...)
{
	(void)fmt;
	full_warnings += strcmp(key, "spool-full") == 0;
}

static struct rdbc_batch *batch(uint64_t seq)
{
	static const size_t len = 200;
	struct rdbc_batch *b = calloc(1, sizeof(*b) + len + 1);
	if (!b)
		abort();
	b->seq = seq;
	snprintf(b->id, sizeof(b->id), "t.%llu", (unsigned long long)seq);
	memset(b->body, 'x', len);
	b->len = len;
	b->nrec = 1;
	return b;
}

/* Puts seq, returns 0 or the put's error. */
static int put(struct rdbc_spool *s, uint64_t seq)
{
	struct rdbc_batch *b = batch(seq);
	int rc = rdbc_spool_put(s, b);
	free(b);
	return rc;
}

int main(void)
{
	char root[256], path[600];
	snprintf(root, sizeof(root), "%s/rdbc-spool-order-%d",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
	mkdir(root, 0755);
	/* each file is ~215 bytes (header + 200): four fit in 900 */
	struct rdbc_spool *s = rdbc_spool_open(root, "job", 0, "s1", 900);
	CHECK(s != NULL, "open %s", root);
	if (!s)
		return 1;
	/* the batcher puts 9 and 10 first, then the spill brings 1..8 */
	const uint64_t order[] = {9, 10, 1, 2, 3, 4, 5, 6, 7, 8};
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++)
		CHECK(put(s, order[i]) == 0, "put %llu", (unsigned long long)order[i]);
	CHECK(rdbc_spool_count(s) == 4, "count %zu", rdbc_spool_count(s));
	CHECK(full_warnings == 6, "warnings %d", full_warnings);
	struct rdbc_stats st;
	memset(&st, 0, sizeof(st));
	rdbc_spool_stats(s, &st);
	CHECK(st.spool_dropped_records == 6, "dropped %llu",
	      (unsigned long long)st.spool_dropped_records);
	/* files are named by seq: an adopting process sends them in order too */
	for (uint64_t q = 1; q <= 10; q++) {
		snprintf(path, sizeof(path), "%s/job/r0/s1/%012llu.batch", root,
			 (unsigned long long)q);
		CHECK((access(path, F_OK) == 0) == (q >= 7), "file of batch %llu",
		      (unsigned long long)q);
	}
	/* older than every batch kept: it is the one dropped */
	CHECK(put(s, 3) == 0, "put 3 again");
	CHECK(rdbc_spool_count(s) == 4 && full_warnings == 7, "count %zu warnings %d",
	      rdbc_spool_count(s), full_warnings);
	/* sent oldest first, in sealing order */
	for (uint64_t want = 7; want <= 10; want++) {
		uint64_t token = 0;
		struct rdbc_batch *b = rdbc_spool_oldest(s, &token);
		CHECK(b && b->seq == want, "oldest %llu, want %llu",
		      b ? (unsigned long long)b->seq : 0ULL, (unsigned long long)want);
		free(b);
		rdbc_spool_remove(s, token);
	}
	CHECK(rdbc_spool_count(s) == 0, "left %zu", rdbc_spool_count(s));
	rdbc_spool_close(s);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", root);
	printf("%d failed\n", failures);
	return failures ? 1 : 0;
}
