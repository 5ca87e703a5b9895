/* evstore.c - logs and spans in the engine: event heads, event chunks,
 * their index entries with a token filter, and filters (see evstore.h and
 * the layouts in storage/format.h).
 *
 * Token filter: the words of every message / span name and of every field
 * value ([A-Za-z0-9_]+, lower-cased, at most 64 bytes) go into a bloom
 * filter of ~10 bits per token (3 probes, power-of-two size, at most 2^19
 * bits) kept in the chunk's index entry, so a text search skips chunks that
 * cannot contain every searched word without reading them.
 *
 * Decoding treats chunk bytes as hostile: every length is checked against
 * the decompressed size; anything off is RDB_ECORRUPT.
 * Threading: none here; store.c holds its locks around head access.
 */
#include "storage/events/evstore.h"
#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_le.h"
#include "common/rdb_sort.h"
#include "storage/chunk/codec.h"
#include "storage/format.h"
#include "storage/series.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define BLOOM_SEED     0x5eedull
#define BLOOM_MIN_LOG2 9u
#define BLOOM_MAX_LOG2 19u
#define WORD_MAX       64u

/* ---- heads ------------------------------------------------------------------ */

static uint64_t job_hash(const char *job)
{
	uint64_t h = rdb_hash64(job, strlen(job), 0);
	return h ? h : 1;
}

struct ev_head *evh_new(void)
{
	return calloc(1, sizeof(struct ev_head));
}

static void job_free(struct ev_job *j)
{
	for (size_t i = 0; i < j->n; i++)
		free(j->recs[i]);
	free(j->recs);
	free(j);
}

void evh_free(struct ev_head *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->jobs.cap; i++) {
		struct ev_job *j = h->jobs.keys[i] ? h->jobs.vals[i] : NULL;
		while (j) {
			struct ev_job *next = j->next;
			job_free(j);
			j = next;
		}
	}
	rdb_map_free(&h->jobs);
	free(h);
}

struct ev_job *evh_job(struct ev_head *h, const char *job)
{
	for (struct ev_job *j = rdb_map_get(&h->jobs, job_hash(job)); j; j = j->next)
		if (strcmp(j->job, job) == 0)
			return j;
	return NULL;
}

static struct ev_job *job_get_or_add(struct ev_head *h, const char *job, size_t jl)
{
	char name[MDL_JOB_MAX + 1];
	memcpy(name, job, jl);
	name[jl] = 0;
	struct ev_job *j = evh_job(h, name);
	if (j)
		return j;
	j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	memcpy(j->job, name, jl + 1);
	j->hash = job_hash(name);
	j->next = rdb_map_get(&h->jobs, j->hash);
	if (rdb_map_put(&h->jobs, j->hash, j) != 0) {
		free(j);
		return NULL;
	}
	return j;
}

/* Makes room in j's record array for `more` records beyond those in it and
 * those already reserved; *grown gets the bytes it added. */
static int job_room(struct ev_job *j, size_t more, uint64_t *grown)
{
	size_t want = j->n + j->reserved + more;
	if (want <= j->cap)
		return 0;
	size_t cap = j->cap ? j->cap : 64;
	while (cap < want)
		cap *= 2;
	struct ev_rec **p = realloc(j->recs, cap * sizeof(*p));
	if (!p)
		return -ENOMEM;
	*grown += (cap - j->cap) * sizeof(*p);
	j->recs = p;
	j->cap = cap;
	return 0;
}

struct ev_rec *ev_rec_new(const struct mdl_event *e)
{
	struct ev_rec *r = malloc(sizeof(struct ev_rec) + e->text_len + e->fields_len);
	if (!r)
		return NULL;
	r->kind = e->kind;
	r->level = e->level;
	r->rank = e->rank;
	r->attempt = e->attempt;
	r->ts_ns = e->ts_ns;
	r->step = e->step;
	r->duration_ns = e->duration_ns;
	r->text_len = (uint32_t)e->text_len;
	r->fields_len = (uint32_t)e->fields_len;
	memcpy(r->data, e->text, e->text_len);
	memcpy(r->data + e->text_len, e->fields, e->fields_len);
	return r;
}

