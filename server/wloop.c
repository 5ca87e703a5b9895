/* wloop.c - the write loop: rankdb's own epoll front end for the write
 * routes (http_write_loop = on, plain HTTP only).
 *
 * The loop owns the listening socket. N threads (http_threads, at most one
 * per CPU) each run an epoll set; all share one non-blocking listener
 * (EPOLLEXCLUSIVE: one thread wakes per connection). libmicrohttpd runs
 * without a listener (MHD_USE_NO_LISTEN_SOCKET) and gets the connections
 * the loop does not serve through MHD_add_connection.
 *
 * A connection (struct wl_conn, edge-triggered) goes HEAD -> BODY ->
 * HANDLING (PARKED) -> WRITE -> HEAD ... For each request the loop peeks
 * (MSG_PEEK) at the head without consuming it and classifies it
 * (wl_classify, wloop_parse.c). A write it serves: it reads exactly the head
 * and Content-Length body bytes (a pipelined next request stays in the
 * socket), builds a struct srv_req (query arguments decoded as
 * libmicrohttpd does, headers for srv_req_header) and calls srv_dispatch.
 * Anything else, and a write libmicrohttpd must refuse (over the connection
 * limit, body past max_body_bytes or past the body budget: it answers 503
 * or 413 exactly as without the loop), hands the connection over at that
 * request boundary, nothing consumed; libmicrohttpd owns it from then on.
 *
 * Shared with libmicrohttpd (http_int.h): the connection registry (one
 * limit, the same shedding; the reaper in http.c enforces the same
 * deadlines on loop connections by shutting their socket down, which the
 * loop sees as end of stream), the body budget, the parking counter and
 * http_max_parked (srv_submit).
 *
 * Parking: the write's completion (WAL thread) pushes the connection on its
 * thread's ready stack (lock-free, Treiber push, popped all at once by
 * exchange: no ABA) and writes the thread's eventfd only when the stack was
 * empty; the thread answers through the handler's finish function. While
 * parked a connection is not read and is never freed (it is HANDLING: no
 * deadline, never shed); a peer that left is noticed when the answer is
 * written.
 *
 * Responses are written as libmicrohttpd writes them (status line and
 * reason phrase from libmicrohttpd, Content-Type, Retry-After, Allow, the
 * handler's headers, Date, Content-Length except for 204), keep-alive
 * unless the request said Connection: close. A partial write waits for
 * EPOLLOUT.
 *
 * Stop (http.c's http_free): wl_stop_accept shuts the listener (new
 * connections are refused), parked requests are answered by these threads
 * while http.c drains them, then wl_stop joins the threads, which close
 * their connections.
 *
 * Threading: a connection belongs to one loop thread from accept to close
 * or hand-off; only its ready-stack link is touched by another thread.
 */
#include "server/http_int.h"
#include "server/wloop.h"
#include "common/rdb_err.h"
#include "common/rdb_log.h"
#include "common/rdb_time.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define WL_EVENTS	   64
#define WL_ACCEPT_BATCH	   32
#define WL_ACCEPT_PAUSE_MS 100 /* no accept for this long after EMFILE and the like */
/* A connection keeps a request buffer up to this size between requests. */
#define WL_KEEP_BUF_BYTES  (16u * 1024)
#define WL_RESP_HEAD_BYTES 2048 /* status line and headers of a response */
#define HEAD_MEM_SLACK	   1024 /* connection memory libmicrohttpd needs beside a head */
#define HEAD_LINE_COST	   80	/* ... and per header line (measured ~65) */

enum wl_state { C_HEAD, C_BODY, C_PARKED, C_WRITE };

struct wl_thread;

struct wl_conn {
	struct wl_conn *ready_next;  /* the ready stack (another thread writes it) */
	struct wl_conn *prev, *next; /* the thread's connections */
	struct wl_thread *t;
	struct conn_state *cs;
	int fd;
	enum wl_state st;
	bool close_after; /* Connection: close */
	bool hup;	  /* the peer sent all it will (or the reaper shut the socket) */
	struct sockaddr_in sa;
	socklen_t salen;
	uint8_t *buf; /* head, then body, then a NUL */
	size_t cap;
	size_t got;	  /* bytes of head + body read */
	uint64_t charged; /* reserved in the body budget */
	struct wl_head hd;
	struct srv_park pk;
	char *out; /* response bytes still to write */
	size_t out_len, out_off;
};

