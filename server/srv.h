/* srv.h - the HTTP front of rankdbd: request and response value types shared
 * by the HTTP wiring (http.c, the only file that includes microhttpd.h) and
 * the endpoint handlers (handlers.c), plus the server's own counters.
 */
#ifndef SRV_SRV_H
#define SRV_SRV_H

#include "common/rdb_buf.h"
#include "ingest/ing.h"
#include "ingest/pipeline.h"
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
	_Atomic uint64_t requests[6]; /* by status class: [1]..[5] = 1xx..5xx */
	_Atomic uint64_t write_requests;
	_Atomic uint64_t write_records;
	_Atomic uint64_t write_rejected_invalid;   /* 400 */
	_Atomic uint64_t write_rejected_too_large; /* 413 */
	_Atomic uint64_t write_rejected_busy;	   /* 503 */
	_Atomic uint64_t write_rejected_limit;	   /* series limit etc. */
	_Atomic uint64_t write_failed;		   /* 500 */
	_Atomic uint64_t write_rejected_nospace;   /* 503: disk full */
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
	_Atomic uint64_t udp_dropped_oversize;	  /* over udp_max_datagram_bytes */
	_Atomic uint64_t udp_dropped_socket;	  /* kernel socket buffer overflowed */
	_Atomic uint64_t udp_dropped_parse_error; /* nothing in it was usable */
	_Atomic uint64_t udp_dropped_busy;	  /* storage saturated (RDB_EBUSY) */
	_Atomic uint64_t udp_dropped_limit;	  /* storage refused: series limit */
	_Atomic uint64_t udp_dropped_error;	  /* storage failed (I/O) */
	_Atomic uint64_t udp_lines_bad;		  /* bad lines of datagrams otherwise stored */
	_Atomic uint64_t udp_points;		  /* points stored from UDP */
	_Atomic uint64_t udp_queue_depth;	  /* gauge: datagrams waiting */
	/* HTTP connections and request bodies (http.c) */
	_Atomic uint64_t http_connections;	   /* gauge: open connections */
	_Atomic uint64_t http_shed_idle;	   /* closed to make room (waited longest) */
	_Atomic uint64_t http_refused_limit;	   /* 503: past http_max_connections */
	_Atomic uint64_t http_timed_out;	   /* closed: request not whole by its deadline */
	_Atomic uint64_t http_refused_body_budget; /* 503: past max_body_bytes_in_flight */
	_Atomic uint64_t http_body_bytes;	   /* gauge: body bytes reserved (http.c sets it) */
	_Atomic uint64_t http_parked;		   /* gauge: requests parked until durable */
	_Atomic uint64_t http_parked_max;	   /* high-water mark of http_parked */
	_Atomic uint64_t http_parked_total;	   /* requests ever parked */
	_Atomic uint64_t http_refused_parked;	   /* 503: past http_max_parked */
};

/* Shared by every request; read-only after start except the counters. */
struct det_service;
struct srv_auth_grant;

struct srv_ctx {
	const struct srv_config *cfg;
	struct sto *sto;
	struct ing_pipeline *pipe;  /* every write goes through it (ingest/pipeline.h) */
	struct det_service *detect; /* detection (detect/service.h); NULL when off */
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
	bool args_nul;	    /* a query parameter holds a NUL byte (%00): refused */
	const uint8_t *body;
	size_t body_len;
	void *conn; /* the HTTP library's connection, for srv_req_header */
	const struct srv_header
	    *hdrs; /* the write loop's headers (wloop.c); NULL: libmicrohttpd's */
	int nhdrs;
	const char *param; /* the {job}/{name} segment of the matched route (route.h), or NULL */
	const char *peer;  /* client address "ip:port" ("?" if unknown); request's life */
	const struct srv_auth_grant *auth; /* the proven token (server/auth.h), NULL: none needed */
	void *park; /* the HTTP layer's parking slot for srv_submit, NULL: cannot park */
};

struct srv_resp;
/* Answers a write from its outcome and frees state (srv_submit). */
typedef void (*srv_finish_fn)(void *state, const struct ing_outcome *o, struct srv_resp *resp);
#define SRV_PARKED 1

