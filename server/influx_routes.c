/* influx_routes.c - the InfluxDB 1.x read-side endpoints that clients call on
 * their own, so that the InfluxDB client libraries and Telegraf work
 * unchanged (the write side is ingest_routes.c):
 *
 *   GET/HEAD /ping      204 with X-Influxdb-Version and X-Influxdb-Build
 *   GET/POST /query     db, q, epoch (h|m|s|ms|u|us|ns); POST also reads them
 *                       from an application/x-www-form-urlencoded body
 *
 * Statements of q (';'-separated, each answered as results[i]):
 *   CREATE DATABASE <name>     accepted (a job exists once written): no-op
 *   SHOW DATABASES             the jobs, as databases
 *   SHOW MEASUREMENTS          the job's (db=) metric names up to the first
 *                              '.' or ';' (line protocol's measurement)
 *   SELECT <fn>(<field>) FROM <measurement>
 *     WHERE time >= T AND time < T [AND job = 'j'] [AND rank = 'r']
 *     GROUP BY time(<duration>) [fill(none|null)]
 *                              fn: mean, min, max, sum, count, first, last;
 *                              metric = <measurement>.<field>, or
 *                              <measurement> for field "value" (line
 *                              protocol's mapping); job = the job condition,
 *                              else db; every rank (or the one asked) merged
 *                              per bucket; buckets aligned to multiples of
 *                              the duration, only non-empty ones written
 *                              (fill(none)). T: 'RFC 3339', integer ns or
 *                              with a unit suffix (1700000000s), now(),
 *                              now() - 1h.
 * Anything else is an InfluxDB-shaped error in that statement's result
 * ({"results":[{"statement_id":i,"error":"..."}]}, status 200, as InfluxDB
 * answers statement errors); a missing q is a 400 {"error": ...}.
 *
 * The query runs through query/ (qry_downsample, qry_buckets_merge, the
 * catalog). Threading: per request, no shared state. Every buffer is
 * bounded (the statement text by max_body_bytes, the answer by the
 * response buffer).
 */
#include "server/route.h"
#include "server/srv.h"
#include "common/rdb_err.h"
#include "common/rdb_time.h"
#include "query/agg.h"
#include "query/bucket.h"
#include "query/qry.h"
#include "server/json_out.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define INFLUX_VERSION "1.8.10-rankdb"
#define Q_MAX_BYTES    65536 /* statement text */

/* ---- request ---------------------------------------------------------------- */

struct iq {
	struct srv_ctx *ctx;
	const char *db;
	char q[Q_MAX_BYTES];
	int64_t epoch_ns; /* 0: RFC 3339 times */
	char db_buf[MDL_JOB_MAX + 2];
	struct rdb_buf *out;
	int stmt;
};

static int hexval(int c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
				      : -1;
}

/* URL-decodes src[0..n) into dst (cap bytes with the NUL); false when too long. */
static bool url_decode(const char *src, size_t n, char *dst, size_t cap)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		int c = (unsigned char)src[i];
		if (c == '+') {
			c = ' ';
		} else if (c == '%' && i + 2 < n && hexval(src[i + 1]) >= 0 &&
			   hexval(src[i + 2]) >= 0) {
			c = hexval(src[i + 1]) * 16 + hexval(src[i + 2]);
			i += 2;
		}
		if (o + 1 >= cap)
			return false;
		dst[o++] = (char)c;
	}
	dst[o] = 0;
	return true;
}

static bool set_epoch(struct iq *iq, const char *v)
{
	static const struct {
		const char *name;
		int64_t ns;
	} units[] = {{"ns", 1},	      {"n", 1},		 {"u", 1000},	     {"us", 1000},
		     {"ms", 1000000}, {"s", 1000000000}, {"m", 60000000000}, {"h", 3600000000000}};
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcmp(v, units[i].name) == 0) {
			iq->epoch_ns = units[i].ns;
			return true;
		}
	return false;
}

/* One parameter (key, decoded value) from the URL or a form body. */
static const char *take_param(struct iq *iq, const char *k, const char *v)
{
	if (strcmp(k, "q") == 0) {
		if (strlen(v) >= sizeof(iq->q))
			return "the query text is too long (at most 65535 bytes)";
		memcpy(iq->q, v, strlen(v) + 1);
	} else if (strcmp(k, "db") == 0) {
		if (strlen(v) >= sizeof(iq->db_buf))
			return "db is too long";
		memcpy(iq->db_buf, v, strlen(v) + 1);
		iq->db = iq->db_buf;
	} else if (strcmp(k, "epoch") == 0 && *v && !set_epoch(iq, v)) {
		return "epoch must be one of h, m, s, ms, u, ns";
	}
	return NULL; /* u, p, rp, chunked, pretty ...: accepted, ignored */
}

