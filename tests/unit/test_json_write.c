/* test_json_write.c - unit tests for ingest/json_write.c (ing_json_parse,
 * ing_json_parse_all): both body forms, every value form with exact bits,
 * log and span records into events (every field, the canonical fields text
 * byte for byte), mixes of record types, UTF-8 validation, every error with
 * its record/line/field, limits, and every prefix of valid bodies. */
#include "ingest/ing.h"
#include "common/rdb_err.h"
#include "tests/unit/check.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_TS 777

static struct mdl_batch *batch;
static struct ing_limits lim;
static struct ing_error err;
static size_t nrec;

/* Parses s from an exact-size heap copy (so ASan sees any overread). */
static int parse_n(const char *s, size_t n)
{
	char *copy = malloc(n ? n : 1);
	if (n)
		memcpy(copy, s, n);
	mdl_batch_reset(batch);
	nrec = 12345;
	int rc = ing_json_parse(copy, n, &lim, DEFAULT_TS, batch, &err, &nrec);
	free(copy);
	return rc;
}

static int parse(const char *s)
{
	return parse_n(s, strlen(s));
}

/* The series (job, rank, metric) in the batch, or NULL. */
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

/* Parses a one-metric record with the given value text; returns its bits. */
static uint64_t value_of(const char *v)
{
	char body[2048];
	snprintf(body, sizeof(body), "{\"job\":\"j\",\"rank\":0,\"metrics\":{\"m\":%s}}", v);
	int rc = parse(body);
	if (rc != 0) {
		fprintf(stderr, "value %s: %s\n", v, err.msg);
		CHECK_EQ_INT(rc, 0);
		return 0;
	}
	const struct mdl_batch_series *s = find("j", 0, "m");
	CHECK(s && s->pts.n == 1);
	return s ? s->pts.value[0] : 0;
}

static bool printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
			return false;
	return true;
}

/* Checks the error of a parse that returned got. */
static void check_err(int line_no, const char *body, int got, int rc, long record, long line,
		      const char *field, const char *substr)
{
	bool ok = got == rc && err.record == record && err.line == line &&
		  strcmp(err.field, field) == 0 && strstr(err.msg, substr) != NULL && err.msg[0] &&
		  printable(err.msg) && printable(err.field) && nrec == 12345;
	CHECK(ok);
	if (!ok)
		fprintf(stderr,
			"  (test line %d) body %.160s\n  got rc %d record %ld line %ld field '%s' "
			"msg '%s'\n  want rc %d record %ld line %ld field '%s' msg ~'%s'\n",
			line_no, body, got, err.record, err.line, err.field, err.msg, rc, record,
			line, field, substr);
}

/* Parses body and checks the error it gives. */
static void expect_err_at(int line_no, const char *body, size_t n, int rc, long record, long line,
			  const char *field, const char *substr)
{
	check_err(line_no, body, parse_n(body, n), rc, record, line, field, substr);
}

#define EXPECT_ERR(body, rc, rec, line, field, substr)                                             \
	expect_err_at(__LINE__, body, strlen(body), rc, rec, line, field, substr)

#define REC(m) "{\"job\":\"j\",\"rank\":0,\"metrics\":{" m "}}"

static void test_array(void)
{
	const char *body =
	    " [\n"
	    " {\"job\":\"run-1\",\"rank\":3,\"step\":10,\"timestamp\":1700000000000000000,"
	    "\"attempt\":2,\"type\":\"metrics\",\"metrics\":{\"loss\":1.5,\"lr\":0.001}},\n"
	    " {\"job\":\"run-1\",\"rank\":4,\"metrics\":{\"loss\":2}}\n"
	    "]\n";
	CHECK_EQ_INT(parse(body), 0);
	CHECK_EQ_INT(nrec, 2);
	CHECK_EQ_INT(mdl_batch_points(batch), 3);
	CHECK_EQ_INT(mdl_batch_nseries(batch), 3);
	const struct mdl_batch_series *s = find("run-1", 3, "loss");
	CHECK(s && s->pts.n == 1);
	if (s) {
		CHECK_EQ_INT(s->pts.ts_ns[0], 1700000000000000000LL);
		CHECK_EQ_INT(s->pts.step[0], 10);
		CHECK_EQ_INT(s->pts.attempt[0], 2);
		CHECK(s->pts.value[0] == dbits(1.5));
	}
	s = find("run-1", 4, "loss");
	CHECK(s && s->pts.n == 1);
	if (s) {
		CHECK_EQ_INT(s->pts.ts_ns[0], DEFAULT_TS);
		CHECK(s->pts.step[0] == MDL_STEP_NONE);
		CHECK_EQ_INT(s->pts.attempt[0], 0);
		CHECK(s->pts.value[0] == dbits(2.0));
	}
	CHECK(find("run-1", 3, "lr") != NULL);
	/* BOM is skipped; the error struct is cleared on success. */
	CHECK_EQ_INT(parse("\xef\xbb\xbf[" REC("\"a\":1") "]"), 0);
	CHECK_EQ_INT(err.record, -1);
	CHECK_EQ_INT(err.msg[0], 0);
	/* Same job/rank/metric in two records: one series, arrival order. */
	CHECK_EQ_INT(parse("[{\"job\":\"j\",\"rank\":0,\"step\":2,\"metrics\":{\"a\":1}},"
			   "{\"job\":\"j\",\"rank\":0,\"step\":1,\"metrics\":{\"a\":2}}]"),
		     0);
	s = find("j", 0, "a");
	CHECK(s && s->pts.n == 2 && s->pts.step[0] == 2 && s->pts.step[1] == 1);
	CHECK(err.msg[0] == 0);
	/* nrecords may be NULL. */
	CHECK_EQ_INT(ing_json_parse("[" REC("\"a\":1") "]", strlen("[" REC("\"a\":1") "]"), &lim, 0,
				    batch, &err, NULL),
		     0);
}

static void test_ndjson(void)
{
	const char *body = "\r\n" REC(
	    "\"a\":1") "\r\n"
		       "   \t\r\n"
		       "\n"
		       "{\"job\":\"j\",\"rank\":1,\"metrics\":{\"a\":2}}  \r\n" REC("\"b\":3");
	CHECK_EQ_INT(parse(body), 0);
	CHECK_EQ_INT(nrec, 3);
	CHECK_EQ_INT(mdl_batch_points(batch), 3);
	CHECK(find("j", 1, "a") != NULL);
	CHECK(find("j", 0, "b") != NULL);
	CHECK_EQ_INT(parse(REC("\"a\":1") "\n"), 0);
	CHECK_EQ_INT(nrec, 1);
	/* A record may span lines; errors then give the right line. */
	CHECK_EQ_INT(parse("{\"job\":\"j\",\n\"rank\":0,\n\"metrics\":{\"a\":1}}\n" REC("\"a\":2")),
		     0);
	CHECK_EQ_INT(nrec, 2);
	EXPECT_ERR(REC("\"a\":1") "\r\n\r\n" REC("\"a\":1") "\n{\"job\":\"j\",\"rank\":-1}",
		   RDB_EINVAL, 2, 4, "rank", "got -1");
	EXPECT_ERR(REC("\"a\":1") " " REC("\"a\":1"), RDB_EINVAL, 0, 1, "", "one record per line");
	EXPECT_ERR(REC("\"a\":1") "\r" REC("\"a\":1"), RDB_EINVAL, 0, 1, "", "line break");
	EXPECT_ERR(REC("\"a\":1") ",\n" REC("\"a\":1"), RDB_EINVAL, 0, 1, "", "line break");
	EXPECT_ERR(REC("\"a\":1") "\n[" REC("\"a\":1") "]", RDB_EINVAL, 1, 2, "",
		   "record must be a JSON object, got an array");
	EXPECT_ERR(REC("\"a\":1") "\nx", RDB_EINVAL, 1, 2, "", "record must be a JSON object");
}

static void test_key_orders(void)
{
	const char *members[] = {"\"job\":\"j\"", "\"rank\":5", "\"step\":7",
				 "\"metrics\":{\"x\":1,\"y\":2}"};
	int perm[4] = {0, 1, 2, 3};
	int count = 0;
	/* All 24 permutations (Heap's algorithm, iterative). */
	int c[4] = {0, 0, 0, 0};
	for (int i = 0;;) {
		char body[256];
		snprintf(body, sizeof(body), "[{%s,%s,%s,%s}]", members[perm[0]], members[perm[1]],
			 members[perm[2]], members[perm[3]]);
		int rc = parse(body);
		CHECK_EQ_INT(rc, 0);
		const struct mdl_batch_series *s = find("j", 5, "y");
		CHECK(s && s->pts.n == 1 && s->pts.step[0] == 7 && s->pts.value[0] == dbits(2));
		count++;
		while (i < 4 && c[i] >= i) {
			c[i] = 0;
			i++;
		}
		if (i >= 4)
			break;
		int j = i % 2 ? c[i] : 0, t = perm[j];
		perm[j] = perm[i];
		perm[i] = t;
		c[i]++;
		i = 0;
	}
	CHECK_EQ_INT(count, 24);
}

