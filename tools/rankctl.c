/* rankctl - rankdb's admin CLI.
 *
 * Two ways to reach the data:
 *   --url http://HOST:PORT [--token T | env RANKDB_TOKEN]
 *       talks to a running rankdbd's admin API (plain sockets, HTTP/1.1,
 *       Connection: close) and its query API (export);
 *   --data-dir DIR
 *       works directly on a stopped server's data directory through the
 *       storage API (it takes the directory's LOCK; if rankdbd holds it,
 *       rankctl refuses and says so).
 *
 * Commands: stats [--job J]; export --job J [--metric M,...] [--from NS]
 * [--to NS] [--step-from N] [--step-to N] [--format ndjson|csv];
 * delete JOB; retention list|set JOB SECONDS|clear JOB|run;
 * compact [--min-live-pct N]; compact --index; index-stat (--data-dir);
 * verify [--quarantine]; backup DIR;
 * restore BACKUP DIR (offline); checkpoint; rebuild-index (--data-dir
 * only: recreates index/ from the segment files, keeping the old one).
 *
 * Output: JSON documents (one per command) on stdout, except export
 * (NDJSON or CSV rows, streamed one metric at a time). Exit status: 0 ok,
 * 1 failure, 2 usage, 3 verify found damage.
 */
#include "common/rdb_buf.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"
#include "detect/rules.h"
#include "query/agg.h"
#include "query/bucket.h"
#include "query/qry.h"
#include "storage/admin.h"
#include "storage/rebuild.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RESP_MAX (1ull << 31)

struct opts {
	const char *url, *token, *data_dir;
	const char *job, *metric, *format;
	const char *from, *to, *step_from, *step_to, *min_live_pct;
	bool quarantine, index;
	const char *pos[4];
	int npos;
};

static void usage(void)
{
	fprintf(
	    stderr,
	    "usage: rankctl (--url http://HOST:PORT [--token T] | --data-dir DIR) COMMAND\n"
	    "  stats [--job J]\n"
	    "  export --job J [--metric M,...] [--from NS] [--to NS] [--step-from N]\n"
	    "         [--step-to N] [--format ndjson|csv]\n"
	    "  delete JOB\n"
	    "  retention list | set JOB SECONDS | clear JOB | run\n"
	    "  compact [--min-live-pct N] | compact --index\n"
	    "                          (--index: rewrite index/data.mdb without its free pages)\n"
	    "  index-stat              (--data-dir only: pages of the LMDB index, per database)\n"
	    "  verify [--quarantine]\n"
	    "  backup DIR              (with --url: DIR is on the server's machine)\n"
	    "  restore BACKUP DIR      (offline: DIR must not exist)\n"
	    "  checkpoint\n"
	    "  rules check FILE        (no server needed: validates a detector rules file)\n"
	    "  rules sample            (prints every built-in rule with its defaults)\n"
	    "  rules reload            (--url: the server re-reads its rules_file)\n"
	    "  rebuild-index           (--data-dir only, server stopped: recreate index/\n"
	    "                          from the segment files; the old index is kept as\n"
	    "                          index.old-<ns>; see docs/OPERATIONS.md for what is lost)\n"
	    "  token add FILE ID SCOPES [JOBS] | list FILE | revoke FILE ID\n"
	    "                          (offline: edits a tokens file; add prints the secret once)\n"
	    "  udp-key add FILE ID [JOBS] | list FILE | revoke FILE ID\n"
	    "                          (offline: edits a UDP keys file; add prints id and secret)\n"
	    "The token may also come from the environment variable RANKDB_TOKEN.\n");
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct {
		const char *name;
		size_t off;
	} vals[] = {
	    {"--url", offsetof(struct opts, url)},
	    {"--token", offsetof(struct opts, token)},
	    {"--data-dir", offsetof(struct opts, data_dir)},
	    {"--job", offsetof(struct opts, job)},
	    {"--metric", offsetof(struct opts, metric)},
	    {"--format", offsetof(struct opts, format)},
	    {"--from", offsetof(struct opts, from)},
	    {"--to", offsetof(struct opts, to)},
	    {"--step-from", offsetof(struct opts, step_from)},
	    {"--step-to", offsetof(struct opts, step_to)},
	    {"--min-live-pct", offsetof(struct opts, min_live_pct)},
	};
	for (int i = 1; i < argc; i++) {
		bool known = false;
		for (size_t k = 0; k < sizeof(vals) / sizeof(vals[0]); k++) {
			if (strcmp(argv[i], vals[k].name) != 0)
				continue;
			if (i + 1 >= argc)
				return -1;
			*(const char **)((char *)o + vals[k].off) = argv[++i];
			known = true;
		}
		if (known)
			continue;
		if (strcmp(argv[i], "--quarantine") == 0)
			o->quarantine = true;
		else if (strcmp(argv[i], "--index") == 0)
			o->index = true;
		else if (argv[i][0] == '-' || o->npos == 4)
			return -1;
		else
			o->pos[o->npos++] = argv[i];
	}
	if (!o->token)
		o->token = getenv("RANKDB_TOKEN");
	if (!o->format)
		o->format = "ndjson";
	return o->npos ? 0 : -1;
}

