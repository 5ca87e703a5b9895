/* ix_int.h - internal to storage/index/: the index's private structs and the
 * helpers its table files (ix_*.c) share with the wrapper (index.c). The
 * only header that includes lmdb.h; must not be included outside
 * storage/index/ (tools/checksrc.sh fails the build otherwise). The public
 * contract is index.h.
 *
 * Threading and failure: as index.c says (one thread per txn; after an
 * error other than RDB_ENOTFOUND a write txn must be aborted).
 */
#ifndef STO_IX_INT_H
#define STO_IX_INT_H

#include "storage/index/index.h"

#include <lmdb.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SUBSYS "index"

#define IX_MAXDBS	16
#define IX_MAXREADERS	256
#define IX_META_KEY_MAX 255u

#define CHUNK_KEY_SIZE	 24u
#define PENDING_KEY_SIZE (8u + CHUNK_KEY_SIZE)
#define SERIES_KEY_MAX	 (MDL_JOB_MAX + 1u + 4u + MDL_METRIC_MAX)

/* Chunk entry value v2: byte offsets (see the top comment). Version 1 was
 * the first 128 bytes without the checksum (read only while the index is
 * being upgraded: sto_index.legacy_values). */
#define ENTRY_VERSION	 2u
#define ENTRY_VERSION_V1 1u
enum {
	E_VERSION = 0,
	E_GROUP_N = 1, /* 0, or the member count of the group record */
	E_MEMBER = 2,  /* member number within the group record */
	E_LENGTH = 4,
	E_SEGMENT = 8,
	E_OFFSET = 16,
	E_GEN = 24,
	E_COUNT = 32,
	E_NAN_COUNT = 36,
	E_MIN_TS = 40,
	E_MAX_TS = 48,
	E_MIN_STEP = 56,
	E_MAX_STEP = 64,
	E_MIN_ATTEMPT = 72,
	E_MAX_ATTEMPT = 76,
	E_MIN = 80,
	E_MAX = 88,
	E_SUM = 96,
	E_FIRST = 104,
	E_LAST = 112,
	E_STEP_COUNT = 120,
	E_HEAD_LEN = 124, /* group members: head length H of the group record */
	ENTRY_SIZE_V1 = 128,
	E_CHECKSUM = 128, /* XXH3-64 of the chunk key, then bytes 0..127 */
	ENTRY_SIZE = 136,
};
_Static_assert(ENTRY_SIZE_V1 == 128 && E_HEAD_LEN + 4 == ENTRY_SIZE_V1,
	       "chunk entry v1: 128 bytes");
_Static_assert(E_CHECKSUM + 8 == ENTRY_SIZE, "chunk entry v2: 136 bytes");
_Static_assert(SERIES_KEY_MAX <= 511u, "series key fits LMDB's default max key size");

#define TS_FLIP 0x8000000000000000ull

struct sto_index {
	MDB_env *env;
	MDB_dbi meta, series, sid, chunks, pending;
	MDB_dbi events, evpending, batch_ids, batch_time;
	MDB_dbi tombstones, retention, quarantine, seg_trash; /* data lifecycle */
	MDB_dbi rollups;    /* aggregates of data retention dropped (not derived) */
	MDB_dbi supersede;  /* merged uid -> supersede entry (small-chunk merges) */
	uint64_t map_bytes; /* as configured, for the map-full log line */
	char *dir;	    /* owned copy, for log lines */
	bool read_only;
	/* Transaction gate (ix_gate_*): every transaction of this process is
	 * counted here, so that ix_compact.c can close the environment with
	 * none open. sto_txn_begin waits while hold_all, or hold_writers for a
	 * write txn. env is NULL only after a failed reopen. */
	pthread_mutex_t gate_mu;
	pthread_cond_t gate_cv; /* counts dropped, or the gate reopened */
	uint32_t active_read, active_write;
	bool hold_writers, hold_all;
	void *map_addr; /* LMDB's map of the file (find_map); NULL: unknown (or
			 * closed by an index compaction: found again at reopen) */
	size_t map_len;
	bool legacy_values; /* format_version < 3: values without checksums are
			     * accepted (read-only open, or an upgrade under way) */
	bool legacy_small;  /* format_version < 5: the same for the tables whose
			     * values format 5 seals (ix_seal.c) */
};

