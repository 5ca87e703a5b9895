/* http.c - libmicrohttpd wiring: one daemon with an internal thread pool
 * (epoll), HTTP/1.1 keep-alive, and the defences against slow and greedy
 * clients. The only file that includes microhttpd.h.
 *
 * With http_write_loop = on (and no TLS) the write loop (wloop.c) owns the
 * listening socket and serves plain write POSTs itself; libmicrohttpd runs
 * without a listener and gets every other connection from the loop
 * (srv_http_handoff -> MHD_add_connection). The registry, the reaper, the
 * body budget and parking below serve both front ends (http_int.h): a
 * handed-off connection keeps its registry entry (adopted by
 * on_connection), so its limit status and deadline carry over.
 *
 * Connections (struct conn_state, one per TCP connection, kept in a
 * registry): each is *waiting* (for a request: idle keep-alive, or headers
 * arriving), receiving a *body*, or *handling* (the handler runs or the
 * response is sent). A request must arrive whole within http_timeout_s of
 * the moment the connection started waiting, plus one second for every
 * http_min_body_rate_bytes of body received; the reaper thread (every
 * REAP_PERIOD_MS) shuts down the socket of a connection past that deadline
 * however slowly bytes trickle in (libmicrohttpd's own timeout only counts
 * silence). Handling has no deadline here.
 *
 * Connection limit: libmicrohttpd's limit is http_max_connections plus a
 * reserve, because at its limit it stops accepting and new clients hang in
 * the listen backlog. Past http_max_connections a new connection first
 * sheds the connection that has waited longest for a request (idle
 * keep-alive, or a slowloris), if it waited SHED_MIN_WAIT_MS or more;
 * otherwise the new connection is marked over the limit and its request is
 * answered 503 + Retry-After with Connection: close (it gets
 * OVER_LIMIT_WAIT_S to send it).
 *
 * Request bodies: one budget, max_body_bytes_in_flight, for the body
 * buffers of all connections (struct srv_http.body_bytes). A body with
 * Content-Length reserves that much when its headers arrive (413 past
 * max_body_bytes, 503 + Retry-After when the budget cannot hold it, both
 * before the body is read); a chunked body reserves as its buffer grows
 * (503 when it cannot, the rest drained). The reservation covers the
 * buffer's allocation and is returned when the request ends; a worker also
 * keeps a few finished requests' states with their small body buffers
 * (CR_CACHE_N of at most CR_CACHE_BODY_BYTES) for its next requests,
 * waiting outside the budget (a request that fills one is charged for it).
 *
 * Content-Length headers that disagree (libmicrohttpd uses the first) are
 * refused with 400 before routing. Not fixable here: libmicrohttpd 0.9.75
 * measures header values with strlen (a NUL byte cuts a value, e.g. an
 * Authorization header, and the API never shows the rest), and answers a
 * Content-Length past 2^64-1 itself with a 413 whose status line and
 * headers it sends twice; neither request reaches rankdb's code.
 *
 * Parked writes (srv_submit): a write whose WAL sync is pending does not
 * hold its worker. The handler returns SRV_PARKED, on_request suspends the
 * connection (MHD_ALLOW_SUSPEND_RESUME; libmicrohttpd's ITC wakes the
 * owning worker), the WAL thread's completion resumes it, and the worker
 * calls on_request again, which answers through the handler's finish
 * function. A small state machine (PARK_*) lets the completion come before
 * the suspend. Parked connections are in CS_HANDLING: no deadline, never
 * shed. At most http_max_parked at once (503 past it); at stop no more are
 * parked and http_free waits until every parked one was answered, since
 * libmicrohttpd must not be stopped with a suspended connection.
 * What a park costs inside libmicrohttpd 0.9.75 (epoll mode), measured in
 * the per-rank shape (strace -c, one record per POST): suspending takes
 * the socket out of the worker's epoll set and resuming puts it back
 * (epoll_ctl, ~0.36 per request: only for sockets that were in the set),
 * and every MHD_resume_connection writes the worker's eventfd (1 write per
 * request, drained by ~1 read), even when one group commit resumes dozens
 * of connections of the same worker. Neither is reachable from here.
 *
 * A request's memory (struct conn_req) is released in one place, the
 * completion callback (kept for the worker's next request, or freed); a
 * connection's (struct conn_state) in the connection-closed callback,
 * which libmicrohttpd calls before it closes the socket, so the reaper
 * never shuts down a reused descriptor.
 */
#include "server/http_int.h"
#include "server/wloop.h"
#include "server/tls.h"
#include "common/rdb_err.h"
#include "common/rdb_log.h"
#include "common/rdb_tcache.h"
#include "common/rdb_time.h"
#include "common/rdb_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#define REAP_PERIOD_MS	  200
#define SHED_MIN_WAIT_MS  1000 /* a connection waiting this long for a request may be shed */
#define OVER_LIMIT_WAIT_S 2    /* an over-the-limit connection's time to send its request */
#define ADOPT_MAX_MS                                                                               \
	5000 /* a handed-off connection libmicrohttpd has not taken up by then never will */
#define CHUNKED_MIN_BYTES (64u * 1024) /* first reservation of a body without Content-Length */

/* A parked request's state (srv_submit): PARK_PENDING from the submit
 * until the handler suspended the connection (PARK_SUSPENDED), PARK_READY
 * once the write's outcome is known. Whichever of the handler and the
 * completion comes second resumes the connection. */
enum { PARK_NONE = 0, PARK_PENDING, PARK_SUSPENDED, PARK_READY };

