/* rdbc: the rankdb client library for native trainers (C and C++).
 *
 * Same contract as the Python client (clients/python): the calls a training
 * loop makes (rdbc_log, rdbc_phase_begin/end, rdbc_step_done, rdbc_message)
 * never block on the network and never fail because the server is slow or
 * down. They copy the record into a bounded in-memory queue and return; a
 * background thread batches records into NDJSON (POST /api/v1/write, see
 * docs/API.md) with a batch id, a second one sends them over one keep-alive
 * HTTP connection (libcurl), honours 429/503 + Retry-After with backoff, and
 * keeps what the server has not acknowledged in an on-disk spool that is
 * replayed exactly once when the server is back — also by the next process
 * of the same job and rank after a crash (the spool format is the Python
 * client's, so either client replays the other's). A heartbeat point is
 * sent every heartbeat_ms whatever the training thread does.
 *
 * Optional UDP transport (udp_addr): fire-and-forget datagrams of the same
 * NDJSON records, no spool, no retries (the server counts drops); signed
 * with a UDP key (udp_key_id, udp_key_secret) when the server has a
 * udp_keys_file (docs/API.md, "Signed datagrams"). librdbc links GnuTLS
 * for the HMAC.
 *
 * Threading: one rdbc handle may be shared by threads for rdbc_log and
 * rdbc_message; phases (rdbc_phase_begin/end) and rdbc_step_done belong to
 * one training thread. Errors are negative errno values. Every function
 * accepts a NULL handle and then does nothing (returns -EINVAL where it
 * returns int), so a trainer can run without rankdb configured.
 */
#ifndef RDBC_H
#define RDBC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RDBC_VERSION "0.1.0"
#define RDBC_API     __attribute__((visibility("default")))
#define RDBC_NO_STEP INT64_MIN /* "no step" for step arguments */

struct rdbc;

/* Options. rdbc_opts_default() fills every field from the environment
 * (RANKDB_URL, RANKDB_JOB, RANKDB_UDP_KEY_ID, RANKDB_UDP_KEY_SECRET,
 * torchrun's RANK/WORLD_SIZE/LOCAL_RANK/TORCHELASTIC_RUN_ID/
 * TORCHELASTIC_RESTART_COUNT, SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID/
 * SLURM_JOB_ID/SLURM_RESTART_COUNT, RANKDB_SPOOL_DIR) and
 * defaults; change what you need before rdbc_open(). Strings are borrowed
 * until rdbc_open() returns (it copies them). */
struct rdbc_opts {
	const char *url; /* "http://127.0.0.1:7461" */
	const char *job; /* job id, [A-Za-z0-9._-]{1,128}; others become '_' */
	int rank;	 /* >= 0 */
	int world_size;	 /* >= 1 */
	int local_rank;
	int attempt;		    /* the job's restart count */
	uint64_t config_hash;	    /* sent as config_hash when != 0 (52 bits kept) */
	const char *spool_dir;	    /* root of the spool; NULL or "" = no spool */
	const char *udp_addr;	    /* "host:port": send over UDP instead of HTTP */
	size_t queue_max_records;   /* records waiting for the batcher (100000) */
	size_t batch_max_bytes;	    /* a batch is sealed at this size (1 MiB) */
	uint32_t flush_interval_ms; /* ... or this old (1000) */
	uint32_t heartbeat_ms;	    /* 0 = no heartbeat (5000) */
	uint32_t http_timeout_ms;   /* one request, connect included (10000) */
	uint32_t backoff_max_ms;    /* longest wait between retries (30000) */
	uint64_t spool_max_bytes;   /* on-disk bound; oldest dropped (256 MiB) */
	size_t mem_max_bytes;	    /* sealed batches held in memory (16 MiB) */
	const char *udp_key_id;	    /* UDP: with udp_key_secret: sign every datagram */
	const char *udp_key_secret; /* the key's secret as hex (rankctl udp-key add) */
};

struct rdbc_kv {
	const char *name; /* metric name: 1..256 printable ASCII, no space " , \ { } */
	double value;
};

enum rdbc_level { RDBC_DEBUG, RDBC_INFO, RDBC_WARN, RDBC_ERROR, RDBC_FATAL };

