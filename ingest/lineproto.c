/* lineproto.c - the InfluxDB line protocol parser and its mapping onto
 * rankdb's model (ingest/lp.h). rankdb_log and rankdb_span lines are mapped
 * in lp_events.c; lp_int.h holds the state the two files share.
 *
 * Grammar (as InfluxDB 1.8/2.x parse it; "sp" is 1*( ' ' | '\t' ), and the
 * one after the tag set starts with ' ' since names end only at ' ' or ','):
 *   body      = line *( "\n" line )             "\r\n" works too: a '\r' right
 *                                               before '\n' (or the end) is dropped
 *   line      = *( ' ' | '\t' ) ( "" | '#' *any | point )   blank and comment lines
 *                                               are ignored and not counted as records
 *   point     = measurement *( ',' tagkey '=' tagval ) sp field *( ',' field )
 *               [ sp timestamp ] *( ' ' | '\t' )
 *   field     = fieldkey '=' value
 *   value     = float | integer | unsigned | boolean | string
 *   float     = ['-'] ( 1*D [ '.' *D ] | '.' 1*D ) [ ('e'|'E') ['+'|'-'] 1*D ]
 *   integer   = ['-'] 1*D 'i'       int64; overflow is an error
 *   unsigned  = 1*D 'u'             uint64; overflow is an error
 *   boolean   = t | T | true | True | TRUE | f | F | false | False | FALSE
 *   string    = '"' *( any but '"' and '\n', or '\' any but '\n' ) '"'
 *   timestamp = ['-'] 1*D           int64 units of opt->precision_ns
 * Names (measurement, tag keys and values, field keys) end at an unescaped
 * ' ' or ',' (keys and tag values also at '='). A backslash always keeps the
 * next byte from ending the name; it is removed only before ',' and ' '
 * (measurement) or ',' '=' ' ' (tag keys, tag values, field keys); before
 * any other byte both bytes stay, so "a\\b" is the 4 bytes a \ \ b, as in
 * InfluxDB. In strings "\"" is '"', "\\" is '\', any other backslash stays.
 * Decisions (documented in docs/API.md):
 *   - NaN/Inf have no literal (InfluxDB rejects "inf", "NaN"); neither do
 *     we. A float that overflows (1e400) is an error; underflow rounds as
 *     strtod does. Floats are correctly rounded: an exact conversion of
 *     literals of up to 19 significant digits and powers of ten up to
 *     10^+-27 (ingest/decfloat.c, identical to strtod) else strtod on a bounded
 *     NUL-terminated copy (needs LC_NUMERIC "C": rankdbd never calls
 *     setlocale). Integer and unsigned values become the nearest double
 *     (exact up to 2^53); booleans 1.0 / 0.0.
 *   - Duplicate field keys on one line: the last one wins (as InfluxDB).
 *     Duplicate tag keys are an error. An unescaped '=' in a tag value is an
 *     error, and so is an empty tag key, tag value or field key.
 *   - Strings cannot span lines: a raw newline ends the line (InfluxDB's
 *     documentation says line protocol has no newlines in values).
 *   - The timestamp is scaled by precision_ns (overflow is an error); a line
 *     without one gets opt->default_ts_ns as is.
 *
 * Mapping (lp.h has the rules): job and rank tags give the series key; the
 * step/attempt fields (integers: 12i, 12u, or a float with an integral value
 * such as 12; never negative or fractional) give step and attempt; every
 * other numeric field f becomes metric "<measurement>.<f>" ("<measurement>"
 * for f = "value") followed by ";key=value" for each other tag in sorted
 * key order. Measurement, field key, tag keys and values are written into
 * the name with every byte outside the metric alphabet (printable ASCII but
 * space " \ { } , =) and every ';' '=' '%' as %XX (uppercase hex): the
 * encoding is injective, so lines differing in any tag map to different
 * metrics. '.' stays literal: it is the hierarchy separator, so "gpu temp=1"
 * and "gpu.temp value=1" are the same metric, deliberately (and the same as
 * JSON "gpu.temp"). A name over MDL_METRIC_MAX bytes is a line error.
 * Measurements rankdb_log and rankdb_span are events: lp_events.c.
 *
 * Invariants: each line is parsed completely (syntax, limits, mapping, name
 * lengths) before anything is added, so a bad line adds nothing. The cursor
 * never passes the line's end (the body need not be NUL-terminated). No
 * per-line allocation: the field and tag tables live inline up to
 * INLINE_FIELDS/INLINE_TAGS entries and grow on the heap (bounded by the
 * options' maxima) at most a few times per call; unescaped bytes go to an
 * arena at least as long as the line; metric names are built in two fixed
 * buffers. The state and its scratch are kept per thread for the next call
 * (lp_take / lp_give over common/rdb_tcache, bounded), freed at thread
 * exit. Reentrant.
 *
 * Failure: a bad line is counted (res->lines_bad) and the first
 * ING_LP_MAX_ERRORS errors keep record (0-based index among non-blank,
 * non-comment lines), line (1-based physical line), field (offending tag or
 * field key, printable) and a message echoing at most ECHO_MAX input bytes
 * with non-printables as \xHH; parsing goes on with the next line. When b
 * or ev is full, parsing stops with RDB_ELIMIT and an error naming that
 * line (whose points may be partly in b: the caller rejects the request).
 */
#include "ingest/lp_int.h"
#include "ingest/decfloat.h"
#include "ingest/echo.h"
#include "common/rdb_err.h"
#include "common/rdb_sort.h"
#include "common/rdb_tcache.h"
#include "model/series.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ing_lp_options_default(struct ing_lp_options *o)
{
	o->precision_ns = 1;
	o->default_ts_ns = 0;
	o->default_job = NULL;
	o->max_line_bytes = 256 * 1024;
	o->max_fields_per_line = 1024;
	o->max_tags_per_line = 64;
}

