/* detectors_hw.c - hardware and invariants: GpuOverheat, GpuEccErrors,
 * ConfigMismatch, CheckpointStale, MfuLow, and the derived MFU.
 *
 * GPU gauges keep their latest value and server receive time; a value older
 * than RankDown.silence_s is not judged. The clock test compares a busy
 * GPU's sm clock with its own baseline (median of its recent busy,
 * unthrottled samples: a throttled sample never enters the baseline) and
 * with the median clock of its busy peers. Error counters: the first value
 * a rank reports (since it started or restarted) is its baseline; an
 * increase (ECC) or a change to a new non-zero value (XID, which DCGM
 * reports as the last error code) raises at once and holds hold_s.
 *
 * Invariants are majority votes over the live attempt's ranks, evaluated
 * from the state (no history needed), so a mismatching rank is reported at
 * the first evaluation after its config_hash or world_size arrives.
 *
 * Threading: called with the engine mutex held.
 */
#include "detect/engine_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/rdb_sort.h"

/* ---- GPU ---------------------------------------------------------------------------------- */

static bool gpu_busy(const struct deti_job *j, const struct deti_gpu *g, int64_t now_ns)
{
	double silence = deti_rule_p(j, DET_R_RANK_DOWN, DET_P_RD_SILENCE_S);
	return !isnan(g->util) && deti_fresh(g->util_ns, now_ns, silence) &&
	       g->util >= deti_rule_p(j, DET_R_GPU_OVERHEAT, DET_P_GO_UTIL_MIN);
}

void deti_gpu_feed(struct deti_job *j, struct deti_gpu *g, unsigned metric, double v, int64_t step,
		   int64_t now_ns)
{
	if (step != DET_STEP_NONE)
		g->step = step;
	if (metric == DET_MET_GPU_TEMP) {
		g->temp = v;
		g->temp_ns = now_ns;
		return;
	}
	if (metric == DET_MET_GPU_UTIL) {
		g->util = v;
		g->util_ns = now_ns;
		return;
	}
	g->clock = v;
	g->clock_ns = now_ns;
	double throttle = deti_rule_p(j, DET_R_GPU_OVERHEAT, DET_P_GO_THROTTLE);
	if (v <= 0 || !gpu_busy(j, g, now_ns) ||
	    (!isnan(g->clk_base) && v < (1 - throttle) * g->clk_base))
		return;
	g->clk[g->chead] = (float)v;
	g->chead = (uint16_t)((g->chead + 1) % DETI_CLK_WIN);
	if (g->nclk < DETI_CLK_WIN)
		g->nclk++;
	g->since++;
	if (g->nclk >= (uint16_t)deti_rule_p(j, DET_R_GPU_OVERHEAT, DET_P_GO_WARMUP) &&
	    (isnan(g->clk_base) || g->since >= 4)) {
		double tmp[DETI_CLK_WIN];
		for (uint16_t i = 0; i < g->nclk; i++)
			tmp[i] = g->clk[i];
		g->clk_base = deti_median(tmp, g->nclk);
		g->since = 0;
	}
}

void deti_ecc_feed(struct deti_rank *r, bool xid, double v, int64_t step, int64_t now_ns,
		   bool warmup)
{
	if (!xid) {
		if (r->ecc_seen && v > r->ecc_max && !warmup) {
			r->ecc_ns = now_ns;
			r->ecc_value = v;
			r->ecc_prev = r->ecc_max;
			r->ecc_step = step;
		}
		if (!r->ecc_seen || v > r->ecc_max)
			r->ecc_max = v;
		r->ecc_seen = true;
		return;
	}
	if (r->xid_seen && v != r->xid_last && v != 0 && !warmup) {
		r->xid_ns = now_ns;
		r->xid_value = v;
		r->xid_step = step;
	}
	r->xid_last = v;
	r->xid_seen = true;
}

