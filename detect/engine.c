/* engine.c - the detection engine: per-job state, its memory bound, feeding
 * acknowledged data into it, and the evaluation loop over the detectors.
 *
 * State: a hash map (job name hash -> chain of jobs) plus an LRU list of
 * jobs, most recently fed first. A job holds an array of ranks indexed by
 * rank number (grown to the highest rank seen, at most max_ranks_per_job),
 * the job-level pseudo-rank apart, and the rules in force for it (resolved
 * from the engine's rule set, re-resolved when the set changes). A rank's
 * parts for watched metrics (loss/grad_norm windows, step records, GPU,
 * loss scale) are allocated when it first sends such a metric, so a rank
 * that only sends heartbeats costs a few hundred bytes.
 *
 * Feeding: det_engine_feed costs a job lookup (cached for consecutive calls
 * of one job), one hash of the metric name (det_rules_metric) and O(n)
 * constant work per point: liveness and step progress for every point, and
 * for watched metrics an O(1) update (spike baselines are recomputed every
 * few points, not per point). Cross-rank work (medians over ranks, the
 * straggler comparison, majority votes) happens in det_engine_eval.
 *
 * Memory: job.bytes counts every allocation of a job; engine.bytes their
 * sum. An allocation that would pass max_bytes evicts least recently fed
 * jobs first (never the job being fed); if that is not enough the
 * allocation is skipped and the data only keeps the rank alive.
 *
 * Health, derived series and counters are in engine_health.c.
 *
 * Threading: one mutex per engine, held for each whole public call.
 * Failure: out of memory never fails a feed; the job/rank is skipped and
 * counted. No function blocks on I/O.
 */
#include "detect/engine_int.h"

#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_log.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void det_limits_default(struct det_limits *l)
{
	l->max_jobs = 1024;
	l->max_ranks_per_job = 16384;
	l->max_bytes = 512ull << 20;
	l->job_forget_s = 2 * 86400;
	l->derived_interval_s = 10;
}

/* ---- small helpers shared with the detectors ------------------------------------------ */

static void swapd(double *a, double *b)
{
	double t = *a;
	*a = *b;
	*b = t;
}

/* Quickselect (Hoare partition, middle pivot): O(n) expected. */
static double select_kth(double *v, size_t n, size_t k)
{
	size_t lo = 0, hi = n - 1;
	while (lo < hi) {
		double pivot = v[lo + (hi - lo) / 2];
		size_t i = lo, j = hi;
		while (i <= j) {
			while (v[i] < pivot)
				i++;
			while (v[j] > pivot)
				j--;
			if (i <= j) {
				swapd(&v[i], &v[j]);
				i++;
				if (j == 0)
					break;
				j--;
			}
		}
		if (k <= j)
			hi = j;
		else if (k >= i)
			lo = i;
		else
			break;
	}
	return v[k];
}

double deti_median(double *v, size_t n)
{
	if (n == 0)
		return NAN;
	double hi = select_kth(v, n, n / 2);
	if (n % 2)
		return hi;
	double lo = v[0];
	for (size_t i = 1; i < n / 2; i++)
		if (v[i] > lo)
			lo = v[i];
	return (lo + hi) / 2;
}

double deti_mad(double *v, size_t n, double med)
{
	for (size_t i = 0; i < n; i++)
		v[i] = fabs(v[i] - med);
	return deti_median(v, n);
}

bool deti_fresh(int64_t then_ns, int64_t now_ns, double within_s)
{
	return then_ns != 0 && (double)(now_ns - then_ns) < within_s * 1e9;
}

double deti_rule_p(const struct deti_job *j, unsigned rule, unsigned param)
{
	return j->eff[rule].p[param];
}

struct deti_rank *deti_rank_at(const struct deti_job *j, uint32_t i)
{
	return i < j->rcap ? j->ranks[i] : NULL;
}

bool deti_rank_retired(const struct deti_job *j, const struct deti_rank *r)
{
	return r->attempt_known && r->attempt < j->max_attempt;
}

bool deti_job_judged(const struct deti_job *j)
{
	return !(j->has_meta &&
		 (j->meta.status == DET_STATUS_FINISHED || j->meta.status == DET_STATUS_FAILED));
}

