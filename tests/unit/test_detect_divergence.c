/* test_detect_divergence.c - LossDivergence against generated loss curves
 * fed straight into the engine (one rank, loss only, one point a second):
 *   - a loss at its noise floor (flat with noise: gaussian at every noise
 *     level relative to the mean, a mean of zero, the chi-square noise of a
 *     small batch's MSE, heavy-tailed Student t, log-normal, single-batch
 *     outliers, slow wander) never raises it, over 2,000 points and 60
 *     seeds each;
 *   - a real divergence after convergence (a steady rise of 2 % per step, an
 *     exponential blow-up, a jump to a higher plateau that keeps rising, a
 *     rise under the noise of a small batch) raises it within a bound in
 *     steps. */
#include "check.h"
#include "detect_gen.h"

#define FLOOR  0.01 /* mean of the converged loss */
#define NSEEDS 60   /* noise-floor runs of each shape */

enum shape {
	SH_GAUSS,   /* mean + floor x lvl N (the noise of the floor all along) */
	SH_ZERO,    /* lvl N around a mean of 0 */
	SH_CHI2,    /* mean x chi2_k / k, k = lvl: the MSE of a batch of k */
	SH_T2,	    /* mean x (1 + lvl t_2): heavy tails, infinite variance */
	SH_LOGN,    /* mean x exp(lvl N) */
	SH_OUTLIER, /* mean x (1 + 0.05 N), one point in 30 is 2..10x */
	SH_WANDER,  /* mean x (1 + lvl N) x a slow +-5 % sine (period 300) */
	SH_COUNT
};

static const char *const shape_name[SH_COUNT] = {"gauss", "zero",    "chi2",  "t2",
						 "logn",  "outlier", "wander"};

static double noisy(struct gen *g, enum shape sh, double lvl, double mean, int64_t i)
{
	switch (sh) {
	case SH_GAUSS:
		return mean + FLOOR * lvl * gen_normal(g);
	case SH_ZERO:
		return lvl * gen_normal(g);
	case SH_CHI2: {
		double s = 0;
		for (int k = 0; k < (int)lvl; k++) {
			double z = gen_normal(g);
			s += z * z;
		}
		return mean * s / lvl;
	}
	case SH_T2: {
		double z = gen_normal(g), u = gen_unif(g);
		double chi2 = -2 * log(u > 1e-300 ? u : 1e-300); /* chi2 with 2 dof */
		return mean * (1 + lvl * z / sqrt(chi2 / 2));
	}
	case SH_LOGN:
		return mean * exp(lvl * gen_normal(g));
	case SH_OUTLIER:
		if (gen_unif(g) < 1.0 / 30)
			return mean * (2 + 8 * gen_unif(g));
		return mean * (1 + 0.05 * gen_normal(g));
	case SH_WANDER:
		return mean * (1 + lvl * gen_normal(g)) *
		       (1 + 0.05 * sin((double)i * 6.2832 / 300));
	default:
		return mean;
	}
}

/* Feeds v as rank 0's loss at step i, evaluates; true if LossDivergence. */
static bool feed(struct gen *g, int64_t i, double v)
{
	g->now_ns += 1000000000;
	gen_point(g, 0, "loss", i, v);
	gen_eval(g);
	return gen_find(g, "LossDivergence", -2) != NULL;
}

/* A loss decaying to its noise floor (mean 0.01 from 0.5 over ~100 steps),
 * then 2,000 points of flat noise, 60 seeds per shape: no LossDivergence,
 * ever. */
static void test_noise_floor(void)
{
	static const struct {
		enum shape sh;
		double lvl;
	} cases[] = {
	    {SH_GAUSS, 0.01}, {SH_GAUSS, 0.1}, {SH_GAUSS, 0.3}, {SH_GAUSS, 1.0},   {SH_GAUSS, 3.0},
	    {SH_ZERO, 0.01},  {SH_CHI2, 4},    {SH_CHI2, 32},	{SH_T2, 0.05},	   {SH_T2, 0.3},
	    {SH_LOGN, 0.3},   {SH_LOGN, 1.0},  {SH_OUTLIER, 0}, {SH_WANDER, 0.05},
	};
	int fired_cases = 0;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		int fired = 0;
		for (uint64_t seed = 1; seed <= NSEEDS; seed++) {
			struct gen g;
			gen_init(&g, 1, seed * 7919 + c);
			for (int64_t i = 0; i < 2100; i++) {
				double mean = 0.01 + (i < 100 ? 0.49 * exp(-(double)i / 15) : 0);
				if (feed(&g, i, noisy(&g, cases[c].sh, cases[c].lvl, mean, i))) {
					fprintf(stderr,
						"  %s %g seed %llu: LossDivergence at step %lld\n",
						shape_name[cases[c].sh], cases[c].lvl,
						(unsigned long long)seed, (long long)i);
					fired++;
					break;
				}
			}
			gen_free(&g);
		}
		fired_cases += fired > 0;
		CHECK_EQ_INT(fired, 0);
	}
	CHECK_EQ_INT(fired_cases, 0);
}

