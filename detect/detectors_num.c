/* detectors_num.c - numeric health of training: LossNonFinite, LossSpike,
 * GradNormSpike, LossDivergence, LossScaleCollapse.
 *
 * Feeding (per point, O(1) amortised): a non-finite value opens a
 * non-finite episode and is never added to baselines nor judged as a spike
 * (one fault, one alert). A finite value is judged against the cached
 * robust baseline of the rank's recent values (median and MAD of the last
 * `window` finite values, recomputed every 8 values), then added to it. A
 * spike starts only with a jump from the previous value (by at least half
 * the threshold gap), so a gradual rise is left to LossDivergence. Loss
 * values are also folded into blocks whose medians feed the divergence
 * test. Warm-up: nothing is judged before `warmup` finite values since the
 * rank started or restarted; replayed history (warmup=true) never opens an
 * episode.
 *
 * Evaluation: the ranks at fault for one (detector, metric) are gathered;
 * when at least job_fraction of the ranks that report the metric (and at
 * least two) are at fault, one job-level condition replaces the per-rank
 * ones. A single rank's condition waits until every live peer has reported
 * the faulty step (or settle_s passed), so a fault all ranks share is not
 * first reported per rank. Episodes end by their clear_steps / hold_s rules
 * during evaluation.
 *
 * Threading: called with the engine mutex held.
 */
#include "detect/engine_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAD_SCALE	1.4826 /* MAD -> standard deviation for normal noise */
#define REFRESH_EVERY	8      /* values between baseline recomputations */
#define SPIKE_RECENT	5      /* a spike also clears the median of this many latest values */
#define DIV_BASE_LOWEST 5      /* divergence baseline: median of this many lowest block medians */
#define DIV_MIN_DIFFS	3      /* block-median differences needed for the between-block noise */
#define DIV_PREV_FRAC	0.75   /* the block before the latest is this far past the limit too */

/* ---- feeding ---------------------------------------------------------------------------- */

static void num_refresh(struct deti_num *n, uint32_t window)
{
	double v[DETI_WIN_MAX];
	uint32_t w = n->wn < window ? n->wn : window;
	for (uint32_t i = 0; i < w; i++)
		v[i] = n->win[(n->whead + DETI_WIN_MAX - 1 - i) % DETI_WIN_MAX];
	n->med = deti_median(v, w);
	n->mad = deti_mad(v, w, n->med);
	n->since_refresh = 0;
	n->base_ok = true;
}

static void num_add(struct deti_num *n, double v)
{
	n->win[n->whead] = (float)v;
	n->whead = (uint16_t)((n->whead + 1) % DETI_WIN_MAX);
	if (n->wn < DETI_WIN_MAX)
		n->wn++;
	n->since_refresh++;
}

static double spike_gap(const struct deti_num *n, const struct det_rule_eff *sp)
{
	double gap =
	    fmax(sp->p[DET_P_SP_K] * MAD_SCALE * n->mad, sp->p[DET_P_SP_REL] * fabs(n->med));
	return gap > 1e-9 ? gap : 1e-9;
}

/* Median of the latest SPIKE_RECENT values (before v). On a steep trend
 * (a divergence) the window's median lags far behind the current level and
 * an ordinary harder batch would look like a spike against it; against the
 * latest values it does not. Only computed for a spike candidate. */
static double recent_median(const struct deti_num *n)
{
	double v[SPIKE_RECENT];
	uint32_t k = n->wn < SPIKE_RECENT ? n->wn : SPIKE_RECENT;
	for (uint32_t i = 0; i < k; i++)
		v[i] = n->win[(n->whead + DETI_WIN_MAX - 1 - i) % DETI_WIN_MAX];
	return deti_median(v, k);
}

