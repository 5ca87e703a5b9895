/* rdbc: the calls a training loop makes, the bounded queue behind them, and
 * the batcher thread that turns queued records into batches.
 *
 * Training thread: rdbc_log/rdbc_message/phase end copy their record into
 * one malloc'ed item and push its pointer into a ring of queue_max_records
 * slots under a mutex held for a few instructions; a full ring drops the
 * item and counts it. No I/O, no formatting, no waiting on the network.
 *
 * Batcher thread ("rdbc-batcher"): takes items in bulk, validates and
 * encodes them as NDJSON records of POST /api/v1/write (what the server
 * would refuse — bad metric names, invalid UTF-8 — is dropped or repaired
 * and counted, so one bad value never costs a batch), seals a batch at
 * batch_max_bytes or flush_interval_ms, names it
 * "c1.<job hash>.r<rank>.a<attempt>.<session>.<seq>" (fixed for its life,
 * so every resend is recognised by the server) and hands it to the sender
 * (rdbc_send.c). It also writes the heartbeat every heartbeat_ms: it never
 * waits for the network, so heartbeats keep their times while the
 * training thread hangs or the server is slow.
 *
 * Failure: only counters (rdbc_get_stats) and rate-limited lines on stderr.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "rdbc_int.h"

enum { ITEM_METRICS, ITEM_LOG, ITEM_SPAN, ITEM_FLUSH };

struct item {
	uint8_t kind;
	uint8_t level;
	uint32_t n;	/* metrics: values; log/span: text bytes */
	int64_t ts_ns;	/* metrics/log; span: start */
	int64_t step;	/* RDBC_NO_STEP: none */
	int64_t dur_ns; /* span */
	uint64_t flush_seq;
	char data[]; /* metrics: n doubles then n NUL-terminated names; else the text + NUL */
};

struct phase_open {
	char name[RDBC_PHASE_NAME_MAX + 1];
	int64_t t0_mono, t0_wall;
};

struct phase_total {
	char name[RDBC_PHASE_NAME_MAX + 1];
	int64_t total_ns;
};

struct rdbc {
	char *url, *job, *spool_dir, *udp_addr;
	int rank, world_size, local_rank, attempt;
	uint64_t config_hash;
	size_t batch_max_bytes;
	uint32_t flush_interval_ms, heartbeat_ms;
	char session[40];
	char id_prefix[80];
	char rec_prefix[200]; /* {"job":"..","rank":R,"attempt":A */
	int64_t start_wall_ns;

	/* queue */
	pthread_mutex_t qlock;
	pthread_cond_t qcond, flushed;
	struct item **ring;
	size_t qcap, qhead, qlen;
	uint64_t dropped_queue, flush_req, flush_done;
	bool stop;

	/* training thread */
	_Atomic int64_t step;
	int64_t step_start_mono; /* -1: not started */
	struct phase_open open[RDBC_PHASE_DEPTH];
	unsigned depth;
	struct phase_total totals[RDBC_PHASES_MAX];
	unsigned ntotals;

	/* batcher thread */
	pthread_t batcher;
	struct rdbc_sender *sender;
	struct rdbc_spool *spool;
	uint64_t seq;
	_Atomic uint64_t dropped_invalid, sealed;
	char *buf;
	size_t blen, bcap, brec;
	int64_t bfirst_mono;
};

/* ---- helpers -------------------------------------------------------------------- */

int64_t rdbc_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t rdbc_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static pthread_mutex_t warn_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	uint32_t key;
	int64_t last_ns;
} warn_seen[64];

static uint32_t fnv1a(const char *s, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 16777619u;
	return h;
}

