/* test_udp_auth.c - unit tests of server/udp_auth: the worked example of
 * docs/API.md ("Signed datagrams") byte for byte, envelope parsing edge
 * cases, the keys file (load, bad lines, reload keeping replay windows)
 * and every verdict: unknown key, bad MAC, stale, replay, the replay
 * window's floor past SRV_UDP_REPLAY_SLOTS, job patterns.
 */
#include "server/udp_auth.h"

#include "common/rdb_err.h"
#include "tests/unit/check.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* docs/API.md's worked example. */
#define EX_KEY_ID  "team-a"
#define EX_SECRET  "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
#define EX_TS_MS   1767225600000ull
#define EX_NONCE   42ull
#define EX_PAYLOAD "train,job=team-a-run1,rank=0 loss=2.25,step=100i"
#define EX_HEADER  "fe01060000a8da769b0100002a000000000000007465616d2d61"
#define EX_MAC	   "076cf1d3764d065e8b40cda0d76ea4508efd1520f4c2e91f97381cf056acd61a"

static uint8_t ex_secret[32];
static char keys_path[256];
static struct srv_config cfg;

static void to_hex(const uint8_t *p, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", p[i]);
}

static void write_keys(const char *text)
{
	FILE *f = fopen(keys_path, "w");
	fputs(text, f);
	fclose(f);
}

static size_t sign(const char *id, uint64_t ts_ms, uint64_t nonce, const char *payload,
		   uint8_t *out, size_t cap)
{
	size_t n = 0;
	CHECK_EQ_INT(srv_udp_envelope_sign(id, ex_secret, sizeof(ex_secret), ts_ms, nonce, payload,
					   strlen(payload), out, cap, &n),
		     0);
	return n;
}

static void test_worked_example(void)
{
	uint8_t d[256];
	char hex[2 * sizeof(d) + 1];
	size_t n = sign(EX_KEY_ID, EX_TS_MS, EX_NONCE, EX_PAYLOAD, d, sizeof(d));
	CHECK_EQ_INT(n, 106);
	to_hex(d, 26, hex);
	CHECK(strcmp(hex, EX_HEADER) == 0);
	CHECK(memcmp(d + 26, EX_PAYLOAD, strlen(EX_PAYLOAD)) == 0);
	to_hex(d + n - 32, 32, hex);
	CHECK(strcmp(hex, EX_MAC) == 0);

	struct srv_udp_envelope e;
	CHECK_EQ_INT(srv_udp_envelope_parse(d, n, &e), 0);
	CHECK(strcmp(e.key_id, EX_KEY_ID) == 0);
	CHECK_EQ_INT(e.ts_ms, EX_TS_MS);
	CHECK_EQ_INT(e.nonce, EX_NONCE);
	CHECK_EQ_INT(e.payload_len, strlen(EX_PAYLOAD));
	CHECK(memcmp(e.payload, EX_PAYLOAD, e.payload_len) == 0);
	CHECK_EQ_INT(e.signed_len, n - 32);
}

static void test_parse_edges(void)
{
	uint8_t d[256];
	struct srv_udp_envelope e;
	size_t n = sign("k", 1, 2, "", d, sizeof(d));
	CHECK_EQ_INT(srv_udp_envelope_parse(d, n, &e), 0); /* empty payload parses */
	CHECK_EQ_INT(e.payload_len, 0);
	CHECK_EQ_INT(srv_udp_envelope_parse(d, n - 1, &e), RDB_EINVAL); /* MAC cut */
	CHECK_EQ_INT(srv_udp_envelope_parse((const uint8_t *)"train v=1", 9, &e), RDB_ENOTFOUND);
	CHECK_EQ_INT(srv_udp_envelope_parse((const uint8_t *)"{}", 2, &e), RDB_ENOTFOUND);
	CHECK_EQ_INT(srv_udp_envelope_parse(d, 0, &e), RDB_ENOTFOUND);
	d[1] = 2; /* unknown version */
	CHECK_EQ_INT(srv_udp_envelope_parse(d, n, &e), RDB_EINVAL);
	d[1] = 1;
	d[3] = 1; /* reserved flags */
	CHECK_EQ_INT(srv_udp_envelope_parse(d, n, &e), RDB_EINVAL);
	d[3] = 0;
	d[2] = 0; /* empty key id */
	CHECK_EQ_INT(srv_udp_envelope_parse(d, n, &e), RDB_EINVAL);
	d[2] = 200; /* key id past the end */
	CHECK_EQ_INT(srv_udp_envelope_parse(d, n, &e), RDB_EINVAL);
	d[2] = 1;
	d[20] = ' '; /* key id with a bad byte */
	CHECK_EQ_INT(srv_udp_envelope_parse(d, n, &e), RDB_EINVAL);
	size_t m = 0;
	CHECK_EQ_INT(srv_udp_envelope_sign("bad id", ex_secret, 32, 1, 1, "x", 1, d, sizeof(d), &m),
		     RDB_EINVAL);
	CHECK_EQ_INT(srv_udp_envelope_sign("k", ex_secret, 32, 1, 1, "x", 1, d, 40, &m),
		     RDB_ELIMIT);
}

