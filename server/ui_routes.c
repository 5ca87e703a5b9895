/* ui_routes.c - routes of the built-in dashboard:
 *
 *   GET /             302 to /ui/
 *   GET /ui           301 to /ui/
 *   GET /ui/          the dashboard's index.html
 *   GET /ui/<name>    one of its files (server/ui_assets.h)
 *
 * The files are compiled into the binary (ui/embed.py), so nothing is read
 * from disk and there is nothing to install beside rankdbd. Caching: a name
 * that carries the content hash (app.<hash>.js, what index.html refers to)
 * is "public, max-age=31536000, immutable"; index.html and the unhashed
 * names are "no-cache" with a strong ETag, and a matching If-None-Match is
 * a 304 without a body. A client that accepts gzip gets the stored gzip
 * copy (Vary: Accept-Encoding) under its own ETag ("<hash>-gz"). HTML
 * carries a Content-Security-Policy that allows scripts from this origin
 * only.
 *
 * Threading: the asset table is constant; a request only reads it and its
 * own request/response, so any number of HTTP threads may call in. Failure:
 * an unknown name is a 404 and another method a 405; copying an asset into
 * the response body can only fail past max_response_bytes (a 500 naming
 * the option). The rows are in srv_ui_routes (route.h).
 */
#include "server/route.h"
#include "server/srv.h"
#include "server/ui_assets.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define IMMUTABLE "public, max-age=31536000, immutable"
#define CSP                                                                                        \
	"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "                \
	"img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "           \
	"frame-ancestors 'none'"

static int cmp_name(const void *key, const void *elem)
{
	return strcmp(key, ((const struct srv_ui_asset *)elem)->name);
}

static const struct srv_ui_asset *find_asset(const char *name)
{
	return bsearch(name, srv_ui_assets, srv_ui_assets_count, sizeof(srv_ui_assets[0]),
		       cmp_name);
}

/* Does the list header (a, b;q=1, ...) hold token with a non-zero q? */
static bool list_has(const char *list, const char *token)
{
	size_t tl = strlen(token);
	for (const char *p = list; p && *p;) {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		const char *end = p + strcspn(p, ",");
		const char *semi = memchr(p, ';', (size_t)(end - p));
		const char *tok_end = semi ? semi : end;
		while (tok_end > p && (tok_end[-1] == ' ' || tok_end[-1] == '\t'))
			tok_end--;
		if ((size_t)(tok_end - p) == tl && strncasecmp(p, token, tl) == 0) {
			const char *q = semi ? strstr(semi, "q=") : NULL;
			if (!q || q >= end || strtod(q + 2, NULL) > 0)
				return true;
		}
		p = end;
	}
	return false;
}

/* If-None-Match: "*", or a list of entity tags, weak (W/"..") or strong. */
static bool etag_matches(const char *inm, const char *etag)
{
	size_t el = strlen(etag);
	for (const char *p = inm; p && *p;) {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		if (*p == '*')
			return true;
		if (strncmp(p, "W/", 2) == 0)
			p += 2;
		if (strncmp(p, etag, el) == 0 && (p[el] == 0 || p[el] == ',' || p[el] == ' '))
			return true;
		p += strcspn(p, ",");
	}
	return false;
}

static void redirect(struct srv_resp *resp, int status, const char *to)
{
	resp->status = status;
	resp->content_type = "text/plain; charset=utf-8";
	srv_resp_header(resp, "Location", to);
	rdb_buf_puts(&resp->body, "see /ui/\n");
}

static void serve(const struct srv_req *req, struct srv_resp *resp, const struct srv_ui_asset *a)
{
	const char *ae = srv_req_header(req, "Accept-Encoding");
	bool gz = a->gz && ae && list_has(ae, "gzip");
	resp->content_type = a->content_type;
	srv_resp_header(resp, "ETag", gz ? a->etag_gz : a->etag);
	srv_resp_header(resp, "Cache-Control", a->immutable ? IMMUTABLE : "no-cache");
	srv_resp_header(resp, "Vary", "Accept-Encoding");
	srv_resp_header(resp, "X-Content-Type-Options", "nosniff");
	if (strncmp(a->content_type, "text/html", 9) == 0) {
		srv_resp_header(resp, "Content-Security-Policy", CSP);
		srv_resp_header(resp, "Referrer-Policy", "no-referrer");
	}
	/* a cached copy of either representation is still good */
	const char *inm = srv_req_header(req, "If-None-Match");
	if (inm && (etag_matches(inm, a->etag) || (a->gz && etag_matches(inm, a->etag_gz)))) {
		resp->status = 304;
		return;
	}
	if (rdb_buf_append(&resp->body, gz ? a->gz : a->data, gz ? a->gz_len : a->len)) {
		resp->content_type = NULL;
		resp->nheaders = 0;
		srv_error(resp, 500,
			  "dashboard file %s (%zu bytes) does not fit in "
			  "max_response_bytes; raise the option",
			  a->name, gz ? a->gz_len : a->len);
		return;
	}
	if (gz)
		srv_resp_header(resp, "Content-Encoding", "gzip");
	resp->status = 200;
}

enum { UI_ROOT, UI_BARE, UI_FILE };

static void h_ui(struct srv_req *req, struct srv_resp *resp, const struct srv_route *r)
{
	if (r->arg != UI_FILE) {
		redirect(resp, r->arg == UI_ROOT ? 302 : 301, "/ui/");
		return;
	}
	const char *p = req->path;
	const char *name = p[4] ? p + 4 : "index.html";
	const struct srv_ui_asset *a = find_asset(name);
	if (!a) {
		srv_error(resp, 404, "no dashboard file %.200s (the dashboard is at /ui/)", p);
		return;
	}
	serve(req, resp, a);
}

static const struct srv_route rows[] = {
    {SRV_READ_METHODS, "/", SRV_SCOPE_READ, h_ui, UI_ROOT, 0, NULL, NULL, NULL},
    {SRV_READ_METHODS, "/ui", SRV_SCOPE_READ, h_ui, UI_BARE, 0, NULL, NULL, NULL},
    {SRV_READ_METHODS, "/ui/*", SRV_SCOPE_READ, h_ui, UI_FILE, 0, NULL, NULL, NULL},
};
const struct srv_route_table srv_ui_routes = {rows, sizeof(rows) / sizeof(rows[0])};
