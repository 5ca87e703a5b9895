/* events.h - a batch of structured events: log records and step-phase
 * spans, built by ingest (JSON records of type "log"/"span", line protocol
 * measurements rankdb_log/rankdb_span) and applied atomically by the engine.
 *
 * Strings are copied into the batch's arena; the batch is bounded in events
 * and bytes at creation (RDB_ELIMIT beyond). Single owner.
 */
#ifndef MDL_EVENTS_H
#define MDL_EVENTS_H

#include "common/rdb_buf.h"

#include <stddef.h>
#include <stdint.h>

enum mdl_event_kind {
	MDL_EV_LOG = 1,
	MDL_EV_SPAN = 2,
};

enum mdl_log_level {
	MDL_LEVEL_DEBUG = 0,
	MDL_LEVEL_INFO = 1,
	MDL_LEVEL_WARN = 2,
	MDL_LEVEL_ERROR = 3,
	MDL_LEVEL_FATAL = 4,
};

#define MDL_EVENT_TEXT_MAX   (64u * 1024u) /* log message / span name bytes */
#define MDL_EVENT_FIELDS_MAX (64u * 1024u) /* log fields JSON bytes */
#define MDL_SPAN_NAME_MAX    256u

/* One event. Strings point into the batch arena (not NUL-terminated). */
struct mdl_event {
	uint8_t kind;  /* enum mdl_event_kind */
	uint8_t level; /* logs: enum mdl_log_level; spans: 0 */
	uint32_t rank; /* MDL_RANK_JOB for job-level events */
	uint32_t attempt;
	int64_t ts_ns;	     /* log time, or span start */
	int64_t step;	     /* MDL_STEP_NONE if absent */
	int64_t duration_ns; /* spans: >= 0; logs: 0 */
	const char *job;
	size_t job_len;
	const char *text; /* log message, or span name (phase, e.g. "forward") */
	size_t text_len;
	const char *fields; /* logs: a JSON object's text ("{}" if none); spans: "" */
	size_t fields_len;
};

struct mdl_events;

int mdl_events_new(size_t max_events, size_t max_bytes, struct mdl_events **out);
void mdl_events_free(struct mdl_events *b); /* NULL ok */
/* Per-thread reuse, for one event batch per request (as mdl_batch_take):
 * mdl_events_take is mdl_events_new, but takes an empty batch from the
 * calling thread's cache when it holds one (bounds set anew);
 * mdl_events_give empties b and keeps it in the calling thread's cache (at
 * most MDL_EVENTS_CACHE_N batches of at most MDL_EVENTS_CACHE_BYTES
 * allocated each, MDL_EVENTS_CACHE_TOTAL_BYTES together; freed when the
 * thread exits), or frees it. A request without events then costs no
 * calloc/free pair. NULL ok. Errors: -ENOMEM. */
#define MDL_EVENTS_CACHE_N	     64
#define MDL_EVENTS_CACHE_BYTES	     (64u * 1024)
#define MDL_EVENTS_CACHE_TOTAL_BYTES (512u * 1024)
int mdl_events_take(size_t max_events, size_t max_bytes, struct mdl_events **out);
void mdl_events_give(struct mdl_events *b);
void mdl_events_reset(struct mdl_events *b);

/* Adds an event, copying its strings (job, text, fields must already be
 * validated: job by mdl_job_valid, text valid UTF-8, fields a JSON object
 * text). 0, -ENOMEM, RDB_ELIMIT, RDB_EINVAL (lengths over the maxima). */
int mdl_events_add(struct mdl_events *b, const struct mdl_event *ev);

/* Adds every event of src to dst (src unchanged). All or nothing: on
 * failure (RDB_ELIMIT, -ENOMEM) dst holds what it held before. */
int mdl_events_append(struct mdl_events *dst, const struct mdl_events *src);

size_t mdl_events_count(const struct mdl_events *b);
/* i < count; pointer valid until the next add/reset/free. */
const struct mdl_event *mdl_events_at(const struct mdl_events *b, size_t i);

/* "debug".."fatal" <-> enum; parse is case-insensitive and also takes
 * "warning", "err", "critical" (-> fatal). RDB_EINVAL if unknown. */
int mdl_level_parse(const char *s, size_t len, uint8_t *out);
const char *mdl_level_name(uint8_t level);

#endif
