/* test_detect_numerics.c - the numeric detectors (LossNonFinite, LossSpike,
 * GradNormSpike, LossDivergence, LossScaleCollapse) against a synthetic run
 * (detect_gen.h): each fault raises the right alert with the right rank and
 * metric, and normal noise, warm-up, restarts and NaNs raise nothing else. */
#include "check.h"
#include "detect_gen.h"

#include "detect/engine_int.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The engine's quickselect median against sorting, with many duplicates. */
static void test_median(void)
{
	uint64_t seed = 99;
	for (int round = 0; round < 2000; round++) {
		double v[40], s[40];
		size_t n = 1 + (size_t)(round % 40);
		for (size_t i = 0; i < n; i++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			v[i] = s[i] = (double)((seed >> 33) % (round % 3 ? 7 : 1000));
		}
		qsort(s, n, sizeof(*s), cmp_double);
		double want = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
		double got = deti_median(v, n);
		CHECK(got == want);
		if (got != want)
			break;
	}
	CHECK(isnan(deti_median(NULL, 0)));
}

/* A clean run of 16 ranks raises nothing, warm-up and fast early loss
 * decrease included. */
static void test_clean_run(void)
{
	struct gen g;
	gen_init(&g, 16, 1);
	CHECK_EQ_INT(gen_run(&g, 800), 0);
	gen_free(&g);
}

static void test_nan_one_rank(void)
{
	struct gen g;
	gen_init(&g, 8, 2);
	CHECK_EQ_INT(gen_run(&g, 300), 0);
	g.loss_next[3] = NAN;
	g.loss_next_set[3] = true;
	gen_step(&g);
	gen_eval(&g);
	const struct det_cond *c = gen_find(&g, "LossNonFinite", 3);
	CHECK(c != NULL);
	if (c) {
		CHECK(strcmp(c->metric, "loss") == 0);
		CHECK_EQ_INT(c->step, 300);
		CHECK_EQ_INT(c->severity, DET_SEV_CRITICAL);
		CHECK_EQ_INT(c->for_s, 0);
	}
	CHECK(gen_only(&g, "LossNonFinite"));
	CHECK_EQ_INT(gen_count(&g, "LossNonFinite"), 1);
	/* still there for 4 finite steps, gone after the 5th; never a spike */
	for (int i = 0; i < 4; i++) {
		gen_step(&g);
		gen_eval(&g);
		CHECK(gen_find(&g, "LossNonFinite", 3) != NULL);
		CHECK(gen_only(&g, "LossNonFinite"));
	}
	gen_step(&g);
	gen_eval(&g);
	CHECK_EQ_INT(g.nconds, 0);
	CHECK_EQ_INT(gen_run(&g, 100), 0);
	gen_free(&g);
}

/* +Inf grad_norm on every rank (the all-reduced norm overflowed) is one
 * job-level alert, not eight. */
static void test_inf_all_ranks_job_level(void)
{
	struct gen g;
	gen_init(&g, 8, 3);
	CHECK_EQ_INT(gen_run(&g, 200), 0);
	for (uint32_t r = 0; r < 8; r++) {
		g.grad_next[r] = INFINITY;
		g.grad_next_set[r] = true;
	}
	gen_step(&g);
	gen_eval(&g);
	CHECK_EQ_INT(g.nconds, 1);
	const struct det_cond *c = gen_find(&g, "LossNonFinite", DET_RANK_NONE);
	CHECK(c != NULL);
	if (c)
		CHECK(strcmp(c->metric, "grad_norm") == 0);
	CHECK_EQ_INT(gen_count(&g, "GradNormSpike"), 0);
	gen_free(&g);
}

/* A rank's NaN waits for its peers to report that step before it is
 * raised per rank (so a shared fault is one job-level alert). */
static void test_nan_waits_for_peers(void)
{
	struct gen g;
	gen_init(&g, 4, 4);
	CHECK_EQ_INT(gen_run(&g, 100), 0);
	int64_t s = g.step[0];
	gen_point(&g, 0, "loss", s, NAN);
	gen_eval(&g);
	CHECK_EQ_INT(g.nconds, 0); /* peers have not reported step s yet */
	for (uint32_t r = 1; r < 4; r++)
		gen_point(&g, r, "loss", s, NAN);
	gen_eval(&g);
	CHECK_EQ_INT(g.nconds, 1);
	CHECK(gen_find(&g, "LossNonFinite", DET_RANK_NONE) != NULL);
	gen_free(&g);
}

