/* rdb_tls.h - the TLS certificate and key rankdbd serves, swappable while
 * the server runs (GnuTLS; rdb_tls.c and rdb_sha256.c are the only files
 * that include it). One certificate per process.
 */
#ifndef RDB_TLS_H
#define RDB_TLS_H

#include <stddef.h>

/* A function pointer of GnuTLS's gnutls_certificate_retrieve_function2
 * type, without GnuTLS's headers. */
typedef void (*rdb_tls_retrieve_fn)(void);

/* Parses a PEM certificate chain (at most 16 certificates) and its PEM
 * private key (unencrypted), checks that they match, and makes them the
 * ones new handshakes get. On failure the certificate in force stays and
 * err says why (never the key's content). 0, RDB_EINVAL (bad PEM, key does
 * not match) or -ENOMEM. Thread-safe; does not block on handshakes. */
int rdb_tls_set(const char *cert_pem, size_t cert_len, const char *key_pem, size_t key_len,
		char *err, size_t errlen);

/* The callback to hand libmicrohttpd (MHD_OPTION_HTTPS_CERT_CALLBACK): it
 * gives each handshake the certificate set last. */
rdb_tls_retrieve_fn rdb_tls_callback(void);

/* Frees every certificate set (after the HTTP server stopped). */
void rdb_tls_clear(void);

#endif
