/* notify.c - alert delivery (notify.h): a bounded queue in front of one
 * sender thread that POSTs to Alertmanagers and webhooks with libcurl. The
 * only file in rankdb that includes curl/curl.h. Documents: notify_fmt.c.
 *
 * Model: a delivery ("item") is one rendered alert for one receiver. A
 * receiver is an Alertmanager (fixed at start, BASE/api/v2/alerts) or a
 * webhook URL (met in an alert's rule; up to max_webhooks tracked, idle ones
 * recycled). Each receiver has a FIFO of waiting items and at most one
 * request in flight: for an Alertmanager the request carries up to max_batch
 * waiting items as one JSON array, for a webhook one document. All items
 * (waiting and in flight) are also on one global list in queue order, which
 * is how the queue bound is enforced: at max_queue held items, det_notify_send
 * evicts the oldest WAITING item (counted dropped_full) to make room; the
 * newest state of an alert is the one worth delivering, and a dead receiver's
 * backlog is the oldest, so it pays for its own backlog. A waiting
 * Alertmanager item for the same alert id is replaced in place (coalesced):
 * Alertmanager only needs the latest state, so a dead Alertmanager's backlog
 * is bounded by the number of alerts, not by re-sends.
 *
 * Sending: the thread drives every receiver's request at once with the curl
 * multi interface, so a receiver that hangs until timeout_ms only holds its
 * own queue. 2xx = delivered. A connection error, timeout, 5xx, 408 or 429
 * is retried: the items go back to the head of their receiver's FIFO and the
 * receiver waits an exponential backoff with jitter (retry_min_ms doubling
 * to retry_max_ms; a uniformly random half of it is added to the other
 * half, so several rankdbds do not retry in step). An item is given up
 * (failed) after max_attempts requests or max_age_s in the queue; any other
 * answer (4xx: the receiver rejects the document) fails its items at once.
 *
 * Threading: one mutex guards the queue, the receivers' lists and counters;
 * it is never held across network I/O. Callers (det_notify_send) render the
 * document before taking it and wake the sender with curl_multi_wakeup,
 * which libcurl allows from any thread. Only the sender thread calls any
 * other curl function; it owns the multi handle and every easy handle. The
 * sender reads the monotonic clock for backoff and item age (the evaluation
 * time for endsAt comes from the caller).
 *
 * libcurl's global state (curl_global_init) is set up by
 * det_notify_global_init, which main() calls before starting any thread.
 *
 * Failure: a full queue, an unreachable or slow receiver, a rejected
 * document are counted (det_notify_stats) and logged (rate-limited per
 * receiver); nothing here ever blocks a caller or aborts the process.
 */
#include "detect/notify.h"
#include "detect/notify_int.h"

#include "common/rdb_err.h"
#include "common/rdb_log.h"
#include "common/rdb_map.h"
#include "common/rdb_time.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define MS 1000000LL

struct rcv;

struct item {
	struct item *gprev, *gnext; /* global queue order (waiting and in flight) */
	struct item *rprev, *rnext; /* receiver's waiting FIFO or its flight list */
	struct rcv *r;
	uint64_t alert_id;
	int64_t enq_mono_ns;
	uint32_t attempts; /* failed requests so far */
	bool in_flight;
	size_t len;
	char *json; /* owned */
};

struct ilist {
	struct item *head, *tail;
	size_t n;
};

struct rcv {
	uint8_t kind; /* enum det_notify_kind */
	bool used;    /* webhook slot in use */
	bool busy;    /* a request is in flight (sender thread) */
	char url[DET_URL_MAX + 16];
	struct ilist wait;	  /* waiting items, oldest first */
	struct ilist flight;	  /* items of the request in flight */
	struct rdb_map by_id;	  /* Alertmanager: alert id -> waiting item */
	int64_t next_try_mono_ns; /* backoff: no request before this */
	uint32_t failures;	  /* consecutive failed requests */
	int64_t last_use_mono_ns;
	struct rdb_log_ratelimit rl;
	/* sender thread only: */
	CURL *easy;
	struct rdb_buf body;
	char resp[200];
	size_t resp_len;
	char errbuf[CURL_ERROR_SIZE];
};

