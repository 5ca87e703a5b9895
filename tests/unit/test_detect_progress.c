/* test_detect_progress.c - progress detectors (TrainingHang, RankDown,
 * JobDown, Straggler, ThroughputDrop) and job health against a synthetic
 * run (detect_gen.h): the right alert, rank and phase for each fault, and
 * nothing for a shared slowdown, a finished job going silent, or one
 * straggler's cost to throughput. */
#include "check.h"
#include "detect_gen.h"

#include "common/rdb_err.h"

/* Every rank alive (heartbeats) but the step stopped; rank 3 is stuck in
 * its data loader (last phase dataloader of the next step) while the others
 * finished forward of it. */
static void test_hang_names_rank(void)
{
	struct gen g;
	gen_init(&g, 8, 21);
	CHECK_EQ_INT(gen_run(&g, 200), 0);
	for (uint32_t r = 0; r < 8; r++) {
		int64_t s = g.step[r];
		gen_point(&g, r, "step_time.dataloader", s, 0.02);
		if (r != 3)
			gen_point(&g, r, "step_time.forward", s, 0.1);
	}
	g.stalled = true;
	for (int i = 0; i < 8; i++) { /* 8 s < max(10 s, 10 x ~0.4 s) */
		gen_step(&g);
		gen_eval(&g);
		CHECK_EQ_INT(g.nconds, 0);
	}
	for (int i = 0; i < 4; i++)
		gen_step(&g);
	gen_eval(&g);
	const struct det_cond *c = gen_find(&g, "TrainingHang", 3);
	CHECK(c != NULL);
	if (c) {
		CHECK(strstr(c->description, "rank 3 last reported dataloader") != NULL);
		CHECK(strstr(c->description, "7 other ranks last reported forward") != NULL);
		CHECK(c->value >= 10);
	}
	CHECK(gen_only(&g, "TrainingHang"));
	struct det_job_health h;
	CHECK_EQ_INT(det_engine_health(g.e, "job-a", g.now_ns, &h), 0);
	CHECK_EQ_INT(h.state, DET_JOB_HUNG);
	CHECK_EQ_INT(h.ranks_alive, 8);
	CHECK_EQ_INT(h.nranks, 8);
	CHECK_EQ_INT(h.ranks[3].state, DET_RANK_HUNG);
	CHECK(strcmp(h.ranks[3].last_phase, "dataloader") == 0);
	CHECK(strcmp(h.ranks[2].last_phase, "forward") == 0);
	det_job_health_free(&h);
	/* progress resumes (the stuck step completes, the next one starts): the
	 * hang clears */
	g.stalled = false;
	gen_step(&g);
	gen_step(&g);
	gen_eval(&g);
	CHECK_EQ_INT(gen_count(&g, "TrainingHang"), 0);
	gen_free(&g);
}

/* Checkpoints every 100 steps pause the run for 20 s: once one has been
 * seen, the next pause at the expected step is not a hang; a stall
 * elsewhere still is. */
static void test_checkpoint_pause_not_hang(void)
{
	struct gen g;
	gen_init(&g, 4, 31);
	CHECK_EQ_INT(gen_run(&g, 100), 0);
	for (int c = 0; c < 3; c++) {
		g.stalled = true;
		for (int i = 0; i < 20; i++) {
			gen_step(&g);
			gen_eval(&g);
			if (c > 0)
				CHECK_EQ_INT(g.nconds, 0);
		}
		for (uint32_t r = 0; r < 4; r++)
			gen_point(&g, r, "checkpoint.duration", g.step[r] - 1, 19.5);
		g.stalled = false;
		CHECK_EQ_INT(gen_run(&g, 100), 0);
	}
	/* a stall 50 steps after a checkpoint is a hang at 10 s */
	CHECK_EQ_INT(gen_run(&g, 50), 0);
	g.stalled = true;
	for (int i = 0; i < 12; i++)
		gen_step(&g);
	gen_eval(&g);
	CHECK(gen_find(&g, "TrainingHang", DET_RANK_NONE) != NULL);
	gen_free(&g);
}

/* Rank 6 crashes: its peers stall in the collective but keep their
 * heartbeats. That is RankDown for rank 6 at 30 s, not a hang, and nothing
 * else. */
static void test_rank_down_not_hang(void)
{
	struct gen g;
	gen_init(&g, 8, 22);
	CHECK_EQ_INT(gen_run(&g, 200), 0);
	g.silent[6] = true;
	g.stalled = true;
	for (int i = 0; i < 29; i++) {
		gen_step(&g);
		gen_eval(&g);
		CHECK_EQ_INT(g.nconds, 0);
	}
	for (int i = 0; i < 3; i++)
		gen_step(&g);
	gen_eval(&g);
	CHECK(gen_find(&g, "RankDown", 6) != NULL);
	CHECK_EQ_INT(g.nconds, 1);
	gen_free(&g);
}

