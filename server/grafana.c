/* grafana.c - the Grafana JSON datasource under /grafana: the HTTP protocol of
 * simpod-json-datasource 0.6.x (and the older grafana-simple-json-datasource),
 * as specified in grafana-json.md; docs/API-grafana.md is the user's view.
 *
 *   GET  /grafana, /grafana/          health check: 200 (never a redirect)
 *   POST /grafana/metrics             metric names with builder payloads
 *   POST /grafana/metric-payload-options   options of the job/rank/agg/level payloads
 *   POST /grafana/query               timeseries, tables, annotations, logs
 *   POST /grafana/variable            [{"__text","__value"}] for jobs/ranks/metrics
 *   POST /grafana/tag-keys, /tag-values    ad hoc filter keys and values
 *   POST /grafana/search, /annotations     legacy (plugin < 0.6, SimpleJSON)
 *
 * Mapping: a target names a metric (exact name first, else an anchored POSIX
 * extended regex, which is what Grafana's regex-escaped and multi-value
 * "(a|b)" interpolation produces). It selects one series per (job, rank,
 * metric), narrowed by the target's payload (job, rank) and the request's ad
 * hoc filters (keys job, rank, metric; for logs also level and log fields).
 * Each series is cut into time buckets of
 *   width = max(intervalMs, ceil((to - from) / maxDataPoints))
 * (widened when epoch alignment would give one bucket too many) by the bucket
 * engine (query/agg.h), and each bucket gives one point per aggregate (avg by
 * default; payload agg picks others, crossrank-* adds one series per (job,
 * metric) aggregated across ranks). Targets "logs" and "annotations" (and
 * every target of refId "Anno") read log records instead.
 *
 * Output is JSON written into the bounded response buffer: times are integer
 * ms, values non-finite -> null, tag values strings, refId echoed when sent.
 * Bounds: GF_MAX_SERIES frames per request, GF_MAX_READ series per target,
 * max_query_points points read per target, max_response_bytes of response.
 * Past any of them, and for every client mistake, the answer is 4xx
 * {"message":..,"error":..} saying what to narrow; 5xx only for server faults
 * (corrupt data, out of memory). jansson parses the request bodies (this is
 * its only includer in server/). Threading: per request, no shared state.
 */
#include "server/srv.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "common/rdb_time.h"
#include "query/agg.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GF_MAX_SERIES 1000u      /* frames written by one /query */
#define GF_MAX_READ 20000u       /* series one target may read */
#define GF_MAX_NAMES 100000u     /* distinct names one listing may collect */
#define GF_MAX_JOB_OPTIONS 20000u /* /metrics: inline job options up to jobs x metrics */
#define GF_DEFAULT_MAXDP 1000
#define GF_MAX_MAXDP 100000
#define GF_EVENTS_DEFAULT 1000
#define GF_EVENTS_MAX 10000
#define GF_EVENTS_SCAN 100000u   /* matching log records read per job */
#define GF_MS_MAX (INT64_MAX / 1000000 - 1) /* ms whose ns still fit an int64 */
#define BIT(x) (1u << (x))

/* ---- request state and errors ------------------------------------------------ */

struct gf {
	struct sto *sto;
	size_t max_points;   /* max_query_points: points read per target */
	size_t max_bytes;    /* max_response_bytes */
	json_t *body;        /* the request body: an object */
	struct rdb_buf *out; /* the response body */
	size_t nelem;        /* elements in the top-level array */
	size_t nframes;      /* series/tables/frames written (/query) */
	int status;          /* 0 while fine, else the status of the first error */
	char msg[1400];
};

static int fail(struct gf *g, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Records the first error; returns RDB_EINVAL so callers can return it. */
static int fail(struct gf *g, int status, const char *fmt, ...)
{
	va_list ap;
	if (g->status)
		return RDB_EINVAL;
	va_start(ap, fmt);
	vsnprintf(g->msg, sizeof(g->msg), fmt, ap);
	va_end(ap);
	g->status = status;
	return RDB_EINVAL;
}

/* Gives rc (a failed response write or allocation) a message if none yet. */
static int chk(struct gf *g, int rc)
{
	if (rc == 0 || g->status)
		return rc;
	if (rc == RDB_ELIMIT)
		return fail(g, 400, "the response would exceed max_response_bytes (%zu bytes): "
			    "lower maxDataPoints, narrow the time range, or select fewer series "
			    "(payload job and rank, ad hoc filters, a crossrank-* agg)",
			    g->max_bytes);
	return fail(g, 500, "grafana: %s", rdb_strerror(rc));
}

static int elem_begin(struct gf *g)
{
	return g->nelem++ ? rdb_buf_putc(g->out, ',') : 0;
}

static int put_str(struct rdb_buf *b, const char *s)
{
	return rdb_buf_json_str(b, s, strlen(s));
}

/* A finite value as a JSON number, anything else as null. */
static int put_num(struct rdb_buf *b, double v, bool defined)
{
	if (!defined || !isfinite(v))
		return rdb_buf_puts(b, "null");
	return qry_json_value(b, rdb_f64_bits(v));
}

static int64_t floor_div(int64_t x, int64_t w)
{
	int64_t q = x / w;
	return (x % w != 0 && x < 0) ? q - 1 : q;
}

static void rank_text(uint32_t rank, char buf[16])
{
	if (rank == STO_RANK_JOB)
		snprintf(buf, 16, "job");
	else
		snprintf(buf, 16, "%u", rank);
}

static const char *jstr(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

/* ---- name lists --------------------------------------------------------------- */

struct names {
	char **v; /* owned strings */
	size_t n, cap;
};

static bool all_digits(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return false;
	return true;
}

/* Numbers (ranks) in numeric order, before words; words by strcmp. */
static int cmp_name(const void *a, const void *b)
{
	const char *x = *(char *const *)a, *y = *(char *const *)b;
	bool dx = all_digits(x), dy = all_digits(y);
	if (dx != dy)
		return dx ? -1 : 1;
	if (dx && strlen(x) != strlen(y))
		return strlen(x) < strlen(y) ? -1 : 1;
	return strcmp(x, y);
}

static void names_uniq(struct names *ns)
{
	size_t w = 0;
	if (ns->n > 1)
		qsort(ns->v, ns->n, sizeof(*ns->v), cmp_name);
	for (size_t i = 0; i < ns->n; i++) {
		if (w && strcmp(ns->v[w - 1], ns->v[i]) == 0)
			free(ns->v[i]);
		else
			ns->v[w++] = ns->v[i];
	}
	ns->n = w;
}

/* Appends a copy; duplicates are dropped whenever the array fills, so memory
 * follows the distinct names. RDB_ELIMIT past GF_MAX_NAMES distinct names. */
static int names_add(struct names *ns, const char *s, size_t len)
{
	if (ns->n == ns->cap) {
		names_uniq(ns);
		if (ns->n >= GF_MAX_NAMES)
			return RDB_ELIMIT;
		if (ns->n >= ns->cap / 2) {
			size_t cap = ns->cap ? ns->cap * 2 : 64;
			char **v = realloc(ns->v, cap * sizeof(*v));
			if (!v)
				return -ENOMEM;
			ns->v = v;
			ns->cap = cap;
		}
	}
	char *c = strndup(s, len);
	if (!c)
		return -ENOMEM;
	ns->v[ns->n++] = c;
	return 0;
}

static bool names_has(const struct names *ns, const char *s)
{
	for (size_t i = 0; i < ns->n; i++)
		if (strcmp(ns->v[i], s) == 0)
			return true;
	return false;
}

static void names_free(struct names *ns)
{
	for (size_t i = 0; i < ns->n; i++)
		free(ns->v[i]);
	free(ns->v);
	memset(ns, 0, sizeof(*ns));
}

/* ---- value sets (payload values, multi-value variables) ----------------------- */

/* What a payload key allows: a JSON array, a comma list, a regex group
 * "(a|b)" or a glob group "{a,b}" of values, regex escapes removed. */
struct gf_set {
	bool given; /* a constraint was sent */
	bool all;   /* a wildcard was among the values: no constraint */
	struct names v;
};

static bool wildcard(const char *s)
{
	return !strcmp(s, "*") || !strcmp(s, "All") || !strcmp(s, "all") ||
	       !strcmp(s, "$__all") || !strcmp(s, ".*") || !strcmp(s, ".+");
}

static int set_piece(struct gf_set *s, const char *p, size_t n)
{
	while (n && (*p == ' ' || *p == '\t'))
		p++, n--;
	while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
		n--;
	char *u = malloc(n + 1);
	size_t k = 0;
	if (!u)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '\\' && i + 1 < n)
			i++;
		u[k++] = p[i];
	}
	u[k] = 0;
	int rc = 0;
	if (k && wildcard(u))
		s->all = true;
	else if (k)
		rc = names_add(&s->v, u, k);
	s->given = s->given || k;
	free(u);
	return rc;
}

static int set_text(struct gf_set *s, const char *t)
{
	size_t n = strlen(t);
	char sep = ',';
	while (n && *t == ' ')
		t++, n--;
	while (n && t[n - 1] == ' ')
		n--;
	if (n >= 2 && ((t[0] == '(' && t[n - 1] == ')') || (t[0] == '{' && t[n - 1] == '}'))) {
		sep = t[0] == '(' ? '|' : ',';
		t++;
		n -= 2;
	}
	int rc = 0;
	for (size_t i = 0, start = 0; rc == 0 && i <= n; i++) {
		if (i < n && (t[i] != sep || (i && t[i - 1] == '\\')))
			continue;
		rc = set_piece(s, t + start, i - start);
		start = i + 1;
	}
	return rc;
}

static int set_json(struct gf_set *s, const json_t *v, bool nested)
{
	char num[40];
	if (json_is_string(v))
		return set_text(s, json_string_value(v));
	if (json_is_integer(v)) {
		snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(v));
		return set_piece(s, num, strlen(num));
	}
	if (json_is_real(v)) {
		double d = json_real_value(v);
		if (d == floor(d) && fabs(d) < 1e15)
			snprintf(num, sizeof(num), "%lld", (long long)d);
		else
			snprintf(num, sizeof(num), "%.17g", d);
		return set_piece(s, num, strlen(num));
	}
	int rc = 0;
	size_t i;
	json_t *e;
	if (json_is_array(v) && !nested)
		json_array_foreach(v, i, e)
			if (rc == 0)
				rc = set_json(s, e, true);
	return rc;
}

