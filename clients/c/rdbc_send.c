/* rdbc_send: the sender thread. The only user of libcurl in rankdb.
 *
 * Sealed batches arrive from the batcher (rdbc_sender_submit). While the
 * server takes them they wait in memory (bounded by mem_max_bytes); from
 * the first failed send on, and whenever memory is full, they go to the
 * spool instead, and the spool is sent first, oldest first, until it is
 * empty: order is kept and nothing waits in memory for a dead server.
 *
 * Answers: 2xx done (a duplicate batch id included). 429, 5xx, timeouts,
 * refused or dropped connections: retried with the same batch id after
 * Retry-After (capped at 60 s) or an exponential backoff with jitter (200 ms
 * up to backoff_max_ms). Other 4xx: the body can never be stored; dropped,
 * counted, warned.
 *
 * UDP (udp_addr set): each batch is cut at record boundaries into datagrams
 * of at most 60000 bytes and sent once (fire-and-forget, no spool); with a
 * UDP key each is wrapped in the signed envelope (rdbc_sign.c) with the
 * current time and the next nonce (a random start, then counting).
 *
 * Threading: s->lock guards the memory list, the pending metadata and the
 * flags; the thread does network and spool I/O without holding it.
 * Shutdown: rdbc_sender_stop sets a deadline; a request in flight past it
 * is aborted by curl's progress callback and its batch spooled.
 */
#include <curl/curl.h>
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rdbc_int.h"

#define RETRY_AFTER_MAX_MS 60000u
#define BACKOFF_MIN_MS	   200u
#define UDP_DATAGRAM_MAX   60000u
#define UDP_ENVELOPE_MAX   (20u + 64u + 32u) /* header, key id, MAC */
#define ANSWER_MAX	   4096u

struct rdbc_sender {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	char *url_write; /* <url>/api/v1/write */
	char *url_base;
	struct rdbc_spool *spool;
	uint32_t timeout_ms, backoff_max_ms;
	size_t mem_max_bytes;
	struct rdbc_batch *mem_head, *mem_tail; /* FIFO */
	size_t mem_bytes;
	struct rdbc_batch *inflight; /* a memory batch being sent */
	bool spool_mode;
	char *meta_path, *meta_json; /* pending PUT */
	bool stopping;
	int64_t deadline_ns; /* monotonic; valid when stopping */
	int64_t not_before_ns;
	unsigned failures;
	uint64_t rng; /* xorshift state for the jitter */
	/* thread-only */
	CURL *curl;
	char answer[ANSWER_MAX + 1];
	size_t answer_len;
	long retry_after_ms; /* -1: none */
	int udp_fd;
	struct sockaddr_storage udp_sa;
	socklen_t udp_salen;
	char udp_key_id[65]; /* "" = unsigned datagrams */
	uint8_t udp_key[64]; /* the key's secret */
	size_t udp_key_len;
	uint64_t udp_nonce;  /* next nonce */
	uint8_t *udp_signed; /* UDP_DATAGRAM_MAX + UDP_ENVELOPE_MAX bytes, when signing */
	/* counters (written under lock) */
	uint64_t sent_batches, sent_records, duplicates, retries;
	uint64_t refused_batches, refused_records, lost_records, udp_datagrams, udp_errors;
};

enum post_result { POST_OK, POST_REFUSED, POST_RETRY };

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- curl callbacks ------------------------------------------------------------ */

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	struct rdbc_sender *s = arg;
	size_t len = size * n, room = ANSWER_MAX - s->answer_len;
	size_t take = len < room ? len : room;
	memcpy(s->answer + s->answer_len, p, take);
	s->answer_len += take;
	s->answer[s->answer_len] = 0;
	return len;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
	struct rdbc_sender *s = arg;
	size_t len = size * n;
	if (len > 12 && strncasecmp(p, "Retry-After:", 12) == 0) {
		char buf[32];
		size_t l = len - 12 < sizeof(buf) - 1 ? len - 12 : sizeof(buf) - 1;
		memcpy(buf, p + 12, l);
		buf[l] = 0;
		char *end;
		double secs = strtod(buf, &end);
		if (end != buf && secs >= 0 && secs < 1e6)
			s->retry_after_ms = (long)(secs * 1000);
	}
	return len;
}

