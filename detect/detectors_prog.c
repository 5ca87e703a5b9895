/* detectors_prog.c - progress of a run: JobDown, RankDown, TrainingHang,
 * Straggler, ThroughputDrop.
 *
 * Liveness is the server's receive time of a rank's latest data of any kind
 * (RankDown.silence_s). Ranks of an earlier attempt that did not come back
 * are retired and judged by nothing here. Jobs whose metadata says finished
 * or failed are not judged at all.
 *
 * One fault, one alert: when every rank is silent only JobDown is raised; a
 * hang is not raised while some rank has been silent for more than half the
 * time the step has not moved (a crashed rank stalls its peers in the
 * collective; RankDown names it at silence_s); ThroughputDrop is not raised while a rank is
 * down, the job hangs, or a straggler explains the slowdown.
 *
 * Straggler: each step that every live rank has finished (the step before
 * the lowest latest step) is judged once: per rank the own work (step_time
 * minus collective and data-loader time, else the sum of its forward,
 * backward and optimizer times) and the data-loader time are compared with
 * the median and MAD over the ranks of that step. A slowdown that every
 * rank shares moves the median, not one rank. A rank's verdicts are bits of
 * a 64-bit word (the sliding window); it straggles from `hits` slow steps
 * of the last `window` until fewer than hits/2 remain. The phase label is
 * the phase whose decayed excess over the per-step phase medians, summed
 * over the rank's slow steps, is largest.
 *
 * Threading: called with the engine mutex held.
 */
#include "detect/engine_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/rdb_sort.h"

#define MAD_SCALE 1.4826

static size_t ring_at(int64_t step)
{
	int64_t m = step % DETI_STEPS_RING;
	return (size_t)(m < 0 ? m + DETI_STEPS_RING : m);
}

void deti_steprec_set(struct deti_rank *r, int64_t step, unsigned phase, double seconds, bool add)
{
	struct deti_steprec *s = &r->steps[ring_at(step)];
	if (s->step != step) {
		if (s->step != DET_STEP_NONE && s->step > step)
			return; /* a late point of a step the ring no longer holds */
		s->step = step;
		s->from_metric = 0;
		for (int p = 0; p < DET_PH_COUNT; p++)
			s->t[p] = NAN;
	}
	uint8_t bit = (uint8_t)(1u << phase);
	if (!add) {
		s->t[phase] = (float)seconds;
		s->from_metric |= bit;
	} else if (s->from_metric & bit) {
		return; /* the metric already says how long the phase took */
	} else if (!isnan(s->t[phase])) {
		s->t[phase] += (float)seconds;
	} else {
		s->t[phase] = (float)seconds;
	}
}

double deti_rank_rate(const struct deti_rank *r, int64_t now_ns)
{
	if (r->nmv < 2)
		return 0;
	unsigned oldest = (r->mvhead + DETI_MOVES - r->nmv) % DETI_MOVES;
	unsigned newest = (r->mvhead + DETI_MOVES - 1) % DETI_MOVES;
	double dt = (double)(now_ns - r->mv_ns[oldest]) / 1e9;
	double ds = (double)(r->mv_step[newest] - r->mv_step[oldest]);
	return dt > 0 && ds > 0 ? ds / dt : 0;
}

double deti_job_step_time(struct det_engine *e, struct deti_job *j, int64_t now_ns)
{
	double silence = deti_rule_p(j, DET_R_RANK_DOWN, DET_P_RD_SILENCE_S);
	double st = NAN;
	if (j->nranks && deti_scratch(e, j->nranks)) {
		size_t n = 0;
		for (uint32_t i = 0; i < j->rcap; i++) {
			struct deti_rank *r = j->ranks[i];
			if (r && !isnan(r->step_time) &&
			    deti_fresh(r->last_seen_ns, now_ns, silence))
				e->scratch[n++] = r->step_time;
		}
		st = deti_median(e->scratch, n);
	}
	if (j->ngaps) {
		double g[DETI_GAPS];
		for (uint32_t i = 0; i < j->ngaps; i++)
			g[i] = j->gaps[i];
		double gm = deti_median(g, j->ngaps);
		st = isnan(st) ? gm : fmax(st, gm);
	}
	j->median_step_s = st;
	return st;
}

