/* hresp.c - the incremental HTTP/1.x response parser of hresp.h.
 *
 * A state machine over the bytes fed: lines (status line, header fields,
 * chunk sizes, trailers) are gathered in r->line, which bounds them at
 * HRESP_LINE_BYTES (longer is -EPROTO, never an overflow); body bytes are
 * counted and the first ones kept as a snippet for error reports. Numbers
 * are digits only (no sign, no "0x" before a chunk size, nothing after a
 * Content-Length), and two different Content-Length values are an error:
 * a response framed two ways is never guessed at. What the
 * servers rdb-load drives answer: rankdbd (libmicrohttpd: Content-Length),
 * VictoriaMetrics and InfluxDB (Go net/http: 204 without a body,
 * Content-Length, or chunked for bodies written without a length).
 */
#include "bench/hresp.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

enum {
	ST_STATUS,
	ST_HEADERS,
	ST_BODY,       /* Content-Length body: remain bytes left */
	ST_CHUNK_SIZE, /* a chunk-size line */
	ST_CHUNK_DATA, /* remain bytes of chunk data */
	ST_CHUNK_CRLF, /* the line ending after chunk data */
	ST_TRAILERS,   /* trailer fields up to the empty line */
	ST_EOF_BODY,   /* body until the stream ends */
	ST_DONE,
	ST_ERROR
};

#define SIZE_MAX_ACCEPTED (1ull << 40)

void hresp_init(struct hresp *r)
{
	r->status = 0;
	r->close = 0;
	r->retry_after_s = -1;
	r->body_bytes = 0;
	r->snippet[0] = '\0';
	r->snippet_len = 0;
	r->state = ST_STATUS;
	r->chunked = r->has_length = 0;
	r->remain = 0;
	r->line_len = 0;
}

/* Gathers one line from buf[*i..len) into r->line (CR LF stripped).
 * 1 when a whole line is there, 0 when buf ran out, -EPROTO if too long. */
static int take_line(struct hresp *r, const char *buf, size_t len, size_t *i)
{
	const char *start = buf + *i;
	const char *nl = memchr(start, '\n', len - *i);
	size_t n = nl ? (size_t)(nl - start) : len - *i;

	if (r->line_len + n >= sizeof(r->line))
		return -EPROTO;
	memcpy(r->line + r->line_len, start, n);
	r->line_len += n;
	*i += n;
	if (!nl)
		return 0;
	*i += 1; /* the LF */
	if (r->line_len > 0 && r->line[r->line_len - 1] == '\r')
		r->line_len--;
	r->line[r->line_len] = '\0';
	r->line_len = 0; /* the next line starts empty; r->line keeps this one */
	return 1;
}