struct det_notify {
	pthread_mutex_t mu;
	pthread_t thread;
	struct det_notify_options o; /* defaults applied; URL strings not kept */
	struct det_notify_fmt fmt;
	struct rcv am[DET_NOTIFY_MAX_AM];
	size_t nam;
	struct rcv *wh;		    /* max_webhooks slots */
	struct item *ghead, *gtail; /* global order */
	size_t held;		    /* items on the global list */
	struct det_notify_stats st;
	bool stopping;
	int64_t drain_deadline_mono_ns;
	CURLM *multi;
	struct curl_slist *headers;
	uint64_t rng;
	struct rdb_log_ratelimit refused_rl;
	struct rdb_log_ratelimit dropped_rl;
};

static bool global_ready;

int det_notify_global_init(void)
{
	if (global_ready)
		return 0;
	CURLcode c = curl_global_init(CURL_GLOBAL_DEFAULT);
	if (c != CURLE_OK) {
		rdb_error("notify", "libcurl initialisation failed: %s; alerts cannot be delivered",
			  curl_easy_strerror(c));
		return RDB_EIO;
	}
	global_ready = true;
	return 0;
}

void det_notify_global_cleanup(void)
{
	if (!global_ready)
		return;
	curl_global_cleanup();
	global_ready = false;
}

/* ---- lists ----------------------------------------------------------------- */

static void il_push_tail(struct ilist *l, struct item *it)
{
	it->rnext = NULL;
	it->rprev = l->tail;
	if (l->tail)
		l->tail->rnext = it;
	else
		l->head = it;
	l->tail = it;
	l->n++;
}

static void il_push_head(struct ilist *l, struct item *it)
{
	it->rprev = NULL;
	it->rnext = l->head;
	if (l->head)
		l->head->rprev = it;
	else
		l->tail = it;
	l->head = it;
	l->n++;
}

static void il_remove(struct ilist *l, struct item *it)
{
	if (it->rprev)
		it->rprev->rnext = it->rnext;
	else
		l->head = it->rnext;
	if (it->rnext)
		it->rnext->rprev = it->rprev;
	else
		l->tail = it->rprev;
	it->rprev = it->rnext = NULL;
	l->n--;
}

static void g_push(struct det_notify *n, struct item *it)
{
	it->gnext = NULL;
	it->gprev = n->gtail;
	if (n->gtail)
		n->gtail->gnext = it;
	else
		n->ghead = it;
	n->gtail = it;
	n->held++;
}

/* Unlinks it from the global list and frees it (not from receiver lists). */
static void g_free(struct det_notify *n, struct item *it)
{
	if (it->gprev)
		it->gprev->gnext = it->gnext;
	else
		n->ghead = it->gnext;
	if (it->gnext)
		it->gnext->gprev = it->gprev;
	else
		n->gtail = it->gprev;
	n->held--;
	free(it->json);
	free(it);
}

/* Alertmanager deliveries of one alert (det_alerts ids are >= 1) replace
 * each other while waiting; 0 is "no id". */
static bool coalesces(const struct item *it)
{
	return it->r->kind == DET_NOTIFY_AM && it->alert_id != 0;
}

/* Takes a waiting item off its receiver (FIFO and coalescing index). */
static void unwait(struct item *it)
{
	struct rcv *r = it->r;
	il_remove(&r->wait, it);
	if (coalesces(it) && rdb_map_get(&r->by_id, it->alert_id) == it)
		rdb_map_del(&r->by_id, it->alert_id);
}

/* ---- options ----------------------------------------------------------------- */

static bool url_ok(const char *u)
{
	return strncasecmp(u, "http://", 7) == 0 || strncasecmp(u, "https://", 8) == 0;
}

