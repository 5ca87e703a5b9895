/* load_ev.c - rdb-load's timed HTTP phase: a few event-loop threads drive
 * every keep-alive connection, so the loader spends little CPU per request
 * and does not compete with the server it measures (a thread per
 * connection cost ~30 us of CPU per request plus the context switches of
 * 64-512 threads on a 2-core machine).
 *
 * Design: --threads threads, each one epoll instance (level-triggered) over
 * its share of the connections (connection k belongs to thread k mod T).
 * Every connection is a closed loop, the same as one blocking client: take
 * the next send number from the shared atomic counter (so bodies go out in
 * about time order), write the pre-built head and body with one sendmsg
 * (EPOLLOUT only armed after a partial write), read the whole response
 * through hresp.h, then take the next. Sockets and connects are
 * non-blocking; the initial connects, before the clock starts, wait for
 * each in turn (at most --timeout-s).
 *
 * Per send: a 2xx ends it (latency = the last attempt's first byte written,
 * one clock read per attempt, to the wake-up that read its whole response; a
 * resend after a 429/503 or an I/O failure starts anew). 429/503 waits
 * Retry-After seconds (1 s if absent; 0 resends at once) on a timer, never a
 * sleep, then resends, up to --max-retries. Any other status is a failed
 * send. An answer that comes before the whole request is written (a 413 or
 * 503 and a close) is the outcome, not the write error that follows it:
 * reads go before writes, and a failed write first looks for it.
 *
 * An I/O failure (reset, EOF before the whole response, malformed response,
 * no progress - no byte written or read - for --timeout-s) closes the socket
 * and resends on a new connection, up to MAX_IO_FAILURES times in a row. A
 * connect that fails is tried again after CONNECT_BACKOFF_S, so a server
 * that is down does not turn every send into an error within milliseconds.
 * The resend of a body the server may have stored (the whole request was
 * written before the failure) is counted in resends: the run may hold
 * duplicates and its report says so. That includes the keep-alive race (the
 * server closes an idle connection while a request is on its way): a reset
 * or EOF before any answer byte cannot tell it from a server that stored the
 * body and died, so it is counted too; only a failure before the whole
 * request was written resends uncounted. A connection the server
 * closes (Connection: close, or EOF while idle) is reopened when it is next
 * needed; reconnects counts the connections established again after an
 * earlier one of theirs ended.
 *
 * Timers (retry waits, connect back-offs, request deadlines) are checked by a
 * sweep of the thread's connections at most every SWEEP_S; epoll_wait never
 * waits longer.
 *
 * Threading: a connection, its socket and its latency slots belong to one
 * thread; shared state is the send counter (atomic) and the totals (added
 * once per thread at its end). Failure to create epoll or a thread is an
 * error before any request is sent.
 */
#include "bench/hresp.h"
#include "bench/load.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_IO_FAILURES	  3    /* consecutive connection failures per send */
#define CONNECT_BACKOFF_S 0.1  /* wait after a failed connect before the next */
#define SWEEP_S		  0.05 /* timer resolution */
#define EVENTS_MAX	  256
#define RBUF_BYTES	  65536

enum conn_state {
	C_IDLE,	      /* between sends (or before the first) */
	C_CONNECTING, /* non-blocking connect in progress */
	C_SENDING,    /* head + body partly written */
	C_READING,    /* request written, response not complete */
	C_RETRY_WAIT, /* 429/503: resend at due_s */
	C_BACKOFF,    /* the connect failed: try again at due_s */
	C_Q_NEXT,     /* queued: take the next send */
	C_Q_RESEND,   /* queued: resend the current send */
	C_DONE	      /* no sends left */
};

struct conn {
	int fd; /* -1 when closed */
	enum conn_state state;
	int out_armed;	   /* EPOLLOUT is in the epoll mask */
	int was_open;	   /* established once: a later one is a reconnect */
	uint32_t id;	   /* connection number, for messages */
	size_t send;	   /* current send number */
	uint32_t attempt;  /* 429/503 resends of this send */
	uint32_t io_fails; /* consecutive I/O failures of this send */
	size_t off;	   /* bytes of head + body written in the current attempt */
	int maybe_dup;	   /* a failed attempt wrote the whole body: count the resend */
	double t0_s;	   /* the current attempt's first byte written */
	double due_s;	   /* C_RETRY_WAIT, C_BACKOFF: resend time; else: deadline (no progress) */
	struct hresp resp;
};