/* Replayed history (warmup) never raises a single-point alert. */
static void test_warmup_replay_nan(void)
{
	struct gen g;
	gen_init(&g, 2, 5);
	CHECK_EQ_INT(gen_run(&g, 50), 0);
	int64_t ts = g.now_ns, step = g.step[0];
	uint32_t att = 0;
	double v = NAN;
	uint64_t bits;
	memcpy(&bits, &v, sizeof(bits));
	det_engine_feed(g.e, "job-a", 5, 0, "loss", 4, &ts, &step, &att, &bits, 1, g.now_ns, true);
	gen_eval(&g);
	CHECK_EQ_INT(g.nconds, 0);
	gen_free(&g);
}

static void test_spike_one_rank(void)
{
	struct gen g;
	gen_init(&g, 8, 6);
	CHECK_EQ_INT(gen_run(&g, 400), 0);
	g.loss_next[5] = (2 + 6 * exp(-400.0 / 200)) * 2.0;
	g.loss_next_set[5] = true;
	gen_step(&g);
	gen_eval(&g);
	const struct det_cond *c = gen_find(&g, "LossSpike", 5);
	CHECK(c != NULL);
	if (c) {
		CHECK(strcmp(c->metric, "loss") == 0);
		CHECK(c->value > c->baseline * 1.3);
		CHECK_EQ_INT(c->step, 400);
	}
	CHECK(gen_only(&g, "LossSpike"));
	/* clears after clear_steps (10) normal points */
	int steps = 0;
	while (gen_find(&g, "LossSpike", 5) && steps < 20) {
		gen_step(&g);
		gen_eval(&g);
		steps++;
	}
	CHECK_EQ_INT(steps, 10);
	CHECK_EQ_INT(gen_run(&g, 50), 0);
	gen_free(&g);
}

static void test_spike_all_ranks_job_level(void)
{
	struct gen g;
	gen_init(&g, 8, 7);
	CHECK_EQ_INT(gen_run(&g, 300), 0);
	g.loss_mult = 3;
	gen_step(&g);
	gen_eval(&g);
	CHECK_EQ_INT(g.nconds, 1);
	CHECK(gen_find(&g, "LossSpike", DET_RANK_NONE) != NULL);
	g.loss_mult = 1;
	gen_free(&g);
}

/* Normal noise that is larger than usual (5 %) still raises nothing; a
 * jump during warm-up (first 20 points) is not judged. */
static void test_noise_and_warmup(void)
{
	struct gen g;
	gen_init(&g, 4, 8);
	for (int i = 0; i < 5; i++)
		gen_step(&g);
	g.loss_next[1] = 50;
	g.loss_next_set[1] = true;
	gen_step(&g);
	gen_eval(&g);
	CHECK_EQ_INT(gen_count(&g, "LossSpike"), 0);
	for (int i = 0; i < 400; i++) {
		for (uint32_t r = 0; r < 4; r++) {
			g.loss_next[r] =
			    (2 + 6 * exp(-(double)g.step[r] / 200)) * (1 + 0.05 * gen_normal(&g));
			g.loss_next_set[r] = true;
		}
		gen_step(&g);
		gen_eval(&g);
		CHECK_EQ_INT(g.nconds, 0);
		if (g.nconds)
			break;
	}
	gen_free(&g);
}

static void test_grad_norm_spike(void)
{
	struct gen g;
	gen_init(&g, 8, 9);
	CHECK_EQ_INT(gen_run(&g, 200), 0);
	g.grad_next[2] = 12;
	g.grad_next_set[2] = true;
	gen_step(&g);
	gen_eval(&g);
	const struct det_cond *c = gen_find(&g, "GradNormSpike", 2);
	CHECK(c != NULL);
	if (c)
		CHECK(strcmp(c->metric, "grad_norm") == 0);
	CHECK(gen_only(&g, "GradNormSpike"));
	gen_free(&g);
}

/* A sustained rise of 1.5 % per step on every rank: LossDivergence, one
 * job-level alert, and no LossSpike (no jump). */
static void test_divergence(void)
{
	struct gen g;
	gen_init(&g, 8, 10);
	CHECK_EQ_INT(gen_run(&g, 600), 0);
	int raised_at = -1;
	for (int i = 0; i < 150 && raised_at < 0; i++) {
		g.loss_mult *= 1.015;
		gen_step(&g);
		gen_eval(&g);
		CHECK_EQ_INT(gen_count(&g, "LossSpike"), 0);
		if (gen_find(&g, "LossDivergence", DET_RANK_NONE))
			raised_at = i;
		CHECK(gen_only(&g, "LossDivergence"));
	}
	CHECK(raised_at > 0 && raised_at < 60);
	CHECK_EQ_INT(gen_count(&g, "LossDivergence"), 1);
	gen_free(&g);
}