/* ---- HTTP over a plain socket ---------------------------------------------------- */

struct http {
	char host[256], port[16];
};

static int url_parse(const char *url, struct http *h)
{
	if (strncmp(url, "http://", 7) != 0)
		return -1;
	const char *p = url + 7, *colon = strchr(p, ':'), *slash = strchr(p, '/');
	const char *end = slash ? slash : p + strlen(p);
	const char *hend = colon && colon < end ? colon : end;
	if (hend == p || (size_t)(hend - p) >= sizeof(h->host))
		return -1;
	memcpy(h->host, p, (size_t)(hend - p));
	h->host[hend - p] = 0;
	snprintf(h->port, sizeof(h->port), "%.*s",
		 colon && colon < end ? (int)(end - colon - 1) : 4,
		 colon && colon < end ? colon + 1 : "7461");
	return 0;
}

static int dial(const struct http *h)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *a;
	int fd = -1;
	if (getaddrinfo(h->host, h->port, &hints, &res) != 0)
		return -1;
	for (a = res; a && fd < 0; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
		if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	return fd;
}

/* Sends one request; *status and body (NUL-terminated) on success. */
static int http_do(const struct opts *o, const char *method, const char *path, int *status,
		   struct rdb_buf *body)
{
	struct http h;
	struct rdb_buf req, raw;
	int rc = -1;
	if (url_parse(o->url, &h) != 0) {
		fprintf(stderr, "rankctl: --url must look like http://HOST:PORT\n");
		return -1;
	}
	int fd = dial(&h);
	if (fd < 0) {
		fprintf(stderr, "rankctl: cannot connect to %s:%s: %s\n", h.host, h.port,
			strerror(errno));
		return -1;
	}
	rdb_buf_init(&req, 1 << 20);
	rdb_buf_init(&raw, RESP_MAX);
	rdb_buf_printf(&req,
		       "%s %s HTTP/1.1\r\nHost: %s:%s\r\nConnection: close\r\n"
		       "Content-Length: 0\r\n",
		       method, path, h.host, h.port);
	if (o->token)
		rdb_buf_printf(&req, "Authorization: Bearer %s\r\n", o->token);
	rdb_buf_puts(&req, "\r\n");
	if (write(fd, req.data, req.len) != (ssize_t)req.len)
		goto out;
	for (;;) {
		if (rdb_buf_reserve(&raw, 65536) != 0)
			goto out;
		ssize_t n = read(fd, raw.data + raw.len, 65536);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		raw.len += (size_t)n;
	}
	rdb_buf_putc(&raw, 0);
	char *sep = strstr((char *)raw.data, "\r\n\r\n");
	if (!sep || sscanf((char *)raw.data, "HTTP/1.%*d %d", status) != 1) {
		fprintf(stderr, "rankctl: malformed HTTP response from %s:%s\n", h.host, h.port);
		goto out;
	}
	body->len = 0;
	bool chunked = strcasestr((char *)raw.data, "transfer-encoding: chunked") != NULL &&
		       strcasestr((char *)raw.data, "transfer-encoding: chunked") < sep;
	const char *p = sep + 4;
	if (!chunked) {
		rc = rdb_buf_puts(body, p);
	} else {
		for (rc = 0; rc == 0;) {
			unsigned long n = strtoul(p, (char **)&p, 16);
			p = strstr(p, "\r\n");
			if (!p || n == 0)
				break;
			rc = rdb_buf_append(body, p + 2, n);
			p += 2 + n + 2;
		}
	}
	if (rc == 0)
		rc = rdb_buf_putc(body, 0);
	if (rc == 0)
		body->len--;
out:
	close(fd);
	rdb_buf_free(&req);
	rdb_buf_free(&raw);
	return rc;
}

/* Prints the body; 0 for 2xx, 1 otherwise (the message on stderr). */
static int api(const struct opts *o, const char *method, const char *path)
{
	struct rdb_buf body;
	int status = 0;
	rdb_buf_init(&body, RESP_MAX);
	int rc = http_do(o, method, path, &status, &body);
	if (rc == 0 && status / 100 == 2)
		printf("%s\n", (char *)body.data);
	else if (rc == 0)
		fprintf(stderr, "rankctl: HTTP %d: %s\n", status,
			body.data ? (char *)body.data : "");
	rdb_buf_free(&body);
	return rc == 0 && status / 100 == 2 ? 0 : 1;
}

static void url_escape(struct rdb_buf *b, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		    strchr("-._~,", c))
			rdb_buf_putc(b, (char)c);
		else
			rdb_buf_printf(b, "%%%02X", c);
	}
}

/* ---- export ------------------------------------------------------------------------ */

static void emit_value(FILE *f, json_t *v, bool csv)
{
	char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
	if (csv && json_is_string(v))
		fprintf(f, "%s", json_string_value(v));
	else
		fprintf(f, "%s", s ? s : "null");
	free(s);
}

