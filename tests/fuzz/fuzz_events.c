/* fuzz_events.c - libFuzzer target for event chunks (storage/events/evstore.h),
 * the columnar logs and spans read back from segment files.
 *
 * Input byte 0 selects the path:
 *   even: the rest is an uncompressed event chunk body; the harness packs
 *         it into a zstd frame the way the writer does, so the fuzzer
 *         reaches the column decoder instead of stopping at zstd;
 *   odd:  the rest is passed to evc_decode as it is (a damaged frame).
 * evc_decode must never crash or read out of bounds (ASan), must say
 * RDB_ECORRUPT (or a memory error) for what it refuses, and every event it
 * returns must be well formed: a known kind and level, a non-negative
 * duration, strings inside the decoded buffer. A violation abort()s. */
#include "common/rdb_buf.h"
#include "common/rdb_err.h"
#include "storage/chunk/codec.h"
#include "storage/events/evstore.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int inside(const struct ev_decoded *d, const char *p, size_t len)
{
	const char *lo = (const char *)d->raw.data;
	return len == 0 || (p >= lo && p + len <= lo + d->raw.len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > (1u << 20))
		return 0;
	struct rdb_buf frame;
	rdb_buf_init(&frame, 4u << 20);
	const uint8_t *payload = data + 1;
	size_t len = size - 1;
	if ((data[0] & 1) == 0) {
		if (sto_codec_zstd_pack(data + 1, size - 1, &frame) != 0)
			abort();
		payload = frame.data;
		len = frame.len;
	}
	struct ev_decoded d;
	memset(&d, 0, sizeof(d));
	int rc = evc_decode(payload, len, "fuzzjob", &d);
	if (rc == 0) {
		for (size_t i = 0; i < d.n; i++) {
			const struct mdl_event *e = &d.ev[i];
			if (e->kind != MDL_EV_LOG && e->kind != MDL_EV_SPAN)
				abort();
			if (e->kind == MDL_EV_LOG && e->level > MDL_LEVEL_FATAL)
				abort();
			if (e->duration_ns < 0)
				abort();
			if (!inside(&d, e->text, e->text_len) ||
			    !inside(&d, e->fields, e->fields_len))
				abort();
		}
	} else if (rc != RDB_ECORRUPT && rc != -ENOMEM && rc != RDB_ELIMIT) {
		abort();
	}
	evc_decoded_free(&d);
	rdb_buf_free(&frame);
	return 0;
}
