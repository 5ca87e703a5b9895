/* json_events.c - the members of log and span records in POST
 * /api/v1/write bodies (json_write.c parses the records; json_int.h).
 *
 * Design: log and span records become events (storage/events.h; the event
 * is added by json_write.c once the record is complete). A log's message
 * without escapes stays a view into the body; with escapes it is decoded
 * into a 64 KiB buffer, and its "fields" object is re-written as compact
 * JSON into a bounded buffer, both allocated once per request on its first
 * log record and freed with the parser. The fields' keys share the metrics'
 * name table and duplicate set (a record has one or the other).
 *
 * Grammar (the record members of json_write.c's grammar that belong to log
 * and span records only):
 *     "level":       string accepted by mdl_level_parse (case-insensitive
 *                    debug, info, warn, error, fatal; also warning, err,
 *                    critical, ...), or null (= info)     (log: optional)
 *     "message":     string, valid UTF-8, 0..MDL_EVENT_TEXT_MAX bytes after
 *                    unescaping                           (log: required)
 *     "fields":      flat object name -> string | number | true | false |
 *                    null, or null (= "{}")               (log: optional)
 *     "name":        string, 1..MDL_SPAN_NAME_MAX bytes with the metric-name
 *                    alphabet (printable ASCII; not space " \ { } ,)
 *                                                         (span: required)
 *     "duration_ns": integer 0..INT64_MAX                 (span: required)
 * Decisions:
 *   - Event strings are UTF-8-validated after unescaping (RFC 3629: overlong
 *     forms, surrogates, code points above U+10FFFF and truncated sequences
 *     are errors); \u0000 is allowed in a message (it is valid UTF-8).
 *   - "fields" is stored as compact JSON text, keys in input order: strings
 *     and keys re-escaped minimally ('"', '\\' and control bytes, as \b \f
 *     \n \r \t or \u00XX; everything else, UTF-8 included, raw), numbers as
 *     their original token text (JSON grammar checked; NaN/Infinity are
 *     errors there), true/false/null as is; at most MDL_EVENT_FIELDS_MAX
 *     bytes. Nested objects/arrays and duplicate keys are errors naming the
 *     field ("fields.<key>").
 *
 * Failure: as json_write.c: the first error fills *err (through ijs_fail)
 * and stops the parse; -ENOMEM when a decode buffer cannot be allocated.
 * Not thread-safe per parser; reentrant.
 */
#include "ingest/json_int.h"
#include "common/rdb_buf.h"
#include "common/rdb_err.h"
#include "model/events.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- log and span fields -------------------------------------------------- */

/* Allocates the two big decode buffers on the first log record of a request
 * (freed with the parser): a message or a string of "fields" may be up to
 * 64 KiB after unescaping, far more than the scratch buffer holds. */
static int event_bufs(struct parser *ps)
{
	if (ps->msg_buf)
		return 0;
	ps->msg_buf = malloc(MDL_EVENT_TEXT_MAX + MDL_EVENT_FIELDS_MAX);
	if (!ps->msg_buf)
		return ijs_fail_nomem(ps);
	ps->dec_buf = ps->msg_buf + MDL_EVENT_TEXT_MAX;
	return 0;
}

/* ijs_lex_value, decoding an escaped string into buf[cap] instead of scratch. */
static int lex_value_into(struct parser *ps, const char *field, char *buf, size_t cap,
			  struct tok *t)
{
	ps->dst = buf;
	ps->dst_cap = cap;
	int rc = ijs_lex_value(ps, field, t);
	ps->dst = ps->scratch;
	ps->dst_cap = SCRATCH_MAX;
	return rc;
}

/* The offset of the first byte of s that does not start a well-formed UTF-8
 * sequence (RFC 3629: no overlong forms, no surrogates U+D800..U+DFFF,
 * nothing above U+10FFFF, no truncated sequence), or len if s is valid. */
static size_t utf8_invalid_at(const char *str, size_t len)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0;
	while (i < len) {
		unsigned c = s[i];
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t more = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
		unsigned lo = 0x80, hi = 0xbf; /* range of the second byte */
		if (c < 0xc2 || c > 0xf4)
			return i; /* continuation byte, overlong 2-byte lead, or > U+13FFFF */
		if (c == 0xe0)
			lo = 0xa0; /* overlong 3-byte */
		else if (c == 0xed)
			hi = 0x9f; /* surrogates */
		else if (c == 0xf0)
			lo = 0x90; /* overlong 4-byte */
		else if (c == 0xf4)
			hi = 0x8f; /* above U+10FFFF */
		if (len - i - 1 < more || s[i + 1] < lo || s[i + 1] > hi)
			return i;
		for (size_t k = 2; k <= more; k++)
			if ((s[i + k] & 0xc0) != 0x80)
				return i;
		i += more + 1;
	}
	return len;
}