static const char *read_form(struct iq *iq, const struct srv_req *req)
{
	const char *ct = srv_req_header(req, "Content-Type");
	if (!req->body_len || !ct || strncasecmp(ct, "application/x-www-form-urlencoded", 33))
		return NULL;
	const char *p = (const char *)req->body, *end = p + req->body_len;
	char *k = malloc(256), *v = malloc(Q_MAX_BYTES + 1);
	const char *why = k && v ? NULL : "out of memory";
	while (!why && p < end) {
		const char *amp = memchr(p, '&', (size_t)(end - p));
		const char *e = amp ? amp : end;
		const char *eq = memchr(p, '=', (size_t)(e - p));
		if (eq && url_decode(p, (size_t)(eq - p), k, 256)) {
			if (!url_decode(eq + 1, (size_t)(e - eq - 1), v, Q_MAX_BYTES + 1))
				why = "the query text is too long (at most 65535 bytes)";
			else
				why = take_param(iq, k, v);
		}
		p = amp ? amp + 1 : end;
	}
	free(k);
	free(v);
	return why;
}

/* ---- tokens ------------------------------------------------------------------- */

enum tk { T_END, T_WORD, T_STR, T_NUM, T_PUNCT };

struct lex {
	const char *p;
	enum tk kind;
	char text[512]; /* word (unquoted identifier), string, number, punctuation */
};

static void next(struct lex *l)
{
	while (isspace((unsigned char)*l->p))
		l->p++;
	size_t n = 0;
	char c = *l->p;
	if (!c) {
		l->kind = T_END;
		l->text[0] = 0;
		return;
	}
	if (c == '\'' || c == '"') {
		l->kind = c == '\'' ? T_STR : T_WORD;
		for (l->p++; *l->p && *l->p != c; l->p++) {
			if (*l->p == '\\' && l->p[1])
				l->p++;
			if (n + 1 < sizeof(l->text))
				l->text[n++] = *l->p;
		}
		if (*l->p)
			l->p++;
	} else if (isalpha((unsigned char)c) || c == '_') {
		l->kind = T_WORD;
		while (isalnum((unsigned char)*l->p) || *l->p == '_' || *l->p == '.' ||
		       *l->p == '-') {
			if (n + 1 < sizeof(l->text))
				l->text[n++] = *l->p;
			l->p++;
		}
	} else if (isdigit((unsigned char)c)) {
		l->kind = T_NUM;
		while (isalnum((unsigned char)*l->p) || *l->p == '.') {
			if (n + 1 < sizeof(l->text))
				l->text[n++] = *l->p;
			l->p++;
		}
	} else {
		l->kind = T_PUNCT;
		l->text[n++] = *l->p++;
		if ((c == '>' || c == '<' || c == '!') && *l->p == '=')
			l->text[n++] = *l->p++;
	}
	l->text[n] = 0;
}

static bool kw(const struct lex *l, const char *w)
{
	return l->kind == T_WORD && strcasecmp(l->text, w) == 0;
}

static bool punct(const struct lex *l, const char *s)
{
	return l->kind == T_PUNCT && strcmp(l->text, s) == 0;
}

/* ---- answers ------------------------------------------------------------------ */

static void stmt_open(struct iq *iq)
{
	if (iq->stmt)
		rdb_buf_putc(iq->out, ',');
	rdb_buf_printf(iq->out, "{\"statement_id\":%d", iq->stmt);
}

