/* test_wloop_parse.c - the write loop's request-head classifier and query
 * decoder (server/wloop_parse.c): which heads the loop serves, which it
 * hands to libmicrohttpd, and arguments decoded as libmicrohttpd does. */
#include "server/wloop.h"
#include "check.h"

#include <string.h>

static enum wl_verdict cls(const char *s, struct wl_head *hd)
{
	return wl_classify((const uint8_t *)s, strlen(s), hd);
}

static bool span_is(const char *buf, struct wl_span sp, const char *want)
{
	return sp.len == strlen(want) && memcmp(buf + sp.off, want, sp.len) == 0;
}

static void test_write_heads(void)
{
	struct wl_head hd;
	const char *s = "POST /write?db=x&precision=ns HTTP/1.1\r\nHost: a\r\n"
			"Content-Length: 12\r\nX-Rankdb-Batch-Id:  b1\r\n\r\nbody";
	CHECK_EQ_INT(cls(s, &hd), WL_WRITE);
	CHECK_EQ_INT(hd.content_length, 12);
	CHECK(span_is(s, hd.path, "/write"));
	CHECK(hd.has_query);
	CHECK(span_is(s, hd.query, "db=x&precision=ns"));
	CHECK_EQ_INT(hd.nheaders, 3);
	CHECK(span_is(s, hd.headers[2].name, "X-Rankdb-Batch-Id"));
	CHECK(span_is(s, hd.headers[2].value, "b1"));
	CHECK_EQ_INT(hd.head_len, strlen(s) - 4);
	CHECK(!hd.close && !hd.expect_continue);

	CHECK_EQ_INT(cls("POST /api/v2/write HTTP/1.1\r\ncontent-length: 0\r\n\r\n", &hd),
		     WL_WRITE);
	CHECK(!hd.has_query);
	CHECK_EQ_INT(cls("POST /api/v1/write HTTP/1.1\r\nContent-Length: 3\r\nConnection: Close\r\n"
			 "Expect: 100-continue\r\n\r\n",
			 &hd),
		     WL_WRITE);
	CHECK(hd.close && hd.expect_continue);
	CHECK_EQ_INT(
	    cls("POST /write HTTP/1.1\r\nContent-Length: 3\r\nConnection: keep-alive\r\n\r\n", &hd),
	    WL_WRITE);
	CHECK(!hd.close);
	/* an empty header value */
	CHECK_EQ_INT(cls("POST /write HTTP/1.1\r\nX-A:\r\nContent-Length: 1\r\n\r\n", &hd),
		     WL_WRITE);
	CHECK_EQ_INT(hd.headers[0].value.len, 0);
}

static void test_partial_heads(void)
{
	struct wl_head hd;
	const char *full =
	    "POST /write?precision=ns HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\n";
	size_t n = strlen(full);
	for (size_t i = 0; i < n; i++)
		CHECK_EQ_INT(wl_classify((const uint8_t *)full, i, &hd), WL_MORE);
	CHECK_EQ_INT(wl_classify((const uint8_t *)full, n, &hd), WL_WRITE);
	/* the first bytes already show another request */
	CHECK_EQ_INT(cls("G", &hd), WL_HANDOFF);
	CHECK_EQ_INT(cls("POS", &hd), WL_MORE);
	CHECK_EQ_INT(cls("POST /query", &hd), WL_MORE); /* line not whole yet */
	CHECK_EQ_INT(cls("POST /query HTTP/1.1\r\n", &hd), WL_HANDOFF);
	CHECK_EQ_INT(cls("PUT /write HTTP/1.1\r\n", &hd), WL_HANDOFF);
}

