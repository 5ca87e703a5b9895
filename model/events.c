/* events.c - event batches (see events.h). The arena is one bounded
 * buffer; events keep offsets into it until mdl_events_at resolves them, so
 * the arena may move while it grows. Decode treats its input as hostile. */
#include "model/events.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "common/rdb_tcache.h"
#include "model/series.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct ev_slot {
	struct mdl_event ev; /* string pointers invalid; offsets below */
	size_t job_off, text_off, fields_off;
};

struct mdl_events {
	size_t max_events;
	struct rdb_buf arena;
	struct ev_slot *slots;
	size_t n, cap;
	struct mdl_event view; /* returned by mdl_events_at */
};

int mdl_events_new(size_t max_events, size_t max_bytes, struct mdl_events **out)
{
	struct mdl_events *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->max_events = max_events;
	rdb_buf_init(&b->arena, max_bytes);
	*out = b;
	return 0;
}

void mdl_events_free(struct mdl_events *b)
{
	if (!b)
		return;
	rdb_buf_free(&b->arena);
	free(b->slots);
	free(b);
}

static void events_free_fn(void *p)
{
	mdl_events_free(p);
}

static struct rdb_tcache events_cache =
    RDB_TCACHE_INIT_BYTES(MDL_EVENTS_CACHE_N, MDL_EVENTS_CACHE_TOTAL_BYTES, events_free_fn);

int mdl_events_take(size_t max_events, size_t max_bytes, struct mdl_events **out)
{
	struct mdl_events *b = rdb_tcache_take(&events_cache);
	if (!b)
		return mdl_events_new(max_events, max_bytes, out);
	mdl_events_reset(b);
	b->max_events = max_events;
	b->arena.max = max_bytes;
	*out = b;
	return 0;
}

void mdl_events_give(struct mdl_events *b)
{
	if (!b)
		return;
	size_t bytes = sizeof(*b) + b->arena.cap + b->cap * sizeof(*b->slots);
	if (bytes > MDL_EVENTS_CACHE_BYTES || !rdb_tcache_give_bytes(&events_cache, b, bytes))
		mdl_events_free(b);
}

void mdl_events_reset(struct mdl_events *b)
{
	b->n = 0;
	b->arena.len = 0;
}

int mdl_events_add(struct mdl_events *b, const struct mdl_event *ev)
{
	if (ev->job_len == 0 || ev->job_len > MDL_JOB_MAX || ev->text_len > MDL_EVENT_TEXT_MAX ||
	    ev->fields_len > MDL_EVENT_FIELDS_MAX ||
	    (ev->kind != MDL_EV_LOG && ev->kind != MDL_EV_SPAN))
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

int mdl_events_append(struct mdl_events *dst, const struct mdl_events *src)
{
	size_t n0 = dst->n, bytes0 = dst->arena.len;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < src->n; i++)
		rc = mdl_events_add(dst, mdl_events_at(src, i));
	if (rc) {
		dst->n = n0;
		dst->arena.len = bytes0;
	}
	return rc;
}

size_t mdl_events_count(const struct mdl_events *b)
{
	return b->n;
}

const struct mdl_event *mdl_events_at(const struct mdl_events *b, size_t i)
{
	if (i >= b->n)
		return NULL;
	struct mdl_events *mb = (struct mdl_events *)b;
	const struct ev_slot *s = &b->slots[i];
	const char *base = (const char *)b->arena.data;
	mb->view = s->ev;
	mb->view.job = base ? base + s->job_off : "";
	mb->view.text = base ? base + s->text_off : "";
	mb->view.fields = base ? base + s->fields_off : "";
	return &mb->view;
}

static const char *level_names[] = {"debug", "info", "warn", "error", "fatal"};

int mdl_level_parse(const char *s, size_t len, uint8_t *out)
{
	static const struct {
		const char *name;
		uint8_t level;
	} names[] = {{"debug", 0}, {"trace", 0},    {"info", 1},  {"notice", 1},
		     {"warn", 2},  {"warning", 2},  {"error", 3}, {"err", 3},
		     {"fatal", 4}, {"critical", 4}, {"crit", 4}};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strlen(names[i].name) == len && strncasecmp(names[i].name, s, len) == 0) {
			*out = names[i].level;
			return 0;
		}
	}
	return RDB_EINVAL;
}

const char *mdl_level_name(uint8_t level)
{
	return level <= MDL_LEVEL_FATAL ? level_names[level] : "unknown";
}