struct wl_thread {
	struct wl_loop *l;
	pthread_t th;
	bool started;
	int ep, efd;
	bool listening;	   /* the listener is in ep (taken out while accept lacks fds) */
	int64_t resume_ns; /* not listening: when to put the listener back (monotonic) */
	_Atomic(struct wl_conn *) ready;
	struct wl_conn *conns;
	time_t date_s;
	char date[64];
	uint8_t peek[WL_HEAD_MAX];
};

struct wl_loop {
	struct srv_http *h;
	struct srv_ctx *ctx;
	int lfd;
	_Atomic bool stop;
	_Atomic bool accept_stopped; /* wl_stop_accept ran: never re-arm the listener */
	/* park_ready calls between their first touch of a thread and their
	 * eventfd write: wl_stop waits for 0 before it closes the eventfds and
	 * frees the threads (the answer can be sent, and the request drained,
	 * before the completion has written the eventfd). */
	_Atomic int waking;
	uint64_t conn_mem; /* http_connection_memory_bytes */
	int nthreads;
	struct wl_thread *t;
};

/* epoll tags: the listener and a thread's eventfd (connections: their wl_conn). */
static char tag_listen, tag_wake;

static struct rdb_log_ratelimit rl_accept;

/* ---- connections ---------------------------------------------------------------- */

/* Takes c off its thread (budget returned, list unlinked); the caller then
 * closes or hands off the descriptor and calls conn_release. */
static void conn_unlink(struct wl_conn *c)
{
	struct wl_thread *t = c->t;
	srv_http_budget_give(t->l->h, c->charged);
	c->charged = 0;
	if (c->prev)
		c->prev->next = c->next;
	else
		t->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
}

static void conn_release(struct wl_conn *c)
{
	free(c->buf);
	free(c->out);
	free(c);
}

static void conn_free(struct wl_conn *c)
{
	conn_unlink(c);
	srv_http_conn_close(c->t->l->h, c->cs); /* unregistered before the fd can be reused */
	close(c->fd);
	conn_release(c);
}

/* Gives the connection, its next request unread, to libmicrohttpd. */
static void conn_handoff(struct wl_conn *c)
{
	epoll_ctl(c->t->ep, EPOLL_CTL_DEL, c->fd, NULL);
	conn_unlink(c);
	srv_http_handoff(c->t->l->h, c->cs, c->fd, (const struct sockaddr *)&c->sa, c->salen);
	conn_release(c);
}

static void listener_pause(struct wl_thread *t)
{
	if (t->listening && epoll_ctl(t->ep, EPOLL_CTL_DEL, t->l->lfd, NULL) == 0) {
		t->listening = false;
		t->resume_ns = rdb_now_mono_ns() + WL_ACCEPT_PAUSE_MS * 1000000ll;
	}
}

/* Puts the listener back into t's epoll set (after a pause). */
static void listener_resume(struct wl_thread *t)
{
	struct wl_loop *l = t->l;
	if (t->listening || atomic_load(&l->accept_stopped))
		return;
	struct epoll_event le = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &tag_listen};
	if (epoll_ctl(t->ep, EPOLL_CTL_ADD, l->lfd, &le) != 0)
		return;
	t->listening = true;
	/* wl_stop_accept may have run between the check and the add (its
	 * delete found nothing here): take the listener out again. */
	if (atomic_load(&l->accept_stopped))
		listener_pause(t);
}

