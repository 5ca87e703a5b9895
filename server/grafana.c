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
 * engine (query/bucket.h), and each bucket gives its points per aggregate (by
 * default M4: the bucket's first, min, max and last points at their times,
 * so a line of maxDataPoints pixels is the raw line, spikes included;
 * payload agg picks others, crossrank-* adds one series per (job,
 * metric) aggregated across ranks by query/crossrank.c, the values GET
 * /api/v1/query/crossrank gives). Targets "logs" and "annotations" (and
 * every target of refId "Anno") read log records instead. Every read goes
 * through query/ (listings, buckets, raw points, events), never storage.
 *
 * Output is JSON written into the bounded response buffer: times are integer
 * ms, values non-finite -> null, tag values strings, refId echoed when sent.
 * Bounds: GF_MAX_SERIES frames per request, GF_MAX_READ series per target,
 * max_query_points points read per target, max_response_bytes of response.
 * Past any of them, and for every client mistake, the answer is 4xx
 * {"message":..,"error":..} saying what to narrow; 5xx only for server faults
 * (corrupt data, out of memory). jansson parses the request bodies (the
 * grafana*.c files are its only includers in server/). Threading: per
 * request, no shared state.
 *
 * The module: this file (errors, name lists, value sets, ad hoc filters,
 * catalog listings, /metrics, /variable, /search, /tag-*, routing),
 * grafana_query.c (POST /query: time range, targets, series, cross-rank),
 * grafana_logs.c (log records: annotations, logs frames, /annotations) and
 * grafana_int.h (what they share; internal to the module).
 */
#include "server/grafana_int.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "common/rdb_time.h"
#include "common/rdb_sort.h"
#include "query/agg.h"
#include "server/json_out.h"
#include "server/route.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- request state and errors ------------------------------------------------ */

/* Records the first error; returns RDB_EINVAL so callers can return it. */
int gf_fail(struct gf *g, int status, const char *fmt, ...)
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
int gf_chk(struct gf *g, int rc)
{
	if (rc == 0 || g->status)
		return rc;
	if (rc == RDB_ELIMIT)
		return gf_fail(g, 400,
			       "the response would exceed max_response_bytes (%zu bytes): "
			       "lower maxDataPoints, narrow the time range, or select fewer series "
			       "(payload job and rank, ad hoc filters, a crossrank-* agg)",
			       g->max_bytes);
	return gf_fail(g, 500, "grafana: %s", rdb_strerror(rc));
}

int gf_elem_begin(struct gf *g)
{
	return g->nelem++ ? rdb_buf_putc(g->out, ',') : 0;
}

int gf_put_str(struct rdb_buf *b, const char *s)
{
	return rdb_buf_json_str(b, s, strlen(s));
}

/* A finite value as a JSON number, anything else as null. */
int gf_put_num(struct rdb_buf *b, double v, bool defined)
{
	if (!defined || !isfinite(v))
		return rdb_buf_puts(b, "null");
	return srv_json_value(b, rdb_f64_bits(v));
}

int64_t gf_floor_div(int64_t x, int64_t w)
{
	int64_t q = x / w;
	return (x % w != 0 && x < 0) ? q - 1 : q;
}

void gf_rank_text(uint32_t rank, char buf[16])
{
	if (rank == MDL_RANK_JOB)
		snprintf(buf, 16, "job");
	else
		snprintf(buf, 16, "%u", rank);
}

