/* Tests of rdbc against a fake rankdb server (a thread in this process) that
 * refuses connections, delays, holds, drops connections and answers 503:
 * every step arrives exactly once, log calls return while the server is
 * held, a crashed process's spool is replayed by the next one, the spool
 * bound drops and counts, close() is bounded, and UDP delivers.
 *
 * The fake server takes one connection at a time (the client keeps one),
 * dedups by X-Rankdb-Batch-Id as rankdbd does, and counts, per step, the
 * metrics records carrying "loss". No timing assertions beyond generous
 * bounds ("returns while the server is held").
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rdbc.h"

#define MAX_STEPS 200000
#define MAX_IDS	  20000

enum mode { M_OK, M_503, M_DELAY, M_BLOCK, M_DROP_BEFORE, M_DROP_AFTER };

static struct fake {
	pthread_t th;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int port;
	_Atomic int mode;
	_Atomic bool want_listen, stop, released;
	int delay_ms;
	char (*ids)[130];
	size_t nids;
	unsigned *steps; /* loss records per step */
	unsigned long requests, duplicates, spans, logs, heartbeats;
	char meta[1024];
} F;

static int failures;
#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);   \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
			failures++;                                                                \
			return;                                                                    \
		}                                                                                  \
	} while (0)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the fake server -------------------------------------------------------- */

static int listen_on(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 16) != 0) {
		perror("fake server bind/listen");
		exit(2);
	}
	socklen_t l = sizeof(a);
	getsockname(fd, (struct sockaddr *)&a, &l);
	F.port = ntohs(a.sin_port);
	return fd;
}

static void apply(const char *id, char *body, size_t len)
{
	pthread_mutex_lock(&F.lock);
	for (size_t i = 0; id && i < F.nids; i++)
		if (strcmp(F.ids[i], id) == 0) {
			F.duplicates++;
			pthread_mutex_unlock(&F.lock);
			return;
		}
	if (id && F.nids < MAX_IDS)
		snprintf(F.ids[F.nids++], sizeof(F.ids[0]), "%s", id);
	body[len] = 0;
	for (char *line = body, *nl; line && *line; line = nl ? nl + 1 : NULL) {
		nl = strchr(line, '\n');
		if (nl)
			*nl = 0;
		if (strstr(line, "\"type\":\"span\""))
			F.spans++;
		else if (strstr(line, "\"type\":\"log\""))
			F.logs++;
		else if (strstr(line, "\"heartbeat\""))
			F.heartbeats++;
		else if (strstr(line, "\"loss\":")) {
			char *st = strstr(line, "\"step\":");
			long s = st ? strtol(st + 7, NULL, 10) : -1;
			if (s >= 0 && s < MAX_STEPS)
				F.steps[s]++;
		}
	}
	pthread_mutex_unlock(&F.lock);
}

static void answer(int fd, int status, const char *extra, const char *body)
{
	char buf[512];
	int n = snprintf(buf, sizeof(buf),
			 "HTTP/1.1 %d X\r\nContent-Type: application/json\r\n%s"
			 "Content-Length: %zu\r\n\r\n%s",
			 status, extra, strlen(body), body);
	if (send(fd, buf, (size_t)n, MSG_NOSIGNAL) < 0)
		return; /* the client gave up on this request */
}

/* Reads into buf until want bytes or the connection/listening ends. */
static bool read_some(int fd, char *buf, size_t *have, size_t cap)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	while (atomic_load(&F.want_listen) && !atomic_load(&F.stop)) {
		if (poll(&p, 1, 20) <= 0)
			continue;
		ssize_t r = recv(fd, buf + *have, cap - *have, 0);
		if (r <= 0)
			return false;
		*have += (size_t)r;
		return true;
	}
	return false;
}

