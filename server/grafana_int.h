/* grafana_int.h - internal to the Grafana module (server/grafana*.c): the
 * request state, shared value types and helpers of the JSON datasource.
 * Nothing outside server/grafana*.c includes it; the public face is
 * srv_grafana_routes (server/route.h). grafana.c's top comment is the design.
 *
 *   grafana.c        routing, errors, name lists, value sets, ad hoc filters,
 *                    catalog listings, /metrics, /variable, /search, /tag-*
 *   grafana_query.c  time range, targets, series selection and output,
 *                    cross-rank series, POST /query
 *   grafana_logs.c   log records: annotations, the logs frame, /annotations
 *
 * jansson.h is included by these files only. Threading: per request.
 */
#ifndef RDB_SERVER_GRAFANA_INT_H
#define RDB_SERVER_GRAFANA_INT_H

#include "server/srv.h"

#include <jansson.h>
#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GF_MAX_SERIES	    1000u   /* frames written by one /query */
#define GF_MAX_READ	    20000u  /* series one target may read */
#define GF_MAX_NAMES	    100000u /* distinct names one listing may collect */
#define GF_MAX_JOB_OPTIONS  20000u  /* /metrics: inline job options up to jobs x metrics */
#define GF_DEFAULT_MAXDP    1000
#define GF_MAX_MAXDP	    100000
#define GF_EVENTS_DEFAULT   1000
#define GF_EVENTS_MAX	    10000
#define GF_EVENTS_SCAN	    100000u		      /* matching log records read per job */
#define GF_MS_MAX	    (INT64_MAX / 1000000 - 1) /* ms whose ns still fit an int64 */
#define BIT(x)		    (1u << (x))
#define GF_REGEX_MAX_BYTES  4096u	 /* a target or =~ filter pattern, bytes */
#define GF_REGEX_MAX_COST   2000u	 /* regcomp tree nodes after {m,n} expansion */
#define GF_REGEX_WORK_MAX   (1ull << 29) /* per request: sum of cost x (text bytes + 1) */
#define GF_REGEX_MAX_DEPTH  32u		 /* nested groups */
#define GF_REGEX_MAX_REPEAT 1000u	 /* one {m,n} count */

struct gf {
	struct sto *sto;
	size_t max_points;   /* max_query_points: points read per target */
	size_t max_bytes;    /* max_response_bytes */
	json_t *body;	     /* the request body: an object */
	struct rdb_buf *out; /* the response body */
	size_t nelem;	     /* elements in the top-level array */
	size_t nframes;	     /* series/tables/frames written (/query) */
	int status;	     /* 0 while fine, else the status of the first error */
	uint64_t rx_work;    /* regex work spent: cost x (text bytes + 1), summed */
	bool rx_over;	     /* rx_work reached GF_REGEX_WORK_MAX (status is 400) */
	char msg[1400];
};

struct names {
	char **v; /* owned strings */
	size_t n, cap;
};

/* What a payload key allows: a JSON array, a comma list, a regex group
 * "(a|b)" or a glob group "{a,b}" of values, regex escapes removed. */
struct gf_set {
	bool given; /* a constraint was sent */
	bool all;   /* a wildcard was among the values: no constraint */
	struct names v;
};

/* A compiled, bounded regex (grafana_regex.c). */
struct gf_regex {
	regex_t re;
	uint32_t cost; /* tree nodes, as gf_regex_check counted them */
	bool ok;       /* compiled: re must be freed (gf_regex_free) */
};

enum op { OP_EQ, OP_NE, OP_RE, OP_NRE, OP_LT, OP_GT, OP_LE, OP_GE, OP_IN, OP_NIN, OP_N };

struct gf_filter {
	const char *key; /* borrowed from the body */
	const char *val; /* borrowed, or num */
	char num[40];
	enum op op;
	struct gf_regex rx; /* OP_RE, OP_NRE */
	struct gf *g;	    /* the request, for the regex work budget */
	struct gf_set set;  /* OP_IN, OP_NIN */
};

struct gf_filters {
	struct gf_filter *v;
	size_t n;
};

enum agg {
	AG_AVG,
	AG_RAW,
	AG_MIN,
	AG_MAX,
	AG_FIRST,
	AG_LAST,
	AG_SUM,
	AG_COUNT,
	AG_P50,
	AG_P90,
	AG_P99,
	AG_M4,
	AG_XMEAN,
	AG_XMIN,
	AG_XMAX,
	AG_XMEDIAN,
	AG_N
};

struct gf_range {
	int64_t from_ms, to_ms; /* inclusive */
	int64_t width_ms;	/* bucket width */
	int64_t max_points;	/* per series: max(maxDataPoints, (to - from) / intervalMs) */
};

struct tgt {
	const char *ref_id; /* NULL: the target had none (never invent one) */
	const char *name;   /* the target text, "" if none */
	bool table, hide;
	json_t *payload; /* an object, or NULL */
	json_t *owned;	 /* payload parsed from a string */
	struct gf_set jobs, ranks, levels;
	uint32_t aggs; /* BIT(enum agg) */
	int64_t limit; /* log records */
};

/* agg names by enum agg ("avg", .., "crossrank-median"). */
extern const char *const gf_agg_names[AG_N];

/* ---- grafana.c: errors and output ---- */