static void spike_judge(struct deti_num *n, const struct det_rule_eff *sp, double v, int64_t step,
			int64_t now_ns, bool warmup)
{
	uint32_t window = (uint32_t)sp->p[DET_P_SP_WINDOW];
	if (n->wn >= 4 && (!n->base_ok || n->since_refresh >= REFRESH_EVERY))
		num_refresh(n, window);
	if (!n->base_ok || n->npoints < (uint64_t)sp->p[DET_P_SP_WARMUP])
		return;
	double gap = spike_gap(n, sp);
	bool above = v > n->med + gap;
	if (above && n->wn >= SPIKE_RECENT)
		above = v > recent_median(n) + gap;
	if (!above) {
		if (n->sp_active && ++n->sp_quiet >= (uint32_t)sp->p[DET_P_SP_CLEAR_STEPS])
			n->sp_active = false;
		return;
	}
	if (n->sp_active) {
		n->sp_quiet = 0;
		n->sp_last_ns = now_ns;
		if (v > n->sp_value)
			n->sp_value = v;
		return;
	}
	if (warmup || (!isnan(n->prev) && v - n->prev < 0.5 * gap))
		return; /* replayed history, or a rise rather than a jump */
	n->sp_active = true;
	n->sp_value = v;
	n->sp_base = n->med;
	n->sp_step = step;
	n->sp_first_ns = now_ns;
	n->sp_last_ns = now_ns;
	n->sp_quiet = 0;
}

/* Noise of one block median (its standard error) over the history, two
 * estimates, the larger wins: within blocks, the median MAD of the blocks'
 * points scaled to the standard error of a median of `block` points (1.2533
 * sigma / sqrt(block)); between blocks, the MAD of the differences of
 * consecutive block medians (a steady trend shifts every difference alike
 * and drops out; fluctuations slower than a block do not). b[0] = newest. */
static double div_noise(const struct deti_num *n, const double *b, uint32_t nb, uint32_t block)
{
	double v[DETI_BLKS_MAX];
	for (uint32_t i = 0; i < nb; i++)
		v[i] = n->bmad[(n->bhead + DETI_BLKS_MAX - 1 - i) % DETI_BLKS_MAX];
	double within = 1.2533 * MAD_SCALE * deti_median(v, nb) / sqrt((double)block);
	uint32_t nd = 0;
	for (uint32_t i = 0; i + 1 < nb; i++)
		v[nd++] = b[i] - b[i + 1];
	double between = 0;
	if (nd >= DIV_MIN_DIFFS) {
		double med = deti_median(v, nd);
		between = MAD_SCALE * deti_mad(v, nd, med) / sqrt(2.0);
	}
	return fmax(within, between);
}

static void div_judge(struct deti_num *n, const struct det_rule_eff *dv, int64_t step,
		      int64_t now_ns)
{
	uint32_t nb = n->nblk, rising = (uint32_t)dv->p[DET_P_DV_RISING];
	if (nb < (uint32_t)dv->p[DET_P_DV_MIN_BLOCKS] || nb <= rising)
		return;
	double b[DETI_BLKS_MAX], s[DETI_BLKS_MAX];
	for (uint32_t i = 0; i < nb; i++) /* b[0] = newest */
		s[i] = b[i] = n->blk[(n->bhead + DETI_BLKS_MAX - 1 - i) % DETI_BLKS_MAX];
	if (n->dv_active) {
		n->dv_value = b[0];
		if (b[0] < n->dv_base + 0.5 * n->dv_thr)
			n->dv_active = false;
		return;
	}
	/* An upward trend over the latest rising + 1 block medians: every pair in
	 * order (newer higher) but at most one (Mann-Kendall: S >= pairs - 2). A
	 * strict run breaks on one noisy block even on a steep rise. */
	int mk = 0, pairs = (int)(rising * (rising + 1) / 2);
	for (uint32_t i = 0; i < rising; i++)
		for (uint32_t j = i + 1; j <= rising; j++)
			mk += b[i] > b[j] ? 1 : b[i] < b[j] ? -1 : 0;
	if (mk < pairs - 2)
		return;
	/* Baseline: the median of the DIV_BASE_LOWEST lowest block medians (a
	 * partial selection sort of s). On a
	 * converged, noisy loss the single lowest one is a low outlier (about 1.8
	 * standard errors below the mean of 16), and a rise over it is mostly
	 * that outlier's distance. */
	uint32_t nlow = nb < DIV_BASE_LOWEST ? nb : DIV_BASE_LOWEST;
	for (uint32_t i = 0; i < nlow; i++)
		for (uint32_t j = i + 1; j < nb; j++)
			if (s[j] < s[i]) {
				double t = s[i];
				s[i] = s[j];
				s[j] = t;
			}
	double base = s[nlow / 2];
	double thr = fmax(dv->p[DET_P_DV_REL] * fabs(base),
			  dv->p[DET_P_DV_K] * div_noise(n, b, nb, (uint32_t)dv->p[DET_P_DV_BLOCK]));
	/* The latest block is past the limit and the one before nearly so: one
	 * lucky block of a heavy-tailed noise is not a trend. */
	if (!(b[0] > base + thr) || !(b[1] > base + DIV_PREV_FRAC * thr))
		return;
	n->dv_active = true;
	n->dv_value = b[0];
	n->dv_base = base;
	n->dv_thr = thr;
	n->dv_step = step;
	n->dv_first_ns = now_ns;
}

