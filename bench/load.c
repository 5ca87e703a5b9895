/* load.c - rdb-load: HTTP write-path load generator for rankdbd.
 *
 * Phases:
 *  1. Generate. The workload of gen.h is cut into bodies of --batch-records
 *     records: --ranks-per-body ranks (default 1, like one client per rank)
 *     x the steps that fit. Bodies are ordered step block first, then rank
 *     group, which is the order a live job would deliver them. All bodies
 *     and their request heads are built in memory up front, on all CPUs, so
 *     the timed phase does nothing but network I/O.
 *  2. Load (load_ev.c). --connections keep-alive HTTP/1.1 connections (raw
 *     sockets, no libcurl), driven by --threads event-loop threads (epoll,
 *     non-blocking sockets; default 1), all opened before the clock starts.
 *     Each connection is a closed loop: it pulls the next body index from
 *     one atomic counter (so bodies arrive in roughly time order), sends it,
 *     reads the whole response, and only then takes the next. A 429/503 is
 *     retried on the same body after its Retry-After seconds (1 s when
 *     absent; a timer, the other connections go on), up to --max-retries
 *     times; a broken connection is reopened and the body resent (up to 3
 *     times in a row); a request with no progress (no byte written or read)
 *     for --timeout-s counts as broken. Any other status is a failed
 *     request. A resend after the request was written whole may store it
 *     twice (the server may have taken it and failed before answering):
 *     such resends are counted apart (resends) so a run with any can be
 *     flagged; one after a partial write cannot (Content-Length).
 *  3. Report. Points (= records x metrics) of 2xx bodies, bodies, body bytes,
 *     wall seconds from the start to the last response, points/s, MB/s,
 *     errors, retries, reconnects, resends, request latency percentiles,
 *     the loader's own CPU time in the timed phase (per request, resends
 *     included); then one "result key=value ..." line for scripts. --repeat N sends every body
 *     N times (bodies are reused, so only meaningful against the sink: a
 *     server would store duplicates); points and bytes count every send.
 *
 * --format lp sends InfluxDB line protocol (text/plain), one line per record;
 * give the peer's write path with --path (e.g. "/write?precision=ns").
 *
 * --udp sends the same workload as UDP datagrams instead (udp.h): line
 * protocol by default (--format lp; ndjson also works, json does not), whole
 * lines packed into datagrams of at most --datagram-bytes (8192), from
 * --connections sender threads, unpaced or paced to --rate points/s. It
 * prints datagrams, points and bytes handed to the kernel, seconds and
 * points/s offered; what the server stored is for the caller to read from
 * its /metrics (bench/run.sh --udp does). Exit 1 if any send() failed.
 *
 * --sink starts an in-process discard HTTP server (http.h) on a free loopback
 * port and loads that instead: the loader's own ceiling on this machine.
 * The sink shares the CPUs with the loader, so the ceiling is conservative
 * (and the process CPU printed includes the sink's threads; the loader CPU
 * counts the event-loop threads only).
 *
 * Exit status: 0 when every body got a 2xx; 1 when any request failed
 * (non-retryable status, retries exhausted, connection failures); 2 on bad
 * usage or setup errors.
 */
#include "bench/gen.h"
#include "bench/http.h"
#include "bench/load.h"
#include "bench/udp.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MAX_ERROR_REPORTS 10 /* failed requests printed to stderr */
#define BODY_MAX_BYTES	  (1u << 30)

/* ---- options ---- */

static void usage(FILE *f)
{
	fputs("usage: rdb-load [--size small|default|large] [--ranks R] [--metrics M] [--steps S]\n"
	      "                [--seed N] [--format json|ndjson|lp] [--batch-records N]\n"
	      "                [--ranks-per-body K] [--connections C] [--threads T]\n"
	      "                [--host 127.0.0.1] [--port P | --sink] [--path /api/v1/write]\n"
	      "                [--max-retries N] [--timeout-s N] [--repeat N]\n"
	      "         --timeout-s: a request that writes and reads nothing for this long\n"
	      "         (or a connect that does not complete) has failed and is resent\n"
	      "       rdb-load [workload options] --udp --port P [--host 127.0.0.1]\n"
	      "                [--format lp|ndjson] [--datagram-bytes 8192] [--connections C]\n"
	      "                [--rate POINTS_PER_S]\n",
	      f);
}

