/* grafana_query.c - POST /grafana/query of the Grafana JSON datasource: the
 * request's time range and bucket width, target parsing, series selection
 * (exact name, else anchored regex), timeseries and table output, agg=raw,
 * and cross-rank series; log targets go to grafana_logs.c. The mapping and
 * bounds are specified at the top of grafana.c. Every read goes through
 * query/: the bucket engine for per-rank aggregates, its raw read for
 * agg=raw, and query/crossrank.c's partial and rows for the crossrank-*
 * series (the one cross-rank implementation, as GET /api/v1/query/crossrank
 * computes it). Internal to the Grafana module (grafana_int.h). Threading:
 * per request, no shared state.
 */
#include "server/grafana_int.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "common/rdb_time.h"
#include "common/rdb_sort.h"
#include "query/agg.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XR_MASK (BIT(AG_XMEAN) | BIT(AG_XMIN) | BIT(AG_XMAX) | BIT(AG_XMEDIAN))
#define Q_MASK	(BIT(AG_P50) | BIT(AG_P90) | BIT(AG_P99))

/* ---- time range --------------------------------------------------------------- */

/* An integer of ms since the epoch, or any time srv_parse_time_ns reads
 * (RFC 3339 as moment.toISOString writes it, now-1h), clamped to what ns
 * can hold. */
static bool parse_iso_ms(const char *s, int64_t *ms)
{
	char *end;
	long long n = strtoll(s, &end, 10);
	int64_t ns;
	if (end != s && *end == 0) {
		*ms = n;
	} else if (srv_parse_time_ns(s, rdb_now_ns(), &ns) == 0) {
		*ms = ns / 1000000 - (ns % 1000000 < 0);
	} else {
		return false;
	}
	*ms = *ms > GF_MS_MAX ? GF_MS_MAX : *ms < -GF_MS_MAX ? -GF_MS_MAX : *ms;
	return true;
}

static int parse_time(struct gf *g, const json_t *v, const char *what, int64_t *ms)
{
	if (json_is_number(v)) {
		double d = json_number_value(v);
		*ms = d > (double)GF_MS_MAX    ? GF_MS_MAX
		      : d < (double)-GF_MS_MAX ? -GF_MS_MAX
					       : (int64_t)d;
		return 0;
	}
	if (json_is_string(v) && parse_iso_ms(json_string_value(v), ms))
		return 0;
	return gf_fail(g, 400,
		       "range.%s must be an ISO-8601 time such as "
		       "\"2024-10-18T06:33:44.866Z\", \"now-1h\" or ms since the epoch",
		       what);
}

/* "500ms", "30s", "5m", "1h", "1d", "1w" -> ms; 0 if unreadable. */
static int64_t duration_ms(const char *s)
{
	static const struct {
		const char *unit;
		int64_t ms;
	} units[] = {{"ms", 1},	      {"s", 1000},	{"m", 60000},	   {"h", 3600000},
		     {"d", 86400000}, {"w", 604800000}, {"y", 31536000000}};
	char *end;
	double v = s ? strtod(s, &end) : 0;
	if (!s || end == s || !(v > 0) || v > 1e12)
		return 0;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcmp(end, units[i].unit) == 0)
			return (int64_t)ceil(v * (double)units[i].ms);
	return 0;
}

