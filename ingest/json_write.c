/* json_write.c - the parser for POST /api/v1/write bodies (ingest/ing.h).
 *
 * Design: a hand-written, single-pass tokenizer and parser (no recursion),
 * specialised for the one shape we accept. No DOM, no per-token malloc: a
 * string without escapes is a view into the body; a string with escapes is
 * decoded into a fixed scratch buffer; numbers are converted in place. A
 * record's keys may come in any order (metrics before job), so each record
 * is parsed completely into a small table of (metric name, value bits) and
 * only then are its points added to the batch. That table, the duplicate-name
 * hash set and the arena for escaped names live inside the parser for up to
 * INLINE_METRICS metrics, so a typical record costs no allocation here;
 * beyond that they grow by doubling on the heap (a few times per request at
 * most, bounded by max_metrics_per_record) and are freed in one place.
 * Log and span records become events (storage/events.h). A log's message
 * without escapes stays a view into the body; with escapes it is decoded
 * into a 64 KiB buffer, and its "fields" object is re-written as compact
 * JSON into a bounded buffer, both allocated once per request on its first
 * log record. The fields' keys share the metrics' name table and duplicate
 * set (a record has one or the other).
 *
 * Accepted grammar (JSON per RFC 8259 plus the NaN/Infinity/-Infinity
 * literals Python's json module writes):
 *   body     = [BOM] ws ( array | ndjson )
 *   array    = '[' ws record ( ws ',' ws record )* ws ']' ws       (no trailing ',')
 *   ndjson   = record ( sp* '\n' ws record )* sp* ws   sp = ' ' | '\t' | '\r'
 *   ws       = ( ' ' | '\t' | '\r' | '\n' )*
 *   record   = '{' [ member ( ',' member )* ] '}', members in any order; the
 *              "type" member picks the kind (absent: metrics). The members:
 *     "type":        "metrics" | "log" | "span"            (default "metrics")
 *     "job":         string, [A-Za-z0-9._-]{1,128}                 (all: required)
 *     "rank":        integer 0..STO_RANK_MAX, or the string "job"  (all: required)
 *     "attempt":     integer 0..UINT32_MAX, or null (= 0)          (all: optional)
 *     "step":        integer 0..INT64_MAX, or null (= no step)
 *                    (metrics, log: optional; span: required, not null)
 *     "timestamp":   integer ns since the epoch (int64, may be negative), or
 *                    null (= default_ts_ns)               (metrics, log: optional)
 *     "metrics":     object of 1..max_metrics_per_record name -> value
 *                                                         (metrics: required)
 *     "level":       string accepted by sto_level_parse (case-insensitive
 *                    debug, info, warn, error, fatal; also warning, err,
 *                    critical, ...), or null (= info)     (log: optional)
 *     "message":     string, valid UTF-8, 0..STO_EVENT_TEXT_MAX bytes after
 *                    unescaping                           (log: required)
 *     "fields":      flat object name -> string | number | true | false |
 *                    null, or null (= "{}")               (log: optional)
 *     "name":        string, 1..STO_SPAN_NAME_MAX bytes with the metric-name
 *                    alphabet (printable ASCII; not space " \ { } ,)
 *                                                         (span: required)
 *     "start":       integer ns since the epoch (int64)   (span: required)
 *     "duration_ns": integer 0..INT64_MAX                 (span: required)
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
 *   - Event strings are UTF-8-validated after unescaping (RFC 3629: overlong
 *     forms, surrogates, code points above U+10FFFF and truncated sequences
 *     are errors); \u0000 is allowed in a message (it is valid UTF-8).
 *   - "fields" is stored as compact JSON text, keys in input order: strings
 *     and keys re-escaped minimally ('"', '\\' and control bytes, as \b \f
 *     \n \r \t or \u00XX; everything else, UTF-8 included, raw), numbers as
 *     their original token text (JSON grammar checked; NaN/Infinity are
 *     errors there), true/false/null as is; at most STO_EVENT_FIELDS_MAX
 *     bytes. Nested objects/arrays and duplicate keys are errors naming the
 *     field ("fields.<key>").
 *   - A UTF-8 byte order mark at the very start is skipped (PowerShell and
 *     some Windows tools write one); anywhere else it is an error.
 *   - The first non-blank byte picks the form: '[' array, '{' NDJSON.
 *   - NDJSON: blank lines (ws only) are ignored; a record may span lines, but
 *     after a record's '}' only spaces/tabs/'\r' may follow before '\n' or
 *     the end of the body. Lines end in "\n" or "\r\n".
 *   - Integer fields accept only plain integer tokens -?(0|[1-9][0-9]*):
 *     "1.0", "1e3" and "+1" are errors; "-0" is 0. Overflow is detected.
 *   - Duplicate keys (record fields or metric names) and unknown fields are
 *     errors, as are trailing commas, empty bodies and empty arrays.
 *   - Strings: all JSON escapes including \uXXXX with surrogate pairs
 *     (decoded to UTF-8); invalid escapes, lone surrogates and raw control
 *     bytes are errors. Raw bytes >= 0x80 are UTF-8-validated only in the
 *     strings of log records (above): every other string we keep (job,
 *     metric and span names, keywords) must be ASCII, so such bytes are
 *     rejected by the name checks ("\u0041" gives 'A'; "\u00e9" gives a
 *     non-ASCII metric name, which is an error).
 *   - Numbers: JSON number grammar checked here (no '+', leading zeros, hex,
 *     "inf"); conversion is correctly rounded (an exact fast path for short
 *     decimals, otherwise strtod on a bounded NUL-terminated copy, which
 *     relies on LC_NUMERIC being "C" -- rankdbd never calls setlocale).
 *     Literals that overflow to +-inf (1e400) are errors; underflow rounds
 *     as strtod does (5e-324 is the smallest denormal, 1e-400 is 0).
 *     "-0" and "-0.0" give the -0.0 bits. Number literals longer than
 *     NUMBER_MAX characters are refused (an exact decimal of any double
 *     needs fewer than 800).
 *   - Depth is intrinsically at most 3 (array, record, metrics/fields): a nested
 *     object or array where a scalar is expected is an error at once, so
 *     there is no recursion; lim->max_depth is still checked per level.
 *
 * Invariants: the cursor never passes end (the body need not be
 * NUL-terminated); lines are counted only in whitespace (raw newlines are
 * invalid inside strings), so err->line is the line of the offending token
 * (for a missing field: the line of the record's '{').
 *
 * Failure: the first error stops the parse; *err gets the 0-based record
 * (-1 for the body), the line, the field ("rank", "metrics.loss") and a
 * message that echoes at most ECHO_MAX bytes of input, with anything but
 * printable ASCII shown as \xHH. Points and events of earlier records may
 * already be in the batch and events (the caller resets them). Not
 * thread-safe per batch; reentrant.
 */