/* Fails unless the decoded string t is valid UTF-8. */
static int check_utf8(struct parser *ps, const struct tok *t, const char *field, const char *what)
{
	size_t at = utf8_invalid_at(t->s, t->len);
	if (at == t->len)
		return 0;
	char tmp[ECHO_BUF];
	return ijs_fail(ps, RDB_EINVAL, t->line, field,
			"%s is not valid UTF-8: bad sequence at byte %zu (%s) after unescaping",
			what, at, ijs_echo(tmp, t->s + at, t->len - at, 4));
}

int ijs_field_level(struct parser *ps)
{
	if (ijs_take_null(ps))
		return 0;
	struct tok t;
	int rc = ijs_lex_value(ps, "level", &t);
	if (rc)
		return rc;
	if (t.kind == TOK_STR && mdl_level_parse(t.s, t.len, &ps->rec.level) == 0)
		return 0;
	char tmp[ECHO_BUF + 2];
	return ijs_fail(
	    ps, RDB_EINVAL, t.line, "level",
	    "level must be \"debug\", \"info\", \"warn\", \"error\" or \"fatal\" (any case; "
	    "\"warning\", \"err\" and \"critical\" too), got %s",
	    ijs_describe(tmp, &t));
}

int ijs_field_message(struct parser *ps)
{
	struct tok t;
	int rc = event_bufs(ps);
	if (rc == 0)
		rc = lex_value_into(ps, "message", ps->msg_buf, MDL_EVENT_TEXT_MAX, &t);
	if (rc)
		return rc;
	char tmp[ECHO_BUF + 2];
	if (t.kind != TOK_STR)
		return ijs_fail(ps, RDB_EINVAL, t.line, "message",
				"message must be a string, got %s", ijs_describe(tmp, &t));
	if (t.len > MDL_EVENT_TEXT_MAX)
		return ijs_fail(ps, RDB_EINVAL, t.line, "message",
				"message is longer than %u bytes (after unescaping)",
				MDL_EVENT_TEXT_MAX);
	if ((rc = check_utf8(ps, &t, "message", "message")))
		return rc;
	ps->rec.msg = t.s;
	ps->rec.msg_len = t.len;
	return 0;
}

int ijs_field_name(struct parser *ps)
{
	struct tok t;
	int rc = ijs_lex_value(ps, "name", &t);
	if (rc)
		return rc;
	if (t.kind == TOK_STR && t.len <= MDL_SPAN_NAME_MAX && mdl_metric_valid(t.s, t.len)) {
		memcpy(ps->rec.name_buf, t.s, t.len);
		ps->rec.name_len = t.len;
		return 0;
	}
	char tmp[ECHO_BUF + 2];
	return ijs_fail(
	    ps, RDB_EINVAL, t.line, "name",
	    "span name must be 1 to %u printable ASCII characters other than space, '\"', "
	    "'\\', '{', '}' and ',', got %s",
	    MDL_SPAN_NAME_MAX, ijs_describe(tmp, &t));
}

int ijs_field_duration(struct parser *ps)
{
	uint64_t v = 0;
	int rc = ijs_field_uint(ps, "duration_ns", INT64_MAX, &v);
	ps->rec.duration_ns = (int64_t)v;
	return rc;
}

/* Appends to the record's fields text, which is bounded by
 * MDL_EVENT_FIELDS_MAX bytes. */
static int fields_put(struct parser *ps, const char *s, size_t n)
{
	int rc = rdb_buf_append(&ps->fields_text, s, n);
	if (rc == RDB_ELIMIT)
		return ijs_fail(ps, RDB_EINVAL, ps->line, "fields",
				"fields are longer than %u bytes as compact JSON",
				MDL_EVENT_FIELDS_MAX);
	return rc ? ijs_fail_nomem(ps) : 0;
}

/* Appends s as a JSON string, minimally escaped: '"', '\\' and control
 * bytes only (\b \f \n \r \t, else \u00XX); UTF-8 stays as is. */
static int fields_put_str(struct parser *ps, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	static const char from[] = "\"\\\b\f\n\r\t", to[] = "\"\\bfnrt";
	int rc = fields_put(ps, "\"", 1);
	size_t run = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
		size_t k = 6;
		const char *m = c ? memchr(from, c, sizeof(from) - 1) : NULL;
		if (m) {
			e[1] = to[m - from];
			k = 2;
		}
		rc = fields_put(ps, s + run, i - run);
		if (rc == 0)
			rc = fields_put(ps, e, k);
		run = i + 1;
	}
	if (rc == 0)
		rc = fields_put(ps, s + run, n - run);
	return rc ? rc : fields_put(ps, "\"", 1);
}

/* Adds a key of the fields object to the record's name table (shared with
 * metrics: a record has one or the other); RDB_EINVAL if it is there. */
static int fields_add_key(struct parser *ps, const struct tok *t)
{
	if (ps->rec.n == ps->cap && ijs_grow_ents(ps))
		return ijs_fail_nomem(ps);
	struct metric_ent *e = &ps->ents[ps->rec.n];
	e->name = t->s == ps->dec_buf ? NULL : t->s;
	e->len = t->len;
	if (!e->name && ijs_arena_put(ps, t->s, t->len, &e->off))
		return ijs_fail_nomem(ps);
	if (!ijs_set_insert(ps, t->s, t->len))
		return ijs_fail(ps, RDB_EINVAL, t->line, "fields", "key appears twice in fields");
	ps->rec.n++;
	return 0;
}

