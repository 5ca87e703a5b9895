/* json_write.c - the parser for POST /api/v1/write bodies (ingest/ing.h):
 * the body, the records and their metrics. The tokenizer (strings, numbers,
 * errors) is json_lex.c and the members of log and span records are
 * json_events.c; json_int.h holds the state they share.
 *
 * Design: a hand-written, single-pass tokenizer and parser (no recursion),
 * specialised for the one shape we accept. No DOM, no per-token malloc. A
 * record's keys may come in any order (metrics before job), so each record
 * is parsed completely into a small table of (metric name, value bits) and
 * only then are its points added to the batch. That table, the duplicate-name
 * hash set and the arena for escaped names live inside the parser for up to
 * INLINE_METRICS metrics, so a typical record costs no allocation here;
 * beyond that they grow by doubling on the heap (a few times per request at
 * most, bounded by max_metrics_per_record) and are freed in one place.
 * Log and span records become events (storage/events.h; json_events.c).
 *
 * Accepted grammar (JSON per RFC 8259 plus the NaN/Infinity/-Infinity
 * literals Python's json module writes; strings and numbers: json_lex.c):
 *   body     = [BOM] ws ( array | ndjson )
 *   array    = '[' ws record ( ws ',' ws record )* ws ']' ws       (no trailing ',')
 *   ndjson   = record ( sp* '\n' ws record )* sp* ws   sp = ' ' | '\t' | '\r'
 *   ws       = ( ' ' | '\t' | '\r' | '\n' )*
 *   record   = '{' [ member ( ',' member )* ] '}', members in any order; the
 *              "type" member picks the kind (absent: metrics). The members
 *              (those of log and span records only: json_events.c):
 *     "type":        "metrics" | "log" | "span"            (default "metrics")
 *     "job":         string, [A-Za-z0-9._-]{1,128}                 (all: required)
 *     "rank":        integer 0..MDL_RANK_MAX, or the string "job"  (all: required)
 *     "attempt":     integer 0..UINT32_MAX, or null (= 0)          (all: optional)
 *     "step":        integer 0..INT64_MAX, or null (= no step)
 *                    (metrics, log: optional; span: required, not null)
 *     "timestamp":   integer ns since the epoch (int64, may be negative), or
 *                    null (= default_ts_ns)               (metrics, log: optional)
 *     "metrics":     object of 1..max_metrics_per_record name -> value
 *                                                         (metrics: required)
 *     "start":       integer ns since the epoch (int64)   (span: required)
 *   value    = JSON number | null | NaN | Infinity | -Infinity
 *            | "NaN" | "Inf" | "+Inf" | "Infinity" | "+Infinity" | "-Inf"
 *            | "-Infinity" | "0x" 16*hexdigit (exact IEEE-754 bits)
 * Decisions:
 *   - A member that belongs to another record type is an error naming it
 *     (checked when the record ends, since "type" may come last); so is a
 *     record with both "metrics" and "fields". Spans take "start", not
 *     "timestamp" (one spelling; "timestamp" in a span is an error).
 *   - Log and span records need an events batch (ing_json_parse_all with
 *     ev != NULL); without one, "type":"log"/"span" is an error at once.
 *   - A UTF-8 byte order mark at the very start is skipped (PowerShell and
 *     some Windows tools write one); anywhere else it is an error.
 *   - The first non-blank byte picks the form: '[' array, '{' NDJSON.
 *   - NDJSON: blank lines (ws only) are ignored; a record may span lines, but
 *     after a record's '}' only spaces/tabs/'\r' may follow before '\n' or
 *     the end of the body. Lines end in "\n" or "\r\n".
 *   - Duplicate keys (record fields or metric names) and unknown fields are
 *     errors, as are trailing commas, empty bodies and empty arrays.
 *   - Depth is intrinsically at most 3 (array, record, metrics/fields): a nested
 *     object or array where a scalar is expected is an error at once, so
 *     there is no recursion; lim->max_depth is still checked per level.
 *
 * Invariants: the cursor never passes end (the body need not be
 * NUL-terminated); err->line is the line of the offending token (for a
 * missing field: the line of the record's '{').
 *
 * Failure: the first error stops the parse; *err gets the 0-based record
 * (-1 for the body), the line, the field ("rank", "metrics.loss") and a
 * message that echoes at most ECHO_MAX bytes of input, with anything but
 * printable ASCII shown as \xHH. Points and events of earlier records may
 * already be in the batch and events (the caller resets them). Not
 * thread-safe per batch; reentrant.
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

void ing_limits_default(struct ing_limits *l)
{
	l->max_records = 100000;
	l->max_metrics_per_record = 1024;
	l->max_depth = 16;
}

/* ---- record fields -------------------------------------------------------- */