#include "ingest/ing.h"
#include "common/rdb_buf.h"
#include "common/rdb_err.h"
#include "storage/events.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INLINE_METRICS 64   /* metrics per record held without allocating */
#define INLINE_ARENA   1024 /* bytes of escaped metric names held inline */
#define SCRATCH_MAX    512  /* decoded string bytes kept; longer is an error */
#define NUMBER_MAX     1100 /* longest number literal (exact denormals: ~770) */
#define ECHO_MAX       64   /* input bytes echoed into a message */
#define ECHO_BUF       (ECHO_MAX * 4 + 8)

void ing_limits_default(struct ing_limits *l)
{
	l->max_records = 100000;
	l->max_metrics_per_record = 1024;
	l->max_depth = 16;
}

/* ---- parser state --------------------------------------------------------- */

enum field {
	F_JOB = 1u << 0,
	F_RANK = 1u << 1,
	F_STEP = 1u << 2,
	F_TIMESTAMP = 1u << 3,
	F_ATTEMPT = 1u << 4,
	F_TYPE = 1u << 5,
	F_METRICS = 1u << 6,
	F_LEVEL = 1u << 7,
	F_MESSAGE = 1u << 8,
	F_FIELDS = 1u << 9,
	F_NAME = 1u << 10,
	F_START = 1u << 11,
	F_DURATION = 1u << 12,
};
#define NFIELDS 13

enum rec_type { REC_METRICS, REC_LOG, REC_SPAN };

enum tok_kind { TOK_STR, TOK_BARE, TOK_OBJ, TOK_ARR };

/* A scalar token. For TOK_STR, src/src_len span the raw literal between the
 * quotes and s/len the decoded bytes (a view into the body, or ps->dst:
 * the scratch buffer unless a caller chose a bigger one); len may exceed
 * ps->dst_cap, in which case s holds only a prefix. */
struct tok {
	enum tok_kind kind;
	const char *src;
	size_t src_len;
	const char *s;
	size_t len;
	long line;
};

struct metric_ent {
	const char *name; /* into the body; NULL: at arena + off */
	size_t off;
	size_t len;
	uint64_t bits;
};

struct record {
	unsigned seen;	 /* enum field bits */
	long line;	 /* of the '{' */
	long field_line[NFIELDS]; /* line of each seen field's key, by bit index */
	enum rec_type type;
	bool type_given;
	const char *job; /* into the body or job_buf */
	size_t job_len;
	char job_buf[STO_JOB_MAX];
	uint32_t rank;
	int64_t step, ts_ns; /* ts_ns: metrics/log timestamp, span start */
	int64_t duration_ns;
	uint32_t attempt;
	size_t n; /* metrics, or keys of a log's fields (same table) */
	uint8_t level;
	const char *msg; /* into the body or msg_buf; msg_len bytes */
	size_t msg_len;
	bool has_fields; /* fields_text holds this record's fields object */
	char name_buf[STO_SPAN_NAME_MAX];
	size_t name_len;
};

struct parser {
	const char *p, *end;
	long line;
	long record; /* index of the record being parsed, -1 outside */
	size_t depth;
	const struct ing_limits *lim;
	struct ing_error *err;
	struct sto_batch *b;
	struct sto_events *ev; /* NULL: log and span records are refused */
	int64_t default_ts_ns;
	struct record rec;
	struct metric_ent *ents; /* [cap]: ents_inline or heap */
	size_t cap;
	uint64_t *set; /* [2 * cap]: gen << 32 | index + 1; set_inline or heap */
	uint32_t gen;  /* set slots of other generations are empty */
	char *arena;   /* escaped metric names of this record */
	size_t arena_len, arena_cap;
	struct metric_ent ents_inline[INLINE_METRICS];
	uint64_t set_inline[2 * INLINE_METRICS];
	char arena_inline[INLINE_ARENA];
	char *dst;	 /* where escaped strings are decoded: scratch, msg_buf or dec_buf */
	size_t dst_cap;	 /* bytes of dst; longer strings keep only a prefix */
	char *msg_buf;	 /* [STO_EVENT_TEXT_MAX] a log message with escapes; lazily */
	char *dec_buf;	 /* [STO_EVENT_FIELDS_MAX] a key/string of fields; lazily */
	struct rdb_buf fields_text; /* the record's fields, compact JSON; bounded */
	char scratch[SCRATCH_MAX];
};

/* ---- errors --------------------------------------------------------------- */

/* Writes at most max bytes of s as printable ASCII (others as \xHH), with
 * "..." when cut. out has room for ECHO_BUF bytes. */
static const char *echo(char *out, const char *s, size_t n, size_t max)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;
	for (size_t i = 0; i < n && i < max; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c < 0x7f) {
			out[o++] = (char)c;
			continue;
		}
		out[o++] = '\\';
		out[o++] = 'x';
		out[o++] = hex[c >> 4];
		out[o++] = hex[c & 15];
	}
	if (n > max) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = 0;
	return out;
}

