/* fuzz_auth.c - fuzz target for the credential parsing of server/auth.c
 * (srv_auth_parse): Authorization header values (Bearer, Token, Basic with
 * base64 decoding) and the v1 u / p query parameters.
 *
 * Input: up to three NUL-separated strings: the Authorization value, u, p
 * (a missing part is NULL). The target must never crash or read out of
 * bounds; a credential it returns is a NUL-terminated string shorter than
 * the buffer, never empty, and parsing is deterministic. */
#include "server/auth.h"
#include "common/rdb_err.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 8192)
		return 0;
	char *buf = malloc(size + 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = 0;
	const char *part[3] = {NULL, NULL, NULL};
	size_t k = 0;
	for (char *p = buf; k < 3 && p <= buf + size; k++) {
		part[k] = p;
		p += strlen(p) + 1;
	}
	char tok[SRV_AUTH_TOKEN_MAX], again[SRV_AUTH_TOKEN_MAX];
	int rc = srv_auth_parse(part[0], part[1], part[2], tok, sizeof(tok));
	int rc2 = srv_auth_parse(part[0], part[1], part[2], again, sizeof(again));
	if (rc != rc2)
		abort();
	if (rc == 0 &&
	    (strnlen(tok, sizeof(tok)) >= sizeof(tok) || !tok[0] || strcmp(tok, again) != 0))
		abort();
	if (rc != 0 && rc != RDB_EINVAL && rc != RDB_ENOTFOUND)
		abort();
	free(buf);
	return 0;
}