static uint64_t rec_bytes(const struct ev_rec *r)
{
	return sizeof(struct ev_rec) + r->text_len + r->fields_len;
}

void evh_unprepare(struct ev_head *h, size_t n, struct ev_job **jobs, struct ev_rec **recs,
		   uint64_t *bytes_released)
{
	uint64_t freed = 0;
	for (size_t i = 0; i < n; i++) {
		freed += rec_bytes(recs[i]);
		free(recs[i]);
		recs[i] = NULL;
		jobs[i]->reserved--;
	}
	h->bytes -= freed;
	*bytes_released = freed;
}

int evh_prepare(struct ev_head *h, const struct mdl_events *b, struct ev_job **jobs,
		struct ev_rec **recs, uint64_t *bytes_added)
{
	uint64_t added = 0;
	size_t n = mdl_events_count(b), done = 0;
	int rc = 0;
	for (; done < n; done++) {
		const struct mdl_event *e = mdl_events_at(b, done);
		struct ev_job *j = job_get_or_add(h, e->job, e->job_len);
		rc = j ? job_room(j, 1, &added) : -ENOMEM;
		recs[done] = rc == 0 ? ev_rec_new(e) : NULL;
		if (!recs[done]) {
			rc = -ENOMEM;
			break;
		}
		jobs[done] = j;
		j->reserved++;
		added += rec_bytes(recs[done]);
	}
	h->bytes += added;
	*bytes_added = added;
	if (rc) {
		uint64_t released;
		evh_unprepare(h, done, jobs, recs, &released);
		*bytes_added -= released;
	}
	return rc;
}

void evh_commit(struct ev_head *h, size_t n, struct ev_job **jobs, struct ev_rec **recs)
{
	for (size_t i = 0; i < n; i++) {
		struct ev_job *j = jobs[i];
		j->recs[j->n++] = recs[i];
		j->reserved--;
		j->bytes += rec_bytes(recs[i]);
		h->events++;
		recs[i] = NULL;
	}
}

int evh_each(struct ev_head *h, int (*fn)(void *arg, struct ev_job *j), void *arg)
{
	for (size_t i = 0; i < h->jobs.cap; i++) {
		if (!h->jobs.keys[i])
			continue;
		for (struct ev_job *j = h->jobs.vals[i]; j; j = j->next) {
			int rc = fn(arg, j);
			if (rc)
				return rc;
		}
	}
	return 0;
}

void evh_drop(struct ev_head *h, struct ev_job *j)
{
	struct ev_job *first = rdb_map_get(&h->jobs, j->hash);
	if (first == j) {
		if (j->next)
			rdb_map_put(&h->jobs, j->hash, j->next);
		else
			rdb_map_del(&h->jobs, j->hash);
	} else {
		for (struct ev_job *p = first; p; p = p->next)
			if (p->next == j) {
				p->next = j->next;
				break;
			}
	}
	h->events -= j->n;
	h->bytes -= j->bytes + j->cap * sizeof(*j->recs);
	job_free(j);
}

uint64_t evh_consume(struct ev_head *h, struct ev_job *j, size_t k)
{
	uint64_t before = h->bytes;
	if (k >= j->n && j->reserved == 0) {
		evh_drop(h, j);
		return before - h->bytes;
	}
	if (k > j->n)
		k = j->n; /* a write has room reserved here: keep the job */
	uint64_t freed = 0;
	for (size_t i = 0; i < k; i++) {
		freed += sizeof(struct ev_rec) + j->recs[i]->text_len + j->recs[i]->fields_len;
		free(j->recs[i]);
	}
	memmove(j->recs, j->recs + k, (j->n - k) * sizeof(*j->recs));
	j->n -= k;
	j->bytes -= freed;
	h->events -= k;
	h->bytes -= freed;
	return freed;
}

