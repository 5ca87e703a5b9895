/* group.c - group records (contract: storage/chunk/group.h, layout:
 * storage/format.h). Decoding trusts nothing: checksums are checked, and
 * every length is bounds-checked again anyway. */
#include "storage/chunk/group.h"
#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_le.h"
#include "storage/chunk/codec.h"
#include "storage/chunk/segment.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#define HDR	  STO_CHUNK_HEADER_SIZE
#define FIXED	  4u  /* payload: u8 m, u8[3] zero */
#define DIR_ENTRY 24u /* u64 series id, u32 offset, u32 length, u64 XXH3 */

static int put_key(struct rdb_buf *b, const struct mdl_series_key *k)
{
	size_t n = sto_key_rec_len(k);
	int rc = rdb_buf_reserve(b, n);
	if (rc == 0) {
		sto_key_rec_put(b->data + b->len, k);
		b->len += n;
	}
	return rc;
}

/* The payload into b: fixed part, shared columns, directory, sections. */
static int group_payload(struct rdb_buf *b, const struct sto_group_member *mem, size_t m,
			 uint32_t *head_len)
{
	b->len = 0;
	int rc = rdb_buf_reserve(b, FIXED);
	if (rc)
		return rc;
	memset(b->data, 0, FIXED);
	b->data[0] = (uint8_t)m;
	b->len = FIXED;
	rc = sto_codec_encode_shared(mem[0].cols, b);
	if (rc == 0)
		rc = rdb_buf_reserve(b, m * DIR_ENTRY);
	if (rc)
		return rc;
	size_t dir = b->len;
	b->len += m * DIR_ENTRY;
	*head_len = (uint32_t)b->len;
	for (size_t i = 0; rc == 0 && i < m; i++) {
		size_t start = b->len;
		rc = put_key(b, mem[i].key);
		if (rc == 0)
			rc = sto_codec_encode_values(mem[i].cols, b);
		if (rc)
			break;
		uint8_t *d = b->data + dir + i * DIR_ENTRY;
		rdb_put_le64(d, mem[i].series_id);
		rdb_put_le32(d + 8, (uint32_t)start);
		rdb_put_le32(d + 12, (uint32_t)(b->len - start));
		rdb_put_le64(d + 16, rdb_hash64(b->data + start, b->len - start, 0));
	}
	return rc;
}

int sto_group_frame(struct rdb_buf *out, struct rdb_buf *scratch, uint64_t uid, uint64_t gen,
		    const struct sto_group_member *mem, size_t m, uint32_t *head_len)
{
	if (m < 2 || m > STO_GROUP_MAX_MEMBERS)
		return RDB_EINVAL;
	for (size_t i = 1; i < m; i++)
		if (mem[i].cols->n != mem[0].cols->n)
			return RDB_EINVAL;
	int rc = group_payload(scratch, mem, m, head_len);
	if (rc)
		return rc;
	if (scratch->len > STO_CHUNK_MAX_PAYLOAD)
		return RDB_ELIMIT;
	size_t start = out->len;
	rc = rdb_buf_reserve(out, HDR + scratch->len);
	if (rc)
		return rc;
	uint8_t *h = out->data + start;
	sto_rec_header(h, STO_GROUP_MAGIC, (uint32_t)scratch->len, 0, uid, gen,
		       (uint32_t)mem[0].cols->n, *head_len);
	memcpy(h + HDR, scratch->data, scratch->len);
	rdb_put_le64(h + 40, sto_rec_hash(h, *head_len));
	out->len = start + HDR + scratch->len;
	return 0;
}

/* ---- checking ----------------------------------------------------------------------- */

/* Header fields and the head checksum. *m and *dir (payload offset of the
 * directory) are set on success. total_len: the record's length as the
 * caller knows it (index entry or file walk). */