struct sto_txn {
	MDB_txn *txn;
	struct sto_index *ix;
	bool write;
	bool pass_damaged; /* sto_txn_pass_damaged: damaged chunk entries reach
			    * scan callbacks marked instead of failing the scan */
};

/* ---- index.c: error border, values, cursors ---- */
/* Maps an LMDB return code of operation op to 0 / negative errno / RDB_E*
 * (MDB_NOTFOUND -> RDB_ENOTFOUND, MDB_MAP_FULL -> RDB_ELIMIT, corruption ->
 * RDB_ECORRUPT), logging what the operator must know (rate-limited). */
int ix_err(const struct sto_index *ix, int rc, const char *op);
/* Logs a malformed key or value (what, size bytes); returns RDB_ECORRUPT. */
int ix_corrupt(const struct sto_txn *t, const char *what, size_t size);
/* Reads an 8-byte LE value into *out; RDB_ECORRUPT on another size. */
int ix_u64_value(const struct sto_txn *t, const MDB_val *v, const char *what, uint64_t *out);
/* Opens a cursor on dbi in t (the caller closes it with mdb_cursor_close). */
int ix_cursor_open(struct sto_txn *t, MDB_dbi dbi, MDB_cursor **cur);
/* Positions cur at the first key >= prefix (or the first key when plen is 0);
 * RDB_ENOTFOUND past the end. */
int ix_cursor_seek(struct sto_txn *t, MDB_cursor *cur, const void *prefix, size_t plen, MDB_val *k,
		   MDB_val *v);
/* The next pair; RDB_ENOTFOUND past the end. */
int ix_cursor_next(struct sto_txn *t, MDB_cursor *cur, MDB_val *k, MDB_val *v);
/* True when key k starts with prefix[0..plen). */
bool ix_has_prefix(const MDB_val *k, const uint8_t *prefix, size_t plen);
/* Deletes the entries of a generation-keyed db (keys start with gen be64)
 * with lo <= gen <= hi. */
int ix_gen_delete_range(struct sto_txn *t, MDB_dbi dbi, const char *what, uint64_t lo, uint64_t hi);

/* The databases of open_dbs, in order (IX_NDBS), with their handles. */
#define IX_NDBS 15
struct ix_db_name {
	const char *name;
	MDB_dbi *dbi;
};
/* Fills names[IX_NDBS] for ix (pointers into ix). */
void ix_db_names(struct sto_index *ix, struct ix_db_name *names);
/* Reopens the environment of ix (closed by the caller, ix->env NULL) with
 * the flags and databases of sto_index_open. Gate held, nothing open. */
int ix_reopen(struct sto_index *ix);
/* Closes the gate: new write txns (and read txns when all) wait; then waits
 * until none of them is open. After timeout_ms the gate reopens and
 * RDB_EBUSY is returned. One closer at a time. */
int ix_gate_close(struct sto_index *ix, bool all, uint32_t timeout_ms);
/* From writers held to all held (waits for readers the same way; on
 * timeout the gate reopens entirely and RDB_EBUSY is returned). */
int ix_gate_widen(struct sto_index *ix, uint32_t timeout_ms);
/* Reopens the gate: waiting transactions go on. */
void ix_gate_open(struct sto_index *ix);

/* ---- ix_meta.c ---- */
/* Counter read-and-increment; absent reads as absent_val. */
int ix_meta_next(struct sto_txn *t, const char *key, uint64_t absent_val, uint64_t *out);

/* ---- ix_chunks.c: encodings shared with the quarantine table ---- */
/* Writes the CHUNK_KEY_SIZE-byte chunk key into p. */
void ix_chunk_key_put(uint8_t *p, uint64_t series_id, int64_t min_ts_ns, uint64_t uid);
/* Writes the ENTRY_SIZE-byte chunk entry of r (with its checksum, over the
 * key of r) into p. */
void ix_entry_encode(const struct sto_chunk_ref *r, uint8_t *p);
/* Rewrites every chunk entry without a checksum (version 1) as version 2,
 * in write transactions of at most batch entries each; *rewritten counts
 * them, *damaged the entries left as they are because they do not decode.
 * Idempotent: a crash in the middle is finished by the next call. */