/* Submits a write for req without holding the thread while it becomes
 * durable (http.c). Returns 0 with *o filled when the answer is known now
 * (stored with sync_policy none, refused, or not parkable: then the write
 * was done with ing_submit, blocking); the caller answers (typically
 * fin(state, o, resp)). Returns SRV_PARKED when the request is parked: the
 * caller returns from its handler leaving resp untouched, and the HTTP
 * layer later calls fin(state, o, resp) on a worker thread with the same
 * outcome ing_submit would have given; w (and what it points to, which
 * state must own) stays valid until then. Past http_max_parked parked
 * requests, *o is a 503 refusal with Retry-After (nothing stored, counted
 * in http_refused_parked). */
int srv_submit(struct srv_req *req, const struct ing_write *w, struct ing_outcome *o,
	       srv_finish_fn fin, void *state);

/* A request header's value (case-insensitive name), or NULL. Valid for
 * the request's life. */
const char *srv_req_header(const struct srv_req *req, const char *name);

#define SRV_MAX_RESP_HEADERS 8

/* A further response header; both strings are static or outlive the
 * request's dispatch (they are copied when the response is queued). */
struct srv_header {
	const char *name, *value;
};

struct srv_resp {
	int status;
	const char *content_type;			 /* default application/json */
	const char *retry_after;			 /* Retry-After header, or NULL */
	const char *allow;				 /* Allow header (405), or NULL */
	struct rdb_buf body;				 /* owned; handed to the HTTP library */
	struct srv_header headers[SRV_MAX_RESP_HEADERS]; /* further headers (srv_resp_header) */
	int nheaders;
};

/* Adds a response header (name and value must outlive the dispatch; see
 * struct srv_header). Past SRV_MAX_RESP_HEADERS it is dropped: a
 * programming error, logged. */
void srv_resp_header(struct srv_resp *resp, const char *name, const char *value);

/* (The feature modules export their rows of the route table: route.h.) */

/* Applies the lifecycle options (retention, compaction) to ctx->sto. Call
 * once after sto_open. admin_routes.c */
void srv_admin_init(struct srv_ctx *ctx);
/* Reloads the detector rules (SIGHUP, POST /api/v1/admin/rules/reload): 0
 * with msg a summary, or an error with msg saying why (the old rules stay). */
int srv_detect_reload(struct srv_ctx *ctx, char *msg, size_t msglen);
/* Appends the detection metrics to /metrics (nothing when off). */
void srv_detect_metrics(struct srv_ctx *ctx, struct rdb_buf *b);
/* Starts detection per ctx->cfg (ctx->detect stays NULL when detect = off).
 * 0, or an error with err saying why (a bad rules file names its line). */
int srv_detect_start(struct srv_ctx *ctx, uint16_t http_port, char *err, size_t errlen);
/* A job's metadata document was written: detection re-reads it. */
void srv_detect_meta_changed(struct srv_ctx *ctx, const char *job);

/* The request's client batch id (header X-Rankdb-Batch-Id, or query
 * parameter batch_id): *id = NULL when none was sent. RDB_EINVAL with the
 * reason in why when it is not 1..STO_BATCH_ID_MAX printable ASCII bytes,
 * or when the header and the parameter disagree. *id points into the
 * request (valid for its life). */
int srv_req_batch_id(const struct srv_req *req, const char **id, size_t *len, char *why,
		     size_t whylen);

/* Adds query argument key=val (decoded, NUL-terminated, key_len / val_len
 * bytes before the NUL) to req, as both HTTP front ends collect them. A
 * %00 inside either (the C string would be cut there) sets args_nul, more
 * than SRV_MAX_ARGS sets args_overflow; false then (stop collecting). */
bool srv_req_add_arg(struct srv_req *req, const char *key, size_t key_len, const char *val,
		     size_t val_len);

/* Routes a complete request to its handler through the route table
 * (route.h; handlers.c lists the tables). Never fails: errors become a
 * JSON error response (a query parameter with a NUL byte, req->args_nul,
 * is a 400 before routing). */
