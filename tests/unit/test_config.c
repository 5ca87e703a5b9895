/* test_config.c - unit tests of server/config: defaults, the config file
 * parser (syntax, suffixes, every error naming file:line), every numeric
 * bound at and just past its edges, enums, string lengths, the command line
 * (file first, flags override in any order, --x=y and --x y, errors, help)
 * and the shipped conf/rankdb.conf, which must equal the defaults and the
 * text generated from the option table.
 *
 * Temporary files go to $TMPDIR (or /tmp) and are removed by each test.
 */
#include "server/config.h"

#include "common/rdb_err.h"
#include "tests/unit/check.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

/* Every option, with its numeric bounds as the spec states them. */
struct bound {
	const char *name;
	size_t offset, size;
	uint64_t min, max;
};

#define F(f) offsetof(struct srv_config, f), sizeof(((struct srv_config *)0)->f)

static const struct bound bounds[] = {
    {"http_port", F(http_port), 0, 65535},
    {"http_threads", F(http_threads), 1, 256},
    {"http_max_connections", F(http_max_connections), 1, 65536},
    {"http_timeout_s", F(http_timeout_s), 1, 3600},
    {"max_body_bytes", F(max_body_bytes), 1ull << 10, 1ull << 30},
    {"max_records_per_request", F(max_records_per_request), 1, 10000000},
    {"max_metrics_per_record", F(max_metrics_per_record), 1, 65536},
    {"wal_rotate_bytes", F(wal_rotate_bytes), 1ull << 20, 16ull << 30},
    {"checkpoint_interval_s", F(checkpoint_interval_s), 1, 86400},
    {"head_max_bytes", F(head_max_bytes), 1ull << 20, 1ull << 40},
    {"chunk_max_points", F(chunk_max_points), 1, 65536},
    {"segment_max_bytes", F(segment_max_bytes), 1ull << 20, 64ull << 30},
    {"index_map_bytes", F(index_map_bytes), 1ull << 20, 16ull << 40},
    {"max_series", F(max_series), 1, 1000000000},
    {"max_query_points", F(max_query_points), 1, 1000000000},
    {"max_response_bytes", F(max_response_bytes), 64ull << 10, 4ull << 30},
    {"max_line_bytes", F(max_line_bytes), 256, 64ull << 20},
    {"max_fields_per_line", F(max_fields_per_line), 1, 65536},
    {"max_tags_per_line", F(max_tags_per_line), 1, 1024},
    {"max_series_per_job", F(max_series_per_job), 1, 1000000000},
    {"udp_port", F(udp_port), 0, 65535},
    {"udp_queue_datagrams", F(udp_queue_datagrams), 16, 16777216},
    {"udp_queue_bytes", F(udp_queue_bytes), 64ull << 10, 16ull << 30},
    {"udp_max_datagram_bytes", F(udp_max_datagram_bytes), 512, 65507},
    {"udp_max_skew_s", F(udp_max_skew_s), 1, 3600},
};

#define NBOUNDS (sizeof(bounds) / sizeof(bounds[0]))

static const char *const all_names[] = {
    "data_dir",
    "http_addr",
    "http_port",
    "port_file",
    "http_threads",
    "http_max_connections",
    "http_timeout_s",
    "max_body_bytes",
    "max_records_per_request",
    "max_metrics_per_record",
    "sync_policy",
    "wal_rotate_bytes",
    "checkpoint_interval_s",
    "head_max_bytes",
    "chunk_max_points",
    "segment_max_bytes",
    "index_map_bytes",
    "max_series",
    "max_query_points",
    "max_response_bytes",
    "log_level",
    "lp_default_job",
    "max_line_bytes",
    "max_fields_per_line",
    "max_tags_per_line",
    "max_series_per_job",
    "udp_port",
    "udp_addr",
    "udp_queue_datagrams",
    "udp_queue_bytes",
    "udp_max_datagram_bytes",
    "udp_keys_file",
    "udp_allow_unauthenticated",
    "udp_max_skew_s",
};

#define NNAMES (sizeof(all_names) / sizeof(all_names[0]))

static char tmp_path[256];

/* Writes text to a fresh temporary file whose name is left in tmp_path. */
static const char *write_tmp(const char *text)
{
	const char *dir = getenv("TMPDIR");
	int fd;

	snprintf(tmp_path, sizeof(tmp_path), "%s/rdb_test_config_XXXXXX", dir ? dir : "/tmp");
	fd = mkstemp(tmp_path);
	if (fd < 0) {
		perror("mkstemp");
		exit(2);
	}
	size_t len = strlen(text);
	if (write(fd, text, len) != (ssize_t)len) {
		perror("write");
		exit(2);
	}
	close(fd);
	return tmp_path;
}

