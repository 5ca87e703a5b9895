/* rdbc-overhead: what rdbc_log() of 32 metrics costs the training thread.
 *
 *   rdbc-overhead URL SPOOL_DIR [N]
 *
 * Times N calls (default 200000) one by one with CLOCK_MONOTONIC and prints
 * one JSON line: median, p90, p99 and max in ns, and the client's counters
 * after a bounded close. Run by bench/client_overhead.py against a running
 * and a stopped rankdbd; never by tests. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "rdbc.h"

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: rdbc-overhead URL SPOOL_DIR [N]\n");
		return 2;
	}
	size_t n = argc > 3 ? strtoul(argv[3], NULL, 10) : 200000;
	struct rdbc_opts o;
	struct rdbc *c;
	struct rdbc_kv kv[32];
	char names[32][24];
	int64_t *t = malloc(n * sizeof(*t));
	rdbc_opts_default(&o);
	o.url = argv[1];
	o.spool_dir = argv[2];
	o.job = "bench-rdbc";
	o.queue_max_records = n + 16;
	if (!t || rdbc_open(&o, &c) != 0)
		return 1;
	for (int i = 0; i < 32; i++) {
		snprintf(names[i], sizeof(names[i]), i ? "metric.%02d" : "loss", i);
		kv[i].name = names[i];
	}
	for (size_t s = 0; s < n; s++) {
		for (int i = 0; i < 32; i++)
			kv[i].value = (double)s * 0.001 + i;
		int64_t t0 = now_ns();
		rdbc_log(c, (int64_t)s, kv, 32);
		t[s] = now_ns() - t0;
	}
	struct rdbc_stats st;
	rdbc_close(c, "finished", 5000, &st);
	qsort(t, n, sizeof(*t), cmp);
	printf("{\"calls\":%zu,\"median_ns\":%" PRId64 ",\"p90_ns\":%" PRId64 ",\"p99_ns\":%" PRId64
	       ",\"max_ns\":%" PRId64 ",\"dropped_queue_full\":%" PRIu64
	       ",\"records_sent\":%" PRIu64 ",\"spool_batches\":%" PRIu64 "}\n",
	       n, t[n / 2], t[n * 9 / 10], t[n * 99 / 100], t[n - 1], st.dropped_queue_full,
	       st.records_sent, st.spool_batches);
	free(t);
	return 0;
}
