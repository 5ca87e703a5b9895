/* admin_routes.c - the admin API (/api/v1/admin/...): statistics, job
 * deletion, retention, compaction, verification, backup, checkpoint.
 *
 *   GET    /api/v1/admin/stats[?job=J]          per-job and overall statistics
 *   POST   /api/v1/admin/jobs/<job>/delete      delete a job (also DELETE /jobs/<job>)
 *   GET    /api/v1/admin/retention              per-job overrides and the default
 *   PUT    /api/v1/admin/retention/<job>?seconds=N   set an override (POST too)
 *   DELETE /api/v1/admin/retention/<job>        remove an override
 *   POST   /api/v1/admin/retention/run          apply retention now
 *   POST   /api/v1/admin/compact[?min_live_pct=N]    compact now
 *   POST   /api/v1/admin/verify[?quarantine=1]  check every checksum
 *   POST   /api/v1/admin/backup?dir=PATH        consistent backup (server-side path)
 *   POST   /api/v1/admin/checkpoint             seal and checkpoint now
 *   POST   /api/v1/admin/rules/reload           re-read the detector rules file
 *   POST   /api/v1/admin/tokens/reload          re-read the tokens file (server/auth.h)
 *   POST   /api/v1/admin/udp-keys/reload        re-read the UDP keys file (server/udp_auth.h)
 *   POST   /api/v1/admin/tls/reload             re-read the TLS certificate (server/tls.h)
 *
 * Protection: with a tokens_file or admin_token, a token with the admin
 * scope (server/auth.h; the admin_token is one); neither ->
 * every admin request 403 (disabled);
 * no "Authorization: Bearer" -> 401; a wrong token -> 403. Tokens are
 * compared in constant time. Every admin request is appended to the audit
 * log as one JSON line (time, client, action, target, result, status,
 * duration_ms; a target is cut at 256 bytes); refusals (401, 403) at most
 * 10 lines a minute per client address and 200 for all clients, the next
 * line saying how many were left out, so a flood cannot fill the disk. The
 * prefix is one row of the route table (srv_admin_routes, route.h).
 *
 * Threading: any HTTP pool thread; long operations block that thread (the
 * engine runs them on its flusher). The audit file is appended under a
 * mutex, opened per line with O_APPEND.
 */
#include "server/route.h"
#include "server/srv.h"
#include "server/auth.h"
#include "server/tls.h"
#include "server/udp_auth.h"
#include "common/rdb_err.h"
#include "common/rdb_log.h"
#include "common/rdb_time.h"
#include "query/agg.h"
#include "storage/admin.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PREFIX "/api/v1/admin/"

static pthread_mutex_t audit_lock = PTHREAD_MUTEX_INITIALIZER;
static char audit_path[4200];

void srv_admin_init(struct srv_ctx *ctx)
{
	const struct srv_config *c = ctx->cfg;
	struct sto_lifecycle l;
	sto_lifecycle_default(&l);
	l.retention_s = c->retention_s;
	l.retention_check_s = c->retention_check_s;
	l.compact_min_live = c->compact_min_live_pct / 100.0;
	l.index_compact_free_ratio = c->index_compact_free_pct / 100.0;
	l.rollup_time_width_s = c->rollup_time_width_s;
	l.rollup_step_width = c->rollup_step_width;
	sto_set_lifecycle(ctx->sto, &l);
	if (c->audit_log[0])
		snprintf(audit_path, sizeof(audit_path), "%s", c->audit_log);
	else
		snprintf(audit_path, sizeof(audit_path), "%s/audit.log", c->data_dir);
	if (!c->admin_token[0])
		rdb_info("admin", "admin API disabled (admin_token is empty)");
}

/* Refusals (401, 403) are logged at most REFUSAL_PER_CLIENT lines per
 * REFUSAL_WINDOW_S per client address, and at most REFUSAL_ALL lines per
 * window for all clients together, so that a flood of unauthenticated
 * requests cannot fill the disk; the next line that gets through says how
 * many were left out. Under audit_lock. */