static bool set_has(const struct gf_set *s, const char *x)
{
	return !s->given || s->all || names_has(&s->v, x);
}

static bool set_constrains(const struct gf_set *s)
{
	return s->given && !s->all;
}

static void set_free(struct gf_set *s)
{
	names_free(&s->v);
}

/* ---- ad hoc filters ----------------------------------------------------------- */

enum op { OP_EQ, OP_NE, OP_RE, OP_NRE, OP_LT, OP_GT, OP_LE, OP_GE, OP_IN, OP_NIN, OP_N };
static const char *const op_names[OP_N] = {"=", "!=", "=~", "!~", "<", ">", "<=", ">=",
					   "=|", "!=|"};

struct gf_filter {
	const char *key;  /* borrowed from the body */
	const char *val;  /* borrowed, or num */
	char num[40];
	enum op op;
	regex_t re;
	bool has_re;
	struct gf_set set; /* OP_IN, OP_NIN */
};

struct gf_filters {
	struct gf_filter *v;
	size_t n;
};

/* Compiles "^(src)$" into re. 0, or a regerror text in why. */
static int anchored_regex(regex_t *re, const char *src, char *why, size_t whylen)
{
	size_t n = strlen(src);
	char *pat = malloc(n + 5);
	if (!pat)
		return -ENOMEM;
	snprintf(pat, n + 5, "^(%s)$", src);
	int rc = regcomp(re, pat, REG_EXTENDED | REG_NOSUB);
	free(pat);
	if (rc)
		regerror(rc, re, why, whylen);
	return rc ? RDB_EINVAL : 0;
}

static int filter_value(struct gf *g, const json_t *o, struct gf_filter *f)
{
	const json_t *v = json_object_get(o, "value");
	char why[200];
	if (json_is_string(v))
		f->val = json_string_value(v);
	else if (json_is_number(v))
		snprintf(f->num, sizeof(f->num), "%.17g", json_number_value(v));
	else
		f->val = "";
	if (!f->val)
		f->val = f->num;
	if (f->op == OP_IN || f->op == OP_NIN) {
		const json_t *vs = json_object_get(o, "values");
		return set_json(&f->set, vs ? vs : v, false);
	}
	if (f->op != OP_RE && f->op != OP_NRE)
		return 0;
	int rc = anchored_regex(&f->re, f->val, why, sizeof(why));
	f->has_re = rc == 0;
	if (rc == RDB_EINVAL)
		return fail(g, 400, "ad hoc filter %s %s '%.200s': not a valid regex: %s", f->key,
			    op_names[f->op], f->val, why);
	return rc;
}

static int filter_parse(struct gf *g, const json_t *o, struct gf_filter *f)
{
	const char *op = jstr(o, "operator");
	f->key = jstr(o, "key");
	if (!json_is_object(o) || !f->key)
		return fail(g, 400, "an ad hoc filter must be an object {\"key\",\"operator\","
			    "\"value\"} with a string key");
	if (!op)
		op = "=";
	int k = 0;
	while (k < OP_N && strcmp(op_names[k], op))
		k++;
	if (k == OP_N)
		return fail(g, 400, "ad hoc filter on '%.100s': unknown operator '%.20s' "
			    "(known: =, !=, =~, !~, <, >, <=, >=, =|, !=|)", f->key, op);
	f->op = (enum op)k;
	return filter_value(g, o, f);
}

static void filters_free(struct gf_filters *fs)
{
	for (size_t i = 0; i < fs->n; i++) {
		if (fs->v[i].has_re)
			regfree(&fs->v[i].re);
		set_free(&fs->v[i].set);
	}
	free(fs->v);
	memset(fs, 0, sizeof(*fs));
}

/* The request's "filters" (Grafana >= 10) and "adhocFilters" (plugin <= 0.6.3). */
static int filters_parse(struct gf *g, struct gf_filters *fs)
{
	static const char *const keys[] = {"filters", "adhocFilters"};
	size_t n = 0, i;
	json_t *e;
	for (int k = 0; k < 2; k++)
		n += json_array_size(json_object_get(g->body, keys[k]));
	memset(fs, 0, sizeof(*fs));
	if (n == 0)
		return 0;
	fs->v = calloc(n, sizeof(*fs->v));
	if (!fs->v)
		return chk(g, -ENOMEM);
	int rc = 0;
	for (int k = 0; k < 2 && rc == 0; k++)
		json_array_foreach(json_object_get(g->body, keys[k]), i, e)
			if (rc == 0)
				rc = filter_parse(g, e, &fs->v[fs->n++]);
	return chk(g, rc);
}

static int level_num(const char *s)
{
	uint8_t l;
	return sto_level_parse(s, strlen(s), &l) ? -1 : l;
}

/* Levels by severity, numbers numerically, the rest as strings. */
static int cmp_vals(const char *key, const char *a, const char *b)
{
	char *ea, *eb;
	if (strcmp(key, "level") == 0 && level_num(a) >= 0 && level_num(b) >= 0)
		return level_num(a) - level_num(b);
	double x = strtod(a, &ea), y = strtod(b, &eb);
	if (*a && *b && !*ea && !*eb)
		return (x > y) - (x < y);
	return strcmp(a, b);
}

static bool filter_match(const struct gf_filter *f, const char *val)
{
	switch (f->op) {
	case OP_EQ: return strcmp(val, f->val) == 0;
	case OP_NE: return strcmp(val, f->val) != 0;
	case OP_RE: return f->has_re && regexec(&f->re, val, 0, NULL, 0) == 0;
	case OP_NRE: return f->has_re && regexec(&f->re, val, 0, NULL, 0) != 0;
	case OP_LT: return cmp_vals(f->key, val, f->val) < 0;
	case OP_GT: return cmp_vals(f->key, val, f->val) > 0;
	case OP_LE: return cmp_vals(f->key, val, f->val) <= 0;
	case OP_GE: return cmp_vals(f->key, val, f->val) >= 0;
	case OP_IN: return set_has(&f->set, val);
	case OP_NIN: return !set_has(&f->set, val) || !f->set.given;
	default: return true;
	}
}

/* True when every filter on key holds for val (filters on other keys are
 * not consulted). */
static bool filters_ok(const struct gf_filters *fs, const char *key, const char *val)
{
	for (size_t i = 0; fs && i < fs->n; i++)
		if (strcmp(fs->v[i].key, key) == 0 && !filter_match(&fs->v[i], val))
			return false;
	return true;
}

/* ---- catalog listings ----------------------------------------------------------- */

enum kind { K_JOBS, K_RANKS, K_METRICS, K_LEVELS, K_AGGS };

enum agg {
	AG_AVG, AG_RAW, AG_MIN, AG_MAX, AG_FIRST, AG_LAST, AG_SUM, AG_COUNT, AG_P50, AG_P90,
	AG_P99, AG_XMEAN, AG_XMIN, AG_XMAX, AG_XMEDIAN, AG_N
};
static const char *const agg_names[AG_N] = {
	"avg", "raw", "min", "max", "first", "last", "sum", "count", "p50", "p90", "p99",
	"crossrank-mean", "crossrank-min", "crossrank-max", "crossrank-median"};
#define XR_MASK (BIT(AG_XMEAN) | BIT(AG_XMIN) | BIT(AG_XMAX) | BIT(AG_XMEDIAN))
#define Q_MASK (BIT(AG_P50) | BIT(AG_P90) | BIT(AG_P99))

struct list_ctx {
	struct names *out;
	enum kind kind;
	const char *metric;          /* NULL: every metric */
	const struct gf_filters *fs;
	bool found;                  /* the job has the metric */
};

static int job_cb(void *arg, const char *job, uint64_t nseries)
{
	struct list_ctx *c = arg;
	(void)nseries;
	if (!filters_ok(c->fs, "job", job))
		return 0;
	return names_add(c->out, job, strlen(job));
}

static int series_cb(void *arg, const struct sto_series_key *k, uint64_t id)
{
	struct list_ctx *c = arg;
	char rank[16];
	(void)id;
	if (c->metric && strcmp(c->metric, k->metric))
		return 0;
	c->found = true;
	if (c->kind == K_JOBS)
		return 1; /* enough: stop the scan */
	rank_text(k->rank, rank);
	if (c->kind == K_RANKS)
		return filters_ok(c->fs, "rank", rank) ? names_add(c->out, rank, strlen(rank)) : 0;
	return filters_ok(c->fs, "metric", k->metric) ?
		       names_add(c->out, k->metric, strlen(k->metric)) : 0;
}

static int list_fail(struct gf *g, int rc)
{
	if (rc == RDB_ELIMIT)
		return fail(g, 400, "more than %u distinct names: select a job", GF_MAX_NAMES);
	return rc == RDB_EINVAL ? rc : fail(g, 500, "listing the catalog: %s", rdb_strerror(rc));
}

/* The jobs of the set (all when not constrained) that pass the job filters. */
static int list_jobs(struct gf *g, const struct gf_set *want, const struct gf_filters *fs,
		     struct names *out)
{
	struct names all = {0};
	struct list_ctx c = {.out = &all, .fs = fs};
	int rc = sto_list_jobs(g->sto, job_cb, &c);
	for (size_t i = 0; rc == 0 && i < all.n; i++)
		if (!want || set_has(want, all.v[i]))
			rc = names_add(out, all.v[i], strlen(all.v[i]));
	names_free(&all);
	return rc ? list_fail(g, rc) : 0;
}

/* Distinct values of a kind over the selected jobs, sorted. */
static int list_values(struct gf *g, enum kind kind, const struct gf_set *jobs,
		       const char *metric, const struct gf_filters *fs, struct names *out)
{
	static const char *const levels[] = {"debug", "info", "warn", "error", "fatal"};
	struct names js = {0};
	int rc = 0;
	for (size_t i = 0; kind == K_LEVELS && rc == 0 && i < 5; i++)
		rc = names_add(out, levels[i], strlen(levels[i]));
	for (size_t i = 0; kind == K_AGGS && rc == 0 && i < AG_N; i++)
		rc = names_add(out, agg_names[i], strlen(agg_names[i]));
	if (kind == K_LEVELS || kind == K_AGGS)
		return chk(g, rc);
	rc = list_jobs(g, jobs, fs, &js);
	if (rc == 0 && kind == K_JOBS && !metric) {
		*out = js;
		return 0;
	}
	for (size_t i = 0; rc == 0 && i < js.n; i++) {
		struct list_ctx c = {.out = out, .kind = kind, .metric = metric, .fs = fs};
		rc = sto_list_series(g->sto, js.v[i], series_cb, &c);
		if (rc == 1)
			rc = 0;
		if (rc == 0 && kind == K_JOBS && c.found)
			rc = names_add(out, js.v[i], strlen(js.v[i]));
	}
	if (rc == 0)
		names_uniq(out);
	names_free(&js);
	return rc ? list_fail(g, rc) : 0;
}