static void div_feed(struct deti_num *n, const struct det_rule_eff *dv, double v, int64_t step,
		     int64_t now_ns)
{
	uint32_t block = (uint32_t)dv->p[DET_P_DV_BLOCK];
	if (n->ncur < DETI_BLOCK_MAX)
		n->cur[n->ncur++] = (float)v;
	if (n->ncur < block)
		return;
	double tmp[DETI_BLOCK_MAX];
	for (uint32_t i = 0; i < n->ncur; i++)
		tmp[i] = n->cur[i];
	double med = deti_median(tmp, n->ncur);
	n->blk[n->bhead] = (float)med;
	n->bmad[n->bhead] = (float)deti_mad(tmp, n->ncur, med);
	n->bhead = (uint16_t)((n->bhead + 1) % DETI_BLKS_MAX);
	if (n->nblk < DETI_BLKS_MAX)
		n->nblk++;
	n->ncur = 0;
	div_judge(n, dv, step, now_ns);
}

void deti_num_feed(struct deti_job *j, struct deti_num *n, int which, double v, int64_t step,
		   int64_t ts_ns, int64_t now_ns, bool warmup)
{
	const struct det_rule_eff *sp =
	    &j->eff[which == DETI_NUM_LOSS ? DET_R_LOSS_SPIKE : DET_R_GRAD_NORM_SPIKE];
	/* Each point counts once, in order. A point before the latest step, or
	 * at it with a client time not after the latest one, is late or fed
	 * twice: the start-up warm-up replays what is stored, and the writes
	 * stored before the detector's first callback are delivered too. A
	 * second copy of an early, high loss after the late ones would be a
	 * jump (LossSpike) or a rise (LossDivergence) that never happened, and
	 * a second copy of a NaN after the alert cleared would raise it again.
	 * Several values at one step with rising client times (a loss per
	 * micro-batch) all count. A restart from a checkpoint resets n first
	 * (rank_restart), so its earlier steps count again. */
	if (step != DET_STEP_NONE && n->last_step != DET_STEP_NONE &&
	    (step < n->last_step || (step == n->last_step && ts_ns <= n->last_ts_ns)))
		return;
	bool new_step = step != DET_STEP_NONE && step != n->last_step;
	if (step != DET_STEP_NONE) {
		n->last_step = step;
		n->last_ts_ns = ts_ns;
	}
	n->last_ns = now_ns;
	if (!isfinite(v)) {
		if (!n->nf_active && !warmup) {
			n->nf_active = true;
			n->nf_value = v;
			n->nf_step = step;
			n->nf_first_ns = now_ns;
		}
		n->nf_last_ns = now_ns;
		n->nf_finite = 0;
		return;
	}
	if (n->nf_active &&
	    ++n->nf_finite >= (uint32_t)j->eff[DET_R_LOSS_NON_FINITE].p[DET_P_NF_CLEAR_STEPS])
		n->nf_active = false;
	spike_judge(n, sp, v, step, now_ns, warmup);
	num_add(n, v);
	n->prev = v;
	n->npoints++;
	if (which == DETI_NUM_LOSS && (new_step || step == DET_STEP_NONE))
		div_feed(n, &j->eff[DET_R_LOSS_DIVERGENCE], v, step, now_ns);
}

