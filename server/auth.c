/* auth.c - scoped API tokens (auth.h).
 *
 * Design: the tokens file is parsed into a fixed table (AUTH_MAX_TOKENS
 * rows) swapped under one mutex; secrets exist only as SHA-256 hashes
 * (common/rdb_sha256.h, GnuTLS) and are compared in constant time. A token
 * whose id is unknown is still hashed and compared against a dummy, so the
 * answer time does not say whether an id exists. Refusals never say which
 * part failed: the body is the same for an unknown id, a wrong secret, a
 * wrong scope and a job outside the token's patterns.
 *
 * Reload: SIGHUP (main.c), and a stat of the file at most once a second
 * from the request path; a changed file (mtime, size, inode) is read again.
 * A bad file is refused, logged, and the tokens in force stay.
 *
 * Failure: a request with no credential is 401 (with WWW-Authenticate:
 * Basic so a browser asks), anything else refused is 403; every failure is
 * counted by reason for /metrics and audited (rate-limited in
 * admin_routes.c).
 */
#include "server/auth.h"
#include "server/srv.h"
#include "server/watchfile.h"
#include "common/rdb_err.h"
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

#define AUTH_MAX_TOKENS 1024
#define LINE_MAX_BYTES	2048

struct token {
	char id[SRV_AUTH_ID_MAX + 1];
	unsigned scopes;
	char jobs[SRV_AUTH_JOBS_MAX + 1];
	uint8_t hash[RDB_SHA256_BYTES];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const struct srv_config *g_cfg;
static struct token *g_tokens; /* under mu */
static size_t g_ntokens;
static struct srv_watch g_watch = SRV_WATCH_INIT; /* the tokens file */

enum fail_reason { F_MISSING, F_MALFORMED, F_UNKNOWN, F_SCOPE, F_JOB, F_N };
static const char *const fail_names[F_N] = {"missing", "malformed", "bad_token", "scope", "job"};
static _Atomic uint64_t g_fail[F_N];

static bool ct_eq(const uint8_t *a, const uint8_t *b, size_t n)
{
	unsigned d = 0;
	for (size_t i = 0; i < n; i++)
		d |= (unsigned)(a[i] ^ b[i]);
	return d == 0;
}

static int parse_scopes(const char *s, unsigned *out)
{
	char buf[128];
	*out = 0;
	if (strlen(s) >= sizeof(buf))
		return RDB_EINVAL;
	memcpy(buf, s, strlen(s) + 1);
	for (char *save = NULL, *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
		if (strcmp(w, "ingest") == 0)
			*out |= SRV_AUTH_INGEST;
		else if (strcmp(w, "query") == 0)
			*out |= SRV_AUTH_QUERY;
		else if (strcmp(w, "admin") == 0)
			*out |= SRV_AUTH_ADMIN;
		else
			return RDB_EINVAL;
	}
	return *out ? 0 : RDB_EINVAL;
}

static int hex_decode(const char *h, uint8_t *out, size_t n)
{
	if (strlen(h) != 2 * n)
		return RDB_EINVAL;
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		if (sscanf(h + 2 * i, "%2x", &v) != 1 ||
		    !strchr("0123456789abcdefABCDEF", h[2 * i]) ||
		    !strchr("0123456789abcdefABCDEF", h[2 * i + 1]))
			return RDB_EINVAL;
		out[i] = (uint8_t)v;
	}
	return 0;
}