/* Elastic: rank 2 leaves and the others go on stepping: RankDown only. */
static void test_rank_down_peers_go_on(void)
{
	struct gen g;
	gen_init(&g, 8, 23);
	CHECK_EQ_INT(gen_run(&g, 100), 0);
	g.silent[2] = true;
	int first = -1;
	for (int i = 0; i < 150; i++) {
		gen_step(&g);
		gen_eval(&g);
		if (first < 0 && gen_find(&g, "RankDown", 2))
			first = i;
		CHECK(gen_only(&g, "RankDown"));
	}
	CHECK(first > 0);
	gen_free(&g);
}

static void test_job_down_and_finished(void)
{
	struct gen g;
	gen_init(&g, 4, 24);
	CHECK_EQ_INT(gen_run(&g, 100), 0);
	g.now_ns += 31 * GEN_NS;
	gen_eval(&g);
	CHECK_EQ_INT(g.nconds, 1);
	CHECK(gen_find(&g, "JobDown", DET_RANK_NONE) != NULL);
	struct det_job_health h;
	CHECK_EQ_INT(det_engine_health(g.e, "job-a", g.now_ns, &h), 0);
	CHECK_EQ_INT(h.state, DET_JOB_DOWN);
	CHECK_EQ_INT(h.ranks_alive, 0);
	det_job_health_free(&h);
	/* once the metadata says finished, nothing about progress is judged */
	struct det_job_meta m = {.status = DET_STATUS_FINISHED,
				 .flops_per_token = NAN,
				 .params = NAN,
				 .gpu_peak_flops = NAN};
	CHECK_EQ_INT(det_engine_set_meta(g.e, "job-a", &m), 0);
	gen_eval(&g);
	CHECK_EQ_INT(g.nconds, 0);
	g.now_ns += 3600 * GEN_NS;
	gen_eval(&g);
	CHECK_EQ_INT(g.nconds, 0);
	CHECK_EQ_INT(det_engine_health(g.e, "job-a", g.now_ns, &h), 0);
	CHECK_EQ_INT(h.state, DET_JOB_FINISHED);
	det_job_health_free(&h);
	gen_free(&g);
}

/* Rank 5's backward pass is 30 % slower from step 200 on (the job's step
 * grows ~20 %, every other rank waits in the collective). Straggler for
 * rank 5 with phase backward within 30 steps; no ThroughputDrop. */
static void run_straggler(bool spans, int which)
{
	struct gen g;
	gen_init(&g, 16, 25 + (uint64_t)which);
	g.spans = spans;
	CHECK_EQ_INT(gen_run(&g, 200), 0);
	if (which == 0)
		g.bwd_scale[5] = 1.3;
	else if (which == 1)
		g.dl_extra[5] = 0.08;
	else
		g.fwd_scale[5] = 1.5;
	const char *want = which == 0 ? "backward" : which == 1 ? "dataloader" : "forward";
	int raised = -1;
	for (int i = 0; i < 60; i++) {
		gen_step(&g);
		gen_eval(&g);
		const struct det_cond *c = gen_find(&g, "Straggler", 5);
		if (c && raised < 0) {
			raised = i;
			CHECK(strcmp(c->phase, want) == 0);
			if (strcmp(c->phase, want) != 0)
				fprintf(stderr, "  phase %s, want %s: %s\n", c->phase, want,
					c->description);
		}
		CHECK(gen_only(&g, "Straggler"));
		CHECK(gen_count(&g, "Straggler") <= 1);
	}
	CHECK(raised >= 15 && raised < 30);
	struct det_job_health h;
	CHECK_EQ_INT(det_engine_health(g.e, "job-a", g.now_ns, &h), 0);
	CHECK_EQ_INT(h.ranks[5].state, DET_RANK_STRAGGLER);
	CHECK_EQ_INT(h.ranks[4].state, DET_RANK_OK);
	CHECK_EQ_INT(h.state, DET_JOB_DEGRADED);
	det_job_health_free(&h);
	/* fixed: the alert clears */
	g.bwd_scale[5] = g.fwd_scale[5] = 1;
	g.dl_extra[5] = 0;
	for (int i = 0; i < 30; i++) {
		gen_step(&g);
		gen_eval(&g);
	}
	CHECK_EQ_INT(g.nconds, 0);
	gen_free(&g);
}

static void test_straggler_backward(void)
{
	run_straggler(false, 0);
}

static void test_straggler_dataloader(void)
{
	run_straggler(false, 1);
}

static void test_straggler_spans(void)
{
	run_straggler(true, 2);
}

/* The SDK's phase timers send each phase twice: as a step_time.<phase>
 * metric and as a span. One phase, one time: rank 5's own work (forward
 * 50 % slower: 0.15 + 0.2 + 0.03 s) and its peers' median (0.33 s) come out
 * as they are, not with the collective and data-loader waits counted twice. */