void ev_rec_view(const struct ev_rec *r, const char *job, size_t job_len, struct mdl_event *out)
{
	out->kind = r->kind;
	out->level = r->level;
	out->rank = r->rank;
	out->attempt = r->attempt;
	out->ts_ns = r->ts_ns;
	out->step = r->step;
	out->duration_ns = r->duration_ns;
	out->job = job;
	out->job_len = job_len;
	out->text = r->data;
	out->text_len = r->text_len;
	out->fields = r->data + r->text_len;
	out->fields_len = r->fields_len;
}

/* ---- tokens and bloom filter --------------------------------------------------- */

typedef void (*word_fn)(void *arg, const char *w, size_t n);

/* Calls fn for each lower-cased word of s. */
static void words_of(const char *s, size_t len, word_fn fn, void *arg)
{
	char w[WORD_MAX + 1];
	size_t n = 0;
	for (size_t i = 0; i <= len; i++) {
		unsigned char c = i < len ? (unsigned char)s[i] : 0;
		if (isalnum(c) || c == '_') {
			if (n < WORD_MAX)
				w[n++] = (char)tolower(c);
			continue;
		}
		if (n)
			fn(arg, w, n);
		n = 0;
	}
}

static uint64_t word_hash(const char *w, size_t n)
{
	return rdb_hash64(w, n, BLOOM_SEED);
}

struct bloom {
	uint8_t *bits;
	uint32_t log2;
};

static void bloom_set(struct bloom *b, uint64_t h)
{
	uint32_t h1 = (uint32_t)h, h2 = (uint32_t)(h >> 32) | 1;
	uint32_t mask = (1u << b->log2) - 1;
	for (uint32_t i = 0; i < 3; i++) {
		uint32_t bit = (h1 + i * h2) & mask;
		b->bits[bit >> 3] |= (uint8_t)(1u << (bit & 7));
	}
}

static bool bloom_test(const uint8_t *bits, uint32_t log2, uint64_t h)
{
	uint32_t h1 = (uint32_t)h, h2 = (uint32_t)(h >> 32) | 1;
	uint32_t mask = (1u << log2) - 1;
	for (uint32_t i = 0; i < 3; i++) {
		uint32_t bit = (h1 + i * h2) & mask;
		if (!(bits[bit >> 3] & (1u << (bit & 7))))
			return false;
	}
	return true;
}

static void bloom_word(void *arg, const char *w, size_t n)
{
	bloom_set(arg, word_hash(w, n));
}

static void count_word(void *arg, const char *w, size_t n)
{
	(void)w;
	(void)n;
	(*(size_t *)arg)++;
}

/* Calls fn for the words of the string values of a flat JSON object text
 * (and of its keys: "key" is searchable too). */
static void field_words(const char *f, size_t len, word_fn fn, void *arg)
{
	words_of(f, len, fn, arg); /* JSON punctuation is not a word byte */
}

/* ---- chunk encoding ---------------------------------------------------------- */

static int cmp_rec(const void *a, const void *b)
{
	const struct ev_rec *x = *(struct ev_rec *const *)a, *y = *(struct ev_rec *const *)b;
	if (x->ts_ns != y->ts_ns)
		return x->ts_ns < y->ts_ns ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return (int)x->kind - (int)y->kind;
}

void evc_sort(struct ev_rec **recs, size_t n)
{
	rdb_sort(recs, n, sizeof(*recs), cmp_rec);
}

size_t evc_chunk_len(struct ev_rec **recs, size_t from, size_t n)
{
	size_t raw = 4, k = 0;
	while (from + k < n && k < STO_EVCHUNK_MAX_EVENTS) {
		const struct ev_rec *r = recs[from + k];
		size_t sz = 42 + r->text_len + r->fields_len;
		if (k > 0 && raw + sz > STO_EVCHUNK_MAX_RAW)
			break;
		raw += sz;
		k++;
	}
	return k;
}