/* Splits the comma-separated Alertmanager list into n->am. */
static int parse_am_urls(struct det_notify *n, const char *list)
{
	const char *p = list ? list : "";
	while (*p) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		const char *s = p;
		p = end ? end + 1 : p + len;
		while (len && (*s == ' ' || *s == '\t'))
			s++, len--;
		while (len && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '/'))
			len--;
		if (!len)
			continue;
		char base[DET_URL_MAX];
		if (len >= sizeof(base) || n->nam == DET_NOTIFY_MAX_AM) {
			rdb_error("notify",
				  "alertmanager_url: '%.*s' refused (at most %d URLs of "
				  "at most %d bytes)",
				  (int)len, s, DET_NOTIFY_MAX_AM, DET_URL_MAX - 1);
			return RDB_EINVAL;
		}
		memcpy(base, s, len);
		base[len] = 0;
		if (!url_ok(base)) {
			rdb_error("notify",
				  "alertmanager_url: '%s' is not an http:// or https:// "
				  "base URL (e.g. http://127.0.0.1:9093)",
				  base);
			return RDB_EINVAL;
		}
		struct rcv *r = &n->am[n->nam++];
		r->kind = DET_NOTIFY_AM;
		r->used = true;
		snprintf(r->url, sizeof(r->url), "%s/api/v2/alerts", base);
	}
	return 0;
}

static void apply_defaults(struct det_notify_options *o)
{
#define DEF(field, v)                                                                              \
	do {                                                                                       \
		if (!o->field)                                                                     \
			o->field = (v);                                                            \
	} while (0)
	DEF(resend_interval_s, 60);
	DEF(eval_interval_ms, 1000);
	DEF(connect_timeout_ms, 3000);
	DEF(timeout_ms, 10000);
	DEF(max_queue, 4096);
	DEF(max_batch, 64);
	DEF(max_webhooks, 64);
	DEF(retry_min_ms, 500);
	DEF(retry_max_ms, 30000);
	DEF(max_attempts, 10);
	DEF(max_age_s, 600);
	DEF(drain_timeout_ms, 2000);
#undef DEF
	if (o->retry_max_ms < o->retry_min_ms)
		o->retry_max_ms = o->retry_min_ms;
}

/* ---- queueing (caller threads) ------------------------------------------------ */

static struct rcv *webhook_rcv(struct det_notify *n, const char *url, int64_t now)
{
	struct rcv *fresh = NULL, *lru = NULL;
	for (uint32_t i = 0; i < n->o.max_webhooks; i++) {
		struct rcv *r = &n->wh[i];
		if (!r->used) {
			fresh = fresh ? fresh : r;
			continue;
		}
		if (strcmp(r->url, url) == 0)
			return r;
		if (!r->busy && r->wait.n == 0 &&
		    (!lru || r->last_use_mono_ns < lru->last_use_mono_ns))
			lru = r;
	}
	struct rcv *r =
	    fresh ? fresh : lru; /* an unused slot, or the idle one used least recently */
	if (!r)
		return NULL;
	r->used = true;
	r->kind = DET_NOTIFY_WEBHOOK;
	snprintf(r->url, sizeof(r->url), "%s", url);
	r->failures = 0;
	r->next_try_mono_ns = 0;
	r->last_use_mono_ns = now;
	return r;
}

/* Makes room for one more item: evicts the oldest waiting one. */
static int make_room(struct det_notify *n)
{
	if (n->held < n->o.max_queue)
		return 0;
	struct item *old = n->ghead;
	while (old && old->in_flight)
		old = old->gnext;
	if (!old)
		return RDB_ELIMIT;
	n->st.dropped_full[old->r->kind]++;
	rdb_log_limited(&n->dropped_rl, 60, RDB_LOG_WARN, "notify",
			"delivery queue full (%u): oldest alert for %s dropped to make room "
			"(%llu dropped in total for this kind of receiver)",
			n->o.max_queue, old->r->url,
			(unsigned long long)n->st.dropped_full[old->r->kind]);
	unwait(old);
	g_free(n, old);
	return 0;
}

/* Queues a copy of json for r (lock held). */
static int enqueue(struct det_notify *n, struct rcv *r, const struct det_alert *al,
		   const char *json, size_t len, int64_t now)
{
	r->last_use_mono_ns = now;
	struct item *it =
	    r->kind == DET_NOTIFY_AM && al->id ? rdb_map_get(&r->by_id, al->id) : NULL;
	char *copy = malloc(len + 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, json, len + 1);
	if (it) { /* a newer state of a waiting alert: replace it in place */
		free(it->json);
		it->json = copy;
		it->len = len;
		it->attempts = 0;
		it->enq_mono_ns = now;
		n->st.coalesced[r->kind]++;
		n->st.queued[r->kind]++;
		return 0;
	}
	int rc = make_room(n);
	it = rc ? NULL : calloc(1, sizeof(*it));
	if (!it) {
		free(copy);
		return rc ? rc : -ENOMEM;
	}
	it->r = r;
	it->alert_id = al->id;
	it->enq_mono_ns = now;
	it->json = copy;
	it->len = len;
	il_push_tail(&r->wait, it);
	g_push(n, it);
	if (coalesces(it))
		(void)rdb_map_put(&r->by_id, it->alert_id, it); /* no memory: no coalescing */
	n->st.queued[r->kind]++;
	return 0;
}