static void test_straggler_metrics_and_spans(void)
{
	struct gen g;
	gen_init(&g, 16, 31);
	g.both = true;
	CHECK_EQ_INT(gen_run(&g, 200), 0);
	g.fwd_scale[5] = 1.5;
	const struct det_cond *c = NULL;
	for (int i = 0; i < 40 && !c; i++) {
		gen_step(&g);
		gen_eval(&g);
		c = gen_find(&g, "Straggler", 5);
	}
	CHECK(c != NULL);
	if (c) {
		CHECK(strcmp(c->phase, "forward") == 0);
		CHECK(fabs(c->value - 0.38) < 0.03);
		CHECK(fabs(c->baseline - 0.33) < 0.02);
		if (fabs(c->value - 0.38) >= 0.03 || fabs(c->baseline - 0.33) >= 0.02)
			fprintf(stderr, "  own work %g s vs peers %g s: %s\n", c->value,
				c->baseline, c->description);
	}
	gen_free(&g);
}

/* Every rank slows down 50 % at once: not a straggler; it is a throughput
 * drop (the condition holds; its `for` of 30 s is the lifecycle's). */
static void test_shared_jump(void)
{
	struct gen g;
	gen_init(&g, 16, 28);
	CHECK_EQ_INT(gen_run(&g, 300), 0);
	g.shared = 1.5;
	bool drop = false;
	for (int i = 0; i < 120; i++) {
		gen_step(&g);
		gen_eval(&g);
		CHECK_EQ_INT(gen_count(&g, "Straggler"), 0);
		CHECK(gen_only(&g, "ThroughputDrop"));
		drop |= gen_find(&g, "ThroughputDrop", DET_RANK_NONE) != NULL;
	}
	CHECK(drop);
	const struct det_cond *c = gen_find(&g, "ThroughputDrop", DET_RANK_NONE);
	CHECK(c != NULL);
	if (c) {
		CHECK(strcmp(c->metric, "samples_per_sec") == 0);
		CHECK_EQ_INT(c->for_s, 30);
		CHECK(c->value < 0.8 * c->baseline);
	}
	g.shared = 1;
	CHECK_EQ_INT(gen_run(&g, 20), 0);
	gen_free(&g);
}

/* Without throughput metrics the drop comes from the step time. */
static void test_throughput_from_step_time(void)
{
	struct gen g;
	gen_init(&g, 4, 29);
	g.phases = false;
	CHECK_EQ_INT(gen_run(&g, 10), 0);
	/* stop samples/tokens: feed only step_time from here on */
	for (int i = 0; i < 400; i++) {
		if (i == 250)
			g.shared = 1.6;
		g.now_ns += (int64_t)(0.4 * g.shared * 1e9);
		for (uint32_t r = 0; r < 4; r++)
			gen_point(&g, r, "step_time", g.step[r]++, 0.4 * g.shared);
		gen_eval(&g);
		if (i < 250)
			CHECK_EQ_INT(gen_count(&g, "ThroughputDrop"), 0);
	}
	const struct det_cond *c = gen_find(&g, "ThroughputDrop", DET_RANK_NONE);
	CHECK(c != NULL);
	if (c)
		CHECK(strcmp(c->metric, "step_time") == 0);
	gen_free(&g);
}

static void test_health_basics(void)
{
	struct gen g;
	gen_init(&g, 4, 30);
	struct det_job_health h;
	CHECK_EQ_INT(det_engine_health(g.e, "nope", g.now_ns, &h), RDB_ENOTFOUND);
	CHECK_EQ_INT(gen_run(&g, 100), 0);
	CHECK_EQ_INT(det_engine_health(g.e, "job-a", g.now_ns, &h), 0);
	CHECK_EQ_INT(h.state, DET_JOB_OK);
	CHECK_EQ_INT(h.step, 99);
	CHECK_EQ_INT(h.ranks_seen, 4);
	CHECK_EQ_INT(h.ranks_alive, 4);
	CHECK(h.steps_per_s > 1.5 && h.steps_per_s < 4);
	CHECK(h.median_step_time_s > 0.3 && h.median_step_time_s < 0.5);
	CHECK(isnan(h.mfu));
	CHECK(isnan(h.checkpoint_age_s));
	CHECK_EQ_INT(h.ranks[2].rank, 2);
	CHECK_EQ_INT(h.ranks[2].last_step, 99);
	det_job_health_free(&h);
	struct det_engine_stats st;
	det_engine_stats(g.e, &st);
	CHECK_EQ_INT(st.jobs, 1);
	CHECK_EQ_INT(st.ranks, 4);
	CHECK(st.points > 0);
	gen_free(&g);
}

int main(void)
{
	RUN(test_hang_names_rank);
	RUN(test_checkpoint_pause_not_hang);
	RUN(test_rank_down_not_hang);
	RUN(test_rank_down_peers_go_on);
	RUN(test_job_down_and_finished);
	RUN(test_straggler_backward);
	RUN(test_straggler_dataloader);
	RUN(test_straggler_spans);
	RUN(test_straggler_metrics_and_spans);
	RUN(test_shared_jump);
	RUN(test_throughput_from_step_time);
	RUN(test_health_basics);
	return check_summary("detect_progress");
}