static int stmt_error(struct iq *iq, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int stmt_error(struct iq *iq, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	stmt_open(iq);
	rdb_buf_puts(iq->out, ",\"error\":");
	rdb_buf_json_str(iq->out, msg, strlen(msg));
	rdb_buf_putc(iq->out, '}');
	return 0;
}

/* One series of one column of names. */
static void names_open(struct iq *iq, const char *name)
{
	stmt_open(iq);
	rdb_buf_printf(iq->out, ",\"series\":[{\"name\":\"%s\",\"columns\":[\"name\"],\"values\":[",
		       name);
}

static int db_fn(void *arg, const char *job, uint64_t nseries)
{
	struct rdb_buf *b = arg;
	(void)nseries;
	if (b->data[b->len - 1] != '[')
		rdb_buf_putc(b, ',');
	rdb_buf_putc(b, '[');
	rdb_buf_json_str(b, job, strlen(job));
	return rdb_buf_putc(b, ']');
}

static int show_databases(struct iq *iq)
{
	names_open(iq, "databases");
	int rc = qry_list_jobs(iq->ctx->sto, db_fn, iq->out);
	rdb_buf_puts(iq->out, "]}]}");
	return rc;
}

static int show_measurements(struct iq *iq)
{
	struct qry_metrics m = {0};
	struct qry_error e;
	if (!iq->db || !*iq->db)
		return stmt_error(iq, "database name required (db=, the job)");
	if (qry_job_metrics(iq->ctx->sto, iq->db, &m, &e)) {
		if (e.code == QRY_E_NOT_FOUND) {
			stmt_open(iq); /* an empty database: no series */
			return rdb_buf_putc(iq->out, '}');
		}
		return stmt_error(iq, "%s", e.msg);
	}
	names_open(iq, "measurements");
	size_t nout = 0;
	for (size_t i = 0; i < m.n; i++) {
		size_t len = strcspn(m.v[i], ".;");
		bool dup = false;
		for (size_t j = 0; j < i && !dup; j++) /* names sorted, prefixes not */
			dup = strcspn(m.v[j], ".;") == len && strncmp(m.v[j], m.v[i], len) == 0;
		if (dup)
			continue;
		rdb_buf_puts(iq->out, nout++ ? ",[" : "[");
		rdb_buf_json_str(iq->out, m.v[i], len);
		rdb_buf_putc(iq->out, ']');
	}
	qry_metrics_free(&m);
	return rdb_buf_puts(iq->out, "]}]}");
}

/* Copies src into dst (cap bytes with the NUL), truncated. */
static void cpy(char *dst, size_t cap, const char *src)
{
	size_t n = strlen(src);
	if (n >= cap)
		n = cap - 1;
	memcpy(dst, src, n);
	dst[n] = 0;
}

/* ---- SELECT ------------------------------------------------------------------- */

struct sel {
	char fn[16], field[256], meas[256], job[MDL_JOB_MAX + 1];
	uint32_t rank;
	bool rank_set;
	int64_t from_ns, to_ns, width_ns;
};

/* A time operand: 'RFC 3339', integer [unit], now() [+|- duration]. */
static bool time_operand(struct lex *l, int64_t *ns)
{
	int64_t d;
	if (l->kind == T_STR) {
		bool ok = srv_parse_time_ns(l->text, rdb_now_ns(), ns) == 0;
		next(l);
		return ok;
	}
	if (l->kind == T_NUM) {
		char *end;
		long long v = strtoll(l->text, &end, 10);
		if (*end == 0) {
			*ns = v;
		} else if (srv_parse_duration_ns(l->text, &d) == 0) {
			*ns = d;
		} else {
			return false;
		}
		next(l);
		return true;
	}
	if (!kw(l, "now"))
		return false;
	next(l);
	if (!punct(l, "("))
		return false;
	next(l);
	if (!punct(l, ")"))
		return false;
	next(l);
	*ns = rdb_now_ns();
	if (punct(l, "-") || punct(l, "+")) {
		bool minus = l->text[0] == '-';
		next(l);
		if (l->kind != T_NUM || srv_parse_duration_ns(l->text, &d))
			return false;
		next(l);
		*ns = minus ? *ns - d : *ns + d;
	}
	return true;
}

static const char *parse_select(struct lex *l, struct sel *s, const char *db)
{
	next(l); /* SELECT */
	if (l->kind != T_WORD)
		return "expected an aggregate function such as mean(field)";
	cpy(s->fn, sizeof(s->fn), l->text);
	for (char *c = s->fn; *c; c++)
		*c = (char)tolower((unsigned char)*c);
	next(l);
	if (!punct(l, "("))
		return "only SELECT <fn>(<field>) is supported (one aggregate of one field)";
	next(l);
	if (l->kind != T_WORD)
		return "expected a field name";
	cpy(s->field, sizeof(s->field), l->text);
	next(l);
	if (!punct(l, ")"))
		return "expected ')' after the field";
	next(l);
	if (kw(l, "AS")) {
		next(l);
		next(l);
	}
	if (!kw(l, "FROM"))
		return "only one aggregate of one field is supported, then FROM";
	next(l);
	if (l->kind != T_WORD)
		return "expected a measurement after FROM";
	/* "db"."rp"."m" or m: the last part */
	cpy(s->meas, sizeof(s->meas), l->text);
	next(l);
	while (punct(l, ".")) {
		next(l);
		cpy(s->meas, sizeof(s->meas), l->text);
		next(l);
	}
	cpy(s->job, sizeof(s->job), db ? db : "");
	s->from_ns = INT64_MIN;
	s->to_ns = INT64_MAX;
	bool from_set = false, to_set = false;
	if (!kw(l, "WHERE"))
		return "a WHERE clause with time >= ... AND time < ... is required";
	do {
		next(l);
		if (kw(l, "time")) {
			next(l);
			char op[3];
			cpy(op, sizeof(op), l->text);
			if (l->kind != T_PUNCT || (op[0] != '>' && op[0] != '<'))
				return "time takes >=, >, <=, <";
			next(l);
			int64_t t;
			if (!time_operand(l, &t))
				return "a time is 'RFC 3339', an integer with a unit (ns default), "
				       "now() or now() - <duration>";
			if (op[0] == '>') {
				s->from_ns = op[1] ? t : t + 1;
				from_set = true;
			} else {
				s->to_ns = op[1] ? t : t - 1;
				to_set = true;
			}
		} else if (kw(l, "job") || kw(l, "rank")) {
			bool job = kw(l, "job");
			next(l);
			if (!punct(l, "="))
				return "job and rank take = 'value'";
			next(l);
			if (l->kind != T_STR && l->kind != T_NUM)
				return "job and rank take = 'value'";
			if (job) {
				cpy(s->job, sizeof(s->job), l->text);
			} else {
				int64_t r;
				if (srv_parse_i64(l->text, &r) || r < 0 || r > MDL_RANK_MAX)
					return "rank must be an integer >= 0";
				s->rank = (uint32_t)r;
				s->rank_set = true;
			}
			next(l);
		} else {
			return "WHERE supports only time bounds, job = '..' and rank = '..' joined "
			       "by AND";
		}
	} while (kw(l, "AND"));
	if (!from_set || !to_set)
		return "both time bounds are required (time >= ... AND time < ...)";
	if (!kw(l, "GROUP"))
		return "GROUP BY time(<duration>) is required";
	next(l);
	if (!kw(l, "BY"))
		return "GROUP BY time(<duration>) is required";
	next(l);
	if (!kw(l, "time"))
		return "only GROUP BY time(<duration>) is supported";
	next(l);
	if (!punct(l, "("))
		return "GROUP BY time(<duration>) is required";
	next(l);
	if (l->kind != T_NUM || srv_parse_duration_ns(l->text, &s->width_ns) || s->width_ns < 1)
		return "GROUP BY time() takes a duration such as 10s, 1m, 1h";
	next(l);
	if (!punct(l, ")"))
		return "expected ')' after the GROUP BY duration";
	next(l);
	if (kw(l, "fill")) {
		next(l);
		if (!punct(l, "("))
			return "fill(none) or fill(null)";
		next(l);
		if (!kw(l, "none") && !kw(l, "null"))
			return "only fill(none) and fill(null) are supported (empty buckets are "
			       "left out)";
		next(l);
		if (!punct(l, ")"))
			return "fill(none) or fill(null)";
		next(l);
	}
	if (l->kind != T_END)
		return "unexpected text after GROUP BY (LIMIT, ORDER BY, tz() are not supported)";
	if (!s->job[0])
		return "no job: give db= (the job) or WHERE job = '..'";
	return NULL;
}

static bool fn_agg(const char *fn, uint32_t *agg)
{
	static const struct {
		const char *name;
		uint32_t agg;
	} fns[] = {{"mean", QRY_AGG_AVG}, {"min", QRY_AGG_MIN},	    {"max", QRY_AGG_MAX},
		   {"sum", QRY_AGG_SUM},  {"count", QRY_AGG_COUNT}, {"first", QRY_AGG_FIRST},
		   {"last", QRY_AGG_LAST}};
	for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)
		if (strcmp(fn, fns[i].name) == 0) {
			*agg = fns[i].agg;
			return true;
		}
	return false;
}

