/* load.h - what rdb-load's files share: the options, the plan of pre-built
 * bodies, the run's counters, and the event-driven HTTP load phase
 * (load_ev.c). Private to rdb-load; C11 + POSIX + pthreads only.
 */
#ifndef RANKDB_BENCH_LOAD_H
#define RANKDB_BENCH_LOAD_H

#include "bench/gen.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define LOAD_MAX_CONNECTIONS 4096 /* http.c's sink takes its thread limit from it */
#define LOAD_MAX_THREADS     64

struct load_opts {
	struct gen_opts g;
	enum gen_format fmt;
	uint32_t batch_records;	 /* records per body (upper bound) */
	uint32_t ranks_per_body; /* rank group width */
	uint32_t connections;
	uint32_t threads;     /* event-loop threads (HTTP), <= connections */
	uint32_t max_retries; /* per body, for 429/503 */
	uint32_t timeout_s;   /* per request: no progress for this long is a failure */
	uint32_t repeat;      /* send every body this many times (sink runs) */
	const char *host;     /* IPv4 literal */
	uint16_t port;
	const char *path;
	int sink;
	int udp;		 /* send UDP datagrams instead of HTTP bodies */
	int fmt_given;		 /* --format was on the command line */
	uint32_t datagram_bytes; /* UDP payload bound */
	uint64_t rate;		 /* UDP points/s, 0 = unpaced */
};

struct load_body {
	char *data; /* owned */
	size_t len;
	char head[512]; /* request line + headers */
	size_t head_len;
	uint32_t records;
};

struct load_plan {
	struct load_body *bodies;
	size_t n;
	uint32_t steps_per_body;
	uint32_t groups; /* rank groups per step block */
};

/* Totals of the load phase; each event-loop thread adds its own at its end. */
struct load_stats {
	atomic_uint_fast64_t ok_bodies, points, bytes, errors, retries, reconnects;
	/* I/O-failure resends of a body the server may have stored (written
	 * whole, then a timeout, reset, end of stream or bad answer), counted
	 * when the body is written again: a run with any may hold duplicates.
	 * A keep-alive idle-close race after the request was written whole is
	 * counted too: from here it looks like a server that stored the body
	 * and died before answering. */
	atomic_uint_fast64_t resends;
	atomic_uint_fast64_t start_connect_failures;
	atomic_int error_reports;
};

struct load_run {
	const struct load_opts *o;
	const struct load_plan *p;
	struct gen *g;	    /* for generation only */
	atomic_size_t next; /* next body to generate, or next send (body = send % p->n) */
	size_t sends;	    /* p->n * o->repeat */
	double *latency_ms; /* [sends], per 2xx send, written by the send's owner; 0 = not sent */
	struct load_stats st;
	double loader_user_s, loader_sys_s; /* of the event-loop threads in the timed phase */
	double loader_runq_s; /* their time runnable but without a CPU (a starved loader) */
};

/* Runs the timed HTTP phase: o->connections keep-alive connections spread
 * over o->threads event-loop threads (epoll, non-blocking sockets), each
 * connection a closed loop over the sends taken from run->next. Connects
 * every connection first; the clock starts when all are open (or failed).
 * Fills run->st and run->latency_ms. Blocks until every send has a final
 * answer. Returns the wall seconds of the timed phase, or a negative errno
 * when memory or epoll cannot be set up (nothing ran); exits the program
 * with status 2 if a thread cannot be started. */
double load_ev_run(struct load_run *run);

/* Prints "rdb-load: body I failed: WHAT: DETAIL" (the first few) and counts
 * an error. Thread-safe. */
void load_report_failure(struct load_run *run, size_t i, const char *what, const char *detail);

double load_now_s(void);

#endif