enum style { ST_STRING, ST_TEXT, ST_VARIABLE, ST_OPTION };

/* Writes the values as a JSON array in one of the shapes the endpoints use. */
static int write_values(struct gf *g, const struct names *ns, enum kind kind, enum style st)
{
	static const char *const fmt[] = {"", "{\"text\":", "{\"__text\":", "{\"label\":"};
	char label[64];
	int rc = rdb_buf_putc(g->out, '[');
	for (size_t i = 0; rc == 0 && i < ns->n; i++) {
		const char *v = ns->v[i], *l = v;
		if (kind == K_RANKS) {
			snprintf(label, sizeof(label), strcmp(v, "job") ? "rank %s" : "job level",
				 v);
			l = label;
		}
		rc = rdb_buf_puts(g->out, i ? "," : "");
		if (rc == 0)
			rc = rdb_buf_puts(g->out, fmt[st]);
		if (rc == 0)
			rc = put_str(g->out, st == ST_TEXT || st == ST_STRING ? v : l);
		if (rc == 0 && (st == ST_VARIABLE || st == ST_OPTION))
			rc = rdb_buf_puts(g->out, st == ST_VARIABLE ? ",\"__value\":" :
								      ",\"value\":");
		if (rc == 0 && (st == ST_VARIABLE || st == ST_OPTION))
			rc = put_str(g->out, v);
		if (rc == 0 && st != ST_STRING)
			rc = rdb_buf_putc(g->out, '}');
	}
	return chk(g, rc ? rc : rdb_buf_putc(g->out, ']'));
}

/* ---- time range --------------------------------------------------------------- */

static bool digits(const char **p, int n, int *out)
{
	int v = 0;
	for (int i = 0; i < n; i++) {
		char c = (*p)[i];
		if (c < '0' || c > '9')
			return false;
		v = v * 10 + (c - '0');
	}
	*p += n;
	*out = v;
	return true;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian; H. Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

/* hh:mm[:ss[.frac]] into ms of the day. */
static bool parse_clock(const char **p, int64_t *ms)
{
	int h, mi, s = 0, frac = 0, scale = 1000;
	if (!digits(p, 2, &h) || *(*p)++ != ':' || !digits(p, 2, &mi) || h > 23 || mi > 59)
		return false;
	if (**p == ':' && (++*p, !digits(p, 2, &s) || s > 60))
		return false;
	if (**p == '.' || **p == ',') {
		++*p;
		if (**p < '0' || **p > '9')
			return false;
		for (; **p >= '0' && **p <= '9'; ++*p)
			if (scale > 1) {
				scale /= 10;
				frac += (**p - '0') * scale;
			}
	}
	*ms = ((int64_t)h * 3600 + mi * 60 + s) * 1000 + frac;
	return true;
}

/* Z, +hh:mm, +hhmm, +hh, or nothing (UTC), into the offset in ms. */
static bool parse_zone(const char *p, int64_t *off_ms)
{
	int h = 0, m = 0;
	*off_ms = 0;
	if (*p == 0 || ((*p == 'Z' || *p == 'z') && p[1] == 0))
		return true;
	if (*p != '+' && *p != '-')
		return false;
	int sign = *p++ == '-' ? -1 : 1;
	if (!digits(&p, 2, &h))
		return false;
	if (*p == ':')
		p++;
	if (*p && !digits(&p, 2, &m))
		return false;
	*off_ms = sign * ((int64_t)h * 60 + m) * 60000;
	return *p == 0 && h < 24 && m < 60;
}

/* ISO-8601 (moment.toISOString and friends) or an integer of ms since the
 * epoch, clamped to what ns can hold. */
static bool parse_iso_ms(const char *s, int64_t *ms)
{
	int y, mo, d;
	int64_t tod = 0, off;
	char *end;
	const char *p = s;
	long long n = strtoll(s, &end, 10);
	if (end != s && *end == 0) {
		*ms = n;
	} else {
		if (!digits(&p, 4, &y) || *p++ != '-' || !digits(&p, 2, &mo) || *p++ != '-' ||
		    !digits(&p, 2, &d) || mo < 1 || mo > 12 || d < 1 || d > 31)
			return false;
		if ((*p == 'T' || *p == 't' || *p == ' ') && (++p, !parse_clock(&p, &tod)))
			return false;
		if (!parse_zone(p, &off))
			return false;
		*ms = days_from_civil(y, mo, d) * 86400000 + tod - off;
	}
	*ms = *ms > GF_MS_MAX ? GF_MS_MAX : *ms < -GF_MS_MAX ? -GF_MS_MAX : *ms;
	return true;
}

static int parse_time(struct gf *g, const json_t *v, const char *what, int64_t *ms)
{
	if (json_is_number(v)) {
		double d = json_number_value(v);
		*ms = d > (double)GF_MS_MAX ? GF_MS_MAX : d < (double)-GF_MS_MAX ? -GF_MS_MAX :
										       (int64_t)d;
		return 0;
	}
	if (json_is_string(v) && parse_iso_ms(json_string_value(v), ms))
		return 0;
	return fail(g, 400, "range.%s must be an ISO-8601 time such as "
		    "\"2024-10-18T06:33:44.866Z\" or ms since the epoch", what);
}

/* "500ms", "30s", "5m", "1h", "1d", "1w" -> ms; 0 if unreadable. */
static int64_t duration_ms(const char *s)
{
	static const struct {
		const char *unit;
		int64_t ms;
	} units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000},
		     {"w", 604800000}, {"y", 31536000000}};
	char *end;
	double v = s ? strtod(s, &end) : 0;
	if (!s || end == s || !(v > 0) || v > 1e12)
		return 0;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcmp(end, units[i].unit) == 0)
			return (int64_t)ceil(v * (double)units[i].ms);
	return 0;
}

struct gf_range {
	int64_t from_ms, to_ms; /* inclusive */
	int64_t width_ms;       /* bucket width */
	int64_t max_points;     /* per series: max(maxDataPoints, (to - from) / intervalMs) */
};

static int64_t nbuckets(const struct gf_range *r, int64_t w)
{
	return floor_div(r->to_ms, w) - floor_div(r->from_ms, w) + 1;
}

/* width = max(intervalMs, ceil(span / maxDataPoints)); buckets are aligned to
 * multiples of the width, so when [from, to] would touch one bucket more than
 * max_points, the width grows to ceil(span / (max_points - 1)). */
static void choose_width(struct gf_range *r, int64_t maxdp, int64_t interval_ms)
{
	int64_t span = r->to_ms - r->from_ms;
	int64_t w = span / maxdp + (span % maxdp != 0);
	if (interval_ms > w)
		w = interval_ms;
	if (w < 1)
		w = 1;
	r->max_points = maxdp;
	if (interval_ms > 0 && span / interval_ms > maxdp)
		r->max_points = span / interval_ms;
	if (nbuckets(r, w) > r->max_points && r->max_points >= 2) {
		int64_t w2 = span / (r->max_points - 1) + (span % (r->max_points - 1) != 0);
		w = w2 > w ? w2 : w;
	}
	r->width_ms = w > GF_MS_MAX ? GF_MS_MAX : w;
}

static int parse_range(struct gf *g, const json_t *body, struct gf_range *r)
{
	const json_t *range = json_object_get(body, "range");
	const json_t *mdp = json_object_get(body, "maxDataPoints");
	const json_t *ims = json_object_get(body, "intervalMs");
	if (!json_is_object(range))
		return fail(g, 400, "range is required: {\"from\":ISO-8601,\"to\":ISO-8601} "
			    "(Grafana sends it with every request)");
	int rc = parse_time(g, json_object_get(range, "from"), "from", &r->from_ms);
	if (rc == 0)
		rc = parse_time(g, json_object_get(range, "to"), "to", &r->to_ms);
	if (rc)
		return rc;
	if (r->from_ms > r->to_ms)
		return fail(g, 400, "range.from is after range.to");
	int64_t maxdp = GF_DEFAULT_MAXDP, interval = 0;
	if (json_is_number(mdp) && json_number_value(mdp) >= 1)
		maxdp = json_number_value(mdp) > GF_MAX_MAXDP ? GF_MAX_MAXDP :
								(int64_t)json_number_value(mdp);
	if (json_is_number(ims) && json_number_value(ims) > 0 && json_number_value(ims) < 1e15)
		interval = (int64_t)ceil(json_number_value(ims));
	else
		interval = duration_ms(jstr(body, "interval"));
	choose_width(r, maxdp, interval);
	return 0;
}

/* ---- targets -------------------------------------------------------------------- */

struct tgt {
	const char *ref_id;  /* NULL: the target had none (never invent one) */
	const char *name;    /* the target text, "" if none */
	bool table, hide;
	json_t *payload;     /* an object, or NULL */
	json_t *owned;       /* payload parsed from a string */
	struct gf_set jobs, ranks, levels;
	uint32_t aggs;       /* BIT(enum agg) */
	int64_t limit;       /* log records */
};

static void tgt_free(struct tgt *t)
{
	set_free(&t->jobs);
	set_free(&t->ranks);
	set_free(&t->levels);
	json_decref(t->owned);
}

/* The payload as an object: JSON of any type is tolerated, a string holding
 * a JSON object is parsed, anything else constrains nothing. */
static json_t *payload_object(json_t *p, json_t **owned)
{
	*owned = NULL;
	if (json_is_string(p))
		*owned = p = json_loads(json_string_value(p), 0, NULL);
	return json_is_object(p) ? p : NULL;
}

static const json_t *pget(const struct tgt *t, const char *a, const char *b)
{
	const json_t *v = json_object_get(t->payload, a);
	return v ? v : json_object_get(t->payload, b);
}