static void write_time(struct iq *iq, int64_t ts_ns)
{
	if (iq->epoch_ns) {
		int64_t v = ts_ns / iq->epoch_ns - (ts_ns % iq->epoch_ns < 0);
		srv_json_i64(iq->out, v);
		return;
	}
	time_t secs = (time_t)(ts_ns / 1000000000 - (ts_ns % 1000000000 < 0));
	int64_t frac = ts_ns - (int64_t)secs * 1000000000;
	struct tm tm;
	char buf[64];
	gmtime_r(&secs, &tm);
	size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
	if (frac) {
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, ".%09lld", (long long)frac);
		while (buf[n - 1] == '0')
			n--;
	}
	buf[n++] = 'Z';
	rdb_buf_json_str(iq->out, buf, n);
}

static void write_agg(struct iq *iq, uint32_t agg, const struct mdl_agg *a)
{
	switch (agg) {
	case QRY_AGG_COUNT:
		srv_json_u64(iq->out, a->count);
		break;
	case QRY_AGG_FIRST:
		srv_json_value(iq->out, a->first_bits);
		break;
	case QRY_AGG_LAST:
		srv_json_value(iq->out, a->last_bits);
		break;
	case QRY_AGG_MIN:
		srv_json_f64(iq->out, a->min, a->count > 0);
		break;
	case QRY_AGG_MAX:
		srv_json_f64(iq->out, a->max, a->count > 0);
		break;
	case QRY_AGG_SUM:
		srv_json_f64(iq->out, a->sum, a->count > 0);
		break;
	default:
		srv_json_f64(iq->out, a->count ? a->sum / (double)a->count : 0, a->count > 0);
	}
}