static int check_head(const uint8_t *rec, uint64_t total_len, uint64_t uid, uint32_t head_len,
		      unsigned *m, size_t *dir, const char **why)
{
	uint32_t plen = rdb_get_le32(rec + 4);
	if (rdb_get_le32(rec) != STO_GROUP_MAGIC) {
		*why = "bad group record magic";
		return RDB_ECORRUPT;
	}
	if ((uint64_t)plen + HDR != total_len || rdb_get_le32(rec + 36) != head_len ||
	    head_len > plen || head_len < FIXED + 4) {
		*why = "group record length does not match the index";
		return RDB_ECORRUPT;
	}
	if (rdb_get_le64(rec + 8) != 0 || rdb_get_le64(rec + 16) != uid) {
		*why = "group record has another chunk id than the index says";
		return RDB_ECORRUPT;
	}
	if (sto_rec_hash(rec, head_len) != rdb_get_le64(rec + 40)) {
		*why = "group record checksum mismatch";
		return RDB_ECORRUPT;
	}
	const uint8_t *p = rec + HDR;
	*m = p[0];
	if (*m < 2 || *m > STO_GROUP_MAX_MEMBERS || p[1] || p[2] || p[3] ||
	    (size_t)*m * DIR_ENTRY > head_len - FIXED - 4) {
		*why = "group record header is malformed";
		return RDB_ECORRUPT;
	}
	*dir = head_len - (size_t)*m * DIR_ENTRY;
	return 0;
}

static void dir_entry(const uint8_t *rec, size_t dir, unsigned i, uint64_t *sid,
		      struct sto_group_sect *s)
{
	const uint8_t *d = rec + HDR + dir + (size_t)i * DIR_ENTRY;
	*sid = rdb_get_le64(d);
	s->offset = rdb_get_le32(d + 8);
	s->length = rdb_get_le32(d + 12);
	s->hash = rdb_get_le64(d + 16);
}

int sto_group_head_check(const uint8_t *head, const struct sto_chunk_ref *ref,
			 struct sto_group_sect *sect, const char **why)
{
	unsigned m;
	size_t dir;
	uint64_t sid;
	if (ref->length < HDR || ref->uid < ref->member) {
		*why = "group record length does not match the index";
		return RDB_ECORRUPT;
	}
	int rc =
	    check_head(head, ref->length, ref->uid - ref->member, ref->head_len, &m, &dir, why);
	if (rc)
		return rc;
	if (m != ref->group_n || ref->member >= m) {
		*why = "group record has another member count than the index says";
		return RDB_ECORRUPT;
	}
	dir_entry(head, dir, ref->member, &sid, sect);
	uint32_t plen = rdb_get_le32(head + 4);
	if (sid != ref->series_id) {
		*why = "group member belongs to another series than the index says";
		return RDB_ECORRUPT;
	}
	if (sect->offset < ref->head_len || sect->offset > plen ||
	    sect->length > plen - sect->offset) {
		*why = "group member's section lies outside the record";
		return RDB_ECORRUPT;
	}
	sect->offset += HDR;
	return 0;
}

/* ---- decoding ----------------------------------------------------------------------- */

/* The shared columns: payload bytes [FIXED, dir), consumed exactly. */
static int decode_shared(const uint8_t *rec, size_t dir, unsigned flags, struct mdl_cols *out,
			 const char **why)
{
	size_t used;
	int rc = sto_codec_decode_shared_flags(rec + HDR + FIXED, dir - FIXED, STO_CHUNK_MAX_POINTS,
					       flags, out, &used);
	if (rc == 0 && used != dir - FIXED)
		rc = RDB_ECORRUPT;
	if (rc == RDB_ECORRUPT)
		*why = "group record's shared columns do not decode";
	if (rc)
		out->n = 0;
	return rc;
}

