/* udp_auth.h - authenticated UDP datagrams: the signed envelope, the UDP
 * keys file and the checks the UDP workers make (server/udp_auth.c).
 *
 * Envelope, version 1 (all integers little-endian; docs/API.md, "Signed
 * datagrams", has a worked example):
 *     off  size  field
 *     0    1     magic 0xFE (never the first byte of JSON or line protocol)
 *     1    1     version, 1
 *     2    1     L, length of the key id, 1..64
 *     3    1     flags, 0 (reserved; anything else is malformed)
 *     4    8     ts_ms, Unix time of signing in milliseconds (uint64)
 *     12   8     nonce (uint64): unique per key among the datagrams signed
 *                within the skew window (random, or a counter)
 *     20   L     key id, [A-Za-z0-9._-]
 *     20+L n     payload: JSON records or line protocol, unchanged
 *     end-32 32  MAC = HMAC-SHA256(secret, every byte before the MAC)
 *
 * The keys file holds per line  <id> <jobs> <secret-hex>:  jobs is "*" or
 * a comma list of fnmatch(3) patterns, the secret 16..64 bytes as hex. '#'
 * starts a comment line. Secrets are never logged.
 *
 * Threading: all functions are thread-safe (one mutex over the key table,
 * which also holds each key's replay window).
 */
#ifndef SRV_UDP_AUTH_H
#define SRV_UDP_AUTH_H

#include "server/config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rdb_buf;

#define SRV_UDP_ENV_MAGIC      0xFE
#define SRV_UDP_ENV_VERSION    1
#define SRV_UDP_ENV_HEADER     20 /* bytes before the key id */
#define SRV_UDP_ENV_MAC	       32
#define SRV_UDP_KEY_ID_MAX     64
#define SRV_UDP_KEY_SECRET_MIN 16
#define SRV_UDP_KEY_SECRET_MAX 64
#define SRV_UDP_KEY_JOBS_MAX   512
#define SRV_UDP_REPLAY_SLOTS   4096 /* (ts, nonce) pairs remembered per key */

/* A parsed envelope; pointers borrow the datagram. */
struct srv_udp_envelope {
	uint64_t ts_ms, nonce;
	char key_id[SRV_UDP_KEY_ID_MAX + 1];
	const uint8_t *payload;
	size_t payload_len;
	const uint8_t *mac;  /* SRV_UDP_ENV_MAC bytes */
	size_t signed_len;   /* bytes the MAC covers: the datagram's first ones */
	const uint8_t *data; /* the datagram */
};

/* Why a datagram was not taken; SRV_UDP_OK when it was. */
enum srv_udp_verdict {
	SRV_UDP_OK,
	SRV_UDP_MALFORMED,	 /* starts with the magic but is not a valid envelope */
	SRV_UDP_UNSIGNED,	 /* no envelope, and unsigned datagrams are not allowed */
	SRV_UDP_UNKNOWN_KEY,	 /* no such key id (or no keys file) */
	SRV_UDP_BAD_MAC,	 /* MAC does not match the key's secret */
	SRV_UDP_STALE,		 /* ts_ms outside now ± udp_max_skew_s */
	SRV_UDP_REPLAY,		 /* (ts_ms, nonce) seen before, or older than the window */
	SRV_UDP_JOB_NOT_ALLOWED, /* a record's job is outside the key's patterns */
	SRV_UDP_VERDICTS
};

/* The /metrics reason label of v ("bad_mac", ...). */
const char *srv_udp_verdict_name(enum srv_udp_verdict v);

/* Parses an envelope (pure; the fuzz target). 0 with *env filled,
 * RDB_ENOTFOUND when data does not start with the magic (an unsigned
 * datagram), RDB_EINVAL when it does but is not a valid envelope. */
int srv_udp_envelope_parse(const uint8_t *data, size_t len, struct srv_udp_envelope *env);

/* Writes the signed envelope of payload into out (cap bytes) (the
 * server's tests and tools; the SDKs have their own). 0 with *outlen, or
 * RDB_EINVAL (bad key id, secret) / RDB_ELIMIT (cap too small) / RDB_EIO. */
int srv_udp_envelope_sign(const char *key_id, const uint8_t *secret, size_t secret_len,
			  uint64_t ts_ms, uint64_t nonce, const void *payload, size_t payload_len,
			  uint8_t *out, size_t cap, size_t *outlen);

/* Loads cfg->udp_keys_file (if any) and remembers cfg. 0, or an error with
 * err naming the line. Call once at start, before the UDP listener. */
int srv_udp_auth_init(const struct srv_config *cfg, char *err, size_t errlen);

/* True when a UDP keys file is configured. */
bool srv_udp_auth_enabled(void);

/* True when a datagram without an envelope may be stored: udp_allow_
 * unauthenticated = on, or auto with no keys file. */
bool srv_udp_auth_unsigned_ok(void);

/* Reads the keys file again (SIGHUP, admin reload, file change). A bad file
 * is refused (logged) and the keys in force stay; kept keys keep their
 * replay windows. 0 or an error, msg says what. */
int srv_udp_auth_reload(char *msg, size_t msglen);

/* Checks a parsed envelope at now_ms: key, MAC (constant time), skew and
 * replay window (a good datagram's (ts_ms, nonce) is remembered). On
 * SRV_UDP_OK jobs receives the key's patterns ("*" or comma list). Also
 * re-reads the keys file when it changed (checked at most once a second).
 * Does not count: the caller counts with srv_udp_auth_count. */
enum srv_udp_verdict srv_udp_auth_verify(const struct srv_udp_envelope *env, int64_t now_ms,
					 char *jobs, size_t jobslen);

/* True when job (len bytes) matches one of the patterns jobs. */
bool srv_udp_auth_job_ok(const char *jobs, const char *job, size_t len);

/* Counts one dropped datagram under v's reason. */
void srv_udp_auth_count(enum srv_udp_verdict v);

/* Appends the rankdb_udp_dropped_total lines of the authentication reasons
 * (the family's HELP/TYPE is written by the caller). */
void srv_udp_auth_metrics(struct rdb_buf *b);

/* Frees the key table (tests, shutdown). */
void srv_udp_auth_shutdown(void);

#endif