int ing_lp_precision(const char *s, int64_t *precision_ns)
{
	static const struct {
		const char *name;
		int64_t ns;
	} units[] = {{"n", 1},
		     {"ns", 1},
		     {"u", 1000},
		     {"us", 1000},
		     {"\xc2\xb5", 1000},
		     {"\xc2\xb5s", 1000},
		     {"\xce\xbc", 1000},
		     {"\xce\xbcs", 1000},
		     {"ms", 1000000},
		     {"s", 1000000000},
		     {"m", INT64_C(60000000000)},
		     {"h", INT64_C(3600000000000)}};
	if (!s)
		return RDB_EINVAL;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(s, units[i].name) == 0) {
			*precision_ns = units[i].ns;
			return 0;
		}
	}
	return RDB_EINVAL;
}

/* ---- errors --------------------------------------------------------------- */

/* Writes s (n bytes) as printable ASCII, others as \xHH, in at most max
 * output characters, then "..." when cut. out has room for max + 4 bytes. */
const char *ilp_echo(char *out, const char *s, size_t n, size_t max)
{
	return ing_echo(out, s, n, n, max);
}

static struct ing_error *next_error(struct lp *ps)
{
	struct ing_lp_result *r = ps->res;
	if (r->nerrors >= ING_LP_MAX_ERRORS)
		return NULL;
	struct ing_error *e = &r->errors[r->nerrors++];
	e->record = ps->record;
	e->line = ps->lineno;
	e->field[0] = 0;
	e->msg[0] = 0;
	return e;
}

/* Records an error about the current line (field may be {NULL, 0}) and
 * returns rc. */
int ilp_fail(struct lp *ps, int rc, struct span field, const char *fmt, ...)
{
	struct ing_error *e = next_error(ps);
	if (!e)
		return rc;
	char tmp[ECHO_BUF];
	if (field.len)
		snprintf(e->field, sizeof(e->field), "%s",
			 ilp_echo(tmp, field.p, field.len, sizeof(e->field) - 4));
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return rc;
}

/* ---- small helpers -------------------------------------------------------- */

bool ilp_is_digit(char c)
{
	return c >= '0' && c <= '9';
}

bool ilp_span_is(struct span s, const char *lit, size_t lit_len)
{
	return s.len == lit_len && memcmp(s.p, lit, lit_len) == 0;
}

#define SPAN_IS(s, lit) ilp_span_is((s), (lit), sizeof(lit) - 1)

int ilp_span_cmp(struct span a, struct span b)
{
	int c = memcmp(a.p, b.p, a.len < b.len ? a.len : b.len);
	if (c)
		return c;
	return a.len < b.len ? -1 : a.len > b.len;
}

/* Bytes written as %XX in metric names (lp.h): c <= 0x20, c >= 0x7f and
 * " \ { } , = ; %. A table: every field key of every line goes through it
 * (once while it is scanned, and to build its metric name). */
#define PCT_ROW(a, b, c, d, e, f, g, h) a, b, c, d, e, f, g, h
static const uint8_t pct_tab[256] = {
    /* 0x00-0x1f */
    PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1), PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1),
    PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1), PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1),
    /* 0x20 sp ! " # $ % & ' ( ) * + , - . / */
    PCT_ROW(1, 0, 1, 0, 0, 1, 0, 0), PCT_ROW(0, 0, 0, 0, 1, 0, 0, 0),
    /* 0x30 0-9 : ; < = > ? */
    PCT_ROW(0, 0, 0, 0, 0, 0, 0, 0), PCT_ROW(0, 0, 0, 1, 0, 1, 0, 0),
    /* 0x40 @ A-O, 0x50 P-Z [ \ ] ^ _ */
    PCT_ROW(0, 0, 0, 0, 0, 0, 0, 0), PCT_ROW(0, 0, 0, 0, 0, 0, 0, 0),
    PCT_ROW(0, 0, 0, 0, 0, 0, 0, 0), PCT_ROW(0, 0, 0, 0, 1, 0, 0, 0),
    /* 0x60 ` a-o, 0x70 p-z { | } ~ DEL */
    PCT_ROW(0, 0, 0, 0, 0, 0, 0, 0), PCT_ROW(0, 0, 0, 0, 0, 0, 0, 0),
    PCT_ROW(0, 0, 0, 0, 0, 0, 0, 0), PCT_ROW(0, 0, 0, 1, 0, 1, 0, 1),
    /* 0x80-0xff */
    PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1), PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1),
    PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1), PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1),
    PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1), PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1),
    PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1), PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1),
    PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1), PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1),
    PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1), PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1),
    PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1), PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1),
    PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1), PCT_ROW(1, 1, 1, 1, 1, 1, 1, 1)};

static bool needs_pct(unsigned char c)
{
	return pct_tab[c];
}

static size_t pct_len(struct span s)
{
	size_t n = s.len;
	for (size_t i = 0; i < s.len; i++)
		if (needs_pct((unsigned char)s.p[i]))
			n += 2;
	return n;
}

/* Writes s percent-encoded at dst (room checked by the caller via pct_len). */
static char *pct_put(char *dst, struct span s)
{
	static const char hex[] = "0123456789ABCDEF";
	for (size_t i = 0; i < s.len; i++) {
		unsigned char c = (unsigned char)s.p[i];
		if (!needs_pct(c)) {
			*dst++ = (char)c;
			continue;
		}
		*dst++ = '%';
		*dst++ = hex[c >> 4];
		*dst++ = hex[c & 15];
	}
	return dst;
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
bool ilp_utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + n;
	while (p < end) {
		unsigned c = *p;
		if (c < 0x80) {
			p++;
			continue;
		}
		size_t k = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
		if (c < 0xc2 || c > 0xf4 || (size_t)(end - p) <= k)
			return false;
		unsigned c1 = p[1];
		if ((c1 & 0xc0) != 0x80 || (c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 > 0x9f) ||
		    (c == 0xf0 && c1 < 0x90) || (c == 0xf4 && c1 > 0x8f))
			return false;
		for (size_t i = 2; i <= k; i++)
			if ((p[i] & 0xc0) != 0x80)
				return false;
		p += k + 1;
	}
	return true;
}

