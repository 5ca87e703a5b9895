/* test_detect_rules.c - the rules: built-in table, the rules file parser
 * (valid files and every kind of error, each named by file:line and
 * option), per-job overrides, aliases, the generated sample file, and the
 * engine applying the rule in force (enabled, for, severity, webhooks,
 * parameters, reload). */
#include "check.h"
#include "detect_gen.h"

#include "common/rdb_buf.h"
#include "common/rdb_err.h"
#include "model/batch.h"

#include <errno.h>
#include <unistd.h>

static int parse(const char *text, struct det_rules **out, char *err, size_t errlen)
{
	*out = NULL;
	return det_rules_parse_text(text, strlen(text), "r.conf", out, err, errlen);
}

static void test_defaults(void)
{
	struct det_rules *r;
	CHECK_EQ_INT(det_rules_default(&r), 0);
	struct det_rule_eff eff[DET_RULE_COUNT];
	det_rules_resolve(r, "any", 3, eff);
	for (unsigned i = 0; i < DET_RULE_COUNT; i++) {
		const struct det_rule_spec *s = det_rule_spec(i);
		CHECK(s != NULL && s->alertname && s->doc && s->nparams <= DET_PARAMS_MAX);
		CHECK_EQ_INT(eff[i].enabled, s->enabled);
		CHECK_EQ_INT(eff[i].for_s, s->for_s);
		CHECK_EQ_INT(det_rule_by_name(s->alertname), i);
		for (uint32_t k = 0; k < s->nparams; k++) {
			CHECK(eff[i].p[k] == s->params[k].def);
			CHECK(s->params[k].def >= s->params[k].min &&
			      s->params[k].def <= s->params[k].max);
		}
	}
	CHECK(eff[DET_R_STRAGGLER].p[DET_P_ST_REL] == 0.1);
	CHECK(eff[DET_R_TRAINING_HANG].p[DET_P_HG_MIN_S] == 10);
	CHECK(eff[DET_R_RANK_DOWN].p[DET_P_RD_SILENCE_S] == 30);
	CHECK(eff[DET_R_GPU_OVERHEAT].p[DET_P_GO_TEMP_C] == 85);
	CHECK_EQ_INT(eff[DET_R_THROUGHPUT_DROP].for_s, 30);
	CHECK(det_rule_spec(DET_RULE_COUNT) == NULL);
	CHECK_EQ_INT(det_rule_by_name("Nope"), -1);
	struct det_metric_id id = det_rules_metric(r, "train.loss", 10);
	CHECK_EQ_INT(id.metric, DET_MET_LOSS);
	id = det_rules_metric(r, "DCGM_FI_DEV_SM_CLOCK", 20);
	CHECK_EQ_INT(id.metric, DET_MET_GPU_SM_CLOCK);
	id = det_rules_metric(r, "step_time.fwd", 13);
	CHECK_EQ_INT(id.metric, DET_MET_PHASE);
	CHECK_EQ_INT(id.phase, DET_PH_FORWARD);
	id = det_rules_metric(r, "step_time", 9);
	CHECK(id.metric == DET_MET_PHASE && id.phase == DET_PH_STEP);
	id = det_rules_metric(r, "my.own.metric", 13);
	CHECK_EQ_INT(id.metric, DET_MET_NONE);
	/* with the hash a batch series carries: the same answers */
	static const char *const names[] = {
	    "train.loss",	    "loss",	     "step_time.fwd", "step_time",
	    "DCGM_FI_DEV_SM_CLOCK", "my.own.metric", "gpu.temp"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		size_t n = strlen(names[i]);
		struct det_metric_id a = det_rules_metric(r, names[i], n);
		struct det_metric_id b =
		    det_rules_metric_hashed(r, names[i], n, mdl_metric_hash(names[i], n));
		CHECK(a.metric == b.metric && a.phase == b.phase);
	}
	det_rules_free(r);
	det_rules_free(NULL);
}

