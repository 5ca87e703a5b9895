/* rdb_buf.c - bounded dynamic buffer. Not thread-safe (one owner). */
#include "common/rdb_buf.h"
#include "common/rdb_err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rdb_buf_init(struct rdb_buf *b, size_t max_bytes)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->max = max_bytes;
}

void rdb_buf_free(struct rdb_buf *b)
{
	if (!b)
		return;
	free(b->data);
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

int rdb_buf_reserve(struct rdb_buf *b, size_t n)
{
	if (n > b->max || b->len > b->max - n)
		return RDB_ELIMIT;
	size_t need = b->len + n;
	if (need <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	if (cap > b->max)
		cap = b->max;
	uint8_t *p = realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

int rdb_buf_append(struct rdb_buf *b, const void *p, size_t n)
{
	if (n == 0)
		return 0;
	int rc = rdb_buf_reserve(b, n);
	if (rc)
		return rc;
	memcpy(b->data + b->len, p, n);
	b->len += n;
	return 0;
}

int rdb_buf_putc(struct rdb_buf *b, char c)
{
	if (b->len < b->cap) {
		b->data[b->len++] = (uint8_t)c;
		return 0;
	}
	return rdb_buf_append(b, &c, 1);
}

int rdb_buf_puts(struct rdb_buf *b, const char *s)
{
	return rdb_buf_append(b, s, strlen(s));
}

int rdb_buf_printf(struct rdb_buf *b, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	if ((size_t)n < sizeof(tmp))
		return rdb_buf_append(b, tmp, (size_t)n);
	int rc = rdb_buf_reserve(b, (size_t)n + 1);
	if (rc)
		return rc;
	va_start(ap, fmt);
	vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

int rdb_buf_json_str(struct rdb_buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	int rc = rdb_buf_putc(b, '"');
	for (size_t i = 0; i < n && rc == 0; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') {
			char e[2] = {'\\', (char)c};
			rc = rdb_buf_append(b, e, 2);
		} else if (c < 0x20) {
			char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
			rc = rdb_buf_append(b, e, 6);
		} else {
			rc = rdb_buf_putc(b, (char)c);
		}
	}
	if (rc == 0)
		rc = rdb_buf_putc(b, '"');
	return rc;
}

uint8_t *rdb_buf_steal(struct rdb_buf *b)
{
	uint8_t *p = b->data;
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	return p;
}
