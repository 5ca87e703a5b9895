/* evstore.h - logs and spans inside the engine (internal to storage/):
 * the in-memory event head of a generation, event chunk encoding with its
 * index entry and token filter, and event filters. store.c drives it.
 * Single owner per head; callers lock (store.c's head_lock).
 */
#ifndef STO_EVSTORE_H
#define STO_EVSTORE_H

#include "common/rdb_buf.h"
#include "common/rdb_map.h"
#include "model/events.h"
#include "storage/sto.h"

#include <stdbool.h>
#include <stdint.h>

/* One event in a head: its strings follow the struct (text, then fields). */
struct ev_rec {
	uint8_t kind, level;
	uint32_t rank, attempt;
	int64_t ts_ns, step, duration_ns;
	uint32_t text_len, fields_len;
	char data[];
};

/* The events of one job in one head. */
struct ev_job {
	struct ev_job *next; /* same-hash chain */
	uint64_t hash;
	char job[MDL_JOB_MAX + 1];
	struct ev_rec **recs;
	size_t n, cap;
	size_t reserved; /* slots of recs[n..cap) promised to prepared writes */
	uint64_t bytes;
};

struct ev_head {
	struct rdb_map jobs; /* job hash -> struct ev_job * (chained on collision: see evstore.c) */
	uint64_t events;
	uint64_t bytes;
};

/* A head record holding a copy of e's fields, text and fields JSON;
 * malloc'd (free with free), NULL when out of memory. */
struct ev_rec *ev_rec_new(const struct mdl_event *e);

struct ev_head *evh_new(void);
void evh_free(struct ev_head *h); /* NULL ok */
/* Two-phase apply, so that a write whose WAL record is durable can always
 * be applied: evh_prepare allocates every record of b (jobs[i], recs[i] per
 * event i; arrays of mdl_events_count(b)) and reserves a slot for it in
 * its job; *bytes_added (added to h->bytes) says what that costs. On
 * failure (-ENOMEM) nothing is reserved or kept. evh_commit then links the
 * records (cannot fail); evh_unprepare instead frees them and releases the
 * slots (*bytes_released is taken off h->bytes). A job with reserved slots
 * is never dropped. Caller holds the head's lock. */
int evh_prepare(struct ev_head *h, const struct mdl_events *b, struct ev_job **jobs,
		struct ev_rec **recs, uint64_t *bytes_added);
void evh_commit(struct ev_head *h, size_t n, struct ev_job **jobs, struct ev_rec **recs);
void evh_unprepare(struct ev_head *h, size_t n, struct ev_job **jobs, struct ev_rec **recs,
		   uint64_t *bytes_released);
/* The job's events, or NULL. */
struct ev_job *evh_job(struct ev_head *h, const char *job);
/* Calls fn for every job of h (stable while h is not modified). */
int evh_each(struct ev_head *h, int (*fn)(void *arg, struct ev_job *j), void *arg);
/* Frees the first k events of j (all: drops j). Returns the bytes freed. */
uint64_t evh_consume(struct ev_head *h, struct ev_job *j, size_t k);
/* Removes and frees job j from h. */
void evh_drop(struct ev_head *h, struct ev_job *j);

/* An event chunk's index entry, decoded. */
struct ev_entry {
	uint8_t kinds, levels;
	uint32_t length;
	uint64_t segment_id, offset, gen;
	uint32_t count;
	int64_t min_ts_ns, max_ts_ns, min_step, max_step;
	uint32_t min_rank, max_rank;
	uint32_t bloom_log2;
	const uint8_t *bloom; /* into the value or the encoder's buffer */
	uint64_t bloom_sum;   /* its XXH3-64 as the entry says (version 2) */
	bool bloom_summed;    /* false: a version 1 entry, no filter checksum */
	uint64_t uid;	      /* from the key */
};

/* Sorts recs[0..n) by time and encodes them as one chunk payload (zstd
 * frame) into payload, filling e (all but segment/offset/length/gen/uid)
 * and the bloom filter into bloom. n <= STO_EVCHUNK_MAX_EVENTS. */
int evc_encode(struct ev_rec **recs, size_t n, struct rdb_buf *payload, struct ev_entry *e,
	       struct rdb_buf *bloom);
/* How many of recs (sorted) fit one chunk from index `from`. */
size_t evc_chunk_len(struct ev_rec **recs, size_t from, size_t n);
/* Sorts a job's events by (ts, rank). */
void evc_sort(struct ev_rec **recs, size_t n);

/* Index entry value <-> struct (bloom copied into / pointed at in val). */
int eve_encode(const struct ev_entry *e, const uint8_t *bloom, struct rdb_buf *out);
int eve_decode(const uint8_t *val, size_t len, struct ev_entry *e);
/* Whether an event chunk payload (checked by sto_chunk_check) names job in
 * its trailer: the chunk is that job's. */
bool evc_payload_of_job(const uint8_t *payload, size_t len, const char *job);
/* Whether e's bloom filter matches the checksum its entry carries (a
 * version 1 entry has none: true). Hashes the filter (up to 64 KiB): call
 * it only when the filter is consulted. */
bool eve_filter_intact(const struct ev_entry *e);

/* Decoded chunk: events with strings pointing into raw. */
struct ev_decoded {
	struct rdb_buf raw;
	struct mdl_event *ev;
	size_t n, cap;
};
int evc_decode(const uint8_t *payload, size_t len, const char *job, struct ev_decoded *out);
void evc_decoded_free(struct ev_decoded *d);
/* The index entry of a decoded chunk, as evc_encode made it when the chunk
 * was written: fills e but segment/offset/length/gen/uid, the bloom filter
 * into bloom (e->bloom points there). Encodes the payload again into
 * payload (scratch, its content dropped). For rebuild-index and verify
 * --quarantine. 0 or -ENOMEM / an evc_encode error. */
int evc_entry_of(const struct ev_decoded *d, struct rdb_buf *payload, struct ev_entry *e,
		 struct rdb_buf *bloom);

/* Filters. The words of f are tokenized once (evf_prepare). */
struct evf {
	const struct sto_ev_filter *f;
	uint64_t word_hash[32];
	char words[32][65];
	size_t nwords;
};
int evf_prepare(struct evf *p, const struct sto_ev_filter *f);
/* false if no event of the chunk can match (stats and token filter). When
 * the token filter is needed and fails its checksum: true with
 * *filter_damaged set (the chunk's events must be filtered one by one). */
bool evf_chunk_may_match(const struct evf *p, const struct ev_entry *e, bool *filter_damaged);
bool evf_match(const struct evf *p, const struct mdl_event *ev);
/* A head event as a struct mdl_event (strings point into r). */
void ev_rec_view(const struct ev_rec *r, const char *job, size_t job_len, struct mdl_event *out);

#endif