static int fail(struct parser *ps, int rc, long line, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int fail(struct parser *ps, int rc, long line, const char *field, const char *fmt, ...)
{
	struct ing_error *e = ps->err;
	e->record = ps->record;
	e->line = line;
	snprintf(e->field, sizeof(e->field), "%s", field);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return rc;
}

/* Describes a token for "got ..." in messages. */
static const char *describe(char *out, const struct tok *t)
{
	char tmp[ECHO_BUF];
	switch (t->kind) {
	case TOK_OBJ:
		return "an object";
	case TOK_ARR:
		return "an array";
	case TOK_STR:
		snprintf(out, ECHO_BUF + 2, "\"%s\"", echo(tmp, t->src, t->src_len, ECHO_MAX));
		return out;
	case TOK_BARE:
		break;
	}
	return echo(out, t->src, t->src_len, ECHO_MAX);
}

/* Describes the byte at the cursor (or the end of the body). */
static int fail_unexpected(struct parser *ps, const char *field, const char *expected)
{
	if (ps->p >= ps->end)
		return fail(ps, RDB_EINVAL, ps->line, field,
			    "body ends where %s was expected (truncated body?)", expected);
	char tmp[ECHO_BUF];
	return fail(ps, RDB_EINVAL, ps->line, field, "expected %s, got '%s'", expected,
		    echo(tmp, ps->p, 1, 1));
}

static int fail_nomem(struct parser *ps)
{
	return fail(ps, -ENOMEM, ps->line, "", "out of memory while parsing the request");
}

/* ---- lexing --------------------------------------------------------------- */

static void skip_ws(struct parser *ps)
{
	const char *p = ps->p, *end = ps->end;
	while (p < end) {
		char c = *p;
		if (c == '\n')
			ps->line++;
		else if (c != ' ' && c != '\t' && c != '\r')
			break;
		p++;
	}
	ps->p = p;
}

static bool is_bare_char(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       c == '+' || c == '-' || c == '.';
}

static int hex_val(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Reads 4 hex digits at p (p + 4 <= end checked by the caller). -1 if bad. */
static long hex4(const char *p)
{
	long v = 0;
	for (int i = 0; i < 4; i++) {
		int h = hex_val(p[i]);
		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
}

static void put_byte(struct parser *ps, size_t *n, unsigned c)
{
	if (*n < ps->dst_cap)
		ps->dst[*n] = (char)c;
	(*n)++;
}

static void put_utf8(struct parser *ps, size_t *n, unsigned long cp)
{
	if (cp < 0x80) {
		put_byte(ps, n, (unsigned)cp);
	} else if (cp < 0x800) {
		put_byte(ps, n, 0xc0 | (unsigned)(cp >> 6));
		put_byte(ps, n, 0x80 | (unsigned)(cp & 0x3f));
	} else if (cp < 0x10000) {
		put_byte(ps, n, 0xe0 | (unsigned)(cp >> 12));
		put_byte(ps, n, 0x80 | (unsigned)((cp >> 6) & 0x3f));
		put_byte(ps, n, 0x80 | (unsigned)(cp & 0x3f));
	} else {
		put_byte(ps, n, 0xf0 | (unsigned)(cp >> 18));
		put_byte(ps, n, 0x80 | (unsigned)((cp >> 12) & 0x3f));
		put_byte(ps, n, 0x80 | (unsigned)((cp >> 6) & 0x3f));
		put_byte(ps, n, 0x80 | (unsigned)(cp & 0x3f));
	}
}

/* Decodes a \u escape at ps->p (pointing at 'u'), with its low surrogate. */
static int lex_unicode(struct parser *ps, const char *field, size_t *n)
{
	const char *p = ps->p + 1;
	long hi = p + 4 <= ps->end ? hex4(p) : -1;
	if (hi < 0)
		return fail(ps, RDB_EINVAL, ps->line, field,
			    "invalid \\u escape in a string: need 4 hex digits");
	p += 4;
	unsigned long cp = (unsigned long)hi;
	if (hi >= 0xdc00 && hi <= 0xdfff)
		return fail(ps, RDB_EINVAL, ps->line, field,
			    "invalid \\u%04lx in a string: lone low surrogate", hi);
	if (hi >= 0xd800 && hi <= 0xdbff) {
		long lo = p + 6 <= ps->end && p[0] == '\\' && p[1] == 'u' ? hex4(p + 2) : -1;
		if (lo < 0xdc00 || lo > 0xdfff)
			return fail(ps, RDB_EINVAL, ps->line, field,
				    "invalid \\u%04lx in a string: high surrogate without a "
				    "following \\uDC00-\\uDFFF",
				    hi);
		cp = 0x10000 + (((unsigned long)hi - 0xd800) << 10) + ((unsigned long)lo - 0xdc00);
		p += 6;
	}
	put_utf8(ps, n, cp);
	ps->p = p;
	return 0;
}

/* Decodes the rest of a string with escapes; ps->p is at the first '\\' and
 * start is the first byte after the opening quote. */
static int lex_string_slow(struct parser *ps, const char *field, const char *start, struct tok *t)
{
	size_t n = (size_t)(ps->p - start);
	memcpy(ps->dst, start, n < ps->dst_cap ? n : ps->dst_cap);
	while (ps->p < ps->end) {
		unsigned char c = (unsigned char)*ps->p;
		if (c == '"') {
			t->src_len = (size_t)(ps->p - start);
			t->s = ps->dst;
			t->len = n;
			ps->p++;
			return 0;
		}
		if (c < 0x20)
			return fail(ps, RDB_EINVAL, ps->line, field,
				    "raw control character 0x%02x in a string (escape it)", c);
		if (c != '\\') {
			put_byte(ps, &n, c);
			ps->p++;
			continue;
		}
		if (++ps->p >= ps->end)
			break;
		static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
		const char *e = memchr(from, *ps->p, sizeof(from) - 1);
		if (e) {
			put_byte(ps, &n, (unsigned char)to[e - from]);
			ps->p++;
		} else if (*ps->p == 'u') {
			int rc = lex_unicode(ps, field, &n);
			if (rc)
				return rc;
		} else {
			char tmp[ECHO_BUF];
			return fail(ps, RDB_EINVAL, ps->line, field,
				    "invalid escape '\\%s' in a string", echo(tmp, ps->p, 1, 1));
		}
	}
	return fail(ps, RDB_EINVAL, ps->line, field, "body ends inside a string (truncated body?)");
}

/* Lexes a string; ps->p is at the opening quote. */
static int lex_string(struct parser *ps, const char *field, struct tok *t)
{
	const char *start = ++ps->p, *p = start, *end = ps->end;
	t->kind = TOK_STR;
	t->src = start;
	t->line = ps->line;
	while (p < end && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20)
		p++;
	ps->p = p;
	if (p < end && *p == '"') {
		t->src_len = t->len = (size_t)(p - start);
		t->s = start;
		ps->p++;
		return 0;
	}
	return lex_string_slow(ps, field, start, t);
}

/* Lexes one value where a scalar is expected. Objects and arrays are not
 * consumed (they are always an error there); the caller reports them. */
static int lex_value(struct parser *ps, const char *field, struct tok *t)
{
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == '"')
		return lex_string(ps, field, t);
	t->line = ps->line;
	t->src = ps->p;
	t->src_len = 0;
	if (ps->p < ps->end && (*ps->p == '{' || *ps->p == '[')) {
		t->kind = *ps->p == '{' ? TOK_OBJ : TOK_ARR;
		t->src_len = 1;
		return 0;
	}
	const char *p = ps->p;
	while (p < ps->end && is_bare_char((unsigned char)*p))
		p++;
	if (p == ps->p)
		return fail_unexpected(ps, field, "a value");
	t->kind = TOK_BARE;
	t->src_len = (size_t)(p - ps->p);
	t->s = t->src;
	t->len = t->src_len;
	ps->p = p;
	return 0;
}

static bool tok_is(const struct tok *t, enum tok_kind k, const char *word)
{
	size_t n = strlen(word);
	return t->kind == k && t->len == n && memcmp(t->s, word, n) == 0;
}

/* Expects byte c (after whitespace) and consumes it. */
static int expect(struct parser *ps, char c, const char *field, const char *what)
{
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == c) {
		ps->p++;
		return 0;
	}
	return fail_unexpected(ps, field, what);
}

/* After a member: consumes ',' (0) or the closing '}' (1). */
static int next_member(struct parser *ps, const char *field)
{
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == ',') {
		ps->p++;
		skip_ws(ps);
		if (ps->p < ps->end && *ps->p == '}')
			return fail(ps, RDB_EINVAL, ps->line, field,
				    "trailing comma before '}' is not allowed");
		return 0;
	}
	if (ps->p < ps->end && *ps->p == '}') {
		ps->p++;
		return 1;
	}
	return fail_unexpected(ps, field, "',' or '}' after a value");
}