static int run_select(struct iq *iq, struct lex *l)
{
	struct sel s = {0};
	uint32_t agg;
	const char *why = parse_select(l, &s, iq->db);
	if (why)
		return stmt_error(iq, "%s", why);
	if (!fn_agg(s.fn, &agg))
		return stmt_error(iq,
				  "unsupported function %s (mean, min, max, sum, count, first, "
				  "last)",
				  s.fn);
	char metric[600];
	if (strcmp(s.field, "value") == 0)
		cpy(metric, sizeof(metric), s.meas);
	else
		snprintf(metric, sizeof(metric), "%s.%s", s.meas, s.field);
	if (strlen(metric) > MDL_METRIC_MAX)
		return stmt_error(iq, "measurement.field is too long for a metric name");
	const char *metrics[1] = {metric};
	struct qry_ds_req rq = {.job = s.job,
				.metrics = metrics,
				.nmetrics = 1,
				.ranks = s.rank_set ? &s.rank : NULL,
				.nranks = s.rank_set,
				.aggs = agg,
				.max_points = iq->ctx->cfg->max_query_points};
	rq.spec.range.from_ns = s.from_ns;
	rq.spec.range.to_ns = s.to_ns;
	rq.spec.range.step_to = INT64_MAX;
	rq.spec.from_set = rq.spec.to_set = true;
	rq.spec.axis_set = true;
	rq.spec.axis = QRY_AXIS_TIME;
	rq.spec.width = s.width_ns;
	rq.spec.attempt = QRY_ATTEMPT_ALL;
	struct qry_ds_result r = {0};
	struct qry_error e;
	struct qry_buckets all = {0};
	int rc = qry_downsample(iq->ctx->sto, &rq, &r, &e);
	if (rc) {
		if (e.code == QRY_E_NOT_FOUND) {
			stmt_open(iq); /* no such series: an empty result, as InfluxDB */
			return rdb_buf_putc(iq->out, '}');
		}
		return stmt_error(iq, "%s", e.msg);
	}
	for (size_t i = 0; rc == 0 && i < r.n; i++)
		rc = qry_buckets_merge(&all, &r.v[i].b);
	if (rc == 0) {
		stmt_open(iq);
		if (all.n) {
			rdb_buf_puts(iq->out, ",\"series\":[{\"name\":");
			rdb_buf_json_str(iq->out, s.meas, strlen(s.meas));
			rdb_buf_printf(iq->out, ",\"columns\":[\"time\",\"%s\"],\"values\":[",
				       s.fn);
			for (size_t i = 0; i < all.n; i++) {
				rdb_buf_puts(iq->out, i ? ",[" : "[");
				write_time(iq, all.b[i].key * r.width);
				rdb_buf_putc(iq->out, ',');
				write_agg(iq, agg, &all.b[i].a);
				rdb_buf_putc(iq->out, ']');
			}
			rdb_buf_puts(iq->out, "]}]");
		}
		rdb_buf_putc(iq->out, '}');
	}
	qry_buckets_free(&all);
	qry_ds_result_free(&r);
	return rc;
}