void deti_ls_feed(struct deti_job *j, struct deti_lscale *ls, bool skipped, double v, int64_t step)
{
	if (!skipped) {
		if (!isnan(ls->last) && v > 0 && v <= 0.75 * ls->last && step != DET_STEP_NONE) {
			ls->halv[ls->hh] = step;
			ls->hh = (uint16_t)((ls->hh + 1) % DETI_LS_HALV);
			if (ls->nh < DETI_LS_HALV)
				ls->nh++;
		}
		ls->last = v;
		ls->last_step = step;
		return;
	}
	if (step == DET_STEP_NONE)
		return;
	double window = j->eff[DET_R_LOSS_SCALE_COLLAPSE].p[DET_P_LS_WINDOW_STEPS];
	int64_t spacing = (int64_t)(window / 16) > 1 ? (int64_t)(window / 16) : 1;
	int64_t newest = ls->ns ? ls->skip_step[(ls->sh + DETI_LS_SKIP - 1) % DETI_LS_SKIP] : 0;
	if (ls->ns == 0 || step >= newest + spacing || step < newest) {
		ls->skip_step[ls->sh] = step;
		ls->skip_val[ls->sh] = v;
		ls->sh = (uint16_t)((ls->sh + 1) % DETI_LS_SKIP);
		if (ls->ns < DETI_LS_SKIP)
			ls->ns++;
	}
	ls->skip_last = v;
	ls->skip_last_step = step;
}

/* ---- evaluation -------------------------------------------------------------------------- */

enum kind { K_NF, K_SPIKE, K_DIV, K_LS_SCALE, K_LS_SKIP };

struct agg {
	enum kind kind;
	unsigned rule;
	const char *metric; /* label */
	const char *what;   /* "loss is not finite" */
	double frac, settle_s;
	int64_t settle_steps; /* a rank's hit waits for its peers this many steps past it */
	size_t total;	      /* ranks reporting the metric */
	int64_t min_step;     /* lowest latest step among live ranks reporting it */
};

static void describe(const struct deti_job *j, const struct agg *a, const struct deti_hit *h,
		     char *buf, size_t n)
{
	const struct deti_rank *r = h->rank == DET_JOB_RANK ? NULL : deti_rank_at(j, h->rank);
	char phase[DET_NAME_MAX + 16] = "";
	if (r)
		snprintf(phase, sizeof(phase), "; last phase %s",
			 r->last_phase[0] ? r->last_phase : "none reported");
	switch (a->kind) {
	case K_NF:
		snprintf(buf, n, "%s = %g at step %lld (first non-finite point)%s", a->metric,
			 h->value, (long long)h->step, phase);
		break;
	case K_SPIKE:
		snprintf(buf, n,
			 "%s = %.6g at step %lld, %.0f %% above the rank's recent median %.6g%s",
			 a->metric, h->value, (long long)h->step,
			 h->base != 0 ? 100.0 * (h->value - h->base) / fabs(h->base) : 0.0, h->base,
			 phase);
		break;
	case K_DIV:
		snprintf(buf, n,
			 "%s block median %.6g at step %lld is %.0f %% above its recent low "
			 "(median of the "
			 "lowest block medians) %.6g and rising past the noise",
			 a->metric, h->value, (long long)h->step,
			 h->base != 0 ? 100.0 * (h->value - h->base) / fabs(h->base) : 0.0,
			 h->base);
		break;
	case K_LS_SCALE:
	case K_LS_SKIP:
		snprintf(buf, n, "%s at step %lld: %s (value %.6g, limit %.6g)", a->metric,
			 (long long)h->step, h->note ? h->note : "", h->value, h->base);
		break;
	}
}

static void emit_one(struct deti_emit *em, const struct agg *a, const struct deti_hit *h,
		     int64_t rank)
{
	char summary[DET_SUMMARY_MAX], desc[DET_DESC_MAX];
	if (rank == DET_RANK_NONE)
		snprintf(summary, sizeof(summary), "%s: %s (job level)", em->job->name, a->what);
	else
		snprintf(summary, sizeof(summary), "%s: %s on rank %lld", em->job->name, a->what,
			 (long long)rank);
	describe(em->job, a, h, desc, sizeof(desc));
	struct deti_cond_in in = {a->rule, rank, NULL, a->metric, h->value, h->base, h->step};
	deti_emit(em, &in, summary, desc);
}