static void serve_conn(int fd)
{
	size_t cap = 64u << 20, have = 0;
	char *buf = malloc(cap + 1);
	for (;;) {
		char *end;
		while (!(buf[have] = 0, end = strstr(buf, "\r\n\r\n")))
			if (have == cap || !read_some(fd, buf, &have, cap))
				goto out;
		size_t hlen = (size_t)(end + 4 - buf), clen = 0;
		char id[130] = "", *p;
		if ((p = strcasestr(buf, "Content-Length:")) && p < end)
			clen = strtoul(p + 15, NULL, 10);
		if ((p = strcasestr(buf, "X-Rankdb-Batch-Id:")) && p < end)
			sscanf(p + 18, " %129[^\r\n]", id);
		bool put = strncmp(buf, "PUT ", 4) == 0;
		int mode = atomic_load(&F.mode);
		pthread_mutex_lock(&F.lock);
		F.requests += !put;
		pthread_mutex_unlock(&F.lock);
		if (mode == M_DROP_BEFORE)
			goto out;
		while (have < hlen + clen)
			if (!read_some(fd, buf, &have, cap))
				goto out;
		if (mode == M_503) {
			answer(fd, 503, "Retry-After: 0.2\r\n", "{\"error\":\"saturated\"}");
		} else {
			if (mode == M_DELAY)
				usleep((useconds_t)F.delay_ms * 1000);
			pthread_mutex_lock(&F.lock);
			while (mode == M_BLOCK && !atomic_load(&F.released) &&
			       !atomic_load(&F.stop))
				pthread_cond_wait(&F.cond, &F.lock);
			pthread_mutex_unlock(&F.lock);
			if (put) {
				pthread_mutex_lock(&F.lock);
				snprintf(F.meta, sizeof(F.meta), "%.*s", (int)clen, buf + hlen);
				pthread_mutex_unlock(&F.lock);
				answer(fd, 200, "", "{}");
			} else {
				size_t before = F.duplicates;
				char save = buf[hlen + clen];
				apply(id[0] ? id : NULL, buf + hlen, clen);
				buf[hlen + clen] = save;
				if (mode == M_DROP_AFTER)
					goto out;
				answer(fd, 200, "",
				       F.duplicates != before ? "{\"duplicate\":true}" : "{}");
			}
		}
		memmove(buf, buf + hlen + clen, have - hlen - clen);
		have -= hlen + clen;
	}
out:
	free(buf);
	close(fd);
}

static void *fake_main(void *arg)
{
	int lfd = *(int *)arg;
	while (!atomic_load(&F.stop)) {
		if (!atomic_load(&F.want_listen)) {
			if (lfd >= 0)
				close(lfd);
			lfd = -1;
			usleep(10000);
			continue;
		}
		if (lfd < 0)
			lfd = listen_on(F.port);
		struct pollfd p = {.fd = lfd, .events = POLLIN};
		if (poll(&p, 1, 20) <= 0)
			continue;
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0)
			serve_conn(fd);
	}
	if (lfd >= 0)
		close(lfd);
	return NULL;
}

static void fake_start(void)
{
	static int lfd;
	pthread_mutex_init(&F.lock, NULL);
	pthread_cond_init(&F.cond, NULL);
	F.ids = calloc(MAX_IDS, sizeof(*F.ids));
	F.steps = calloc(MAX_STEPS, sizeof(*F.steps));
	atomic_store(&F.want_listen, true);
	lfd = listen_on(0);
	pthread_create(&F.th, NULL, fake_main, &lfd);
}

static void fake_reset(void)
{
	pthread_mutex_lock(&F.lock);
	F.nids = 0;
	memset(F.steps, 0, MAX_STEPS * sizeof(*F.steps));
	F.requests = F.duplicates = F.spans = F.logs = F.heartbeats = 0;
	F.meta[0] = 0;
	atomic_store(&F.mode, M_OK);
	atomic_store(&F.released, false);
	pthread_mutex_unlock(&F.lock);
}

static void fake_release(void)
{
	pthread_mutex_lock(&F.lock);
	atomic_store(&F.released, true);
	pthread_cond_broadcast(&F.cond);
	pthread_mutex_unlock(&F.lock);
}

/* ---- helpers ---------------------------------------------------------------------- */

static char spool_root[256];
static unsigned test_no;