static void test_handoffs(void)
{
	struct wl_head hd;
	static const char *const bad[] = {
	    "GET /write HTTP/1.1\r\n\r\n",
	    "POST /write HTTP/1.0\r\nContent-Length: 1\r\n\r\n",
	    "POST /write HTTP/1.1\r\n\r\n", /* no Content-Length */
	    "POST /write HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
	    "POST /write HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
	    "POST /write HTTP/1.1\r\nContent-Length: 1x\r\n\r\n",
	    /* trailing blanks: libmicrohttpd keeps them in the value (400 for a
	     * Content-Length, another batch id, 415 for an encoding) */
	    "POST /write HTTP/1.1\r\nContent-Length: 1 \r\n\r\n",
	    "POST /write HTTP/1.1\r\nContent-Length: 1\t\r\n\r\n",
	    "POST /write HTTP/1.1\r\nContent-Length: 1\r\nX-Rankdb-Batch-Id: abc\t\r\n\r\n",
	    "POST /write HTTP/1.1\r\nContent-Length: 1\r\nExpect: 100-continue \r\n\r\n",
	    "POST /write HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
	    "POST /write HTTP/1.1\r\nContent-Length: 99999999999999999\r\n\r\n",
	    "POST /write HTTP/1.1\r\nContent-Length: \r\n\r\n",
	    "POST /write HTTP/1.1\r\nExpect: something\r\nContent-Length: 1\r\n\r\n",
	    "POST /write HTTP/1.1\r\nConnection: upgrade\r\nContent-Length: 1\r\n\r\n",
	    "POST /write HTTP/1.1\r\nUpgrade: h2c\r\nContent-Length: 1\r\n\r\n",
	    "POST /write HTTP/1.1\r\nX-A: 1\r\n folded\r\nContent-Length: 1\r\n\r\n",
	    "POST /write HTTP/1.1\nContent-Length: 1\r\n\r\n", /* bare LF */
	    "POST /write HTTP/1.1\r\nContent-Length: 1\n\r\n",
	    "POST /write HTTP/1.1\r\nBad Name: 1\r\nContent-Length: 1\r\n\r\n",
	    "POST /write HTTP/1.1\r\n: 1\r\nContent-Length: 1\r\n\r\n",
	    "POST /write HTTP/1.1\r\nX-A: a\x01z\r\nContent-Length: 1\r\n\r\n",
	    "POST /write/ HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
	    "POST /writes HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
	    "POST /wr%69te HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
	    "POST http://a/write HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
	    "POST /write? HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
	    "POST /write?a=1&&b=2 HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
	    "POST /write?&a=1 HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
	    "POST /write?a=1& HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
	    "POST /write?=1 HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
	    "POST /write?a=b+c HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
	    "POST /write?a=%4 HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
	    "POST /write?a=%zz HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
	    "POST /write?a=b#f HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
	    "POST /write?a=b c HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
	    "POST  /write HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		enum wl_verdict v = cls(bad[i], &hd);
		if (v != WL_HANDOFF)
			fprintf(stderr, "not handed off: %s\n", bad[i]);
		CHECK_EQ_INT(v, WL_HANDOFF);
	}
	/* a NUL byte in the head */
	static const char nul[] = "POST /write HTTP/1.1\r\nX-A: a\0b\r\nContent-Length: 1\r\n\r\n";
	CHECK_EQ_INT(wl_classify((const uint8_t *)nul, sizeof(nul) - 1, &hd), WL_HANDOFF);
	/* too many header lines */
	char many[4096];
	size_t n = (size_t)snprintf(many, sizeof(many), "POST /write HTTP/1.1\r\n");
	for (int i = 0; i <= WL_MAX_HEADERS; i++)
		n += (size_t)snprintf(many + n, sizeof(many) - n, "X-%d: v\r\n", i);
	n += (size_t)snprintf(many + n, sizeof(many) - n, "Content-Length: 1\r\n\r\n");
	CHECK_EQ_INT(wl_classify((const uint8_t *)many, n, &hd), WL_HANDOFF);
	/* a head as long as the bound, not ended */
	static char big[WL_HEAD_MAX + 10];
	memset(big, 'a', sizeof(big));
	memcpy(big, "POST /write HTTP/1.1\r\nX-A: ", 27);
	CHECK_EQ_INT(wl_classify((const uint8_t *)big, WL_HEAD_MAX - 1, &hd), WL_MORE);
	CHECK_EQ_INT(wl_classify((const uint8_t *)big, WL_HEAD_MAX, &hd), WL_HANDOFF);
	CHECK_EQ_INT(wl_classify((const uint8_t *)big, sizeof(big), &hd), WL_HANDOFF);
}

struct args {
	int n;
	char k[8][32], v[8][32];
	size_t kl[8], vl[8];
};

static bool take(void *cls, const char *key, size_t kl, const char *val, size_t vl)
{
	struct args *a = cls;
	if (a->n == 8)
		return false;
	memcpy(a->k[a->n], key, kl + 1);
	memcpy(a->v[a->n], val, vl + 1);
	a->kl[a->n] = kl;
	a->vl[a->n] = vl;
	a->n++;
	return true;
}

static void test_args(void)
{
	char q[] = "db=my%20db&precision=ns&flag&x=a=b&e=&k%3Dy=%41%42&z=%00";
	struct args a = {0};
	wl_parse_args(q, strlen(q), take, &a);
	CHECK_EQ_INT(a.n, 7);
	CHECK(strcmp(a.k[0], "db") == 0 && strcmp(a.v[0], "my db") == 0);
	CHECK(strcmp(a.k[1], "precision") == 0 && strcmp(a.v[1], "ns") == 0);
	CHECK(strcmp(a.k[2], "flag") == 0 && strcmp(a.v[2], "") == 0);
	CHECK(strcmp(a.k[3], "x") == 0 && strcmp(a.v[3], "a=b") == 0);
	CHECK(strcmp(a.k[4], "e") == 0 && a.vl[4] == 0);
	CHECK(strcmp(a.k[5], "k=y") == 0 && strcmp(a.v[5], "AB") == 0);
	CHECK(strcmp(a.k[6], "z") == 0 && a.vl[6] == 1 && strlen(a.v[6]) == 0); /* %00 */
	/* the callback stops the walk */
	char q2[] = "a=1&b=2&c=3&d=4&e=5&f=6&g=7&h=8&i=9&j=10";
	struct args b = {0};
	wl_parse_args(q2, strlen(q2), take, &b);
	CHECK_EQ_INT(b.n, 8);
}

int main(void)
{
	RUN(test_write_heads);
	RUN(test_partial_heads);
	RUN(test_handoffs);
	RUN(test_args);
	return check_summary("wloop_parse");
}