static int64_t nbuckets(const struct gf_range *r, int64_t w)
{
	return gf_floor_div(r->to_ms, w) - gf_floor_div(r->from_ms, w) + 1;
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

int gf_parse_range(struct gf *g, const json_t *body, struct gf_range *r)
{
	const json_t *range = json_object_get(body, "range");
	const json_t *mdp = json_object_get(body, "maxDataPoints");
	const json_t *ims = json_object_get(body, "intervalMs");
	if (!json_is_object(range))
		return gf_fail(g, 400,
			       "range is required: {\"from\":ISO-8601,\"to\":ISO-8601} "
			       "(Grafana sends it with every request)");
	int rc = parse_time(g, json_object_get(range, "from"), "from", &r->from_ms);
	if (rc == 0)
		rc = parse_time(g, json_object_get(range, "to"), "to", &r->to_ms);
	if (rc)
		return rc;
	if (r->from_ms > r->to_ms)
		return gf_fail(g, 400, "range.from is after range.to");
	int64_t maxdp = GF_DEFAULT_MAXDP, interval = 0;
	if (json_is_number(mdp) && json_number_value(mdp) >= 1)
		maxdp = json_number_value(mdp) > GF_MAX_MAXDP ? GF_MAX_MAXDP
							      : (int64_t)json_number_value(mdp);
	if (json_is_number(ims) && json_number_value(ims) > 0 && json_number_value(ims) < 1e15)
		interval = (int64_t)ceil(json_number_value(ims));
	else
		interval = duration_ms(gf_jstr(body, "interval"));
	choose_width(r, maxdp, interval);
	return 0;
}

/* ---- targets -------------------------------------------------------------------- */

void gf_tgt_free(struct tgt *t)
{
	gf_set_free(&t->jobs);
	gf_set_free(&t->ranks);
	gf_set_free(&t->levels);
	json_decref(t->owned);
}

/* The payload as an object: JSON of any type is tolerated, a string holding
 * a JSON object is parsed, anything else constrains nothing. */
json_t *gf_payload_object(json_t *p, json_t **owned)
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
	int rc = gf_set_json(&s, pget(t, "agg", "aggs"), false);
	for (size_t i = 0; rc == 0 && i < s.v.n; i++) {
		int k = 0;
		while (k < AG_N && strcmp(gf_agg_names[k], s.v.v[i]))
			k++;
		if (k == AG_N)
			rc = gf_fail(g, 400,
				     "target '%.200s': unknown agg '%.40s' (known: m4, avg, "
				     "raw, min, max, first, last, sum, count, p50, p90, p99, "
				     "crossrank-mean, crossrank-min, crossrank-max, "
				     "crossrank-median)",
				     t->name, s.v.v[i]);
		else
			t->aggs |= BIT(k);
	}
	if (t->aggs == 0)
		t->aggs = BIT(AG_M4); /* visually lossless (Jugel et al., VLDB 2014) */
	gf_set_free(&s);
	return gf_chk(g, rc);
}

static int tgt_limit(struct gf *g, struct tgt *t)
{
	const json_t *v = json_object_get(t->payload, "limit");
	char *end = NULL;
	double d = json_is_number(v)   ? json_number_value(v)
		   : json_is_string(v) ? strtod(json_string_value(v), &end)
				       : GF_EVENTS_DEFAULT;
	if ((end && *end) || !(d >= 1 && d <= GF_EVENTS_MAX))
		return gf_fail(g, 400, "target '%.200s': payload limit must be 1..%d log records",
			       t->name, GF_EVENTS_MAX);
	t->limit = (int64_t)d;
	return 0;
}

static int tgt_parse(struct gf *g, json_t *jt, struct tgt *t)
{
	memset(t, 0, sizeof(*t));
	t->name = json_is_string(jt) ? json_string_value(jt) : gf_jstr(jt, "target");
	t->name = t->name ? t->name : "";
	t->ref_id = gf_jstr(jt, "refId");
	t->hide = json_is_true(json_object_get(jt, "hide"));
	json_t *p = json_object_get(jt, "payload");
	t->payload = gf_payload_object(p ? p : json_object_get(jt, "data"), &t->owned);
	const char *type = gf_jstr(jt, "type"), *format = gf_jstr(t->payload, "format");
	t->table = (type && !strcmp(type, "table")) || (format && !strcmp(format, "table"));
	int rc = gf_set_json(&t->jobs, pget(t, "job", "jobs"), false);
	if (rc == 0)
		rc = gf_set_json(&t->ranks, pget(t, "rank", "ranks"), false);
	if (rc == 0)
		rc = gf_set_json(&t->levels, pget(t, "level", "levels"), false);
	rc = gf_chk(g, rc);
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
	struct gf_regex rx;
	struct gf *g;
	char re_why[200];     /* why the target is not a regex */
	struct qry_series *v; /* owned; exact matches only once seen_exact */
	size_t n, cap;
	size_t nexact, nregex;	     /* matching series, counted past the cap too */
	bool seen_exact, seen_regex; /* a metric name matched, whatever rank and filters */
};

