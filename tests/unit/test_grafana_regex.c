/* test_grafana_regex.c - the bound on request-supplied regexes
 * (server/grafana_regex.c): patterns Grafana sends pass and match as
 * before; patterns whose compiled size explodes, backreferences, and
 * patterns past the length or nesting bound are refused before regcomp. */
#include "server/grafana_int.h"
#include "common/rdb_err.h"
#include "tests/unit/check.h"

#include <stdlib.h>
#include <string.h>

static bool accepted(const char *p)
{
	char why[200];
	uint32_t cost = 0;
	return gf_regex_check(p, &cost, why, sizeof(why)) == 0 && cost >= 1;
}

static void test_grafana_patterns_pass(void)
{
	static const char *const ok[] = {
	    "loss",
	    "train\\.loss",
	    "train.loss|step_.*",
	    "(loss|step_time)",
	    "gpu\\.(temp|power|util)",
	    "[a-z_]+\\.[0-9]{1,3}",
	    "(a{255})",
	    "x{2,}",
	    "[]a]+",
	    "[[:alpha:]]*",
	    "a{",
	    "{1}",
	    "(((((a)))))",
	    "",
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		CHECK(accepted(ok[i]));
		struct gf_regex rx;
		char why[200];
		int rc = gf_regex_compile(&rx, ok[i], why, sizeof(why));
		CHECK(rc == 0 || rc == RDB_EINVAL); /* "{1}" is regcomp's to refuse */
		gf_regex_free(&rx);
	}
	/* a multi-value interpolation of 100 metric names */
	char big[4096] = "(";
	for (int i = 0; i < 100; i++)
		snprintf(big + strlen(big), sizeof(big) - strlen(big), "%smetric_%03d_name",
			 i ? "|" : "", i);
	strcat(big, ")");
	CHECK(accepted(big));
}

static void test_explosive_patterns_refused(void)
{
	static const char *const bad[] = {
	    "((a{255}){255}){255}",
	    "(a{100}){100}",
	    "((a|b|c)*){1000}",
	    "([ab]*c?){2000}",
	    "(x+)+{1001}",
	    "a{99999}",
	    "a{1,99999}",
	    "(a)\\1",
	    "((a)b)\\2c",
	    "(.*){700}",
	    "((((((((((((((((((((((((((((((((((a))))))))))))))))))))))))))))))))))",
	    "(a{40}){40}{2}",
	    /* found by fuzzing: stacked operators make glibc's regcomp take seconds */
	    "(a**********b**********c**********)**********",
	    "l*****%***!**)****oss",
	    "a+*",
	    "a?{2}",
	    "(x)*{3}",
	    /* an unbalanced ')' would close the anchoring group: ^(a)|(b)$ */
	    "a)|(b",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char why[200] = "";
		uint32_t cost = 0;
		CHECK_EQ_INT(gf_regex_check(bad[i], &cost, why, sizeof(why)), RDB_EINVAL);
		CHECK(why[0] != 0);
		struct gf_regex rx;
		CHECK_EQ_INT(gf_regex_compile(&rx, bad[i], why, sizeof(why)), RDB_EINVAL);
		CHECK(!rx.ok);
	}
	char *longp = malloc(GF_REGEX_MAX_BYTES + 2);
	memset(longp, 'a', GF_REGEX_MAX_BYTES + 1);
	longp[GF_REGEX_MAX_BYTES + 1] = 0;
	CHECK(!accepted(longp));
	longp[GF_REGEX_MAX_BYTES] = 0;
	CHECK(!accepted(longp)); /* 4096 atoms: over the node bound */
	free(longp);
}

/* The count never under-counts: the product of nested repetition. */
static void test_cost_multiplies(void)
{
	char why[200];
	uint32_t c1 = 0, c2 = 0;
	CHECK_EQ_INT(gf_regex_check("(a{10}){10}", &c1, why, sizeof(why)), 0);
	CHECK(c1 >= 100);
	CHECK_EQ_INT(gf_regex_check("(a+){10}", &c2, why, sizeof(why)), 0);
	CHECK(c2 >= 20);
}

static void test_match_budget(void)
{
	struct gf g = {0};
	struct gf_regex rx;
	char why[200];
	CHECK_EQ_INT(gf_regex_compile(&rx, "loss|grad_.*", why, sizeof(why)), 0);
	CHECK(gf_regex_match(&g, &rx, "loss"));
	CHECK(gf_regex_match(&g, &rx, "grad_norm"));
	CHECK(!gf_regex_match(&g, &rx, "lossy"));
	CHECK(g.rx_work > 0 && !g.rx_over);
	g.rx_work = GF_REGEX_WORK_MAX - 1;
	CHECK(!gf_regex_match(&g, &rx, "loss"));
	CHECK(g.rx_over);
	CHECK_EQ_INT(g.status, 400);
	gf_regex_free(&rx);
}

int main(void)
{
	RUN(test_grafana_patterns_pass);
	RUN(test_explosive_patterns_refused);
	RUN(test_cost_multiplies);
	RUN(test_match_budget);
	return check_summary("grafana_regex");
}
