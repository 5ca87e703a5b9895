/* udp.c - the UDP sender of rdb-load (see udp.h).
 *
 * Packing: lines are taken in workload order (step block, then rank) and
 * appended to the current datagram until the next line would pass
 * datagram_bytes; a datagram is a slice of the one text buffer, so nothing
 * is copied. Each datagram records how many lines come before it, which
 * gives its send deadline when paced: t0 + points_before / rate.
 *
 * Sending: `senders` threads, each with its own connected UDP socket, start
 * on a barrier and take the next datagram index from one atomic counter, so
 * datagrams leave in roughly workload order. Paced, a thread sleeps
 * (clock_nanosleep, absolute) until the deadline of the datagram it took.
 * send() errors (ENOBUFS, ECONNREFUSED after an ICMP port-unreachable, ...)
 * are counted, never retried: a lost datagram is what is being measured.
 */
#include "bench/udp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_SENDERS 1024

struct dgram {
	size_t off, len;
	uint64_t lines_before; /* lines in earlier datagrams */
	uint32_t lines;
};

struct udp_run {
	const struct udp_load_opts *o;
	const char *text;
	struct dgram *d;
	size_t n;
	atomic_size_t next;
	atomic_uint_fast64_t datagrams, lines, bytes, errors;
	struct timespec t0; /* common start, CLOCK_MONOTONIC */
	pthread_barrier_t start;
	struct sockaddr_in to;
};

static double ts_s(const struct timespec *t)
{
	return (double)t->tv_sec + (double)t->tv_nsec * 1e-9;
}

/* Cuts text into datagrams of whole lines. Returns 0, -EINVAL or -ENOMEM. */
static int pack(struct udp_run *r, size_t len)
{
	size_t cap = 1024, pos = 0;
	uint64_t lines = 0;

	r->n = 0;
	r->d = malloc(cap * sizeof(*r->d));
	if (!r->d)
		return -ENOMEM;
	while (pos < len) {
		struct dgram g = {.off = pos, .lines_before = lines};

		while (pos < len) {
			const char *nl = memchr(r->text + pos, '\n', len - pos);
			size_t l = nl ? (size_t)(nl - (r->text + pos)) + 1 : len - pos;

			if (g.len + l > r->o->datagram_bytes) {
				if (g.lines == 0) {
					fprintf(stderr,
						"rdb-load: a %zu-byte line does not fit in "
						"--datagram-bytes %u\n",
						l, r->o->datagram_bytes);
					return -EINVAL;
				}
				break;
			}
			g.len += l;
			g.lines++;
			pos += l;
		}
		if (r->n == cap) {
			struct dgram *nd = realloc(r->d, 2 * cap * sizeof(*nd));
			if (!nd)
				return -ENOMEM;
			r->d = nd;
			cap *= 2;
		}
		r->d[r->n++] = g;
		lines += g.lines;
	}
	return 0;
}

/* Sleeps until t0 + points_before / rate. */
static void pace(const struct udp_run *r, const struct dgram *g)
{
	double at = (double)(g->lines_before * r->o->metrics) / (double)r->o->rate;
	struct timespec t = r->t0;
	long long ns = (long long)(at * 1e9) + t.tv_nsec;

	t.tv_sec += (time_t)(ns / 1000000000);
	t.tv_nsec = (long)(ns % 1000000000);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR)
		;
}

static void *sender_main(void *arg)
{
	struct udp_run *r = arg;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	size_t i;

	if (fd >= 0 && connect(fd, (const struct sockaddr *)&r->to, sizeof(r->to)) != 0) {
		close(fd);
		fd = -1;
	}
	pthread_barrier_wait(&r->start);
	while ((i = atomic_fetch_add(&r->next, 1)) < r->n) {
		const struct dgram *g = &r->d[i];

		if (r->o->rate)
			pace(r, g);
		if (fd < 0 || send(fd, r->text + g->off, g->len, 0) != (ssize_t)g->len) {
			atomic_fetch_add(&r->errors, 1);
			continue;
		}
		atomic_fetch_add(&r->datagrams, 1);
		atomic_fetch_add(&r->lines, g->lines);
		atomic_fetch_add(&r->bytes, g->len);
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

int udp_load(const char *text, size_t len, const struct udp_load_opts *o,
	     struct udp_load_result *res)
{
	struct udp_run r = {.o = o, .text = text};
	pthread_t *th;
	struct timespec t1;
	uint32_t n = o->senders, started = 0;
	int rc;

	memset(res, 0, sizeof(*res));
	if (n < 1 || n > MAX_SENDERS || o->datagram_bytes < 1)
		return -EINVAL;
	r.to.sin_family = AF_INET;
	r.to.sin_port = htons(o->port);
	if (inet_pton(AF_INET, o->host, &r.to.sin_addr) != 1)
		return -EINVAL;
	rc = pack(&r, len);
	th = calloc(n, sizeof(*th));
	if (rc == 0 && !th)
		rc = -ENOMEM;
	if (rc == 0 && pthread_barrier_init(&r.start, NULL, n + 1) != 0)
		rc = -ENOMEM;
	if (rc) {
		free(th);
		free(r.d);
		return rc;
	}
	res->planned = r.n;
	atomic_store(&r.next, 0);
	/* Paced deadlines count from t0, taken just before the barrier opens. */
	for (; started < n; started++)
		if (pthread_create(&th[started], NULL, sender_main, &r) != 0)
			break;
	if (started < n) {
		fprintf(stderr, "rdb-load: cannot start sender thread %u\n", started);
		exit(2);
	}
	clock_gettime(CLOCK_MONOTONIC, &r.t0);
	pthread_barrier_wait(&r.start);
	for (uint32_t i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	pthread_barrier_destroy(&r.start);
	res->datagrams = atomic_load(&r.datagrams);
	res->lines = atomic_load(&r.lines);
	res->points = res->lines * o->metrics;
	res->bytes = atomic_load(&r.bytes);
	res->send_errors = atomic_load(&r.errors);
	res->seconds = ts_s(&t1) - ts_s(&r.t0);
	free(th);
	free(r.d);
	return 0;
}
