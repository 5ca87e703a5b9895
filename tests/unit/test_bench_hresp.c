/* test_bench_hresp.c - unit tests for bench/hresp.c, the incremental HTTP
 * response parser of rdb-load's event loop: every response is fed whole,
 * byte by byte and in pieces of several sizes (recv() splits anywhere), and
 * must give the same status, framing, Retry-After, body length and snippet;
 * the bytes after a response are never consumed; malformed or cut-short
 * responses are errors, never a crash. The shapes are what the servers the
 * bench drives answer (rankdbd, VictoriaMetrics, InfluxDB). */
#include "bench/hresp.h"
#include "tests/unit/check.h"

#include <errno.h>
#include <string.h>

struct fed {
	int rc;	     /* last hresp_feed result */
	size_t used; /* bytes consumed in all */
};

/* Feeds text in pieces of at most piece bytes until done or an error. */
static struct fed feed(struct hresp *r, const char *text, size_t piece)
{
	size_t len = strlen(text), off = 0;
	struct fed f = {0, 0};

	hresp_init(r);
	while (off < len) {
		size_t n = len - off < piece ? len - off : piece, used = 0;

		f.rc = hresp_feed(r, text + off, n, &used);
		f.used += used;
		if (f.rc != 0)
			return f;
		off += n;
	}
	return f;
}

static const size_t pieces[] = {1, 2, 3, 7, 64, 1u << 20};
#define NPIECES (sizeof(pieces) / sizeof(pieces[0]))

static void test_no_body(void)
{
	const char *t = "HTTP/1.1 204 No Content\r\nX-Influxdb-Version: 1.8.0\r\n"
			"Date: Tue, 24 Nov 2026 14:43:16 GMT\r\n\r\n";
	struct hresp r;

	for (size_t p = 0; p < NPIECES; p++) {
		struct fed f = feed(&r, t, pieces[p]);
		CHECK_EQ_INT(f.rc, 1);
		CHECK_EQ_INT(f.used, strlen(t));
		CHECK_EQ_INT(r.status, 204);
		CHECK_EQ_INT(r.close, 0);
		CHECK_EQ_INT(r.retry_after_s, -1);
		CHECK_EQ_INT(r.body_bytes, 0);
	}
}

static void test_content_length_stops_at_end(void)
{
	const char *resp = "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
			   "content-length:  20\r\n\r\n{\"error\":\"bad line\"}";
	char t[512];
	struct hresp r;

	snprintf(t, sizeof(t), "%sHTTP/1.1 200 OK\r\n", resp); /* stray bytes after it */
	for (size_t p = 0; p < NPIECES; p++) {
		struct fed f = feed(&r, t, pieces[p]);
		CHECK_EQ_INT(f.rc, 1);
		CHECK_EQ_INT(f.used, strlen(resp));
		CHECK_EQ_INT(r.status, 400);
		CHECK_EQ_INT(r.body_bytes, 20);
		CHECK(strcmp(r.snippet, "{\"error\":\"bad line\"}") == 0);
	}
}

static void test_chunked(void)
{
	const char *t = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
			"5\r\nhello\r\n6;ext=1\r\n world\r\nA\r\n0123456789\r\n"
			"0\r\nX-Trailer: 1\r\n\r\n";
	struct hresp r;

	for (size_t p = 0; p < NPIECES; p++) {
		struct fed f = feed(&r, t, pieces[p]);
		CHECK_EQ_INT(f.rc, 1);
		CHECK_EQ_INT(f.used, strlen(t));
		CHECK_EQ_INT(r.status, 200);
		CHECK_EQ_INT(r.body_bytes, 21);
		CHECK(strcmp(r.snippet, "hello world0123456789") == 0);
	}
}

static void test_retry_after_and_interim(void)
{
	const char *t = "HTTP/1.1 100 Continue\r\n\r\n"
			"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\n"
			"Content-Length: 4\r\nConnection: close\r\n\r\nbusy";
	struct hresp r;

	for (size_t p = 0; p < NPIECES; p++) {
		struct fed f = feed(&r, t, pieces[p]);
		CHECK_EQ_INT(f.rc, 1);
		CHECK_EQ_INT(r.status, 429);
		CHECK_EQ_INT(r.retry_after_s, 2);
		CHECK_EQ_INT(r.close, 1);
		CHECK(strcmp(r.snippet, "busy") == 0);
	}
	CHECK_EQ_INT(
	    feed(&r, "HTTP/1.1 503 Unavailable\r\nRetry-After: 99999\r\nContent-Length: 0\r\n\r\n",
		 5)
		.rc,
	    1);
	CHECK_EQ_INT(r.retry_after_s, 3600); /* capped */
	CHECK_EQ_INT(
	    feed(&r, "HTTP/1.1 503 Unavailable\r\nRetry-After: soon\r\nContent-Length: 0\r\n\r\n",
		 5)
		.rc,
	    1);
	CHECK_EQ_INT(r.retry_after_s, -1); /* not seconds: the caller's default */
	CHECK_EQ_INT(
	    feed(&r,
		 "HTTP/1.1 503 Unavailable\r\nRetry-After: Fri, 31 Dec 1999 23:59:59 GMT\r\n"
		 "Content-Length: 0\r\n\r\n",
		 5)
		.rc,
	    1);
	CHECK_EQ_INT(r.retry_after_s, -1); /* an HTTP date: not seconds either */
}

/* The same length said twice frames the body one way; said two ways, or
 * with anything but digits, the response cannot be trusted. */
