/* json_lex.c - the tokenizer of the POST /api/v1/write parser
 * (json_write.c): error reporting, whitespace, strings and numbers. Internal
 * to ingest/ (json_int.h).
 *
 * Design: no per-token malloc: a string without escapes is a view into the
 * body; a string with escapes is decoded into ps->dst (the fixed scratch
 * buffer, or a bigger one json_events.c picks for log text); numbers are
 * converted in place.
 *
 * Grammar (JSON per RFC 8259):
 *   ws       = ( ' ' | '\t' | '\r' | '\n' )*
 *   string   = '"' *( char | escape ) '"'   (no raw bytes below 0x20)
 *   number   = -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
 * Decisions:
 *   - Integer fields accept only plain integer tokens -?(0|[1-9][0-9]*):
 *     "1.0", "1e3" and "+1" are errors; "-0" is 0. Overflow is detected.
 *   - Strings: all JSON escapes including \uXXXX with surrogate pairs
 *     (decoded to UTF-8); invalid escapes, lone surrogates and raw control
 *     bytes are errors. Raw bytes >= 0x80 are UTF-8-validated only in the
 *     strings of log records (json_events.c): every other string we keep
 *     (job, metric and span names, keywords) must be ASCII, so such bytes
 *     are rejected by the name checks ("\u0041" gives 'A'; "\u00e9" gives a
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
 *
 * Invariants: the cursor never passes end (the body need not be
 * NUL-terminated); lines are counted only in whitespace (raw newlines are
 * invalid inside strings), so err->line is the line of the offending token.
 * A decoded string longer than ps->dst_cap keeps only a prefix (its full
 * length is in the token; callers check it).
 *
 * Failure: ijs_fail fills *err with the record, the line, the field and a
 * message; messages echo at most ECHO_MAX bytes of input, with anything but
 * printable ASCII shown as \xHH. Not thread-safe per parser; reentrant.
 */
#include "ingest/json_int.h"
#include "ingest/echo.h"
#include "common/rdb_err.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors --------------------------------------------------------------- */

/* Writes at most max bytes of s as printable ASCII (others as \xHH), with
 * "..." when cut. out has room for ECHO_BUF bytes. */
const char *ijs_echo(char *out, const char *s, size_t n, size_t max)
{
	return ing_echo(out, s, n, max, 4 * max); /* max_out never binds */
}

int ijs_fail(struct parser *ps, int rc, long line, const char *field, const char *fmt, ...)
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
const char *ijs_describe(char *out, const struct tok *t)
{
	char tmp[ECHO_BUF];
	switch (t->kind) {
	case TOK_OBJ:
		return "an object";
	case TOK_ARR:
		return "an array";
	case TOK_STR:
		snprintf(out, ECHO_BUF + 2, "\"%s\"", ijs_echo(tmp, t->src, t->src_len, ECHO_MAX));
		return out;
	case TOK_BARE:
		break;
	}
	return ijs_echo(out, t->src, t->src_len, ECHO_MAX);
}

/* Describes the byte at the cursor (or the end of the body). */
int ijs_fail_unexpected(struct parser *ps, const char *field, const char *expected)
{
	if (ps->p >= ps->end)
		return ijs_fail(ps, RDB_EINVAL, ps->line, field,
				"body ends where %s was expected (truncated body?)", expected);
	char tmp[ECHO_BUF];
	return ijs_fail(ps, RDB_EINVAL, ps->line, field, "expected %s, got '%s'", expected,
			ijs_echo(tmp, ps->p, 1, 1));
}

int ijs_fail_nomem(struct parser *ps)
{
	return ijs_fail(ps, -ENOMEM, ps->line, "", "out of memory while parsing the request");
}

/* ---- lexing --------------------------------------------------------------- */

void ijs_skip_ws(struct parser *ps)
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

bool ijs_is_bare_char(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       c == '+' || c == '-' || c == '.';
}