static void count_refused(struct det_notify *n, const char *url, int rc)
{
	n->st.refused++;
	rdb_log_limited(&n->refused_rl, 60, RDB_LOG_WARN, "notify",
			"alert not queued for %s: %s (%llu refused in total)", url,
			rc == RDB_ELIMIT
			    ? "queue full of requests in flight, or too many webhook URLs"
			    : rdb_strerror(rc),
			(unsigned long long)n->st.refused);
}

static int render(struct det_notify *n, const struct det_alert *al, int64_t now_ns, bool webhook,
		  struct rdb_buf *b)
{
	rdb_buf_init(b, DET_NOTIFY_ITEM_MAX);
	int rc =
	    webhook ? det_fmt_webhook(&n->fmt, al, now_ns, b) : det_fmt_am(&n->fmt, al, now_ns, b);
	if (rc == 0)
		rc = rdb_buf_putc(b, 0);
	if (rc) {
		rdb_buf_free(b);
		return rc;
	}
	b->len--; /* keep the NUL out of the length */
	return 0;
}

static int queue_alert(struct det_notify *n, const struct det_alert *al, int64_t now_ns,
		       bool webhooks)
{
	if (al->state != DET_ALERT_FIRING && al->state != DET_ALERT_RESOLVED)
		return RDB_EINVAL;
	uint32_t nwh = webhooks ? al->c.nwebhooks : 0;
	if (nwh > DET_WEBHOOKS_MAX)
		nwh = DET_WEBHOOKS_MAX;
	if (n->nam == 0 && nwh == 0)
		return 0;
	struct rdb_buf am = {0}, wh = {0};
	int rc = 0, first = 0;
	if (n->nam)
		rc = render(n, al, now_ns, false, &am);
	if (nwh && rc == 0)
		rc = render(n, al, now_ns, true, &wh);
	int64_t now = rdb_now_mono_ns();
	pthread_mutex_lock(&n->mu);
	if (rc) { /* cannot happen for documents within cond.h's bounds */
		count_refused(n, al->c.alertname, rc);
		goto out;
	}
	for (size_t i = 0; i < n->nam; i++) {
		rc = enqueue(n, &n->am[i], al, (const char *)am.data, am.len, now);
		if (rc) {
			count_refused(n, n->am[i].url, rc);
			first = first ? first : rc;
		}
	}
	for (uint32_t i = 0; i < nwh; i++) {
		char url[DET_URL_MAX];
		snprintf(url, sizeof(url), "%s", al->c.webhooks[i]);
		struct rcv *r = url_ok(url) ? webhook_rcv(n, url, now) : NULL;
		rc = r ? enqueue(n, r, al, (const char *)wh.data, wh.len, now)
		       : (url_ok(url) ? RDB_ELIMIT : RDB_EINVAL);
		if (rc) {
			count_refused(n, url, rc);
			first = first ? first : rc;
		}
	}
	rc = first;
out:
	pthread_mutex_unlock(&n->mu);
	curl_multi_wakeup(n->multi);
	rdb_buf_free(&am);
	rdb_buf_free(&wh);
	return rc;
}

int det_notify_send(struct det_notify *n, const struct det_alert *al, int64_t now_ns)
{
	return queue_alert(n, al, now_ns, true);
}

int det_notify_resend(struct det_notify *n, const struct det_alert *al, int64_t now_ns)
{
	return queue_alert(n, al, now_ns, false);
}

/* ---- the sender thread ---------------------------------------------------------- */