static void test_content_length_strict(void)
{
	const char *same = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\nabcd";
	const char *list = "HTTP/1.1 200 OK\r\nContent-Length: 4, 4\r\n\r\nabcd";
	static const char *bad[] = {
	    "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde",
	    "HTTP/1.1 200 OK\r\nContent-Length: 4, 5\r\n\r\nabcde",
	    "HTTP/1.1 200 OK\r\nContent-Length: 4abc\r\n\r\nabcd",
	    "HTTP/1.1 200 OK\r\nContent-Length: 4 x\r\n\r\nabcd",
	    "HTTP/1.1 200 OK\r\nContent-Length: 4;\r\n\r\nabcd",
	    "HTTP/1.1 200 OK\r\nContent-Length: +4\r\n\r\nabcd",
	    "HTTP/1.1 200 OK\r\nContent-Length: 0x4\r\n\r\nabcd",
	    "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
	    "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
	};
	struct hresp r;

	for (size_t p = 0; p < NPIECES; p++) {
		struct fed f = feed(&r, same, pieces[p]);
		CHECK_EQ_INT(f.rc, 1);
		CHECK_EQ_INT(r.body_bytes, 4);
		f = feed(&r, list, pieces[p]);
		CHECK_EQ_INT(f.rc, 1);
		CHECK_EQ_INT(r.body_bytes, 4);
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
			CHECK_EQ_INT(feed(&r, bad[i], pieces[p]).rc, -EPROTO);
	}
}

/* A chunk size is hex digits: no "0x", no sign, nothing after but an
 * extension. */
static void test_chunk_size_strict(void)
{
	static const char *bad[] = {"0x5", "+5", "-5", "5 x", "", "g"};
	char t[256];
	struct hresp r;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(t, sizeof(t),
			 "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%s\r\nhello\r\n"
			 "0\r\n\r\n",
			 bad[i]);
		CHECK_EQ_INT(feed(&r, t, 3).rc, -EPROTO);
	}
	CHECK_EQ_INT(feed(&r,
			  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5 ;x=y\r\nhello\r\n"
			  "0\r\n\r\n",
			  3)
			 .rc,
		     1);
	CHECK_EQ_INT(r.body_bytes, 5);
}

static void test_eof_framing(void)
{
	const char *t = "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end";
	struct hresp r;

	for (size_t p = 0; p < NPIECES; p++) {
		struct fed f = feed(&r, t, pieces[p]);
		CHECK_EQ_INT(f.rc, 0); /* not done before the stream ends */
		CHECK_EQ_INT(hresp_eof(&r), 0);
		CHECK_EQ_INT(r.status, 200);
		CHECK_EQ_INT(r.close, 1);
		CHECK_EQ_INT(r.body_bytes, 13);
		CHECK(strcmp(r.snippet, "until the end") == 0);
	}
}

static void test_long_body_snippet_bounded(void)
{
	static char t[8192];
	int n = snprintf(t, sizeof(t), "HTTP/1.1 500 Oops\r\nContent-Length: 4000\r\n\r\n");
	struct hresp r;

	memset(t + n, 'x', 4000);
	t[n + 4000] = '\0';
	struct fed f = feed(&r, t, 1000);
	CHECK_EQ_INT(f.rc, 1);
	CHECK_EQ_INT(r.body_bytes, 4000);
	CHECK_EQ_INT(strlen(r.snippet), sizeof(r.snippet) - 1);
}

static void test_errors(void)
{
	static char longline[HRESP_LINE_BYTES + 64];
	struct hresp r;

	CHECK_EQ_INT(feed(&r, "HTTX/1.1 200 OK\r\n\r\n", 4).rc, -EPROTO);
	CHECK_EQ_INT(feed(&r, "HTTP/1.1 2x0 OK\r\n\r\n", 4).rc, -EPROTO);
	CHECK_EQ_INT(feed(&r, "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 4).rc, -EPROTO);
	CHECK_EQ_INT(feed(&r,
			  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
			  "hello\r\n0\r\n\r\n",
			  4)
			 .rc,
		     -EPROTO);
	CHECK_EQ_INT(feed(&r,
			  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n"
			  "abcd\r\n0\r\n\r\n",
			  4)
			 .rc,
		     -EPROTO); /* chunk data longer than its size */
	snprintf(longline, sizeof(longline), "HTTP/1.1 200 OK\r\nX: ");
	memset(longline + strlen(longline), 'a', HRESP_LINE_BYTES);
	CHECK_EQ_INT(feed(&r, longline, 100).rc, -EPROTO);

	/* cut short: the stream ends inside the headers or the body */
	CHECK_EQ_INT(feed(&r, "HTTP/1.1 200 OK\r\nContent-Len", 3).rc, 0);
	CHECK_EQ_INT(hresp_eof(&r), -ECONNRESET);
	CHECK_EQ_INT(feed(&r, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 3).rc, 0);
	CHECK_EQ_INT(hresp_eof(&r), -ECONNRESET);
	hresp_init(&r);
	CHECK_EQ_INT(hresp_eof(&r), -ECONNRESET); /* nothing at all */
}

int main(void)
{
	RUN(test_no_body);
	RUN(test_content_length_stops_at_end);
	RUN(test_chunked);
	RUN(test_retry_after_and_interim);
	RUN(test_content_length_strict);
	RUN(test_chunk_size_strict);
	RUN(test_eof_framing);
	RUN(test_long_body_snippet_bounded);
	RUN(test_errors);
	return check_summary("bench_hresp");
}
