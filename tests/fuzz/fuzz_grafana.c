/* fuzz_grafana.c - fuzz target for the Grafana datasource's request bodies
 * (server/grafana*.c): targets, payloads, ad hoc filters and their regex
 * patterns (bounded by grafana_regex.c), time ranges, maxDataPoints.
 *
 * Input: byte 0 picks the endpoint (/query most often); the rest is the
 * JSON request body. The store holds a few series and a log record
 * (fuzz_srv.h). The target must never crash, leak, read out of bounds or
 * answer outside 100..599, and no pattern may make it slow or large. */
#include "tests/fuzz/fuzz_srv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const paths[] = {
    "/grafana/query",	    "/grafana/query",	 "/grafana/query",
    "/grafana/metrics",	    "/grafana/variable", "/grafana/tag-values",
    "/grafana/annotations", "/grafana/search",	 "/grafana/metric-payload-options",
    "/grafana/tag-keys",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 65536 || fz_init() != 0)
		return 0;
	const char *path = paths[data[0] % (sizeof(paths) / sizeof(paths[0]))];
	fz_run("POST", path, NULL, 0, data + 1, size - 1);
	return 0;
}
