/* fuzz_json_write.c - libFuzzer target for ing_json_parse_all and
 * ing_json_parse (ingest/json_write.c).
 *
 * Parses the input with default limits into a batch of at most 1e6 points
 * and 1e5 series and an events batch of at most 1e5 events, and checks the
 * contract: on success the points added equal the sum of the series'
 * views, every view is non-empty and every key is valid; there are no more
 * events than records, and every event is in bounds (kind, level, job,
 * rank, step, duration; a log's message valid UTF-8 and its fields a
 * "{...}" text that parses back to itself; a span's name a valid name and
 * no fields). On failure the error code is one of the documented ones and
 * err.msg is non-empty, NUL-terminated, printable ASCII. The same input
 * without an events batch (ing_json_parse) must give the same points when
 * it has no log/span records, and fail when it has. Any violation aborts,
 * which the fuzzer reports. The batches are reused across inputs (reset
 * each time) the way the server reuses them across requests. Also builds as
 * a replay program (fuzz_main.c) run over corpus/json_write.
 */
#include "ingest/ing.h"
#include "common/rdb_err.h"
#include "model/events.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool printable_within(const char *s, size_t cap)
{
	const char *nul = memchr(s, 0, cap);
	if (!nul)
		return false;
	for (; s < nul; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
			return false;
	return true;
}

/* An independent UTF-8 check: decode each code point and check its range
 * and that it used the shortest form. */
static bool utf8_ok(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned c = s[i];
		size_t len = c < 0x80	      ? 1
			     : (c >> 5) == 6  ? 2
			     : (c >> 4) == 14 ? 3
			     : (c >> 3) == 30 ? 4
					      : 0;
		if (len == 0 || n - i < len)
			return false;
		uint32_t cp = len == 1 ? c : c & (0x7fu >> len);
		for (size_t k = 1; k < len; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + k] & 0x3fu);
		}
		static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
		if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += len;
	}
	return true;
}

/* A log's fields text, parsed again inside a log record, must give itself. */
static void check_fields_fixpoint(const char *fields, size_t len)
{
	static struct mdl_batch *b;
	static struct mdl_events *ev;
	if ((!b && mdl_batch_new(16, 16, &b) != 0) || (!ev && mdl_events_new(4, 1 << 20, &ev) != 0))
		abort();
	mdl_batch_reset(b);
	mdl_events_reset(ev);
	static const char pre[] =
	    "{\"type\":\"log\",\"job\":\"j\",\"rank\":0,\"message\":\"\",\"fields\":";
	size_t n = sizeof(pre) - 1;
	char *body = malloc(n + len + 1);
	if (!body)
		abort();
	memcpy(body, pre, n);
	memcpy(body + n, fields, len);
	body[n + len] = '}';
	struct ing_limits lim;
	ing_limits_default(&lim);
	struct ing_error err;
	int rc = ing_json_parse_all(body, n + len + 1, &lim, 0, b, ev, &err, NULL);
	free(body);
	if (rc != 0 || mdl_events_count(ev) != 1)
		abort();
	const struct mdl_event *e = mdl_events_at(ev, 0);
	if (e->fields_len != len || memcmp(e->fields, fields, len) != 0)
		abort();
}

static void check_event(const struct mdl_event *e, bool *first_fields)
{
	if (!mdl_job_valid(e->job, e->job_len) ||
	    (e->rank > MDL_RANK_MAX && e->rank != MDL_RANK_JOB))
		abort();
	if (e->step < 0 && e->step != MDL_STEP_NONE)
		abort();
	if (e->kind == MDL_EV_SPAN) {
		if (e->level != 0 || e->fields_len != 0 || e->duration_ns < 0 || e->step < 0 ||
		    e->text_len > MDL_SPAN_NAME_MAX || !mdl_metric_valid(e->text, e->text_len))
			abort();
		return;
	}
	if (e->kind != MDL_EV_LOG || e->level > MDL_LEVEL_FATAL || e->duration_ns != 0 ||
	    e->text_len > MDL_EVENT_TEXT_MAX || e->fields_len > MDL_EVENT_FIELDS_MAX ||
	    e->fields_len < 2 || e->fields[0] != '{' || e->fields[e->fields_len - 1] != '}' ||
	    !utf8_ok((const unsigned char *)e->text, e->text_len) ||
	    !utf8_ok((const unsigned char *)e->fields, e->fields_len))
		abort();
	if (*first_fields) {
		*first_fields = false;
		check_fields_fixpoint(e->fields, e->fields_len);
	}
}

static void check_success(const struct mdl_batch *b, const struct mdl_events *ev, size_t nrecords)
{
	size_t sum = 0;
	if (nrecords == 0 || mdl_events_count(ev) > nrecords)
		abort();
	bool first_fields = true;
	for (size_t i = 0; i < mdl_events_count(ev); i++) {
		const struct mdl_event *e = mdl_events_at(ev, i);
		if (!e)
			abort();
		check_event(e, &first_fields);
	}
	for (size_t i = 0; i < mdl_batch_nseries(b); i++) {
		const struct mdl_batch_series *s = mdl_batch_series_at(b, i);
		if (!s || s->pts.n == 0)
			abort();
		if (!mdl_job_valid(s->key.job, strlen(s->key.job)) ||
		    !mdl_metric_valid(s->key.metric, strlen(s->key.metric)))
			abort();
		if (s->key.rank > MDL_RANK_MAX && s->key.rank != MDL_RANK_JOB)
			abort();
		sum += s->pts.n;
	}
	if (sum != mdl_batch_points(b) || (sum == 0 && mdl_events_count(ev) == 0))
		abort();
}

static void check_failure(int rc, const struct ing_error *err)
{
	if (rc != RDB_EINVAL && rc != RDB_ELIMIT && rc != -ENOMEM)
		abort();
	if (err->msg[0] == 0 || !printable_within(err->msg, sizeof(err->msg)) ||
	    !printable_within(err->field, sizeof(err->field)))
		abort();
	if (err->record < -1 || err->line < 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct mdl_batch *b;
	static struct mdl_events *ev;
	if (!b && mdl_batch_new(1000000, 100000, &b) != 0)
		return 0;
	if (!ev && mdl_events_new(100000, 64u << 20, &ev) != 0)
		return 0;
	mdl_batch_reset(b);
	mdl_events_reset(ev);
	struct ing_limits lim;
	ing_limits_default(&lim);
	struct ing_error err;
	memset(&err, 0xa5, sizeof(err));
	size_t nrecords = 0;
	int rc = ing_json_parse_all((const char *)data, size, &lim, 42, b, ev, &err, &nrecords);
	if (rc != 0) {
		check_failure(rc, &err);
		return 0;
	}
	check_success(b, ev, nrecords);
	/* Without an events batch: the same points, or an error if there were
	 * log or span records. */
	size_t points = mdl_batch_points(b), nev = mdl_events_count(ev), n2 = 0;
	mdl_batch_reset(b);
	memset(&err, 0xa5, sizeof(err));
	rc = ing_json_parse((const char *)data, size, &lim, 42, b, &err, &n2);
	if (nev == 0 && (rc != 0 || n2 != nrecords || mdl_batch_points(b) != points))
		abort();
	if (nev > 0 && (rc != RDB_EINVAL || strstr(err.msg, "not accepted here") == NULL))
		abort();
	return 0;
}