/* Parses path into a new table. 0 or an error with err naming the line. */
static int load_file(const char *path, struct token **out, size_t *n, struct stat *st, char *err,
		     size_t errlen)
{
	FILE *f = fopen(path, "re");
	if (!f) {
		snprintf(err, errlen, "cannot open tokens_file %s: %s", path, strerror(errno));
		return -errno;
	}
	struct token *t = calloc(AUTH_MAX_TOKENS, sizeof(*t));
	char line[LINE_MAX_BYTES];
	int rc = t ? 0 : -ENOMEM, lineno = 0;
	size_t k = 0;
	if (rc)
		snprintf(err, errlen, "out of memory reading %s", path);
	while (!rc && fgets(line, sizeof(line), f)) {
		lineno++;
		char id[128], sc[128], jobs[1024], hash[128], extra[8];
		char *p = line + strspn(line, " \t");
		if (*p == '#' || *p == '\n' || *p == 0)
			continue;
		int got = sscanf(p, "%127s %127s %1023s %127s %7s", id, sc, jobs, hash, extra);
		if (got != 4 || strlen(id) > SRV_AUTH_ID_MAX || strchr(id, '.') ||
		    strlen(jobs) > SRV_AUTH_JOBS_MAX) {
			snprintf(err, errlen,
				 "%s:%d: want '<id> <scopes> <jobs> <sha256-hex>' (id "
				 "without '.', at most %d bytes)",
				 path, lineno, SRV_AUTH_ID_MAX);
			rc = RDB_EINVAL;
		} else if (k == AUTH_MAX_TOKENS) {
			snprintf(err, errlen, "%s:%d: more than %d tokens", path, lineno,
				 AUTH_MAX_TOKENS);
			rc = RDB_ELIMIT;
		} else if (parse_scopes(sc, &t[k].scopes)) {
			snprintf(err, errlen,
				 "%s:%d: scopes '%s': want a comma list of ingest, "
				 "query, admin",
				 path, lineno, sc);
			rc = RDB_EINVAL;
		} else if (hex_decode(hash, t[k].hash, RDB_SHA256_BYTES)) {
			snprintf(err, errlen, "%s:%d: the hash must be 64 hex digits (SHA-256)",
				 path, lineno);
			rc = RDB_EINVAL;
		} else {
			/* lengths checked above: they fit with their NUL */
			memcpy(t[k].id, id, strlen(id) + 1);
			memcpy(t[k].jobs, jobs, strlen(jobs) + 1);
			k++;
		}
	}
	if (!rc && !feof(f)) {
		snprintf(err, errlen, "%s: line %d too long or unreadable", path, lineno + 1);
		rc = RDB_EINVAL;
	}
	if (!rc && fstat(fileno(f), st) != 0)
		rc = -errno;
	fclose(f);
	if (rc) {
		free(t);
		return rc;
	}
	*out = t;
	*n = k;
	return 0;
}

int srv_auth_init(const struct srv_config *cfg, char *err, size_t errlen)
{
	g_cfg = cfg;
	if (!cfg->tokens_file[0])
		return 0;
	struct token *t;
	size_t n;
	struct stat st;
	int rc = load_file(cfg->tokens_file, &t, &n, &st, err, errlen);
	if (rc)
		return rc;
	pthread_mutex_lock(&mu);
	free(g_tokens);
	g_tokens = t;
	g_ntokens = n;
	pthread_mutex_unlock(&mu);
	srv_watch_loaded(&g_watch, &st);
	rdb_info("auth", "%zu tokens loaded from %s", n, cfg->tokens_file);
	return 0;
}

bool srv_auth_enabled(void)
{
	return g_cfg && g_cfg->tokens_file[0];
}

int srv_auth_reload(char *msg, size_t msglen)
{
	if (!srv_auth_enabled()) {
		snprintf(msg, msglen, "no tokens_file configured");
		return RDB_ENOTFOUND;
	}
	struct token *t;
	size_t n;
	struct stat st = {0};
	int rc = load_file(g_cfg->tokens_file, &t, &n, &st, msg, msglen);
	srv_watch_loaded(&g_watch, &st); /* st_ino 0 (unreadable): the old stat stays */
	if (rc) {
		rdb_error("auth", "tokens file refused, the tokens in force stay: %s", msg);
		return rc;
	}
	pthread_mutex_lock(&mu);
	free(g_tokens);
	g_tokens = t;
	g_ntokens = n;
	pthread_mutex_unlock(&mu);
	snprintf(msg, msglen, "%zu tokens loaded from %s", n, g_cfg->tokens_file);
	rdb_info("auth", "%s", msg);
	return 0;
}

/* Reloads when the file changed since it was loaded (checked once a second). */
static void maybe_reload(void)
{
	char msg[512];
	if (srv_auth_enabled() && srv_watch_changed(&g_watch, g_cfg->tokens_file))
		srv_auth_reload(msg, sizeof(msg));
}

static int b64_val(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+' || c == '-')
		return 62;
	if (c == '/' || c == '_')
		return 63;
	return -1;
}

/* Decodes base64 (padding optional) into out (NUL-terminated). */
static int b64_decode(const char *s, char *out, size_t outlen)
{
	size_t o = 0;
	unsigned acc = 0;
	int bits = 0;
	for (; *s && *s != '='; s++) {
		int v = b64_val(*s);
		if (v < 0)
			return RDB_EINVAL;
		acc = (acc << 6) | (unsigned)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (o + 1 >= outlen)
				return RDB_EINVAL;
			char c = (char)((acc >> bits) & 0xff);
			if (c == 0)
				return RDB_EINVAL;
			out[o++] = c;
		}
	}
	while (*s == '=')
		s++;
	if (*s)
		return RDB_EINVAL;
	out[o] = 0;
	return 0;
}