/* Emits the hits of one (detector, metric) as one job-level condition or one
 * per rank; jh is the job-level pseudo-rank's own hit (or NULL). */
static void emit_hits(struct det_engine *e, struct deti_emit *em, const struct agg *a,
		      struct deti_hit *h, size_t nh, const struct deti_hit *jh, int64_t now_ns)
{
	if (a->frac > 0 && nh >= 2 && (double)nh >= a->frac * (double)a->total &&
	    deti_scratch(e, nh)) {
		double *vals = e->scratch, *bases = e->scratch + e->scratch_n;
		struct deti_hit agg = h[0];
		char ranks[256] = "";
		for (size_t i = 0; i < nh; i++) {
			vals[i] = h[i].value;
			bases[i] = h[i].base;
			if (h[i].step < agg.step)
				agg.step = h[i].step;
			if (i < 16)
				snprintf(ranks + strlen(ranks), sizeof(ranks) - strlen(ranks),
					 "%s%u", i ? "," : "", h[i].rank);
		}
		if (a->kind != K_NF)
			agg.value = deti_median(vals, nh);
		agg.base = deti_median(bases, nh);
		agg.rank = DET_JOB_RANK;
		char summary[DET_SUMMARY_MAX], desc[DET_DESC_MAX], one[600];
		snprintf(summary, sizeof(summary), "%s: %s on %zu of %zu ranks", em->job->name,
			 a->what, nh, a->total);
		describe(em->job, a, &agg, one, sizeof(one));
		snprintf(desc, sizeof(desc), "%zu of %zu ranks (%s%s); median over them: %s", nh,
			 a->total, ranks, nh > 16 ? ",..." : "", one);
		struct deti_cond_in in = {a->rule,   DET_RANK_NONE, NULL,    a->metric,
					  agg.value, agg.base,	    agg.step};
		deti_emit(em, &in, summary, desc);
		return;
	}
	if (jh)
		emit_one(em, a, jh, DET_RANK_NONE);
	for (size_t i = 0; i < nh; i++) {
		bool peers_there =
		    a->min_step != DET_STEP_NONE && a->min_step >= h[i].step + a->settle_steps;
		if (a->settle_s > 0 && !peers_there &&
		    (double)(now_ns - h[i].first_ns) < a->settle_s * 1e9)
			continue;
		emit_one(em, a, &h[i], h[i].rank);
	}
}

/* Ends episodes whose time is up and returns the rank's hit for kind. */
static bool num_hit(const struct deti_job *j, struct deti_num *n, enum kind kind, int which,
		    int64_t now_ns, struct deti_hit *out)
{
	if (kind == K_NF) {
		double hold = j->eff[DET_R_LOSS_NON_FINITE].p[DET_P_NF_HOLD_S];
		if (n->nf_active && !deti_fresh(n->nf_last_ns, now_ns, hold))
			n->nf_active = false;
		if (!n->nf_active)
			return false;
		*out = (struct deti_hit){0, n->nf_value, NAN, n->nf_step, n->nf_first_ns, NULL};
		return true;
	}
	if (kind == K_SPIKE) {
		unsigned rule = which == DETI_NUM_LOSS ? DET_R_LOSS_SPIKE : DET_R_GRAD_NORM_SPIKE;
		if (n->sp_active &&
		    !deti_fresh(n->sp_last_ns, now_ns, j->eff[rule].p[DET_P_SP_HOLD_S]))
			n->sp_active = false;
		if (!n->sp_active)
			return false;
		*out =
		    (struct deti_hit){0, n->sp_value, n->sp_base, n->sp_step, n->sp_first_ns, NULL};
		return true;
	}
	if (!n->dv_active)
		return false;
	*out = (struct deti_hit){0, n->dv_value, n->dv_base, n->dv_step, n->dv_first_ns, NULL};
	return true;
}