const char *gf_jstr(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

/* ---- name lists --------------------------------------------------------------- */

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
		rdb_sort(ns->v, ns->n, sizeof(*ns->v), cmp_name);
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
int gf_names_add(struct names *ns, const char *s, size_t len)
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

void gf_names_free(struct names *ns)
{
	for (size_t i = 0; i < ns->n; i++)
		free(ns->v[i]);
	free(ns->v);
	memset(ns, 0, sizeof(*ns));
}

/* ---- value sets (payload values, multi-value variables) ----------------------- */

static bool wildcard(const char *s)
{
	return !strcmp(s, "*") || !strcmp(s, "All") || !strcmp(s, "all") || !strcmp(s, "$__all") ||
	       !strcmp(s, ".*") || !strcmp(s, ".+");
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
		rc = gf_names_add(&s->v, u, k);
	s->given = s->given || k;
	free(u);
	return rc;
}

int gf_set_text(struct gf_set *s, const char *t)
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

int gf_set_json(struct gf_set *s, const json_t *v, bool nested)
{
	char num[40];
	if (json_is_string(v))
		return gf_set_text(s, json_string_value(v));
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
		json_array_foreach(v, i, e) if (rc == 0) rc = gf_set_json(s, e, true);
	return rc;
}

bool gf_set_has(const struct gf_set *s, const char *x)
{
	return !s->given || s->all || names_has(&s->v, x);
}

bool gf_set_constrains(const struct gf_set *s)
{
	return s->given && !s->all;
}

void gf_set_free(struct gf_set *s)
{
	gf_names_free(&s->v);
}

/* ---- ad hoc filters ----------------------------------------------------------- */

static const char *const op_names[OP_N] = {"=", "!=", "=~", "!~", "<",
					   ">", "<=", ">=", "=|", "!=|"};

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
		return gf_set_json(&f->set, vs ? vs : v, false);
	}
	if (f->op != OP_RE && f->op != OP_NRE)
		return 0;
	f->g = g;
	int rc = gf_regex_compile(&f->rx, f->val, why, sizeof(why));
	if (rc == RDB_EINVAL)
		return gf_fail(g, 400, "ad hoc filter %s %s '%.200s': not accepted as a regex: %s",
			       f->key, op_names[f->op], f->val, why);
	return rc;
}

static int filter_parse(struct gf *g, const json_t *o, struct gf_filter *f)
{
	const char *op = gf_jstr(o, "operator");
	f->key = gf_jstr(o, "key");
	if (!json_is_object(o) || !f->key)
		return gf_fail(g, 400,
			       "an ad hoc filter must be an object {\"key\",\"operator\","
			       "\"value\"} with a string key");
	if (!op)
		op = "=";
	int k = 0;
	while (k < OP_N && strcmp(op_names[k], op))
		k++;
	if (k == OP_N)
		return gf_fail(g, 400,
			       "ad hoc filter on '%.100s': unknown operator '%.20s' "
			       "(known: =, !=, =~, !~, <, >, <=, >=, =|, !=|)",
			       f->key, op);
	f->op = (enum op)k;
	return filter_value(g, o, f);
}

void gf_filters_free(struct gf_filters *fs)
{
	for (size_t i = 0; i < fs->n; i++) {
		gf_regex_free(&fs->v[i].rx);
		gf_set_free(&fs->v[i].set);
	}
	free(fs->v);
	memset(fs, 0, sizeof(*fs));
}

/* The request's "filters" (Grafana >= 10) and "adhocFilters" (plugin <= 0.6.3). */
int gf_filters_parse(struct gf *g, struct gf_filters *fs)
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
		return gf_chk(g, -ENOMEM);
	int rc = 0;
	for (int k = 0; k < 2 && rc == 0; k++)
		json_array_foreach(json_object_get(g->body, keys[k]), i, e) if (rc == 0) rc =
		    filter_parse(g, e, &fs->v[fs->n++]);
	return gf_chk(g, rc);
}

