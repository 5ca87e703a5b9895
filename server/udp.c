/* udp.c - the UDP listener: InfluxDB line protocol (as Telegraf's and the
 * InfluxDB clients' UDP writers send it) and rankdb JSON records, one or
 * more per datagram. UDP is fire-and-forget: the sender gets no answer, so
 * every datagram that is not stored is counted by reason in srv_counters
 * (/metrics: rankdb_udp_dropped_total{reason}), never dropped silently.
 *
 * Threads and data flow:
 *   receiver  poll(socket, stop eventfd); recvmmsg RX_BATCH datagrams at a
 *             time into fixed buffers of udp_max_datagram_bytes; a datagram
 *             flagged MSG_TRUNC is dropped (oversize); the others are copied
 *             into the queue, or dropped (queue_full) when it holds
 *             udp_queue_datagrams datagrams or udp_queue_bytes bytes. The
 *             kernel's own drops (socket buffer full) come from SO_RXQ_OVFL.
 *   workers   (UDP_WORKERS) take up to COALESCE_DGRAMS / COALESCE_BYTES
 *             queued datagrams, parse each into a scratch batch (first
 *             non-space byte '{' or '[': JSON records, ing_json_parse; else
 *             line protocol, ing_lp_parse), merge the good ones into one
 *             combined batch and store it with one pipeline write, so many
 *             small datagrams share one WAL record and one fsync.
 * Authentication (udp_auth.h): a worker first checks a datagram's signed
 * envelope (key, MAC, skew, replay) or, for an unsigned one, whether
 * unsigned datagrams are allowed; then parses the payload inside; then
 * checks every record's job against the key's patterns. A refusal drops
 * the whole datagram, counted under its reason, with a rate-limited log
 * line naming the key id (never a secret) and the sender's address.
 *
 * Invariants: the queue never passes its two bounds; a datagram is either
 * stored, or counted as dropped exactly once (one of only blank or comment
 * lines holds nothing and is neither); a datagram that is bad as a
 * whole never affects the others of its combined write (it is parsed alone
 * first). Lines without a timestamp get the datagram's receive time.
 *
 * Failure: a storage refusal drops the combined datagrams (busy after
 * retrying for up to BUSY_RETRY_MS, series_limit, error); a socket error is
 * logged (rate-limited) and receiving goes on. Stop: the receiver drains
 * the socket buffer into the queue and exits; the workers write what is
 * queued and exit; then everything is freed.
 */
#include "server/udp.h"
#include "server/udp_auth.h"
#include "common/rdb_err.h"
#include "common/rdb_log.h"
#include "common/rdb_time.h"
#include "ingest/protocol.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RX_BATCH	64		  /* datagrams per recvmmsg */
#define UDP_WORKERS	2		  /* parse + write threads */
#define COALESCE_DGRAMS 256		  /* datagrams per combined write, at most */
#define COALESCE_BYTES	(1024u * 1024u)	  /* datagram bytes per combined write, at most */
#define RCVBUF_BYTES	(8 * 1024 * 1024) /* asked of the kernel; it may give less */
#define BUSY_RETRY_MS	2000		  /* retry a busy storage this long, then drop */

struct dgram {
	uint8_t *data; /* owned by the queue, then by the worker that took it */
	size_t len;
	int64_t recv_ns; /* default timestamp of its records */
	struct sockaddr_in from;
};

/* A worker's batches: scratch holds one datagram, all holds the merge. */
struct udp_worker {
	struct srv_udp *u;
	pthread_t thread;
	struct mdl_batch *scratch, *all;
	struct mdl_events *scratch_ev, *all_ev;
	struct ing_parse_result res;
	char jobs[SRV_UDP_KEY_JOBS_MAX + 1];	      /* patterns of the datagram's key */
	size_t all_dgrams, all_lines_ok, all_strings; /* what `all` holds */
	struct dgram taken[COALESCE_DGRAMS];
	size_t ntaken;
};

