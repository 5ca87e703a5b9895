/* fuzz_rules.c - libFuzzer target for the detection rules file parser
 * (det_rules_parse_text, detect/rules.c).
 *
 * Checks the contract: the return code is 0, RDB_EINVAL, RDB_ELIMIT or
 * -ENOMEM; on failure the output pointer is untouched and the error is one
 * printable line that starts with the file name; on success every rule
 * resolved for a few job names (matching and not matching typical
 * patterns) has its parameters within the bounds of the built-in table, at
 * most DET_WEBHOOKS_MAX http(s) webhooks, and every metric lookup of the
 * input's words terminates. Any violation aborts, which the fuzzer reports.
 * Also builds as a replay program (fuzz_main.c) run over corpus/rules.
 */
#include "detect/rules.h"
#include "common/rdb_err.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_eff(const struct det_rule_eff *eff)
{
	for (unsigned i = 0; i < DET_RULE_COUNT; i++) {
		const struct det_rule_spec *s = det_rule_spec(i);
		if (eff[i].severity > DET_SEV_CRITICAL || eff[i].nwebhooks > DET_WEBHOOKS_MAX ||
		    eff[i].for_s > 7 * 86400)
			abort();
		for (uint32_t k = 0; k < s->nparams; k++)
			if (!(eff[i].p[k] >= s->params[k].min && eff[i].p[k] <= s->params[k].max))
				abort();
		for (uint32_t w = 0; w < eff[i].nwebhooks; w++)
			if (strncmp(eff[i].webhooks[w], "http", 4) != 0)
				abort();
	}
	if (eff[DET_R_STRAGGLER].p[DET_P_ST_HITS] > eff[DET_R_STRAGGLER].p[DET_P_ST_WINDOW])
		abort();
}

static void check_error(const char *err)
{
	if (strncmp(err, "fz:", 3) != 0)
		abort();
	for (const char *p = err; *p; p++)
		if ((unsigned char)*p < 0x20)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const jobs[] = {"a", "team-a-1", "sweep-42", "x.y_z-0"};
	struct det_rules *r = (struct det_rules *)&r;
	char err[512];
	err[0] = 0;
	int rc = det_rules_parse_text((const char *)data, size, "fz", &r, err, sizeof(err));
	if (rc != 0) {
		if (rc != RDB_EINVAL && rc != RDB_ELIMIT && rc != -ENOMEM)
			abort();
		if (r != (struct det_rules *)&r)
			abort();
		check_error(err);
		return 0;
	}
	struct det_rule_eff eff[DET_RULE_COUNT];
	for (size_t i = 0; i < sizeof(jobs) / sizeof(jobs[0]); i++) {
		det_rules_resolve(r, jobs[i], strlen(jobs[i]), eff);
		check_eff(eff);
	}
	/* look up every whitespace-separated word of the input as a metric */
	for (size_t i = 0; i < size;) {
		size_t k = i;
		while (k < size && data[k] > ' ')
			k++;
		struct det_metric_id id = det_rules_metric(r, (const char *)data + i, k - i);
		if (id.metric >= DET_MET_COUNT || id.phase >= DET_PH_COUNT)
			abort();
		i = k + 1;
	}
	det_rules_free(r);
	return 0;
}
