/* http.h - the minimal HTTP/1.1 over raw sockets that rdb-load needs: a
 * buffered connection reader, a response parser for the client side, and a
 * discard sink server (to measure the loader's own ceiling). Blocking I/O,
 * one thread per connection. C11 + POSIX + pthreads only.
 */
#ifndef RANKDB_BENCH_HTTP_H
#define RANKDB_BENCH_HTTP_H

#include <stddef.h>
#include <stdint.h>

#define HTTP_RBUF_BYTES 65536

/* One blocking TCP connection with a read buffer. Plain value type. */
struct http_conn {
	int fd; /* -1 when closed */
	size_t rpos, rlen;
	char rbuf[HTTP_RBUF_BYTES];
};

/* What the client keeps of a response. */
struct http_resp {
	int status;	   /* 100..599 */
	int close;	   /* server will close: Connection: close or HTTP/1.0 */
	int retry_after_s; /* Retry-After in seconds, -1 if absent/not numeric */
	size_t body_bytes; /* body length as received */
	char snippet[256]; /* first bytes of the body, NUL-terminated */
};

/* Connects to IPv4 literal host:port with TCP_NODELAY and send/receive
 * timeouts of timeout_s seconds. 0 or negative errno; c->fd = -1 on failure. */
int http_connect(struct http_conn *c, const char *host, uint16_t port, int timeout_s);
void http_close(struct http_conn *c); /* idempotent */

/* Sends all of head then body (partial writes retried). 0 or negative errno. */
int http_send2(struct http_conn *c, const void *head, size_t head_len, const void *body,
	       size_t body_len);

/* Reads one full response (status, headers, body: Content-Length, chunked,
 * or until EOF). 0, -ECONNRESET (EOF before a full response), -EPROTO
 * (malformed), or another negative errno. Blocks up to the socket timeout. */
int http_read_response(struct http_conn *c, struct http_resp *r);

/* Discard sink: a loopback HTTP/1.1 server that reads each request fully
 * and answers 200 {"accepted_points":0}. Threads: one acceptor plus one per
 * connection (at most 1024). */
struct http_sink;

/* Starts the sink on 127.0.0.1 on a free port, stored in *port. */
int http_sink_start(struct http_sink **out, uint16_t *port);
/* Stops accepting, waits for every connection to end (clients must have
 * closed theirs), frees everything. NULL ok. Optionally reports totals. */
void http_sink_stop(struct http_sink *s, uint64_t *requests, uint64_t *body_bytes);

#endif