struct srv_udp {
	struct srv_ctx *ctx;
	int fd, wake_fd;
	uint16_t port;
	/* the queue: a ring of cap slots, bounded by cap and max_bytes */
	pthread_mutex_t mu;
	pthread_cond_t cv; /* queue not empty, or stopping */
	struct dgram *ring;
	size_t cap, head, count, bytes, max_bytes;
	bool stopping; /* the receiver is done: workers exit once the queue is empty */
	/* receiver */
	pthread_t rx;
	bool rx_started;
	size_t slot_bytes;     /* udp_max_datagram_bytes */
	uint8_t *rxbuf;	       /* RX_BATCH slots of slot_bytes */
	uint32_t kernel_drops; /* last SO_RXQ_OVFL value seen */
	struct udp_worker workers[UDP_WORKERS];
	int nworkers; /* started */
};

/* ---- receiver ------------------------------------------------------------------- */

/* Queues one datagram (copied), or counts it dropped. Called with mu held. */
static void enqueue_locked(struct srv_udp *u, const uint8_t *p, size_t len, int64_t now,
			   const struct sockaddr_in *from)
{
	struct srv_counters *c = &u->ctx->counters;
	if (u->count == u->cap || u->bytes + len > u->max_bytes) {
		atomic_fetch_add(&c->udp_dropped_queue_full, 1);
		return;
	}
	uint8_t *copy = malloc(len ? len : 1);
	if (!copy) {
		atomic_fetch_add(&c->udp_dropped_queue_full, 1);
		return;
	}
	memcpy(copy, p, len);
	struct dgram *d = &u->ring[(u->head + u->count) % u->cap];
	d->data = copy;
	d->len = len;
	d->recv_ns = now;
	d->from = *from;
	u->count++;
	u->bytes += len;
	atomic_store(&c->udp_queue_depth, u->count);
}

/* The kernel's drop counter rides on each datagram (SO_RXQ_OVFL). */
static void note_kernel_drops(struct srv_udp *u, struct msghdr *h)
{
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(h); cm; cm = CMSG_NXTHDR(h, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SO_RXQ_OVFL)
			continue;
		uint32_t total;
		memcpy(&total, CMSG_DATA(cm), sizeof(total));
		if (total > u->kernel_drops) {
			atomic_fetch_add(&u->ctx->counters.udp_dropped_socket,
					 total - u->kernel_drops);
			u->kernel_drops = total;
		}
	}
}

/* Receives one batch without blocking. Returns datagrams received, 0 when
 * none was waiting, or -errno. */
static int receive_batch(struct srv_udp *u)
{
	struct mmsghdr msgs[RX_BATCH];
	struct iovec iov[RX_BATCH];
	struct sockaddr_in from[RX_BATCH];
	union {
		char buf[CMSG_SPACE(sizeof(uint32_t))];
		struct cmsghdr align;
	} ctl[RX_BATCH];
	memset(msgs, 0, sizeof(msgs));
	for (int i = 0; i < RX_BATCH; i++) {
		iov[i].iov_base = u->rxbuf + (size_t)i * u->slot_bytes;
		iov[i].iov_len = u->slot_bytes;
		msgs[i].msg_hdr.msg_name = &from[i];
		msgs[i].msg_hdr.msg_namelen = sizeof(from[i]);
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
		msgs[i].msg_hdr.msg_control = ctl[i].buf;
		msgs[i].msg_hdr.msg_controllen = sizeof(ctl[i].buf);
	}
	int n = recvmmsg(u->fd, msgs, RX_BATCH, MSG_DONTWAIT, NULL);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
	struct srv_counters *c = &u->ctx->counters;
	int64_t now = rdb_now_ns();
	atomic_fetch_add(&c->udp_received, (uint64_t)n);
	pthread_mutex_lock(&u->mu);
	for (int i = 0; i < n; i++) {
		note_kernel_drops(u, &msgs[i].msg_hdr);
		if (msgs[i].msg_hdr.msg_flags & MSG_TRUNC)
			atomic_fetch_add(&c->udp_dropped_oversize, 1);
		else
			enqueue_locked(u, iov[i].iov_base, msgs[i].msg_len, now, &from[i]);
	}
	pthread_cond_broadcast(&u->cv);
	pthread_mutex_unlock(&u->mu);
	return n;
}