struct conn_req {
	struct srv_park pk; /* first: srv_park's ready gets &pk, which is the conn_req */
	struct srv_http *h;
	struct rdb_buf body;
	uint64_t charged; /* bytes reserved in h->body_bytes; >= body.cap */
	bool too_large;
	bool busy;			 /* the body budget could not hold it: 503 */
	bool answered;			 /* a response was queued early (413, 503, 400) */
	struct MHD_Connection *conn;	 /* of a parked write */
	char peer[INET6_ADDRSTRLEN + 8]; /* srv_req.peer when the connection has no state */
};

/* A worker keeps up to CR_CACHE_N finished requests' states, each with
 * its body buffer when that is at most CR_CACHE_BODY_BYTES, for its next
 * requests: a small write then costs no calloc, body malloc and two frees.
 * The buffers waiting in the cache (at most 16 x 16 KiB per thread) are
 * outside max_body_bytes_in_flight; one a request writes its body into is
 * charged to it (body_room), so what bodies in flight hold stays within
 * the budget. */
#define CR_CACHE_N	    16
#define CR_CACHE_BODY_BYTES (16u * 1024)

static void cr_free(void *arg)
{
	struct conn_req *cr = arg;
	rdb_buf_free(&cr->body);
	free(cr);
}

static struct rdb_tcache cr_cache = RDB_TCACHE_INIT(CR_CACHE_N, cr_free);

/* A zeroed request state, perhaps with an empty body buffer already
 * allocated (body.cap). NULL: out of memory. */
static struct conn_req *cr_take(void)
{
	struct conn_req *cr = rdb_tcache_take(&cr_cache);
	if (!cr)
		return calloc(1, sizeof(*cr));
	uint8_t *data = cr->body.data;
	size_t cap = cr->body.cap;
	memset(cr, 0, sizeof(*cr));
	cr->body.data = data;
	cr->body.cap = cap;
	return cr;
}

static void cr_give(struct conn_req *cr)
{
	if (cr->body.cap > CR_CACHE_BODY_BYTES) {
		rdb_buf_free(&cr->body);
		rdb_buf_init(&cr->body, 0);
	}
	if (!rdb_tcache_give(&cr_cache, cr))
		cr_free(cr);
}

static enum MHD_Result collect_arg(void *cls, enum MHD_ValueKind kind, const char *key,
				   size_t key_size, const char *value, size_t value_size)
{
	(void)kind;
	/* libmicrohttpd gives NULL for a key without '=' */
	return srv_req_add_arg(cls, key, key_size, value ? value : "", value ? value_size : 0)
		   ? MHD_YES
		   : MHD_NO;
}

/* The response every plain answer gets: Content-Type (application/json
 * unless the handler said otherwise) and the optional headers. */
static struct MHD_Response *make_response(struct srv_resp *resp, bool close_conn)
{
	size_t len = resp->body.len;
	void *data = rdb_buf_steal(&resp->body);
	struct MHD_Response *r = MHD_create_response_from_buffer(
	    len, data ? data : (void *)"", data ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	if (!r) {
		free(data);
		return NULL;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				resp->content_type ? resp->content_type : "application/json");
	if (resp->retry_after)
		MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, resp->retry_after);
	if (resp->allow)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, resp->allow);
	for (int i = 0; i < resp->nheaders; i++)
		MHD_add_response_header(r, resp->headers[i].name, resp->headers[i].value);
	if (close_conn)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
	return r;
}

/* Is resp exactly what h->r204 says (status 204, nothing else)? */
static bool plain_204(const struct srv_resp *resp, bool close_conn)
{
	return resp->status == 204 && resp->body.len == 0 && !close_conn && !resp->content_type &&
	       !resp->retry_after && !resp->allow && resp->nheaders == 0;
}

static enum MHD_Result send_resp_close(struct MHD_Connection *conn, struct srv_http *h,
				       struct srv_resp *resp, bool close_conn)
{
	struct srv_ctx *ctx = h->ctx;
	bool shared = h->r204 && plain_204(resp, close_conn);
	struct MHD_Response *r = shared ? h->r204 : make_response(resp, close_conn);
	if (!r)
		return MHD_NO;
	int cls = resp->status / 100;
	if (cls >= 1 && cls <= 5)
		atomic_fetch_add(&ctx->counters.requests[cls], 1);
	enum MHD_Result ok = MHD_queue_response(conn, (unsigned)resp->status, r);
	if (!shared)
		MHD_destroy_response(r);
	return ok;
}

static enum MHD_Result send_resp(struct MHD_Connection *conn, struct srv_http *h,
				 struct srv_resp *resp)
{
	return send_resp_close(conn, h, resp, false);
}

/* An early error answer (before the body is read): the connection is
 * closed after it, so an unread body is never parsed as the next request. */
static enum MHD_Result refuse(struct MHD_Connection *conn, struct srv_http *h, int status,
			      const char *retry_after, const char *msg)
{
	struct srv_resp resp = {.retry_after = retry_after};
	rdb_buf_init(&resp.body, 4096);
	srv_error(&resp, status, "%s", msg);
	enum MHD_Result ok = send_resp_close(conn, h, &resp, true);
	rdb_buf_free(&resp.body);
	return ok;
}

/* 413 in the error shape the endpoint's clients read: InfluxDB v2 clients
 * want {"code","message"}, everyone else {"error"}. */
static enum MHD_Result too_large(struct MHD_Connection *conn, struct srv_http *h, const char *url)
{
	struct srv_ctx *ctx = h->ctx;
	struct srv_resp resp = {0};
	rdb_buf_init(&resp.body, 4096);
	atomic_fetch_add(&ctx->counters.write_rejected_too_large, 1);
	unsigned long long max = (unsigned long long)ctx->cfg->max_body_bytes;
	if (url && strcmp(url, "/api/v2/write") == 0) {
		resp.status = 413;
		rdb_buf_printf(&resp.body,
			       "{\"code\":\"request too large\",\"message\":\"request "
			       "body exceeds max_body_bytes (%llu bytes); send smaller batches\"}",
			       max);
	} else {
		srv_error(&resp, 413,
			  "request body exceeds max_body_bytes (%llu bytes); send "
			  "smaller batches",
			  max);
	}
	return send_resp(conn, h, &resp);
}