static double peers_clock(struct det_engine *e, const struct deti_job *j, int64_t now_ns)
{
	double silence = deti_rule_p(j, DET_R_RANK_DOWN, DET_P_RD_SILENCE_S);
	if (!j->nranks || !deti_scratch(e, j->nranks))
		return NAN;
	size_t n = 0;
	for (uint32_t i = 0; i < j->rcap; i++) {
		const struct deti_rank *r = j->ranks[i];
		if (r && r->gpu && !deti_rank_retired(j, r) && !isnan(r->gpu->clock) &&
		    deti_fresh(r->gpu->clock_ns, now_ns, silence) && gpu_busy(j, r->gpu, now_ns))
			e->scratch[n++] = r->gpu->clock;
	}
	return n >= 3 ? deti_median(e->scratch, n) : NAN;
}

static void emit_rank(struct deti_emit *em, unsigned rule, const struct deti_rank *r,
		      const char *metric, double value, double base, int64_t step,
		      const char *summary_what, const char *desc)
{
	char summary[DET_SUMMARY_MAX];
	snprintf(summary, sizeof(summary), "%s: rank %u %s", em->job->name, r->rank, summary_what);
	struct deti_cond_in in = {rule, r->rank, NULL, metric, value, base, step};
	deti_emit(em, &in, summary, desc);
}

static void eval_gpu(struct det_engine *e, struct deti_emit *em, const struct deti_rank *r,
		     double peers, int64_t now_ns)
{
	const struct deti_job *j = em->job;
	const struct deti_gpu *g = r->gpu;
	const struct det_rule_eff *eff = &j->eff[DET_R_GPU_OVERHEAT];
	double silence = deti_rule_p(j, DET_R_RANK_DOWN, DET_P_RD_SILENCE_S);
	char desc[DET_DESC_MAX];
	(void)e;
	if (!isnan(g->temp) && deti_fresh(g->temp_ns, now_ns, silence) &&
	    g->temp > eff->p[DET_P_GO_TEMP_C]) {
		snprintf(desc, sizeof(desc), "gpu.temp %.1f C above the limit %.1f C (step %lld)",
			 g->temp, eff->p[DET_P_GO_TEMP_C], (long long)g->step);
		emit_rank(em, DET_R_GPU_OVERHEAT, r, "gpu.temp", g->temp, eff->p[DET_P_GO_TEMP_C],
			  g->step, "GPU over temperature", desc);
	}
	double thr = eff->p[DET_P_GO_THROTTLE];
	if (thr <= 0 || isnan(g->clock) || !deti_fresh(g->clock_ns, now_ns, silence) ||
	    !gpu_busy(j, g, now_ns))
		return;
	double base = NAN;
	const char *which = "";
	if (!isnan(g->clk_base) && g->clock < (1 - thr) * g->clk_base) {
		base = g->clk_base;
		which = "its own recent baseline";
	} else if (!isnan(peers) && g->clock < (1 - thr) * peers) {
		base = peers;
		which = "its busy peers' median";
	}
	if (isnan(base))
		return;
	snprintf(desc, sizeof(desc),
		 "gpu.sm_clock %.0f MHz is %.0f %% below %s (%.0f MHz) while gpu.util is %.0f %%; "
		 "gpu.temp %.1f C",
		 g->clock, 100 * (1 - g->clock / base), which, base, g->util, g->temp);
	emit_rank(em, DET_R_GPU_OVERHEAT, r, "gpu.sm_clock", g->clock, base, g->step,
		  "GPU clock throttled", desc);
}

static void eval_ecc(struct deti_emit *em, const struct deti_rank *r, int64_t now_ns)
{
	double hold = deti_rule_p(em->job, DET_R_GPU_ECC_ERRORS, DET_P_EC_HOLD_S);
	char desc[DET_DESC_MAX];
	if (deti_fresh(r->ecc_ns, now_ns, hold)) {
		snprintf(desc, sizeof(desc),
			 "gpu.ecc.uncorrectable rose from %.0f to %.0f at step %lld", r->ecc_prev,
			 r->ecc_value, (long long)r->ecc_step);
		emit_rank(em, DET_R_GPU_ECC_ERRORS, r, "gpu.ecc.uncorrectable", r->ecc_value,
			  r->ecc_prev, r->ecc_step, "uncorrectable ECC errors", desc);
	}
	if (deti_fresh(r->xid_ns, now_ns, hold)) {
		snprintf(desc, sizeof(desc), "gpu.xid reported %.0f at step %lld", r->xid_value,
			 (long long)r->xid_step);
		emit_rank(em, DET_R_GPU_ECC_ERRORS, r, "gpu.xid", r->xid_value, NAN, r->xid_step,
			  "GPU XID error", desc);
	}
}

