/* fuzz_wloop.c - fuzz target for the write loop's request-head classifier
 * and query decoder (server/wloop_parse.c).
 *
 * Input: the first bytes of a connection's request. The target must never
 * crash or read out of bounds. Invariants checked: WL_MORE only below
 * WL_HEAD_MAX bytes; a WL_WRITE head lies inside the input, ends with a
 * blank line, its spans lie inside the head, its path is a write route,
 * every shorter prefix of the head is WL_MORE (the loop waits, never
 * decides early on a head that would be a write), and its query decodes
 * to keys and values no longer than they were.
 */
#include "server/wloop.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool count_arg(void *cls, const char *key, size_t kl, const char *val, size_t vl)
{
	size_t *total = cls;
	if (strlen(key) > kl || strlen(val) > vl)
		abort(); /* decoded lengths count past a %00 */
	*total += kl + vl;
	return true;
}

static void in_head(struct wl_span sp, const struct wl_head *hd)
{
	if ((size_t)sp.off + sp.len > hd->head_len)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wl_head hd;
	enum wl_verdict v = wl_classify(data, size, &hd);
	if (v == WL_MORE && size >= WL_HEAD_MAX)
		abort();
	if (v != WL_WRITE)
		return 0;
	if (hd.head_len > size || hd.head_len > WL_HEAD_MAX || hd.head_len < 4 ||
	    memcmp(data + hd.head_len - 4, "\r\n\r\n", 4) != 0)
		abort();
	if (hd.nheaders < 1 || hd.nheaders > WL_MAX_HEADERS || hd.content_length > WL_CL_MAX)
		abort();
	in_head(hd.path, &hd);
	in_head(hd.query, &hd);
	for (int i = 0; i < hd.nheaders; i++) {
		in_head(hd.headers[i].name, &hd);
		in_head(hd.headers[i].value, &hd);
	}
	if (memcmp(data + hd.path.off, "/write", 6) != 0 &&
	    memcmp(data + hd.path.off, "/api/v", 6) != 0)
		abort();
	struct wl_head hd2;
	if (wl_classify(data, hd.head_len - 1, &hd2) != WL_MORE)
		abort();
	if (hd.has_query) {
		char *q = malloc((size_t)hd.query.len + 1);
		if (!q)
			return 0;
		memcpy(q, data + hd.query.off, hd.query.len);
		q[hd.query.len] = 0;
		size_t total = 0;
		wl_parse_args(q, hd.query.len, count_arg, &total);
		if (total > hd.query.len)
			abort();
		free(q);
	}
	return 0;
}