/* ---- liveness --------------------------------------------------------------------------- */

struct live {
	uint32_t seen, alive, down;
	int64_t newest_ns;
	double silence_s;
};

static void liveness(struct deti_job *j, int64_t now_ns, struct live *l)
{
	memset(l, 0, sizeof(*l));
	l->silence_s = deti_rule_p(j, DET_R_RANK_DOWN, DET_P_RD_SILENCE_S);
	j->max_step = DET_STEP_NONE;
	for (uint32_t i = 0; i < j->rcap; i++) {
		struct deti_rank *r = j->ranks[i];
		if (!r)
			continue;
		r->state = DET_RANK_OK;
		if (deti_rank_retired(j, r))
			continue;
		l->seen++;
		if (deti_fresh(r->last_seen_ns, now_ns, l->silence_s))
			l->alive++;
		if (r->last_seen_ns > l->newest_ns)
			l->newest_ns = r->last_seen_ns;
		if (r->last_step != DET_STEP_NONE &&
		    (j->max_step == DET_STEP_NONE || r->last_step > j->max_step))
			j->max_step = r->last_step;
	}
}

static bool eval_job_down(struct deti_emit *em, const struct live *l, int64_t now_ns)
{
	struct deti_job *j = em->job;
	if (l->seen == 0)
		return false;
	double silent_s = (double)(now_ns - l->newest_ns) / 1e9;
	const struct det_rule_eff *eff = &j->eff[DET_R_JOB_DOWN];
	if (silent_s < eff->p[DET_P_JD_SILENCE_S] || silent_s >= eff->p[DET_P_JD_MAX_SILENCE_S])
		return false;
	j->down = true;
	for (uint32_t i = 0; i < j->rcap; i++)
		if (j->ranks[i] && !deti_rank_retired(j, j->ranks[i]))
			j->ranks[i]->state = DET_RANK_DOWN;
	char summary[DET_SUMMARY_MAX], desc[DET_DESC_MAX];
	snprintf(summary, sizeof(summary), "%s: every rank silent for %.0f s", j->name, silent_s);
	snprintf(desc, sizeof(desc),
		 "none of the %u ranks sent data for %.0f s (limit %.0f s); last step %lld; "
		 "metadata status is not finished or failed",
		 l->seen, silent_s, eff->p[DET_P_JD_SILENCE_S], (long long)j->max_step);
	struct deti_cond_in in = {DET_R_JOB_DOWN, DET_RANK_NONE, NULL,
				  NULL,		  silent_s,	 eff->p[DET_P_JD_SILENCE_S],
				  j->max_step};
	deti_emit(em, &in, summary, desc);
	return true;
}

static uint32_t eval_rank_down(struct deti_emit *em, const struct live *l, int64_t now_ns)
{
	struct deti_job *j = em->job;
	uint32_t down = 0;
	if (l->alive == 0)
		return 0;
	for (uint32_t i = 0; i < j->rcap; i++) {
		struct deti_rank *r = j->ranks[i];
		if (!r || deti_rank_retired(j, r) ||
		    deti_fresh(r->last_seen_ns, now_ns, l->silence_s))
			continue;
		down++;
		r->state = DET_RANK_DOWN;
		double silent_s = (double)(now_ns - r->last_seen_ns) / 1e9;
		char summary[DET_SUMMARY_MAX], desc[DET_DESC_MAX];
		snprintf(summary, sizeof(summary), "%s: rank %u silent for %.0f s", j->name,
			 r->rank, silent_s);
		snprintf(
		    desc, sizeof(desc),
		    "rank %u sent nothing for %.0f s (limit %.0f s) while %u of %u ranks still "
		    "send; its last step %lld, last phase %s, attempt %u",
		    r->rank, silent_s, l->silence_s, l->alive, l->seen, (long long)r->last_step,
		    r->last_phase[0] ? r->last_phase : "none reported", r->attempt);
		struct deti_cond_in in = {DET_R_RANK_DOWN, r->rank,	 NULL,	      NULL,
					  silent_s,	   l->silence_s, r->last_step};
		deti_emit(em, &in, summary, desc);
	}
	return down;
}

/* ---- hang --------------------------------------------------------------------------------- */