static int sel_store(struct sel *s, const struct mdl_series_key *k, uint64_t id)
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

static int sel_cb(void *arg, const struct mdl_series_key *k, uint64_t id)
{
	struct sel *s = arg;
	char rank[16];
	bool exact = strcmp(k->metric, s->t->name) == 0;
	if (!exact && (s->seen_exact || !s->rx.ok || !gf_regex_match(s->g, &s->rx, k->metric)))
		return 0;
	if (exact && !s->seen_exact)
		s->n = 0; /* regex matches so far lose to the exact name */
	s->seen_exact |= exact;
	s->seen_regex |= !exact;
	gf_rank_text(k->rank, rank);
	if (!gf_set_has(&s->t->ranks, rank) || !gf_filters_ok(s->fs, "rank", rank) ||
	    !gf_filters_ok(s->fs, "metric", k->metric))
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
	gf_regex_free(&s->rx);
	free(s->v);
}

static int select_series(struct gf *g, const struct gf_filters *fs, const struct tgt *t,
			 struct sel *s)
{
	struct names jobs = {0};
	memset(s, 0, sizeof(*s));
	s->t = t;
	s->fs = fs;
	s->g = g;
	int rc = gf_regex_compile(&s->rx, t->name, s->re_why, sizeof(s->re_why));
	rc = rc == RDB_EINVAL ? 0 : rc;
	if (rc == 0)
		rc = gf_list_jobs(g, &t->jobs, fs, &jobs);
	for (size_t i = 0; rc == 0 && i < jobs.n; i++) {
		rc = qry_list_series(g->sto, jobs.v[i], sel_cb, s);
		if (rc && rc != -ENOMEM)
			rc = gf_fail(g, 500, "listing the series of job %s: %s", jobs.v[i],
				     rdb_strerror(rc));
	}
	gf_names_free(&jobs);
	if (rc == 0 && s->n > 1)
		rdb_sort(s->v, s->n, sizeof(*s->v), cmp_sel);
	return gf_chk(g, rc);
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
		return gf_fail(g, 400,
			       "unknown target '%.200s': no metric of the selected jobs is "
			       "named so%s%s (POST /grafana/metrics lists the metrics)",
			       name, s->rx.ok ? " or matches it as a regex" : "; as a regex: ",
			       s->rx.ok ? "" : s->re_why);
	if (total > GF_MAX_READ)
		return gf_fail(
		    g, 400,
		    "target '%.200s' selects %zu series (at most %u): narrow it "
		    "with payload job and rank, or ad hoc filters on job, rank or metric",
		    name, total, GF_MAX_READ);
	if (!s->t->table && g->nframes + frames > GF_MAX_SERIES)
		return gf_fail(
		    g, 400,
		    "target '%.200s' would return %zu series (at most %u per "
		    "request): narrow it with payload job and rank or ad hoc filters, or "
		    "use a crossrank-* agg (one series per job)",
		    name, frames, GF_MAX_SERIES);
	return 0;
}

/* ---- series output ------------------------------------------------------------------ */

/* Writes one target's series: timeseries elements, or rows of one table. */
struct wr {
	struct gf *g;
	const struct tgt *t;
	size_t npts;  /* points of the open series */
	size_t nrows; /* rows of the table */
	const char *job, *metric;
	char rank[16]; /* "" for a cross-rank series */
	enum agg agg;
};

static const char *agg_label(enum agg a)
{
	return a >= AG_XMEAN ? gf_agg_names[a] + strlen("crossrank-") : gf_agg_names[a];
}

int gf_put_ref(struct rdb_buf *b, const struct tgt *t)
{
	if (!t->ref_id)
		return 0;
	int rc = rdb_buf_puts(b, ",\"refId\":");
	return rc ? rc : gf_put_str(b, t->ref_id);
}