static struct rdbc *client(const char *job, int rank, struct rdbc_opts *extra)
{
	static char url[64];
	struct rdbc_opts o;
	struct rdbc *c = NULL;
	rdbc_opts_default(&o);
	if (extra)
		o = *extra;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", F.port);
	o.url = url;
	o.job = job;
	o.rank = rank;
	o.world_size = 4;
	o.spool_dir = spool_root;
	o.flush_interval_ms = 50;
	o.heartbeat_ms = extra && extra->heartbeat_ms ? extra->heartbeat_ms : 0;
	o.backoff_max_ms = 300;
	if (!extra || !extra->http_timeout_ms)
		o.http_timeout_ms = 5000;
	if (rdbc_open(&o, &c) != 0) {
		fprintf(stderr, "rdbc_open failed\n");
		exit(2);
	}
	return c;
}

static void log_steps(struct rdbc *c, int from, int to)
{
	for (int s = from; s < to; s++) {
		struct rdbc_kv kv[4] = {
		    {"loss", 1.0 / (s + 1)}, {"lr", 3e-4}, {"grad_norm", 0.5}, {"m.x", s}};
		rdbc_log(c, s, kv, 4);
	}
}

/* NULL if every step in [from, to) arrived exactly `times` and no other, else why. */
static const char *exactly(int from, int to, unsigned times)
{
	static char why[200];
	pthread_mutex_lock(&F.lock);
	why[0] = 0;
	for (int s = 0; s < MAX_STEPS && !why[0]; s++) {
		unsigned want = s >= from && s < to ? times : 0;
		if (F.steps[s] != want)
			snprintf(why, sizeof(why), "step %d arrived %u times, expected %u", s,
				 F.steps[s], want);
	}
	pthread_mutex_unlock(&F.lock);
	return why[0] ? why : NULL;
}

/* Heartbeats are sent on the client's own timer (heartbeat_ms): on a busy
 * machine a fixed sleep may see only one, so the test waits for two. */
static bool two_heartbeats(struct rdbc *c)
{
	(void)c;
	pthread_mutex_lock(&F.lock);
	bool ok = F.heartbeats >= 2;
	pthread_mutex_unlock(&F.lock);
	return ok;
}

static bool wait_for(bool (*pred)(struct rdbc *), struct rdbc *c, double timeout_s)
{
	double end = now_s() + timeout_s;
	while (now_s() < end) {
		if (pred(c))
			return true;
		usleep(5000);
	}
	return false;
}

static uint64_t want_retries;
static bool retried(struct rdbc *c)
{
	struct rdbc_stats st;
	rdbc_get_stats(c, &st);
	return st.retries >= want_retries;
}

static bool spooled(struct rdbc *c)
{
	struct rdbc_stats st;
	rdbc_get_stats(c, &st);
	return st.queued == 0 && st.spool_batches > 0 &&
	       st.spool_batches >= st.batches_sealed - st.batches_sent;
}

static bool spool_dropped(struct rdbc *c)
{
	struct rdbc_stats st;
	rdbc_get_stats(c, &st);
	return st.queued == 0 && st.spool_dropped_records > 0;
}

static char jobname[64];
static const char *job(void)
{
	snprintf(jobname, sizeof(jobname), "cjob%u", ++test_no);
	return jobname;
}

/* ---- tests ------------------------------------------------------------------------- */

static void test_roundtrip(void)
{
	fake_reset();
	struct rdbc_opts o;
	rdbc_opts_default(&o);
	o.heartbeat_ms = 20;
	o.config_hash = 0xabcdef;
	struct rdbc *c = client(job(), 0, &o);
	for (int s = 0; s < 500; s++) {
		rdbc_phase_begin(c, "forward");
		rdbc_phase_end(c);
		rdbc_phase_begin(c, "backward");
		rdbc_phase_end(c);
		log_steps(c, s, s + 1);
		rdbc_message(c, RDBC_WARN, RDBC_NO_STEP, "step done \"quoted\" \xff bad byte");
		rdbc_step_done(c, s, 1000);
	}
	CHECK(wait_for(two_heartbeats, c, 30), "fewer than 2 heartbeats in 30 s (heartbeat_ms 20)");
	struct rdbc_stats st;
	CHECK(rdbc_close(c, "finished", 20000, &st) == 0, "close did not deliver everything");
	const char *why = exactly(0, 500, 1);
	CHECK(!why, "%s", why);
	CHECK(F.spans == 1000, "spans %lu", F.spans);
	CHECK(F.logs == 501, "logs %lu", F.logs);
	CHECK(F.heartbeats >= 2, "heartbeats %lu", F.heartbeats);
	CHECK(strstr(F.meta, "\"status\":\"finished\"") && strstr(F.meta, "\"world_size\":4"),
	      "meta %s", F.meta);
	CHECK(st.records_sent > 2000 && st.dropped_invalid == 0 && st.retries == 0, "stats");
	CHECK(F.requests < 200, "%lu requests: not batched", F.requests);
}