static int cmp_activity(const void *a, const void *b)
{
	const struct deti_hit *x = a, *y = b;
	if (x->step != y->step)
		return x->step < y->step ? -1 : 1;
	int c = strcmp(x->note, y->note);
	return c ? c : (x->rank < y->rank ? -1 : x->rank > y->rank);
}

static bool same_activity(const struct deti_hit *x, const struct deti_hit *y)
{
	return x->step == y->step && strcmp(x->note, y->note) == 0;
}

static const char *phase_or(const char *p)
{
	return p[0] ? p : "no phase";
}

/* Names the ranks whose (last step, last phase) differs from the most common
 * one. Returns the rank to label (or DET_RANK_NONE) and writes the text. */
static int64_t hang_culprits(struct deti_hit *h, size_t n, char *buf, size_t len)
{
	rdb_sort(h, n, sizeof(*h), cmp_activity);
	size_t best = 0, best_n = 0;
	for (size_t i = 0; i < n;) {
		size_t k = i;
		while (k < n && same_activity(&h[i], &h[k]))
			k++;
		if (k - i > best_n) {
			best = i;
			best_n = k - i;
		}
		i = k;
	}
	size_t ndiff = n - best_n;
	const struct deti_hit *m = &h[best];
	if (ndiff == 0) {
		snprintf(buf, len, "all %zu live ranks last reported %s at step %lld", n,
			 phase_or(m->note), (long long)m->step);
		return DET_RANK_NONE;
	}
	size_t off = 0;
	for (size_t i = 0, shown = 0; i < n && shown < 8; i++) {
		if (i >= best && i < best + best_n)
			continue;
		off += (size_t)snprintf(
		    buf + off, off < len ? len - off : 0, "%srank %u last reported %s at step %lld",
		    shown ? "; " : "", h[i].rank, phase_or(h[i].note), (long long)h[i].step);
		shown++;
		if (off >= len)
			return DET_RANK_NONE;
	}
	snprintf(buf + off, len - off, "%s while %zu other ranks last reported %s at step %lld",
		 ndiff > 8 ? " (and more)" : "", best_n, phase_or(m->note), (long long)m->step);
	if (ndiff != 1 || best_n < 2)
		return DET_RANK_NONE;
	return best == 0 ? h[n - 1].rank : h[0].rank;
}

/* Seconds a pause may last longer because a checkpoint is due now: the
 * run's checkpoints come every I steps (the distance between the last two,
 * or from the run's first step to the first one), or every I seconds
 * without steps, and the stall is at the next one (within 2 steps, or 20 %
 * of I); the pause allowed is 1.5 x the last checkpoint's duration. */
static double checkpoint_allowance(const struct deti_job *j)
{
	if (!j->ckpt_seen || !(j->ckpt_dur_s > 0))
		return 0;
	int64_t prev_step = j->ckpt_prev ? j->ckpt_prev_step : j->first_step;
	if (j->ckpt_step != DET_STEP_NONE && prev_step != DET_STEP_NONE) {
		int64_t every = j->ckpt_step - prev_step, due = j->ckpt_step + every;
		if (every > 0 && j->max_step != DET_STEP_NONE && j->max_step >= due - 2 &&
		    j->max_step <= due + 2)
			return 1.5 * j->ckpt_dur_s;
		return 0;
	}
	int64_t prev_ns = j->ckpt_prev ? j->ckpt_prev_ns : j->first_seen_ns;
	double every = (double)(j->ckpt_first_ns - prev_ns);
	double since = (double)(j->progress_ns - j->ckpt_first_ns);
	return every > 0 && since >= 0.8 * every && since <= 1.2 * every ? 1.5 * j->ckpt_dur_s : 0;
}