/* A section: key record, then the value column, consumed exactly. */
static int decode_section(const uint8_t *p, size_t len, struct mdl_series_key *k, size_t from,
			  struct mdl_cols *out, const char **why)
{
	size_t klen, used;
	int rc = sto_key_rec_get(p, len, k, &klen);
	if (rc == 0 && k->metric[0] == 0)
		rc = RDB_ECORRUPT; /* a point series always has a metric */
	if (rc) {
		*why = "group member's series key is malformed";
		return rc;
	}
	rc = sto_codec_decode_values_from(p + klen, len - klen, from, out, &used);
	if (rc == 0 && used != len - klen)
		rc = RDB_ECORRUPT;
	if (rc == RDB_ECORRUPT)
		*why = "group member's value column does not decode";
	return rc;
}

int sto_group_member_decode(const uint8_t *head, const uint8_t *section,
			    const struct sto_chunk_ref *ref, const struct sto_group_sect *sect,
			    unsigned flags, struct mdl_cols *out, const char **why)
{
	return sto_group_member_decode_tail(head, section, ref, sect, flags, INT64_MIN, out, why);
}

int sto_group_member_decode_tail(const uint8_t *head, const uint8_t *section,
				 const struct sto_chunk_ref *ref, const struct sto_group_sect *sect,
				 unsigned flags, int64_t min_step, struct mdl_cols *out,
				 const char **why)
{
	struct mdl_series_key k;
	size_t from = 0;
	out->n = 0;
	if (rdb_hash64(section, sect->length, 0) != sect->hash) {
		*why = "group member's section checksum mismatch";
		return RDB_ECORRUPT;
	}
	size_t dir = ref->head_len - (size_t)ref->group_n * DIR_ENTRY;
	int rc = decode_shared(head, dir, flags, out, why);
	if (rc == 0 && !ref->damaged && out->n != ref->stats.count) {
		*why = "chunk point count differs from its index entry";
		rc = RDB_ECORRUPT;
	}
	if (rc == 0) {
		from = sto_codec_lead_below(out, min_step);
		rc = decode_section(section, sect->length, &k, from, out, why);
	}
	if (rc)
		out->n = 0;
	else
		sto_codec_drop_lead(out, from, flags);
	return rc;
}

/* Head and directory of a whole record: head checksum, and sections back
 * to back from H to P. *m and *dir as check_head. */
static int check_layout(const uint8_t *rec, size_t len, uint64_t uid, uint32_t *head_len,
			unsigned *m, size_t *dir, const char **why)
{
	if (len < HDR) {
		*why = "record shorter than a chunk header";
		return RDB_ECORRUPT;
	}
	uint32_t hl = rdb_get_le32(rec + 36);
	int rc = check_head(rec, len, uid, hl, m, dir, why);
	if (rc)
		return rc;
	uint32_t plen = rdb_get_le32(rec + 4), at = hl;
	for (unsigned i = 0; i < *m; i++) {
		uint64_t sid;
		struct sto_group_sect s;
		dir_entry(rec, *dir, i, &sid, &s);
		if (s.offset != at || s.length > plen - at) {
			*why = "group record's member directory is malformed";
			return RDB_ECORRUPT;
		}
		at += s.length;
	}
	if (at != plen) {
		*why = "group record has bytes after its last member";
		return RDB_ECORRUPT;
	}
	*head_len = hl;
	return 0;
}

/* Whether member i's section matches its checksum (removed: true). */
static bool section_ok(const uint8_t *rec, size_t dir, unsigned i, uint64_t *sid)
{
	struct sto_group_sect s;
	dir_entry(rec, dir, i, sid, &s);
	return *sid == 0 || rdb_hash64(rec + HDR + s.offset, s.length, 0) == s.hash;
}

int sto_group_check(const uint8_t *rec, size_t len, uint64_t uid, uint32_t *head_len,
		    const char **why)
{
	unsigned m;
	size_t dir;
	int rc = check_layout(rec, len, uid, head_len, &m, &dir, why);
	for (unsigned i = 0; rc == 0 && i < m; i++) {
		uint64_t sid;
		if (!section_ok(rec, dir, i, &sid)) {
			*why = "group member's section checksum mismatch";
			rc = RDB_ECORRUPT;
		}
	}
	return rc;
}