/* Converged (400 points at the noise floor of the shape), then the mean
 * follows mult(t) for t = 0, 1, ...: returns the steps until LossDivergence
 * (-1 = never within limit, -2 = raised before the divergence). */
static int diverge_after(uint64_t seed, enum shape sh, double lvl, double (*mult)(int), int limit)
{
	struct gen g;
	gen_init(&g, 1, seed);
	int at = -1;
	for (int64_t i = 0; i < 400 && at == -1; i++)
		if (feed(&g, i, noisy(&g, sh, lvl, 0.01, i)))
			at = -2;
	for (int t = 0; t < limit && at == -1; t++)
		if (feed(&g, 400 + t, noisy(&g, sh, lvl, 0.01 * mult(t), 400 + t)))
			at = t;
	gen_free(&g);
	return at;
}

static double up2(int t)
{
	return pow(1.02, t);
} /* +2 % per step */
static double up1lin(int t)
{
	return 1 + 0.01 * t;
} /* +1 % of the floor per step */
static double blowup(int t)
{
	return pow(1.1, t);
} /* exponential blow-up */
static double plateau(int t)
{
	return 1.5 * pow(1.01, t);
} /* a jump, then rising */

static void check_latency(const char *what, enum shape sh, double lvl, double (*mult)(int),
			  int bound)
{
	int worst = 0;
	for (uint64_t seed = 1; seed <= 20; seed++) {
		int at = diverge_after(seed * 104729, sh, lvl, mult, 400);
		if (at < 0 || at > bound)
			fprintf(stderr, "  %s seed %llu: raised after %d steps (bound %d)\n", what,
				(unsigned long long)seed, at, bound);
		CHECK(at >= 0 && at <= bound);
		if (at > worst)
			worst = at;
	}
	fprintf(stderr, "  %s: raised within %d steps (bound %d)\n", what, worst, bound);
}

static void test_divergence_latency(void)
{
	check_latency("+2 %/step, 1 % noise", SH_GAUSS, 0.01, up2, 40);
	check_latency("+2 %/step, 10 % noise", SH_GAUSS, 0.1, up2, 56);
	check_latency("+2 %/step, chi2 batch 32", SH_CHI2, 32, up2, 72);
	check_latency("+2 %/step, t2 noise", SH_T2, 0.05, up2, 40);
	check_latency("+1 % of the floor per step, 1 % noise", SH_GAUSS, 0.01, up1lin, 48);
	check_latency("x1.1 per step", SH_GAUSS, 0.1, blowup, 40);
	check_latency("x1.5 jump then +1 %/step", SH_GAUSS, 0.05, plateau, 32);
}

/* Once raised, a divergence that keeps going stays one episode; when the
 * loss comes back down to its floor, the alert clears. */
static void test_divergence_clears(void)
{
	struct gen g;
	gen_init(&g, 1, 5);
	int64_t i = 0;
	for (; i < 400; i++)
		CHECK(!feed(&g, i, noisy(&g, SH_GAUSS, 0.05, 0.01, i)));
	bool raised = false;
	double m = 0.01;
	for (int t = 0; t < 120; t++, i++) {
		m *= 1.02;
		bool on = feed(&g, i, noisy(&g, SH_GAUSS, 0.05, m, i));
		if (raised)
			CHECK(on);
		raised = raised || on;
	}
	CHECK(raised);
	bool cleared = false;
	for (int t = 0; t < 200 && !cleared; t++, i++)
		cleared = !feed(&g, i, noisy(&g, SH_GAUSS, 0.05, 0.01, i));
	CHECK(cleared);
	gen_free(&g);
}

/* Each step counts once: steps fed twice (the start-up warm-up replays
 * what is stored, and the writes stored before the detector's first
 * callback are delivered too) neither fill the warm-up of min_blocks x block
 * steps early nor put early, high losses after the late ones. */