#define REFUSAL_WINDOW_S   60
#define REFUSAL_PER_CLIENT 10
#define REFUSAL_ALL	   200
#define REFUSAL_SLOTS	   256
#define AUDIT_TARGET_MAX   256 /* bytes of a target kept in a log line */

struct refusal_slot {
	char ip[64];
	int64_t window_ns;
	uint32_t lines;
	uint64_t suppressed;
};

static struct refusal_slot refusal_slots[REFUSAL_SLOTS];
static struct refusal_slot refusal_all;

static bool refusal_take(struct refusal_slot *sl, uint32_t max, int64_t now, uint64_t *skipped)
{
	if (now - sl->window_ns >= (int64_t)REFUSAL_WINDOW_S * 1000000000) {
		sl->window_ns = now;
		sl->lines = 0;
	}
	if (sl->lines >= max) {
		sl->suppressed++;
		return false;
	}
	sl->lines++;
	*skipped += sl->suppressed;
	sl->suppressed = 0;
	return true;
}

/* Whether a refusal from peer ("ip:port") gets its log lines; *skipped is
 * how many refusals were left out of the log before it. */
static bool refusal_may_log(const char *peer, uint64_t *skipped)
{
	char ip[64];
	snprintf(ip, sizeof(ip), "%s", peer ? peer : "?");
	char *colon = strrchr(ip, ':');
	if (colon)
		*colon = 0;
	uint64_t h = 1469598103934665603ull;
	for (const char *c = ip; *c; c++)
		h = (h ^ (uint8_t)*c) * 1099511628211ull;
	struct refusal_slot *sl = &refusal_slots[h % REFUSAL_SLOTS];
	if (strcmp(sl->ip, ip) != 0) { /* a new client takes the slot over */
		memset(sl, 0, sizeof(*sl));
		snprintf(sl->ip, sizeof(sl->ip), "%s", ip);
	}
	int64_t now = rdb_now_mono_ns();
	*skipped = 0;
	if (!refusal_take(sl, REFUSAL_PER_CLIENT, now, skipped))
		return false;
	if (refusal_take(&refusal_all, REFUSAL_ALL, now, skipped))
		return true;
	sl->lines--; /* not logged after all: its own budget is not spent */
	sl->suppressed++;
	return false;
}

/* One audit line: action on target by token id (may be ""), reason of a
 * refusal or NULL. Refusals are rate-limited (above). */
static void audit(const struct srv_req *req, const char *action, const char *target,
		  const char *token_id, const char *reason, const struct srv_resp *resp,
		  int64_t started_ns)
{
	struct rdb_buf b;
	char when[64];
	time_t now = time(NULL);
	struct tm tm;
	uint64_t skipped = 0;
	bool refused = resp->status == 401 || resp->status == 403;
	const char *result = resp->status < 300 ? "ok" : refused ? "refused" : "error";
	const char *peer = req->peer ? req->peer : "?";
	size_t tlen = strlen(target);
	pthread_mutex_lock(&audit_lock);
	bool log_it = !refused || refusal_may_log(peer, &skipped);
	pthread_mutex_unlock(&audit_lock);
	if (!log_it)
		return;
	gmtime_r(&now, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	rdb_buf_init(&b, 16384);
	rdb_buf_printf(&b, "{\"time\":\"%s\",\"client\":", when);
	rdb_buf_json_str(&b, peer, strlen(peer));
	rdb_buf_puts(&b, ",\"method\":");
	rdb_buf_json_str(&b, req->method, strlen(req->method) < 32 ? strlen(req->method) : 32);
	rdb_buf_puts(&b, ",\"action\":");
	rdb_buf_json_str(&b, action, strlen(action));
	rdb_buf_puts(&b, ",\"target\":");
	rdb_buf_json_str(&b, target, tlen < AUDIT_TARGET_MAX ? tlen : AUDIT_TARGET_MAX);
	if (tlen > AUDIT_TARGET_MAX)
		rdb_buf_printf(&b, ",\"target_bytes\":%zu", tlen);
	if (token_id && token_id[0]) {
		rdb_buf_puts(&b, ",\"token_id\":");
		rdb_buf_json_str(&b, token_id, strlen(token_id));
	}
	if (reason)
		rdb_buf_printf(&b, ",\"reason\":\"%s\"", reason);
	if (skipped)
		rdb_buf_printf(&b, ",\"refusals_not_logged\":%llu", (unsigned long long)skipped);
	rdb_buf_printf(&b, ",\"result\":\"%s\",\"status\":%d,\"duration_ms\":%.3f}\n", result,
		       resp->status, (double)(rdb_now_ns() - started_ns) / 1e6);
	pthread_mutex_lock(&audit_lock);
	int fd = open(audit_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, b.data, b.len) != (ssize_t)b.len) {
		static struct rdb_log_ratelimit rl;
		rdb_log_limited(&rl, 10, RDB_LOG_ERROR, "admin",
				"cannot append to audit log %s: %s", audit_path, strerror(errno));
	}
	if (fd >= 0)
		close(fd);
	pthread_mutex_unlock(&audit_lock);
	rdb_info("admin", "%s %.*s%s %s by %s: %d%s", action,
		 (int)(tlen < AUDIT_TARGET_MAX ? tlen : AUDIT_TARGET_MAX), target,
		 tlen > AUDIT_TARGET_MAX ? "..." : "", result, peer, resp->status,
		 skipped ? " (earlier refusals not logged, see audit.log)" : "");
	rdb_buf_free(&b);
}

