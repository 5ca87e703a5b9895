/* fuzz_jobmeta.c - libFuzzer target for job metadata files
 * (storage/jobmeta/jobmeta.h).
 *
 * The input is read two ways. As a file image of job "j": decode must
 * never crash or read out of bounds (ASan), and a document it accepts lies
 * inside the image. As a document: its image must decode to the same
 * bytes, and that image with any one byte changed (position and mask from
 * the input) must be refused. A mismatch abort()s. */
#include "common/rdb_buf.h"
#include "common/rdb_err.h"
#include "storage/format.h"
#include "storage/jobmeta/jobmeta.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *doc;
	size_t len;
	const char *why;
	if (sto_jobmeta_decode("j", data, size, &doc, &len, &why) == 0 &&
	    (doc < data || doc + len > data + size))
		abort();
	struct rdb_buf img;
	rdb_buf_init(&img, STO_JOBMETA_HEADER_SIZE + STO_JOBMETA_MAX_BYTES);
	size_t n = size > STO_JOBMETA_MAX_BYTES ? STO_JOBMETA_MAX_BYTES : size;
	if (sto_jobmeta_encode("j", data, n, &img) != 0)
		abort();
	if (sto_jobmeta_decode("j", img.data, img.len, &doc, &len, &why) != 0 || len != n ||
	    memcmp(doc, data, n) != 0)
		abort();
	if (size >= 2) {
		size_t at = ((size_t)data[0] << 8 | data[1]) % img.len;
		uint8_t mask = data[size - 1] ? data[size - 1] : 1;
		img.data[at] ^= mask;
		if (sto_jobmeta_decode("j", img.data, img.len, &doc, &len, &why) == 0)
			abort();
	}
	rdb_buf_free(&img);
	return 0;
}
