/* json_int.h - internal to ingest/: the JSON write parser's state and the
 * functions its files share (json_write.c: records and body; json_lex.c:
 * tokens, strings and numbers; json_events.c: log and span members). Not a
 * public header: nothing outside ingest/ includes it; the public face is
 * ingest/ing.h. The parser is single-threaded and reentrant; every function
 * here works on one struct parser owned by ing_json_parse_all's stack frame.
 *
 * Error convention: functions returning int give 0 (for ijs_next_member
 * also 1: the object ended) or a negative error after filling ps->err
 * through ijs_fail; nothing here allocates memory the caller must free.
 */
#ifndef ING_JSON_INT_H
#define ING_JSON_INT_H

#include "ingest/ing.h"
#include "common/rdb_buf.h"
#include "model/events.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define INLINE_METRICS 64   /* metrics per record held without allocating */
#define INLINE_ARENA   1024 /* bytes of escaped metric names held inline */
#define SCRATCH_MAX    512  /* decoded string bytes kept; longer is an error */
#define NUMBER_MAX     1100 /* longest number literal (exact denormals: ~770) */
#define ECHO_MAX       64   /* input bytes echoed into a message */
#define ECHO_BUF       (ECHO_MAX * 4 + 8)

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
	unsigned seen;		  /* enum field bits */
	long line;		  /* of the '{' */
	long field_line[NFIELDS]; /* line of each seen field's key, by bit index */
	enum rec_type type;
	bool type_given;
	const char *job; /* into the body or job_buf */
	size_t job_len;
	char job_buf[MDL_JOB_MAX];
	uint32_t rank;
	int64_t step, ts_ns; /* ts_ns: metrics/log timestamp, span start */
	int64_t duration_ns;
	uint32_t attempt;
	size_t n; /* metrics, or keys of a log's fields (same table) */
	uint8_t level;
	const char *msg; /* into the body or msg_buf; msg_len bytes */
	size_t msg_len;
	bool has_fields; /* fields_text holds this record's fields object */
	char name_buf[MDL_SPAN_NAME_MAX];
	size_t name_len;
};

struct parser {
	const char *p, *end;
	long line;
	long record; /* index of the record being parsed, -1 outside */
	size_t depth;
	const struct ing_limits *lim;
	struct ing_error *err;
	struct mdl_batch *b;
	struct mdl_events *ev; /* NULL: log and span records are refused */
	int64_t default_ts_ns;
	int64_t precision_ns; /* ns per unit of "timestamp" / "start" (1, 1e3, 1e6, 1e9) */
	int64_t min_ts_ns;    /* explicit times below it are refused (INT64_MIN: none) */
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
	char *dst;	/* where escaped strings are decoded: scratch, msg_buf or dec_buf */
	size_t dst_cap; /* bytes of dst; longer strings keep only a prefix */
	char *msg_buf;	/* [MDL_EVENT_TEXT_MAX] a log message with escapes; lazily */
	char *dec_buf;	/* [MDL_EVENT_FIELDS_MAX] a key/string of fields; lazily */
	struct rdb_buf fields_text; /* the record's fields, compact JSON; bounded */
	char scratch[SCRATCH_MAX];
};

enum int_result { INT_OK, INT_FRACTION, INT_NOT_NUMBER, INT_OVERFLOW };

/* ---- json_lex.c: errors ---------------------------------------------------- */

/* Writes at most max bytes of s into out (ECHO_BUF bytes) as printable ASCII. */
const char *ijs_echo(char *out, const char *s, size_t n, size_t max);
/* Fills ps->err (current record, line, field, message) and returns rc. */
int ijs_fail(struct parser *ps, int rc, long line, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Describes t for "got ..." into out (ECHO_BUF + 2 bytes); returns out or a literal. */
const char *ijs_describe(char *out, const struct tok *t);
/* Fails with RDB_EINVAL naming the byte at the cursor (or the body's end). */
int ijs_fail_unexpected(struct parser *ps, const char *field, const char *expected);
/* Fails with -ENOMEM. */
int ijs_fail_nomem(struct parser *ps);

/* ---- json_lex.c: tokens ---------------------------------------------------- */

/* Skips JSON whitespace, counting lines. */
void ijs_skip_ws(struct parser *ps);
/* True for bytes of a bare token (number or keyword). */
bool ijs_is_bare_char(unsigned char c);
/* The value of hex digit c, or -1. */
int ijs_hex_val(char c);
/* Lexes a string at the opening quote; escapes are decoded into ps->dst. */
int ijs_lex_string(struct parser *ps, const char *field, struct tok *t);
/* Lexes a scalar; an object or array is returned as TOK_OBJ/TOK_ARR, not consumed. */
int ijs_lex_value(struct parser *ps, const char *field, struct tok *t);
/* True if t is of kind k and its decoded bytes equal word. */
bool ijs_tok_is(const struct tok *t, enum tok_kind k, const char *word);
/* Consumes byte c after whitespace, or fails naming what was expected. */
int ijs_expect(struct parser *ps, char c, const char *field, const char *what);
/* After a member: consumes ',' (0) or the closing '}' (1); a trailing comma fails. */
int ijs_next_member(struct parser *ps, const char *field);
/* Enters one nesting level; RDB_ELIMIT past lim->max_depth. */
int ijs_enter(struct parser *ps, const char *field);

/* ---- json_lex.c: numbers --------------------------------------------------- */

/* Checks the JSON number grammar; *is_int: no fraction or exponent. */
bool ijs_json_number(const char *s, size_t n, bool *is_int);
/* Converts a JSON number, correctly rounded. 1: not a number; 2: +-inf; 3: too long. */
int ijs_scan_number(const char *s, size_t n, double *out);
/* Parses a plain integer token into sign and magnitude. */
enum int_result ijs_parse_int(const struct tok *t, bool *neg, uint64_t *mag);
/* Parses an integer value in [0, max] into *out. */
int ijs_field_uint(struct parser *ps, const char *field, uint64_t max, uint64_t *out);

/* ---- json_write.c: values and the record's name table --------------------- */

/* If the next value is null, consumes it and returns true. */
bool ijs_take_null(struct parser *ps);
/* The name of table entry e (into the body or the arena). */
const char *ijs_ent_name(const struct parser *ps, const struct metric_ent *e);
/* Doubles the name table and its hash set; -ENOMEM leaves them as they were. */
int ijs_grow_ents(struct parser *ps);
/* Inserts entry ps->rec.n's name into the set; false if the record has it. */
bool ijs_set_insert(struct parser *ps, const char *name, size_t len);
/* Copies a decoded name into the arena; *off is its offset. -ENOMEM on failure. */
int ijs_arena_put(struct parser *ps, const char *s, size_t len, size_t *off);
/* Relabels the error just filled with the field "<obj>.<name>"; returns rc. */
int ijs_in_member(struct parser *ps, int rc, const char *obj, const char *name, size_t len);

/* ---- json_events.c: log and span members ---------------------------------- */

/* "level": a level name or null. */
int ijs_field_level(struct parser *ps);
/* "message": a UTF-8 string of at most MDL_EVENT_TEXT_MAX bytes. */
int ijs_field_message(struct parser *ps);
/* "name": a span name with the metric-name alphabet. */
int ijs_field_name(struct parser *ps);
/* "duration_ns": an integer in [0, INT64_MAX]. */
int ijs_field_duration(struct parser *ps);
/* "fields": a flat object or null, re-written as compact JSON into ps->fields_text. */
int ijs_field_fields(struct parser *ps);

#endif