static void accept_some(struct wl_thread *t)
{
	struct wl_loop *l = t->l;
	for (int i = 0; i < WL_ACCEPT_BATCH; i++) {
		struct sockaddr_in sa;
		socklen_t salen = sizeof(sa);
		int fd =
		    accept4(l->lfd, (struct sockaddr *)&sa, &salen, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			int e = errno;
			if (e == EAGAIN || e == EWOULDBLOCK)
				return;
			bool pause = e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM ||
				     e == EINVAL || e == EBADF;
			if (!pause) {
				/* accept(2): the pending connection's own network errors
				 * (ECONNABORTED, EPROTO, ENETDOWN, EHOSTUNREACH, ...) and
				 * EPERM from a firewall concern that client only: next. */
				if (e != EINTR && e != ECONNABORTED)
					rdb_log_limited(&rl_accept, 10, RDB_LOG_WARN, "http",
							"accepting a connection failed: %s",
							rdb_strerror(-e));
				continue;
			}
			if (e != EINVAL && e != EBADF)
				rdb_log_limited(&rl_accept, 10, RDB_LOG_WARN, "http",
						"cannot accept a connection: %s; not accepting "
						"for %d ms (raise the open-files limit, or lower "
						"http_max_connections)",
						rdb_strerror(-e), WL_ACCEPT_PAUSE_MS);
			/* Out of descriptors or memory, or the listener was shut
			 * (stopping, EINVAL): the level-triggered listener would wake
			 * this thread at once, so it leaves the epoll set; loop_main
			 * puts it back after WL_ACCEPT_PAUSE_MS unless the loop stops
			 * accepting. Connections already open are served meanwhile. */
			listener_pause(t);
			return;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		struct conn_state *cs = srv_http_conn_open(l->h, fd, (struct sockaddr *)&sa);
		struct wl_conn *c = cs ? calloc(1, sizeof(*c)) : NULL;
		if (!c) {
			if (cs)
				srv_http_conn_close(l->h, cs);
			close(fd); /* past the hard limit, or out of memory */
			continue;
		}
		c->t = t;
		c->cs = cs;
		c->fd = fd;
		c->sa = sa;
		c->salen = salen;
		c->st = C_HEAD;
		c->next = t->conns;
		if (t->conns)
			t->conns->prev = c;
		t->conns = c;
		struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
					 .data.ptr = c};
		if (epoll_ctl(t->ep, EPOLL_CTL_ADD, fd, &ev) != 0)
			conn_free(c);
	}
}

/* ---- responses ------------------------------------------------------------------- */

static const char *date_header(struct wl_thread *t)
{
	time_t now = time(NULL);
	if (now != t->date_s) {
		struct tm tm;
		gmtime_r(&now, &tm);
		strftime(t->date, sizeof(t->date), "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
		t->date_s = now;
	}
	return t->date;
}

/* Appends to the head being built; false when it does not fit. */
static bool head_add(char *b, size_t *n, const char *name, const char *value)
{
	int k = snprintf(b + *n, WL_RESP_HEAD_BYTES - *n, "%s: %s\r\n", name, value);
	if (k < 0 || (size_t)k >= WL_RESP_HEAD_BYTES - *n)
		return false;
	*n += (size_t)k;
	return true;
}

/* Queues resp on c (state C_WRITE): written now as far as the socket takes
 * it, the rest kept in c->out for EPOLLOUT. */
static void respond(struct wl_conn *c, struct srv_resp *resp)
{
	struct wl_thread *t = c->t;
	struct srv_ctx *ctx = t->l->ctx;
	char head[WL_RESP_HEAD_BYTES];
	size_t n = 0;
	int status = resp->status;
	int k = snprintf(head, sizeof(head), "HTTP/1.1 %d %s\r\n", status, srv_http_reason(status));
	n = (size_t)k;
	bool ok = true;
	const char *date = date_header(t);
	size_t dl = strlen(date);
	memcpy(head + n, date, dl); /* fits: the status line is short */
	n += dl;
	if (c->close_after)
		ok = ok && head_add(head, &n, "Connection", "close");
	ok = ok && head_add(head, &n, "Content-Type",
			    resp->content_type ? resp->content_type : "application/json");
	if (resp->retry_after)
		ok = ok && head_add(head, &n, "Retry-After", resp->retry_after);
	if (resp->allow)
		ok = ok && head_add(head, &n, "Allow", resp->allow);
	for (int i = 0; i < resp->nheaders; i++)
		ok = ok && head_add(head, &n, resp->headers[i].name, resp->headers[i].value);
	size_t blen = resp->body.len;
	if (status == 204 || status == 304 || status / 100 == 1)
		blen = 0;
	else if (ok) {
		k = snprintf(head + n, sizeof(head) - n, "Content-Length: %zu\r\n", blen);
		ok = k > 0 && (size_t)k < sizeof(head) - n;
		n += ok ? (size_t)k : 0;
	}
	if (!ok || n + 2 >= sizeof(head)) {
		/* Headers past WL_RESP_HEAD_BYTES: a programming error. */
		rdb_error("http", "write loop: response headers too long (status %d); closing",
			  status);
		c->close_after = true;
		c->out_len = c->out_off = 0;
		c->st = C_WRITE;
		return;
	}
	head[n++] = '\r';
	head[n++] = '\n';
	int cls = status / 100;
	if (cls >= 1 && cls <= 5)
		atomic_fetch_add(&ctx->counters.requests[cls], 1);
	struct iovec iov[2] = {{head, n}, {resp->body.data, blen}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = blen ? 2 : 1};
	ssize_t w;
	do
		w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
	size_t total = n + blen, done = w > 0 ? (size_t)w : 0;
	c->st = C_WRITE;
	c->out_len = c->out_off = 0;
	if (w < 0 && errno != EAGAIN) {
		c->close_after = true; /* the peer left: conn_run closes */
		return;
	}
	if (done == total)
		return;
	/* A client that does not read its answer gets the deadline of one that
	 * does not send its request (and may be shed). */
	srv_cs_set_phase(c->cs, CS_WAITING);
	size_t rest = total - done;
	c->out = malloc(rest);
	if (!c->out) {
		c->close_after = true;
		return;
	}
	size_t o = 0;
	if (done < n) {
		memcpy(c->out, head + done, n - done);
		o = n - done;
	}
	size_t boff = done > n ? done - n : 0;
	if (blen > boff)
		memcpy(c->out + o, resp->body.data + boff, blen - boff);
	c->out_len = rest;
}

/* -1: error (close), 0: all written, 1: wait for EPOLLOUT. */
static int flush(struct wl_conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? 1 : -1;
		}
		c->out_off += (size_t)w;
	}
	free(c->out);
	c->out = NULL;
	c->out_len = c->out_off = 0;
	return 0;
}