static int tgt_aggs(struct gf *g, struct tgt *t)
{
	struct gf_set s = {0};
	int rc = set_json(&s, pget(t, "agg", "aggs"), false);
	for (size_t i = 0; rc == 0 && i < s.v.n; i++) {
		int k = 0;
		while (k < AG_N && strcmp(agg_names[k], s.v.v[i]))
			k++;
		if (k == AG_N)
			rc = fail(g, 400, "target '%.200s': unknown agg '%.40s' (known: avg, raw, "
				  "min, max, first, last, sum, count, p50, p90, p99, "
				  "crossrank-mean, crossrank-min, crossrank-max, "
				  "crossrank-median)", t->name, s.v.v[i]);
		else
			t->aggs |= BIT(k);
	}
	if (t->aggs == 0)
		t->aggs = BIT(AG_AVG);
	set_free(&s);
	return chk(g, rc);
}

static int tgt_limit(struct gf *g, struct tgt *t)
{
	const json_t *v = json_object_get(t->payload, "limit");
	char *end = NULL;
	double d = json_is_number(v) ? json_number_value(v) :
		   json_is_string(v) ? strtod(json_string_value(v), &end) : GF_EVENTS_DEFAULT;
	if ((end && *end) || !(d >= 1 && d <= GF_EVENTS_MAX))
		return fail(g, 400, "target '%.200s': payload limit must be 1..%d log records",
			    t->name, GF_EVENTS_MAX);
	t->limit = (int64_t)d;
	return 0;
}

static int tgt_parse(struct gf *g, json_t *jt, struct tgt *t)
{
	memset(t, 0, sizeof(*t));
	t->name = json_is_string(jt) ? json_string_value(jt) : jstr(jt, "target");
	t->name = t->name ? t->name : "";
	t->ref_id = jstr(jt, "refId");
	t->hide = json_is_true(json_object_get(jt, "hide"));
	json_t *p = json_object_get(jt, "payload");
	t->payload = payload_object(p ? p : json_object_get(jt, "data"), &t->owned);
	const char *type = jstr(jt, "type"), *format = jstr(t->payload, "format");
	t->table = (type && !strcmp(type, "table")) || (format && !strcmp(format, "table"));
	int rc = set_json(&t->jobs, pget(t, "job", "jobs"), false);
	if (rc == 0)
		rc = set_json(&t->ranks, pget(t, "rank", "ranks"), false);
	if (rc == 0)
		rc = set_json(&t->levels, pget(t, "level", "levels"), false);
	rc = chk(g, rc);
	if (rc == 0)
		rc = tgt_aggs(g, t);
	if (rc == 0)
		rc = tgt_limit(g, t);
	return rc;
}

/* ---- series selection ------------------------------------------------------------- */

/* The series of one target: exact metric name first; when no metric of the
 * selected jobs has that name, the target as an anchored regex. */
struct sel {
	const struct tgt *t;
	const struct gf_filters *fs;
	regex_t re;
	bool has_re;
	char re_why[200];      /* why the target is not a regex */
	struct qry_series *v;  /* owned; exact matches only once seen_exact */
	size_t n, cap;
	size_t nexact, nregex; /* matching series, counted past the cap too */
	bool seen_exact, seen_regex; /* a metric name matched, whatever rank and filters */
};

