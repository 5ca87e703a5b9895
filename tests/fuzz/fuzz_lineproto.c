/* fuzz_lineproto.c - libFuzzer target for ing_lp_parse (ingest/lineproto.c).
 *
 * Parses the input with default options (default_job "fz", precision taken
 * from the first byte so every unit is exercised) into a bounded batch and
 * event batch, and checks the contract: the return code is 0, RDB_ELIMIT
 * or -ENOMEM; res->points equals the batch's points and res->events its
 * events; every series key and event is valid; nerrors <= lines_bad (+1
 * for the limit error) and <= ING_LP_MAX_ERRORS; every kept error has a
 * printable, non-empty message, a printable field, record >= 0, line >= 1.
 * Any violation aborts, which the fuzzer reports. The batches are reused
 * across inputs the way the server reuses them across requests. Also
 * builds as a replay program (fuzz_main.c) run over corpus/lineproto.
 */
#include "ingest/lp.h"
#include "common/rdb_err.h"

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

static void check_batch(const struct mdl_batch *b, const struct ing_lp_result *res)
{
	size_t sum = 0;
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
	if (sum != mdl_batch_points(b) || sum != res->points)
		abort();
}

static void check_events(const struct mdl_events *ev, const struct ing_lp_result *res)
{
	if (mdl_events_count(ev) != res->events)
		abort();
	for (size_t i = 0; i < res->events; i++) {
		const struct mdl_event *e = mdl_events_at(ev, i);
		if (!e || !mdl_job_valid(e->job, e->job_len) || e->duration_ns < 0)
			abort();
		if (e->kind == MDL_EV_LOG && (e->fields_len < 2 || e->fields[0] != '{' ||
					      e->fields[e->fields_len - 1] != '}'))
			abort();
		if (e->kind == MDL_EV_SPAN && (e->text_len == 0 || e->step < 0))
			abort();
	}
}

static void check_errors(int rc, const struct ing_lp_result *res)
{
	size_t extra = rc == RDB_ELIMIT;
	if (res->nerrors > ING_LP_MAX_ERRORS || res->nerrors > res->lines_bad + extra)
		abort();
	if (res->lines_bad > 0 && res->nerrors == 0)
		abort();
	for (size_t i = 0; i < res->nerrors; i++) {
		const struct ing_error *e = &res->errors[i];
		if (e->msg[0] == 0 || !printable_within(e->msg, sizeof(e->msg)) ||
		    !printable_within(e->field, sizeof(e->field)) || e->record < 0 || e->line < 1)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int64_t units[] = {1, 1000, 1000000, 1000000000, 60000000000LL};
	static struct mdl_batch *b;
	static struct mdl_events *ev;
	if (!b && mdl_batch_new(100000, 10000, &b) != 0)
		return 0;
	if (!ev && mdl_events_new(1000, 1 << 20, &ev) != 0)
		return 0;
	mdl_batch_reset(b);
	mdl_events_reset(ev);
	struct ing_lp_options opt;
	ing_lp_options_default(&opt);
	opt.default_job = "fz";
	opt.default_ts_ns = 42;
	opt.precision_ns = units[size ? data[0] % 5 : 0];
	struct ing_lp_result res;
	memset(&res, 0xa5, sizeof(res));
	int rc = ing_lp_parse((const char *)data, size, &opt, b, ev, &res);
	if (rc != 0 && rc != RDB_ELIMIT && rc != -ENOMEM)
		abort();
	check_batch(b, &res);
	check_events(ev, &res);
	check_errors(rc, &res);
	return 0;
}