static uint64_t field_u(const struct srv_config *c, const struct bound *b)
{
	const char *p = (const char *)c + b->offset;

	if (b->size == sizeof(uint32_t)) {
		uint32_t v;
		memcpy(&v, p, sizeof(v));
		return v;
	}
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

/* True if every option of a and b has the same value; says which differs. */
static bool same_config(const struct srv_config *a, const struct srv_config *b, bool verbose)
{
	char va[5000], vb[5000];

	for (size_t i = 0; i < NNAMES; i++) {
		if (srv_config_get(a, all_names[i], va, sizeof(va)) != 0 ||
		    srv_config_get(b, all_names[i], vb, sizeof(vb)) != 0 || strcmp(va, vb) != 0) {
			if (verbose)
				fprintf(stderr, "  option %s differs: '%s' vs '%s'\n", all_names[i],
					va, vb);
			return false;
		}
	}
	return true;
}

static void test_defaults(void)
{
	struct srv_config c;

	memset(&c, 0x5a, sizeof(c));
	srv_config_default(&c);
	CHECK(strcmp(c.data_dir, "./data") == 0);
	CHECK(strcmp(c.http_addr, "127.0.0.1") == 0);
	CHECK_EQ_INT(c.http_port, 7461);
	CHECK(strcmp(c.port_file, "") == 0);
	CHECK_EQ_INT(c.http_threads, 8);
	CHECK_EQ_INT(c.http_max_connections, 8192);
	CHECK_EQ_INT(c.http_timeout_s, 60);
	CHECK_EQ_INT(c.max_body_bytes, 16ull << 20);
	CHECK_EQ_INT(c.max_records_per_request, 100000);
	CHECK_EQ_INT(c.max_metrics_per_record, 1024);
	CHECK(strcmp(c.sync_policy, "fdatasync") == 0);
	CHECK_EQ_INT(c.wal_rotate_bytes, 64ull << 20);
	CHECK_EQ_INT(c.checkpoint_interval_s, 60);
	CHECK_EQ_INT(c.head_max_bytes, 512ull << 20);
	CHECK_EQ_INT(c.chunk_max_points, 4096);
	CHECK_EQ_INT(c.segment_max_bytes, 256ull << 20);
	CHECK_EQ_INT(c.index_map_bytes, 16ull << 30);
	CHECK_EQ_INT(c.max_series, 10000000);
	CHECK_EQ_INT(c.max_query_points, 10000000);
	CHECK_EQ_INT(c.max_response_bytes, 256ull << 20);
	CHECK(strcmp(c.log_level, "info") == 0);
	CHECK(strcmp(c.lp_default_job, "") == 0);
	CHECK_EQ_INT(c.max_line_bytes, 64ull << 10);
	CHECK_EQ_INT(c.max_fields_per_line, 1024);
	CHECK_EQ_INT(c.max_tags_per_line, 64);
	CHECK_EQ_INT(c.max_series_per_job, 1000000);
	CHECK_EQ_INT(c.udp_port, 0);
	CHECK(strcmp(c.udp_addr, "127.0.0.1") == 0);
	CHECK_EQ_INT(c.udp_queue_datagrams, 65536);
	CHECK_EQ_INT(c.udp_queue_bytes, 64ull << 20);
	CHECK_EQ_INT(c.udp_max_datagram_bytes, 65507);
}

static void test_file_parse(void)
{
	struct srv_config c;
	char err[512] = "";
	const char *path =
	    write_tmp("# a comment\n"
		      "\n"
		      "   \t\n"
		      "  # indented comment\n"
		      "http_port=8080\n"
		      "\thttp_threads \t=\t 4   \n"
		      "max_body_bytes = 32M # inline comment\n"
		      "wal_rotate_bytes = 2g\r\n"
		      "head_max_bytes = 1T\n"
		      "max_response_bytes = 65536\n"
		      "checkpoint_interval_s = 5m\n"
		      "http_timeout_s = 90s\n"
		      "data_dir = \"/var/lib/rank db#1\"  # quoted keeps '#' and spaces\n"
		      "http_addr = 0.0.0.0\n"
		      "port_file = \"\"\n"
		      "sync_policy = none\n"
		      "log_level = debug"); /* no final newline */

	srv_config_default(&c);
	CHECK_EQ_INT(srv_config_load_file(&c, path, err, sizeof(err)), 0);
	if (err[0])
		fprintf(stderr, "  err: %s\n", err);
	CHECK_EQ_INT(c.http_port, 8080);
	CHECK_EQ_INT(c.http_threads, 4);
	CHECK_EQ_INT(c.max_body_bytes, 32ull << 20);
	CHECK_EQ_INT(c.wal_rotate_bytes, 2ull << 30);
	CHECK_EQ_INT(c.head_max_bytes, 1ull << 40);
	CHECK_EQ_INT(c.max_response_bytes, 65536);
	CHECK_EQ_INT(c.checkpoint_interval_s, 300);
	CHECK_EQ_INT(c.http_timeout_s, 90);
	CHECK(strcmp(c.data_dir, "/var/lib/rank db#1") == 0);
	CHECK(strcmp(c.http_addr, "0.0.0.0") == 0);
	CHECK(strcmp(c.port_file, "") == 0);
	CHECK(strcmp(c.sync_policy, "none") == 0);
	CHECK(strcmp(c.log_level, "debug") == 0);
	CHECK_EQ_INT(c.max_series, 10000000); /* untouched options keep their value */
	unlink(path);
}

/* Loads text, expects RDB_EINVAL, an error naming path:line and containing
 * every fragment, and the configuration left as it was. */
static void expect_file_error(const char *text, int line, const char *frag1, const char *frag2)
{
	struct srv_config c, before;
	char err[512] = "", where[300];
	const char *path = write_tmp(text);

	srv_config_default(&c);
	c.http_port = 1234;
	before = c;
	CHECK_EQ_INT(srv_config_load_file(&c, path, err, sizeof(err)), RDB_EINVAL);
	snprintf(where, sizeof(where), "%s:%d: ", path, line);
	CHECK(strncmp(err, where, strlen(where)) == 0);
	CHECK(strstr(err, frag1) != NULL);
	CHECK(!frag2 || strstr(err, frag2) != NULL);
	CHECK(memcmp(&c, &before, sizeof(c)) == 0);
	if (strncmp(err, where, strlen(where)) != 0 || !strstr(err, frag1) ||
	    (frag2 && !strstr(err, frag2)))
		fprintf(stderr, "  unexpected error text: %s\n", err);
	unlink(path);
}

static void test_file_errors(void)
{
	char longline[10000];

	expect_file_error("http_port = 1\nbogus_option = 3\n", 2, "unknown option 'bogus_option'",
			  NULL);
	expect_file_error("http-port = 3\n", 1, "unknown option 'http-port'", "'_'");
	expect_file_error("\n\nhttp_port = 70000\n", 3, "http_port: '70000' is out of range",
			  "allowed 0..65535");
	expect_file_error("max_body_bytes = 2G\n", 1, "max_body_bytes", "allowed 1K..1G");
	expect_file_error("http_threads = lots\n", 1, "http_threads: 'lots' is not a whole number",
			  "1..256");
	expect_file_error("max_body_bytes = 16Q\n", 1, "is not a size", "1K..1G");
	expect_file_error("sync_policy = always\n", 1, "sync_policy: 'always' is not one of",
			  "fdatasync, none");
	expect_file_error("http_port = 1\n# again\nhttp_port = 2\n", 3, "http_port: set twice",
			  "line 1");
	expect_file_error("http_port 7461\n", 1, "expected 'name = value'", NULL);
	expect_file_error("= 7461\n", 1, "expected 'name = value'", NULL);
	expect_file_error("http_port =\n", 1, "http_port: missing value", NULL);
	expect_file_error("http_port = # nothing\n", 1, "missing value", NULL);
	expect_file_error("data_dir = \"/x\n", 1, "data_dir: unterminated quoted value", NULL);
	expect_file_error("data_dir = \"/x\" y\n", 1, "after the closing quote", NULL);
	expect_file_error("data_dir = \"\"\n", 1, "data_dir: must not be empty", NULL);
	expect_file_error("http_port = 7461 7462\n", 1, "is not a whole number", NULL);

	memset(longline, 'x', sizeof(longline));
	memcpy(longline, "data_dir = ", 11);
	longline[sizeof(longline) - 1] = '\0';
	expect_file_error(longline, 1, "line longer than", NULL);
}

static void test_file_missing(void)
{
	struct srv_config c;
	char err[512] = "";

	srv_config_default(&c);
	CHECK_EQ_INT(srv_config_load_file(&c, "/nonexistent/rankdb.conf", err, sizeof(err)),
		     -ENOENT);
	CHECK(strstr(err, "/nonexistent/rankdb.conf") != NULL);
	/* A directory opens but cannot be read. */
	CHECK(srv_config_load_file(&c, "/", err, sizeof(err)) < 0);
	/* err may be NULL. */
	CHECK_EQ_INT(srv_config_load_file(&c, "/nonexistent/x", NULL, 0), -ENOENT);
}

static void set_num(struct srv_config *c, const char *name, uint64_t v, int want)
{
	char text[32], err[512] = "";

	snprintf(text, sizeof(text), "%llu", (unsigned long long)v);
	int r = srv_config_set(c, name, text, err, sizeof(err));
	CHECK_EQ_INT(r, want);
	if (r != want)
		fprintf(stderr, "  %s = %s: %s\n", name, text, err);
	if (r && !strstr(err, "allowed"))
		fprintf(stderr, "  %s: error without allowed range: %s\n", name, err);
	CHECK(r == 0 || strstr(err, "allowed") != NULL);
}

static void test_bounds(void)
{
	for (size_t i = 0; i < NBOUNDS; i++) {
		const struct bound *b = &bounds[i];
		struct srv_config c;

		srv_config_default(&c);
		set_num(&c, b->name, b->min, 0);
		CHECK_EQ_INT(field_u(&c, b), b->min);
		set_num(&c, b->name, b->max, 0);
		CHECK_EQ_INT(field_u(&c, b), b->max);
		if (b->min > 0)
			set_num(&c, b->name, b->min - 1, RDB_EINVAL);
		set_num(&c, b->name, b->max + 1, RDB_EINVAL);
		CHECK_EQ_INT(field_u(&c, b), b->max); /* failed sets change nothing */
	}
}

static void expect_set(const char *name, const char *value, int want, const char *frag)
{
	struct srv_config c;
	char err[512] = "";
	int r;

	srv_config_default(&c);
	r = srv_config_set(&c, name, value, err, sizeof(err));
	CHECK_EQ_INT(r, want);
	CHECK(!frag || strstr(err, frag) != NULL);
	if (r != want || (frag && !strstr(err, frag)))
		fprintf(stderr, "  %s = '%s': r=%d err=%s\n", name, value, r, err);
}

static void test_number_syntax(void)
{
	struct srv_config c;

	expect_set("http_port", "-1", RDB_EINVAL, "not a whole number");
	expect_set("http_port", "+5", RDB_EINVAL, NULL);
	expect_set("http_port", " 5", RDB_EINVAL, NULL);
	expect_set("http_port", "5 ", RDB_EINVAL, NULL);
	expect_set("http_port", "0x10", RDB_EINVAL, NULL);
	expect_set("http_port", "", RDB_EINVAL, NULL);
	expect_set("http_port", "99999999999999999999999", RDB_EINVAL, "out of range");
	expect_set("http_threads", "4K", RDB_EINVAL, "not a whole number");
	expect_set("max_body_bytes", "1.5M", RDB_EINVAL, "not a size");
	expect_set("max_body_bytes", "16MB", RDB_EINVAL, NULL);
	expect_set("max_body_bytes", "1023", RDB_EINVAL, "out of range (allowed 1K..1G)");
	expect_set("max_body_bytes", "1025M", RDB_EINVAL, "out of range");
	expect_set("index_map_bytes", "17T", RDB_EINVAL, "allowed 1M..16T");
	expect_set("index_map_bytes", "18446744073709551615T", RDB_EINVAL, "out of range");
	expect_set("index_map_bytes", "16777216T", RDB_EINVAL, "out of range"); /* 2^64 */
	expect_set("checkpoint_interval_s", "2d", RDB_EINVAL, "1..86400 seconds");
	expect_set("checkpoint_interval_s", "5M", RDB_EINVAL, "not a duration");
	expect_set("http_timeout_s", "0", RDB_EINVAL, "out of range");

	srv_config_default(&c);
	CHECK_EQ_INT(srv_config_set(&c, "max_body_bytes", "1G", NULL, 0), 0);
	CHECK_EQ_INT(c.max_body_bytes, 1ull << 30);
	CHECK_EQ_INT(srv_config_set(&c, "max_body_bytes", "1k", NULL, 0), 0);
	CHECK_EQ_INT(c.max_body_bytes, 1024);
	CHECK_EQ_INT(srv_config_set(&c, "checkpoint_interval_s", "1d", NULL, 0), 0);
	CHECK_EQ_INT(c.checkpoint_interval_s, 86400);
	CHECK_EQ_INT(srv_config_set(&c, "http_timeout_s", "1h", NULL, 0), 0);
	CHECK_EQ_INT(c.http_timeout_s, 3600);
	CHECK_EQ_INT(srv_config_set(&c, "max_response_bytes", "4G", NULL, 0), 0);
	CHECK_EQ_INT(c.max_response_bytes, 4ull << 30);
	CHECK_EQ_INT(srv_config_set(&c, "http_port", "007", NULL, 0), 0); /* decimal, not octal */
	CHECK_EQ_INT(c.http_port, 7);
}

static void test_strings_and_enums(void)
{
	static char big[5000];
	struct srv_config c;

	srv_config_default(&c);
	memset(big, 'd', sizeof(big));
	big[4095] = '\0';
	CHECK_EQ_INT(srv_config_set(&c, "data_dir", big, NULL, 0), 0);
	CHECK_EQ_INT(strlen(c.data_dir), 4095);
	big[4095] = 'd';
	big[4096] = '\0';
	expect_set("data_dir", big, RDB_EINVAL, "at most 4095 allowed");
	big[63] = '\0';
	CHECK_EQ_INT(srv_config_set(&c, "http_addr", big, NULL, 0), 0);
	big[63] = 'd';
	big[64] = '\0';
	expect_set("http_addr", big, RDB_EINVAL, "at most 63 allowed");
	expect_set("http_addr", "", RDB_EINVAL, "must not be empty");
	expect_set("port_file", "", 0, NULL);
	expect_set("port_file", "/run/rankdb.port", 0, NULL);
	expect_set("lp_default_job", "", 0, NULL);
	memset(big, 'j', 200);
	big[128] = '\0';
	CHECK_EQ_INT(srv_config_set(&c, "lp_default_job", big, NULL, 0), 0);
	big[128] = 'd';
	big[129] = '\0';
	expect_set("lp_default_job", big, RDB_EINVAL, "at most 128 allowed");
	expect_set("udp_addr", "", RDB_EINVAL, "must not be empty");

	expect_set("sync_policy", "none", 0, NULL);
	expect_set("sync_policy", "fdatasync", 0, NULL);
	expect_set("sync_policy", "None", RDB_EINVAL, "one of: fdatasync, none");
	expect_set("sync_policy", "", RDB_EINVAL, NULL);
	expect_set("log_level", "debug", 0, NULL);
	expect_set("log_level", "info", 0, NULL);
	expect_set("log_level", "warn", 0, NULL);
	expect_set("log_level", "error", 0, NULL);
	expect_set("log_level", "trace", RDB_EINVAL, "one of: debug, info, warn, error");
	expect_set("no_such_option", "1", RDB_EINVAL, "unknown option 'no_such_option'");
	expect_set("http-port", "1", RDB_EINVAL, "unknown option");
}

static void test_get_roundtrip(void)
{
	struct srv_config a, b;
	char buf[5000];

	srv_config_default(&a);
	CHECK_EQ_INT(srv_config_set(&a, "max_body_bytes", "1536K", NULL, 0), 0);
	CHECK_EQ_INT(srv_config_set(&a, "max_series", "123457", NULL, 0), 0);
	CHECK_EQ_INT(srv_config_set(&a, "index_map_bytes", "3T", NULL, 0), 0);
	CHECK_EQ_INT(srv_config_set(&a, "data_dir", "/d", NULL, 0), 0);
	memset(&b, 0, sizeof(b));
	for (size_t i = 0; i < NNAMES; i++) {
		CHECK_EQ_INT(srv_config_get(&a, all_names[i], buf, sizeof(buf)), 0);
		CHECK_EQ_INT(srv_config_set(&b, all_names[i], buf, NULL, 0), 0);
	}
	CHECK(same_config(&a, &b, true));
	CHECK(srv_config_get(&a, "max_body_bytes", buf, sizeof(buf)) == 0 &&
	      strcmp(buf, "1536K") == 0);
	CHECK(srv_config_get(&a, "index_map_bytes", buf, sizeof(buf)) == 0 &&
	      strcmp(buf, "3T") == 0);
	CHECK_EQ_INT(srv_config_get(&a, "nope", buf, sizeof(buf)), RDB_ENOTFOUND);
	CHECK_EQ_INT(srv_config_get(&a, "max_series", buf, 6), RDB_ELIMIT);
	CHECK_EQ_INT(srv_config_get(&a, "max_series", buf, 7), 0);
}

/* Runs parse_args on a NULL-terminated list (argv[0] added). */
static int run_args(struct srv_config *c, char *err, size_t errlen, bool *help, const char **cfg,
		    const char *const *args)
{
	char *argv[32];
	int argc = 0;

	argv[argc++] = (char *)"rankdbd";
	for (; *args && argc < 31; args++)
		argv[argc++] = (char *)*args;
	argv[argc] = NULL;
	return srv_config_parse_args(c, argc, argv, err, errlen, help, cfg);
}

static void test_args_override(void)
{
	const char *path = write_tmp("http_port = 1000\nhttp_threads = 3\nlog_level = warn\n");
	struct srv_config c;
	char err[512] = "";
	bool help = true;
	const char *cfg = NULL;

	/* Flags before the file. */
	srv_config_default(&c);
	const char *const a1[] = {"--http-port", "2000", "--log-level=error", "-c", path, NULL};
	CHECK_EQ_INT(run_args(&c, err, sizeof(err), &help, &cfg, a1), 0);
	CHECK_EQ_INT(c.http_port, 2000);
	CHECK_EQ_INT(c.http_threads, 3);
	CHECK(strcmp(c.log_level, "error") == 0);
	CHECK(!help);
	CHECK(cfg && strcmp(cfg, path) == 0);

	/* Flags after the file, both value forms, --config=FILE. */
	srv_config_default(&c);
	const char *const a2[] = {"--config=", NULL};
	CHECK_EQ_INT(run_args(&c, err, sizeof(err), &help, &cfg, a2), -ENOENT);
	char cfgflag[300];
	snprintf(cfgflag, sizeof(cfgflag), "--config=%s", path);
	const char *const a3[] = {
	    cfgflag, "--http-port=2001", "--data-dir", "/srv/rdb", "--max-body-bytes",
	    "1M",    "--port-file=",	 NULL};
	CHECK_EQ_INT(run_args(&c, err, sizeof(err), &help, &cfg, a3), 0);
	CHECK_EQ_INT(c.http_port, 2001);
	CHECK_EQ_INT(c.http_threads, 3);
	CHECK(strcmp(c.log_level, "warn") == 0);
	CHECK(strcmp(c.data_dir, "/srv/rdb") == 0);
	CHECK_EQ_INT(c.max_body_bytes, 1ull << 20);
	CHECK(strcmp(c.port_file, "") == 0);

	/* No file: flags only; a value may contain '='. */
	srv_config_default(&c);
	const char *const a4[] = {"--data-dir=/a=b", "--sync-policy", "none", NULL};
	CHECK_EQ_INT(run_args(&c, err, sizeof(err), &help, &cfg, a4), 0);
	CHECK(cfg == NULL);
	CHECK(strcmp(c.data_dir, "/a=b") == 0);
	CHECK(strcmp(c.sync_policy, "none") == 0);
	CHECK_EQ_INT(c.http_port, 7461);

	/* No arguments: nothing changes. */
	struct srv_config before;
	srv_config_default(&c);
	before = c;
	const char *const a5[] = {NULL};
	CHECK_EQ_INT(run_args(&c, err, sizeof(err), &help, &cfg, a5), 0);
	CHECK(memcmp(&c, &before, sizeof(c)) == 0);
	unlink(path);
}

/* Expects parse_args to fail with want, an error containing frag and *c
 * left untouched. */
static void expect_args_error(const char *const *args, int want, const char *frag)
{
	struct srv_config c, before;
	char err[512] = "";
	bool help = false;
	const char *cfg = NULL;
	int r;

	srv_config_default(&c);
	before = c;
	r = run_args(&c, err, sizeof(err), &help, &cfg, args);
	CHECK_EQ_INT(r, want);
	CHECK(strstr(err, frag) != NULL);
	CHECK(memcmp(&c, &before, sizeof(c)) == 0);
	CHECK(!help);
	if (r != want || !strstr(err, frag))
		fprintf(stderr, "  r=%d err=%s (wanted '%s')\n", r, err, frag);
}

static void test_args_errors(void)
{
	const char *good = write_tmp("http_port = 1000\n");
	char goodpath[256];
	snprintf(goodpath, sizeof(goodpath), "%s", good);

	const char *const a1[] = {"--no-such-flag", "1", NULL};
	expect_args_error(a1, RDB_EINVAL, "unknown flag '--no-such-flag'");
	const char *const a2[] = {"--http_port", "1", NULL};
	expect_args_error(a2, RDB_EINVAL, "'-', not '_'");
	const char *const a3[] = {"--http-port", NULL};
	expect_args_error(a3, RDB_EINVAL, "--http-port needs a value");
	const char *const a4[] = {"stray", NULL};
	expect_args_error(a4, RDB_EINVAL, "unexpected argument 'stray'");
	const char *const a5[] = {"-c", "/nonexistent/rankdb.conf", NULL};
	expect_args_error(a5, -ENOENT, "/nonexistent/rankdb.conf");
	const char *const a6[] = {"--http-port=1", "--http-port", "2", NULL};
	expect_args_error(a6, RDB_EINVAL, "'--http-port' given twice");
	const char *const a7[] = {"-c", goodpath, "--config", goodpath, NULL};
	expect_args_error(a7, RDB_EINVAL, "given twice");
	const char *const a8[] = {"-c", goodpath, "--http-port=65536", NULL};
	expect_args_error(a8, RDB_EINVAL,
			  "--http-port: '65536' is out of range (allowed 0..65535)");
	const char *const a9[] = {"--max-body-bytes", "lots", NULL};
	expect_args_error(a9, RDB_EINVAL, "--max-body-bytes: 'lots' is not a size");
	const char *const a10[] = {"-c", NULL};
	expect_args_error(a10, RDB_EINVAL, "-c needs a value");
	const char *const a11[] = {"--", NULL};
	expect_args_error(a11, RDB_EINVAL, "unexpected argument '--'");
	const char *const a12[] = {"-x", NULL};
	expect_args_error(a12, RDB_EINVAL, "unexpected argument '-x'");
	unlink(goodpath);

	/* A bad file reported through parse_args keeps its file:line. */
	const char *bad = write_tmp("http_port = 1\nhttp_port = 2\n");
	char want[300];
	snprintf(want, sizeof(want), "%s:2: http_port: set twice", bad);
	const char *const a13[] = {"--config", bad, NULL};
	expect_args_error(a13, RDB_EINVAL, want);
	unlink(bad);
}

static void test_help(void)
{
	struct srv_config c, before;
	char err[512] = "";
	bool help = false;
	const char *cfg = NULL;

	srv_config_default(&c);
	before = c;
	const char *const a1[] = {"-h", NULL};
	CHECK_EQ_INT(run_args(&c, err, sizeof(err), &help, &cfg, a1), 0);
	CHECK(help);
	help = false;
	/* Help wins over a later missing config file and applies nothing. */
	const char *const a2[] = {"--http-port", "5", "--help", "-c", "/nonexistent", NULL};
	CHECK_EQ_INT(run_args(&c, err, sizeof(err), &help, &cfg, a2), 0);
	CHECK(help);
	CHECK(cfg == NULL);
	CHECK(memcmp(&c, &before, sizeof(c)) == 0);
	/* "-h" as the value of a flag is a value, not a help request. */
	help = true;
	const char *const a3[] = {"--data-dir", "-h", NULL};
	CHECK_EQ_INT(run_args(&c, err, sizeof(err), &help, &cfg, a3), 0);
	CHECK(!help);
	CHECK(strcmp(c.data_dir, "-h") == 0);

	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	CHECK(f != NULL);
	if (!f)
		return;
	srv_config_print_help(f, "rankdbd");
	fclose(f);
	CHECK(strstr(text, "Usage: rankdbd") != NULL);
	CHECK(strstr(text, "--config FILE") != NULL);
	CHECK(strstr(text, "--max-body-bytes SIZE") != NULL);
	CHECK(strstr(text, "default 16M") != NULL);
	CHECK(strstr(text, "(1K..1G)") != NULL);
	CHECK(strstr(text, "--sync-policy fdatasync|none") != NULL);
	for (size_t i = 0; i < NNAMES; i++) {
		char flag[64];
		snprintf(flag, sizeof(flag), "--%s ", all_names[i]);
		for (char *p = flag; *p; p++)
			*p = *p == '_' ? '-' : *p;
		CHECK(strstr(text, flag) != NULL);
	}
	free(text);
}

/* Every option set away from its default, to prove a load sets them all. */
static void scramble(struct srv_config *c)
{
	char buf[5000];

	for (size_t i = 0; i < NBOUNDS; i++) {
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)bounds[i].max);
		CHECK_EQ_INT(srv_config_set(c, bounds[i].name, buf, NULL, 0), 0);
	}
	CHECK_EQ_INT(srv_config_set(c, "data_dir", "/elsewhere", NULL, 0), 0);
	CHECK_EQ_INT(srv_config_set(c, "http_addr", "::1", NULL, 0), 0);
	CHECK_EQ_INT(srv_config_set(c, "port_file", "/p", NULL, 0), 0);
	CHECK_EQ_INT(srv_config_set(c, "sync_policy", "none", NULL, 0), 0);
	CHECK_EQ_INT(srv_config_set(c, "log_level", "error", NULL, 0), 0);
	CHECK_EQ_INT(srv_config_set(c, "lp_default_job", "telegraf", NULL, 0), 0);
	CHECK_EQ_INT(srv_config_set(c, "udp_addr", "0.0.0.0", NULL, 0), 0);
}

