/* test_lineproto.c - unit tests for ingest/lineproto.c (ing_lp_parse): every
 * syntax corner (escapes, value types, precisions, line endings, comments),
 * the mapping (metric names, percent-encoding, injectivity, step/attempt,
 * job/rank), log and span lines, partial-write semantics, limits, and every
 * prefix of a valid body. Prints (never asserts) parse throughput. */
#include "ingest/lp.h"
#include "ingest/echo.h"
#include "common/rdb_err.h"
#include "tests/unit/check.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_TS 777

static struct mdl_batch *batch;
static struct mdl_events *events;
static struct ing_lp_options opt;
static struct ing_lp_result res;

/* Parses s from an exact-size heap copy (so ASan sees any overread). */
static int parse_n(const char *s, size_t n)
{
	char *copy = malloc(n ? n : 1);
	if (n)
		memcpy(copy, s, n);
	mdl_batch_reset(batch);
	mdl_events_reset(events);
	int rc = ing_lp_parse(copy, n, &opt, batch, events, &res);
	free(copy);
	return rc;
}

static int parse(const char *s)
{
	return parse_n(s, strlen(s));
}

static const struct mdl_batch_series *find(const char *job, uint32_t rank, const char *metric)
{
	for (size_t i = 0; i < mdl_batch_nseries(batch); i++) {
		const struct mdl_batch_series *s = mdl_batch_series_at(batch, i);
		if (s && s->key.rank == rank && strcmp(s->key.job, job) == 0 &&
		    strcmp(s->key.metric, metric) == 0)
			return s;
	}
	return NULL;
}

static uint64_t dbits(double d)
{
	uint64_t u;
	memcpy(&u, &d, sizeof(u));
	return u;
}

static bool printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
			return false;
	return true;
}

/* Parses a one-line body "m,job=j,rank=0 v=<text>" and returns the value bits
 * of metric m.v; *ok says whether the line was accepted. */
static uint64_t value_of(const char *text, bool *ok)
{
	char body[2048];
	snprintf(body, sizeof(body), "m,job=j,rank=0 v=%s", text);
	*ok = parse(body) == 0 && res.lines_ok == 1 && res.points == 1;
	const struct mdl_batch_series *s = find("j", 0, "m.v");
	return s && *ok ? s->pts.value[0] : 0;
}

static void expect_value(int line_no, const char *text, double want)
{
	bool ok;
	uint64_t got = value_of(text, &ok);
	CHECK(ok && got == dbits(want));
	if (!ok || got != dbits(want))
		fprintf(stderr, "  (test line %d) value %s: ok %d msg '%s'\n", line_no, text, ok,
			res.nerrors ? res.errors[0].msg : "");
}

/* Parses body; expects exactly one bad line with this line/field/message. */
static void expect_err_at(int line_no, const char *body, long record, long line, const char *field,
			  const char *substr)
{
	int rc = parse(body);
	const struct ing_error *e = &res.errors[0];
	bool ok = rc == 0 && res.lines_bad == 1 && res.nerrors == 1 && e->record == record &&
		  e->line == line && strcmp(e->field, field) == 0 && strstr(e->msg, substr) &&
		  printable(e->msg) && printable(e->field) && strlen(e->msg) < 200;
	CHECK(ok);
	if (!ok)
		fprintf(stderr,
			"  (test line %d) body %.60s\n  got rc %d bad %zu record %ld line %ld "
			"field '%s' msg '%s'\n  want record %ld line %ld field '%s' msg ~'%s'\n",
			line_no, body, rc, res.lines_bad, e->record, e->line, e->field, e->msg,
			record, line, field, substr);
}

#define EXPECT_ERR(body, field, substr) expect_err_at(__LINE__, body, 0, 1, field, substr)
#define EXPECT_VALUE(text, want)	expect_value(__LINE__, text, want)
#define EXPECT_BAD_VALUE(text)                                                                     \
	do {                                                                                       \
		bool ok_;                                                                          \
		value_of(text, &ok_);                                                              \
		CHECK(!ok_ && res.lines_bad == 1 && strcmp(res.errors[0].field, "v") == 0);        \
		if (ok_)                                                                           \
			fprintf(stderr, "  value %s accepted\n", text);                            \
	} while (0)

static void test_basic(void)
{
	CHECK_EQ_INT(parse("train,job=run-1,rank=3 loss=2.5,lr=0.0003,step=100i "
			   "1700000000000000000\n"),
		     0);
	CHECK_EQ_INT(res.lines_ok, 1);
	CHECK_EQ_INT(res.lines_bad, 0);
	CHECK_EQ_INT(res.points, 2);
	CHECK_EQ_INT(mdl_batch_points(batch), 2);
	const struct mdl_batch_series *s = find("run-1", 3, "train.loss");
	CHECK(s && s->pts.n == 1);
	if (s) {
		CHECK_EQ_INT(s->pts.ts_ns[0], 1700000000000000000LL);
		CHECK_EQ_INT(s->pts.step[0], 100);
		CHECK_EQ_INT(s->pts.attempt[0], 0);
		CHECK(s->pts.value[0] == dbits(2.5));
	}
	s = find("run-1", 3, "train.lr");
	CHECK(s && s->pts.value[0] == dbits(0.0003));
	CHECK(find("run-1", 3, "train.step") == NULL);
	/* empty body, blank lines and comments only */
	CHECK_EQ_INT(parse(""), 0);
	CHECK_EQ_INT(res.lines_ok + res.lines_bad, 0);
	CHECK_EQ_INT(parse("\n\n  \t\r\n# comment m v=1\n   # indented comment\n"), 0);
	CHECK_EQ_INT(res.lines_ok + res.lines_bad + res.points, 0);
}

