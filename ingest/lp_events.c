/* lp_events.c - the mapping of line protocol log and span lines onto
 * events (storage/events.h); lineproto.c parses the line and calls
 * ilp_map_log / ilp_map_span for measurements rankdb_log and rankdb_span
 * (lp_int.h).
 *
 * Mapping (lp.h has the rules; documented in docs/API.md):
 * rankdb_log: tag level (mdl_level_parse, default info), string field
 * message; the other fields and the tags other than job/rank/level form the
 * fields object: keys sorted, strings JSON-escaped, integers as decimal
 * integers, floats as written when that is JSON (else the shortest
 * round-trip form), booleans true/false; a field named like a tag is an
 * error. rankdb_span: tag name (1..MDL_SPAN_NAME_MAX bytes), fields step
 * and duration_ns (integers >= 0) required, attempt optional; other tags
 * are ignored (Telegraf adds global tags), other fields are an error. Text
 * (message, span name, strings and keys of the fields object) must be UTF-8.
 * The line's timestamp is the log's time or the span's start.
 *
 * Invariants: everything that can fail on the input is checked before the
 * event is added, so a bad line adds nothing. The fields object is built in
 * ps->json (bounded by MDL_EVENT_FIELDS_MAX) and its sorted entries in
 * ps->items (grown to the line's tags + fields, freed with the parser);
 * unescaped strings go to the line's arena.
 *
 * Failure: a bad line is a line error (RDB_EINVAL through ilp_fail); a
 * full ev returns RDB_ELIMIT, -ENOMEM when the items table cannot grow.
 * Reentrant; not thread-safe per parser.
 */
#include "ingest/lp_int.h"
#include "common/rdb_buf.h"
#include "common/rdb_err.h"
#include "common/rdb_sort.h"
#include "model/events.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- logs and spans ------------------------------------------------------- */

/* The live field named lit, marked used, or NULL. */
static struct lp_field *take_field(struct lp *ps, const char *lit, size_t lit_len)
{
	for (size_t i = 0; i < ps->nfields; i++) {
		struct lp_field *f = &ps->fields[i];
		if (!f->dead && ilp_span_is(f->key, lit, lit_len)) {
			f->used = true;
			return f;
		}
	}
	return NULL;
}

/* The decoded bytes of a string field (in the arena if it has escapes). */
static int string_value(struct lp *ps, const struct lp_field *f, struct span *out)
{
	*out = f->raw;
	if (f->str_esc) {
		int rc = ilp_unescape(ps, out, "\"\\");
		if (rc)
			return rc;
	}
	if (!ilp_utf8_valid(out->p, out->len))
		return ilp_fail(ps, RDB_EINVAL, f->key, "string value is not valid UTF-8");
	return 0;
}

static int cmp_item(const void *a, const void *b)
{
	return ilp_span_cmp(((const struct lp_item *)a)->key, ((const struct lp_item *)b)->key);
}

/* Collects the fields object's entries (extra tags, unused fields), sorted. */
static int collect_items(struct lp *ps, size_t *nitems)
{
	size_t need = ps->ntags + ps->nfields, n = 0;
	if (ps->items_cap < need) {
		struct lp_item *it = realloc(ps->items, need * sizeof(*it));
		if (!it)
			return -ENOMEM;
		ps->items = it;
		ps->items_cap = need;
	}
	for (size_t i = 0; i < ps->ntags; i++)
		ps->items[n++] = (struct lp_item){ps->tags[i].key, &ps->tags[i], NULL};
	for (size_t i = 0; i < ps->nfields; i++)
		if (!ps->fields[i].dead && !ps->fields[i].used)
			ps->items[n++] = (struct lp_item){ps->fields[i].key, NULL, &ps->fields[i]};
	if (n > 1)
		rdb_sort(ps->items, n, sizeof(*ps->items), cmp_item);
	for (size_t i = 1; i < n; i++)
		if (ilp_span_cmp(ps->items[i - 1].key, ps->items[i].key) == 0)
			return ilp_fail(ps, RDB_EINVAL, ps->items[i].key,
					"a field has the same name as a tag");
	*nitems = n;
	return 0;
}

/* Appends a float as JSON: as written when that is a JSON number, else in
 * the shortest form that reads back to the same double. */
static int json_float(struct rdb_buf *j, const struct lp_field *f)
{
	const char *t = f->raw.p;
	size_t n = f->raw.len, i = t[0] == '-';
	bool ok =
	    i < n && ilp_is_digit(t[i]) && !(t[i] == '0' && i + 1 < n && ilp_is_digit(t[i + 1]));
	while (ok && i < n && ilp_is_digit(t[i]))
		i++;
	if (ok && i < n && t[i] == '.')
		ok = i + 1 < n && ilp_is_digit(t[i + 1]);
	if (ok)
		return rdb_buf_append(j, t, n);
	char buf[40];
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(buf, sizeof(buf), "%.*g", prec, f->v.f);
		if (strtod(buf, NULL) == f->v.f)
			break;
	}
	return rdb_buf_puts(j, buf);
}