static void eval_num(struct det_engine *e, struct deti_emit *em, enum kind kind, int which,
		     int64_t now_ns)
{
	struct deti_job *j = em->job;
	static const unsigned rules[3][2] = {
	    {DET_R_LOSS_NON_FINITE, DET_R_LOSS_NON_FINITE},
	    {DET_R_LOSS_SPIKE, DET_R_GRAD_NORM_SPIKE},
	    {DET_R_LOSS_DIVERGENCE, DET_R_LOSS_DIVERGENCE},
	};
	static const char *const what[3][2] = {
	    {"loss is not finite", "grad_norm is not finite"},
	    {"loss spike", "grad_norm spike"},
	    {"loss diverging", "grad_norm diverging"},
	};
	struct agg a = {kind,
			rules[kind][which],
			which == DETI_NUM_LOSS ? "loss" : "grad_norm",
			what[kind][which],
			0,
			0,
			0,
			0,
			DET_STEP_NONE};
	const struct det_rule_eff *eff = &j->eff[a.rule];
	if (!eff->enabled)
		return;
	a.frac = kind == K_NF	   ? eff->p[DET_P_NF_JOB_FRACTION]
		 : kind == K_SPIKE ? eff->p[DET_P_SP_JOB_FRACTION]
				   : eff->p[DET_P_DV_JOB_FRACTION];
	a.settle_s = kind == K_NF      ? eff->p[DET_P_NF_SETTLE_S]
		     : kind == K_SPIKE ? eff->p[DET_P_SP_SETTLE_S]
				       : eff->p[DET_P_DV_SETTLE_S];
	if (kind == K_DIV)
		a.settle_steps = (int64_t)eff->p[DET_P_DV_BLOCK];
	double silence = deti_rule_p(j, DET_R_RANK_DOWN, DET_P_RD_SILENCE_S);
	struct deti_hit *h = deti_hits(e, j->nranks ? j->nranks : 1);
	if (!h)
		return;
	size_t nh = 0;
	for (uint32_t i = 0; i < j->rcap; i++) {
		struct deti_rank *r = j->ranks[i];
		struct deti_num *n = r ? r->num[which] : NULL;
		if (!n || deti_rank_retired(j, r))
			continue;
		a.total++;
		if (deti_fresh(n->last_ns, now_ns, silence) && n->last_step != DET_STEP_NONE &&
		    (a.min_step == DET_STEP_NONE || n->last_step < a.min_step))
			a.min_step = n->last_step;
		if (num_hit(j, n, kind, which, now_ns, &h[nh])) {
			h[nh].rank = r->rank;
			nh++;
		}
	}
	struct deti_hit jh;
	bool has_j = j->jrank && j->jrank->num[which] &&
		     num_hit(j, j->jrank->num[which], kind, which, now_ns, &jh);
	if (has_j)
		jh.rank = DET_JOB_RANK;
	emit_hits(e, em, &a, h, nh, has_j ? &jh : NULL, now_ns);
}

/* LossScaleCollapse hits of one rank: loss_scale (floor, halvings) and
 * skipped_steps (rate). */
static void ls_hits(const struct det_rule_eff *eff, const struct deti_lscale *ls,
		    struct deti_hit *scale, bool *has_scale, struct deti_hit *skip, bool *has_skip)
{
	double floor_v = eff->p[DET_P_LS_FLOOR], window = eff->p[DET_P_LS_WINDOW_STEPS];
	*has_scale = *has_skip = false;
	if (!isnan(ls->last) && floor_v > 0 && ls->last < floor_v) {
		*scale = (struct deti_hit){
		    0, ls->last, floor_v, ls->last_step, 0, "loss_scale fell below the floor"};
		*has_scale = true;
	} else if (ls->last_step != DET_STEP_NONE) {
		uint32_t c = 0;
		for (uint32_t i = 0; i < ls->nh; i++)
			if ((double)ls->halv[i] > (double)ls->last_step - window)
				c++;
		if (c >= (uint32_t)eff->p[DET_P_LS_HALVINGS]) {
			*scale = (struct deti_hit){0,
						   (double)c,
						   eff->p[DET_P_LS_HALVINGS],
						   ls->last_step,
						   0,
						   "loss_scale halvings within the window"};
			*has_scale = true;
		}
	}
	if (isnan(ls->skip_last))
		return;
	double base = NAN;
	for (uint32_t i = 0; i < ls->ns; i++) {
		uint32_t k = (ls->sh + DETI_LS_SKIP - ls->ns + i) % DETI_LS_SKIP; /* oldest first */
		if ((double)ls->skip_step[k] >= (double)ls->skip_last_step - window &&
		    ls->skip_step[k] <= ls->skip_last_step) {
			base = ls->skip_val[k];
			break;
		}
	}
	double inc = ls->skip_last - base;
	if (!isnan(base) && inc >= eff->p[DET_P_LS_SKIPPED]) {
		*skip = (struct deti_hit){0,
					  inc,
					  eff->p[DET_P_LS_SKIPPED],
					  ls->skip_last_step,
					  0,
					  "skipped steps within the window"};
		*has_skip = true;
	}
}

