/* test_events_query.c - log and span queries (query/events.h) over a real
 * store: events written through sto_write_req, part sealed into event
 * chunks by a checkpoint, part in the head. Checks every filter against a
 * brute-force evaluation of the written records, the order, pagination
 * across pages of equal timestamps (the union of the pages is exactly the
 * one big query), bounded reads that must narrow their window, cursor
 * tampering, unknown jobs, logs around a step, the span timeline and the
 * Grafana annotations. */
#include "check.h"
#include "common/rdb_err.h"
#include "query/events.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T0    1700000000000000000ll
#define NLOGS 300
#define NDUP  3

struct rec {
	uint32_t rank, attempt;
	uint8_t level;
	int64_t ts_ns, step;
	char msg[64], fields[64];
};

static struct rec recs[NLOGS + NDUP];
static size_t nrecs;
static char base[4096];

static void make_recs(void)
{
	for (int i = 0; i < NLOGS; i++) {
		struct rec *r = &recs[nrecs++];
		r->rank = (uint32_t)(i % 4);
		r->attempt = i >= 250 ? 1 : 0;
		r->level = (uint8_t)(i % 5);
		r->ts_ns = T0 + (i / 7) * 1000; /* groups of 7 share a timestamp */
		r->step = i % 13 == 0 ? MDL_STEP_NONE : i / 10;
		snprintf(r->msg, sizeof(r->msg), "msg %d alpha%s", i, i % 3 ? "" : " NCCL timeout");
		snprintf(r->fields, sizeof(r->fields), "{\"host\":\"h%d\",\"i\":%d}", i % 2, i);
	}
	for (int i = 0; i < NDUP; i++) { /* identical records */
		struct rec *r = &recs[nrecs++];
		*r = (struct rec){.rank = 2, .level = 3, .ts_ns = T0 + 5000, .step = 50};
		snprintf(r->msg, sizeof(r->msg), "duplicate");
		snprintf(r->fields, sizeof(r->fields), "{}");
	}
}

static int write_recs(struct sto *s, size_t from, size_t to)
{
	struct mdl_events *b;
	struct sto_write_result res;
	int rc = mdl_events_new(1024, 1 << 20, &b);
	for (size_t i = from; rc == 0 && i < to; i++) {
		struct mdl_event e = {.kind = MDL_EV_LOG,
				      .level = recs[i].level,
				      .rank = recs[i].rank,
				      .attempt = recs[i].attempt,
				      .ts_ns = recs[i].ts_ns,
				      .step = recs[i].step,
				      .job = "ev",
				      .job_len = 2,
				      .text = recs[i].msg,
				      .text_len = strlen(recs[i].msg),
				      .fields = recs[i].fields,
				      .fields_len = strlen(recs[i].fields)};
		rc = mdl_events_add(b, &e);
	}
	struct sto_write_req req = {.events = b};
	if (rc == 0)
		rc = sto_write_req(s, &req, &res);
	mdl_events_free(b);
	return rc;
}

/* spans: steps 0..4, ranks 0..1, forward+backward; step 2 rank 0 again as attempt 1 */
static int write_spans(struct sto *s)
{
	struct mdl_events *b;
	struct sto_write_result res;
	int rc = mdl_events_new(1024, 1 << 20, &b);
	for (int step = 0; step < 5; step++)
		for (uint32_t rank = 0; rank < 2; rank++)
			for (int a = 0; a < (step == 2 && rank == 0 ? 2 : 1); a++) {
				int64_t t = T0 + step * 1000000 + a * 500000;
				struct mdl_event e = {.kind = MDL_EV_SPAN,
						      .rank = rank,
						      .attempt = (uint32_t)a,
						      .ts_ns = t,
						      .step = step,
						      .duration_ns = 100 + rank,
						      .job = "ev",
						      .job_len = 2,
						      .text = "forward",
						      .text_len = 7,
						      .fields = "",
						      .fields_len = 0};
				if (rc == 0)
					rc = mdl_events_add(b, &e);
				e.ts_ns = t + 200;
				e.text = "backward";
				e.text_len = 8;
				e.duration_ns = 300;
				if (rc == 0)
					rc = mdl_events_add(b, &e);
			}
	struct sto_write_req req = {.events = b};
	if (rc == 0)
		rc = sto_write_req(s, &req, &res);
	mdl_events_free(b);
	return rc;
}

