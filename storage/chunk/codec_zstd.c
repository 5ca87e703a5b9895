/* codec_zstd.c - the chunk codec's zstd frames (encodings 6, 34, 36 and
 * the event chunks' generic blocks).
 *
 * Design. The one file of the codec that includes zstd.h: it compresses a
 * candidate's body into one frame that records its content size, and
 * checks a frame to be read against the size the encoding allows before
 * decompressing it into a buffer of exactly that size. The frame layout
 * rules are in codec.c's FORMAT comment.
 *
 * Threading: one compression and one decompression context per thread (a
 * pthread key whose destructor frees them at thread exit); no other state.
 * Failure: a compression error drops the candidate (the encoder keeps
 * another); a frame whose size, length or content does not check out is
 * RDB_ECORRUPT; allocation failures are -ENOMEM. A context that cannot be
 * made falls back to the one-shot calls.
 */
#include "storage/chunk/codec_int.h"

#include "common/rdb_err.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#define ZSTD_LEVEL 3

/* Probes. A candidate's frame over at most ZSTD_PROBE_MAX_SRC bytes is
 * first compressed at ZSTD_PROBE_LEVEL: negative levels store the literals
 * raw (no Huffman table), and building and writing that table was ~60 % of
 * the CPU of compressing the 256-512 byte columns a 512-rank checkpoint
 * seals (one chunk of ~64 points per series); the matches are those level
 * 1 finds. Only a probe that may win is compressed again at ZSTD_LEVEL
 * (sto_codec_zstd_near; the value column compresses just its smallest
 * probe again, codec_values.c). Measured with bench/gen.c's 32 metrics
 * over 64 ranks, against compressing every frame at ZSTD_LEVEL: chunks of
 * 64 points -0.01 % bytes and -45 % codec CPU, 256 points +0.08 % bytes,
 * 1,024 points (planes over the limit) the same bytes. Larger frames have
 * more literals for Huffman to win on, so a probe mis-ranks them more
 * often: those are compressed at ZSTD_LEVEL at once. */
#define ZSTD_PROBE_LEVEL   (-1)
#define ZSTD_PROBE_MAX_SRC 1024u

/* ---- zstd contexts ----------------------------------------------------------
 * One compression and one decompression context per thread, made on first
 * use and freed by the thread-exit destructor: the one-shot ZSTD_compress /
 * ZSTD_decompress allocate and initialise a context (hundreds of KiB) per
 * call, which dominated decoding small columns. When a context cannot be
 * made, the one-shot calls are used. */
struct zctx {
	ZSTD_CCtx *c;
	ZSTD_DCtx *d;
};

static pthread_key_t zctx_key;
static pthread_once_t zctx_once = PTHREAD_ONCE_INIT;
static bool zctx_key_ok;

static void zctx_free(void *p)
{
	struct zctx *z = p;
	ZSTD_freeCCtx(z->c);
	ZSTD_freeDCtx(z->d);
	free(z);
}

static void zctx_key_make(void)
{
	zctx_key_ok = pthread_key_create(&zctx_key, zctx_free) == 0;
}

static struct zctx *zctx_get(void)
{
	pthread_once(&zctx_once, zctx_key_make);
	if (!zctx_key_ok)
		return NULL;
	struct zctx *z = pthread_getspecific(zctx_key);
	if (z)
		return z;
	z = calloc(1, sizeof(*z));
	if (z && pthread_setspecific(zctx_key, z) != 0) {
		free(z);
		z = NULL;
	}
	return z;
}

static size_t z_compress(void *dst, size_t cap, const void *src, size_t len, int level)
{
	struct zctx *z = zctx_get();
	if (z && !z->c)
		z->c = ZSTD_createCCtx();
	if (z && z->c)
		return ZSTD_compressCCtx(z->c, dst, cap, src, len, level);
	return ZSTD_compress(dst, cap, src, len, level);
}

static size_t z_decompress(void *dst, size_t cap, const void *src, size_t len)
{
	struct zctx *z = zctx_get();
	if (z && !z->d)
		z->d = ZSTD_createDCtx();
	if (z && z->d)
		return ZSTD_decompressDCtx(z->d, dst, cap, src, len);
	return ZSTD_decompress(dst, cap, src, len);
}

bool sto_codec_zstd_near(size_t probe_len, size_t best_len)
{
	return probe_len < best_len;
}

/* One frame of src at level into a new blob: prefix, then the frame. A
 * zstd failure leaves b empty and returns 0. */