static enum srv_udp_verdict check(const uint8_t *d, size_t n, int64_t now_ms, char *jobs)
{
	struct srv_udp_envelope e;
	if (srv_udp_envelope_parse(d, n, &e) != 0)
		return SRV_UDP_MALFORMED;
	return srv_udp_auth_verify(&e, now_ms, jobs, SRV_UDP_KEY_JOBS_MAX + 1);
}

static void test_verdicts(void)
{
	char err[512], jobs[SRV_UDP_KEY_JOBS_MAX + 1];
	uint8_t d[256];
	int64_t now = (int64_t)EX_TS_MS + 1000;
	write_keys("# id jobs secret\n" EX_KEY_ID " team-a-*,shared " EX_SECRET "\n");
	CHECK_EQ_INT(srv_udp_auth_init(&cfg, err, sizeof(err)), 0);
	CHECK(srv_udp_auth_enabled());
	CHECK(!srv_udp_auth_unsigned_ok()); /* auto with a keys file */

	size_t n = sign(EX_KEY_ID, EX_TS_MS, EX_NONCE, EX_PAYLOAD, d, sizeof(d));
	CHECK_EQ_INT(check(d, n, now, jobs), SRV_UDP_OK);
	CHECK(strcmp(jobs, "team-a-*,shared") == 0);
	CHECK_EQ_INT(check(d, n, now, jobs), SRV_UDP_REPLAY); /* the same datagram again */
	n = sign(EX_KEY_ID, EX_TS_MS, EX_NONCE + 1, EX_PAYLOAD, d, sizeof(d));
	CHECK_EQ_INT(check(d, n, now, jobs), SRV_UDP_OK); /* same time, other nonce */
	n = sign(EX_KEY_ID, EX_TS_MS - 31000, 7, EX_PAYLOAD, d, sizeof(d));
	CHECK_EQ_INT(check(d, n, now, jobs), SRV_UDP_STALE);
	n = sign(EX_KEY_ID, (uint64_t)now + 31000, 7, EX_PAYLOAD, d, sizeof(d));
	CHECK_EQ_INT(check(d, n, now, jobs), SRV_UDP_STALE); /* from the future */
	n = sign("other", EX_TS_MS, 7, EX_PAYLOAD, d, sizeof(d));
	CHECK_EQ_INT(check(d, n, now, jobs), SRV_UDP_UNKNOWN_KEY);
	n = sign(EX_KEY_ID, EX_TS_MS, 8, EX_PAYLOAD, d, sizeof(d));
	d[30] ^= 1; /* a payload byte flipped in transit */
	CHECK_EQ_INT(check(d, n, now, jobs), SRV_UDP_BAD_MAC);
	d[30] ^= 1;
	CHECK_EQ_INT(check(d, n, now, jobs), SRV_UDP_OK); /* a bad MAC is not remembered */

	CHECK(srv_udp_auth_job_ok("team-a-*,shared", "team-a-run1", 11));
	CHECK(srv_udp_auth_job_ok("team-a-*,shared", "shared", 6));
	CHECK(!srv_udp_auth_job_ok("team-a-*,shared", "team-b-run1", 11));
	CHECK(srv_udp_auth_job_ok("*", "anything", 8));
}

/* More pairs than the window holds: the oldest are forgotten, and the
 * floor still refuses their replay. */