static struct sto *open_store(void)
{
	struct sto_options o;
	struct sto *s = NULL;
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/store", base);
	sto_options_default(&o);
	o.data_dir = dir;
	o.sync = STO_SYNC_NONE;
	o.index_map_bytes = 64ull << 20;
	o.chunk_max_points = 64;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	return s;
}

/* ---- helpers ------------------------------------------------------------------ */

/* The HTTP status a query error code stands for (as server/query_json.c). */
static int status_of(enum qry_code c)
{
	return c == QRY_E_INVALID     ? 400
	       : c == QRY_E_NOT_FOUND ? 404
	       : c == QRY_E_TOO_LARGE ? 413
	       : c == QRY_E_LIMIT     ? 422
				      : 500;
}

/* The typed results as JSON trees with the API's member names, so the checks
 * below read them as a client would. */
static json_t *log_json(const struct mdl_event *e, int at_step)
{
	json_t *o = json_object();
	json_object_set_new(o, "ts", json_integer(e->ts_ns));
	json_object_set_new(o, "rank", json_integer(e->rank));
	json_object_set_new(o, "message", json_stringn(e->text, e->text_len));
	json_t *f = e->fields_len ? json_loadb(e->fields, e->fields_len, 0, NULL) : json_object();
	json_object_set_new(o, "fields", f ? f : json_null());
	if (at_step >= 0)
		json_object_set_new(o, "at_step", json_boolean(at_step));
	return o;
}

static json_t *logs_json(const struct qry_events *l, int64_t step, bool at)
{
	json_t *a = json_array();
	for (size_t i = 0; i < l->n; i++)
		json_array_append_new(a,
				      log_json(&l->v[i]->ev, at ? l->v[i]->ev.step == step : -1));
	return a;
}

static json_t *run_logs(struct sto *s, struct qry_logs_req *q, int *status)
{
	struct qry_log_page page;
	struct qry_error err = {0};
	q->filter.job = q->filter.job ? q->filter.job : "ev";
	int rc = qry_logs(s, q, &page, &err);
	*status = rc ? status_of(err.code) : 200;
	if (rc)
		return NULL;
	json_t *j = json_object();
	json_object_set_new(j, "logs", logs_json(&page.logs, 0, false));
	json_object_set_new(j, "next_cursor",
			    page.next_cursor[0] ? json_string(page.next_cursor) : json_null());
	qry_log_page_free(&page);
	return j;
}

static struct sto_ev_filter all_filter(void)
{
	return (struct sto_ev_filter){.from_ns = INT64_MIN, .to_ns = INT64_MAX, .attempt = -1};
}

static bool words_in(const char *msg, const char *fields)
{
	return strstr(msg, "NCCL timeout") != NULL || strstr(fields, "nccl") != NULL;
}

