/* http_int.h - what the two HTTP front ends share: libmicrohttpd's wiring
 * (http.c, the only file that includes microhttpd.h) and the write loop
 * (wloop.c). One connection registry (limit, shedding, deadlines: the
 * reaper in http.c walks it for both), one body budget, one parking
 * counter. Not for handlers: they see srv.h only.
 */
#ifndef SRV_HTTP_INT_H
#define SRV_HTTP_INT_H

#include "server/srv.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

enum conn_phase { CS_WAITING, CS_BODY, CS_HANDLING };

/* One TCP connection, whichever front end serves it. Fields under
 * srv_http.mu, except state and body_bytes (atomics: the serving thread
 * sets them three times a request without the registry's lock, the reaper
 * and the shedder read them). */
struct conn_state {
	struct conn_state *prev, *next; /* registry */
	struct conn_state *adopt_next;	/* handed to libmicrohttpd, not yet adopted */
	int64_t handoff_ns;		/* when (monotonic), while on the adopt list */
	int fd; /* -1 - fd while in transit to libmicrohttpd: never shut then */
	/* The phase (low 2 bits) and, above them, the monotonic ns when the
	 * connection started waiting for its request (connection start or end
	 * of the previous response), in one word so a reader never pairs a new
	 * phase with an old start. */
	_Atomic uint64_t state;
	_Atomic uint64_t body_bytes; /* body bytes of the current request received */
	bool over_limit;	     /* accepted past http_max_connections: answered 503 */
	bool shut;		     /* the reaper or the shedder shut its socket down */
	/* srv_req.peer of its requests, written once at accept: inet_ntop and
	 * snprintf per request were ~0.3 % of the server's CPU. */
	char peer[INET6_ADDRSTRLEN + 8];
};

static inline uint64_t srv_cs_pack(enum conn_phase ph, int64_t wait_start_ns)
{
	return ((uint64_t)wait_start_ns & ~(uint64_t)3) | (uint64_t)ph;
}

static inline enum conn_phase srv_cs_phase(uint64_t st)
{
	return (enum conn_phase)(st & 3);
}

static inline int64_t srv_cs_wait_start_ns(uint64_t st)
{
	return (int64_t)(st & ~(uint64_t)3);
}

/* Sets a connection's phase; CS_WAITING restarts its wait (deadline).
 * Lock-free. cs may be NULL. */
void srv_cs_set_phase(struct conn_state *cs, enum conn_phase ph);

/* A parked request (srv_submit), the part both front ends share; each
 * front end's request state embeds it. ready is the write's completion
 * (called on the WAL thread, or inside ing_submit_async) with the
 * srv_park as its argument; state is the front end's own. */
struct srv_park {
	struct srv_http *h;
	void (*ready)(void *park);
	bool loop; /* the write loop's: parks with sync_policy none too (a loop
		    * thread must never wait for the WAL) */
	_Atomic int state;
	bool parked;	       /* the handler parked: the answer comes from fin */
	struct ing_ticket *tk; /* the pending write */
	srv_finish_fn fin;     /* answers it */
	void *fin_state;
};

/* Finishes a parked write: its outcome, the handler's answer in resp (NULL:
 * nobody is left to answer). Frees the handler's state, counts it out. */
void srv_park_finish(struct srv_park *p, struct srv_resp *resp);

struct wl_loop;

struct srv_http {
	struct MHD_Daemon *d;
	struct wl_loop *loop; /* the write loop (wloop.c), NULL: off */
	struct srv_ctx *ctx;
	_Atomic uint64_t parked;     /* requests parked (srv_submit), answered or not */
	_Atomic bool parks_closed;   /* stopping: srv_submit no longer parks */
	_Atomic uint64_t body_bytes; /* reserved for request bodies, all connections */
	pthread_mutex_t mu;
	struct conn_state *head, *tail; /* registry, oldest first */
	struct conn_state *adopt;	/* handed off, waiting for libmicrohttpd */
	_Atomic bool adopting;		/* the write loop has handed connections over */
	size_t nconns;
	size_t hard_limit; /* http_max_connections + the reserve for 503s */
	pthread_t reaper;
	bool reaper_started;
	bool stopping; /* under mu */
	pthread_cond_t stop_cv;
	bool tls; /* HTTPS: the certificate comes from server/tls.c's callback */
	/* The plain 204 (no body, no extra header), made once and queued on
	 * every connection that gets it (libmicrohttpd counts its references
	 * under the response's own mutex): an acknowledged write, the
	 * commonest answer, costs no response allocation, mutex setup and
	 * header copy. NULL: built per request as any other. */
	struct MHD_Response *r204;
};

/* Registers a connection the loop accepted (limit and shedding as for
 * libmicrohttpd's). NULL: past the hard limit, or out of memory (close it). */
struct conn_state *srv_http_conn_open(struct srv_http *h, int fd, const struct sockaddr *sa);
/* Unregisters and frees it; the caller closes the socket after. */
void srv_http_conn_close(struct srv_http *h, struct conn_state *cs);
/* Hands a connection, nothing of its next request consumed, to
 * libmicrohttpd, which owns it from then on (cs too). 0, or -1 when
 * libmicrohttpd refused it (the socket is closed, cs freed). */
int srv_http_handoff(struct srv_http *h, struct conn_state *cs, int fd, const struct sockaddr *sa,
		     socklen_t salen);

/* The shared body budget (max_body_bytes_in_flight). */
bool srv_http_budget_take(struct srv_http *h, uint64_t n);
void srv_http_budget_give(struct srv_http *h, uint64_t n);

/* The reason phrase libmicrohttpd sends with status. */
const char *srv_http_reason(int status);

#endif