int sto_group_prune(uint8_t *rec, size_t len, uint64_t uid, uint64_t live, unsigned *removed,
		    const char **why)
{
	unsigned m;
	size_t dir;
	uint32_t hl;
	*removed = 0;
	int rc = check_layout(rec, len, uid, &hl, &m, &dir, why);
	for (unsigned i = 0; rc == 0 && i < m; i++) {
		uint64_t sid;
		if (section_ok(rec, dir, i, &sid))
			continue;
		if (live >> i & 1) {
			*why = "group member's section checksum mismatch";
			return RDB_ECORRUPT;
		}
		rdb_put_le64(rec + HDR + dir + (size_t)i * DIR_ENTRY, 0); /* removed */
		(*removed)++;
	}
	if (rc == 0 && *removed)
		rdb_put_le64(rec + 40, sto_rec_hash(rec, hl));
	return rc;
}

int sto_group_each(const uint8_t *rec, size_t len, struct mdl_cols *cols, sto_group_fn fn,
		   void *arg, const char **why)
{
	unsigned m;
	size_t dir;
	uint32_t hl;
	if (len < HDR) {
		*why = "record shorter than a chunk header";
		return RDB_ECORRUPT;
	}
	int rc = check_layout(rec, len, rdb_get_le64(rec + 16), &hl, &m, &dir, why);
	if (rc == 0)
		rc = decode_shared(rec, dir, 0, cols, why);
	size_t n = cols->n;
	for (unsigned i = 0; rc == 0 && i < m; i++) {
		uint64_t sid;
		struct sto_group_sect s;
		struct mdl_series_key k;
		const char *damage = NULL;
		if (!section_ok(rec, dir, i, &sid)) {
			damage = "group member's section checksum mismatch";
		} else if (sid != 0) {
			dir_entry(rec, dir, i, &sid, &s);
			cols->n = n;
			if (decode_section(rec + HDR + s.offset, s.length, &k, 0, cols, &damage) ==
			    -ENOMEM)
				return -ENOMEM;
		} else {
			continue; /* removed by compaction */
		}
		rc = damage ? fn(arg, i, m, sid, NULL, NULL, damage)
			    : fn(arg, i, m, sid, &k, cols, NULL);
	}
	return rc;
}

int sto_record_decode(const uint8_t *rec, const struct sto_chunk_ref *ref, struct mdl_cols *out,
		      const char **why)
{
	return sto_record_decode_flags(rec, ref, 0, out, why);
}

int sto_record_decode_flags(const uint8_t *rec, const struct sto_chunk_ref *ref, unsigned flags,
			    struct mdl_cols *out, const char **why)
{
	return sto_record_decode_tail(rec, ref, flags, INT64_MIN, out, why);
}

int sto_record_decode_tail(const uint8_t *rec, const struct sto_chunk_ref *ref, unsigned flags,
			   int64_t min_step, struct mdl_cols *out, const char **why)
{
	const uint8_t *payload;
	size_t plen, used, dropped;
	int rc;
	if (ref->group_n) {
		struct sto_group_sect sect;
		rc = sto_group_head_check(rec, ref, &sect, why);
		if (rc == 0)
			rc = sto_group_member_decode_tail(rec, rec + sect.offset, ref, &sect, flags,
							  min_step, out, why);
		return rc;
	}
	rc = sto_chunk_check(rec, ref->length, STO_CHUNK_MAGIC, ref->series_id, ref->uid, &payload,
			     &plen, why);
	if (rc)
		return rc;
	rc = sto_codec_decode_tail(payload, plen, STO_CHUNK_MAX_POINTS, flags, min_step, out, &used,
				   &dropped);
	if (rc == RDB_ECORRUPT)
		*why = "chunk payload does not decode";
	if (rc == 0 && !ref->damaged && out->n + dropped != ref->stats.count) {
		*why = "chunk point count differs from its index entry";
		rc = RDB_ECORRUPT;
	}
	return rc;
}