static int enter(struct parser *ps, const char *field)
{
	if (++ps->depth <= ps->lim->max_depth)
		return 0;
	return fail(ps, RDB_ELIMIT, ps->line, field, "JSON nesting deeper than %zu levels",
		    ps->lim->max_depth);
}

/* ---- numbers -------------------------------------------------------------- */

/* Checks the JSON number grammar -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
 * and says whether it is a plain integer. */
static bool json_number(const char *s, size_t n, bool *is_int)
{
	size_t i = 0;
	if (i < n && s[i] == '-')
		i++;
	if (i >= n || s[i] < '0' || s[i] > '9')
		return false;
	if (s[i++] != '0')
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
	*is_int = i == n;
	if (i < n && s[i] == '.') {
		size_t d = ++i;
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
		if (i == d)
			return false;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		size_t d = i;
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
		if (i == d)
			return false;
	}
	return i == n;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* Reads the digits at s[*i] into the significand: at most 19 significant
 * digits are kept (*many set beyond); frac: each kept or leading-zero digit
 * lowers the exponent. Returns the number of digits read. */
static size_t scan_digits(const char *s, size_t n, size_t *i, bool frac, uint64_t *w, int *sig,
			  int *e10, bool *many)
{
	size_t start = *i;
	for (; *i < n && is_digit(s[*i]); (*i)++) {
		if (*w == 0 && s[*i] == '0') {
			*e10 -= frac;
			continue;
		}
		if (*sig == 19) {
			*many = true;
			continue;
		}
		*w = *w * 10 + (uint64_t)(s[*i] - '0');
		(*sig)++;
		*e10 -= frac;
	}
	return *i - start;
}

/* One pass over a bare token: checks the JSON number grammar
 * -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? and converts it. A
 * significand below 2^53 times a power of ten within 1e22 is one correctly
 * rounded IEEE operation on exact operands (Clinger's fast path); anything
 * else goes to strtod on a bounded NUL-terminated copy. 1: not a number;
 * 2: out of range (+-inf); 3: longer than NUMBER_MAX characters. */
static int scan_number(const char *s, size_t n, double *out)
{
	static const double pow10[] = {1e0,  1e1,  1e2,	 1e3,  1e4,  1e5,  1e6,	 1e7,
				       1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
				       1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
	bool neg = n > 0 && s[0] == '-', many = false;
	size_t i = neg;
	uint64_t w = 0;
	int sig = 0, e10 = 0, ex = 0;
	if (i >= n || !is_digit(s[i]) || (s[i] == '0' && i + 1 < n && is_digit(s[i + 1])))
		return 1;
	scan_digits(s, n, &i, false, &w, &sig, &e10, &many);
	if (i < n && s[i] == '.' && (++i, !scan_digits(s, n, &i, true, &w, &sig, &e10, &many)))
		return 1;
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		bool eneg = ++i < n && s[i] == '-';
		i += i < n && (s[i] == '-' || s[i] == '+');
		size_t d = i;
		for (; i < n && is_digit(s[i]); i++)
			ex = ex > 100000 ? ex : ex * 10 + (s[i] - '0');
		if (i == d)
			return 1;
		e10 += eneg ? -ex : ex;
	}
	if (i != n)
		return 1;
	double v;
	if (w == 0) {
		v = 0.0;
	} else if (FLT_EVAL_METHOD == 0 && !many && w <= (1ull << 53) && e10 >= -22 && e10 <= 22) {
		v = e10 < 0 ? (double)w / pow10[-e10] : (double)w * pow10[e10];
	} else {
		char buf[NUMBER_MAX + 1];
		if (n > NUMBER_MAX)
			return 3;
		memcpy(buf, s, n);
		buf[n] = 0;
		v = fabs(strtod(buf, NULL));
	}
	if (isinf(v))
		return 2;
	*out = neg ? -v : v;
	return 0;
}

enum int_result { INT_OK, INT_FRACTION, INT_NOT_NUMBER, INT_OVERFLOW };

/* Parses a plain integer token into sign and magnitude. */
static enum int_result parse_int(const struct tok *t, bool *neg, uint64_t *mag)
{
	bool is_int = false;
	if (t->kind != TOK_BARE || !json_number(t->s, t->len, &is_int))
		return INT_NOT_NUMBER;
	if (!is_int)
		return INT_FRACTION;
	size_t i = t->s[0] == '-';
	uint64_t v = 0;
	for (; i < t->len; i++) {
		unsigned d = (unsigned)(t->s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return INT_OVERFLOW;
		v = v * 10 + d;
	}
	*neg = t->s[0] == '-';
	*mag = v;
	return INT_OK;
}

/* Parses an integer in [0, max]. */
static int field_uint(struct parser *ps, const char *field, uint64_t max, uint64_t *out)
{
	struct tok t;
	int rc = lex_value(ps, field, &t);
	if (rc)
		return rc;
	bool neg = false;
	uint64_t mag = 0;
	enum int_result r = parse_int(&t, &neg, &mag);
	if (r == INT_OK && (!neg || mag == 0) && mag <= max) {
		*out = mag;
		return 0;
	}
	char tmp[ECHO_BUF + 2];
	return fail(ps, RDB_EINVAL, t.line, field, "%s must be an integer from 0 to %llu, got %s",
		    field, (unsigned long long)max, describe(tmp, &t));
}

/* ---- record fields -------------------------------------------------------- */

/* If the next value is null, consumes it and returns true. */
static bool take_null(struct parser *ps)
{
	skip_ws(ps);
	if (ps->end - ps->p >= 4 && memcmp(ps->p, "null", 4) == 0 &&
	    (ps->end - ps->p == 4 || !is_bare_char((unsigned char)ps->p[4]))) {
		ps->p += 4;
		return true;
	}
	return false;
}

static int field_job(struct parser *ps)
{
	struct tok t;
	int rc = lex_value(ps, "job", &t);
	if (rc)
		return rc;
	if (t.kind == TOK_STR && sto_job_valid(t.s, t.len)) {
		memcpy(ps->rec.job_buf, t.s, t.len);
		ps->rec.job = ps->rec.job_buf;
		ps->rec.job_len = t.len;
		return 0;
	}
	char tmp[ECHO_BUF + 2];
	return fail(ps, RDB_EINVAL, t.line, "job",
		    "job must be a string of 1 to %u characters from [A-Za-z0-9._-], got %s",
		    STO_JOB_MAX, describe(tmp, &t));
}

static int field_rank(struct parser *ps)
{
	struct tok t;
	int rc = lex_value(ps, "rank", &t);
	if (rc)
		return rc;
	bool neg = false;
	uint64_t mag = 0;
	if (tok_is(&t, TOK_STR, "job")) {
		ps->rec.rank = STO_RANK_JOB;
		return 0;
	}
	if (parse_int(&t, &neg, &mag) == INT_OK && (!neg || mag == 0) && mag <= STO_RANK_MAX) {
		ps->rec.rank = (uint32_t)mag;
		return 0;
	}
	char tmp[ECHO_BUF + 2];
	return fail(ps, RDB_EINVAL, t.line, "rank",
		    "rank must be an integer >= 0 (at most %u) or \"job\", got %s", STO_RANK_MAX,
		    describe(tmp, &t));
}

/* Parses a time in ns since the epoch ("timestamp" or "start") into ts_ns. */
static int field_time(struct parser *ps, const char *field)
{
	struct tok t;
	int rc = lex_value(ps, field, &t);
	if (rc)
		return rc;
	bool neg = false;
	uint64_t mag = 0;
	enum int_result r = parse_int(&t, &neg, &mag);
	if (r == INT_OK && mag <= (uint64_t)INT64_MAX + neg) {
		ps->rec.ts_ns = neg && mag ? -(int64_t)(mag - 1) - 1 : (int64_t)mag;
		return 0;
	}
	char tmp[ECHO_BUF + 2];
	if (r == INT_FRACTION)
		return fail(ps, RDB_EINVAL, t.line, field,
			    "%s must be an integer number of nanoseconds since the epoch; "
			    "multiply seconds by 1e9 (got %s)",
			    field, describe(tmp, &t));
	return fail(ps, RDB_EINVAL, t.line, field,
		    "%s must be an integer number of nanoseconds since the epoch "
		    "(64-bit signed), got %s",
		    field, describe(tmp, &t));
}

static int field_timestamp(struct parser *ps)
{
	if (take_null(ps))
		return 0;
	return field_time(ps, "timestamp");
}

static int field_type(struct parser *ps)
{
	static const char *const names[] = {"metrics", "log", "span"};
	struct tok t;
	int rc = lex_value(ps, "type", &t);
	if (rc)
		return rc;
	for (size_t i = 0; i < 3; i++) {
		if (!tok_is(&t, TOK_STR, names[i]))
			continue;
		if (i != REC_METRICS && !ps->ev)
			return fail(ps, RDB_EINVAL, t.line, "type",
				    "%s records are not accepted here (only metrics records)",
				    names[i]);
		ps->rec.type = (enum rec_type)i;
		ps->rec.type_given = true;
		return 0;
	}
	char tmp[ECHO_BUF + 2];
	return fail(ps, RDB_EINVAL, t.line, "type",
		    "type must be \"metrics\", \"log\" or \"span\", got %s", describe(tmp, &t));
}

static int field_step_attempt(struct parser *ps, unsigned f)
{
	if (take_null(ps))
		return 0;
	uint64_t v = 0;
	if (f == F_STEP) {
		int rc = field_uint(ps, "step", INT64_MAX, &v);
		ps->rec.step = (int64_t)v;
		return rc;
	}
	int rc = field_uint(ps, "attempt", UINT32_MAX, &v);
	ps->rec.attempt = (uint32_t)v;
	return rc;
}

/* ---- metrics -------------------------------------------------------------- */

static const char *ent_name(const struct parser *ps, const struct metric_ent *e)
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
static int grow_ents(struct parser *ps)
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
		size_t pos = name_hash(ent_name(ps, &e[i]), e[i].len) & (2 * cap - 1);
		while (set[pos])
			pos = (pos + 1) & (2 * cap - 1);
		set[pos] = (uint64_t)ps->gen << 32 | (i + 1);
	}
	return 0;
}