struct loop {
	struct load_run *run;
	pthread_t th;
	pthread_barrier_t *start;
	int epfd;
	struct conn *conns; /* [n] */
	uint32_t n;
	uint32_t live;	     /* connections not C_DONE */
	struct conn **queue; /* [n] connections in C_Q_*: each at most once */
	uint32_t queued;
	double now_s; /* time of the last wakeup */
	uint64_t ok, points, bytes, retries, reconnects, resends;
	double user_s, sys_s; /* CPU of the timed phase */
	double runq_s;	      /* time runnable but waiting for a CPU, timed phase */
	char rbuf[RBUF_BYTES];
};

double load_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds the calling thread has waited for a CPU while runnable
 * (/proc/thread-self/schedstat, field 2); 0 where the kernel lacks it. */
static double thread_runq_s(void)
{
	unsigned long long run_ns, wait_ns;
	FILE *f = fopen("/proc/thread-self/schedstat", "r");
	int n = f ? fscanf(f, "%llu %llu", &run_ns, &wait_ns) : 0;

	if (f)
		fclose(f);
	return n == 2 ? (double)wait_ns * 1e-9 : 0.0;
}

/* user and sys seconds of the calling thread */
static void thread_cpu_s(double *user_s, double *sys_s)
{
	struct rusage ru;

	*user_s = *sys_s = 0.0;
	if (getrusage(RUSAGE_THREAD, &ru) != 0)
		return;
	*user_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6;
	*sys_s = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static void start_attempt(struct loop *l, struct conn *c);

/* ---- sockets ---- */

static int addr_of(const struct load_opts *o, struct sockaddr_in *sa)
{
	*sa = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(o->port)};
	return inet_pton(AF_INET, o->host, &sa->sin_addr) == 1 ? 0 : -EINVAL;
}

/* Arms or disarms EPOLLOUT. 0, or the negative errno of epoll_ctl: the
 * socket then is not watched as it should be and must be given up. */
static int set_mask(struct loop *l, struct conn *c, int out)
{
	struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.ptr = c};

	if (c->out_armed == out)
		return 0;
	if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, c->fd, &ev) != 0)
		return -errno;
	c->out_armed = out;
	return 0;
}

static void conn_close(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd); /* also leaves the epoll set */
	c->fd = -1;
	c->out_armed = 0;
}

/* The connection is established; opening it again counts as a reconnect. */
static void connected(struct loop *l, struct conn *c)
{
	if (c->was_open)
		l->reconnects++;
	c->was_open = 1;
}

/* Waits up to wait_ms for the non-blocking connect of fd to finish. 0 when
 * it is established, -ETIMEDOUT, or the connect's negative errno. Blocks. */
