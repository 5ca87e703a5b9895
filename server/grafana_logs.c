/* grafana_logs.c - log records for the Grafana JSON datasource: annotation
 * tables and logs-panel DataFrames of /query targets "annotations" and "logs"
 * (and refId "Anno"), and the legacy POST /grafana/annotations. Records are
 * read per job, newest first, at most the target's limit (GF_EVENTS_SCAN
 * matching records read per job). Internal to the Grafana module
 * (grafana_int.h). Threading: per request, no shared state.
 */
#include "server/grafana_int.h"
#include "common/rdb_err.h"
#include "common/rdb_sort.h"
#include "query/events.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static bool ev_ok(const struct gf_filters *fs, const struct mdl_event *ev)
{
	char rank[16], val[512];
	json_t *fields = NULL;
	bool ok = true;
	gf_rank_text(ev->rank, rank);
	if (!gf_filters_ok(fs, "rank", rank) ||
	    !gf_filters_ok(fs, "level", mdl_level_name(ev->level)))
		return false;
	for (size_t i = 0; ok && fs && i < fs->n; i++) {
		const char *k = fs->v[i].key;
		if (!strcmp(k, "job") || !strcmp(k, "rank") || !strcmp(k, "level") ||
		    !strcmp(k, "metric"))
			continue;
		if (!fields)
			fields = json_loadb(ev->fields, ev->fields_len, 0, NULL);
		field_text(fields, k, val, sizeof(val));
		ok = gf_filter_match(&fs->v[i], val);
	}
	json_decref(fields);
	return ok;
}

static int ev_cb(void *arg, const struct mdl_event *ev)
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
	*e = (struct evc){ev->ts_ns,
			  ev->step,
			  ev->rank,
			  ev->level,
			  m,
			  m + ev->job_len + 1,
			  m + ev->job_len + ev->text_len + 2,
			  ev->text_len};
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
	if (!gf_set_constrains(&t->ranks))
		return 0;
	if (!(*out = malloc(t->ranks.v.n * sizeof(**out))))
		return gf_chk(g, -ENOMEM);
	for (size_t i = 0; i < t->ranks.v.n; i++) {
		const char *s = t->ranks.v.v[i];
		if (srv_parse_rank(s, &(*out)[*n]))
			return gf_fail(g, 400,
				       "payload rank: a rank is an integer >= 0 or \"job\", "
				       "got '%.32s'",
				       s);
		(*n)++;
	}
	return 0;
}

static int ev_read_job(struct gf *g, struct sto_ev_filter *f, struct evlist *l)
{
	struct sto_read_error *re = malloc(sizeof(*re));
	if (!re)
		return gf_chk(g, -ENOMEM);
	l->taken = 0;
	int rc = qry_events_scan(g->sto, f, GF_EVENTS_SCAN, ev_cb, l, re);
	if (rc == 1)
		rc = 0;
	if (rc == RDB_ELIMIT)
		gf_fail(g, 400,
			"more than %u log records of job %s match: narrow the time range or "
			"raise the level (payload level, ad hoc filter level)",
			GF_EVENTS_SCAN, f->job);
	else if (rc && rc != -ENOMEM)
		gf_fail(g, 500, "reading the logs of job %s: %s", f->job,
			re->msg[0] ? re->msg : rdb_strerror(rc));
	free(re);
	return gf_chk(g, rc);
}

/* Log records of the target's jobs in the range, newest first, at most limit. */
static int collect_events(struct gf *g, const struct gf_range *r, const struct gf_filters *fs,
			  const struct tgt *t, bool anno, struct evlist *l)
{
	struct names jobs = {0};
	struct sto_ev_filter f = {.kinds = 1u << MDL_EV_LOG,
				  .from_ns = r->from_ms * 1000000,
				  .to_ns = r->to_ms * 1000000 + 999999,
				  .attempt = -1,
				  .min_level = anno ? MDL_LEVEL_WARN : MDL_LEVEL_DEBUG};
	uint32_t *ranks = NULL;
	l->limit = (size_t)t->limit;
	l->fs = fs;
	if (gf_set_constrains(&t->levels) &&
	    mdl_level_parse(t->levels.v.v[0], strlen(t->levels.v.v[0]), &f.min_level))
		return gf_fail(g, 400,
			       "payload level: unknown level '%.32s' (debug, info, warn, "
			       "error, fatal)",
			       t->levels.v.v[0]);
	int rc = ev_ranks(g, t, &ranks, &f.nranks);
	f.ranks = ranks;
	if (rc == 0)
		rc = gf_list_jobs(g, &t->jobs, fs, &jobs);
	for (size_t i = 0; rc == 0 && i < jobs.n; i++) {
		f.job = jobs.v[i];
		rc = ev_read_job(g, &f, l);
	}
	if (rc == 0 && l->n > 1)
		rdb_sort(l->v, l->n, sizeof(*l->v), cmp_evc);
	for (; rc == 0 && l->n > l->limit; l->truncated = true)
		free(l->v[--l->n].job);
	free(ranks);
	gf_names_free(&jobs);
	return rc;
}

static void ev_title(const struct evc *e, char *buf, size_t len)
{
	char rank[16], step[40] = "";
	gf_rank_text(e->rank, rank);
	if (e->step != MDL_STEP_NONE)
		snprintf(step, sizeof(step), " at step %lld", (long long)e->step);
	snprintf(buf, len, "%s on %s rank %s%s", mdl_level_name(e->level), e->job, rank, step);
}

