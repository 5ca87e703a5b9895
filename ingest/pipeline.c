/* pipeline.c - parse results to durable writes to subscribers (pipeline.h).
 *
 * Publishing: after sto_write_req succeeded (the write is durable and
 * acknowledged by the caller's answer), the write is encoded with the WAL
 * codec (storage/wal/batch_codec.h) into one heap blob per subscriber queue.
 * A subscriber with a want filter gets only the series it wants plus those
 * that tell it something new about a rank's progress (pipeline.h), so the
 * detector does not copy, decode and feed 32 values per record to watch a
 * few of them.
 * Each subscriber has a ring bounded in entries (QUEUE_SLOTS) and bytes
 * (queue_bytes); a write that does not fit is dropped for that subscriber
 * and counted, never waited for. Wake-ups of the subscriber threads are
 * coalesced (WAKE_BATCH, COALESCE_MS). Its thread decodes blobs into its own
 * batches and calls deliver(), or tick() when the wait times out.
 *
 * Failure: an encoding or allocation failure while publishing drops the
 * copy (counted) and never changes the write's outcome. Threading: one
 * mutex + condition variable per subscriber; submit holds a subscriber's
 * mutex only to push a pointer.
 */
#include "ingest/pipeline.h"
#include "common/rdb_buf.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"
#include "common/rdb_recycle.h"
#include "common/rdb_time.h"
#include "storage/wal/batch_codec.h"
#include "storage/sto.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SUBSCRIBERS	    8
#define QUEUE_SLOTS	    4096		  /* writes waiting per subscriber */
#define DEFAULT_QUEUE_BYTES (64ull * 1024 * 1024) /* bytes waiting per subscriber */
/* Wake-ups are coalesced: a push wakes the subscriber's thread only when
 * the queue was empty or reaches WAKE_BATCH writes, and a thread woken for
 * fewer waits up to COALESCE_MS for more. So at one write per request the
 * subscriber does not cost a context switch per request; a write reaches
 * it at most COALESCE_MS later. */
#define WAKE_BATCH  64
#define COALESCE_MS 2
#define DRAIN_MAX   256 /* writes a subscriber thread takes per lock hold */

struct blob {
	uint8_t *data; /* u32 P, P bytes points payload, u32 E, E bytes events payload */
	size_t len;
	size_t cap; /* bytes allocated at data */
	int64_t ack_ns;
	uint8_t source;
};

struct sub {
	struct ing_subscriber s;
	pthread_t thread;
	bool started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct blob ring[QUEUE_SLOTS];
	size_t head, count, bytes, max_bytes;
	bool stop;
	_Atomic uint64_t delivered, dropped;
	struct mdl_batch *b; /* decode targets, owned by the thread */
	struct mdl_events *ev;
};

struct ing_pipeline {
	struct sto *sto;
	struct ing_pipeline_options opt;
	struct sub *subs[MAX_SUBSCRIBERS];
	size_t nsubs;
};

int ing_pipeline_new(struct sto *sto, const struct ing_pipeline_options *o,
		     struct ing_pipeline **out)
{
	struct ing_pipeline *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->sto = sto;
	if (o)
		p->opt = *o;
	*out = p;
	return 0;
}

/* ---- blob memory ------------------------------------------------------------- */

/* A blob is allocated where a write is published (an HTTP worker) and
 * freed on the subscriber's thread once delivered; a free across threads
 * takes the allocating malloc arena's lock, so delivered blobs go back to
 * the publishers instead. Bound: BLOB_SHARED blobs on the shared stack plus
 * BLOB_PER_THREAD (and BLOB_THREAD_BYTES) per publishing thread, none over
 * BLOB_KEEP bytes: at most 4 MiB plus 1 MiB per thread. */
#define BLOB_KEEP	  (16u * 1024)
#define BLOB_SHARED	  256
#define BLOB_PER_THREAD	  256
#define BLOB_THREAD_BYTES (1u << 20)

static struct rdb_recycle blob_pool =
    RDB_RECYCLE_INIT(BLOB_SHARED, BLOB_PER_THREAD, BLOB_THREAD_BYTES, free);

/* An empty buffer bounded at max, with a delivered blob's memory if one is
 * kept. */
static void blob_buf(struct rdb_buf *b, size_t max)
{
	rdb_buf_init(b, max);
	size_t cap = 0;
	uint8_t *p = rdb_recycle_get(&blob_pool, &cap);
	if (p) {
		b->data = p;
		b->cap = cap;
	}
}