static int sel_store(struct sel *s, const struct sto_series_key *k, uint64_t id)
{
	if (s->n == s->cap) {
		if (s->cap >= GF_MAX_READ)
			return 0; /* counted, not kept: the caller refuses the target */
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct qry_series *v = realloc(s->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n].key = *k;
	s->v[s->n++].id = id;
	return 0;
}

static int sel_cb(void *arg, const struct sto_series_key *k, uint64_t id)
{
	struct sel *s = arg;
	char rank[16];
	bool exact = strcmp(k->metric, s->t->name) == 0;
	if (!exact && (s->seen_exact || !s->has_re || regexec(&s->re, k->metric, 0, NULL, 0)))
		return 0;
	if (exact && !s->seen_exact)
		s->n = 0; /* regex matches so far lose to the exact name */
	s->seen_exact |= exact;
	s->seen_regex |= !exact;
	rank_text(k->rank, rank);
	if (!set_has(&s->t->ranks, rank) || !filters_ok(s->fs, "rank", rank) ||
	    !filters_ok(s->fs, "metric", k->metric))
		return 0;
	if (exact)
		s->nexact++;
	else
		s->nregex++;
	return sel_store(s, k, id);
}

static int cmp_sel(const void *a, const void *b)
{
	const struct qry_series *x = a, *y = b;
	int c = strcmp(x->key.job, y->key.job);
	if (c == 0)
		c = strcmp(x->key.metric, y->key.metric);
	if (c == 0 && x->key.rank != y->key.rank)
		c = x->key.rank < y->key.rank ? -1 : 1;
	return c;
}

static void sel_free(struct sel *s)
{
	if (s->has_re)
		regfree(&s->re);
	free(s->v);
}

static int select_series(struct gf *g, const struct gf_filters *fs, const struct tgt *t,
			 struct sel *s)
{
	struct names jobs = {0};
	memset(s, 0, sizeof(*s));
	s->t = t;
	s->fs = fs;
	int rc = anchored_regex(&s->re, t->name, s->re_why, sizeof(s->re_why));
	s->has_re = rc == 0;
	rc = rc == RDB_EINVAL ? 0 : rc;
	if (rc == 0)
		rc = list_jobs(g, &t->jobs, fs, &jobs);
	for (size_t i = 0; rc == 0 && i < jobs.n; i++) {
		rc = sto_list_series(g->sto, jobs.v[i], sel_cb, s);
		if (rc && rc != -ENOMEM)
			rc = fail(g, 500, "listing the series of job %s: %s", jobs.v[i],
				  rdb_strerror(rc));
	}
	names_free(&jobs);
	if (rc == 0 && s->n > 1)
		qsort(s->v, s->n, sizeof(*s->v), cmp_sel);
	return chk(g, rc);
}

static bool same_group(const struct qry_series *a, const struct qry_series *b)
{
	return !strcmp(a->key.job, b->key.job) && !strcmp(a->key.metric, b->key.metric);
}

/* Refuses unknown targets and selections past the bounds. */
static int check_selection(struct gf *g, const struct sel *s, uint32_t aggs)
{
	const char *name = s->t->name;
	size_t total = s->seen_exact ? s->nexact : s->nregex;
	size_t groups = 0, frames;
	for (size_t i = 0; i < s->n; i++)
		groups += i == 0 || !same_group(&s->v[i - 1], &s->v[i]);
	frames = total * (size_t)__builtin_popcount(aggs & ~XR_MASK) +
		 groups * (size_t)__builtin_popcount(aggs & XR_MASK);
	if (!s->seen_exact && !s->seen_regex)
		return fail(g, 400, "unknown target '%.200s': no metric of the selected jobs is "
			    "named so%s%s (POST /grafana/metrics lists the metrics)", name,
			    s->has_re ? " or matches it as a regex" : "; as a regex: ",
			    s->has_re ? "" : s->re_why);
	if (total > GF_MAX_READ)
		return fail(g, 400, "target '%.200s' selects %zu series (at most %u): narrow it "
			    "with payload job and rank, or ad hoc filters on job, rank or metric",
			    name, total, GF_MAX_READ);
	if (!s->t->table && g->nframes + frames > GF_MAX_SERIES)
		return fail(g, 400, "target '%.200s' would return %zu series (at most %u per "
			    "request): narrow it with payload job and rank or ad hoc filters, or "
			    "use a crossrank-* agg (one series per job)", name, frames,
			    GF_MAX_SERIES);
	return 0;
}

/* ---- series output ------------------------------------------------------------------ */

/* Writes one target's series: timeseries elements, or rows of one table. */
struct wr {
	struct gf *g;
	const struct tgt *t;
	size_t npts;   /* points of the open series */
	size_t nrows;  /* rows of the table */
	const char *job, *metric;
	char rank[16]; /* "" for a cross-rank series */
	enum agg agg;
};

static const char *agg_label(enum agg a)
{
	return a >= AG_XMEAN ? agg_names[a] + strlen("crossrank-") : agg_names[a];
}

static int put_ref(struct rdb_buf *b, const struct tgt *t)
{
	if (!t->ref_id)
		return 0;
	int rc = rdb_buf_puts(b, ",\"refId\":");
	return rc ? rc : put_str(b, t->ref_id);
}

static int wr_table_open(struct wr *w)
{
	struct rdb_buf *b = w->g->out;
	int rc = elem_begin(w->g);
	if (rc == 0)
		rc = rdb_buf_puts(b, "{\"type\":\"table\"");
	if (rc == 0)
		rc = put_ref(b, w->t);
	if (rc == 0)
		rc = rdb_buf_puts(b, ",\"columns\":[{\"text\":\"time\",\"type\":\"time\"},"
				  "{\"text\":\"job\",\"type\":\"string\"},{\"text\":\"rank\","
				  "\"type\":\"string\"},{\"text\":\"metric\",\"type\":\"string\"},"
				  "{\"text\":\"agg\",\"type\":\"string\"},{\"text\":\"value\","
				  "\"type\":\"number\"}],\"rows\":[");
	w->g->nframes++;
	return rc;
}

/* {"target":"loss{job=j1,rank=0}","refId":..,"tags":{"job":"j1","rank":"0"},"datapoints":[ */
static int wr_begin(struct wr *w, const char *job, const char *rank, const char *metric,
		    enum agg a)
{
	struct rdb_buf *b = w->g->out;
	char name[STO_METRIC_MAX + STO_JOB_MAX + 80];
	const char *lab = a == AG_AVG ? NULL : agg_label(a);
	w->job = job;
	w->metric = metric;
	w->agg = a;
	w->npts = 0;
	snprintf(w->rank, sizeof(w->rank), "%s", rank);
	if (w->t->table)
		return 0;
	snprintf(name, sizeof(name), "%s{job=%s%s%s%s%s}", metric, job, *rank ? ",rank=" : "",
		 rank, lab ? ",agg=" : "", lab ? lab : "");
	w->g->nframes++;
	int rc = elem_begin(w->g);
	if (rc == 0)
		rc = rdb_buf_puts(b, "{\"target\":");
	if (rc == 0)
		rc = put_str(b, name);
	if (rc == 0)
		rc = put_ref(b, w->t);
	if (rc == 0)
		rc = rdb_buf_puts(b, ",\"tags\":{\"job\":");
	if (rc == 0)
		rc = put_str(b, job);
	if (rc == 0 && *rank)
		rc = rdb_buf_printf(b, ",\"rank\":\"%s\"", rank);
	if (rc == 0 && lab)
		rc = rdb_buf_printf(b, ",\"agg\":\"%s\"", lab);
	return rc ? rc : rdb_buf_puts(b, "},\"datapoints\":[");
}

static int wr_point(struct wr *w, int64_t ms, double v, bool defined)
{
	struct rdb_buf *b = w->g->out;
	int rc;
	if (!w->t->table) {
		rc = rdb_buf_puts(b, w->npts++ ? ",[" : "[");
		if (rc == 0)
			rc = put_num(b, v, defined);
		return rc ? rc : rdb_buf_printf(b, ",%lld]", (long long)ms);
	}
	rc = rdb_buf_printf(b, "%s[%lld,", w->nrows++ ? "," : "", (long long)ms);
	if (rc == 0)
		rc = put_str(b, w->job);
	if (rc == 0)
		rc = rdb_buf_printf(b, ",\"%s\",", w->rank);
	if (rc == 0)
		rc = put_str(b, w->metric);
	if (rc == 0)
		rc = rdb_buf_printf(b, ",\"%s\",", agg_names[w->agg]);
	if (rc == 0)
		rc = put_num(b, v, defined);
	return rc ? rc : rdb_buf_putc(b, ']');
}

static int wr_end(struct wr *w)
{
	return w->t->table ? 0 : rdb_buf_puts(w->g->out, "]}");
}

/* A bucket's value for a per-rank aggregate; false for null. */
static bool bucket_value(const struct qry_buckets *bs, size_t i, enum agg a, double *v)
{
	static const double q[] = {[AG_P50] = 0.5, [AG_P90] = 0.9, [AG_P99] = 0.99};
	const struct qry_bucket *b = &bs->b[i];
	switch (a) {
	case AG_AVG: *v = b->sum / (double)b->count; break;
	case AG_MIN: *v = b->min; break;
	case AG_MAX: *v = b->max; break;
	case AG_SUM: *v = b->sum; break;
	case AG_COUNT: *v = (double)b->count; return true;
	case AG_FIRST: *v = rdb_bits_f64(b->first_bits); return true;
	case AG_LAST: *v = rdb_bits_f64(b->last_bits); return true;
	case AG_P50:
	case AG_P90:
	case AG_P99:
		if (b->count)
			*v = qry_quantile_sorted(bs->vals + b->vals_off, b->count, q[a]);
		break;
	default: return false;
	}
	return b->count > 0;
}

static int emit_buckets(struct wr *w, const struct qry_series *s, const struct qry_buckets *bs,
			enum agg a, int64_t width_ms)
{
	char rank[16];
	double v = 0;
	rank_text(s->key.rank, rank);
	int rc = wr_begin(w, s->key.job, rank, s->key.metric, a);
	for (size_t i = 0; rc == 0 && i < bs->n; i++) {
		bool def = bucket_value(bs, i, a == AG_RAW ? AG_AVG : a, &v);
		rc = wr_point(w, bs->b[i].key * width_ms, v, def);
	}
	return rc ? rc : wr_end(w);
}

static int read_fail(struct gf *g, int rc, const struct qry_series *s, const struct qry_scan *sc)
{
	if (rc == RDB_ELIMIT)
		return fail(g, 400, "the query would read more than max_query_points (%zu) points: "
			    "narrow the time range, lower maxDataPoints (whole chunks inside one "
			    "bucket cost nothing), or select fewer series (payload job and rank, "
			    "ad hoc filters)", sc->max_points);
	return fail(g, 500, "series job=%s rank=%u metric=%s: %s", s->key.job, s->key.rank,
		    s->key.metric, sc->re.msg[0] ? sc->re.msg : rdb_strerror(rc));
}

/* agg=raw: the stored points when there are at most max_points of them in the
 * range, else the bucket averages (still one point per bucket). */
static int emit_raw(struct wr *w, struct qry_scan *sc, const struct qry_series *s,
		    const struct sto_range *range, const struct gf_range *r,
		    const struct qry_buckets *bs)
{
	char rank[16];
	int rc = sto_read(sc->s, s->id, range, (size_t)r->max_points, &sc->tmp, &sc->re);
	if (rc == RDB_ELIMIT)
		return emit_buckets(w, s, bs, AG_RAW, r->width_ms);
	if (rc)
		return read_fail(w->g, rc, s, sc);
	rank_text(s->key.rank, rank);
	rc = wr_begin(w, s->key.job, rank, s->key.metric, AG_RAW);
	for (size_t i = 0; rc == 0 && i < sc->tmp.n; i++)
		rc = wr_point(w, floor_div(sc->tmp.ts_ns[i], 1000000),
			      rdb_bits_f64(sc->tmp.value[i]), true);
	return rc ? rc : wr_end(w);
}

/* ---- cross-rank series ------------------------------------------------------------- */

struct km {
	int64_t key;
	double v; /* one rank's mean in the bucket */
};

struct xr {
	struct km *v;
	size_t n, cap;
};

static int xr_add(struct xr *x, const struct qry_buckets *bs)
{
	if (x->n + bs->n > x->cap) {
		size_t cap = x->cap ? x->cap : 256;
		while (cap < x->n + bs->n)
			cap *= 2;
		struct km *v = realloc(x->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		x->v = v;
		x->cap = cap;
	}
	for (size_t i = 0; i < bs->n; i++)
		if (bs->b[i].count)
			x->v[x->n++] = (struct km){bs->b[i].key,
						   bs->b[i].sum / (double)bs->b[i].count};
	return 0;
}

static int cmp_km(const void *a, const void *b)
{
	const struct km *x = a, *y = b;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return (x->v > y->v) - (x->v < y->v);
}

/* v[0..n) sorted ascending: the cross-rank aggregate a. */
static double xr_value(const struct km *v, size_t n, enum agg a)
{
	double sum = 0;
	if (a == AG_XMIN)
		return v[0].v;
	if (a == AG_XMAX)
		return v[n - 1].v;
	if (a == AG_XMEDIAN)
		return n % 2 ? v[n / 2].v : (v[n / 2 - 1].v + v[n / 2].v) / 2;
	for (size_t i = 0; i < n; i++)
		sum += v[i].v;
	return sum / (double)n;
}

/* Writes the requested cross-rank series of one (job, metric), then empties x. */
static int xr_flush(struct wr *w, struct xr *x, const struct sto_series_key *k, uint32_t aggs,
		    int64_t width_ms)
{
	int rc = 0;
	if (x->n > 1)
		qsort(x->v, x->n, sizeof(*x->v), cmp_km);
	for (int a = AG_XMEAN; x->n && rc == 0 && a <= AG_XMEDIAN; a++) {
		if (!(aggs & BIT(a)))
			continue;
		rc = wr_begin(w, k->job, "", k->metric, (enum agg)a);
		for (size_t i = 0, j; rc == 0 && i < x->n; i = j) {
			for (j = i; j < x->n && x->v[j].key == x->v[i].key; j++)
				;
			rc = wr_point(w, x->v[i].key * width_ms, xr_value(x->v + i, j - i,
									   (enum agg)a), true);
		}
		if (rc == 0)
			rc = wr_end(w);
	}
	x->n = 0;
	return rc;
}

static int emit_series(struct wr *w, struct qry_scan *sc, const struct qry_series *s,
		       const struct qry_bucketing *bk, const struct gf_range *r,
		       const struct qry_buckets *bs)
{
	int rc = 0;
	for (int a = AG_AVG; rc == 0 && a < AG_XMEAN; a++) {
		if (!(w->t->aggs & BIT(a)))
			continue;
		if (a == AG_RAW)
			rc = emit_raw(w, sc, s, &bk->range, r, bs);
		else
			rc = emit_buckets(w, s, bs, (enum agg)a, r->width_ms);
	}
	return rc;
}

static int metric_loop(struct gf *g, struct wr *w, const struct sel *s, const struct gf_range *r)
{
	struct qry_buckets bs = {0};
	struct xr xr = {0};
	uint32_t aggs = w->t->aggs;
	struct qry_bucketing bk = {
		.range = {r->from_ms * 1000000, r->to_ms * 1000000 + 999999, false, 0, INT64_MAX},
		.axis = QRY_AXIS_TIME, .width = r->width_ms * 1000000,
		.attempt = QRY_ATTEMPT_LATEST, .need_values = (aggs & Q_MASK) != 0};
	struct qry_scan *sc = malloc(sizeof(*sc));
	int rc = sc ? 0 : -ENOMEM;
	if (sc)
		qry_scan_init(sc, g->sto, g->max_points);
	for (size_t i = 0; rc == 0 && i < s->n; i++) {
		const struct qry_series *se = &s->v[i];
		if (i && !same_group(se - 1, se))
			rc = xr_flush(w, &xr, &se[-1].key, aggs, r->width_ms);
		if (rc == 0 && (rc = qry_agg_series(sc, se->id, &bk, &bs)))
			read_fail(g, rc, se, sc);
		if (rc == 0 && bs.n)
			rc = emit_series(w, sc, se, &bk, r, &bs);
		if (rc == 0 && bs.n && (aggs & XR_MASK) && se->key.rank != STO_RANK_JOB)
			rc = xr_add(&xr, &bs);
	}
	if (rc == 0 && s->n)
		rc = xr_flush(w, &xr, &s->v[s->n - 1].key, aggs, r->width_ms);
	qry_scan_free(sc);
	free(sc);
	qry_buckets_free(&bs);
	free(xr.v);
	return chk(g, rc);
}

static int run_metrics(struct gf *g, const struct gf_range *r, const struct gf_filters *fs,
		       const struct tgt *t)
{
	struct sel s;
	struct wr w = {.g = g, .t = t};
	int rc = select_series(g, fs, t, &s);
	if (rc == 0)
		rc = check_selection(g, &s, t->aggs);
	if (rc == 0 && t->table)
		rc = chk(g, wr_table_open(&w));
	if (rc == 0)
		rc = metric_loop(g, &w, &s, r);
	if (rc == 0 && t->table)
		rc = chk(g, rdb_buf_puts(g->out, "]}"));
	sel_free(&s);
	return rc;
}

/* ---- log records: annotations and the logs panel ----------------------------------- */

struct evc {
	int64_t ts_ns, step;
	uint32_t rank;
	uint8_t level;
	char *job, *text, *fields; /* one allocation; text may hold NUL bytes */
	size_t text_len;
};

struct evlist {
	struct evc *v;
	size_t n, cap;
	size_t limit, taken; /* per job */
	const struct gf_filters *fs;
	bool truncated;
};

static void evlist_free(struct evlist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].job);
	free(l->v);
}