void srv_audit_refusal(const struct srv_req *req, const char *token_id, int status,
		       const char *reason)
{
	struct srv_resp r = {.status = status};
	const char *p = req->path ? req->path : "";
	audit(req, "auth", p, token_id, reason, &r, rdb_now_ns());
}

/* 0 if allowed, else resp is filled. */
static int authorize(const struct srv_req *req, struct srv_resp *resp, char *id, size_t idlen)
{
	const char *tok = req->ctx->cfg->admin_token;
	if (srv_auth_enabled() || tok[0]) {
		struct srv_auth_grant g;
		int st = srv_auth_check(req, SRV_AUTH_ADMIN, &g);
		snprintf(id, idlen, "%s", g.id);
		if (st == 401)
			srv_error(resp, 401, "admin API: send 'Authorization: Bearer <token>'");
		else if (st)
			srv_error(resp, 403, "forbidden");
		return st ? -1 : 0;
	}
	if (!tok[0]) {
		srv_error(resp, 403,
			  "the admin API is disabled: set admin_token in the config "
			  "file (or --admin-token) and send 'Authorization: Bearer <token>'");
		return -1;
	}
	return 0;
}

static const char *arg(const struct srv_req *req, const char *key)
{
	for (int i = 0; i < req->nargs; i++)
		if (strcmp(req->args[i].key, key) == 0)
			return req->args[i].val;
	return NULL;
}

static int arg_u64(const struct srv_req *req, const char *key, uint64_t *out)
{
	const char *v = arg(req, key);
	char *end;
	if (!v)
		return RDB_ENOTFOUND;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-')
		return RDB_EINVAL;
	*out = n;
	return 0;
}

static void fail(struct srv_resp *resp, int rc, const char *what)
{
	int st = rc == RDB_ENOTFOUND		       ? 404
		 : rc == RDB_EINVAL		       ? 400
		 : rc == -ENOTEMPTY || rc == -EEXIST   ? 409
		 : rc == -ESHUTDOWN || rc == RDB_EBUSY ? 503
						       : 500;
	srv_error(resp, st, "%s: %s", what, rdb_strerror(rc));
}

/* ---- stats ---- */

static int stats_json(void *arg_, const struct sto_job_stats *js)
{
	struct rdb_buf *b = arg_;
	uint64_t pts = js->points;
	if (b->data[b->len - 1] != '[')
		rdb_buf_putc(b, ',');
	rdb_buf_puts(b, "{\"job\":");
	rdb_buf_json_str(b, js->job, strlen(js->job));
	return rdb_buf_printf(
	    b,
	    ",\"series\":%llu,\"chunks\":%llu,\"points\":%llu,\"head_points\":"
	    "%llu,\"chunk_bytes\":%llu,\"bytes_per_point\":%.3f,\"event_chunks\":"
	    "%llu,\"events\":%llu,\"event_bytes\":%llu,\"retention_s\":%llu}",
	    (unsigned long long)js->series, (unsigned long long)js->chunks, (unsigned long long)pts,
	    (unsigned long long)js->head_points, (unsigned long long)js->chunk_bytes,
	    pts ? (double)js->chunk_bytes / (double)pts : 0.0, (unsigned long long)js->event_chunks,
	    (unsigned long long)js->events, (unsigned long long)js->event_bytes,
	    (unsigned long long)js->retention_s);
}