static int connect_wait(int fd, int wait_ms)
{
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	int err = 0, n;
	socklen_t len = sizeof(err);

	do {
		n = poll(&p, 1, wait_ms);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -ETIMEDOUT;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
		return -errno;
	return -err;
}

/* Opens c->fd (non-blocking) and adds it to epoll. With wait_ms >= 0 it
 * blocks until the connect is done, at most wait_ms; with -1 it does not
 * wait. 0 when connected, -EINPROGRESS when the connect is under way (only
 * without waiting), or a negative errno (c->fd stays -1). */
static int conn_open(struct loop *l, struct conn *c, int wait_ms)
{
	struct sockaddr_in sa;
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
	int one = 1, rc = addr_of(l->run->o, &sa);
	int fd = rc ? -1 : socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (rc == 0 && fd < 0)
		rc = -errno;
	if (rc == 0) {
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
			rc = -errno;
	}
	if (rc == -EINPROGRESS && wait_ms >= 0)
		rc = connect_wait(fd, wait_ms);
	if (rc == -EINPROGRESS)
		ev.events |= EPOLLOUT;
	if ((rc == 0 || rc == -EINPROGRESS) && epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
		rc = -errno;
	if (rc != 0 && rc != -EINPROGRESS) {
		if (fd >= 0)
			close(fd);
		return rc;
	}
	c->fd = fd;
	c->out_armed = rc == -EINPROGRESS;
	if (rc == 0)
		connected(l, c);
	return rc;
}

/* ---- one send's life ---- */

static void next_send(struct loop *l, struct conn *c)
{
	struct load_run *run = l->run;
	size_t i = atomic_fetch_add(&run->next, 1);

	if (i >= run->sends) {
		conn_close(c);
		c->state = C_DONE;
		l->live--;
		return;
	}
	c->send = i;
	c->attempt = 0;
	c->io_fails = 0;
	c->maybe_dup = 0;
	start_attempt(l, c);
}

/* Failure paths queue the connection's next step instead of calling it, so
 * a server that refuses everything costs a loop, never a deep recursion. */
static void enqueue(struct loop *l, struct conn *c, enum conn_state st)
{
	c->state = st;
	l->queue[l->queued++] = c;
}

static void run_queue(struct loop *l)
{
	while (l->queued > 0) {
		struct conn *c = l->queue[--l->queued];

		if (c->state == C_Q_NEXT)
			next_send(l, c);
		else
			start_attempt(l, c);
	}
}

static void fail_send(struct loop *l, struct conn *c, const char *what, const char *detail)
{
	load_report_failure(l->run, c->send, what, detail);
	enqueue(l, c, C_Q_NEXT);
}

/* Whether the server can have taken the current attempt's body although it
 * failed: only once the whole request was written (the head carries its
 * Content-Length, so a server cannot store a body it did not receive
 * whole). A reset or close before any answer byte on a reused keep-alive
 * connection may be the server closing it as idle (the keep-alive race),
 * but it may as well be a server that stored the body and died before
 * answering: that is counted too, as clients such as Go's net/http resend
 * a POST silently only when nothing of it was written. */
static int maybe_stored(const struct loop *l, const struct conn *c)
{
	const struct load_body *b = &l->run->p->bodies[c->send % l->run->p->n];

	return c->off == b->head_len + b->len;
}

/* The connection broke, stalled or answered garbage: resend on a new one,
 * or give up. A resend of a body the server may have stored is counted in
 * resends (the run may then hold it twice; the report flags it). */
static void io_failure(struct loop *l, struct conn *c, int rc)
{
	int connecting = c->state == C_CONNECTING;

	if (maybe_stored(l, c))
		c->maybe_dup = 1;

	conn_close(c);
	if (++c->io_fails > MAX_IO_FAILURES) {
		fail_send(l, c, "connection", strerror(-rc));
		return;
	}
	if (connecting) {
		/* a refused connect fails at once: without a pause the sends
		 * would all end as errors within milliseconds of a restart */
		c->state = C_BACKOFF;
		c->due_s = l->now_s + CONNECT_BACKOFF_S;
		return;
	}
	enqueue(l, c, C_Q_RESEND);
}

/* epoll_ctl could not change the socket's mask: give the socket up. */
static void mask_failed(struct loop *l, struct conn *c, int rc)
{
	if (c->state == C_SENDING || c->state == C_READING)
		io_failure(l, c, rc);
	else
		conn_close(c); /* idle: reopened when next needed */
}

static void on_response(struct loop *l, struct conn *c);
static int recv_response(struct loop *l, struct conn *c);

/* After a failed write: reads the answer a server sent before it closed
 * (a 413 or a 503 to a request it would not take whole). 1 when there was
 * a whole one and on_response took it; its status, not the write's error,
 * is then the attempt's outcome. Reads what the socket holds, bounded. */
static int early_answer(struct loop *l, struct conn *c)
{
	int rc = 0;

	for (int k = 0; k < 64 && rc == 0; k++)
		rc = recv_response(l, c);
	if (rc != 1)
		return 0;
	/* resp.close is set: recv_response marks an answer read in C_SENDING,
	 * and an EOF-framed one is marked by the parser */
	on_response(l, c);
	return 1;
}

/* Writes what is left of head + body; arms EPOLLOUT when the socket is full. */
static void try_send(struct loop *l, struct conn *c)
{
	const struct load_body *b = &l->run->p->bodies[c->send % l->run->p->n];

	for (;;) {
		struct iovec iov[2];
		struct msghdr msg = {.msg_iov = iov};
		size_t total = b->head_len + b->len;

		/* latency counts from this attempt's first byte on the wire, not
		 * from the loop's wake-up: a send late in a batch of hundreds of
		 * connections would otherwise carry the batch's time */
		if (c->off == 0)
			c->t0_s = load_now_s();
		if (c->off < b->head_len) {
			iov[0] = (struct iovec){(char *)b->head + c->off, b->head_len - c->off};
			iov[1] = (struct iovec){b->data, b->len};
			msg.msg_iovlen = 2;
		} else {
			iov[0] = (struct iovec){b->data + (c->off - b->head_len), total - c->off};
			msg.msg_iovlen = 1;
		}
		ssize_t w = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int rc = set_mask(l, c, 1);

			if (rc)
				mask_failed(l, c, rc);
			return;
		}
		if (w < 0) {
			int rc = -errno;

			if (!early_answer(l, c))
				io_failure(l, c, rc);
			return;
		}
		c->off += (size_t)w;
		c->due_s = l->now_s + l->run->o->timeout_s; /* progress */
		if (c->off == total) {
			int rc;

			if (c->maybe_dup) { /* counted when it is written again */
				l->resends++;
				c->maybe_dup = 0;
			}
			c->state = C_READING;
			if ((rc = set_mask(l, c, 0)) != 0)
				mask_failed(l, c, rc);
			return;
		}
	}
}

static void begin_request(struct loop *l, struct conn *c)
{
	c->state = C_SENDING;
	try_send(l, c);
}

/* (Re)sends the current send, opening a connection first if needed. */
static void start_attempt(struct loop *l, struct conn *c)
{
	c->off = 0;
	hresp_init(&c->resp);
	c->due_s = l->now_s + l->run->o->timeout_s;
	if (c->fd >= 0) {
		begin_request(l, c);
		return;
	}
	c->state = C_CONNECTING; /* so that a failure below backs off */
	int rc = conn_open(l, c, -1);
	if (rc == 0)
		begin_request(l, c);
	else if (rc != -EINPROGRESS) /* in progress: stays C_CONNECTING */
		io_failure(l, c, rc);
}

static void on_response(struct loop *l, struct conn *c)
{
	struct load_run *run = l->run;
	const struct hresp *r = &c->resp;
	const struct load_body *b = &run->p->bodies[c->send % run->p->n];
	char detail[320];

	if (r->close)
		conn_close(c);
	if (r->status >= 200 && r->status < 300) {
		/* the wake-up that brought the response ends it (the bytes were
		 * there before it); 0 marks an unsent slot, so never store 0 */
		double ms = (l->now_s - c->t0_s) * 1e3;

		run->latency_ms[c->send] = ms > 0 ? ms : 1e-6;
		l->ok++;
		l->points += (uint64_t)b->records * run->o->g.metrics;
		l->bytes += b->len;
		next_send(l, c);
		return;
	}
	snprintf(detail, sizeof(detail), "HTTP %d %s", r->status, r->snippet);
	if ((r->status != 429 && r->status != 503) || c->attempt >= run->o->max_retries) {
		fail_send(l, c, c->attempt ? "retries exhausted" : "status", detail);
		return;
	}
	l->retries++;
	c->attempt++;
	c->io_fails = 0;
	if (r->retry_after_s == 0) {
		start_attempt(l, c);
		return;
	}
	c->state = C_RETRY_WAIT;
	c->due_s = l->now_s + (r->retry_after_s > 0 ? r->retry_after_s : 1);
}

/* ---- events ---- */

/* Reads once from c->fd into the response parser. 1: the response is
 * whole (c->resp holds it); 0: bytes came, more are needed; -EAGAIN:
 * nothing to read now; another negative errno: the connection broke
 * (-ECONNRESET for an end of stream inside the answer) or the answer is
 * malformed (-EPROTO). */
static int recv_response(struct loop *l, struct conn *c)
{
	size_t used;
	ssize_t n;
	int rc;

	do {
		n = recv(c->fd, l->rbuf, sizeof(l->rbuf), 0);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : -errno;
	if (n == 0)
		return hresp_eof(&c->resp) == 0 ? 1 : -ECONNRESET;
	c->due_s = l->now_s + l->run->o->timeout_s; /* progress */
	rc = hresp_feed(&c->resp, l->rbuf, (size_t)n, &used);
	if (rc == 1 && (used < (size_t)n || c->state == C_SENDING))
		c->resp.close = 1; /* stray bytes, or an answer before the whole request */
	return rc;
}

static void on_readable(struct loop *l, struct conn *c)
{
	if (c->state != C_SENDING && c->state != C_READING) {
		/* idle or waiting: the server closed the keep-alive connection,
		 * or sent bytes nobody asked for; reopen when next needed */
		ssize_t n;

		do {
			n = recv(c->fd, l->rbuf, sizeof(l->rbuf), 0);
		} while (n < 0 && errno == EINTR);
		if (!(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)))
			conn_close(c);
		return;
	}
	int rc = recv_response(l, c);

	if (rc == 1)
		on_response(l, c);
	else if (rc < 0 && rc != -EAGAIN)
		io_failure(l, c, rc);
}

static void on_writable(struct loop *l, struct conn *c)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (c->state == C_CONNECTING) {
		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
			err = errno;
		if (err) {
			io_failure(l, c, -err);
			return;
		}
		connected(l, c);
		begin_request(l, c); /* disarms EPOLLOUT once all is written */
	} else if (c->state == C_SENDING) {
		try_send(l, c);
	} else {
		int rc = set_mask(l, c, 0);

		if (rc)
			mask_failed(l, c, rc);
	}
}