bool deti_scratch(struct det_engine *e, size_t n)
{
	if (n <= e->scratch_n)
		return true;
	size_t cap = e->scratch_n ? e->scratch_n : 64;
	while (cap < n)
		cap *= 2;
	double *d = malloc(cap * 4 * sizeof(double));
	uint32_t *r = malloc(cap * sizeof(uint32_t));
	if (!d || !r) {
		free(d);
		free(r);
		return false;
	}
	free(e->scratch);
	free(e->scratch_ranks);
	e->scratch = d;
	e->scratch_ranks = r;
	e->scratch_n = cap;
	return true;
}

struct deti_hit *deti_hits(struct det_engine *e, size_t n)
{
	if (n <= e->hits_n)
		return e->hits;
	size_t cap = e->hits_n ? e->hits_n : 64;
	while (cap < n)
		cap *= 2;
	struct deti_hit *h = realloc(e->hits, cap * sizeof(*h));
	if (!h)
		return NULL;
	e->hits = h;
	e->hits_n = cap;
	return h;
}

void deti_emit(struct deti_emit *em, const struct deti_cond_in *in, const char *summary,
	       const char *desc)
{
	const struct det_rule_eff *eff = &em->job->eff[in->rule];
	if (em->rc || !eff->enabled)
		return;
	struct det_cond c;
	memset(&c, 0, sizeof(c));
	snprintf(c.alertname, sizeof(c.alertname), "%s", det_rule_spec(in->rule)->alertname);
	snprintf(c.job, sizeof(c.job), "%s", em->job->name);
	c.rank = in->rank;
	snprintf(c.phase, sizeof(c.phase), "%s", in->phase ? in->phase : "");
	snprintf(c.metric, sizeof(c.metric), "%s", in->metric ? in->metric : "");
	c.severity = eff->severity;
	c.for_s = eff->for_s;
	snprintf(c.summary, sizeof(c.summary), "%s", summary);
	snprintf(c.description, sizeof(c.description), "%s", desc);
	c.value = in->value;
	c.baseline = in->baseline;
	c.step = in->step;
	c.nwebhooks = eff->nwebhooks;
	for (uint32_t i = 0; i < eff->nwebhooks && i < DET_WEBHOOKS_MAX; i++)
		snprintf(c.webhooks[i], sizeof(c.webhooks[i]), "%s", eff->webhooks[i]);
	em->count++;
	em->rc = em->fn(em->arg, &c);
}

/* ---- memory accounting ---------------------------------------------------------------- */

static void lru_unlink(struct det_engine *e, struct deti_job *j)
{
	if (j->lru_prev)
		j->lru_prev->lru_next = j->lru_next;
	else
		e->lru_head = j->lru_next;
	if (j->lru_next)
		j->lru_next->lru_prev = j->lru_prev;
	else
		e->lru_tail = j->lru_prev;
	j->lru_prev = j->lru_next = NULL;
}

static void lru_push_front(struct det_engine *e, struct deti_job *j)
{
	j->lru_next = e->lru_head;
	j->lru_prev = NULL;
	if (e->lru_head)
		e->lru_head->lru_prev = j;
	e->lru_head = j;
	if (!e->lru_tail)
		e->lru_tail = j;
}

static void rank_free(struct det_engine *e, struct deti_job *j, struct deti_rank *r)
{
	size_t b = sizeof(*r);
	for (int i = 0; i < DETI_NUM_COUNT; i++) {
		b += r->num[i] ? sizeof(*r->num[i]) : 0;
		free(r->num[i]);
	}
	b += r->steps ? DETI_STEPS_RING * sizeof(*r->steps) : 0;
	b += r->gpu ? sizeof(*r->gpu) : 0;
	b += r->ls ? sizeof(*r->ls) : 0;
	bool real = r != j->jrank;
	free(r->steps);
	free(r->gpu);
	free(r->ls);
	free(r);
	j->bytes -= b;
	e->bytes -= b;
	e->nranks -= real;
}

static void job_free(struct det_engine *e, struct deti_job *j)
{
	for (uint32_t i = 0; i < j->rcap; i++)
		if (j->ranks[i])
			rank_free(e, j, j->ranks[i]);
	if (j->jrank)
		rank_free(e, j, j->jrank);
	e->bytes -= j->bytes;
	free(j->ranks);
	free(j);
}

