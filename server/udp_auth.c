/* udp_auth.c - authenticated UDP (udp_auth.h): envelope parsing, the keys
 * file, MAC, skew and replay checks, drop counters.
 *
 * Design: the keys file is parsed into a fixed table (UDP_MAX_KEYS rows)
 * swapped under one mutex, like the tokens file (auth.c). Unlike tokens,
 * the server needs the secrets themselves to compute HMACs, so the file
 * holds them in hex and must be readable by rankdbd's user only (a file
 * readable by others is loaded with a warning). Secrets never reach a log
 * line; the table's memory is zeroed before it is freed.
 *
 * Replay window (per key, bounded): a FIFO ring of the SRV_UDP_REPLAY_SLOTS
 * most recent accepted (ts_ms, nonce) pairs with a chained hash over it,
 * and a floor: when the ring is full the oldest pair is forgotten and the
 * floor rises to its ts_ms. A datagram is a replay when its pair is in the
 * ring or its ts_ms is at or below the floor; a datagram older than the
 * skew window is stale before that. So a replay is caught whatever the
 * rate, and at more than SRV_UDP_REPLAY_SLOTS datagrams per key within the
 * skew window only datagrams older than the oldest remembered one (late
 * by that much) are refused. Windows are allocated on a key's first good
 * datagram and move to the new table on reload when the key id stays.
 *
 * Threading: one mutex over the table and its windows; verify holds it
 * for the HMAC of one datagram (at most udp_max_datagram_bytes).
 *
 * Failure: a bad keys file at start is a start-up error; on reload it is
 * refused and the keys in force stay. Verification never fails open: an
 * HMAC library error counts as bad_mac.
 */
#include "server/udp_auth.h"
#include "server/watchfile.h"
#include "common/rdb_buf.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"
#include "common/rdb_sha256.h"
#include "common/rdb_time.h"

#include <errno.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define UDP_MAX_KEYS   256
#define LINE_MAX_BYTES 2048
#define REPLAY_BUCKETS (SRV_UDP_REPLAY_SLOTS * 2)

struct replay {
	uint64_t ts_ms[SRV_UDP_REPLAY_SLOTS], nonce[SRV_UDP_REPLAY_SLOTS];
	int32_t next[SRV_UDP_REPLAY_SLOTS]; /* chain in the bucket, -1 ends */
	int32_t bucket[REPLAY_BUCKETS];	    /* first slot of the chain, -1 empty */
	uint32_t start, count;		    /* the ring: oldest slot, pairs held */
	uint64_t floor_ms;		    /* ts_ms at or below: refused (0: none) */
};

