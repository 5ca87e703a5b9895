/* events.h - a batch of structured events: log records and step-phase
 * spans, built by ingest (JSON records of type "log"/"span", line protocol
 * measurements rankdb_log/rankdb_span) and applied atomically by the engine.
 *
 * Strings are copied into the batch's arena; the batch is bounded in events
 * and bytes at creation (RDB_ELIMIT beyond). Single owner.
 */
#ifndef STO_EVENTS_H
#define STO_EVENTS_H

#include "common/rdb_buf.h"

#include <stddef.h>
#include <stdint.h>

enum sto_event_kind {
	STO_EV_LOG = 1,
	STO_EV_SPAN = 2,
};

enum sto_log_level {
	STO_LEVEL_DEBUG = 0,
	STO_LEVEL_INFO = 1,
	STO_LEVEL_WARN = 2,
	STO_LEVEL_ERROR = 3,
	STO_LEVEL_FATAL = 4,
};

#define STO_EVENT_TEXT_MAX (64u * 1024u)    /* log message / span name bytes */
#define STO_EVENT_FIELDS_MAX (64u * 1024u)  /* log fields JSON bytes */
#define STO_SPAN_NAME_MAX 256u

/* One event. Strings point into the batch arena (not NUL-terminated). */
struct sto_event {
	uint8_t kind;          /* enum sto_event_kind */
	uint8_t level;         /* logs: enum sto_log_level; spans: 0 */
	uint32_t rank;         /* STO_RANK_JOB for job-level events */
	uint32_t attempt;
	int64_t ts_ns;         /* log time, or span start */
	int64_t step;          /* STO_STEP_NONE if absent */
	int64_t duration_ns;   /* spans: >= 0; logs: 0 */
	const char *job;
	size_t job_len;
	const char *text;      /* log message, or span name (phase, e.g. "forward") */
	size_t text_len;
	const char *fields;    /* logs: a JSON object's text ("{}" if none); spans: "" */
	size_t fields_len;
};

struct sto_events;

int sto_events_new(size_t max_events, size_t max_bytes, struct sto_events **out);
void sto_events_free(struct sto_events *b); /* NULL ok */
void sto_events_reset(struct sto_events *b);

/* Adds an event, copying its strings (job, text, fields must already be
 * validated: job by sto_job_valid, text valid UTF-8, fields a JSON object
 * text). 0, -ENOMEM, RDB_ELIMIT, RDB_EINVAL (lengths over the maxima). */
int sto_events_add(struct sto_events *b, const struct sto_event *ev);

size_t sto_events_count(const struct sto_events *b);
/* i < count; pointer valid until the next add/reset/free. */
const struct sto_event *sto_events_at(const struct sto_events *b, size_t i);

/* Serialized form for the WAL (record type STO_WAL_REC_EVENTS). */
int sto_events_encode(const struct sto_events *b, struct rdb_buf *out);
int sto_events_decode(struct sto_events *b, const uint8_t *p, size_t len);

/* "debug".."fatal" <-> enum; parse is case-insensitive and also takes
 * "warning", "err", "critical" (-> fatal). RDB_EINVAL if unknown. */
int sto_level_parse(const char *s, size_t len, uint8_t *out);
const char *sto_level_name(uint8_t level);

#endif