/* ---- body budget ------------------------------------------------------------ */

/* Reserves n more body bytes in the shared budget. False when it cannot. */
bool srv_http_budget_take(struct srv_http *h, uint64_t n)
{
	uint64_t max = h->ctx->cfg->max_body_bytes_in_flight;
	uint64_t cur = atomic_load(&h->body_bytes);
	do {
		if (n > max || cur > max - n)
			return false;
	} while (!atomic_compare_exchange_weak(&h->body_bytes, &cur, cur + n));
	atomic_store(&h->ctx->counters.http_body_bytes, cur + n);
	return true;
}

void srv_http_budget_give(struct srv_http *h, uint64_t n)
{
	if (n)
		atomic_store(&h->ctx->counters.http_body_bytes,
			     atomic_fetch_sub(&h->body_bytes, n) - n);
}

/* Makes the body buffer hold `need` bytes, its allocation covered by the
 * reservation (cr->charged). A kept buffer (cr_take) is charged with the
 * first body bytes, so a request without a body holds no budget; when the
 * budget cannot cover it, the request lets it go and grows its own. False
 * when the budget cannot grow (or out of memory). */
static bool body_room(struct conn_req *cr, size_t need)
{
	struct rdb_buf *b = &cr->body;
	if (need > b->max)
		return false;
	if (b->cap > cr->charged) {
		if (srv_http_budget_take(cr->h, b->cap - cr->charged)) {
			cr->charged = b->cap;
		} else {
			size_t max = b->max;
			rdb_buf_free(b);
			rdb_buf_init(b, max);
		}
	}
	if (need > cr->charged) {
		size_t cap = cr->charged * 2 > need ? cr->charged * 2 : need;
		if (cap < CHUNKED_MIN_BYTES)
			cap = CHUNKED_MIN_BYTES;
		if (cap > b->max)
			cap = b->max;
		if (!srv_http_budget_take(cr->h, cap - cr->charged))
			return false;
		cr->charged = cap;
	}
	if (need <= b->cap)
		return true;
	uint8_t *p = realloc(b->data, cr->charged);
	if (!p)
		return false;
	b->data = p;
	b->cap = cr->charged;
	return true;
}

/* ---- header checks ----------------------------------------------------------- */

struct hdr_check {
	const char *why; /* first reason to refuse, static text */
	const char *cl;	 /* first Content-Length value */
	size_t cl_len;
};

static enum MHD_Result check_header(void *cls, enum MHD_ValueKind kind, const char *key,
				    size_t key_size, const char *value, size_t value_size)
{
	(void)kind;
	struct hdr_check *hc = cls;
	(void)key_size;
	if (!value)
		return MHD_YES;
	if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) != 0)
		return MHD_YES;
	if (hc->cl && (hc->cl_len != value_size || memcmp(hc->cl, value, value_size) != 0)) {
		hc->why = "the request has Content-Length headers that disagree";
		return MHD_NO;
	}
	hc->cl = value;
	hc->cl_len = value_size;
	return MHD_YES;
}

static struct conn_state *conn_state_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return ci ? ci->socket_context : NULL;
}

void srv_cs_set_phase(struct conn_state *cs, enum conn_phase ph)
{
	if (!cs)
		return;
	uint64_t st = atomic_load(&cs->state);
	int64_t start = ph == CS_WAITING ? rdb_now_mono_ns() : srv_cs_wait_start_ns(st);
	if (ph == CS_BODY)
		atomic_store(&cs->body_bytes, 0);
	atomic_store(&cs->state, srv_cs_pack(ph, start));
}

static void park_ready(void *arg);

/* First call for a request: set up its state; refuse, before any body byte
 * is read, what must be refused (over the connection limit, bad headers,
 * a Content-Length past max_body_bytes or past the body budget). */
static enum MHD_Result begin(struct MHD_Connection *conn, struct srv_http *h, const char *url,
			     void **con_cls)
{
	struct srv_ctx *ctx = h->ctx;
	struct conn_req *cr = cr_take();
	if (!cr)
		return MHD_NO;
	cr->h = h;
	cr->pk.h = h;
	cr->pk.ready = park_ready;
	cr->body.max = ctx->cfg->max_body_bytes;
	*con_cls = cr;
	struct conn_state *cs = conn_state_of(conn);
	srv_cs_set_phase(cs, CS_BODY);
	cr->answered = true; /* unless nothing below refuses it */
	if (cs && cs->over_limit) {
		atomic_fetch_add(&ctx->counters.http_refused_limit, 1);
		return refuse(conn, h, 503, "1",
			      "too many connections (http_max_connections); "
			      "retry shortly");
	}
	struct hdr_check hc = {0};
	MHD_get_connection_values_n(conn, MHD_HEADER_KIND, check_header, &hc);
	if (hc.why)
		return refuse(conn, h, 400, NULL, hc.why);
	if (hc.cl) {
		char *end;
		errno = 0;
		unsigned long long n = strtoull(hc.cl, &end, 10);
		if (errno == 0 && *end == 0 && n > ctx->cfg->max_body_bytes) {
			cr->too_large = true;
			return too_large(conn, h, url);
		}
		if (errno == 0 && *end == 0 && n > 0) {
			if (!srv_http_budget_take(h, n)) {
				atomic_fetch_add(&ctx->counters.http_refused_body_budget, 1);
				return refuse(conn, h, 503, "1",
					      "request bodies in flight are at "
					      "max_body_bytes_in_flight; retry shortly");
			}
			cr->charged = n;
			cr->body.max = (size_t)n; /* the body never grows past what it reserved */
		}
	}
	cr->answered = false;
	return MHD_YES;
}