/* If the next value is null, consumes it and returns true. */
bool ijs_take_null(struct parser *ps)
{
	ijs_skip_ws(ps);
	if (ps->end - ps->p >= 4 && memcmp(ps->p, "null", 4) == 0 &&
	    (ps->end - ps->p == 4 || !ijs_is_bare_char((unsigned char)ps->p[4]))) {
		ps->p += 4;
		return true;
	}
	return false;
}

static int field_job(struct parser *ps)
{
	struct tok t;
	int rc = ijs_lex_value(ps, "job", &t);
	if (rc)
		return rc;
	if (t.kind == TOK_STR && mdl_job_valid(t.s, t.len)) {
		memcpy(ps->rec.job_buf, t.s, t.len);
		ps->rec.job = ps->rec.job_buf;
		ps->rec.job_len = t.len;
		return 0;
	}
	char tmp[ECHO_BUF + 2];
	return ijs_fail(ps, RDB_EINVAL, t.line, "job",
			"job must be a string of 1 to %u characters from [A-Za-z0-9._-], got %s",
			MDL_JOB_MAX, ijs_describe(tmp, &t));
}

static int field_rank(struct parser *ps)
{
	struct tok t;
	int rc = ijs_lex_value(ps, "rank", &t);
	if (rc)
		return rc;
	bool neg = false;
	uint64_t mag = 0;
	if (ijs_tok_is(&t, TOK_STR, "job")) {
		ps->rec.rank = MDL_RANK_JOB;
		return 0;
	}
	if (ijs_parse_int(&t, &neg, &mag) == INT_OK && (!neg || mag == 0) && mag <= MDL_RANK_MAX) {
		ps->rec.rank = (uint32_t)mag;
		return 0;
	}
	char tmp[ECHO_BUF + 2];
	return ijs_fail(ps, RDB_EINVAL, t.line, "rank",
			"rank must be an integer >= 0 (at most %u) or \"job\", got %s",
			MDL_RANK_MAX, ijs_describe(tmp, &t));
}

/* The unit a time that is too early as ns looks like: "s", "ms", "us" when
 * ts_ns read in that unit falls in 2001..2100, else NULL. */
static const char *looks_like_unit(int64_t ts_ns)
{
	static const struct {
		const char *name;
		int64_t per_s;
	} units[] = {{"s", 1}, {"ms", 1000}, {"us", 1000000}};
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (ts_ns >= ING_JSON_MIN_TS_S * units[i].per_s &&
		    ts_ns < ING_JSON_MAX_TS_S * units[i].per_s)
			return units[i].name;
	return NULL;
}

/* Checks a scaled time against ps->min_ts_ns. */
static int check_min_time(struct parser *ps, const struct tok *t, const char *field)
{
	if (ps->rec.ts_ns >= ps->min_ts_ns)
		return 0;
	const char *unit = looks_like_unit(ps->rec.ts_ns);
	char tmp[ECHO_BUF + 2];
	if (unit)
		return ijs_fail(ps, RDB_EINVAL, t->line, field,
				"%s %s is before 2001-01-01 in nanoseconds: it looks like %s; "
				"send nanoseconds or add ?precision=%s",
				field, ijs_describe(tmp, t), unit, unit);
	return ijs_fail(ps, RDB_EINVAL, t->line, field,
			"%s %s is before 2001-01-01 (times are nanoseconds since the epoch, "
			"or the unit of ?precision=)",
			field, ijs_describe(tmp, t));
}

/* Parses a time in ps->precision_ns units since the epoch ("timestamp" or
 * "start") into ts_ns. */
static int field_time(struct parser *ps, const char *field)
{
	struct tok t;
	int rc = ijs_lex_value(ps, field, &t);
	if (rc)
		return rc;
	bool neg = false;
	uint64_t mag = 0;
	enum int_result r = ijs_parse_int(&t, &neg, &mag);
	if (r == INT_OK && mag <= (uint64_t)INT64_MAX + neg) {
		int64_t v = neg && mag ? -(int64_t)(mag - 1) - 1 : (int64_t)mag;
		if (ps->precision_ns > 1 && __builtin_mul_overflow(v, ps->precision_ns, &v)) {
			char tmp[ECHO_BUF + 2];
			return ijs_fail(ps, RDB_EINVAL, t.line, field,
					"%s %s overflows int64 nanoseconds at this precision",
					field, ijs_describe(tmp, &t));
		}
		ps->rec.ts_ns = v;
		return check_min_time(ps, &t, field);
	}
	char tmp[ECHO_BUF + 2];
	if (r == INT_FRACTION)
		return ijs_fail(ps, RDB_EINVAL, t.line, field,
				"%s must be an integer number of nanoseconds since the epoch; "
				"multiply seconds by 1e9 (got %s)",
				field, ijs_describe(tmp, &t));
	return ijs_fail(ps, RDB_EINVAL, t.line, field,
			"%s must be an integer number of nanoseconds since the epoch "
			"(64-bit signed), got %s",
			field, ijs_describe(tmp, &t));
}

