/* test_params.c - unit tests for the query-parameter parsers every route
 * shares (server/srv.h): a rank is a decimal 0..MDL_RANK_MAX or "job", and
 * anything else is refused without touching the output. */
#include "check.h"
#include "model/series.h"
#include "server/srv.h"

#include <errno.h>
#include <stdio.h>

static void test_parse_rank(void)
{
	uint32_t r = 7;
	CHECK_EQ_INT(srv_parse_rank("0", &r), 0);
	CHECK_EQ_INT(r, 0);
	CHECK_EQ_INT(srv_parse_rank("4095", &r), 0);
	CHECK_EQ_INT(r, 4095);
	CHECK_EQ_INT(srv_parse_rank("job", &r), 0);
	CHECK(r == MDL_RANK_JOB);
	char top[32];
	snprintf(top, sizeof(top), "%u", (unsigned)MDL_RANK_MAX);
	CHECK_EQ_INT(srv_parse_rank(top, &r), 0);
	CHECK(r == MDL_RANK_MAX);
	snprintf(top, sizeof(top), "%llu", (unsigned long long)MDL_RANK_MAX + 1);
	const char *refused[] = {top, "-1", "x", "", "1x", "Job", "99999999999999999999"};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		r = 7;
		CHECK_EQ_INT(srv_parse_rank(refused[i], &r), -EINVAL);
		CHECK_EQ_INT(r, 7);
	}
}

int main(void)
{
	RUN(test_parse_rank);
	return check_summary("params");
}
