/* test_events.c - unit tests for storage/events.c: add/at/count/reset with
 * copied strings, every bound (events, arena bytes, string maxima, kind),
 * the encode/decode round trip field by field, hostile decodes (every
 * truncation, garbled lengths, kinds and jobs, trailing bytes, random byte
 * flips) and level names. */
#include "storage/wal/batch_codec.h"
#include "model/events.h"
#include "common/rdb_buf.h"
#include "common/rdb_err.h"
#include "storage/format.h"
#include "tests/unit/check.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct mdl_event mk(uint8_t kind, const char *job, const char *text, const char *fields)
{
	struct mdl_event e = {
	    .kind = kind,
	    .level = kind == MDL_EV_LOG ? MDL_LEVEL_WARN : 0,
	    .rank = 7,
	    .attempt = 2,
	    .ts_ns = 1700000000000000000LL,
	    .step = 42,
	    .duration_ns = kind == MDL_EV_SPAN ? 1234 : 0,
	    .job = job,
	    .job_len = strlen(job),
	    .text = text,
	    .text_len = strlen(text),
	    .fields = fields,
	    .fields_len = strlen(fields),
	};
	return e;
}

static bool same_event(const struct mdl_event *a, const struct mdl_event *b)
{
	return a->kind == b->kind && a->level == b->level && a->rank == b->rank &&
	       a->attempt == b->attempt && a->ts_ns == b->ts_ns && a->step == b->step &&
	       a->duration_ns == b->duration_ns && a->job_len == b->job_len &&
	       memcmp(a->job, b->job, a->job_len) == 0 && a->text_len == b->text_len &&
	       (a->text_len == 0 || memcmp(a->text, b->text, a->text_len) == 0) &&
	       a->fields_len == b->fields_len &&
	       (a->fields_len == 0 || memcmp(a->fields, b->fields, a->fields_len) == 0);
}

static bool same_batch(const struct mdl_events *a, const struct mdl_events *b)
{
	if (mdl_events_count(a) != mdl_events_count(b))
		return false;
	for (size_t i = 0; i < mdl_events_count(a); i++) {
		struct mdl_event x = *mdl_events_at(a, i);
		if (!same_event(&x, mdl_events_at(b, i)))
			return false;
	}
	return true;
}

static void test_add_at(void)
{
	struct mdl_events *b;
	CHECK_EQ_INT(mdl_events_new(10, 1 << 20, &b), 0);
	CHECK_EQ_INT(mdl_events_count(b), 0);
	CHECK(mdl_events_at(b, 0) == NULL);
	char job[] = "run-1", text[] = "hello \xc3\xa9", fields[] = "{\"a\":1}";
	struct mdl_event e = mk(MDL_EV_LOG, job, text, fields);
	CHECK_EQ_INT(mdl_events_add(b, &e), 0);
	/* The strings were copied: changing the source changes nothing. */
	job[0] = 'X';
	text[0] = 'X';
	fields[2] = 'X';
	struct mdl_event s = mk(MDL_EV_SPAN, "j", "forward", "");
	s.rank = MDL_RANK_JOB;
	s.step = MDL_STEP_NONE;
	s.ts_ns = INT64_MIN;
	s.attempt = UINT32_MAX;
	s.duration_ns = INT64_MAX;
	CHECK_EQ_INT(mdl_events_add(b, &s), 0);
	CHECK_EQ_INT(mdl_events_count(b), 2);
	struct mdl_event want = mk(MDL_EV_LOG, "run-1", "hello \xc3\xa9", "{\"a\":1}");
	CHECK(same_event(mdl_events_at(b, 0), &want));
	CHECK(same_event(mdl_events_at(b, 1), &s));
	CHECK(mdl_events_at(b, 2) == NULL);
	/* Many adds move the arena; views stay right. */
	char t[32];
	for (int i = 0; i < 8; i++) {
		snprintf(t, sizeof(t), "msg %d", i);
		struct mdl_event x = mk(MDL_EV_LOG, "j", t, "{}");
		CHECK_EQ_INT(mdl_events_add(b, &x), 0);
	}
	const struct mdl_event *last = mdl_events_at(b, 9);
	CHECK(last && last->text_len == 5 && memcmp(last->text, "msg 7", 5) == 0);
	CHECK(same_event(mdl_events_at(b, 0), &want));
	mdl_events_reset(b);
	CHECK_EQ_INT(mdl_events_count(b), 0);
	CHECK(mdl_events_at(b, 0) == NULL);
	CHECK_EQ_INT(mdl_events_add(b, &s), 0);
	CHECK(same_event(mdl_events_at(b, 0), &s));
	mdl_events_free(b);
	mdl_events_free(NULL);
}