static int opt_u32(const char *flag, const char *v, uint32_t lo, uint32_t hi, uint32_t *out)
{
	uint64_t x;

	if (gen_parse_u64(v, hi, &x) || x < lo) {
		fprintf(stderr, "rdb-load: %s wants an integer in %u..%u, got '%s'\n", flag, lo, hi,
			v);
		return -EINVAL;
	}
	*out = (uint32_t)x;
	return 0;
}

static int opt_workload(struct load_opts *o, const char *f, const char *v)
{
	if (strcmp(f, "--ranks") == 0)
		return opt_u32(f, v, 1, 1u << 20, &o->g.ranks);
	if (strcmp(f, "--metrics") == 0)
		return opt_u32(f, v, 1, GEN_MAX_METRICS, &o->g.metrics);
	if (strcmp(f, "--steps") == 0)
		return opt_u32(f, v, 1, 1u << 30, &o->g.steps);
	if (strcmp(f, "--seed") == 0)
		return gen_parse_u64(v, UINT64_MAX, &o->g.seed);
	if (strcmp(f, "--format") == 0)
		o->fmt_given = 1;
	if (strcmp(f, "--format") == 0 && strcmp(v, "json") == 0)
		o->fmt = GEN_JSON;
	else if (strcmp(f, "--format") == 0 && strcmp(v, "ndjson") == 0)
		o->fmt = GEN_NDJSON;
	else if (strcmp(f, "--format") == 0 && strcmp(v, "lp") == 0)
		o->fmt = GEN_LP;
	else
		return 1; /* not a workload option */
	return 0;
}

static int opt_one(struct load_opts *o, const char *f, const char *v)
{
	uint32_t port = 0;
	int rc = opt_workload(o, f, v);

	if (rc <= 0)
		return rc;
	if (strcmp(f, "--batch-records") == 0)
		return opt_u32(f, v, 1, 1u << 24, &o->batch_records);
	if (strcmp(f, "--ranks-per-body") == 0)
		return opt_u32(f, v, 1, 1u << 20, &o->ranks_per_body);
	if (strcmp(f, "--connections") == 0)
		return opt_u32(f, v, 1, LOAD_MAX_CONNECTIONS, &o->connections);
	if (strcmp(f, "--threads") == 0)
		return opt_u32(f, v, 1, LOAD_MAX_THREADS, &o->threads);
	if (strcmp(f, "--max-retries") == 0)
		return opt_u32(f, v, 0, 1000000, &o->max_retries);
	if (strcmp(f, "--timeout-s") == 0)
		return opt_u32(f, v, 1, 3600, &o->timeout_s);
	if (strcmp(f, "--repeat") == 0)
		return opt_u32(f, v, 1, 100000, &o->repeat);
	if (strcmp(f, "--datagram-bytes") == 0)
		return opt_u32(f, v, 64, 65507, &o->datagram_bytes);
	if (strcmp(f, "--rate") == 0)
		return gen_parse_u64(v, UINT64_MAX / 2, &o->rate);
	if (strcmp(f, "--port") == 0) {
		rc = opt_u32(f, v, 1, 65535, &port);
		o->port = (uint16_t)port;
		return rc;
	}
	if (strcmp(f, "--host") == 0)
		o->host = v;
	else if (strcmp(f, "--path") == 0 && v[0] == '/')
		o->path = v;
	else
		return -EINVAL;
	return 0;
}