/* ---- requests -------------------------------------------------------------------- */

static bool collect_arg(void *cls, const char *key, size_t key_len, const char *val, size_t val_len)
{
	return srv_req_add_arg(cls, key, key_len, val, val_len);
}

static void park_ready(void *arg)
{
	struct wl_conn *c = (struct wl_conn *)((char *)arg - offsetof(struct wl_conn, pk));
	struct wl_thread *t = c->t;
	struct wl_loop *l = t->l;
	/* Counted before the push: once c is on the stack it may be answered,
	 * the last parked request drained and wl_stop run while t is still
	 * used here. */
	atomic_fetch_add(&l->waking, 1);
	struct wl_conn *old = atomic_load(&t->ready);
	do
		c->ready_next = old;
	while (!atomic_compare_exchange_weak(&t->ready, &old, c));
	if (!old) {
		uint64_t one = 1;
		ssize_t w = write(t->efd, &one, sizeof(one));
		(void)w; /* fails only when the counter is full: then it wakes anyway */
	}
	atomic_fetch_sub(&l->waking, 1);
}

/* The request is whole in c->buf: run it. */
static void dispatch(struct wl_conn *c)
{
	struct wl_thread *t = c->t;
	struct srv_ctx *ctx = t->l->ctx;
	struct wl_head *hd = &c->hd;
	char *b = (char *)c->buf;
	srv_cs_set_phase(c->cs, CS_HANDLING);
	b[c->got] = 0;
	b[hd->path.off + hd->path.len] = 0;
	struct srv_header hdrs[WL_MAX_HEADERS];
	for (int i = 0; i < hd->nheaders; i++) {
		b[hd->headers[i].name.off + hd->headers[i].name.len] = 0;
		b[hd->headers[i].value.off + hd->headers[i].value.len] = 0;
		hdrs[i].name = b + hd->headers[i].name.off;
		hdrs[i].value = b + hd->headers[i].value.off;
	}
	c->pk = (struct srv_park){.h = t->l->h, .ready = park_ready, .loop = true};
	struct srv_req req = {.ctx = ctx,
			      .method = "POST",
			      .path = b + hd->path.off,
			      .body = c->buf + hd->head_len,
			      .body_len = (size_t)hd->content_length,
			      .hdrs = hdrs,
			      .nhdrs = hd->nheaders,
			      .peer = c->cs->peer,
			      .park = &c->pk};
	if (hd->has_query) {
		b[hd->query.off + hd->query.len] = 0;
		wl_parse_args(b + hd->query.off, hd->query.len, collect_arg, &req);
	}
	struct srv_resp resp = {0};
	rdb_buf_init(&resp.body, ctx->cfg->max_response_bytes + 4096);
	srv_dispatch(&req, &resp);
	if (c->pk.parked) {
		c->st = C_PARKED;
	} else {
		respond(c, &resp);
	}
	rdb_buf_free(&resp.body);
}