/* Writes the points of a parsed range response as NDJSON or CSV rows. */
static void emit_series(json_t *doc, bool csv)
{
	json_t *series = json_object_get(doc, "series"), *sr;
	size_t i;
	json_array_foreach(series, i, sr)
	{
		json_t *ts = json_object_get(sr, "timestamps"), *st = json_object_get(sr, "steps");
		json_t *at = json_object_get(sr, "attempts"), *va = json_object_get(sr, "values");
		json_t *rank = json_object_get(sr, "rank");
		const char *job = json_string_value(json_object_get(sr, "job"));
		const char *metric = json_string_value(json_object_get(sr, "metric"));
		for (size_t k = 0; k < json_array_size(ts); k++) {
			if (csv) {
				printf("%s,", job);
				emit_value(stdout, rank, true);
				printf(",%s,", metric);
			} else {
				printf("{\"job\":\"%s\",\"rank\":", job);
				emit_value(stdout, rank, false);
				printf(",\"metric\":");
				emit_value(stdout, json_object_get(sr, "metric"), false);
				printf(",\"ts\":");
			}
			emit_value(stdout, json_array_get(ts, k), csv);
			printf(csv ? "," : ",\"step\":");
			emit_value(stdout, json_array_get(st, k), csv);
			printf(csv ? "," : ",\"attempt\":");
			emit_value(stdout, json_array_get(at, k), csv);
			printf(csv ? "," : ",\"value\":");
			emit_value(stdout, json_array_get(va, k), csv);
			printf(csv ? "\n" : "}\n");
		}
	}
}

/* Writes the points of a range response's text as NDJSON or CSV rows. */
static int emit_range(const char *text, bool csv)
{
	json_error_t jerr;
	json_t *doc = json_loads(text, 0, &jerr);
	if (!json_is_array(json_object_get(doc, "series"))) {
		fprintf(stderr, "rankctl: unexpected query response: %s\n", jerr.text);
		json_decref(doc);
		return 1;
	}
	emit_series(doc, csv);
	json_decref(doc);
	return 0;
}

static int parse_i64(const char *s, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end)
		return -1;
	*out = v;
	return 0;
}

static int metric_list(const char *text, char ***out, size_t *n)
{
	json_t *doc = json_loads(text, 0, NULL), *m = json_object_get(doc, "metrics"), *v;
	size_t i;
	*n = 0;
	*out = calloc(json_array_size(m) + 1, sizeof(char *));
	json_array_foreach(m, i, v) if (*out && json_is_string(v))(*out)[(*n)++] =
	    strdup(json_string_value(v));
	json_decref(doc);
	return *out ? 0 : -1;
}

/* The names of an offline metric listing as a malloc'd string array. */
static int metric_names(const struct qry_metrics *ml, char ***out, size_t *n)
{
	*n = 0;
	*out = calloc(ml->n + 1, sizeof(char *));
	for (size_t i = 0; *out && i < ml->n; i++)
		(*out)[(*n)++] = strdup(ml->v[i]);
	return *out ? 0 : -1;
}

/* Export through the query API, one metric per request. */
static int export_url(const struct opts *o, char **metrics, size_t nm, bool csv)
{
	struct rdb_buf path, body;
	int status = 0, rc = 0;
	rdb_buf_init(&path, 1 << 16);
	rdb_buf_init(&body, RESP_MAX);
	for (size_t i = 0; rc == 0 && i < nm; i++) {
		path.len = 0;
		rdb_buf_puts(&path, "/api/v1/query/range?job=");
		url_escape(&path, o->job);
		rdb_buf_puts(&path, "&metric=");
		url_escape(&path, metrics[i]);
		const char *keys[] = {"from", "to", "step_from", "step_to"};
		const char *vals[] = {o->from, o->to, o->step_from, o->step_to};
		for (int k = 0; k < 4; k++)
			if (vals[k])
				rdb_buf_printf(&path, "&%s=%s", keys[k], vals[k]);
		rdb_buf_putc(&path, 0);
		rc = http_do(o, "GET", (char *)path.data, &status, &body);
		if (rc == 0 && status != 200) {
			fprintf(stderr, "rankctl: export of %s: HTTP %d: %s\n", metrics[i], status,
				(char *)body.data);
			rc = 1;
		}
		if (rc == 0)
			rc = emit_range((char *)body.data, csv);
	}
	rdb_buf_free(&path);
	rdb_buf_free(&body);
	return rc ? 1 : 0;
}

/* A stored value as the JSON value the range endpoint's text of it parses
 * to (server/json_out.c writes it): integral values below 1e15 and 0 as
 * integers, other numbers as reals, null, "NaN", "+Inf"/"-Inf" and other
 * NaN payloads as strings; so offline and HTTP exports print alike. */
