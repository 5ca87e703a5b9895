/* engine_health.c - what the engine tells about jobs without judging them:
 * typed job health (det_engine_health, det_engine_jobs), the derived
 * job-level series (det_engine_derived: mfu, checkpoint.age) and the
 * engine's counters.
 *
 * Health is read from the state the feed keeps and the flags the last
 * det_engine_eval left (rank straggler/hung/down, job hung/down, the number
 * of conditions); a rank silent past RankDown.silence_s reads as down even
 * between evaluations. Rates and MFU are computed at the call.
 *
 * Threading: every function takes the engine mutex for its whole call;
 * callbacks run under it and must not call back into the engine.
 * Failure: health allocates the rank array (-ENOMEM); nothing else fails.
 */
#include "detect/engine_int.h"

#include "common/rdb_err.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int det_engine_derived(struct det_engine *e, int64_t now_ns,
		       int (*fn)(void *arg, const char *job, const char *metric, int64_t ts_ns,
				 int64_t step, double value),
		       void *arg)
{
	pthread_mutex_lock(&e->mu);
	int rc = 0;
	int64_t every_ns = (int64_t)e->lim.derived_interval_s * DETI_NS;
	for (struct deti_job *j = e->lru_head; j && rc == 0; j = j->lru_next) {
		if (j->first_seen_ns == 0 || (j->derived_ns && now_ns - j->derived_ns < every_ns))
			continue;
		j->derived_ns = now_ns;
		deti_job_rules(e, j);
		double mfu = deti_job_mfu(j, now_ns);
		if (!isnan(mfu))
			rc = fn(arg, j->name, "mfu", now_ns, j->max_step, mfu);
		if (rc == 0 && j->ckpt_seen)
			rc = fn(arg, j->name, "checkpoint.age", now_ns, j->max_step,
				(double)(now_ns - j->ckpt_ns) / 1e9);
	}
	pthread_mutex_unlock(&e->mu);
	return rc;
}

/* ---- health ------------------------------------------------------------------------------- */

static void job_summary(struct det_engine *e, struct deti_job *j, int64_t now_ns,
			struct det_job_health *h)
{
	memset(h, 0, sizeof(*h));
	snprintf(h->job, sizeof(h->job), "%s", j->name);
	h->state = deti_job_state(j);
	h->step = j->max_step;
	h->mfu = deti_job_mfu(j, now_ns);
	h->checkpoint_age_s = j->ckpt_seen ? (double)(now_ns - j->ckpt_ns) / 1e9 : NAN;
	h->world_size = j->has_meta ? j->meta.world_size : 0;
	h->first_seen_ns = j->first_seen_ns;
	h->last_seen_ns = j->first_seen_ns ? j->last_seen_ns : 0;
	h->median_step_time_s = deti_job_step_time(e, j, now_ns);
	h->nconditions = j->nconds;
	double silence = deti_rule_p(j, DET_R_RANK_DOWN, DET_P_RD_SILENCE_S);
	double rates = 0;
	uint32_t nrates = 0;
	for (uint32_t i = 0; i < j->rcap; i++) {
		struct deti_rank *r = j->ranks[i];
		if (!r)
			continue;
		h->ranks_seen++;
		if (deti_fresh(r->last_seen_ns, now_ns, silence)) {
			h->ranks_alive++;
			double rate = deti_rank_rate(r, now_ns);
			if (rate > 0) {
				rates += rate;
				nrates++;
			}
		}
	}
	h->steps_per_s = nrates ? rates / nrates : 0;
}

static void rank_health(const struct deti_rank *r, int64_t now_ns, double silence_s,
			struct det_rank_health *o)
{
	memset(o, 0, sizeof(*o));
	o->rank = r->rank;
	o->last_seen_ns = r->last_seen_ns;
	o->last_step = r->last_step;
	o->steps_per_s = deti_rank_rate(r, now_ns);
	o->state = r->state;
	if (!deti_fresh(r->last_seen_ns, now_ns, silence_s))
		o->state = DET_RANK_DOWN;
	o->attempt = r->attempt;
	snprintf(o->last_phase, sizeof(o->last_phase), "%s", r->last_phase);
}

int det_engine_health(struct det_engine *e, const char *job, int64_t now_ns,
		      struct det_job_health *out)
{
	pthread_mutex_lock(&e->mu);
	int rc = RDB_ENOTFOUND;
	struct deti_job *j = deti_job_find(e, job, strlen(job));
	if (!j)
		goto out;
	deti_job_rules(e, j);
	struct det_job_health h;
	job_summary(e, j, now_ns, &h);
	rc = 0;
	if (j->nranks) {
		h.ranks = calloc(j->nranks, sizeof(*h.ranks));
		if (!h.ranks) {
			rc = -ENOMEM;
			goto out;
		}
	}
	double silence = deti_rule_p(j, DET_R_RANK_DOWN, DET_P_RD_SILENCE_S);
	for (uint32_t i = 0; i < j->rcap && h.nranks < j->nranks; i++)
		if (j->ranks[i])
			rank_health(j->ranks[i], now_ns, silence, &h.ranks[h.nranks++]);
	*out = h;
out:
	pthread_mutex_unlock(&e->mu);
	return rc;
}

void det_job_health_free(struct det_job_health *h)
{
	if (!h)
		return;
	free(h->ranks);
	h->ranks = NULL;
	h->nranks = 0;
}

int det_engine_jobs(struct det_engine *e, int64_t now_ns,
		    int (*fn)(void *arg, const struct det_job_health *summary), void *arg)
{
	pthread_mutex_lock(&e->mu);
	int rc = 0;
	for (struct deti_job *j = e->lru_head; j && rc == 0; j = j->lru_next) {
		struct det_job_health h;
		deti_job_rules(e, j);
		job_summary(e, j, now_ns, &h);
		rc = fn(arg, &h);
	}
	pthread_mutex_unlock(&e->mu);
	return rc;
}

void det_engine_stats(struct det_engine *e, struct det_engine_stats *out)
{
	pthread_mutex_lock(&e->mu);
	*out = e->st;
	out->jobs = e->njobs;
	out->ranks = e->nranks;
	out->bytes = e->bytes;
	pthread_mutex_unlock(&e->mu);
}