static void test_values(void)
{
	CHECK(value_of("1") == dbits(1.0));
	CHECK(value_of("-0") == 0x8000000000000000ull);
	CHECK(value_of("-0.0") == 0x8000000000000000ull);
	CHECK(value_of("-0e5") == 0x8000000000000000ull);
	CHECK(value_of("0") == 0);
	CHECK(value_of("0.0") == 0);
	CHECK(value_of("null") == MDL_VALUE_NULL_BITS);
	CHECK(value_of("NaN") == MDL_VALUE_NAN_BITS);
	CHECK(value_of("Infinity") == 0x7ff0000000000000ull);
	CHECK(value_of("-Infinity") == 0xfff0000000000000ull);
	CHECK(value_of("\"NaN\"") == MDL_VALUE_NAN_BITS);
	CHECK(value_of("\"Inf\"") == 0x7ff0000000000000ull);
	CHECK(value_of("\"+Inf\"") == 0x7ff0000000000000ull);
	CHECK(value_of("\"Infinity\"") == 0x7ff0000000000000ull);
	CHECK(value_of("\"+Infinity\"") == 0x7ff0000000000000ull);
	CHECK(value_of("\"-Inf\"") == 0xfff0000000000000ull);
	CHECK(value_of("\"-Infinity\"") == 0xfff0000000000000ull);
	CHECK(value_of("\"0x7ff8000000000123\"") == 0x7ff8000000000123ull);
	CHECK(value_of("\"0xDEADbeef00000001\"") == 0xdeadbeef00000001ull);
	CHECK(value_of("\"0x0000000000000000\"") == 0);
	/* Escapes in value strings decode first. */
	CHECK(value_of("\"\\u004eaN\"") == MDL_VALUE_NAN_BITS);
	CHECK(value_of("5e-324") == 1);
	CHECK(value_of("4.9406564584124654e-324") == 1);
	CHECK(value_of("2.2250738585072014e-308") == 0x0010000000000000ull);
	CHECK(value_of("1.7976931348623157e308") == 0x7fefffffffffffffull);
	CHECK(value_of("-1.7976931348623157e308") == 0xffefffffffffffffull);
	CHECK(value_of("1e-400") == 0);
	CHECK(value_of("-1e-400") == 0x8000000000000000ull);
	CHECK(value_of("0.1") == dbits(0.1));
	CHECK(value_of("0.1") == 0x3fb999999999999aull);
	CHECK(value_of("1E2") == dbits(100));
	CHECK(value_of("1e+2") == dbits(100));
	CHECK(value_of("12345678901234567890") == dbits(12345678901234567890.0));
	CHECK(value_of("9007199254740993") == dbits(9007199254740992.0));
	CHECK(value_of("2.3456780910491943") == dbits(strtod("2.3456780910491943", NULL)));
	/* A long exact decimal expansion goes through strtod. */
	CHECK(value_of("0.1000000000000000055511151231257827021181583404541015625") == dbits(0.1));
	CHECK(value_of("0e99999999999") == 0);
}

/* Random decimals in many shapes give exactly strtod's bits. */
static void test_values_vs_strtod(void)
{
	uint64_t x = 88172645463325252ull;
	int bad = 0;
	for (int i = 0; i < 20000; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		char num[64];
		switch (i % 5) {
		case 0: {
			double d;
			uint64_t u = x;
			memcpy(&d, &u, sizeof(d));
			if (isnan(d) || isinf(d))
				continue;
			snprintf(num, sizeof(num), "%.17g", d);
			break;
		}
		case 1:
			snprintf(num, sizeof(num), "%llu.%llue%d",
				 (unsigned long long)(x % 100000000), (unsigned long long)(x >> 40),
				 (int)(x % 61) - 30);
			break;
		case 2:
			snprintf(num, sizeof(num), "%.9g",
				 (double)(float)((double)(x >> 11) / 9e15));
			break;
		case 3: /* more than 19 significant digits */
			snprintf(num, sizeof(num), "%llu%llu.%llue-%d", (unsigned long long)x,
				 (unsigned long long)(x >> 20), (unsigned long long)(x % 1000),
				 (int)(x % 40));
			break;
		default:
			snprintf(num, sizeof(num), "-%llu", (unsigned long long)(x >> (x % 64)));
			break;
		}
		if (value_of(num) != dbits(strtod(num, NULL)))
			bad++;
	}
	CHECK_EQ_INT(bad, 0);
}

static void test_fields(void)
{
	CHECK_EQ_INT(parse("[{\"job\":\"j\",\"rank\":\"job\",\"step\":null,\"timestamp\":null,"
			   "\"attempt\":null,\"metrics\":{\"a\":1}}]"),
		     0);
	const struct mdl_batch_series *s = find("j", MDL_RANK_JOB, "a");
	CHECK(s && s->pts.step[0] == MDL_STEP_NONE && s->pts.ts_ns[0] == DEFAULT_TS &&
	      s->pts.attempt[0] == 0);
	CHECK_EQ_INT(parse("{\"job\":\"j\",\"rank\":2147483647,\"step\":9223372036854775807,"
			   "\"timestamp\":-9223372036854775808,\"attempt\":4294967295,"
			   "\"metrics\":{\"a\":1}}"),
		     0);
	s = find("j", MDL_RANK_MAX, "a");
	CHECK(s && s->pts.step[0] == INT64_MAX && s->pts.ts_ns[0] == INT64_MIN &&
	      s->pts.attempt[0] == UINT32_MAX);
	CHECK_EQ_INT(parse("{\"job\":\"j\",\"rank\":-0,\"step\":0,\"timestamp\":0,"
			   "\"metrics\":{\"a\":1}}"),
		     0);
	s = find("j", 0, "a");
	CHECK(s && s->pts.step[0] == 0 && s->pts.ts_ns[0] == 0);
	/* Escapes in job and metric names. */
	CHECK_EQ_INT(parse("{\"j\\u006fb\":\"\\u006a\\/x\",\"rank\":0,\"metrics\":"
			   "{\"\\u0041\\/b\":1,\"c\\td\":2}}"),
		     RDB_EINVAL);
	CHECK_EQ_INT(
	    parse("{\"j\\u006fb\":\"\\u006a\",\"rank\":0,\"metrics\":{\"\\u0041\\/b\":1}}"), 0);
	CHECK(find("j", 0, "A/b") != NULL);
	/* Name length bounds. */
	char body[1024], name[300];
	memset(name, 'n', 256);
	name[256] = 0;
	snprintf(body, sizeof(body), REC("\"%s\":1"), name);
	CHECK_EQ_INT(parse(body), 0);
	name[256] = 'n';
	name[257] = 0;
	snprintf(body, sizeof(body), REC("\"%s\":1"), name);
	CHECK_EQ_INT(parse(body), RDB_EINVAL);
	CHECK(strstr(err.msg, "1 to 256") != NULL);
	name[128] = 0;
	snprintf(body, sizeof(body), "{\"job\":\"%s\",\"rank\":0,\"metrics\":{\"a\":1}}", name);
	CHECK_EQ_INT(parse(body), 0);
	name[128] = 'n';
	name[129] = 0;
	snprintf(body, sizeof(body), "{\"job\":\"%s\",\"rank\":0,\"metrics\":{\"a\":1}}", name);
	CHECK_EQ_INT(parse(body), RDB_EINVAL);
	CHECK(strstr(err.msg, "1 to 128") != NULL);
}

static void test_errors_body(void)
{
	EXPECT_ERR("", RDB_EINVAL, -1, 0, "", "no records: the body is empty");
	EXPECT_ERR(" \r\n\t\n", RDB_EINVAL, -1, 0, "", "no records");
	EXPECT_ERR("[]", RDB_EINVAL, -1, 0, "", "no records: the array is empty");
	EXPECT_ERR("\n[ \n ]\n", RDB_EINVAL, -1, 0, "", "no records");
	EXPECT_ERR("\xef\xbb\xbf", RDB_EINVAL, -1, 0, "", "no records");
	EXPECT_ERR("\xef\xbb\xbf\xef\xbb\xbf[]", RDB_EINVAL, -1, 1, "", "got '\\xef'");
	EXPECT_ERR("x", RDB_EINVAL, -1, 1, "", "JSON array");
	EXPECT_ERR("\"job\"", RDB_EINVAL, -1, 1, "", "JSON array");
	EXPECT_ERR("[" REC("\"a\":1") ",]", RDB_EINVAL, -1, 1, "", "trailing comma");
	EXPECT_ERR("[" REC("\"a\":1") ",\n\n]", RDB_EINVAL, -1, 3, "", "trailing comma");
	EXPECT_ERR("[" REC("\"a\":1") "] x", RDB_EINVAL, -1, 1, "", "nothing after");
	EXPECT_ERR("[" REC("\"a\":1") "][]", RDB_EINVAL, -1, 1, "", "nothing after");
	EXPECT_ERR("[" REC("\"a\":1") " " REC("\"a\":1") "]", RDB_EINVAL, -1, 1, "",
		   "',' or ']' after a record");
	EXPECT_ERR("[" REC("\"a\":1"), RDB_EINVAL, -1, 1, "", "truncated");
	EXPECT_ERR("[1]", RDB_EINVAL, 0, 1, "", "record must be a JSON object, got 1");
	EXPECT_ERR("[[]]", RDB_EINVAL, 0, 1, "", "got an array");
	EXPECT_ERR("[,]", RDB_EINVAL, 0, 1, "", "expected a value, got ','");
}