void deti_eval_hardware(struct det_engine *e, struct deti_emit *em, int64_t now_ns)
{
	struct deti_job *j = em->job;
	bool hot = j->eff[DET_R_GPU_OVERHEAT].enabled, ecc = j->eff[DET_R_GPU_ECC_ERRORS].enabled;
	double peers = hot ? peers_clock(e, j, now_ns) : NAN;
	for (uint32_t i = 0; i < j->rcap; i++) {
		const struct deti_rank *r = j->ranks[i];
		if (!r || deti_rank_retired(j, r))
			continue;
		if (hot && r->gpu)
			eval_gpu(e, em, r, peers, now_ns);
		if (ecc)
			eval_ecc(em, r, now_ns);
	}
}

/* ---- invariants ---------------------------------------------------------------------------- */

static int cmp_step(const void *a, const void *b)
{
	const struct deti_hit *x = a, *y = b;
	return x->step < y->step ? -1 : x->step > y->step;
}

/* Sorts h by step (the voted value) and returns the most common value and
 * its count. */
static int64_t majority(struct deti_hit *h, size_t n, size_t *count)
{
	rdb_sort(h, n, sizeof(*h), cmp_step);
	int64_t best = n ? h[0].step : 0;
	*count = 0;
	for (size_t i = 0; i < n;) {
		size_t k = i;
		while (k < n && h[k].step == h[i].step)
			k++;
		if (k - i > *count) {
			*count = k - i;
			best = h[i].step;
		}
		i = k;
	}
	return best;
}

/* A vote over the ranks' config_hash (hash true) or world_size; the metadata's
 * world_size, when declared, is the reference instead of the majority. */
static void eval_vote(struct det_engine *e, struct deti_emit *em, bool hash)
{
	struct deti_job *j = em->job;
	struct deti_hit *h = deti_hits(e, j->nranks ? j->nranks : 1);
	if (!h)
		return;
	size_t n = 0, count;
	for (uint32_t i = 0; i < j->rcap; i++) {
		const struct deti_rank *r = j->ranks[i];
		if (!r || deti_rank_retired(j, r) || !(hash ? r->has_config : r->has_ws))
			continue;
		double v = hash ? NAN : r->world_size;
		int64_t key = hash ? (int64_t)r->config_hash : (int64_t)llround(r->world_size);
		if (hash)
			memcpy(&v, &r->config_hash, sizeof(v));
		h[n++] = (struct deti_hit){r->rank, v, 0, key, 0, NULL};
	}
	if (n == 0)
		return;
	const char *metric = hash ? "config_hash" : "world_size";
	int64_t ref = majority(h, n, &count);
	bool declared = !hash && j->has_meta && j->meta.world_size > 0;
	if (declared) {
		ref = j->meta.world_size;
	} else if (count * 2 <= n) {
		if (count == n)
			return;
		char summary[DET_SUMMARY_MAX], desc[DET_DESC_MAX];
		snprintf(summary, sizeof(summary), "%s: ranks disagree on %s", j->name, metric);
		snprintf(desc, sizeof(desc),
			 "no majority: the most common %s is shared by %zu of %zu ranks", metric,
			 count, n);
		struct deti_cond_in in = {
		    DET_R_CONFIG_MISMATCH, DET_RANK_NONE, NULL,		metric,
		    (double)count,	   (double)n,	  DET_STEP_NONE};
		deti_emit(em, &in, summary, desc);
		return;
	}
	double ref_v = NAN;
	for (size_t i = 0; i < n; i++)
		if (h[i].step == ref)
			ref_v = h[i].value;
	if (declared)
		ref_v = (double)ref;
	for (size_t i = 0; i < n; i++) {
		if (h[i].step == ref)
			continue;
		char summary[DET_SUMMARY_MAX], desc[DET_DESC_MAX];
		snprintf(summary, sizeof(summary), "%s: rank %u has a different %s", j->name,
			 h[i].rank, metric);
		snprintf(desc, sizeof(desc), "rank %u reports %s %.17g; %s %.17g", h[i].rank,
			 metric, h[i].value,
			 declared ? "the metadata declares" : "the majority of ranks report",
			 ref_v);
		struct deti_cond_in in = {
		    DET_R_CONFIG_MISMATCH, h[i].rank, NULL, metric, h[i].value, ref_v,
		    DET_STEP_NONE};
		deti_emit(em, &in, summary, desc);
	}
}