static int user_pass(const char *u, const char *p, char *tok, size_t toklen)
{
	int n;
	if (strchr(p, '.') || !u[0])
		n = snprintf(tok, toklen, "%s", p);
	else
		n = snprintf(tok, toklen, "%s.%s", u, p);
	return n > 0 && (size_t)n < toklen ? 0 : RDB_EINVAL;
}

int srv_auth_parse(const char *authz, const char *u, const char *p, char *tok, size_t toklen)
{
	if (toklen == 0)
		return RDB_EINVAL;
	tok[0] = 0;
	if (authz && authz[0]) {
		const char *sp = strchr(authz, ' ');
		if (!sp)
			return RDB_EINVAL;
		size_t sl = (size_t)(sp - authz);
		const char *v = sp + strspn(sp, " ");
		if (!v[0])
			return RDB_EINVAL;
		if ((sl == 6 && strncasecmp(authz, "Bearer", 6) == 0) ||
		    (sl == 5 && strncasecmp(authz, "Token", 5) == 0)) {
			int n = snprintf(tok, toklen, "%s", v);
			return n > 0 && (size_t)n < toklen && !strchr(tok, ' ') ? 0 : RDB_EINVAL;
		}
		if (sl == 5 && strncasecmp(authz, "Basic", 5) == 0) {
			char dec[2 * SRV_AUTH_TOKEN_MAX];
			if (b64_decode(v, dec, sizeof(dec)))
				return RDB_EINVAL;
			char *colon = strchr(dec, ':');
			if (!colon)
				return RDB_EINVAL;
			*colon = 0;
			return user_pass(dec, colon + 1, tok, toklen);
		}
		return RDB_EINVAL;
	}
	if (p && p[0])
		return user_pass(u ? u : "", p, tok, toklen);
	return RDB_ENOTFOUND;
}

static const char *req_arg(const struct srv_req *req, const char *key)
{
	for (int i = 0; i < req->nargs; i++)
		if (strcmp(req->args[i].key, key) == 0)
			return req->args[i].val;
	return NULL;
}

/* Constant-time in the secret's content. */
static bool admin_token_eq(const char *want, const char *got)
{
	uint8_t a[RDB_SHA256_BYTES], b[RDB_SHA256_BYTES];
	if (rdb_sha256(want, strlen(want), a) || rdb_sha256(got, strlen(got), b))
		return false;
	return ct_eq(a, b, sizeof(a));
}

/* Counts and audits a refusal (the admin API audits its own requests:
 * audit false). */
static int refuse_a(const struct srv_req *req, enum fail_reason why, const char *id, int status,
		    bool audit)
{
	atomic_fetch_add(&g_fail[why], 1);
	if (audit)
		srv_audit_refusal(req, id, status, fail_names[why]);
	return status;
}

static int refuse(const struct srv_req *req, enum fail_reason why, const char *id, int status)
{
	return refuse_a(req, why, id, status, true);
}