static void test_values(void)
{
	EXPECT_VALUE("1", 1.0);
	EXPECT_VALUE("1.5", 1.5);
	EXPECT_VALUE("-1.5e-3", -1.5e-3);
	EXPECT_VALUE("1E5", 1e5);
	EXPECT_VALUE("1e+5", 1e5);
	EXPECT_VALUE(".5", 0.5);
	EXPECT_VALUE("5.", 5.0);
	EXPECT_VALUE("-0", -0.0);
	EXPECT_VALUE("-0.0", -0.0);
	EXPECT_VALUE("0.1", 0.1);
	EXPECT_VALUE("007.25", 7.25);
	EXPECT_VALUE("3.141592653589793", 3.141592653589793);
	EXPECT_VALUE("2.2250738585072014e-308", 2.2250738585072014e-308);
	EXPECT_VALUE("1.7976931348623157e308", 1.7976931348623157e308);
	EXPECT_VALUE("4.9e-324", 4.9e-324);
	EXPECT_VALUE("1e-400", 0.0);
	EXPECT_VALUE("123456789012345678901234567890", 123456789012345678901234567890.0);
	EXPECT_VALUE("0.30000000000000004", 0.30000000000000004);
	EXPECT_VALUE("9007199254740993", 9007199254740992.0); /* ties to even, as strtod */
	EXPECT_VALUE("123i", 123.0);
	EXPECT_VALUE("-123i", -123.0);
	EXPECT_VALUE("9223372036854775807i", 9223372036854775807.0);
	EXPECT_VALUE("-9223372036854775808i", -9223372036854775808.0);
	EXPECT_VALUE("9007199254740993i", 9007199254740992.0); /* nearest double */
	EXPECT_VALUE("123u", 123.0);
	EXPECT_VALUE("18446744073709551615u", 18446744073709551615.0);
	const char *yes[] = {"t", "T", "true", "True", "TRUE"};
	const char *no[] = {"f", "F", "false", "False", "FALSE"};
	for (int i = 0; i < 5; i++) {
		EXPECT_VALUE(yes[i], 1.0);
		EXPECT_VALUE(no[i], 0.0);
	}
	const char *bad[] = {"inf",
			     "-inf",
			     "+Inf",
			     "NaN",
			     "nan",
			     "+1",
			     "1.2.3",
			     "1e",
			     "1e+",
			     "0x10",
			     "-",
			     ".",
			     "e5",
			     "1..",
			     "tRUE",
			     "yes",
			     "1e400",
			     "-1e400",
			     "9223372036854775808i",
			     "-9223372036854775809i",
			     "18446744073709551616u",
			     "-1u",
			     "1.5i",
			     "i",
			     "u",
			     "1ii",
			     "12x"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		EXPECT_BAD_VALUE(bad[i]);
	/* a float literal past NUMBER_MAX is refused; a long one below it converts */
	char big[1300] = "0.";
	memset(big + 2, '0', 1000);
	big[1002] = '1';
	big[1003] = 0;
	EXPECT_VALUE(big, 0.0); /* 1e-1001 underflows to 0 */
	memset(big + 2, '0', 1200);
	big[1202] = 0;
	EXPECT_BAD_VALUE(big);
}

static void test_strings(void)
{
	CHECK_EQ_INT(parse("m,job=j s=\"a b,c=d \\\"q\\\" \\\\ \\n\",x=1,e=\"\"\n"), 0);
	CHECK_EQ_INT(res.lines_ok, 1);
	CHECK_EQ_INT(res.points, 1);
	CHECK_EQ_INT(res.string_fields_skipped, 2);
	CHECK(find("j", MDL_RANK_JOB, "m.x") != NULL);
	EXPECT_ERR("m,job=j s=\"abc", "s", "unterminated");
	EXPECT_ERR("m,job=j s=\"abc\\\"", "s", "unterminated");
	EXPECT_ERR("m,job=j s=\"abc\"x", "s", "after a string");
	EXPECT_ERR("m,job=j s=\"only a string\"", "", "no numeric field");
	/* a raw newline ends the line, also inside a string */
	CHECK_EQ_INT(parse("m,job=j s=\"ab\ncd\",v=1\nm,job=j v=2\n"), 0);
	CHECK_EQ_INT(res.lines_bad, 2);
	CHECK_EQ_INT(res.lines_ok, 1);
}

/* Every printable byte a field key can hold unescaped maps to itself or
 * to %XX in the metric name, as the grammar in lineproto.c says, whether
 * it is the key's first, middle or last byte; and keys that share their
 * first and last 8 bytes and length but differ inside are different
 * fields (the duplicate screen only hashes those). */
static void test_key_bytes(void)
{
	static const char pct[] = "\"%;{}\x7f";
	for (int c = 0x21; c < 0x7f; c++) {
		if (c == ',' || c == '=' || c == '\\' || c == 'a' || c == 'b')
			continue; /* end a key or escape (test_escapes); or two keys would be one */
		char line[64], want[3][32], enc[4];
		bool p = strchr(pct, c) != NULL;
		snprintf(enc, sizeof(enc), p ? "%%%02X" : "%c", c);
		snprintf(line, sizeof(line), "m,job=j %cab=1,a%cb=2,ab%c=3\n", c, c, c);
		snprintf(want[0], sizeof(want[0]), "m.%sab", enc);
		snprintf(want[1], sizeof(want[1]), "m.a%sb", enc);
		snprintf(want[2], sizeof(want[2]), "m.ab%s", enc);
		CHECK_EQ_INT(parse(line), 0);
		CHECK_EQ_INT(res.points, 3);
		if (res.points != 3)
			fprintf(stderr, "byte 0x%02x: %zu points\n", c, res.points);
		for (int k = 0; k < 3; k++) {
			const struct mdl_batch_series *sr = find("j", MDL_RANK_JOB, want[k]);
			CHECK(sr && sr->pts.n == 1 && sr->pts.value[0] == dbits(k + 1));
			if (!sr)
				fprintf(stderr, "byte 0x%02x: no series %s\n", c, want[k]);
		}
	}
	CHECK_EQ_INT(parse("m,job=j abcdefgh_1_ijklmnop=1,abcdefgh_2_ijklmnop=2,"
			   "abcdefgh_1_ijklmnop=3\n"),
		     0);
	CHECK_EQ_INT(res.points, 2); /* the third overrides the first */
	const struct mdl_batch_series *a = find("j", MDL_RANK_JOB, "m.abcdefgh_1_ijklmnop"),
				      *b = find("j", MDL_RANK_JOB, "m.abcdefgh_2_ijklmnop");
	CHECK(a && a->pts.n == 1 && a->pts.value[0] == dbits(3));
	CHECK(b && b->pts.n == 1 && b->pts.value[0] == dbits(2));
}

static void test_escapes(void)
{
	CHECK_EQ_INT(parse("my\\ meas\\,x,job=j,a\\ b\\=c\\,d=v\\ 1\\,2\\=3 f\\ 1\\=2\\,3=1\n"), 0);
	CHECK_EQ_INT(res.lines_ok, 1);
	CHECK(find("j", MDL_RANK_JOB, "my%20meas%2Cx.f%201%3D2%2C3;a%20b%3Dc%2Cd=v%201%2C2%3D3"));
	/* other backslashes stay (both bytes), and "\\" does not escape */
	CHECK_EQ_INT(parse("m\\x,job=j v\\q=1\n"), 0);
	CHECK(find("j", MDL_RANK_JOB, "m%5Cx.v%5Cq"));
	CHECK_EQ_INT(parse("m\\\\,job=j v=1\n"), 0);
	CHECK(find("j", MDL_RANK_JOB, "m%5C%5C.v"));
	/* '=' is literal in a measurement; "\=" keeps its backslash there */
	CHECK_EQ_INT(parse("a=b,job=j v=1\nc\\=d,job=j v=1\n"), 0);
	CHECK(find("j", MDL_RANK_JOB, "a%3Db.v"));
	CHECK(find("j", MDL_RANK_JOB, "c%5C%3Dd.v"));
	/* escaped job tag value is unescaped before validation */
	CHECK_EQ_INT(parse("m,j\\ob=x,job=run\\=1 v=1\n"), 0);
	CHECK_EQ_INT(res.lines_bad, 1);
	CHECK_EQ_INT(parse("m,jo\\b=x,job=run-1 v=1\n"), 0);
	CHECK(find("run-1", MDL_RANK_JOB, "m.v;jo%5Cb=x"));
	/* percent-encoding of ; = % and non-ASCII */
	CHECK_EQ_INT(parse("m%;x,job=j,t=a;b\\=c%\xc3\xa9 v=1\n"), 0);
	CHECK(find("j", MDL_RANK_JOB, "m%25%3Bx.v;t=a%3Bb%3Dc%25%C3%A9"));
	/* the other encoded bytes (" \\ { } DEL) and their neighbours that stay */
	CHECK_EQ_INT(parse("m!#$,job=j,t={\"}\x7f~|[ x&'+:<>?@^`=1\n"), 0);
	CHECK(find("j", MDL_RANK_JOB, "m!#$.x&'+:<>?@^`;t=%7B%22%7D%7F~|["));
	/* errors */
	EXPECT_ERR("m,job=j,t=a=b v=1", "t", "unescaped '='");
	EXPECT_ERR("m,job=j,t= v=1", "t", "empty tag value");
	EXPECT_ERR("m,job=j,=x v=1", "", "missing tag key");
	EXPECT_ERR("m,job=j, v=1", "", "missing tag key");
	EXPECT_ERR("m,job=j,t v=1", "t", "without '=value'");
	EXPECT_ERR(",job=j v=1", "", "missing measurement");
	EXPECT_ERR("m,job=j =1", "", "missing field key");
	EXPECT_ERR("m,job=j v", "v", "without '=value'");
	EXPECT_ERR("m,job=j v=", "v", "missing value");
	EXPECT_ERR("m,job=j v=1,", "", "missing field key");
	EXPECT_ERR("m,job=j v=1,,w=2", "", "missing field key");
	EXPECT_ERR("m,job=j", "", "missing fields");
	EXPECT_ERR("m,job=j   ", "", "missing fields");
	EXPECT_ERR("m", "", "missing fields");
}

static void test_timestamps(void)
{
	static const struct {
		const char *name;
		int64_t ns;
	} p[] = {{"n", 1},
		 {"ns", 1},
		 {"u", 1000},
		 {"us", 1000},
		 {"\xc2\xb5", 1000},
		 {"\xc2\xb5s", 1000},
		 {"ms", 1000000},
		 {"s", 1000000000},
		 {"m", 60000000000LL},
		 {"h", 3600000000000LL}};
	for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) {
		int64_t ns = 0;
		CHECK_EQ_INT(ing_lp_precision(p[i].name, &ns), 0);
		CHECK_EQ_INT(ns, p[i].ns);
		opt.precision_ns = ns;
		CHECK_EQ_INT(parse("m,job=j v=1 -17\n"), 0);
		const struct mdl_batch_series *s = find("j", MDL_RANK_JOB, "m.v");
		CHECK(s && s->pts.ts_ns[0] == -17 * ns);
	}
	int64_t keep = 42;
	CHECK_EQ_INT(ing_lp_precision("x", &keep), RDB_EINVAL);
	CHECK_EQ_INT(ing_lp_precision("", &keep), RDB_EINVAL);
	CHECK_EQ_INT(ing_lp_precision(NULL, &keep), RDB_EINVAL);
	CHECK_EQ_INT(keep, 42);
	opt.precision_ns = 1000000000;
	EXPECT_ERR("m,job=j v=1 9300000000", "", "overflows");
	CHECK_EQ_INT(parse("m,job=j v=1 9200000000\n"), 0);
	CHECK_EQ_INT(res.lines_ok, 1);
	opt.precision_ns = 1;
	CHECK_EQ_INT(parse("m,job=j v=1 -9223372036854775808\n"), 0);
	CHECK_EQ_INT(find("j", MDL_RANK_JOB, "m.v")->pts.ts_ns[0], INT64_MIN);
	EXPECT_ERR("m,job=j v=1 9223372036854775808", "", "overflows");
	/* missing timestamp: default_ts_ns, unscaled */
	opt.precision_ns = 1000;
	CHECK_EQ_INT(parse("m,job=j v=1\nm,job=j v=2   \t\n"), 0);
	const struct mdl_batch_series *s = find("j", MDL_RANK_JOB, "m.v");
	CHECK(s && s->pts.n == 2 && s->pts.ts_ns[0] == DEFAULT_TS && s->pts.ts_ns[1] == DEFAULT_TS);
	opt.precision_ns = 1;
	/* trailing garbage and bad timestamps */
	EXPECT_ERR("m,job=j v=1 123 456", "", "after the timestamp");
	EXPECT_ERR("m,job=j v=1 123x", "", "invalid timestamp");
	EXPECT_ERR("m,job=j v=1 1.5", "", "invalid timestamp");
	EXPECT_ERR("m,job=j v=1 -", "", "invalid timestamp");
	EXPECT_ERR("m,job=j v=1 +5", "", "invalid timestamp");
	/* several spaces and trailing blanks; CRLF; leading blanks */
	CHECK_EQ_INT(parse("  m,job=j   v=1  \t 5  \r\nm,job=j v=2 6\r\n\r\nm,job=j v=3 7"), 0);
	CHECK_EQ_INT(res.lines_ok, 3);
	CHECK_EQ_INT(res.lines_bad, 0);
	s = find("j", MDL_RANK_JOB, "m.v");
	CHECK(s && s->pts.n == 3 && s->pts.ts_ns[2] == 7);
}

