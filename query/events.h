/* events.h - log and span queries: filtered, paginated logs (newest first,
 * opaque cursors), the logs of one rank around a step, the per-rank phase
 * timeline of steps, and annotations. Typed results the caller owns (a
 * free function each), read through the storage API (sto_events_read)
 * only; failures fill a struct qry_error (qry.h).
 */
#ifndef QRY_EVENTS_H
#define QRY_EVENTS_H

#include "query/qry.h"
#include "storage/sto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define QRY_LOGS_LIMIT_DEFAULT 100u
#define QRY_LOGS_LIMIT_MAX     10000u
#define QRY_EV_SCAN_MAX	       100000u /* default bound on events one read may hold */
#define QRY_CURSOR_MAX	       80u     /* bytes of a cursor's text, NUL included */
#define QRY_TEXT_WORDS_MAX     32u     /* words of a text filter */

/* An owned copy of one stored event: text, fields and job point into data. */
struct qry_event {
	struct mdl_event ev;
	uint64_t hash; /* content hash: the tie-break of equal (ts, rank) in page order */
	char data[];
};

/* Events in the order the query says. Zero-initialized is empty. */
struct qry_events {
	struct qry_event **v; /* owned */
	size_t n, cap;
};
void qry_events_free(struct qry_events *l); /* NULL ok; l becomes empty */

/* The matches of f (at most max_events, RDB_ELIMIT beyond) handed to fn, as
 * sto_events_read does (a non-zero return of fn stops and is returned):
 * for callers with their own selection (the Grafana datasource). */
int qry_events_scan(struct sto *s, const struct sto_ev_filter *f, size_t max_events,
		    int (*fn)(void *arg, const struct mdl_event *e), void *arg,
		    struct sto_read_error *re);

/* GET /api/v1/logs. filter.kinds is forced to logs; filter.job required. */
struct qry_logs_req {
	struct sto_ev_filter filter; /* job, ranks, min_level, time/step range, text,
				      * fields, attempt (-1: all) */
	size_t limit;		     /* 1..QRY_LOGS_LIMIT_MAX */
	const char *cursor;	     /* NULL: first page; else a next_cursor of the same filter */
	size_t max_events;	     /* work bound: events one storage read may hold */
};

/* One page of logs. */
struct qry_log_page {
	char job[MDL_JOB_MAX + 1];
	struct qry_events logs;		  /* newest first */
	char next_cursor[QRY_CURSOR_MAX]; /* "" when this is the last page */
};
void qry_log_page_free(struct qry_log_page *p); /* NULL ok */

/* A page of logs, newest first (ts desc, rank asc, then a stable content
 * order). 0, or an error with err filled and out empty: QRY_E_INVALID bad
 * cursor, QRY_E_NOT_FOUND unknown job, QRY_E_LIMIT more than max_events
 * events at one timestamp, QRY_E_INTERNAL corrupt data / I/O. Blocks on
 * storage reads. */
int qry_logs(struct sto *s, const struct qry_logs_req *req, struct qry_log_page *out,
	     struct qry_error *err);

/* GET /api/v1/logs/around. */
struct qry_around_req {
	const char *job;
	uint32_t rank;
	int64_t step; /* >= 0 */
	uint8_t min_level;
	int64_t window_steps; /* >= 0: step mode; -1: time mode */
	size_t before, after; /* time mode: records before the anchor / from it on */
	size_t max_events;
};

struct qry_around {
	char job[MDL_JOB_MAX + 1];
	uint32_t rank;
	int64_t step;
	bool steps_mode;	/* window_steps given */
	int64_t anchor_ts_ns;	/* time mode: the anchor; INT64_MAX: none (step mode) */
	struct qry_events logs; /* oldest first; a log is "at step" when ev.step == step */
};
void qry_around_free(struct qry_around *a); /* NULL ok */

/* Step mode: the logs of rank with step in [step-K, step+K]. Time mode: the
 * anchor is the timestamp of the rank's oldest log at step, else of its
 * earliest point at step (any metric); the `before` logs just before the
 * anchor and the `after` logs from the anchor on. Oldest first.
 * QRY_E_NOT_FOUND unknown job or (time mode) no record at step;
 * QRY_E_LIMIT over max_events in step mode. */
int qry_logs_around(struct sto *s, const struct qry_around_req *req, struct qry_around *out,
		    struct qry_error *err);

/* GET /api/v1/spans. */
struct qry_spans_req {
	const char *job;
	const uint32_t *ranks; /* nranks == 0: every rank */
	size_t nranks;
	int64_t step_from, step_to; /* inclusive */
	int64_t attempt;	    /* -1: the latest attempt per (step, rank); else only it */
	size_t max_events;
};

/* The spans of one rank at one step, of one attempt: spans.v[first..+n). */
struct qry_span_group {
	int64_t step;
	uint32_t rank;
	uint32_t attempt;
	size_t first, n;  /* ordered by start, then name */
	int64_t total_ns; /* sum of their durations */
};

struct qry_spans {
	char job[MDL_JOB_MAX + 1];
	struct qry_events spans;  /* by step, rank, attempt, start, name */
	struct qry_span_group *g; /* by step, then rank */
	size_t ng;
};
void qry_spans_free(struct qry_spans *sp); /* NULL ok */

/* The per-rank phase timeline of a step range: per (step, rank) the spans
 * of the latest attempt (attempt -1) or of the one asked for.
 * QRY_E_NOT_FOUND unknown job, QRY_E_LIMIT over max_events spans. */
int qry_spans(struct sto *s, const struct qry_spans_req *req, struct qry_spans *out,
	      struct qry_error *err);

/* Annotations: the newest `limit` logs (level >= min_level) of job (NULL:
 * every job sto_list_jobs knows, i.e. jobs with series) in [from_ns,
 * to_ns], newest first, into out (each event names its job). An unknown
 * job gives none. */
int qry_events_annotations(struct sto *s, const char *job /* NULL: every job */, int64_t from_ns,
			   int64_t to_ns, uint8_t min_level, size_t limit, struct qry_events *out,
			   struct qry_error *err);

#endif