static void test_replay_floor(void)
{
	char jobs[SRV_UDP_KEY_JOBS_MAX + 1], err[512], msg[512];
	uint8_t d[256];
	int64_t now = (int64_t)EX_TS_MS + 1000;
	write_keys(EX_KEY_ID " * " EX_SECRET "\n");
	CHECK_EQ_INT(srv_udp_auth_init(&cfg, err, sizeof(err)), 0);
	int ok = 0;
	for (uint64_t i = 0; i < SRV_UDP_REPLAY_SLOTS + 10; i++) {
		size_t n = sign(EX_KEY_ID, EX_TS_MS + i, 1000 + i, "x v=1", d, sizeof(d));
		ok += check(d, n, now, jobs) == SRV_UDP_OK;
	}
	CHECK_EQ_INT(ok, SRV_UDP_REPLAY_SLOTS + 10);
	size_t n = sign(EX_KEY_ID, EX_TS_MS, 1000, "x v=1", d, sizeof(d)); /* forgotten pair */
	CHECK_EQ_INT(check(d, n, now, jobs), SRV_UDP_REPLAY);
	n = sign(EX_KEY_ID, EX_TS_MS + SRV_UDP_REPLAY_SLOTS + 9, 1000 + SRV_UDP_REPLAY_SLOTS + 9,
		 "x v=1", d, sizeof(d)); /* the newest, still remembered */
	CHECK_EQ_INT(check(d, n, now, jobs), SRV_UDP_REPLAY);

	/* A reload keeps the window of a kept key; a revoked key is unknown. */
	write_keys(EX_KEY_ID " * " EX_SECRET "\nsecond * " EX_SECRET "\n");
	CHECK_EQ_INT(srv_udp_auth_reload(msg, sizeof(msg)), 0);
	CHECK_EQ_INT(check(d, n, now, jobs), SRV_UDP_REPLAY);
	write_keys("second * " EX_SECRET "\n");
	CHECK_EQ_INT(srv_udp_auth_reload(msg, sizeof(msg)), 0);
	n = sign(EX_KEY_ID, EX_TS_MS + 1, 5, "x v=1", d, sizeof(d));
	CHECK_EQ_INT(check(d, n, now, jobs), SRV_UDP_UNKNOWN_KEY);
}

static void test_bad_files(void)
{
	char err[512], msg[512], jobs[SRV_UDP_KEY_JOBS_MAX + 1];
	uint8_t d[256];
	write_keys("k1 * 0011\n"); /* secret too short */
	CHECK(srv_udp_auth_init(&cfg, err, sizeof(err)) != 0);
	CHECK(strstr(err, ":1:") != NULL);
	CHECK(strstr(err, "0011") == NULL); /* never the secret */
	write_keys("k1 * " EX_SECRET "\nk1 * " EX_SECRET "\n");
	CHECK(srv_udp_auth_init(&cfg, err, sizeof(err)) != 0);
	CHECK(strstr(err, "twice") != NULL);
	write_keys("k1 * " EX_SECRET "\n");
	CHECK_EQ_INT(srv_udp_auth_init(&cfg, err, sizeof(err)), 0);
	write_keys("k1 * zz" EX_SECRET "\n"); /* a bad reload: k1 stays */
	CHECK(srv_udp_auth_reload(msg, sizeof(msg)) != 0);
	size_t n = sign("k1", EX_TS_MS, 1, "x v=1", d, sizeof(d));
	CHECK_EQ_INT(check(d, n, (int64_t)EX_TS_MS, jobs), SRV_UDP_OK);
}

int main(void)
{
	const char *dir = getenv("RDB_TEST_TMP");
	snprintf(keys_path, sizeof(keys_path), "%s/udp_keys_%d", dir ? dir : "/tmp", (int)getpid());
	for (int i = 0; i < 32; i++)
		ex_secret[i] = (uint8_t)i;
	srv_config_default(&cfg);
	snprintf(cfg.udp_keys_file, sizeof(cfg.udp_keys_file), "%s", keys_path);
	RUN(test_worked_example);
	RUN(test_parse_edges);
	RUN(test_verdicts);
	RUN(test_replay_floor);
	RUN(test_bad_files);
	srv_udp_auth_shutdown();
	unlink(keys_path);
	return check_summary("udp_auth");
}