/* Gives a delivered blob's memory (cap bytes at data) back, or frees it. */
static void blob_release(uint8_t *data, size_t cap)
{
	if (cap > BLOB_KEEP || !rdb_recycle_put(&blob_pool, data, cap))
		free(data);
}

/* ---- subscriber threads ---------------------------------------------------- */

static void deliver_blob(struct sub *u, const struct blob *bl)
{
	const uint8_t *p = bl->data;
	uint32_t plen = rdb_get_le32(p);
	uint32_t elen = rdb_get_le32(p + 4 + plen);
	mdl_batch_reset(u->b);
	mdl_events_reset(u->ev);
	int rc = plen ? sto_batch_decode(u->b, p + 4, plen) : 0;
	if (rc == 0 && elen)
		rc = sto_events_decode(u->ev, p + 8 + plen, elen);
	if (rc) {
		/* our own encoding: only memory can fail here */
		atomic_fetch_add(&u->dropped, 1);
		return;
	}
	struct ing_ack ack = {
	    .points = u->b, .events = u->ev, .ack_ns = bl->ack_ns, .source = bl->source};
	u->s.deliver(u->s.arg, &ack);
	atomic_fetch_add(&u->delivered, 1);
}

static void deadline_in(struct timespec *ts, uint32_t ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

static void *sub_main(void *arg)
{
	struct sub *u = arg;
	int64_t next_tick = rdb_now_mono_ns();
	struct blob take[DRAIN_MAX];
	char tname[16]; /* the kernel's limit, with the NUL */
	snprintf(tname, sizeof(tname), "rdb-%s", u->s.name ? u->s.name : "sub");
	pthread_setname_np(pthread_self(), tname);
	pthread_mutex_lock(&u->mu);
	while (!u->stop) {
		if (u->count == 0) {
			if (u->s.tick_ms && u->s.tick) {
				struct timespec ts;
				deadline_in(&ts, u->s.tick_ms);
				pthread_cond_timedwait(&u->cv, &u->mu, &ts);
			} else {
				pthread_cond_wait(&u->cv, &u->mu);
			}
		}
		/* One coalescing wait per wake-up, then everything queued (up
		 * to DRAIN_MAX) in one go: a thread that took one write per
		 * wait would sleep COALESCE_MS per write, and the queue would
		 * hover at WAKE_BATCH with a signal every push. */
		if (u->count && u->count < WAKE_BATCH && !u->stop) {
			struct timespec ts;
			deadline_in(&ts, COALESCE_MS);
			pthread_cond_timedwait(&u->cv, &u->mu, &ts);
		}
		size_t n = 0;
		while (u->count && !u->stop && n < DRAIN_MAX) {
			take[n] = u->ring[u->head];
			u->head = (u->head + 1) % QUEUE_SLOTS;
			u->count--;
			u->bytes -= take[n].len;
			n++;
		}
		pthread_mutex_unlock(&u->mu);
		for (size_t i = 0; i < n; i++) {
			deliver_blob(u, &take[i]);
			blob_release(take[i].data, take[i].cap);
		}
		int64_t now_mono = rdb_now_mono_ns();
		if (u->s.tick && u->s.tick_ms && now_mono >= next_tick) {
			u->s.tick(u->s.arg, rdb_now_ns());
			next_tick = now_mono + (int64_t)u->s.tick_ms * 1000000;
		}
		pthread_mutex_lock(&u->mu);
	}
	pthread_mutex_unlock(&u->mu);
	return NULL;
}

int ing_pipeline_subscribe(struct ing_pipeline *p, const struct ing_subscriber *s)
{
	if (p->nsubs == MAX_SUBSCRIBERS)
		return RDB_ELIMIT;
	struct sub *u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->s = *s;
	u->max_bytes = s->queue_bytes ? s->queue_bytes : DEFAULT_QUEUE_BYTES;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&u->mu, NULL);
	pthread_cond_init(&u->cv, &ca);
	pthread_condattr_destroy(&ca);
	/* decoding our own encoding: the bounds only guard memory, the queue
	 * bytes bound the size of any one write */
	int rc = mdl_batch_new(SIZE_MAX / 64, SIZE_MAX / 64, &u->b);
	if (rc == 0)
		rc = mdl_events_new(SIZE_MAX / 64, SIZE_MAX / 64, &u->ev);
	if (rc == 0) {
		rc = -pthread_create(&u->thread, NULL, sub_main, u);
		u->started = rc == 0;
	}
	if (rc) {
		mdl_batch_free(u->b);
		mdl_events_free(u->ev);
		pthread_cond_destroy(&u->cv);
		pthread_mutex_destroy(&u->mu);
		free(u);
		return rc;
	}
	p->subs[p->nsubs++] = u;
	return 0;
}