static bool matches(const struct rec *r, const struct sto_ev_filter *f, int which)
{
	bool rank_ok = f->nranks == 0;
	for (size_t i = 0; i < f->nranks; i++)
		rank_ok |= f->ranks[i] == r->rank;
	bool step_ok = !f->by_step || (r->step != MDL_STEP_NONE && r->step >= f->step_from &&
				       r->step <= f->step_to);
	bool attempt_ok = f->attempt < 0 || r->attempt == (uint32_t)f->attempt;
	bool field_ok = which != 1 || strstr(r->fields, "\"host\":\"h1\"") != NULL;
	bool text_ok = which != 2 || words_in(r->msg, r->fields);
	return rank_ok && step_ok && attempt_ok && field_ok && text_ok &&
	       r->level >= f->min_level && r->ts_ns >= f->from_ns && r->ts_ns <= f->to_ns;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Checks a logs array: order, and the multiset of (msg|fields) == expected. */
static void check_logs(json_t *logs, const struct sto_ev_filter *f, int which)
{
	size_t n = json_array_size(logs), want = 0, bad_order = 0;
	char **got = calloc(n + 1, sizeof(*got)), **exp = calloc(nrecs, sizeof(*exp));
	for (size_t i = 0; i < nrecs; i++)
		if (matches(&recs[i], f, which)) {
			char tmp[160];
			snprintf(tmp, sizeof(tmp), "%s|%s", recs[i].msg, recs[i].fields);
			exp[want++] = strdup(tmp);
		}
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(logs, i), *p = i ? json_array_get(logs, i - 1) : NULL;
		char *fields =
		    json_dumps(json_object_get(e, "fields"), JSON_COMPACT | JSON_PRESERVE_ORDER);
		char tmp[200];
		snprintf(tmp, sizeof(tmp), "%s|%s",
			 json_string_value(json_object_get(e, "message")), fields);
		free(fields);
		got[i] = strdup(tmp);
		json_int_t ts = json_integer_value(json_object_get(e, "ts"));
		json_int_t pts = p ? json_integer_value(json_object_get(p, "ts")) : ts;
		json_int_t r = json_integer_value(json_object_get(e, "rank"));
		json_int_t pr = p ? json_integer_value(json_object_get(p, "rank")) : r;
		bad_order += ts > pts || (ts == pts && r < pr);
	}
	CHECK_EQ_INT(n, want);
	CHECK_EQ_INT(bad_order, 0);
	qsort(got, n, sizeof(*got), cmp_str);
	qsort(exp, want, sizeof(*exp), cmp_str);
	size_t diff = 0;
	for (size_t i = 0; i < n && i < want; i++)
		diff += strcmp(got[i], exp[i]) != 0;
	CHECK_EQ_INT(diff, 0);
	for (size_t i = 0; i < n; i++)
		free(got[i]);
	for (size_t i = 0; i < want; i++)
		free(exp[i]);
	free(got);
	free(exp);
}

static void check_filter(struct sto *s, struct sto_ev_filter f, int which)
{
	struct qry_logs_req q = {.filter = f, .limit = 10000, .max_events = 100000};
	int st;
	json_t *j = run_logs(s, &q, &st);
	CHECK_EQ_INT(st, 200);
	if (!j)
		return;
	check_logs(json_object_get(j, "logs"), &f, which);
	CHECK(json_is_null(json_object_get(j, "next_cursor")));
	json_decref(j);
}

/* ---- tests ---------------------------------------------------------------------- */

static struct sto *store;

static void test_filters(void)
{
	static const uint32_t ranks[] = {1, 3};
	static const char *const keys[] = {"host"}, *const vals[] = {"h1"};
	struct sto_ev_filter f = all_filter();
	check_filter(store, f, 0);
	f.ranks = ranks;
	f.nranks = 2;
	check_filter(store, f, 0);
	f = all_filter();
	f.min_level = MDL_LEVEL_WARN;
	check_filter(store, f, 0);
	f = all_filter();
	f.from_ns = T0 + 3000;
	f.to_ns = T0 + 20000;
	check_filter(store, f, 0);
	f = all_filter();
	f.by_step = true;
	f.step_from = 5;
	f.step_to = 9;
	check_filter(store, f, 0);
	f = all_filter();
	f.field_keys = keys;
	f.field_vals = vals;
	f.nfields = 1;
	check_filter(store, f, 1);
	f = all_filter();
	f.text = "nccl TIMEOUT";
	check_filter(store, f, 2);
	f = all_filter();
	f.attempt = 1;
	f.min_level = MDL_LEVEL_INFO;
	check_filter(store, f, 0);
}