static int field_timestamp(struct parser *ps)
{
	if (ijs_take_null(ps))
		return 0;
	return field_time(ps, "timestamp");
}

static int field_type(struct parser *ps)
{
	static const char *const names[] = {"metrics", "log", "span"};
	struct tok t;
	int rc = ijs_lex_value(ps, "type", &t);
	if (rc)
		return rc;
	for (size_t i = 0; i < 3; i++) {
		if (!ijs_tok_is(&t, TOK_STR, names[i]))
			continue;
		if (i != REC_METRICS && !ps->ev)
			return ijs_fail(ps, RDB_EINVAL, t.line, "type",
					"%s records are not accepted here (only metrics records)",
					names[i]);
		ps->rec.type = (enum rec_type)i;
		ps->rec.type_given = true;
		return 0;
	}
	char tmp[ECHO_BUF + 2];
	return ijs_fail(ps, RDB_EINVAL, t.line, "type",
			"type must be \"metrics\", \"log\" or \"span\", got %s",
			ijs_describe(tmp, &t));
}

static int field_step_attempt(struct parser *ps, unsigned f)
{
	if (ijs_take_null(ps))
		return 0;
	uint64_t v = 0;
	if (f == F_STEP) {
		int rc = ijs_field_uint(ps, "step", INT64_MAX, &v);
		ps->rec.step = (int64_t)v;
		return rc;
	}
	int rc = ijs_field_uint(ps, "attempt", UINT32_MAX, &v);
	ps->rec.attempt = (uint32_t)v;
	return rc;
}

/* ---- metrics -------------------------------------------------------------- */

const char *ijs_ent_name(const struct parser *ps, const struct metric_ent *e)
{
	return e->name ? e->name : ps->arena + e->off;
}

/* A cheap hash for the per-record duplicate check: the length and the first
 * and last 8 bytes (names differ mostly at their ends); collisions only cost
 * a memcmp. */
static uint64_t name_hash(const char *s, size_t len)
{
	uint64_t a = 0, z = 0;
	size_t k = len < 8 ? len : 8;
	memcpy(&a, s, k);
	memcpy(&z, s + len - k, k);
	uint64_t h = (a ^ (z * 0x9e3779b97f4a7c15ull) ^ len) * 0xff51afd7ed558ccdull;
	return h ^ (h >> 32);
}

/* Doubles the metric table and its hash set, re-inserting this record's
 * names. The inline arrays are used first; heap ones are freed at the end. */
int ijs_grow_ents(struct parser *ps)
{
	size_t cap = ps->cap * 2;
	struct metric_ent *e = malloc(cap * sizeof(*e));
	uint64_t *set = calloc(2 * cap, sizeof(*set));
	if (!e || !set) {
		free(e);
		free(set);
		return -ENOMEM;
	}
	memcpy(e, ps->ents, ps->rec.n * sizeof(*e));
	if (ps->ents != ps->ents_inline) {
		free(ps->ents);
		free(ps->set);
	}
	ps->ents = e;
	ps->set = set;
	ps->cap = cap;
	for (size_t i = 0; i < ps->rec.n; i++) {
		size_t pos = name_hash(ijs_ent_name(ps, &e[i]), e[i].len) & (2 * cap - 1);
		while (set[pos])
			pos = (pos + 1) & (2 * cap - 1);
		set[pos] = (uint64_t)ps->gen << 32 | (i + 1);
	}
	return 0;
}

/* Inserts entry ps->rec.n's name; false if the record already has it. */
bool ijs_set_insert(struct parser *ps, const char *name, size_t len)
{
	size_t mask = 2 * ps->cap - 1;
	size_t pos = name_hash(name, len) & mask;
	for (;; pos = (pos + 1) & mask) {
		uint64_t v = ps->set[pos];
		if ((uint32_t)(v >> 32) != ps->gen || (uint32_t)v == 0)
			break;
		const struct metric_ent *e = &ps->ents[(uint32_t)v - 1];
		if (e->len == len && memcmp(ijs_ent_name(ps, e), name, len) == 0)
			return false;
	}
	ps->set[pos] = (uint64_t)ps->gen << 32 | (ps->rec.n + 1);
	return true;
}