/* Screens field keys for duplicates (mark_duplicates): the length and
 * the first and last (up to) 8 bytes, mixed; a collision only costs a
 * comparison. Names of one line that differ only in their middle bytes
 * and length collide, which is rare and harmless. */
static uint32_t key_hash(struct span s)
{
	uint64_t a = 0, b = 0;
	size_t n = s.len < 8 ? s.len : 8;
	memcpy(&a, s.p, n);
	memcpy(&b, s.p + s.len - n, n);
	uint64_t h = (a * UINT64_C(0x9e3779b97f4a7c15)) ^ (b * UINT64_C(0xc2b2ae3d27d4eb4f)) ^
		     ((uint64_t)s.len * UINT64_C(0x165667b19e3779f9));
	return (uint32_t)(h >> 32);
}

/* ---- scratch memory ------------------------------------------------------- */

/* Makes the arena at least as long as the current line, so that every
 * unescaped string of the line fits without moving it. */
static int arena_ready(struct lp *ps)
{
	size_t need = (size_t)(ps->eol - ps->line);
	if (ps->arena_cap >= need)
		return 0;
	size_t cap = need < 4096 ? 4096 : need;
	char *a = realloc(ps->arena, cap);
	if (!a)
		return -ENOMEM;
	ps->arena = a;
	ps->arena_cap = cap;
	return 0;
}

/* Grows *tab (inline or heap, *cap entries of size sz) to double, bounded
 * by max entries. */
static int grow(void **tab, size_t *cap, size_t sz, void *inline_tab, size_t max)
{
	size_t ncap = *cap * 2 > max ? max : *cap * 2;
	void *n;
	if (*tab == inline_tab) {
		n = malloc(ncap * sz);
		if (n)
			memcpy(n, *tab, *cap * sz);
	} else {
		n = realloc(*tab, ncap * sz);
	}
	if (!n)
		return -ENOMEM;
	*tab = n;
	*cap = ncap;
	return 0;
}

/* ---- lexing --------------------------------------------------------------- */

/* Removes the backslash of "\c" for c in unesc, into the arena. */
int ilp_unescape(struct lp *ps, struct span *s, const char *unesc)
{
	int rc = arena_ready(ps);
	if (rc)
		return -ENOMEM;
	char *out = ps->arena + ps->arena_len, *o = out;
	for (size_t i = 0; i < s->len; i++) {
		if (s->p[i] == '\\' && i + 1 < s->len && s->p[i + 1] && strchr(unesc, s->p[i + 1]))
			i++;
		*o++ = s->p[i];
	}
	s->p = out;
	s->len = (size_t)(o - out);
	ps->arena_len += s->len;
	return 0;
}

/* Scans a name from ps->p to an unescaped ' ' or ',' (and '=' if key) or
 * the line's end; unescapes it. *pct (NULL: not wanted) says whether the
 * name holds a byte written as %XX in metric names. */
static int scan_name(struct lp *ps, bool key, struct span *out, bool *pct)
{
	const char *s = ps->p, *p = s, *eol = ps->eol;
	bool esc = false;
	uint8_t bad = 0;
	while (p < eol) {
		char c = *p;
		if (c == '\\' && p + 1 < eol) {
			esc = true;
			p += 2;
			continue;
		}
		if (c == ' ' || c == ',' || (key && c == '='))
			break;
		bad |= pct_tab[(unsigned char)c];
		p++;
	}
	ps->p = p;
	out->p = s;
	out->len = (size_t)(p - s);
	if (pct)
		*pct = bad || esc; /* unescaped, it holds at least a ' ' , = or \ */
	if (!esc)
		return 0;
	return ilp_unescape(ps, out, key ? ", =" : ", ");
}

static void skip_blanks(struct lp *ps)
{
	while (ps->p < ps->eol && (*ps->p == ' ' || *ps->p == '\t'))
		ps->p++;
}

/* ---- numbers -------------------------------------------------------------- */

/* Parses digits t[0..n) (n >= 1, all digits) into *out. false on overflow. */
static bool parse_u64(const char *t, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t d = (uint64_t)(t[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = v;
	return true;
}

static bool all_digits(const char *t, size_t n)
{
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!ilp_is_digit(t[i]))
			return false;
	return true;
}

/* -?digits into int64. 0, or 1 when not an integer, 2 when out of range. */
static int parse_i64(const char *t, size_t n, int64_t *out)
{
	bool neg = n > 0 && t[0] == '-';
	if (!all_digits(t + neg, n - neg))
		return 1;
	uint64_t u;
	if (!parse_u64(t + neg, n - neg, &u))
		return 2;
	if (neg) {
		if (u > (uint64_t)INT64_MAX + 1)
			return 2;
		*out = u == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)u;
		return 0;
	}
	if (u > (uint64_t)INT64_MAX)
		return 2;
	*out = (int64_t)u;
	return 0;
}

static bool parse_bool(const char *t, size_t n, bool *out)
{
	static const char *const yes[] = {"t", "T", "true", "True", "TRUE"};
	static const char *const no[] = {"f", "F", "false", "False", "FALSE"};
	for (size_t i = 0; i < 5; i++) {
		if (strlen(yes[i]) == n && memcmp(yes[i], t, n) == 0) {
			*out = true;
			return true;
		}
		if (strlen(no[i]) == n && memcmp(no[i], t, n) == 0) {
			*out = false;
			return true;
		}
	}
	return false;
}