static void eval_batch(struct deti_emit *em)
{
	const struct deti_job *j = em->job;
	const struct det_job_meta *m = &j->meta;
	if (!j->has_meta || !m->world_size || !m->micro_batch || !m->grad_accum || !m->global_batch)
		return;
	uint64_t p1, prod;
	bool overflow = __builtin_mul_overflow((uint64_t)m->world_size, m->micro_batch, &p1) ||
			__builtin_mul_overflow(p1, m->grad_accum, &prod);
	if (!overflow && prod == m->global_batch)
		return;
	if (overflow)
		prod = UINT64_MAX;
	char summary[DET_SUMMARY_MAX], desc[DET_DESC_MAX];
	snprintf(summary, sizeof(summary), "%s: batch arithmetic does not hold", j->name);
	snprintf(desc, sizeof(desc),
		 "metadata: world_size %u x micro_batch %llu x grad_accum %llu = %.17g, but "
		 "global_batch is %llu",
		 m->world_size, (unsigned long long)m->micro_batch,
		 (unsigned long long)m->grad_accum, (double)prod,
		 (unsigned long long)m->global_batch);
	struct deti_cond_in in = {DET_R_CONFIG_MISMATCH, DET_RANK_NONE, NULL,
				  "global_batch",	 (double)prod,	(double)m->global_batch,
				  DET_STEP_NONE};
	deti_emit(em, &in, summary, desc);
}

static void eval_missing(struct deti_emit *em, int64_t now_ns)
{
	const struct deti_job *j = em->job;
	uint32_t ws = j->has_meta ? j->meta.world_size : 0;
	double grace = deti_rule_p(j, DET_R_CONFIG_MISMATCH, DET_P_CM_GRACE_S);
	if (!ws || !deti_job_judged(j) || deti_fresh(j->first_seen_ns, now_ns, grace))
		return;
	uint32_t present = 0;
	char missing[200] = "";
	size_t off = 0, shown = 0;
	for (uint32_t i = 0; i < ws; i++) {
		const struct deti_rank *r = deti_rank_at(j, i);
		if (r && !deti_rank_retired(j, r)) {
			present++;
		} else if (shown < 16 && off < sizeof(missing)) {
			off += (size_t)snprintf(missing + off, sizeof(missing) - off, "%s%u",
						shown ? "," : "", i);
			shown++;
		}
	}
	if (present >= ws)
		return;
	char summary[DET_SUMMARY_MAX], desc[DET_DESC_MAX];
	snprintf(summary, sizeof(summary), "%s: %u of %u declared ranks report", j->name, present,
		 ws);
	snprintf(desc, sizeof(desc),
		 "the metadata declares world_size %u but only %u ranks sent data within %.0f s of "
		 "the job's start; missing: %s%s",
		 ws, present, grace, missing, ws - present > shown ? ",..." : "");
	struct deti_cond_in in = {DET_R_CONFIG_MISMATCH, DET_RANK_NONE, NULL,	      "ranks",
				  (double)present,	 (double)ws,	DET_STEP_NONE};
	deti_emit(em, &in, summary, desc);
}