/* Keeps a decoded (escaped) name in the arena; returns its offset. */
int ijs_arena_put(struct parser *ps, const char *s, size_t len, size_t *off)
{
	if (ps->arena_len + len > ps->arena_cap) {
		size_t cap = ps->arena_cap * 2;
		while (cap < ps->arena_len + len)
			cap *= 2;
		char *a = malloc(cap);
		if (!a)
			return -ENOMEM;
		memcpy(a, ps->arena, ps->arena_len);
		if (ps->arena != ps->arena_inline)
			free(ps->arena);
		ps->arena = a;
		ps->arena_cap = cap;
	}
	*off = ps->arena_len;
	memcpy(ps->arena + ps->arena_len, s, len);
	ps->arena_len += len;
	return 0;
}

/* Labels the error just filled with the field "<obj>.<name>". */
int ijs_in_member(struct parser *ps, int rc, const char *obj, const char *name, size_t len)
{
	char tmp[ECHO_BUF];
	struct ing_error *e = ps->err;
	size_t room = sizeof(e->field) - strlen(obj) - 2;
	snprintf(e->field, sizeof(e->field), "%s.%s", obj, ijs_echo(tmp, name, len, room / 4));
	return rc;
}

/* Converts a string value: "NaN", the infinities, or "0x" + 16 hex digits. */
static bool string_bits(const struct tok *t, uint64_t *bits)
{
	static const struct {
		const char *s;
		uint64_t bits;
	} words[] = {
	    {"NaN", MDL_VALUE_NAN_BITS},	  {"Inf", 0x7ff0000000000000ull},
	    {"+Inf", 0x7ff0000000000000ull},	  {"Infinity", 0x7ff0000000000000ull},
	    {"+Infinity", 0x7ff0000000000000ull}, {"-Inf", 0xfff0000000000000ull},
	    {"-Infinity", 0xfff0000000000000ull},
	};
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		if (ijs_tok_is(t, TOK_STR, words[i].s)) {
			*bits = words[i].bits;
			return true;
		}
	}
	if (t->len != 18 || t->s[0] != '0' || t->s[1] != 'x')
		return false;
	uint64_t v = 0;
	for (size_t i = 2; i < 18; i++) {
		int h = ijs_hex_val(t->s[i]);
		if (h < 0)
			return false;
		v = v << 4 | (uint64_t)h;
	}
	*bits = v;
	return true;
}

/* Converts a bare token: a number or null / NaN / Infinity / -Infinity.
 * 1: not a value; 2: number out of range; 3: number too long. */
static int bare_bits(const struct tok *t, uint64_t *bits)
{
	double d;
	if (ijs_tok_is(t, TOK_BARE, "null"))
		*bits = MDL_VALUE_NULL_BITS;
	else if (ijs_tok_is(t, TOK_BARE, "NaN"))
		*bits = MDL_VALUE_NAN_BITS;
	else if (ijs_tok_is(t, TOK_BARE, "Infinity"))
		*bits = 0x7ff0000000000000ull;
	else if (ijs_tok_is(t, TOK_BARE, "-Infinity"))
		*bits = 0xfff0000000000000ull;
	else {
		int rc = ijs_scan_number(t->s, t->len, &d);
		if (rc)
			return rc;
		memcpy(bits, &d, sizeof(d));
	}
	return 0;
}

static int metric_value(struct parser *ps, const char *name, size_t len, uint64_t *bits)
{
	struct tok t;
	int rc = ijs_lex_value(ps, "metrics", &t);
	if (rc)
		return rc;
	if (t.kind == TOK_STR && string_bits(&t, bits))
		return 0;
	int r = t.kind == TOK_BARE ? bare_bits(&t, bits) : 1;
	if (r == 0)
		return 0;
	char tmp[ECHO_BUF + 2], nm[ECHO_BUF];
	ijs_echo(nm, name, len, 32);
	if (r == 2)
		return ijs_fail(ps, RDB_EINVAL, t.line, "metrics",
				"number out of range for a 64-bit float in metric \"%s\": %s", nm,
				ijs_describe(tmp, &t));
	if (r == 3)
		return ijs_fail(ps, RDB_EINVAL, t.line, "metrics",
				"number literal in metric \"%s\" is longer than %d characters", nm,
				NUMBER_MAX);
	return ijs_fail(ps, RDB_EINVAL, t.line, "metrics",
			"value of metric \"%s\" must be a number, null, NaN, Infinity, -Infinity, "
			"\"NaN\", \"Inf\", \"-Inf\" or \"0x\" + 16 hex digits; got %s",
			nm, ijs_describe(tmp, &t));
}

