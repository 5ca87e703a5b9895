/* test_detect_hw.c - hardware and invariant detectors (GpuOverheat,
 * GpuEccErrors, ConfigMismatch, CheckpointStale, MfuLow), the derived
 * series, and the engine's memory bound, against a synthetic run
 * (detect_gen.h). */
#include "check.h"
#include "detect_gen.h"

#include "common/rdb_err.h"

static void test_overheat_and_throttle(void)
{
	struct gen g;
	gen_init(&g, 8, 41);
	CHECK_EQ_INT(gen_run(&g, 100), 0);
	g.temp[1] = 90;
	g.clock[6] = 900;
	gen_step(&g);
	gen_eval(&g);
	const struct det_cond *c = gen_find(&g, "GpuOverheat", 1);
	CHECK(c != NULL);
	if (c) {
		CHECK(strcmp(c->metric, "gpu.temp") == 0);
		CHECK_EQ_INT(c->for_s, 30);
		CHECK(c->value > 85);
	}
	c = gen_find(&g, "GpuOverheat", 6);
	CHECK(c != NULL);
	if (c) {
		CHECK(strcmp(c->metric, "gpu.sm_clock") == 0);
		CHECK(c->baseline > 1350);
	}
	CHECK_EQ_INT(g.nconds, 2);
	/* the throttled clock never becomes the rank's own baseline */
	CHECK_EQ_INT(gen_run(&g, 200), 200);
	CHECK(gen_find(&g, "GpuOverheat", 6) != NULL);
	g.temp[1] = 65;
	g.clock[6] = 1410;
	CHECK_EQ_INT(gen_run(&g, 5), 0);
	gen_free(&g);
}

/* A lower clock at low utilisation is idling, not throttling. */
static void test_idle_clock_not_throttle(void)
{
	struct gen g;
	gen_init(&g, 4, 42);
	CHECK_EQ_INT(gen_run(&g, 50), 0);
	for (uint32_t r = 0; r < 4; r++) {
		gen_point(&g, r, "gpu.util", g.step[r], 5);
		gen_point(&g, r, "gpu.sm_clock", g.step[r], 300);
	}
	gen_eval(&g);
	CHECK_EQ_INT(g.nconds, 0);
	gen_free(&g);
}

static void test_ecc_and_xid(void)
{
	struct gen g;
	gen_init(&g, 4, 43);
	for (uint32_t r = 0; r < 4; r++) {
		gen_point(&g, r, "gpu.ecc.uncorrectable", 0, r == 2 ? 7 : 0); /* old errors */
		gen_point(&g, r, "DCGM_FI_DEV_XID_ERRORS", 0, 0);
	}
	CHECK_EQ_INT(gen_run(&g, 50), 0);
	gen_point(&g, 2, "gpu.ecc.uncorrectable", g.step[2], 7);
	gen_point(&g, 3, "gpu.ecc.uncorrectable", g.step[3], 1);
	gen_eval(&g);
	const struct det_cond *c = gen_find(&g, "GpuEccErrors", 3);
	CHECK(c != NULL);
	if (c) {
		CHECK(strcmp(c->metric, "gpu.ecc.uncorrectable") == 0);
		CHECK_EQ_INT(c->severity, DET_SEV_CRITICAL);
		CHECK(c->value == 1 && c->baseline == 0);
	}
	CHECK_EQ_INT(g.nconds, 1);
	gen_point(&g, 0, "DCGM_FI_DEV_XID_ERRORS", g.step[0], 79);
	gen_eval(&g);
	c = gen_find(&g, "GpuEccErrors", 0);
	CHECK(c != NULL);
	if (c)
		CHECK(strcmp(c->metric, "gpu.xid") == 0);
	CHECK_EQ_INT(g.nconds, 2);
	/* held for hold_s (1 h), then resolved */
	g.now_ns += 3601 * GEN_NS;
	gen_heartbeats(&g);
	gen_eval(&g);
	CHECK_EQ_INT(gen_count(&g, "GpuEccErrors"), 0);
	gen_free(&g);
}

static void test_config_mismatch(void)
{
	struct gen g;
	gen_init(&g, 8, 44);
	for (uint32_t r = 0; r < 8; r++) {
		gen_point(&g, r, "config_hash", INT64_MIN, r == 7 ? 1234567 : 7654321);
		gen_point(&g, r, "world_size", INT64_MIN, r == 4 ? 4 : 8);
	}
	gen_eval(&g);
	const struct det_cond *c = gen_find(&g, "ConfigMismatch", 7);
	CHECK(c != NULL);
	if (c) {
		CHECK(strcmp(c->metric, "config_hash") == 0);
		CHECK(c->value == 1234567 && c->baseline == 7654321);
	}
	c = gen_find(&g, "ConfigMismatch", 4);
	CHECK(c != NULL);
	if (c)
		CHECK(strcmp(c->metric, "world_size") == 0);
	CHECK_EQ_INT(g.nconds, 2);
	gen_free(&g);
}