static void do_stats(struct srv_req *req, struct srv_resp *resp)
{
	struct rdb_buf *b = &resp->body;
	struct sto_disk_stats d;
	const char *job = arg(req, "job");
	b->len = 0;
	rdb_buf_puts(b, "{\"jobs\":[");
	int rc = sto_stats_jobs(req->ctx->sto, job, stats_json, b);
	if (rc == 0)
		rc = sto_disk_stats(req->ctx->sto, &d);
	if (rc) {
		fail(resp, rc, job ? "stats of the job" : "stats");
		return;
	}
	rdb_buf_printf(b,
		       "],\"disk\":{\"segment_files\":%llu,\"segment_bytes\":%llu,\"live_bytes\":"
		       "%llu,\"wal_bytes\":%llu,\"index_bytes\":%llu,\"quarantined_chunks\":%llu}}",
		       (unsigned long long)d.segment_files, (unsigned long long)d.segment_bytes,
		       (unsigned long long)d.live_bytes, (unsigned long long)d.wal_bytes,
		       (unsigned long long)d.index_bytes, (unsigned long long)d.quarantined);
	resp->status = 200;
}

/* ---- delete, retention ---- */

static void do_delete(struct srv_req *req, struct srv_resp *resp, const char *job)
{
	struct sto_delete_result r;
	int rc = sto_delete_job(req->ctx->sto, job, &r); /* its metadata document too */
	if (rc) {
		fail(resp, rc, rc == RDB_ENOTFOUND ? "no such job" : "delete job");
		return;
	}
	resp->body.len = 0;
	rdb_buf_printf(&resp->body,
		       "{\"deleted\":true,\"series\":%llu,\"chunks\":%llu,"
		       "\"event_chunks\":%llu,\"tombstone_gen\":%llu}",
		       (unsigned long long)r.series, (unsigned long long)r.chunks,
		       (unsigned long long)r.event_chunks, (unsigned long long)r.tombstone_gen);
	resp->status = 200;
}

static int ret_json(void *arg_, const char *job, uint64_t secs)
{
	struct rdb_buf *b = arg_;
	if (b->data[b->len - 1] != '{')
		rdb_buf_putc(b, ',');
	rdb_buf_json_str(b, job, strlen(job));
	return rdb_buf_printf(b, ":%llu", (unsigned long long)secs);
}

static void do_retention_list(struct srv_req *req, struct srv_resp *resp)
{
	struct rdb_buf *b = &resp->body;
	b->len = 0;
	rdb_buf_printf(b, "{\"default_s\":%llu,\"jobs\":{",
		       (unsigned long long)req->ctx->cfg->retention_s);
	int rc = sto_retention_list(req->ctx->sto, ret_json, b);
	if (rc) {
		fail(resp, rc, "retention list");
		return;
	}
	rdb_buf_puts(b, "}}");
	resp->status = 200;
}

static void do_retention_job(struct srv_req *req, struct srv_resp *resp, const char *job)
{
	uint64_t secs = 0;
	int rc;
	if (strcmp(req->method, "DELETE") == 0) {
		rc = sto_retention_clear(req->ctx->sto, job);
	} else {
		rc = arg_u64(req, "seconds", &secs);
		if (rc) {
			srv_error(resp, 400, "give the retention as ?seconds=N (0 = keep forever)");
			return;
		}
		rc = sto_retention_set(req->ctx->sto, job, secs);
	}
	if (rc) {
		fail(resp, rc, "retention");
		return;
	}
	resp->body.len = 0;
	rdb_buf_printf(&resp->body, "{\"job\":");
	rdb_buf_json_str(&resp->body, job, strlen(job));
	rdb_buf_printf(&resp->body, ",\"retention_s\":%llu}", (unsigned long long)secs);
	resp->status = 200;
}