/* Validates a metric name and adds its table entry (value not yet set). */
static int metric_add_name(struct parser *ps, const struct tok *t)
{
	if (!mdl_metric_valid(t->s, t->len))
		return ijs_fail(ps, RDB_EINVAL, t->line, "metrics",
				"metric name must be 1 to %u printable ASCII characters other than "
				"space, '\"', '\\', '{', '}' and ','",
				MDL_METRIC_MAX);
	if (ps->rec.n >= ps->lim->max_metrics_per_record)
		return ijs_fail(ps, RDB_ELIMIT, t->line, "metrics",
				"record has more than %zu metrics (max_metrics_per_record)",
				ps->lim->max_metrics_per_record);
	if (ps->rec.n == ps->cap && ijs_grow_ents(ps))
		return ijs_fail_nomem(ps);
	struct metric_ent *e = &ps->ents[ps->rec.n];
	e->name = t->s == ps->scratch ? NULL : t->s;
	e->len = t->len;
	if (!e->name && ijs_arena_put(ps, t->s, t->len, &e->off))
		return ijs_fail_nomem(ps);
	if (!ijs_set_insert(ps, t->s, t->len))
		return ijs_fail(ps, RDB_EINVAL, t->line, "metrics",
				"metric appears twice in one record");
	return 0;
}

/* Parses one "name": value member of the metrics object. */
static int metric_member(struct parser *ps)
{
	struct tok t;
	ijs_skip_ws(ps);
	if (ps->p >= ps->end || *ps->p != '"')
		return ijs_fail_unexpected(ps, "metrics", "a metric name in double quotes");
	int rc = ijs_lex_string(ps, "metrics", &t);
	if (rc)
		return rc;
	if ((rc = metric_add_name(ps, &t)))
		return ijs_in_member(ps, rc, "metrics", t.s, t.len);
	struct metric_ent *e = &ps->ents[ps->rec.n];
	const char *name = ijs_ent_name(ps, e);
	if ((rc = ijs_expect(ps, ':', "metrics", "':' after the metric name")) ||
	    (rc = metric_value(ps, name, e->len, &e->bits)))
		return ijs_in_member(ps, rc, "metrics", name, e->len);
	ps->rec.n++;
	return 0;
}

static int field_metrics(struct parser *ps)
{
	if (ps->rec.seen & F_FIELDS)
		return ijs_fail(
		    ps, RDB_EINVAL, ps->line, "metrics",
		    "a record cannot have both \"fields\" and \"metrics\" (fields belong to "
		    "log records)");
	ijs_skip_ws(ps);
	if (ps->p >= ps->end || *ps->p != '{') {
		struct tok t;
		int rc = ijs_lex_value(ps, "metrics", &t);
		char tmp[ECHO_BUF + 2];
		return rc ? rc
			  : ijs_fail(ps, RDB_EINVAL, t.line, "metrics",
				     "metrics must be an object of metric name to value, got %s",
				     ijs_describe(tmp, &t));
	}
	ps->p++;
	int rc = ijs_enter(ps, "metrics");
	if (rc)
		return rc;
	ijs_skip_ws(ps);
	if (ps->p < ps->end && *ps->p == '}')
		return ijs_fail(ps, RDB_EINVAL, ps->line, "metrics",
				"metrics must have at least one entry");
	do {
		rc = metric_member(ps);
		if (rc == 0)
			rc = ijs_next_member(ps, "metrics");
	} while (rc == 0);
	ps->depth--;
	return rc < 0 ? rc : 0;
}

/* ---- records -------------------------------------------------------------- */

/* In enum field bit order: fields[i].f == 1u << i. */
static const struct {
	const char *name;
	unsigned f;
} fields[NFIELDS] = {
    {"job", F_JOB},
    {"rank", F_RANK},
    {"step", F_STEP},
    {"timestamp", F_TIMESTAMP},
    {"attempt", F_ATTEMPT},
    {"type", F_TYPE},
    {"metrics", F_METRICS},
    {"level", F_LEVEL},
    {"message", F_MESSAGE},
    {"fields", F_FIELDS},
    {"name", F_NAME},
    {"start", F_START},
    {"duration_ns", F_DURATION},
};

#define F_COMMON (F_JOB | F_RANK | F_ATTEMPT | F_TYPE)

/* Per enum rec_type: its name, the fields it may have, the fields it needs. */
static const struct {
	const char *name;
	unsigned allowed, required;
	const char *has; /* allowed, in words */
	const char *needs;
} types[] = {
    {"metrics", F_COMMON | F_STEP | F_TIMESTAMP | F_METRICS, F_JOB | F_RANK | F_METRICS,
     "job, rank, step, timestamp, attempt, type, metrics", "job, rank, metrics"},
    {"log", F_COMMON | F_STEP | F_TIMESTAMP | F_LEVEL | F_MESSAGE | F_FIELDS,
     F_JOB | F_RANK | F_MESSAGE,
     "job, rank, step, timestamp, attempt, type, level, message, fields", "job, rank, message"},
    {"span", F_COMMON | F_STEP | F_NAME | F_START | F_DURATION,
     F_JOB | F_RANK | F_STEP | F_NAME | F_START | F_DURATION,
     "job, rank, step, attempt, type, name, start, duration_ns",
     "job, rank, step, name, start, duration_ns"},
};