/* ---- publishing --------------------------------------------------------------- */

/* Encodes w's points (only the series with keep[i]; keep NULL: all) and
 * events as one blob. */
static int encode(const struct ing_write *w, const bool *keep, struct rdb_buf *out)
{
	/* Room for the points' encoding and both length words at once, not 256
	 * bytes and then the codec's growth. */
	size_t hint = 8 + (w->points ? sto_batch_encoded_size(w->points, keep, NULL) : 0);
	int rc = rdb_buf_reserve(out, hint < out->max ? hint : out->max);
	if (rc == 0)
		rc = rdb_buf_append(out, "\0\0\0\0", 4);
	if (rc == 0 && w->points && mdl_batch_nseries(w->points))
		rc = sto_batch_encode_sel(w->points, keep, out);
	if (rc)
		return rc;
	rdb_put_le32(out->data, (uint32_t)(out->len - 4));
	size_t at = out->len;
	rc = rdb_buf_append(out, "\0\0\0\0", 4);
	if (rc == 0 && w->events && mdl_events_count(w->events))
		rc = sto_events_encode(w->events, out);
	if (rc == 0)
		rdb_put_le32(out->data + at, (uint32_t)(out->len - at - 4));
	return rc;
}

/* Hands data (len bytes of cap malloc'd; owned from here on) to u, or
 * frees it and counts it dropped. */
static void push(struct sub *u, uint8_t *data, size_t len, size_t cap, int64_t ack_ns,
		 uint8_t source)
{
	pthread_mutex_lock(&u->mu);
	size_t waiting = u->count, waiting_bytes = u->bytes;
	bool fits = data && u->count < QUEUE_SLOTS && u->bytes + len <= u->max_bytes;
	if (fits) {
		u->ring[(u->head + u->count) % QUEUE_SLOTS] = (struct blob){
		    .data = data, .len = len, .cap = cap, .ack_ns = ack_ns, .source = source};
		u->count++;
		u->bytes += len;
		if (u->count == 1 || u->count == WAKE_BATCH)
			pthread_cond_signal(&u->cv);
	}
	pthread_mutex_unlock(&u->mu);
	if (fits)
		return;
	free(data);
	atomic_fetch_add(&u->dropped, 1);
	static struct rdb_log_ratelimit rl;
	rdb_log_limited(&rl, 10, RDB_LOG_WARN, "pipeline",
			"subscriber '%s' is behind (queue full: %zu writes, %zu bytes "
			"waiting); an acknowledged write was not handed to it (it is "
			"stored; the subscriber misses it)",
			u->s.name, waiting, waiting_bytes);
}

/* Fed right after a, would b tell a progress tracker anything new? Not
 * when it has a's job, rank, timestamps, steps and attempts, one attempt
 * and steps and times that never decrease (pipeline.h, want). */
static bool same_progress(const struct mdl_batch_series *a, const struct mdl_batch_series *b)
{
	size_t n = b->pts.n;
	if (a->pts.n != n)
		return false;
	/* one (job, rank) number: the same job and rank, no bytes to compare */
	if ((a->jr == 0 || a->jr != b->jr) &&
	    (a->key.rank != b->key.rank || a->job_len != b->job_len ||
	     memcmp(a->key.job, b->key.job, a->job_len) != 0))
		return false;
	for (size_t k = 0; k < n; k++) {
		if (a->pts.ts_ns[k] != b->pts.ts_ns[k] || a->pts.step[k] != b->pts.step[k] ||
		    a->pts.attempt[k] != b->pts.attempt[k] ||
		    b->pts.attempt[k] != b->pts.attempt[0])
			return false;
		if (k &&
		    (b->pts.ts_ns[k] < b->pts.ts_ns[k - 1] || b->pts.step[k] < b->pts.step[k - 1]))
			return false;
	}
	return true;
}

/* keep[nseries]: the series of b handed to u (pipeline.h, want). */
static void select_series(const struct sub *u, const struct mdl_batch *b, bool *keep,
			  size_t nseries)
{
	memset(keep, 0, nseries);
	u->s.want(u->s.arg, b, keep);
	const struct mdl_batch_series *last = NULL;
	for (size_t i = 0; i < nseries; i++) {
		const struct mdl_batch_series *s = mdl_batch_series_at(b, i);
		if (!s)
			return; /* never: i < nseries */
		if (!keep[i] && last && same_progress(last, s))
			continue;
		keep[i] = true;
		last = s;
	}
}