static bool eval_hang(struct det_engine *e, struct deti_emit *em, const struct live *l,
		      int64_t now_ns)
{
	struct deti_job *j = em->job;
	const struct det_rule_eff *eff = &j->eff[DET_R_TRAINING_HANG];
	if (j->moves < (uint64_t)eff->p[DET_P_HG_MIN_MOVES] || l->alive == 0)
		return false;
	double st = deti_job_step_time(e, j, now_ns);
	double window = eff->p[DET_P_HG_MIN_S];
	if (!isnan(st))
		window = fmax(window, eff->p[DET_P_HG_STEP_MULT] * st);
	double allow = checkpoint_allowance(j);
	window += allow;
	double idle = (double)(now_ns - j->progress_ns) / 1e9;
	if (idle < window)
		return false;
	struct deti_hit *h = deti_hits(e, j->nranks);
	if (!h)
		return false;
	size_t n = 0;
	for (uint32_t i = 0; i < j->rcap; i++) {
		struct deti_rank *r = j->ranks[i];
		if (!r || deti_rank_retired(j, r))
			continue;
		if ((double)(now_ns - r->last_seen_ns) / 1e9 > idle / 2)
			return false; /* quiet since about the stall: RankDown's to name */
		h[n++] = (struct deti_hit){r->rank, 0, 0, r->last_step, 0, r->last_phase};
	}
	j->hung = true;
	for (uint32_t i = 0; i < j->rcap; i++)
		if (j->ranks[i] && !deti_rank_retired(j, j->ranks[i]))
			j->ranks[i]->state = DET_RANK_HUNG;
	char who[700], summary[DET_SUMMARY_MAX], desc[DET_DESC_MAX];
	int64_t rank = hang_culprits(h, n, who, sizeof(who));
	if (rank != DET_RANK_NONE)
		snprintf(summary, sizeof(summary),
			 "%s: no step progress for %.0f s; rank %lld differs", j->name, idle,
			 (long long)rank);
	else
		snprintf(summary, sizeof(summary),
			 "%s: no step progress for %.0f s with ranks alive", j->name, idle);
	snprintf(desc, sizeof(desc),
		 "step %lld has not moved for %.0f s (window %.0f s = max(%g s, %g x median step "
		 "time %.3g s) + %.0f s for a due checkpoint); %u of %u ranks alive; %s",
		 (long long)j->max_step, idle, window, eff->p[DET_P_HG_MIN_S],
		 eff->p[DET_P_HG_STEP_MULT], st, allow, l->alive, l->seen, who);
	struct deti_cond_in in = {DET_R_TRAINING_HANG, rank, NULL, NULL, idle, window, j->max_step};
	deti_emit(em, &in, summary, desc);
	return true;
}

/* ---- straggler ---------------------------------------------------------------------------- */

static double own_work(const struct deti_steprec *s)
{
	if (!isnan(s->t[DET_PH_STEP])) {
		double w = s->t[DET_PH_STEP];
		if (!isnan(s->t[DET_PH_COLLECTIVE]))
			w -= s->t[DET_PH_COLLECTIVE];
		if (!isnan(s->t[DET_PH_DATALOADER]))
			w -= s->t[DET_PH_DATALOADER];
		return w;
	}
	double w = 0;
	int n = 0;
	for (int p = DET_PH_FORWARD; p <= DET_PH_OPTIMIZER; p++) {
		if (!isnan(s->t[p])) {
			w += s->t[p];
			n++;
		}
	}
	return n ? w : NAN;
}

/* Median and robust threshold of v[0..n) (reordered); NAN if n < min. */
static double robust_thr(double *v, size_t n, size_t min, double k, double rel_abs, double *med)
{
	*med = NAN;
	if (n < min)
		return NAN;
	*med = deti_median(v, n);
	double mad = deti_mad(v, n, *med);
	return *med + fmax(k * MAD_SCALE * mad, rel_abs);
}

/* Phase medians of step s over the judged ranks; stored for the label. */
static void phase_medians(struct det_engine *e, struct deti_job *j, int64_t s, size_t n, size_t min)
{
	const uint32_t *rk = e->scratch_ranks;
	double *v = e->scratch + 3 * e->scratch_n;
	size_t slot = ring_at(s);
	j->phmed_step[slot] = s;
	for (int p = 0; p < DET_PH_COUNT; p++) {
		size_t m = 0;
		for (size_t i = 0; i < n; i++) {
			float t = j->ranks[rk[i]]->steps[slot].t[p];
			if (!isnan(t))
				v[m++] = t;
		}
		j->phmed[slot][p] = m >= min ? (float)deti_median(v, m) : NAN;
	}
}