static uint64_t rng_next(struct det_notify *n)
{
	uint64_t x = n->rng; /* xorshift64* */
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	n->rng = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* Backoff after the failures-th consecutive failed request: retry_min_ms
 * doubling up to retry_max_ms, of which a random half ("equal jitter"). */
static int64_t backoff_ns(struct det_notify *n, uint32_t failures)
{
	int64_t cap = (int64_t)n->o.retry_max_ms * MS, b = (int64_t)n->o.retry_min_ms * MS;
	for (uint32_t i = 1; i < failures && b < cap; i++)
		b *= 2;
	if (b > cap)
		b = cap;
	return b / 2 + (int64_t)(rng_next(n) % (uint64_t)(b / 2 + 1));
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *arg)
{
	struct rcv *r = arg;
	size_t len = size * nmemb, room = sizeof(r->resp) - 1 - r->resp_len;
	size_t k = len < room ? len : room;
	memcpy(r->resp + r->resp_len, p, k);
	r->resp_len += k;
	r->resp[r->resp_len] = 0;
	return len; /* the rest of a long answer is read and ignored */
}

static CURL *new_easy(struct det_notify *n, struct rcv *r)
{
	CURL *e = curl_easy_init();
	if (!e)
		return NULL;
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)n->o.connect_timeout_ms);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)n->o.timeout_ms);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, n->headers);
	curl_easy_setopt(e, CURLOPT_USERAGENT, "rankdb");
	curl_easy_setopt(e, CURLOPT_POST, 1L);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
	curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)r);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
#else
	curl_easy_setopt(e, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	return e;
}

/* Puts the items of r's request back at the head of its FIFO, in order. */
static void requeue_flight(struct rcv *r)
{
	struct item *it;
	while ((it = r->flight.tail)) {
		il_remove(&r->flight, it);
		it->in_flight = false;
		il_push_head(&r->wait, it);
		if (coalesces(it))
			(void)rdb_map_put(&r->by_id, it->alert_id, it);
	}
}

static void give_up_aged(struct det_notify *n, struct item *it, int64_t now)
{
	struct rcv *r = it->r;
	n->st.failed[r->kind]++;
	rdb_log_limited(&r->rl, 10, RDB_LOG_WARN, "notify",
			"alert for %s given up: undelivered for %lld s (max_age_s %u), after %u "
			"failed attempts",
			r->url, (long long)((now - it->enq_mono_ns) / (1000 * MS)), n->o.max_age_s,
			it->attempts);
	g_free(n, it);
}

/* Takes up to a batch of r's waiting items into one request (lock held). */
static void start_one(struct det_notify *n, struct rcv *r, int64_t now)
{
	bool am = r->kind == DET_NOTIFY_AM;
	size_t max = am ? n->o.max_batch : 1;
	int64_t max_age = (int64_t)n->o.max_age_s * 1000 * MS;
	struct item *it;
	int rc = 0;
	r->body.len = 0;
	while (r->flight.n < max && (it = r->wait.head)) {
		unwait(it);
		if (now - it->enq_mono_ns >= max_age) {
			give_up_aged(n, it, now);
			continue;
		}
		it->in_flight = true;
		il_push_tail(&r->flight, it);
	}
	if (r->flight.n == 0)
		return;
	if (am)
		rc = rdb_buf_putc(&r->body, '[');
	for (it = r->flight.head; it && rc == 0; it = it->rnext) {
		if (it != r->flight.head)
			rc = rdb_buf_putc(&r->body, ',');
		if (rc == 0)
			rc = rdb_buf_append(&r->body, it->json, it->len);
	}
	if (am && rc == 0)
		rc = rdb_buf_putc(&r->body, ']');
	if (rc == 0 && !r->easy && !(r->easy = new_easy(n, r)))
		rc = -ENOMEM;
	if (rc == 0) {
		curl_easy_setopt(r->easy, CURLOPT_URL, r->url);
		curl_easy_setopt(r->easy, CURLOPT_POSTFIELDS, (char *)r->body.data);
		curl_easy_setopt(r->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body.len);
		r->resp_len = 0;
		r->resp[0] = 0;
		r->errbuf[0] = 0;
		if (curl_multi_add_handle(n->multi, r->easy) != CURLM_OK)
			rc = -ENOMEM;
	}
	if (rc) { /* out of memory: try again later */
		requeue_flight(r);
		r->next_try_mono_ns = now + backoff_ns(n, 1);
		rdb_log_limited(&r->rl, 10, RDB_LOG_WARN, "notify",
				"request to %s not started: %s; retried later", r->url,
				rdb_strerror(rc));
		return;
	}
	r->busy = true;
	n->st.requests[r->kind]++;
}

