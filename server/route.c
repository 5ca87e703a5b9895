/* route.c - the route table's matcher and dispatcher (route.h): the one
 * place where a request finds its handler, and where 404 and 405 are
 * answered. Tables are static and read-only; threading: any. Query routes
 * (SRV_ROUTE_QUERY) are counted and timed here for /metrics.
 */
#include "server/route.h"
#include "server/auth.h"
#include "common/rdb_time.h"

#include <stdio.h>
#include <string.h>

#define PARAM_MAX (MDL_JOB_MAX + 2)

static unsigned method_bit(const char *m)
{
	static const struct {
		const char *name;
		unsigned bit;
	} known[] = {{"GET", SRV_GET},
		     {"HEAD", SRV_HEAD},
		     {"POST", SRV_POST},
		     {"PUT", SRV_PUT},
		     {"DELETE", SRV_DELETE}};
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (strcmp(m, known[i].name) == 0)
			return known[i].bit;
	return SRV_OTHER;
}

/* Matches one {job} / {name} segment at *path; advances past it. */
static bool match_segment(const char **path, bool job, char *param, size_t plen)
{
	const char *end = strchr(*path, '/');
	size_t n = end ? (size_t)(end - *path) : strlen(*path);
	if (n == 0 || n > MDL_JOB_MAX + 1 || n >= plen)
		return false;
	if (job && !mdl_job_valid(*path, n))
		return false;
	memcpy(param, *path, n);
	param[n] = 0;
	*path += n;
	return true;
}

bool srv_route_match(const char *pattern, const char *path, char *param, size_t plen)
{
	const char *p = pattern;
	param[0] = 0;
	while (*p) {
		if (strcmp(p, "*") == 0)
			return true;
		if (*p == '*') {
			size_t n = strlen(path), m = strlen(p + 1);
			return n > m && strcmp(path + n - m, p + 1) == 0;
		}
		if (strcmp(p, "/?") == 0)
			return *path == 0 || strcmp(path, "/") == 0;
		if (strncmp(p, "{job}", 5) == 0 || strncmp(p, "{name}", 6) == 0) {
			bool job = p[1] == 'j';
			if (!match_segment(&path, job, param, plen))
				return false;
			p += job ? 5 : 6;
			continue;
		}
		if (*p++ != *path++)
			return false;
	}
	return *path == 0;
}

/* The first row whose pattern matches the path, or NULL. */
static const struct srv_route *first_match(const struct srv_route_table *const *t, size_t nt,
					   const char *path, char *param)
{
	for (size_t i = 0; i < nt; i++)
		for (size_t k = 0; k < t[i]->n; k++)
			if (srv_route_match(t[i]->rows[k].pattern, path, param, PARAM_MAX))
				return &t[i]->rows[k];
	return NULL;
}

/* Of the rows with r0's pattern, the one for method; *allowed gets the
 * methods of them all and *allow the first allow text. */
static const struct srv_route *for_method(const struct srv_route_table *const *t, size_t nt,
					  const struct srv_route *r0, unsigned method,
					  unsigned *allowed, const char **allow)
{
	const struct srv_route *hit = NULL;
	*allowed = 0;
	*allow = NULL;
	for (size_t i = 0; i < nt; i++)
		for (size_t k = 0; k < t[i]->n; k++) {
			const struct srv_route *r = &t[i]->rows[k];
			if (strcmp(r->pattern, r0->pattern) != 0)
				continue;
			*allowed |= r->methods;
			*allow = *allow ? *allow : r->allow;
			if (!hit && (r->methods & method))
				hit = r;
		}
	return hit;
}

/* The Allow text of a method set without an explicit one: its first
 * method (HEAD goes with GET unsaid). Rows accepting several methods that
 * should all be named give their allow text. */
static const char *allow_text(unsigned methods)
{
	static const char *const names[] = {"GET", "HEAD", "POST", "PUT", "DELETE"};
	for (unsigned i = 0; i < 5; i++)
		if (methods & (1u << i))
			return names[i];
	return "GET";
}

static void refuse_method(struct srv_req *req, struct srv_resp *resp, const struct srv_route *r0,
			  unsigned allowed, const char *allow)
{
	char msg[600];
	resp->allow = allow ? allow : allow_text(allowed);
	snprintf(msg, sizeof(msg), "%s %s is not supported; use %s", req->method, req->path,
		 resp->allow);
	if (r0->refuse)
		r0->refuse(resp, r0, 405, msg);
	else
		srv_error(resp, 405, "%s", msg);
}

static void run(struct srv_req *req, struct srv_resp *resp, const struct srv_route *r)
{
	struct srv_counters *c = &req->ctx->counters;
	if (!r->fn) {
		srv_error(resp, 404, r->not_found, req->path);
		return;
	}
	if (!(r->flags & SRV_ROUTE_QUERY)) {
		r->fn(req, resp, r);
		return;
	}
	int64_t t0 = rdb_now_mono_ns();
	r->fn(req, resp, r);
	atomic_fetch_add(&c->queries, 1);
	atomic_fetch_add(&c->query_ns_total, (uint64_t)(rdb_now_mono_ns() - t0));
}

/* The token check of a route with a query or ingest scope (the admin API
 * checks its own, to audit it). 0, or resp is 401/403 with one message
 * whatever failed. */
static int authorize(struct srv_req *req, struct srv_resp *resp, const struct srv_route *r,
		     struct srv_auth_grant *g)
{
	unsigned scope = r->scope == SRV_SCOPE_WRITE ? SRV_AUTH_INGEST : SRV_AUTH_QUERY;
	int st = srv_auth_check(req, scope, g);
	if (st == 0) {
		bool per_record = r->scope == SRV_SCOPE_WRITE && !req->param[0];
		st = srv_auth_route_jobs(req, g, req->param, per_record);
	}
	if (st == 0)
		return 0;
	/* in the error shape of the route's API (InfluxDB v2 clients read
	 * {"code","message"}), as its handler's own refusals */
	const char *msg = st == 401 ? "authentication required: send 'Authorization: Bearer "
				      "<token>' (see docs/API.md, Authentication)"
				    : "forbidden";
	if (st == 401)
		srv_resp_header(resp, "WWW-Authenticate", "Basic realm=\"rankdb\"");
	if (r->refuse)
		r->refuse(resp, r, st == 401 ? 401 : 403, msg);
	else
		srv_error(resp, st == 401 ? 401 : 403, "%s", msg);
	return -1;
}

void srv_route_dispatch(const struct srv_route_table *const *tables, size_t ntables,
			struct srv_req *req, struct srv_resp *resp)
{
	char param[PARAM_MAX];
	unsigned allowed;
	const char *allow;
	const struct srv_route *r0 = first_match(tables, ntables, req->path, param);
	if (!r0) {
		srv_error(resp, 404, "no such endpoint: %.200s (see docs/API.md)", req->path);
		return;
	}
	const struct srv_route *r =
	    for_method(tables, ntables, r0, method_bit(req->method), &allowed, &allow);
	if (!r) {
		refuse_method(req, resp, r0, allowed, allow);
		return;
	}
	req->param = param;
	struct srv_auth_grant grant;
	if (r->scope != SRV_SCOPE_PUBLIC && r->scope != SRV_SCOPE_ADMIN && srv_auth_enabled()) {
		if (authorize(req, resp, r, &grant) != 0) {
			req->param = NULL;
			return;
		}
		req->auth = &grant;
	}
	run(req, resp, r);
	req->param = NULL;
	req->auth = NULL;
}