static json_t *value_json(uint64_t bits)
{
	double v = rdb_bits_f64(bits);
	char hex[24];
	if (bits == MDL_VALUE_NULL_BITS)
		return json_null();
	if (bits == MDL_VALUE_NAN_BITS)
		return json_string("NaN");
	if (isinf(v))
		return json_string(v > 0 ? "+Inf" : "-Inf");
	if (isnan(v)) {
		snprintf(hex, sizeof(hex), "0x%016llx", (unsigned long long)bits);
		return json_string(hex);
	}
	if (v == (double)(int64_t)v && fabs(v) < 1e15 && !(v == 0 && signbit(v)))
		return json_integer((json_int_t)v);
	return json_real(v);
}

/* The points of a range result as NDJSON or CSV rows (as emit_range). */
static void emit_points(const struct qry_points *r, bool csv)
{
	for (size_t i = 0; i < r->n; i++) {
		const struct mdl_series_key *k = &r->v[i].key;
		const struct mdl_cols *p = &r->v[i].pts;
		json_t *doc = json_object();
		json_object_set_new(doc, "rank",
				    k->rank == MDL_RANK_JOB ? json_string("job")
							    : json_integer(k->rank));
		json_object_set_new(doc, "metric", json_string(k->metric));
		json_object_set_new(doc, "job", json_string(k->job));
		json_t *ts = json_array(), *st = json_array(), *at = json_array(),
		       *va = json_array();
		for (size_t n = 0; n < p->n; n++) {
			json_array_append_new(ts, json_integer(p->ts_ns[n]));
			json_array_append_new(st, p->step[n] == MDL_STEP_NONE
						      ? json_null()
						      : json_integer(p->step[n]));
			json_array_append_new(at, json_integer(p->attempt[n]));
			json_array_append_new(va, value_json(p->value[n]));
		}
		json_object_set_new(doc, "timestamps", ts);
		json_object_set_new(doc, "steps", st);
		json_object_set_new(doc, "attempts", at);
		json_object_set_new(doc, "values", va);
		json_t *series = json_array(), *top = json_object();
		json_array_append_new(series, doc);
		json_object_set_new(top, "series", series);
		emit_series(top, csv);
		json_decref(top);
	}
}

static int export_dir(struct sto *s, const struct opts *o, char **metrics, size_t nm, bool csv)
{
	struct qry_error err;
	int rc = 0;
	struct qry_range_req r = {
	    .job = o->job, .nmetrics = 1, .max_points = 1000000000, .attempt = QRY_ATTEMPT_ALL};
	r.range.from_ns = INT64_MIN;
	r.range.to_ns = INT64_MAX;
	r.range.step_from = INT64_MIN + 1;
	r.range.step_to = INT64_MAX;
	if ((o->from && parse_i64(o->from, &r.range.from_ns)) ||
	    (o->to && parse_i64(o->to, &r.range.to_ns)) ||
	    (o->step_from && parse_i64(o->step_from, &r.range.step_from)) ||
	    (o->step_to && parse_i64(o->step_to, &r.range.step_to))) {
		fprintf(stderr, "rankctl: --from/--to/--step-from/--step-to take integers\n");
		return 2;
	}
	r.range.by_step = o->step_from || o->step_to;
	for (size_t i = 0; rc == 0 && i < nm; i++) {
		const char *m = metrics[i];
		struct qry_points pts;
		r.metrics = &m;
		rc = qry_range(s, &r, &pts, &err);
		if (rc)
			fprintf(stderr, "rankctl: export of %s: %s\n", m, err.msg);
		else
			emit_points(&pts, csv);
		qry_points_free(&pts);
	}
	return rc ? 1 : 0;
}

static int split_metrics(const char *list, char ***out, size_t *n)
{
	char *copy = strdup(list), *save = NULL;
	*n = 0;
	*out = calloc(strlen(list) / 2 + 2, sizeof(char *));
	for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t && *out;
	     t = strtok_r(NULL, ",", &save))
		(*out)[(*n)++] = strdup(t);
	free(copy);
	return *out ? 0 : -1;
}

static int cmd_export(const struct opts *o, struct sto *s)
{
	char **metrics = NULL;
	size_t nm = 0;
	int rc = 0;
	bool csv = strcmp(o->format, "csv") == 0;
	if (!o->job || (!csv && strcmp(o->format, "ndjson") != 0)) {
		fprintf(stderr, "rankctl: export needs --job J (and --format ndjson or csv)\n");
		return 2;
	}
	if (o->metric) {
		rc = split_metrics(o->metric, &metrics, &nm);
	} else {
		struct rdb_buf body, path;
		struct qry_error err;
		int status = 200;
		rdb_buf_init(&body, RESP_MAX);
		rdb_buf_init(&path, 4096);
		rdb_buf_puts(&path, "/api/v1/jobs/");
		url_escape(&path, o->job);
		rdb_buf_puts(&path, "/metrics");
		rdb_buf_putc(&path, 0);
		struct qry_metrics ml = {0};
		rc = s ? qry_job_metrics(s, o->job, &ml, &err)
		       : http_do(o, "GET", (char *)path.data, &status, &body);
		if (rc == 0 && s)
			rc = metric_names(&ml, &metrics, &nm);
		else if (rc == 0 && status == 200 && rdb_buf_putc(&body, 0) == 0)
			rc = metric_list((char *)body.data, &metrics, &nm);
		else
			fprintf(stderr, "rankctl: cannot list the metrics of job %s\n", o->job);
		qry_metrics_free(&ml);
		rc = rc || status != 200;
		rdb_buf_free(&body);
		rdb_buf_free(&path);
	}
	if (rc == 0 && csv)
		printf("job,rank,metric,ts_ns,step,attempt,value\n");
	if (rc == 0)
		rc = s ? export_dir(s, o, metrics, nm, csv) : export_url(o, metrics, nm, csv);
	for (size_t i = 0; i < nm; i++)
		free(metrics[i]);
	free(metrics);
	return rc ? 1 : 0;
}