static void test_503_retry_after(void)
{
	fake_reset();
	struct rdbc *c = client(job(), 1, NULL);
	atomic_store(&F.mode, M_503);
	log_steps(c, 0, 300);
	want_retries = 3;
	CHECK(wait_for(retried, c, 30), "no retries on 503");
	atomic_store(&F.mode, M_OK);
	log_steps(c, 300, 600);
	CHECK(rdbc_flush(c, 30000) == 0, "flush");
	const char *why = exactly(0, 600, 1);
	CHECK(!why, "%s", why);
	rdbc_close(c, NULL, 5000, NULL);
}

static void test_dropped_connections(void)
{
	fake_reset();
	struct rdbc *c = client(job(), 1, NULL);
	atomic_store(&F.mode, M_DROP_AFTER);
	log_steps(c, 0, 300);
	want_retries = 3;
	CHECK(wait_for(retried, c, 30), "no retries on dropped answers");
	atomic_store(&F.mode, M_DROP_BEFORE);
	log_steps(c, 300, 600);
	want_retries = 6;
	CHECK(wait_for(retried, c, 30), "no retries on dropped requests");
	atomic_store(&F.mode, M_OK);
	CHECK(rdbc_flush(c, 30000) == 0, "flush");
	const char *why = exactly(0, 600, 1);
	CHECK(!why, "%s", why);
	CHECK(F.duplicates >= 1, "resent batches must come back as duplicates");
	rdbc_close(c, NULL, 5000, NULL);
}

static void test_outage_spool_replay(void)
{
	fake_reset();
	struct rdbc *c = client(job(), 2, NULL);
	log_steps(c, 0, 100);
	CHECK(rdbc_flush(c, 10000) == 0, "flush");
	atomic_store(&F.want_listen, false); /* the server is gone */
	log_steps(c, 100, 3000);
	CHECK(wait_for(spooled, c, 30), "batches not spooled during the outage");
	atomic_store(&F.want_listen, true);
	CHECK(rdbc_flush(c, 30000) == 0, "flush after the outage");
	const char *why = exactly(0, 3000, 1);
	CHECK(!why, "%s", why);
	struct rdbc_stats st;
	rdbc_get_stats(c, &st);
	CHECK(st.spool_batches == 0 && st.spool_dropped_records == 0, "spool left %llu",
	      (unsigned long long)st.spool_batches);
	rdbc_close(c, NULL, 5000, NULL);
}

static void test_delayed_answers(void)
{
	fake_reset();
	struct rdbc_opts o;
	rdbc_opts_default(&o);
	o.http_timeout_ms = 100; /* the server answers after 300 ms: every first try times out */
	struct rdbc *c = client(job(), 0, &o);
	F.delay_ms = 300;
	atomic_store(&F.mode, M_DELAY);
	log_steps(c, 0, 500);
	want_retries = 2;
	CHECK(wait_for(retried, c, 30), "no timeouts");
	atomic_store(&F.mode, M_OK);
	CHECK(rdbc_flush(c, 30000) == 0, "flush");
	const char *why = exactly(0, 500, 1);
	CHECK(!why, "%s", why);
	rdbc_close(c, NULL, 5000, NULL);
}