/* The client's address as "ip:port", for the audit log. */
static void peer_address(struct MHD_Connection *conn, char *out, size_t len)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	char ip[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;
	const struct sockaddr *sa = ci ? ci->client_addr : NULL;
	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
		inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
		port = ntohs(in->sin_port);
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
		inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
		port = ntohs(in6->sin6_port);
	}
	snprintf(out, len, "%s:%u", ip, port);
}

/* ---- parked writes: acknowledged when durable, no thread held ------------------ */

/* The write's completion (the WAL thread, or inside ing_submit_async):
 * mark it ready; if the handler already suspended the connection, resume
 * it (its worker then calls on_request, which answers). Touches nothing of
 * cr after the exchange unless the connection is suspended (then cr lives
 * until it is resumed and answered). */
static void park_ready(void *arg)
{
	struct conn_req *cr = arg; /* &cr->pk */
	struct MHD_Connection *conn = cr->conn;
	if (atomic_exchange(&cr->pk.state, PARK_READY) == PARK_SUSPENDED)
		MHD_resume_connection(conn);
}

/* After a handler parked: suspend the connection unless the write is
 * already done, in which case resume it at once (libmicrohttpd then calls
 * on_request again, which answers). */
static void park_suspend(struct MHD_Connection *conn, struct conn_req *cr)
{
	MHD_suspend_connection(conn);
	int expect = PARK_PENDING;
	if (!atomic_compare_exchange_strong(&cr->pk.state, &expect, PARK_SUSPENDED))
		MHD_resume_connection(conn); /* PARK_READY: the completion came first */
}

void srv_park_finish(struct srv_park *p, struct srv_resp *resp)
{
	struct srv_http *h = p->h;
	struct ing_outcome o;
	ing_finish(p->tk, &o);
	p->tk = NULL;
	struct srv_resp discard = {0};
	if (!resp) {
		rdb_buf_init(&discard.body, h->ctx->cfg->max_response_bytes + 4096);
		resp = &discard;
	}
	p->fin(p->fin_state, &o, resp);
	p->fin = NULL;
	rdb_buf_free(&discard.body);
	atomic_fetch_sub(&h->parked, 1);
	atomic_store(&h->ctx->counters.http_parked, atomic_load(&h->parked));
}

/* on_request for a resumed parked request: answer it. */
static enum MHD_Result answer_parked(struct MHD_Connection *conn, struct conn_req *cr)
{
	struct srv_ctx *ctx = cr->h->ctx;
	if (atomic_load(&cr->pk.state) != PARK_READY)
		return MHD_YES; /* not ours to answer yet (never expected) */
	if (!cr->pk.fin)
		return MHD_YES; /* answered already */
	struct srv_resp resp = {0};
	rdb_buf_init(&resp.body, ctx->cfg->max_response_bytes + 4096);
	srv_park_finish(&cr->pk, &resp);
	enum MHD_Result ok = send_resp(conn, cr->h, &resp);
	rdb_buf_free(&resp.body);
	return ok;
}

static void max_store(_Atomic uint64_t *m, uint64_t v)
{
	uint64_t cur = atomic_load(m);
	while (v > cur && !atomic_compare_exchange_weak(m, &cur, v))
		;
}