/* ---- commands through the admin API -------------------------------------------- */

static int url_cmd(const struct opts *o)
{
	struct rdb_buf p;
	const char *c = o->pos[0], *a1 = o->npos > 1 ? o->pos[1] : NULL;
	const char *a2 = o->npos > 2 ? o->pos[2] : NULL, *method = "POST";
	int rc;
	rdb_buf_init(&p, 1 << 16);
	rdb_buf_puts(&p, "/api/v1/admin/");
	if (strcmp(c, "stats") == 0) {
		method = "GET";
		rdb_buf_puts(&p, "stats");
		if (o->job) {
			rdb_buf_puts(&p, "?job=");
			url_escape(&p, o->job);
		}
	} else if (strcmp(c, "delete") == 0 && a1) {
		rdb_buf_puts(&p, "jobs/");
		url_escape(&p, a1);
		rdb_buf_puts(&p, "/delete");
	} else if (strcmp(c, "retention") == 0 && a1 && strcmp(a1, "list") == 0) {
		method = "GET";
		rdb_buf_puts(&p, "retention");
	} else if (strcmp(c, "retention") == 0 && a1 && strcmp(a1, "run") == 0) {
		rdb_buf_puts(&p, "retention/run");
	} else if (strcmp(c, "retention") == 0 && a1 && strcmp(a1, "set") == 0 && a2 &&
		   o->npos == 4) {
		method = "PUT";
		rdb_buf_puts(&p, "retention/");
		url_escape(&p, a2);
		rdb_buf_puts(&p, "?seconds=");
		url_escape(&p, o->pos[3]);
	} else if (strcmp(c, "retention") == 0 && a1 && strcmp(a1, "clear") == 0 && a2) {
		method = "DELETE";
		rdb_buf_puts(&p, "retention/");
		url_escape(&p, a2);
	} else if (strcmp(c, "compact") == 0) {
		rdb_buf_puts(&p, "compact");
		if (o->index)
			rdb_buf_puts(&p, "?index=1");
		else if (o->min_live_pct)
			rdb_buf_printf(&p, "?min_live_pct=%s", o->min_live_pct);
	} else if (strcmp(c, "verify") == 0) {
		rdb_buf_puts(&p, o->quarantine ? "verify?quarantine=1" : "verify");
	} else if (strcmp(c, "backup") == 0 && a1) {
		rdb_buf_puts(&p, "backup?dir=");
		url_escape(&p, a1);
	} else if (strcmp(c, "checkpoint") == 0) {
		rdb_buf_puts(&p, "checkpoint");
	} else if (strcmp(c, "rules") == 0 && a1 && strcmp(a1, "reload") == 0) {
		rdb_buf_puts(&p, "rules/reload");
	} else {
		rdb_buf_free(&p);
		usage();
		return 2;
	}
	rdb_buf_putc(&p, 0);
	if (strcmp(c, "verify") == 0) {
		struct rdb_buf body;
		int status = 0;
		rdb_buf_init(&body, RESP_MAX);
		rc = http_do(o, method, (char *)p.data, &status, &body);
		if (rc == 0)
			printf("%s\n", (char *)body.data);
		rc = rc || status != 200 ? 1 : strstr((char *)body.data, "\"ok\":true") ? 0 : 3;
		rdb_buf_free(&body);
	} else {
		rc = api(o, method, (char *)p.data);
	}
	rdb_buf_free(&p);
	return rc;
}

/* ---- commands on a data directory ------------------------------------------------ */

static int print_stats(void *arg, const struct sto_job_stats *js)
{
	bool *first = arg;
	printf("%s{\"job\":\"%s\",\"series\":%llu,\"chunks\":%llu,\"points\":%llu,\"chunk_bytes\":"
	       "%llu,\"bytes_per_point\":%.3f,\"event_chunks\":%llu,\"events\":%llu,"
	       "\"retention_s\":%llu}",
	       *first ? "" : ",", js->job, (unsigned long long)js->series,
	       (unsigned long long)js->chunks, (unsigned long long)js->points,
	       (unsigned long long)js->chunk_bytes,
	       js->points ? (double)js->chunk_bytes / (double)js->points : 0.0,
	       (unsigned long long)js->event_chunks, (unsigned long long)js->events,
	       (unsigned long long)js->retention_s);
	*first = false;
	return 0;
}