static void do_retention_run(struct srv_req *req, struct srv_resp *resp)
{
	struct sto_retention_result r;
	int rc = sto_retention_run(req->ctx->sto, &r);
	if (rc) {
		fail(resp, rc, "retention run");
		return;
	}
	resp->body.len = 0;
	rdb_buf_printf(&resp->body,
		       "{\"chunks\":%llu,\"points\":%llu,\"event_chunks\":%llu,"
		       "\"events\":%llu}",
		       (unsigned long long)r.chunks, (unsigned long long)r.points,
		       (unsigned long long)r.event_chunks, (unsigned long long)r.events);
	resp->status = 200;
}

/* ---- compact, verify, backup, checkpoint ---- */

static void do_compact(struct srv_req *req, struct srv_resp *resp)
{
	struct sto_compact_result r;
	uint64_t pct = 0;
	double live = -1;
	const char *ix = arg(req, "index");
	if (ix && strcmp(ix, "0") != 0) { /* only the index file, unconditionally */
		struct sto_index_compact_result ir;
		int irc = sto_compact_index(req->ctx->sto, true, &ir);
		if (irc) {
			fail(resp, irc, "compact index");
			return;
		}
		resp->body.len = 0;
		rdb_buf_printf(
		    &resp->body, "{\"index_bytes_before\":%llu,\"index_bytes_after\":%llu}",
		    (unsigned long long)ir.bytes_before, (unsigned long long)ir.bytes_after);
		resp->status = 200;
		return;
	}
	int rc = arg_u64(req, "min_live_pct", &pct);
	if (rc == 0 && pct <= 100)
		live = (double)pct / 100.0;
	else if (rc != RDB_ENOTFOUND) {
		srv_error(resp, 400, "min_live_pct must be 0..100");
		return;
	}
	rc = sto_compact(req->ctx->sto, live, &r);
	if (rc) {
		fail(resp, rc, "compact");
		return;
	}
	if (r.quarantined) {
		srv_error(resp, 409,
			  "compact: refused while the quarantine holds index entries (%llu; "
			  "compaction would delete their records); run rankctl rebuild-index",
			  (unsigned long long)r.quarantined);
		return;
	}
	resp->body.len = 0;
	rdb_buf_printf(
	    &resp->body,
	    "{\"segments\":%llu,\"chunks\":%llu,\"bytes_before\":%llu,"
	    "\"bytes_after\":%llu,\"skipped\":%llu,\"merged_from\":%llu,"
	    "\"merged_into\":%llu,\"index_bytes_before\":%llu,\"index_bytes_after\":%llu}",
	    (unsigned long long)r.segments, (unsigned long long)r.chunks,
	    (unsigned long long)r.bytes_before, (unsigned long long)r.bytes_after,
	    (unsigned long long)r.skipped, (unsigned long long)r.merged_from,
	    (unsigned long long)r.merged_into, (unsigned long long)r.index_bytes_before,
	    (unsigned long long)r.index_bytes_after);
	resp->status = 200;
}

static void problem_json(void *arg_, const char *msg)
{
	struct rdb_buf *b = arg_;
	if (b->data[b->len - 1] != '[')
		rdb_buf_putc(b, ',');
	rdb_buf_json_str(b, msg, strlen(msg));
}

static void do_verify(struct srv_req *req, struct srv_resp *resp)
{
	struct sto_verify_report rep;
	const char *q = arg(req, "quarantine");
	struct rdb_buf *b = &resp->body;
	b->len = 0;
	rdb_buf_puts(b, "{\"problems\":[");
	int rc = sto_verify(req->ctx->sto, q && strcmp(q, "1") == 0, problem_json, b, &rep);
	if (rc) {
		fail(resp, rc, "verify");
		return;
	}
	rdb_buf_printf(b,
		       "],\"ok\":%s,\"segments\":%llu,\"records\":%llu,\"chunks\":%llu,"
		       "\"event_chunks\":%llu,\"damaged\":%llu,\"quarantined\":%llu,"
		       "\"wal_damage_kept_files\":%llu,\"index_damaged\":%llu,\"meta_docs\":%llu,"
		       "\"meta_damaged\":%llu}",
		       rep.problems ? "false" : "true", (unsigned long long)rep.segments,
		       (unsigned long long)rep.records, (unsigned long long)rep.chunks,
		       (unsigned long long)rep.event_chunks, (unsigned long long)rep.problems,
		       (unsigned long long)rep.quarantined, (unsigned long long)rep.wal_kept_files,
		       (unsigned long long)rep.index_damaged, (unsigned long long)rep.meta_docs,
		       (unsigned long long)rep.meta_damaged);
	resp->status = 200;
}

