/* events.h - log and span queries: filtered, paginated logs (newest first,
 * opaque cursors), the logs of one rank around a step, the per-rank phase
 * timeline of steps, and Grafana annotations. JSON into a bounded buffer,
 * through the storage API (sto_events_read) only.
 */
#ifndef QRY_EVENTS_H
#define QRY_EVENTS_H

#include "common/rdb_buf.h"
#include "query/qry.h"
#include "storage/sto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define QRY_LOGS_LIMIT_DEFAULT 100u
#define QRY_LOGS_LIMIT_MAX 10000u
#define QRY_EV_SCAN_MAX 100000u  /* default bound on events one read may hold */
#define QRY_CURSOR_MAX 80u       /* bytes of a cursor's text, NUL included */
#define QRY_TEXT_WORDS_MAX 32u   /* words of a text filter */

/* GET /api/v1/logs. filter.kinds is forced to logs; filter.job required. */
struct qry_logs_req {
	struct sto_ev_filter filter; /* job, ranks, min_level, time/step range, text,
				      * fields, attempt (-1: all) */
	size_t limit;                /* 1..QRY_LOGS_LIMIT_MAX */
	const char *cursor;          /* NULL: first page; else a next_cursor of the same filter */
	size_t max_events;           /* work bound: events one storage read may hold */
};

/* {"job":J,"logs":[{"ts","rank","level","step","attempt","message","fields"}],
 *  "next_cursor":str|null}, newest first (ts desc, rank asc, then a stable
 * content order). Errors (err filled): 400 bad cursor, 404 unknown job,
 * 422 more than max_events events at one timestamp, 413 response too
 * large, 500 corrupt data / I/O. Blocks on storage reads. */
int qry_logs(struct sto *s, const struct qry_logs_req *req, struct rdb_buf *out,
	     struct qry_error *err);

/* GET /api/v1/logs/around. */
struct qry_around_req {
	const char *job;
	uint32_t rank;
	int64_t step;          /* >= 0 */
	uint8_t min_level;
	int64_t window_steps;  /* >= 0: step mode; -1: time mode */
	size_t before, after;  /* time mode: records before the anchor / from it on */
	size_t max_events;
};

/* Step mode: the logs of rank with step in [step-K, step+K]. Time mode: the
 * anchor is the timestamp of the rank's oldest log at step, else of its
 * earliest point at step (any metric); the `before` logs just before the
 * anchor and the `after` logs from the anchor on. Oldest first:
 * {"job","rank","step","mode":"steps"|"time","anchor_ts":ns|null,
 *  "logs":[{..log..,"at_step":bool}]}. 404 unknown job or (time mode) no
 * record at step; 422 over max_events in step mode. */
int qry_logs_around(struct sto *s, const struct qry_around_req *req, struct rdb_buf *out,
		    struct qry_error *err);

/* GET /api/v1/spans. */
struct qry_spans_req {
	const char *job;
	const uint32_t *ranks; /* nranks == 0: every rank */
	size_t nranks;
	int64_t step_from, step_to; /* inclusive */
	int64_t attempt;            /* -1: the latest attempt per (step, rank); else only it */
	size_t max_events;
};

/* {"job","steps":[{"step","ranks":[{"rank","spans":[{"name","start","duration_ns",
 * "end","attempt"}],"total_ns"}]}]} by step, rank, start. 404 unknown job,
 * 422 over max_events spans. */
int qry_spans(struct sto *s, const struct qry_spans_req *req, struct rdb_buf *out,
	      struct qry_error *err);

/* Grafana annotations: the newest `limit` logs (level >= min_level) of job
 * (NULL: every job sto_list_jobs knows, i.e. jobs with series) in
 * [from_ns, to_ns], newest first, as a JSON array of
 * {"time":ms,"title":"<level> rank <r>","text":message,
 *  "tags":["job:..","rank:..","level:.."]}. An unknown job gives []. */
int qry_events_annotations(struct sto *s, const char *job /* NULL: every job */,
			   int64_t from_ns, int64_t to_ns, uint8_t min_level, size_t limit,
			   struct rdb_buf *out, struct qry_error *err);

#endif