int srv_submit(struct srv_req *req, const struct ing_write *w, struct ing_outcome *o,
	       srv_finish_fn fin, void *state)
{
	struct srv_ctx *ctx = req->ctx;
	struct srv_park *p = req->park;
	/* libmicrohttpd's workers answer a write with sync_policy none on their
	 * own thread (the WAL append is quick; a suspend/resume costs more);
	 * the loop's threads serve thousands of connections and park it. */
	if (!p || ctx->cfg->http_max_parked == 0 ||
	    (!p->loop && strcmp(ctx->cfg->sync_policy, "none") == 0)) {
		ing_submit(ctx->pipe, w, o);
		return 0;
	}
	struct srv_http *h = p->h;
	/* Counted before the stop flag is read: http_free sees it or we see the flag. */
	uint64_t n = atomic_fetch_add(&h->parked, 1) + 1;
	if (atomic_load(&h->parks_closed)) {
		atomic_fetch_sub(&h->parked, 1);
		ing_submit(ctx->pipe, w, o); /* stopping: wait on this thread as before */
		return 0;
	}
	if (n > ctx->cfg->http_max_parked) {
		atomic_fetch_sub(&h->parked, 1);
		atomic_fetch_add(&ctx->counters.http_refused_parked, 1);
		*o = (struct ing_outcome){
		    .rc = RDB_EBUSY, .reason = ING_BUSY, .status = 503, .retry_after = "1"};
		snprintf(
		    o->msg, sizeof(o->msg),
		    "busy: %llu writes are already waiting for their WAL sync (http_max_parked); "
		    "nothing of this request was stored, retry after the Retry-After delay",
		    (unsigned long long)ctx->cfg->http_max_parked);
		return 0;
	}
	atomic_store(&ctx->counters.http_parked, n);
	max_store(&ctx->counters.http_parked_max, n);
	atomic_store(&p->state, PARK_PENDING);
	p->fin = fin;
	p->fin_state = state;
	int rc = ing_submit_async(ctx->pipe, w, o, p->ready, p, &p->tk);
	if (rc != ING_PENDING) {
		atomic_store(&p->state, PARK_NONE);
		p->fin = NULL;
		atomic_fetch_sub(&h->parked, 1);
		atomic_store(&ctx->counters.http_parked, atomic_load(&h->parked));
		return 0;
	}
	atomic_fetch_add(&ctx->counters.http_parked_total, 1);
	p->parked = true;
	return SRV_PARKED;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	(void)version;
	struct srv_http *h = cls;
	struct srv_ctx *ctx = h->ctx;
	if (*con_cls == NULL)
		return begin(conn, h, url, con_cls);
	struct conn_req *cr = *con_cls;
	if (cr->pk.parked)
		return answer_parked(conn, cr);
	if (*upload_data_size) {
		size_t n = *upload_data_size;
		struct conn_state *cs = conn_state_of(conn);
		if (cs)
			atomic_fetch_add(&cs->body_bytes, n);
		if (!cr->too_large && !cr->busy && !cr->answered) {
			if (cr->body.len + n > cr->body.max)
				cr->too_large = true;
			else if (!body_room(cr, cr->body.len + n))
				cr->busy = true;
			else
				rdb_buf_append(&cr->body, upload_data, n);
		}
		*upload_data_size = 0; /* consumed (or drained) */
		return MHD_YES;
	}
	if (cr->answered)
		return MHD_YES;
	if (cr->too_large)
		return too_large(conn, h, url);
	if (cr->busy) {
		atomic_fetch_add(&ctx->counters.http_refused_body_budget, 1);
		cr->answered = true;
		return refuse(conn, h, 503, "1",
			      "request bodies in flight are at "
			      "max_body_bytes_in_flight; retry shortly");
	}
	struct conn_state *cs = conn_state_of(conn);
	srv_cs_set_phase(cs, CS_HANDLING);
	if (!cs)
		peer_address(conn, cr->peer, sizeof(cr->peer));
	cr->conn = conn;
	struct srv_req req = {.ctx = ctx,
			      .method = method,
			      .path = url,
			      .body = cr->body.data,
			      .body_len = cr->body.len,
			      .conn = conn,
			      .peer = cs ? cs->peer : cr->peer,
			      .park = &cr->pk};
	MHD_get_connection_values_n(conn, MHD_GET_ARGUMENT_KIND, collect_arg, &req);
	struct srv_resp resp = {0};
	rdb_buf_init(&resp.body, ctx->cfg->max_response_bytes + 4096);
	srv_dispatch(&req, &resp);
	if (cr->pk.parked) {
		rdb_buf_free(&resp.body);
		park_suspend(conn, cr);
		return MHD_YES;
	}
	enum MHD_Result ok = send_resp(conn, h, &resp);
	rdb_buf_free(&resp.body);
	return ok;
}

void srv_resp_header(struct srv_resp *resp, const char *name, const char *value)
{
	if (resp->nheaders == SRV_MAX_RESP_HEADERS) {
		rdb_error("http",
			  "response header %s dropped: more than %d extra headers "
			  "(raise SRV_MAX_RESP_HEADERS)",
			  name, SRV_MAX_RESP_HEADERS);
		return;
	}
	resp->headers[resp->nheaders].name = name;
	resp->headers[resp->nheaders].value = value;
	resp->nheaders++;
}

const char *srv_req_header(const struct srv_req *req, const char *name)
{
	if (req->hdrs) { /* the write loop's request (wloop.c) */
		for (int i = 0; i < req->nhdrs; i++)
			if (strcasecmp(req->hdrs[i].name, name) == 0)
				return req->hdrs[i].value;
		return NULL;
	}
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *srv_http_reason(int status)
{
	return MHD_get_reason_phrase_for((unsigned)status);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)toe;
	struct srv_http *h = cls;
	struct conn_req *cr = *con_cls;
	srv_cs_set_phase(conn_state_of(conn), CS_WAITING);
	if (!cr)
		return;
	if (cr->pk.fin) {
		/* Parked and never answered (the connection went away after its
		 * resume): the write's outcome stands, nobody hears it. A write
		 * still pending cannot get here: its connection is suspended. */
		if (atomic_load(&cr->pk.state) == PARK_READY) {
			srv_park_finish(&cr->pk, NULL);
		} else {
			rdb_error("http", "a parked write's request ended before its WAL sync; "
					  "its state is leaked");
			atomic_fetch_sub(&h->parked, 1); /* or the drain at stop waits forever */
			*con_cls = NULL;
			return;
		}
	}
	srv_http_budget_give(h, cr->charged);
	cr_give(cr);
	*con_cls = NULL;
}

/* ---- connections: registry, shedding, deadlines -------------------------------- */

static void reg_unlink(struct srv_http *h, struct conn_state *cs)
{
	if (cs->prev)
		cs->prev->next = cs->next;
	else
		h->head = cs->next;
	if (cs->next)
		cs->next->prev = cs->prev;
	else
		h->tail = cs->prev;
	cs->prev = cs->next = NULL;
}

/* Shuts cs's socket down; its front end then closes the connection (and
 * unregisters it). False, nothing done, while it is in transit to
 * libmicrohttpd (fd < 0): the reaper tries again on its next tick, the
 * shedder picks another connection. Under h->mu. */
static bool shut(struct conn_state *cs)
{
	if (cs->fd < 0)
		return false;
	if (!cs->shut)
		shutdown(cs->fd, SHUT_RDWR);
	cs->shut = true;
	return true;
}

/* Past the limit: sheds the connection that has waited longest for a
 * request, if it waited long enough. Under h->mu. */