static void judge_step(struct det_engine *e, struct deti_job *j, int64_t s)
{
	const struct det_rule_eff *eff = &j->eff[DET_R_STRAGGLER];
	size_t min = (size_t)eff->p[DET_P_ST_MIN_RANKS], slot = ring_at(s), n = 0;
	double *work = e->scratch, *dl = e->scratch + e->scratch_n,
	       *tmp = e->scratch + 2 * e->scratch_n;
	for (uint32_t i = 0; i < j->rcap; i++) {
		struct deti_rank *r = j->ranks[i];
		if (!r || !r->steps || r->steps[slot].step != s || deti_rank_retired(j, r) ||
		    r->start_step == DET_STEP_NONE ||
		    s < r->start_step + (int64_t)eff->p[DET_P_ST_SKIP_STEPS])
			continue;
		double w = own_work(&r->steps[slot]);
		if (!isfinite(w))
			continue;
		e->scratch_ranks[n] = i;
		work[n] = w;
		dl[n] = r->steps[slot].t[DET_PH_DATALOADER];
		n++;
	}
	double med_w, med_dl;
	memcpy(tmp, work, n * sizeof(*tmp));
	double thr_w = robust_thr(tmp, n, min, eff->p[DET_P_ST_K], 0, &med_w);
	if (isnan(thr_w))
		return;
	thr_w = fmax(thr_w, med_w * (1 + eff->p[DET_P_ST_REL]));
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (!isnan(dl[i]))
			tmp[m++] = dl[i];
	double thr_dl =
	    robust_thr(tmp, m, min, eff->p[DET_P_ST_K], eff->p[DET_P_ST_REL] * med_w, &med_dl);
	phase_medians(e, j, s, n, min);
	double keep = 1.0 - 1.0 / eff->p[DET_P_ST_WINDOW];
	for (size_t i = 0; i < n; i++) {
		struct deti_rank *r = j->ranks[e->scratch_ranks[i]];
		bool slow = work[i] > thr_w || (!isnan(dl[i]) && !isnan(thr_dl) && dl[i] > thr_dl);
		r->slow_bits = (r->slow_bits << 1) | (slow ? 1u : 0u);
		r->judged++;
		r->slow_w = r->slow_w * (float)keep + (slow ? 1.0f : 0.0f);
		r->work_last = work[i];
		r->work_med_last = med_w;
		for (int p = DET_PH_DATALOADER; p <= DET_PH_CHECKPOINT; p++) {
			r->excess[p] *= (float)keep;
			float t = r->steps[slot].t[p], pm = j->phmed[slot][p];
			if (slow && !isnan(t) && !isnan(pm))
				r->excess[p] += t - pm;
		}
	}
}

static void judge_new_steps(struct det_engine *e, struct deti_job *j, const struct live *l,
			    int64_t now_ns)
{
	int64_t upto = DET_STEP_NONE;
	for (uint32_t i = 0; i < j->rcap; i++) {
		struct deti_rank *r = j->ranks[i];
		if (!r || !r->steps || r->last_step == DET_STEP_NONE || deti_rank_retired(j, r) ||
		    !deti_fresh(r->last_seen_ns, now_ns, l->silence_s) ||
		    r->last_step + DETI_STEPS_RING < j->max_step)
			continue; /* silent or far behind (restarting): does not hold others back */
		if (upto == DET_STEP_NONE || r->last_step - 1 < upto)
			upto = r->last_step - 1;
	}
	if (upto == DET_STEP_NONE || !deti_scratch(e, j->nranks))
		return;
	if (j->judged_step != DET_STEP_NONE && j->judged_step > upto + DETI_STEPS_RING)
		j->judged_step = DET_STEP_NONE; /* the whole job went back (restart) */
	int64_t from = upto - DETI_STEPS_RING + 1;
	if (j->judged_step != DET_STEP_NONE && j->judged_step + 1 > from)
		from = j->judged_step + 1;
	for (int64_t s = from; s <= upto; s++)
		judge_step(e, j, s);
	if (j->judged_step == DET_STEP_NONE || upto > j->judged_step)
		j->judged_step = upto;
}

