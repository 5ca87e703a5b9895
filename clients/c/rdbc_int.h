/* rdbc internals shared by rdbc.c (API, queue, batcher), rdbc_send.c
 * (sender thread, HTTP through libcurl, UDP) and rdbc_spool.c (on-disk
 * spool). Not installed. */
#ifndef RDBC_INT_H
#define RDBC_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "rdbc.h"

#define RDBC_ID_MAX		128u /* server limit on batch ids */
#define RDBC_NAME_MAX		256u /* metric names */
#define RDBC_PHASE_NAME_MAX	64u
#define RDBC_PHASE_DEPTH	8u
#define RDBC_PHASES_MAX		32u    /* distinct phases per step */
#define RDBC_MSG_MAX		60000u /* log message bytes (server: 64 KiB) */
#define RDBC_METRICS_PER_RECORD 1000u

/* One sealed batch: body is NDJSON, id its batch id. */
struct rdbc_batch {
	struct rdbc_batch *next;
	uint64_t seq; /* sealing order in this process (1, 2, ...; 0: adopted) */
	char id[RDBC_ID_MAX + 1];
	size_t nrec;
	size_t len;
	char body[]; /* len bytes (+ NUL) */
};

/* ---- spool (rdbc_spool.c); thread-safe ------------------------------------ */

struct rdbc_spool;

/* Creates <root>/<job>/r<rank>/<session>/ and locks it. NULL when the
 * directory cannot be used (the client then keeps batches in memory). */
struct rdbc_spool *rdbc_spool_open(const char *root, const char *job, int rank, const char *session,
				   uint64_t max_bytes);
/* Takes over the session directories of dead processes of the same job and
 * rank (their lock is free); returns the number of batches adopted. */
size_t rdbc_spool_adopt(struct rdbc_spool *s);
/* Writes a batch (temp file + rename), kept in sealing order (b->seq)
 * whatever order batches arrive in (a spill of the sender's memory list
 * overlaps the batcher putting newer ones). Drops the oldest batches when
 * over max_bytes (counted); when b itself is older than every batch kept,
 * b is the one dropped (counted, 0 returned). 0, or a negative errno
 * (nothing written). */
int rdbc_spool_put(struct rdbc_spool *s, const struct rdbc_batch *b);
/* The oldest batch, read from disk into a new rdbc_batch the caller frees;
 * *token names it for rdbc_spool_remove. NULL when the spool is empty. */
struct rdbc_batch *rdbc_spool_oldest(struct rdbc_spool *s, uint64_t *token);
/* Deletes the batch named token (acknowledged or refused for good). */
void rdbc_spool_remove(struct rdbc_spool *s, uint64_t token);
size_t rdbc_spool_count(struct rdbc_spool *s);
void rdbc_spool_stats(struct rdbc_spool *s, struct rdbc_stats *st);
/* Unlocks; removes the session directory when it holds no batch. NULL ok. */
void rdbc_spool_close(struct rdbc_spool *s);

/* ---- sender (rdbc_send.c) --------------------------------------------------- */

struct rdbc_sender;

struct rdbc_sender_opts {
	const char *url;	/* base URL */
	const char *udp_addr;	/* non-NULL: UDP transport */
	const char *udp_key_id; /* non-NULL: sign datagrams with this key */
	const uint8_t *udp_key; /* its secret (copied), udp_key_len bytes */
	size_t udp_key_len;
	uint32_t timeout_ms, backoff_max_ms;
	size_t mem_max_bytes;
	struct rdbc_spool *spool; /* may be NULL; owned by the caller */
};

/* Starts the sender thread. 0 or a negative errno. */
int rdbc_sender_start(const struct rdbc_sender_opts *o, struct rdbc_sender **out);
/* Hands over a sealed batch (ownership moves to the sender). Called by the
 * batcher thread; may write the spool, never waits for the network. */
void rdbc_sender_submit(struct rdbc_sender *s, struct rdbc_batch *b);
/* Replaces the job metadata document to PUT at path (copied). */
void rdbc_sender_put_meta(struct rdbc_sender *s, const char *path, const char *json);
/* Batches not yet acknowledged (memory, spool, in flight) + pending meta. */
size_t rdbc_sender_pending(struct rdbc_sender *s);
/* Sends until empty or timeout_ms, then stops and joins the thread (a
 * request still in flight at the deadline is aborted within about a
 * second and its batch spooled), spools what is left in memory, frees s.
 * true if everything was delivered. st (may be NULL): the final counters. */
bool rdbc_sender_stop(struct rdbc_sender *s, uint32_t timeout_ms, struct rdbc_stats *st);
void rdbc_sender_stats(struct rdbc_sender *s, struct rdbc_stats *st);

/* ---- signing (rdbc_sign.c) ---------------------------------------------------- */

/* Decodes hex into out (at most cap bytes). 0 with *n, or -EINVAL. */
int rdbc_hex_decode(const char *hex, uint8_t *out, size_t cap, size_t *n);

/* ---- shared helpers (rdbc.c) ------------------------------------------------- */

int64_t rdbc_now_ns(void);  /* CLOCK_REALTIME */
int64_t rdbc_mono_ns(void); /* CLOCK_MONOTONIC */
/* Rate-limited warning on stderr: each key at most once a minute. */
void rdbc_warn(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