static int parse_args(int argc, char **argv, struct load_opts *o)
{
	const char *size = "default";
	int threads_given = 0;

	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "--size") == 0)
			size = argv[i + 1];
	if (gen_preset(size, &o->g)) {
		fprintf(stderr, "rdb-load: unknown --size '%s'\n", size);
		return -EINVAL;
	}
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			exit(0);
		}
		if (strcmp(argv[i], "--sink") == 0) {
			o->sink = 1;
			continue;
		}
		if (strcmp(argv[i], "--udp") == 0) {
			o->udp = 1;
			continue;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "rdb-load: %s needs a value\n", argv[i]);
			return -EINVAL;
		}
		threads_given |= strcmp(argv[i], "--threads") == 0;
		if (strcmp(argv[i], "--size") != 0 && opt_one(o, argv[i], argv[i + 1])) {
			fprintf(stderr, "rdb-load: bad option %s %s\n", argv[i], argv[i + 1]);
			return -EINVAL;
		}
		i++;
	}
	if (!o->sink && o->port == 0) {
		fprintf(stderr, "rdb-load: give --port P or --sink\n");
		return -EINVAL;
	}
	if (o->threads > o->connections)
		o->threads = o->connections;
	if (o->udp && !o->fmt_given)
		o->fmt = GEN_LP;
	/* --threads sizes the HTTP event loop; UDP runs one sender thread per
	 * --connections, so a --threads there would be silently ignored */
	if (o->udp && (o->sink || o->fmt == GEN_JSON || o->repeat != 1 || threads_given)) {
		fprintf(stderr, "rdb-load: --udp takes --format lp or ndjson, and no --sink, "
				"--repeat or --threads (its sender threads are --connections)\n");
		return -EINVAL;
	}
	return 0;
}

/* ---- generation ---- */

static void plan_range(const struct load_opts *o, const struct load_plan *p, size_t i,
		       struct gen_range *r)
{
	uint32_t block = (uint32_t)(i / p->groups), group = (uint32_t)(i % p->groups);
	uint32_t rpb = o->ranks_per_body < o->g.ranks ? o->ranks_per_body : o->g.ranks;

	r->step_lo = block * p->steps_per_body;
	r->step_hi = r->step_lo + p->steps_per_body;
	if (r->step_hi > o->g.steps)
		r->step_hi = o->g.steps;
	r->rank_lo = group * rpb;
	r->rank_hi = r->rank_lo + rpb;
	if (r->rank_hi > o->g.ranks)
		r->rank_hi = o->g.ranks;
}

static const char *content_type(enum gen_format fmt)
{
	if (fmt == GEN_LP)
		return "text/plain; charset=utf-8";
	return fmt == GEN_JSON ? "application/json" : "application/x-ndjson";
}

static const char *format_name(enum gen_format fmt)
{
	if (fmt == GEN_LP)
		return "lp";
	return fmt == GEN_JSON ? "json" : "ndjson";
}

static int build_body(struct load_run *run, size_t i)
{
	const struct load_opts *o = run->o;
	struct load_body *b = &run->p->bodies[i];
	struct gen_range r;
	struct gen_buf buf;
	int n, rc;

	plan_range(o, run->p, i, &r);
	gen_buf_init(&buf, BODY_MAX_BYTES);
	rc = gen_body(run->g, &r, o->fmt, &buf);
	if (rc) {
		gen_buf_free(&buf);
		return rc;
	}
	b->data = buf.data;
	b->len = buf.len;
	b->records = (r.step_hi - r.step_lo) * (r.rank_hi - r.rank_lo);
	n = snprintf(b->head, sizeof(b->head),
		     "POST %s HTTP/1.1\r\nHost: %s:%u\r\nContent-Type: %s\r\n"
		     "Content-Length: %zu\r\n\r\n",
		     o->path, o->host, o->port, content_type(o->fmt), b->len);
	if (n < 0 || (size_t)n >= sizeof(b->head))
		return -ENAMETOOLONG;
	b->head_len = (size_t)n;
	return 0;
}

static void *gen_main(void *arg)
{
	struct load_run *run = arg;
	size_t i;

	while ((i = atomic_fetch_add(&run->next, 1)) < run->p->n) {
		int rc = build_body(run, i);
		if (rc) {
			fprintf(stderr, "rdb-load: building body %zu: %s\n", i, strerror(-rc));
			exit(2);
		}
	}
	return NULL;
}

/* Builds every body on all CPUs. */
static int generate(struct load_run *run)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t nthreads = cpus < 1 ? 1 : (cpus > 64 ? 64 : (size_t)cpus);
	pthread_t th[64];
	size_t started = 0;

	atomic_store(&run->next, 0);
	for (; started < nthreads; started++)
		if (pthread_create(&th[started], NULL, gen_main, run) != 0)
			break;
	if (started == 0)
		gen_main(run);
	for (size_t i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	return 0;
}