static void test_errors_record(void)
{
	EXPECT_ERR("[" REC("\"a\":1") ",\n{\"rank\":0,\"metrics\":{\"a\":1}}]", RDB_EINVAL, 1, 2,
		   "job", "no \"job\" field");
	EXPECT_ERR("[{\"job\":\"j\",\"metrics\":{\"a\":1}}]", RDB_EINVAL, 0, 1, "rank",
		   "no \"rank\"");
	EXPECT_ERR("[{\"job\":\"j\",\"rank\":1}]", RDB_EINVAL, 0, 1, "metrics", "no \"metrics\"");
	EXPECT_ERR("{}", RDB_EINVAL, 0, 1, "job", "no \"job\"");
	EXPECT_ERR("{\"job\":\"j\",\"rank\":0,\"metrics\":{\"a\":1},}", RDB_EINVAL, 0, 1, "",
		   "trailing comma");
	EXPECT_ERR(REC("\"a\":1,"), RDB_EINVAL, 0, 1, "metrics", "trailing comma");
	EXPECT_ERR(REC(""), RDB_EINVAL, 0, 1, "metrics", "at least one");
	EXPECT_ERR("{\"job\":\"j\",\"job\":\"k\"}", RDB_EINVAL, 0, 1, "job", "twice");
	EXPECT_ERR("{\"job\":\"j\",\"rank\":0,\"metrics\":{\"a\":1,\"a\":2}}", RDB_EINVAL, 0, 1,
		   "metrics.a", "twice");
	EXPECT_ERR("{\"job\":\"j\",\"host\":\"x\"}", RDB_EINVAL, 0, 1, "host",
		   "unknown field \"host\"");
	EXPECT_ERR("{\"Job\":\"j\"}", RDB_EINVAL, 0, 1, "Job", "unknown field \"Job\"");
	EXPECT_ERR("{job:\"j\"}", RDB_EINVAL, 0, 1, "", "field name in double quotes");
	EXPECT_ERR("{\"job\" \"j\"}", RDB_EINVAL, 0, 1, "job", "':'");
	EXPECT_ERR("{\"job\":\"j\" \"rank\":0}", RDB_EINVAL, 0, 1, "", "',' or '}'");
	EXPECT_ERR("{\"job\":\"a b\"}", RDB_EINVAL, 0, 1, "job", "[A-Za-z0-9._-]");
	EXPECT_ERR("{\"job\":\"\"}", RDB_EINVAL, 0, 1, "job", "got \"\"");
	EXPECT_ERR("{\"job\":7}", RDB_EINVAL, 0, 1, "job", "got 7");
	EXPECT_ERR("{\"job\":null}", RDB_EINVAL, 0, 1, "job", "got null");
	EXPECT_ERR("{\"rank\":-1}", RDB_EINVAL, 0, 1, "rank",
		   "rank must be an integer >= 0 (at most 2147483647) or \"job\", got -1");
	EXPECT_ERR("{\"rank\":1.0}", RDB_EINVAL, 0, 1, "rank", "got 1.0");
	EXPECT_ERR("{\"rank\":1e2}", RDB_EINVAL, 0, 1, "rank", "got 1e2");
	EXPECT_ERR("{\"rank\":+1}", RDB_EINVAL, 0, 1, "rank", "got +1");
	EXPECT_ERR("{\"rank\":01}", RDB_EINVAL, 0, 1, "rank", "got 01");
	EXPECT_ERR("{\"rank\":2147483648}", RDB_EINVAL, 0, 1, "rank", "got 2147483648");
	EXPECT_ERR("{\"rank\":\"1\"}", RDB_EINVAL, 0, 1, "rank", "got \"1\"");
	EXPECT_ERR("{\"rank\":null}", RDB_EINVAL, 0, 1, "rank", "got null");
	EXPECT_ERR("{\"rank\":{}}", RDB_EINVAL, 0, 1, "rank", "got an object");
	EXPECT_ERR("{\"step\":-1}", RDB_EINVAL, 0, 1, "step", "got -1");
	EXPECT_ERR("{\"step\":9223372036854775808}", RDB_EINVAL, 0, 1, "step", "from 0 to");
	EXPECT_ERR("{\"step\":99999999999999999999999}", RDB_EINVAL, 0, 1, "step", "from 0 to");
	EXPECT_ERR("{\"step\":1.5}", RDB_EINVAL, 0, 1, "step", "got 1.5");
	EXPECT_ERR("{\"attempt\":4294967296}", RDB_EINVAL, 0, 1, "attempt", "got 4294967296");
	EXPECT_ERR("{\"timestamp\":1.7e18}", RDB_EINVAL, 0, 1, "timestamp",
		   "timestamp must be an integer number of nanoseconds since the epoch; multiply "
		   "seconds by 1e9");
	EXPECT_ERR("{\"timestamp\":1700000000.5}", RDB_EINVAL, 0, 1, "timestamp", "1e9");
	EXPECT_ERR("{\"timestamp\":9223372036854775808}", RDB_EINVAL, 0, 1, "timestamp", "64-bit");
	EXPECT_ERR("{\"timestamp\":-9223372036854775809}", RDB_EINVAL, 0, 1, "timestamp", "64-bit");
	EXPECT_ERR("{\"timestamp\":\"2024-01-01\"}", RDB_EINVAL, 0, 1, "timestamp", "got \"2024");
	EXPECT_ERR("{\"type\":\"log\"}", RDB_EINVAL, 0, 1, "type",
		   "log records are not accepted here");
	EXPECT_ERR("{\"type\":\"span\"}", RDB_EINVAL, 0, 1, "type",
		   "span records are not accepted here");
	EXPECT_ERR("{\"type\":\"metric\"}", RDB_EINVAL, 0, 1, "type",
		   "type must be \"metrics\", \"log\" or \"span\", got \"metric\"");
	EXPECT_ERR("{\"metrics\":[1]}", RDB_EINVAL, 0, 1, "metrics", "got an array");
	EXPECT_ERR("{\"metrics\":1}", RDB_EINVAL, 0, 1, "metrics", "must be an object");
	EXPECT_ERR("{\"job\":\"j\",\n\"rank\":0,\n\"metrics\":{\n\"ok\":1,\n\"bad\":true}}",
		   RDB_EINVAL, 0, 5, "metrics.bad", "value of metric \"bad\" must be");
}