void rdbc_warn(const char *key, const char *fmt, ...)
{
	uint32_t k = fnv1a(key, strlen(key));
	int64_t now = rdbc_mono_ns();
	bool say = true;
	pthread_mutex_lock(&warn_lock);
	unsigned slot = k % 64;
	if (warn_seen[slot].key == k && warn_seen[slot].last_ns &&
	    now - warn_seen[slot].last_ns < 60000000000)
		say = false;
	else
		warn_seen[slot].key = k, warn_seen[slot].last_ns = now;
	pthread_mutex_unlock(&warn_lock);
	if (!say || getenv("RDBC_QUIET"))
		return;
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int env_int(const char *const *names, int def)
{
	for (; *names; names++) {
		const char *v = getenv(*names);
		char *end;
		if (!v || !*v)
			continue;
		long x = strtol(v, &end, 10);
		if (*end == 0 && x >= 0 && x <= 0x7fffffff)
			return (int)x;
	}
	return def;
}

void rdbc_opts_default(struct rdbc_opts *o)
{
	static const char *const rank[] = {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", NULL};
	static const char *const world[] = {"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE",
					    NULL};
	static const char *const local[] = {"LOCAL_RANK", "SLURM_LOCALID", NULL};
	static const char *const attempt[] = {"TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT",
					      NULL};
	memset(o, 0, sizeof(*o));
	o->url = getenv("RANKDB_URL") && *getenv("RANKDB_URL") ? getenv("RANKDB_URL")
							       : "http://127.0.0.1:7461";
	o->job = getenv("RANKDB_JOB");
	if (!o->job || !*o->job) {
		const char *r = getenv("TORCHELASTIC_RUN_ID");
		o->job = r && *r && strcmp(r, "none") != 0 ? r : getenv("SLURM_JOB_ID");
	}
	o->rank = env_int(rank, 0);
	o->world_size = env_int(world, 1);
	o->local_rank = env_int(local, 0);
	o->attempt = env_int(attempt, 0);
	o->spool_dir = getenv("RANKDB_SPOOL_DIR");
	o->udp_key_id = getenv("RANKDB_UDP_KEY_ID");
	o->udp_key_secret = getenv("RANKDB_UDP_KEY_SECRET");
	o->queue_max_records = 100000;
	o->batch_max_bytes = 1u << 20;
	o->flush_interval_ms = 1000;
	o->heartbeat_ms = 5000;
	o->http_timeout_ms = 10000;
	o->backoff_max_ms = 30000;
	o->spool_max_bytes = 256ull << 20;
	o->mem_max_bytes = 16u << 20;
}

static bool name_ok(const char *s, size_t *len)
{
	size_t n = 0;
	for (; s[n]; n++) {
		unsigned char ch = (unsigned char)s[n];
		if (ch < 0x21 || ch > 0x7e || ch == '"' || ch == ',' || ch == '\\' || ch == '{' ||
		    ch == '}' || n >= RDBC_NAME_MAX)
			return false;
	}
	*len = n;
	return n > 0;
}

/* ---- the queue (any thread) ---------------------------------------------------------- */

static int enqueue(struct rdbc *c, struct item *it, bool force)
{
	int rc = 0;
	pthread_mutex_lock(&c->qlock);
	if ((c->qlen == c->qcap && !force) || c->stop) {
		c->dropped_queue++;
		rc = -ENOSPC;
	} else if (c->qlen == c->qcap) { /* a flush marker replaces nothing: wait for room */
		rc = -ENOSPC;
	} else {
		c->ring[(c->qhead + c->qlen) % c->qcap] = it;
		c->qlen++;
		if (c->qlen == c->qcap / 2 || it->kind == ITEM_FLUSH)
			pthread_cond_signal(&c->qcond);
	}
	pthread_mutex_unlock(&c->qlock);
	if (rc)
		free(it);
	return rc;
}

int rdbc_log(struct rdbc *c, int64_t step, const struct rdbc_kv *kv, size_t n)
{
	if (!c || !kv || n == 0 || n > 65536)
		return -EINVAL;
	size_t names = 0;
	for (size_t i = 0; i < n; i++)
		names += (kv[i].name ? strlen(kv[i].name) : 0) + 1;
	struct item *it = malloc(sizeof(*it) + n * sizeof(double) + names);
	if (!it)
		return -ENOMEM;
	it->kind = ITEM_METRICS;
	it->n = (uint32_t)n;
	it->ts_ns = rdbc_now_ns();
	it->step =
	    step == RDBC_NO_STEP ? atomic_load_explicit(&c->step, memory_order_relaxed) : step;
	char *p = it->data + n * sizeof(double);
	for (size_t i = 0; i < n; i++) {
		memcpy(it->data + i * sizeof(double), &kv[i].value, sizeof(double));
		size_t l = kv[i].name ? strlen(kv[i].name) : 0;
		memcpy(p, kv[i].name ? kv[i].name : "", l + 1);
		p += l + 1;
	}
	return enqueue(c, it, false);
}

int rdbc_log1(struct rdbc *c, int64_t step, const char *name, double value)
{
	struct rdbc_kv kv = {name, value};
	return rdbc_log(c, step, &kv, 1);
}

static int put_text(struct rdbc *c, int kind, int level, int64_t step, int64_t ts, int64_t dur,
		    const char *text)
{
	size_t l = strlen(text);
	if (l > RDBC_MSG_MAX)
		l = RDBC_MSG_MAX;
	struct item *it = malloc(sizeof(*it) + l + 1);
	if (!it)
		return -ENOMEM;
	it->kind = (uint8_t)kind;
	it->level = (uint8_t)level;
	it->n = (uint32_t)l;
	it->ts_ns = ts;
	it->step = step;
	it->dur_ns = dur;
	memcpy(it->data, text, l);
	it->data[l] = 0;
	return enqueue(c, it, false);
}

int rdbc_message(struct rdbc *c, enum rdbc_level level, int64_t step, const char *msg)
{
	if (!c || !msg || (unsigned)level > RDBC_FATAL)
		return -EINVAL;
	if (step == RDBC_NO_STEP)
		step = atomic_load_explicit(&c->step, memory_order_relaxed);
	return put_text(c, ITEM_LOG, (int)level, step, rdbc_now_ns(), 0, msg);
}

/* ---- phases and steps (the training thread) -------------------------------------------- */

int rdbc_phase_begin(struct rdbc *c, const char *name)
{
	size_t l;
	if (!c || !name || c->depth >= RDBC_PHASE_DEPTH || !name_ok(name, &l) ||
	    l > RDBC_PHASE_NAME_MAX)
		return -EINVAL;
	struct phase_open *p = &c->open[c->depth++];
	memcpy(p->name, name, l + 1);
	p->t0_wall = rdbc_now_ns();
	p->t0_mono = rdbc_mono_ns();
	if (c->step_start_mono < 0)
		c->step_start_mono = p->t0_mono;
	return 0;
}

int rdbc_phase_end(struct rdbc *c)
{
	if (!c || c->depth == 0)
		return -EINVAL;
	struct phase_open *p = &c->open[--c->depth];
	int64_t dur = rdbc_mono_ns() - p->t0_mono;
	unsigned i;
	for (i = 0; i < c->ntotals && strcmp(c->totals[i].name, p->name) != 0; i++)
		;
	if (i == c->ntotals && i < RDBC_PHASES_MAX) {
		memcpy(c->totals[i].name, p->name, sizeof(p->name));
		c->totals[i].total_ns = 0;
		c->ntotals++;
	}
	if (i < c->ntotals)
		c->totals[i].total_ns += dur;
	return put_text(c, ITEM_SPAN, 0, atomic_load_explicit(&c->step, memory_order_relaxed),
			p->t0_wall, dur, p->name);
}

int rdbc_step_done(struct rdbc *c, int64_t step, double tokens)
{
	if (!c)
		return -EINVAL;
	struct rdbc_kv kv[RDBC_PHASES_MAX + 2];
	char names[RDBC_PHASES_MAX][RDBC_PHASE_NAME_MAX + 12];
	size_t n = 0;
	int64_t now = rdbc_mono_ns();
	if (step == RDBC_NO_STEP)
		step = atomic_load_explicit(&c->step, memory_order_relaxed);
	if (c->step_start_mono >= 0) {
		double secs = (double)(now - c->step_start_mono) / 1e9;
		kv[n++] = (struct rdbc_kv){"step_time", secs};
		if (tokens > 0 && secs > 0)
			kv[n++] = (struct rdbc_kv){"tokens_per_sec", tokens / secs};
	}
	for (unsigned i = 0; i < c->ntotals; i++) {
		snprintf(names[i], sizeof(names[i]), "step_time.%s", c->totals[i].name);
		kv[n++] = (struct rdbc_kv){names[i], (double)c->totals[i].total_ns / 1e9};
	}
	c->ntotals = 0;
	c->step_start_mono = now;
	atomic_store_explicit(&c->step, step + 1, memory_order_relaxed);
	return n ? rdbc_log(c, step, kv, n) : 0;
}

void rdbc_set_step(struct rdbc *c, int64_t step)
{
	if (c && step >= 0)
		atomic_store_explicit(&c->step, step, memory_order_relaxed);
}

/* ---- encoding (the batcher thread) ------------------------------------------------------ */

static bool reserve(struct rdbc *c, size_t more)
{
	if (c->blen + more + 1 <= c->bcap)
		return true;
	size_t ncap = c->bcap ? c->bcap : 65536;
	while (ncap < c->blen + more + 1)
		ncap *= 2;
	char *nb = realloc(c->buf, ncap);
	if (!nb)
		return false;
	c->buf = nb;
	c->bcap = ncap;
	return true;
}

static void put(struct rdbc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct rdbc *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !reserve(c, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(c->buf + c->blen, (size_t)n + 1, fmt, ap);
	va_end(ap);
	c->blen += (size_t)n;
}

static size_t utf8_len(const unsigned char *s, size_t left)
{
	unsigned char ch = s[0];
	size_t n = ch >= 0xf0 && ch <= 0xf4 ? 4 : ch >= 0xe0 ? 3 : ch >= 0xc2 && ch < 0xe0 ? 2 : 0;
	if (n == 0 || n > left)
		return 0;
	for (size_t i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if ((ch == 0xe0 && s[1] < 0xa0) || (ch == 0xed && s[1] >= 0xa0) ||
	    (ch == 0xf0 && s[1] < 0x90) || (ch == 0xf4 && s[1] >= 0x90))
		return 0; /* overlong, surrogate, beyond U+10FFFF */
	return n;
}

/* A JSON string of valid UTF-8: invalid bytes become '?'. */
static void put_str(struct rdbc *c, const char *s, size_t len)
{
	if (!reserve(c, len * 6 + 2))
		return;
	char *o = c->buf + c->blen;
	*o++ = '"';
	for (size_t i = 0; i < len;) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == '"' || ch == '\\') {
			*o++ = '\\';
			*o++ = (char)ch;
			i++;
		} else if (ch < 0x20) {
			static const char hex[] = "0123456789abcdef";
			memcpy(o, "\\u00", 4);
			o[4] = hex[ch >> 4];
			o[5] = hex[ch & 15];
			o += 6;
			i++;
		} else if (ch < 0x80) {
			*o++ = (char)ch;
			i++;
		} else {
			size_t n = utf8_len((const unsigned char *)s + i, len - i);
			if (n == 0) {
				*o++ = '?';
				i++;
			} else {
				memcpy(o, s + i, n);
				o += n;
				i += n;
			}
		}
	}
	*o++ = '"';
	c->blen = (size_t)(o - c->buf);
}

static void put_num(struct rdbc *c, double v)
{
	if (isnan(v))
		put(c, "NaN");
	else if (isinf(v))
		put(c, v > 0 ? "Infinity" : "-Infinity");
	else
		put(c, "%.17g", v);
}

static void put_head(struct rdbc *c, const char *type, int64_t ts, int64_t step)
{
	put(c, "%s", c->rec_prefix);
	if (type)
		put(c, ",\"type\":\"%s\"", type);
	if (ts)
		put(c, ",\"timestamp\":%" PRId64, ts);
	if (step != RDBC_NO_STEP && step >= 0)
		put(c, ",\"step\":%" PRId64, step);
}

static void encode_metrics(struct rdbc *c, const struct item *it)
{
	const char *name = it->data + (size_t)it->n * sizeof(double);
	size_t in_rec = 0;
	for (uint32_t i = 0; i < it->n; i++) {
		size_t l;
		double v;
		memcpy(&v, it->data + (size_t)i * sizeof(double), sizeof(v));
		const char *nm = name;
		name += strlen(name) + 1;
		if (!name_ok(nm, &l)) {
			atomic_fetch_add(&c->dropped_invalid, 1);
			rdbc_warn(nm,
				  "rankdb: metric name \"%.64s\" is not 1..256 printable ASCII "
				  "characters "
				  "without space, quote, comma, backslash or braces; dropped",
				  nm);
			continue;
		}
		if (in_rec == RDBC_METRICS_PER_RECORD) {
			put(c, "}}\n");
			c->brec++;
			in_rec = 0;
		}
		if (in_rec == 0) {
			put_head(c, NULL, it->ts_ns, it->step);
			put(c, ",\"metrics\":{");
		}
		put(c, "%s", in_rec ? "," : "");
		put_str(c, nm, l);
		put(c, ":");
		put_num(c, v);
		in_rec++;
	}
	if (in_rec) {
		put(c, "}}\n");
		c->brec++;
	}
}

static void encode(struct rdbc *c, const struct item *it)
{
	static const char *const levels[] = {"debug", "info", "warn", "error", "fatal"};
	size_t l;
	if (c->brec == 0)
		c->bfirst_mono = rdbc_mono_ns();
	switch (it->kind) {
	case ITEM_METRICS:
		encode_metrics(c, it);
		return;
	case ITEM_LOG:
		put_head(c, "log", it->ts_ns, it->step);
		put(c, ",\"level\":\"%s\",\"message\":", levels[it->level]);
		put_str(c, it->data, it->n);
		put(c, "}\n");
		c->brec++;
		return;
	case ITEM_SPAN:
		if (!name_ok(it->data, &l) || it->step < 0) {
			atomic_fetch_add(&c->dropped_invalid, 1);
			return;
		}
		put(c, "%s,\"type\":\"span\",\"step\":%" PRId64 ",\"name\":", c->rec_prefix,
		    it->step);
		put_str(c, it->data, l);
		put(c, ",\"start\":%" PRId64 ",\"duration_ns\":%" PRId64 "}\n", it->ts_ns,
		    it->dur_ns > 0 ? it->dur_ns : 0);
		c->brec++;
		return;
	}
}

static void seal(struct rdbc *c)
{
	if (c->brec == 0)
		return;
	struct rdbc_batch *b = malloc(sizeof(*b) + c->blen + 1);
	if (!b) {
		rdbc_warn("oom", "rankdb: out of memory sealing a batch of %zu records; dropped",
			  c->brec);
		atomic_fetch_add(&c->dropped_invalid, c->brec);
	} else {
		c->seq++;
		b->seq = c->seq;
		snprintf(b->id, sizeof(b->id), "%s.%" PRIu64, c->id_prefix, c->seq);
		memcpy(b->body, c->buf, c->blen);
		b->body[c->blen] = 0;
		b->len = c->blen;
		b->nrec = c->brec;
		atomic_fetch_add(&c->sealed, 1);
		rdbc_sender_submit(c->sender, b);
	}
	c->blen = 0;
	c->brec = 0;
}

static void heartbeat(struct rdbc *c)
{
	if (c->brec == 0)
		c->bfirst_mono = rdbc_mono_ns();
	put_head(c, NULL, rdbc_now_ns(), atomic_load_explicit(&c->step, memory_order_relaxed));
	put(c, ",\"metrics\":{\"heartbeat\":1}}\n");
	c->brec++;
}

#define TAKE_MAX 1024u

static void *batcher(void *arg)
{
	struct rdbc *c = arg;
	struct item *items[TAKE_MAX];
	int64_t hb_ns = (int64_t)c->heartbeat_ms * 1000000,
		flush_ns = (int64_t)c->flush_interval_ms * 1000000;
	int64_t next_hb = rdbc_mono_ns() + hb_ns;
	for (;;) {
		size_t n = 0;
		bool stop;
		pthread_mutex_lock(&c->qlock);
		if (c->qlen == 0 && !c->stop) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			int64_t abs_ns =
			    (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + flush_ns / 2 + 1000000;
			ts.tv_sec = abs_ns / 1000000000;
			ts.tv_nsec = abs_ns % 1000000000;
			pthread_cond_timedwait(&c->qcond, &c->qlock, &ts);
		}
		while (n < TAKE_MAX && c->qlen) {
			items[n++] = c->ring[c->qhead];
			c->qhead = (c->qhead + 1) % c->qcap;
			c->qlen--;
		}
		stop = c->stop && c->qlen == 0;
		pthread_mutex_unlock(&c->qlock);
		for (size_t i = 0; i < n; i++) {
			if (items[i]->kind == ITEM_FLUSH) {
				seal(c);
				pthread_mutex_lock(&c->qlock);
				c->flush_done = items[i]->flush_seq;
				pthread_cond_broadcast(&c->flushed);
				pthread_mutex_unlock(&c->qlock);
			} else {
				encode(c, items[i]);
				if (c->blen >= c->batch_max_bytes)
					seal(c);
			}
			free(items[i]);
		}
		int64_t now = rdbc_mono_ns();
		if (hb_ns && now >= next_hb && !stop) {
			heartbeat(c);
			next_hb = now + hb_ns;
		}
		if (c->brec && (stop || now - c->bfirst_mono >= flush_ns))
			seal(c);
		if (stop)
			return NULL;
	}
}

/* ---- lifecycle --------------------------------------------------------------------------- */

static char *sanitize_job(const char *job)
{
	if (!job || !*job) {
		rdbc_warn("job",
			  "rankdb: no job id (set RANKDB_JOB or opts.job); using \"default\"");
		job = "default";
	}
	size_t l = strlen(job) > 128 ? 128 : strlen(job);
	char *s = strndup(job, l);
	bool changed = false;
	for (size_t i = 0; s && i < l; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
			s[i] = '_', changed = true;
	if (changed)
		rdbc_warn(
		    "job",
		    "rankdb: job id \"%s\" has characters rankdb does not allow; using \"%s\"", job,
		    s);
	return s;
}

static void send_meta(struct rdbc *c, const char *status)
{
	char path[200], doc[600];
	int n = snprintf(
	    doc, sizeof(doc),
	    "{\"world_size\":%d,\"status\":\"%s\",\"attempt\":%d,\"start_time_ns\":%" PRId64
	    ",\"client\":\"rankdb-c " RDBC_VERSION "\"",
	    c->world_size, status, c->attempt, c->start_wall_ns);
	if (c->config_hash)
		n += snprintf(doc + n, sizeof(doc) - (size_t)n, ",\"config_hash\":%" PRIu64,
			      c->config_hash);
	if (strcmp(status, "running") != 0)
		n += snprintf(doc + n, sizeof(doc) - (size_t)n, ",\"end_time_ns\":%" PRId64,
			      rdbc_now_ns());
	snprintf(doc + n, sizeof(doc) - (size_t)n, "}");
	snprintf(path, sizeof(path), "/api/v1/jobs/%s/meta", c->job);
	rdbc_sender_put_meta(c->sender, path, doc);
}

static void free_client(struct rdbc *c)
{
	for (size_t i = 0; i < c->qlen; i++)
		free(c->ring[(c->qhead + i) % c->qcap]);
	free(c->ring);
	free(c->buf);
	free(c->url);
	free(c->job);
	free(c->spool_dir);
	free(c->udp_addr);
	pthread_cond_destroy(&c->qcond);
	pthread_cond_destroy(&c->flushed);
	pthread_mutex_destroy(&c->qlock);
	free(c);
}

static void queue_start_records(struct rdbc *c)
{
	char host[256] = "?", msg[512];
	struct rdbc_kv kv[2] = {{"world_size", (double)c->world_size},
				{"config_hash", (double)(c->config_hash & ((1ull << 52) - 1))}};
	rdbc_log(c, -1, kv, c->config_hash ? 2 : 1); /* -1: the run's view, no step */
	gethostname(host, sizeof(host) - 1);
	snprintf(msg, sizeof(msg),
		 "rankdb: rank %d of %d on %s (local rank %d, pid %d, attempt %d, C client)",
		 c->rank, c->world_size, host, c->local_rank, (int)getpid(), c->attempt);
	put_text(c, ITEM_LOG, RDBC_INFO, -1, rdbc_now_ns(), 0, msg);
}

int rdbc_open(const struct rdbc_opts *o, struct rdbc **out)
{
	uint32_t rnd = 0;
	int rc;
	if (!o || !out || !o->url || o->rank < 0 || o->world_size < 1 || o->queue_max_records == 0)
		return -EINVAL;
	if (strncmp(o->url, "http://", 7) != 0 && strncmp(o->url, "https://", 8) != 0)
		return -EINVAL;
	struct rdbc *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->qlock, NULL);
	pthread_cond_init(&c->qcond, NULL);
	pthread_cond_init(&c->flushed, NULL);
	c->rank = o->rank;
	c->world_size = o->world_size;
	c->local_rank = o->local_rank;
	c->attempt = o->attempt;
	c->config_hash = o->config_hash & ((1ull << 52) - 1);
	c->batch_max_bytes = o->batch_max_bytes ? o->batch_max_bytes : 1u << 20;
	c->flush_interval_ms = o->flush_interval_ms ? o->flush_interval_ms : 1000;
	c->heartbeat_ms = o->heartbeat_ms;
	c->step_start_mono = -1;
	c->start_wall_ns = rdbc_now_ns();
	c->qcap = o->queue_max_records;
	c->url = strdup(o->url);
	c->job = sanitize_job(o->job);
	c->spool_dir = o->spool_dir && *o->spool_dir ? strdup(o->spool_dir) : NULL;
	c->udp_addr = o->udp_addr && *o->udp_addr ? strdup(o->udp_addr) : NULL;
	c->ring = calloc(c->qcap, sizeof(*c->ring));
	if (!c->url || !c->job || !c->ring || (o->spool_dir && *o->spool_dir && !c->spool_dir) ||
	    (o->udp_addr && *o->udp_addr && !c->udp_addr)) {
		free_client(c);
		return -ENOMEM;
	}
	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		rnd = (uint32_t)rdbc_now_ns() ^ (uint32_t)getpid();
	snprintf(c->session, sizeof(c->session), "%" PRIx64 "%08x", rdbc_now_ns() / 1000000, rnd);
	snprintf(c->id_prefix, sizeof(c->id_prefix), "c1.%08x.r%d.a%d.%s",
		 fnv1a(c->job, strlen(c->job)), c->rank, c->attempt, c->session);
	snprintf(c->rec_prefix, sizeof(c->rec_prefix), "{\"job\":\"%s\",\"rank\":%d,\"attempt\":%d",
		 c->job, c->rank, c->attempt);
	if (c->spool_dir && !c->udp_addr)
		c->spool = rdbc_spool_open(c->spool_dir, c->job, c->rank, c->session,
					   o->spool_max_bytes ? o->spool_max_bytes : 256ull << 20);
	uint8_t key[64];
	size_t key_len = 0;
	bool signing = c->udp_addr && o->udp_key_id && *o->udp_key_id;
	if (signing && (rdbc_hex_decode(o->udp_key_secret, key, sizeof(key), &key_len) != 0 ||
			key_len < 16 || strlen(o->udp_key_id) > 64)) {
		rc = -EINVAL; /* a key that cannot sign: refuse rather than send unsigned */
		goto fail;
	}
	struct rdbc_sender_opts so = {
	    .url = c->url,
	    .udp_addr = c->udp_addr,
	    .udp_key_id = signing ? o->udp_key_id : NULL,
	    .udp_key = key,
	    .udp_key_len = key_len,
	    .timeout_ms = o->http_timeout_ms ? o->http_timeout_ms : 10000,
	    .backoff_max_ms = o->backoff_max_ms ? o->backoff_max_ms : 30000,
	    .mem_max_bytes = o->mem_max_bytes ? o->mem_max_bytes : 16u << 20,
	    .spool = c->spool};
	rc = rdbc_sender_start(&so, &c->sender);
	memset(key, 0, sizeof(key));
	if (rc != 0)
		goto fail;
	rc = -pthread_create(&c->batcher, NULL, batcher, c);
	if (rc != 0) {
		rdbc_sender_stop(c->sender, 0, NULL);
		goto fail;
	}
	queue_start_records(c);
	if (c->rank == 0)
		send_meta(c, "running");
	*out = c;
	return 0;
fail:
	rdbc_spool_close(c->spool);
	free_client(c);
	return rc;
}

int rdbc_flush(struct rdbc *c, uint32_t timeout_ms)
{
	if (!c)
		return -EINVAL;
	int64_t deadline = rdbc_mono_ns() + (int64_t)timeout_ms * 1000000;
	struct item *it = calloc(1, sizeof(*it) + 1);
	if (!it)
		return -ENOMEM;
	it->kind = ITEM_FLUSH;
	pthread_mutex_lock(&c->qlock);
	uint64_t seq = it->flush_seq = ++c->flush_req;
	pthread_mutex_unlock(&c->qlock);
	while (enqueue(c, it, true) != 0) { /* the queue is full: it drains */
		if (rdbc_mono_ns() >= deadline)
			return -ETIMEDOUT;
		usleep(1000);
		if (!(it = calloc(1, sizeof(*it) + 1)))
			return -ENOMEM;
		it->kind = ITEM_FLUSH;
		it->flush_seq = seq;
	}
	pthread_mutex_lock(&c->qlock);
	while (c->flush_done < seq && rdbc_mono_ns() < deadline) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 10000000;
		if (ts.tv_nsec >= 1000000000)
			ts.tv_sec++, ts.tv_nsec -= 1000000000;
		pthread_cond_timedwait(&c->flushed, &c->qlock, &ts);
	}
	bool sealed = c->flush_done >= seq;
	pthread_mutex_unlock(&c->qlock);
	if (!sealed)
		return -ETIMEDOUT;
	while (rdbc_sender_pending(c->sender) > 0) {
		if (rdbc_mono_ns() >= deadline)
			return -ETIMEDOUT;
		usleep(2000);
	}
	return 0;
}

int rdbc_close(struct rdbc *c, const char *status, uint32_t timeout_ms,
	       struct rdbc_stats *final_stats)
{
	if (!c)
		return 0;
	int64_t deadline = rdbc_mono_ns() + (int64_t)timeout_ms * 1000000;
	if (c->rank == 0 && status)
		send_meta(c, status);
	pthread_mutex_lock(&c->qlock);
	c->stop = true;
	pthread_cond_signal(&c->qcond);
	pthread_mutex_unlock(&c->qlock);
	pthread_join(c->batcher, NULL); /* drains the queue and seals: no network wait */
	int64_t left_ms = (deadline - rdbc_mono_ns()) / 1000000;
	struct rdbc_stats st = {0};
	bool ok = rdbc_sender_stop(c->sender, left_ms > 0 ? (uint32_t)left_ms : 0, &st);
	if (final_stats) {
		st.dropped_queue_full = c->dropped_queue;
		st.dropped_invalid = atomic_load(&c->dropped_invalid);
		st.batches_sealed = atomic_load(&c->sealed);
		if (c->spool)
			rdbc_spool_stats(c->spool, &st);
		*final_stats = st;
	}
	rdbc_spool_close(c->spool);
	free_client(c);
	return ok ? 0 : -ETIMEDOUT;
}

void rdbc_get_stats(struct rdbc *c, struct rdbc_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (!c)
		return;
	rdbc_sender_stats(c->sender, st);
	pthread_mutex_lock(&c->qlock);
	st->queued = c->qlen;
	st->dropped_queue_full = c->dropped_queue;
	pthread_mutex_unlock(&c->qlock);
	st->dropped_invalid = atomic_load(&c->dropped_invalid);
	st->batches_sealed = atomic_load(&c->sealed);
}