static void test_bounds(void)
{
	struct mdl_events *b;
	CHECK_EQ_INT(mdl_events_new(2, 1 << 20, &b), 0);
	struct mdl_event e = mk(MDL_EV_LOG, "j", "m", "{}");
	CHECK_EQ_INT(mdl_events_add(b, &e), 0);
	CHECK_EQ_INT(mdl_events_add(b, &e), 0);
	CHECK_EQ_INT(mdl_events_add(b, &e), RDB_ELIMIT);
	CHECK_EQ_INT(mdl_events_count(b), 2);
	mdl_events_free(b);

	/* Arena bytes: job + text + fields per event. */
	CHECK_EQ_INT(mdl_events_new(100, 8, &b), 0);
	CHECK_EQ_INT(mdl_events_add(b, &e), 0); /* 4 bytes */
	CHECK_EQ_INT(mdl_events_add(b, &e), 0); /* 8 bytes */
	CHECK_EQ_INT(mdl_events_add(b, &e), RDB_ELIMIT);
	CHECK_EQ_INT(mdl_events_count(b), 2);
	mdl_events_free(b);

	CHECK_EQ_INT(mdl_events_new(100, 1 << 20, &b), 0);
	char *big = malloc(MDL_EVENT_FIELDS_MAX + 2);
	memset(big, 'x', MDL_EVENT_FIELDS_MAX + 1);
	big[MDL_EVENT_FIELDS_MAX + 1] = 0;
	struct mdl_event x = e;
	x.job_len = 0;
	CHECK_EQ_INT(mdl_events_add(b, &x), RDB_EINVAL);
	x = e;
	x.job = big;
	x.job_len = MDL_JOB_MAX;
	CHECK_EQ_INT(mdl_events_add(b, &x), 0);
	x.job_len = MDL_JOB_MAX + 1;
	CHECK_EQ_INT(mdl_events_add(b, &x), RDB_EINVAL);
	x = e;
	x.text = big;
	x.text_len = MDL_EVENT_TEXT_MAX;
	CHECK_EQ_INT(mdl_events_add(b, &x), 0);
	x.text_len = MDL_EVENT_TEXT_MAX + 1;
	CHECK_EQ_INT(mdl_events_add(b, &x), RDB_EINVAL);
	x = e;
	x.fields = big;
	x.fields_len = MDL_EVENT_FIELDS_MAX;
	CHECK_EQ_INT(mdl_events_add(b, &x), 0);
	x.fields_len = MDL_EVENT_FIELDS_MAX + 1;
	CHECK_EQ_INT(mdl_events_add(b, &x), RDB_EINVAL);
	x = e;
	x.kind = 0;
	CHECK_EQ_INT(mdl_events_add(b, &x), RDB_EINVAL);
	x.kind = 3;
	CHECK_EQ_INT(mdl_events_add(b, &x), RDB_EINVAL);
	CHECK_EQ_INT(mdl_events_count(b), 3);
	free(big);
	mdl_events_free(b);
}

/* A batch with edge values in every field. */
static struct mdl_events *sample(void)
{
	struct mdl_events *b;
	if (mdl_events_new(100, 1 << 20, &b))
		return NULL;
	struct mdl_event e = mk(MDL_EV_LOG, "run-1", "NCCL timeout \xf0\x9f\x98\x80",
				"{\"op\":\"allreduce\",\"n\":1.5e3}");
	mdl_events_add(b, &e);
	e = mk(MDL_EV_SPAN, "a.b_c-d", "step_time.forward", "");
	e.rank = MDL_RANK_JOB;
	e.ts_ns = INT64_MIN;
	e.step = INT64_MAX;
	e.duration_ns = INT64_MAX;
	e.attempt = UINT32_MAX;
	mdl_events_add(b, &e);
	e = mk(MDL_EV_LOG, "j", "", "{}");
	e.level = MDL_LEVEL_FATAL;
	e.step = MDL_STEP_NONE;
	e.ts_ns = -1;
	e.rank = 0;
	e.attempt = 0;
	mdl_events_add(b, &e);
	static const char nul_text[] = "a\0b";
	e = mk(MDL_EV_LOG, "j", "", "{}");
	e.text = nul_text;
	e.text_len = 3;
	mdl_events_add(b, &e);
	return b;
}