static int level_num(const char *s)
{
	uint8_t l;
	return mdl_level_parse(s, strlen(s), &l) ? -1 : l;
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

bool gf_filter_match(const struct gf_filter *f, const char *val)
{
	switch (f->op) {
	case OP_EQ:
		return strcmp(val, f->val) == 0;
	case OP_NE:
		return strcmp(val, f->val) != 0;
	case OP_RE:
		return f->rx.ok && gf_regex_match(f->g, &f->rx, val);
	case OP_NRE:
		return f->rx.ok && !gf_regex_match(f->g, &f->rx, val) && !f->g->rx_over;
	case OP_LT:
		return cmp_vals(f->key, val, f->val) < 0;
	case OP_GT:
		return cmp_vals(f->key, val, f->val) > 0;
	case OP_LE:
		return cmp_vals(f->key, val, f->val) <= 0;
	case OP_GE:
		return cmp_vals(f->key, val, f->val) >= 0;
	case OP_IN:
		return gf_set_has(&f->set, val);
	case OP_NIN:
		return !gf_set_has(&f->set, val) || !f->set.given;
	default:
		return true;
	}
}

/* True when every filter on key holds for val (filters on other keys are
 * not consulted). */
bool gf_filters_ok(const struct gf_filters *fs, const char *key, const char *val)
{
	for (size_t i = 0; fs && i < fs->n; i++)
		if (strcmp(fs->v[i].key, key) == 0 && !gf_filter_match(&fs->v[i], val))
			return false;
	return true;
}

/* ---- catalog listings ----------------------------------------------------------- */

enum kind { K_JOBS, K_RANKS, K_METRICS, K_LEVELS, K_AGGS };

const char *const gf_agg_names[AG_N] = {"avg",
					"raw",
					"min",
					"max",
					"first",
					"last",
					"sum",
					"count",
					"p50",
					"p90",
					"p99",
					"m4",
					"crossrank-mean",
					"crossrank-min",
					"crossrank-max",
					"crossrank-median"};

struct list_ctx {
	struct names *out;
	enum kind kind;
	const char *metric; /* NULL: every metric */
	const struct gf_filters *fs;
	bool found; /* the job has the metric */
};

static int job_cb(void *arg, const char *job, uint64_t nseries)
{
	struct list_ctx *c = arg;
	(void)nseries;
	if (!gf_filters_ok(c->fs, "job", job))
		return 0;
	return gf_names_add(c->out, job, strlen(job));
}

static int series_cb(void *arg, const struct mdl_series_key *k, uint64_t id)
{
	struct list_ctx *c = arg;
	char rank[16];
	(void)id;
	if (c->metric && strcmp(c->metric, k->metric))
		return 0;
	c->found = true;
	if (c->kind == K_JOBS)
		return 1; /* enough: stop the scan */
	gf_rank_text(k->rank, rank);
	if (c->kind == K_RANKS)
		return gf_filters_ok(c->fs, "rank", rank) ? gf_names_add(c->out, rank, strlen(rank))
							  : 0;
	return gf_filters_ok(c->fs, "metric", k->metric)
		   ? gf_names_add(c->out, k->metric, strlen(k->metric))
		   : 0;
}

static int list_fail(struct gf *g, int rc)
{
	if (rc == RDB_ELIMIT)
		return gf_fail(g, 400, "more than %u distinct names: select a job", GF_MAX_NAMES);
	return rc == RDB_EINVAL ? rc : gf_fail(g, 500, "listing the catalog: %s", rdb_strerror(rc));
}

/* The jobs of the set (all when not constrained) that pass the job filters. */
int gf_list_jobs(struct gf *g, const struct gf_set *want, const struct gf_filters *fs,
		 struct names *out)
{
	struct names all = {0};
	struct list_ctx c = {.out = &all, .fs = fs};
	int rc = qry_list_jobs(g->sto, job_cb, &c);
	for (size_t i = 0; rc == 0 && i < all.n; i++)
		if (!want || gf_set_has(want, all.v[i]))
			rc = gf_names_add(out, all.v[i], strlen(all.v[i]));
	gf_names_free(&all);
	return rc ? list_fail(g, rc) : 0;
}

/* Distinct values of a kind over the selected jobs, sorted. */
static int list_values(struct gf *g, enum kind kind, const struct gf_set *jobs, const char *metric,
		       const struct gf_filters *fs, struct names *out)
{
	static const char *const levels[] = {"debug", "info", "warn", "error", "fatal"};
	struct names js = {0};
	int rc = 0;
	for (size_t i = 0; kind == K_LEVELS && rc == 0 && i < 5; i++)
		rc = gf_names_add(out, levels[i], strlen(levels[i]));
	for (size_t i = 0; kind == K_AGGS && rc == 0 && i < AG_N; i++)
		rc = gf_names_add(out, gf_agg_names[i], strlen(gf_agg_names[i]));
	if (kind == K_LEVELS || kind == K_AGGS)
		return gf_chk(g, rc);
	rc = gf_list_jobs(g, jobs, fs, &js);
	if (rc == 0 && kind == K_JOBS && !metric) {
		*out = js;
		return 0;
	}
	for (size_t i = 0; rc == 0 && i < js.n; i++) {
		struct list_ctx c = {.out = out, .kind = kind, .metric = metric, .fs = fs};
		rc = qry_list_series(g->sto, js.v[i], series_cb, &c);
		if (rc == 1)
			rc = 0;
		if (rc == 0 && kind == K_JOBS && c.found)
			rc = gf_names_add(out, js.v[i], strlen(js.v[i]));
	}
	if (rc == 0)
		names_uniq(out);
	gf_names_free(&js);
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
			rc = gf_put_str(g->out, st == ST_TEXT || st == ST_STRING ? v : l);
		if (rc == 0 && (st == ST_VARIABLE || st == ST_OPTION))
			rc = rdb_buf_puts(g->out,
					  st == ST_VARIABLE ? ",\"__value\":" : ",\"value\":");
		if (rc == 0 && (st == ST_VARIABLE || st == ST_OPTION))
			rc = gf_put_str(g->out, v);
		if (rc == 0 && st != ST_STRING)
			rc = rdb_buf_putc(g->out, '}');
	}
	return gf_chk(g, rc ? rc : rdb_buf_putc(g->out, ']'));
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
		rc =
		    rdb_buf_puts(b, "},{\"name\":\"rank\",\"label\":\"Ranks\",\"type\":"
				    "\"multi-select\",\"placeholder\":\"all ranks\",\"width\":24}");
	if (rc == 0 && logs)
		rc = rdb_buf_puts(b, ",{\"name\":\"level\",\"label\":\"Level at least\",\"type\":"
				     "\"select\",\"placeholder\":\"debug\",\"width\":16},"
				     "{\"name\":\"limit\",\"label\":\"Limit\",\"type\":\"input\","
				     "\"placeholder\":\"1000\",\"width\":12}]}");
	if (rc == 0 && !logs)
		rc = rdb_buf_puts(b, ",{\"name\":\"agg\",\"label\":\"Aggregate\",\"type\":"
				     "\"select\",\"placeholder\":\"m4\",\"width\":20,"
				     "\"options\":");
	if (rc == 0 && !logs)
		rc = list_values(g, K_AGGS, NULL, NULL, NULL, &aggs);
	if (rc == 0 && !logs)
		rc = write_values(g, &aggs, K_AGGS, ST_OPTION);
	if (rc == 0 && !logs)
		rc = rdb_buf_puts(b, "}]}");
	gf_names_free(&aggs);
	return gf_chk(g, rc);
}

