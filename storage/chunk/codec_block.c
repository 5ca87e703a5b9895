/* codec_block.c - the chunk codec's blocked value column (encoding 37)
 * and the tail reads it serves.
 *
 * Design. Values of a long chunk in blocks of BLOCK_POINTS, each encoded
 * on its own (the smallest candidate per block), so that a read of the
 * chunk's tail decodes only the blocks it needs: the u32 block lengths up
 * front are the seek points. Tried only when the best whole-column
 * encoding is slow to decode (sto_codec_slow_to_decode), and kept only when
 * it costs at most BLOCK_MARGIN_PCT more bytes than that encoding (byte
 * planes and XOR streams lose little when cut). sto_codec_decode_tail and
 * sto_codec_decode_values_from decode the value column only from the block
 * holding the first wanted point on. Layout: codec.c's FORMAT comment.
 *
 * Threading: no shared state.
 * Failure: the encoder returns 0 or -ENOMEM; the decoders return
 * RDB_ECORRUPT on a block size out of range, lengths that do not sum to
 * the body, or a block nested in a block, or -ENOMEM; the tail decode then
 * sets out->n = 0.
 */
#include "storage/chunk/codec_int.h"

#include "common/rdb_err.h"
#include "common/rdb_le.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Encodings whose decoding costs enough per point (a zstd frame, a bit
 * stream) for blocks to pay off in tail reads; the integer streams decode
 * in about a nanosecond a point and are left whole, which also spares the
 * encoder the second candidate search for them. */
bool sto_codec_slow_to_decode(uint8_t enc)
{
	return enc == ENC_ZSTD || enc == ENC_XOR || enc == ENC_F32_XOR ||
	       enc == ENC_F32_SHUF_ZSTD || enc == ENC_SHUF_ZSTD;
}

int sto_codec_enc_blocked(const uint64_t *v, size_t n, struct blob *b)
{
	size_t nb = (n + BLOCK_POINTS - 1) / BLOCK_POINTS;
	struct blob *blk = calloc(nb, sizeof(*blk));
	size_t total = 10 + 4 * nb;
	int rc = blk ? 0 : -ENOMEM;
	for (size_t i = 0; rc == 0 && i < nb; i++) {
		size_t k = i + 1 < nb ? BLOCK_POINTS : n - i * BLOCK_POINTS;
		rc = sto_codec_enc_values(v + i * BLOCK_POINTS, k, &blk[i]);
		total += 1 + blk[i].len;
	}
	if (rc == 0)
		rc = sto_codec_blob_alloc(b, ENC_BLOCKED, total);
	if (rc == 0) {
		size_t o = rdb_varint_put(b->p, BLOCK_POINTS);
		for (size_t i = 0; i < nb; i++, o += 4)
			rdb_put_le32(b->p + o, (uint32_t)(1 + blk[i].len));
		for (size_t i = 0; i < nb; i++) {
			b->p[o++] = blk[i].enc;
			memcpy(b->p + o, blk[i].p, blk[i].len);
			o += blk[i].len;
		}
		b->len = o;
	}
	for (size_t i = 0; blk && i < nb; i++)
		sto_codec_blob_free(&blk[i]);
	free(blk);
	return rc;
}

/* Decodes the blocks holding points [from, n) into out[their first point
 * ..n); the values before are left as they were. */
int sto_codec_dec_blocked(const uint8_t *p, size_t len, size_t n, size_t from, uint64_t *out)
{
	struct rd r = {p, p + len};
	uint64_t bp;
	if (rdb_varint_get(&r.p, r.end, &bp) || bp < BLOCK_POINTS_MIN || bp >= n)
		return RDB_ECORRUPT;
	size_t nb = (n + (size_t)bp - 1) / (size_t)bp;
	if ((size_t)(r.end - r.p) / 4 < nb)
		return RDB_ECORRUPT;
	const uint8_t *dir = r.p, *at = r.p + 4 * nb;
	size_t left = (size_t)(r.end - at);
	for (size_t i = 0; i < nb; i++) {
		size_t blen = rdb_get_le32(dir + 4 * i), k = i + 1 < nb ? (size_t)bp : n - i * bp;
		if (blen < 1 || blen > left)
			return RDB_ECORRUPT;
		if ((i + 1) * bp > from) {
			if (at[0] == ENC_BLOCKED)
				return RDB_ECORRUPT;
			int rc = sto_codec_dec_values(at[0], at + 1, blen - 1, k, out + i * bp);
			if (rc)
				return rc;
		}
		at += blen;
		left -= blen;
	}
	return left ? RDB_ECORRUPT : 0;
}

/* The first block's encoding of a blocked value column (0 otherwise). */
uint8_t sto_codec_block0_enc(const struct blob *b, size_t n)
{
	if (b->enc != ENC_BLOCKED)
		return 0;
	size_t nb = (n + BLOCK_POINTS - 1) / BLOCK_POINTS;
	size_t at = rdb_varint_put((uint8_t[10]){0}, BLOCK_POINTS) + 4 * nb;
	return at < b->len ? b->p[at] : 0;
}

size_t sto_codec_lead_below(const struct mdl_cols *c, int64_t min_step)
{
	size_t i = 0;
	while (i < c->n && c->step[i] < min_step)
		i++;
	return i;
}

void sto_codec_drop_lead(struct mdl_cols *c, size_t k, unsigned flags)
{
	if (k == 0)
		return;
	k = k < c->n ? k : c->n;
	size_t rest = c->n - k;
	if (!(flags & STO_CODEC_SKIP_TS))
		memmove(c->ts_ns, c->ts_ns + k, rest * sizeof(*c->ts_ns));
	memmove(c->step, c->step + k, rest * sizeof(*c->step));
	memmove(c->attempt, c->attempt + k, rest * sizeof(*c->attempt));
	memmove(c->value, c->value + k, rest * sizeof(*c->value));
	c->n = rest;
}

int sto_codec_decode_tail(const uint8_t *src, size_t len, uint32_t max_points, unsigned flags,
			  int64_t min_step, struct mdl_cols *out, size_t *used, size_t *dropped)
{
	out->n = 0;
	*dropped = 0;
	uint32_t n;
	size_t pos = 4;
	int rc = sto_codec_decode_n(src, len, max_points, out, &n);
	if (rc == 0)
		rc = sto_codec_decode_columns(src, len, &pos, 0, 3, n, flags, 0, out);
	out->n = rc == 0 ? n : 0;
	size_t from = rc == 0 ? sto_codec_lead_below(out, min_step) : 0;
	if (rc == 0)
		rc = sto_codec_decode_columns(src, len, &pos, 3, 1, n, flags, from, out);
	if (rc) {
		out->n = 0;
		return rc;
	}
	sto_codec_drop_lead(out, from, flags);
	*dropped = from;
	if (used)
		*used = pos;
	return 0;
}

int sto_codec_decode_values(const uint8_t *src, size_t len, struct mdl_cols *out, size_t *used)
{
	return sto_codec_decode_values_from(src, len, 0, out, used);
}

int sto_codec_decode_values_from(const uint8_t *src, size_t len, size_t from, struct mdl_cols *out,
				 size_t *used)
{
	size_t pos = 0;
	if (out->n == 0 || out->n > out->cap)
		return RDB_EINVAL;
	int rc = sto_codec_decode_columns(src, len, &pos, 3, 1, out->n, 0, from, out);
	if (rc)
		return rc;
	if (used)
		*used = pos;
	return 0;
}