/* Answers one statement (text up to its end). */
static int run_statement(struct iq *iq, const char *text)
{
	struct lex l = {.p = text};
	next(&l);
	if (kw(&l, "CREATE")) {
		next(&l);
		if (kw(&l, "DATABASE")) {
			next(&l);
			if (l.kind == T_WORD) {
				stmt_open(iq); /* jobs exist once written */
				return rdb_buf_putc(iq->out, '}');
			}
		}
		return stmt_error(iq, "only CREATE DATABASE <name> is supported (a no-op: a job "
				      "exists once written)");
	}
	if (kw(&l, "SHOW")) {
		next(&l);
		if (kw(&l, "DATABASES"))
			return show_databases(iq);
		if (kw(&l, "MEASUREMENTS"))
			return show_measurements(iq);
		return stmt_error(iq, "only SHOW DATABASES and SHOW MEASUREMENTS are supported");
	}
	if (kw(&l, "SELECT"))
		return run_select(iq, &l);
	return stmt_error(iq,
			  "not supported by rankdb: rankdb answers CREATE DATABASE, SHOW "
			  "DATABASES, SHOW MEASUREMENTS and SELECT <fn>(<field>) FROM <m> WHERE "
			  "time >= .. AND time < .. GROUP BY time(..) (docs/API.md)");
}

static void h_query(struct srv_req *req, struct srv_resp *resp, const struct srv_route *r)
{
	(void)r;
	struct iq *iq = calloc(1, sizeof(*iq));
	const char *why = iq ? NULL : "out of memory";
	for (int i = 0; !why && i < req->nargs; i++)
		why = take_param(iq, req->args[i].key, req->args[i].val);
	if (!why && strcmp(req->method, "POST") == 0)
		why = read_form(iq, req);
	if (!why && !iq->q[0])
		why = "missing required parameter \"q\"";
	if (why) {
		srv_error(resp, 400, "%s", why);
		free(iq);
		return;
	}
	iq->ctx = req->ctx;
	iq->out = &resp->body;
	resp->body.len = 0;
	rdb_buf_puts(&resp->body, "{\"results\":[");
	int rc = 0;
	char *p = iq->q;
	while (rc == 0 && *p) {
		/* split at ';' outside quotes */
		char *e = p, quote = 0;
		for (; *e && (quote || *e != ';'); e++)
			if (*e == '\'' || *e == '"')
				quote = quote == *e ? 0 : quote ? quote : *e;
		bool more = *e == ';';
		*e = 0;
		const char *t = p;
		while (isspace((unsigned char)*t))
			t++;
		if (*t) {
			rc = run_statement(iq, t);
			iq->stmt++;
		}
		p = more ? e + 1 : e;
	}
	rdb_buf_puts(&resp->body, "]}");
	if (rc) {
		resp->body.len = 0;
		srv_error(resp, rc == RDB_ELIMIT ? 413 : 500, "query failed: %s", rdb_strerror(rc));
	} else {
		resp->status = 200;
	}
	srv_resp_header(resp, "X-Influxdb-Version", INFLUX_VERSION);
	free(iq);
}

static void h_ping(struct srv_req *req, struct srv_resp *resp, const struct srv_route *r)
{
	(void)req;
	(void)r;
	resp->status = 204;
	resp->body.len = 0;
	srv_resp_header(resp, "X-Influxdb-Version", INFLUX_VERSION);
	srv_resp_header(resp, "X-Influxdb-Build", "OSS");
}

static const struct srv_route rows[] = {
    {SRV_READ_METHODS, "/ping", SRV_SCOPE_PUBLIC, h_ping, 0, 0, NULL, NULL, NULL},
    {SRV_READ_METHODS | SRV_POST, "/query", SRV_SCOPE_READ, h_query, 0, SRV_ROUTE_QUERY, NULL, NULL,
     NULL},
};
const struct srv_route_table srv_influx_routes = {rows, sizeof(rows) / sizeof(rows[0])};