/* Pages of `limit` through the filter; returns the concatenated logs. */
static json_t *paginate(struct sto_ev_filter f, size_t limit, size_t max_events, int *pages)
{
	json_t *all = json_array();
	char cursor[QRY_CURSOR_MAX] = "";
	for (*pages = 0; *pages < 1000; (*pages)++) {
		struct qry_logs_req q = {.filter = f,
					 .limit = limit,
					 .max_events = max_events,
					 .cursor = cursor[0] ? cursor : NULL};
		int st;
		json_t *j = run_logs(store, &q, &st);
		CHECK_EQ_INT(st, 200);
		if (!j)
			break;
		json_array_extend(all, json_object_get(j, "logs"));
		CHECK(json_array_size(json_object_get(j, "logs")) <= limit);
		const char *next = json_string_value(json_object_get(j, "next_cursor"));
		if (next)
			snprintf(cursor, sizeof(cursor), "%s", next);
		json_decref(j);
		if (!next)
			break;
	}
	return all;
}

static void test_pagination(void)
{
	struct sto_ev_filter f = all_filter();
	struct qry_logs_req q = {.filter = f, .limit = 10000, .max_events = 100000};
	int st, pages;
	json_t *big = run_logs(store, &q, &st);
	const size_t limits[] = {1, 3, 7, 50};
	for (size_t i = 0; big && i < sizeof(limits) / sizeof(limits[0]); i++) {
		json_t *all = paginate(f, limits[i], 100000, &pages);
		CHECK(json_equal(all, json_object_get(big, "logs")));
		CHECK_EQ_INT(pages + 1, (nrecs + limits[i] - 1) / limits[i]);
		json_decref(all);
	}
	/* a read bound far below the data: windows narrow, nothing lost */
	json_t *all = paginate(f, 10, 40, &pages);
	CHECK(big && json_equal(all, json_object_get(big, "logs")));
	json_decref(all);
	/* a filter that pages the same way */
	f.min_level = MDL_LEVEL_ERROR;
	all = paginate(f, 4, 100000, &pages);
	check_logs(all, &f, 0);
	json_decref(all);
	json_decref(big);
	/* more records at one timestamp than the read bound: 422 */
	q.max_events = 5;
	q.limit = 2;
	CHECK(run_logs(store, &q, &st) == NULL);
	CHECK_EQ_INT(st, 422);
}

static void test_cursor_tampering(void)
{
	struct sto_ev_filter f = all_filter();
	struct qry_logs_req q = {.filter = f, .limit = 5, .max_events = 100000};
	int st;
	json_t *j = run_logs(store, &q, &st);
	const char *next = j ? json_string_value(json_object_get(j, "next_cursor")) : NULL;
	CHECK(next && strlen(next) < QRY_CURSOR_MAX);
	char c[QRY_CURSOR_MAX];
	snprintf(c, sizeof(c), "%s", next ? next : "");
	json_decref(j);
	q.cursor = c;
	json_decref(run_logs(store, &q, &st));
	CHECK_EQ_INT(st, 200);
	c[3] = c[3] == '0' ? '1' : '0';
	CHECK(run_logs(store, &q, &st) == NULL);
	CHECK_EQ_INT(st, 400);
	c[3] = c[3] == '0' ? '1' : '0';
	q.filter.min_level = MDL_LEVEL_WARN; /* another query's cursor */
	CHECK(run_logs(store, &q, &st) == NULL);
	CHECK_EQ_INT(st, 400);
	q.cursor = "zz";
	CHECK(run_logs(store, &q, &st) == NULL);
	CHECK_EQ_INT(st, 400);
}

static void test_unknown_job(void)
{
	struct qry_logs_req q = {.filter = all_filter(), .limit = 5, .max_events = 1000};
	int st;
	q.filter.job = "nosuchjob";
	CHECK(run_logs(store, &q, &st) == NULL);
	CHECK_EQ_INT(st, 404);
	q.filter.job = "ev"; /* a job with events only is known: empty result is 200 */
	q.filter.from_ns = 0;
	q.filter.to_ns = 1;
	json_t *j = run_logs(store, &q, &st);
	CHECK_EQ_INT(st, 200);
	CHECK(j && json_array_size(json_object_get(j, "logs")) == 0);
	json_decref(j);
}