/* Inserts entry ps->rec.n's name; false if the record already has it. */
static bool set_insert(struct parser *ps, const char *name, size_t len)
{
	size_t mask = 2 * ps->cap - 1;
	size_t pos = name_hash(name, len) & mask;
	for (;; pos = (pos + 1) & mask) {
		uint64_t v = ps->set[pos];
		if ((uint32_t)(v >> 32) != ps->gen || (uint32_t)v == 0)
			break;
		const struct metric_ent *e = &ps->ents[(uint32_t)v - 1];
		if (e->len == len && memcmp(ent_name(ps, e), name, len) == 0)
			return false;
	}
	ps->set[pos] = (uint64_t)ps->gen << 32 | (ps->rec.n + 1);
	return true;
}

/* Keeps a decoded (escaped) name in the arena; returns its offset. */
static int arena_put(struct parser *ps, const char *s, size_t len, size_t *off)
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
static int in_member(struct parser *ps, int rc, const char *obj, const char *name, size_t len)
{
	char tmp[ECHO_BUF];
	struct ing_error *e = ps->err;
	size_t room = sizeof(e->field) - strlen(obj) - 2;
	snprintf(e->field, sizeof(e->field), "%s.%s", obj, echo(tmp, name, len, room / 4));
	return rc;
}

/* Converts a string value: "NaN", the infinities, or "0x" + 16 hex digits. */
static bool string_bits(const struct tok *t, uint64_t *bits)
{
	static const struct {
		const char *s;
		uint64_t bits;
	} words[] = {
	    {"NaN", STO_VALUE_NAN_BITS},	  {"Inf", 0x7ff0000000000000ull},
	    {"+Inf", 0x7ff0000000000000ull},	  {"Infinity", 0x7ff0000000000000ull},
	    {"+Infinity", 0x7ff0000000000000ull}, {"-Inf", 0xfff0000000000000ull},
	    {"-Infinity", 0xfff0000000000000ull},
	};
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		if (tok_is(t, TOK_STR, words[i].s)) {
			*bits = words[i].bits;
			return true;
		}
	}
	if (t->len != 18 || t->s[0] != '0' || t->s[1] != 'x')
		return false;
	uint64_t v = 0;
	for (size_t i = 2; i < 18; i++) {
		int h = hex_val(t->s[i]);
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
	if (tok_is(t, TOK_BARE, "null"))
		*bits = STO_VALUE_NULL_BITS;
	else if (tok_is(t, TOK_BARE, "NaN"))
		*bits = STO_VALUE_NAN_BITS;
	else if (tok_is(t, TOK_BARE, "Infinity"))
		*bits = 0x7ff0000000000000ull;
	else if (tok_is(t, TOK_BARE, "-Infinity"))
		*bits = 0xfff0000000000000ull;
	else {
		int rc = scan_number(t->s, t->len, &d);
		if (rc)
			return rc;
		memcpy(bits, &d, sizeof(d));
	}
	return 0;
}

static int metric_value(struct parser *ps, const char *name, size_t len, uint64_t *bits)
{
	struct tok t;
	int rc = lex_value(ps, "metrics", &t);
	if (rc)
		return rc;
	if (t.kind == TOK_STR && string_bits(&t, bits))
		return 0;
	int r = t.kind == TOK_BARE ? bare_bits(&t, bits) : 1;
	if (r == 0)
		return 0;
	char tmp[ECHO_BUF + 2], nm[ECHO_BUF];
	echo(nm, name, len, 32);
	if (r == 2)
		return fail(ps, RDB_EINVAL, t.line, "metrics",
			    "number out of range for a 64-bit float in metric \"%s\": %s", nm,
			    describe(tmp, &t));
	if (r == 3)
		return fail(ps, RDB_EINVAL, t.line, "metrics",
			    "number literal in metric \"%s\" is longer than %d characters", nm,
			    NUMBER_MAX);
	return fail(ps, RDB_EINVAL, t.line, "metrics",
		    "value of metric \"%s\" must be a number, null, NaN, Infinity, -Infinity, "
		    "\"NaN\", \"Inf\", \"-Inf\" or \"0x\" + 16 hex digits; got %s",
		    nm, describe(tmp, &t));
}

