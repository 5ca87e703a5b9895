/* test_params.c - unit tests for the query-parameter parsers every route
 * shares (server/srv.h): a rank is a decimal 0..MDL_RANK_MAX or "job", and
 * anything else is refused without touching the output; comma lists skip
 * empty items and stop at their bound or their first bad item. */
#include "check.h"
#include "common/rdb_err.h"
#include "model/series.h"
#include "server/srv.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

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

/* Comma lists: empty items skipped, the limit counts items, not commas. */
static void test_split_commas(void)
{
	char s[] = ",a,,bc,";
	const char *tok[2];
	size_t n = 0;
	CHECK_EQ_INT(srv_split_commas(s, tok, 2, &n), 0);
	CHECK_EQ_INT(n, 2);
	CHECK(strcmp(tok[0], "a") == 0 && strcmp(tok[1], "bc") == 0);
	char t[] = "x,y,z";
	n = 0;
	CHECK_EQ_INT(srv_split_commas(t, tok, 2, &n), RDB_ELIMIT);
	CHECK_EQ_INT(n, 2);
	char e[] = ",,";
	n = 0;
	CHECK_EQ_INT(srv_split_commas(e, tok, 0, &n), 0);
	CHECK_EQ_INT(n, 0);
}

/* Rank lists append in order, name the bad item, and stop at the limit or
 * the first bad item, whichever comes first. */
static void test_rank_list(void)
{
	uint32_t r[3] = {9, 9, 9};
	size_t n = 1;
	const char *bad = NULL;
	char a[] = "3,,job";
	CHECK_EQ_INT(srv_parse_rank_list(a, r, 3, &n, &bad), 0);
	CHECK_EQ_INT(n, 3);
	CHECK(r[0] == 9 && r[1] == 3 && r[2] == MDL_RANK_JOB);
	char b[] = "1,x2,3";
	n = 0;
	CHECK_EQ_INT(srv_parse_rank_list(b, r, 3, &n, &bad), RDB_EINVAL);
	CHECK_EQ_INT(n, 1);
	CHECK(bad && strcmp(bad, "x2") == 0);
	char c[] = "1,2,oops";
	n = 0;
	bad = NULL;
	CHECK_EQ_INT(srv_parse_rank_list(c, r, 2, &n, &bad), RDB_EINVAL);
	CHECK(bad && strcmp(bad, "oops") == 0);
	char d[] = "1,2,3";
	n = 0;
	CHECK_EQ_INT(srv_parse_rank_list(d, r, 2, &n, &bad), RDB_ELIMIT);
	CHECK_EQ_INT(n, 2);
}

int main(void)
{
	RUN(test_parse_rank);
	RUN(test_split_commas);
	RUN(test_rank_list);
	return check_summary("params");
}