static json_t *run_around(struct qry_around_req *q, int *status)
{
	struct qry_around a;
	struct qry_error err = {0};
	int rc = qry_logs_around(store, q, &a, &err);
	*status = rc ? status_of(err.code) : 200;
	if (rc)
		return NULL;
	json_t *j = json_object();
	json_object_set_new(j, "anchor_ts",
			    a.anchor_ts_ns == INT64_MAX ? json_null()
							: json_integer(a.anchor_ts_ns));
	json_object_set_new(j, "logs", logs_json(&a.logs, a.step, true));
	qry_around_free(&a);
	return j;
}

static json_t *spans_json(const struct qry_spans *r)
{
	json_t *steps = json_array(), *ranks = NULL;
	for (size_t k = 0; k < r->ng; k++) {
		const struct qry_span_group *g = &r->g[k];
		if (k == 0 || r->g[k - 1].step != g->step) {
			json_t *st = json_object();
			json_object_set_new(st, "step", json_integer(g->step));
			ranks = json_array();
			json_object_set_new(st, "ranks", ranks);
			json_array_append_new(steps, st);
		}
		json_t *ro = json_object(), *sp = json_array();
		json_object_set_new(ro, "rank", json_integer(g->rank));
		json_object_set_new(ro, "attempt", json_integer(g->attempt));
		json_object_set_new(ro, "total_ns", json_integer(g->total_ns));
		for (size_t i = g->first; i < g->first + g->n; i++) {
			const struct mdl_event *e = &r->spans.v[i]->ev;
			json_t *so = json_object();
			json_object_set_new(so, "name", json_stringn(e->text, e->text_len));
			json_object_set_new(so, "end", json_integer(e->ts_ns + e->duration_ns));
			json_array_append_new(sp, so);
		}
		json_object_set_new(ro, "spans", sp);
		json_array_append_new(ranks, ro);
	}
	json_t *j = json_object();
	json_object_set_new(j, "steps", steps);
	return j;
}

static void test_around(void)
{
	/* rank 1 (i % 4 == 1), step 12 (i / 10 == 12): i = 121, 125, 129 */
	struct qry_around_req q = {
	    .job = "ev", .rank = 1, .step = 12, .window_steps = 1, .max_events = 100000};
	int st;
	json_t *j = run_around(&q, &st);
	json_t *logs = j ? json_object_get(j, "logs") : NULL;
	size_t at = 0, n = json_array_size(logs);
	for (size_t i = 0; i < n; i++)
		at += json_is_true(json_object_get(json_array_get(logs, i), "at_step"));
	CHECK_EQ_INT(n, 6); /* steps 11..13: i = 113, 121, 125, 129, 133, 137 (117: no step) */
	CHECK_EQ_INT(at, 3);
	json_decref(j);
	q.window_steps = -1;
	q.before = 3;
	q.after = 2;
	j = run_around(&q, &st);
	logs = j ? json_object_get(j, "logs") : NULL;
	CHECK_EQ_INT(json_array_size(logs), 5);
	CHECK_EQ_INT(json_integer_value(json_object_get(j, "anchor_ts")), T0 + (121 / 7) * 1000);
	/* before: 109, 113, 117 (no step); from the anchor on: 121 and 125, same ts */
	const char *m0 = json_string_value(json_object_get(json_array_get(logs, 0), "message"));
	const char *m3 = json_string_value(json_object_get(json_array_get(logs, 3), "message"));
	const char *m4 = json_string_value(json_object_get(json_array_get(logs, 4), "message"));
	CHECK(m0 && strcmp(m0, "msg 109 alpha") == 0);
	CHECK(m3 && m4 && (strcmp(m3, "msg 121 alpha") == 0 || strcmp(m4, "msg 121 alpha") == 0));
	CHECK(json_is_true(json_object_get(json_array_get(logs, 3), "at_step")));
	CHECK(json_is_false(json_object_get(json_array_get(logs, 2), "at_step")));
	json_decref(j);
	q.step = 9999;
	CHECK(run_around(&q, &st) == NULL);
	CHECK_EQ_INT(st, 404);
}