static int plan_init(const struct load_opts *o, struct load_plan *p)
{
	uint32_t rpb = o->ranks_per_body < o->g.ranks ? o->ranks_per_body : o->g.ranks;
	uint32_t spb = o->batch_records / rpb;
	size_t blocks;

	p->steps_per_body = spb ? spb : 1;
	p->groups = (o->g.ranks + rpb - 1) / rpb;
	blocks = (o->g.steps + p->steps_per_body - 1) / p->steps_per_body;
	p->n = blocks * p->groups;
	p->bodies = calloc(p->n, sizeof(*p->bodies));
	return p->bodies ? 0 : -ENOMEM;
}

static void plan_free(struct load_plan *p)
{
	for (size_t i = 0; p->bodies && i < p->n; i++)
		free(p->bodies[i].data);
	free(p->bodies);
	p->bodies = NULL;
}

/* ---- load ---- */

void load_report_failure(struct load_run *run, size_t i, const char *what, const char *detail)
{
	atomic_fetch_add(&run->st.errors, 1);
	if (atomic_fetch_add(&run->st.error_reports, 1) < MAX_ERROR_REPORTS)
		fprintf(stderr, "rdb-load: body %zu failed: %s%s%s\n", i, what,
			detail[0] ? ": " : "", detail);
}

/* ---- report ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Sorts the latencies of sent bodies in place; fills p50, p99, max. */
static void latency_summary(double *lat, size_t n, double q[3])
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		if (lat[i] > 0.0)
			lat[k++] = lat[i];
	q[0] = q[1] = q[2] = 0.0;
	if (k == 0)
		return;
	qsort(lat, k, sizeof(double), cmp_double);
	q[0] = lat[(k - 1) / 2];
	q[1] = lat[(size_t)((double)(k - 1) * 0.99)];
	q[2] = lat[k - 1];
}

static double process_cpu_s(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return 0.0;
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* proc_cpu_s: the whole process's CPU in the timed phase (with the sink's) */
static void print_summary(struct load_run *run, double secs, double proc_cpu_s)
{
	struct load_stats *st = &run->st;
	uint64_t points = atomic_load(&st->points), bytes = atomic_load(&st->bytes);
	uint64_t resends = atomic_load(&st->resends);
	uint64_t start_fails = atomic_load(&st->start_connect_failures);
	uint64_t requests = atomic_load(&st->ok_bodies) + atomic_load(&st->retries) +
			    atomic_load(&st->errors) + resends;
	double pps = secs > 0 ? (double)points / secs : 0.0;
	double mbps = secs > 0 ? (double)bytes / 1e6 / secs : 0.0;
	double cpu_s = run->loader_user_s + run->loader_sys_s;
	double cpu_us = requests ? cpu_s * 1e6 / (double)requests : 0.0;
	double q[3];

	latency_summary(run->latency_ms, run->sends, q);
	printf("points       %" PRIu64 "\n", points);
	printf("bodies       %" PRIu64 " of %zu\n", (uint64_t)atomic_load(&st->ok_bodies),
	       run->sends);
	printf("bytes        %" PRIu64 "\n", bytes);
	printf("seconds      %.4f\n", secs);
	printf("points/s     %.0f\n", pps);
	printf("MB/s         %.1f\n", mbps);
	printf("errors       %" PRIu64 "\n", (uint64_t)atomic_load(&st->errors));
	printf("retries      %" PRIu64 "\n", (uint64_t)atomic_load(&st->retries));
	printf("reconnects   %" PRIu64 "\n", (uint64_t)atomic_load(&st->reconnects));
	printf("start fails  %" PRIu64 " connection(s) not open when the clock started (each tried "
	       "again when first needed)\n",
	       start_fails);
	printf("resends      %" PRIu64 "%s\n", resends,
	       resends ? " (bodies written again after a timeout, reset or bad answer: the "
			 "server may hold them twice)"
		       : "");
	printf("latency ms   p50 %.2f  p99 %.2f  max %.2f\n", q[0], q[1], q[2]);
	printf("loader CPU   %.3f s (user %.3f, sys %.3f) in %u event-loop thread(s), "
	       "%.2f us/request (whole process %.3f s)\n",
	       cpu_s, run->loader_user_s, run->loader_sys_s, run->o->threads, cpu_us, proc_cpu_s);
	printf("loader wait  %.3f s runnable without a CPU (%.0f%% of the wall time)\n",
	       run->loader_runq_s,
	       secs > 0 ? 100.0 * run->loader_runq_s / secs / run->o->threads : 0.0);
	if (run->o->sink)
		printf("loader ceiling points/s: %.0f\n", pps);
	printf("result points=%" PRIu64 " bodies=%" PRIu64 " bytes=%" PRIu64
	       " seconds=%.4f points_per_s=%.0f mb_per_s=%.1f errors=%" PRIu64 " retries=%" PRIu64
	       " reconnects=%" PRIu64 " resends=%" PRIu64 " p50_ms=%.2f p99_ms=%.2f"
	       " max_ms=%.2f threads=%u loader_cpu_s=%.3f loader_user_s=%.3f loader_sys_s=%.3f"
	       " loader_cpu_us_per_req=%.2f loader_runq_s=%.3f process_cpu_s=%.3f"
	       " start_connect_failures=%" PRIu64 "\n",
	       points, (uint64_t)atomic_load(&st->ok_bodies), bytes, secs, pps, mbps,
	       (uint64_t)atomic_load(&st->errors), (uint64_t)atomic_load(&st->retries),
	       (uint64_t)atomic_load(&st->reconnects), resends, q[0], q[1], q[2], run->o->threads,
	       cpu_s, run->loader_user_s, run->loader_sys_s, cpu_us, run->loader_runq_s, proc_cpu_s,
	       start_fails);
}

