/* detect_gen.h - a synthetic training run for the detector tests: N ranks
 * of a data-parallel job, step by step, with the vocabulary the detectors
 * read. Deterministic (own PRNG, explicit server time).
 *
 * Per step and rank: data-loader, forward, backward and optimizer times
 * with per-rank jitter; the step ends when the slowest rank is done plus a
 * communication time, so each rank's collective time is its wait for the
 * slowest; step_time is the same on every rank (as in synchronous
 * training). Loss follows 2 + 6 exp(-step / 200) with 1 % noise per rank;
 * grad_norm about 1 with 5 % noise; samples/s and tokens/s from the step
 * time; GPU temperature, utilisation and SM clock with noise; a heartbeat
 * per step. Hooks let a test inject faults (per-rank phase slowdowns, a
 * shared slowdown, NaN/spike overrides for the next step, silence, stalls,
 * restarts).
 */
#ifndef DETECT_GEN_H
#define DETECT_GEN_H

#include "detect/engine.h"
#include "detect/rules.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GEN_MAXR 512
#define GEN_NS	 1000000000LL

struct gen_cond {
	struct det_cond c;
};

struct gen {
	struct det_engine *e;
	struct det_rules *rules;
	char job[64];
	uint32_t nranks;
	int64_t now_ns;
	int64_t step[GEN_MAXR]; /* next step each rank runs */
	uint32_t attempt[GEN_MAXR];
	uint64_t rng;
	/* fault hooks */
	bool silent[GEN_MAXR]; /* sends nothing */
	bool stalled;	       /* no rank advances; heartbeats only */
	bool spans;	       /* phases as spans instead of step_time.<phase> */
	bool both;	       /* phases as step_time.<phase> and as spans (the SDK) */
	bool phases;	       /* send phase metrics/spans at all (default true) */
	double fwd_scale[GEN_MAXR], bwd_scale[GEN_MAXR], dl_extra[GEN_MAXR];
	double shared;		    /* multiplies every phase of every rank */
	double loss_next[GEN_MAXR]; /* override of the next loss value (NAN = none) */
	bool loss_next_set[GEN_MAXR];
	double grad_next[GEN_MAXR];
	bool grad_next_set[GEN_MAXR];
	double loss_mult; /* multiplies every rank's loss */
	double temp[GEN_MAXR], clock[GEN_MAXR];
	double last_step_s;
	/* conditions of the last evaluation */
	struct det_cond *conds;
	size_t nconds, capconds;
};

static inline double gen_unif(struct gen *g)
{
	g->rng ^= g->rng << 13;
	g->rng ^= g->rng >> 7;
	g->rng ^= g->rng << 17;
	return (double)(g->rng >> 11) / 9007199254740992.0;
}

