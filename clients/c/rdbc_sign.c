/* rdbc_sign.c - signs UDP datagrams with a UDP key (rdbc.h, rdbc_udp_sign):
 * the envelope of docs/API.md ("Signed datagrams"), HMAC-SHA256 through
 * GnuTLS (the client's only crypto library; this is the only client file
 * that includes it). Pure and thread-safe; needs nothing of the server.
 */
#include <errno.h>
#include <gnutls/crypto.h>
#include <string.h>

#include "rdbc_int.h"

#define ENV_HEADER 20
#define ENV_MAC	   32

static int key_id_ok(const char *s, size_t n)
{
	if (n == 0 || n > 64)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

int rdbc_udp_sign(const char *key_id, const void *secret, size_t secret_len, uint64_t ts_ms,
		  uint64_t nonce, const void *payload, size_t len, void *out, size_t cap,
		  size_t *outlen)
{
	if (!key_id || !secret || !out || !outlen || (!payload && len))
		return -EINVAL;
	size_t idlen = strlen(key_id);
	if (!key_id_ok(key_id, idlen) || secret_len == 0)
		return -EINVAL;
	if (len > cap || ENV_HEADER + idlen + len + ENV_MAC > cap)
		return -ENOSPC;
	uint8_t *o = out;
	o[0] = 0xFE;
	o[1] = 1;
	o[2] = (uint8_t)idlen;
	o[3] = 0;
	put_le64(o + 4, ts_ms);
	put_le64(o + 12, nonce);
	memcpy(o + ENV_HEADER, key_id, idlen);
	if (len)
		memmove(o + ENV_HEADER + idlen, payload, len);
	size_t signed_len = ENV_HEADER + idlen + len;
	if (gnutls_hmac_fast(GNUTLS_MAC_SHA256, secret, secret_len, o, signed_len,
			     o + signed_len) != 0)
		return -EIO;
	*outlen = signed_len + ENV_MAC;
	return 0;
}

int rdbc_hex_decode(const char *hex, uint8_t *out, size_t cap, size_t *n)
{
	size_t l = hex ? strlen(hex) : 0;
	if (l == 0 || l % 2 || l / 2 > cap)
		return -EINVAL;
	for (size_t i = 0; i < l; i++) {
		char c = hex[i];
		int v = c >= '0' && c <= '9'   ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
					       : -1;
		if (v < 0)
			return -EINVAL;
		if (i % 2 == 0)
			out[i / 2] = (uint8_t)(v << 4);
		else
			out[i / 2] |= (uint8_t)v;
	}
	*n = l / 2;
	return 0;
}