static bool shed_one(struct srv_http *h, int64_t now_ns)
{
	struct conn_state *best = NULL;
	int64_t best_start = 0;
	for (struct conn_state *c = h->head; c; c = c->next) {
		uint64_t st = atomic_load(&c->state);
		int64_t start = srv_cs_wait_start_ns(st);
		if (srv_cs_phase(st) == CS_WAITING && !c->shut && c->fd >= 0 &&
		    now_ns - start >= SHED_MIN_WAIT_MS * 1000000ll &&
		    (!best || start < best_start)) {
			best = c;
			best_start = start;
		}
	}
	if (best)
		shut(best);
	return best != NULL;
}

static void reg_add(struct srv_http *h, struct conn_state *cs, int64_t now);
static bool adopt(struct srv_http *h, int fd, void **socket_context);

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	struct srv_http *h = cls;
	struct srv_counters *c = &h->ctx->counters;
	if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
		struct conn_state *cs = *socket_context;
		if (!cs)
			return;
		pthread_mutex_lock(&h->mu);
		reg_unlink(h, cs);
		h->nconns--;
		atomic_store(&c->http_connections, h->nconns);
		pthread_mutex_unlock(&h->mu);
		free(cs);
		*socket_context = NULL;
		return;
	}
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	int fd = ci ? ci->connect_fd : -1;
	if (adopt(h, fd, socket_context))
		return;
	struct conn_state *cs = calloc(1, sizeof(*cs));
	if (!cs)
		return; /* not tracked: libmicrohttpd's own limits and timeout still apply */
	cs->fd = fd;
	peer_address(conn, cs->peer, sizeof(cs->peer));
	int64_t now = rdb_now_mono_ns();
	atomic_store(&cs->state, srv_cs_pack(CS_WAITING, now));
	pthread_mutex_lock(&h->mu);
	reg_add(h, cs, now);
	pthread_mutex_unlock(&h->mu);
	*socket_context = cs;
}

/* Adds cs to the registry (shedding or marking it over the limit). Under
 * h->mu. */
static void reg_add(struct srv_http *h, struct conn_state *cs, int64_t now)
{
	struct srv_counters *c = &h->ctx->counters;
	if (h->nconns >= h->ctx->cfg->http_max_connections) {
		if (shed_one(h, now))
			atomic_fetch_add(&c->http_shed_idle, 1);
		else
			cs->over_limit = true;
	}
	cs->prev = h->tail;
	if (h->tail)
		h->tail->next = cs;
	else
		h->head = cs;
	h->tail = cs;
	h->nconns++;
	atomic_store(&c->http_connections, h->nconns);
}

/* A connection the write loop handed over (srv_http_handoff): its state,
 * registered all along, becomes libmicrohttpd's socket context. */
static bool adopt(struct srv_http *h, int fd, void **socket_context)
{
	if (!atomic_load(&h->adopting))
		return false; /* no write loop, or it never handed a connection over */
	pthread_mutex_lock(&h->mu);
	struct conn_state **pp = &h->adopt;
	while (*pp && (*pp)->fd != -1 - fd)
		pp = &(*pp)->adopt_next;
	struct conn_state *cs = *pp;
	if (cs) {
		*pp = cs->adopt_next;
		cs->adopt_next = NULL;
		cs->fd = fd;
	}
	pthread_mutex_unlock(&h->mu);
	*socket_context = cs;
	return cs != NULL;
}

struct conn_state *srv_http_conn_open(struct srv_http *h, int fd, const struct sockaddr *sa)
{
	struct conn_state *cs = calloc(1, sizeof(*cs));
	if (!cs)
		return NULL;
	cs->fd = fd;
	char ip[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
		inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
		port = ntohs(in->sin_port);
	}
	snprintf(cs->peer, sizeof(cs->peer), "%s:%u", ip, port);
	int64_t now = rdb_now_mono_ns();
	atomic_store(&cs->state, srv_cs_pack(CS_WAITING, now));
	pthread_mutex_lock(&h->mu);
	if (h->nconns >= h->hard_limit) {
		pthread_mutex_unlock(&h->mu);
		free(cs);
		return NULL;
	}
	reg_add(h, cs, now);
	pthread_mutex_unlock(&h->mu);
	return cs;
}

void srv_http_conn_close(struct srv_http *h, struct conn_state *cs)
{
	pthread_mutex_lock(&h->mu);
	reg_unlink(h, cs);
	h->nconns--;
	atomic_store(&h->ctx->counters.http_connections, h->nconns);
	pthread_mutex_unlock(&h->mu);
	free(cs);
}

/* In transit the state holds -1 - fd (never shut: libmicrohttpd may close
 * the socket before it adopts it, and the number be reused). */
int srv_http_handoff(struct srv_http *h, struct conn_state *cs, int fd, const struct sockaddr *sa,
		     socklen_t salen)
{
	atomic_store(&h->adopting, true);
	pthread_mutex_lock(&h->mu);
	cs->fd = -1 - fd;
	cs->handoff_ns = rdb_now_mono_ns();
	cs->adopt_next = h->adopt;
	h->adopt = cs;
	pthread_mutex_unlock(&h->mu);
	if (MHD_add_connection(h->d, fd, sa, salen) == MHD_YES)
		return 0;
	/* libmicrohttpd closed the socket. */
	pthread_mutex_lock(&h->mu);
	for (struct conn_state **pp = &h->adopt; *pp; pp = &(*pp)->adopt_next)
		if (*pp == cs) {
			*pp = cs->adopt_next;
			break;
		}
	pthread_mutex_unlock(&h->mu);
	srv_http_conn_close(h, cs);
	return -1;
}