/* Code mode sends {}; builder mode {"metric":..,"payload":{..}}: the payload's
 * job narrows the metric list. */
static int h_metrics(struct gf *g)
{
	json_t *owned, *pl = gf_payload_object(json_object_get(g->body, "payload"), &owned);
	struct gf_set jobs = {0};
	struct names metrics = {0}, all = {0};
	int rc = gf_chk(g, gf_set_json(&jobs, json_object_get(pl, "job"), false));
	if (rc == 0)
		rc = list_values(g, K_METRICS, &jobs, NULL, NULL, &metrics);
	if (rc == 0)
		rc = list_values(g, K_JOBS, NULL, NULL, NULL, &all);
	bool opts = all.n * (metrics.n + 1) <= GF_MAX_JOB_OPTIONS;
	if (rc == 0)
		rc = gf_chk(g, rdb_buf_putc(g->out, '['));
	for (size_t i = 0; rc == 0 && i <= metrics.n; i++) {
		const char *m = i < metrics.n ? metrics.v[i] : "logs";
		rc = gf_chk(g, rdb_buf_puts(g->out, i ? ",{\"value\":" : "{\"value\":"));
		if (rc == 0)
			rc = gf_chk(g, gf_put_str(g->out, m));
		if (rc == 0)
			rc = gf_chk(g, rdb_buf_puts(g->out, ",\"label\":"));
		if (rc == 0)
			rc =
			    gf_chk(g, gf_put_str(g->out, i < metrics.n ? m : "logs (log records)"));
		if (rc == 0)
			rc = write_payloads(g, &all, opts, i == metrics.n);
	}
	if (rc == 0)
		rc = gf_chk(g, rdb_buf_putc(g->out, ']'));
	gf_set_free(&jobs);
	gf_names_free(&metrics);
	gf_names_free(&all);
	json_decref(owned);
	return rc;
}