/* A decoded string of fields (key or value): bounded and valid UTF-8. */
static int fields_check_str(struct parser *ps, const struct tok *t, const char *what)
{
	if (t->len > MDL_EVENT_FIELDS_MAX)
		return ijs_fail(ps, RDB_EINVAL, t->line, "fields",
				"fields are longer than %u bytes as compact JSON",
				MDL_EVENT_FIELDS_MAX);
	return check_utf8(ps, t, "fields", what);
}

/* Parses one value of fields and appends its canonical text. */
static int fields_value(struct parser *ps, const char *key, size_t key_len)
{
	struct tok t;
	int rc = lex_value_into(ps, "fields", ps->dec_buf, MDL_EVENT_FIELDS_MAX, &t);
	if (rc)
		return rc;
	bool is_int;
	if (t.kind == TOK_STR) {
		rc = fields_check_str(ps, &t, "string value");
		return rc ? rc : fields_put_str(ps, t.s, t.len);
	}
	if (t.kind == TOK_BARE &&
	    (ijs_tok_is(&t, TOK_BARE, "true") || ijs_tok_is(&t, TOK_BARE, "false") ||
	     ijs_tok_is(&t, TOK_BARE, "null") || ijs_json_number(t.s, t.len, &is_int)))
		return fields_put(ps, t.s, t.len);
	char tmp[ECHO_BUF + 2], nm[ECHO_BUF];
	ijs_echo(nm, key, key_len, 32);
	if (t.kind == TOK_OBJ || t.kind == TOK_ARR)
		return ijs_fail(
		    ps, RDB_EINVAL, t.line, "fields",
		    "value of field \"%s\" is %s; fields are flat (a string, number, true, "
		    "false or null each)",
		    nm, ijs_describe(tmp, &t));
	return ijs_fail(
	    ps, RDB_EINVAL, t.line, "fields",
	    "value of field \"%s\" must be a string, a JSON number, true, false or null "
	    "(NaN and Infinity only as strings); got %s",
	    nm, ijs_describe(tmp, &t));
}

/* Parses one "key": value member of fields. */
static int fields_member(struct parser *ps)
{
	struct tok t;
	ijs_skip_ws(ps);
	if (ps->p >= ps->end || *ps->p != '"')
		return ijs_fail_unexpected(ps, "fields", "a field name in double quotes");
	int rc = lex_value_into(ps, "fields", ps->dec_buf, MDL_EVENT_FIELDS_MAX, &t);
	if (rc)
		return rc;
	if ((rc = fields_check_str(ps, &t, "field name")) || (rc = fields_add_key(ps, &t)))
		return ijs_in_member(ps, rc, "fields", t.s, t.len);
	const struct metric_ent *e = &ps->ents[ps->rec.n - 1];
	const char *key = ijs_ent_name(ps, e);
	if (ps->rec.n > 1)
		rc = fields_put(ps, ",", 1);
	if (rc == 0)
		rc = fields_put_str(ps, key, e->len);
	if (rc == 0)
		rc = fields_put(ps, ":", 1);
	if (rc == 0)
		rc = ijs_expect(ps, ':', "fields", "':' after the field name");
	if (rc == 0)
		rc = fields_value(ps, key, e->len);
	return rc ? ijs_in_member(ps, rc, "fields", key, e->len) : 0;
}

int ijs_field_fields(struct parser *ps)
{
	if (ps->rec.seen & F_METRICS)
		return ijs_fail(
		    ps, RDB_EINVAL, ps->line, "fields",
		    "a record cannot have both \"metrics\" and \"fields\" (fields belong to "
		    "log records)");
	if (ijs_take_null(ps))
		return 0;
	ijs_skip_ws(ps);
	if (ps->p >= ps->end || *ps->p != '{') {
		struct tok t;
		int rc = ijs_lex_value(ps, "fields", &t);
		char tmp[ECHO_BUF + 2];
		return rc ? rc
			  : ijs_fail(
				ps, RDB_EINVAL, t.line, "fields",
				"fields must be an object of name to string, number, true, false "
				"or null, got %s",
				ijs_describe(tmp, &t));
	}
	ps->p++;
	int rc = ijs_enter(ps, "fields");
	if (rc == 0)
		rc = event_bufs(ps);
	if (rc)
		return rc;
	ps->fields_text.len = 0;
	ps->rec.has_fields = true;
	if ((rc = fields_put(ps, "{", 1)))
		return rc;
	ijs_skip_ws(ps);
	if (ps->p < ps->end && *ps->p == '}') {
		ps->p++;
		rc = 1;
	}
	while (rc == 0) {
		rc = fields_member(ps);
		if (rc == 0)
			rc = ijs_next_member(ps, "fields");
	}
	if (rc < 0)
		return rc;
	ps->depth--;
	return fields_put(ps, "}", 1);
}