/* Removes j from the map and the LRU list and frees it. */
static void job_drop(struct det_engine *e, struct deti_job *j)
{
	struct deti_job *head = rdb_map_get(&e->jobs, j->hash);
	if (head == j) {
		if (j->hnext)
			rdb_map_put(&e->jobs, j->hash, j->hnext); /* replaces: cannot fail */
		else
			rdb_map_del(&e->jobs, j->hash);
	} else {
		for (struct deti_job *p = head; p; p = p->hnext) {
			if (p->hnext == j) {
				p->hnext = j->hnext;
				break;
			}
		}
	}
	lru_unlink(e, j);
	if (e->last_job == j)
		e->last_job = NULL;
	e->njobs--;
	job_free(e, j);
}

/* Makes room for size more bytes by evicting least recently fed jobs other
 * than keep. false if that is not possible. */
static bool room_for(struct det_engine *e, struct deti_job *keep, size_t size)
{
	while (e->bytes + size > e->lim.max_bytes) {
		struct deti_job *v = e->lru_tail;
		if (!v || v == keep)
			return false;
		static struct rdb_log_ratelimit rl;
		rdb_log_limited(&rl, 10, RDB_LOG_WARN, "detect",
				"job %s: detection state evicted, least recently fed (memory bound "
				"%llu bytes reached); its alerts resolve",
				v->name, (unsigned long long)e->lim.max_bytes);
		job_drop(e, v);
		e->st.jobs_evicted++;
	}
	return true;
}

static void *job_calloc(struct det_engine *e, struct deti_job *j, size_t size)
{
	if (!room_for(e, j, size))
		return NULL;
	void *p = calloc(1, size);
	if (p) {
		j->bytes += size;
		e->bytes += size;
	}
	return p;
}

/* ---- jobs and ranks --------------------------------------------------------------------- */

static uint64_t job_hash(const char *job, size_t len)
{
	uint64_t h = rdb_hash64(job, len, 0x6a6f62ull);
	return h ? h : 1;
}

struct deti_job *deti_job_find(struct det_engine *e, const char *job, size_t len)
{
	struct deti_job *c = e->last_job;
	if (c && c->name_len == len && memcmp(c->name, job, len) == 0)
		return c;
	for (c = rdb_map_get(&e->jobs, job_hash(job, len)); c; c = c->hnext)
		if (c->name_len == len && memcmp(c->name, job, len) == 0)
			return c;
	return NULL;
}

void deti_job_rules(struct det_engine *e, struct deti_job *j)
{
	if (j->eff_gen == e->rules_gen)
		return;
	det_rules_resolve(e->rules, j->name, j->name_len, j->eff);
	j->eff_gen = e->rules_gen;
}

static struct deti_job *job_get(struct det_engine *e, const char *job, size_t len, int64_t now_ns)
{
	struct deti_job *j = deti_job_find(e, job, len);
	if (j)
		return j;
	if (len == 0 || len >= DET_JOB_MAX)
		return NULL;
	while (e->njobs >= e->lim.max_jobs && e->lru_tail) {
		static struct rdb_log_ratelimit rl;
		rdb_log_limited(&rl, 10, RDB_LOG_WARN, "detect",
				"job %s: detection state evicted, least recently fed (max %u jobs "
				"reached); its alerts resolve",
				e->lru_tail->name, e->lim.max_jobs);
		job_drop(e, e->lru_tail);
		e->st.jobs_evicted++;
	}
	if (!room_for(e, NULL, sizeof(*j)))
		return NULL;
	j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	j->hash = job_hash(job, len);
	j->hnext = rdb_map_get(&e->jobs, j->hash);
	if (rdb_map_put(&e->jobs, j->hash, j) != 0) {
		free(j);
		return NULL;
	}
	memcpy(j->name, job, len);
	j->name_len = len;
	j->bytes = sizeof(*j);
	e->bytes += sizeof(*j);
	j->max_step = DET_STEP_NONE;
	j->first_step = DET_STEP_NONE;
	j->judged_step = DET_STEP_NONE;
	j->last_seen_ns = now_ns ? now_ns : e->last_now_ns; /* a metadata-only job ages out */
	for (int i = 0; i < DETI_STEPS_RING; i++)
		j->phmed_step[i] = DET_STEP_NONE;
	j->mfu = NAN;
	j->median_step_s = NAN;
	lru_push_front(e, j);
	e->njobs++;
	deti_job_rules(e, j);
	return j;
}