static void test_config_meta(void)
{
	struct gen g;
	gen_init(&g, 4, 45);
	/* metadata set before any data or evaluation survives the first one */
	struct det_job_meta m0 = {.world_size = 4,
				  .flops_per_token = NAN,
				  .params = NAN,
				  .gpu_peak_flops = NAN,
				  .status = DET_STATUS_FINISHED};
	CHECK_EQ_INT(det_engine_set_meta(g.e, "early", &m0), 0);
	gen_eval(&g);
	struct det_job_health h;
	CHECK_EQ_INT(det_engine_health(g.e, "early", g.now_ns, &h), 0);
	CHECK_EQ_INT(h.state, DET_JOB_FINISHED);
	CHECK_EQ_INT(h.world_size, 4);
	det_job_health_free(&h);
	struct det_job_meta m = {.world_size = 6,
				 .global_batch = 100,
				 .micro_batch = 4,
				 .grad_accum = 4,
				 .flops_per_token = NAN,
				 .params = NAN,
				 .gpu_peak_flops = NAN,
				 .status = DET_STATUS_RUNNING};
	CHECK_EQ_INT(det_engine_set_meta(g.e, "job-a", &m), 0);
	CHECK_EQ_INT(det_engine_set_meta(g.e, "bad job", &m), RDB_EINVAL);
	CHECK_EQ_INT(gen_run(&g, 20), 20); /* batch arithmetic: 6 x 4 x 4 != 100 */
	CHECK(gen_find(&g, "ConfigMismatch", DET_RANK_NONE) != NULL);
	CHECK_EQ_INT(g.nconds, 1);
	CHECK(strcmp(g.conds[0].metric, "global_batch") == 0);
	/* after the 120 s grace: 4 of the 6 declared ranks report */
	for (int i = 0; i < 400; i++)
		gen_step(&g);
	gen_eval(&g);
	CHECK_EQ_INT(g.nconds, 2);
	const struct det_cond *c = NULL;
	for (size_t i = 0; i < g.nconds; i++)
		if (strcmp(g.conds[i].metric, "ranks") == 0)
			c = &g.conds[i];
	CHECK(c != NULL);
	if (c) {
		CHECK(c->value == 4 && c->baseline == 6);
		CHECK(strstr(c->description, "missing: 4,5") != NULL);
	}
	/* the metadata's world_size is the reference for the ranks' view */
	m.global_batch = 96;
	CHECK_EQ_INT(det_engine_set_meta(g.e, "job-a", &m), 0);
	gen_point(&g, 0, "world_size", INT64_MIN, 4);
	gen_eval(&g);
	c = gen_find(&g, "ConfigMismatch", 0);
	CHECK(c != NULL);
	if (c)
		CHECK(c->value == 4 && c->baseline == 6);
	gen_free(&g);
}

static int collect_derived(void *arg, const char *job, const char *metric, int64_t ts_ns,
			   int64_t step, double value)
{
	double *out = arg;
	(void)ts_ns;
	(void)step;
	if (strcmp(job, "job-a") != 0)
		return 0;
	if (strcmp(metric, "mfu") == 0)
		out[0] = value;
	else if (strcmp(metric, "checkpoint.age") == 0)
		out[1] = value;
	return 0;
}

/* MFU from tokens/s (8 ranks x 65536 / ~0.4 s) x 6 x 1e9 params / (8 x
 * 1e15): about 0.97; with a 1e16 peak about 0.097, below the 0.2 floor. */