/* Validates a metric name and adds its table entry (value not yet set). */
static int metric_add_name(struct parser *ps, const struct tok *t)
{
	if (!sto_metric_valid(t->s, t->len))
		return fail(ps, RDB_EINVAL, t->line, "metrics",
			    "metric name must be 1 to %u printable ASCII characters other than "
			    "space, '\"', '\\', '{', '}' and ','",
			    STO_METRIC_MAX);
	if (ps->rec.n >= ps->lim->max_metrics_per_record)
		return fail(ps, RDB_ELIMIT, t->line, "metrics",
			    "record has more than %zu metrics (max_metrics_per_record)",
			    ps->lim->max_metrics_per_record);
	if (ps->rec.n == ps->cap && grow_ents(ps))
		return fail_nomem(ps);
	struct metric_ent *e = &ps->ents[ps->rec.n];
	e->name = t->s == ps->scratch ? NULL : t->s;
	e->len = t->len;
	if (!e->name && arena_put(ps, t->s, t->len, &e->off))
		return fail_nomem(ps);
	if (!set_insert(ps, t->s, t->len))
		return fail(ps, RDB_EINVAL, t->line, "metrics",
			    "metric appears twice in one record");
	return 0;
}

/* Parses one "name": value member of the metrics object. */
static int metric_member(struct parser *ps)
{
	struct tok t;
	skip_ws(ps);
	if (ps->p >= ps->end || *ps->p != '"')
		return fail_unexpected(ps, "metrics", "a metric name in double quotes");
	int rc = lex_string(ps, "metrics", &t);
	if (rc)
		return rc;
	if ((rc = metric_add_name(ps, &t)))
		return in_member(ps, rc, "metrics", t.s, t.len);
	struct metric_ent *e = &ps->ents[ps->rec.n];
	const char *name = ent_name(ps, e);
	if ((rc = expect(ps, ':', "metrics", "':' after the metric name")) ||
	    (rc = metric_value(ps, name, e->len, &e->bits)))
		return in_member(ps, rc, "metrics", name, e->len);
	ps->rec.n++;
	return 0;
}

static int field_metrics(struct parser *ps)
{
	if (ps->rec.seen & F_FIELDS)
		return fail(
		    ps, RDB_EINVAL, ps->line, "metrics",
		    "a record cannot have both \"fields\" and \"metrics\" (fields belong to "
		    "log records)");
	skip_ws(ps);
	if (ps->p >= ps->end || *ps->p != '{') {
		struct tok t;
		int rc = lex_value(ps, "metrics", &t);
		char tmp[ECHO_BUF + 2];
		return rc ? rc
			  : fail(ps, RDB_EINVAL, t.line, "metrics",
				 "metrics must be an object of metric name to value, got %s",
				 describe(tmp, &t));
	}
	ps->p++;
	int rc = enter(ps, "metrics");
	if (rc)
		return rc;
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == '}')
		return fail(ps, RDB_EINVAL, ps->line, "metrics",
			    "metrics must have at least one entry");
	do {
		rc = metric_member(ps);
		if (rc == 0)
			rc = next_member(ps, "metrics");
	} while (rc == 0);
	ps->depth--;
	return rc < 0 ? rc : 0;
}

/* ---- log and span fields -------------------------------------------------- */

/* Allocates the two big decode buffers on the first log record of a request
 * (freed with the parser): a message or a string of "fields" may be up to
 * 64 KiB after unescaping, far more than the scratch buffer holds. */
static int event_bufs(struct parser *ps)
{
	if (ps->msg_buf)
		return 0;
	ps->msg_buf = malloc(STO_EVENT_TEXT_MAX + STO_EVENT_FIELDS_MAX);
	if (!ps->msg_buf)
		return fail_nomem(ps);
	ps->dec_buf = ps->msg_buf + STO_EVENT_TEXT_MAX;
	return 0;
}

/* lex_value, decoding an escaped string into buf[cap] instead of scratch. */
static int lex_value_into(struct parser *ps, const char *field, char *buf, size_t cap,
			  struct tok *t)
{
	ps->dst = buf;
	ps->dst_cap = cap;
	int rc = lex_value(ps, field, t);
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
	return fail(ps, RDB_EINVAL, t->line, field,
		    "%s is not valid UTF-8: bad sequence at byte %zu (%s) after unescaping", what,
		    at, echo(tmp, t->s + at, t->len - at, 4));
}

static int field_level(struct parser *ps)
{
	if (take_null(ps))
		return 0;
	struct tok t;
	int rc = lex_value(ps, "level", &t);
	if (rc)
		return rc;
	if (t.kind == TOK_STR && sto_level_parse(t.s, t.len, &ps->rec.level) == 0)
		return 0;
	char tmp[ECHO_BUF + 2];
	return fail(
	    ps, RDB_EINVAL, t.line, "level",
	    "level must be \"debug\", \"info\", \"warn\", \"error\" or \"fatal\" (any case; "
	    "\"warning\", \"err\" and \"critical\" too), got %s",
	    describe(tmp, &t));
}

static int field_message(struct parser *ps)
{
	struct tok t;
	int rc = event_bufs(ps);
	if (rc == 0)
		rc = lex_value_into(ps, "message", ps->msg_buf, STO_EVENT_TEXT_MAX, &t);
	if (rc)
		return rc;
	char tmp[ECHO_BUF + 2];
	if (t.kind != TOK_STR)
		return fail(ps, RDB_EINVAL, t.line, "message", "message must be a string, got %s",
			    describe(tmp, &t));
	if (t.len > STO_EVENT_TEXT_MAX)
		return fail(ps, RDB_EINVAL, t.line, "message",
			    "message is longer than %u bytes (after unescaping)",
			    STO_EVENT_TEXT_MAX);
	if ((rc = check_utf8(ps, &t, "message", "message")))
		return rc;
	ps->rec.msg = t.s;
	ps->rec.msg_len = t.len;
	return 0;
}

static int field_name(struct parser *ps)
{
	struct tok t;
	int rc = lex_value(ps, "name", &t);
	if (rc)
		return rc;
	if (t.kind == TOK_STR && t.len <= STO_SPAN_NAME_MAX && sto_metric_valid(t.s, t.len)) {
		memcpy(ps->rec.name_buf, t.s, t.len);
		ps->rec.name_len = t.len;
		return 0;
	}
	char tmp[ECHO_BUF + 2];
	return fail(ps, RDB_EINVAL, t.line, "name",
		    "span name must be 1 to %u printable ASCII characters other than space, '\"', "
		    "'\\', '{', '}' and ',', got %s",
		    STO_SPAN_NAME_MAX, describe(tmp, &t));
}