int ijs_hex_val(char c)
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
		int h = ijs_hex_val(p[i]);
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
		return ijs_fail(ps, RDB_EINVAL, ps->line, field,
				"invalid \\u escape in a string: need 4 hex digits");
	p += 4;
	unsigned long cp = (unsigned long)hi;
	if (hi >= 0xdc00 && hi <= 0xdfff)
		return ijs_fail(ps, RDB_EINVAL, ps->line, field,
				"invalid \\u%04lx in a string: lone low surrogate", hi);
	if (hi >= 0xd800 && hi <= 0xdbff) {
		long lo = p + 6 <= ps->end && p[0] == '\\' && p[1] == 'u' ? hex4(p + 2) : -1;
		if (lo < 0xdc00 || lo > 0xdfff)
			return ijs_fail(ps, RDB_EINVAL, ps->line, field,
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
			return ijs_fail(ps, RDB_EINVAL, ps->line, field,
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
			return ijs_fail(ps, RDB_EINVAL, ps->line, field,
					"invalid escape '\\%s' in a string",
					ijs_echo(tmp, ps->p, 1, 1));
		}
	}
	return ijs_fail(ps, RDB_EINVAL, ps->line, field,
			"body ends inside a string (truncated body?)");
}

/* Lexes a string; ps->p is at the opening quote. */
int ijs_lex_string(struct parser *ps, const char *field, struct tok *t)
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
int ijs_lex_value(struct parser *ps, const char *field, struct tok *t)
{
	ijs_skip_ws(ps);
	if (ps->p < ps->end && *ps->p == '"')
		return ijs_lex_string(ps, field, t);
	t->line = ps->line;
	t->src = ps->p;
	t->src_len = 0;
	if (ps->p < ps->end && (*ps->p == '{' || *ps->p == '[')) {
		t->kind = *ps->p == '{' ? TOK_OBJ : TOK_ARR;
		t->src_len = 1;
		return 0;
	}
	const char *p = ps->p;
	while (p < ps->end && ijs_is_bare_char((unsigned char)*p))
		p++;
	if (p == ps->p)
		return ijs_fail_unexpected(ps, field, "a value");
	t->kind = TOK_BARE;
	t->src_len = (size_t)(p - ps->p);
	t->s = t->src;
	t->len = t->src_len;
	ps->p = p;
	return 0;
}

bool ijs_tok_is(const struct tok *t, enum tok_kind k, const char *word)
{
	size_t n = strlen(word);
	return t->kind == k && t->len == n && memcmp(t->s, word, n) == 0;
}

/* Expects byte c (after whitespace) and consumes it. */
int ijs_expect(struct parser *ps, char c, const char *field, const char *what)
{
	ijs_skip_ws(ps);
	if (ps->p < ps->end && *ps->p == c) {
		ps->p++;
		return 0;
	}
	return ijs_fail_unexpected(ps, field, what);
}

/* After a member: consumes ',' (0) or the closing '}' (1). */
int ijs_next_member(struct parser *ps, const char *field)
{
	ijs_skip_ws(ps);
	if (ps->p < ps->end && *ps->p == ',') {
		ps->p++;
		ijs_skip_ws(ps);
		if (ps->p < ps->end && *ps->p == '}')
			return ijs_fail(ps, RDB_EINVAL, ps->line, field,
					"trailing comma before '}' is not allowed");
		return 0;
	}
	if (ps->p < ps->end && *ps->p == '}') {
		ps->p++;
		return 1;
	}
	return ijs_fail_unexpected(ps, field, "',' or '}' after a value");
}

int ijs_enter(struct parser *ps, const char *field)
{
	if (++ps->depth <= ps->lim->max_depth)
		return 0;
	return ijs_fail(ps, RDB_ELIMIT, ps->line, field, "JSON nesting deeper than %zu levels",
			ps->lim->max_depth);
}

/* ---- numbers -------------------------------------------------------------- */

/* Checks the JSON number grammar -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
 * and says whether it is a plain integer. */
bool ijs_json_number(const char *s, size_t n, bool *is_int)
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
int ijs_scan_number(const char *s, size_t n, double *out)
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

/* Parses a plain integer token into sign and magnitude. */
enum int_result ijs_parse_int(const struct tok *t, bool *neg, uint64_t *mag)
{
	bool is_int = false;
	if (t->kind != TOK_BARE || !ijs_json_number(t->s, t->len, &is_int))
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
int ijs_field_uint(struct parser *ps, const char *field, uint64_t max, uint64_t *out)
{
	struct tok t;
	int rc = ijs_lex_value(ps, field, &t);
	if (rc)
		return rc;
	bool neg = false;
	uint64_t mag = 0;
	enum int_result r = ijs_parse_int(&t, &neg, &mag);
	if (r == INT_OK && (!neg || mag == 0) && mag <= max) {
		*out = mag;
		return 0;
	}
	char tmp[ECHO_BUF + 2];
	return ijs_fail(ps, RDB_EINVAL, t.line, field,
			"%s must be an integer from 0 to %llu, got %s", field,
			(unsigned long long)max, ijs_describe(tmp, &t));
}
