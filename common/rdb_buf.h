/* rdb_buf.h - bounded dynamic byte buffer.
 *
 * A buffer has a maximum size set at creation; an append that would pass it
 * fails with RDB_ELIMIT and leaves the buffer unchanged. That is how every
 * request body, response and encoder output in rankdb stays bounded.
 */
#ifndef RDB_BUF_H
#define RDB_BUF_H

#include <stddef.h>
#include <stdint.h>

struct rdb_buf {
	uint8_t *data; /* owned; NULL until the first append */
	size_t len;    /* bytes in use */
	size_t cap;    /* bytes allocated */
	size_t max;    /* hard bound on len */
};

/* Initializes an empty buffer bounded at max_bytes. Never fails. */
void rdb_buf_init(struct rdb_buf *b, size_t max_bytes);
/* Frees the memory; the buffer is empty (and reusable) afterwards. NULL ok. */
void rdb_buf_free(struct rdb_buf *b);
/* Makes room for n more bytes. 0, -ENOMEM or RDB_ELIMIT. */
int rdb_buf_reserve(struct rdb_buf *b, size_t n);
int rdb_buf_append(struct rdb_buf *b, const void *p, size_t n);
int rdb_buf_putc(struct rdb_buf *b, char c);
int rdb_buf_puts(struct rdb_buf *b, const char *s);
int rdb_buf_printf(struct rdb_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string literal (with quotes and escapes). */
int rdb_buf_json_str(struct rdb_buf *b, const char *s, size_t n);
/* Gives up ownership of data to the caller (who frees it with free()). */
uint8_t *rdb_buf_steal(struct rdb_buf *b);

#endif