static void entry_stats(struct ev_rec **recs, size_t n, struct ev_entry *e)
{
	memset(e, 0, sizeof(*e));
	e->count = (uint32_t)n;
	e->min_ts_ns = INT64_MAX;
	e->max_ts_ns = INT64_MIN;
	e->min_step = MDL_STEP_NONE;
	e->max_step = MDL_STEP_NONE;
	e->min_rank = UINT32_MAX;
	for (size_t i = 0; i < n; i++) {
		const struct ev_rec *r = recs[i];
		e->kinds |= (uint8_t)(1u << r->kind);
		if (r->kind == MDL_EV_LOG)
			e->levels |= (uint8_t)(1u << r->level);
		if (r->ts_ns < e->min_ts_ns)
			e->min_ts_ns = r->ts_ns;
		if (r->ts_ns > e->max_ts_ns)
			e->max_ts_ns = r->ts_ns;
		if (r->step != MDL_STEP_NONE) {
			if (e->min_step == MDL_STEP_NONE || r->step < e->min_step)
				e->min_step = r->step;
			if (r->step > e->max_step)
				e->max_step = r->step;
		}
		if (r->rank < e->min_rank)
			e->min_rank = r->rank;
		if (r->rank > e->max_rank)
			e->max_rank = r->rank;
	}
}

static int build_bloom(struct ev_rec **recs, size_t n, struct ev_entry *e, struct rdb_buf *out)
{
	size_t words = 0;
	for (size_t i = 0; i < n; i++) {
		words_of(recs[i]->data, recs[i]->text_len, count_word, &words);
		field_words(recs[i]->data + recs[i]->text_len, recs[i]->fields_len, count_word,
			    &words);
	}
	uint32_t log2 = BLOOM_MIN_LOG2;
	while (log2 < BLOOM_MAX_LOG2 && ((size_t)1 << log2) < words * 10)
		log2++;
	out->len = 0;
	int rc = rdb_buf_reserve(out, (size_t)1 << (log2 - 3));
	if (rc)
		return rc;
	memset(out->data, 0, (size_t)1 << (log2 - 3));
	out->len = (size_t)1 << (log2 - 3);
	struct bloom b = {out->data, log2};
	for (size_t i = 0; i < n; i++) {
		words_of(recs[i]->data, recs[i]->text_len, bloom_word, &b);
		field_words(recs[i]->data + recs[i]->text_len, recs[i]->fields_len, bloom_word, &b);
	}
	e->bloom_log2 = log2;
	e->bloom = out->data;
	return 0;
}

int evc_encode(struct ev_rec **recs, size_t n, struct rdb_buf *payload, struct ev_entry *e,
	       struct rdb_buf *bloom)
{
	size_t raw = 4 + n * 42; /* fixed columns: 2 x u8, 4 x u32, 3 x i64 */
	for (size_t i = 0; i < n; i++)
		raw += recs[i]->text_len + recs[i]->fields_len;
	uint8_t *col = malloc(raw);
	if (!col)
		return -ENOMEM;
	uint8_t *p = col;
	rdb_put_le32(p, (uint32_t)n);
	p += 4;
	for (size_t i = 0; i < n; i++)
		*p++ = recs[i]->kind;
	for (size_t i = 0; i < n; i++)
		*p++ = recs[i]->level;
	for (size_t i = 0; i < n; i++, p += 4)
		rdb_put_le32(p, recs[i]->rank);
	for (size_t i = 0; i < n; i++, p += 4)
		rdb_put_le32(p, recs[i]->attempt);
	for (size_t i = 0; i < n; i++, p += 8)
		rdb_put_le64(p, (uint64_t)recs[i]->ts_ns);
	for (size_t i = 0; i < n; i++, p += 8)
		rdb_put_le64(p, (uint64_t)recs[i]->step);
	for (size_t i = 0; i < n; i++, p += 8)
		rdb_put_le64(p, (uint64_t)recs[i]->duration_ns);
	for (size_t i = 0; i < n; i++, p += 4)
		rdb_put_le32(p, recs[i]->text_len);
	for (size_t i = 0; i < n; i++, p += 4)
		rdb_put_le32(p, recs[i]->fields_len);
	for (size_t i = 0; i < n; i++) {
		memcpy(p, recs[i]->data, recs[i]->text_len);
		p += recs[i]->text_len;
	}
	for (size_t i = 0; i < n; i++) {
		memcpy(p, recs[i]->data + recs[i]->text_len, recs[i]->fields_len);
		p += recs[i]->fields_len;
	}
	payload->len = 0;
	int rc = sto_codec_zstd_pack(col, raw, payload);
	free(col);
	if (rc)
		return rc;
	entry_stats(recs, n, e);
	return build_bloom(recs, n, e, bloom);
}

