/* body.c - request bodies as the handlers read them: Content-Encoding gzip
 * (one or more members, as the InfluxDB clients, Telegraf and the rankdb
 * SDKs send it) is inflated into a buffer bounded by max_body_bytes, so a
 * gzip bomb costs at most that much memory and work (413 past it). The only
 * file that includes zlib.h. Threading: per request, no shared state.
 */
#include "server/srv.h"
#include "common/rdb_err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#define INFLATE_CHUNK (64u * 1024u) /* zlib output is appended this much at a time */

/* Inflates gzip data (one or more members) into out, bounded by out->max.
 * 0; RDB_ELIMIT past the bound; RDB_EINVAL (why says what) for data that
 * is not gzip, corrupt or truncated; -ENOMEM. */
static int gunzip(const uint8_t *in, size_t len, struct rdb_buf *out, char *why, size_t whylen)
{
	z_stream z;
	memset(&z, 0, sizeof(z));
	uint8_t *chunk = malloc(INFLATE_CHUNK);
	if (!chunk || inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) {
		free(chunk);
		return -ENOMEM;
	}
	z.next_in = (Bytef *)in;
	z.avail_in = (uInt)len; /* len <= max_body_bytes <= 1G */
	int result = 0;
	for (;;) {
		z.next_out = chunk;
		z.avail_out = INFLATE_CHUNK;
		int zr = inflate(&z, Z_NO_FLUSH);
		result = rdb_buf_append(out, chunk, INFLATE_CHUNK - z.avail_out);
		if (result)
			break;
		if (zr == Z_STREAM_END && z.avail_in == 0)
			break;
		if (zr == Z_STREAM_END) /* another gzip member follows */
			zr = inflateReset(&z);
		if (zr == Z_OK)
			continue;
		if (zr == Z_MEM_ERROR) {
			result = -ENOMEM;
		} else {
			snprintf(why, whylen, "the gzip body is %s (%s) at compressed byte %llu",
				 zr == Z_BUF_ERROR ? "truncated" : "corrupt",
				 z.msg ? z.msg : "no more input",
				 (unsigned long long)(len - z.avail_in));
			result = RDB_EINVAL;
		}
		break;
	}
	inflateEnd(&z);
	free(chunk);
	return result;
}

int srv_req_body(const struct srv_req *req, struct rdb_buf *inflated, const uint8_t **body,
		 size_t *len, int *status, char *why, size_t whylen)
{
	const char *enc = srv_req_header(req, "Content-Encoding");
	uint64_t max = req->ctx->cfg->max_body_bytes;
	rdb_buf_init(inflated, max);
	*body = req->body;
	*len = req->body_len;
	if (!enc || !*enc || strcasecmp(enc, "identity") == 0)
		return 0;
	if (strcasecmp(enc, "gzip") != 0 && strcasecmp(enc, "x-gzip") != 0) {
		*status = 415;
		snprintf(why, whylen,
			 "Content-Encoding '%.32s' is not supported (use gzip, or none)", enc);
		return RDB_EINVAL;
	}
	int rc = gunzip(req->body, req->body_len, inflated, why, whylen);
	if (rc == RDB_ELIMIT) {
		*status = 413;
		snprintf(why, whylen,
			 "the gzip body inflates to more than max_body_bytes (%llu bytes); send "
			 "smaller batches",
			 (unsigned long long)max);
	} else if (rc == RDB_EINVAL) {
		*status = 400;
	} else if (rc) {
		*status = 500;
		snprintf(why, whylen, "inflating the gzip body failed: %s", rdb_strerror(rc));
	}
	if (rc)
		return rc;
	*body = inflated->data;
	*len = inflated->len;
	return 0;
}