/* Encodes w for each subscriber: one encoding shared by those that take
 * every series (the last gets it, the others copies), one each for those
 * with a want filter. */
static void publish(struct ing_pipeline *p, const struct ing_write *w)
{
	if (p->nsubs == 0)
		return;
	int64_t now = rdb_now_ns();
	size_t nseries = w->points ? mdl_batch_nseries(w->points) : 0;
	bool keep_stack[256], *keep_heap = NULL, *keep = keep_stack;
	if (nseries > sizeof(keep_stack)) {
		keep_heap = malloc(nseries);
		keep = keep_heap;
	}
	struct rdb_buf full;
	rdb_buf_init(&full, DEFAULT_QUEUE_BYTES * 4);
	bool full_pooled = false;
	bool full_done = false, full_ok = false;
	size_t full_left = 0;
	for (size_t i = 0; i < p->nsubs; i++)
		full_left += p->subs[i]->s.want && nseries ? 0 : 1;
	for (size_t i = 0; i < p->nsubs; i++) {
		struct sub *u = p->subs[i];
		if (u->s.want && nseries) {
			struct rdb_buf buf;
			blob_buf(&buf, DEFAULT_QUEUE_BYTES * 4);
			int rc = keep ? 0 : -ENOMEM;
			if (rc == 0) {
				select_series(u, w->points, keep, nseries);
				rc = encode(w, keep, &buf);
			}
			size_t len = buf.len, cap = buf.cap;
			if (rc == 0)
				push(u, rdb_buf_steal(&buf), len, cap, now, w->source);
			else
				atomic_fetch_add(&u->dropped, 1);
			rdb_buf_free(&buf);
			continue;
		}
		if (!full_done) {
			if (!full_pooled) {
				blob_buf(&full, DEFAULT_QUEUE_BYTES * 4);
				full_pooled = true;
			}
			full_ok = encode(w, NULL, &full) == 0;
			full_done = true;
		}
		if (!full_ok) {
			atomic_fetch_add(&u->dropped, 1);
			continue;
		}
		size_t len = full.len, cap = full.cap;
		if (--full_left == 0) {
			push(u, rdb_buf_steal(&full), len, cap, now, w->source);
			continue;
		}
		struct rdb_buf copy;
		blob_buf(&copy, DEFAULT_QUEUE_BYTES * 4);
		if (rdb_buf_append(&copy, full.data, len) == 0) {
			cap = copy.cap;
			push(u, rdb_buf_steal(&copy), len, cap, now, w->source);
		} else {
			push(u, NULL, len, 0, now, w->source);
		}
		rdb_buf_free(&copy);
	}
	rdb_buf_free(&full);
	free(keep_heap);
}

/* ---- submit ---------------------------------------------------------------------- */

static void outcome_set(const struct ing_pipeline *p, struct ing_outcome *o, int rc)
{
	o->rc = rc;
	o->retry_after = NULL;
	o->msg[0] = 0;
	if (rc == 0) {
		o->reason = ING_OK;
		o->status = 200;
	} else if (rc == RDB_EBUSY) {
		o->reason = ING_BUSY;
		o->status = 503;
		o->retry_after = "1";
		snprintf(o->msg, sizeof(o->msg),
			 "busy: ingest is saturated (in-memory head over head_max_bytes while "
			 "chunks are being sealed) or a request with the same batch id is being "
			 "written; nothing of this request was stored, retry after the "
			 "Retry-After delay");
	} else if (rc == -ESHUTDOWN) {
		o->reason = ING_SHUTDOWN;
		o->status = 503;
		o->retry_after = "1";
		snprintf(o->msg, sizeof(o->msg),
			 "server is shutting down; nothing of this request was stored, retry "
			 "against the restarted server");
	} else if (rc == RDB_ELIMIT) {
		o->reason = ING_LIMIT;
		o->status = 422;
		snprintf(o->msg, sizeof(o->msg),
			 "this request would create more series than max_series (%llu) or "
			 "max_series_per_job (%llu) allows; nothing of it was stored",
			 (unsigned long long)p->opt.max_series,
			 (unsigned long long)p->opt.max_series_per_job);
	} else if (rc == RDB_EINVAL) {
		o->reason = ING_INVALID;
		o->status = 400;
		snprintf(o->msg, sizeof(o->msg),
			 "the storage engine refused this batch as malformed; nothing of it was "
			 "stored");
	} else if (rc == -ENOSPC || rc == -EDQUOT) {
		o->reason = ING_NOSPACE;
		o->status = 503;
		o->retry_after = "10";
		snprintf(o->msg, sizeof(o->msg),
			 "the server's disk is full; nothing of this request was stored, retry "
			 "after the Retry-After delay (the operator must free space)");
	} else {
		o->reason = ING_IO;
		o->status = 500;
		o->retry_after = "5";
		snprintf(o->msg, sizeof(o->msg),
			 "storing the batch failed: %s; nothing of this request was stored, retry "
			 "later",
			 rdb_strerror(rc));
	}
}

