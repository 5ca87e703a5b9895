/* http.h - the discard sink server of rdb-load --sink (to measure the
 * loader's own ceiling) and its buffered connection reader. Blocking I/O,
 * one thread per connection. C11 + POSIX + pthreads only. (rdb-load's
 * client side is load_ev.c + hresp.h.)
 */
#ifndef RANKDB_BENCH_HTTP_H
#define RANKDB_BENCH_HTTP_H

#include <stddef.h>
#include <stdint.h>

#define HTTP_RBUF_BYTES 65536

/* One blocking TCP connection with a read buffer (a sink connection). Plain value type. */
struct http_conn {
	int fd; /* -1 when closed */
	size_t rpos, rlen;
	char rbuf[HTTP_RBUF_BYTES];
};

void http_close(struct http_conn *c); /* idempotent */

/* Discard sink: a loopback HTTP/1.1 server that reads each request fully
 * and answers 200 {"accepted_points":0}. Threads: one acceptor plus one per
 * connection (at most LOAD_MAX_CONNECTIONS of load.h). */
struct http_sink;

/* Starts the sink on 127.0.0.1 on a free port, stored in *port. */
int http_sink_start(struct http_sink **out, uint16_t *port);
/* Stops accepting, waits for every connection to end (clients must have
 * closed theirs), frees everything. NULL ok. Optionally reports totals. */
void http_sink_stop(struct http_sink *s, uint64_t *requests, uint64_t *body_bytes);

#endif