/* Makes c->buf hold n bytes (and a NUL). */
static bool buf_room(struct wl_conn *c, size_t n)
{
	if (n + 1 <= c->cap)
		return true;
	uint8_t *p = realloc(c->buf, n + 1);
	if (!p)
		return false;
	c->buf = p;
	c->cap = n + 1;
	return true;
}

/* Whether libmicrohttpd would take this head too. It keeps a request's
 * line and headers in its connection memory (http_connection_memory_bytes),
 * with ~65 bytes of its own per header line, and answers 431 to a head that
 * does not fit: with 8K it took heads up to 7,840 bytes with 3 header
 * lines, 5,894 with 33 (libmicrohttpd 0.9.75). A head it might refuse is
 * handed to it, so both front ends answer alike whatever that setting; at
 * the default (16K) every head under WL_HEAD_MAX fits. */
static bool head_fits(const struct wl_loop *l, const struct wl_head *hd)
{
	return hd->head_len + (uint64_t)hd->nheaders * HEAD_LINE_COST + HEAD_MEM_SLACK <=
	       l->conn_mem;
}

enum step { S_AGAIN, S_NEXT, S_GONE };

/* C_HEAD: peek and decide. */
static enum step do_head(struct wl_conn *c)
{
	struct wl_thread *t = c->t;
	struct wl_loop *l = t->l;
	ssize_t n;
	do
		n = recv(c->fd, t->peek, sizeof(t->peek), MSG_PEEK);
	while (n < 0 && errno == EINTR);
	if (n == 0 || (n < 0 && errno != EAGAIN)) {
		conn_free(c);
		return S_GONE;
	}
	if (n < 0)
		return S_AGAIN;
	enum wl_verdict v = wl_classify(t->peek, (size_t)n, &c->hd);
	if (v == WL_WRITE && !head_fits(l, &c->hd))
		v = WL_HANDOFF;
	if (v == WL_MORE && c->hup) {
		/* The rest of the head will never come, and a peek would return
		 * these bytes for ever: as libmicrohttpd, close. */
		conn_free(c);
		return S_GONE;
	}
	if (v == WL_MORE)
		return S_AGAIN;
	uint64_t clen = c->hd.content_length;
	/* libmicrohttpd answers what must be refused (503 over the limit,
	 * 413, 503 body budget) as it does without the loop. */
	if (v == WL_HANDOFF || c->cs->over_limit || clen > l->ctx->cfg->max_body_bytes ||
	    (clen && !srv_http_budget_take(l->h, clen))) {
		conn_handoff(c);
		return S_GONE;
	}
	c->charged = clen;
	size_t need = c->hd.head_len + (size_t)clen;
	if (!buf_room(c, need)) {
		conn_free(c);
		return S_GONE;
	}
	/* The head (peeked, so there) and as much of the body as came. */
	do
		n = recv(c->fd, c->buf, need, 0);
	while (n < 0 && errno == EINTR);
	if (n < (ssize_t)c->hd.head_len) {
		conn_free(c); /* cannot happen: the head was in the socket */
		return S_GONE;
	}
	c->got = (size_t)n;
	c->close_after = c->hd.close;
	srv_cs_set_phase(c->cs, CS_BODY);
	atomic_store(&c->cs->body_bytes, (uint64_t)(c->got - c->hd.head_len));
	/* As libmicrohttpd: the interim answer whenever the client asked for
	 * one and a body is to come, even when it sent the body along. */
	if (c->hd.expect_continue && clen > 0) {
		static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
		if (send(c->fd, cont, sizeof(cont) - 1, MSG_NOSIGNAL) !=
		    (ssize_t)sizeof(cont) - 1) {
			conn_free(c);
			return S_GONE;
		}
	}
	c->st = C_BODY;
	return S_NEXT;
}