/* A log field's value as text ("" when absent), for filters on other keys. */
static void field_text(json_t *fields, const char *key, char *buf, size_t len)
{
	json_t *v = json_object_get(fields, key);
	buf[0] = 0;
	if (json_is_string(v))
		snprintf(buf, len, "%s", json_string_value(v));
	else if (json_is_integer(v))
		snprintf(buf, len, "%lld", (long long)json_integer_value(v));
	else if (json_is_real(v))
		snprintf(buf, len, "%.17g", json_real_value(v));
	else if (json_is_boolean(v))
		snprintf(buf, len, "%s", json_is_true(v) ? "true" : "false");
}

static bool ev_ok(const struct gf_filters *fs, const struct sto_event *ev)
{
	char rank[16], val[512];
	json_t *fields = NULL;
	bool ok = true;
	rank_text(ev->rank, rank);
	if (!filters_ok(fs, "rank", rank) || !filters_ok(fs, "level", sto_level_name(ev->level)))
		return false;
	for (size_t i = 0; ok && fs && i < fs->n; i++) {
		const char *k = fs->v[i].key;
		if (!strcmp(k, "job") || !strcmp(k, "rank") || !strcmp(k, "level") ||
		    !strcmp(k, "metric"))
			continue;
		if (!fields)
			fields = json_loadb(ev->fields, ev->fields_len, 0, NULL);
		field_text(fields, k, val, sizeof(val));
		ok = filter_match(&fs->v[i], val);
	}
	json_decref(fields);
	return ok;
}

static int ev_cb(void *arg, const struct sto_event *ev)
{
	struct evlist *l = arg;
	if (!ev_ok(l->fs, ev))
		return 0;
	if (l->taken == l->limit) {
		l->truncated = true;
		return 1; /* stop: the newest limit records of this job are in */
	}
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct evc *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	char *m = malloc(ev->job_len + ev->text_len + ev->fields_len + 3);
	if (!m)
		return -ENOMEM;
	struct evc *e = &l->v[l->n++];
	*e = (struct evc){ev->ts_ns, ev->step, ev->rank, ev->level, m, m + ev->job_len + 1,
			  m + ev->job_len + ev->text_len + 2, ev->text_len};
	memcpy(e->job, ev->job, ev->job_len);
	e->job[ev->job_len] = 0;
	memcpy(e->text, ev->text, ev->text_len);
	e->text[ev->text_len] = 0;
	memcpy(e->fields, ev->fields, ev->fields_len);
	e->fields[ev->fields_len] = 0;
	l->taken++;
	return 0;
}

static int cmp_evc(const void *a, const void *b)
{
	const struct evc *x = a, *y = b;
	if (x->ts_ns != y->ts_ns)
		return x->ts_ns > y->ts_ns ? -1 : 1; /* newest first */
	return (x->rank > y->rank) - (x->rank < y->rank);
}

/* The payload's ranks as numbers for the storage filter (none: every rank). */
static int ev_ranks(struct gf *g, const struct tgt *t, uint32_t **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	if (!set_constrains(&t->ranks))
		return 0;
	if (!(*out = malloc(t->ranks.v.n * sizeof(**out))))
		return chk(g, -ENOMEM);
	for (size_t i = 0; i < t->ranks.v.n; i++) {
		const char *s = t->ranks.v.v[i];
		char *end;
		long long r = strtoll(s, &end, 10);
		if (!strcmp(s, "job"))
			r = STO_RANK_JOB;
		else if (end == s || *end || r < 0 || r > STO_RANK_MAX)
			return fail(g, 400, "payload rank: a rank is an integer >= 0 or \"job\", "
				    "got '%.32s'", s);
		(*out)[(*n)++] = (uint32_t)r;
	}
	return 0;
}

static int ev_read_job(struct gf *g, struct sto_ev_filter *f, struct evlist *l)
{
	struct sto_read_error *re = malloc(sizeof(*re));
	if (!re)
		return chk(g, -ENOMEM);
	l->taken = 0;
	int rc = sto_events_read(g->sto, f, GF_EVENTS_SCAN, ev_cb, l, re);
	if (rc == 1)
		rc = 0;
	if (rc == RDB_ELIMIT)
		fail(g, 400, "more than %u log records of job %s match: narrow the time range or "
		     "raise the level (payload level, ad hoc filter level)", GF_EVENTS_SCAN,
		     f->job);
	else if (rc && rc != -ENOMEM)
		fail(g, 500, "reading the logs of job %s: %s", f->job,
		     re->msg[0] ? re->msg : rdb_strerror(rc));
	free(re);
	return chk(g, rc);
}

/* Log records of the target's jobs in the range, newest first, at most limit. */
static int collect_events(struct gf *g, const struct gf_range *r, const struct gf_filters *fs,
			  const struct tgt *t, bool anno, struct evlist *l)
{
	struct names jobs = {0};
	struct sto_ev_filter f = {.kinds = 1u << STO_EV_LOG, .from_ns = r->from_ms * 1000000,
				  .to_ns = r->to_ms * 1000000 + 999999, .attempt = -1,
				  .min_level = anno ? STO_LEVEL_WARN : STO_LEVEL_DEBUG};
	uint32_t *ranks = NULL;
	l->limit = (size_t)t->limit;
	l->fs = fs;
	if (set_constrains(&t->levels) &&
	    sto_level_parse(t->levels.v.v[0], strlen(t->levels.v.v[0]), &f.min_level))
		return fail(g, 400, "payload level: unknown level '%.32s' (debug, info, warn, "
			    "error, fatal)", t->levels.v.v[0]);
	int rc = ev_ranks(g, t, &ranks, &f.nranks);
	f.ranks = ranks;
	if (rc == 0)
		rc = list_jobs(g, &t->jobs, fs, &jobs);
	for (size_t i = 0; rc == 0 && i < jobs.n; i++) {
		f.job = jobs.v[i];
		rc = ev_read_job(g, &f, l);
	}
	if (rc == 0 && l->n > 1)
		qsort(l->v, l->n, sizeof(*l->v), cmp_evc);
	for (; rc == 0 && l->n > l->limit; l->truncated = true)
		free(l->v[--l->n].job);
	free(ranks);
	names_free(&jobs);
	return rc;
}

static void ev_title(const struct evc *e, char *buf, size_t len)
{
	char rank[16], step[40] = "";
	rank_text(e->rank, rank);
	if (e->step != STO_STEP_NONE)
		snprintf(step, sizeof(step), " at step %lld", (long long)e->step);
	snprintf(buf, len, "%s on %s rank %s%s", sto_level_name(e->level), e->job, rank, step);
}

/* time, timeEnd, title, text, tags, level, job, rank of one record. */
static int ev_row(struct rdb_buf *b, const struct evc *e, bool legacy)
{
	char title[STO_JOB_MAX + 96], rank[16];
	int64_t ms = floor_div(e->ts_ns, 1000000);
	const char *lv = sto_level_name(e->level);
	ev_title(e, title, sizeof(title));
	rank_text(e->rank, rank);
	int rc = rdb_buf_printf(b, legacy ? "\"time\":%lld,\"timeEnd\":%lld,\"title\":" :
				"[%lld,%lld,", (long long)ms, (long long)ms);
	if (rc == 0)
		rc = put_str(b, title);
	if (rc == 0)
		rc = rdb_buf_puts(b, legacy ? ",\"text\":" : ",");
	if (rc == 0)
		rc = rdb_buf_json_str(b, e->text, e->text_len);
	if (rc == 0)
		rc = rdb_buf_printf(b, "%s[\"%s\",\"job=%s\",\"rank=%s\"]", legacy ? ",\"tags\":" :
				    ",", lv, e->job, rank);
	if (rc == 0 && !legacy)
		rc = rdb_buf_printf(b, ",\"%s\",\"%s\",\"%s\"]", lv, e->job, rank);
	return rc;
}

static int write_anno_table(struct gf *g, const struct tgt *t, const struct evlist *l)
{
	struct rdb_buf *b = g->out;
	int rc = elem_begin(g);
	if (rc == 0)
		rc = rdb_buf_puts(b, "{\"type\":\"table\"");
	if (rc == 0)
		rc = put_ref(b, t);
	if (rc == 0)
		rc = rdb_buf_puts(b, ",\"columns\":[{\"text\":\"time\",\"type\":\"time\"},"
				  "{\"text\":\"timeEnd\",\"type\":\"time\"},{\"text\":\"title\","
				  "\"type\":\"string\"},{\"text\":\"text\",\"type\":\"string\"},"
				  "{\"text\":\"tags\",\"type\":\"other\"},{\"text\":\"level\","
				  "\"type\":\"string\"},{\"text\":\"job\",\"type\":\"string\"},"
				  "{\"text\":\"rank\",\"type\":\"string\"}],\"rows\":[");
	for (size_t i = 0; rc == 0 && i < l->n; i++) {
		rc = rdb_buf_puts(b, i ? "," : "");
		if (rc == 0)
			rc = ev_row(b, &l->v[i], false);
	}
	return rc ? rc : rdb_buf_puts(b, "]}");
}

enum lcol { LC_TIME, LC_BODY, LC_LEVEL, LC_JOB, LC_RANK, LC_STEP, LC_FIELDS, LC_N };