static void sweep(struct loop *l)
{
	for (uint32_t k = 0; k < l->n; k++) {
		struct conn *c = &l->conns[k];

		if ((c->state == C_RETRY_WAIT || c->state == C_BACKOFF) && l->now_s >= c->due_s) {
			start_attempt(l, c);
		} else if ((c->state == C_CONNECTING || c->state == C_SENDING ||
			    c->state == C_READING) &&
			   l->now_s >= c->due_s) {
			io_failure(l, c, -ETIMEDOUT);
		}
	}
}

static void run_loop(struct loop *l)
{
	struct epoll_event evs[EVENTS_MAX];
	double next_sweep_s = l->now_s + SWEEP_S;

	while (l->live > 0) {
		int n = epoll_wait(l->epfd, evs, EVENTS_MAX, (int)(SWEEP_S * 1e3));

		l->now_s = load_now_s();
		for (int k = 0; k < n; k++) {
			struct conn *c = evs[k].data.ptr;
			uint32_t e = evs[k].events;

			/* Handlers touch only their own connection; one may close
			 * c->fd (or open a new one) before the next runs. A stale
			 * EPOLLIN on a new socket finds nothing (EAGAIN). */
			if (c->state == C_CONNECTING) {
				if (e & (EPOLLOUT | EPOLLERR | EPOLLHUP))
					on_writable(l, c);
				continue;
			}
			/* reads first: an answer that came before the whole
			 * request was written (413, 503 + close) is the
			 * outcome, not the write error that would follow it */
			if ((e & (EPOLLIN | EPOLLHUP | EPOLLERR)) && c->fd >= 0)
				on_readable(l, c);
			if ((e & EPOLLOUT) && c->fd >= 0 && c->state != C_CONNECTING)
				on_writable(l, c);
		}
		if (l->now_s >= next_sweep_s) {
			sweep(l);
			next_sweep_s = l->now_s + SWEEP_S;
		}
		run_queue(l);
	}
}

