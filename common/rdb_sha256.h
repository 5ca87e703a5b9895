/* rdb_sha256.h - SHA-256 and HMAC-SHA256 from a maintained library
 * (GnuTLS); rdb_sha256.c (hashes) and rdb_tls.c (certificates) are the only
 * files that include GnuTLS. Pure, thread-safe.
 */
#ifndef RDB_SHA256_H
#define RDB_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RDB_SHA256_BYTES 32

/* out = SHA-256(data[0..len)). 0, or RDB_EIO when the library fails. */
int rdb_sha256(const void *data, size_t len, uint8_t out[RDB_SHA256_BYTES]);

/* The lowercase hex of SHA-256(data) into hex (65 bytes, NUL-terminated). */
int rdb_sha256_hex(const void *data, size_t len, char hex[2 * RDB_SHA256_BYTES + 1]);

/* out = HMAC-SHA256(key[0..keylen), data[0..len)) (RFC 2104). 0, or
 * RDB_EIO when the library fails. */
int rdb_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
		    uint8_t out[RDB_SHA256_BYTES]);

/* True when a[0..n) == b[0..n); the time taken does not depend on where
 * they differ (for MACs and hashes of secrets). */
bool rdb_ct_equal(const void *a, const void *b, size_t n);

/* Fills buf with n bytes from the library's key-grade random generator.
 * 0 or RDB_EIO. */
int rdb_random_key(void *buf, size_t n);

#endif