static int wr_table_open(struct wr *w)
{
	struct rdb_buf *b = w->g->out;
	int rc = gf_elem_begin(w->g);
	if (rc == 0)
		rc = rdb_buf_puts(b, "{\"type\":\"table\"");
	if (rc == 0)
		rc = gf_put_ref(b, w->t);
	if (rc == 0)
		rc = rdb_buf_puts(b,
				  ",\"columns\":[{\"text\":\"time\",\"type\":\"time\"},"
				  "{\"text\":\"job\",\"type\":\"string\"},{\"text\":\"rank\","
				  "\"type\":\"string\"},{\"text\":\"metric\",\"type\":\"string\"},"
				  "{\"text\":\"agg\",\"type\":\"string\"},{\"text\":\"value\","
				  "\"type\":\"number\"}],\"rows\":[");
	w->g->nframes++;
	return rc;
}

/* {"target":"loss{job=j1,rank=0}","refId":..,"tags":{"job":"j1","rank":"0"},"datapoints":[ */
static int wr_begin(struct wr *w, const char *job, const char *rank, const char *metric, enum agg a)
{
	struct rdb_buf *b = w->g->out;
	char name[MDL_METRIC_MAX + MDL_JOB_MAX + 80];
	const char *lab = a == AG_AVG || a == AG_M4 ? NULL : agg_label(a);
	w->job = job;
	w->metric = metric;
	w->agg = a;
	w->npts = 0;
	snprintf(w->rank, sizeof(w->rank), "%s", rank);
	if (w->t->table)
		return 0;
	snprintf(name, sizeof(name), "%s{job=%s%s%s%s%s}", metric, job, *rank ? ",rank=" : "", rank,
		 lab ? ",agg=" : "", lab ? lab : "");
	w->g->nframes++;
	int rc = gf_elem_begin(w->g);
	if (rc == 0)
		rc = rdb_buf_puts(b, "{\"target\":");
	if (rc == 0)
		rc = gf_put_str(b, name);
	if (rc == 0)
		rc = gf_put_ref(b, w->t);
	if (rc == 0)
		rc = rdb_buf_puts(b, ",\"tags\":{\"job\":");
	if (rc == 0)
		rc = gf_put_str(b, job);
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
			rc = gf_put_num(b, v, defined);
		return rc ? rc : rdb_buf_printf(b, ",%lld]", (long long)ms);
	}
	rc = rdb_buf_printf(b, "%s[%lld,", w->nrows++ ? "," : "", (long long)ms);
	if (rc == 0)
		rc = gf_put_str(b, w->job);
	if (rc == 0)
		rc = rdb_buf_printf(b, ",\"%s\",", w->rank);
	if (rc == 0)
		rc = gf_put_str(b, w->metric);
	if (rc == 0)
		rc = rdb_buf_printf(b, ",\"%s\",", gf_agg_names[w->agg]);
	if (rc == 0)
		rc = gf_put_num(b, v, defined);
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
	case AG_AVG:
		*v = b->a.sum / (double)b->a.count;
		break;
	case AG_MIN:
		*v = b->a.min;
		break;
	case AG_MAX:
		*v = b->a.max;
		break;
	case AG_SUM:
		*v = b->a.sum;
		break;
	case AG_COUNT:
		*v = (double)b->a.count;
		return true;
	case AG_FIRST:
		*v = rdb_bits_f64(b->a.first_bits);
		return true;
	case AG_LAST:
		*v = rdb_bits_f64(b->a.last_bits);
		return true;
	case AG_P50:
	case AG_P90:
	case AG_P99:
		if (b->a.count)
			*v = qry_quantile_sorted(bs->vals + b->vals_off, b->a.count, q[a]);
		break;
	default:
		return false;
	}
	return b->a.count > 0;
}

