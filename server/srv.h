/* srv.h - the HTTP front of rankdbd: request and response value types shared
 * by the HTTP wiring (http.c, the only file that includes microhttpd.h) and
 * the endpoint handlers (handlers.c), plus the server's own counters.
 */
#ifndef SRV_SRV_H
#define SRV_SRV_H

#include "common/rdb_buf.h"
#include "ingest/ing.h"
#include "server/config.h"
#include "storage/sto.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define SRV_MAX_ARGS 64

struct srv_arg {
	const char *key, *val; /* URL-decoded; valid for the request's life */
};

/* What the server counts for /metrics (all monotonic). */
struct srv_counters {
	_Atomic uint64_t requests[6];      /* by status class: [1]..[5] = 1xx..5xx */
	_Atomic uint64_t write_requests;
	_Atomic uint64_t write_records;
	_Atomic uint64_t write_rejected_invalid;  /* 400 */
	_Atomic uint64_t write_rejected_too_large; /* 413 */
	_Atomic uint64_t write_rejected_busy;     /* 503 */
	_Atomic uint64_t write_rejected_limit;    /* series limit etc. */
	_Atomic uint64_t write_failed;            /* 500 */
	_Atomic uint64_t queries;
	_Atomic uint64_t query_errors;
	_Atomic uint64_t query_ns_total;
	/* line protocol (HTTP and UDP), in lines */
	_Atomic uint64_t lp_lines_ok;
	_Atomic uint64_t lp_lines_bad;
	_Atomic uint64_t lp_string_fields_skipped;
	/* UDP listener (udp.c): datagrams unless said otherwise */
	_Atomic uint64_t udp_received;
	_Atomic uint64_t udp_dropped_queue_full;  /* queue over its count or byte bound */
	_Atomic uint64_t udp_dropped_oversize;    /* over udp_max_datagram_bytes */
	_Atomic uint64_t udp_dropped_socket;      /* kernel socket buffer overflowed */
	_Atomic uint64_t udp_dropped_parse_error; /* nothing in it was usable */
	_Atomic uint64_t udp_dropped_busy;        /* storage saturated (RDB_EBUSY) */
	_Atomic uint64_t udp_dropped_limit;       /* storage refused: series limit */
	_Atomic uint64_t udp_dropped_error;       /* storage failed (I/O) */
	_Atomic uint64_t udp_lines_bad;           /* bad lines of datagrams otherwise stored */
	_Atomic uint64_t udp_points;              /* points stored from UDP */
	_Atomic uint64_t udp_queue_depth;         /* gauge: datagrams waiting */
	/* HTTP connections and request bodies (http.c) */
	_Atomic uint64_t http_connections;        /* gauge: open connections */
	_Atomic uint64_t http_shed_idle;          /* closed to make room (waited longest) */
	_Atomic uint64_t http_refused_limit;      /* 503: past http_max_connections */
	_Atomic uint64_t http_timed_out;          /* closed: request not whole by its deadline */
	_Atomic uint64_t http_refused_body_budget; /* 503: past max_body_bytes_in_flight */
	_Atomic uint64_t http_body_bytes;         /* gauge: body bytes reserved (http.c sets it) */
};

/* Shared by every request; read-only after start except the counters. */
struct srv_ctx {
	const struct srv_config *cfg;
	struct sto *sto;
	struct ing_limits limits;
	struct srv_counters counters;
	int64_t started_ns;
};

struct srv_req {
	struct srv_ctx *ctx;
	const char *method;
	const char *path;
	struct srv_arg args[SRV_MAX_ARGS];
	int nargs;
	bool args_overflow; /* more than SRV_MAX_ARGS query parameters */
	bool args_nul;      /* a query parameter holds a NUL byte (%00): refused */
	const uint8_t *body;
	size_t body_len;
	void *conn; /* the HTTP library's connection, for srv_req_header */
	const char *peer; /* client address "ip:port" ("?" if unknown); request's life */
};

/* A request header's value (case-insensitive name), or NULL. Valid for
 * the request's life. */
const char *srv_req_header(const struct srv_req *req, const char *name);

struct srv_resp {
	int status;
	const char *content_type; /* default application/json */
	const char *retry_after;  /* Retry-After header, or NULL */
	const char *allow;        /* Allow header (405), or NULL */
	struct rdb_buf body;      /* owned; handed to the HTTP library */
};

/* Route hooks of the feature modules: each returns true when it handled
 * the request (resp filled), false when the path is not its own. */
bool srv_ingest_route(struct srv_req *req, struct srv_resp *resp);  /* ingest_routes.c */
bool srv_query_route(struct srv_req *req, struct srv_resp *resp);   /* query_routes.c */
bool srv_grafana_route(struct srv_req *req, struct srv_resp *resp); /* grafana.c */
bool srv_admin_route(struct srv_req *req, struct srv_resp *resp);   /* admin_routes.c */
/* Applies the lifecycle options (retention, compaction) to ctx->sto. Call
 * once after sto_open. admin_routes.c */
void srv_admin_init(struct srv_ctx *ctx);
bool srv_events_route(struct srv_req *req, struct srv_resp *resp);  /* events_routes.c */

/* The request's client batch id (header X-Rankdb-Batch-Id, or query
 * parameter batch_id): *id = NULL when none was sent. RDB_EINVAL with the
 * reason in why when it is not 1..STO_BATCH_ID_MAX printable ASCII bytes,
 * or when the header and the parameter disagree. *id points into the
 * request (valid for its life). */
int srv_req_batch_id(const struct srv_req *req, const char **id, size_t *len, char *why,
		     size_t whylen);

/* Routes a complete request to its handler. Never fails: errors become a
 * JSON error response. */
void srv_dispatch(struct srv_req *req, struct srv_resp *resp);

/* Parses a whole decimal int64 query parameter. 0 or -EINVAL. */
int srv_parse_i64(const char *s, int64_t *out);

/* Sets resp to status with body {"error": msg}. */
void srv_error(struct srv_resp *resp, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

struct srv_http;
/* Starts listening per cfg (thread pool, keep-alive, limits). *port gets
 * the bound port. 0 or -errno with a log line saying why. */
int srv_http_start(struct srv_ctx *ctx, struct srv_http **out, uint16_t *port);
/* Stops accepting, waits for requests in flight, frees. NULL ok. */
void srv_http_stop(struct srv_http *h);

#endif
