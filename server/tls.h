/* tls.h - the HTTPS certificate files (tls_cert_file, tls_key_file): read
 * at start and again on SIGHUP / POST /api/v1/admin/tls/reload, served
 * through common/rdb_tls.h so the HTTP daemon keeps running (server/tls.c).
 */
#ifndef SRV_TLS_H
#define SRV_TLS_H

#include "server/config.h"

#include <stdbool.h>
#include <stddef.h>

/* True when cfg asks for HTTPS (either file set). */
bool srv_tls_wanted(const struct srv_config *cfg);

/* Reads and installs cfg's certificate and key; remembers cfg. 0 or an
 * error, logged (which file, what is wrong). Call before the HTTP server
 * starts; cfg must outlive the server. */
int srv_tls_start(const struct srv_config *cfg);

/* Reads the files again; new handshakes get the new certificate. A file
 * that cannot be read or a bad or mismatched pair is refused with a loud
 * log line, and the certificate in force stays. 0, RDB_ENOTFOUND (no TLS
 * configured) or an error; msg says what. Thread-safe. */
int srv_tls_reload(char *msg, size_t msglen);

/* Frees the certificates; after the HTTP server stopped. */
void srv_tls_stop(void);

#endif