/* The deadline of a connection's request, or 0 for none. Under h->mu. */
static int64_t deadline_ns(const struct srv_http *h, const struct conn_state *cs)
{
	const struct srv_config *cfg = h->ctx->cfg;
	uint64_t st = atomic_load(&cs->state);
	if (srv_cs_phase(st) == CS_HANDLING)
		return 0;
	if (cs->over_limit)
		return srv_cs_wait_start_ns(st) + OVER_LIMIT_WAIT_S * 1000000000ll;
	int64_t d = srv_cs_wait_start_ns(st) + (int64_t)cfg->http_timeout_s * 1000000000ll;
	if (srv_cs_phase(st) == CS_BODY) {
		uint64_t extra_s = atomic_load(&cs->body_bytes) / cfg->http_min_body_rate_bytes;
		d += (int64_t)(extra_s < 86400 * 365 ? extra_s : 86400 * 365) * 1000000000ll;
	}
	return d;
}

/* Handed-off connections libmicrohttpd never adopted: MHD_add_connection
 * queues a connection for its worker, which may still refuse it (at its
 * share of the connection limit) and close the socket without a
 * notification. Their states would count against http_max_connections
 * for ever. Under h->mu. */
static void drop_unadopted(struct srv_http *h, int64_t now)
{
	struct conn_state **pp = &h->adopt;
	while (*pp) {
		struct conn_state *cs = *pp;
		if (now - cs->handoff_ns < ADOPT_MAX_MS * 1000000ll) {
			pp = &cs->adopt_next;
			continue;
		}
		*pp = cs->adopt_next;
		reg_unlink(h, cs);
		h->nconns--;
		atomic_store(&h->ctx->counters.http_connections, h->nconns);
		rdb_warn("http", "a connection handed to libmicrohttpd was never taken up by it "
				 "(dropped from the connection count)");
		free(cs);
	}
}

static void *reaper_main(void *arg)
{
	struct srv_http *h = arg;
	pthread_setname_np(pthread_self(), "rdb-http-reap");
	pthread_mutex_lock(&h->mu);
	while (!h->stopping) {
		int64_t now = rdb_now_mono_ns();
		drop_unadopted(h, now);
		for (struct conn_state *c = h->head; c; c = c->next) {
			int64_t d = deadline_ns(h, c);
			if (d && now > d && !c->shut && shut(c))
				atomic_fetch_add(&h->ctx->counters.http_timed_out, 1);
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += REAP_PERIOD_MS * 1000000l;
		if (ts.tv_nsec >= 1000000000l) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000l;
		}
		pthread_cond_timedwait(&h->stop_cv, &h->mu, &ts);
	}
	pthread_mutex_unlock(&h->mu);
	return NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char line[512];
	vsnprintf(line, sizeof(line), fmt, ap);
	size_t n = strlen(line);
	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = 0;
	static struct rdb_log_ratelimit rl;
	rdb_log_limited(&rl, 10, RDB_LOG_WARN, "http", "%s", line);
}

/* Stopping: no more parking, then waits until every parked request was
 * resumed and answered (their WAL syncs finish on their own; the storage
 * engine is still open), because libmicrohttpd must not be stopped with a
 * suspended connection. */
static void drain_parked(struct srv_http *h)
{
	atomic_store(&h->parks_closed, true);
	int64_t t0 = rdb_now_mono_ns(), next_log = t0 + 5000000000ll;
	while (atomic_load(&h->parked) > 0) {
		struct timespec ts = {0, 2000000};
		nanosleep(&ts, NULL);
		int64_t now = rdb_now_mono_ns();
		if (now >= next_log) {
			rdb_warn("http",
				 "stopping: still waiting for %llu parked writes to be answered "
				 "(%.0f s; their WAL sync has not finished)",
				 (unsigned long long)atomic_load(&h->parked),
				 (double)(now - t0) / 1e9);
			next_log = now + 5000000000ll;
		}
	}
}

static void http_free(struct srv_http *h)
{
	if (h->loop)
		wl_stop_accept(h->loop);
	if (h->d)
		drain_parked(h);
	wl_stop(h->loop); /* after the drain: the loop answers its parked requests */
	h->loop = NULL;
	if (h->reaper_started) {
		pthread_mutex_lock(&h->mu);
		h->stopping = true;
		pthread_cond_broadcast(&h->stop_cv);
		pthread_mutex_unlock(&h->mu);
		pthread_join(h->reaper, NULL);
	}
	if (h->d)
		MHD_stop_daemon(h->d); /* closes every connection: the registry empties */
	pthread_mutex_destroy(&h->mu);
	pthread_cond_destroy(&h->stop_cv);
	if (h->tls)
		srv_tls_stop(); /* after the daemon: no handshake borrows a certificate */
	if (h->r204)
		MHD_destroy_response(h->r204); /* after the daemon: no connection holds it */
	free(h);
}

#define FD_SPARE 512u /* descriptors kept for data files, the index, logs, UDP */

/* Raises the soft open-file limit to the hard one when the connection
 * limit needs more than the soft limit allows (distributions start
 * services at 1024): the defaults must hold thousands of connections
 * without tuning. Says so when even the hard limit is too low. */
static void raise_fd_limit(unsigned connections)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return;
	rlim_t need = (rlim_t)connections + FD_SPARE;
	if (rl.rlim_cur >= need)
		return;
	rlim_t old = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
	if (rl.rlim_cur > old && setrlimit(RLIMIT_NOFILE, &rl) == 0)
		rdb_info("http", "raised the open-file limit from %llu to %llu for %u connections",
			 (unsigned long long)old, (unsigned long long)rl.rlim_cur, connections);
	else
		rl.rlim_cur = old;
	if (rl.rlim_cur < need)
		rdb_warn("http",
			 "the open-file limit (%llu, hard limit %llu) is below the %llu that "
			 "http_max_connections plus its reserve need: connections past about "
			 "%llu will fail to be accepted; raise LimitNOFILE / ulimit -n or lower "
			 "http_max_connections",
			 (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
			 (unsigned long long)need,
			 (unsigned long long)(rl.rlim_cur > FD_SPARE ? rl.rlim_cur - FD_SPARE : 0));
}