static void print_workload(const struct load_run *run, double gen_s)
{
	const struct load_opts *o = run->o;
	uint64_t records = (uint64_t)o->g.ranks * o->g.steps, bytes = 0;

	for (size_t i = 0; i < run->p->n; i++)
		bytes += run->p->bodies[i].len;
	printf("workload     ranks=%u metrics=%u steps=%u seed=%" PRIu64 " records=%" PRIu64
	       " points=%" PRIu64 "\n",
	       o->g.ranks, o->g.metrics, o->g.steps, o->g.seed, records, records * o->g.metrics);
	printf("bodies       %zu (%u steps x %u ranks max, %s), %.1f MB, built in %.2f s\n",
	       run->p->n, run->p->steps_per_body,
	       o->ranks_per_body < o->g.ranks ? o->ranks_per_body : o->g.ranks, format_name(o->fmt),
	       (double)bytes / 1e6, gen_s);
	if (o->udp)
		printf("target       udp://%s:%u, %u sender threads, datagrams <= %u bytes, "
		       "rate %s\n",
		       o->host, o->port, o->connections, o->datagram_bytes,
		       o->rate ? "paced (see below)" : "unpaced");
	else
		printf("target       http://%s:%u%s%s, %u connections, each body sent %u "
		       "time(s)\n",
		       o->host, o->port, o->path, o->sink ? " (in-process discard sink)" : "",
		       o->connections, o->repeat);
	if (o->udp && o->rate)
		printf("rate         %" PRIu64 " points/s\n", o->rate);
	fflush(stdout);
}

/* ---- main ---- */

static int setup(struct load_run *run, struct load_plan *p)
{
	int rc = gen_create(&run->o->g, &run->g);
	double t0 = load_now_s();

	if (rc == 0)
		rc = plan_init(run->o, p);
	if (rc == 0) {
		run->p = p;
		run->sends = p->n * run->o->repeat;
		run->latency_ms = calloc(run->sends, sizeof(double));
		rc = run->latency_ms ? generate(run) : -ENOMEM;
	}
	if (rc) {
		fprintf(stderr, "rdb-load: setup failed: %s\n", strerror(-rc));
		return rc;
	}
	print_workload(run, load_now_s() - t0);
	return 0;
}