static void rank_init(struct deti_rank *r, uint32_t rank, int64_t now_ns)
{
	r->rank = rank;
	r->first_seen_ns = now_ns;
	r->last_step = DET_STEP_NONE;
	r->last_ts_ns = INT64_MIN;
	r->start_step = DET_STEP_NONE;
	r->last_phase_step = DET_STEP_NONE;
	r->step_time = NAN;
	r->samples_ps = NAN;
	r->tokens_ps = NAN;
	r->work_last = NAN;
	r->work_med_last = NAN;
}

static struct deti_rank *rank_get(struct det_engine *e, struct deti_job *j, uint32_t rank,
				  int64_t now_ns)
{
	if (rank == DET_JOB_RANK) {
		if (!j->jrank) {
			j->jrank = job_calloc(e, j, sizeof(*j->jrank));
			if (j->jrank)
				rank_init(j->jrank, rank, now_ns);
		}
		return j->jrank;
	}
	if (rank >= e->lim.max_ranks_per_job) {
		e->st.ranks_refused++;
		return NULL;
	}
	if (rank >= j->rcap) {
		uint32_t cap = j->rcap ? j->rcap : 8;
		while (cap <= rank)
			cap *= 2;
		if (cap > e->lim.max_ranks_per_job)
			cap = e->lim.max_ranks_per_job;
		size_t add = (size_t)(cap - j->rcap) * sizeof(*j->ranks);
		if (!room_for(e, j, add))
			return NULL;
		struct deti_rank **v = realloc(j->ranks, cap * sizeof(*v));
		if (!v)
			return NULL;
		memset(v + j->rcap, 0, add);
		j->ranks = v;
		j->rcap = cap;
		j->bytes += add;
		e->bytes += add;
	}
	struct deti_rank *r = j->ranks[rank];
	if (!r) {
		r = job_calloc(e, j, sizeof(*r));
		if (!r)
			return NULL;
		rank_init(r, rank, now_ns);
		j->ranks[rank] = r;
		j->nranks++;
		e->nranks++;
	}
	return r;
}

static void num_init(struct deti_num *n)
{
	memset(n, 0, sizeof(*n));
	n->prev = NAN;
	n->last_step = DET_STEP_NONE;
}

static void steps_init(struct deti_steprec *s)
{
	for (int i = 0; i < DETI_STEPS_RING; i++) {
		s[i].step = DET_STEP_NONE;
		for (int p = 0; p < DET_PH_COUNT; p++)
			s[i].t[p] = NAN;
	}
}

static void ls_init(struct deti_lscale *ls)
{
	memset(ls, 0, sizeof(*ls));
	ls->last = NAN;
	ls->last_step = DET_STEP_NONE;
	ls->skip_last = NAN;
	ls->skip_last_step = DET_STEP_NONE;
}

static void gpu_init(struct deti_gpu *g)
{
	memset(g, 0, sizeof(*g));
	g->temp = g->util = g->clock = NAN;
	g->clk_base = NAN;
	g->step = DET_STEP_NONE;
}

/* A new attempt (or a step that went back): the rank's progress and
 * numeric baselines start over, so nothing judged on the old run leaks into
 * the new one. Hardware baselines stay except the error counters (the rank
 * may now run on another GPU). */
static void rank_restart(struct deti_job *j, struct deti_rank *r, int64_t now_ns)
{
	r->last_step = DET_STEP_NONE;
	r->last_ts_ns = INT64_MIN;
	r->start_step = DET_STEP_NONE;
	r->nmv = r->mvhead = 0;
	r->last_phase[0] = 0;
	r->last_phase_step = DET_STEP_NONE;
	for (int i = 0; i < DETI_NUM_COUNT; i++)
		if (r->num[i])
			num_init(r->num[i]);
	if (r->steps)
		steps_init(r->steps);
	if (r->ls)
		ls_init(r->ls);
	r->step_time = NAN;
	r->slow_bits = 0;
	r->judged = 0;
	r->straggling = false;
	memset(r->excess, 0, sizeof(r->excess));
	r->slow_w = 0;
	r->ecc_seen = r->xid_seen = false;
	r->ecc_ns = r->xid_ns = 0;
	r->step_moved_ns = now_ns;
	if (r != j->jrank)
		j->progress_ns = now_ns;
}