static int convert_float(struct lp *ps, struct lp_field *f, const char *t, size_t n)
{
	char tmp[ECHO_BUF];
	if (ing_decfloat(t, n, &f->v.f))
		return 0;
	if (n > NUMBER_MAX)
		return ilp_fail(ps, RDB_EINVAL, f->key, "number literal longer than %d characters",
				NUMBER_MAX);
	char buf[NUMBER_MAX + 1];
	memcpy(buf, t, n);
	buf[n] = 0;
	double d = strtod(buf, NULL);
	if (isinf(d))
		return ilp_fail(ps, RDB_EINVAL, f->key, "float %s is out of range",
				ilp_echo(tmp, t, n, ECHO_MAX));
	f->v.f = d;
	return 0;
}

/* Classifies and converts a bare value token t[0..n) (n >= 1). */
static int classify(struct lp *ps, struct lp_field *f, const char *t, size_t n)
{
	char tmp[ECHO_BUF];
	int rc;
	f->raw = (struct span){t, n};
	switch (t[n - 1]) {
	case 'i':
		f->type = V_INT;
		rc = parse_i64(t, n - 1, &f->v.i);
		if (rc == 0)
			return 0;
		return ilp_fail(ps, RDB_EINVAL, f->key,
				rc == 2 ? "integer %s is out of the int64 range"
					: "invalid integer %s",
				ilp_echo(tmp, t, n, ECHO_MAX));
	case 'u':
		f->type = V_UINT;
		if (all_digits(t, n - 1) && parse_u64(t, n - 1, &f->v.u))
			return 0;
		return ilp_fail(ps, RDB_EINVAL, f->key, "invalid unsigned integer %s (0..2^64-1)",
				ilp_echo(tmp, t, n, ECHO_MAX));
	}
	if ((t[0] | 0x20) == 't' || (t[0] | 0x20) == 'f') {
		if (!parse_bool(t, n, &f->v.b))
			return ilp_fail(ps, RDB_EINVAL, f->key,
					"invalid boolean %s (t, true, True, TRUE, "
					"f, false, False or FALSE)",
					ilp_echo(tmp, t, n, ECHO_MAX));
		f->type = V_BOOL;
		return 0;
	}
	f->type = V_FLOAT;
	if (ing_decfloat_syntax(t, n))
		return convert_float(ps, f, t, n);
	return ilp_fail(ps, RDB_EINVAL, f->key,
			"invalid value %s: expected a float (1.5), integer (12i), unsigned (12u), "
			"boolean (true) or \"string\"; NaN and Inf have no line-protocol literal",
			ilp_echo(tmp, t, n, ECHO_MAX));
}

/* ---- the line's elements -------------------------------------------------- */

static int scan_string(struct lp *ps, struct lp_field *f)
{
	const char *s = ++ps->p, *p = s, *eol = ps->eol;
	bool esc = false;
	while (p < eol && *p != '"') {
		if (*p == '\\' && p + 1 < eol) {
			esc = true;
			p++;
		}
		p++;
	}
	if (p >= eol)
		return ilp_fail(
		    ps, RDB_EINVAL, f->key,
		    "unterminated string value (a string ends at '\"' on the same line)");
	f->type = V_STR;
	f->raw = (struct span){s, (size_t)(p - s)};
	f->str_esc = esc;
	ps->p = p + 1;
	if (ps->p < eol && *ps->p != ',' && *ps->p != ' ' && *ps->p != '\t') {
		char tmp[ECHO_BUF];
		return ilp_fail(ps, RDB_EINVAL, f->key, "unexpected '%s' after a string value",
				ilp_echo(tmp, ps->p, 1, 1));
	}
	return 0;
}

static int scan_value(struct lp *ps, struct lp_field *f)
{
	const char *s = ps->p, *p = s, *eol = ps->eol;
	if (p < eol && *p == '"')
		return scan_string(ps, f);
	while (p < eol && *p != ',' && *p != ' ' && *p != '\t')
		p++;
	ps->p = p;
	if (p == s)
		return ilp_fail(ps, RDB_EINVAL, f->key, "missing value after '='");
	return classify(ps, f, s, (size_t)(p - s));
}

static int next_field(struct lp *ps, struct lp_field **out)
{
	size_t max = ps->opt->max_fields_per_line;
	if (ps->nfields >= max)
		return ilp_fail(ps, RDB_EINVAL, NOFIELD,
				"more than %zu fields on one line (limit max_fields_per_line)",
				max);
	if (ps->nfields == ps->fields_cap) {
		int rc = grow((void **)&ps->fields, &ps->fields_cap, sizeof(*ps->fields),
			      ps->fields_inline, max);
		if (rc)
			return rc;
	}
	struct lp_field *f = &ps->fields[ps->nfields];
	memset(f, 0, sizeof(*f));
	*out = f;
	return 0;
}

static int scan_fields(struct lp *ps)
{
	for (;;) {
		struct lp_field *f = NULL;
		int rc = next_field(ps, &f);
		if (rc)
			return rc;
		rc = scan_name(ps, true, &f->key, &f->key_pct);
		if (rc)
			return rc;
		if (f->key.len == 0)
			return ilp_fail(ps, RDB_EINVAL, NOFIELD, "missing field key");
		if (ps->p >= ps->eol || *ps->p != '=')
			return ilp_fail(ps, RDB_EINVAL, f->key, "field key without '=value'");
		ps->p++;
		rc = scan_value(ps, f);
		if (rc)
			return rc;
		ps->nfields++;
		if (ps->p < ps->eol && *ps->p == ',') {
			ps->p++;
			continue;
		}
		return 0;
	}
}