enum { LS_EP_NONE = 0, LS_EP_SCALE, LS_EP_SKIP };

/* One collapse, one alert: both tests usually trip together (every
 * overflow halves loss_scale and skips the step). The test that trips first
 * names the episode (its metric label) and the episode lasts while either
 * holds, so the alert does not change identity when one test runs out.
 * Returns the group the rank's hit goes to (LS_EP_*) and writes it to out. */
static int ls_episode(struct deti_lscale *ls, const struct deti_hit *scale, bool has_scale,
		      const struct deti_hit *skip, bool has_skip, struct deti_hit *out)
{
	if (!has_scale && !has_skip) {
		ls->episode = LS_EP_NONE;
		return LS_EP_NONE;
	}
	if (ls->episode == LS_EP_NONE)
		ls->episode = has_scale ? LS_EP_SCALE : LS_EP_SKIP;
	if (ls->episode == LS_EP_SCALE)
		*out = has_scale ? *scale : *skip;
	else
		*out = has_skip ? *skip : *scale;
	return ls->episode;
}

static void eval_loss_scale(struct det_engine *e, struct deti_emit *em)
{
	struct deti_job *j = em->job;
	const struct det_rule_eff *eff = &j->eff[DET_R_LOSS_SCALE_COLLAPSE];
	if (!eff->enabled)
		return;
	struct deti_hit *h = deti_hits(e, 2 * (size_t)(j->nranks + 1));
	if (!h)
		return;
	size_t half = j->nranks + 1, nscale = 0, nskip = 0, total = 0;
	for (uint32_t i = 0; i < j->rcap; i++) {
		struct deti_rank *r = j->ranks[i];
		if (!r || !r->ls || deti_rank_retired(j, r))
			continue;
		total++;
		bool a, b;
		struct deti_hit hs, hk, one;
		ls_hits(eff, r->ls, &hs, &a, &hk, &b);
		int ep = ls_episode(r->ls, &hs, a, &hk, b, &one);
		one.rank = r->rank;
		if (ep == LS_EP_SCALE)
			h[nscale++] = one;
		else if (ep == LS_EP_SKIP)
			h[half + nskip++] = one;
	}
	struct agg a = {K_LS_SCALE,
			DET_R_LOSS_SCALE_COLLAPSE,
			"loss_scale",
			"loss scale collapse",
			eff->p[DET_P_LS_JOB_FRACTION],
			0,
			0,
			total,
			DET_STEP_NONE};
	struct deti_hit js, jk, jone;
	bool hs = false, hk = false;
	int jep = LS_EP_NONE;
	if (j->jrank && j->jrank->ls) {
		ls_hits(eff, j->jrank->ls, &js, &hs, &jk, &hk);
		jep = ls_episode(j->jrank->ls, &js, hs, &jk, hk, &jone);
		jone.rank = DET_JOB_RANK;
	}
	emit_hits(e, em, &a, h, nscale, jep == LS_EP_SCALE ? &jone : NULL, 0);
	a.kind = K_LS_SKIP;
	a.metric = "skipped_steps";
	a.what = "skipped steps rising fast";
	emit_hits(e, em, &a, h + half, nskip, jep == LS_EP_SKIP ? &jone : NULL, 0);
}

void deti_eval_numerics(struct det_engine *e, struct deti_emit *em, int64_t now_ns)
{
	for (int which = 0; which < DETI_NUM_COUNT; which++) {
		eval_num(e, em, K_NF, which, now_ns);
		eval_num(e, em, K_SPIKE, which, now_ns);
	}
	eval_num(e, em, K_DIV, DETI_NUM_LOSS, now_ns);
	eval_loss_scale(e, em);
}
