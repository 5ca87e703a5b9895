/* fuzz_query_params.c - fuzz target for the query parameters of every GET
 * endpoint (range, downsample, cross-rank, outliers, jobs, logs, spans,
 * metrics listings): server/query_routes.c, events_routes.c, handlers.c and
 * the parsers they call.
 *
 * Input: byte 0 picks the endpoint; the rest is a query string
 * "k=v&k=v..." (already URL-decoded: bytes up to '&' and '='; a NUL in the
 * input ends a value, as libmicrohttpd's C strings do). The store holds a
 * few series (fuzz_srv.h). The target must never crash, leak, read out of
 * bounds or answer outside 100..599, whatever the parameters. */
#include "tests/fuzz/fuzz_srv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const paths[] = {
    "/api/v1/query/range",
    "/api/v1/query/downsample",
    "/api/v1/query/crossrank",
    "/api/v1/query/outliers",
    "/api/v1/jobs",
    "/api/v1/jobs/j1",
    "/api/v1/jobs/j1/metrics",
    "/api/v1/jobs/j1/ranks",
    "/api/v1/logs",
    "/api/v1/spans",
    "/api/v1/jobs/j1/meta",
    "/metrics",
    "/api/v1/logs/around",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 65536 || fz_init() != 0)
		return 0;
	const char *path = paths[data[0] % (sizeof(paths) / sizeof(paths[0]))];
	char *q = malloc(size);
	if (!q)
		return 0;
	memcpy(q, data + 1, size - 1);
	q[size - 1] = 0;
	struct srv_arg args[SRV_MAX_ARGS + 1];
	int n = 0;
	for (char *p = q, *end = q + size - 1; p < end && n <= SRV_MAX_ARGS;) {
		char *amp = memchr(p, '&', (size_t)(end - p));
		if (amp)
			*amp = 0;
		char *eq = strchr(p, '=');
		if (eq)
			*eq = 0;
		args[n].key = p;
		args[n].val = eq ? eq + 1 : "";
		n++;
		p = amp ? amp + 1 : end;
	}
	fz_run("GET", path, args, n, NULL, 0);
	free(q);
	return 0;
}