static inline double gen_normal(struct gen *g)
{
	double u1 = gen_unif(g), u2 = gen_unif(g);
	if (u1 < 1e-300)
		u1 = 1e-300;
	return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

static inline int gen_collect(void *arg, const struct det_cond *c)
{
	struct gen *g = arg;
	if (g->nconds == g->capconds) {
		size_t cap = g->capconds ? g->capconds * 2 : 16;
		struct det_cond *v = realloc(g->conds, cap * sizeof(*v));
		if (!v)
			return -1;
		g->conds = v;
		g->capconds = cap;
	}
	g->conds[g->nconds++] = *c;
	return 0;
}

/* lim may be NULL; rules NULL = built-in. */
static inline void gen_init_lim(struct gen *g, uint32_t nranks, uint64_t seed,
				const struct det_limits *lim, const char *rules_text)
{
	memset(g, 0, sizeof(*g));
	snprintf(g->job, sizeof(g->job), "job-a");
	g->nranks = nranks;
	g->rng = seed * 2654435761u + 1;
	g->now_ns = 1700000000LL * GEN_NS;
	g->shared = 1;
	g->loss_mult = 1;
	g->phases = true;
	for (uint32_t r = 0; r < GEN_MAXR; r++) {
		g->fwd_scale[r] = g->bwd_scale[r] = 1;
		g->temp[r] = 65;
		g->clock[r] = 1410;
	}
	char err[512] = "";
	int rc = rules_text ? det_rules_parse_text(rules_text, strlen(rules_text), "test",
						   &g->rules, err, sizeof(err))
			    : det_rules_default(&g->rules);
	if (rc != 0) {
		fprintf(stderr, "gen: rules: %s\n", err);
		abort();
	}
	if (det_engine_new(lim, g->rules, &g->e) != 0)
		abort();
}

static inline void gen_init(struct gen *g, uint32_t nranks, uint64_t seed)
{
	gen_init_lim(g, nranks, seed, NULL, NULL);
}

static inline void gen_free(struct gen *g)
{
	det_engine_free(g->e);
	det_rules_free(g->rules);
	free(g->conds);
}

static inline void gen_point(struct gen *g, uint32_t rank, const char *metric, int64_t step,
			     double v)
{
	int64_t ts = g->now_ns;
	uint32_t att = rank < GEN_MAXR ? g->attempt[rank] : 0;
	uint64_t bits;
	memcpy(&bits, &v, sizeof(bits));
	det_engine_feed(g->e, g->job, strlen(g->job), rank, metric, strlen(metric), &ts, &step,
			&att, &bits, 1, g->now_ns, false);
}

static inline void gen_phase(struct gen *g, uint32_t r, const char *name, int64_t step, double s,
			     int64_t start_ns)
{
	if (!g->phases)
		return;
	if (g->both) { /* rankdbd feeds a write's points before its spans */
		char m[64];
		snprintf(m, sizeof(m), "step_time.%s", name);
		gen_point(g, r, m, step, s);
	}
	if (g->spans || g->both) {
		det_engine_feed_span(g->e, g->job, strlen(g->job), r, step, name, strlen(name),
				     start_ns, (int64_t)(s * 1e9), g->attempt[r], g->now_ns, false);
		return;
	}
	char m[64];
	snprintf(m, sizeof(m), "step_time.%s", name);
	gen_point(g, r, m, step, s);
}

static inline void gen_heartbeats(struct gen *g)
{
	for (uint32_t r = 0; r < g->nranks; r++)
		if (!g->silent[r])
			gen_point(g, r, "heartbeat", INT64_MIN, 1);
}

/* Advances the server clock by dt seconds, with heartbeats every second. */
static inline void gen_idle(struct gen *g, double dt)
{
	for (double t = 0; t < dt; t += 1) {
		g->now_ns += (int64_t)(fmin(1.0, dt - t) * 1e9);
		gen_heartbeats(g);
	}
}

static inline void gen_rank_step(struct gen *g, uint32_t r, const double *ph, double step_s,
				 double coll)
{
	int64_t s = g->step[r];
	double base = 2 + 6 * exp(-(double)s / 200);
	double loss = base * g->loss_mult * (1 + 0.01 * gen_normal(g));
	double grad = 1.0 * (1 + 0.05 * gen_normal(g));
	if (g->loss_next_set[r])
		loss = g->loss_next[r];
	if (g->grad_next_set[r])
		grad = g->grad_next[r];
	g->loss_next_set[r] = g->grad_next_set[r] = false;
	int64_t t0 = g->now_ns - (int64_t)(step_s * 1e9);
	gen_phase(g, r, "dataloader", s, ph[0], t0);
	gen_phase(g, r, "forward", s, ph[1], t0 + (int64_t)(ph[0] * 1e9));
	gen_phase(g, r, "backward", s, ph[2], t0 + (int64_t)((ph[0] + ph[1]) * 1e9));
	gen_phase(g, r, "optimizer", s, ph[3], t0 + (int64_t)((ph[0] + ph[1] + ph[2]) * 1e9));
	gen_phase(g, r, "collective", s, coll, t0 + (int64_t)((ph[0] + ph[1]) * 1e9));
	gen_point(g, r, "step_time", s, step_s);
	gen_point(g, r, "loss", s, loss);
	gen_point(g, r, "grad_norm", s, grad);
	gen_point(g, r, "lr", s, 3e-4);
	gen_point(g, r, "samples_per_sec", s, 32 / step_s);
	gen_point(g, r, "tokens_per_sec", s, 32 * 2048 / step_s);
	gen_point(g, r, "gpu.temp", s, g->temp[r] + gen_normal(g));
	gen_point(g, r, "gpu.util", s, 95 + gen_normal(g));
	gen_point(g, r, "gpu.sm_clock", s, g->clock[r] + 5 * gen_normal(g));
	gen_point(g, r, "heartbeat", s, 1);
	g->step[r]++;
}

/* One training step of every rank that is not silent. */
static inline void gen_step(struct gen *g)
{
	double ph[GEN_MAXR][4], own[GEN_MAXR], slowest = 0;
	if (g->stalled) {
		gen_idle(g, 1);
		return;
	}
	for (uint32_t r = 0; r < g->nranks; r++) {
		ph[r][0] = g->shared * (0.020 * (1 + 0.05 * gen_normal(g)) + g->dl_extra[r]);
		ph[r][1] = g->shared * 0.100 * (1 + 0.03 * gen_normal(g)) * g->fwd_scale[r];
		ph[r][2] = g->shared * 0.200 * (1 + 0.03 * gen_normal(g)) * g->bwd_scale[r];
		ph[r][3] = g->shared * 0.030 * (1 + 0.03 * gen_normal(g));
		own[r] = ph[r][0] + ph[r][1] + ph[r][2] + ph[r][3];
		if (!g->silent[r] && own[r] > slowest)
			slowest = own[r];
	}
	double step_s = slowest + 0.05 * g->shared;
	g->now_ns += (int64_t)(step_s * 1e9);
	g->last_step_s = step_s;
	for (uint32_t r = 0; r < g->nranks; r++)
		if (!g->silent[r])
			gen_rank_step(g, r, ph[r], step_s, step_s - own[r]);
}

static inline void gen_eval(struct gen *g)
{
	g->nconds = 0;
	if (det_engine_eval(g->e, g->now_ns, gen_collect, g) != 0)
		abort();
}

/* Steps n times, evaluating after each step; returns the number of
 * evaluations that produced any condition. */
static inline int gen_run(struct gen *g, int n)
{
	int with = 0;
	for (int i = 0; i < n; i++) {
		gen_step(g);
		gen_eval(g);
		if (g->nconds) {
			with++;
			if (with == 1)
				fprintf(stderr, "  (first condition: %s rank %lld: %s)\n",
					g->conds[0].alertname, (long long)g->conds[0].rank,
					g->conds[0].description);
		}
	}
	return with;
}

/* The condition named alertname with this rank (DET_RANK_NONE for
 * job-level, -2 any), or NULL. */
static inline const struct det_cond *gen_find(const struct gen *g, const char *alertname,
					      int64_t rank)
{
	for (size_t i = 0; i < g->nconds; i++)
		if (strcmp(g->conds[i].alertname, alertname) == 0 &&
		    (rank == -2 || g->conds[i].rank == rank))
			return &g->conds[i];
	return NULL;
}

static inline size_t gen_count(const struct gen *g, const char *alertname)
{
	size_t n = 0;
	for (size_t i = 0; i < g->nconds; i++)
		n += strcmp(g->conds[i].alertname, alertname) == 0;
	return n;
}

/* true if every condition is named alertname. */
static inline bool gen_only(const struct gen *g, const char *alertname)
{
	for (size_t i = 0; i < g->nconds; i++) {
		if (strcmp(g->conds[i].alertname, alertname) != 0) {
			fprintf(stderr, "  unexpected %s rank %lld: %s\n", g->conds[i].alertname,
				(long long)g->conds[i].rank, g->conds[i].description);
			return false;
		}
	}
	return true;
}

#endif
