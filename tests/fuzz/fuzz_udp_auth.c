/* fuzz_udp_auth.c - fuzz target for the signed UDP envelope of
 * server/udp_auth.c (srv_udp_envelope_parse) and its HMAC check.
 *
 * Input: one datagram. The target must never crash or read out of bounds.
 * Invariants checked: a parsed envelope's payload and MAC lie inside the
 * datagram and end where it ends, its key id is valid; signing the parsed
 * fields again gives a datagram that parses to the same fields; and when
 * the input's MAC is right for the corpus key (the worked example's
 * secret, bytes 0..31), signing again reproduces the input byte for byte.
 */
#include "server/udp_auth.h"
#include "common/rdb_err.h"
#include "common/rdb_sha256.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_resign(const struct srv_udp_envelope *e, const uint8_t *data, size_t size,
			 const uint8_t *secret)
{
	size_t cap = size + 64, n = 0;
	uint8_t *out = malloc(cap);
	if (!out)
		return;
	if (srv_udp_envelope_sign(e->key_id, secret, 32, e->ts_ms, e->nonce, e->payload,
				  e->payload_len, out, cap, &n) != 0 ||
	    n != size)
		abort();
	struct srv_udp_envelope again;
	if (srv_udp_envelope_parse(out, n, &again) != 0 || again.ts_ms != e->ts_ms ||
	    again.nonce != e->nonce || strcmp(again.key_id, e->key_id) != 0 ||
	    again.payload_len != e->payload_len ||
	    memcmp(again.payload, e->payload, e->payload_len) != 0)
		abort();
	uint8_t mac[RDB_SHA256_BYTES];
	if (rdb_hmac_sha256(secret, 32, data, e->signed_len, mac) != 0)
		abort();
	bool good = rdb_ct_equal(mac, e->mac, sizeof(mac));
	if (good != (memcmp(out, data, size) == 0))
		abort();
	free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t secret[32];
	for (int i = 0; i < 32; i++)
		secret[i] = (uint8_t)i;
	if (size > 70000)
		return 0;
	struct srv_udp_envelope e;
	int rc = srv_udp_envelope_parse(data, size, &e);
	if (rc == RDB_ENOTFOUND && size && data[0] == SRV_UDP_ENV_MAGIC)
		abort();
	if (rc != 0) {
		if (rc != RDB_EINVAL && rc != RDB_ENOTFOUND)
			abort();
		return 0;
	}
	size_t idlen = strlen(e.key_id);
	if (idlen == 0 || idlen > SRV_UDP_KEY_ID_MAX || e.data != data ||
	    e.payload != data + SRV_UDP_ENV_HEADER + idlen || e.payload + e.payload_len != e.mac ||
	    e.mac + SRV_UDP_ENV_MAC != data + size || e.signed_len + SRV_UDP_ENV_MAC != size)
		abort();
	check_resign(&e, data, size, secret);
	return 0;
}