struct key {
	char id[SRV_UDP_KEY_ID_MAX + 1];
	char jobs[SRV_UDP_KEY_JOBS_MAX + 1];
	uint8_t secret[SRV_UDP_KEY_SECRET_MAX];
	size_t secret_len;
	struct replay *win; /* NULL until the key's first good datagram */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const struct srv_config *g_cfg;
static struct key *g_keys; /* under mu */
static size_t g_nkeys;
static struct srv_watch g_watch = SRV_WATCH_INIT; /* the keys file */
static _Atomic uint64_t g_drops[SRV_UDP_VERDICTS];

static const char *const verdict_names[SRV_UDP_VERDICTS] = {
    "ok", "malformed", "unsigned", "unknown_key", "bad_mac", "stale", "replay", "job_not_allowed"};

const char *srv_udp_verdict_name(enum srv_udp_verdict v)
{
	return (unsigned)v < SRV_UDP_VERDICTS ? verdict_names[v] : "unknown";
}

/* ---- envelope ------------------------------------------------------------------- */

static bool key_id_valid(const char *s, size_t n)
{
	if (n == 0 || n > SRV_UDP_KEY_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

int srv_udp_envelope_parse(const uint8_t *data, size_t len, struct srv_udp_envelope *env)
{
	if (len == 0 || data[0] != SRV_UDP_ENV_MAGIC)
		return RDB_ENOTFOUND;
	if (len < SRV_UDP_ENV_HEADER + 1 + SRV_UDP_ENV_MAC || data[1] != SRV_UDP_ENV_VERSION ||
	    data[3] != 0)
		return RDB_EINVAL;
	size_t idlen = data[2];
	if (len < SRV_UDP_ENV_HEADER + idlen + SRV_UDP_ENV_MAC ||
	    !key_id_valid((const char *)data + SRV_UDP_ENV_HEADER, idlen))
		return RDB_EINVAL;
	env->ts_ms = rdb_get_le64(data + 4);
	env->nonce = rdb_get_le64(data + 12);
	memcpy(env->key_id, data + SRV_UDP_ENV_HEADER, idlen);
	env->key_id[idlen] = 0;
	env->data = data;
	env->payload = data + SRV_UDP_ENV_HEADER + idlen;
	env->signed_len = len - SRV_UDP_ENV_MAC;
	env->payload_len = env->signed_len - SRV_UDP_ENV_HEADER - idlen;
	env->mac = data + env->signed_len;
	return 0;
}

int srv_udp_envelope_sign(const char *key_id, const uint8_t *secret, size_t secret_len,
			  uint64_t ts_ms, uint64_t nonce, const void *payload, size_t payload_len,
			  uint8_t *out, size_t cap, size_t *outlen)
{
	size_t idlen = strlen(key_id);
	if (!key_id_valid(key_id, idlen) || secret_len == 0)
		return RDB_EINVAL;
	size_t need = SRV_UDP_ENV_HEADER + idlen + payload_len + SRV_UDP_ENV_MAC;
	if (need > cap || payload_len > cap)
		return RDB_ELIMIT;
	out[0] = SRV_UDP_ENV_MAGIC;
	out[1] = SRV_UDP_ENV_VERSION;
	out[2] = (uint8_t)idlen;
	out[3] = 0;
	rdb_put_le64(out + 4, ts_ms);
	rdb_put_le64(out + 12, nonce);
	memcpy(out + SRV_UDP_ENV_HEADER, key_id, idlen);
	if (payload_len)
		memcpy(out + SRV_UDP_ENV_HEADER + idlen, payload, payload_len);
	size_t signed_len = need - SRV_UDP_ENV_MAC;
	int rc = rdb_hmac_sha256(secret, secret_len, out, signed_len, out + signed_len);
	if (rc == 0)
		*outlen = need;
	return rc;
}

/* ---- keys file ------------------------------------------------------------------ */

static int hex_val(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int secret_decode(const char *h, struct key *k)
{
	size_t n = strlen(h);
	if (n % 2 || n / 2 < SRV_UDP_KEY_SECRET_MIN || n / 2 > SRV_UDP_KEY_SECRET_MAX)
		return RDB_EINVAL;
	for (size_t i = 0; i < n / 2; i++) {
		int hi = hex_val(h[2 * i]), lo = hex_val(h[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return RDB_EINVAL;
		k->secret[i] = (uint8_t)(hi << 4 | lo);
	}
	k->secret_len = n / 2;
	return 0;
}

static void keys_free(struct key *t, size_t n)
{
	if (!t)
		return;
	for (size_t i = 0; i < n; i++)
		free(t[i].win);
	memset(t, 0, UDP_MAX_KEYS * sizeof(*t)); /* the secrets leave no copy */
	free(t);
}

/* Parses one non-comment line into k. 0 or RDB_EINVAL with err. */
static int parse_line(char *p, struct key *k, const char *path, int lineno, char *err,
		      size_t errlen)
{
	char id[128], jobs[1024], secret[256], extra[8];
	int got = sscanf(p, "%127s %1023s %255s %7s", id, jobs, secret, extra);
	int rc = 0;
	if (got != 3 || !key_id_valid(id, strlen(id)) || strlen(jobs) > SRV_UDP_KEY_JOBS_MAX) {
		snprintf(err, errlen,
			 "%s:%d: want '<id> <jobs> <secret-hex>' (id of [A-Za-z0-9._-], at most "
			 "%d bytes; jobs '*' or comma list of patterns)",
			 path, lineno, SRV_UDP_KEY_ID_MAX);
		rc = RDB_EINVAL;
	} else if (secret_decode(secret, k)) {
		snprintf(err, errlen, "%s:%d: key '%s': the secret must be %d..%d bytes as hex",
			 path, lineno, id, SRV_UDP_KEY_SECRET_MIN, SRV_UDP_KEY_SECRET_MAX);
		rc = RDB_EINVAL;
	} else {
		memcpy(k->id, id, strlen(id) + 1);
		memcpy(k->jobs, jobs, strlen(jobs) + 1);
	}
	memset(secret, 0, sizeof(secret));
	memset(p, 0, strlen(p));
	return rc;
}

/* Parses path into a new table. 0 or an error with err naming the line. */
static int load_file(const char *path, struct key **out, size_t *n, struct stat *st, char *err,
		     size_t errlen)
{
	FILE *f = fopen(path, "re");
	if (!f) {
		int rc = -errno;
		snprintf(err, errlen, "cannot open udp_keys_file %s: %s", path, strerror(errno));
		return rc;
	}
	struct key *t = calloc(UDP_MAX_KEYS, sizeof(*t));
	char line[LINE_MAX_BYTES];
	int rc = t ? 0 : -ENOMEM, lineno = 0;
	size_t k = 0;
	if (rc)
		snprintf(err, errlen, "out of memory reading %s", path);
	while (!rc && fgets(line, sizeof(line), f)) {
		lineno++;
		char *p = line + strspn(line, " \t");
		if (*p == '#' || *p == '\n' || *p == 0)
			continue;
		if (k == UDP_MAX_KEYS) {
			snprintf(err, errlen, "%s:%d: more than %d keys", path, lineno,
				 UDP_MAX_KEYS);
			rc = RDB_ELIMIT;
			break;
		}
		rc = parse_line(p, &t[k], path, lineno, err, errlen);
		for (size_t i = 0; !rc && i < k; i++)
			if (strcmp(t[i].id, t[k].id) == 0) {
				snprintf(err, errlen, "%s:%d: key id '%s' given twice", path,
					 lineno, t[k].id);
				rc = RDB_EINVAL;
			}
		k += rc == 0;
	}
	memset(line, 0, sizeof(line));
	if (!rc && !feof(f)) {
		snprintf(err, errlen, "%s: line %d too long or unreadable", path, lineno + 1);
		rc = RDB_EINVAL;
	}
	if (!rc && fstat(fileno(f), st) != 0)
		rc = -errno;
	fclose(f);
	if (rc) {
		keys_free(t, k);
		return rc;
	}
	if (st->st_mode & 077)
		rdb_warn("udp",
			 "udp_keys_file %s is readable by others (mode %03o): it holds the "
			 "secrets in clear; chmod 600 it",
			 path, (unsigned)(st->st_mode & 0777));
	*out = t;
	*n = k;
	return 0;
}

/* Installs table t (n keys): the windows of kept key ids move over. */
static void install_locked(struct key *t, size_t n, const struct stat *st)
{
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < g_nkeys; j++)
			if (strcmp(t[i].id, g_keys[j].id) == 0) {
				t[i].win = g_keys[j].win;
				g_keys[j].win = NULL;
				break;
			}
	keys_free(g_keys, g_nkeys);
	g_keys = t;
	g_nkeys = n;
	srv_watch_loaded(&g_watch, st);
}

int srv_udp_auth_init(const struct srv_config *cfg, char *err, size_t errlen)
{
	g_cfg = cfg;
	if (!cfg->udp_keys_file[0])
		return 0;
	struct key *t;
	size_t n;
	struct stat st;
	int rc = load_file(cfg->udp_keys_file, &t, &n, &st, err, errlen);
	if (rc)
		return rc;
	pthread_mutex_lock(&mu);
	install_locked(t, n, &st);
	pthread_mutex_unlock(&mu);
	rdb_info("udp", "%zu UDP keys loaded from %s", n, cfg->udp_keys_file);
	return 0;
}

bool srv_udp_auth_enabled(void)
{
	return g_cfg && g_cfg->udp_keys_file[0];
}

bool srv_udp_auth_unsigned_ok(void)
{
	if (!g_cfg)
		return true;
	const char *v = g_cfg->udp_allow_unauthenticated;
	if (strcmp(v, "on") == 0)
		return true;
	if (strcmp(v, "off") == 0)
		return false;
	return !srv_udp_auth_enabled(); /* auto */
}

int srv_udp_auth_reload(char *msg, size_t msglen)
{
	if (!srv_udp_auth_enabled()) {
		snprintf(msg, msglen, "no udp_keys_file configured");
		return RDB_ENOTFOUND;
	}
	struct key *t;
	size_t n;
	struct stat st = {0};
	int rc = load_file(g_cfg->udp_keys_file, &t, &n, &st, msg, msglen);
	if (rc) {
		srv_watch_loaded(&g_watch, &st); /* st_ino 0 (unreadable): the old stat stays */
		rdb_error("udp", "UDP keys file refused, the keys in force stay: %s", msg);
		return rc;
	}
	pthread_mutex_lock(&mu);
	install_locked(t, n, &st);
	pthread_mutex_unlock(&mu);
	snprintf(msg, msglen, "%zu UDP keys loaded from %s", n, g_cfg->udp_keys_file);
	rdb_info("udp", "%s", msg);
	return 0;
}

/* Reloads when the file changed since it was loaded (checked once a second). */
static void maybe_reload(void)
{
	char msg[512];
	if (srv_udp_auth_enabled() && srv_watch_changed(&g_watch, g_cfg->udp_keys_file))
		srv_udp_auth_reload(msg, sizeof(msg));
}

/* ---- replay window -------------------------------------------------------------- */

static uint32_t pair_bucket(uint64_t ts_ms, uint64_t nonce)
{
	uint64_t h = (ts_ms * 0x9E3779B97F4A7C15ull) ^ (nonce * 0xC2B2AE3D27D4EB4Full);
	h ^= h >> 29;
	return (uint32_t)(h % REPLAY_BUCKETS);
}

static struct replay *replay_new(void)
{
	struct replay *r = malloc(sizeof(*r));
	if (!r)
		return NULL;
	memset(r->bucket, 0xff, sizeof(r->bucket)); /* every chain empty (-1) */
	r->start = r->count = 0;
	r->floor_ms = 0;
	return r;
}

static bool replay_seen(const struct replay *r, uint64_t ts_ms, uint64_t nonce)
{
	if (r->floor_ms && ts_ms <= r->floor_ms)
		return true;
	for (int32_t i = r->bucket[pair_bucket(ts_ms, nonce)]; i >= 0; i = r->next[i])
		if (r->ts_ms[i] == ts_ms && r->nonce[i] == nonce)
			return true;
	return false;
}

/* Forgets the oldest pair; the floor rises to its time. */
static void replay_evict(struct replay *r)
{
	uint32_t s = r->start;
	int32_t *link = &r->bucket[pair_bucket(r->ts_ms[s], r->nonce[s])];
	while (*link >= 0 && (uint32_t)*link != s)
		link = &r->next[*link];
	if (*link >= 0)
		*link = r->next[s];
	if (r->ts_ms[s] > r->floor_ms)
		r->floor_ms = r->ts_ms[s];
	r->start = (s + 1) % SRV_UDP_REPLAY_SLOTS;
	r->count--;
}

static void replay_add(struct replay *r, uint64_t ts_ms, uint64_t nonce)
{
	if (r->count == SRV_UDP_REPLAY_SLOTS)
		replay_evict(r);
	uint32_t s = (r->start + r->count) % SRV_UDP_REPLAY_SLOTS;
	uint32_t b = pair_bucket(ts_ms, nonce);
	r->ts_ms[s] = ts_ms;
	r->nonce[s] = nonce;
	r->next[s] = r->bucket[b];
	r->bucket[b] = (int32_t)s;
	r->count++;
}

/* ---- verification ---------------------------------------------------------------- */

static enum srv_udp_verdict verify_locked(const struct srv_udp_envelope *env, int64_t now_ms,
					  char *jobs, size_t jobslen)
{
	struct key *k = NULL;
	for (size_t i = 0; i < g_nkeys; i++)
		if (strcmp(g_keys[i].id, env->key_id) == 0) {
			k = &g_keys[i];
			break;
		}
	if (!k)
		return SRV_UDP_UNKNOWN_KEY;
	uint8_t mac[RDB_SHA256_BYTES];
	if (rdb_hmac_sha256(k->secret, k->secret_len, env->data, env->signed_len, mac) != 0 ||
	    !rdb_ct_equal(mac, env->mac, SRV_UDP_ENV_MAC))
		return SRV_UDP_BAD_MAC;
	int64_t skew_ms = (int64_t)g_cfg->udp_max_skew_s * 1000;
	if (env->ts_ms > (uint64_t)INT64_MAX || (int64_t)env->ts_ms < now_ms - skew_ms ||
	    (int64_t)env->ts_ms > now_ms + skew_ms)
		return SRV_UDP_STALE;
	if (!k->win && !(k->win = replay_new()))
		return SRV_UDP_REPLAY; /* no memory for the window: never fail open */
	if (replay_seen(k->win, env->ts_ms, env->nonce))
		return SRV_UDP_REPLAY;
	replay_add(k->win, env->ts_ms, env->nonce);
	snprintf(jobs, jobslen, "%s", k->jobs);
	return SRV_UDP_OK;
}

enum srv_udp_verdict srv_udp_auth_verify(const struct srv_udp_envelope *env, int64_t now_ms,
					 char *jobs, size_t jobslen)
{
	if (!srv_udp_auth_enabled())
		return SRV_UDP_UNKNOWN_KEY;
	maybe_reload();
	pthread_mutex_lock(&mu);
	enum srv_udp_verdict v = verify_locked(env, now_ms, jobs, jobslen);
	pthread_mutex_unlock(&mu);
	return v;
}

bool srv_udp_auth_job_ok(const char *jobs, const char *job, size_t len)
{
	if (strcmp(jobs, "*") == 0)
		return true;
	char j[256], pats[SRV_UDP_KEY_JOBS_MAX + 1];
	if (len >= sizeof(j))
		return false;
	memcpy(j, job, len);
	j[len] = 0;
	snprintf(pats, sizeof(pats), "%s", jobs);
	for (char *save = NULL, *p = strtok_r(pats, ",", &save); p; p = strtok_r(NULL, ",", &save))
		if (fnmatch(p, j, 0) == 0)
			return true;
	return false;
}

void srv_udp_auth_count(enum srv_udp_verdict v)
{
	if (v > SRV_UDP_OK && v < SRV_UDP_VERDICTS)
		atomic_fetch_add(&g_drops[v], 1);
}

void srv_udp_auth_metrics(struct rdb_buf *b)
{
	for (int v = SRV_UDP_MALFORMED; v < SRV_UDP_VERDICTS; v++)
		rdb_buf_printf(b, "rankdb_udp_dropped_total{reason=\"%s\"} %llu\n",
			       verdict_names[v], (unsigned long long)atomic_load(&g_drops[v]));
}

void srv_udp_auth_shutdown(void)
{
	pthread_mutex_lock(&mu);
	keys_free(g_keys, g_nkeys);
	g_keys = NULL;
	g_nkeys = 0;
	pthread_mutex_unlock(&mu);
}