/* time, timeEnd, title, text, tags, level, job, rank of one record. */
static int ev_row(struct rdb_buf *b, const struct evc *e, bool legacy)
{
	char title[MDL_JOB_MAX + 96], rank[16];
	int64_t ms = gf_floor_div(e->ts_ns, 1000000);
	const char *lv = mdl_level_name(e->level);
	ev_title(e, title, sizeof(title));
	gf_rank_text(e->rank, rank);
	int rc =
	    rdb_buf_printf(b, legacy ? "\"time\":%lld,\"timeEnd\":%lld,\"title\":" : "[%lld,%lld,",
			   (long long)ms, (long long)ms);
	if (rc == 0)
		rc = gf_put_str(b, title);
	if (rc == 0)
		rc = rdb_buf_puts(b, legacy ? ",\"text\":" : ",");
	if (rc == 0)
		rc = rdb_buf_json_str(b, e->text, e->text_len);
	if (rc == 0)
		rc = rdb_buf_printf(b, "%s[\"%s\",\"job=%s\",\"rank=%s\"]",
				    legacy ? ",\"tags\":" : ",", lv, e->job, rank);
	if (rc == 0 && !legacy)
		rc = rdb_buf_printf(b, ",\"%s\",\"%s\",\"%s\"]", lv, e->job, rank);
	return rc;
}

static int write_anno_table(struct gf *g, const struct tgt *t, const struct evlist *l)
{
	struct rdb_buf *b = g->out;
	int rc = gf_elem_begin(g);
	if (rc == 0)
		rc = rdb_buf_puts(b, "{\"type\":\"table\"");
	if (rc == 0)
		rc = gf_put_ref(b, t);
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
	case LC_TIME:
		return rdb_buf_printf(b, "%lld", (long long)gf_floor_div(e->ts_ns, 1000000));
	case LC_BODY:
		return rdb_buf_json_str(b, e->text, e->text_len);
	case LC_LEVEL:
		return rdb_buf_printf(b, "\"%s\"", mdl_level_name(e->level));
	case LC_JOB:
		return gf_put_str(b, e->job);
	case LC_RANK:
		gf_rank_text(e->rank, rank);
		return rdb_buf_printf(b, "\"%s\"", rank);
	case LC_STEP:
		if (e->step == MDL_STEP_NONE)
			return rdb_buf_puts(b, "null");
		return rdb_buf_printf(b, "%lld", (long long)e->step);
	default:
		return gf_put_str(b, e->fields);
	}
}

/* A DataFrame the logs panel takes: time, then the line (first string field). */
static int write_logs_frame(struct gf *g, const struct tgt *t, const struct evlist *l)
{
	static const char *const cols[LC_N][2] = {
	    {"time", "time"},	{"body", "string"}, {"level", "string"}, {"job", "string"},
	    {"rank", "string"}, {"step", "number"}, {"fields", "string"}};
	struct rdb_buf *b = g->out;
	int rc = gf_elem_begin(g);
	if (rc == 0)
		rc = rdb_buf_puts(b, "{\"name\":\"logs\"");
	if (rc == 0)
		rc = gf_put_ref(b, t);
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

int gf_run_events(struct gf *g, const struct gf_range *r, const struct gf_filters *fs,
		  const struct tgt *t, bool anno)
{
	struct evlist l = {0};
	int rc = collect_events(g, r, fs, t, anno, &l);
	g->nframes++;
	if (rc == 0)
		rc = gf_chk(g, anno ? write_anno_table(g, t, &l) : write_logs_frame(g, t, &l));
	evlist_free(&l);
	return rc;
}

/* ---- POST /annotations (legacy) ------------------------------------------------------- */

/* annotation.query: a job (or "(a|b)", "a,b"), or a JSON object payload. */
int gf_h_annotations(struct gf *g)
{
	const json_t *an = json_object_get(g->body, "annotation");
	const char *q = gf_jstr(an, "query");
	struct gf_range r;
	struct evlist l = {0};
	struct tgt t = {.name = "annotations", .limit = GF_EVENTS_DEFAULT};
	json_t *qv = q && *q == '{' ? json_string(q) : NULL;
	t.payload = gf_payload_object(qv, &t.owned);
	json_decref(qv);
	int rc = gf_parse_range(g, g->body, &r);
	if (rc == 0 && t.payload)
		rc = gf_chk(g, gf_set_json(&t.jobs, json_object_get(t.payload, "job"), false));
	else if (rc == 0 && q)
		rc = gf_chk(g, gf_set_text(&t.jobs, q));
	if (rc == 0 && t.payload)
		rc = gf_chk(g, gf_set_json(&t.levels, json_object_get(t.payload, "level"), false));
	if (rc == 0)
		rc = collect_events(g, &r, NULL, &t, true, &l);
	char *echo = an ? json_dumps(an, JSON_COMPACT) : NULL;
	if (rc == 0)
		rc = gf_chk(g, rdb_buf_putc(g->out, '['));
	for (size_t i = 0; rc == 0 && i < l.n; i++) {
		rc = rdb_buf_printf(g->out, "%s{\"annotation\":%s,", i ? "," : "",
				    echo ? echo : "null");
		if (rc == 0)
			rc = ev_row(g->out, &l.v[i], true);
		rc = gf_chk(g, rc ? rc : rdb_buf_putc(g->out, '}'));
	}
	if (rc == 0)
		rc = gf_chk(g, rdb_buf_putc(g->out, ']'));
	free(echo);
	evlist_free(&l);
	gf_tgt_free(&t);
	return rc;
}
