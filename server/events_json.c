/* events_json.c - the JSON bodies of the log and span endpoints (GET
 * /api/v1/logs, /api/v1/logs/around, /api/v1/spans) from the typed results
 * of query/events.h (json_out.h). A record's fields are stored as JSON
 * object text and written as they are. Bounded by the response buffer
 * (413 with advice). Pure functions; threading: any.
 */
#include "server/json_out.h"
#include "common/rdb_err.h"

#include <stdio.h>
#include <string.h>

static const char ev_advice[] = "narrow the query or lower limit";

static int json_i64_or_null(struct rdb_buf *out, int64_t v)
{
	if (v == MDL_STEP_NONE)
		return rdb_buf_puts(out, "null");
	return rdb_buf_printf(out, "%lld", (long long)v);
}

/* One log record; at_step < 0: no at_step member. */
static int write_log(struct rdb_buf *out, const struct mdl_event *e, bool comma, int at_step)
{
	int rc =
	    rdb_buf_printf(out, "%s{\"ts\":%lld,\"rank\":", comma ? "," : "", (long long)e->ts_ns);
	if (rc == 0)
		rc = srv_json_rank(out, e->rank);
	if (rc == 0)
		rc = rdb_buf_printf(out, ",\"level\":\"%s\",\"step\":", mdl_level_name(e->level));
	if (rc == 0)
		rc = json_i64_or_null(out, e->step);
	if (rc == 0)
		rc = rdb_buf_printf(out, ",\"attempt\":%u,\"message\":", e->attempt);
	if (rc == 0)
		rc = rdb_buf_json_str(out, e->text, e->text_len);
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"fields\":");
	if (rc == 0 && e->fields_len)
		rc = rdb_buf_append(out, e->fields, e->fields_len);
	else if (rc == 0)
		rc = rdb_buf_puts(out, "{}");
	if (rc == 0 && at_step >= 0)
		rc = rdb_buf_puts(out, at_step ? ",\"at_step\":true" : ",\"at_step\":false");
	if (rc == 0)
		rc = rdb_buf_putc(out, '}');
	return rc;
}

int srv_write_log_page(struct rdb_buf *out, const struct qry_log_page *r, struct qry_error *err)
{
	int rc = rdb_buf_puts(out, "{\"job\":");
	if (rc == 0)
		rc = rdb_buf_json_str(out, r->job, strlen(r->job));
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"logs\":[");
	for (size_t i = 0; rc == 0 && i < r->logs.n; i++)
		rc = write_log(out, &r->logs.v[i]->ev, i > 0, -1);
	if (rc == 0 && r->next_cursor[0])
		rc = rdb_buf_printf(out, "],\"next_cursor\":\"%s\"}", r->next_cursor);
	else if (rc == 0)
		rc = rdb_buf_puts(out, "],\"next_cursor\":null}");
	return rc ? srv_out_failed(err, rc, ev_advice) : 0;
}

int srv_write_around(struct rdb_buf *out, const struct qry_around *r, struct qry_error *err)
{
	int rc = rdb_buf_puts(out, "{\"job\":");
	if (rc == 0)
		rc = rdb_buf_json_str(out, r->job, strlen(r->job));
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"rank\":");
	if (rc == 0)
		rc = srv_json_rank(out, r->rank);
	if (rc == 0)
		rc = rdb_buf_printf(out, ",\"step\":%lld,\"mode\":\"%s\",\"anchor_ts\":",
				    (long long)r->step, r->steps_mode ? "steps" : "time");
	if (rc == 0)
		rc = json_i64_or_null(out, r->anchor_ts_ns == INT64_MAX ? MDL_STEP_NONE
									: r->anchor_ts_ns);
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"logs\":[");
	for (size_t i = 0; rc == 0 && i < r->logs.n; i++)
		rc = write_log(out, &r->logs.v[i]->ev, i > 0, r->logs.v[i]->ev.step == r->step);
	if (rc == 0)
		rc = rdb_buf_puts(out, "]}");
	return rc ? srv_out_failed(err, rc, ev_advice) : 0;
}

/* One rank of one step: the group's spans, of one attempt. */
static int write_group(struct rdb_buf *out, const struct qry_spans *r,
		       const struct qry_span_group *g, bool comma)
{
	int rc = rdb_buf_puts(out, comma ? ",{\"rank\":" : "{\"rank\":");
	if (rc == 0)
		rc = srv_json_rank(out, g->rank);
	if (rc == 0)
		rc = rdb_buf_printf(out, ",\"attempt\":%u,\"spans\":[", g->attempt);
	for (size_t i = g->first; rc == 0 && i < g->first + g->n; i++) {
		const struct mdl_event *e = &r->spans.v[i]->ev;
		rc = rdb_buf_puts(out, i > g->first ? ",{\"name\":" : "{\"name\":");
		if (rc == 0)
			rc = rdb_buf_json_str(out, e->text, e->text_len);
		if (rc == 0)
			rc = rdb_buf_printf(out,
					    ",\"start\":%lld,\"duration_ns\":%lld,\"end\":%lld}",
					    (long long)e->ts_ns, (long long)e->duration_ns,
					    (long long)(e->ts_ns + e->duration_ns));
	}
	if (rc == 0)
		rc = rdb_buf_printf(out, "],\"total_ns\":%lld}", (long long)g->total_ns);
	return rc;
}

int srv_write_spans(struct rdb_buf *out, const struct qry_spans *r, struct qry_error *err)
{
	int rc = rdb_buf_puts(out, "{\"job\":");
	if (rc == 0)
		rc = rdb_buf_json_str(out, r->job, strlen(r->job));
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"steps\":[");
	for (size_t k = 0; rc == 0 && k < r->ng; k++) {
		bool new_step = k == 0 || r->g[k - 1].step != r->g[k].step;
		if (new_step)
			rc = rdb_buf_printf(out, "%s{\"step\":%lld,\"ranks\":[", k ? "]}," : "",
					    (long long)r->g[k].step);
		if (rc == 0)
			rc = write_group(out, r, &r->g[k], !new_step);
	}
	if (rc == 0)
		rc = rdb_buf_puts(out, r->ng ? "]}]}" : "]}");
	return rc ? srv_out_failed(err, rc, ev_advice) : 0;
}