static void test_log_never_blocks(void)
{
	fake_reset();
	struct rdbc_opts o;
	rdbc_opts_default(&o);
	o.queue_max_records = 300000;
	o.http_timeout_ms = 60000;
	struct rdbc *c = client(job(), 3, &o);
	atomic_store(&F.mode, M_BLOCK);
	double worst = 0;
	for (int s = 0; s < 100000; s++) {
		double t = now_s();
		rdbc_log1(c, s, "loss", s);
		if (now_s() - t > worst)
			worst = now_s() - t;
	}
	CHECK(!atomic_load(&F.released), "the server was released");
	CHECK(worst < 5.0, "one rdbc_log call took %.3f s", worst); /* generous: it must not wait */
	struct rdbc_stats st;
	rdbc_get_stats(c, &st);
	CHECK(st.dropped_queue_full == 0, "dropped %llu",
	      (unsigned long long)st.dropped_queue_full);
	fake_release();
	atomic_store(&F.mode, M_OK);
	CHECK(rdbc_flush(c, 60000) == 0, "flush");
	const char *why = exactly(0, 100000, 1);
	CHECK(!why, "%s", why);
	rdbc_close(c, NULL, 5000, NULL);
}

static void test_close_bounded_then_replayed(void)
{
	fake_reset();
	const char *j = job();
	struct rdbc_opts o;
	rdbc_opts_default(&o);
	o.http_timeout_ms = 60000;
	struct rdbc *c = client(j, 0, &o);
	atomic_store(&F.mode, M_BLOCK);
	log_steps(c, 0, 1000);
	double t = now_s();
	int rc = rdbc_close(c, "finished", 500, NULL);
	t = now_s() - t;
	CHECK(rc == -ETIMEDOUT && t < 20, "close: rc %d after %.1f s", rc, t);
	fake_release();
	atomic_store(&F.mode, M_OK);
	c = client(j, 0, NULL); /* the next process of this rank */
	CHECK(rdbc_flush(c, 30000) == 0, "flush");
	const char *why = exactly(0, 1000, 1);
	CHECK(!why, "%s", why);
	rdbc_close(c, NULL, 5000, NULL);
}

static void test_crash_replay(void)
{
	fake_reset();
	const char *j = job();
	atomic_store(&F.want_listen, false);
	pid_t pid = fork();
	if (pid == 0) {
		struct rdbc *c = client(j, 5, NULL);
		log_steps(c, 0, 3000);
		rdbc_flush(c, 300); /* seals; cannot deliver */
		bool ok = wait_for(spooled, c, 30);
		_exit(ok ? 9 : 3); /* a crash: no rdbc_close */
	}
	int status = 0;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 9, "crashing child: status %d", status);
	atomic_store(&F.want_listen, true);
	struct rdbc *c = client(j, 5, NULL);
	CHECK(rdbc_flush(c, 30000) == 0, "flush");
	struct rdbc_stats st;
	rdbc_get_stats(c, &st);
	CHECK(st.spool_adopted_batches > 0, "nothing adopted");
	const char *why = exactly(0, 3000, 1);
	CHECK(!why, "%s", why);
	rdbc_close(c, NULL, 5000, NULL);
}

static void test_spool_bound(void)
{
	fake_reset();
	struct rdbc_opts o;
	rdbc_opts_default(&o);
	o.spool_max_bytes = 100000;
	o.batch_max_bytes = 16384;
	atomic_store(&F.want_listen, false);
	struct rdbc *c = client(job(), 6, &o);
	log_steps(c, 0, 20000);
	CHECK(wait_for(spool_dropped, c, 30), "the spool bound never dropped");
	atomic_store(&F.want_listen, true);
	CHECK(rdbc_flush(c, 30000) == 0, "flush");
	struct rdbc_stats st;
	rdbc_get_stats(c, &st);
	unsigned got = 0, dup = 0;
	pthread_mutex_lock(&F.lock);
	for (int s = 0; s < 20000; s++)
		got += F.steps[s] == 1, dup += F.steps[s] > 1;
	pthread_mutex_unlock(&F.lock);
	/* every record is stored once or counted as dropped (+2: start record and log line) */
	CHECK(dup == 0 && st.records_sent + st.spool_dropped_records == 20002 && got > 0 &&
		  got < 20000,
	      "got %u dup %u sent %llu dropped %llu", got, dup, (unsigned long long)st.records_sent,
	      (unsigned long long)st.spool_dropped_records);
	rdbc_close(c, NULL, 5000, NULL);
}