static void *loop_main(void *arg)
{
	struct loop *l = arg;
	struct load_run *run = l->run;
	double user0, sys0, runq0;

	for (uint32_t k = 0; k < l->n; k++) {
		int rc = conn_open(l, &l->conns[k], (int)run->o->timeout_s * 1000);
		if (rc) {
			atomic_fetch_add(&run->st.start_connect_failures, 1);
			fprintf(stderr, "rdb-load: connection %u to %s:%u failed at start: %s\n",
				l->conns[k].id, run->o->host, run->o->port, strerror(-rc));
		}
	}
	pthread_barrier_wait(l->start);
	thread_cpu_s(&user0, &sys0);
	runq0 = thread_runq_s();
	l->now_s = load_now_s();
	for (uint32_t k = 0; k < l->n; k++)
		next_send(l, &l->conns[k]);
	run_queue(l);
	run_loop(l);
	thread_cpu_s(&l->user_s, &l->sys_s);
	l->user_s -= user0;
	l->sys_s -= sys0;
	l->runq_s = thread_runq_s() - runq0;
	atomic_fetch_add(&run->st.ok_bodies, l->ok);
	atomic_fetch_add(&run->st.points, l->points);
	atomic_fetch_add(&run->st.bytes, l->bytes);
	atomic_fetch_add(&run->st.retries, l->retries);
	atomic_fetch_add(&run->st.reconnects, l->reconnects);
	atomic_fetch_add(&run->st.resends, l->resends);
	return NULL;
}