static int digit_value(char ch, int base)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (base == 16 && ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (base == 16 && ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* Reads the digits (base 10 or 16, nothing else: no sign, no "0x") at *s,
 * up to SIZE_MAX_ACCEPTED, and the blanks around them; leaves *s after
 * them. 0, or -EPROTO when there is no digit or the number is too big. */
int hresp_take_number(const char **s, int base, size_t *out)
{
	const char *p = *s;
	unsigned long long v = 0;
	int d, any = 0;

	while (*p == ' ' || *p == '\t')
		p++;
	while ((d = digit_value(*p, base)) >= 0) {
		v = v * (unsigned)base + (unsigned)d;
		if (v > SIZE_MAX_ACCEPTED)
			return -EPROTO;
		any = 1;
		p++;
	}
	while (*p == ' ' || *p == '\t')
		p++;
	if (!any)
		return -EPROTO;
	*s = p;
	*out = (size_t)v;
	return 0;
}

/* A chunk-size line: hex digits, then the end or a ';' extension. */
int hresp_chunk_size(const char *s, size_t *out)
{
	if (hresp_take_number(&s, 16, out))
		return -EPROTO;
	return *s == '\0' || *s == ';' ? 0 : -EPROTO;
}

/* Retry-After in delta-seconds; anything else (an HTTP date) is -EPROTO. */
static int parse_seconds(const char *s, size_t *out)
{
	if (hresp_take_number(&s, 10, out))
		return -EPROTO;
	return *s == '\0' ? 0 : -EPROTO;
}

/* Content-Length: decimal digits only, or a list of the same value
 * ("5, 5", as proxies merge repeated fields). A repeated field must carry
 * the value of the first: two lengths frame the body two ways, which is
 * how responses get smuggled, so it is an error, never a choice. */
static int parse_length(struct hresp *r, const char *s)
{
	size_t v;

	for (;;) {
		if (hresp_take_number(&s, 10, &v))
			return -EPROTO;
		if (r->has_length && v != r->remain)
			return -EPROTO;
		r->remain = v;
		r->has_length = 1;
		if (*s == '\0')
			return 0;
		if (*s++ != ',')
			return -EPROTO;
	}
}

static int parse_status(struct hresp *r)
{
	const char *l = r->line;

	if (strncmp(l, "HTTP/1.", 7) != 0 || (l[7] != '0' && l[7] != '1') || l[8] != ' ')
		return -EPROTO;
	for (int i = 9; i < 12; i++)
		if (l[i] < '0' || l[i] > '9')
			return -EPROTO;
	if (l[12] != ' ' && l[12] != '\0')
		return -EPROTO;
	r->status = (l[9] - '0') * 100 + (l[10] - '0') * 10 + (l[11] - '0');
	r->close = l[7] == '0';
	return r->status >= 100 ? 0 : -EPROTO;
}

const char *hresp_header_value(const char *line, const char *name)
{
	size_t n = strlen(name);
	const char *v;

	if (strncasecmp(line, name, n) != 0 || line[n] != ':')
		return NULL;
	v = line + n + 1;
	while (*v == ' ' || *v == '\t')
		v++;
	return v;
}

static int parse_field(struct hresp *r)
{
	const char *v;
	size_t n;

	if ((v = hresp_header_value(r->line, "content-length"))) {
		if (parse_length(r, v))
			return -EPROTO;
	} else if ((v = hresp_header_value(r->line, "transfer-encoding"))) {
		r->chunked = strcasestr(v, "chunked") != NULL;
	} else if ((v = hresp_header_value(r->line, "connection"))) {
		if (strcasestr(v, "close"))
			r->close = 1;
	} else if ((v = hresp_header_value(r->line, "retry-after"))) {
		if (parse_seconds(v, &n) == 0)
			r->retry_after_s = n > 3600 ? 3600 : (int)n;
	}
	return 0;
}

/* The empty line after the fields: picks the body framing. */
static void end_of_headers(struct hresp *r)
{
	if (r->status < 200) { /* interim: the final response follows */
		int close = r->close;

		hresp_init(r);
		r->close = close;
		return;
	}
	if (r->status == 204 || r->status == 304)
		r->state = ST_DONE;
	else if (r->chunked)
		r->state = ST_CHUNK_SIZE;
	else if (r->has_length)
		r->state = r->remain ? ST_BODY : ST_DONE;
	else {
		r->close = 1;
		r->state = ST_EOF_BODY;
	}
}

/* Consumes up to r->remain body bytes (all of them for EOF framing). */
static void take_body(struct hresp *r, const char *buf, size_t len, size_t *i, int all)
{
	size_t n = len - *i;
	size_t room = sizeof(r->snippet) - 1 - r->snippet_len;

	if (!all && n > r->remain)
		n = r->remain;
	if (room > 0) { /* a length kept, not strlen on every feed */
		size_t k = room < n ? room : n;

		memcpy(r->snippet + r->snippet_len, buf + *i, k);
		r->snippet_len += k;
		r->snippet[r->snippet_len] = '\0';
	}
	*i += n;
	r->body_bytes += n;
	if (!all)
		r->remain -= n;
}

/* One step of the state machine over a line. 0 or -EPROTO. */
static int on_line(struct hresp *r)
{
	switch (r->state) {
	case ST_STATUS:
		r->state = ST_HEADERS;
		return parse_status(r);
	case ST_HEADERS:
		if (r->line[0] == '\0') {
			end_of_headers(r);
			return 0;
		}
		return parse_field(r);
	case ST_CHUNK_SIZE:
		if (hresp_chunk_size(r->line, &r->remain))
			return -EPROTO;
		r->state = r->remain ? ST_CHUNK_DATA : ST_TRAILERS;
		return 0;
	case ST_CHUNK_CRLF:
		r->state = ST_CHUNK_SIZE;
		return r->line[0] == '\0' ? 0 : -EPROTO;
	case ST_TRAILERS:
		if (r->line[0] == '\0')
			r->state = ST_DONE;
		return 0;
	default:
		return -EPROTO;
	}
}

int hresp_feed(struct hresp *r, const char *buf, size_t len, size_t *used)
{
	size_t i = 0;
	int rc = 0;

	while (rc == 0 && r->state != ST_DONE && r->state != ST_ERROR && i < len) {
		switch (r->state) {
		case ST_BODY:
		case ST_CHUNK_DATA:
			take_body(r, buf, len, &i, 0);
			if (r->remain == 0)
				r->state = r->state == ST_BODY ? ST_DONE : ST_CHUNK_CRLF;
			break;
		case ST_EOF_BODY:
			take_body(r, buf, len, &i, 1);
			break;
		default:
			rc = take_line(r, buf, len, &i); /* 0: buf ran out, i == len */
			if (rc == 1)
				rc = on_line(r);
			break;
		}
	}
	*used = i;
	if (rc) {
		r->state = ST_ERROR;
		return rc;
	}
	return r->state == ST_DONE ? 1 : (r->state == ST_ERROR ? -EPROTO : 0);
}

int hresp_eof(struct hresp *r)
{
	if (r->state == ST_EOF_BODY) {
		r->state = ST_DONE;
		return 0;
	}
	return r->state == ST_DONE ? 0 : -ECONNRESET;
}