/* Counters; a snapshot, never reset. */
struct rdbc_stats {
	uint64_t queued, dropped_queue_full, dropped_invalid;
	uint64_t batches_sealed, batches_sent, records_sent, duplicates, retries;
	uint64_t batches_refused, records_refused;
	uint64_t spool_batches, spool_bytes, spool_dropped_batches, spool_dropped_records;
	uint64_t spool_adopted_batches, lost_records;
	uint64_t udp_datagrams, udp_errors;
};

/* Fills o from the environment and defaults. Never fails. */
RDBC_API void rdbc_opts_default(struct rdbc_opts *o);

/* Starts a client: copies o, starts the batcher and sender threads, queues
 * world_size (and config_hash) of this rank, and for rank 0 the job's
 * metadata (status "running"). Does not contact the server (a server that
 * is down is not an error). 0 and *out, or -EINVAL (bad url/job/rank),
 * -ENOMEM, or a pthread error; *out untouched on failure. */
RDBC_API int rdbc_open(const struct rdbc_opts *o, struct rdbc **out);

/* Queues one metrics record of n values at step (RDBC_NO_STEP: the current
 * step; a negative step: none). Never blocks; copies names and values. 0, -ENOSPC (queue full:
 * dropped and counted), -EINVAL (no handle, n == 0). Invalid names are
 * dropped and counted by the batcher, not here. */
RDBC_API int rdbc_log(struct rdbc *c, int64_t step, const struct rdbc_kv *kv, size_t n);

/* One metric: rdbc_log with n = 1. */
RDBC_API int rdbc_log1(struct rdbc *c, int64_t step, const char *name, double value);

/* A log record with the current step (or step). Messages over 60000 bytes
 * are cut. Never blocks. Return values as rdbc_log. */
RDBC_API int rdbc_message(struct rdbc *c, enum rdbc_level level, int64_t step, const char *msg);

/* Phase timers of the training thread: begin/end pairs, nested at most 8
 * deep. end records a span and adds the time to step_time.<name> of the
 * current step (sent by rdbc_step_done). -EINVAL on misuse (end without
 * begin, too deep, name longer than 64 bytes). */
RDBC_API int rdbc_phase_begin(struct rdbc *c, const char *name);
RDBC_API int rdbc_phase_end(struct rdbc *c);

/* Ends step `step` (RDBC_NO_STEP: the current one): queues step_time (since
 * the previous rdbc_step_done, or the run's first rdbc_phase_begin) and the
 * step's phase totals; tokens > 0 adds tokens_per_sec. The current step
 * becomes step + 1. */
RDBC_API int rdbc_step_done(struct rdbc *c, int64_t step, double tokens);

/* The step the next records are tagged with. */
RDBC_API void rdbc_set_step(struct rdbc *c, int64_t step);

/* Waits up to timeout_ms until everything queued before the call is
 * acknowledged by the server (or sent, over UDP). Blocks: not for the
 * training loop. 0 or -ETIMEDOUT. */
RDBC_API int rdbc_flush(struct rdbc *c, uint32_t timeout_ms);

/* Flushes (at most timeout_ms, plus about a second to abort a request in
 * flight), stops the threads and frees c. Rank 0 sets the job status to
 * `status` ("finished", "failed"; NULL = leave it). What was not delivered
 * stays in the spool for the next process of this rank. final_stats (may
 * be NULL) receives the last counters. 0 if everything was delivered,
 * -ETIMEDOUT if not. Accepts NULL. */
RDBC_API int rdbc_close(struct rdbc *c, const char *status, uint32_t timeout_ms,
			struct rdbc_stats *final_stats);

/* Writes the signed envelope of payload (len bytes) into out (cap bytes): key_id is
 * 1..64 of [A-Za-z0-9._-], secret the key's raw bytes, ts_ms Unix
 * milliseconds, nonce unique per key within the server's skew window; out
 * must not overlap payload. Pure,
 * thread-safe, independent of any handle. 0 with *outlen, -EINVAL (bad key
 * id or arguments), -ENOSPC (cap too small), -EIO (HMAC failed). */
RDBC_API int rdbc_udp_sign(const char *key_id, const void *secret, size_t secret_len,
			   uint64_t ts_ms, uint64_t nonce, const void *payload, size_t len,
			   void *out, size_t cap, size_t *outlen);

/* Snapshot of the counters. */
RDBC_API void rdbc_get_stats(struct rdbc *c, struct rdbc_stats *st);

#ifdef __cplusplus
}
#endif
#endif