static void test_duplicates(void)
{
	CHECK_EQ_INT(parse("m,job=j a=1,b=2,a=3,step=1i,step=2i\n"), 0);
	CHECK_EQ_INT(res.points, 2);
	const struct mdl_batch_series *s = find("j", MDL_RANK_JOB, "m.a");
	CHECK(s && s->pts.n == 1 && s->pts.value[0] == dbits(3.0) && s->pts.step[0] == 2);
	/* last wins also when the earlier one was a string or the later one is */
	CHECK_EQ_INT(parse("m,job=j a=\"x\",a=4\n"), 0);
	CHECK(res.points == 1 && res.string_fields_skipped == 0);
	CHECK_EQ_INT(parse("m,job=j a=4,a=\"x\",b=1\n"), 0);
	CHECK(res.points == 1 && res.string_fields_skipped == 1 && !find("j", MDL_RANK_JOB, "m.a"));
	/* many fields: the sorted path */
	char body[8192];
	size_t o = (size_t)snprintf(body, sizeof(body), "m,job=j ");
	for (int i = 0; i < 200; i++)
		o += (size_t)snprintf(body + o, sizeof(body) - o, "%sf%d=%d", i ? "," : "", i % 150,
				      i);
	body[o] = 0;
	CHECK_EQ_INT(parse(body), 0);
	CHECK_EQ_INT(res.points, 150);
	s = find("j", MDL_RANK_JOB, "m.f10");
	CHECK(s && s->pts.value[0] == dbits(160.0));
	s = find("j", MDL_RANK_JOB, "m.f149");
	CHECK(s && s->pts.value[0] == dbits(149.0));
	EXPECT_ERR("m,job=j,a=1,a=2 v=1", "a", "duplicate tag");
	EXPECT_ERR("m,job=j,job=k v=1", "job", "duplicate tag");
	EXPECT_ERR("m,rank=1,job=j,rank=1 v=1", "rank", "duplicate tag");
}