int evc_entry_of(const struct ev_decoded *d, struct rdb_buf *payload, struct ev_entry *e,
		 struct rdb_buf *bloom)
{
	struct ev_rec **recs = calloc(d->n ? d->n : 1, sizeof(*recs));
	int rc = recs ? 0 : -ENOMEM;
	for (size_t i = 0; rc == 0 && i < d->n; i++) {
		recs[i] = ev_rec_new(&d->ev[i]);
		if (!recs[i])
			rc = -ENOMEM;
	}
	payload->len = 0;
	if (rc == 0)
		rc = evc_encode(recs, d->n, payload, e, bloom);
	for (size_t i = 0; recs && i < d->n; i++)
		free(recs[i]);
	free(recs);
	return rc;
}

int eve_encode(const struct ev_entry *e, const uint8_t *bloom, struct rdb_buf *out)
{
	size_t bl = (size_t)1 << (e->bloom_log2 - 3);
	out->len = 0;
	int rc = rdb_buf_reserve(out, STO_EVENTRY_FIXED + bl);
	if (rc)
		return rc;
	uint8_t *p = out->data;
	memset(p, 0, STO_EVENTRY_FIXED);
	p[0] = 2;
	p[1] = e->kinds;
	p[2] = e->levels;
	rdb_put_le32(p + 4, e->length);
	rdb_put_le64(p + 8, e->segment_id);
	rdb_put_le64(p + 16, e->offset);
	rdb_put_le64(p + 24, e->gen);
	rdb_put_le32(p + 32, e->count);
	rdb_put_le32(p + 36, e->bloom_log2);
	rdb_put_le64(p + 40, (uint64_t)e->min_ts_ns);
	rdb_put_le64(p + 48, (uint64_t)e->max_ts_ns);
	rdb_put_le64(p + 56, (uint64_t)e->min_step);
	rdb_put_le64(p + 64, (uint64_t)e->max_step);
	rdb_put_le32(p + 72, e->min_rank);
	rdb_put_le32(p + 76, e->max_rank);
	rdb_put_le64(p + 80, rdb_hash64(bloom, bl, 0));
	memcpy(p + STO_EVENTRY_FIXED, bloom, bl);
	out->len = STO_EVENTRY_FIXED + bl;
	return 0;
}

int eve_decode(const uint8_t *p, size_t len, struct ev_entry *e)
{
	size_t fixed = len > 0 && p[0] == 1 ? STO_EVENTRY_V1_FIXED : STO_EVENTRY_FIXED;
	if (len < fixed || (p[0] != 1 && p[0] != 2))
		return RDB_ECORRUPT;
	memset(e, 0, sizeof(*e));
	e->kinds = p[1];
	e->levels = p[2];
	e->length = rdb_get_le32(p + 4);
	e->segment_id = rdb_get_le64(p + 8);
	e->offset = rdb_get_le64(p + 16);
	e->gen = rdb_get_le64(p + 24);
	e->count = rdb_get_le32(p + 32);
	e->bloom_log2 = rdb_get_le32(p + 36);
	e->min_ts_ns = (int64_t)rdb_get_le64(p + 40);
	e->max_ts_ns = (int64_t)rdb_get_le64(p + 48);
	e->min_step = (int64_t)rdb_get_le64(p + 56);
	e->max_step = (int64_t)rdb_get_le64(p + 64);
	e->min_rank = rdb_get_le32(p + 72);
	e->max_rank = rdb_get_le32(p + 76);
	if (e->bloom_log2 < BLOOM_MIN_LOG2 || e->bloom_log2 > BLOOM_MAX_LOG2 ||
	    len != fixed + ((size_t)1 << (e->bloom_log2 - 3)))
		return RDB_ECORRUPT;
	e->bloom_summed = p[0] == 2;
	if (e->bloom_summed)
		e->bloom_sum = rdb_get_le64(p + 80);
	e->bloom = p + fixed;
	return 0;
}