static void rank_advance(struct deti_job *j, struct deti_rank *r, int64_t step, int64_t now_ns)
{
	r->last_step = step;
	r->step_moved_ns = now_ns;
	if (r->start_step == DET_STEP_NONE)
		r->start_step = step;
	r->mv_step[r->mvhead] = step;
	r->mv_ns[r->mvhead] = now_ns;
	r->mvhead = (uint8_t)((r->mvhead + 1) % DETI_MOVES);
	if (r->nmv < DETI_MOVES)
		r->nmv++;
	if (r == j->jrank)
		return;
	j->progress_ns = now_ns;
	if (j->first_step == DET_STEP_NONE)
		j->first_step = step;
	if (j->max_step != DET_STEP_NONE && step <= j->max_step)
		return;
	/* Several advances at one receive time (a client that batches steps) are
	 * one interval, not many zero ones. */
	if (j->moves > 0 && now_ns > j->last_move_ns) {
		j->gaps[j->ghead] = (float)((double)(now_ns - j->last_move_ns) / 1e9);
		j->ghead = (uint16_t)((j->ghead + 1) % DETI_GAPS);
		if (j->ngaps < DETI_GAPS)
			j->ngaps++;
	}
	j->max_step = step;
	if (now_ns > j->last_move_ns || j->moves == 0)
		j->moves++;
	j->last_move_ns = now_ns;
}

/* Liveness, attempt and step progress of one point. false: the point is
 * from an earlier attempt and carries nothing for the detectors. */
static bool rank_point(struct deti_job *j, struct deti_rank *r, int64_t ts_ns, int64_t step,
		       uint32_t attempt, int64_t now_ns)
{
	if (!r->attempt_known) {
		r->attempt = attempt;
		r->attempt_known = true;
	} else if (attempt > r->attempt) {
		rank_restart(j, r, now_ns);
		r->attempt = attempt;
	} else if (attempt < r->attempt) {
		return false;
	}
	if (attempt > j->max_attempt)
		j->max_attempt = attempt;
	if (step == DET_STEP_NONE)
		return true;
	/* A step more than one behind with a newer client time is a restart
	 * from a checkpoint; a late point has an older time. */
	if (r->last_step != DET_STEP_NONE && step < r->last_step - 1 && ts_ns > r->last_ts_ns)
		rank_restart(j, r, now_ns);
	if (r->last_step == DET_STEP_NONE || step > r->last_step)
		rank_advance(j, r, step, now_ns);
	if (ts_ns > r->last_ts_ns)
		r->last_ts_ns = ts_ns;
	return true;
}

static void last_phase_set(struct deti_rank *r, const char *name, size_t len, int64_t step,
			   int64_t key)
{
	if (step == DET_STEP_NONE)
		return;
	if (r->last_phase_step != DET_STEP_NONE &&
	    (step < r->last_phase_step || (step == r->last_phase_step && key < r->last_phase_key)))
		return;
	if (len >= sizeof(r->last_phase))
		len = sizeof(r->last_phase) - 1;
	memcpy(r->last_phase, name, len);
	r->last_phase[len] = 0;
	r->last_phase_step = step;
	r->last_phase_key = key;
}

/* ---- feeding ------------------------------------------------------------------------------ */

static struct deti_num *rank_num(struct det_engine *e, struct deti_job *j, struct deti_rank *r,
				 int which)
{
	if (!r->num[which]) {
		r->num[which] = job_calloc(e, j, sizeof(struct deti_num));
		if (r->num[which])
			num_init(r->num[which]);
	}
	return r->num[which];
}

static bool rank_steps(struct det_engine *e, struct deti_job *j, struct deti_rank *r)
{
	if (!r->steps) {
		r->steps = job_calloc(e, j, DETI_STEPS_RING * sizeof(*r->steps));
		if (r->steps)
			steps_init(r->steps);
	}
	return r->steps != NULL;
}