static void test_full_file(void)
{
	static const char text[] = "# operator rules\n"
				   "\n"
				   "[rule Straggler]\n"
				   "rel = 0.25   # a comment after a value\n"
				   "for = 2m\n"
				   "severity = critical\n"
				   "webhook = http://127.0.0.1:9/a\n"
				   "webhook = \"https://ctl.example/b#frag\"\n"
				   "[rule CheckpointStale]\n"
				   "max_age_s = 2h\n"
				   "always = 1\n"
				   "[rule LossSpike]\n"
				   "enabled = false\n"
				   "[job \"team-a-*\"]\n"
				   "LossSpike.enabled = true\n"
				   "Straggler.webhook = http://127.0.0.1:9/team-a\n"
				   "[job team-a-big?]\n"
				   "Straggler.rel = 0.5\n"
				   "[aliases]\n"
				   "my_loss = loss\n"
				   "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL = gpu.ecc.uncorrectable\n"
				   "train.loss = grad_norm\n";
	struct det_rules *r;
	char err[512] = "";
	CHECK_EQ_INT(parse(text, &r, err, sizeof(err)), 0);
	if (!r) {
		fprintf(stderr, "%s\n", err);
		return;
	}
	size_t nj, na;
	det_rules_counts(r, &nj, &na);
	CHECK_EQ_INT(nj, 2);
	CHECK_EQ_INT(na, 3);
	struct det_rule_eff eff[DET_RULE_COUNT];
	det_rules_resolve(r, "other", 5, eff);
	CHECK(eff[DET_R_STRAGGLER].p[DET_P_ST_REL] == 0.25);
	CHECK_EQ_INT(eff[DET_R_STRAGGLER].for_s, 120);
	CHECK_EQ_INT(eff[DET_R_STRAGGLER].severity, DET_SEV_CRITICAL);
	CHECK_EQ_INT(eff[DET_R_STRAGGLER].nwebhooks, 2);
	CHECK(strcmp(eff[DET_R_STRAGGLER].webhooks[1], "https://ctl.example/b#frag") == 0);
	CHECK(eff[DET_R_CHECKPOINT_STALE].p[DET_P_CK_MAX_AGE_S] == 7200);
	CHECK(eff[DET_R_CHECKPOINT_STALE].p[DET_P_CK_ALWAYS] == 1);
	CHECK(!eff[DET_R_LOSS_SPIKE].enabled);
	det_rules_resolve(r, "team-a-1", 8, eff);
	CHECK(eff[DET_R_LOSS_SPIKE].enabled);
	CHECK_EQ_INT(eff[DET_R_STRAGGLER].nwebhooks, 1); /* the section's list replaces */
	CHECK(strcmp(eff[DET_R_STRAGGLER].webhooks[0], "http://127.0.0.1:9/team-a") == 0);
	CHECK(eff[DET_R_STRAGGLER].p[DET_P_ST_REL] == 0.25);
	det_rules_resolve(r, "team-a-big7", 11, eff);
	CHECK(eff[DET_R_STRAGGLER].p[DET_P_ST_REL] == 0.5);
	CHECK(eff[DET_R_LOSS_SPIKE].enabled);
	det_rules_resolve(r, "team-a-big77", 12, eff);
	CHECK(eff[DET_R_STRAGGLER].p[DET_P_ST_REL] == 0.25);
	CHECK_EQ_INT(det_rules_metric(r, "my_loss", 7).metric, DET_MET_LOSS);
	CHECK_EQ_INT(det_rules_metric(r, "train.loss", 10).metric, DET_MET_GRAD_NORM);
	CHECK_EQ_INT(det_rules_metric(r, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", 29).metric,
		     DET_MET_GPU_ECC_UNCORRECTABLE);
	CHECK_EQ_INT(det_rules_metric(r, "loss", 4).metric, DET_MET_LOSS);
	det_rules_free(r);
}

/* Each bad file is refused whole, with file:line, the option and what is
 * allowed. */
static void test_errors(void)
{
	static const struct {
		const char *text, *want1, *want2;
	} cases[] = {
	    {"k = 1\n", "r.conf:1:", "outside a section"},
	    {"[rule Nope]\n", "r.conf:1:", "allowed: LossNonFinite"},
	    {"\n[rule Straggler]\nnope = 1\n", "r.conf:3: [rule Straggler] unknown option 'nope'",
	     "hits"},
	    {"[rule Straggler]\nk = -1\n", "r.conf:2:", "allowed: a number 0..1000"},
	    {"[rule Straggler]\nhits = 2.5\n", "r.conf:2:", "a whole number"},
	    {"[rule Straggler]\nk = 1\nk = 2\n", "r.conf:3:", "set twice"},
	    {"[rule Straggler]\n[rule Straggler]\n", "r.conf:2:", "first on line 1"},
	    {"[rule Straggler]\nseverity = high\n", "r.conf:2:", "warning or critical"},
	    {"[rule Straggler]\nfor = 5x\n", "r.conf:2:", "suffix"},
	    {"[rule Straggler]\nfor = 8d\n", "r.conf:2:", "at most 7d"},
	    {"[rule Straggler]\nenabled = yes\n", "r.conf:2:", "true or false"},
	    {"[rule Straggler]\nwebhook = ftp://x\n", "r.conf:2:", "http://"},
	    {"[rule Straggler]\nwebhook = http://a/1\nwebhook = http://a/2\nwebhook = "
	     "http://a/3\nwebhook = http://a/4\nwebhook = http://a/5\n",
	     "r.conf:6:", "more than 4 webhooks"},
	    {"[rule Straggler]\n[job \"a b\"]\n", "r.conf:2: bad job pattern 'a b'", "wildcards"},
	    {"[job \"x\"]\nk = 1\n", "r.conf:2:", "Rule.option"},
	    {"[job \"x\"]\nStraggler.zz = 1\n", "r.conf:2:", "unknown option 'zz'"},
	    {"[aliases]\nfoo = bar\n", "r.conf:2:", "not a canonical metric name"},
	    {"[aliases]\nloss = grad_norm\n", "r.conf:2:", "canonical name"},
	    {"[aliases]\n[aliases]\n", "r.conf:2:", "twice"},
	    {"[rule Straggler]\nhits = 40\n", "r.conf:", "must not exceed window"},
	    {"[job \"j*\"]\nStraggler.window = 10\n", "r.conf:1: [job \"j*\"]",
	     "must not exceed window"},
	    {"[rule Straggler]\nk = \"1\n", "r.conf:2:", "unterminated"},
	    {"[rule Straggler\n", "r.conf:1:", "must end with ']'"},
	    {"[weird]\n", "r.conf:1:", "unknown section"},
	    {"[rule Straggler]\nk =\n", "r.conf:2:", "key and a value"},
	    {"[rule Straggler]\nk = 1e999\n", "r.conf:2:", "bad value"},
	    {"[rule RankDown]\nsilence_s = 0.5\n", "r.conf:2:", "1..86400"},
	    {"[rule Straggler]\nk = nan\n", "r.conf:2:", "bad value"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct det_rules *r = (struct det_rules *)&r;
		char err[512] = "";
		int rc = det_rules_parse_text(cases[i].text, strlen(cases[i].text), "r.conf", &r,
					      err, sizeof(err));
		CHECK(rc == RDB_EINVAL);
		CHECK(r == (struct det_rules *)&r); /* untouched */
		bool ok = strstr(err, cases[i].want1) && strstr(err, cases[i].want2);
		CHECK(ok);
		if (!ok)
			fprintf(stderr, "  case %zu: got '%s'\n", i, err);
	}
	/* a line too long, a NUL byte */
	char big[5000];
	memset(big, 'a', sizeof(big));
	memcpy(big, "[aliases]\n", 10);
	struct det_rules *r = NULL;
	char err[256];
	CHECK_EQ_INT(det_rules_parse_text(big, sizeof(big), "r.conf", &r, err, sizeof(err)),
		     RDB_EINVAL);
	CHECK(strstr(err, "r.conf:2: line longer") != NULL);
	CHECK_EQ_INT(det_rules_parse_text("[aliases]\0", 10, "r.conf", &r, err, sizeof(err)),
		     RDB_EINVAL);
	CHECK(r == NULL);
	CHECK_EQ_INT(det_rules_load_file("/nonexistent/rules.conf", &r, err, sizeof(err)), -ENOENT);
	CHECK(strstr(err, "/nonexistent/rules.conf") != NULL);
}

/* The generated sample documents every detector and parameter and parses
 * back to the built-in rules. */
static void test_sample_round_trip(void)
{
	struct rdb_buf b;
	rdb_buf_init(&b, 1 << 20);
	CHECK_EQ_INT(det_rules_sample(&b), 0);
	CHECK_EQ_INT(rdb_buf_putc(&b, 0), 0);
	const char *s = (const char *)b.data;
	for (unsigned i = 0; i < DET_RULE_COUNT; i++) {
		const struct det_rule_spec *sp = det_rule_spec(i);
		char head[80];
		snprintf(head, sizeof(head), "[rule %s]", sp->alertname);
		CHECK(strstr(s, head) != NULL);
		for (uint32_t k = 0; k < sp->nparams; k++)
			CHECK(strstr(s, sp->params[k].name) != NULL);
	}
	CHECK(strstr(s, "# DCGM_FI_DEV_GPU_TEMP = gpu.temp") != NULL);
	struct det_rules *r, *d;
	char err[512] = "";
	CHECK_EQ_INT(det_rules_parse_text(s, b.len - 1, "sample", &r, err, sizeof(err)), 0);
	if (err[0])
		fprintf(stderr, "  %s\n", err);
	CHECK_EQ_INT(det_rules_default(&d), 0);
	struct det_rule_eff a[DET_RULE_COUNT], z[DET_RULE_COUNT];
	if (r) {
		det_rules_resolve(r, "x", 1, a);
		det_rules_resolve(d, "x", 1, z);
		CHECK(memcmp(a, z, sizeof(a)) == 0);
	}
	/* and through a file */
	char path[512];
	const char *tmp = getenv("TMPDIR");
	snprintf(path, sizeof(path), "%s/rankdb-test-rules-%d.conf", tmp ? tmp : "/tmp",
		 (int)getpid());
	FILE *f = fopen(path, "wb");
	CHECK(f != NULL);
	if (f) {
		fwrite(s, 1, b.len - 1, f);
		fclose(f);
		struct det_rules *r2 = NULL;
		CHECK_EQ_INT(det_rules_load_file(path, &r2, err, sizeof(err)), 0);
		det_rules_free(r2);
		remove(path);
	}
	det_rules_free(r);
	det_rules_free(d);
	rdb_buf_free(&b);
}

/* The engine fills for_s, severity and webhooks from the rule in force for
 * the job, skips disabled detectors, uses parameters, and switches rule
 * sets on reload. */
static void test_engine_applies_rules(void)
{
	static const char text[] = "[rule LossNonFinite]\n"
				   "for = 45s\n"
				   "severity = warning\n"
				   "webhook = http://127.0.0.1:1/hook\n"
				   "[rule RankDown]\n"
				   "silence_s = 5\n"
				   "[job \"quiet-*\"]\n"
				   "LossNonFinite.enabled = false\n";
	struct gen g;
	gen_init_lim(&g, 4, 51, NULL, text);
	CHECK_EQ_INT(gen_run(&g, 30), 0);
	g.loss_next[1] = NAN;
	g.loss_next_set[1] = true;
	gen_step(&g);
	gen_eval(&g);
	const struct det_cond *c = gen_find(&g, "LossNonFinite", 1);
	CHECK(c != NULL);
	if (c) {
		CHECK_EQ_INT(c->for_s, 45);
		CHECK_EQ_INT(c->severity, DET_SEV_WARNING);
		CHECK_EQ_INT(c->nwebhooks, 1);
		CHECK(strcmp(c->webhooks[0], "http://127.0.0.1:1/hook") == 0);
		CHECK(strcmp(c->job, "job-a") == 0);
	}
	/* RankDown after 5 s instead of 30 */
	g.silent[2] = true;
	for (int i = 0; i < 20; i++)
		gen_step(&g);
	gen_eval(&g);
	CHECK(gen_find(&g, "RankDown", 2) != NULL);
	/* a job matching quiet-* does not get LossNonFinite */
	snprintf(g.job, sizeof(g.job), "quiet-1");
	g.silent[2] = false;
	g.step[2] = g.step[0];
	gen_run(&g, 30);
	g.loss_next[0] = NAN;
	g.loss_next_set[0] = true;
	gen_step(&g);
	gen_eval(&g);
	CHECK(g.nconds == 0 || strcmp(g.conds[0].job, "quiet-1") != 0);
	CHECK(gen_find(&g, "LossNonFinite", -2) == NULL);
	/* reload with the built-in rules: quiet-1 gets it now, with the default
	 * for, severity and no webhook */
	struct det_rules *d;
	CHECK_EQ_INT(det_rules_default(&d), 0);
	det_engine_set_rules(g.e, d);
	det_rules_free(g.rules);
	g.rules = d;
	gen_eval(&g);
	c = gen_find(&g, "LossNonFinite", 0);
	CHECK(c != NULL);
	if (c) {
		CHECK(strcmp(c->job, "quiet-1") == 0);
		CHECK_EQ_INT(c->for_s, 0);
		CHECK_EQ_INT(c->severity, DET_SEV_CRITICAL);
		CHECK_EQ_INT(c->nwebhooks, 0);
	}
	gen_free(&g);
}

int main(void)
{
	RUN(test_defaults);
	RUN(test_full_file);
	RUN(test_errors);
	RUN(test_sample_round_trip);
	RUN(test_engine_applies_rules);
	return check_summary("detect_rules");
}
