/* wloop.h - the write loop (server/wloop.c): rankdb's own epoll front end
 * for the write routes, in front of libmicrohttpd, and its pure request-head
 * classifier (server/wloop_parse.c).
 *
 * The loop owns the listening socket. For each request it peeks at the head
 * without consuming it; wl_classify decides whether the loop serves it (a
 * plain POST of a write route with one Content-Length) or hands the
 * connection, untouched, to libmicrohttpd (everything else). See wloop.c.
 */
#ifndef SRV_WLOOP_H
#define SRV_WLOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WL_HEAD_MAX    8192		   /* a longer head is libmicrohttpd's */
#define WL_MAX_HEADERS 32		   /* more header lines: libmicrohttpd's */
#define WL_CL_MAX      ((uint64_t)1 << 53) /* a longer Content-Length: libmicrohttpd's */

enum wl_verdict {
	WL_MORE,    /* still a write so far: wait for more bytes */
	WL_HANDOFF, /* not the loop's: hand the connection to libmicrohttpd */
	WL_WRITE,   /* a write the loop serves: see struct wl_head */
};

/* Byte ranges into the classified buffer (offset, length). */
struct wl_span {
	uint16_t off, len;
};

struct wl_hdr {
	struct wl_span name, value; /* value without surrounding blanks */
};

/* A write request's head, as offsets into the buffer wl_classify read, so
 * it applies to a copy of those bytes. */
struct wl_head {
	size_t head_len;	 /* bytes up to and including the blank line */
	uint64_t content_length; /* exactly one Content-Length header */
	struct wl_span path;	 /* a literal write route (no %, no ?) */
	struct wl_span query;	 /* after '?', may be empty; only plain bytes and %XX */
	bool has_query;
	bool expect_continue; /* Expect: 100-continue */
	bool close;	      /* Connection: close */
	int nheaders;
	struct wl_hdr headers[WL_MAX_HEADERS];
};

/* Classifies the first n bytes of a connection's next request (pure: no
 * allocation, no state). WL_WRITE fills *hd. WL_MORE when the bytes so far
 * are a prefix of such a request and n < WL_HEAD_MAX; as soon as the bytes
 * show the request is anything else (another method or path, HTTP/1.0,
 * Transfer-Encoding, a second Content-Length, an Expect other than
 * 100-continue, a Connection header other than close / keep-alive, a
 * query byte outside [A-Za-z0-9._~:/,;@!$'()*-=&] or a % not followed by
 * two hex digits, empty query items, obsolete line folding, control bytes,
 * a bare LF, more than WL_MAX_HEADERS header lines, a head of WL_HEAD_MAX
 * bytes or more): WL_HANDOFF. */
enum wl_verdict wl_classify(const uint8_t *buf, size_t n, struct wl_head *hd);

/* Query arguments as libmicrohttpd gives them to the request handler,
 * decoded in place in q (qlen bytes, NUL-terminated by the caller at
 * q[qlen]): items split at '&', key and value at the first '=', %XX
 * decoded; a key without '=' has the value "". cb gets each key and value
 * (NUL-terminated) with their decoded lengths (a %00 makes a length differ
 * from strlen); it returns false to stop. Only for a query wl_classify
 * accepted. */
typedef bool (*wl_arg_fn)(void *cls, const char *key, size_t key_len, const char *val,
			  size_t val_len);
void wl_parse_args(char *q, size_t qlen, wl_arg_fn cb, void *cls);

struct srv_http;
struct srv_ctx;
struct wl_loop;

/* Opens the listening socket per ctx->cfg and starts the loop threads;
 * *port gets the bound port. 0 or -errno (logged). */
int wl_start(struct srv_http *h, struct srv_ctx *ctx, struct wl_loop **out, uint16_t *port);
/* Stops accepting (the listener is closed); the threads keep serving. */
void wl_stop_accept(struct wl_loop *l);
/* Stops the threads and closes the loop's connections. No request may be
 * parked (srv_http drains them first). NULL ok. */
void wl_stop(struct wl_loop *l);

#endif