static unsigned slow_phase(const struct deti_rank *r)
{
	unsigned best = DET_PH_STEP;
	float best_x = 0;
	for (unsigned p = DET_PH_DATALOADER; p <= DET_PH_CHECKPOINT; p++) {
		if (r->excess[p] > best_x) {
			best_x = r->excess[p];
			best = p;
		}
	}
	return best;
}

static uint32_t eval_straggler(struct det_engine *e, struct deti_emit *em, const struct live *l,
			       int64_t now_ns)
{
	struct deti_job *j = em->job;
	const struct det_rule_eff *eff = &j->eff[DET_R_STRAGGLER];
	if (!eff->enabled)
		return 0;
	judge_new_steps(e, j, l, now_ns);
	uint32_t window = (uint32_t)eff->p[DET_P_ST_WINDOW], hits = (uint32_t)eff->p[DET_P_ST_HITS];
	uint64_t mask = window >= 64 ? ~0ull : (1ull << window) - 1;
	uint32_t count = 0;
	for (uint32_t i = 0; i < j->rcap; i++) {
		struct deti_rank *r = j->ranks[i];
		if (!r || deti_rank_retired(j, r))
			continue;
		uint32_t slow = (uint32_t)__builtin_popcountll(r->slow_bits & mask);
		if (!r->straggling && r->judged >= hits && slow >= hits)
			r->straggling = true;
		else if (r->straggling && slow < (hits + 1) / 2)
			r->straggling = false;
		if (!r->straggling)
			continue;
		count++;
		if (r->state == DET_RANK_OK)
			r->state = DET_RANK_STRAGGLER;
		unsigned ph = slow_phase(r);
		const char *phase = ph == DET_PH_STEP ? "compute" : det_vocab_phase_name(ph);
		char summary[DET_SUMMARY_MAX], desc[DET_DESC_MAX];
		snprintf(summary, sizeof(summary), "%s: rank %u is a straggler (%s)", j->name,
			 r->rank, phase);
		snprintf(
		    desc, sizeof(desc),
		    "rank %u was slower than its peers in %u of the last %u judged steps (up to "
		    "step %lld); latest own work %.4g s vs peers' median %.4g s (%+.0f %%); "
		    "slowest phase %s (%+.3g s over the peers' median per slow step)",
		    r->rank, slow, window < r->judged ? window : r->judged,
		    (long long)j->judged_step, r->work_last, r->work_med_last,
		    r->work_med_last > 0 ? 100 * (r->work_last / r->work_med_last - 1) : 0.0, phase,
		    ph == DET_PH_STEP || r->slow_w <= 0 ? 0.0
							: (double)(r->excess[ph] / r->slow_w));
		struct deti_cond_in in = {DET_R_STRAGGLER, r->rank,	     phase,	    NULL,
					  r->work_last,	   r->work_med_last, j->judged_step};
		deti_emit(em, &in, summary, desc);
	}
	return count;
}

/* ---- throughput --------------------------------------------------------------------------- */

enum { TP_NONE = 0, TP_SAMPLES, TP_TOKENS, TP_STEP };

double deti_sum_rate(const struct deti_job *j, bool tokens, int64_t now_ns, uint32_t *nranks)
{
	double silence = deti_rule_p(j, DET_R_RANK_DOWN, DET_P_RD_SILENCE_S), sum = 0;
	*nranks = 0;
	for (uint32_t i = 0; i < j->rcap; i++) {
		const struct deti_rank *r = j->ranks[i];
		if (!r || deti_rank_retired(j, r))
			continue;
		double v = tokens ? r->tokens_ps : r->samples_ps;
		if (!isnan(v) &&
		    deti_fresh(tokens ? r->tokens_ns : r->samples_ns, now_ns, silence)) {
			sum += v;
			(*nranks)++;
		}
	}
	return sum;
}