/* Starts a request for every receiver that has waiting items and is not in
 * flight or backing off. Returns the earliest backoff end still ahead
 * (monotonic ns), or INT64_MAX. Lock held. */
static int64_t start_requests(struct det_notify *n, int64_t now)
{
	int64_t wake = INT64_MAX;
	size_t total = n->nam + n->o.max_webhooks;
	for (size_t i = 0; i < total; i++) {
		struct rcv *r = i < n->nam ? &n->am[i] : &n->wh[i - n->nam];
		if (!r->used || r->busy || r->wait.n == 0)
			continue;
		if (now < r->next_try_mono_ns) {
			if (r->next_try_mono_ns < wake)
				wake = r->next_try_mono_ns;
			continue;
		}
		start_one(n, r, now);
	}
	return wake;
}

static void describe_failure(const struct rcv *r, CURLcode res, long code, char *out, size_t size)
{
	if (res != CURLE_OK)
		snprintf(out, size, "%s%s%s", curl_easy_strerror(res), r->errbuf[0] ? ": " : "",
			 r->errbuf);
	else
		snprintf(out, size, "HTTP %ld answer: %.160s", code, r->resp);
}

/* Records the outcome of r's request (lock held). */
static void finish(struct det_notify *n, struct rcv *r, CURLcode res, long code, int64_t now)
{
	uint8_t kind = r->kind;
	size_t k = r->flight.n, retried = 0, failed = 0;
	struct item *it;
	r->busy = false;
	if (res == CURLE_OK && code >= 200 && code < 300) {
		if (r->failures)
			rdb_info("notify", "%s accepts alerts again after %u failed requests",
				 r->url, r->failures);
		r->failures = 0;
		r->next_try_mono_ns = 0;
		while ((it = r->flight.head)) {
			il_remove(&r->flight, it);
			n->st.sent[kind]++;
			g_free(n, it);
		}
		return;
	}
	bool retryable = res != CURLE_OK || code >= 500 || code == 408 || code == 429;
	int64_t delay_ns = 0, max_age = (int64_t)n->o.max_age_s * 1000 * MS;
	n->st.attempts_failed[kind] += k;
	if (retryable) {
		r->failures++;
		delay_ns = backoff_ns(n, r->failures);
		r->next_try_mono_ns = now + delay_ns;
	}
	while ((it = r->flight.tail)) { /* from the tail: the head keeps its order */
		il_remove(&r->flight, it);
		it->in_flight = false;
		it->attempts++;
		if (!retryable || it->attempts >= n->o.max_attempts ||
		    now - it->enq_mono_ns >= max_age) {
			n->st.failed[kind]++;
			failed++;
			g_free(n, it);
		} else if (coalesces(it) && rdb_map_get(&r->by_id, it->alert_id)) {
			n->st.coalesced[kind]++; /* a newer state of it is waiting */
			g_free(n, it);
		} else {
			il_push_head(&r->wait, it);
			if (coalesces(it))
				(void)rdb_map_put(&r->by_id, it->alert_id, it);
			n->st.retried[kind]++;
			retried++;
		}
	}
	char why[300];
	describe_failure(r, res, code, why, sizeof(why));
	rdb_log_limited(&r->rl, 10, RDB_LOG_WARN, "notify",
			"POST %s failed: %s; %zu alert(s) will be retried in %lld ms, %zu given up "
			"(%s; %u consecutive failures)",
			r->url, why, retried, (long long)(delay_ns / MS), failed,
			retryable ? "after max_attempts or max_age_s" : "the receiver rejects them",
			r->failures);
}

/* Records every finished request; returns how many there were. */
static int collect_done(struct det_notify *n)
{
	CURLMsg *m;
	int left, done = 0;
	while ((m = curl_multi_info_read(n->multi, &left))) {
		if (m->msg != CURLMSG_DONE)
			continue;
		CURL *e = m->easy_handle;
		CURLcode res = m->data.result; /* m is invalid after remove_handle */
		char *priv = NULL;
		long code = 0;
		curl_easy_getinfo(e, CURLINFO_PRIVATE, &priv);
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
		curl_multi_remove_handle(n->multi, e);
		pthread_mutex_lock(&n->mu);
		finish(n, (struct rcv *)priv, res, code, rdb_now_mono_ns());
		pthread_mutex_unlock(&n->mu);
		done++;
	}
	return done;
}