static int field_duration(struct parser *ps)
{
	uint64_t v = 0;
	int rc = field_uint(ps, "duration_ns", INT64_MAX, &v);
	ps->rec.duration_ns = (int64_t)v;
	return rc;
}

/* Appends to the record's fields text, which is bounded by
 * STO_EVENT_FIELDS_MAX bytes. */
static int fields_put(struct parser *ps, const char *s, size_t n)
{
	int rc = rdb_buf_append(&ps->fields_text, s, n);
	if (rc == RDB_ELIMIT)
		return fail(ps, RDB_EINVAL, ps->line, "fields",
			    "fields are longer than %u bytes as compact JSON",
			    STO_EVENT_FIELDS_MAX);
	return rc ? fail_nomem(ps) : 0;
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
	if (ps->rec.n == ps->cap && grow_ents(ps))
		return fail_nomem(ps);
	struct metric_ent *e = &ps->ents[ps->rec.n];
	e->name = t->s == ps->dec_buf ? NULL : t->s;
	e->len = t->len;
	if (!e->name && arena_put(ps, t->s, t->len, &e->off))
		return fail_nomem(ps);
	if (!set_insert(ps, t->s, t->len))
		return fail(ps, RDB_EINVAL, t->line, "fields", "key appears twice in fields");
	ps->rec.n++;
	return 0;
}

/* A decoded string of fields (key or value): bounded and valid UTF-8. */
static int fields_check_str(struct parser *ps, const struct tok *t, const char *what)
{
	if (t->len > STO_EVENT_FIELDS_MAX)
		return fail(ps, RDB_EINVAL, t->line, "fields",
			    "fields are longer than %u bytes as compact JSON",
			    STO_EVENT_FIELDS_MAX);
	return check_utf8(ps, t, "fields", what);
}

/* Parses one value of fields and appends its canonical text. */
static int fields_value(struct parser *ps, const char *key, size_t key_len)
{
	struct tok t;
	int rc = lex_value_into(ps, "fields", ps->dec_buf, STO_EVENT_FIELDS_MAX, &t);
	if (rc)
		return rc;
	bool is_int;
	if (t.kind == TOK_STR) {
		rc = fields_check_str(ps, &t, "string value");
		return rc ? rc : fields_put_str(ps, t.s, t.len);
	}
	if (t.kind == TOK_BARE &&
	    (tok_is(&t, TOK_BARE, "true") || tok_is(&t, TOK_BARE, "false") ||
	     tok_is(&t, TOK_BARE, "null") || json_number(t.s, t.len, &is_int)))
		return fields_put(ps, t.s, t.len);
	char tmp[ECHO_BUF + 2], nm[ECHO_BUF];
	echo(nm, key, key_len, 32);
	if (t.kind == TOK_OBJ || t.kind == TOK_ARR)
		return fail(ps, RDB_EINVAL, t.line, "fields",
			    "value of field \"%s\" is %s; fields are flat (a string, number, true, "
			    "false or null each)",
			    nm, describe(tmp, &t));
	return fail(ps, RDB_EINVAL, t.line, "fields",
		    "value of field \"%s\" must be a string, a JSON number, true, false or null "
		    "(NaN and Infinity only as strings); got %s",
		    nm, describe(tmp, &t));
}

/* Parses one "key": value member of fields. */
static int fields_member(struct parser *ps)
{
	struct tok t;
	skip_ws(ps);
	if (ps->p >= ps->end || *ps->p != '"')
		return fail_unexpected(ps, "fields", "a field name in double quotes");
	int rc = lex_value_into(ps, "fields", ps->dec_buf, STO_EVENT_FIELDS_MAX, &t);
	if (rc)
		return rc;
	if ((rc = fields_check_str(ps, &t, "field name")) || (rc = fields_add_key(ps, &t)))
		return in_member(ps, rc, "fields", t.s, t.len);
	const struct metric_ent *e = &ps->ents[ps->rec.n - 1];
	const char *key = ent_name(ps, e);
	if (ps->rec.n > 1)
		rc = fields_put(ps, ",", 1);
	if (rc == 0)
		rc = fields_put_str(ps, key, e->len);
	if (rc == 0)
		rc = fields_put(ps, ":", 1);
	if (rc == 0)
		rc = expect(ps, ':', "fields", "':' after the field name");
	if (rc == 0)
		rc = fields_value(ps, key, e->len);
	return rc ? in_member(ps, rc, "fields", key, e->len) : 0;
}

static int field_fields(struct parser *ps)
{
	if (ps->rec.seen & F_METRICS)
		return fail(
		    ps, RDB_EINVAL, ps->line, "fields",
		    "a record cannot have both \"metrics\" and \"fields\" (fields belong to "
		    "log records)");
	if (take_null(ps))
		return 0;
	skip_ws(ps);
	if (ps->p >= ps->end || *ps->p != '{') {
		struct tok t;
		int rc = lex_value(ps, "fields", &t);
		char tmp[ECHO_BUF + 2];
		return rc ? rc
			  : fail(ps, RDB_EINVAL, t.line, "fields",
				 "fields must be an object of name to string, number, true, false "
				 "or null, got %s",
				 describe(tmp, &t));
	}
	ps->p++;
	int rc = enter(ps, "fields");
	if (rc == 0)
		rc = event_bufs(ps);
	if (rc)
		return rc;
	ps->fields_text.len = 0;
	ps->rec.has_fields = true;
	if ((rc = fields_put(ps, "{", 1)))
		return rc;
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == '}') {
		ps->p++;
		rc = 1;
	}
	while (rc == 0) {
		rc = fields_member(ps);
		if (rc == 0)
			rc = next_member(ps, "fields");
	}
	if (rc < 0)
		return rc;
	ps->depth--;
	return fields_put(ps, "}", 1);
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
		return field_level(ps);
	case F_MESSAGE:
		return field_message(ps);
	case F_FIELDS:
		return field_fields(ps);
	case F_NAME:
		return field_name(ps);
	case F_START:
		return field_time(ps, "start");
	case F_DURATION:
		return field_duration(ps);
	default:
		return field_step_attempt(ps, f);
	}
}

