/* pipeline.h - the one way a write enters rankdb.
 *
 *   front end (HTTP JSON, line protocol v1/v2, UDP, internal writers)
 *     -> parse (ingest/protocol.h)
 *     -> ing_submit: validate -> durable write (sto_write_req) -> publish
 *     -> subscribers (detection, ...), each on its own thread, after the ack
 *
 * ing_submit maps every storage result to one outcome (HTTP status, reason,
 * message, Retry-After) so all front ends answer alike. Publishing never
 * blocks and never fails a write: the acknowledged batch is copied into
 * each subscriber's bounded queue; a full queue drops the copy for that
 * subscriber and counts it (the write itself is stored and acknowledged).
 *
 * Threading: ing_submit is thread-safe and blocks until the write is durable
 * (the storage sync policy); ing_submit_async returns at once and calls back
 * when it is, so a front end can park the request instead of a thread. Subscribers' callbacks run
 * on the subscriber's own thread, one call at a time, never on a request thread.
 */
#ifndef ING_PIPELINE_H
#define ING_PIPELINE_H

#include "model/batch.h"
#include "model/events.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sto;
struct ing_pipeline;

/* Where a write came from (subscribers may treat them differently: the
 * detector ignores its own alert events). */
enum ing_source {
	ING_SRC_HTTP_JSON = 0,
	ING_SRC_HTTP_LP = 1,
	ING_SRC_UDP = 2,
	ING_SRC_INTERNAL = 3, /* written by rankdbd itself (alerts, derived series) */
};

/* One write. The pipeline does not keep the pointers after ing_submit. */
struct ing_write {
	const struct mdl_batch *points;	 /* NULL or empty: none */
	const struct mdl_events *events; /* NULL or empty: none */
	const char *batch_id;		 /* NULL: no idempotency */
	size_t batch_id_len;
	uint8_t source; /* enum ing_source */
};

/* Why a write was not stored (ING_OK: it was). */
enum ing_reason {
	ING_OK = 0,
	ING_BUSY,     /* head over its memory bound, or the batch id is in flight */
	ING_SHUTDOWN, /* the server is stopping */
	ING_LIMIT,    /* would create more series than allowed */
	ING_INVALID,  /* the engine refused the batch as malformed */
	ING_NOSPACE,  /* the disk is full */
	ING_IO,	      /* an I/O or memory failure */
};

/* The answer to a write, the same for every front end. */
struct ing_outcome {
	int rc;			 /* 0 or the storage error */
	uint8_t reason;		 /* enum ing_reason */
	int status;		 /* 200 on success; 503, 422, 400, 500 ... */
	bool duplicate;		 /* the batch id was seen before: acknowledged, not applied */
	const char *retry_after; /* Retry-After value, or NULL */
	char msg[512];		 /* for the client, when not stored */
};

/* An acknowledged write as a subscriber sees it. */
struct ing_ack {
	const struct mdl_batch *points;	 /* never NULL; may be empty */
	const struct mdl_events *events; /* never NULL; may be empty */
	int64_t ack_ns;			 /* wall-clock time of the acknowledgement */
	uint8_t source;			 /* enum ing_source */
};

struct ing_subscriber {
	const char *name; /* for logs and /metrics, e.g. "detect" (static storage) */
	/* Called on the subscriber's thread for each acknowledged write, in
	 * acknowledgement order per front-end thread. The ack and what it
	 * points to are valid for the call only. */
	void (*deliver)(void *arg, const struct ing_ack *ack);
	/* Called on the same thread at least every tick_ms (0: never), with the
	 * wall-clock time; NULL ok. */
	void (*tick)(void *arg, int64_t now_ns);
	uint32_t tick_ms;
	void *arg;
	size_t queue_bytes; /* bound of copied writes waiting (0: 64 MiB) */
	/* Optional (NULL: every series of a write is handed over whole).
	 * Called on the writing thread (any front-end thread, concurrently,
	 * also while deliver runs) once per acknowledged write with points:
	 * sets want[i] (false on entry) for each series i of points whose
	 * values the subscriber needs. Must not block. A series not wanted is
	 * still handed over, for its (job, rank)'s liveness and progress,
	 * unless the series handed over just before it has the same job, rank
	 * and the same timestamps, steps and attempts, with one attempt and
	 * steps and timestamps that never decrease: fed after that one, it
	 * would change nothing a progress tracker keeps (latest step, time,
	 * attempt). So one record of 32 metrics hands over its wanted series
	 * plus one. */
	void (*want)(void *arg, const struct mdl_batch *points, bool *want);
};

struct ing_subscriber_stats {
	const char *name;
	uint64_t delivered;	       /* writes handed to deliver() */
	uint64_t dropped;	       /* writes not handed over: the queue was full */
	uint64_t queued, queued_bytes; /* gauges */
};

struct ing_pipeline_options {
	uint64_t max_series; /* for the message of a series-limit refusal */
	uint64_t max_series_per_job;
};

/* Creates a pipeline writing to sto (borrowed: it must outlive the
 * pipeline). 0 or -ENOMEM. */
int ing_pipeline_new(struct sto *sto, const struct ing_pipeline_options *o,
		     struct ing_pipeline **out);

/* Adds a subscriber and starts its thread. Call before the first submit.
 * 0, -ENOMEM, RDB_ELIMIT (more than 8 subscribers), -errno (thread). */
int ing_pipeline_subscribe(struct ing_pipeline *p, const struct ing_subscriber *s);

/* Stores w and fills *out. Returns out->rc: 0 when the write is durable (or
 * a duplicate batch id), else the storage error (nothing of w stored). */
int ing_submit(struct ing_pipeline *p, const struct ing_write *w, struct ing_outcome *out);

/* ---- Asynchronous submit: acknowledge without holding a thread ----------- */

struct ing_ticket;
/* Called once, from another thread (the WAL's) or from inside
 * ing_submit_async, when the write's outcome is known; then call
 * ing_finish. Must not block; must not call ing_finish itself if the
 * caller may still be inside ing_submit_async (hand it over instead). */
typedef void (*ing_ready_fn)(void *arg);
#define ING_PENDING 1

/* ing_submit without the wait. Returns 0 with *out filled when the answer
 * is known now (a refusal, an empty write, a duplicate batch id): ready is
 * not called. Returns ING_PENDING with *tk set when the WAL record is
 * queued: ready(arg) is called once it is durable and applied (or failed),
 * then ing_finish(*tk, out) gives the same outcome ing_submit would have.
 * w and everything it points to must stay valid until ing_finish. */
int ing_submit_async(struct ing_pipeline *p, const struct ing_write *w, struct ing_outcome *out,
		     ing_ready_fn ready, void *arg, struct ing_ticket **tk);

/* Fills *out for a pending write whose ready callback has run, publishes
 * it to the subscribers if it was stored, and frees tk. Returns out->rc. */
int ing_finish(struct ing_ticket *tk, struct ing_outcome *out);

/* Subscriber counters, fn once per subscriber. */
void ing_pipeline_stats(struct ing_pipeline *p,
			void (*fn)(void *arg, const struct ing_subscriber_stats *st), void *arg);

/* Stops the subscriber threads (writes still queued are dropped and
 * counted) and frees. Call after the last submit. NULL ok. */
void ing_pipeline_free(struct ing_pipeline *p);

#endif
