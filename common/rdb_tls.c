/* rdb_tls.c - the served certificate (rdb_tls.h), through GnuTLS's
 * certificate retrieve callback, so a new certificate takes effect without
 * restarting libmicrohttpd (which has no call to swap it on a running
 * daemon).
 *
 * Design: a set is a parsed chain (gnutls_pcert_st) and private key. The
 * callback hands each handshake the current set; GnuTLS borrows it (it does
 * not free what a retrieve callback returns) while that handshake runs. So
 * a replaced set is not freed at once: the last TLS_RETIRED_MAX replaced
 * sets stay alive, and only older ones are freed (a handshake lasts
 * seconds at most, http_timeout_s bounds it; TLS_RETIRED_MAX reloads
 * within one handshake do not happen). Everything is freed by
 * rdb_tls_clear after the server stopped.
 *
 * Threading: one mutex over the current set and the retired ring; the
 * callback runs on libmicrohttpd's threads. Failure: a bad chain or key,
 * or a key that does not match the chain's first certificate, is refused
 * and the current set stays.
 */
#include "common/rdb_tls.h"
#include "common/rdb_err.h"

#include <errno.h>
#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TLS_CHAIN_MAX	16
#define TLS_RETIRED_MAX 16

struct tls_set {
	gnutls_pcert_st pcert[TLS_CHAIN_MAX];
	unsigned npcert;
	gnutls_privkey_t key;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct tls_set *g_cur;			   /* under mu */
static struct tls_set *g_retired[TLS_RETIRED_MAX]; /* ring, under mu */
static unsigned g_next_retired;

static void set_free(struct tls_set *s)
{
	if (!s)
		return;
	for (unsigned i = 0; i < s->npcert; i++)
		gnutls_pcert_deinit(&s->pcert[i]);
	if (s->key)
		gnutls_privkey_deinit(s->key);
	free(s);
}

/* GnuTLS's own check that key belongs to the chain's first certificate. */
static int check_pair(const gnutls_datum_t *c, const gnutls_datum_t *k, char *err, size_t errlen)
{
	gnutls_certificate_credentials_t cred;
	if (gnutls_certificate_allocate_credentials(&cred) < 0)
		return -ENOMEM;
	int g = gnutls_certificate_set_x509_key_mem2(cred, c, k, GNUTLS_X509_FMT_PEM, NULL, 0);
	gnutls_certificate_free_credentials(cred);
	if (g < 0) {
		snprintf(err, errlen, "certificate and key refused: %s", gnutls_strerror(g));
		return RDB_EINVAL;
	}
	return 0;
}

static int set_parse(const gnutls_datum_t *c, const gnutls_datum_t *k, struct tls_set **out,
		     char *err, size_t errlen)
{
	struct tls_set *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	unsigned n = TLS_CHAIN_MAX;
	int g = gnutls_pcert_list_import_x509_raw(s->pcert, &n, c, GNUTLS_X509_FMT_PEM, 0);
	if (g < 0) {
		snprintf(err, errlen, "certificate chain: %s", gnutls_strerror(g));
		free(s);
		return RDB_EINVAL;
	}
	s->npcert = n;
	g = gnutls_privkey_init(&s->key);
	if (g >= 0)
		g = gnutls_privkey_import_x509_raw(s->key, k, GNUTLS_X509_FMT_PEM, NULL, 0);
	if (g < 0) {
		snprintf(err, errlen, "private key: %s", gnutls_strerror(g));
		set_free(s);
		return RDB_EINVAL;
	}
	*out = s;
	return 0;
}

int rdb_tls_set(const char *cert_pem, size_t cert_len, const char *key_pem, size_t key_len,
		char *err, size_t errlen)
{
	gnutls_datum_t c = {(unsigned char *)(uintptr_t)cert_pem, (unsigned)cert_len};
	gnutls_datum_t k = {(unsigned char *)(uintptr_t)key_pem, (unsigned)key_len};
	struct tls_set *s = NULL;
	if (cert_len > UINT32_MAX || key_len > UINT32_MAX) {
		snprintf(err, errlen, "certificate or key too large");
		return RDB_EINVAL;
	}
	int rc = check_pair(&c, &k, err, errlen);
	if (rc == 0)
		rc = set_parse(&c, &k, &s, err, errlen);
	if (rc)
		return rc;
	pthread_mutex_lock(&mu);
	struct tls_set *old = g_cur, *gone = NULL;
	g_cur = s;
	if (old) {
		gone = g_retired[g_next_retired];
		g_retired[g_next_retired] = old;
		g_next_retired = (g_next_retired + 1) % TLS_RETIRED_MAX;
	}
	pthread_mutex_unlock(&mu);
	set_free(gone);
	return 0;
}

static int retrieve(gnutls_session_t session, const gnutls_datum_t *req_ca_dn, int nreqs,
		    const gnutls_pk_algorithm_t *algos, int nalgos, gnutls_pcert_st **pcert,
		    unsigned int *pcert_length, gnutls_privkey_t *key)
{
	(void)session, (void)req_ca_dn, (void)nreqs, (void)algos, (void)nalgos;
	pthread_mutex_lock(&mu);
	struct tls_set *s = g_cur;
	if (s) {
		*pcert = s->pcert;
		*pcert_length = s->npcert;
		*key = s->key;
	}
	pthread_mutex_unlock(&mu);
	return s ? 0 : -1;
}

rdb_tls_retrieve_fn rdb_tls_callback(void)
{
	gnutls_certificate_retrieve_function2 *f = retrieve;
	return (rdb_tls_retrieve_fn)f;
}

void rdb_tls_clear(void)
{
	pthread_mutex_lock(&mu);
	set_free(g_cur);
	g_cur = NULL;
	for (unsigned i = 0; i < TLS_RETIRED_MAX; i++) {
		set_free(g_retired[i]);
		g_retired[i] = NULL;
	}
	pthread_mutex_unlock(&mu);
}