bool evc_payload_of_job(const uint8_t *payload, size_t len, const char *job)
{
	size_t jl = strlen(job), keylen = 1 + jl + 4 + 2;
	return len >= keylen && payload[len - keylen] == jl &&
	       memcmp(payload + len - keylen + 1, job, jl) == 0;
}

bool eve_filter_intact(const struct ev_entry *e)
{
	return !e->bloom_summed ||
	       rdb_hash64(e->bloom, (size_t)1 << (e->bloom_log2 - 3), 0) == e->bloom_sum;
}

/* ---- chunk decoding ----------------------------------------------------------- */

void evc_decoded_free(struct ev_decoded *d)
{
	rdb_buf_free(&d->raw);
	free(d->ev);
	memset(d, 0, sizeof(*d));
}

int evc_decode(const uint8_t *payload, size_t len, const char *job, struct ev_decoded *out)
{
	if (out->raw.max == 0)
		rdb_buf_init(&out->raw, STO_EVCHUNK_MAX_RAW + 4 + STO_EVCHUNK_MAX_EVENTS * 42);
	out->n = 0;
	int rc = sto_codec_zstd_unpack(payload, len, out->raw.max, &out->raw);
	if (rc)
		return rc;
	const uint8_t *p = out->raw.data, *end = p + out->raw.len;
	if (out->raw.len < 4)
		return RDB_ECORRUPT;
	size_t n = rdb_get_le32(p);
	if (n == 0 || n > STO_EVCHUNK_MAX_EVENTS || (size_t)(end - p - 4) / 42 < n)
		return RDB_ECORRUPT;
	if (n > out->cap) {
		struct mdl_event *ev = realloc(out->ev, n * sizeof(*ev));
		if (!ev)
			return -ENOMEM;
		out->ev = ev;
		out->cap = n;
	}
	const uint8_t *kind = p + 4, *level = kind + n, *rank = level + n, *att = rank + 4 * n;
	const uint8_t *ts = att + 4 * n, *step = ts + 8 * n, *dur = step + 8 * n;
	const uint8_t *tl = dur + 8 * n, *fl = tl + 4 * n, *str = fl + 4 * n;
	size_t jl = strlen(job);
	for (size_t i = 0; i < n; i++) {
		struct mdl_event *e = &out->ev[i];
		e->kind = kind[i];
		e->level = level[i];
		e->rank = rdb_get_le32(rank + 4 * i);
		e->attempt = rdb_get_le32(att + 4 * i);
		e->ts_ns = (int64_t)rdb_get_le64(ts + 8 * i);
		e->step = (int64_t)rdb_get_le64(step + 8 * i);
		e->duration_ns = (int64_t)rdb_get_le64(dur + 8 * i);
		e->text_len = rdb_get_le32(tl + 4 * i);
		e->job = job;
		e->job_len = jl;
		/* what no writer produces is damage, never served */
		if ((e->kind != MDL_EV_LOG && e->kind != MDL_EV_SPAN) ||
		    e->level > MDL_LEVEL_FATAL || e->duration_ns < 0 ||
		    (size_t)(end - str) < e->text_len)
			return RDB_ECORRUPT;
		e->text = (const char *)str;
		str += e->text_len;
	}
	for (size_t i = 0; i < n; i++) {
		struct mdl_event *e = &out->ev[i];
		e->fields_len = rdb_get_le32(fl + 4 * i);
		if ((size_t)(end - str) < e->fields_len)
			return RDB_ECORRUPT;
		e->fields = (const char *)str;
		str += e->fields_len;
	}
	if (str != end)
		return RDB_ECORRUPT;
	out->n = n;
	return 0;
}

/* ---- filters ------------------------------------------------------------------ */

static void add_word(void *arg, const char *w, size_t n)
{
	struct evf *p = arg;
	if (p->nwords == sizeof(p->word_hash) / sizeof(p->word_hash[0]))
		return;
	memcpy(p->words[p->nwords], w, n);
	p->words[p->nwords][n] = 0;
	p->word_hash[p->nwords++] = word_hash(w, n);
}