static void feed_phase(struct det_engine *e, struct deti_job *j, struct deti_rank *r,
		       unsigned phase, double v, int64_t step)
{
	if (!isfinite(v) || v < 0 || step == DET_STEP_NONE)
		return;
	if (phase == DET_PH_STEP)
		r->step_time = v;
	else
		last_phase_set(r, det_vocab_phase_name(phase), strlen(det_vocab_phase_name(phase)),
			       step, phase);
	if (r != j->jrank && rank_steps(e, j, r))
		deti_steprec_set(r, step, phase, v, false);
}

/* Every rank may report its part of one checkpoint: points with the same
 * step (or, without steps, close in time) are one checkpoint. The interval
 * and duration of checkpoints let the hang detector expect the pause. */
static void feed_checkpoint(struct deti_job *j, double v, int64_t step, int64_t now_ns)
{
	double dur = isfinite(v) && v > 0 ? v : 0;
	bool same = j->ckpt_seen && (step != DET_STEP_NONE ? step == j->ckpt_step
							   : (double)(now_ns - j->ckpt_ns) <
								 (2 * j->ckpt_dur_s + 10) * 1e9);
	if (same) {
		j->ckpt_dur_s = fmax(j->ckpt_dur_s, dur);
	} else {
		if (j->ckpt_seen) {
			j->ckpt_prev = true;
			j->ckpt_prev_step = j->ckpt_step;
			j->ckpt_prev_ns = j->ckpt_first_ns;
		}
		j->ckpt_first_ns = now_ns;
		j->ckpt_dur_s = dur;
	}
	j->ckpt_seen = true;
	j->ckpt_ns = now_ns;
	j->ckpt_step = step;
}

static void feed_value(struct det_engine *e, struct deti_job *j, struct deti_rank *r,
		       struct det_metric_id id, uint64_t bits, int64_t step, int64_t ts_ns,
		       int64_t now_ns, bool warmup)
{
	double v;
	memcpy(&v, &bits, sizeof(v));
	switch (id.metric) {
	case DET_MET_LOSS:
	case DET_MET_GRAD_NORM: {
		int which = id.metric == DET_MET_LOSS ? DETI_NUM_LOSS : DETI_NUM_GRAD;
		struct deti_num *n = rank_num(e, j, r, which);
		if (n)
			deti_num_feed(j, n, which, v, step, ts_ns, now_ns, warmup);
		break;
	}
	case DET_MET_LOSS_SCALE:
	case DET_MET_SKIPPED_STEPS:
		if (!r->ls && (r->ls = job_calloc(e, j, sizeof(*r->ls))) != NULL)
			ls_init(r->ls);
		if (r->ls && isfinite(v))
			deti_ls_feed(j, r->ls, id.metric == DET_MET_SKIPPED_STEPS, v, step);
		break;
	case DET_MET_PHASE:
		feed_phase(e, j, r, id.phase, v, step);
		break;
	case DET_MET_SAMPLES_PER_SEC:
	case DET_MET_TOKENS_PER_SEC:
		if (!isfinite(v) || v < 0)
			break;
		if (id.metric == DET_MET_SAMPLES_PER_SEC) {
			r->samples_ps = v;
			r->samples_ns = now_ns;
		} else {
			r->tokens_ps = v;
			r->tokens_ns = now_ns;
		}
		break;
	case DET_MET_GPU_TEMP:
	case DET_MET_GPU_UTIL:
	case DET_MET_GPU_SM_CLOCK:
		if (!r->gpu && (r->gpu = job_calloc(e, j, sizeof(*r->gpu))) != NULL)
			gpu_init(r->gpu);
		if (r->gpu && isfinite(v))
			deti_gpu_feed(j, r->gpu, id.metric, v, step, now_ns);
		break;
	case DET_MET_GPU_ECC_UNCORRECTABLE:
	case DET_MET_GPU_XID:
		if (isfinite(v))
			deti_ecc_feed(r, id.metric == DET_MET_GPU_XID, v, step, now_ns, warmup);
		break;
	case DET_MET_CHECKPOINT_DURATION:
		feed_checkpoint(j, v, step, now_ns);
		break;
	case DET_MET_CONFIG_HASH:
		r->config_hash = bits;
		r->has_config = true;
		break;
	case DET_MET_WORLD_SIZE:
		if (isfinite(v)) {
			r->world_size = v;
			r->has_ws = true;
		}
		break;
	default:
		break;
	}
}