static void test_mfu_and_checkpoint(void)
{
	static const char rules[] = "[rule CheckpointStale]\nmax_age_s = 2m\n";
	struct gen g;
	gen_init_lim(&g, 8, 46, NULL, rules);
	struct det_job_meta m = {.world_size = 8,
				 .flops_per_token = NAN,
				 .params = 1e9,
				 .gpu_peak_flops = 1e15,
				 .status = DET_STATUS_RUNNING};
	CHECK_EQ_INT(det_engine_set_meta(g.e, "job-a", &m), 0);
	gen_point(&g, DET_JOB_RANK, "checkpoint.duration", 0, 12.5);
	CHECK_EQ_INT(gen_run(&g, 280), 0); /* ~118 s */
	double d[2] = {NAN, NAN};
	CHECK_EQ_INT(det_engine_derived(g.e, g.now_ns, collect_derived, d), 0);
	CHECK(d[0] > 0.8 && d[0] < 1.1);
	CHECK(d[1] > 100 && d[1] < 125);
	d[0] = d[1] = NAN;
	CHECK_EQ_INT(det_engine_derived(g.e, g.now_ns + GEN_NS, collect_derived, d), 0);
	CHECK(isnan(d[0]) && isnan(d[1])); /* at most once per 10 s */
	for (int i = 0; i < 20; i++)
		gen_step(&g);
	gen_eval(&g);
	const struct det_cond *c = gen_find(&g, "CheckpointStale", DET_RANK_NONE);
	CHECK(c != NULL);
	if (c)
		CHECK(c->value > 120 && c->baseline == 120);
	CHECK_EQ_INT(g.nconds, 1);
	m.gpu_peak_flops = 1e16;
	CHECK_EQ_INT(det_engine_set_meta(g.e, "job-a", &m), 0);
	for (int i = 0; i < 600; i++) /* past the 300 s warm-up */
		gen_step(&g);
	gen_point(&g, DET_JOB_RANK, "checkpoint.duration", 0, 12.5);
	gen_eval(&g);
	c = gen_find(&g, "MfuLow", DET_RANK_NONE);
	CHECK(c != NULL);
	if (c) {
		CHECK(c->value > 0.08 && c->value < 0.11);
		CHECK_EQ_INT(c->for_s, 300);
	}
	CHECK_EQ_INT(g.nconds, 1);
	struct det_job_health h;
	CHECK_EQ_INT(det_engine_health(g.e, "job-a", g.now_ns, &h), 0);
	CHECK(h.mfu > 0.08 && h.mfu < 0.11);
	CHECK(h.checkpoint_age_s >= 0 && h.checkpoint_age_s < 1);
	CHECK_EQ_INT(h.world_size, 8);
	det_job_health_free(&h);
	gen_free(&g);
}

static int count_jobs(void *arg, const struct det_job_health *h)
{
	(*(int *)arg)++;
	return h->ranks == NULL ? 0 : -1;
}

/* The memory bound: many jobs with watched metrics never hold more than
 * max_bytes; the least recently fed jobs are evicted and counted; ranks
 * past max_ranks_per_job are refused; max_jobs holds; silent jobs are
 * forgotten. */
static void test_memory_bound(void)
{
	struct det_limits lim = {
	    .max_jobs = 40, .max_ranks_per_job = 16, .max_bytes = 400 * 1024, .job_forget_s = 3600};
	struct gen g;
	gen_init_lim(&g, 8, 47, &lim, NULL);
	struct det_engine_stats st;
	for (int j = 0; j < 100; j++) {
		snprintf(g.job, sizeof(g.job), "job-%03d", j);
		for (int i = 0; i < 3; i++)
			gen_step(&g);
		det_engine_stats(g.e, &st);
		CHECK(st.bytes <= lim.max_bytes);
		CHECK(st.jobs <= lim.max_jobs);
	}
	CHECK(st.jobs_evicted >= 60);
	CHECK(st.jobs >= 2);
	struct det_job_health h;
	CHECK_EQ_INT(det_engine_health(g.e, "job-000", g.now_ns, &h), RDB_ENOTFOUND);
	CHECK_EQ_INT(det_engine_health(g.e, "job-099", g.now_ns, &h), 0);
	CHECK_EQ_INT(h.nranks, 8);
	det_job_health_free(&h);
	int n = 0;
	CHECK_EQ_INT(det_engine_jobs(g.e, g.now_ns, count_jobs, &n), 0);
	CHECK_EQ_INT((uint64_t)n, st.jobs);
	gen_point(&g, 16, "loss", 1, 1.0);
	gen_point(&g, 1000000, "loss", 1, 1.0);
	det_engine_stats(g.e, &st);
	CHECK_EQ_INT(st.ranks_refused, 2);
	gen_eval(&g);
	g.now_ns += 3601 * GEN_NS;
	gen_eval(&g);
	det_engine_stats(g.e, &st);
	CHECK_EQ_INT(st.jobs, 0);
	CHECK_EQ_INT(st.ranks, 0);
	CHECK_EQ_INT(st.bytes, 0); /* the accounting balances */
	CHECK(st.jobs_forgotten >= 2);
	gen_free(&g);
}

int main(void)
{
	RUN(test_overheat_and_throttle);
	RUN(test_idle_clock_not_throttle);
	RUN(test_ecc_and_xid);
	RUN(test_config_mismatch);
	RUN(test_config_meta);
	RUN(test_mfu_and_checkpoint);
	RUN(test_memory_bound);
	return check_summary("detect_hw");
}