static char *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t cap = 0, n = 0;

	if (!f)
		return NULL;
	for (;;) {
		if (n == cap) {
			cap = cap ? cap * 2 : 4096;
			char *nb = realloc(buf, cap);
			if (!nb) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = nb;
		}
		size_t got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	fclose(f);
	*len = n;
	return buf;
}

static void test_generated_conf(void)
{
	struct srv_config def, c;
	char *text = NULL, err[512] = "";
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	CHECK(f != NULL);
	if (!f)
		return;
	CHECK_EQ_INT(srv_config_write_conf(f), 0);
	fclose(f);
	const char *path = write_tmp(text);
	srv_config_default(&def);
	srv_config_default(&c);
	scramble(&c);
	CHECK(!same_config(&c, &def, false));
	CHECK_EQ_INT(srv_config_load_file(&c, path, err, sizeof(err)), 0);
	CHECK(same_config(&c, &def, true));
	CHECK(strstr(text, "data_dir = \"./data\"\n") != NULL);
	CHECK(strstr(text, "kill -9") != NULL);
	unlink(path);
	free(text);
}

/* conf/rankdb.conf loads to exactly the defaults and is byte-identical to
 * what the option table generates (regenerate it when the table changes). */
static void test_shipped_conf(void)
{
	const char *root = getenv("RDB_SOURCE_ROOT");
	char path[4096], err[512] = "";
	struct srv_config def, c;
	char *want = NULL, *have;
	size_t want_len = 0, have_len = 0;

	/* Without RDB_SOURCE_ROOT: run from build/tests/unit, or from build/. */
	snprintf(path, sizeof(path), "%s/conf/rankdb.conf", root ? root : "../..");
	if (!root && access(path, R_OK) != 0)
		snprintf(path, sizeof(path), "../conf/rankdb.conf");
	srv_config_default(&def);
	srv_config_default(&c);
	scramble(&c);
	CHECK_EQ_INT(srv_config_load_file(&c, path, err, sizeof(err)), 0);
	if (err[0])
		fprintf(stderr, "  %s (set RDB_SOURCE_ROOT to the source tree)\n", err);
	CHECK(same_config(&c, &def, true));

	FILE *f = open_memstream(&want, &want_len);
	CHECK(f != NULL);
	if (!f)
		return;
	srv_config_write_conf(f);
	fclose(f);
	have = read_all(path, &have_len);
	CHECK(have != NULL);
	CHECK(have && have_len == want_len && memcmp(have, want, want_len) == 0);
	if (have && (have_len != want_len || memcmp(have, want, want_len) != 0))
		fprintf(stderr, "  %s differs from srv_config_write_conf output\n", path);
	free(have);
	free(want);
}

static void test_log(void)
{
	struct srv_config c;

	srv_config_default(&c);
	c.http_port = 0;
	srv_config_log(&c); /* must not crash; lines go to stderr */
	CHECK(1);
}

int main(void)
{
	RUN(test_defaults);
	RUN(test_file_parse);
	RUN(test_file_errors);
	RUN(test_file_missing);
	RUN(test_bounds);
	RUN(test_number_syntax);
	RUN(test_strings_and_enums);
	RUN(test_get_roundtrip);
	RUN(test_args_override);
	RUN(test_args_errors);
	RUN(test_help);
	RUN(test_generated_conf);
	RUN(test_shipped_conf);
	RUN(test_log);
	return check_summary("test_config");
}