static void test_udp(void)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), rcv = 8 << 20;
	struct sockaddr_in a = {.sin_family = AF_INET};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	bind(fd, (struct sockaddr *)&a, sizeof(a));
	socklen_t l = sizeof(a);
	getsockname(fd, (struct sockaddr *)&a, &l);
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(a.sin_port));
	struct rdbc_opts o;
	rdbc_opts_default(&o);
	o.udp_addr = addr;
	struct rdbc *c = client(job(), 0, &o);
	log_steps(c, 0, 2000);
	struct rdbc_stats st;
	CHECK(rdbc_close(c, NULL, 10000, &st) == 0, "udp close");
	unsigned loss = 0, datagrams = 0;
	static char buf[65536];
	struct pollfd p = {.fd = fd, .events = POLLIN};
	while (poll(&p, 1, 500) > 0) {
		ssize_t r = recv(fd, buf, sizeof(buf) - 1, 0);
		if (r <= 0)
			break;
		buf[r] = 0;
		datagrams++;
		CHECK(buf[r - 1] == '\n', "a datagram must end with a whole record");
		for (char *q = buf; (q = strstr(q, "\"loss\":")); q++)
			loss++;
	}
	close(fd);
	CHECK(datagrams == st.udp_datagrams && st.udp_errors == 0 && datagrams > 1,
	      "datagrams %u stats %llu", datagrams, (unsigned long long)st.udp_datagrams);
	CHECK(loss == 2000, "loss records over UDP: %u", loss);
}

/* The signing helper against docs/API.md's worked example, then a signed
 * client: every datagram is an envelope whose MAC re-signing reproduces,
 * with distinct nonces, and a bad key is refused at open. */
static void test_udp_signed(void)
{
	static const char ex_payload[] = "train,job=team-a-run1,rank=0 loss=2.25,step=100i";
	static const char ex_mac[] =
	    "076cf1d3764d065e8b40cda0d76ea4508efd1520f4c2e91f97381cf056acd61a";
	uint8_t secret[32], out[256];
	char hex[65];
	size_t n = 0;
	for (int i = 0; i < 32; i++)
		secret[i] = (uint8_t)i;
	CHECK(rdbc_udp_sign("team-a", secret, 32, 1767225600000ull, 42, ex_payload,
			    strlen(ex_payload), out, sizeof(out), &n) == 0 &&
		  n == 106,
	      "sign the worked example (%zu bytes)", n);
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", out[n - 32 + i]);
	CHECK(strcmp(hex, ex_mac) == 0, "worked example MAC %s", hex);
	CHECK(rdbc_udp_sign("bad id", secret, 32, 1, 1, "x", 1, out, sizeof(out), &n) == -EINVAL,
	      "bad key id");
	CHECK(rdbc_udp_sign("k", secret, 32, 1, 1, "x", 1, out, 40, &n) == -ENOSPC, "small cap");

	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), rcv = 8 << 20;
	struct sockaddr_in a = {.sin_family = AF_INET};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	bind(fd, (struct sockaddr *)&a, sizeof(a));
	socklen_t l = sizeof(a);
	getsockname(fd, (struct sockaddr *)&a, &l);
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(a.sin_port));
	struct rdbc_opts o;
	rdbc_opts_default(&o);
	o.udp_addr = addr;
	o.udp_key_id = "team-a";
	o.udp_key_secret = "zz";
	struct rdbc *bad = NULL;
	CHECK(rdbc_open(&o, &bad) == -EINVAL && !bad, "a secret that is not hex is refused");
	o.udp_key_secret = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
	struct rdbc *c = client(job(), 0, &o);
	log_steps(c, 0, 2000);
	struct rdbc_stats st;
	CHECK(rdbc_close(c, NULL, 10000, &st) == 0, "signed udp close");
	static uint8_t buf[65536], again[65536];
	uint64_t nonces[64];
	unsigned datagrams = 0, good = 0, distinct = 1;
	struct pollfd p = {.fd = fd, .events = POLLIN};
	while (poll(&p, 1, 500) > 0) {
		ssize_t r = recv(fd, buf, sizeof(buf), 0);
		if (r <= 0)
			break;
		datagrams++;
		if (r < 20 + 6 + 32 || buf[0] != 0xFE || buf[1] != 1 || buf[2] != 6 ||
		    memcmp(buf + 20, "team-a", 6) != 0)
			continue;
		uint64_t ts = 0, nonce = 0;
		for (int i = 7; i >= 0; i--) {
			ts = ts << 8 | buf[4 + i];
			nonce = nonce << 8 | buf[12 + i];
		}
		size_t m = 0;
		if (rdbc_udp_sign("team-a", secret, 32, ts, nonce, buf + 26, (size_t)r - 26 - 32,
				  again, sizeof(again), &m) == 0 &&
		    m == (size_t)r && memcmp(again, buf, m) == 0)
			good++;
		for (unsigned i = 0; i < datagrams - 1 && i < 64; i++)
			distinct &= nonces[i] != nonce;
		if (datagrams <= 64)
			nonces[datagrams - 1] = nonce;
	}
	close(fd);
	CHECK(datagrams == st.udp_datagrams && datagrams > 1 && good == datagrams,
	      "signed datagrams %u good %u stats %llu", datagrams, good,
	      (unsigned long long)st.udp_datagrams);
	CHECK(distinct, "every datagram has its own nonce");
}