static int zstd_blob_at(struct blob *b, uint8_t enc, const uint8_t *prefix, size_t prefix_len,
			const void *src, size_t len, int level)
{
	size_t bound = ZSTD_compressBound(len);
	int rc = sto_codec_blob_alloc(b, enc, prefix_len + bound);
	if (rc)
		return rc;
	if (prefix_len)
		memcpy(b->p, prefix, prefix_len);
	size_t z = z_compress(b->p + prefix_len, bound, src, len, level);
	if (ZSTD_isError(z)) {
		sto_codec_blob_free(b);
		return 0;
	}
	b->len = prefix_len + z;
	return 0;
}

/* Compresses src into a new blob of encoding enc whose body is prefix (if
 * prefix_len) then the frame: up to ZSTD_PROBE_MAX_SRC bytes a probe
 * first, and the full level only when the probe is shorter than beat. */
int sto_codec_zstd_blob(struct blob *b, uint8_t enc, const uint8_t *prefix, size_t prefix_len,
			const void *src, size_t len, size_t beat)
{
	if (len > ZSTD_PROBE_MAX_SRC)
		return zstd_blob_at(b, enc, prefix, prefix_len, src, len, ZSTD_LEVEL);
	int rc = zstd_blob_at(b, enc, prefix, prefix_len, src, len, ZSTD_PROBE_LEVEL);
	if (b->p)
		b->probe = true;
	if (rc || (b->p && !sto_codec_zstd_near(b->len, beat)))
		return rc;
	struct blob full = {0};
	rc = zstd_blob_at(&full, enc, prefix, prefix_len, src, len, ZSTD_LEVEL);
	if (rc) {
		sto_codec_blob_free(b);
		return rc;
	}
	sto_codec_keep_smaller(b, &full);
	return 0;
}

/* Decompresses one frame of exactly `want` bytes (or, if !exact, at most
 * `want` bytes) into a new buffer. RDB_ECORRUPT unless the frame fills the
 * whole of [p, p + len). */
int sto_codec_zstd_unframe(const uint8_t *p, size_t len, size_t want, bool exact, uint8_t **out,
			   size_t *out_len)
{
	unsigned long long sz = ZSTD_getFrameContentSize(p, len);
	if (sz == ZSTD_CONTENTSIZE_UNKNOWN || sz == ZSTD_CONTENTSIZE_ERROR || sz == 0)
		return RDB_ECORRUPT;
	if (exact ? sz != want : sz > want)
		return RDB_ECORRUPT;
	size_t fsz = ZSTD_findFrameCompressedSize(p, len);
	if (ZSTD_isError(fsz) || fsz != len)
		return RDB_ECORRUPT;
	uint8_t *buf = malloc((size_t)sz);
	if (!buf)
		return -ENOMEM;
	size_t got = z_decompress(buf, (size_t)sz, p, len);
	if (ZSTD_isError(got) || got != sz) {
		free(buf);
		return RDB_ECORRUPT;
	}
	*out = buf;
	*out_len = (size_t)sz;
	return 0;
}

/* ---- generic zstd blocks (event chunks) -------------------------------------- */

int sto_codec_zstd_pack(const void *src, size_t len, struct rdb_buf *out)
{
	size_t bound = ZSTD_compressBound(len);
	int rc = rdb_buf_reserve(out, bound);
	if (rc)
		return rc;
	size_t z = z_compress(out->data + out->len, bound, src, len, ZSTD_LEVEL);
	if (ZSTD_isError(z))
		return -ENOMEM;
	out->len += z;
	return 0;
}

int sto_codec_zstd_unpack(const uint8_t *src, size_t len, size_t max_out, struct rdb_buf *out)
{
	unsigned long long sz = ZSTD_getFrameContentSize(src, len);
	if (sz == ZSTD_CONTENTSIZE_ERROR || sz == ZSTD_CONTENTSIZE_UNKNOWN || sz > max_out)
		return RDB_ECORRUPT;
	if (ZSTD_findFrameCompressedSize(src, len) != len)
		return RDB_ECORRUPT; /* trailing bytes, or a truncated frame */
	out->len = 0;
	int rc = rdb_buf_reserve(out, (size_t)sz ? (size_t)sz : 1);
	if (rc)
		return rc == RDB_ELIMIT ? RDB_ECORRUPT : rc;
	size_t got = z_decompress(out->data, (size_t)sz, src, len);
	if (ZSTD_isError(got) || got != sz)
		return RDB_ECORRUPT;
	out->len = got;
	return 0;
}