static int record_field(struct parser *ps, unsigned f)
{
	switch (f) {
	case F_JOB:
		return field_job(ps);
	case F_RANK:
		return field_rank(ps);
	case F_TIMESTAMP:
		return field_timestamp(ps);
	case F_TYPE:
		return field_type(ps);
	case F_METRICS:
		return field_metrics(ps);
	case F_LEVEL:
		return ijs_field_level(ps);
	case F_MESSAGE:
		return ijs_field_message(ps);
	case F_FIELDS:
		return ijs_field_fields(ps);
	case F_NAME:
		return ijs_field_name(ps);
	case F_START:
		return field_time(ps, "start");
	case F_DURATION:
		return ijs_field_duration(ps);
	default:
		return field_step_attempt(ps, f);
	}
}

/* Parses one "key": value member of a record. */
static int record_member(struct parser *ps)
{
	struct tok t;
	ijs_skip_ws(ps);
	if (ps->p >= ps->end || *ps->p != '"')
		return ijs_fail_unexpected(ps, "", "a field name in double quotes");
	int rc = ijs_lex_string(ps, "", &t);
	if (rc)
		return rc;
	size_t i = 0;
	while (i < NFIELDS && !ijs_tok_is(&t, TOK_STR, fields[i].name))
		i++;
	char tmp[ECHO_BUF];
	if (i == NFIELDS) {
		/* the field name in the error is the (escaped, truncated) key itself */
		const char *key = ijs_echo(tmp, t.src, t.src_len, ECHO_MAX);
		return ijs_fail(
		    ps, RDB_EINVAL, t.line, key,
		    "unknown field \"%s\"; known: job, rank, type, attempt, step, "
		    "timestamp, metrics, level, message, fields, name, start, duration_ns",
		    key);
	}
	unsigned f = fields[i].f;
	const char *name = fields[i].name;
	if (ps->rec.seen & f)
		return ijs_fail(ps, RDB_EINVAL, t.line, name, "field \"%s\" appears twice", name);
	ps->rec.seen |= f;
	ps->rec.field_line[i] = t.line;
	rc = ijs_expect(ps, ':', name, "':' after the field name");
	return rc ? rc : record_field(ps, f);
}

static void record_reset(struct parser *ps)
{
	struct record *r = &ps->rec;
	r->seen = 0;
	r->line = ps->line;
	r->type = REC_METRICS;
	r->type_given = false;
	r->job = NULL;
	r->job_len = 0;
	r->rank = 0;
	r->step = MDL_STEP_NONE;
	r->ts_ns = ps->default_ts_ns;
	r->duration_ns = 0;
	r->attempt = 0;
	r->n = 0;
	r->level = MDL_LEVEL_INFO;
	r->msg = NULL;
	r->msg_len = 0;
	r->has_fields = false;
	r->name_len = 0;
	ps->arena_len = 0;
	if (++ps->gen == 0) {
		memset(ps->set, 0, 2 * ps->cap * sizeof(*ps->set));
		ps->gen = 1;
	}
}

/* Checks the record's fields against its type: none that do not belong,
 * none missing. Runs once the whole record is read ("type" may come last). */
static int record_check(struct parser *ps)
{
	const struct record *r = &ps->rec;
	const char *tn = types[r->type].name;
	for (size_t i = 0; i < NFIELDS; i++) {
		if (!(r->seen & fields[i].f) || (types[r->type].allowed & fields[i].f))
			continue;
		if (!r->type_given) {
			size_t k = fields[i].f & types[REC_LOG].allowed ? REC_LOG : REC_SPAN;
			return ijs_fail(
			    ps, RDB_EINVAL, r->field_line[i], fields[i].name,
			    "field \"%s\" belongs in a record with \"type\":\"%s\" (a record "
			    "without \"type\" is a metrics record)",
			    fields[i].name, types[k].name);
		}
		return ijs_fail(ps, RDB_EINVAL, r->field_line[i], fields[i].name,
				"field \"%s\" does not belong in a %s record; %s records have %s",
				fields[i].name, tn, tn, types[r->type].has);
	}
	for (size_t i = 0; i < NFIELDS; i++) {
		if ((types[r->type].required & fields[i].f) && !(r->seen & fields[i].f))
			return ijs_fail(ps, RDB_EINVAL, r->line, fields[i].name,
					"record has no \"%s\" field (required: %s)", fields[i].name,
					types[r->type].needs);
	}
	if (r->type == REC_SPAN && r->step == MDL_STEP_NONE)
		return ijs_fail(ps, RDB_EINVAL, r->field_line[2], "step",
				"a span record needs a step (an integer >= 0), got null");
	return 0;
}