static int scan_timestamp(struct lp *ps)
{
	char tmp[ECHO_BUF];
	skip_blanks(ps);
	if (ps->p >= ps->eol) {
		ps->ts_ns = ps->opt->default_ts_ns;
		return 0;
	}
	const char *s = ps->p;
	while (ps->p < ps->eol && *ps->p != ' ' && *ps->p != '\t')
		ps->p++;
	size_t n = (size_t)(ps->p - s);
	int64_t ts;
	int rc = parse_i64(s, n, &ts);
	if (rc == 1)
		return ilp_fail(ps, RDB_EINVAL, NOFIELD,
				"invalid timestamp %s (an integer is expected)",
				ilp_echo(tmp, s, n, ECHO_MAX));
	int64_t prec = ps->opt->precision_ns > 1 ? ps->opt->precision_ns : 1;
	if (rc == 2 || __builtin_mul_overflow(ts, prec, &ps->ts_ns))
		return ilp_fail(ps, RDB_EINVAL, NOFIELD,
				"timestamp %s overflows int64 nanoseconds at this precision",
				ilp_echo(tmp, s, n, ECHO_MAX));
	skip_blanks(ps);
	if (ps->p < ps->eol)
		return ilp_fail(ps, RDB_EINVAL, NOFIELD, "unexpected %s after the timestamp",
				ilp_echo(tmp, ps->p, (size_t)(ps->eol - ps->p), ECHO_MAX));
	return 0;
}

static int parse_rank(struct lp *ps, struct span k, struct span v)
{
	char tmp[ECHO_BUF];
	uint64_t r;
	if (SPAN_IS(v, "job")) {
		ps->rank = MDL_RANK_JOB;
		return 0;
	}
	if (v.len <= 10 && all_digits(v.p, v.len) && (v.p[0] != '0' || v.len == 1) &&
	    parse_u64(v.p, v.len, &r) && r <= MDL_RANK_MAX) {
		ps->rank = (uint32_t)r;
		return 0;
	}
	return ilp_fail(ps, RDB_EINVAL, k,
			"rank must be an integer 0..%u without leading zeros, "
			"or \"job\"; got %s",
			MDL_RANK_MAX, ilp_echo(tmp, v.p, v.len, ECHO_MAX));
}

static int add_tag(struct lp *ps, struct span k, struct span v)
{
	size_t max = ps->opt->max_tags_per_line;
	if (++ps->ntags_seen > max)
		return ilp_fail(ps, RDB_EINVAL, k,
				"more than %zu tags on one line (limit "
				"max_tags_per_line)",
				max);
	bool is_job = SPAN_IS(k, "job"), is_rank = SPAN_IS(k, "rank");
	bool is_special = (ps->kind == K_LOG && SPAN_IS(k, "level")) ||
			  (ps->kind == K_SPAN && SPAN_IS(k, "name"));
	bool *seen = is_job ? &ps->has_job : is_rank ? &ps->has_rank : &ps->has_special;
	if (is_job || is_rank || is_special) {
		if (*seen)
			return ilp_fail(ps, RDB_EINVAL, k, "duplicate tag");
		*seen = true;
		if (is_job)
			ps->job = v;
		else if (is_special)
			ps->special = v;
		return is_rank ? parse_rank(ps, k, v) : 0;
	}
	if (ps->ntags == ps->tags_cap) {
		int rc = grow((void **)&ps->tags, &ps->tags_cap, sizeof(*ps->tags), ps->tags_inline,
			      max);
		if (rc)
			return rc;
	}
	ps->tags[ps->ntags++] = (struct lp_tag){k, v};
	return 0;
}

static int scan_tags(struct lp *ps)
{
	while (ps->p < ps->eol && *ps->p == ',') {
		struct span k, v;
		ps->p++;
		int rc = scan_name(ps, true, &k, NULL);
		if (rc)
			return rc;
		if (k.len == 0)
			return ilp_fail(ps, RDB_EINVAL, NOFIELD, "missing tag key after ','");
		if (ps->p >= ps->eol || *ps->p != '=')
			return ilp_fail(ps, RDB_EINVAL, k, "tag key without '=value'");
		ps->p++;
		rc = scan_name(ps, true, &v, NULL);
		if (rc)
			return rc;
		if (v.len == 0)
			return ilp_fail(ps, RDB_EINVAL, k,
					"empty tag value (omit the tag instead)");
		if (ps->p < ps->eol && *ps->p == '=')
			return ilp_fail(ps, RDB_EINVAL, k,
					"unescaped '=' in a tag value (write \\=)");
		rc = add_tag(ps, k, v);
		if (rc)
			return rc;
	}
	return 0;
}

/* Parses the syntax of the line [ps->line, ps->eol) into ps. */
static int scan_line(struct lp *ps)
{
	int rc = scan_name(ps, false, &ps->meas, NULL);
	if (rc)
		return rc;
	if (ps->meas.len == 0)
		return ilp_fail(ps, RDB_EINVAL, NOFIELD, "missing measurement");
	ps->kind = SPAN_IS(ps->meas, "rankdb_log")    ? K_LOG
		   : SPAN_IS(ps->meas, "rankdb_span") ? K_SPAN
						      : K_METRICS;
	rc = scan_tags(ps);
	if (rc)
		return rc;
	skip_blanks(ps);
	if (ps->p >= ps->eol)
		return ilp_fail(ps, RDB_EINVAL, NOFIELD,
				"missing fields (a line needs at least one "
				"field=value after a space)");
	rc = scan_fields(ps);
	if (rc)
		return rc;
	return scan_timestamp(ps);
}

/* ---- mapping -------------------------------------------------------------- */

static int cmp_tag(const void *a, const void *b)
{
	return ilp_span_cmp(((const struct lp_tag *)a)->key, ((const struct lp_tag *)b)->key);
}