/* rankdbd gets a step's records in several bodies (one per node) and may
 * evaluate between them. A divergence every rank shares is still one
 * job-level alert: the ranks of the first body do not each get their own
 * alert before the others have reported that step. */
static void test_divergence_bodies_job_level(void)
{
	struct gen g;
	gen_init(&g, 16, 15);
	CHECK_EQ_INT(gen_run(&g, 300), 0);
	bool raised = false;
	for (int i = 0; i < 80 && !raised; i++) {
		g.loss_mult *= 1.015;
		for (int half = 0; half < 2; half++) {
			for (uint32_t r = 0; r < 16; r++)
				g.silent[r] = (r < 8) == (half == 1);
			gen_step(&g);
			gen_eval(&g);
			for (size_t k = 0; k < g.nconds; k++) {
				CHECK(g.conds[k].rank == DET_RANK_NONE);
				if (g.conds[k].rank != DET_RANK_NONE)
					fprintf(stderr, "  step %d: %s on rank %lld\n", i,
						g.conds[k].alertname, (long long)g.conds[k].rank);
			}
			if (gen_find(&g, "LossDivergence", DET_RANK_NONE))
				raised = true;
		}
	}
	CHECK(raised);
	gen_free(&g);
}

/* Loss rising steeply on every rank (a divergence) with the ordinary noise
 * of harder batches (+12 % on one rank in five each step): the rolling
 * median lags the trend, but a hard batch on a rising curve is not a spike.
 * A real spike on top of it (3x) still is. */
static void test_no_spike_on_a_trend(void)
{
	struct gen g;
	gen_init(&g, 16, 16);
	CHECK_EQ_INT(gen_run(&g, 300), 0);
	for (int i = 0; i < 60; i++) {
		g.loss_mult *= 1.015;
		for (uint32_t r = i % 5; r < 16; r += 5) {
			double base = 2 + 6 * exp(-(double)g.step[r] / 200);
			g.loss_next[r] = base * g.loss_mult * 1.12;
			g.loss_next_set[r] = true;
		}
		gen_step(&g);
		gen_eval(&g);
		CHECK_EQ_INT(gen_count(&g, "LossSpike"), 0);
	}
	double base = 2 + 6 * exp(-(double)g.step[7] / 200);
	g.loss_next[7] = base * g.loss_mult * 3;
	g.loss_next_set[7] = true;
	gen_step(&g);
	gen_eval(&g);
	gen_step(&g); /* the peers' next step: the single rank's alert settles */
	gen_eval(&g);
	CHECK(gen_find(&g, "LossSpike", 7) != NULL);
	gen_free(&g);
}

/* A rank restarts (new attempt) from a checkpoint 50 steps back after a
 * 20 s gap, with a loss 1.5x higher at first: not a spike, not a hang, not
 * down. */
static void test_restart_new_attempt(void)
{
	struct gen g;
	gen_init(&g, 8, 11);
	CHECK_EQ_INT(gen_run(&g, 300), 0);
	for (uint32_t r = 0; r < 8; r++) {
		g.attempt[r] = 1;
		g.step[r] -= 50;
	}
	g.silent[4] = true; /* rank 4 comes back later than the others */
	gen_idle(&g, 5);
	g.silent[4] = false;
	g.loss_mult = 1.5;
	for (int i = 0; i < 200; i++) {
		gen_step(&g);
		gen_eval(&g);
		CHECK_EQ_INT(g.nconds, 0);
		if (g.nconds) {
			fprintf(stderr, "  %s rank %lld: %s\n", g.conds[0].alertname,
				(long long)g.conds[0].rank, g.conds[0].description);
			break;
		}
		if (i == 10)
			g.loss_mult = 1;
	}
	/* the step going back without an attempt number is a restart too */
	for (uint32_t r = 0; r < 8; r++)
		g.step[r] -= 100;
	CHECK_EQ_INT(gen_run(&g, 100), 0);
	gen_free(&g);
}

static void test_loss_scale(void)
{
	struct gen g;
	gen_init(&g, 4, 12);
	CHECK_EQ_INT(gen_run(&g, 50), 0);
	double scale = 65536;
	for (int i = 0; i < 60; i++) {
		gen_step(&g);
		for (uint32_t r = 0; r < 4; r++)
			gen_point(&g, r, "loss_scale", g.step[r] - 1, r == 1 ? scale : 65536);
		if (i % 10 == 9)
			scale /= 2;
		gen_eval(&g);
	}
	const struct det_cond *c = gen_find(&g, "LossScaleCollapse", 1);
	CHECK(c != NULL);
	if (c)
		CHECK(strcmp(c->metric, "loss_scale") == 0);
	CHECK(gen_only(&g, "LossScaleCollapse"));
	/* skipped_steps rising by 20 within 200 steps on rank 2 */
	for (int i = 0; i < 30; i++) {
		gen_step(&g);
		gen_point(&g, 2, "skipped_steps", g.step[2] - 1, i);
		gen_eval(&g);
	}
	c = gen_find(&g, "LossScaleCollapse", 2);
	CHECK(c != NULL);
	if (c)
		CHECK(strcmp(c->metric, "skipped_steps") == 0);
	gen_free(&g);
}