/* mdl_events_take/give: a given batch comes back empty to the same
 * thread's next take, with the bounds of that take (a smaller event or
 * byte bound refuses as a new batch would); a batch over the cache's size
 * bound is freed, not kept. */
static void test_take_give(void)
{
	struct mdl_events *b, *again;
	CHECK_EQ_INT(mdl_events_take(100, 1 << 20, &b), 0);
	struct mdl_event e = mk(MDL_EV_LOG, "j", "m", "{}");
	for (int i = 0; i < 10; i++)
		CHECK_EQ_INT(mdl_events_add(b, &e), 0);
	mdl_events_give(b);
	CHECK_EQ_INT(mdl_events_take(2, 1 << 20, &again), 0);
	CHECK(again == b); /* reused */
	CHECK_EQ_INT(mdl_events_count(again), 0);
	CHECK_EQ_INT(mdl_events_add(again, &e), 0);
	CHECK_EQ_INT(mdl_events_add(again, &e), 0);
	CHECK_EQ_INT(mdl_events_add(again, &e), RDB_ELIMIT);
	mdl_events_give(again);
	CHECK_EQ_INT(mdl_events_take(100, 8, &again), 0);
	CHECK(again == b);
	CHECK_EQ_INT(mdl_events_add(again, &e), 0); /* 4 bytes */
	CHECK_EQ_INT(mdl_events_add(again, &e), 0); /* 8 bytes */
	CHECK_EQ_INT(mdl_events_add(again, &e), RDB_ELIMIT);
	const struct mdl_event *got = mdl_events_at(again, 1);
	CHECK(got && got->job_len == 1 && memcmp(got->job, "j", 1) == 0);
	mdl_events_give(again);
	/* one over MDL_EVENTS_CACHE_BYTES is freed at the give (ASan: no leak) */
	CHECK_EQ_INT(mdl_events_take(1000, 1 << 20, &again), 0);
	CHECK(again == b);
	static char big[MDL_EVENT_TEXT_MAX];
	memset(big, 'x', sizeof(big) - 1);
	struct mdl_event e_big = mk(MDL_EV_LOG, "j", big, "{}");
	size_t added = 0;
	while (added * (sizeof(big) - 1) <= MDL_EVENTS_CACHE_BYTES &&
	       mdl_events_add(again, &e_big) == 0)
		added++;
	CHECK(added * (sizeof(big) - 1) > MDL_EVENTS_CACHE_BYTES);
	mdl_events_give(again);
	CHECK_EQ_INT(mdl_events_take(10, 100, &again), 0);
	CHECK_EQ_INT(mdl_events_count(again), 0);
	mdl_events_give(again);
}