int srv_http_start(struct srv_ctx *ctx, struct srv_http **out, uint16_t *port)
{
	const struct srv_config *cfg = ctx->cfg;
	struct sockaddr_in sa = {0};
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)cfg->http_port);
	if (inet_pton(AF_INET, cfg->http_addr, &sa.sin_addr) != 1) {
		rdb_error("http", "http_addr '%s' is not an IPv4 address", cfg->http_addr);
		return -EINVAL;
	}
	struct srv_http *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->ctx = ctx;
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->stop_cv, NULL);
	struct srv_resp r204 = {.status = 204};
	h->r204 = make_response(&r204, false); /* NULL: each 204 is built as it goes */
	/* Room above http_max_connections for the connections that get a 503:
	 * at its own limit libmicrohttpd stops accepting (clients would hang). */
	unsigned reserve = cfg->http_max_connections / 4 > 64 ? cfg->http_max_connections / 4 : 64;
	/* libmicrohttpd splits its connection limit across the pool: a worker
	 * whose share is 0 never wakes for MHD_stop_daemon, and shutdown hangs.
	 * So no more workers than connections they may hold. */
	unsigned limit = (unsigned)cfg->http_max_connections + reserve;
	raise_fd_limit(limit);
	h->hard_limit = limit;
	unsigned threads =
	    (unsigned)cfg->http_threads < limit ? (unsigned)cfg->http_threads : limit;
	struct MHD_OptionItem tls[2] = {{MHD_OPTION_END, 0, NULL}};
	unsigned tls_flag = 0;
	if (cfg->tls_cert_file[0] || cfg->tls_key_file[0]) {
		int rc = 0;
		if (!cfg->tls_cert_file[0] || !cfg->tls_key_file[0]) {
			rdb_error("http", "TLS needs both tls_cert_file and tls_key_file");
			rc = -EINVAL;
		} else if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES ||
			   MHD_is_feature_supported(MHD_FEATURE_HTTPS_CERT_CALLBACK) != MHD_YES) {
			rdb_error("http", "this libmicrohttpd has no TLS (or certificate "
					  "callback) support");
			rc = -ENOTSUP;
		}
		if (rc == 0)
			rc = srv_tls_start(cfg);
		h->tls = rc == 0;
		if (rc) {
			http_free(h);
			return rc;
		}
		/* The certificate through a callback: SIGHUP swaps it (tls.c). */
		tls[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_CERT_CALLBACK, 0,
						 (void *)rdb_tls_callback()};
		tls_flag = MHD_USE_TLS;
	}
	/* The write loop (wloop.c) owns the listening socket and hands
	 * libmicrohttpd every connection it does not serve itself. Not with TLS:
	 * the loop speaks plain HTTP only. Not with http_max_parked = 0 either:
	 * a write it could not park would hold a loop thread, and with it every
	 * connection of that thread, until the WAL has it. */
	bool use_loop =
	    !tls_flag && strcmp(cfg->http_write_loop, "on") == 0 && cfg->http_max_parked > 0;
	if (!tls_flag && !use_loop && strcmp(cfg->http_write_loop, "on") == 0)
		rdb_info("http", "write loop off: http_max_parked = 0 (writes are not parked); "
				 "libmicrohttpd serves every request");
	struct MHD_OptionItem listen[2] = {{MHD_OPTION_SOCK_ADDR, 0, &sa},
					   {MHD_OPTION_END, 0, NULL}};
	if (use_loop)
		listen[0] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
	/* MHD_USE_TURBO: read, write and accept opportunistically before asking
	 * epoll; at one small request per round trip this saves a wake-up per
	 * request (context switches per request 1.1-1.2 -> 0.9). */
	h->d = MHD_start_daemon(
	    MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
		MHD_USE_TURBO | MHD_USE_ERROR_LOG | MHD_USE_ITC | tls_flag |
		(use_loop ? MHD_USE_NO_LISTEN_SOCKET : 0),
	    0, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
	    MHD_OPTION_ARRAY, listen, MHD_OPTION_THREAD_POOL_SIZE, threads,
	    MHD_OPTION_CONNECTION_LIMIT, limit, MHD_OPTION_CONNECTION_TIMEOUT,
	    (unsigned)cfg->http_timeout_s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
	    MHD_OPTION_NOTIFY_CONNECTION, on_connection, h, MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
	    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)cfg->http_connection_memory_bytes,
	    MHD_OPTION_ARRAY, tls, MHD_OPTION_END);
	if (!h->d) {
		rdb_error("http",
			  "cannot listen on %s:%u (port in use, or address not "
			  "available on this host%s)",
			  cfg->http_addr, cfg->http_port,
			  tls_flag ? ", or libmicrohttpd could not set up TLS" : "");
		http_free(h);
		return -EADDRINUSE;
	}
	int rc = -pthread_create(&h->reaper, NULL, reaper_main, h);
	h->reaper_started = rc == 0;
	if (rc) {
		rdb_error("http", "cannot start the connection reaper thread: %s",
			  rdb_strerror(rc));
		http_free(h);
		return rc;
	}
	if (use_loop) {
		rc = wl_start(h, ctx, &h->loop, port);
		if (rc) {
			http_free(h);
			return rc;
		}
	} else {
		const union MHD_DaemonInfo *info =
		    MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
		*port = info ? info->port : (uint16_t)cfg->http_port;
	}
	*out = h;
	return 0;
}

void srv_http_stop(struct srv_http *h)
{
	if (!h)
		return;
	http_free(h);
}