static int logs_cell(struct rdb_buf *b, const struct evc *e, enum lcol c)
{
	char rank[16];
	switch (c) {
	case LC_TIME: return rdb_buf_printf(b, "%lld", (long long)floor_div(e->ts_ns, 1000000));
	case LC_BODY: return rdb_buf_json_str(b, e->text, e->text_len);
	case LC_LEVEL: return rdb_buf_printf(b, "\"%s\"", sto_level_name(e->level));
	case LC_JOB: return put_str(b, e->job);
	case LC_RANK: rank_text(e->rank, rank); return rdb_buf_printf(b, "\"%s\"", rank);
	case LC_STEP:
		if (e->step == STO_STEP_NONE)
			return rdb_buf_puts(b, "null");
		return rdb_buf_printf(b, "%lld", (long long)e->step);
	default: return put_str(b, e->fields);
	}
}

/* A DataFrame the logs panel takes: time, then the line (first string field). */
static int write_logs_frame(struct gf *g, const struct tgt *t, const struct evlist *l)
{
	static const char *const cols[LC_N][2] = {
		{"time", "time"}, {"body", "string"}, {"level", "string"}, {"job", "string"},
		{"rank", "string"}, {"step", "number"}, {"fields", "string"}};
	struct rdb_buf *b = g->out;
	int rc = elem_begin(g);
	if (rc == 0)
		rc = rdb_buf_puts(b, "{\"name\":\"logs\"");
	if (rc == 0)
		rc = put_ref(b, t);
	if (rc == 0)
		rc = rdb_buf_puts(b, ",\"meta\":{\"preferredVisualisationType\":\"logs\"},"
				  "\"fields\":[");
	for (int c = 0; rc == 0 && c < LC_N; c++) {
		rc = rdb_buf_printf(b, "%s{\"name\":\"%s\",\"type\":\"%s\",\"values\":[",
				    c ? "," : "", cols[c][0], cols[c][1]);
		for (size_t i = 0; rc == 0 && i < l->n; i++) {
			rc = rdb_buf_puts(b, i ? "," : "");
			if (rc == 0)
				rc = logs_cell(b, &l->v[i], (enum lcol)c);
		}
		if (rc == 0)
			rc = rdb_buf_puts(b, "]}");
	}
	return rc ? rc : rdb_buf_puts(b, "]}");
}

static int run_events(struct gf *g, const struct gf_range *r, const struct gf_filters *fs,
		      const struct tgt *t, bool anno)
{
	struct evlist l = {0};
	int rc = collect_events(g, r, fs, t, anno, &l);
	g->nframes++;
	if (rc == 0)
		rc = chk(g, anno ? write_anno_table(g, t, &l) : write_logs_frame(g, t, &l));
	evlist_free(&l);
	return rc;
}

/* ---- POST /query ---------------------------------------------------------------------- */

static bool is_anno(const struct tgt *t)
{
	return (t->ref_id && !strcmp(t->ref_id, "Anno")) || !strcmp(t->name, "annotations");
}

static int run_target(struct gf *g, const struct gf_range *r, const struct gf_filters *fs,
		      json_t *jt)
{
	struct tgt t;
	int rc = tgt_parse(g, jt, &t);
	bool anno = is_anno(&t), logs = !strcmp(t.name, "logs");
	/* an annotation query's text may name the job(s) */
	if (rc == 0 && anno && *t.name && !logs && strcmp(t.name, "annotations") && !t.jobs.given)
		rc = chk(g, set_text(&t.jobs, t.name));
	if (rc || t.hide || (!*t.name && !anno))
		;
	else if (anno || logs)
		rc = run_events(g, r, fs, &t, anno);
	else
		rc = run_metrics(g, r, fs, &t);
	tgt_free(&t);
	return rc;
}

static int h_query(struct gf *g)
{
	struct gf_range r;
	struct gf_filters fs = {0};
	json_t *targets = json_object_get(g->body, "targets"), *jt;
	size_t i;
	if (!json_is_array(targets))
		return fail(g, 400, "targets is required: [{\"refId\":\"A\",\"target\":\"loss\","
			    "\"payload\":{\"job\":\"j1\"}}]");
	int rc = parse_range(g, g->body, &r);
	if (rc == 0)
		rc = filters_parse(g, &fs);
	if (rc == 0)
		rc = chk(g, rdb_buf_putc(g->out, '['));
	json_array_foreach(targets, i, jt)
		if (rc == 0)
			rc = run_target(g, &r, &fs, jt);
	if (rc == 0)
		rc = chk(g, rdb_buf_putc(g->out, ']'));
	filters_free(&fs);
	return rc;
}

/* ---- POST /metrics, /metric-payload-options ----------------------------------------- */

static int write_payloads(struct gf *g, const struct names *jobs, bool job_options, bool logs)
{
	struct names aggs = {0};
	struct rdb_buf *b = g->out;
	int rc = rdb_buf_puts(b, ",\"payloads\":[{\"name\":\"job\",\"label\":\"Job\",\"type\":"
			      "\"select\",\"placeholder\":\"all jobs\",\"reloadMetric\":true,"
			      "\"width\":24");
	if (rc == 0 && job_options) {
		rc = rdb_buf_puts(b, ",\"options\":");
		if (rc == 0)
			rc = write_values(g, jobs, K_JOBS, ST_OPTION);
	}
	if (rc == 0)
		rc = rdb_buf_puts(b, "},{\"name\":\"rank\",\"label\":\"Ranks\",\"type\":"
				  "\"multi-select\",\"placeholder\":\"all ranks\",\"width\":24}");
	if (rc == 0 && logs)
		rc = rdb_buf_puts(b, ",{\"name\":\"level\",\"label\":\"Level at least\",\"type\":"
				  "\"select\",\"placeholder\":\"debug\",\"width\":16},"
				  "{\"name\":\"limit\",\"label\":\"Limit\",\"type\":\"input\","
				  "\"placeholder\":\"1000\",\"width\":12}]}");
	if (rc == 0 && !logs)
		rc = rdb_buf_puts(b, ",{\"name\":\"agg\",\"label\":\"Aggregate\",\"type\":"
				  "\"select\",\"placeholder\":\"avg\",\"width\":20,"
				  "\"options\":");
	if (rc == 0 && !logs)
		rc = list_values(g, K_AGGS, NULL, NULL, NULL, &aggs);
	if (rc == 0 && !logs)
		rc = write_values(g, &aggs, K_AGGS, ST_OPTION);
	if (rc == 0 && !logs)
		rc = rdb_buf_puts(b, "}]}");
	names_free(&aggs);
	return chk(g, rc);
}

/* Code mode sends {}; builder mode {"metric":..,"payload":{..}}: the payload's
 * job narrows the metric list. */
static int h_metrics(struct gf *g)
{
	json_t *owned, *pl = payload_object(json_object_get(g->body, "payload"), &owned);
	struct gf_set jobs = {0};
	struct names metrics = {0}, all = {0};
	int rc = chk(g, set_json(&jobs, json_object_get(pl, "job"), false));
	if (rc == 0)
		rc = list_values(g, K_METRICS, &jobs, NULL, NULL, &metrics);
	if (rc == 0)
		rc = list_values(g, K_JOBS, NULL, NULL, NULL, &all);
	bool opts = all.n * (metrics.n + 1) <= GF_MAX_JOB_OPTIONS;
	if (rc == 0)
		rc = chk(g, rdb_buf_putc(g->out, '['));
	for (size_t i = 0; rc == 0 && i <= metrics.n; i++) {
		const char *m = i < metrics.n ? metrics.v[i] : "logs";
		rc = chk(g, rdb_buf_puts(g->out, i ? ",{\"value\":" : "{\"value\":"));
		if (rc == 0)
			rc = chk(g, put_str(g->out, m));
		if (rc == 0)
			rc = chk(g, rdb_buf_puts(g->out, ",\"label\":"));
		if (rc == 0)
			rc = chk(g, put_str(g->out, i < metrics.n ? m : "logs (log records)"));
		if (rc == 0)
			rc = write_payloads(g, &all, opts, i == metrics.n);
	}
	if (rc == 0)
		rc = chk(g, rdb_buf_putc(g->out, ']'));
	set_free(&jobs);
	names_free(&metrics);
	names_free(&all);
	json_decref(owned);
	return rc;
}

static int h_payload_options(struct gf *g)
{
	static const struct {
		const char *name;
		enum kind kind;
	} kinds[] = {{"job", K_JOBS}, {"rank", K_RANKS}, {"agg", K_AGGS}, {"level", K_LEVELS}};
	json_t *owned, *pl = payload_object(json_object_get(g->body, "payload"), &owned);
	const char *name = jstr(g->body, "name"), *metric = jstr(g->body, "metric");
	struct gf_set jobs = {0};
	struct names vals = {0};
	size_t k = 0;
	while (name && k < 4 && strcmp(kinds[k].name, name))
		k++;
	if (metric && (!*metric || !strcmp(metric, "logs")))
		metric = NULL;
	int rc = chk(g, set_json(&jobs, json_object_get(pl, "job"), false));
	if (rc == 0 && name && k < 4)
		rc = list_values(g, kinds[k].kind, kinds[k].kind == K_RANKS ? &jobs : NULL, metric,
				 NULL, &vals);
	if (rc == 0)
		rc = write_values(g, &vals, name && k < 4 ? kinds[k].kind : K_AGGS, ST_OPTION);
	set_free(&jobs);
	names_free(&vals);
	json_decref(owned);
	return rc;
}

/* ---- POST /variable, /search, /tag-keys, /tag-values --------------------------------- */

/* A variable query: "" or "jobs", "ranks", "metrics", "levels", "aggs", each
 * optionally "kind(job)" (a job id, or "(a|b)" / "a,b" for several). */
static int variable_kind(struct gf *g, const char *q, struct gf_set *jobs, enum kind *kind)
{
	static const char *const names[] = {"jobs", "ranks", "metrics", "levels", "aggs"};
	size_t n = strcspn(q, "(");
	while (n && q[n - 1] == ' ')
		n--;
	if (!*q) {
		*kind = K_JOBS;
		return 0;
	}
	for (int k = 0; k < 5; k++) {
		if (strlen(names[k]) != n || strncmp(q, names[k], n))
			continue;
		*kind = (enum kind)k;
		const char *open = strchr(q, '('), *close = strrchr(q, ')');
		if (!open)
			return 0;
		if (!close || close < open || close[1])
			break;
		char *arg = strndup(open + 1, (size_t)(close - open - 1));
		int rc = arg ? set_text(jobs, arg) : -ENOMEM;
		free(arg);
		return chk(g, rc);
	}
	return fail(g, 400, "unknown variable query '%.100s' (known: jobs, ranks(<job>), "
		    "metrics, metrics(<job>), levels, aggs; or raw JSON {\"target\":\"ranks\","
		    "\"job\":\"j1\"})", q);
}

