/* hresp.h - an incremental (push) HTTP/1.x response parser for rdb-load's
 * event loop: bytes are fed as recv() returns them, in pieces of any size,
 * and the parser says when one whole response has been read. Framing by
 * Content-Length, by chunked transfer coding, or (neither) by end of stream;
 * interim 1xx responses are skipped; 204 and 304 have no body.
 * Plain value type, no allocation, no I/O. C11 only.
 */
#ifndef RANKDB_BENCH_HRESP_H
#define RANKDB_BENCH_HRESP_H

#include <stddef.h>

#define HRESP_LINE_BYTES    8192 /* longest status/header/chunk-size line */
#define HRESP_SNIPPET_BYTES 256

struct hresp {
	/* result, valid once hresp_feed returned 1 (or hresp_eof 0) */
	int status;	   /* 100..599 */
	int close;	   /* server will close: Connection: close, HTTP/1.0, EOF framing */
	int retry_after_s; /* Retry-After in seconds (capped at 3600), -1 if absent */
	size_t body_bytes; /* body bytes received (chunk data only for chunked) */
	char snippet[HRESP_SNIPPET_BYTES]; /* first body bytes, NUL-terminated */

	/* parser state */
	int state;
	int chunked, has_length;
	size_t snippet_len; /* bytes in snippet before its NUL */
	size_t remain;	    /* bytes left in the body or the current chunk */
	size_t line_len;
	char line[HRESP_LINE_BYTES];
};

/* Resets r to await a new response. */
void hresp_init(struct hresp *r);

/* Feeds len bytes. Sets *used to the bytes consumed: everything up to the end
 * of the response when it completes, else len. Returns 1 when one whole final
 * response has been parsed (the result fields are set; bytes after it are not
 * consumed), 0 when more bytes are needed, -EPROTO on a malformed response
 * (r is then unusable until hresp_init). */
int hresp_feed(struct hresp *r, const char *buf, size_t len, size_t *used);

/* The stream ended. Returns 0 when that completes the response (a body
 * framed by end of stream), -ECONNRESET when the response was cut short. */
int hresp_eof(struct hresp *r);

/* Helpers shared with the sink's request reader (http.c). Pure, no I/O. */

/* The value of header line "Name: value" (name case-insensitive, blanks
 * after the colon skipped), pointing into line; NULL if line is another
 * field. */
const char *hresp_header_value(const char *line, const char *name);

/* Reads the digits (base 10 or 16; no sign, no "0x") at *s, up to 2^40, and
 * the blanks around them into *out; leaves *s after them. 0, or -EPROTO when
 * there is no digit or the number is too big (*s and *out then unchanged). */
int hresp_take_number(const char **s, int base, size_t *out);

/* A chunk-size line (CR LF stripped): hex digits, then its end or a ';'
 * extension, into *out. 0 or -EPROTO. */
int hresp_chunk_size(const char *s, size_t *out);

#endif