static int h_payload_options(struct gf *g)
{
	static const struct {
		const char *name;
		enum kind kind;
	} kinds[] = {{"job", K_JOBS}, {"rank", K_RANKS}, {"agg", K_AGGS}, {"level", K_LEVELS}};
	json_t *owned, *pl = gf_payload_object(json_object_get(g->body, "payload"), &owned);
	const char *name = gf_jstr(g->body, "name"), *metric = gf_jstr(g->body, "metric");
	struct gf_set jobs = {0};
	struct names vals = {0};
	size_t k = 0;
	while (name && k < 4 && strcmp(kinds[k].name, name))
		k++;
	if (metric && (!*metric || !strcmp(metric, "logs")))
		metric = NULL;
	int rc = gf_chk(g, gf_set_json(&jobs, json_object_get(pl, "job"), false));
	if (rc == 0 && name && k < 4)
		rc = list_values(g, kinds[k].kind, kinds[k].kind == K_RANKS ? &jobs : NULL, metric,
				 NULL, &vals);
	if (rc == 0)
		rc = write_values(g, &vals, name && k < 4 ? kinds[k].kind : K_AGGS, ST_OPTION);
	gf_set_free(&jobs);
	gf_names_free(&vals);
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
		int rc = arg ? gf_set_text(jobs, arg) : -ENOMEM;
		free(arg);
		return gf_chk(g, rc);
	}
	return gf_fail(g, 400,
		       "unknown variable query '%.100s' (known: jobs, ranks(<job>), "
		       "metrics, metrics(<job>), levels, aggs; or raw JSON {\"target\":\"ranks\","
		       "\"job\":\"j1\"})",
		       q);
}

static int list_query(struct gf *g, const char *q, const json_t *job, struct names *out,
		      enum kind *kind)
{
	struct gf_set jobs = {0};
	int rc = variable_kind(g, q ? q : "", &jobs, kind);
	if (rc == 0)
		rc = gf_chk(g, gf_set_json(&jobs, job, false));
	if (rc == 0 && *kind == K_RANKS && !gf_set_constrains(&jobs))
		rc = gf_fail(g, 400,
			     "variable query ranks needs a job: ranks(j1), or raw JSON "
			     "{\"target\":\"ranks\",\"job\":\"$job\"}");
	if (rc == 0)
		rc = list_values(g, *kind, &jobs, NULL, NULL, out);
	gf_set_free(&jobs);
	return rc;
}

static int h_variable(struct gf *g)
{
	json_t *p = json_object_get(g->body, "payload"), *owned = NULL, *obj;
	struct names vals = {0};
	enum kind kind;
	const char *q = json_is_string(p) ? json_string_value(p) : NULL;
	obj = gf_payload_object(q ? NULL : p, &owned);
	if (!obj && !q)
		obj = g->body;
	if (obj)
		q = gf_jstr(obj, "target") ? gf_jstr(obj, "target") : gf_jstr(obj, "query");
	int rc = list_query(g, q, json_object_get(obj, "job"), &vals, &kind);
	if (rc == 0)
		rc = write_values(g, &vals, kind, ST_VARIABLE);
	gf_names_free(&vals);
	json_decref(owned);
	return rc;
}

/* Legacy: names as strings; variable queries as for /variable, any other
 * text lists the metrics containing it. */
static int h_search(struct gf *g)
{
	const char *q = gf_jstr(g->body, "target");
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
				rc = gf_chk(g, gf_names_add(&keep, vals.v[i], strlen(vals.v[i])));
	}
	if (rc == 0)
		rc = write_values(g, query ? &vals : &keep, kind, ST_STRING);
	gf_names_free(&vals);
	gf_names_free(&keep);
	return rc;
}

static int h_tag_keys(struct gf *g)
{
	return gf_chk(g, rdb_buf_puts(g->out,
				      "[{\"type\":\"string\",\"text\":\"job\"},{\"type\":"
				      "\"string\",\"text\":\"rank\"},{\"type\":\"string\",\"text\":"
				      "\"metric\"},{\"type\":\"string\",\"text\":\"level\"}]"));
}

/* The values of a tag key, narrowed by the filters already chosen. */
static int h_tag_values(struct gf *g)
{
	static const char *const keys[] = {"job", "rank", "metric", "level"};
	static const enum kind kinds[] = {K_JOBS, K_RANKS, K_METRICS, K_LEVELS};
	const char *key = gf_jstr(g->body, "key");
	struct gf_filters fs = {0};
	struct names vals = {0};
	size_t k = 0;
	while (key && k < 4 && strcmp(keys[k], key))
		k++;
	int rc = gf_filters_parse(g, &fs);
	if (rc == 0 && key && k < 4) {
		/* a filter on the key itself would hide the other choices */
		for (size_t i = 0; i < fs.n; i++)
			if (!strcmp(fs.v[i].key, key))
				fs.v[i].key = "";
		rc = list_values(g, kinds[k], NULL, NULL, &fs, &vals);
	}
	if (rc == 0)
		rc = write_values(g, &vals, K_JOBS, ST_TEXT);
	gf_names_free(&vals);
	gf_filters_free(&fs);
	return rc;
}