static void *receiver_main(void *arg)
{
	struct srv_udp *u = arg;
	pthread_setname_np(pthread_self(), "rdb-udp-recv");
	struct pollfd pfd[2] = {{.fd = u->fd, .events = POLLIN},
				{.fd = u->wake_fd, .events = POLLIN}};
	static struct rdb_log_ratelimit rl;
	for (;;) {
		if (poll(pfd, 2, -1) < 0 && errno != EINTR)
			rdb_log_limited(&rl, 10, RDB_LOG_WARN, "udp", "poll failed: %s; retrying",
					strerror(errno));
		if (pfd[1].revents)
			break;
		int n = receive_batch(u);
		if (n < 0)
			rdb_log_limited(&rl, 10, RDB_LOG_WARN, "udp",
					"receiving on port %u failed: "
					"%s; still listening",
					u->port, strerror(-n));
	}
	/* Stopping: what already sits in the socket buffer was received by this
	 * host; queue it (the queue bound still applies). */
	for (size_t rounds = u->cap / RX_BATCH + 1; rounds > 0; rounds--) {
		if (receive_batch(u) <= 0)
			break;
	}
	pthread_mutex_lock(&u->mu);
	u->stopping = true;
	pthread_cond_broadcast(&u->cv);
	pthread_mutex_unlock(&u->mu);
	return NULL;
}

/* ---- workers -------------------------------------------------------------------- */

/* Takes up to COALESCE_* datagrams into w->taken; false once stopped and empty. */
static bool take(struct udp_worker *w)
{
	struct srv_udp *u = w->u;
	size_t bytes = 0;
	pthread_mutex_lock(&u->mu);
	while (u->count == 0 && !u->stopping)
		pthread_cond_wait(&u->cv, &u->mu);
	w->ntaken = 0;
	while (u->count && w->ntaken < COALESCE_DGRAMS &&
	       (w->ntaken == 0 || bytes + u->ring[u->head].len <= COALESCE_BYTES)) {
		struct dgram *d = &u->ring[u->head];
		w->taken[w->ntaken++] = *d;
		bytes += d->len;
		u->bytes -= d->len;
		u->head = (u->head + 1) % u->cap;
		u->count--;
	}
	atomic_store(&u->ctx->counters.udp_queue_depth, u->count);
	pthread_mutex_unlock(&u->mu);
	return w->ntaken > 0;
}

static void log_bad(const char *kind, long line, const char *msg)
{
	static struct rdb_log_ratelimit rl;
	rdb_log_limited(&rl, 10, RDB_LOG_INFO, "udp", "dropped a bad %s datagram: line %ld: %s",
			kind, line, msg);
}

/* Counts a refused datagram and says so (rate-limited per reason, so a
 * flood of one kind does not hide another): reason, key id, sender. */
static void refuse(const struct dgram *d, enum srv_udp_verdict v, const char *key_id)
{
	static struct rdb_log_ratelimit rls[SRV_UDP_VERDICTS];
	char addr[INET_ADDRSTRLEN] = "?";
	srv_udp_auth_count(v);
	inet_ntop(AF_INET, &d->from.sin_addr, addr, sizeof(addr));
	rdb_log_limited(&rls[v], 10, RDB_LOG_WARN, "udp",
			"dropped a datagram from %s:%u: %s (key '%s'); counted in "
			"rankdb_udp_dropped_total{reason=\"%s\"}",
			addr, ntohs(d->from.sin_port), srv_udp_verdict_name(v),
			key_id[0] ? key_id : "none", srv_udp_verdict_name(v));
}

/* Checks d's signature (or that unsigned datagrams are allowed) and points
 * *payload / *len at what to parse; w->jobs gets the key's patterns
 * ("" unsigned). SRV_UDP_OK, or the verdict (counted and logged here). */
static enum srv_udp_verdict authenticate(struct udp_worker *w, const struct dgram *d,
					 const uint8_t **payload, size_t *len, char *key_id,
					 size_t idlen)
{
	struct srv_udp_envelope env;
	enum srv_udp_verdict v;
	int rc = srv_udp_envelope_parse(d->data, d->len, &env);
	w->jobs[0] = 0;
	key_id[0] = 0;
	*payload = d->data;
	*len = d->len;
	if (rc == RDB_ENOTFOUND) {
		v = srv_udp_auth_unsigned_ok() ? SRV_UDP_OK : SRV_UDP_UNSIGNED;
	} else if (rc) {
		v = SRV_UDP_MALFORMED;
	} else {
		snprintf(key_id, idlen, "%s", env.key_id);
		v = srv_udp_auth_verify(&env, d->recv_ns / 1000000, w->jobs, sizeof(w->jobs));
		*payload = env.payload;
		*len = env.payload_len;
	}
	if (v != SRV_UDP_OK)
		refuse(d, v, key_id);
	return v;
}