static void test_mapping(void)
{
	/* extra tags in sorted key order; "value" field is the measurement */
	CHECK_EQ_INT(parse("gpu,z=1,job=j,a=2,rank=7 value=1,temp=60i\n"), 0);
	CHECK(find("j", 7, "gpu;a=2;z=1"));
	CHECK(find("j", 7, "gpu.temp;a=2;z=1"));
	/* injectivity: differing only in an extra tag value */
	CHECK_EQ_INT(parse("m,job=j,host=a;b\\=c x=1\nm,job=j,host=a,b=c x=2\n"
			   "m,job=j,host=a%3Bb%3Dc x=3\nm,job=j,host=b x=4\n"),
		     0);
	CHECK_EQ_INT(mdl_batch_nseries(batch), 4);
	CHECK(find("j", MDL_RANK_JOB, "m.x;host=a%3Bb%3Dc"));
	CHECK(find("j", MDL_RANK_JOB, "m.x;b=c;host=a"));
	CHECK(find("j", MDL_RANK_JOB, "m.x;host=a%253Bb%253Dc"));
	/* a field literally named "x;host=b" cannot collide with tag host=b */
	CHECK_EQ_INT(parse("m,job=j x;host\\=b=1\n"), 0);
	CHECK(find("j", MDL_RANK_JOB, "m.x%3Bhost%3Db"));
	/* step and attempt forms */
	CHECK_EQ_INT(parse("m,job=j,rank=0 v=1,step=12i,attempt=2i\nm,job=j,rank=0 v=2,step=13,"
			   "attempt=3u\nm,job=j,rank=0 v=3,step=14u,attempt=4.0\n"),
		     0);
	CHECK_EQ_INT(res.lines_ok, 3);
	const struct mdl_batch_series *s = find("j", 0, "m.v");
	CHECK(s && s->pts.n == 3);
	if (s && s->pts.n == 3) {
		CHECK(s->pts.step[0] == 12 && s->pts.step[1] == 13 && s->pts.step[2] == 14);
		CHECK(s->pts.attempt[0] == 2 && s->pts.attempt[1] == 3 && s->pts.attempt[2] == 4);
	}
	EXPECT_ERR("m,job=j v=1,step=12.5", "step", "whole number");
	EXPECT_ERR("m,job=j v=1,step=-1i", "step", "negative");
	EXPECT_ERR("m,job=j v=1,step=-1", "step", "negative");
	EXPECT_ERR("m,job=j v=1,step=\"3\"", "step", "integer");
	EXPECT_ERR("m,job=j v=1,step=true", "step", "integer");
	EXPECT_ERR("m,job=j v=1,step=1e300", "step", "too large");
	EXPECT_ERR("m,job=j v=1,attempt=4294967296i", "attempt", "too large");
	EXPECT_ERR("m,job=j step=1i", "", "no numeric field");
	/* job and rank */
	EXPECT_ERR("m v=1", "", "missing tag job");
	opt.default_job = "";
	EXPECT_ERR("m v=1", "", "missing tag job");
	opt.default_job = "dflt";
	CHECK_EQ_INT(parse("m v=1\nm,rank=job v=2\nm,rank=0 v=3\nm,rank=2147483647 v=4\n"), 0);
	s = find("dflt", MDL_RANK_JOB, "m.v");
	CHECK(s && s->pts.n == 2);
	CHECK(find("dflt", 0, "m.v") && find("dflt", MDL_RANK_MAX, "m.v"));
	opt.default_job = NULL;
	EXPECT_ERR("m,job=a/b v=1", "job", "[A-Za-z0-9._-]");
	const char *ranks[] = {"01", "-1", "2147483648", "x", "1.0", "99999999999", "JOB", "+1"};
	for (size_t i = 0; i < sizeof(ranks) / sizeof(ranks[0]); i++) {
		char body[128];
		snprintf(body, sizeof(body), "m,job=j,rank=%s v=1", ranks[i]);
		EXPECT_ERR(body, "rank", "rank must be");
	}
	/* a name over 256 bytes */
	char body[1024];
	snprintf(body, sizeof(body), "m,job=j,t=%0251d v=1", 0);
	EXPECT_ERR(body, "v", "metric name would be 257 bytes");
	snprintf(body, sizeof(body), "m,job=j,t=%0260d v=1", 0);
	EXPECT_ERR(body, "t", "metric name would be");
	snprintf(body, sizeof(body), "m,job=j f%0260d=1", 0);
	char key[80];
	snprintf(key, sizeof(key), "f%059d...", 0); /* a long key is cut in err.field */
	EXPECT_ERR(body, key, "metric name would be");
	snprintf(body, sizeof(body), "m,job=j,t=%0250d v=1", 0); /* exactly 256 */
	CHECK_EQ_INT(parse(body), 0);
	CHECK_EQ_INT(res.points, 1);
	/* a bad line adds nothing, even when only its last field is bad */
	CHECK_EQ_INT(parse("m,job=j a=1,b=2,c=zz\n"), 0);
	CHECK_EQ_INT(mdl_batch_points(batch), 0);
	snprintf(body, sizeof(body), "m,job=j a=1,f%0260d=1", 0);
	CHECK_EQ_INT(parse(body), 0);
	CHECK_EQ_INT(mdl_batch_points(batch), 0);
}

