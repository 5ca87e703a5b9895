/* auth.h - scoped API tokens: the tokens file, credential parsing, and the
 * checks every route makes (route.c calls srv_auth_route; the write front
 * ends call srv_auth_write_ok per batch; admin_routes.c calls
 * srv_auth_check for the admin scope).
 *
 * A token is "<id>.<secret>"; the tokens file keeps per line
 *     <id> <scopes> <jobs> <sha256-hex of secret>
 * scopes: comma list of ingest, query, admin; jobs: "*" or a comma list of
 * fnmatch(3) patterns. '#' starts a comment line. The legacy admin_token is
 * an admin token with id "admin_token".
 *
 * Threading: all functions are thread-safe (one mutex over the table).
 */
#ifndef SRV_AUTH_H
#define SRV_AUTH_H

#include "model/batch.h"
#include "model/events.h"
#include "server/config.h"

#include <stdbool.h>
#include <stddef.h>

struct srv_req;

#define SRV_AUTH_ID_MAX	   64
#define SRV_AUTH_JOBS_MAX  512
#define SRV_AUTH_TOKEN_MAX 256

enum srv_auth_scope_bits { SRV_AUTH_INGEST = 1, SRV_AUTH_QUERY = 2, SRV_AUTH_ADMIN = 4 };

/* What a request proved: filled by srv_auth_check. */
struct srv_auth_grant {
	char id[SRV_AUTH_ID_MAX + 1];	  /* token id, "" when none was presented */
	char jobs[SRV_AUTH_JOBS_MAX + 1]; /* "*" or comma list of patterns */
};

/* Loads cfg->tokens_file (if any); remembers cfg. 0, or an error with err
 * saying which line is wrong. Call once at start. */
int srv_auth_init(const struct srv_config *cfg, char *err, size_t errlen);
/* True when a tokens file is configured (every non-public route checks). */
bool srv_auth_enabled(void);
/* Reads the tokens file again (SIGHUP, file change). A bad file is refused
 * and the tokens in force stay. 0 or an error, msg says what. */
int srv_auth_reload(char *msg, size_t msglen);

/* Parses a credential (pure; the fuzz target): from an Authorization header
 * value ("Bearer T", "Token T", "Basic base64(user:pass)") or else the v1
 * query parameters u / p. With user and password the token is the password
 * when it holds a '.', else "<user>.<password>". 0 with tok the token,
 * RDB_ENOTFOUND when no credential was sent, RDB_EINVAL when malformed. */
int srv_auth_parse(const char *authz, const char *u, const char *p, char *tok, size_t toklen);

/* Checks req's credential for scope (SRV_AUTH_*). Returns 0 (allowed,
 * grant filled), 401 (no credential) or 403 (bad token, wrong scope);
 * counts failures for /metrics and audits refusals (rate-limited). */
int srv_auth_check(const struct srv_req *req, unsigned scope, struct srv_auth_grant *g);

/* True when grant g may touch job (len bytes). */
bool srv_auth_job_ok(const struct srv_auth_grant *g, const char *job, size_t len);

/* For the write front ends: true when req's grant may write every job of
 * points and events (NULL ok). Without tokens: always true. */
bool srv_auth_write_ok(const struct srv_req *req, const struct mdl_batch *points,
		       const struct mdl_events *events);

/* The job check of a route (route.c) for a job-limited grant: param (the
 * {job}/{name} segment, or "") and every job query parameter (each must be
 * a valid job id) must match g's patterns, and at least one of them must be
 * there unless body_checked (the handler checks every record's job with
 * srv_auth_write_ok). 0 or 403 (counted, audited). */
int srv_auth_route_jobs(const struct srv_req *req, const struct srv_auth_grant *g,
			const char *param, bool body_checked);

/* Appends the auth metrics to /metrics text. */
struct rdb_buf;
void srv_auth_metrics(struct rdb_buf *b);

/* Appends one refusal line to the audit log (admin_routes.c owns the file
 * and the rate limit). */
void srv_audit_refusal(const struct srv_req *req, const char *token_id, int status,
		       const char *reason);

#endif