static int emit_buckets(struct wr *w, const struct qry_series *s, const struct qry_buckets *bs,
			enum agg a, int64_t width_ms)
{
	char rank[16];
	double v = 0;
	gf_rank_text(s->key.rank, rank);
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
		return gf_fail(
		    g, 400,
		    "the query would read more than max_query_points (%zu) points: "
		    "narrow the time range, lower maxDataPoints (whole chunks inside one "
		    "bucket cost nothing), or select fewer series (payload job and rank, "
		    "ad hoc filters)",
		    sc->max_points);
	return gf_fail(g, 500, "series job=%s rank=%u metric=%s: %s", s->key.job, s->key.rank,
		       s->key.metric, sc->re.msg[0] ? sc->re.msg : rdb_strerror(rc));
}

/* agg=raw: the stored points when there are at most max_points of them in the
 * range, else the bucket averages (still one point per bucket). */
static int emit_raw(struct wr *w, struct qry_scan *sc, const struct qry_series *s,
		    const struct sto_range *range, const struct gf_range *r,
		    const struct qry_buckets *bs)
{
	char rank[16];
	int rc = qry_read_series(sc, s->id, range, (size_t)r->max_points, &sc->tmp);
	if (rc == RDB_ELIMIT)
		return emit_buckets(w, s, bs, AG_RAW, r->width_ms);
	if (rc)
		return read_fail(w->g, rc, s, sc);
	gf_rank_text(s->key.rank, rank);
	rc = wr_begin(w, s->key.job, rank, s->key.metric, AG_RAW);
	for (size_t i = 0; rc == 0 && i < sc->tmp.n; i++)
		rc = wr_point(w, gf_floor_div(sc->tmp.ts_ns[i], 1000000),
			      rdb_bits_f64(sc->tmp.value[i]), true);
	return rc ? rc : wr_end(w);
}

/* M4 of one bucket from its aggregate alone (the raw points are too many or
 * rolled up): first and last at their times, min and max at a third and two
 * thirds between them (times ascending; equal in a bucket spanning under
 * 3 ms, so that no extreme is ever dropped). */
static int m4_from_agg(struct wr *w, const struct qry_bucket *b)
{
	int64_t t0 = gf_floor_div(b->a.first_ts_ns, 1000000);
	int64_t t1 = gf_floor_div(b->a.last_ts_ns, 1000000);
	int64_t t_min = t0 + (t1 - t0) / 3, t_max = t0 + 2 * (t1 - t0) / 3;
	int rc = wr_point(w, t0, rdb_bits_f64(b->a.first_bits), true);
	if (rc == 0 && b->a.count)
		rc = wr_point(w, t_min, b->a.min, true);
	if (rc == 0 && b->a.count && b->a.max != b->a.min)
		rc = wr_point(w, t_max, b->a.max, true);
	if (rc == 0 && t1 != t0)
		rc = wr_point(w, t1, rdb_bits_f64(b->a.last_bits), true);
	return rc;
}

/* Writes the points idx[0..n) of p (ascending, duplicates skipped). */
static int m4_flush(struct wr *w, const struct mdl_cols *p, size_t *idx, size_t n)
{
	int rc = 0;
	for (size_t i = 1; i < n; i++) /* insertion sort of at most 4 */
		for (size_t j = i; j > 0 && idx[j - 1] > idx[j]; j--) {
			size_t t = idx[j];
			idx[j] = idx[j - 1];
			idx[j - 1] = t;
		}
	for (size_t i = 0; rc == 0 && i < n; i++)
		if (i == 0 || idx[i] != idx[i - 1])
			rc = wr_point(w, gf_floor_div(p->ts_ns[idx[i]], 1000000),
				      rdb_bits_f64(p->value[idx[i]]), true);
	return rc;
}

/* agg=m4 (the default): per bucket the first, min, max and last stored
 * points at their own times (M4, Jugel et al., VLDB 2014), read raw when the
 * range holds at most max_query_points points, else (and where retention
 * left only rollups) from the bucket aggregates. */