int ix_chunks_upgrade(struct sto_index *ix, size_t batch, uint64_t *rewritten, uint64_t *damaged);

/* ---- value checks with checksums (format 3), for upgrade and verify ----
 * Each checks one key/value pair of its table: 0 when it is sound; 1 when it
 * is a value of format 1/2 (no checksum; only while t->ix->legacy_values),
 * with *fixed / *fixed_len the same value with its checksum (fixed holds
 * IX_VALUE_MAX bytes); RDB_ECORRUPT with *why when it is damaged. */
#define IX_VALUE_MAX 1024u
typedef int (*ix_check_fn)(const struct sto_txn *t, const MDB_val *k, const MDB_val *v,
			   uint8_t *fixed, size_t *fixed_len, const char **why);
int ix_rollup_check(const struct sto_txn *t, const MDB_val *k, const MDB_val *v, uint8_t *fixed,
		    size_t *fixed_len, const char **why);
int ix_series_check(const struct sto_txn *t, const MDB_val *k, const MDB_val *v, uint8_t *fixed,
		    size_t *fixed_len, const char **why);
int ix_sid_check(const struct sto_txn *t, const MDB_val *k, const MDB_val *v, uint8_t *fixed,
		 size_t *fixed_len, const char **why);
/* Rewrites every value of dbi that check says is of format 1/2, in write
 * transactions of at most batch pairs; damaged ones are left and counted. */
int ix_rewrite_legacy(struct sto_index *ix, MDB_dbi dbi, ix_check_fn check, size_t batch,
		      uint64_t *rewritten, uint64_t *damaged);

/* ---- ix_seal.c: values with a checksum trailer (format 5) ----
 * meta, events, evpending, pending, batch_ids, batch_time, tombstones,
 * retention, quarantine, seg_trash, supersede: value = body, then u64 LE
 * XXH3-64 (seed 0) of the key and the body (of an events entry: its first
 * STO_EVENTRY_FIXED bytes). */
#define IX_SUM_SIZE 8u
/* Checks v of key k: 0 with *body = v without its trailer; 1 with *body = v
 * when it has no valid trailer and t->ix->legacy_small (a value written
 * before format 5); RDB_ECORRUPT otherwise (*body untouched). */
int ix_unseal(const struct sto_txn *t, const MDB_val *k, const MDB_val *v, MDB_val *body);
/* The same when the trailer covers the key and only the first `cover`
 * bytes of the body (events: STO_EVENTRY_FIXED, format.h). */
int ix_unseal_part(const struct sto_txn *t, const MDB_val *k, const MDB_val *v, size_t cover,
		   MDB_val *body);
/* Puts body (n bytes, not inside the map) with its trailer under k. */
int ix_put_sealed(struct sto_txn *t, MDB_dbi dbi, const MDB_val *k, const void *body, size_t n,
		  const char *op);
/* Logs (rate-limited) that the table's entry at k failed its checksum,
 * with what the operator can do (remedy); returns RDB_ECORRUPT. */
int ix_damaged(const struct sto_txn *t, const char *table, const MDB_val *k, const char *remedy);
/* The first 64 bytes of k as text (non-printable bytes as \xNN) into out. */
void ix_key_text(const MDB_val *k, char *out, size_t size);
/* Gives every value of dbi without a trailer one, in write transactions
 * of at most batch pairs; *rewritten counts them. Idempotent. */
int ix_seal_legacy(struct sto_index *ix, MDB_dbi dbi, size_t batch, uint64_t *rewritten);
/* What verify and the upgrade walk: the sealed tables, with a name and
 * what to do about a damaged entry. */
struct ix_sealed_db {
	const char *name;
	MDB_dbi dbi;
	const char *remedy;
};
#define IX_NSEALED 11
void ix_sealed_dbs(const struct sto_index *ix, struct ix_sealed_db *out);

/* ---- ix_events.c ---- */
/* Writes the events key of (job, min_ts_ns, uid) into p; returns its length. */
size_t ix_ev_key_put(uint8_t *p, const char *job, int64_t min_ts_ns, uint64_t uid);

#endif