static void do_backup(struct srv_req *req, struct srv_resp *resp)
{
	struct sto_backup_result r;
	const char *dir = arg(req, "dir");
	if (!dir || dir[0] != '/') {
		srv_error(resp, 400,
			  "give the backup directory as ?dir=/absolute/path on the "
			  "server's machine (it must not exist or be empty)");
		return;
	}
	int rc = sto_backup(req->ctx->sto, dir, &r);
	if (rc == RDB_EINVAL) {
		srv_error(resp, 400,
			  "backup directory %.300s is inside the data directory; give "
			  "one elsewhere",
			  dir);
		return;
	}
	if (rc) {
		fail(resp, rc, "backup");
		return;
	}
	resp->body.len = 0;
	rdb_buf_puts(&resp->body, "{\"dir\":");
	rdb_buf_json_str(&resp->body, dir, strlen(dir));
	rdb_buf_printf(&resp->body, ",\"segments\":%llu,\"bytes\":%llu}",
		       (unsigned long long)r.segments, (unsigned long long)r.bytes);
	resp->status = 200;
}

static void do_checkpoint(struct srv_req *req, struct srv_resp *resp)
{
	int rc = sto_checkpoint(req->ctx->sto);
	if (rc) {
		fail(resp, rc, "checkpoint");
		return;
	}
	resp->body.len = 0;
	rdb_buf_puts(&resp->body, "{\"checkpoint\":true}");
	resp->status = 200;
}

/* Splits "<name>/<job>[/<tail>]". */
static bool job_path(const char *rest, const char *name, char *job, size_t jlen, const char **tail)
{
	size_t nl = strlen(name);
	if (strncmp(rest, name, nl) != 0 || rest[nl] != '/')
		return false;
	const char *j = rest + nl + 1, *slash = strchr(j, '/');
	size_t l = slash ? (size_t)(slash - j) : strlen(j);
	if (l == 0 || l >= jlen)
		return false;
	memcpy(job, j, l);
	job[l] = 0;
	*tail = slash ? slash : "";
	return true;
}

static bool is(const struct srv_req *req, const char *m)
{
	return strcmp(req->method, m) == 0;
}

/* A reload done: 200 {"reloaded":true,"message":msg}. */
static void reloaded(struct srv_resp *resp, const char *msg)
{
	resp->status = 200;
	rdb_buf_puts(&resp->body, "{\"reloaded\":true,\"message\":");
	rdb_buf_json_str(&resp->body, msg, strlen(msg));
	rdb_buf_putc(&resp->body, '}');
}

/* Re-reads the detector rules file; a bad file is refused (422) and the
 * rules in force stay. */
static void do_rules_reload(struct srv_req *req, struct srv_resp *resp)
{
	char msg[1024];
	int rc = srv_detect_reload(req->ctx, msg, sizeof(msg));
	if (rc == RDB_ENOTFOUND) {
		srv_error(resp, 409, "%s", msg);
		return;
	}
	if (rc) {
		srv_error(resp, 422, "rules file refused, the rules in force stay: %s", msg);
		return;
	}
	reloaded(resp, msg);
}

/* The file reloads (tokens, UDP keys, TLS certificate): 200, 409 when the
 * file is not configured, 422 when refused (what is in force stays). */
static void do_reload(struct srv_resp *resp, int (*fn)(char *, size_t))
{
	char msg[1024];
	int rc = fn(msg, sizeof(msg));
	if (rc) {
		srv_error(resp, rc == RDB_ENOTFOUND ? 409 : 422, "%s", msg);
		return;
	}
	reloaded(resp, msg);
}