int ing_submit(struct ing_pipeline *p, const struct ing_write *w, struct ing_outcome *out)
{
	struct sto_write_req req = {.points = w->points,
				    .events = w->events,
				    .batch_id = w->batch_id,
				    .batch_id_len = w->batch_id_len};
	struct sto_write_result res = {0};
	int rc = sto_write_req(p->sto, &req, &res);
	outcome_set(p, out, rc);
	out->duplicate = rc == 0 && res.duplicate;
	if (rc == 0 && !res.duplicate)
		publish(p, w);
	return rc;
}

struct ing_ticket {
	struct ing_pipeline *p;
	struct ing_write w; /* the caller's, valid until ing_finish */
	int rc;		    /* set by the storage completion */
	ing_ready_fn ready;
	void *arg;
};

/* The storage engine's completion (WAL thread): note the result, then hand
 * over; the ticket is the caller's from here on. */
static void ticket_done(void *arg, int rc)
{
	struct ing_ticket *tk = arg;
	tk->rc = rc;
	tk->ready(tk->arg);
}

int ing_submit_async(struct ing_pipeline *p, const struct ing_write *w, struct ing_outcome *out,
		     ing_ready_fn ready, void *arg, struct ing_ticket **tk_out)
{
	struct ing_ticket *tk = malloc(sizeof(*tk));
	if (!tk) {
		outcome_set(p, out, -ENOMEM);
		out->duplicate = false;
		return 0;
	}
	*tk = (struct ing_ticket){.p = p, .w = *w, .ready = ready, .arg = arg};
	*tk_out = tk;
	struct sto_write_req req = {.points = w->points,
				    .events = w->events,
				    .batch_id = w->batch_id,
				    .batch_id_len = w->batch_id_len};
	struct sto_write_result res = {0};
	int rc = sto_write_submit(p->sto, &req, &res, ticket_done, tk);
	if (rc == STO_PENDING)
		return ING_PENDING; /* tk may already be handed over */
	free(tk);
	*tk_out = NULL;
	outcome_set(p, out, rc);
	out->duplicate = rc == 0 && res.duplicate;
	return 0;
}

int ing_finish(struct ing_ticket *tk, struct ing_outcome *out)
{
	int rc = tk->rc;
	outcome_set(tk->p, out, rc);
	out->duplicate = false;
	if (rc == 0)
		publish(tk->p, &tk->w);
	free(tk);
	return rc;
}

void ing_pipeline_stats(struct ing_pipeline *p,
			void (*fn)(void *arg, const struct ing_subscriber_stats *st), void *arg)
{
	for (size_t i = 0; i < p->nsubs; i++) {
		struct sub *u = p->subs[i];
		struct ing_subscriber_stats st = {.name = u->s.name,
						  .delivered = atomic_load(&u->delivered),
						  .dropped = atomic_load(&u->dropped)};
		pthread_mutex_lock(&u->mu);
		st.queued = u->count;
		st.queued_bytes = u->bytes;
		pthread_mutex_unlock(&u->mu);
		fn(arg, &st);
	}
}

void ing_pipeline_free(struct ing_pipeline *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nsubs; i++) {
		struct sub *u = p->subs[i];
		pthread_mutex_lock(&u->mu);
		u->stop = true;
		pthread_cond_signal(&u->cv);
		pthread_mutex_unlock(&u->mu);
		if (u->started)
			pthread_join(u->thread, NULL);
		for (; u->count; u->count--, u->head = (u->head + 1) % QUEUE_SLOTS)
			free(u->ring[u->head].data);
		mdl_batch_free(u->b);
		mdl_events_free(u->ev);
		pthread_cond_destroy(&u->cv);
		pthread_mutex_destroy(&u->mu);
		free(u);
	}
	free(p);
}