/* Records the first error (status, message); always returns RDB_EINVAL. */
int gf_fail(struct gf *g, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Gives rc (a failed write or allocation) a 400/500 message if none yet; returns rc. */
int gf_chk(struct gf *g, int rc);
/* Writes the ',' before every top-level array element but the first; 0 or a buffer error. */
int gf_elem_begin(struct gf *g);
/* Writes s as a JSON string; 0 or a buffer error. */
int gf_put_str(struct rdb_buf *b, const char *s);
/* Writes a finite, defined v as a JSON number, anything else as null. */
int gf_put_num(struct rdb_buf *b, double v, bool defined);
/* x / w rounded toward minus infinity (w > 0). */
int64_t gf_floor_div(int64_t x, int64_t w);
/* The rank as text: its number, or "job" for MDL_RANK_JOB. */
void gf_rank_text(uint32_t rank, char buf[16]);
/* The string value of o[key] (borrowed from o), or NULL. */
const char *gf_jstr(const json_t *o, const char *key);

/* ---- grafana.c: name lists and value sets ---- */

/* Appends a copy of s[0..len); 0, -ENOMEM, or RDB_ELIMIT past GF_MAX_NAMES. */
int gf_names_add(struct names *ns, const char *s, size_t len);
/* Frees the strings and the array, leaving ns empty. */
void gf_names_free(struct names *ns);
/* Adds the values of a comma list, "(a|b)" or "{a,b}" text; 0 or an error. */
int gf_set_text(struct gf_set *s, const char *t);
/* Adds a JSON string, number or (not nested) array of them; 0 or an error. */
int gf_set_json(struct gf_set *s, const json_t *v, bool nested);
/* True when s allows x (unconstrained sets allow everything). */
bool gf_set_has(const struct gf_set *s, const char *x);
/* True when s was given and holds no wildcard. */
bool gf_set_constrains(const struct gf_set *s);
/* Frees the values; s stays reusable. */
void gf_set_free(struct gf_set *s);

/* ---- grafana.c: ad hoc filters and listings ---- */

/* Compiles "^(src)$" into re: 0 (caller regfree()s), RDB_EINVAL with why set, or -ENOMEM. */
/* Compiles "^(src)$" into rx after gf_regex_check accepted src. 0, or
 * RDB_EINVAL with the reason (the bound's or regerror's) in why, or
 * -ENOMEM; rx->ok says whether rx must be freed. */
int gf_regex_compile(struct gf_regex *rx, const char *src, char *why, size_t whylen);
void gf_regex_free(struct gf_regex *rx);
/* Whether text matches rx, charged to the request's regex work budget.
 * Past GF_REGEX_WORK_MAX it records a 400 in g (gf_fail), sets
 * g->rx_over and returns false without matching. */
bool gf_regex_match(struct gf *g, const struct gf_regex *rx, const char *text);
/* Refuses a pattern whose compiled size regcomp would not keep small
 * (grafana_regex.c has the rule): longer than GF_REGEX_MAX_BYTES, more
 * than GF_REGEX_MAX_COST nodes after expanding repetition, deeper than
 * GF_REGEX_MAX_DEPTH groups, a count above GF_REGEX_MAX_REPEAT, or a
 * backreference. 0 and *cost (tree nodes), or RDB_EINVAL with the reason
 * in why. Pure. */
int gf_regex_check(const char *src, uint32_t *cost, char *why, size_t whylen);
/* Parses the body's "filters" and "adhocFilters" into fs (free with gf_filters_free,
 * also after failure); 0 or an error recorded in g. */
int gf_filters_parse(struct gf *g, struct gf_filters *fs);
/* Frees what gf_filters_parse made, leaving fs empty. */
void gf_filters_free(struct gf_filters *fs);
/* True when val passes the filter f. */
bool gf_filter_match(const struct gf_filter *f, const char *val);
/* True when every filter of fs (may be NULL) on key holds for val. */
bool gf_filters_ok(const struct gf_filters *fs, const char *key, const char *val);
/* Appends the jobs in want (NULL: all) that pass fs to out (caller frees);
 * 0 or an error recorded in g. */
int gf_list_jobs(struct gf *g, const struct gf_set *want, const struct gf_filters *fs,
		 struct names *out);

/* ---- grafana_query.c ---- */

/* Reads range, maxDataPoints and interval(Ms) of body into r; 0 or an error recorded in g. */
int gf_parse_range(struct gf *g, const json_t *body, struct gf_range *r);
/* Frees the sets and owned payload of t (not t itself). */
void gf_tgt_free(struct tgt *t);
/* p as an object (borrowed, or parsed from a string into *owned, which the caller
 * json_decref()s), or NULL. */
json_t *gf_payload_object(json_t *p, json_t **owned);
/* Writes ,"refId":.. when t has one; 0 or a buffer error. */
int gf_put_ref(struct rdb_buf *b, const struct tgt *t);
/* POST /grafana/query: writes the response into g->out; 0 or an error recorded in g. */
int gf_h_query(struct gf *g);

/* ---- grafana_logs.c ---- */

/* Writes one annotations table (anno) or logs frame of target t; 0 or an error in g. */
int gf_run_events(struct gf *g, const struct gf_range *r, const struct gf_filters *fs,
		  const struct tgt *t, bool anno);
/* POST /grafana/annotations (legacy): 0 or an error recorded in g. */
int gf_h_annotations(struct gf *g);

#endif