int evf_prepare(struct evf *p, const struct sto_ev_filter *f)
{
	memset(p, 0, sizeof(*p));
	p->f = f;
	if (f->text)
		words_of(f->text, strlen(f->text), add_word, p);
	return 0;
}

static bool rank_range_hit(const struct sto_ev_filter *f, uint32_t lo, uint32_t hi)
{
	if (f->nranks == 0)
		return true;
	for (size_t i = 0; i < f->nranks; i++)
		if (f->ranks[i] >= lo && f->ranks[i] <= hi)
			return true;
	return false;
}

bool evf_chunk_may_match(const struct evf *p, const struct ev_entry *e, bool *filter_damaged)
{
	*filter_damaged = false;
	const struct sto_ev_filter *f = p->f;
	if (e->max_ts_ns < f->from_ns || e->min_ts_ns > f->to_ns || !(e->kinds & f->kinds))
		return false;
	if (f->by_step && (e->max_step == MDL_STEP_NONE || e->max_step < f->step_from ||
			   e->min_step > f->step_to))
		return false;
	if (!rank_range_hit(f, e->min_rank, e->max_rank))
		return false;
	if (f->kinds == (1u << MDL_EV_LOG) && (e->levels >> f->min_level) == 0)
		return false;
	if (p->nwords && !eve_filter_intact(e)) {
		*filter_damaged = true;
		return true;
	}
	for (size_t i = 0; i < p->nwords; i++)
		if (!bloom_test(e->bloom, e->bloom_log2, p->word_hash[i]))
			return false;
	return true;
}

struct word_find {
	const char *w;
	bool found;
};

static void find_word(void *arg, const char *w, size_t n)
{
	struct word_find *wf = arg;
	if (!wf->found && strlen(wf->w) == n && memcmp(wf->w, w, n) == 0)
		wf->found = true;
}

/* Finds "key": in a flat JSON object text and compares its value (string
 * content as written, or the literal token) with want. */
static bool field_equals(const char *f, size_t len, const char *key, const char *want)
{
	size_t kl = strlen(key), wl = strlen(want);
	for (size_t i = 0; i + kl + 3 <= len; i++) {
		if (f[i] != '"' || memcmp(f + i + 1, key, kl) != 0 || f[i + 1 + kl] != '"' ||
		    f[i + 2 + kl] != ':' || (i > 0 && f[i - 1] != '{' && f[i - 1] != ','))
			continue;
		const char *v = f + i + 3 + kl, *end = f + len;
		if (v < end && *v == '"') {
			v++;
			const char *q = v;
			while (q < end && *q != '"')
				q += (*q == '\\') ? 2 : 1;
			return (size_t)(q - v) == wl && memcmp(v, want, wl) == 0;
		}
		const char *q = v;
		while (q < end && *q != ',' && *q != '}')
			q++;
		return (size_t)(q - v) == wl && memcmp(v, want, wl) == 0;
	}
	return false;
}

bool evf_match(const struct evf *p, const struct mdl_event *ev)
{
	const struct sto_ev_filter *f = p->f;
	if (!(f->kinds & (1u << ev->kind)) || ev->ts_ns < f->from_ns || ev->ts_ns > f->to_ns)
		return false;
	if (ev->kind == MDL_EV_LOG && ev->level < f->min_level)
		return false;
	if (f->by_step &&
	    (ev->step == MDL_STEP_NONE || ev->step < f->step_from || ev->step > f->step_to))
		return false;
	if (!rank_range_hit(f, ev->rank, ev->rank))
		return false;
	if (f->attempt >= 0 && ev->attempt != (uint32_t)f->attempt)
		return false;
	for (size_t i = 0; i < f->nfields; i++)
		if (!field_equals(ev->fields, ev->fields_len, f->field_keys[i], f->field_vals[i]))
			return false;
	for (size_t i = 0; i < p->nwords; i++) {
		struct word_find wf = {p->words[i], false};
		words_of(ev->text, ev->text_len, find_word, &wf);
		if (!wf.found)
			field_words(ev->fields, ev->fields_len, find_word, &wf);
		if (!wf.found)
			return false;
	}
	return true;
}