/* Aborts a transfer still running at the shutdown deadline. */
static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
	struct rdbc_sender *s = arg;
	(void)a, (void)b, (void)c, (void)d;
	pthread_mutex_lock(&s->lock);
	bool late = s->stopping && rdbc_mono_ns() >= s->deadline_ns;
	pthread_mutex_unlock(&s->lock);
	return late ? 1 : 0;
}

/* ---- backoff, memory list ------------------------------------------------------- */

static void backoff(struct rdbc_sender *s)
{
	uint64_t ms;
	s->failures++;
	if (s->retry_after_ms >= 0) {
		ms = (uint64_t)s->retry_after_ms;
		if (ms > RETRY_AFTER_MAX_MS)
			ms = RETRY_AFTER_MAX_MS;
	} else {
		unsigned sh = s->failures - 1 < 16 ? s->failures - 1 : 16;
		ms = (uint64_t)BACKOFF_MIN_MS << sh;
		if (ms > s->backoff_max_ms)
			ms = s->backoff_max_ms;
		s->rng ^= s->rng << 13;
		s->rng ^= s->rng >> 7;
		s->rng ^= s->rng << 17;
		ms = ms / 2 + s->rng % (ms / 2 + 1); /* jitter: ranks do not retry in step */
	}
	pthread_mutex_lock(&s->lock);
	s->retries++;
	s->not_before_ns = rdbc_mono_ns() + (int64_t)ms * 1000000;
	pthread_mutex_unlock(&s->lock);
}

/* Puts b on disk (or keeps it in memory without a spool). Takes ownership. */
static void to_spool(struct rdbc_sender *s, struct rdbc_batch *b)
{
	if (s->spool && rdbc_spool_put(s->spool, b) == 0) {
		free(b);
		return;
	}
	pthread_mutex_lock(&s->lock);
	if (s->mem_bytes + b->len <= 4 * s->mem_max_bytes) {
		b->next = NULL;
		if (s->mem_tail)
			s->mem_tail->next = b;
		else
			s->mem_head = b;
		s->mem_tail = b;
		s->mem_bytes += b->len;
		b = NULL;
	} else {
		s->lost_records += b->nrec;
	}
	pthread_mutex_unlock(&s->lock);
	if (b) {
		rdbc_warn("lost",
			  "rankdb: no spool and memory full: batch %s (%zu records) dropped", b->id,
			  b->nrec);
		free(b);
	}
}

/* From now on everything goes through the spool: first (if any), then the
 * memory list, in order. */
static void spill(struct rdbc_sender *s, struct rdbc_batch *first)
{
	pthread_mutex_lock(&s->lock);
	struct rdbc_batch *list = s->spool ? s->mem_head : NULL;
	s->spool_mode = s->spool != NULL;
	if (s->spool) {
		s->mem_head = s->mem_tail = NULL;
		s->mem_bytes = 0;
	}
	pthread_mutex_unlock(&s->lock);
	if (first)
		to_spool(s, first);
	while (list) {
		struct rdbc_batch *next = list->next;
		to_spool(s, list);
		list = next;
	}
}

void rdbc_sender_submit(struct rdbc_sender *s, struct rdbc_batch *b)
{
	b->next = NULL;
	pthread_mutex_lock(&s->lock);
	bool mem = !s->spool_mode && s->mem_bytes + b->len <= s->mem_max_bytes;
	if (mem) {
		if (s->mem_tail)
			s->mem_tail->next = b;
		else
			s->mem_head = b;
		s->mem_tail = b;
		s->mem_bytes += b->len;
	} else if (s->spool) {
		s->spool_mode = true;
	}
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
	if (!mem)
		to_spool(s, b);
}