static void test_errors_values(void)
{
	static const char *bad[] = {"true",
				    "false",
				    "{}",
				    "[1]",
				    "\"\"",
				    "\"nan\"",
				    "\"inf\"",
				    "\"0x1\"",
				    "\"1.5\"",
				    "\"0x7ff800000000000g\"",
				    "\"0X7ff8000000000000\"",
				    "inf",
				    "nan",
				    "-NaN",
				    "+1",
				    "01",
				    "-",
				    "1.",
				    ".5",
				    "1e",
				    "1e+",
				    "0x10",
				    "1.5.2",
				    "Infinityx",
				    "--1",
				    "-infinity",
				    "Nan",
				    "NULL"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char body[256];
		snprintf(body, sizeof(body), REC("\"loss0\":1,\"loss\":%s"), bad[i]);
		EXPECT_ERR(body, RDB_EINVAL, 0, 1, "metrics.loss", "loss");
		snprintf(body, sizeof(body), REC("\"loss\":%s"), bad[i]);
		EXPECT_ERR(body, RDB_EINVAL, 0, 1, "metrics.loss", "value of metric \"loss\"");
	}
	EXPECT_ERR(REC("\"m\":1e400"), RDB_EINVAL, 0, 1, "metrics.m", "number out of range");
	EXPECT_ERR(REC("\"m\":-1e309"), RDB_EINVAL, 0, 1, "metrics.m", "number out of range");
	EXPECT_ERR(REC("\"m\":1.8e308"), RDB_EINVAL, 0, 1, "metrics.m", "out of range");
	char lng[1400];
	memset(lng, '1', 1200);
	lng[1200] = 0;
	char body[1500];
	snprintf(body, sizeof(body), REC("\"m\":%s"), lng);
	EXPECT_ERR(body, RDB_EINVAL, 0, 1, "metrics.m", "longer than 1100");
	lng[1090] = 0;
	snprintf(body, sizeof(body), REC("\"m\":0.%s"), lng);
	CHECK_EQ_INT(parse(body), 0);
	EXPECT_ERR(REC("\"m\":1 2"), RDB_EINVAL, 0, 1, "metrics", "',' or '}'");
	EXPECT_ERR(REC("\"m\" 1"), RDB_EINVAL, 0, 1, "metrics.m", "':'");
	EXPECT_ERR(REC("m:1"), RDB_EINVAL, 0, 1, "metrics", "metric name in double quotes");
	EXPECT_ERR(REC("\"a b\":1"), RDB_EINVAL, 0, 1, "metrics.a b", "printable ASCII");
	EXPECT_ERR(REC("\"\":1"), RDB_EINVAL, 0, 1, "metrics.", "1 to 256");
	EXPECT_ERR(REC("\"a,b\":1"), RDB_EINVAL, 0, 1, "metrics.a,b", "','");
	EXPECT_ERR(REC("\"\\u00e9\":1"), RDB_EINVAL, 0, 1, "metrics.\\xc3\\xa9", "printable ASCII");
	EXPECT_ERR(REC("\"\xc3\xa9\":1"), RDB_EINVAL, 0, 1, "metrics.\\xc3\\xa9", "printable");
	EXPECT_ERR(REC("\"\\ud83d\\ude00\":1"), RDB_EINVAL, 0, 1, "metrics.\\xf0\\x9f\\x98\\x80",
		   "printable");
	EXPECT_ERR(REC("\"\\ud83d\":1"), RDB_EINVAL, 0, 1, "metrics", "high surrogate");
	EXPECT_ERR(REC("\"\\ud83dx\":1"), RDB_EINVAL, 0, 1, "metrics", "high surrogate");
	EXPECT_ERR(REC("\"\\ud83d\\u0041\":1"), RDB_EINVAL, 0, 1, "metrics", "high surrogate");
	EXPECT_ERR(REC("\"\\ude00\":1"), RDB_EINVAL, 0, 1, "metrics", "lone low surrogate");
	EXPECT_ERR(REC("\"\\u12\":1"), RDB_EINVAL, 0, 1, "metrics", "4 hex digits");
	EXPECT_ERR(REC("\"\\x41\":1"), RDB_EINVAL, 0, 1, "metrics", "invalid escape '\\x'");
	EXPECT_ERR(REC("\"a\tb\":1"), RDB_EINVAL, 0, 1, "metrics", "control character 0x09");
	EXPECT_ERR("{\"job\":\"a\nb\"}", RDB_EINVAL, 0, 1, "job", "control character 0x0a");
	EXPECT_ERR("{\"job\":\"j\\", RDB_EINVAL, 0, 1, "job", "truncated");
	EXPECT_ERR(REC("\"m\":\"\\u0000\""), RDB_EINVAL, 0, 1, "metrics.m", "got \"\\u0000\"");
}

/* Echoed input is bounded and printable. */
static void test_error_echo(void)
{
	char body[4096];
	char key[2000];
	memset(key, 'k', sizeof(key) - 1);
	key[sizeof(key) - 1] = 0;
	snprintf(body, sizeof(body), "{\"%s\":1}", key);
	CHECK_EQ_INT(parse(body), RDB_EINVAL);
	CHECK(strlen(err.msg) < 200 && strstr(err.msg, "...") && printable(err.msg));
	snprintf(body, sizeof(body), REC("\"%s\":1"), key);
	CHECK_EQ_INT(parse(body), RDB_EINVAL);
	CHECK(strlen(err.field) < sizeof(err.field) && printable(err.field));
	CHECK(strncmp(err.field, "metrics.kkk", 11) == 0);
	snprintf(body, sizeof(body), REC("\"m\":\"%s\""), key);
	CHECK_EQ_INT(parse(body), RDB_EINVAL);
	CHECK(printable(err.msg) && strstr(err.msg, "...") != NULL);
	const char raw[] = "{\"rank\":\"\xff\x7f\"}";
	CHECK_EQ_INT(parse(raw), RDB_EINVAL);
	CHECK(printable(err.msg) && strstr(err.msg, "\"\\xff\\x7f\"") != NULL);
	CHECK_EQ_INT(parse("{\"rank\":\"\x01\"}"), RDB_EINVAL);
	CHECK(printable(err.msg) && strstr(err.msg, "0x01") != NULL);
	CHECK_EQ_INT(parse_n("{\"job\":\0}", 9), RDB_EINVAL);
	CHECK(printable(err.msg) && strstr(err.msg, "\\x00") != NULL);
}

static void test_limits(void)
{
	struct ing_limits saved = lim;
	lim.max_records = 2;
	CHECK_EQ_INT(parse("[" REC("\"a\":1") "," REC("\"a\":1") "]"), 0);
	EXPECT_ERR("[" REC("\"a\":1") "," REC("\"a\":1") ",\n" REC("\"a\":1") "]", RDB_ELIMIT, 2, 2,
		   "", "too many records in one request (max 2)");
	EXPECT_ERR(REC("\"a\":1") "\n" REC("\"a\":1") "\n" REC("\"a\":1"), RDB_ELIMIT, 2, 3, "",
		   "max 2");
	lim = saved;
	lim.max_metrics_per_record = 2;
	CHECK_EQ_INT(parse(REC("\"a\":1,\"b\":2")), 0);
	EXPECT_ERR(REC("\"a\":1,\"b\":2,\"c\":3"), RDB_ELIMIT, 0, 1, "metrics.c",
		   "more than 2 metrics");
	lim = saved;
	lim.max_depth = 2;
	CHECK_EQ_INT(parse(REC("\"a\":1")), 0);
	EXPECT_ERR("[" REC("\"a\":1") "]", RDB_ELIMIT, 0, 1, "metrics", "deeper than 2");
	lim = saved;

	struct mdl_batch *small;
	CHECK_EQ_INT(mdl_batch_new(3, 100, &small), 0);
	const char *body = "[" REC("\"a\":1,\"b\":2") ",\n" REC("\"c\":1,\"d\":2") "]";
	CHECK_EQ_INT(ing_json_parse(body, strlen(body), &lim, 0, small, &err, NULL), RDB_ELIMIT);
	CHECK_EQ_INT(err.record, 1);
	CHECK_EQ_INT(err.line, 2);
	CHECK(strstr(err.msg, "too many points in one request") != NULL);
	mdl_batch_free(small);
	CHECK_EQ_INT(mdl_batch_new(100, 3, &small), 0);
	CHECK_EQ_INT(ing_json_parse(body, strlen(body), &lim, 0, small, &err, NULL), RDB_ELIMIT);
	CHECK_EQ_INT(err.record, 1);
	mdl_batch_free(small);
}

/* Many metrics: the inline table, arena and duplicate set grow on the heap. */
static void test_many_metrics(void)
{
	size_t cap = 300000;
	char *body = malloc(cap);
	size_t n = (size_t)snprintf(body, cap, "{\"job\":\"j\",\"rank\":0,\"metrics\":{");
	for (int i = 0; i < 1024; i++)
		n += (size_t)snprintf(body + n, cap - n, "%s\"m\\u005f%d_%0100d\":%d", i ? "," : "",
				      i, 0, i);
	n += (size_t)snprintf(body + n, cap - n, "}}\n");
	CHECK_EQ_INT(parse_n(body, n), 0);
	CHECK_EQ_INT(mdl_batch_points(batch), 1024);
	char name[200];
	snprintf(name, sizeof(name), "m_%d_%0100d", 1000, 0);
	const struct mdl_batch_series *s = find("j", 0, name);
	CHECK(s && s->pts.value[0] == dbits(1000));
	/* A duplicate far apart is still found. */
	memcpy(body + n - 3, ",\"m_5_", 6);
	n = n - 3 + 6;
	n += (size_t)snprintf(body + n, cap - n, "%0100d\":1}}", 0);
	lim.max_metrics_per_record = 2048;
	CHECK_EQ_INT(parse_n(body, n), RDB_EINVAL);
	CHECK(strstr(err.msg, "twice") != NULL);
	ing_limits_default(&lim);
	free(body);
}

/* Every proper prefix of a valid body fails cleanly (or, for NDJSON, may
 * succeed at a record boundary); none may crash or overread. */
static void test_truncation(void)
{
	const char *bodies[] = {
	    "[{\"job\":\"r1\",\"rank\":\"job\",\"step\":null,\"timestamp\":-5,\"attempt\":1,"
	    "\"type\":\"metrics\",\"metrics\":{\"a\\u0041\":-0.0,\"b\":NaN,\"c\":-Infinity,"
	    "\"d\":\"0x7ff0000000000000\",\"e\":null,\"f\":1e-3}}]",
	    "{\"job\":\"j\",\"rank\":1,\"metrics\":{\"x\":12.5}}\r\n\r\n"
	    "{\"job\":\"j\",\"rank\":2,\"metrics\":{\"x\":Infinity}}\n",
	};
	for (size_t b = 0; b < 2; b++) {
		size_t len = strlen(bodies[b]);
		int failures = 0, successes = 0;
		for (size_t n = 0; n < len; n++) {
			int rc = parse_n(bodies[b], n);
			if (rc == 0) {
				successes++;
				continue;
			}
			failures++;
			CHECK(err.msg[0] != 0 && printable(err.msg) && (err.line >= 1 || n == 0));
		}
		if (b == 0)
			CHECK_EQ_INT(successes, 0);
		else
			CHECK_EQ_INT(successes, 6); /* at the end of each record's line */
		CHECK(failures > 0);
	}
	CHECK_EQ_INT(parse(bodies[0]), 0);
	CHECK_EQ_INT(parse(bodies[1]), 0);
}

