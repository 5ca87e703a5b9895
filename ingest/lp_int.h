/* lp_int.h - internal to ingest/: the line protocol parser's state and the
 * functions its files share (lineproto.c: lexing, numbers, metrics mapping
 * and the driver; lp_events.c: rankdb_log and rankdb_span lines). Not a
 * public header: nothing outside ingest/ includes it; the public face is
 * ingest/lp.h. Every function works on one struct lp owned by one
 * ing_lp_parse call; reentrant, not thread-safe per parser.
 *
 * Error convention: functions returning int give 0, RDB_EINVAL after
 * recording a line error through ilp_fail (the line is skipped), or another
 * negative error (-ENOMEM, RDB_ELIMIT) that stops the parse.
 */
#ifndef ING_LP_INT_H
#define ING_LP_INT_H

#include "ingest/lp.h"
#include "common/rdb_buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define INLINE_TAGS   16   /* extra tags per line held without allocating */
#define INLINE_FIELDS 64   /* fields per line held without allocating */
#define NUMBER_MAX    1100 /* longest float literal (exact denormals need ~770) */
#define ECHO_MAX      64   /* characters of input echoed into a message */
#define ECHO_BUF      (ECHO_MAX + 4)
#define DUP_BITS      512 /* bitmap that screens field keys for duplicates */

enum lp_kind { K_METRICS, K_LOG, K_SPAN };
enum vtype { V_FLOAT, V_INT, V_UINT, V_BOOL, V_STR };

struct span {
	const char *p;
	size_t len;
};

struct lp_tag {
	struct span key, val; /* unescaped */
};

struct lp_field {
	struct span key; /* unescaped */
	struct span raw; /* the value as written; strings: between the quotes, escaped */
	uint8_t type;	 /* enum vtype */
	bool dead;	 /* a later field has the same key */
	bool used;	 /* consumed by the mapping (step, attempt, message, duration_ns) */
	bool str_esc;	 /* string value holds a backslash */
	bool key_pct;	 /* key holds a byte written as %XX in metric names */
	size_t name_len; /* bytes this field adds to the metric name */
	union {
		double f;
		int64_t i;
		uint64_t u;
		bool b;
	} v;
};

/* One entry of a log line's fields object: an extra tag or a field. */
struct lp_item {
	struct span key;
	const struct lp_tag *tag;
	const struct lp_field *field;
};

/* A field and its position, sorted by (key, position) on long lines. */
struct dup_ent {
	const struct lp_field *f;
	size_t idx;
};

struct lp {
	const struct ing_lp_options *opt;
	struct mdl_batch *b;
	struct mdl_events *ev;
	struct ing_lp_result *res;
	/* the current line */
	const char *line, *p, *eol;
	long lineno, record;
	enum lp_kind kind;
	struct span meas;
	struct span job, special; /* special: level (logs) or name (spans) tag */
	bool has_job, has_rank, has_special, has_step;
	uint32_t rank, attempt;
	int64_t step, ts_ns;
	size_t ntags_seen;
	struct lp_tag *tags; /* extra tags: not job, rank, special */
	size_t ntags, tags_cap;
	struct lp_field *fields;
	size_t nfields, fields_cap;
	/* scratch reused by every line */
	char *arena; /* unescaped bytes of this line */
	size_t arena_len, arena_cap;
	struct dup_ent *dups; /* duplicate detection on lines of many fields */
	size_t dups_cap;
	struct lp_item *items; /* fields object entries of a log line */
	size_t items_cap;
	struct rdb_buf json; /* fields object of a log line */
	/* lp_take (lineproto.c) zeroes every member above this line when a
	 * thread reuses its state, and restores the scratch pointers and
	 * capacities; the members from dup_bits on are written before they are
	 * read. A new per-call member goes above. */
	uint64_t dup_bits[DUP_BITS / 64];
	size_t suffix_len;
	/* metric names are built alternately in name and name2 (add_points) */
	char name[MDL_METRIC_MAX + 1];
	char name2[MDL_METRIC_MAX + 1];
	char suffix[MDL_METRIC_MAX + 1];
	struct lp_tag tags_inline[INLINE_TAGS];
	struct lp_field fields_inline[INLINE_FIELDS];
};

static const struct span NOFIELD = {NULL, 0};

/* ---- lineproto.c ----------------------------------------------------------- */

/* Writes s as printable ASCII (others \xHH) in at most max characters of out
 * (max + 4 bytes), then "..." when cut; returns out. */
const char *ilp_echo(char *out, const char *s, size_t n, size_t max);
/* Records an error about the current line (field may be NOFIELD); returns rc. */
int ilp_fail(struct lp *ps, int rc, struct span field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* True for '0'..'9'. */
bool ilp_is_digit(char c);
/* True if s equals the lit_len bytes of lit. */
bool ilp_span_is(struct span s, const char *lit, size_t lit_len);
/* memcmp order, a prefix first. */
int ilp_span_cmp(struct span a, struct span b);
/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
bool ilp_utf8_valid(const char *s, size_t n);
/* Removes the backslash of "\c" for c in unesc, rewriting *s into the arena;
 * -ENOMEM. */
int ilp_unescape(struct lp *ps, struct span *s, const char *unesc);
/* An integer field value in 0..max (12i, 12u or an integral float) into *out. */
int ilp_field_count(struct lp *ps, const struct lp_field *f, uint64_t max, uint64_t *out);

/* ---- lp_events.c ----------------------------------------------------------- */

/* Maps a parsed rankdb_log line onto one log event added to ps->ev. */
int ilp_map_log(struct lp *ps);
/* Maps a parsed rankdb_span line onto one span event added to ps->ev. */
int ilp_map_span(struct lp *ps);

#endif