/* Adds the parsed log or span record to the events. */
static int record_emit_event(struct parser *ps)
{
	const struct record *r = &ps->rec;
	struct mdl_event e = {
	    .rank = r->rank,
	    .attempt = r->attempt,
	    .ts_ns = r->ts_ns,
	    .step = r->step,
	    .job = r->job,
	    .job_len = r->job_len,
	};
	if (r->type == REC_LOG) {
		e.kind = MDL_EV_LOG;
		e.level = r->level;
		e.text = r->msg;
		e.text_len = r->msg_len;
		e.fields = r->has_fields ? (const char *)ps->fields_text.data : "{}";
		e.fields_len = r->has_fields ? ps->fields_text.len : 2;
	} else {
		e.kind = MDL_EV_SPAN;
		e.duration_ns = r->duration_ns;
		e.text = r->name_buf;
		e.text_len = r->name_len;
		e.fields = "";
	}
	int rc = mdl_events_add(ps->ev, &e);
	if (rc == RDB_ELIMIT)
		return ijs_fail(
		    ps, rc, r->line, "",
		    "too many log and span records, or too much log text, in one request");
	if (rc == -ENOMEM)
		return ijs_fail_nomem(ps);
	if (rc)
		return ijs_fail(ps, rc, r->line, "", "the %s record was refused by storage (%s)",
				types[r->type].name, rdb_strerror(rc));
	return 0;
}

/* Adds the parsed record's points (or its event) to the batch. */
static int record_emit(struct parser *ps)
{
	const struct record *r = &ps->rec;
	int rc = record_check(ps);
	if (rc)
		return rc;
	if (r->type != REC_METRICS)
		return record_emit_event(ps);
	for (size_t i = 0; i < r->n; i++) {
		const struct metric_ent *e = &ps->ents[i];
		rc = mdl_batch_add(ps->b, r->job, r->job_len, r->rank, ijs_ent_name(ps, e), e->len,
				   r->ts_ns, r->step, r->attempt, e->bits);
		if (rc == RDB_ELIMIT)
			return ijs_fail(ps, rc, r->line, "", "too many points in one request");
		if (rc)
			return ijs_fail_nomem(ps);
	}
	return 0;
}

/* Parses one record at the cursor (after whitespace) and adds its points. */
static int parse_record(struct parser *ps)
{
	if ((size_t)ps->record >= ps->lim->max_records)
		return ijs_fail(ps, RDB_ELIMIT, ps->line, "",
				"too many records in one request (max %zu)", ps->lim->max_records);
	if (ps->p >= ps->end || *ps->p != '{') {
		struct tok t;
		int rc = ijs_lex_value(ps, "", &t);
		char tmp[ECHO_BUF + 2];
		return rc ? rc
			  : ijs_fail(ps, RDB_EINVAL, t.line, "",
				     "record must be a JSON object, got %s", ijs_describe(tmp, &t));
	}
	record_reset(ps);
	ps->p++;
	int rc = ijs_enter(ps, "");
	if (rc)
		return rc;
	ijs_skip_ws(ps);
	if (ps->p < ps->end && *ps->p == '}')
		ps->p++;
	else
		do {
			rc = record_member(ps);
			if (rc == 0)
				rc = ijs_next_member(ps, "");
		} while (rc == 0);
	if (rc < 0)
		return rc;
	ps->depth--;
	return record_emit(ps);
}

/* ---- body ----------------------------------------------------------------- */

/* After a record in an array: consumes ',' (0) or the closing ']' (1).
 * Errors here are about the body, not a record. */
static int next_record(struct parser *ps)
{
	long last = ps->record;
	ps->record = -1;
	ijs_skip_ws(ps);
	if (ps->p < ps->end && *ps->p == ']') {
		ps->p++;
		ps->record = last;
		return 1;
	}
	if (ps->p >= ps->end || *ps->p != ',')
		return ijs_fail_unexpected(ps, "", "',' or ']' after a record");
	ps->p++;
	ijs_skip_ws(ps);
	if (ps->p < ps->end && *ps->p == ']')
		return ijs_fail(ps, RDB_EINVAL, ps->line, "",
				"trailing comma before ']' is not allowed");
	ps->record = last;
	return 0;
}