/* ---- log and span records ------------------------------------------------ */

static struct mdl_events *events;

/* Parses s (exact-size heap copy) with the events batch. */
static int parse_ev_n(const char *s, size_t n)
{
	char *copy = malloc(n ? n : 1);
	if (n)
		memcpy(copy, s, n);
	mdl_batch_reset(batch);
	mdl_events_reset(events);
	nrec = 12345;
	int rc = ing_json_parse_all(copy, n, &lim, DEFAULT_TS, batch, events, &err, &nrec);
	free(copy);
	return rc;
}

static int parse_ev(const char *s)
{
	return parse_ev_n(s, strlen(s));
}

/* expect_err_at for a parse with the events batch. */
static void expect_err_ev(int line_no, const char *body, int rc, long record, long line,
			  const char *field, const char *substr)
{
	int got = parse_ev(body);
	check_err(line_no, body, got, rc, record, line, field, substr);
}

static bool mem_is(const char *p, size_t n, const char *want)
{
	return n == strlen(want) && memcmp(p, want, n) == 0;
}

/* Checks every field of event i. */
static void check_event_at(int line_no, size_t i, uint8_t kind, uint8_t level, const char *job,
			   uint32_t rank, uint32_t attempt, int64_t ts_ns, int64_t step,
			   int64_t duration_ns, const char *text, const char *fields)
{
	const struct mdl_event *e = mdl_events_at(events, i);
	bool ok = e && e->kind == kind && e->level == level && mem_is(e->job, e->job_len, job) &&
		  e->rank == rank && e->attempt == attempt && e->ts_ns == ts_ns &&
		  e->step == step && e->duration_ns == duration_ns &&
		  mem_is(e->text, e->text_len, text) && mem_is(e->fields, e->fields_len, fields);
	CHECK(ok);
	if (!ok && e)
		fprintf(
		    stderr,
		    "  (test line %d) event %zu: kind %u level %u job '%.*s' rank %u attempt %u "
		    "ts %lld step %lld dur %lld text '%.*s' fields '%.*s'\n",
		    line_no, i, e->kind, e->level, (int)e->job_len, e->job, e->rank, e->attempt,
		    (long long)e->ts_ns, (long long)e->step, (long long)e->duration_ns,
		    (int)e->text_len, e->text, (int)e->fields_len, e->fields);
}

#define CHECK_EVENT(...) check_event_at(__LINE__, __VA_ARGS__)

/* Parses a log record with the given "fields" member text; returns the
 * stored fields text in out (NUL-terminated) or the error code. */
static int fields_of(const char *fields, char *out, size_t cap)
{
	char body[4096];
	snprintf(body, sizeof(body),
		 "{\"type\":\"log\",\"job\":\"j\",\"rank\":0,\"message\":\"m\",\"fields\":%s}",
		 fields);
	int rc = parse_ev(body);
	out[0] = 0;
	if (rc == 0 && mdl_events_count(events) == 1) {
		const struct mdl_event *e = mdl_events_at(events, 0);
		snprintf(out, cap, "%.*s", (int)e->fields_len, e->fields);
	}
	return rc;
}

static void test_log_record(void)
{
	const char *body =
	    "[{\"type\":\"log\",\"job\":\"run-1\",\"rank\":17,\"timestamp\":1700000000123456789,"
	    "\"step\":4200,\"attempt\":3,\"level\":\"error\",\"message\":\"NCCL timeout: "
	    "\\\"allreduce\\\" \\u00e9\\ud83d\\ude00 \xc3\xa9\",\"fields\":{\"op\":\"allreduce\","
	    "\"bytes\":1.50e+6,\"ok\":false,\"x\":null,\"t\":true,\"q\\u0022\":\"a\\/b\\n\\u0001\","
	    "\"u\":\"\xe2\x82\xac\",\"n\":-0}}]";
	CHECK_EQ_INT(parse_ev(body), 0);
	CHECK_EQ_INT(nrec, 1);
	CHECK_EQ_INT(mdl_batch_points(batch), 0);
	CHECK_EQ_INT(mdl_events_count(events), 1);
	CHECK_EVENT(0, MDL_EV_LOG, MDL_LEVEL_ERROR, "run-1", 17, 3, 1700000000123456789LL, 4200, 0,
		    "NCCL timeout: \"allreduce\" \xc3\xa9\xf0\x9f\x98\x80 \xc3\xa9",
		    "{\"op\":\"allreduce\",\"bytes\":1.50e+6,\"ok\":false,\"x\":null,\"t\":true,"
		    "\"q\\\"\":\"a/b\\n\\u0001\",\"u\":\"\xe2\x82\xac\",\"n\":-0}");
	/* Defaults: level info, no step, default time, attempt 0, fields "{}". */
	CHECK_EQ_INT(parse_ev("{\"job\":\"j\",\"message\":\"\",\"rank\":\"job\",\"type\":\"log\"}"),
		     0);
	CHECK_EVENT(0, MDL_EV_LOG, MDL_LEVEL_INFO, "j", MDL_RANK_JOB, 0, DEFAULT_TS, MDL_STEP_NONE,
		    0, "", "{}");
	/* Explicit nulls are the defaults too; "fields":{} is kept as "{}". */
	CHECK_EQ_INT(parse_ev("{\"type\":\"log\",\"job\":\"j\",\"rank\":0,\"message\":\"x\","
			      "\"level\":null,\"step\":null,\"timestamp\":null,\"attempt\":null,"
			      "\"fields\":null}"),
		     0);
	CHECK_EVENT(0, MDL_EV_LOG, MDL_LEVEL_INFO, "j", 0, 0, DEFAULT_TS, MDL_STEP_NONE, 0, "x",
		    "{}");
	CHECK_EQ_INT(parse_ev("{\"type\":\"log\",\"job\":\"j\",\"rank\":0,\"message\":\"x\","
			      "\"fields\":{ \n }}"),
		     0);
	CHECK_EVENT(0, MDL_EV_LOG, MDL_LEVEL_INFO, "j", 0, 0, DEFAULT_TS, MDL_STEP_NONE, 0, "x",
		    "{}");
	/* Levels and their aliases, any case. */
	static const struct {
		const char *s;
		uint8_t level;
	} levels[] = {{"debug", MDL_LEVEL_DEBUG},    {"INFO", MDL_LEVEL_INFO},
		      {"warn", MDL_LEVEL_WARN},	     {"Warning", MDL_LEVEL_WARN},
		      {"error", MDL_LEVEL_ERROR},    {"err", MDL_LEVEL_ERROR},
		      {"fatal", MDL_LEVEL_FATAL},    {"critical", MDL_LEVEL_FATAL},
		      {"w\\u0061rn", MDL_LEVEL_WARN}};
	for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
		char b[256];
		snprintf(b, sizeof(b),
			 "{\"type\":\"log\",\"job\":\"j\",\"rank\":0,\"message\":\"x\","
			 "\"level\":\"%s\"}",
			 levels[i].s);
		CHECK_EQ_INT(parse_ev(b), 0);
		const struct mdl_event *e = mdl_events_at(events, 0);
		CHECK(e && e->level == levels[i].level);
	}
	/* A raw NUL-free message with every escape. */
	CHECK_EQ_INT(parse_ev("{\"type\":\"log\",\"job\":\"j\",\"rank\":0,"
			      "\"message\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0000end\"}"),
		     0);
	const struct mdl_event *e = mdl_events_at(events, 0);
	CHECK(e && e->text_len == 12 && memcmp(e->text, "\"\\/\b\f\n\r\t\0end", 12) == 0);
}