/* True when every record of the scratch batches is of a job w->jobs allows. */
static bool jobs_allowed(const struct udp_worker *w)
{
	for (size_t i = 0; i < mdl_batch_nseries(w->scratch); i++) {
		const struct mdl_batch_series *s = mdl_batch_series_at(w->scratch, i);
		if (!srv_udp_auth_job_ok(w->jobs, s->key.job, strlen(s->key.job)))
			return false;
	}
	for (size_t i = 0; i < mdl_events_count(w->scratch_ev); i++) {
		const struct mdl_event *e = mdl_events_at(w->scratch_ev, i);
		if (!srv_udp_auth_job_ok(w->jobs, e->job, e->job_len))
			return false;
	}
	return true;
}

/* Parses one datagram into the scratch batch. 0 when it holds something to
 * store; RDB_EINVAL when the datagram is dropped (counted here). */
static int parse_one(struct udp_worker *w, const struct dgram *d)
{
	struct srv_ctx *ctx = w->u->ctx;
	struct srv_counters *c = &ctx->counters;
	const struct srv_config *cfg = ctx->cfg;
	struct ing_parse_opts po = {.lim = &ctx->limits};
	struct ing_lp_options *o = &po.lp;
	mdl_batch_reset(w->scratch);
	mdl_events_reset(w->scratch_ev);
	ing_lp_options_default(o);
	o->default_ts_ns = d->recv_ns;
	o->default_job = cfg->lp_default_job[0] ? cfg->lp_default_job : NULL;
	o->max_line_bytes = cfg->max_line_bytes;
	o->max_fields_per_line = cfg->max_fields_per_line;
	o->max_tags_per_line = cfg->max_tags_per_line;
	const uint8_t *payload;
	size_t len;
	char key_id[SRV_UDP_KEY_ID_MAX + 1];
	if (authenticate(w, d, &payload, &len, key_id, sizeof(key_id)) != SRV_UDP_OK)
		return RDB_EINVAL;
	const struct ing_protocol *proto = ing_protocol_probe(payload, len);
	bool lp = proto == &ing_proto_lp;
	int rc = proto->parse(payload, len, &po, w->scratch, w->scratch_ev, &w->res);
	if (lp)
		atomic_fetch_add(&c->lp_lines_bad, w->res.records_bad);
	if (rc == 0 && w->jobs[0] && !jobs_allowed(w)) {
		refuse(d, SRV_UDP_JOB_NOT_ALLOWED, key_id);
		return RDB_EINVAL;
	}
	if (rc == 0) {
		if (lp)
			atomic_fetch_add(&c->udp_lines_bad, w->res.records_bad);
		return 0;
	}
	if (rc == RDB_ENOTFOUND)
		return RDB_EINVAL; /* only blank or comment lines: nothing to store or drop */
	log_bad(proto->name, w->res.nerrors ? w->res.errors[0].line : 0,
		w->res.nerrors ? w->res.errors[0].msg : rdb_strerror(rc));
	atomic_fetch_add(&c->udp_dropped_parse_error, 1);
	return RDB_EINVAL;
}

/* Copies the scratch batch into the combined one. 0, -ENOMEM, RDB_ELIMIT
 * (the combined batch may then hold part of it: the caller drops both). */
static int merge(struct udp_worker *w)
{
	int rc = mdl_batch_append(w->all, w->scratch);
	return rc ? rc : mdl_events_append(w->all_ev, w->scratch_ev);
}

