/* group.h - group records: one chunk each of several series that share
 * their timestamps, steps and attempts, those columns stored once (layout
 * in storage/format.h). The metrics a rank sends in the same records have
 * identical time columns, which are about half of a lone chunk's bytes.
 *
 * A member is read without reading its siblings: the record's "head"
 * (header, shared columns, member directory) carries the record checksum,
 * and each member's section has its own checksum in the directory. So a
 * reader fetches 48 + H bytes (H from the index entry), then one section.
 */
#ifndef STO_GROUP_H
#define STO_GROUP_H

#include "common/rdb_buf.h"
#include "storage/series.h"

#include <stddef.h>
#include <stdint.h>

/* One member to frame: its series and its points. All members' points
 * must have equal n, ts, step and attempt columns (the caller checks; only
 * members[0]'s are written). */
struct sto_group_member {
	uint64_t series_id;
	const struct mdl_series_key *key;
	const struct mdl_cols *cols;
};

/* Appends one framed group record of m (2..STO_GROUP_MAX_MEMBERS) members
 * to out; scratch is a work buffer. *head_len gets H. 0, -ENOMEM,
 * RDB_ELIMIT, RDB_EINVAL. */
int sto_group_frame(struct rdb_buf *out, struct rdb_buf *scratch, uint64_t uid, uint64_t gen,
		    const struct sto_group_member *members, size_t m, uint32_t *head_len);

/* Where one member's section lies, from the record start. */
struct sto_group_sect {
	uint32_t offset, length;
	uint64_t hash;
};

/* Checks the head of the group record ref is a member of (head = the
 * first STO_CHUNK_HEADER_SIZE + ref->head_len bytes of the record: magic,
 * uid, lengths, member count, head checksum, the member's series id) and
 * returns where ref's section is. RDB_ECORRUPT with *why. */
int sto_group_head_check(const uint8_t *head, const struct sto_chunk_ref *ref,
			 struct sto_group_sect *sect, const char **why);

/* Decodes ref's points from its checked head and its section bytes
 * (checksum checked here) into out; count checked against ref. flags:
 * STO_CODEC_* (storage/codec.h). RDB_ECORRUPT with *why, or -ENOMEM. */
int sto_group_member_decode(const uint8_t *head, const uint8_t *section,
			    const struct sto_chunk_ref *ref, const struct sto_group_sect *sect,
			    unsigned flags, struct mdl_cols *out, const char **why);

/* sto_group_member_decode keeping only the points from the first one
 * whose step is >= min_step on (sto_codec_decode_tail); the count check is
 * on the whole member. */
int sto_group_member_decode_tail(const uint8_t *head, const uint8_t *section,
				 const struct sto_chunk_ref *ref, const struct sto_group_sect *sect,
				 unsigned flags, int64_t min_step, struct mdl_cols *out,
				 const char **why);

/* Checks a whole group record read from disk (magic, uid, lengths, head
 * checksum, sections back to back, every section's checksum but those of
 * removed members). On success *head_len gets H. RDB_ECORRUPT with *why. */
int sto_group_check(const uint8_t *rec, size_t len, uint64_t uid, uint32_t *head_len,
		    const char **why);

/* For compaction: checks the record's head and layout and every section
 * of the members in `live` (bit k: member k still has an index entry);
 * the section of a member not in `live` that fails its checksum (a
 * quarantined member) is marked removed (directory series id 0, its bytes
 * no longer checked by anyone) and the head checksum recomputed, in place.
 * *removed gets how many. RDB_ECORRUPT with *why when a live member or the
 * head is damaged. */
int sto_group_prune(uint8_t *rec, size_t len, uint64_t uid, uint64_t live, unsigned *removed,
		    const char **why);

/* Checks a whole group record's head and layout (uid from its own header),
 * decodes the shared columns, then calls fn for each member in order:
 * damage == NULL with its key and decoded points in *cols (reused between
 * calls), or damage (static text) with key and cols NULL when only that
 * member's section is damaged. Removed members are skipped. fn returning
 * non-zero stops the walk and is returned. RDB_ECORRUPT (with *why) when
 * the head or layout is damaged (no member passed), or -ENOMEM. */
typedef int (*sto_group_fn)(void *arg, unsigned member, unsigned m, uint64_t sid,
			    const struct mdl_series_key *key, const struct mdl_cols *cols,
			    const char *damage);
int sto_group_each(const uint8_t *rec, size_t len, struct mdl_cols *cols, sto_group_fn fn,
		   void *arg, const char **why);

/* Checks and decodes ref's points from a whole record read for it: a lone
 * chunk record, or the group record ref is a member of. Count checked
 * against ref. RDB_ECORRUPT with *why, or -ENOMEM. */
int sto_record_decode(const uint8_t *rec, const struct sto_chunk_ref *ref, struct mdl_cols *out,
		      const char **why);
/* sto_record_decode with flags (STO_CODEC_*, storage/codec.h). */
int sto_record_decode_flags(const uint8_t *rec, const struct sto_chunk_ref *ref, unsigned flags,
			    struct mdl_cols *out, const char **why);

/* sto_record_decode_flags keeping only the points from the first one whose
 * step is >= min_step on (sto_codec_decode_tail); the count check is on
 * the whole chunk. */
int sto_record_decode_tail(const uint8_t *rec, const struct sto_chunk_ref *ref, unsigned flags,
			   int64_t min_step, struct mdl_cols *out, const char **why);

#endif