static int dir_stats(struct sto *s, const struct opts *o)
{
	struct sto_disk_stats d;
	bool first = true;
	printf("{\"jobs\":[");
	int rc = sto_stats_jobs(s, o->job, print_stats, &first);
	if (rc == 0)
		rc = sto_disk_stats(s, &d);
	if (rc == 0)
		printf(
		    "],\"disk\":{\"segment_files\":%llu,\"segment_bytes\":%llu,\"live_bytes\":%llu,"
		    "\"wal_bytes\":%llu,\"index_bytes\":%llu,\"quarantined_chunks\":%llu}}\n",
		    (unsigned long long)d.segment_files, (unsigned long long)d.segment_bytes,
		    (unsigned long long)d.live_bytes, (unsigned long long)d.wal_bytes,
		    (unsigned long long)d.index_bytes, (unsigned long long)d.quarantined);
	return rc;
}

static int print_ret(void *arg, const char *job, uint64_t secs)
{
	bool *first = arg;
	printf("%s\"%s\":%llu", *first ? "" : ",", job, (unsigned long long)secs);
	*first = false;
	return 0;
}

static void print_problem(void *arg, const char *msg)
{
	(void)arg;
	printf("DAMAGED: %s\n", msg);
}

static int dir_retention(struct sto *s, const struct opts *o)
{
	const char *a1 = o->npos > 1 ? o->pos[1] : "", *a2 = o->npos > 2 ? o->pos[2] : NULL;
	bool first = true;
	int rc = 2;
	if (strcmp(a1, "list") == 0) {
		printf("{\"jobs\":{");
		rc = sto_retention_list(s, print_ret, &first);
		printf("}}\n");
	} else if (strcmp(a1, "set") == 0 && a2 && o->npos == 4) {
		char *end;
		unsigned long long v = strtoull(o->pos[3], &end, 10);
		rc = *end || o->pos[3][0] == '-' ? 2 : sto_retention_set(s, a2, v);
	} else if (strcmp(a1, "clear") == 0 && a2) {
		rc = sto_retention_clear(s, a2);
	} else if (strcmp(a1, "run") == 0) {
		struct sto_retention_result r;
		rc = sto_retention_run(s, &r);
		if (rc == 0)
			printf("{\"chunks\":%llu,\"points\":%llu,\"event_chunks\":%llu}\n",
			       (unsigned long long)r.chunks, (unsigned long long)r.points,
			       (unsigned long long)r.event_chunks);
	}
	return rc;
}

/* index-stat: page accounting of index/data.mdb, per database. */
static int dir_index_stat(struct sto *s)
{
	struct sto_index_stat st;
	int rc = sto_index_info(s, &st);
	if (rc)
		return rc;
	printf("{\"file_bytes\":%llu,\"page_bytes\":%llu,\"used_pages\":%llu,\"free_pages\":%llu,"
	       "\"dbs\":{",
	       (unsigned long long)st.file_bytes, (unsigned long long)st.page_bytes,
	       (unsigned long long)st.used_pages, (unsigned long long)st.free_pages);
	for (unsigned i = 0; i < st.ndb; i++) {
		const struct sto_index_db_stat *d = &st.db[i];
		printf("%s\"%s\":{\"entries\":%llu,\"depth\":%llu,\"branch_pages\":%llu,"
		       "\"leaf_pages\":%llu,\"overflow_pages\":%llu}",
		       i ? "," : "", d->name, (unsigned long long)d->entries,
		       (unsigned long long)d->depth, (unsigned long long)d->branch_pages,
		       (unsigned long long)d->leaf_pages, (unsigned long long)d->overflow_pages);
	}
	printf("}}\n");
	return 0;
}

static int dir_misc(struct sto *s, const struct opts *o)
{
	const char *c = o->pos[0];
	int rc = 2;
	if (strcmp(c, "delete") == 0 && o->npos == 2) {
		struct sto_delete_result r;
		rc = sto_delete_job(s, o->pos[1], &r); /* its metadata document too */
		if (rc == 0)
			printf("{\"deleted\":true,\"series\":%llu,\"chunks\":%llu,\"event_chunks\":"
			       "%llu}\n",
			       (unsigned long long)r.series, (unsigned long long)r.chunks,
			       (unsigned long long)r.event_chunks);
	} else if (strcmp(c, "compact") == 0 && o->index) {
		struct sto_index_compact_result r;
		rc = sto_compact_index(s, true, &r);
		if (rc == 0)
			printf("{\"index_bytes_before\":%llu,\"index_bytes_after\":%llu}\n",
			       (unsigned long long)r.bytes_before,
			       (unsigned long long)r.bytes_after);
	} else if (strcmp(c, "index-stat") == 0) {
		rc = dir_index_stat(s);
	} else if (strcmp(c, "compact") == 0) {
		struct sto_compact_result r;
		double live = o->min_live_pct ? atof(o->min_live_pct) / 100.0 : -1;
		rc = sto_compact(s, live, &r);
		if (rc == 0 && r.quarantined) {
			fprintf(
			    stderr,
			    "rankctl: compaction refused while the quarantine holds index "
			    "entries (%llu; compaction would delete their records); run rankctl "
			    "rebuild-index\n",
			    (unsigned long long)r.quarantined);
			rc = -ENOTEMPTY;
		} else if (rc == 0)
			printf("{\"segments\":%llu,\"chunks\":%llu,\"bytes_before\":%llu,"
			       "\"bytes_after\":%llu,\"merged_from\":%llu,\"merged_into\":%llu,"
			       "\"index_bytes_before\":%llu,\"index_bytes_after\":%llu}\n",
			       (unsigned long long)r.segments, (unsigned long long)r.chunks,
			       (unsigned long long)r.bytes_before,
			       (unsigned long long)r.bytes_after, (unsigned long long)r.merged_from,
			       (unsigned long long)r.merged_into,
			       (unsigned long long)r.index_bytes_before,
			       (unsigned long long)r.index_bytes_after);
	} else if (strcmp(c, "backup") == 0 && o->npos == 2) {
		struct sto_backup_result r;
		rc = sto_backup(s, o->pos[1], &r);
		if (rc == 0)
			printf("{\"dir\":\"%s\",\"segments\":%llu}\n", o->pos[1],
			       (unsigned long long)r.segments);
	} else if (strcmp(c, "checkpoint") == 0) {
		rc = sto_checkpoint(s);
	}
	return rc;
}