static void eval_checkpoint(struct deti_emit *em, int64_t now_ns)
{
	struct deti_job *j = em->job;
	const struct det_rule_eff *eff = &j->eff[DET_R_CHECKPOINT_STALE];
	if (!deti_job_judged(j) || j->down)
		return;
	int64_t since;
	if (j->ckpt_seen)
		since = j->ckpt_ns;
	else if (eff->p[DET_P_CK_ALWAYS] >= 1)
		since = j->first_seen_ns;
	else
		return;
	double age = (double)(now_ns - since) / 1e9;
	if (age <= eff->p[DET_P_CK_MAX_AGE_S])
		return;
	char summary[DET_SUMMARY_MAX], desc[DET_DESC_MAX];
	snprintf(summary, sizeof(summary), "%s: last checkpoint %.0f s ago", j->name, age);
	if (j->ckpt_seen)
		snprintf(desc, sizeof(desc),
			 "the last checkpoint.duration point arrived %.0f s ago (at step %lld); "
			 "limit %.0f s",
			 age, (long long)j->ckpt_step, eff->p[DET_P_CK_MAX_AGE_S]);
	else
		snprintf(desc, sizeof(desc),
			 "no checkpoint.duration point in %.0f s since the job's first data; limit "
			 "%.0f s",
			 age, eff->p[DET_P_CK_MAX_AGE_S]);
	struct deti_cond_in in = {
	    DET_R_CHECKPOINT_STALE,	DET_RANK_NONE, NULL, "checkpoint.age", age,
	    eff->p[DET_P_CK_MAX_AGE_S], j->max_step};
	deti_emit(em, &in, summary, desc);
}

double deti_job_mfu(const struct deti_job *j, int64_t now_ns)
{
	const struct det_job_meta *m = &j->meta;
	if (!j->has_meta || !(m->gpu_peak_flops > 0))
		return NAN;
	double fpt = m->flops_per_token;
	if (!(fpt > 0))
		fpt = m->params > 0 ? 6 * m->params : NAN;
	if (isnan(fpt))
		return NAN;
	uint32_t n;
	double tokens = deti_sum_rate(j, true, now_ns, &n);
	if (n == 0)
		return NAN;
	double ws = m->world_size ? (double)m->world_size : (double)j->nranks;
	return ws > 0 ? tokens * fpt / (ws * m->gpu_peak_flops) : NAN;
}

static void eval_mfu(struct deti_emit *em, int64_t now_ns)
{
	struct deti_job *j = em->job;
	const struct det_rule_eff *eff = &j->eff[DET_R_MFU_LOW];
	j->mfu = deti_job_mfu(j, now_ns);
	if (isnan(j->mfu) || !deti_job_judged(j) || j->down || j->hung ||
	    deti_fresh(j->first_seen_ns, now_ns, eff->p[DET_P_MF_WARMUP_S]) ||
	    j->mfu >= eff->p[DET_P_MF_FLOOR])
		return;
	char summary[DET_SUMMARY_MAX], desc[DET_DESC_MAX];
	snprintf(summary, sizeof(summary), "%s: MFU %.1f %% below the floor", j->name,
		 100 * j->mfu);
	snprintf(desc, sizeof(desc),
		 "MFU %.3f (tokens/s summed over live ranks x FLOPs per token / (world size x GPU "
		 "peak %.4g FLOP/s)) is below the floor %.3f",
		 j->mfu, j->meta.gpu_peak_flops, eff->p[DET_P_MF_FLOOR]);
	struct deti_cond_in in = {DET_R_MFU_LOW, DET_RANK_NONE,		 NULL,	     "mfu",
				  j->mfu,	 eff->p[DET_P_MF_FLOOR], j->max_step};
	deti_emit(em, &in, summary, desc);
}

void deti_eval_invariants(struct det_engine *e, struct deti_emit *em, int64_t now_ns)
{
	if (em->job->eff[DET_R_CONFIG_MISMATCH].enabled) {
		eval_vote(e, em, true);
		eval_vote(e, em, false);
		eval_batch(em);
		eval_missing(em, now_ns);
	}
	eval_checkpoint(em, now_ns);
	eval_mfu(em, now_ns);
}