static void test_logs(void)
{
	CHECK_EQ_INT(
	    parse("rankdb_log,job=j,rank=2,level=warn,host=h message=\"NCCL \\\"timeout\\\" "
		  "\\\\n\",step=5i,code=3i,ok=true,lat=1.5,half=.5,big=18446744073709551615u,"
		  "note=\"x\\ty\",attempt=1i 1000\n"),
	    0);
	CHECK_EQ_INT(res.lines_ok, 1);
	CHECK_EQ_INT(res.events, 1);
	CHECK_EQ_INT(mdl_events_count(events), 1);
	const struct mdl_event *e = mdl_events_at(events, 0);
	CHECK(e != NULL);
	if (e) {
		const char *f =
		    "{\"big\":18446744073709551615,\"code\":3,\"half\":0.5,\"host\":\"h\","
		    "\"lat\":1.5,\"note\":\"x\\\\ty\",\"ok\":true}";
		CHECK_EQ_INT(e->kind, MDL_EV_LOG);
		CHECK_EQ_INT(e->level, MDL_LEVEL_WARN);
		CHECK_EQ_INT(e->rank, 2);
		CHECK_EQ_INT(e->step, 5);
		CHECK_EQ_INT(e->attempt, 1);
		CHECK_EQ_INT(e->ts_ns, 1000);
		CHECK(e->text_len == 17 && memcmp(e->text, "NCCL \"timeout\" \\n", 17) == 0);
		CHECK(e->fields_len == strlen(f) && memcmp(e->fields, f, e->fields_len) == 0);
		if (e->fields_len != strlen(f) || memcmp(e->fields, f, e->fields_len) != 0)
			fprintf(stderr, "  fields %.*s\n", (int)e->fields_len, e->fields);
		CHECK(e->job_len == 1 && e->job[0] == 'j');
	}
	CHECK_EQ_INT(parse("rankdb_log,job=j message=\"caf\xc3\xa9\"\n"), 0);
	e = mdl_events_at(events, 0);
	CHECK(e && e->level == MDL_LEVEL_INFO && e->rank == MDL_RANK_JOB &&
	      e->step == MDL_STEP_NONE && e->fields_len == 2 && e->ts_ns == DEFAULT_TS);
	CHECK_EQ_INT(mdl_batch_points(batch), 0);
	EXPECT_ERR("rankdb_log,job=j msg=\"x\"", "message", "needs a string field message");
	EXPECT_ERR("rankdb_log,job=j message=1", "message", "needs a string field message");
	EXPECT_ERR("rankdb_log,job=j,level=loud message=\"x\"", "level", "unknown level");
	EXPECT_ERR("rankdb_log,job=j,host=h message=\"x\",host=1", "host", "same name as a tag");
	EXPECT_ERR("rankdb_log,job=j message=\"\xff\"", "message", "UTF-8");
	EXPECT_ERR("rankdb_log,job=j message=\"x\",k=\"\xc0\xaf\"", "k", "UTF-8");
	EXPECT_ERR("rankdb_log,job=j message=\"x\",step=-2i", "step", "negative");
}