static int json_value(struct lp *ps, const struct lp_item *it)
{
	struct rdb_buf *j = &ps->json;
	struct span s;
	if (it->tag) {
		if (!ilp_utf8_valid(it->tag->val.p, it->tag->val.len))
			return ilp_fail(ps, RDB_EINVAL, it->key, "tag value is not valid UTF-8");
		return rdb_buf_json_str(j, it->tag->val.p, it->tag->val.len);
	}
	const struct lp_field *f = it->field;
	int rc;
	switch (f->type) {
	case V_STR:
		rc = string_value(ps, f, &s);
		return rc ? rc : rdb_buf_json_str(j, s.p, s.len);
	case V_INT:
		return rdb_buf_printf(j, "%" PRId64, f->v.i);
	case V_UINT:
		return rdb_buf_printf(j, "%" PRIu64, f->v.u);
	case V_BOOL:
		return rdb_buf_puts(j, f->v.b ? "true" : "false");
	default:
		return json_float(j, f);
	}
}

static int build_fields_json(struct lp *ps)
{
	size_t n = 0;
	int rc = collect_items(ps, &n);
	ps->json.len = 0;
	if (rc == 0)
		rc = rdb_buf_putc(&ps->json, '{');
	for (size_t i = 0; i < n && rc == 0; i++) {
		const struct lp_item *it = &ps->items[i];
		if (!ilp_utf8_valid(it->key.p, it->key.len))
			return ilp_fail(ps, RDB_EINVAL, it->key, "key is not valid UTF-8");
		if (i)
			rc = rdb_buf_putc(&ps->json, ',');
		if (rc == 0)
			rc = rdb_buf_json_str(&ps->json, it->key.p, it->key.len);
		if (rc == 0)
			rc = rdb_buf_putc(&ps->json, ':');
		if (rc == 0)
			rc = json_value(ps, it);
	}
	if (rc == 0)
		rc = rdb_buf_putc(&ps->json, '}');
	if (rc == RDB_ELIMIT)
		return ilp_fail(ps, RDB_EINVAL, NOFIELD, "log fields object longer than %u bytes",
				MDL_EVENT_FIELDS_MAX);
	return rc;
}

static int add_event(struct lp *ps, struct mdl_event *e)
{
	e->rank = ps->rank;
	e->attempt = ps->attempt;
	e->ts_ns = ps->ts_ns;
	e->job = ps->job.p;
	e->job_len = ps->job.len;
	int rc = mdl_events_add(ps->ev, e);
	if (rc == RDB_EINVAL)
		return ilp_fail(ps, RDB_EINVAL, NOFIELD, "event too large");
	if (rc == 0)
		ps->res->events++;
	return rc;
}

int ilp_map_log(struct lp *ps)
{
	char tmp[ECHO_BUF];
	uint8_t level = MDL_LEVEL_INFO;
	struct span msg;
	if (ps->has_special && mdl_level_parse(ps->special.p, ps->special.len, &level) != 0)
		return ilp_fail(ps, RDB_EINVAL, (struct span){"level", 5},
				"unknown level %s (debug, info, warn, error, fatal)",
				ilp_echo(tmp, ps->special.p, ps->special.len, ECHO_MAX));
	const struct lp_field *f = take_field(ps, "message", 7);
	if (!f || f->type != V_STR)
		return ilp_fail(ps, RDB_EINVAL, (struct span){"message", 7},
				"rankdb_log needs a string field message=\"...\"");
	int rc = string_value(ps, f, &msg);
	if (rc)
		return rc;
	if (msg.len > MDL_EVENT_TEXT_MAX)
		return ilp_fail(ps, RDB_EINVAL, f->key, "message longer than %u bytes",
				MDL_EVENT_TEXT_MAX);
	rc = build_fields_json(ps);
	if (rc)
		return rc;
	struct mdl_event e = {.kind = MDL_EV_LOG,
			      .level = level,
			      .text = msg.p,
			      .text_len = msg.len,
			      .fields = (const char *)ps->json.data,
			      .fields_len = ps->json.len};
	e.step = ps->has_step ? ps->step : MDL_STEP_NONE;
	return add_event(ps, &e);
}

int ilp_map_span(struct lp *ps)
{
	struct span nm = ps->special;
	uint64_t dur;
	if (!ps->has_special || nm.len > MDL_SPAN_NAME_MAX || !ilp_utf8_valid(nm.p, nm.len))
		return ilp_fail(ps, RDB_EINVAL, (struct span){"name", 4},
				"rankdb_span needs a tag name of 1..%u bytes of UTF-8 (the phase)",
				MDL_SPAN_NAME_MAX);
	const struct lp_field *f = take_field(ps, "duration_ns", 11);
	if (!f)
		return ilp_fail(ps, RDB_EINVAL, (struct span){"duration_ns", 11},
				"rankdb_span needs an integer field duration_ns");
	int rc = ilp_field_count(ps, f, INT64_MAX, &dur);
	if (rc)
		return rc;
	if (!ps->has_step)
		return ilp_fail(ps, RDB_EINVAL, (struct span){"step", 4},
				"rankdb_span needs an integer field step");
	for (size_t i = 0; i < ps->nfields; i++)
		if (!ps->fields[i].dead && !ps->fields[i].used)
			return ilp_fail(ps, RDB_EINVAL, ps->fields[i].key,
					"rankdb_span takes only the fields step, attempt and "
					"duration_ns");
	struct mdl_event e = {.kind = MDL_EV_SPAN,
			      .text = nm.p,
			      .text_len = nm.len,
			      .fields = "",
			      .step = ps->step,
			      .duration_ns = (int64_t)dur};
	return add_event(ps, &e);
}