static void test_spans(void)
{
	struct qry_spans_req q = {
	    .job = "ev", .step_from = 1, .step_to = 2, .attempt = -1, .max_events = 1000};
	struct qry_spans sr;
	struct qry_error err = {0};
	CHECK_EQ_INT(qry_spans(store, &q, &sr, &err), 0);
	json_t *j = spans_json(&sr);
	qry_spans_free(&sr);
	json_t *steps = json_object_get(j, "steps");
	CHECK_EQ_INT(json_array_size(steps), 2);
	json_t *s2 = json_array_get(steps, 1);
	CHECK_EQ_INT(json_integer_value(json_object_get(s2, "step")), 2);
	json_t *r0 = json_array_get(json_object_get(s2, "ranks"), 0);
	CHECK_EQ_INT(json_integer_value(json_object_get(r0, "attempt")), 1);
	CHECK_EQ_INT(json_integer_value(json_object_get(r0, "total_ns")), 400);
	json_t *sp = json_object_get(r0, "spans");
	CHECK_EQ_INT(json_array_size(sp), 2);
	CHECK(strcmp(json_string_value(json_object_get(json_array_get(sp, 0), "name")),
		     "forward") == 0);
	CHECK_EQ_INT(json_integer_value(json_object_get(json_array_get(sp, 1), "end")),
		     T0 + 2 * 1000000 + 500000 + 200 + 300);
	json_decref(j);
	q.job = "nosuchjob";
	CHECK(qry_spans(store, &q, &sr, &err) != 0);
	CHECK_EQ_INT(status_of(err.code), 404);
}

static void test_annotations(void)
{
	struct qry_events ev;
	struct qry_error err = {0};
	CHECK_EQ_INT(qry_events_annotations(store, "ev", INT64_MIN, INT64_MAX, MDL_LEVEL_FATAL, 10,
					    &ev, &err),
		     0);
	CHECK_EQ_INT(ev.n, 10);
	const struct mdl_event *a = ev.n ? &ev.v[0]->ev : NULL;
	CHECK(a && a->ts_ns / 1000000 == (T0 + 42000) / 1000000);
	CHECK(a && a->level == MDL_LEVEL_FATAL && strcmp(a->job, "ev") == 0);
	qry_events_free(&ev);
	CHECK_EQ_INT(qry_events_annotations(store, NULL, INT64_MIN, INT64_MAX, 0, 10, &ev, &err),
		     0);
	CHECK_EQ_INT(ev.n, 0); /* no job has series */
	qry_events_free(&ev);
}

int main(void)
{
	const char *tmp = getenv("RDB_TEST_TMP");
	snprintf(base, sizeof(base), "%s/test_events_query.XXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	make_recs();
	store = open_store();
	CHECK_EQ_INT(write_recs(store, 0, 150), 0);
	CHECK_EQ_INT(write_spans(store), 0);
	CHECK_EQ_INT(sto_checkpoint(store), 0); /* these now live in event chunks */
	CHECK_EQ_INT(write_recs(store, 150, nrecs), 0);
	struct sto_stats st;
	sto_get_stats(store, &st);
	CHECK(st.event_chunks_sealed > 0);
	RUN(test_filters);
	RUN(test_pagination);
	RUN(test_cursor_tampering);
	RUN(test_unknown_job);
	RUN(test_around);
	RUN(test_spans);
	RUN(test_annotations);
	sto_close(store);
	int rc = check_summary("events_query");
	if (rc == 0) {
		char cmd[4200];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", base);
	}
	return rc;
}