static void test_spans(void)
{
	CHECK_EQ_INT(parse("rankdb_span,job=j,rank=1,name=forward,host=h step=10i,duration_ns="
			   "12345i,attempt=2i 5000\n"),
		     0);
	CHECK_EQ_INT(res.events, 1);
	const struct mdl_event *e = mdl_events_at(events, 0);
	CHECK(e && e->kind == MDL_EV_SPAN && e->rank == 1 && e->step == 10 &&
	      e->duration_ns == 12345 && e->ts_ns == 5000 && e->attempt == 2 && e->text_len == 7 &&
	      memcmp(e->text, "forward", 7) == 0 && e->fields_len == 0);
	CHECK_EQ_INT(parse("rankdb_span,job=j,name=all\\ reduce step=1,duration_ns=0\n"), 0);
	e = mdl_events_at(events, 0);
	CHECK(e && e->text_len == 10 && memcmp(e->text, "all reduce", 10) == 0);
	EXPECT_ERR("rankdb_span,job=j step=1i,duration_ns=1i", "name", "needs a tag name");
	EXPECT_ERR("rankdb_span,job=j,name=f step=1i", "duration_ns", "needs an integer");
	EXPECT_ERR("rankdb_span,job=j,name=f step=1i,duration_ns=-1i", "duration_ns", "negative");
	EXPECT_ERR("rankdb_span,job=j,name=f duration_ns=1i", "step",
		   "needs an integer field step");
	EXPECT_ERR("rankdb_span,job=j,name=f step=1i,duration_ns=1i,x=1", "x", "takes only");
	/* events are refused when the caller gives no event batch */
	mdl_batch_reset(batch);
	CHECK_EQ_INT(ing_lp_parse("rankdb_span,job=j,name=f step=1i,duration_ns=1i", 47, &opt,
				  batch, NULL, &res),
		     0);
	CHECK_EQ_INT(res.lines_bad, 1);
}

