/* fuzz_group.c - libFuzzer target for group records (storage/chunk/group.h).
 *
 * The input is an untrusted group record payload preceded by a u32 head
 * length H. The harness frames it the way a writer would, with valid
 * checksums (head checksum in the header, and each section checksum the
 * directory names, where the directory entry lies in the input), so the
 * fuzzer reaches the decoders instead of stopping at checksums. Then:
 * sto_group_each must never crash or read out of bounds (ASan); every
 * member it passes must read alone (sto_record_decode, as the read path
 * does) to the same points; and a record that walks completely, framed
 * again from its members, must walk to the same members. A mismatch
 * abort()s. */
#include "common/rdb_buf.h"
#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_le.h"
#include "storage/format.h"
#include "storage/chunk/group.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct seen {
	const uint8_t *rec;
	size_t len;
	uint32_t head_len;
	size_t n;
	int damaged;
	struct mdl_series_key keys[STO_GROUP_MAX_MEMBERS];
	uint64_t sids[STO_GROUP_MAX_MEMBERS];
	struct mdl_cols cols[STO_GROUP_MAX_MEMBERS];
};

static int same(const struct mdl_cols *a, const struct mdl_cols *b)
{
	size_t n = a->n;
	return a->n == b->n && !memcmp(a->ts_ns, b->ts_ns, n * 8) &&
	       !memcmp(a->step, b->step, n * 8) && !memcmp(a->attempt, b->attempt, n * 4) &&
	       !memcmp(a->value, b->value, n * 8);
}

static int copy_cols(struct mdl_cols *dst, const struct mdl_cols *src)
{
	dst->n = 0;
	for (size_t i = 0; i < src->n; i++)
		if (mdl_cols_push(dst, src->ts_ns[i], src->step[i], src->attempt[i], src->value[i]))
			return -ENOMEM;
	return 0;
}

static int member_cb(void *arg, unsigned member, unsigned m, uint64_t sid,
		     const struct mdl_series_key *key, const struct mdl_cols *cols,
		     const char *damage)
{
	struct seen *s = arg;
	struct mdl_cols alone = MDL_COLS_INIT;
	const char *why;
	if (member < s->n || m < 2 || m > STO_GROUP_MAX_MEMBERS)
		abort();
	if (damage || sid == 0) {
		s->damaged = 1; /* this member is lost: no re-framing comparison */
		return 0;
	}
	struct sto_chunk_ref ref = {.series_id = sid,
				    .uid = rdb_get_le64(s->rec + 16) + member,
				    .length = (uint32_t)s->len,
				    .group_n = (uint8_t)m,
				    .member = (uint8_t)member,
				    .head_len = s->head_len};
	ref.stats.count = (uint32_t)cols->n;
	if (sto_record_decode(s->rec, &ref, &alone, &why) != 0 || !same(&alone, cols))
		abort();
	mdl_cols_free(&alone);
	s->keys[s->n] = *key;
	s->sids[s->n] = sid;
	if (copy_cols(&s->cols[s->n], cols))
		return -ENOMEM;
	s->n++;
	return 0;
}

/* Frames payload as a group record with valid checksums into rec. */
static int frame(const uint8_t *payload, size_t plen, uint32_t head_len, struct rdb_buf *rec)
{
	if (plen > STO_CHUNK_MAX_PAYLOAD || rdb_buf_reserve(rec, STO_CHUNK_HEADER_SIZE + plen))
		return -1;
	uint8_t *h = rec->data;
	memset(h, 0, STO_CHUNK_HEADER_SIZE);
	rdb_put_le32(h, STO_GROUP_MAGIC);
	rdb_put_le32(h + 4, (uint32_t)plen);
	rdb_put_le64(h + 16, 1);
	rdb_put_le64(h + 24, 1);
	rdb_put_le32(h + 36, head_len);
	uint8_t *p = h + STO_CHUNK_HEADER_SIZE;
	memcpy(p, payload, plen);
	rec->len = STO_CHUNK_HEADER_SIZE + plen;
	if (head_len > plen || plen < 1)
		return 0; /* the checks must refuse it; nothing to fix up */
	size_t m = p[0];
	if (m * 24u <= head_len) {
		for (size_t i = 0; i < m; i++) {
			uint8_t *d = p + head_len - m * 24u + i * 24u;
			uint32_t off = rdb_get_le32(d + 8), len = rdb_get_le32(d + 12);
			if (off <= plen && len <= plen - off)
				rdb_put_le64(d + 16, rdb_hash64(p + off, len, 0));
		}
	}
	struct rdb_hash_state st;
	if (rdb_hash_begin(&st, 0))
		return -1;
	rdb_hash_update(&st, h, 40);
	rdb_hash_update(&st, p, head_len);
	rdb_put_le64(h + 40, rdb_hash_end(&st));
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct seen first, second;
	struct mdl_cols scratch = MDL_COLS_INIT;
	struct sto_group_member mem[STO_GROUP_MAX_MEMBERS];
	struct rdb_buf rec, again, work;
	const char *why;
	rdb_buf_init(&rec, STO_CHUNK_HEADER_SIZE + STO_CHUNK_MAX_PAYLOAD);
	rdb_buf_init(&again, STO_CHUNK_HEADER_SIZE + STO_CHUNK_MAX_PAYLOAD);
	rdb_buf_init(&work, STO_CHUNK_MAX_PAYLOAD);
	first.n = second.n = 0;
	first.damaged = second.damaged = 0;
	if (size < 4 || frame(data + 4, size - 4, rdb_get_le32(data), &rec) != 0)
		goto out;
	first.rec = rec.data;
	first.len = rec.len;
	first.head_len = rdb_get_le32(data);
	int rc = sto_group_each(rec.data, rec.len, &scratch, member_cb, &first, &why);
	if (rc == RDB_ECORRUPT || rc == -ENOMEM)
		goto out;
	if (rc != 0)
		abort();
	if (first.damaged || first.n < 2)
		goto out;
	for (size_t i = 0; i < first.n; i++)
		mem[i] = (struct sto_group_member){first.sids[i], &first.keys[i], &first.cols[i]};
	if (sto_group_frame(&again, &work, 1, 1, mem, first.n, &second.head_len) != 0)
		abort();
	second.rec = again.data;
	second.len = again.len;
	if (sto_group_each(again.data, again.len, &scratch, member_cb, &second, &why) != 0 ||
	    second.n != first.n)
		abort();
	for (size_t i = 0; i < first.n; i++)
		if (second.sids[i] != first.sids[i] || !same(&second.cols[i], &first.cols[i]) ||
		    strcmp(second.keys[i].metric, first.keys[i].metric) != 0)
			abort();
out:
	for (size_t i = 0; i < STO_GROUP_MAX_MEMBERS; i++) {
		mdl_cols_free(&first.cols[i]);
		mdl_cols_free(&second.cols[i]);
	}
	mdl_cols_free(&scratch);
	rdb_buf_free(&rec);
	rdb_buf_free(&again);
	rdb_buf_free(&work);
	return 0;
}
