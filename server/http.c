/* http.c - libmicrohttpd wiring: one daemon with an internal thread pool
 * (epoll), HTTP/1.1 keep-alive, a connection limit and an idle timeout.
 * The only file that includes microhttpd.h.
 *
 * A request's body is accumulated into a buffer bounded by max_body_bytes:
 * a Content-Length above the bound is refused with 413 before the body is
 * read; a chunked body that grows past it is drained and refused with 413.
 * The request's memory (struct conn_req) is freed in one place, the
 * completion callback.
 */
#include "server/srv.h"
#include "common/rdb_err.h"
#include "common/rdb_log.h"
#include "common/rdb_time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct srv_http {
	struct MHD_Daemon *d;
	struct srv_ctx *ctx;
};

struct conn_req {
	struct rdb_buf body;
	bool too_large;
	bool answered; /* a response was queued early (413) */
};

static enum MHD_Result collect_arg(void *cls, enum MHD_ValueKind kind, const char *key,
				   const char *value)
{
	(void)kind;
	struct srv_req *r = cls;
	if (r->nargs == SRV_MAX_ARGS) {
		r->args_overflow = true;
		return MHD_NO;
	}
	r->args[r->nargs].key = key;
	r->args[r->nargs].val = value ? value : "";
	r->nargs++;
	return MHD_YES;
}

static enum MHD_Result send_resp(struct MHD_Connection *conn, struct srv_ctx *ctx,
				 struct srv_resp *resp)
{
	size_t len = resp->body.len;
	void *data = rdb_buf_steal(&resp->body);
	struct MHD_Response *r = MHD_create_response_from_buffer(len, data ? data : (void *)"",
								 data ? MHD_RESPMEM_MUST_FREE :
									MHD_RESPMEM_PERSISTENT);
	if (!r) {
		free(data);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				resp->content_type ? resp->content_type : "application/json");
	if (resp->retry_after)
		MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, resp->retry_after);
	if (resp->allow)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, resp->allow);
	for (int i = 0; i < resp->nheaders; i++)
		MHD_add_response_header(r, resp->headers[i].name, resp->headers[i].value);
	int cls = resp->status / 100;
	if (cls >= 1 && cls <= 5)
		atomic_fetch_add(&ctx->counters.requests[cls], 1);
	enum MHD_Result ok = MHD_queue_response(conn, (unsigned)resp->status, r);
	MHD_destroy_response(r);
	return ok;
}

/* 413 in the error shape the endpoint's clients read: InfluxDB v2 clients
 * want {"code","message"}, everyone else {"error"}. */
static enum MHD_Result too_large(struct MHD_Connection *conn, struct srv_ctx *ctx,
				 const char *url)
{
	struct srv_resp resp = {0};
	rdb_buf_init(&resp.body, 4096);
	atomic_fetch_add(&ctx->counters.write_rejected_too_large, 1);
	unsigned long long max = (unsigned long long)ctx->cfg->max_body_bytes;
	if (url && strcmp(url, "/api/v2/write") == 0) {
		resp.status = 413;
		rdb_buf_printf(&resp.body, "{\"code\":\"request too large\",\"message\":\"request "
			       "body exceeds max_body_bytes (%llu bytes); send smaller batches\"}",
			       max);
	} else {
		srv_error(&resp, 413, "request body exceeds max_body_bytes (%llu bytes); send "
			  "smaller batches", max);
	}
	return send_resp(conn, ctx, &resp);
}

/* First call for a request: set up its state, refuse oversized bodies early. */
static enum MHD_Result begin(struct MHD_Connection *conn, struct srv_ctx *ctx, const char *url,
			    void **con_cls)
{
	struct conn_req *cr = calloc(1, sizeof(*cr));
	if (!cr)
		return MHD_NO;
	rdb_buf_init(&cr->body, ctx->cfg->max_body_bytes);
	*con_cls = cr;
	const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
						     MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (cl) {
		char *end;
		errno = 0;
		unsigned long long n = strtoull(cl, &end, 10);
		if (errno == 0 && *end == 0 && n > ctx->cfg->max_body_bytes) {
			cr->too_large = true;
			cr->answered = true;
			return too_large(conn, ctx, url);
		}
	}
	return MHD_YES;
}

