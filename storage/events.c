/* events.c - event batches (see events.h). The arena is one bounded
 * buffer; events keep offsets into it until sto_events_at resolves them, so
 * the arena may move while it grows. Decode treats its input as hostile. */
#include "storage/events.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "storage/format.h"
#include "storage/series.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct ev_slot {
	struct sto_event ev; /* string pointers invalid; offsets below */
	size_t job_off, text_off, fields_off;
};

struct sto_events {
	size_t max_events;
	struct rdb_buf arena;
	struct ev_slot *slots;
	size_t n, cap;
	struct sto_event view; /* returned by sto_events_at */
};

int sto_events_new(size_t max_events, size_t max_bytes, struct sto_events **out)
{
	struct sto_events *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->max_events = max_events;
	rdb_buf_init(&b->arena, max_bytes);
	*out = b;
	return 0;
}

void sto_events_free(struct sto_events *b)
{
	if (!b)
		return;
	rdb_buf_free(&b->arena);
	free(b->slots);
	free(b);
}

void sto_events_reset(struct sto_events *b)
{
	b->n = 0;
	b->arena.len = 0;
}

int sto_events_add(struct sto_events *b, const struct sto_event *ev)
{
	if (ev->job_len == 0 || ev->job_len > STO_JOB_MAX || ev->text_len > STO_EVENT_TEXT_MAX ||
	    ev->fields_len > STO_EVENT_FIELDS_MAX || (ev->kind != STO_EV_LOG && ev->kind != STO_EV_SPAN))
		return RDB_EINVAL;
	if (b->n >= b->max_events)
		return RDB_ELIMIT;
	if (b->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 64;
		struct ev_slot *p = realloc(b->slots, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		b->slots = p;
		b->cap = cap;
	}
	size_t start = b->arena.len;
	int rc = rdb_buf_reserve(&b->arena, ev->job_len + ev->text_len + ev->fields_len);
	if (rc)
		return rc;
	struct ev_slot *s = &b->slots[b->n];
	s->ev = *ev;
	s->job_off = start;
	rdb_buf_append(&b->arena, ev->job, ev->job_len);
	s->text_off = b->arena.len;
	rdb_buf_append(&b->arena, ev->text, ev->text_len);
	s->fields_off = b->arena.len;
	rdb_buf_append(&b->arena, ev->fields, ev->fields_len);
	b->n++;
	return 0;
}

size_t sto_events_count(const struct sto_events *b)
{
	return b->n;
}

const struct sto_event *sto_events_at(const struct sto_events *b, size_t i)
{
	if (i >= b->n)
		return NULL;
	struct sto_events *mb = (struct sto_events *)b;
	const struct ev_slot *s = &b->slots[i];
	const char *base = (const char *)b->arena.data;
	mb->view = s->ev;
	mb->view.job = base ? base + s->job_off : "";
	mb->view.text = base ? base + s->text_off : "";
	mb->view.fields = base ? base + s->fields_off : "";
	return &mb->view;
}

/* Record layout (all LE): u32 count, then per event: u8 kind, u8 level,
 * u32 rank, u32 attempt, i64 ts, i64 step, i64 duration, u8 job_len, job,
 * u32 text_len, text, u32 fields_len, fields. */
#define EV_FIXED 39u

int sto_events_encode(const struct sto_events *b, struct rdb_buf *out)
{
	size_t need = 4 + b->n * (EV_FIXED + 1 + 4 + 4) + b->arena.len;
	int rc = rdb_buf_reserve(out, need);
	if (rc)
		return rc;
	uint8_t *p = out->data + out->len;
	rdb_put_le32(p, (uint32_t)b->n);
	p += 4;
	for (size_t i = 0; i < b->n; i++) {
		const struct sto_event *e = sto_events_at(b, i);
		p[0] = e->kind;
		p[1] = e->level;
		rdb_put_le32(p + 2, e->rank);
		rdb_put_le32(p + 6, e->attempt);
		rdb_put_le64(p + 10, (uint64_t)e->ts_ns);
		rdb_put_le64(p + 18, (uint64_t)e->step);
		rdb_put_le64(p + 26, (uint64_t)e->duration_ns);
		p[34] = (uint8_t)e->job_len;
		p += 35;
		memcpy(p, e->job, e->job_len);
		p += e->job_len;
		rdb_put_le32(p, (uint32_t)e->text_len);
		memcpy(p + 4, e->text, e->text_len);
		p += 4 + e->text_len;
		rdb_put_le32(p, (uint32_t)e->fields_len);
		memcpy(p + 4, e->fields, e->fields_len);
		p += 4 + e->fields_len;
	}
	out->len = (size_t)(p - out->data);
	return 0;
}

int sto_events_decode(struct sto_events *b, const uint8_t *p, size_t len)
{
	sto_events_reset(b);
	const uint8_t *end = p + len;
	if (len < 4)
		return RDB_ECORRUPT;
	uint32_t n = rdb_get_le32(p);
	p += 4;
	for (uint32_t i = 0; i < n; i++) {
		struct sto_event e;
		if ((size_t)(end - p) < 35)
			return RDB_ECORRUPT;
		e.kind = p[0];
		e.level = p[1];
		e.rank = rdb_get_le32(p + 2);
		e.attempt = rdb_get_le32(p + 6);
		e.ts_ns = (int64_t)rdb_get_le64(p + 10);
		e.step = (int64_t)rdb_get_le64(p + 18);
		e.duration_ns = (int64_t)rdb_get_le64(p + 26);
		e.job_len = p[34];
		p += 35;
		if ((size_t)(end - p) < e.job_len + 4 || !sto_job_valid((const char *)p, e.job_len))
			return RDB_ECORRUPT;
		e.job = (const char *)p;
		p += e.job_len;
		e.text_len = rdb_get_le32(p);
		p += 4;
		if ((size_t)(end - p) < e.text_len + 4)
			return RDB_ECORRUPT;
		e.text = (const char *)p;
		p += e.text_len;
		e.fields_len = rdb_get_le32(p);
		p += 4;
		if ((size_t)(end - p) < e.fields_len)
			return RDB_ECORRUPT;
		e.fields = (const char *)p;
		p += e.fields_len;
		int rc = sto_events_add(b, &e);
		if (rc)
			return rc == RDB_EINVAL ? RDB_ECORRUPT : rc;
	}
	return p == end ? 0 : RDB_ECORRUPT;
}

static const char *level_names[] = {"debug", "info", "warn", "error", "fatal"};

int sto_level_parse(const char *s, size_t len, uint8_t *out)
{
	static const struct {
		const char *name;
		uint8_t level;
	} names[] = {{"debug", 0}, {"trace", 0}, {"info", 1}, {"notice", 1}, {"warn", 2},
		     {"warning", 2}, {"error", 3}, {"err", 3}, {"fatal", 4}, {"critical", 4},
		     {"crit", 4}};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strlen(names[i].name) == len && strncasecmp(names[i].name, s, len) == 0) {
			*out = names[i].level;
			return 0;
		}
	}
	return RDB_EINVAL;
}

const char *sto_level_name(uint8_t level)
{
	return level <= STO_LEVEL_FATAL ? level_names[level] : "unknown";
}