/* Concatenates the bodies (freeing them) and sends them as datagrams. */
static int run_udp(struct load_run *run, struct load_plan *p)
{
	const struct load_opts *o = run->o;
	struct udp_load_opts uo = {.host = o->host,
				   .port = o->port,
				   .datagram_bytes = o->datagram_bytes,
				   .senders = o->connections,
				   .rate = o->rate,
				   .metrics = o->g.metrics};
	struct udp_load_result r;
	size_t len = 0;
	char *text;
	int rc;

	for (size_t i = 0; i < p->n; i++)
		len += p->bodies[i].len;
	text = malloc(len ? len : 1);
	if (!text)
		return -ENOMEM;
	len = 0;
	for (size_t i = 0; i < p->n; i++) {
		memcpy(text + len, p->bodies[i].data, p->bodies[i].len);
		len += p->bodies[i].len;
		free(p->bodies[i].data);
		p->bodies[i].data = NULL;
	}
	rc = udp_load(text, len, &uo, &r);
	free(text);
	if (rc)
		return rc;
	double pps = r.seconds > 0 ? (double)r.points / r.seconds : 0.0;
	printf("datagrams    %" PRIu64 " sent of %zu (%" PRIu64 " send errors)\n", r.datagrams,
	       r.planned, r.send_errors);
	printf("points       %" PRIu64 " sent (%" PRIu64 " lines, %" PRIu64 " bytes)\n", r.points,
	       r.lines, r.bytes);
	printf("seconds      %.4f\n", r.seconds);
	printf("points/s     %.0f offered\n", pps);
	printf("result udp=1 datagrams=%" PRIu64 " planned=%zu send_errors=%" PRIu64
	       " points=%" PRIu64 " lines=%" PRIu64 " bytes=%" PRIu64
	       " seconds=%.4f points_per_s=%.0f rate=%" PRIu64 "\n",
	       r.datagrams, r.planned, r.send_errors, r.points, r.lines, r.bytes, r.seconds, pps,
	       o->rate);
	return r.send_errors ? 1 : 0;
}

/* Thousands of connections need more descriptors than the usual soft limit
 * of 1024: raise it towards the hard limit (best effort). */
static void raise_fd_limit(uint32_t connections)
{
	struct rlimit rl;
	rlim_t want = (rlim_t)connections * 2 + 64; /* the sink's side too */

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want)
		return;
	rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
		fprintf(stderr, "rdb-load: cannot raise the open-file limit to %llu\n",
			(unsigned long long)want);
}

static void check_sink(const struct load_run *run, struct http_sink *sink)
{
	uint64_t reqs = 0, bytes = 0;

	http_sink_stop(sink, &reqs, &bytes);
	if (reqs != atomic_load(&run->st.ok_bodies) || bytes != atomic_load(&run->st.bytes))
		fprintf(stderr,
			"rdb-load: sink saw %" PRIu64 " requests / %" PRIu64
			" bytes, loader counted otherwise\n",
			reqs, bytes);
}

int main(int argc, char **argv)
{
	struct load_opts o = {.fmt = GEN_JSON,
			      .batch_records = 64,
			      .ranks_per_body = 1,
			      .connections = 8,
			      .threads = 1,
			      .max_retries = 100,
			      .timeout_s = 120,
			      .repeat = 1,
			      .host = "127.0.0.1",
			      .path = "/api/v1/write",
			      .datagram_bytes = 8192};
	struct load_run run = {.o = &o};
	struct load_plan p = {0};
	struct http_sink *sink = NULL;
	double secs, cpu0;

	signal(SIGPIPE, SIG_IGN);
	if (parse_args(argc, argv, &o)) {
		usage(stderr);
		return 2;
	}
	if (o.sink) {
		o.host = "127.0.0.1";
		if (http_sink_start(&sink, &o.port) != 0) {
			fprintf(stderr, "rdb-load: cannot start the sink\n");
			return 2;
		}
	}
	raise_fd_limit(o.connections);
	if (setup(&run, &p))
		return 2;
	if (o.udp) {
		int rc = run_udp(&run, &p);

		if (rc < 0)
			fprintf(stderr, "rdb-load: UDP load failed: %s\n", strerror(-rc));
		plan_free(&p);
		gen_destroy(run.g);
		free(run.latency_ms);
		return rc < 0 ? 2 : rc;
	}
	cpu0 = process_cpu_s();
	secs = load_ev_run(&run);
	if (secs < 0) {
		fprintf(stderr, "rdb-load: cannot set up the load: %s\n", strerror((int)-secs));
		return 2;
	}
	cpu0 = process_cpu_s() - cpu0;
	if (sink)
		check_sink(&run, sink);
	print_summary(&run, secs, cpu0);
	plan_free(&p);
	gen_destroy(run.g);
	free(run.latency_ms);
	return atomic_load(&run.st.errors) ? 1 : 0;
}