int srv_auth_check(const struct srv_req *req, unsigned scope, struct srv_auth_grant *g)
{
	char tok[SRV_AUTH_TOKEN_MAX];
	g->id[0] = 0;
	snprintf(g->jobs, sizeof(g->jobs), "*");
	maybe_reload();
	int rc = srv_auth_parse(srv_req_header(req, "Authorization"), req_arg(req, "u"),
				req_arg(req, "p"), tok, sizeof(tok));
	if (rc == RDB_ENOTFOUND)
		return refuse_a(req, F_MISSING, "", 401, scope != SRV_AUTH_ADMIN);
	if (rc)
		return refuse_a(req, F_MALFORMED, "", 403, scope != SRV_AUTH_ADMIN);
	const char *legacy = g_cfg ? g_cfg->admin_token : "";
	if (legacy[0] && admin_token_eq(legacy, tok)) {
		snprintf(g->id, sizeof(g->id), "admin_token");
		return scope == SRV_AUTH_ADMIN
			   ? 0
			   : refuse_a(req, F_SCOPE, g->id, 403, scope != SRV_AUTH_ADMIN);
	}
	char id[SRV_AUTH_ID_MAX + 1] = "";
	const char *dot = strchr(tok, '.');
	const char *secret = dot ? dot + 1 : tok;
	if (dot && (size_t)(dot - tok) <= SRV_AUTH_ID_MAX)
		snprintf(id, sizeof(id), "%.*s", (int)(dot - tok), tok);
	uint8_t h[RDB_SHA256_BYTES];
	if (rdb_sha256(secret, strlen(secret), h))
		return refuse_a(req, F_MALFORMED, id, 403, scope != SRV_AUTH_ADMIN);
	static const uint8_t dummy[RDB_SHA256_BYTES];
	pthread_mutex_lock(&mu);
	const struct token *hit = NULL;
	for (size_t i = 0; i < g_ntokens && id[0]; i++)
		if (strcmp(g_tokens[i].id, id) == 0) {
			hit = &g_tokens[i];
			break;
		}
	bool ok = ct_eq(hit ? hit->hash : dummy, h, sizeof(h)) && hit;
	unsigned scopes = ok ? hit->scopes : 0;
	if (ok) {
		snprintf(g->id, sizeof(g->id), "%s", hit->id);
		snprintf(g->jobs, sizeof(g->jobs), "%s", hit->jobs);
	}
	pthread_mutex_unlock(&mu);
	if (!ok)
		return refuse_a(req, F_UNKNOWN, id, 403, scope != SRV_AUTH_ADMIN);
	if (!(scopes & scope))
		return refuse_a(req, F_SCOPE, g->id, 403, scope != SRV_AUTH_ADMIN);
	return 0;
}

bool srv_auth_job_ok(const struct srv_auth_grant *g, const char *job, size_t len)
{
	if (strcmp(g->jobs, "*") == 0)
		return true;
	char j[MDL_JOB_MAX + 1], pats[SRV_AUTH_JOBS_MAX + 1];
	if (len > MDL_JOB_MAX)
		return false;
	memcpy(j, job, len);
	j[len] = 0;
	snprintf(pats, sizeof(pats), "%s", g->jobs);
	for (char *save = NULL, *p = strtok_r(pats, ",", &save); p; p = strtok_r(NULL, ",", &save))
		if (fnmatch(p, j, 0) == 0)
			return true;
	return false;
}

bool srv_auth_write_ok(const struct srv_req *req, const struct mdl_batch *points,
		       const struct mdl_events *events)
{
	const struct srv_auth_grant *g = req->auth;
	if (!g || strcmp(g->jobs, "*") == 0)
		return true;
	for (size_t i = 0; points && i < mdl_batch_nseries(points); i++) {
		const struct mdl_batch_series *s = mdl_batch_series_at(points, i);
		if (!srv_auth_job_ok(g, s->key.job, s->job_len))
			goto refused;
	}
	for (size_t i = 0; events && i < mdl_events_count(events); i++) {
		const struct mdl_event *e = mdl_events_at(events, i);
		if (!srv_auth_job_ok(g, e->job, e->job_len))
			goto refused;
	}
	return true;
refused:
	refuse(req, F_JOB, g->id, 403);
	return false;
}

void srv_auth_metrics(struct rdb_buf *b)
{
	rdb_buf_puts(b, "# HELP rankdb_auth_failures_total Refused credentials by reason.\n"
			"# TYPE rankdb_auth_failures_total counter\n");
	for (int i = 0; i < F_N; i++)
		rdb_buf_printf(b, "rankdb_auth_failures_total{reason=\"%s\"} %llu\n", fail_names[i],
			       (unsigned long long)atomic_load(&g_fail[i]));
}

int srv_auth_route_jobs(const struct srv_req *req, const struct srv_auth_grant *g,
			const char *param, bool body_checked)
{
	if (strcmp(g->jobs, "*") == 0)
		return 0;
	bool known = false;
	if (param && param[0]) {
		known = true;
		if (!srv_auth_job_ok(g, param, strlen(param)))
			goto refused;
	}
	for (int i = 0; i < req->nargs; i++) { /* every job parameter: a valid id that matches */
		const char *v = req->args[i].val;
		if (strcmp(req->args[i].key, "job") != 0)
			continue;
		known = true;
		if (!mdl_job_valid(v, strlen(v)) || !srv_auth_job_ok(g, v, strlen(v)))
			goto refused;
	}
	if (known || body_checked)
		return 0;
refused:
	return refuse(req, F_JOB, g->id, 403);
}