static int sort_tags(struct lp *ps)
{
	struct lp_tag *t = ps->tags;
	size_t n = ps->ntags;
	if (n <= 16) {
		for (size_t i = 1; i < n; i++) {
			struct lp_tag x = t[i];
			size_t j = i;
			for (; j > 0 && ilp_span_cmp(t[j - 1].key, x.key) > 0; j--)
				t[j] = t[j - 1];
			t[j] = x;
		}
	} else {
		rdb_sort(t, n, sizeof(*t), cmp_tag);
	}
	for (size_t i = 1; i < n; i++)
		if (ilp_span_cmp(t[i - 1].key, t[i].key) == 0)
			return ilp_fail(ps, RDB_EINVAL, t[i].key, "duplicate tag");
	return 0;
}

static int cmp_dup(const void *a, const void *b)
{
	const struct dup_ent *x = a, *y = b;
	int c = ilp_span_cmp(x->f->key, y->f->key);
	if (c)
		return c;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int mark_duplicates_sorted(struct lp *ps)
{
	size_t n = ps->nfields;
	if (ps->dups_cap < n) {
		struct dup_ent *d = realloc(ps->dups, n * sizeof(*d));
		if (!d)
			return -ENOMEM;
		ps->dups = d;
		ps->dups_cap = n;
	}
	struct dup_ent *e = ps->dups;
	for (size_t i = 0; i < n; i++)
		e[i] = (struct dup_ent){&ps->fields[i], i};
	rdb_sort(e, n, sizeof(*e), cmp_dup);
	for (size_t i = 1; i < n; i++)
		if (ilp_span_cmp(e[i - 1].f->key, e[i].f->key) == 0)
			ps->fields[e[i - 1].idx].dead = true;
	return 0;
}

/* Marks every field that a later field with the same key overrides. */
static int mark_duplicates(struct lp *ps)
{
	if (ps->nfields > INLINE_FIELDS)
		return mark_duplicates_sorted(ps);
	memset(ps->dup_bits, 0, sizeof(ps->dup_bits));
	for (size_t i = 0; i < ps->nfields; i++) {
		uint32_t h = key_hash(ps->fields[i].key) % DUP_BITS;
		uint64_t bit = UINT64_C(1) << (h % 64);
		if (ps->dup_bits[h / 64] & bit) {
			for (size_t j = 0; j < i; j++)
				if (ilp_span_cmp(ps->fields[j].key, ps->fields[i].key) == 0)
					ps->fields[j].dead = true;
		}
		ps->dup_bits[h / 64] |= bit;
	}
	return 0;
}

/* An integer field value in 0..max: 12i, 12u or an integral float. */
int ilp_field_count(struct lp *ps, const struct lp_field *f, uint64_t max, uint64_t *out)
{
	char tmp[ECHO_BUF];
	const char *raw = ilp_echo(tmp, f->raw.p, f->raw.len, ECHO_MAX);
	bool neg = (f->type == V_INT && f->v.i < 0) || (f->type == V_FLOAT && f->v.f < 0);
	if (f->type == V_STR || f->type == V_BOOL)
		return ilp_fail(ps, RDB_EINVAL, f->key, "must be an integer (12i or 12), got %s",
				raw);
	if (neg)
		return ilp_fail(ps, RDB_EINVAL, f->key, "must not be negative, got %s", raw);
	uint64_t v;
	if (f->type == V_FLOAT) {
		if (f->v.f != floor(f->v.f))
			return ilp_fail(ps, RDB_EINVAL, f->key, "must be a whole number, got %s",
					raw);
		if (f->v.f >= 18446744073709551616.0)
			return ilp_fail(ps, RDB_EINVAL, f->key,
					"is too large (max %" PRIu64 "), got %s", max, raw);
		v = (uint64_t)f->v.f;
	} else {
		v = f->type == V_INT ? (uint64_t)f->v.i : f->v.u;
	}
	if (v > max)
		return ilp_fail(ps, RDB_EINVAL, f->key, "is too large (max %" PRIu64 "), got %s",
				max, raw);
	*out = v;
	return 0;
}

/* Takes step and attempt (and, per kind, message / duration_ns are left to
 * their mappers) out of the live fields. */
static int take_step_attempt(struct lp *ps)
{
	for (size_t i = 0; i < ps->nfields; i++) {
		struct lp_field *f = &ps->fields[i];
		uint64_t v;
		if (f->dead)
			continue;
		if (SPAN_IS(f->key, "step")) {
			int rc = ilp_field_count(ps, f, INT64_MAX, &v);
			if (rc)
				return rc;
			ps->step = (int64_t)v;
			ps->has_step = true;
			f->used = true;
		} else if (SPAN_IS(f->key, "attempt")) {
			int rc = ilp_field_count(ps, f, UINT32_MAX, &v);
			if (rc)
				return rc;
			ps->attempt = (uint32_t)v;
			f->used = true;
		}
	}
	return 0;
}

static int resolve_job(struct lp *ps)
{
	char tmp[ECHO_BUF];
	if (!ps->has_job) {
		const char *dj = ps->opt->default_job;
		if (!dj || !dj[0])
			return ilp_fail(ps, RDB_EINVAL, NOFIELD,
					"missing tag job (no default job is "
					"configured)");
		ps->job = (struct span){dj, strlen(dj)};
	}
	if (!mdl_job_valid(ps->job.p, ps->job.len))
		return ilp_fail(ps, RDB_EINVAL, (struct span){"job", 3},
				"job must be 1..%u bytes of [A-Za-z0-9._-], got %s", MDL_JOB_MAX,
				ilp_echo(tmp, ps->job.p, ps->job.len, ECHO_MAX));
	return 0;
}

static const char name_too_long[] =
    "metric name would be %zu bytes (max %u): shorten the measurement, field or tag "
    "names, or drop tags";

/* Builds ";k=v..." of the extra tags (sorted) into ps->suffix. */
static int build_suffix(struct lp *ps, size_t prefix_len)
{
	char *o = ps->suffix;
	size_t n = prefix_len;
	for (size_t i = 0; i < ps->ntags; i++) {
		const struct lp_tag *t = &ps->tags[i];
		n += 2 + pct_len(t->key) + pct_len(t->val);
		if (n > MDL_METRIC_MAX)
			return ilp_fail(ps, RDB_EINVAL, t->key, name_too_long, n, MDL_METRIC_MAX);
		*o++ = ';';
		o = pct_put(o, t->key);
		*o++ = '=';
		o = pct_put(o, t->val);
	}
	ps->suffix_len = (size_t)(o - ps->suffix);
	return 0;
}

static uint64_t value_bits(const struct lp_field *f)
{
	double d = f->type == V_FLOAT  ? f->v.f
		   : f->type == V_INT  ? (double)f->v.i
		   : f->type == V_UINT ? (double)f->v.u
				       : (f->v.b ? 1.0 : 0.0);
	uint64_t u;
	memcpy(&u, &d, sizeof(u));
	return u;
}

/* Checks every metric name's length; returns the number of points. */
static int check_names(struct lp *ps, size_t prefix_len, size_t *npoints, size_t *nstr)
{
	for (size_t i = 0; i < ps->nfields; i++) {
		struct lp_field *f = &ps->fields[i];
		if (f->dead || f->used)
			continue;
		if (f->type == V_STR) {
			(*nstr)++;
			continue;
		}
		f->name_len = SPAN_IS(f->key, "value") ? 0
			      : f->key_pct	       ? 1 + pct_len(f->key)
						       : 1 + f->key.len;
		size_t n = prefix_len + f->name_len + ps->suffix_len;
		if (n > MDL_METRIC_MAX)
			return ilp_fail(ps, RDB_EINVAL, f->key, name_too_long, n, MDL_METRIC_MAX);
		(*npoints)++;
	}
	if (*npoints == 0)
		return ilp_fail(ps, RDB_EINVAL, NOFIELD,
				"no numeric field (string fields are not metrics; step and attempt "
				"are not metrics)");
	return 0;
}

/* Writes f's metric name after the prefix already at out[0..prefix_len);
 * returns its length. */
static size_t build_name(const struct lp *ps, const struct lp_field *f, char *out,
			 size_t prefix_len)
{
	char *o = out + prefix_len;
	if (f->name_len) {
		*o++ = '.';
		if (f->name_len == 1 + f->key.len)
			o = (char *)memcpy(o, f->key.p, f->key.len) + f->key.len;
		else
			o = pct_put(o, f->key);
	}
	memcpy(o, ps->suffix, ps->suffix_len);
	o += ps->suffix_len;
	return (size_t)(o - out);
}

/* Adds one point per numeric field, in field order. Each name is built one
 * field ahead, in the other of two buffers: mdl_batch_add hashes the name
 * in 8- and 16-byte loads, and read right after its byte-wise and memcpy
 * stores those loads could not be forwarded from the store buffer and
 * waited for the stores to land (~60 % of the hash's samples in the
 * per-rank profile). A field ahead, they have landed. */
static int add_points(struct lp *ps, size_t prefix_len)
{
	int64_t step = ps->has_step ? ps->step : MDL_STEP_NONE;
	char *bufs[2] = {ps->name, ps->name2};
	const struct lp_field *pending = NULL;
	size_t pending_len = 0;
	int cur = 0;
	for (size_t i = 0; i <= ps->nfields; i++) {
		const struct lp_field *f = i < ps->nfields ? &ps->fields[i] : NULL;
		if (f && (f->dead || f->used || f->type == V_STR))
			continue;
		size_t len = f ? build_name(ps, f, bufs[cur], prefix_len) : 0;
		if (pending) {
			int rc = mdl_batch_add(ps->b, ps->job.p, ps->job.len, ps->rank,
					       bufs[cur ^ 1], pending_len, ps->ts_ns, step,
					       ps->attempt, value_bits(pending));
			if (rc)
				return rc;
			ps->res->points++;
		}
		pending = f;
		pending_len = len;
		cur ^= 1;
	}
	return 0;
}

static int map_metrics(struct lp *ps)
{
	size_t prefix_len = pct_len(ps->meas), npoints = 0, nstr = 0;
	if (prefix_len > MDL_METRIC_MAX)
		return ilp_fail(ps, RDB_EINVAL, NOFIELD, name_too_long, prefix_len, MDL_METRIC_MAX);
	int rc = build_suffix(ps, prefix_len);
	if (rc == 0)
		rc = check_names(ps, prefix_len, &npoints, &nstr);
	if (rc)
		return rc;
	pct_put(ps->name, ps->meas);
	memcpy(ps->name2, ps->name, prefix_len);
	rc = add_points(ps, prefix_len);
	if (rc)
		return rc;
	ps->res->string_fields_skipped += nstr;
	return 0;
}

/* Applies the parsed line: everything that can fail on the input is
 * checked before the first add. */
static int map_line(struct lp *ps)
{
	int rc = resolve_job(ps);
	if (rc == 0)
		rc = mark_duplicates(ps);
	if (rc == 0)
		rc = take_step_attempt(ps);
	if (rc == 0 && ps->ntags > 1)
		rc = sort_tags(ps);
	if (rc)
		return rc;
	if (ps->kind == K_METRICS)
		return map_metrics(ps);
	if (!ps->ev)
		return ilp_fail(ps, RDB_EINVAL, NOFIELD,
				"log and span lines are not accepted here");
	return ps->kind == K_LOG ? ilp_map_log(ps) : ilp_map_span(ps);
}

/* ---- driver --------------------------------------------------------------- */

static void line_reset(struct lp *ps, const char *s, const char *eol)
{
	ps->line = s;
	ps->p = s;
	ps->eol = eol;
	ps->has_job = ps->has_rank = ps->has_special = ps->has_step = false;
	ps->rank = MDL_RANK_JOB;
	ps->attempt = 0;
	ps->step = MDL_STEP_NONE;
	ps->ntags_seen = 0;
	ps->ntags = 0;
	ps->nfields = 0;
	ps->arena_len = 0;
	ps->suffix_len = 0;
}

static int limit_hit(struct lp *ps, int rc)
{
	if (rc == RDB_ELIMIT)
		ilp_fail(ps, rc, NOFIELD,
			 "the request holds more points or events than one batch "
			 "takes; stopped at this line (split the body)");
	return rc;
}

/* Parses and applies one physical line [s, eol) (without its '\n'). */
static int do_line(struct lp *ps, const char *s, const char *eol)
{
	if (eol > s && eol[-1] == '\r')
		eol--;
	while (s < eol && (*s == ' ' || *s == '\t'))
		s++;
	if (s == eol || *s == '#')
		return 0;
	ps->record++;
	line_reset(ps, s, eol);
	size_t len = (size_t)(eol - s);
	int rc;
	if (len > ps->opt->max_line_bytes)
		rc = ilp_fail(ps, RDB_EINVAL, NOFIELD,
			      "line is %zu bytes, longer than %zu (limit "
			      "max_line_bytes)",
			      len, ps->opt->max_line_bytes);
	else
		rc = scan_line(ps);
	if (rc == 0)
		rc = map_line(ps);
	if (rc == 0) {
		ps->res->lines_ok++;
		return 0;
	}
	if (rc == RDB_EINVAL) {
		ps->res->lines_bad++;
		return 0;
	}
	return limit_hit(ps, rc);
}

static void lp_free(struct lp *ps)
{
	if (!ps)
		return;
	if (ps->tags != ps->tags_inline)
		free(ps->tags);
	if (ps->fields != ps->fields_inline)
		free(ps->fields);
	free(ps->arena);
	free(ps->dups);
	free(ps->items);
	rdb_buf_free(&ps->json);
	free(ps);
}

/* ---- per-thread parser state ----------------------------------------------
 * struct lp is ~5 KiB (inline tag and field tables) and its arena is
 * allocated on the first line: at one small body per request that was a
 * 5 KiB calloc, an arena malloc and their frees per request. Each thread
 * keeps its last state (scratch buffers included, when they stayed small)
 * in a per-thread cache (common/rdb_tcache) and the next parse on that
 * thread starts from it; it is freed at thread exit. A nested or concurrent
 * parse on the same thread cannot happen (no callbacks), and if it did it
 * would find no cached state and allocate its own. */

#define LP_CACHE_MAX_BYTES (256u * 1024) /* scratch kept across calls, at most */

static void lp_free_obj(void *ps)
{
	lp_free(ps);
}

static struct rdb_tcache lp_cache = RDB_TCACHE_INIT_BYTES(1, LP_CACHE_MAX_BYTES, lp_free_obj);

/* A parser state with the per-call part zeroed: the thread's cached one,
 * or a new one. NULL when out of memory. */
static struct lp *lp_take(void)
{
	struct lp *ps = rdb_tcache_take(&lp_cache);
	if (!ps)
		return calloc(1, sizeof(*ps));
	/* Everything before dup_bits is per call (line state, counters); the
	 * scratch pointers are kept, the tables after are written before read. */
	char *arena = ps->arena, *json_data = (char *)ps->json.data;
	size_t arena_cap = ps->arena_cap, json_cap = ps->json.cap, dups_cap = ps->dups_cap,
	       items_cap = ps->items_cap;
	struct dup_ent *dups = ps->dups;
	struct lp_item *items = ps->items;
	memset(ps, 0, offsetof(struct lp, dup_bits));
	ps->arena = arena;
	ps->arena_cap = arena_cap;
	ps->dups = dups;
	ps->dups_cap = dups_cap;
	ps->items = items;
	ps->items_cap = items_cap;
	ps->json.data = (uint8_t *)json_data;
	ps->json.cap = json_cap;
	return ps;
}

/* Keeps ps for the thread's next parse when its scratch is small (the
 * cache's byte bound), else frees it. */
static void lp_give(struct lp *ps)
{
	if (ps->tags != ps->tags_inline) {
		free(ps->tags);
		ps->tags = ps->tags_inline;
	}
	if (ps->fields != ps->fields_inline) {
		free(ps->fields);
		ps->fields = ps->fields_inline;
	}
	size_t scratch = ps->arena_cap + ps->json.cap + ps->dups_cap * sizeof(*ps->dups) +
			 ps->items_cap * sizeof(*ps->items);
	if (!rdb_tcache_give_bytes(&lp_cache, ps, scratch))
		lp_free(ps);
}

int ing_lp_parse(const char *body, size_t len, const struct ing_lp_options *opt,
		 struct mdl_batch *b, struct mdl_events *ev, struct ing_lp_result *res)
{
	struct lp *ps = lp_take();
	/* The counters only: errors[] (5 KiB) is written as errors happen and
	 * read up to nerrors. */
	memset(res, 0, offsetof(struct ing_lp_result, errors));
	if (!ps)
		return -ENOMEM;
	ps->opt = opt;
	ps->b = b;
	ps->ev = ev;
	ps->res = res;
	ps->record = -1;
	ps->tags_cap = INLINE_TAGS;
	ps->fields_cap = INLINE_FIELDS;
	ps->tags = ps->tags_inline;
	ps->fields = ps->fields_inline;
	ps->json.max = MDL_EVENT_FIELDS_MAX;
	const char *p = body, *end = body + len;
	int rc = 0;
	while (p < end && rc == 0) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *eol = nl ? nl : end;
		ps->lineno++;
		rc = do_line(ps, p, eol);
		p = nl ? nl + 1 : end;
	}
	lp_give(ps);
	return rc;
}