static void test_round_trip(void)
{
	struct mdl_events *b = sample(), *d;
	CHECK(b && mdl_events_count(b) == 4);
	CHECK_EQ_INT(mdl_events_new(100, 1 << 20, &d), 0);
	struct rdb_buf buf;
	rdb_buf_init(&buf, 1 << 20);
	CHECK_EQ_INT(sto_events_encode(b, &buf), 0);
	CHECK_EQ_INT(sto_events_decode(d, buf.data, buf.len), 0);
	CHECK(same_batch(b, d));
	/* Decoding again replaces the content. */
	CHECK_EQ_INT(sto_events_decode(d, buf.data, buf.len), 0);
	CHECK(same_batch(b, d));
	/* Encode appends: a prefix stays, and the tail decodes alone. */
	struct rdb_buf two;
	rdb_buf_init(&two, 1 << 20);
	CHECK_EQ_INT(rdb_buf_append(&two, "HDR", 3), 0);
	CHECK_EQ_INT(sto_events_encode(b, &two), 0);
	CHECK(two.len == buf.len + 3 && memcmp(two.data + 3, buf.data, buf.len) == 0);
	rdb_buf_free(&two);
	/* An empty batch: 4 bytes, decodes to nothing. */
	struct mdl_events *empty;
	CHECK_EQ_INT(mdl_events_new(1, 1, &empty), 0);
	struct rdb_buf e;
	rdb_buf_init(&e, 64);
	CHECK_EQ_INT(sto_events_encode(empty, &e), 0);
	CHECK_EQ_INT(e.len, 4);
	CHECK_EQ_INT(sto_events_decode(d, e.data, e.len), 0);
	CHECK_EQ_INT(mdl_events_count(d), 0);
	rdb_buf_free(&e);
	/* A bounded output buffer refuses. */
	struct rdb_buf small;
	rdb_buf_init(&small, buf.len - 1);
	CHECK_EQ_INT(sto_events_encode(b, &small), RDB_ELIMIT);
	rdb_buf_free(&small);
	/* Decoding into a smaller batch hits its bounds. */
	struct mdl_events *tiny;
	CHECK_EQ_INT(mdl_events_new(2, 1 << 20, &tiny), 0);
	CHECK_EQ_INT(sto_events_decode(tiny, buf.data, buf.len), RDB_ELIMIT);
	mdl_events_free(tiny);
	rdb_buf_free(&buf);
	mdl_events_free(empty);
	mdl_events_free(d);
	mdl_events_free(b);
}

/* Decodes an exact-size heap copy (so ASan sees overreads). */
static int decode_copy(struct mdl_events *d, const uint8_t *p, size_t n)
{
	uint8_t *c = malloc(n ? n : 1);
	if (n)
		memcpy(c, p, n);
	int rc = sto_events_decode(d, c, n);
	free(c);
	return rc;
}

static void test_hostile_decode(void)
{
	struct mdl_events *b = sample(), *d;
	CHECK_EQ_INT(mdl_events_new(100, 1 << 20, &d), 0);
	struct rdb_buf buf;
	rdb_buf_init(&buf, 1 << 20);
	CHECK_EQ_INT(sto_events_encode(b, &buf), 0);
	size_t n = buf.len;
	uint8_t *p = malloc(n + 8);
	memcpy(p, buf.data, n);
	/* Every truncation is corrupt. */
	int bad = 0;
	for (size_t k = 0; k < n; k++)
		bad += decode_copy(d, p, k) != RDB_ECORRUPT;
	CHECK_EQ_INT(bad, 0);
	/* Trailing bytes. */
	p[n] = 0;
	CHECK_EQ_INT(decode_copy(d, p, n + 1), RDB_ECORRUPT);
	/* A count larger or smaller than the events. */
	p[0] = 5;
	CHECK_EQ_INT(decode_copy(d, p, n), RDB_ECORRUPT);
	p[0] = 3;
	CHECK_EQ_INT(decode_copy(d, p, n), RDB_ECORRUPT);
	memset(p, 0xff, 4);
	CHECK_EQ_INT(decode_copy(d, p, n), RDB_ECORRUPT);
	memcpy(p, buf.data, n);
	/* Event 0 starts at 4: kind, job length, job bytes, text length. */
	p[4] = 0;
	CHECK_EQ_INT(decode_copy(d, p, n), RDB_ECORRUPT);
	p[4] = 9;
	CHECK_EQ_INT(decode_copy(d, p, n), RDB_ECORRUPT);
	p[4] = MDL_EV_LOG;
	p[4 + 34] = 0; /* job length 0 */
	CHECK_EQ_INT(decode_copy(d, p, n), RDB_ECORRUPT);
	p[4 + 34] = 200; /* job length past MDL_JOB_MAX */
	CHECK_EQ_INT(decode_copy(d, p, n), RDB_ECORRUPT);
	p[4 + 34] = 5;
	p[4 + 35] = ' '; /* job "run-1" -> " un-1" */
	CHECK_EQ_INT(decode_copy(d, p, n), RDB_ECORRUPT);
	p[4 + 35] = 'r';
	static const uint8_t huge[][4] = {
	    {0xff, 0xff, 0xff, 0xff}, {0x00, 0x00, 0x01, 0x00}, {0xfc, 0xff, 0xff, 0xff}};
	for (size_t i = 0; i < 3; i++) {
		memcpy(p + 4 + 35 + 5, huge[i], 4); /* text length */
		CHECK_EQ_INT(decode_copy(d, p, n), RDB_ECORRUPT);
	}
	memcpy(p, buf.data, n);
	CHECK_EQ_INT(decode_copy(d, p, n), 0);
	CHECK(same_batch(b, d));
	/* Random byte flips: never a crash or overread; success only with sane
	 * events. */
	uint64_t x = 0x9e3779b97f4a7c15ull;
	int odd = 0;
	for (int i = 0; i < 20000; i++) {
		memcpy(p, buf.data, n);
		for (int k = 0; k < 1 + i % 3; k++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			p[x % n] ^= (uint8_t)(1u << (x >> 32) % 8);
		}
		int rc = decode_copy(d, p, n);
		if (rc != 0 && rc != RDB_ECORRUPT) {
			odd++;
			continue;
		}
		for (size_t j = 0; rc == 0 && j < mdl_events_count(d); j++) {
			const struct mdl_event *e = mdl_events_at(d, j);
			if (e->kind < MDL_EV_LOG || e->kind > MDL_EV_SPAN || e->job_len == 0 ||
			    e->job_len > MDL_JOB_MAX || e->text_len > MDL_EVENT_TEXT_MAX ||
			    e->fields_len > MDL_EVENT_FIELDS_MAX)
				odd++;
		}
	}
	CHECK_EQ_INT(odd, 0);
	CHECK_EQ_INT(decode_copy(d, NULL, 0), RDB_ECORRUPT);
	free(p);
	rdb_buf_free(&buf);
	mdl_events_free(d);
	mdl_events_free(b);
}