static void test_partial(void)
{
	CHECK_EQ_INT(parse("# header\n\nm,job=j v=1\nm,job=j v=oops\n\nm,job=j v=3\nm,job=j w=\n"
			   "m,job=j v=5 1\n"),
		     0);
	CHECK_EQ_INT(res.lines_ok, 3);
	CHECK_EQ_INT(res.lines_bad, 2);
	CHECK_EQ_INT(res.points, 3);
	CHECK_EQ_INT(mdl_batch_points(batch), 3);
	CHECK_EQ_INT(res.nerrors, 2);
	CHECK(res.errors[0].record == 1 && res.errors[0].line == 4 &&
	      strcmp(res.errors[0].field, "v") == 0 && strstr(res.errors[0].msg, "oops"));
	CHECK(res.errors[1].record == 3 && res.errors[1].line == 7 &&
	      strcmp(res.errors[1].field, "w") == 0);
	/* errors beyond ING_LP_MAX_ERRORS are counted, not kept */
	char body[4096] = "";
	for (int i = 0; i < 40; i++)
		strcat(body, i % 2 ? "m,job=j v=1\n" : "bad\n");
	CHECK_EQ_INT(parse(body), 0);
	CHECK_EQ_INT(res.lines_bad, 20);
	CHECK_EQ_INT(res.lines_ok, 20);
	CHECK_EQ_INT(res.nerrors, ING_LP_MAX_ERRORS);
	CHECK_EQ_INT(res.errors[ING_LP_MAX_ERRORS - 1].line, 2 * ING_LP_MAX_ERRORS - 1);
	/* echoes are short and printable */
	char junk[600];
	memset(junk, '\x01', sizeof(junk));
	memcpy(junk, "m,job=j v=", 10);
	junk[sizeof(junk) - 1] = 0;
	CHECK_EQ_INT(parse(junk), 0);
	CHECK(res.nerrors == 1 && printable(res.errors[0].msg) &&
	      strstr(res.errors[0].msg, "\\x01...") && strlen(res.errors[0].msg) < 255);
}

static void test_limits(void)
{
	opt.max_line_bytes = 20;
	EXPECT_ERR("m,job=j v=1,w=2,x=3,y=4", "", "max_line_bytes");
	CHECK_EQ_INT(parse("m,job=j v=1\r\n"), 0); /* 11 bytes + CRLF */
	CHECK_EQ_INT(res.lines_ok, 1);
	opt.max_line_bytes = 1 << 20;
	opt.max_fields_per_line = 3;
	CHECK_EQ_INT(parse("m,job=j a=1,b=2,c=3\n"), 0);
	CHECK_EQ_INT(res.lines_ok, 1);
	EXPECT_ERR("m,job=j a=1,b=2,c=3,d=4", "", "max_fields_per_line");
	opt.max_fields_per_line = 1024;
	opt.max_tags_per_line = 2;
	CHECK_EQ_INT(parse("m,job=j,rank=1 a=1\n"), 0);
	CHECK_EQ_INT(res.lines_ok, 1);
	EXPECT_ERR("m,job=j,rank=1,x=y a=1", "x", "max_tags_per_line");
	opt.max_tags_per_line = 64;
	/* many extra tags go through the heap and qsort */
	char body[2048];
	size_t o = (size_t)snprintf(body, sizeof(body), "m,job=j");
	for (int i = 40; i > 0; i--)
		o += (size_t)snprintf(body + o, sizeof(body) - o, ",t%c=%d", 'a' + i % 26, i);
	snprintf(body + o, sizeof(body) - o, " v=1");
	EXPECT_ERR(body, "tb", "duplicate tag");
	/* a full batch stops the parse with RDB_ELIMIT */
	struct mdl_batch *small;
	CHECK_EQ_INT(mdl_batch_new(3, 10, &small), 0);
	const char *b3 = "m,job=j a=1\nm,job=j a=2,b=3\nm,job=j c=4\nm,job=j d=5\n";
	CHECK_EQ_INT(ing_lp_parse(b3, strlen(b3), &opt, small, events, &res), RDB_ELIMIT);
	CHECK_EQ_INT(res.lines_ok, 2);
	CHECK_EQ_INT(res.points, 3);
	CHECK_EQ_INT(mdl_batch_points(small), 3);
	CHECK(res.nerrors == 1 && res.errors[0].line == 3 && strstr(res.errors[0].msg, "split"));
	mdl_batch_free(small);
}