/* The job and rank a call feeds, with liveness updated; NULL if refused. */
static struct deti_rank *feed_target(struct det_engine *e, const char *job, size_t job_len,
				     uint32_t rank, int64_t now_ns, struct deti_job **jout)
{
	if (now_ns > e->last_now_ns)
		e->last_now_ns = now_ns;
	struct deti_job *j = job_get(e, job, job_len, now_ns);
	if (!j)
		return NULL;
	e->last_job = j;
	if (e->lru_head != j) {
		lru_unlink(e, j);
		lru_push_front(e, j);
	}
	deti_job_rules(e, j);
	struct deti_rank *r = rank_get(e, j, rank, now_ns);
	if (!r)
		return NULL;
	if (j->first_seen_ns == 0)
		j->first_seen_ns = now_ns;
	if (now_ns > j->last_seen_ns)
		j->last_seen_ns = now_ns;
	if (now_ns > r->last_seen_ns)
		r->last_seen_ns = now_ns;
	*jout = j;
	return r;
}

void det_engine_feed(struct det_engine *e, const char *job, size_t job_len, uint32_t rank,
		     const char *metric, size_t metric_len, const int64_t *ts_ns,
		     const int64_t *steps, const uint32_t *attempts, const uint64_t *value_bits,
		     size_t n, int64_t now_ns, bool warmup)
{
	pthread_mutex_lock(&e->mu);
	struct deti_job *j = NULL;
	struct deti_rank *r = feed_target(e, job, job_len, rank, now_ns, &j);
	if (!r)
		goto out;
	e->st.points += n;
	struct det_metric_id id = det_rules_metric(e->rules, metric, metric_len);
	for (size_t i = 0; i < n; i++) {
		if (!rank_point(j, r, ts_ns[i], steps[i], attempts[i], now_ns))
			continue;
		if (id.metric != DET_MET_NONE)
			feed_value(e, j, r, id, value_bits[i], steps[i], ts_ns[i], now_ns, warmup);
	}
out:
	pthread_mutex_unlock(&e->mu);
}

void det_engine_feed_span(struct det_engine *e, const char *job, size_t job_len, uint32_t rank,
			  int64_t step, const char *name, size_t name_len, int64_t start_ns,
			  int64_t duration_ns, uint32_t attempt, int64_t now_ns, bool warmup)
{
	(void)warmup;
	pthread_mutex_lock(&e->mu);
	struct deti_job *j = NULL;
	struct deti_rank *r = feed_target(e, job, job_len, rank, now_ns, &j);
	if (!r)
		goto out;
	e->st.spans++;
	if (!rank_point(j, r, start_ns + duration_ns, step, attempt, now_ns))
		goto out;
	int ph = det_vocab_phase(name, name_len);
	double secs = (double)duration_ns / 1e9;
	if (ph >= 0) {
		if (ph == DET_PH_STEP)
			r->step_time = secs;
		else
			last_phase_set(r, det_vocab_phase_name((unsigned)ph),
				       strlen(det_vocab_phase_name((unsigned)ph)), step, start_ns);
		if (step != DET_STEP_NONE && duration_ns >= 0 && r != j->jrank &&
		    rank_steps(e, j, r))
			deti_steprec_set(r, step, (unsigned)ph, secs, true);
	} else {
		last_phase_set(r, name, name_len, step, start_ns);
	}
out:
	pthread_mutex_unlock(&e->mu);
}