static void test_log_fields(void)
{
	char out[4096];
	CHECK_EQ_INT(fields_of("{\"a\":1}", out, sizeof(out)), 0);
	CHECK(strcmp(out, "{\"a\":1}") == 0);
	/* Whitespace goes; number tokens stay as written. */
	CHECK_EQ_INT(fields_of("{ \"a\" : 1.0 ,\n\"b\":\t-2E-3 , \"c\":12345678901234567890123 }",
			       out, sizeof(out)),
		     0);
	CHECK(strcmp(out, "{\"a\":1.0,\"b\":-2E-3,\"c\":12345678901234567890123}") == 0);
	/* Minimal re-escaping of keys and strings. */
	CHECK_EQ_INT(fields_of("{\"k\\u0065y\\t\":\"\\u001f\\u007f\\/\\\\\\\"\\b\\f\\r\","
			       "\"\\u00fc\":\"\\ud834\\udd1e\"}",
			       out, sizeof(out)),
		     0);
	CHECK(strcmp(out, "{\"key\\t\":\"\\u001f\x7f/\\\\\\\"\\b\\f\\r\","
			  "\"\xc3\xbc\":\"\xf0\x9d\x84\x9e\"}") == 0);
	/* A canonical text parses back to itself. */
	char again[4096];
	snprintf(again, sizeof(again), "%s", out);
	CHECK_EQ_INT(fields_of(again, out, sizeof(out)), 0);
	CHECK(strcmp(out, again) == 0);
	/* Keys differing only after unescaping are duplicates. */
	static const char *bad[][3] = {
	    {"{\"a\":1,\"a\":2}", "fields.a", "key appears twice"},
	    {"{\"a\":1,\"\\u0061\":2}", "fields.a", "twice"},
	    {"{\"a\":{}}", "fields.a", "value of field \"a\" is an object; fields are flat"},
	    {"{\"a\":[1]}", "fields.a", "is an array"},
	    {"{\"a\":NaN}", "fields.a", "NaN and Infinity only as strings"},
	    {"{\"a\":Infinity}", "fields.a", "got Infinity"},
	    {"{\"a\":01}", "fields.a", "got 01"},
	    {"{\"a\":+1}", "fields.a", "got +1"},
	    {"{\"a\":1.}", "fields.a", "got 1."},
	    {"{\"a\":True}", "fields.a", "got True"},
	    {"{\"a\":1,}", "fields", "trailing comma"},
	    {"{\"a\" 1}", "fields.a", "':'"},
	    {"{a:1}", "fields", "field name in double quotes"},
	    {"{\"a\":\"\xc0\x80\"}", "fields.a", "string value is not valid UTF-8"},
	    {"{\"\xed\xa0\x80\":1}", "fields.\\xed\\xa0\\x80", "field name is not valid UTF-8"},
	    {"[]", "fields", "fields must be an object"},
	    {"\"{}\"", "fields", "got \"{}\""},
	    {"1", "fields", "got 1"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char body[512];
		snprintf(
		    body, sizeof(body),
		    "{\"type\":\"log\",\"job\":\"j\",\"rank\":0,\"message\":\"m\",\"fields\":%s}",
		    bad[i][0]);
		expect_err_ev(__LINE__, body, RDB_EINVAL, 0, 1, bad[i][1], bad[i][2]);
	}
}

static void test_span_record(void)
{
	CHECK_EQ_INT(parse_ev("{\"type\":\"span\",\"job\":\"run-1\",\"rank\":3,\"step\":12,"
			      "\"name\":\"step_time.forward\",\"start\":-5,\"duration_ns\":"
			      "9223372036854775807,\"attempt\":4294967295}"),
		     0);
	CHECK_EQ_INT(mdl_events_count(events), 1);
	CHECK_EVENT(0, MDL_EV_SPAN, 0, "run-1", 3, UINT32_MAX, -5, 12, INT64_MAX,
		    "step_time.forward", "");
	/* Keys in any order; escaped name; rank "job"; zero duration and step. */
	CHECK_EQ_INT(parse_ev("{\"duration_ns\":0,\"start\":1700000000000000000,\"name\":"
			      "\"\\u0062wd\",\"step\":0,\"rank\":\"job\",\"job\":\"j\",\"type\":"
			      "\"span\"}"),
		     0);
	CHECK_EVENT(0, MDL_EV_SPAN, 0, "j", MDL_RANK_JOB, 0, 1700000000000000000LL, 0, 0, "bwd",
		    "");
	char body[1024], name[300];
	memset(name, 'n', 256);
	name[256] = 0;
	snprintf(body, sizeof(body),
		 "{\"type\":\"span\",\"job\":\"j\",\"rank\":0,\"step\":1,\"name\":\"%s\","
		 "\"start\":1,\"duration_ns\":1}",
		 name);
	CHECK_EQ_INT(parse_ev(body), 0);
	name[256] = 'n';
	name[257] = 0;
	snprintf(body, sizeof(body),
		 "{\"type\":\"span\",\"job\":\"j\",\"rank\":0,\"step\":1,\"name\":\"%s\","
		 "\"start\":1,\"duration_ns\":1}",
		 name);
	expect_err_ev(__LINE__, body, RDB_EINVAL, 0, 1, "name", "1 to 256 printable ASCII");
}

/* Metrics, logs and spans mixed in one body, both forms; events keep order. */
static void test_mixed(void)
{
	const char *recs[] = {
	    "{\"job\":\"j\",\"rank\":0,\"step\":1,\"metrics\":{\"loss\":2.5}}",
	    "{\"type\":\"log\",\"job\":\"j\",\"rank\":0,\"step\":1,\"level\":\"warn\","
	    "\"message\":\"slow\",\"fields\":{\"ms\":12}}",
	    "{\"type\":\"span\",\"job\":\"j\",\"rank\":0,\"step\":1,\"name\":\"fwd\","
	    "\"start\":100,\"duration_ns\":50}",
	    "{\"type\":\"metrics\",\"job\":\"j\",\"rank\":1,\"metrics\":{\"loss\":3}}",
	    "{\"type\":\"log\",\"job\":\"k\",\"rank\":2,\"message\":\"done\"}",
	};
	char body[2048];
	for (int form = 0; form < 2; form++) {
		size_t n = 0;
		n += (size_t)snprintf(body + n, sizeof(body) - n, "%s", form ? "" : "[\n");
		for (size_t i = 0; i < 5; i++)
			n += (size_t)snprintf(body + n, sizeof(body) - n, "%s%s",
					      i ? (form ? "\r\n" : ",\n") : "", recs[i]);
		n += (size_t)snprintf(body + n, sizeof(body) - n, "%s", form ? "\n" : "\n]");
		CHECK_EQ_INT(parse_ev(body), 0);
		CHECK_EQ_INT(nrec, 5);
		CHECK_EQ_INT(mdl_batch_points(batch), 2);
		CHECK(find("j", 0, "loss") != NULL && find("j", 1, "loss") != NULL);
		CHECK_EQ_INT(mdl_events_count(events), 3);
		CHECK_EVENT(0, MDL_EV_LOG, MDL_LEVEL_WARN, "j", 0, 0, DEFAULT_TS, 1, 0, "slow",
			    "{\"ms\":12}");
		CHECK_EVENT(1, MDL_EV_SPAN, 0, "j", 0, 0, 100, 1, 50, "fwd", "");
		CHECK_EVENT(2, MDL_EV_LOG, MDL_LEVEL_INFO, "k", 2, 0, DEFAULT_TS, MDL_STEP_NONE, 0,
			    "done", "{}");
		/* An error in the last record names it (record 4, line 5 or 6). */
		char bad[2048];
		snprintf(bad, sizeof(bad), "%.*s", (int)(n - (form ? 2 : 3)), body);
		size_t m = strlen(bad);
		snprintf(bad + m, sizeof(bad) - m, ",\"level\":\"loud\"}%s", form ? "\n" : "\n]");
		expect_err_ev(__LINE__, bad, RDB_EINVAL, 4, form ? 5 : 6, "level", "got \"loud\"");
	}
	/* Without an events batch, the first log record is refused. */
	snprintf(body, sizeof(body), "%s\n%s\n", recs[0], recs[1]);
	EXPECT_ERR(body, RDB_EINVAL, 1, 2, "type", "log records are not accepted here");
}

static void test_event_errors(void)
{
#define LOG  "{\"type\":\"log\",\"job\":\"j\",\"rank\":0,"
#define SPAN "{\"type\":\"span\",\"job\":\"j\",\"rank\":0,"
	static const struct {
		const char *body;
		long line;
		const char *field, *msg;
	} cases[] = {
	    {LOG "\"level\":\"info\"}", 1, "message",
	     "record has no \"message\" field (required: job, rank, message)"},
	    {"{\"type\":\"log\",\"rank\":0,\"message\":\"m\"}", 1, "job", "no \"job\" field"},
	    {"{\"type\":\"log\",\"job\":\"j\",\"message\":\"m\"}", 1, "rank", "no \"rank\" field"},
	    {LOG "\"message\":\"m\",\n\"metrics\":{\"a\":1}}", 2, "metrics",
	     "field \"metrics\" does not belong in a log record; log records have job, rank"},
	    {LOG "\"message\":\"m\",\"name\":\"x\"}", 1, "name", "does not belong in a log record"},
	    {LOG "\"message\":\"m\",\"duration_ns\":1}", 1, "duration_ns", "does not belong"},
	    {LOG "\"message\":1}", 1, "message", "message must be a string, got 1"},
	    {LOG "\"message\":null}", 1, "message", "got null"},
	    {LOG "\"message\":\"m\",\"message\":\"n\"}", 1, "message", "appears twice"},
	    {LOG "\"message\":\"m\",\"level\":\"loud\"}", 1, "level",
	     "level must be \"debug\", \"info\", \"warn\", \"error\" or \"fatal\""},
	    {LOG "\"message\":\"m\",\"level\":3}", 1, "level", "got 3"},
	    {LOG "\"message\":\"m\",\"level\":\"\"}", 1, "level", "got \"\""},
	    {LOG "\"message\":\"m\",\"step\":-1}", 1, "step", "got -1"},
	    {LOG "\"message\":\"m\",\"timestamp\":1.5}", 1, "timestamp", "multiply seconds by 1e9"},
	    {LOG "\"message\":\"m\",\"metrics\":{\"a\":1},\"fields\":{}}", 1, "fields",
	     "cannot have both \"metrics\" and \"fields\""},
	    {LOG "\"fields\":{},\"metrics\":{\"a\":1},\"message\":\"m\"}", 1, "metrics",
	     "cannot have both \"fields\" and \"metrics\""},
	    {LOG "\"message\":\"m\",\"host\":\"h\"}", 1, "host", "unknown field \"host\""},
	    {SPAN "\"name\":\"f\",\"start\":1,\"duration_ns\":1}", 1, "step",
	     "record has no \"step\" field (required: job, rank, step, name, start, duration_ns)"},
	    {SPAN "\n\"step\":null,\"name\":\"f\",\"start\":1,\"duration_ns\":1}", 2, "step",
	     "a span record needs a step"},
	    {SPAN "\"step\":1,\"start\":1,\"duration_ns\":1}", 1, "name", "no \"name\" field"},
	    {SPAN "\"step\":1,\"name\":\"f\",\"duration_ns\":1}", 1, "start", "no \"start\" field"},
	    {SPAN "\"step\":1,\"name\":\"f\",\"start\":1}", 1, "duration_ns",
	     "no \"duration_ns\" field"},
	    {SPAN "\"step\":1,\"name\":\"f\",\"start\":1,\"duration_ns\":1,\n\n\"timestamp\":1}", 3,
	     "timestamp",
	     "field \"timestamp\" does not belong in a span record; span records have job, rank, "
	     "step, attempt, type, name, start, duration_ns"},
	    {SPAN "\"step\":1,\"name\":\"f\",\"start\":1,\"duration_ns\":1,\"message\":\"m\"}", 1,
	     "message", "does not belong in a span record"},
	    {SPAN "\"step\":1,\"name\":\"f\",\"start\":1,\"duration_ns\":1,\"level\":\"info\"}", 1,
	     "level", "does not belong in a span record"},
	    {SPAN "\"step\":1,\"name\":\"f\",\"start\":null,\"duration_ns\":1}", 1, "start",
	     "start must be an integer number of nanoseconds since the epoch (64-bit signed), "
	     "got null"},
	    {SPAN "\"step\":1,\"name\":\"f\",\"start\":1.5e9,\"duration_ns\":1}", 1, "start",
	     "multiply seconds by 1e9"},
	    {SPAN "\"step\":1,\"name\":\"f\",\"start\":1,\"duration_ns\":-1}", 1, "duration_ns",
	     "duration_ns must be an integer from 0 to 9223372036854775807, got -1"},
	    {SPAN "\"step\":1,\"name\":\"f\",\"start\":1,\"duration_ns\":1.5}", 1, "duration_ns",
	     "got 1.5"},
	    {SPAN "\"step\":1,\"name\":\"f\",\"start\":1,\"duration_ns\":null}", 1, "duration_ns",
	     "got null"},
	    {SPAN "\"step\":1,\"name\":\"a b\",\"start\":1,\"duration_ns\":1}", 1, "name",
	     "span name must be 1 to 256 printable ASCII"},
	    {SPAN "\"step\":1,\"name\":\"\",\"start\":1,\"duration_ns\":1}", 1, "name", "got \"\""},
	    {SPAN "\"step\":1,\"name\":\"\\u00e9\",\"start\":1,\"duration_ns\":1}", 1, "name",
	     "printable ASCII"},
	    {SPAN "\"step\":1,\"name\":7,\"start\":1,\"duration_ns\":1}", 1, "name", "got 7"},
	    {"{\"job\":\"j\",\"rank\":0,\"message\":\"m\"}", 1, "message",
	     "field \"message\" belongs in a record with \"type\":\"log\" (a record without "
	     "\"type\" is a metrics record)"},
	    {"{\"job\":\"j\",\"rank\":0,\"step\":1,\"name\":\"f\",\"start\":1}", 1, "name",
	     "belongs in a record with \"type\":\"span\""},
	    {"{\"type\":\"metrics\",\"job\":\"j\",\"rank\":0,\"metrics\":{\"a\":1},\n\"level\":"
	     "\"info\"}",
	     2, "level", "field \"level\" does not belong in a metrics record"},
	    {"{\"type\":\"Log\"}", 1, "type", "type must be \"metrics\", \"log\" or \"span\""},
	    {"{\"type\":null}", 1, "type", "got null"},
	    {"{\"type\":\"log\",\"type\":\"log\"}", 1, "type", "appears twice"},
	};
#undef LOG
#undef SPAN
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_err_ev(__LINE__, cases[i].body, RDB_EINVAL, 0, cases[i].line, cases[i].field,
			      cases[i].msg);
}

/* Builds a log record whose message is the JSON string text s. */
static int message_of(const char *s)
{
	size_t n = strlen(s) + 128;
	char *body = malloc(n);
	snprintf(body, n, "{\"type\":\"log\",\"job\":\"j\",\"rank\":0,\"message\":\"%s\"}", s);
	int rc = parse_ev(body);
	free(body);
	return rc;
}

static void test_utf8(void)
{
	static const char *good[] = {
	    "plain",
	    "\xc2\x80",
	    "\xdf\xbf",
	    "\xe0\xa0\x80",
	    "\xed\x9f\xbf",
	    "\xee\x80\x80",
	    "\xef\xbf\xbf",
	    "\xf0\x90\x80\x80",
	    "\xf4\x8f\xbf\xbf",
	    "a\xc3\xa9z\xe2\x82\xac",
	    "\\ud800\\udc00",
	    "\\udbff\\udfff",
	    "\\u07ff\\u0800\\uffff",
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		int rc = message_of(good[i]);
		CHECK_EQ_INT(rc, 0);
		if (rc)
			fprintf(stderr, "  good utf-8 #%zu refused: %s\n", i, err.msg);
	}
	CHECK_EQ_INT(message_of("\\udbff\\udfff"), 0);
	const struct mdl_event *e = mdl_events_at(events, 0);
	CHECK(e && mem_is(e->text, e->text_len, "\xf4\x8f\xbf\xbf"));
	static const struct {
		const char *s;
		size_t at;
	} bad[] = {
	    {"\xc0\x80", 0},		/* overlong NUL */
	    {"ab\xc1\xbf", 2},		/* overlong 2-byte */
	    {"\xe0\x80\x80", 0},	/* overlong 3-byte */
	    {"\xe0\x9f\xbf", 0},	/* overlong 3-byte, top */
	    {"\xf0\x80\x80\x80", 0},	/* overlong 4-byte */
	    {"\xf0\x8f\xbf\xbf", 0},	/* overlong 4-byte, top */
	    {"\xed\xa0\x80", 0},	/* U+D800 surrogate */
	    {"x\xed\xbf\xbf", 1},	/* U+DFFF surrogate */
	    {"\xf4\x90\x80\x80", 0},	/* U+110000 */
	    {"\xf5\x80\x80\x80", 0},	/* lead beyond F4 */
	    {"\xff", 0},		/* never valid */
	    {"\x80", 0},		/* stray continuation */
	    {"\xc3", 0},		/* truncated at the end */
	    {"\xe2\x82", 0},		/* truncated at the end */
	    {"\xf0\x9f\x98", 0},	/* truncated at the end */
	    {"\xc3z", 0},		/* truncated by ASCII */
	    {"ok \xe2\x82z", 3},	/* truncated by ASCII */
	    {"\xf0\x9f\x98\\u0041", 0}, /* truncated by an escape */
	    {"\\u00e9\xa9", 2},		/* stray continuation after an escape */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char want[64];
		snprintf(want, sizeof(want), "message is not valid UTF-8: bad sequence at byte %zu",
			 bad[i].at);
		size_t n = strlen(bad[i].s) + 128;
		char *body = malloc(n);
		snprintf(body, n, "{\"type\":\"log\",\"job\":\"j\",\"rank\":0,\"message\":\"%s\"}",
			 bad[i].s);
		expect_err_ev(__LINE__, body, RDB_EINVAL, 0, 1, "message", want);
		free(body);
	}
	/* Surrogate escapes are checked by the lexer. */
	expect_err_ev(__LINE__,
		      "{\"type\":\"log\",\"job\":\"j\",\"rank\":0,\"message\":\"\\ud800\"}",
		      RDB_EINVAL, 0, 1, "message", "high surrogate");
	expect_err_ev(__LINE__,
		      "{\"type\":\"log\",\"job\":\"j\",\"rank\":0,\"message\":\"\\udc00\"}",
		      RDB_EINVAL, 0, 1, "message", "lone low surrogate");
}

/* Message and fields size bounds, the events batch bounds, max_records. */
static void test_event_limits(void)
{
	size_t max = MDL_EVENT_TEXT_MAX;
	char *msg = malloc(4 * max + 16);
	memset(msg, 'm', max);
	msg[max] = 0;
	CHECK_EQ_INT(message_of(msg), 0);
	CHECK(mdl_events_at(events, 0)->text_len == max);
	msg[max] = 'm';
	msg[max + 1] = 0;
	CHECK_EQ_INT(message_of(msg), RDB_EINVAL);
	CHECK(strstr(err.msg, "longer than 65536 bytes") != NULL &&
	      strcmp(err.field, "message") == 0);
	/* The same through the escape decoder: \n counts as one byte. */
	memcpy(msg, "\\n", 2);
	msg[max + 1] = 0;
	CHECK_EQ_INT(message_of(msg), 0);
	const struct mdl_event *e = mdl_events_at(events, 0);
	CHECK(e && e->text_len == max && e->text[0] == '\n' && e->text[max - 1] == 'm');
	msg[max + 1] = 'm';
	msg[max + 2] = 0;
	CHECK_EQ_INT(message_of(msg), RDB_EINVAL);
	CHECK(strstr(err.msg, "longer than 65536 bytes") != NULL);
	/* Escapes expanding past the bound in the middle of the string. */
	size_t end = 0;
	for (; end + 6 <= 4 * max; end += 6)
		memcpy(msg + end, "\\u00e9", 6);
	msg[end] = 0;
	CHECK_EQ_INT(message_of(msg), RDB_EINVAL);
	CHECK(strstr(err.msg, "longer than") != NULL);
	free(msg);

	/* fields: exactly MDL_EVENT_FIELDS_MAX bytes of text, then one more. */
	size_t fmax = MDL_EVENT_FIELDS_MAX;
	size_t cap = 4 * fmax;
	char *body = malloc(cap);
	size_t pre =
	    (size_t)snprintf(body, cap,
			     "{\"type\":\"log\",\"job\":\"j\",\"rank\":0,\"message\":\"m\","
			     "\"fields\":{\"k\":\"");
	size_t fill = fmax - strlen("{\"k\":\"\"}");
	memset(body + pre, 'v', fill);
	strcpy(body + pre + fill, "\"}}");
	CHECK_EQ_INT(parse_ev(body), 0);
	e = mdl_events_at(events, 0);
	CHECK(e && e->fields_len == fmax);
	body[pre + fill] = 'v';
	strcpy(body + pre + fill + 1, "\"}}");
	CHECK_EQ_INT(parse_ev(body), RDB_EINVAL);
	CHECK(strstr(err.msg, "fields are longer than 65536 bytes") != NULL);
	CHECK(strcmp(err.field, "fields") == 0); /* only the closing '}' is too much */
	body[pre + fill + 1] = 'v';
	strcpy(body + pre + fill + 2, "\"}}");
	CHECK_EQ_INT(parse_ev(body), RDB_EINVAL);
	CHECK(strstr(err.msg, "fields are longer than 65536 bytes") != NULL);
	CHECK(strcmp(err.field, "fields.k") == 0);
	/* A key or string longer than the bound after unescaping. */
	for (size_t i = 0; i < 12000; i++)
		memcpy(body + pre + 6 * i, "\\u0001", 6);
	strcpy(body + pre + 6 * 12000, "\"}}");
	CHECK_EQ_INT(parse_ev(body), RDB_EINVAL);
	CHECK(strstr(err.msg, "fields are longer") != NULL);
	memset(body + pre - 4, 'k', fmax + 1); /* the key itself, after {" */
	strcpy(body + pre - 4 + fmax + 1, "\":1}}");
	CHECK_EQ_INT(parse_ev(body), RDB_EINVAL);
	CHECK(strstr(err.msg, "fields are longer") != NULL &&
	      strncmp(err.field, "fields.kk", 9) == 0);
	/* Many keys: the name table grows; a late duplicate is found. */
	size_t p2 = (size_t)snprintf(body, cap,
				     "{\"type\":\"log\",\"job\":\"j\",\"rank\":0,\"message\":\"m\","
				     "\"fields\":{");
	size_t n = p2;
	for (int i = 0; i < 4000; i++)
		n += (size_t)snprintf(body + n, cap - n, "%s\"k%d\":%d", i ? "," : "", i, i);
	strcpy(body + n, "}}");
	CHECK_EQ_INT(parse_ev(body), 0);
	e = mdl_events_at(events, 0);
	CHECK(e && e->fields_len == n - p2 + 2 &&
	      strncmp(e->fields, "{\"k0\":0,\"k1\":1,", 15) == 0);
	strcpy(body + n, ",\"k3210\":1}}");
	CHECK_EQ_INT(parse_ev(body), RDB_EINVAL);
	CHECK(strstr(err.msg, "twice") != NULL && strcmp(err.field, "fields.k3210") == 0);
	free(body);

	/* The events batch bounds: count and bytes. */
	struct mdl_events *small;
	CHECK_EQ_INT(mdl_events_new(2, 1 << 20, &small), 0);
	const char *three = "{\"type\":\"log\",\"job\":\"j\",\"rank\":0,\"message\":\"a\"}\n"
			    "{\"type\":\"span\",\"job\":\"j\",\"rank\":0,\"step\":1,\"name\":\"f\","
			    "\"start\":1,\"duration_ns\":1}\n"
			    "{\"type\":\"log\",\"job\":\"j\",\"rank\":0,\"message\":\"c\"}\n";
	CHECK_EQ_INT(ing_json_parse_all(three, strlen(three), &lim, 0, batch, small, &err, NULL),
		     RDB_ELIMIT);
	CHECK(err.record == 2 && err.line == 3 && strstr(err.msg, "too many log and span") != NULL);
	mdl_events_free(small);
	CHECK_EQ_INT(mdl_events_new(100, 5, &small), 0); /* the first log takes 4 bytes */
	CHECK_EQ_INT(ing_json_parse_all(three, strlen(three), &lim, 0, batch, small, &err, NULL),
		     RDB_ELIMIT);
	CHECK(err.record == 1 && err.line == 2);
	mdl_events_free(small);
	/* max_records counts every kind of record. */
	struct ing_limits saved = lim;
	lim.max_records = 2;
	expect_err_ev(__LINE__, three, RDB_ELIMIT, 2, 3, "", "too many records in one request");
	lim.max_depth = 1;
	expect_err_ev(__LINE__,
		      "{\"type\":\"log\",\"job\":\"j\",\"rank\":0,\"message\":\"m\",\"fields\":{}}",
		      RDB_ELIMIT, 0, 1, "fields", "deeper than 1");
	lim = saved;
}

/* Every proper prefix of bodies with logs and spans fails cleanly. */
static void test_event_truncation(void)
{
	const char *bodies[] = {
	    "[{\"type\":\"log\",\"job\":\"r\",\"rank\":1,\"step\":2,\"timestamp\":3,\"level\":"
	    "\"warn\",\"message\":\"a\\u00e9\\ud83d\\ude00\xc3\xa9\\n\",\"fields\":{\"k\\t\":"
	    "\"v\\u0001\",\"n\":-1.5e3,\"b\":true,\"z\":null}},{\"type\":\"span\",\"job\":\"r\","
	    "\"rank\":\"job\",\"step\":0,\"name\":\"f\\u0077d\",\"start\":-1,\"duration_ns\":7}]",
	};
	size_t len = strlen(bodies[0]);
	int successes = 0;
	for (size_t n = 0; n < len; n++) {
		int rc = parse_ev_n(bodies[0], n);
		if (rc == 0) {
			successes++;
			continue;
		}
		CHECK(err.msg[0] != 0 && printable(err.msg) && printable(err.field));
	}
	CHECK_EQ_INT(successes, 0);
	CHECK_EQ_INT(parse_ev(bodies[0]), 0);
	CHECK_EQ_INT(mdl_events_count(events), 2);
	CHECK_EVENT(0, MDL_EV_LOG, MDL_LEVEL_WARN, "r", 1, 0, 3, 2, 0,
		    "a\xc3\xa9\xf0\x9f\x98\x80\xc3\xa9\n",
		    "{\"k\\t\":\"v\\u0001\",\"n\":-1.5e3,\"b\":true,\"z\":null}");
	CHECK_EVENT(1, MDL_EV_SPAN, 0, "r", MDL_RANK_JOB, 0, -1, 0, 7, "fwd", "");
}

int main(void)
{
	ing_limits_default(&lim);
	CHECK_EQ_INT(lim.max_records, 100000);
	CHECK_EQ_INT(lim.max_metrics_per_record, 1024);
	if (mdl_batch_new(1000000, 100000, &batch) != 0 ||
	    mdl_events_new(100000, 64u << 20, &events) != 0)
		return 1;
	RUN(test_array);
	RUN(test_ndjson);
	RUN(test_key_orders);
	RUN(test_values);
	RUN(test_values_vs_strtod);
	RUN(test_fields);
	RUN(test_errors_body);
	RUN(test_errors_record);
	RUN(test_errors_values);
	RUN(test_error_echo);
	RUN(test_limits);
	RUN(test_many_metrics);
	RUN(test_truncation);
	RUN(test_log_record);
	RUN(test_log_fields);
	RUN(test_span_record);
	RUN(test_mixed);
	RUN(test_event_errors);
	RUN(test_utf8);
	RUN(test_event_limits);
	RUN(test_event_truncation);
	mdl_events_free(events);
	mdl_batch_free(batch);
	return check_summary("json_write");
}