static void sleep_ms(long ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Stores the combined batch (retrying a busy storage), counts, empties it. */
static void flush(struct udp_worker *w)
{
	struct srv_ctx *ctx = w->u->ctx;
	struct srv_counters *c = &ctx->counters;
	struct ing_write wr = {.points = w->all, .events = w->all_ev, .source = ING_SRC_UDP};
	struct ing_outcome res;
	int rc = 0;
	if (w->all_dgrams == 0)
		return;
	for (long waited_ms = 0, step_ms = 5;; waited_ms += step_ms, step_ms *= 2) {
		rc = ing_submit(ctx->pipe, &wr, &res);
		if (rc != RDB_EBUSY || waited_ms >= BUSY_RETRY_MS)
			break;
		step_ms = step_ms > 200 ? 200 : step_ms;
		sleep_ms(step_ms);
	}
	if (rc == 0) {
		atomic_fetch_add(&c->udp_points, mdl_batch_points(w->all));
		atomic_fetch_add(&c->lp_lines_ok, w->all_lines_ok);
		atomic_fetch_add(&c->lp_string_fields_skipped, w->all_strings);
	} else if (rc == RDB_EBUSY || rc == -ESHUTDOWN) {
		atomic_fetch_add(&c->udp_dropped_busy, w->all_dgrams);
	} else if (rc == RDB_ELIMIT) {
		atomic_fetch_add(&c->udp_dropped_limit, w->all_dgrams);
	} else {
		atomic_fetch_add(&c->udp_dropped_error, w->all_dgrams);
	}
	if (rc) {
		static struct rdb_log_ratelimit rl;
		rdb_log_limited(&rl, 10, RDB_LOG_WARN, "udp",
				"dropped %zu datagrams: storage "
				"refused them (%s)",
				w->all_dgrams, rdb_strerror(rc));
	}
	mdl_batch_reset(w->all);
	mdl_events_reset(w->all_ev);
	w->all_dgrams = w->all_lines_ok = w->all_strings = 0;
}

/* Parses, merges and stores the taken datagrams, then frees them. */
static void process(struct udp_worker *w)
{
	for (size_t i = 0; i < w->ntaken; i++) {
		struct dgram *d = &w->taken[i];
		if (parse_one(w, d) == 0) {
			if (merge(w) == 0) {
				w->all_dgrams++;
				w->all_lines_ok += w->res.records_ok;
				w->all_strings += w->res.string_fields_skipped;
			} else {
				/* out of memory: the combined batch may hold part of d */
				atomic_fetch_add(&w->u->ctx->counters.udp_dropped_error,
						 w->all_dgrams + 1);
				mdl_batch_reset(w->all);
				mdl_events_reset(w->all_ev);
				w->all_dgrams = w->all_lines_ok = w->all_strings = 0;
			}
		}
		free(d->data);
		d->data = NULL;
	}
	flush(w);
}

static void *worker_main(void *arg)
{
	struct udp_worker *w = arg;
	pthread_setname_np(pthread_self(), "rdb-udp-work");
	while (take(w))
		process(w);
	return NULL;
}

/* ---- start / stop ----------------------------------------------------------------- */

/* Sizes the worker's batches so that a merge of COALESCE_* datagrams always
 * fits: a point takes at least 4 bytes of a datagram, an event 8, and an
 * event's stored text at most 6 bytes per datagram byte. */
static int worker_init(struct udp_worker *w, struct srv_udp *u)
{
	size_t one = u->slot_bytes / 2 + 64;
	size_t all = COALESCE_BYTES / 2 + (size_t)COALESCE_DGRAMS * 64;
	size_t one_ev = 6 * u->slot_bytes + 65536;
	size_t all_ev = 6 * (size_t)COALESCE_BYTES + (size_t)COALESCE_DGRAMS * 65536;
	w->u = u;
	int rc = mdl_batch_new(one, one, &w->scratch);
	if (rc == 0)
		rc = mdl_batch_new(all, all, &w->all);
	if (rc == 0)
		rc = mdl_events_new(one, one_ev, &w->scratch_ev);
	if (rc == 0)
		rc = mdl_events_new(all, all_ev, &w->all_ev);
	return rc;
}

static void worker_free(struct udp_worker *w)
{
	mdl_batch_free(w->scratch);
	mdl_batch_free(w->all);
	mdl_events_free(w->scratch_ev);
	mdl_events_free(w->all_ev);
}

static int open_socket(struct srv_udp *u, const struct srv_config *cfg)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->udp_port)};
	int one = 1, rcvbuf = RCVBUF_BYTES;
	if (inet_pton(AF_INET, cfg->udp_addr, &sa.sin_addr) != 1) {
		rdb_error("udp", "udp_addr '%s' is not an IPv4 address", cfg->udp_addr);
		return -EINVAL;
	}
	u->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (u->fd < 0)
		return -errno;
	/* A large kernel buffer absorbs bursts; SO_RCVBUFFORCE passes
	 * net.core.rmem_max when we may (CAP_NET_ADMIN), else best effort. */
	if (setsockopt(u->fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)) != 0)
		setsockopt(u->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	int got = 0;
	socklen_t gl = sizeof(got);
	if (getsockopt(u->fd, SOL_SOCKET, SO_RCVBUF, &got, &gl) == 0 && got < rcvbuf)
		rdb_warn("udp",
			 "kernel UDP receive buffer is %d bytes (wanted %d): bursts will "
			 "be dropped sooner (counted as socket_buffer); raise net.core.rmem_max "
			 "or run rankdbd with CAP_NET_ADMIN",
			 got, rcvbuf);
	setsockopt(u->fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one));
	if (bind(u->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		int rc = -errno;
		rdb_error("udp",
			  "cannot listen on udp://%s:%u: %s (port in use, or address not "
			  "available on this host)",
			  cfg->udp_addr, cfg->udp_port, strerror(-rc));
		return rc;
	}
	u->port = (uint16_t)cfg->udp_port;
	u->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return u->wake_fd < 0 ? -errno : 0;
}