/* Parses one "key": value member of a record. */
static int record_member(struct parser *ps)
{
	struct tok t;
	skip_ws(ps);
	if (ps->p >= ps->end || *ps->p != '"')
		return fail_unexpected(ps, "", "a field name in double quotes");
	int rc = lex_string(ps, "", &t);
	if (rc)
		return rc;
	size_t i = 0;
	while (i < NFIELDS && !tok_is(&t, TOK_STR, fields[i].name))
		i++;
	char tmp[ECHO_BUF];
	if (i == NFIELDS) {
		/* the field name in the error is the (escaped, truncated) key itself */
		const char *key = echo(tmp, t.src, t.src_len, ECHO_MAX);
		return fail(ps, RDB_EINVAL, t.line, key,
			    "unknown field \"%s\"; known: job, rank, type, attempt, step, "
			    "timestamp, metrics, level, message, fields, name, start, duration_ns",
			    key);
	}
	unsigned f = fields[i].f;
	const char *name = fields[i].name;
	if (ps->rec.seen & f)
		return fail(ps, RDB_EINVAL, t.line, name, "field \"%s\" appears twice", name);
	ps->rec.seen |= f;
	ps->rec.field_line[i] = t.line;
	rc = expect(ps, ':', name, "':' after the field name");
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
	r->step = STO_STEP_NONE;
	r->ts_ns = ps->default_ts_ns;
	r->duration_ns = 0;
	r->attempt = 0;
	r->n = 0;
	r->level = STO_LEVEL_INFO;
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
			return fail(
			    ps, RDB_EINVAL, r->field_line[i], fields[i].name,
			    "field \"%s\" belongs in a record with \"type\":\"%s\" (a record "
			    "without \"type\" is a metrics record)",
			    fields[i].name, types[k].name);
		}
		return fail(ps, RDB_EINVAL, r->field_line[i], fields[i].name,
			    "field \"%s\" does not belong in a %s record; %s records have %s",
			    fields[i].name, tn, tn, types[r->type].has);
	}
	for (size_t i = 0; i < NFIELDS; i++) {
		if ((types[r->type].required & fields[i].f) && !(r->seen & fields[i].f))
			return fail(ps, RDB_EINVAL, r->line, fields[i].name,
				    "record has no \"%s\" field (required: %s)", fields[i].name,
				    types[r->type].needs);
	}
	if (r->type == REC_SPAN && r->step == STO_STEP_NONE)
		return fail(ps, RDB_EINVAL, r->field_line[2], "step",
			    "a span record needs a step (an integer >= 0), got null");
	return 0;
}

/* Adds the parsed log or span record to the events. */
static int record_emit_event(struct parser *ps)
{
	const struct record *r = &ps->rec;
	struct sto_event e = {
	    .rank = r->rank,
	    .attempt = r->attempt,
	    .ts_ns = r->ts_ns,
	    .step = r->step,
	    .job = r->job,
	    .job_len = r->job_len,
	};
	if (r->type == REC_LOG) {
		e.kind = STO_EV_LOG;
		e.level = r->level;
		e.text = r->msg;
		e.text_len = r->msg_len;
		e.fields = r->has_fields ? (const char *)ps->fields_text.data : "{}";
		e.fields_len = r->has_fields ? ps->fields_text.len : 2;
	} else {
		e.kind = STO_EV_SPAN;
		e.duration_ns = r->duration_ns;
		e.text = r->name_buf;
		e.text_len = r->name_len;
		e.fields = "";
	}
	int rc = sto_events_add(ps->ev, &e);
	if (rc == RDB_ELIMIT)
		return fail(ps, rc, r->line, "",
			    "too many log and span records, or too much log text, in one request");
	if (rc == -ENOMEM)
		return fail_nomem(ps);
	if (rc)
		return fail(ps, rc, r->line, "", "the %s record was refused by storage (%s)",
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
		rc = sto_batch_add(ps->b, r->job, r->job_len, r->rank, ent_name(ps, e), e->len,
				   r->ts_ns, r->step, r->attempt, e->bits);
		if (rc == RDB_ELIMIT)
			return fail(ps, rc, r->line, "", "too many points in one request");
		if (rc)
			return fail_nomem(ps);
	}
	return 0;
}

/* Parses one record at the cursor (after whitespace) and adds its points. */
static int parse_record(struct parser *ps)
{
	if ((size_t)ps->record >= ps->lim->max_records)
		return fail(ps, RDB_ELIMIT, ps->line, "",
			    "too many records in one request (max %zu)", ps->lim->max_records);
	if (ps->p >= ps->end || *ps->p != '{') {
		struct tok t;
		int rc = lex_value(ps, "", &t);
		char tmp[ECHO_BUF + 2];
		return rc ? rc
			  : fail(ps, RDB_EINVAL, t.line, "", "record must be a JSON object, got %s",
				 describe(tmp, &t));
	}
	record_reset(ps);
	ps->p++;
	int rc = enter(ps, "");
	if (rc)
		return rc;
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == '}')
		ps->p++;
	else
		do {
			rc = record_member(ps);
			if (rc == 0)
				rc = next_member(ps, "");
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
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == ']') {
		ps->p++;
		ps->record = last;
		return 1;
	}
	if (ps->p >= ps->end || *ps->p != ',')
		return fail_unexpected(ps, "", "',' or ']' after a record");
	ps->p++;
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == ']')
		return fail(ps, RDB_EINVAL, ps->line, "",
			    "trailing comma before ']' is not allowed");
	ps->record = last;
	return 0;
}

static int parse_array(struct parser *ps)
{
	ps->p++;
	int rc = enter(ps, "");
	if (rc)
		return rc;
	skip_ws(ps);
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
	skip_ws(ps);
	if (ps->p < ps->end)
		return fail_unexpected(ps, "", "nothing after the closing ']'");
	ps->record = last;
	return 0;
}

static int parse_ndjson(struct parser *ps)
{
	for (;;) {
		skip_ws(ps);
		if (ps->p >= ps->end)
			return 0;
		ps->record++;
		int rc = parse_record(ps);
		if (rc)
			return rc;
		while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\r'))
			ps->p++;
		if (ps->p < ps->end && *ps->p != '\n')
			return fail_unexpected(ps, "",
					       "a line break after the record (NDJSON has one "
					       "record per line)");
	}
}

static int parse_body(struct parser *ps)
{
	if (ps->end - ps->p >= 3 && memcmp(ps->p, "\xef\xbb\xbf", 3) == 0)
		ps->p += 3;
	skip_ws(ps);
	if (ps->p >= ps->end)
		return fail(ps, RDB_EINVAL, 0, "", "no records: the body is empty");
	if (*ps->p == '{')
		return parse_ndjson(ps);
	if (*ps->p != '[')
		return fail_unexpected(ps, "", "'[' (a JSON array of records) or '{' (NDJSON)");
	int rc = parse_array(ps);
	if (rc == 0 && ps->record < 0)
		return fail(ps, RDB_EINVAL, 0, "", "no records: the array is empty");
	return rc;
}

int ing_json_parse_all(const char *body, size_t len, const struct ing_limits *lim,
		       int64_t default_ts_ns, struct sto_batch *b, struct sto_events *ev,
		       struct ing_error *err, size_t *nrecords)
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
	rdb_buf_init(&ps->fields_text, STO_EVENT_FIELDS_MAX);
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
		   int64_t default_ts_ns, struct sto_batch *b, struct ing_error *err,
		   size_t *nrecords)
{
	return ing_json_parse_all(body, len, lim, default_ts_ns, b, NULL, err, nrecords);
}