static int parse_array(struct parser *ps)
{
	ps->p++;
	int rc = ijs_enter(ps, "");
	if (rc)
		return rc;
	ijs_skip_ws(ps);
	if (ps->p < ps->end && *ps->p == ']')
		ps->p++;
	else
		do {
			ps->record++;
			rc = parse_record(ps);
			if (rc == 0)
				rc = next_record(ps);
		} while (rc == 0);
	if (rc < 0)
		return rc;
	ps->depth--;
	long last = ps->record;
	ps->record = -1;
	ijs_skip_ws(ps);
	if (ps->p < ps->end)
		return ijs_fail_unexpected(ps, "", "nothing after the closing ']'");
	ps->record = last;
	return 0;
}

static int parse_ndjson(struct parser *ps)
{
	for (;;) {
		ijs_skip_ws(ps);
		if (ps->p >= ps->end)
			return 0;
		ps->record++;
		int rc = parse_record(ps);
		if (rc)
			return rc;
		while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\r'))
			ps->p++;
		if (ps->p < ps->end && *ps->p != '\n')
			return ijs_fail_unexpected(ps, "",
						   "a line break after the record (NDJSON has one "
						   "record per line)");
	}
}

static int parse_body(struct parser *ps)
{
	if (ps->end - ps->p >= 3 && memcmp(ps->p, "\xef\xbb\xbf", 3) == 0)
		ps->p += 3;
	ijs_skip_ws(ps);
	if (ps->p >= ps->end)
		return ijs_fail(ps, RDB_EINVAL, 0, "", "no records: the body is empty");
	if (*ps->p == '{')
		return parse_ndjson(ps);
	if (*ps->p != '[')
		return ijs_fail_unexpected(ps, "", "'[' (a JSON array of records) or '{' (NDJSON)");
	int rc = parse_array(ps);
	if (rc == 0 && ps->record < 0)
		return ijs_fail(ps, RDB_EINVAL, 0, "", "no records: the array is empty");
	return rc;
}

int ing_json_parse_all(const char *body, size_t len, const struct ing_limits *lim,
		       int64_t default_ts_ns, struct mdl_batch *b, struct mdl_events *ev,
		       struct ing_error *err, size_t *nrecords)
{
	struct ing_json_units u = {.precision_ns = 1, .min_ts_ns = INT64_MIN};
	return ing_json_parse_units(body, len, lim, default_ts_ns, &u, b, ev, err, nrecords);
}

int ing_json_parse_units(const char *body, size_t len, const struct ing_limits *lim,
			 int64_t default_ts_ns, const struct ing_json_units *u, struct mdl_batch *b,
			 struct mdl_events *ev, struct ing_error *err, size_t *nrecords)
{
	struct ing_error dummy;
	struct parser parser, *ps = &parser; /* ~5 KiB of stack */
	if (!err)
		err = &dummy;
	memset(err, 0, sizeof(*err));
	err->record = -1;
	ps->p = body;
	ps->end = body + len;
	ps->line = 1;
	ps->record = -1;
	ps->depth = 0;
	ps->lim = lim;
	ps->err = err;
	ps->b = b;
	ps->ev = ev;
	ps->default_ts_ns = default_ts_ns;
	ps->precision_ns = u->precision_ns > 1 ? u->precision_ns : 1;
	ps->min_ts_ns = u->min_ts_ns;
	ps->ents = ps->ents_inline;
	ps->set = ps->set_inline;
	ps->cap = INLINE_METRICS;
	memset(ps->set_inline, 0, sizeof(ps->set_inline));
	ps->gen = 0;
	ps->arena = ps->arena_inline;
	ps->arena_len = 0;
	ps->arena_cap = INLINE_ARENA;
	ps->dst = ps->scratch;
	ps->dst_cap = SCRATCH_MAX;
	ps->msg_buf = NULL;
	ps->dec_buf = NULL;
	rdb_buf_init(&ps->fields_text, MDL_EVENT_FIELDS_MAX);
	int rc = parse_body(ps);
	if (rc == 0 && nrecords)
		*nrecords = (size_t)(ps->record + 1);
	if (ps->ents != ps->ents_inline) {
		free(ps->ents);
		free(ps->set);
	}
	if (ps->arena != ps->arena_inline)
		free(ps->arena);
	free(ps->msg_buf);
	rdb_buf_free(&ps->fields_text);
	return rc;
}

int ing_json_parse(const char *body, size_t len, const struct ing_limits *lim,
		   int64_t default_ts_ns, struct mdl_batch *b, struct ing_error *err,
		   size_t *nrecords)
{
	return ing_json_parse_all(body, len, lim, default_ts_ns, b, NULL, err, nrecords);
}