/* Feeds v as rank 0's loss at step i with client time ts_ns (a replayed
 * copy keeps the time it was written with), evaluates; true if
 * LossDivergence. */
static bool feed_at(struct gen *g, int64_t i, double v, int64_t ts_ns)
{
	uint32_t att = 0;
	uint64_t bits;
	memcpy(&bits, &v, sizeof(bits));
	g->now_ns += 1000000000;
	det_engine_feed(g->e, g->job, strlen(g->job), 0, "loss", 4, &ts_ns, &i, &att, &bits, 1,
			g->now_ns, false);
	gen_eval(g);
	return gen_find(g, "LossDivergence", -2) != NULL;
}

static void test_steps_fed_twice(void)
{
	struct gen g;
	gen_init(&g, 1, 6);
	int64_t t0 = g.now_ns;
	for (int pass = 0; pass < 2; pass++)
		for (int64_t i = 0; i < 40; i++)
			CHECK(!feed_at(&g, i, 1.0 + 0.5 * (double)(i * i), t0 + i * 1000000000));
	int at = -1;
	for (int64_t i = 40; i < 120 && at < 0; i++)
		if (feed_at(&g, i, 1.0 + 0.5 * (double)(i * i), t0 + i * 1000000000))
			at = (int)i;
	CHECK(at >= 63 && at <= 71); /* judged from the 8th block on (step 63) */
	gen_free(&g);
	/* a decaying loss replayed, then live again from its start: no alert */
	gen_init(&g, 1, 7);
	t0 = g.now_ns;
	double v[400];
	for (int64_t i = 0; i < 400; i++)
		v[i] = noisy(&g, SH_CHI2, 32, FLOOR + 0.49 * exp(-(double)i / 15), i);
	for (int pass = 0; pass < 2; pass++)
		for (int64_t i = 0; i < 400; i++)
			CHECK(!feed_at(&g, i, v[i], t0 + i * 1000000000));
	gen_free(&g);
}

/* Feeds v at step i with client time ts_ns; true if `name` is active after
 * the evaluation. */
static bool feed_named(struct gen *g, int64_t i, double v, int64_t ts_ns, const char *name)
{
	uint32_t att = 0;
	uint64_t bits;
	memcpy(&bits, &v, sizeof(bits));
	g->now_ns += 1000000000;
	det_engine_feed(g->e, g->job, strlen(g->job), 0, "loss", 4, &ts_ns, &i, &att, &bits, 1,
			g->now_ns, false);
	gen_eval(g);
	return gen_find(g, name, -2) != NULL;
}

/* Every loss detector takes a point once: a replay of a decaying loss (early
 * values far above the late ones) is no LossSpike, and a replayed NaN whose
 * alert has cleared does not raise LossNonFinite again; but a NaN at the
 * same step as a finite value, written later (a loss per micro-batch), does. */
static void test_replay_counts_once_for_every_loss_detector(void)
{
	struct gen g;
	gen_init(&g, 1, 8);
	int64_t t0 = g.now_ns;
	double v[300];
	for (int64_t i = 0; i < 300; i++)
		v[i] = i == 200
			   ? NAN
			   : (FLOOR + 2.0 * exp(-(double)i / 20)) * (1 + 0.01 * gen_normal(&g));
	bool nf_seen = false;
	for (int64_t i = 0; i < 300; i++) {
		nf_seen |= feed_named(&g, i, v[i], t0 + i * 1000000000, "LossNonFinite");
		CHECK(!gen_find(&g, "LossSpike", -2) && !gen_find(&g, "LossDivergence", -2));
	}
	CHECK(nf_seen);
	CHECK(!gen_find(&g, "LossNonFinite", -2)); /* cleared by the finite steps after 200 */
	for (int64_t i = 0; i < 300; i++) {
		CHECK(!feed_named(&g, i, v[i], t0 + i * 1000000000, "LossSpike"));
		CHECK(!gen_find(&g, "LossNonFinite", -2) && !gen_find(&g, "LossDivergence", -2));
	}
	CHECK(!feed_named(&g, 300, FLOOR, t0 + 300 * 1000000000LL, "LossNonFinite"));
	CHECK(feed_named(&g, 300, NAN, t0 + 300 * 1000000000LL + 1, "LossNonFinite"));
	gen_free(&g);
}

int main(void)
{
	RUN(test_noise_floor);
	RUN(test_divergence_latency);
	RUN(test_divergence_clears);
	RUN(test_steps_fed_twice);
	RUN(test_replay_counts_once_for_every_loss_detector);
	return check_summary("detect_divergence");
}