static void test_env_defaults(void)
{
	struct rdbc_opts o;
	setenv("RANK", "3", 1);
	setenv("WORLD_SIZE", "8", 1);
	setenv("LOCAL_RANK", "1", 1);
	setenv("TORCHELASTIC_RUN_ID", "run42", 1);
	setenv("TORCHELASTIC_RESTART_COUNT", "2", 1);
	setenv("RANKDB_URL", "http://h:1", 1);
	rdbc_opts_default(&o);
	CHECK(o.rank == 3 && o.world_size == 8 && o.local_rank == 1 && o.attempt == 2 &&
		  strcmp(o.job, "run42") == 0 && strcmp(o.url, "http://h:1") == 0,
	      "torchrun env");
	unsetenv("RANK");
	unsetenv("WORLD_SIZE");
	unsetenv("LOCAL_RANK");
	unsetenv("TORCHELASTIC_RUN_ID");
	unsetenv("TORCHELASTIC_RESTART_COUNT");
	unsetenv("RANKDB_URL");
	setenv("SLURM_PROCID", "5", 1);
	setenv("SLURM_NTASKS", "16", 1);
	setenv("SLURM_JOB_ID", "991", 1);
	rdbc_opts_default(&o);
	CHECK(o.rank == 5 && o.world_size == 16 && strcmp(o.job, "991") == 0, "slurm env");
	unsetenv("SLURM_PROCID");
	unsetenv("SLURM_NTASKS");
	unsetenv("SLURM_JOB_ID");
	CHECK(rdbc_log1(NULL, 0, "x", 1) == -EINVAL && rdbc_close(NULL, NULL, 0, NULL) == 0,
	      "NULL handle");
}

int main(void)
{
	snprintf(spool_root, sizeof(spool_root), "%s/rdbc-test-%d",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
	mkdir(spool_root, 0755);
	setenv("RDBC_QUIET", "1", 1);
	fake_start();
	struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
	    {"env_defaults", test_env_defaults},
	    {"roundtrip", test_roundtrip},
	    {"503_retry_after", test_503_retry_after},
	    {"dropped_connections", test_dropped_connections},
	    {"outage_spool_replay", test_outage_spool_replay},
	    {"delayed_answers", test_delayed_answers},
	    {"log_never_blocks", test_log_never_blocks},
	    {"close_bounded_then_replayed", test_close_bounded_then_replayed},
	    {"crash_replay", test_crash_replay},
	    {"spool_bound", test_spool_bound},
	    {"udp", test_udp},
	    {"udp_signed", test_udp_signed},
	};
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		int before = failures;
		double t = now_s();
		tests[i].fn();
		printf("%s %s (%.1f s)\n", failures == before ? "ok  " : "FAIL", tests[i].name,
		       now_s() - t);
		fflush(stdout);
	}
	atomic_store(&F.stop, true);
	fake_release();
	pthread_join(F.th, NULL);
	free(F.ids);
	free(F.steps);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", spool_root);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", spool_root);
	printf("%d failed\n", failures);
	return failures ? 1 : 0;
}