/* Routes an authorized request; *action names it for the audit log. */
static void route(struct srv_req *req, struct srv_resp *resp, const char *rest, const char **action,
		  const char **target, char *job, size_t jlen)
{
	const char *tail;
	*target = "";
	if (strcmp(rest, "stats") == 0 && is(req, "GET")) {
		*action = "stats";
		*target = arg(req, "job") ? arg(req, "job") : "";
		do_stats(req, resp);
	} else if (job_path(rest, "jobs", job, jlen, &tail) &&
		   ((is(req, "POST") && strcmp(tail, "/delete") == 0) ||
		    (is(req, "DELETE") && !tail[0]))) {
		*action = "delete_job";
		*target = job;
		do_delete(req, resp, job);
	} else if (strcmp(rest, "retention") == 0 && is(req, "GET")) {
		*action = "retention_list";
		do_retention_list(req, resp);
	} else if (strcmp(rest, "retention/run") == 0 && is(req, "POST")) {
		*action = "retention_run";
		do_retention_run(req, resp);
	} else if (job_path(rest, "retention", job, jlen, &tail) && !tail[0] &&
		   (is(req, "PUT") || is(req, "POST") || is(req, "DELETE"))) {
		*action = is(req, "DELETE") ? "retention_clear" : "retention_set";
		*target = job;
		do_retention_job(req, resp, job);
	} else if (strcmp(rest, "compact") == 0 && is(req, "POST")) {
		*action = "compact";
		do_compact(req, resp);
	} else if (strcmp(rest, "verify") == 0 && is(req, "POST")) {
		*action = "verify";
		do_verify(req, resp);
	} else if (strcmp(rest, "backup") == 0 && is(req, "POST")) {
		*action = "backup";
		*target = arg(req, "dir") ? arg(req, "dir") : "";
		do_backup(req, resp);
	} else if (strcmp(rest, "checkpoint") == 0 && is(req, "POST")) {
		*action = "checkpoint";
		do_checkpoint(req, resp);
	} else if (strcmp(rest, "tokens/reload") == 0 && is(req, "POST")) {
		*action = "tokens_reload";
		do_reload(resp, srv_auth_reload);
	} else if (strcmp(rest, "udp-keys/reload") == 0 && is(req, "POST")) {
		*action = "udp_keys_reload";
		do_reload(resp, srv_udp_auth_reload);
	} else if (strcmp(rest, "tls/reload") == 0 && is(req, "POST")) {
		*action = "tls_reload";
		do_reload(resp, srv_tls_reload);
	} else if (strcmp(rest, "rules/reload") == 0 && is(req, "POST")) {
		*action = "rules_reload";
		do_rules_reload(req, resp);
	} else {
		*action = "unknown";
		*target = rest;
		srv_error(resp, 404, "no admin endpoint %s %s (see docs/OPERATIONS.md, Admin API)",
			  req->method, req->path);
	}
}

/* Every admin request: authorized, routed above, audited. */
static void h_admin(struct srv_req *req, struct srv_resp *resp, const struct srv_route *r)
{
	(void)r;
	int64_t t0 = rdb_now_ns();
	const char *rest = req->path + strlen(PREFIX), *action = "admin", *target = rest;
	char job[MDL_JOB_MAX + 2];
	char id[SRV_AUTH_ID_MAX + 1] = "";
	if (authorize(req, resp, id, sizeof(id)) == 0)
		route(req, resp, rest, &action, &target, job, sizeof(job));
	audit(req, action, target, id, NULL, resp, t0);
}

/* One row for the prefix: the admin API audits every request, unknown
 * endpoints and methods included (404 with action "unknown"), so it routes
 * its endpoints itself behind one authorization. */
static const struct srv_route rows[] = {
    {SRV_ANY, PREFIX "*", SRV_SCOPE_ADMIN, h_admin, 0, 0, NULL, NULL, NULL},
};
const struct srv_route_table srv_admin_routes = {rows, sizeof(rows) / sizeof(rows[0])};