static void test_levels(void)
{
	static const struct {
		const char *s;
		uint8_t level;
	} ok[] = {{"debug", MDL_LEVEL_DEBUG},	 {"DEBUG", MDL_LEVEL_DEBUG},
		  {"info", MDL_LEVEL_INFO},	 {"Info", MDL_LEVEL_INFO},
		  {"warn", MDL_LEVEL_WARN},	 {"warning", MDL_LEVEL_WARN},
		  {"WARNING", MDL_LEVEL_WARN},	 {"error", MDL_LEVEL_ERROR},
		  {"err", MDL_LEVEL_ERROR},	 {"fatal", MDL_LEVEL_FATAL},
		  {"critical", MDL_LEVEL_FATAL}, {"CRITICAL", MDL_LEVEL_FATAL}};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		uint8_t l = 99;
		CHECK_EQ_INT(mdl_level_parse(ok[i].s, strlen(ok[i].s), &l), 0);
		CHECK_EQ_INT(l, ok[i].level);
	}
	static const char *bad[] = {"",	      "inf",   "infos", "warn ",    " warn",
				    "fatal!", "level", "e",	"debugging"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint8_t l = 99;
		CHECK_EQ_INT(mdl_level_parse(bad[i], strlen(bad[i]), &l), RDB_EINVAL);
		CHECK_EQ_INT(l, 99);
	}
	/* Length-bounded: no NUL needed, the rest of the buffer is ignored. */
	uint8_t l = 99;
	CHECK_EQ_INT(mdl_level_parse("errorXYZ", 5, &l), 0);
	CHECK_EQ_INT(l, MDL_LEVEL_ERROR);
	CHECK_EQ_INT(mdl_level_parse("errorXYZ", 4, &l), RDB_EINVAL);
	static const char *names[] = {"debug", "info", "warn", "error", "fatal"};
	for (uint8_t i = 0; i <= MDL_LEVEL_FATAL; i++) {
		CHECK(strcmp(mdl_level_name(i), names[i]) == 0);
		/* name -> parse -> same level */
		CHECK_EQ_INT(mdl_level_parse(names[i], strlen(names[i]), &l), 0);
		CHECK_EQ_INT(l, i);
	}
	CHECK(strcmp(mdl_level_name(5), "unknown") == 0);
	CHECK(strcmp(mdl_level_name(255), "unknown") == 0);
}

int main(void)
{
	RUN(test_add_at);
	RUN(test_bounds);
	RUN(test_take_give);
	RUN(test_round_trip);
	RUN(test_hostile_decode);
	RUN(test_levels);
	return check_summary("events");
}