/* The client's address as "ip:port", for the audit log. */
static void peer_address(struct MHD_Connection *conn, char *out, size_t len)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	char ip[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;
	const struct sockaddr *sa = ci ? ci->client_addr : NULL;
	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
		inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
		port = ntohs(in->sin_port);
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
		inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
		port = ntohs(in6->sin6_port);
	}
	snprintf(out, len, "%s:%u", ip, port);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version,
				  const char *upload_data, size_t *upload_data_size,
				  void **con_cls)
{
	(void)version;
	struct srv_ctx *ctx = cls;
	if (*con_cls == NULL)
		return begin(conn, ctx, url, con_cls);
	struct conn_req *cr = *con_cls;
	if (*upload_data_size) {
		if (!cr->too_large && rdb_buf_append(&cr->body, upload_data, *upload_data_size))
			cr->too_large = true;
		*upload_data_size = 0; /* consumed (or drained) */
		return MHD_YES;
	}
	if (cr->answered)
		return MHD_YES;
	if (cr->too_large)
		return too_large(conn, ctx, url);
	char peer[INET6_ADDRSTRLEN + 8];
	peer_address(conn, peer, sizeof(peer));
	struct srv_req req = {.ctx = ctx, .method = method, .path = url,
			      .body = cr->body.data, .body_len = cr->body.len, .conn = conn,
			      .peer = peer};
	MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, collect_arg, &req);
	struct srv_resp resp = {0};
	rdb_buf_init(&resp.body, ctx->cfg->max_response_bytes + 4096);
	srv_dispatch(&req, &resp);
	enum MHD_Result ok = send_resp(conn, ctx, &resp);
	rdb_buf_free(&resp.body);
	return ok;
}

void srv_resp_header(struct srv_resp *resp, const char *name, const char *value)
{
	if (resp->nheaders == SRV_MAX_RESP_HEADERS) {
		rdb_error("http", "response header %s dropped: more than %d extra headers "
			  "(raise SRV_MAX_RESP_HEADERS)", name, SRV_MAX_RESP_HEADERS);
		return;
	}
	resp->headers[resp->nheaders].name = name;
	resp->headers[resp->nheaders].value = value;
	resp->nheaders++;
}

const char *srv_req_header(const struct srv_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	(void)conn;
	(void)toe;
	struct conn_req *cr = *con_cls;
	if (!cr)
		return;
	rdb_buf_free(&cr->body);
	free(cr);
	*con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char line[512];
	vsnprintf(line, sizeof(line), fmt, ap);
	size_t n = strlen(line);
	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = 0;
	static struct rdb_log_ratelimit rl;
	rdb_log_limited(&rl, 10, RDB_LOG_WARN, "http", "%s", line);
}

int srv_http_start(struct srv_ctx *ctx, struct srv_http **out, uint16_t *port)
{
	const struct srv_config *cfg = ctx->cfg;
	struct sockaddr_in sa = {0};
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)cfg->http_port);
	if (inet_pton(AF_INET, cfg->http_addr, &sa.sin_addr) != 1) {
		rdb_error("http", "http_addr '%s' is not an IPv4 address", cfg->http_addr);
		return -EINVAL;
	}
	struct srv_http *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->ctx = ctx;
	h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
					MHD_USE_ERROR_LOG,
				0, NULL, NULL, on_request, ctx,
				MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
				MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
				MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->http_threads,
				MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->http_max_connections,
				MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->http_timeout_s,
				MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
				MHD_OPTION_END);
	if (!h->d) {
		rdb_error("http", "cannot listen on %s:%u (port in use, or address not "
			  "available on this host)", cfg->http_addr, cfg->http_port);
		free(h);
		return -EADDRINUSE;
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
	*port = info ? info->port : (uint16_t)cfg->http_port;
	*out = h;
	return 0;
}

void srv_http_stop(struct srv_http *h)
{
	if (!h)
		return;
	MHD_stop_daemon(h->d);
	free(h);
}
