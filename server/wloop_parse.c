/* wloop_parse.c - the write loop's request-head classifier and query
 * argument decoder (wloop.h). Pure functions: no allocation, no state, no
 * system calls; unit-tested (tests/unit/test_wloop_parse.c) and fuzzed
 * (tests/fuzz/fuzz_wloop.c).
 *
 * The classifier is deliberately narrow: it accepts only the request heads
 * whose meaning is unambiguous and identical under libmicrohttpd (one
 * Content-Length, no Transfer-Encoding, plain query bytes), and hands every
 * other head to libmicrohttpd, which then answers exactly as it does
 * without the loop. Being wrong towards WL_HANDOFF costs a few microseconds;
 * being wrong towards WL_WRITE would make the two front ends disagree.
 */
#include "server/wloop.h"

#include <string.h>

static const char *const write_paths[] = {"/write", "/api/v2/write", "/api/v1/write"};

static int lower(int c)
{
	return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* Case-insensitive: the n bytes at p equal the NUL-terminated word. */
static bool ieq(const uint8_t *p, size_t n, const char *word)
{
	size_t i = 0;
	for (; i < n && word[i]; i++)
		if (lower(p[i]) != word[i])
			return false;
	return i == n && word[i] == 0;
}

static bool is_hex(int c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int hex_val(int c)
{
	return c <= '9' ? c - '0' : lower(c) - 'a' + 10;
}

/* RFC 9110 token characters (header names). */
static bool is_tchar(int c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return true;
	return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* A query byte the loop decodes as libmicrohttpd does ('+' and anything
 * that might be decoded differently excluded; '%' checked by the caller). */
static bool is_qchar(int c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return true;
	return c && strchr("-._~:/,;@!$'()*=&", c) != NULL;
}

/* A query of plain items: no empty item, no empty key, %XX only. */
static bool query_ok(const uint8_t *q, size_t n)
{
	if (n == 0)
		return false;
	bool item_start = true;
	for (size_t i = 0; i < n; i++) {
		int c = q[i];
		if (c == '&') {
			if (item_start)
				return false; /* empty item */
			item_start = true;
			continue;
		}
		if (c == '=' && item_start)
			return false; /* empty key */
		item_start = false;
		if (c == '%') {
			if (i + 2 >= n || !is_hex(q[i + 1]) || !is_hex(q[i + 2]))
				return false;
			i += 2;
			continue;
		}
		if (!is_qchar(c))
			return false;
	}
	return !item_start; /* no trailing '&' */
}

/* The request line "POST <target> HTTP/1.1" (len bytes, without CRLF). */
static enum wl_verdict request_line(const uint8_t *b, size_t len, struct wl_head *hd)
{
	static const char ver[] = " HTTP/1.1";
	size_t vlen = sizeof(ver) - 1;
	if (len < 5 + 1 + vlen || memcmp(b, "POST /", 6) != 0 ||
	    memcmp(b + len - vlen, ver, vlen) != 0)
		return WL_HANDOFF;
	size_t tstart = 5, tend = len - vlen;
	const uint8_t *t = b + tstart;
	size_t tlen = tend - tstart;
	const uint8_t *qm = memchr(t, '?', tlen);
	size_t plen = qm ? (size_t)(qm - t) : tlen;
	bool known = false;
	for (size_t i = 0; i < sizeof(write_paths) / sizeof(write_paths[0]); i++)
		if (strlen(write_paths[i]) == plen && memcmp(write_paths[i], t, plen) == 0)
			known = true;
	if (!known)
		return WL_HANDOFF;
	hd->path = (struct wl_span){(uint16_t)tstart, (uint16_t)plen};
	hd->has_query = qm != NULL;
	if (qm) {
		size_t qoff = tstart + plen + 1, qlen = tlen - plen - 1;
		if (!query_ok(b + qoff, qlen))
			return WL_HANDOFF;
		hd->query = (struct wl_span){(uint16_t)qoff, (uint16_t)qlen};
	}
	return WL_WRITE;
}

/* One header line (len bytes, without CRLF). */
static enum wl_verdict header_line(const uint8_t *buf, size_t off, size_t len, struct wl_head *hd,
				   bool *have_cl)
{
	const uint8_t *b = buf + off;
	size_t colon = 0;
	while (colon < len && b[colon] != ':') {
		if (!is_tchar(b[colon]))
			return WL_HANDOFF; /* also obsolete folding (a leading blank) */
		colon++;
	}
	if (colon == 0 || colon == len)
		return WL_HANDOFF;
	size_t vs = colon + 1, ve = len;
	for (size_t i = vs; i < len; i++)
		if ((b[i] < 0x20 && b[i] != '\t') || b[i] == 0x7f)
			return WL_HANDOFF;
	while (vs < ve && (b[vs] == ' ' || b[vs] == '\t'))
		vs++;
	/* libmicrohttpd 0.9.75 keeps trailing blanks in a value (a Content-Length
	 * of "5 " is a 400 there, a batch id "abc\t" another id): hand such a
	 * head over rather than answer it differently. */
	if (ve > vs && (b[ve - 1] == ' ' || b[ve - 1] == '\t'))
		return WL_HANDOFF;
	const uint8_t *v = b + vs;
	size_t vl = ve - vs;
	if (ieq(b, colon, "content-length")) {
		if (*have_cl || vl == 0 || vl > 16)
			return WL_HANDOFF;
		uint64_t x = 0;
		for (size_t i = 0; i < vl; i++) {
			if (v[i] < '0' || v[i] > '9')
				return WL_HANDOFF;
			x = x * 10 + (uint64_t)(v[i] - '0');
		}
		if (x > WL_CL_MAX)
			return WL_HANDOFF;
		hd->content_length = x;
		*have_cl = true;
	} else if (ieq(b, colon, "transfer-encoding") || ieq(b, colon, "upgrade")) {
		return WL_HANDOFF;
	} else if (ieq(b, colon, "expect")) {
		if (!ieq(v, vl, "100-continue") || hd->expect_continue)
			return WL_HANDOFF;
		hd->expect_continue = true;
	} else if (ieq(b, colon, "connection")) {
		if (ieq(v, vl, "close"))
			hd->close = true;
		else if (!ieq(v, vl, "keep-alive"))
			return WL_HANDOFF;
	}
	if (hd->nheaders == WL_MAX_HEADERS)
		return WL_HANDOFF;
	hd->headers[hd->nheaders++] = (struct wl_hdr){
	    .name = {(uint16_t)off, (uint16_t)colon},
	    .value = {(uint16_t)(off + vs), (uint16_t)vl},
	};
	return WL_WRITE;
}

enum wl_verdict wl_classify(const uint8_t *buf, size_t n, struct wl_head *hd)
{
	memset(hd, 0, sizeof(*hd));
	if (n > WL_HEAD_MAX)
		n = WL_HEAD_MAX;
	size_t pre = n < 6 ? n : 6;
	if (memcmp(buf, "POST /", pre) != 0)
		return WL_HANDOFF;
	bool have_cl = false, first = true;
	size_t off = 0;
	for (;;) {
		const uint8_t *nl = memchr(buf + off, '\n', n - off);
		if (!nl) {
			/* A line still arriving. Bytes so far must be plausible. */
			for (size_t i = off; i < n; i++)
				if (buf[i] == 0)
					return WL_HANDOFF;
			return n >= WL_HEAD_MAX ? WL_HANDOFF : WL_MORE;
		}
		size_t end = (size_t)(nl - buf); /* the LF */
		if (end == off || buf[end - 1] != '\r')
			return WL_HANDOFF; /* bare LF */
		size_t len = end - 1 - off;
		if (first) {
			if (request_line(buf, len, hd) != WL_WRITE)
				return WL_HANDOFF;
			first = false;
		} else if (len == 0) {
			hd->head_len = end + 1;
			return have_cl ? WL_WRITE : WL_HANDOFF;
		} else if (header_line(buf, off, len, hd, &have_cl) != WL_WRITE) {
			return WL_HANDOFF;
		}
		off = end + 1;
		if (off >= WL_HEAD_MAX)
			return WL_HANDOFF;
	}
}

/* Decodes %XX in place (every % is followed by two hex digits: checked by
 * wl_classify); returns the decoded length and NUL-terminates. */
static size_t unescape(char *s, size_t n)
{
	size_t w = 0;
	for (size_t r = 0; r < n; r++) {
		if (s[r] == '%' && r + 2 < n && is_hex(s[r + 1]) && is_hex(s[r + 2])) {
			s[w++] = (char)(hex_val(s[r + 1]) * 16 + hex_val(s[r + 2]));
			r += 2;
		} else {
			s[w++] = s[r];
		}
	}
	s[w] = 0;
	return w;
}

void wl_parse_args(char *q, size_t qlen, wl_arg_fn cb, void *cls)
{
	size_t i = 0;
	while (i < qlen) {
		char *item = q + i;
		char *amp = memchr(item, '&', qlen - i);
		size_t ilen = amp ? (size_t)(amp - item) : qlen - i;
		i += ilen + 1;
		char *eq = memchr(item, '=', ilen);
		size_t klen = eq ? (size_t)(eq - item) : ilen;
		char *val = eq ? eq + 1 : NULL;
		size_t vlen = eq ? ilen - klen - 1 : 0;
		size_t kd = unescape(item, klen); /* writes a NUL at the '=' or '&' or end */
		size_t vd = 0;
		if (val)
			vd = unescape(val, vlen);
		if (!cb(cls, item, kd, val ? val : "", vd))
			return;
	}
}