void srv_dispatch(struct srv_req *req, struct srv_resp *resp);

/* Counts a write's outcome in ctx->counters (one place for every front
 * end): rejected_busy, rejected_limit, rejected_invalid, failed. */
void srv_count_outcome(struct srv_ctx *ctx, const struct ing_outcome *o);

/* The request body with its Content-Encoding undone (gzip, x-gzip or
 * identity), bounded by max_body_bytes. On success *body / *len point at
 * the request body or at inflated (which the caller frees with
 * rdb_buf_free, also on failure). On failure *status is 413 (inflates past
 * the bound), 415 (another encoding) or 400 / 500, why says what, and the
 * return value is RDB_ELIMIT / RDB_EINVAL / -ENOMEM. server/body.c, the
 * only zlib user. */
int srv_req_body(const struct srv_req *req, struct rdb_buf *inflated, const uint8_t **body,
		 size_t *len, int *status, char *why, size_t whylen);

/* Parses a whole decimal int64 query parameter. 0 or -EINVAL. */
int srv_parse_i64(const char *s, int64_t *out);
/* Parses a rank as every parameter and payload names one: a decimal
 * integer 0..MDL_RANK_MAX, or "job" (MDL_RANK_JOB, the job-level
 * pseudo-rank). 0 or -EINVAL (*rank untouched). handlers.c */
int srv_parse_rank(const char *s, uint32_t *rank);
/* Copies val into a new string registered in owned[*nowned] (the caller
 * frees every owned[] entry; it has room for one copy per query argument,
 * SRV_MAX_ARGS). The copy, or NULL when out of memory. handlers.c */
char *srv_arg_copy(const char *val, char **owned, int *nowned);
/* Splits s in place at commas (each becomes a NUL), skipping empty items,
 * appending the items to tok[*n..max). 0, or RDB_ELIMIT at the first item
 * that does not fit (those before it are kept). handlers.c */
int srv_split_commas(char *s, const char **tok, size_t max, size_t *n);
/* Splits s in place as srv_split_commas and parses each item with
 * srv_parse_rank, appending to ranks[*n..max), in order. 0; RDB_EINVAL with
 * *bad at the first item that is not a rank, or RDB_ELIMIT at the first rank
 * that does not fit, whichever comes first. handlers.c */
int srv_parse_rank_list(char *s, uint32_t *ranks, size_t max, size_t *n, const char **bad);

/* Appends the detection fields of job to a GET /api/v1/jobs entry
 * (server/detect_routes.c): ,"state":"ok|degraded|..." when the detector
 * holds state for it, and ,"firing_alerts":[alerts as /api/v1/alerts
 * lists them]. arg is the struct srv_ctx (ctx->detect non-NULL). 0 or
 * -ENOMEM. */
int srv_detect_job_fields(void *arg, const char *job, struct rdb_buf *out);

/* The one parser of query times (server/timearg.c): integer ns since the
 * epoch, RFC 3339 ("2024-10-18T06:33:44.866Z", "2024-10-18"), or relative
 * to now_ns ("now", "now-1h", "now+30m"; units ns us ms s m h d w). Clamped
 * to int64 ns. 0 or RDB_EINVAL. Pure. SRV_TIME_HELP names the forms for
 * error messages. */
int srv_parse_time_ns(const char *s, int64_t now_ns, int64_t *ts_ns);
/* "<digits><unit>" (units as above) into ns, clamped. 0 or RDB_EINVAL. */
int srv_parse_duration_ns(const char *s, int64_t *ns);
#define SRV_TIME_HELP                                                                              \
	"ns since the epoch, an RFC 3339 time such as 2024-10-18T06:33:44Z, or now / now-1h"

struct qry_error;
/* Answers a failed query: the status of its code (srv_qry_status), body
 * {"error": msg}, counted in query_errors. handlers.c */
void srv_query_failed(struct srv_ctx *ctx, struct srv_resp *resp, const struct qry_error *e);

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