static int dir_verify(const struct opts *o, struct sto *s, struct sto_verify_report *wal)
{
	struct sto_verify_report rep;
	int rc = sto_verify(s, o->quarantine, print_problem, NULL, &rep);
	if (rc)
		return rc;
	rep.problems += wal->problems;
	printf(
	    "{\"ok\":%s,\"segments\":%llu,\"records\":%llu,\"chunks\":%llu,\"event_chunks\":%llu,"
	    "\"supersede_records\":%llu,\"wal_files\":%llu,\"damaged\":%llu,"
	    "\"quarantined\":%llu,\"wal_damaged_ranges\":%llu,\"wal_damage_kept_files\":%llu,"
	    "\"index_damaged\":%llu,\"meta_docs\":%llu,\"meta_damaged\":%llu,"
	    "\"meta_unchecked\":%llu}\n",
	    rep.problems ? "false" : "true", (unsigned long long)rep.segments,
	    (unsigned long long)rep.records, (unsigned long long)rep.chunks,
	    (unsigned long long)rep.event_chunks, (unsigned long long)rep.supersede_records,
	    (unsigned long long)wal->wal_files, (unsigned long long)rep.problems,
	    (unsigned long long)rep.quarantined, (unsigned long long)wal->wal_damaged_ranges,
	    (unsigned long long)rep.wal_kept_files, (unsigned long long)rep.index_damaged,
	    (unsigned long long)rep.meta_docs, (unsigned long long)rep.meta_damaged,
	    (unsigned long long)rep.meta_unchecked);
	return rep.problems ? 3 : 0;
}

static int dir_cmd(const struct opts *o)
{
	struct sto_options so;
	struct sto *s = NULL;
	struct sto_verify_report wal = {0};
	const char *c = o->pos[0];
	bool verify = strcmp(c, "verify") == 0;
	/* WAL checks (read-only, like the rest of verify without --quarantine). */
	if (verify && sto_verify_wal(o->data_dir, print_problem, NULL, &wal) != 0)
		wal.problems++;
	sto_options_default(&so);
	so.data_dir = o->data_dir;
	so.read_only = verify && !o->quarantine; /* verify changes nothing */
	int rc = sto_open(&so, &s);
	if (rc) {
		fprintf(stderr, "rankctl: cannot open %s: %s%s\n", o->data_dir, rdb_strerror(rc),
			rc == -EBUSY ? " (a running rankdbd holds its LOCK: stop it, or use --url)"
				     : "");
		if (verify)
			printf("DAMAGED: data directory %s cannot be opened: %s\n{\"ok\":false}\n",
			       o->data_dir, rdb_strerror(rc));
		return verify ? 3 : 1;
	}
	if (strcmp(c, "stats") == 0)
		rc = dir_stats(s, o);
	else if (strcmp(c, "export") == 0)
		rc = cmd_export(o, s);
	else if (strcmp(c, "retention") == 0)
		rc = dir_retention(s, o);
	else if (verify)
		rc = dir_verify(o, s, &wal);
	else
		rc = dir_misc(s, o);
	sto_close(s);
	if (rc == 2)
		usage();
	else if (rc && rc != 3 && rc != 1)
		fprintf(stderr, "rankctl: %s failed: %s\n", c, rdb_strerror(rc));
	return rc == 0 || rc == 2 || rc == 3 ? rc : 1;
}

/* rebuild-index: works on the directory itself, never through sto_open
 * (opening would replay the WAL into the index being replaced). */