/* At exit: aborts requests in flight and drops what is left (lock held). */
static void abort_all(struct det_notify *n)
{
	size_t total = n->nam + n->o.max_webhooks, dropped = 0;
	for (size_t i = 0; i < total; i++) {
		struct rcv *r = i < n->nam ? &n->am[i] : &n->wh[i - n->nam];
		if (r->busy)
			curl_multi_remove_handle(n->multi, r->easy);
		r->busy = false;
		r->wait = (struct ilist){0};
		r->flight = (struct ilist){0};
		rdb_map_free(&r->by_id);
		r->by_id = (struct rdb_map)RDB_MAP_INIT;
	}
	while (n->ghead) {
		n->st.dropped_shutdown[n->ghead->r->kind]++;
		dropped++;
		g_free(n, n->ghead);
	}
	if (dropped)
		rdb_warn("notify",
			 "shutting down with %zu alert deliveries undelivered after the "
			 "%u ms drain; receivers down or slow (see earlier lines)",
			 dropped, n->o.drain_timeout_ms);
}

static int poll_timeout_ms(const struct det_notify *n, int64_t wake, int64_t now)
{
	int64_t until = wake;
	if (n->stopping && n->drain_deadline_mono_ns < until)
		until = n->drain_deadline_mono_ns;
	if (until == INT64_MAX)
		return 1000;
	int64_t ms = (until - now + MS - 1) / MS;
	return ms < 0 ? 0 : (ms > 1000 ? 1000 : (int)ms);
}

static void *sender_main(void *arg)
{
	struct det_notify *n = arg;
	pthread_setname_np(pthread_self(), "rdb-notify");
	pthread_mutex_lock(&n->mu);
	for (;;) {
		int64_t now = rdb_now_mono_ns();
		if (n->stopping && (n->held == 0 || now >= n->drain_deadline_mono_ns))
			break;
		int64_t wake = start_requests(n, now);
		int timeout_ms = poll_timeout_ms(n, wake, now);
		pthread_mutex_unlock(&n->mu);
		int running = 0;
		curl_multi_perform(n->multi, &running);
		/* A finished request changes what to start and when: loop at once
		 * rather than sleep on a timeout computed before it. */
		if (collect_done(n) == 0 &&
		    curl_multi_poll(n->multi, NULL, 0, timeout_ms, NULL) != CURLM_OK) {
			struct timespec ts = {0, 10 * 1000000L}; /* never spin on a broken poll */
			nanosleep(&ts, NULL);
		}
		pthread_mutex_lock(&n->mu);
	}
	abort_all(n);
	pthread_mutex_unlock(&n->mu);
	return NULL;
}

/* ---- lifecycle ------------------------------------------------------------------- */

static void free_resources(struct det_notify *n)
{
	size_t total = n->nam + (n->wh ? n->o.max_webhooks : 0);
	for (size_t i = 0; i < total; i++) {
		struct rcv *r = i < n->nam ? &n->am[i] : &n->wh[i - n->nam];
		if (r->easy)
			curl_easy_cleanup(r->easy);
		rdb_buf_free(&r->body);
		rdb_map_free(&r->by_id);
	}
	if (n->multi)
		curl_multi_cleanup(n->multi);
	curl_slist_free_all(n->headers);
	free(n->wh);
	free(n);
}

static int init_fmt(struct det_notify *n, const char *generator_url)
{
	const char *g = generator_url ? generator_url : "";
	size_t len = strlen(g);
	while (len && g[len - 1] == '/')
		len--;
	if (len && (len >= sizeof(n->fmt.generator_url) || !url_ok(g))) {
		rdb_error("notify",
			  "generator URL '%s' refused: not an http(s):// URL shorter than "
			  "%d bytes",
			  g, DET_URL_MAX);
		return RDB_EINVAL;
	}
	memcpy(n->fmt.generator_url, g, len);
	n->fmt.generator_url[len] = 0;
	int64_t resend = (int64_t)n->o.resend_interval_s * 1000 * MS;
	int64_t eval = (int64_t)n->o.eval_interval_ms * MS;
	n->fmt.valid_for_ns = 4 * (resend > eval ? resend : eval);
	return 0;
}