void rdbc_sender_put_meta(struct rdbc_sender *s, const char *path, const char *json)
{
	char *p = strdup(path), *j = strdup(json);
	if (!p || !j) {
		free(p);
		free(j);
		return;
	}
	pthread_mutex_lock(&s->lock);
	free(s->meta_path);
	free(s->meta_json);
	s->meta_path = p;
	s->meta_json = j;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

size_t rdbc_sender_pending(struct rdbc_sender *s)
{
	size_t n = 0;
	pthread_mutex_lock(&s->lock);
	for (struct rdbc_batch *b = s->mem_head; b; b = b->next)
		n++;
	n += (s->inflight != NULL) + (s->meta_json != NULL);
	pthread_mutex_unlock(&s->lock);
	return n + (s->spool ? rdbc_spool_count(s->spool) : 0);
}

/* ---- transports -------------------------------------------------------------------- */

/* One HTTP request; -> status, 0 when no answer came. */
static long http(struct rdbc_sender *s, const char *method, const char *url, const char *id,
		 const char *body, size_t len)
{
	struct curl_slist *h = NULL;
	char idh[RDBC_ID_MAX + 32];
	long status = 0;
	h = curl_slist_append(h, strcmp(method, "PUT") == 0 ? "Content-Type: application/json"
							    : "Content-Type: application/x-ndjson");
	h = curl_slist_append(h, "Expect:");
	if (id) {
		snprintf(idh, sizeof(idh), "X-Rankdb-Batch-Id: %s", id);
		h = curl_slist_append(h, idh);
	}
	s->answer_len = 0;
	s->answer[0] = 0;
	s->retry_after_ms = -1;
	curl_easy_setopt(s->curl, CURLOPT_URL, url);
	curl_easy_setopt(s->curl, CURLOPT_CUSTOMREQUEST, strcmp(method, "PUT") == 0 ? "PUT" : NULL);
	curl_easy_setopt(s->curl, CURLOPT_POST, 1L);
	curl_easy_setopt(s->curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(s->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	curl_easy_setopt(s->curl, CURLOPT_HTTPHEADER, h);
	CURLcode rc = curl_easy_perform(s->curl);
	if (rc == CURLE_OK)
		curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
	else
		rdbc_warn("unreachable",
			  "rankdb: server %s unreachable (%s); batches are kept and retried",
			  s->url_base, curl_easy_strerror(rc));
	curl_easy_setopt(s->curl, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(h);
	return status;
}

static enum post_result post_http(struct rdbc_sender *s, const struct rdbc_batch *b)
{
	long st = http(s, "POST", s->url_write, b->id, b->body, b->len);
	if (st >= 200 && st < 300) {
		pthread_mutex_lock(&s->lock);
		s->failures = 0;
		s->sent_batches++;
		s->sent_records += b->nrec;
		s->duplicates += strstr(s->answer, "\"duplicate\":true") != NULL;
		pthread_mutex_unlock(&s->lock);
		return POST_OK;
	}
	if (st == 0 || st == 429 || st >= 500) {
		if (st)
			rdbc_warn("busy", "rankdb: server answered %ld to batch %s; retrying later",
				  st, b->id);
		backoff(s);
		return POST_RETRY;
	}
	pthread_mutex_lock(&s->lock);
	s->refused_batches++;
	s->refused_records += b->nrec;
	pthread_mutex_unlock(&s->lock);
	rdbc_warn("refused",
		  "rankdb: server refused batch %s (%zu records) with %ld: %.300s; dropped", b->id,
		  b->nrec, st, s->answer);
	return POST_REFUSED;
}

static enum post_result post_udp(struct rdbc_sender *s, const struct rdbc_batch *b)
{
	size_t off = 0;
	while (off < b->len) {
		size_t end = off, cut = off;
		while (end < b->len) { /* whole records, up to the datagram limit */
			const char *nl = memchr(b->body + end, '\n', b->len - end);
			size_t next = nl ? (size_t)(nl - b->body) + 1 : b->len;
			if (next - off > UDP_DATAGRAM_MAX && cut > off)
				break;
			cut = end = next;
		}
		const void *d = b->body + off;
		size_t dlen = cut - off;
		ssize_t w = -1;
		if (s->udp_signed &&
		    rdbc_udp_sign(s->udp_key_id, s->udp_key, s->udp_key_len,
				  (uint64_t)(rdbc_now_ns() / 1000000), s->udp_nonce++, d, dlen,
				  s->udp_signed, UDP_DATAGRAM_MAX + UDP_ENVELOPE_MAX, &dlen) == 0)
			d = s->udp_signed;
		else if (s->udp_signed)
			d = NULL; /* a record longer than a datagram: counted as an error */
		if (d)
			w = sendto(s->udp_fd, d, dlen, 0, (struct sockaddr *)&s->udp_sa,
				   s->udp_salen);
		pthread_mutex_lock(&s->lock);
		if (w < 0)
			s->udp_errors++;
		else
			s->udp_datagrams++;
		pthread_mutex_unlock(&s->lock);
		off = cut;
	}
	pthread_mutex_lock(&s->lock);
	s->sent_batches++;
	s->sent_records += b->nrec;
	pthread_mutex_unlock(&s->lock);
	return POST_OK;
}

static enum post_result post(struct rdbc_sender *s, const struct rdbc_batch *b)
{
	return s->udp_fd >= 0 ? post_udp(s, b) : post_http(s, b);
}

static bool put_meta(struct rdbc_sender *s, const char *path, const char *json)
{
	if (s->udp_fd >= 0)
		return true; /* no metadata over UDP */
	char url[1024];
	snprintf(url, sizeof(url), "%s%s", s->url_base, path);
	long st = http(s, "PUT", url, NULL, json, strlen(json));
	if (st == 0 || st == 429 || st >= 500) {
		backoff(s);
		return false;
	}
	if (st < 200 || st >= 300)
		rdbc_warn("meta", "rankdb: server refused the job metadata with %ld: %.300s", st,
			  s->answer);
	return true;
}

/* ---- the thread --------------------------------------------------------------------- */

/* One unit of work; false when the thread should end. */
static bool step(struct rdbc_sender *s)
{
	int64_t now = rdbc_mono_ns();
	pthread_mutex_lock(&s->lock);
	if (s->stopping && now >= s->deadline_ns) {
		pthread_mutex_unlock(&s->lock);
		return false;
	}
	if (now < s->not_before_ns) {
		int64_t until = s->not_before_ns;
		if (s->stopping && s->deadline_ns < until)
			until = s->deadline_ns;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		int64_t abs_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + (until - now);
		ts.tv_sec = abs_ns / 1000000000;
		ts.tv_nsec = abs_ns % 1000000000;
		pthread_cond_timedwait(&s->cond, &s->lock, &ts);
		pthread_mutex_unlock(&s->lock);
		return true;
	}
	pthread_mutex_unlock(&s->lock);

	uint64_t token;
	struct rdbc_batch *b = s->spool ? rdbc_spool_oldest(s->spool, &token) : NULL;
	if (b) {
		pthread_mutex_lock(&s->lock);
		bool mem = s->mem_head != NULL;
		pthread_mutex_unlock(&s->lock);
		if (mem) /* the spool goes first: what waits behind it waits on disk */
			spill(s, NULL);
		if (post(s, b) != POST_RETRY)
			rdbc_spool_remove(s->spool, token);
		free(b);
		pthread_mutex_lock(&s->lock);
		if (rdbc_spool_count(s->spool) == 0)
			s->spool_mode = false;
		pthread_mutex_unlock(&s->lock);
		return true;
	}
	char *mpath = NULL, *mjson = NULL;
	pthread_mutex_lock(&s->lock);
	b = s->mem_head;
	if (b) {
		s->mem_head = b->next;
		if (!s->mem_head)
			s->mem_tail = NULL;
		s->mem_bytes -= b->len;
		s->inflight = b;
	} else if (s->meta_json) {
		mpath = strdup(s->meta_path);
		mjson = strdup(s->meta_json);
	} else if (s->stopping) {
		pthread_mutex_unlock(&s->lock);
		return false;
	} else {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 500000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&s->cond, &s->lock, &ts);
	}
	pthread_mutex_unlock(&s->lock);
	if (b) {
		enum post_result r = post(s, b);
		pthread_mutex_lock(&s->lock);
		s->inflight = NULL;
		pthread_mutex_unlock(&s->lock);
		if (r == POST_RETRY)
			spill(s, b);
		else
			free(b);
	} else if (mjson) {
		if (put_meta(s, mpath, mjson)) {
			pthread_mutex_lock(&s->lock);
			if (s->meta_json && strcmp(s->meta_json, mjson) == 0) {
				free(s->meta_json);
				free(s->meta_path);
				s->meta_json = s->meta_path = NULL;
			}
			pthread_mutex_unlock(&s->lock);
		}
		free(mpath);
		free(mjson);
	}
	return true;
}

static void *run(void *arg)
{
	struct rdbc_sender *s = arg;
	if (s->spool) {
		size_t n = rdbc_spool_adopt(s->spool);
		if (n) {
			pthread_mutex_lock(&s->lock);
			s->spool_mode = true;
			pthread_mutex_unlock(&s->lock);
			rdbc_warn("adopted",
				  "rankdb: replaying %zu batches a previous process of this rank "
				  "left in the spool",
				  n);
		}
	}
	while (step(s))
		;
	return NULL;
}

/* ---- lifecycle ------------------------------------------------------------------------ */

static int udp_open(struct rdbc_sender *s, const char *addr)
{
	char host[256];
	const char *colon = strrchr(addr, ':');
	struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *ai = NULL;
	if (!colon || (size_t)(colon - addr) >= sizeof(host))
		return -EINVAL;
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = 0;
	if (getaddrinfo(host, colon + 1, &hints, &ai) != 0 || !ai)
		return -EINVAL;
	s->udp_fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	memcpy(&s->udp_sa, ai->ai_addr, ai->ai_addrlen);
	s->udp_salen = ai->ai_addrlen;
	freeaddrinfo(ai);
	return s->udp_fd < 0 ? -errno : 0;
}

static void sender_free(struct rdbc_sender *s)
{
	if (s->curl)
		curl_easy_cleanup(s->curl);
	if (s->udp_fd >= 0)
		close(s->udp_fd);
	memset(s->udp_key, 0, sizeof(s->udp_key));
	free(s->udp_signed);
	for (struct rdbc_batch *b = s->mem_head, *n; b; b = n) {
		n = b->next;
		free(b);
	}
	free(s->url_write);
	free(s->url_base);
	free(s->meta_path);
	free(s->meta_json);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

int rdbc_sender_start(const struct rdbc_sender_opts *o, struct rdbc_sender **out)
{
	struct rdbc_sender *s = calloc(1, sizeof(*s));
	int rc = -ENOMEM;
	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	s->udp_fd = -1;
	s->rng = (uint64_t)rdbc_now_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;
	s->spool = o->spool;
	s->timeout_ms = o->timeout_ms;
	s->backoff_max_ms = o->backoff_max_ms < BACKOFF_MIN_MS ? BACKOFF_MIN_MS : o->backoff_max_ms;
	s->mem_max_bytes = o->mem_max_bytes;
	s->spool_mode = o->spool && rdbc_spool_count(o->spool) > 0;
	size_t ul = strlen(o->url);
	while (ul && o->url[ul - 1] == '/')
		ul--;
	if (!(s->url_base = strndup(o->url, ul)) || !(s->url_write = malloc(ul + 16)))
		goto fail;
	snprintf(s->url_write, ul + 16, "%s/api/v1/write", s->url_base);
	if (o->udp_addr && *o->udp_addr) {
		if ((rc = udp_open(s, o->udp_addr)) != 0)
			goto fail;
		if (o->udp_key_id) {
			rc = -ENOMEM;
			if (strlen(o->udp_key_id) >= sizeof(s->udp_key_id) ||
			    o->udp_key_len > sizeof(s->udp_key))
				goto fail;
			snprintf(s->udp_key_id, sizeof(s->udp_key_id), "%s", o->udp_key_id);
			memcpy(s->udp_key, o->udp_key, o->udp_key_len);
			s->udp_key_len = o->udp_key_len;
			if (getrandom(&s->udp_nonce, sizeof(s->udp_nonce), 0) !=
			    sizeof(s->udp_nonce))
				s->udp_nonce = s->rng;
			if (!(s->udp_signed = malloc(UDP_DATAGRAM_MAX + UDP_ENVELOPE_MAX)))
				goto fail;
		}
	} else {
		pthread_once(&curl_once, curl_init_once);
		if (!(s->curl = curl_easy_init()))
			goto fail;
		curl_easy_setopt(s->curl, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(s->curl, CURLOPT_TIMEOUT_MS, (long)s->timeout_ms);
		curl_easy_setopt(s->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)s->timeout_ms);
		curl_easy_setopt(s->curl, CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(s->curl, CURLOPT_WRITEDATA, s);
		curl_easy_setopt(s->curl, CURLOPT_HEADERFUNCTION, on_header);
		curl_easy_setopt(s->curl, CURLOPT_HEADERDATA, s);
		curl_easy_setopt(s->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(s->curl, CURLOPT_XFERINFODATA, s);
		curl_easy_setopt(s->curl, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(s->curl, CURLOPT_TCP_KEEPALIVE, 1L);
	}
	rc = -pthread_create(&s->thread, NULL, run, s);
	if (rc != 0)
		goto fail;
	*out = s;
	return 0;
fail:
	sender_free(s);
	return rc;
}

bool rdbc_sender_stop(struct rdbc_sender *s, uint32_t timeout_ms, struct rdbc_stats *st)
{
	pthread_mutex_lock(&s->lock);
	s->stopping = true;
	s->deadline_ns = rdbc_mono_ns() + (int64_t)timeout_ms * 1000000;
	/* a long Retry-After must not eat the whole flush budget */
	if (s->not_before_ns > rdbc_mono_ns() + 200000000)
		s->not_before_ns = rdbc_mono_ns() + 200000000;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thread, NULL);
	struct rdbc_batch *list = s->mem_head;
	s->mem_head = s->mem_tail = NULL;
	s->mem_bytes = 0;
	while (list) { /* left for the next process of this rank */
		struct rdbc_batch *n = list->next;
		if (s->spool && rdbc_spool_put(s->spool, list) == 0) {
			free(list);
		} else {
			s->lost_records += list->nrec;
			free(list);
		}
		list = n;
	}
	bool ok = (s->spool ? rdbc_spool_count(s->spool) : 0) == 0 && s->meta_json == NULL &&
		  s->lost_records == 0;
	if (st)
		rdbc_sender_stats(s, st);
	sender_free(s);
	return ok;
}

void rdbc_sender_stats(struct rdbc_sender *s, struct rdbc_stats *st)
{
	pthread_mutex_lock(&s->lock);
	st->batches_sent = s->sent_batches;
	st->records_sent = s->sent_records;
	st->duplicates = s->duplicates;
	st->retries = s->retries;
	st->batches_refused = s->refused_batches;
	st->records_refused = s->refused_records;
	st->lost_records += s->lost_records;
	st->udp_datagrams = s->udp_datagrams;
	st->udp_errors = s->udp_errors;
	pthread_mutex_unlock(&s->lock);
	if (s->spool)
		rdbc_spool_stats(s->spool, st);
}
