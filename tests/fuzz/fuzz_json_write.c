/* fuzz_json_write.c - libFuzzer target for ing_json_parse (ingest/json_write.c).
 *
 * Parses the input with default limits into a batch of at most 1e6 points
 * and 1e5 series, and checks the contract: on success the points added
 * equal the sum of the series' views, every view is non-empty and every key
 * is valid; on failure the error code is one of the documented ones and
 * err.msg is non-empty, NUL-terminated, printable ASCII. Any violation
 * aborts, which the fuzzer reports. The batch is reused across inputs
 * (reset each time) the way the server reuses it across requests. Also
 * builds as a replay program (fuzz_main.c) run over corpus/json_write.
 */
#include "ingest/ing.h"
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

static void check_success(const struct sto_batch *b, size_t nrecords)
{
	size_t sum = 0;
	if (nrecords == 0)
		abort();
	for (size_t i = 0; i < sto_batch_nseries(b); i++) {
		const struct sto_batch_series *s = sto_batch_series_at(b, i);
		if (!s || s->pts.n == 0)
			abort();
		if (!sto_job_valid(s->key.job, strlen(s->key.job)) ||
		    !sto_metric_valid(s->key.metric, strlen(s->key.metric)))
			abort();
		if (s->key.rank > STO_RANK_MAX && s->key.rank != STO_RANK_JOB)
			abort();
		sum += s->pts.n;
	}
	if (sum != sto_batch_points(b) || sum == 0)
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
	static struct sto_batch *b;
	if (!b && sto_batch_new(1000000, 100000, &b) != 0)
		return 0;
	sto_batch_reset(b);
	struct ing_limits lim;
	ing_limits_default(&lim);
	struct ing_error err;
	memset(&err, 0xa5, sizeof(err));
	size_t nrecords = 0;
	int rc = ing_json_parse((const char *)data, size, &lim, 42, b, &err, &nrecords);
	if (rc == 0)
		check_success(b, nrecords);
	else
		check_failure(rc, &err);
	return 0;
}
