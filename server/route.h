/* route.h - the one route table of the HTTP API: each row is a method set +
 * a path pattern -> a handler, with the scope of its callers (for the
 * coming authentication). Each feature module (*_routes.c, grafana.c,
 * handlers.c) exports its rows; handlers.c lists the tables in order and
 * srv_route_dispatch answers every request from them, with the 404 and 405
 * logic in this one place (route.c).
 *
 * Patterns: literal text, plus
 *   {job}   one path segment that is a valid job id (model/series.h)
 *   {name}  one non-empty path segment of at most MDL_JOB_MAX + 1 bytes
 *   /?      at the end: an optional trailing slash
 *   *       at the end: any rest of the path (also empty); before a literal
 *           end (a star, then "/health"): any non-empty middle, then that end
 * The captured segment is in req->param while the handler runs.
 *
 * Matching: the first row (tables in order, rows in order) whose pattern
 * matches the path decides; of the rows with that very pattern, the one
 * whose methods include the request's runs. None: 405 with an Allow header
 * (the first allow text of those rows, else their first method). No pattern
 * matches: 404. A row without handler answers 404 with its own message
 * (a known prefix without such an endpoint).
 */
#ifndef SRV_ROUTE_H
#define SRV_ROUTE_H

#include "server/srv.h"

#include <stddef.h>

enum srv_method_bits {
	SRV_GET = 1u << 0,
	SRV_HEAD = 1u << 1,
	SRV_POST = 1u << 2,
	SRV_PUT = 1u << 3,
	SRV_DELETE = 1u << 4,
	SRV_OTHER = 1u << 5, /* any other method */
	SRV_READ_METHODS = SRV_GET | SRV_HEAD,
	SRV_ANY = (1u << 6) - 1,
};

/* Who may call a route (enforced by the authentication to come). */
enum srv_scope {
	SRV_SCOPE_PUBLIC, /* health and metrics */
	SRV_SCOPE_READ,	  /* queries */
	SRV_SCOPE_WRITE,  /* ingest, metadata documents */
	SRV_SCOPE_ADMIN,  /* the admin API (its own token today) */
};

enum srv_route_flags {
	SRV_ROUTE_QUERY = 1u << 0, /* counted in queries / query time (/metrics) */
};

struct srv_route;

/* Answers the request (resp filled). Never fails: errors are responses. */
typedef void (*srv_handler_fn)(struct srv_req *req, struct srv_resp *resp,
			       const struct srv_route *r);

struct srv_route {
	unsigned methods;    /* SRV_* accepted */
	const char *pattern; /* see above */
	enum srv_scope scope;
	srv_handler_fn fn;     /* NULL: 404 with not_found */
	int arg;	       /* the handler's own selector (endpoint, API version) */
	unsigned flags;	       /* SRV_ROUTE_* */
	const char *allow;     /* 405 Allow text; NULL: from the methods */
	const char *not_found; /* fn NULL: the 404 message, one %.200s for the path */
	/* The body of a 405, 401 or 403 (status, message) in the shape of the
	 * route's API; NULL: srv_error's {"error": ...}. */
	void (*refuse)(struct srv_resp *resp, const struct srv_route *r, int status,
		       const char *msg);
};

struct srv_route_table {
	const struct srv_route *rows;
	size_t n;
};

/* The rows of each module. */
extern const struct srv_route_table srv_core_routes;	/* handlers.c: health, metrics, write */
extern const struct srv_route_table srv_catalog_routes; /* handlers.c: range, jobs */
extern const struct srv_route_table srv_ingest_routes;	/* ingest_routes.c */
extern const struct srv_route_table srv_grafana_routes; /* grafana.c */
extern const struct srv_route_table srv_admin_routes;	/* admin_routes.c */
extern const struct srv_route_table srv_events_routes;	/* events_routes.c */
extern const struct srv_route_table srv_detect_routes;	/* detect_routes.c */
extern const struct srv_route_table srv_ui_routes;	/* ui_routes.c */
extern const struct srv_route_table srv_query_routes;	/* query_routes.c */
extern const struct srv_route_table srv_influx_routes;	/* influx_routes.c: /ping, /query */

/* True when path matches pattern; param (plen bytes) gets the {job} or
 * {name} segment ("" when the pattern has none). */
bool srv_route_match(const char *pattern, const char *path, char *param, size_t plen);

/* Answers req from the tables (in order) as described above. */
void srv_route_dispatch(const struct srv_route_table *const *tables, size_t ntables,
			struct srv_req *req, struct srv_resp *resp);

#endif