static int emit_m4(struct wr *w, struct qry_scan *sc, const struct qry_series *s,
		   const struct sto_range *range, const struct gf_range *r,
		   const struct qry_buckets *bs)
{
	char rank[16];
	uint64_t raw_count = 0;
	for (size_t i = 0; i < bs->n; i++)
		raw_count += bs->b[i].a.count + bs->b[i].a.nan_count;
	int rc = qry_read_series(sc, s->id, range, w->g->max_points, &sc->tmp);
	bool raw = rc == 0 && sc->tmp.n == raw_count; /* else rolled up in part */
	if (rc && rc != RDB_ELIMIT)
		return read_fail(w->g, rc, s, sc);
	gf_rank_text(s->key.rank, rank);
	rc = wr_begin(w, s->key.job, rank, s->key.metric, AG_M4);
	if (!raw) {
		for (size_t i = 0; rc == 0 && i < bs->n; i++)
			rc = m4_from_agg(w, &bs->b[i]);
		return rc ? rc : wr_end(w);
	}
	const struct mdl_cols *p = &sc->tmp;
	size_t idx[4] = {0, 0, 0, 0}, mn = 0, mx = 0;
	bool have = false, val = false;
	int64_t key = 0;
	for (size_t i = 0; rc == 0 && i < p->n; i++) {
		int64_t k = gf_floor_div(gf_floor_div(p->ts_ns[i], 1000000), r->width_ms);
		if (have && k != key) {
			size_t b4[4] = {idx[0], val ? mn : idx[3], val ? mx : idx[3], idx[3]};
			rc = m4_flush(w, p, b4, 4);
			have = val = false;
		}
		double v = rdb_bits_f64(p->value[i]);
		if (!have) {
			have = true;
			key = k;
			idx[0] = i;
		}
		idx[3] = i;
		if (v == v && (!val || v < rdb_bits_f64(p->value[mn])))
			mn = i;
		if (v == v && (!val || v > rdb_bits_f64(p->value[mx])))
			mx = i;
		if (v == v && !val) {
			val = true;
			mn = mx = i;
		}
	}
	if (rc == 0 && have) {
		size_t b4[4] = {idx[0], val ? mn : idx[3], val ? mx : idx[3], idx[3]};
		rc = m4_flush(w, p, b4, 4);
	}
	return rc ? rc : wr_end(w);
}

/* ---- cross-rank series ------------------------------------------------------------- */

#define XR_COLS (QRY_XR_MEAN | QRY_XR_MIN | QRY_XR_MAX | QRY_XR_MEDIAN)

/* A cross-rank row's value for agg a. */
static double xr_value(const struct qry_xr_row *r, enum agg a)
{
	switch (a) {
	case AG_XMIN:
		return r->min;
	case AG_XMAX:
		return r->max;
	case AG_XMEDIAN:
		return r->median;
	default:
		return r->mean;
	}
}

/* Writes the requested cross-rank series of one (job, metric) from the
 * ranks' partial x, then empties x. */
static int xr_flush(struct wr *w, struct qry_xr_part *x, const struct mdl_series_key *k,
		    uint32_t aggs, int64_t width_ms)
{
	struct qry_xr_row *rows = NULL;
	size_t n = 0;
	int rc = x->n ? qry_xr_rows(x, XR_COLS, NULL, 0, &rows, &n) : 0;
	for (int a = AG_XMEAN; n && rc == 0 && a <= AG_XMEDIAN; a++) {
		if (!(aggs & BIT(a)))
			continue;
		rc = wr_begin(w, k->job, "", k->metric, (enum agg)a);
		for (size_t i = 0; rc == 0 && i < n; i++)
			rc = wr_point(w, rows[i].key * width_ms, xr_value(&rows[i], (enum agg)a),
				      true);
		if (rc == 0)
			rc = wr_end(w);
	}
	free(rows);
	qry_xr_part_free(x);
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
		else if (a == AG_M4)
			rc = emit_m4(w, sc, s, &bk->range, r, bs);
		else
			rc = emit_buckets(w, s, bs, (enum agg)a, r->width_ms);
	}
	return rc;
}