/* Every prefix of a valid body parses without crashing, and the counts add up. */
static void test_prefixes(void)
{
	const char *body =
	    "train,job=run-1,rank=3,host=n\\ 1 loss=2.5,lr=3e-4,ok=t,n=7i,u=9u,s=\"a \\\"b\\\" c\","
	    "step=100i,attempt=1i 1700000000000000000\r\n"
	    "# comment\n\n"
	    "rankdb_log,job=run-1,rank=0,level=error message=\"boom, x=1\",step=3i,code=2i 5\n"
	    "rankdb_span,job=run-1,rank=0,name=backward step=3i,duration_ns=99i 6\n"
	    "gpu,job=run-1,rank=1 value=71.5,power=250i\n";
	size_t n = strlen(body);
	for (size_t i = 0; i <= n; i++) {
		int rc = parse_n(body, i);
		CHECK_EQ_INT(rc, 0);
		if (rc != 0 || res.points != mdl_batch_points(batch) ||
		    res.events != mdl_events_count(events) || res.nerrors > res.lines_bad) {
			CHECK(false);
			fprintf(stderr, "  prefix %zu\n", i);
			break;
		}
	}
	CHECK_EQ_INT(parse_n(body, n), 0);
	CHECK_EQ_INT(res.lines_ok, 4);
	CHECK_EQ_INT(res.points, 7);
	CHECK_EQ_INT(res.events, 2);
	CHECK_EQ_INT(res.string_fields_skipped, 1);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Prints parse throughput for a realistic body: 64 ranks x 32 metrics, one
 * line per rank-step. Timing is printed, never asserted. */
static void test_throughput(void)
{
	enum { RANKS = 64, METRICS = 32, STEPS = 40 };
	size_t cap = (size_t)RANKS * STEPS * 1024, o = 0;
	char *body = malloc(cap);
	for (int s = 0; s < STEPS; s++) {
		for (int r = 0; r < RANKS; r++) {
			o += (size_t)snprintf(body + o, cap - o, "train,job=llama-7b,rank=%d ", r);
			for (int m = 0; m < METRICS; m++)
				o += (size_t)snprintf(body + o, cap - o, "m%02d=%.9g,", m,
						      2.5 + m * 0.0013 + r * 1e-5 + s * 1e-3);
			o += (size_t)snprintf(body + o, cap - o, "step=%di %lld\n", s,
					      1700000000000000000LL + s * 1000000000LL + r);
		}
	}
	struct mdl_batch *big;
	CHECK_EQ_INT(mdl_batch_new((size_t)RANKS * METRICS * STEPS, RANKS * METRICS, &big), 0);
	int reps = 5;
	double best = 1e9;
	for (int i = 0; i < reps; i++) {
		mdl_batch_reset(big);
		double t0 = now_s();
		int rc = ing_lp_parse(body, o, &opt, big, events, &res);
		double dt = now_s() - t0;
		CHECK_EQ_INT(rc, 0);
		if (dt < best)
			best = dt;
	}
	CHECK_EQ_INT(res.points, RANKS * METRICS * STEPS);
	fprintf(stderr,
		"throughput: %zu bytes, %d lines, %d points in %.2f ms: %.2f M lines/s, "
		"%.1f M points/s, %.0f MB/s (parse + mdl_batch_add)\n",
		o, RANKS * STEPS, RANKS * METRICS * STEPS, best * 1e3, RANKS * STEPS / best / 1e6,
		RANKS * METRICS * STEPS / best / 1e6, (double)o / best / 1e6);
	mdl_batch_free(big);
	free(body);
}

/* The echo both parsers quote input with: bounded in input bytes (JSON)
 * and in output characters (line protocol), an escape never cut. */
static void test_echo(void)
{
	static const char mixed[5] = {'a', 'b', 1, 'c', 'd'};
	char out[64];
	CHECK(strcmp(ing_echo(out, mixed, 5, 5, 60), "ab\\x01cd") == 0);
	CHECK(strcmp(ing_echo(out, "abcdef", 6, 3, 60), "abc...") == 0);
	CHECK(strcmp(ing_echo(out, "abcd", 4, 4, 4), "abcd") == 0);
	CHECK(strcmp(ing_echo(out, "abcde", 5, 5, 4), "abcd...") == 0);
	CHECK(strcmp(ing_echo(out, mixed, 5, 5, 4), "ab...") == 0);
	CHECK(strcmp(ing_echo(out, "", 0, 0, 0), "") == 0);
}

int main(void)
{
	if (mdl_batch_new(100000, 10000, &batch) != 0 ||
	    mdl_events_new(1000, 1 << 20, &events) != 0)
		return 1;
	ing_lp_options_default(&opt);
	opt.default_ts_ns = DEFAULT_TS;
	RUN(test_basic);
	RUN(test_values);
	RUN(test_strings);
	RUN(test_key_bytes);
	RUN(test_escapes);
	RUN(test_timestamps);
	RUN(test_duplicates);
	RUN(test_mapping);
	RUN(test_logs);
	RUN(test_spans);
	RUN(test_partial);
	RUN(test_limits);
	RUN(test_echo);
	RUN(test_prefixes);
	RUN(test_throughput);
	mdl_batch_free(batch);
	mdl_events_free(events);
	return check_summary("lineproto");
}