static double current_throughput(struct det_engine *e, struct deti_job *j, int64_t now_ns,
				 uint8_t *kind)
{
	uint32_t n;
	double v = deti_sum_rate(j, false, now_ns, &n);
	*kind = TP_SAMPLES;
	if (n)
		return v;
	v = deti_sum_rate(j, true, now_ns, &n);
	*kind = TP_TOKENS;
	if (n)
		return v;
	*kind = TP_NONE;
	double silence = deti_rule_p(j, DET_R_RANK_DOWN, DET_P_RD_SILENCE_S);
	if (!j->nranks || !deti_scratch(e, j->nranks))
		return NAN;
	size_t m = 0;
	for (uint32_t i = 0; i < j->rcap; i++) {
		struct deti_rank *r = j->ranks[i];
		if (r && !isnan(r->step_time) && r->step_time > 0 && !deti_rank_retired(j, r) &&
		    deti_fresh(r->last_seen_ns, now_ns, silence))
			e->scratch[m++] = r->step_time;
	}
	double st = deti_median(e->scratch, m);
	if (isnan(st))
		return NAN;
	*kind = TP_STEP;
	return 1.0 / st;
}

static void eval_throughput(struct det_engine *e, struct deti_emit *em, bool suppressed,
			    int64_t now_ns)
{
	struct deti_job *j = em->job;
	const struct det_rule_eff *eff = &j->eff[DET_R_THROUGHPUT_DROP];
	uint8_t kind;
	double cur = current_throughput(e, j, now_ns, &kind);
	if (kind != j->tp_kind) {
		j->ntp = j->tphead = 0;
		j->tp_kind = kind;
	}
	if (kind == TP_NONE || !eff->enabled)
		return;
	double sample_s = eff->p[DET_P_TP_SAMPLE_S];
	size_t want = (size_t)(eff->p[DET_P_TP_BASELINE_S] / sample_s);
	want = want < 3 ? 3 : want > DETI_TP_MAX ? DETI_TP_MAX : want;
	size_t have = j->ntp < want ? j->ntp : want;
	double v[DETI_TP_MAX];
	for (size_t i = 0; i < have; i++)
		v[i] = j->tp[(j->tphead + DETI_TP_MAX - 1 - i) % DETI_TP_MAX];
	double base = deti_median(v, have);
	size_t warm = (size_t)(eff->p[DET_P_TP_WARMUP_S] / sample_s);
	bool low = have >= (warm < 3 ? 3 : warm) && cur < (1 - eff->p[DET_P_TP_DROP]) * base;
	j->throughput_low = low;
	/* The baseline learns only from normal samples: a drop must not become
	 * the new normal while it lasts. */
	if (!low && !suppressed &&
	    (j->tp_last_ns == 0 || now_ns - j->tp_last_ns >= (int64_t)(sample_s * 1e9))) {
		j->tp[j->tphead] = cur;
		j->tphead = (uint16_t)((j->tphead + 1) % DETI_TP_MAX);
		if (j->ntp < DETI_TP_MAX)
			j->ntp++;
		j->tp_last_ns = now_ns;
	}
	if (!low || suppressed)
		return;
	static const char *const unit[] = {"", "samples/s", "tokens/s", "steps/s"};
	static const char *const metric[] = {"", "samples_per_sec", "tokens_per_sec", "step_time"};
	char summary[DET_SUMMARY_MAX], desc[DET_DESC_MAX];
	snprintf(summary, sizeof(summary), "%s: throughput %.0f %% below its baseline", j->name,
		 100 * (1 - cur / base));
	snprintf(desc, sizeof(desc),
		 "job throughput %.6g %s vs the run's baseline %.6g %s (median of the last %zu "
		 "samples); drop limit %.0f %%; step %lld",
		 cur, unit[kind], base, unit[kind], have, 100 * eff->p[DET_P_TP_DROP],
		 (long long)j->max_step);
	struct deti_cond_in in = {
	    DET_R_THROUGHPUT_DROP, DET_RANK_NONE, NULL, metric[kind], cur, base, j->max_step};
	deti_emit(em, &in, summary, desc);
}

void deti_eval_progress(struct det_engine *e, struct deti_emit *em, int64_t now_ns)
{
	struct deti_job *j = em->job;
	struct live l;
	j->hung = j->down = j->throughput_low = false;
	liveness(j, now_ns, &l);
	if (!deti_job_judged(j))
		return;
	if (eval_job_down(em, &l, now_ns))
		return;
	uint32_t down = eval_rank_down(em, &l, now_ns);
	bool hung = eval_hang(e, em, &l, now_ns);
	uint32_t stragglers = eval_straggler(e, em, &l, now_ns);
	eval_throughput(e, em, down || hung || stragglers, now_ns);
}
