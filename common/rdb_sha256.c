/* rdb_sha256.c - the GnuTLS wrapper for hashes (rdb_sha256.h): SHA-256
 * through gnutls_hash_fast, HMAC-SHA256 through gnutls_hmac_fast and
 * key-grade randomness through gnutls_rnd (certificates: rdb_tls.c). No state of
 * its own; thread-safe as GnuTLS is. Failures map to RDB_EIO.
 */
#include "common/rdb_sha256.h"
#include "common/rdb_err.h"

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <stdio.h>

int rdb_sha256(const void *data, size_t len, uint8_t out[RDB_SHA256_BYTES])
{
	return gnutls_hash_fast(GNUTLS_DIG_SHA256, data, len, out) == 0 ? 0 : RDB_EIO;
}

int rdb_sha256_hex(const void *data, size_t len, char hex[2 * RDB_SHA256_BYTES + 1])
{
	uint8_t d[RDB_SHA256_BYTES];
	int rc = rdb_sha256(data, len, d);
	if (rc)
		return rc;
	for (int i = 0; i < RDB_SHA256_BYTES; i++)
		snprintf(hex + 2 * i, 3, "%02x", d[i]);
	return 0;
}

int rdb_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
		    uint8_t out[RDB_SHA256_BYTES])
{
	return gnutls_hmac_fast(GNUTLS_MAC_SHA256, key, keylen, data, len, out) == 0 ? 0 : RDB_EIO;
}

bool rdb_ct_equal(const void *a, const void *b, size_t n)
{
	const volatile uint8_t *x = a, *y = b;
	unsigned d = 0;
	for (size_t i = 0; i < n; i++)
		d |= (unsigned)(x[i] ^ y[i]);
	return d == 0;
}

int rdb_random_key(void *buf, size_t n)
{
	return gnutls_rnd(GNUTLS_RND_KEY, buf, n) == 0 ? 0 : RDB_EIO;
}