int det_notify_new(const struct det_notify_options *o, struct det_notify **out)
{
	if (!global_ready) {
		rdb_error("notify", "det_notify_global_init() was not called at start-up");
		return RDB_EINVAL;
	}
	struct det_notify *n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	if (o)
		n->o = *o;
	n->o.alertmanager_urls = NULL;
	n->o.generator_url = NULL;
	apply_defaults(&n->o);
	int rc = init_fmt(n, o ? o->generator_url : NULL);
	if (rc == 0)
		rc = parse_am_urls(n, o ? o->alertmanager_urls : NULL);
	if (rc)
		goto fail;
	rc = -ENOMEM;
	n->wh = calloc(n->o.max_webhooks, sizeof(*n->wh));
	n->multi = curl_multi_init();
	n->headers = curl_slist_append(NULL, "Content-Type: application/json");
	struct curl_slist *h = n->headers ? curl_slist_append(n->headers, "Expect:") : NULL;
	if (!n->wh || !n->multi || !h)
		goto fail;
	for (size_t i = 0; i < n->nam; i++)
		rdb_buf_init(&n->am[i].body,
			     (size_t)n->o.max_batch * (DET_NOTIFY_ITEM_MAX + 1) + 2);
	for (uint32_t i = 0; i < n->o.max_webhooks; i++)
		rdb_buf_init(&n->wh[i].body, DET_NOTIFY_ITEM_MAX + 1);
	n->rng = (uint64_t)rdb_now_mono_ns() ^ (uint64_t)(uintptr_t)n ^ 0x9E3779B97F4A7C15ULL;
	if (n->rng == 0)
		n->rng = 1;
	rc = -pthread_mutex_init(&n->mu, NULL);
	if (rc)
		goto fail;
	rc = -pthread_create(&n->thread, NULL, sender_main, n);
	if (rc) {
		pthread_mutex_destroy(&n->mu);
		goto fail;
	}
	*out = n;
	return 0;
fail:
	free_resources(n);
	return rc;
}

void det_notify_free(struct det_notify *n)
{
	if (!n)
		return;
	pthread_mutex_lock(&n->mu);
	n->stopping = true;
	int64_t now = rdb_now_mono_ns();
	n->drain_deadline_mono_ns =
	    n->o.drain_timeout_ms == UINT32_MAX ? now : now + (int64_t)n->o.drain_timeout_ms * MS;
	pthread_mutex_unlock(&n->mu);
	curl_multi_wakeup(n->multi);
	pthread_join(n->thread, NULL);
	pthread_mutex_destroy(&n->mu);
	free_resources(n);
}

void det_notify_stats(struct det_notify *n, struct det_notify_stats *out)
{
	pthread_mutex_lock(&n->mu);
	*out = n->st;
	out->depth = n->held;
	out->in_flight = 0;
	for (size_t i = 0; i < n->nam; i++)
		out->in_flight += n->am[i].flight.n;
	for (uint32_t i = 0; i < n->o.max_webhooks; i++)
		out->in_flight += n->wh[i].flight.n;
	pthread_mutex_unlock(&n->mu);
}

static int render_into(const struct det_notify *n, const struct det_alert *al, int64_t now_ns,
		       bool webhook, char *buf, size_t size)
{
	struct rdb_buf b;
	rdb_buf_init(&b, DET_NOTIFY_ITEM_MAX);
	int rc = webhook ? det_fmt_webhook(&n->fmt, al, now_ns, &b)
			 : det_fmt_am(&n->fmt, al, now_ns, &b);
	if (rc == 0 && b.len + 1 > size)
		rc = RDB_ELIMIT;
	if (rc == 0) {
		memcpy(buf, b.data, b.len);
		buf[b.len] = 0;
		rc = (int)b.len;
	}
	rdb_buf_free(&b);
	return rc;
}

int det_notify_render_am(const struct det_notify *n, const struct det_alert *al, int64_t now_ns,
			 char *buf, size_t size)
{
	return render_into(n, al, now_ns, false, buf, size);
}

int det_notify_render_webhook(const struct det_notify *n, const struct det_alert *al,
			      int64_t now_ns, char *buf, size_t size)
{
	return render_into(n, al, now_ns, true, buf, size);
}