/* C_BODY: read the rest of the body; dispatch when whole. */
static enum step do_body(struct wl_conn *c)
{
	size_t need = c->hd.head_len + (size_t)c->hd.content_length;
	while (c->got < need) {
		ssize_t n = recv(c->fd, c->buf + c->got, need - c->got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return S_AGAIN;
		if (n <= 0) {
			conn_free(c);
			return S_GONE;
		}
		c->got += (size_t)n;
		atomic_fetch_add(&c->cs->body_bytes, (uint64_t)n);
	}
	dispatch(c);
	return S_NEXT;
}

/* C_WRITE: write out; then the request is over. */
static enum step do_write(struct wl_conn *c)
{
	int r = c->out_len ? flush(c) : 0;
	if (r == 1)
		return S_AGAIN;
	if (r < 0 || c->close_after) {
		if (r == 0) {
			/* Bytes the client sent past the request would make the
			 * close a reset that may destroy the answer in flight. */
			ssize_t d = recv(c->fd, c->t->peek, sizeof(c->t->peek), MSG_DONTWAIT);
			(void)d;
			shutdown(c->fd, SHUT_WR);
		}
		conn_free(c);
		return S_GONE;
	}
	srv_http_budget_give(c->t->l->h, c->charged);
	c->charged = 0;
	if (c->cap > WL_KEEP_BUF_BYTES) {
		free(c->buf);
		c->buf = NULL;
		c->cap = 0;
	}
	srv_cs_set_phase(c->cs, CS_WAITING);
	c->st = C_HEAD;
	return S_NEXT;
}

/* Runs c's state machine until it must wait (or c is gone). */
static void conn_run(struct wl_conn *c)
{
	for (;;) {
		enum step s;
		switch (c->st) {
		case C_HEAD:
			s = do_head(c);
			break;
		case C_BODY:
			s = do_body(c);
			break;
		case C_WRITE:
			s = do_write(c);
			break;
		default: /* C_PARKED: the ready stack brings it back */
			return;
		}
		if (s != S_NEXT)
			return;
	}
}

/* Answers the parked requests whose writes completed. */
static void ready_run(struct wl_thread *t)
{
	struct wl_conn *c = atomic_exchange(&t->ready, NULL), *fifo = NULL;
	struct srv_ctx *ctx = t->l->ctx;
	while (c) { /* the stack is newest first: answer in completion order */
		struct wl_conn *next = c->ready_next;
		c->ready_next = fifo;
		fifo = c;
		c = next;
	}
	c = fifo;
	while (c) {
		struct wl_conn *next = c->ready_next;
		struct srv_resp resp = {0};
		rdb_buf_init(&resp.body, ctx->cfg->max_response_bytes + 4096);
		srv_park_finish(&c->pk, &resp);
		c->pk.parked = false;
		respond(c, &resp);
		rdb_buf_free(&resp.body);
		conn_run(c);
		c = next;
	}
}

static void *loop_main(void *arg)
{
	struct wl_thread *t = arg;
	struct wl_loop *l = t->l;
	pthread_setname_np(pthread_self(), "rdb-http-loop");
	struct epoll_event ev[WL_EVENTS];
	while (!atomic_load(&l->stop)) {
		int n = epoll_wait(t->ep, ev, WL_EVENTS, t->listening ? -1 : WL_ACCEPT_PAUSE_MS);
		if (!t->listening && rdb_now_mono_ns() >= t->resume_ns)
			listener_resume(t); /* a busy thread still gets back to accepting */
		for (int i = 0; i < n; i++) {
			void *p = ev[i].data.ptr;
			if (p == &tag_listen) {
				accept_some(t);
			} else if (p == &tag_wake) {
				uint64_t v;
				ssize_t r = read(t->efd, &v, sizeof(v));
				(void)r;
			} else {
				struct wl_conn *c = p;
				if (ev[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
					c->hup = true;
				conn_run(c);
			}
		}
		ready_run(t); /* after the eventfd was read: no wake-up is lost */
	}
	while (t->conns)
		conn_free(t->conns); /* none is parked: http.c drained them */
	return NULL;
}

/* ---- start and stop --------------------------------------------------------------- */

static int listen_socket(const struct srv_config *cfg, uint16_t *port)
{
	struct sockaddr_in sa = {0};
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)cfg->http_port);
	if (inet_pton(AF_INET, cfg->http_addr, &sa.sin_addr) != 1)
		return -EINVAL;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 1024) != 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	socklen_t len = sizeof(sa);
	if (getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		*port = ntohs(sa.sin_port);
	return fd;
}

int wl_start(struct srv_http *h, struct srv_ctx *ctx, struct wl_loop **out, uint16_t *port)
{
	const struct srv_config *cfg = ctx->cfg;
	struct wl_loop *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->h = h;
	l->ctx = ctx;
	l->conn_mem = cfg->http_connection_memory_bytes;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int n = (int)cfg->http_threads;
	if (cpus > 0 && n > cpus)
		n = (int)cpus;
	if (n < 1)
		n = 1;
	l->t = calloc((size_t)n, sizeof(*l->t));
	l->lfd = listen_socket(cfg, port);
	if (!l->t || l->lfd < 0) {
		int rc = !l->t ? -ENOMEM : l->lfd;
		if (l->t)
			rdb_error("http", "cannot listen on %s:%u: %s", cfg->http_addr,
				  cfg->http_port, rdb_strerror(rc));
		l->lfd = -1;
		wl_stop(l);
		return rc;
	}
	for (int i = 0; i < n; i++) {
		struct wl_thread *t = &l->t[i];
		t->l = l;
		t->ep = epoll_create1(EPOLL_CLOEXEC);
		t->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		l->nthreads = i + 1;
		struct epoll_event le = {.events = EPOLLIN | EPOLLEXCLUSIVE,
					 .data.ptr = &tag_listen};
		struct epoll_event we = {.events = EPOLLIN, .data.ptr = &tag_wake};
		int rc = 0;
		if (t->ep < 0 || t->efd < 0 || epoll_ctl(t->ep, EPOLL_CTL_ADD, l->lfd, &le) != 0 ||
		    epoll_ctl(t->ep, EPOLL_CTL_ADD, t->efd, &we) != 0)
			rc = -errno;
		t->listening = rc == 0;
		if (rc == 0) {
			rc = -pthread_create(&t->th, NULL, loop_main, t);
			t->started = rc == 0;
		}
		if (rc) {
			rdb_error("http", "cannot start the write loop: %s", rdb_strerror(rc));
			wl_stop(l);
			return rc;
		}
	}
	rdb_info("http", "write loop: %d thread(s) serve writes; libmicrohttpd the rest", n);
	*out = l;
	return 0;
}

void wl_stop_accept(struct wl_loop *l)
{
	if (!l || l->lfd < 0)
		return;
	atomic_store(&l->accept_stopped, true);
	for (int i = 0; i < l->nthreads; i++)
		if (l->t[i].ep >= 0)
			epoll_ctl(l->t[i].ep, EPOLL_CTL_DEL, l->lfd, NULL);
	/* The descriptor stays open until the threads are joined: one of them
	 * may be in accept4 on it. A shut listener refuses new connections. */
	shutdown(l->lfd, SHUT_RDWR);
}

void wl_stop(struct wl_loop *l)
{
	if (!l)
		return;
	atomic_store(&l->stop, true);
	for (int i = 0; i < l->nthreads; i++) {
		struct wl_thread *t = &l->t[i];
		if (t->started) {
			uint64_t one = 1;
			ssize_t w = write(t->efd, &one, sizeof(one));
			(void)w;
			pthread_join(t->th, NULL);
		}
	}
	/* A completion may still be between its push and its eventfd write. */
	while (atomic_load(&l->waking) > 0) {
		struct timespec ts = {0, 100000};
		nanosleep(&ts, NULL);
	}
	for (int i = 0; i < l->nthreads; i++) {
		struct wl_thread *t = &l->t[i];
		if (t->ep >= 0)
			close(t->ep);
		if (t->efd >= 0)
			close(t->efd);
	}
	if (l->lfd >= 0)
		close(l->lfd);
	free(l->t);
	free(l);
}