static bool job_id_valid(const char *s, size_t n)
{
	if (n == 0 || n >= DET_JOB_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

int det_engine_set_meta(struct det_engine *e, const char *job, const struct det_job_meta *m)
{
	size_t len = strlen(job);
	if (!job_id_valid(job, len))
		return RDB_EINVAL;
	pthread_mutex_lock(&e->mu);
	struct deti_job *j = job_get(e, job, len, 0);
	int rc = RDB_ELIMIT;
	if (j) {
		j->meta = *m;
		j->has_meta = true;
		rc = 0;
	}
	pthread_mutex_unlock(&e->mu);
	return rc;
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

int det_engine_new(const struct det_limits *lim, const struct det_rules *rules,
		   struct det_engine **out)
{
	struct det_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	det_limits_default(&e->lim);
	if (lim) {
		if (lim->max_jobs)
			e->lim.max_jobs = lim->max_jobs;
		if (lim->max_ranks_per_job)
			e->lim.max_ranks_per_job = lim->max_ranks_per_job;
		if (lim->max_bytes)
			e->lim.max_bytes = lim->max_bytes;
		if (lim->job_forget_s)
			e->lim.job_forget_s = lim->job_forget_s;
		if (lim->derived_interval_s)
			e->lim.derived_interval_s = lim->derived_interval_s;
	}
	if (pthread_mutex_init(&e->mu, NULL) != 0) {
		free(e);
		return -ENOMEM;
	}
	e->rules = rules;
	e->rules_gen = 1;
	*out = e;
	return 0;
}

void det_engine_free(struct det_engine *e)
{
	if (!e)
		return;
	while (e->lru_head)
		job_drop(e, e->lru_head);
	rdb_map_free(&e->jobs);
	free(e->scratch);
	free(e->scratch_ranks);
	free(e->hits);
	pthread_mutex_destroy(&e->mu);
	free(e);
}

void det_engine_set_rules(struct det_engine *e, const struct det_rules *rules)
{
	pthread_mutex_lock(&e->mu);
	e->rules = rules;
	e->rules_gen++;
	for (struct deti_job *j = e->lru_head; j; j = j->lru_next)
		deti_job_rules(e, j); /* no job may keep pointers into the old set */
	pthread_mutex_unlock(&e->mu);
}

/* ---- evaluation -------------------------------------------------------------------------- */

static void forget_silent(struct det_engine *e, int64_t now_ns)
{
	int64_t limit_ns = (int64_t)e->lim.job_forget_s * DETI_NS;
	struct deti_job *j = e->lru_tail;
	while (j) {
		struct deti_job *prev = j->lru_prev;
		if (j->last_seen_ns == 0)
			j->last_seen_ns = now_ns; /* metadata set before any clock was seen */
		if (now_ns - j->last_seen_ns > limit_ns) {
			rdb_info("detect", "job %s: silent for %u s, detection state dropped",
				 j->name, e->lim.job_forget_s);
			job_drop(e, j);
			e->st.jobs_forgotten++;
		}
		j = prev;
	}
}

uint8_t deti_job_state(const struct deti_job *j)
{
	if (j->has_meta && j->meta.status == DET_STATUS_FINISHED)
		return DET_JOB_FINISHED;
	if (j->has_meta && j->meta.status == DET_STATUS_FAILED)
		return DET_JOB_FAILED;
	if (j->down)
		return DET_JOB_DOWN;
	if (j->hung)
		return DET_JOB_HUNG;
	return j->nconds ? DET_JOB_DEGRADED : DET_JOB_OK;
}

int det_engine_eval(struct det_engine *e, int64_t now_ns,
		    int (*fn)(void *arg, const struct det_cond *c), void *arg)
{
	pthread_mutex_lock(&e->mu);
	e->st.evaluations++;
	if (now_ns > e->last_now_ns)
		e->last_now_ns = now_ns;
	forget_silent(e, now_ns);
	int rc = 0;
	for (struct deti_job *j = e->lru_head; j && rc == 0; j = j->lru_next) {
		if (j->first_seen_ns == 0)
			continue; /* metadata only: nothing to judge yet */
		deti_job_rules(e, j);
		struct deti_emit em = {fn, arg, j, 0, 0};
		deti_eval_progress(e, &em, now_ns);
		deti_eval_numerics(e, &em, now_ns);
		deti_eval_hardware(e, &em, now_ns);
		deti_eval_invariants(e, &em, now_ns);
		j->nconds = em.count;
		j->state = deti_job_state(j);
		rc = em.rc;
	}
	pthread_mutex_unlock(&e->mu);
	return rc;
}