static int start_threads(struct srv_udp *u)
{
	int rc;
	for (int i = 0; i < UDP_WORKERS; i++) {
		rc = worker_init(&u->workers[i], u);
		if (rc == 0)
			rc = -pthread_create(&u->workers[i].thread, NULL, worker_main,
					     &u->workers[i]);
		if (rc) {
			worker_free(&u->workers[i]);
			return rc;
		}
		u->nworkers++;
	}
	rc = -pthread_create(&u->rx, NULL, receiver_main, u);
	u->rx_started = rc == 0;
	return rc;
}

int srv_udp_start(struct srv_ctx *ctx, struct srv_udp **out, uint16_t *port)
{
	const struct srv_config *cfg = ctx->cfg;
	*out = NULL;
	*port = 0;
	if (cfg->udp_port == 0)
		return 0;
	struct srv_udp *u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->ctx = ctx;
	u->fd = u->wake_fd = -1;
	u->cap = cfg->udp_queue_datagrams;
	u->max_bytes = cfg->udp_queue_bytes;
	u->slot_bytes = cfg->udp_max_datagram_bytes;
	pthread_mutex_init(&u->mu, NULL);
	pthread_cond_init(&u->cv, NULL);
	u->ring = calloc(u->cap, sizeof(*u->ring));
	u->rxbuf = malloc(RX_BATCH * u->slot_bytes);
	int rc = u->ring && u->rxbuf ? open_socket(u, cfg) : -ENOMEM;
	if (rc == 0)
		rc = start_threads(u);
	if (rc) {
		rdb_error("udp", "cannot start the UDP listener: %s", rdb_strerror(rc));
		srv_udp_stop(u);
		return rc;
	}
	rdb_info("udp",
		 "listening on udp://%s:%u (queue %u datagrams / %llu bytes, datagrams "
		 "up to %llu bytes)",
		 cfg->udp_addr, u->port, cfg->udp_queue_datagrams,
		 (unsigned long long)cfg->udp_queue_bytes,
		 (unsigned long long)cfg->udp_max_datagram_bytes);
	*out = u;
	*port = u->port;
	return 0;
}

void srv_udp_stop(struct srv_udp *u)
{
	if (!u)
		return;
	uint64_t one = 1;
	if (u->rx_started) {
		if (write(u->wake_fd, &one, sizeof(one)) != sizeof(one))
			rdb_warn("udp", "cannot wake the receiver: %s", strerror(errno));
		pthread_join(u->rx, NULL);
	} else {
		pthread_mutex_lock(&u->mu);
		u->stopping = true;
		pthread_cond_broadcast(&u->cv);
		pthread_mutex_unlock(&u->mu);
	}
	for (int i = 0; i < u->nworkers; i++) {
		pthread_join(u->workers[i].thread, NULL);
		worker_free(&u->workers[i]);
	}
	for (size_t i = 0; i < u->count; i++) /* only left when no worker ran */
		free(u->ring[(u->head + i) % u->cap].data);
	atomic_store(&u->ctx->counters.udp_queue_depth, 0);
	if (u->fd >= 0)
		close(u->fd);
	if (u->wake_fd >= 0)
		close(u->wake_fd);
	pthread_cond_destroy(&u->cv);
	pthread_mutex_destroy(&u->mu);
	free(u->ring);
	free(u->rxbuf);
	free(u);
}