/* A real fp16 collapse: every step overflows, so loss_scale halves each
 * step AND skipped_steps rises each step, on every rank. Both tests trip;
 * it is one fault, so one alert (job-level), under the metric of the test
 * that tripped first (loss_scale: 4 halvings come before 20 skipped steps),
 * and it stays that one alert while the halving test runs out. */
static void test_loss_scale_collapse_one_alert(void)
{
	struct gen g;
	gen_init(&g, 4, 14);
	for (int i = 0; i < 50; i++) {
		gen_step(&g);
		for (uint32_t r = 0; r < 4; r++) {
			gen_point(&g, r, "loss_scale", g.step[r] - 1, 65536);
			gen_point(&g, r, "skipped_steps", g.step[r] - 1, 3);
		}
		gen_eval(&g);
		CHECK_EQ_INT(g.nconds, 0);
	}
	double scale = 65536;
	int skipped = 3, most = 0;
	for (int i = 0; i < 260; i++) {
		gen_step(&g);
		if (i < 40) {
			scale = scale > 1 ? scale / 2 : 1;
			skipped++;
		}
		for (uint32_t r = 0; r < 4; r++) {
			gen_point(&g, r, "loss_scale", g.step[r] - 1, scale);
			gen_point(&g, r, "skipped_steps", g.step[r] - 1, skipped);
		}
		gen_eval(&g);
		size_t n = gen_count(&g, "LossScaleCollapse");
		if ((int)n > most)
			most = (int)n;
		const struct det_cond *c = gen_find(&g, "LossScaleCollapse", DET_RANK_NONE);
		if (i >= 4 && i < 200) {
			CHECK(c != NULL);
			if (c)
				CHECK(strcmp(c->metric, "loss_scale") == 0);
		}
		CHECK(gen_only(&g, "LossScaleCollapse"));
	}
	CHECK_EQ_INT(most, 1);
	gen_free(&g);
}

/* Aliases: train.loss is loss; the DCGM temperature is gpu.temp. */
static void test_aliases(void)
{
	struct gen g;
	gen_init(&g, 2, 13);
	CHECK_EQ_INT(gen_run(&g, 50), 0);
	gen_point(&g, 0, "train.loss", g.step[0], NAN);
	gen_point(&g, 1, "train.loss", g.step[1], 2.0);
	gen_point(&g, 1, "DCGM_FI_DEV_GPU_TEMP", g.step[1], 95);
	gen_eval(&g);
	const struct det_cond *c = gen_find(&g, "LossNonFinite", 0);
	CHECK(c != NULL);
	if (c)
		CHECK(strcmp(c->metric, "loss") == 0);
	c = gen_find(&g, "GpuOverheat", 1);
	CHECK(c != NULL);
	if (c)
		CHECK(strcmp(c->metric, "gpu.temp") == 0);
	gen_free(&g);
}

/* The job-level pseudo-rank's loss is judged as a job-level series. */
static void test_job_rank_series(void)
{
	struct gen g;
	gen_init(&g, 2, 14);
	CHECK_EQ_INT(gen_run(&g, 10), 0);
	gen_point(&g, DET_JOB_RANK, "loss", g.step[0], NAN);
	gen_eval(&g);
	CHECK_EQ_INT(g.nconds, 1);
	CHECK(gen_find(&g, "LossNonFinite", DET_RANK_NONE) != NULL);
	gen_free(&g);
}

int main(void)
{
	RUN(test_median);
	RUN(test_clean_run);
	RUN(test_nan_one_rank);
	RUN(test_inf_all_ranks_job_level);
	RUN(test_nan_waits_for_peers);
	RUN(test_warmup_replay_nan);
	RUN(test_spike_one_rank);
	RUN(test_spike_all_ranks_job_level);
	RUN(test_noise_and_warmup);
	RUN(test_grad_norm_spike);
	RUN(test_divergence);
	RUN(test_restart_new_attempt);
	RUN(test_loss_scale);
	RUN(test_divergence_bodies_job_level);
	RUN(test_no_spike_on_a_trend);
	RUN(test_loss_scale_collapse_one_alert);
	RUN(test_aliases);
	RUN(test_job_rank_series);
	return check_summary("detect_numerics");
}
