/* decfloat.h - exact conversion of short decimal literals to double, without
 * strtod, for the line-protocol parser's hot path (ingest/lineproto.c).
 *
 * Contract: ing_decfloat converts a float literal whose syntax was already
 * checked (['-'] digits ['.' digits] [('e'|'E') ['+'|'-'] digits], at least
 * one mantissa digit) and returns true with *out equal to what strtod
 * returns for the same bytes (round to nearest, ties to even, in the C
 * locale), bit for bit, including the sign of zero. It returns false when
 * the literal is outside the cases it handles (more than 19 significant
 * digits, a power of ten beyond 10^+-27 once the digits are an integer, or
 * a zero with one beyond 10^+-22); the caller then uses strtod. Pure, thread-safe, no allocation.
 */
#ifndef RDB_INGEST_DECFLOAT_H
#define RDB_INGEST_DECFLOAT_H

#include <stdbool.h>
#include <stddef.h>

/* Whether t[0..n) is a float literal of that syntax (the line-protocol
 * parser's float check; also what ing_decfloat requires). */
bool ing_decfloat_syntax(const char *t, size_t n);

/* t[0..n): a syntactically valid float literal (not NUL-terminated). */
bool ing_decfloat(const char *t, size_t n, double *out);

#endif
