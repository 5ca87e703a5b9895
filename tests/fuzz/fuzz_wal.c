/* fuzz_wal.c - fuzz target for WAL replay (storage/wal/wal.c) and the
 * STO_WAL_REC_POINTS payload decoder (sto_batch_decode).
 *
 * Input: byte 0 is a mode, the rest is the WAL file body after a valid
 * 32-byte header (generation FUZZ_GEN). Mode bit 0 set: before writing, the
 * target walks the body as records and rewrites every checksum so that it
 * matches; mutated payloads then reach sto_batch_decode instead of dying at
 * the checksum. Mode bit 0 clear: the body is written as is (checksums,
 * torn and corrupt tails as the fuzzer made them).
 *
 * The file lives at /tmp/rdb-fuzz-wal-<pid>/wal-<FUZZ_GEN>.log, one per
 * process, rewritten for each input and removed at exit. The target must
 * never crash, leak or read out of bounds, whatever the bytes. */
#include "storage/wal/batch_codec.h"
#include "common/rdb_hash.h"
#include "common/rdb_le.h"
#include "common/rdb_log.h"
#include "common/rdb_time.h"
#include "model/batch.h"
#include "storage/format.h"
#include "storage/wal/wal.h"
#include "storage/wal/wal_int.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FUZZ_GEN 0x2au

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir_path[64];
static char file_path[128];

static void cleanup(void)
{
	unlink(file_path);
	rmdir(dir_path);
}

static int init_once(void)
{
	if (dir_path[0])
		return 0;
	snprintf(dir_path, sizeof(dir_path), "/tmp/rdb-fuzz-wal-%ld", (long)getpid());
	snprintf(file_path, sizeof(file_path), "%s/wal-%016llx.log", dir_path,
		 (unsigned long long)FUZZ_GEN);
	if (mkdir(dir_path, 0700) != 0 && access(dir_path, W_OK) != 0)
		return -1;
	rdb_log_set_level(RDB_LOG_ERROR); /* torn tails are the common case here */
	atexit(cleanup);
	return 0;
}

/* Rewrites each record's checksum in body[0..size) to the correct value. */
static void fix_checksums(uint8_t *body, size_t size)
{
	size_t off = 0;
	while (size - off >= STO_WAL_REC_HEADER_SIZE) {
		uint8_t *h = body + off;
		uint32_t len = rdb_get_le32(h);
		if (len > size - off - STO_WAL_REC_HEADER_SIZE)
			return;
		/* the writer's and reader's own checksum */
		rdb_put_le64(h + 8,
			     sto_wal_rec_hash(h, h + STO_WAL_REC_HEADER_SIZE, len, FUZZ_GEN));
		off += STO_WAL_REC_HEADER_SIZE + (size_t)len;
	}
}

static int write_file(const uint8_t *body, size_t size)
{
	uint8_t hdr[STO_WAL_HEADER_SIZE];
	memcpy(hdr, STO_WAL_MAGIC, 8);
	rdb_put_le32(hdr + 8, STO_FORMAT_VERSION);
	rdb_put_le32(hdr + 12, STO_WAL_HEADER_SIZE);
	rdb_put_le64(hdr + 16, FUZZ_GEN);
	rdb_put_le64(hdr + 24, (uint64_t)rdb_now_ns());
	int fd = open(file_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	int rc = 0;
	if (write(fd, hdr, sizeof(hdr)) != (ssize_t)sizeof(hdr) ||
	    (size && write(fd, body, size) != (ssize_t)size))
		rc = -1;
	close(fd);
	return rc;
}

/* Decodes POINTS payloads and touches every decoded point. */
static int on_record(void *arg, uint64_t gen, uint8_t type, const uint8_t *p, size_t len)
{
	struct mdl_batch *b = arg;
	if (gen != FUZZ_GEN)
		abort();
	if (type != STO_WAL_REC_POINTS || sto_batch_decode(b, p, len) != 0)
		return 0;
	size_t total = 0;
	for (size_t i = 0; i < mdl_batch_nseries(b); i++)
		total += mdl_batch_series_at(b, i)->pts.n;
	if (total != mdl_batch_points(b))
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mdl_batch *b = NULL;
	uint8_t *body = NULL;
	size_t body_len = size ? size - 1 : 0;
	if (init_once() != 0 || mdl_batch_new(1u << 16, 4096, &b) != 0)
		goto out;
	body = malloc(body_len ? body_len : 1);
	if (!body)
		goto out;
	if (body_len)
		memcpy(body, data + 1, body_len);
	if (size && (data[0] & 1))
		fix_checksums(body, body_len);
	if (write_file(body, body_len) != 0)
		goto out;
	struct sto_wal_replay_result res;
	if (sto_wal_replay(dir_path, FUZZ_GEN, on_record, b, &res) == 0 &&
	    (res.valid_bytes > res.file_bytes || res.tail < 0 || res.tail > 2 ||
	     res.damaged_bytes > res.file_bytes))
		abort();
out:
	free(body);
	mdl_batch_free(b);
	return 0;
}