static int metric_loop(struct gf *g, struct wr *w, const struct sel *s, const struct gf_range *r0)
{
	struct gf_range rr = *r0, *r = &rr;
	struct qry_buckets bs = {0};
	struct qry_xr_part xr = {0};
	uint32_t aggs = w->t->aggs;
	struct qry_bucketing bk = {
	    .range = {r->from_ms * 1000000, r->to_ms * 1000000 + 999999, false, 0, INT64_MAX},
	    .axis = QRY_AXIS_TIME,
	    .width = r->width_ms * 1000000,
	    .attempt = QRY_ATTEMPT_LATEST,
	    .need_values = (aggs & Q_MASK) != 0};
	struct qry_scan *sc = malloc(sizeof(*sc));
	int rc = sc ? 0 : -ENOMEM;
	if (sc)
		qry_scan_init(sc, g->sto, g->max_points);
	/* Where retention left only rollups they answer, at a width that is a
	 * multiple of the rollup width (quantiles need the raw values). */
	bk.use_rollups = !bk.need_values;
	uint64_t *ids = bk.use_rollups && s->n ? malloc(s->n * sizeof(*ids)) : NULL;
	for (size_t i = 0; ids && i < s->n; i++)
		ids[i] = s->v[i].id;
	if (rc == 0 && ids && (rc = qry_agg_fit_rollups(sc, ids, s->n, &bk)) == 0)
		rr.width_ms = bk.width / 1000000;
	free(ids);
	for (size_t i = 0; rc == 0 && i < s->n; i++) {
		const struct qry_series *se = &s->v[i];
		if (i && !same_group(se - 1, se))
			rc = xr_flush(w, &xr, &se[-1].key, aggs, r->width_ms);
		if (rc == 0 && (rc = qry_agg_series(sc, se->id, &bk, &bs)))
			read_fail(g, rc, se, sc);
		if (rc == 0 && bs.n)
			rc = emit_series(w, sc, se, &bk, r, &bs);
		if (rc == 0 && bs.n && (aggs & XR_MASK) && se->key.rank != MDL_RANK_JOB)
			rc = qry_xr_part_add(&xr, se->key.rank, &bs);
	}
	if (rc == 0 && s->n)
		rc = xr_flush(w, &xr, &s->v[s->n - 1].key, aggs, r->width_ms);
	qry_scan_free(sc);
	free(sc);
	qry_buckets_free(&bs);
	qry_xr_part_free(&xr);
	return gf_chk(g, rc);
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
		rc = gf_chk(g, wr_table_open(&w));
	if (rc == 0)
		rc = metric_loop(g, &w, &s, r);
	if (rc == 0 && t->table)
		rc = gf_chk(g, rdb_buf_puts(g->out, "]}"));
	sel_free(&s);
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
		rc = gf_chk(g, gf_set_text(&t.jobs, t.name));
	if (rc || t.hide || (!*t.name && !anno))
		;
	else if (anno || logs)
		rc = gf_run_events(g, r, fs, &t, anno);
	else
		rc = run_metrics(g, r, fs, &t);
	gf_tgt_free(&t);
	return rc;
}

int gf_h_query(struct gf *g)
{
	struct gf_range r;
	struct gf_filters fs = {0};
	json_t *targets = json_object_get(g->body, "targets"), *jt;
	size_t i;
	if (!json_is_array(targets))
		return gf_fail(g, 400,
			       "targets is required: [{\"refId\":\"A\",\"target\":\"loss\","
			       "\"payload\":{\"job\":\"j1\"}}]");
	int rc = gf_parse_range(g, g->body, &r);
	if (rc == 0)
		rc = gf_filters_parse(g, &fs);
	if (rc == 0)
		rc = gf_chk(g, rdb_buf_putc(g->out, '['));
	json_array_foreach(targets, i, jt) if (rc == 0) rc = run_target(g, &r, &fs, jt);
	if (rc == 0)
		rc = gf_chk(g, rdb_buf_putc(g->out, ']'));
	gf_filters_free(&fs);
	return rc;
}
