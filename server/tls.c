/* tls.c - reads the HTTPS certificate and key files (tls.h) and installs
 * them in common/rdb_tls.c, whose certificate callback libmicrohttpd calls
 * for every handshake. Files are bounded (TLS_FILE_MAX); the key's bytes
 * are zeroed once parsed. Reload: SIGHUP (main.c) and the admin API; a bad
 * pair never replaces a good one. Threading: reload may run on any thread
 * (rdb_tls_set locks); start and stop are start-up / shutdown code.
 */
#include "server/tls.h"
#include "common/rdb_err.h"
#include "common/rdb_log.h"
#include "common/rdb_tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TLS_FILE_MAX (1u << 20) /* a PEM certificate chain or key */

static const struct srv_config *g_cfg;

bool srv_tls_wanted(const struct srv_config *cfg)
{
	return cfg->tls_cert_file[0] || cfg->tls_key_file[0];
}

/* Reads a whole file (at most TLS_FILE_MAX bytes) into *out (malloc'd,
 * NUL-terminated, *len bytes). 0 or an error with msg. */
static int read_pem(const char *what, const char *path, char **out, size_t *len, char *msg,
		    size_t msglen)
{
	FILE *f = fopen(path, "re");
	if (!f) {
		int rc = -errno;
		snprintf(msg, msglen, "cannot open %s %s: %s", what, path, strerror(errno));
		return rc;
	}
	char *buf = malloc(TLS_FILE_MAX + 1);
	size_t n = buf ? fread(buf, 1, TLS_FILE_MAX + 1, f) : 0;
	int rc = !buf ? -ENOMEM : ferror(f) ? -EIO : n > TLS_FILE_MAX ? RDB_ELIMIT : 0;
	fclose(f);
	if (rc) {
		snprintf(msg, msglen, "cannot read %s %s: %s", what, path,
			 rc == RDB_ELIMIT ? "larger than 1 MiB" : rdb_strerror(rc));
		free(buf);
		return rc;
	}
	buf[n] = 0;
	*out = buf;
	*len = n;
	return 0;
}

/* Reads both files and installs them. 0 or an error with msg. */
static int load(char *msg, size_t msglen)
{
	const struct srv_config *cfg = g_cfg;
	char *cert = NULL, *key = NULL, why[512] = "";
	size_t clen = 0, klen = 0;
	int rc = read_pem("tls_cert_file", cfg->tls_cert_file, &cert, &clen, msg, msglen);
	if (rc == 0)
		rc = read_pem("tls_key_file", cfg->tls_key_file, &key, &klen, msg, msglen);
	if (rc == 0) {
		rc = rdb_tls_set(cert, clen, key, klen, why, sizeof(why));
		/* a long path may cut the message; it stays readable (and the
		 * result is looked at, which -O3's -Wformat-truncation wants) */
		if (rc && snprintf(msg, msglen, "%s / %s: %s", cfg->tls_cert_file,
				   cfg->tls_key_file, why) < 0)
			msg[0] = 0;
	}
	if (key)
		memset(key, 0, klen); /* the private key leaves no copy */
	free(key);
	free(cert);
	return rc;
}

int srv_tls_start(const struct srv_config *cfg)
{
	char msg[1024];
	g_cfg = cfg;
	if (!cfg->tls_cert_file[0] || !cfg->tls_key_file[0]) {
		rdb_error("http", "TLS needs both tls_cert_file and tls_key_file");
		return -EINVAL;
	}
	int rc = load(msg, sizeof(msg));
	if (rc)
		rdb_error("http", "%s", msg);
	return rc;
}

int srv_tls_reload(char *msg, size_t msglen)
{
	if (!g_cfg || !srv_tls_wanted(g_cfg)) {
		snprintf(msg, msglen, "TLS is off (no tls_cert_file)");
		return RDB_ENOTFOUND;
	}
	int rc = load(msg, msglen);
	if (rc) {
		rdb_error("http",
			  "TLS certificate reload REFUSED, still serving the previous "
			  "certificate: %s",
			  msg);
		return rc;
	}
	snprintf(msg, msglen, "TLS certificate reloaded from %s", g_cfg->tls_cert_file);
	rdb_info("http", "%s; new connections get it", msg);
	return 0;
}

void srv_tls_stop(void)
{
	rdb_tls_clear();
}