static int list_query(struct gf *g, const char *q, const json_t *job, struct names *out,
		      enum kind *kind)
{
	struct gf_set jobs = {0};
	int rc = variable_kind(g, q ? q : "", &jobs, kind);
	if (rc == 0)
		rc = chk(g, set_json(&jobs, job, false));
	if (rc == 0 && *kind == K_RANKS && !set_constrains(&jobs))
		rc = fail(g, 400, "variable query ranks needs a job: ranks(j1), or raw JSON "
			  "{\"target\":\"ranks\",\"job\":\"$job\"}");
	if (rc == 0)
		rc = list_values(g, *kind, &jobs, NULL, NULL, out);
	set_free(&jobs);
	return rc;
}

static int h_variable(struct gf *g)
{
	json_t *p = json_object_get(g->body, "payload"), *owned = NULL, *obj;
	struct names vals = {0};
	enum kind kind;
	const char *q = json_is_string(p) ? json_string_value(p) : NULL;
	obj = payload_object(q ? NULL : p, &owned);
	if (!obj && !q)
		obj = g->body;
	if (obj)
		q = jstr(obj, "target") ? jstr(obj, "target") : jstr(obj, "query");
	int rc = list_query(g, q, json_object_get(obj, "job"), &vals, &kind);
	if (rc == 0)
		rc = write_values(g, &vals, kind, ST_VARIABLE);
	names_free(&vals);
	json_decref(owned);
	return rc;
}

/* Legacy: names as strings; variable queries as for /variable, any other
 * text lists the metrics containing it. */
static int h_search(struct gf *g)
{
	const char *q = jstr(g->body, "target");
	struct names vals = {0}, keep = {0};
	enum kind kind = K_METRICS;
	int rc = 0;
	bool query = q && (strchr(q, '(') || !strcmp(q, "jobs") || !strcmp(q, "ranks") ||
			   !strcmp(q, "metrics") || !strcmp(q, "levels") || !strcmp(q, "aggs"));
	if (query) {
		rc = list_query(g, q, NULL, &vals, &kind);
	} else {
		rc = list_values(g, K_METRICS, NULL, NULL, NULL, &vals);
		for (size_t i = 0; rc == 0 && i < vals.n; i++)
			if (!q || strstr(vals.v[i], q))
				rc = chk(g, names_add(&keep, vals.v[i], strlen(vals.v[i])));
	}
	if (rc == 0)
		rc = write_values(g, query ? &vals : &keep, kind, ST_STRING);
	names_free(&vals);
	names_free(&keep);
	return rc;
}

static int h_tag_keys(struct gf *g)
{
	return chk(g, rdb_buf_puts(g->out, "[{\"type\":\"string\",\"text\":\"job\"},{\"type\":"
				   "\"string\",\"text\":\"rank\"},{\"type\":\"string\",\"text\":"
				   "\"metric\"},{\"type\":\"string\",\"text\":\"level\"}]"));
}

/* The values of a tag key, narrowed by the filters already chosen. */
static int h_tag_values(struct gf *g)
{
	static const char *const keys[] = {"job", "rank", "metric", "level"};
	static const enum kind kinds[] = {K_JOBS, K_RANKS, K_METRICS, K_LEVELS};
	const char *key = jstr(g->body, "key");
	struct gf_filters fs = {0};
	struct names vals = {0};
	size_t k = 0;
	while (key && k < 4 && strcmp(keys[k], key))
		k++;
	int rc = filters_parse(g, &fs);
	if (rc == 0 && key && k < 4) {
		/* a filter on the key itself would hide the other choices */
		for (size_t i = 0; i < fs.n; i++)
			if (!strcmp(fs.v[i].key, key))
				fs.v[i].key = "";
		rc = list_values(g, kinds[k], NULL, NULL, &fs, &vals);
	}
	if (rc == 0)
		rc = write_values(g, &vals, K_JOBS, ST_TEXT);
	names_free(&vals);
	filters_free(&fs);
	return rc;
}

/* ---- POST /annotations (legacy) ------------------------------------------------------- */

/* annotation.query: a job (or "(a|b)", "a,b"), or a JSON object payload. */
static int h_annotations(struct gf *g)
{
	const json_t *an = json_object_get(g->body, "annotation");
	const char *q = jstr(an, "query");
	struct gf_range r;
	struct evlist l = {0};
	struct tgt t = {.name = "annotations", .limit = GF_EVENTS_DEFAULT};
	json_t *qv = q && *q == '{' ? json_string(q) : NULL;
	t.payload = payload_object(qv, &t.owned);
	json_decref(qv);
	int rc = parse_range(g, g->body, &r);
	if (rc == 0 && t.payload)
		rc = chk(g, set_json(&t.jobs, json_object_get(t.payload, "job"), false));
	else if (rc == 0 && q)
		rc = chk(g, set_text(&t.jobs, q));
	if (rc == 0 && t.payload)
		rc = chk(g, set_json(&t.levels, json_object_get(t.payload, "level"), false));
	if (rc == 0)
		rc = collect_events(g, &r, NULL, &t, true, &l);
	char *echo = an ? json_dumps(an, JSON_COMPACT) : NULL;
	if (rc == 0)
		rc = chk(g, rdb_buf_putc(g->out, '['));
	for (size_t i = 0; rc == 0 && i < l.n; i++) {
		rc = rdb_buf_printf(g->out, "%s{\"annotation\":%s,", i ? "," : "",
				    echo ? echo : "null");
		if (rc == 0)
			rc = ev_row(g->out, &l.v[i], true);
		rc = chk(g, rc ? rc : rdb_buf_putc(g->out, '}'));
	}
	if (rc == 0)
		rc = chk(g, rdb_buf_putc(g->out, ']'));
	free(echo);
	evlist_free(&l);
	tgt_free(&t);
	return rc;
}

/* ---- routing ------------------------------------------------------------------------ */

static const struct {
	const char *name;
	int (*fn)(struct gf *g);
} endpoints[] = {
	{"metrics", h_metrics},	      {"metric-payload-options", h_payload_options},
	{"query", h_query},	      {"variable", h_variable},
	{"tag-keys", h_tag_keys},     {"tag-values", h_tag_values},
	{"search", h_search},	      {"annotations", h_annotations},
};

/* Parses the body (empty: {}); only /query insists on an object. */
static int parse_body(struct gf *g, const struct srv_req *req, bool need_object)
{
	json_error_t e;
	if (req->body_len == 0) {
		g->body = json_object();
		return g->body ? 0 : chk(g, -ENOMEM);
	}
	g->body = json_loadb((const char *)req->body, req->body_len, JSON_DECODE_ANY, &e);
	if (!g->body)
		return fail(g, 400, "request body is not valid JSON: %s (line %d, column %d)",
			    e.text, e.line, e.column);
	if (json_is_object(g->body))
		return 0;
	if (need_object)
		return fail(g, 400, "request body must be a JSON object");
	json_decref(g->body);
	g->body = json_object();
	return g->body ? 0 : chk(g, -ENOMEM);
}

static void respond(struct srv_req *req, struct srv_resp *resp, int (*fn)(struct gf *g),
		    bool need_object)
{
	struct srv_ctx *ctx = req->ctx;
	struct gf *g = calloc(1, sizeof(*g));
	int64_t t0 = rdb_now_mono_ns();
	if (!g) {
		srv_error(resp, 500, "out of memory");
		return;
	}
	*g = (struct gf){.sto = ctx->sto, .max_points = ctx->cfg->max_query_points,
			 .max_bytes = ctx->cfg->max_response_bytes, .out = &resp->body};
	if (parse_body(g, req, need_object) == 0 && fn(g) == 0)
		resp->status = 200;
	if (g->status) {
		resp->status = g->status;
		resp->body.len = 0;
		if (rdb_buf_puts(&resp->body, "{\"message\":") || put_str(&resp->body, g->msg) ||
		    rdb_buf_puts(&resp->body, ",\"error\":") || put_str(&resp->body, g->msg) ||
		    rdb_buf_putc(&resp->body, '}'))
			resp->body.len = 0;
		atomic_fetch_add(&ctx->counters.query_errors, 1);
	}
	atomic_fetch_add(&ctx->counters.queries, 1);
	atomic_fetch_add(&ctx->counters.query_ns_total, (uint64_t)(rdb_now_mono_ns() - t0));
	json_decref(g->body);
	free(g);
}

static bool method_ok(struct srv_req *req, struct srv_resp *resp, const char *allow)
{
	const char *m = req->method;
	if (!strcmp(m, "POST") || !strcmp(m, "GET") || (!strcmp(m, "HEAD") && allow[0] == 'G'))
		return true;
	resp->allow = allow;
	srv_error(resp, 405, "%s %s is not supported; use %s", m, req->path, allow);
	return false;
}

bool srv_grafana_route(struct srv_req *req, struct srv_resp *resp)
{
	const char *p = req->path;
	char ep[40];
	if (strncmp(p, "/grafana", 8) || (p[8] && p[8] != '/'))
		return false;
	snprintf(ep, sizeof(ep), "%s", p[8] ? p + 9 : "");
	if (*ep && ep[strlen(ep) - 1] == '/')
		ep[strlen(ep) - 1] = 0;
	if (!*ep) {
		if (method_ok(req, resp, "GET, HEAD, POST")) {
			resp->status = 200;
			rdb_buf_puts(&resp->body, "{\"status\":\"ok\",\"datasource\":\"rankdb\"}");
		}
		return true;
	}
	for (size_t i = 0; i < sizeof(endpoints) / sizeof(endpoints[0]); i++) {
		if (strcmp(ep, endpoints[i].name))
			continue;
		if (method_ok(req, resp, "POST"))
			respond(req, resp, endpoints[i].fn, endpoints[i].fn == h_query);
		return true;
	}
	srv_error(resp, 404, "no such Grafana endpoint: %.200s (known: /grafana, /grafana/metrics, "
		  "/metric-payload-options, /query, /variable, /tag-keys, /tag-values, /search, "
		  "/annotations)", p);
	return true;
}