static int dir_rebuild(const struct opts *o)
{
	struct sto_options so;
	struct sto_rebuild_result r;
	char old[PATH_MAX + 64];
	sto_options_default(&so);
	struct sto_rebuild_options ro = {
	    .data_dir = o->data_dir, .map_bytes = so.index_map_bytes, .fn = print_problem};
	int rc = sto_rebuild_index_opt(&ro, &r, old, sizeof(old));
	if (rc) {
		fprintf(stderr,
			"rankctl: rebuild-index of %s failed: %s%s; index/ was not replaced\n",
			o->data_dir, rdb_strerror(rc),
			rc == -EBUSY ? " (a running rankdbd holds its LOCK: stop it first)" : "");
		return 1;
	}
	printf("{\"rebuilt\":true,\"segments\":%llu,\"series\":%llu,\"chunks\":%llu,"
	       "\"event_chunks\":%llu,\"ckpt_gen\":%llu,\"skipped_uncheckpointed\":%llu,"
	       "\"skipped_duplicate\":%llu,\"skipped_deleted\":%llu,\"skipped_superseded\":%llu,"
	       "\"suspect_merges\":%llu,\"supersede_records\":%llu,\"damaged\":%llu,",
	       (unsigned long long)r.segments, (unsigned long long)r.series,
	       (unsigned long long)r.chunks, (unsigned long long)r.event_chunks,
	       (unsigned long long)r.ckpt_gen, (unsigned long long)r.skipped_uncheckpointed,
	       (unsigned long long)r.skipped_duplicate, (unsigned long long)r.skipped_deleted,
	       (unsigned long long)r.skipped_superseded, (unsigned long long)r.suspect_merges,
	       (unsigned long long)r.supersede_records, (unsigned long long)r.skipped_damaged);
	json_t *js = old[0] ? json_string(old) : json_null();
	char *enc = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
	printf("\"old_index\":%s", enc ? enc : "null");
	if (old[0])
		printf(
		    ",\"note\":\"the previous index is kept as old_index: remove it once rankdbd "
		    "runs fine on the rebuilt one\"");
	printf("}\n");
	free(enc);
	json_decref(js);
	return 0;
}

/* rules check FILE / rules sample: detect/rules.h, no server involved. */
static int rules_offline(const struct opts *o)
{
	if (o->npos == 2 && strcmp(o->pos[1], "sample") == 0) {
		struct rdb_buf b;
		rdb_buf_init(&b, 4u << 20);
		int rc = det_rules_sample(&b);
		if (rc == 0)
			fwrite(b.data, 1, b.len, stdout);
		rdb_buf_free(&b);
		return rc ? 1 : 0;
	}
	if (o->npos != 3 || strcmp(o->pos[1], "check") != 0) {
		usage();
		return 2;
	}
	struct det_rules *r = NULL;
	char err[1024] = "";
	int rc = det_rules_load_file(o->pos[2], &r, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "rankctl: %s\n", err[0] ? err : rdb_strerror(rc));
		return 1;
	}
	size_t jobs = 0, aliases = 0;
	det_rules_counts(r, &jobs, &aliases);
	printf("{\"file\":\"%s\",\"valid\":true,\"job_sections\":%zu,\"aliases\":%zu}\n", o->pos[2],
	       jobs, aliases);
	det_rules_free(r);
	return 0;
}

int rankctl_token(int argc, char **argv);   /* rankctl_token.c */
int rankctl_udp_key(int argc, char **argv); /* rankctl_token.c */

int main(int argc, char **argv)
{
	struct opts o = {0};
	if (argc >= 2 && strcmp(argv[1], "token") == 0) /* offline: edits a tokens file */
		return rankctl_token(argc - 2, argv + 2);
	if (argc >= 2 && strcmp(argv[1], "udp-key") == 0) /* offline: edits a UDP keys file */
		return rankctl_udp_key(argc - 2, argv + 2);
	int prc = parse_opts(argc, argv, &o);
	if (prc == 0 && o.npos >= 2 && strcmp(o.pos[0], "rules") == 0 &&
	    strcmp(o.pos[1], "reload") != 0)
		return rules_offline(&o);
	if (prc != 0 || (!o.url == !o.data_dir && strcmp(o.npos ? o.pos[0] : "", "restore") != 0)) {
		usage();
		return 2;
	}
	rdb_log_set_level(RDB_LOG_WARN);
	if (strcmp(o.pos[0], "restore") == 0) {
		if (o.npos != 3) {
			usage();
			return 2;
		}
		int rc = sto_restore(o.pos[1], o.pos[2]);
		if (rc)
			fprintf(stderr, "rankctl: restore of %s into %s failed: %s\n", o.pos[1],
				o.pos[2], rdb_strerror(rc));
		else
			printf("{\"restored\":\"%s\"}\n", o.pos[2]);
		return rc ? 1 : 0;
	}
	if (strcmp(o.pos[0], "rebuild-index") == 0) {
		if (o.url || o.npos != 1) {
			fprintf(stderr, "rankctl: rebuild-index works offline: --data-dir DIR with "
					"the server stopped\n");
			usage();
			return 2;
		}
		return dir_rebuild(&o);
	}
	if (o.url)
		return strcmp(o.pos[0], "export") == 0 ? cmd_export(&o, NULL) : url_cmd(&o);
	return dir_cmd(&o);
}