/* ---- setup ---- */

static void loops_free(struct loop *ls, uint32_t n)
{
	for (uint32_t t = 0; ls && t < n; t++) {
		if (ls[t].epfd >= 0)
			close(ls[t].epfd);
		free(ls[t].conns);
		free(ls[t].queue);
	}
	free(ls);
}

static int loops_init(struct load_run *run, struct loop **out)
{
	const struct load_opts *o = run->o;
	uint32_t nt = o->threads;
	struct loop *ls = calloc(nt, sizeof(*ls));

	if (!ls)
		return -ENOMEM;
	for (uint32_t t = 0; t < nt; t++)
		ls[t].epfd = -1;
	for (uint32_t t = 0; t < nt; t++) {
		struct loop *l = &ls[t];

		l->run = run;
		l->n = o->connections / nt + (t < o->connections % nt);
		l->live = l->n;
		l->conns = calloc(l->n, sizeof(*l->conns));
		l->queue = calloc(l->n, sizeof(*l->queue));
		l->epfd = epoll_create1(EPOLL_CLOEXEC);
		if (!l->conns || !l->queue || l->epfd < 0) {
			int rc = l->epfd < 0 ? -errno : -ENOMEM;

			loops_free(ls, nt);
			return rc;
		}
		for (uint32_t k = 0; k < l->n; k++)
			l->conns[k] = (struct conn){.fd = -1, .id = t + k * nt};
	}
	*out = ls;
	return 0;
}

double load_ev_run(struct load_run *run)
{
	uint32_t nt = run->o->threads, started = 0;
	pthread_barrier_t start;
	struct loop *ls = NULL;
	double t0, t1;
	int rc = loops_init(run, &ls);

	if (rc)
		return rc;
	atomic_store(&run->next, 0);
	if (pthread_barrier_init(&start, NULL, nt + 1) != 0) {
		loops_free(ls, nt);
		return -ENOMEM;
	}
	for (; started < nt; started++) {
		ls[started].start = &start;
		if (pthread_create(&ls[started].th, NULL, loop_main, &ls[started]) != 0)
			break;
	}
	if (started < nt) {
		fprintf(stderr, "rdb-load: cannot start event-loop thread %u\n", started);
		exit(2); /* the started ones would wait on the barrier forever */
	}
	pthread_barrier_wait(&start);
	t0 = load_now_s();
	for (uint32_t t = 0; t < nt; t++)
		pthread_join(ls[t].th, NULL);
	t1 = load_now_s();
	run->loader_user_s = run->loader_sys_s = run->loader_runq_s = 0;
	for (uint32_t t = 0; t < nt; t++) {
		run->loader_user_s += ls[t].user_s;
		run->loader_sys_s += ls[t].sys_s;
		run->loader_runq_s += ls[t].runq_s;
	}
	pthread_barrier_destroy(&start);
	loops_free(ls, nt);
	return t1 - t0;
}