/* ---- routing ------------------------------------------------------------------------ */

static const struct {
	const char *name;
	int (*fn)(struct gf *g);
} endpoints[] = {
    {"metrics", h_metrics},   {"metric-payload-options", h_payload_options},
    {"query", gf_h_query},    {"variable", h_variable},
    {"tag-keys", h_tag_keys}, {"tag-values", h_tag_values},
    {"search", h_search},     {"annotations", gf_h_annotations},
};

/* Parses the body (empty: {}); only /query insists on an object. */
static int parse_body(struct gf *g, const struct srv_req *req, bool need_object)
{
	json_error_t e;
	if (req->body_len == 0) {
		g->body = json_object();
		return g->body ? 0 : gf_chk(g, -ENOMEM);
	}
	g->body = json_loadb((const char *)req->body, req->body_len, JSON_DECODE_ANY, &e);
	if (!g->body)
		return gf_fail(g, 400, "request body is not valid JSON: %s (line %d, column %d)",
			       e.text, e.line, e.column);
	if (json_is_object(g->body))
		return 0;
	if (need_object)
		return gf_fail(g, 400, "request body must be a JSON object");
	json_decref(g->body);
	g->body = json_object();
	return g->body ? 0 : gf_chk(g, -ENOMEM);
}

static void respond(struct srv_req *req, struct srv_resp *resp, int (*fn)(struct gf *g),
		    bool need_object)
{
	struct srv_ctx *ctx = req->ctx;
	struct gf *g = calloc(1, sizeof(*g));
	if (!g) {
		srv_error(resp, 500, "out of memory");
		return;
	}
	*g = (struct gf){.sto = ctx->sto,
			 .max_points = ctx->cfg->max_query_points,
			 .max_bytes = ctx->cfg->max_response_bytes,
			 .out = &resp->body};
	if (parse_body(g, req, need_object) == 0 && fn(g) == 0)
		resp->status = 200;
	if (g->status) {
		resp->status = g->status;
		resp->body.len = 0;
		if (rdb_buf_puts(&resp->body, "{\"message\":") || gf_put_str(&resp->body, g->msg) ||
		    rdb_buf_puts(&resp->body, ",\"error\":") || gf_put_str(&resp->body, g->msg) ||
		    rdb_buf_putc(&resp->body, '}'))
			resp->body.len = 0;
		atomic_fetch_add(&ctx->counters.query_errors, 1);
	}
	json_decref(g->body);
	free(g);
}

static void h_root(struct srv_req *req, struct srv_resp *resp, const struct srv_route *r)
{
	(void)req;
	(void)r;
	resp->status = 200;
	rdb_buf_puts(&resp->body, "{\"status\":\"ok\",\"datasource\":\"rankdb\"}");
}

static void h_endpoint(struct srv_req *req, struct srv_resp *resp, const struct srv_route *r)
{
	respond(req, resp, endpoints[r->arg].fn, endpoints[r->arg].fn == gf_h_query);
}

/* Every endpoint takes POST (what the datasource sends) and GET; a trailing
 * slash is tolerated. */
#define GF_ROW(path, i)                                                                            \
	{                                                                                          \
		SRV_GET | SRV_POST, "/grafana/" path "/?", SRV_SCOPE_READ, h_endpoint, i,          \
		    SRV_ROUTE_QUERY, "POST", NULL, NULL                                            \
	}

static const struct srv_route rows[] = {
    {SRV_READ_METHODS | SRV_POST, "/grafana/?", SRV_SCOPE_READ, h_root, 0, 0, "GET, HEAD, POST",
     NULL, NULL},
    GF_ROW("metrics", 0),
    GF_ROW("metric-payload-options", 1),
    GF_ROW("query", 2),
    GF_ROW("variable", 3),
    GF_ROW("tag-keys", 4),
    GF_ROW("tag-values", 5),
    GF_ROW("search", 6),
    GF_ROW("annotations", 7),
    {SRV_ANY, "/grafana/*", SRV_SCOPE_READ, NULL, 0, 0, NULL,
     "no such Grafana endpoint: %.200s (known: /grafana, /grafana/metrics, "
     "/metric-payload-options, /query, /variable, /tag-keys, /tag-values, /search, "
     "/annotations)",
     NULL},
};
const struct srv_route_table srv_grafana_routes = {rows, sizeof(rows) / sizeof(rows[0])};
