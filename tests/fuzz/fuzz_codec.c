/* fuzz_codec.c - libFuzzer target for the chunk decoder (storage/chunk/codec.h).
 *
 * Decodes the input as an untrusted chunk payload (max_points 65536). The
 * decoder must never crash or read out of bounds (run under ASan). When the
 * input decodes, the points are encoded again and decoded again, and the
 * second result must equal the first bit for bit, and a tail read
 * (sto_codec_decode_tail from the middle point's step) the first's suffix;
 * a mismatch abort()s, which
 * the fuzzer (or the replay program, fuzz_main.c) reports. */
#include "common/rdb_buf.h"
#include "common/rdb_err.h"
#include "storage/chunk/codec.h"
#include "storage/format.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same(const struct mdl_cols *a, const struct mdl_cols *b)
{
	size_t n = a->n;
	return a->n == b->n && !memcmp(a->ts_ns, b->ts_ns, n * 8) &&
	       !memcmp(a->step, b->step, n * 8) && !memcmp(a->attempt, b->attempt, n * 4) &&
	       !memcmp(a->value, b->value, n * 8);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mdl_cols first = MDL_COLS_INIT, second = MDL_COLS_INIT;
	struct rdb_buf buf;
	size_t used = 0;
	rdb_buf_init(&buf, STO_CHUNK_MAX_PAYLOAD);
	int rc = sto_codec_decode(data, size, STO_CHUNK_MAX_POINTS, &first, &used);
	if (rc == RDB_ECORRUPT || rc == -ENOMEM)
		goto out;
	if (rc != 0 || used > size || first.n == 0)
		abort(); /* an error the contract does not allow */
	if (sto_codec_encode(&first, &buf, NULL) != 0)
		abort();
	if (sto_codec_decode(buf.data, buf.len, STO_CHUNK_MAX_POINTS, &second, &used) != 0 ||
	    used != buf.len || !same(&first, &second))
		abort();
	/* a tail read from the middle step is the whole read's suffix */
	size_t dropped = 0, lead = sto_codec_lead_below(&first, first.step[first.n / 2]);
	if (sto_codec_decode_tail(data, size, STO_CHUNK_MAX_POINTS, 0, first.step[first.n / 2],
				  &second, NULL, &dropped) != 0 ||
	    dropped != lead || second.n != first.n - lead)
		abort();
	for (size_t i = 0; i < second.n; i++)
		if (second.step[i] != first.step[i + lead] ||
		    second.value[i] != first.value[i + lead] ||
		    second.ts_ns[i] != first.ts_ns[i + lead] ||
		    second.attempt[i] != first.attempt[i + lead])
			abort();
out:
	mdl_cols_free(&first);
	mdl_cols_free(&second);
	rdb_buf_free(&buf);
	return 0;
}
