/* engine_int.h - the detection engine's state, shared by engine.c (tables,
 * memory, feeding, health) and the detector files (detectors_num.c,
 * detectors_prog.c, detectors_hw.c). Not a public header: only detect/
 * includes it. Internal non-static symbols carry the prefix deti_.
 *
 * Every structure here is fixed-size once allocated, which is what makes
 * the engine's memory bound a simple sum (deti_job.bytes).
 * Threading: all of it is guarded by det_engine.mu.
 */
#ifndef DET_ENGINE_INT_H
#define DET_ENGINE_INT_H

#include "detect/engine.h"
#include "detect/rules.h"
#include "detect/vocab.h"

#include "common/rdb_map.h"

#include <pthread.h>

#define DETI_WIN_MAX	64  /* spike baseline window (LossSpike.window max) */
#define DETI_BLOCK_MAX	64  /* LossDivergence.block max */
#define DETI_BLKS_MAX	16  /* LossDivergence blocks kept (min_blocks max) */
#define DETI_STEPS_RING 64  /* per-rank step records, indexed by step % ring */
#define DETI_MOVES	8   /* per-rank (step, time) samples of step advances */
#define DETI_GAPS	32  /* job: intervals between advances of its highest step */
#define DETI_TP_MAX	128 /* throughput baseline samples */
#define DETI_CLK_WIN	32  /* sm clock baseline samples */
#define DETI_LS_HALV	64  /* loss-scale halving steps kept */
#define DETI_LS_SKIP	32  /* skipped_steps (step, value) samples */
#define DETI_NS		1000000000LL

/* Watched numeric series of one rank (loss, grad_norm). */
enum { DETI_NUM_LOSS = 0, DETI_NUM_GRAD = 1, DETI_NUM_COUNT };

struct deti_num {
	float win[DETI_WIN_MAX]; /* ring of recent finite values */
	uint16_t wn, whead;	 /* values held, next slot */
	uint16_t since_refresh;	 /* values added since med/mad were computed */
	bool base_ok;
	double med, mad;    /* cached baseline of win */
	double prev;	    /* previous finite value, NAN if none */
	uint64_t npoints;   /* finite values since start or restart */
	int64_t last_step;  /* step of the latest point (any value) */
	int64_t last_ts_ns; /* client time of the latest point at last_step */
	int64_t last_ns;    /* server time of the latest point */
	/* non-finite */
	bool nf_active;
	double nf_value;
	int64_t nf_step, nf_first_ns, nf_last_ns;
	uint32_t nf_finite; /* finite points since the last non-finite one */
	/* spike */
	bool sp_active;
	double sp_value, sp_base;
	int64_t sp_step, sp_first_ns, sp_last_ns;
	uint32_t sp_quiet; /* points without a spike since the last one */
	/* divergence (loss only) */
	float cur[DETI_BLOCK_MAX]; /* the block being filled */
	uint16_t ncur, nblk, bhead;
	float blk[DETI_BLKS_MAX];  /* ring of block medians */
	float bmad[DETI_BLKS_MAX]; /* MAD of each block's points (same ring) */
	bool dv_active;
	double dv_value, dv_base;
	double dv_thr; /* the excess that raised the alert (clears below half of it) */
	int64_t dv_step, dv_first_ns;
};

/* One step's times on one rank, seconds; NAN where not reported. t[0] is
 * step_time, t[phase] step_time.<phase> or the span of that phase. A phase
 * reported both ways (the SDK's phase timers send the metric and the span)
 * counts once: the metric wins, spans add up only among themselves. */
struct deti_steprec {
	int64_t step; /* DET_STEP_NONE = empty */
	float t[DET_PH_COUNT];
	uint8_t from_metric; /* bit p: t[p] came from step_time.<phase> */
};

struct deti_gpu {
	double temp, util, clock;
	int64_t temp_ns, util_ns, clock_ns; /* server time of the values; 0 = never */
	int64_t step;
	float clk[DETI_CLK_WIN]; /* ring of busy, unthrottled clock samples */
	uint16_t nclk, chead, since;
	double clk_base; /* median of clk, NAN until warm */
};

struct deti_lscale {
	double last; /* latest loss_scale, NAN none */
	int64_t last_step;
	int64_t halv[DETI_LS_HALV]; /* steps where loss_scale halved */
	uint16_t nh, hh;
	int64_t skip_step[DETI_LS_SKIP];
	double skip_val[DETI_LS_SKIP];
	uint16_t ns, sh;
	double skip_last; /* latest skipped_steps, NAN none */
	int64_t skip_last_step;
	uint8_t episode; /* collapse being reported: 0 none, 1 by loss_scale, 2 by skipped_steps */
};

struct deti_rank {
	uint32_t rank; /* DET_JOB_RANK for the job-level pseudo-rank */
	uint32_t attempt;
	bool attempt_known;
	int64_t first_seen_ns, last_seen_ns; /* server receive times */
	int64_t last_step;		     /* highest step since start/restart, DET_STEP_NONE */
	int64_t last_ts_ns;		     /* client time of the newest point with a step */
	int64_t step_moved_ns;		     /* server time last_step last advanced */
	int64_t start_step;		     /* first step after start/restart */
	int64_t mv_step[DETI_MOVES], mv_ns[DETI_MOVES];
	uint8_t nmv, mvhead;
	char last_phase[DET_NAME_MAX];
	int64_t last_phase_step, last_phase_key; /* order within the step */
	struct deti_num *num[DETI_NUM_COUNT];
	struct deti_steprec *steps; /* DETI_STEPS_RING records, or NULL */
	struct deti_gpu *gpu;
	struct deti_lscale *ls;
	double step_time;	      /* latest step_time, NAN none */
	double samples_ps, tokens_ps; /* latest, NAN none */
	int64_t samples_ns, tokens_ns;
	uint64_t config_hash;
	bool has_config, has_ws;
	double world_size;
	/* ECC / XID */
	bool ecc_seen, xid_seen;
	double ecc_max, xid_last;
	int64_t ecc_ns, xid_ns; /* last increase; 0 = none */
	double ecc_value, ecc_prev, xid_value;
	int64_t ecc_step, xid_step;
	/* straggler */
	uint64_t slow_bits; /* bit 0 = latest judged step */
	uint32_t judged;
	bool straggling;
	float excess[DET_PH_COUNT]; /* decayed excess over the peers' phase medians */
	float slow_w;		    /* decayed count of slow steps (same decay) */
	double work_last, work_med_last;
	/* last evaluation */
	uint8_t state; /* DET_RANK_* */
};

struct deti_job {
	struct deti_job *lru_prev, *lru_next; /* most recently fed first */
	struct deti_job *hnext;		      /* same-hash chain */
	uint64_t hash;
	char name[DET_JOB_MAX];
	size_t name_len;
	size_t bytes; /* everything this job holds */
	struct det_job_meta meta;
	bool has_meta;
	struct deti_rank **ranks; /* indexed by rank; rcap slots */
	uint32_t rcap, nranks;
	struct deti_rank *jrank; /* the job-level pseudo-rank, or NULL */
	struct det_rule_eff eff[DET_RULE_COUNT];
	uint64_t eff_gen;
	int64_t first_seen_ns, last_seen_ns; /* data (not metadata) */
	uint32_t max_attempt;
	/* progress */
	int64_t max_step;
	int64_t first_step;  /* the first step any rank reported */
	int64_t progress_ns; /* any rank's step advanced or a rank restarted */
	int64_t last_move_ns;
	uint64_t moves; /* advances of max_step */
	float gaps[DETI_GAPS];
	uint16_t ngaps, ghead;
	/* checkpoint */
	bool ckpt_seen;
	int64_t ckpt_ns, ckpt_step;	      /* latest checkpoint.duration point */
	int64_t ckpt_first_ns;		      /* first point of the latest checkpoint */
	double ckpt_dur_s;		      /* its longest reported duration */
	bool ckpt_prev;			      /* an earlier checkpoint is known: */
	int64_t ckpt_prev_step, ckpt_prev_ns; /* its step and first arrival */
	/* throughput */
	double tp[DETI_TP_MAX];
	uint16_t ntp, tphead;
	uint8_t tp_kind;
	int64_t tp_last_ns;
	/* straggler */
	int64_t judged_step;
	int64_t phmed_step[DETI_STEPS_RING];
	float phmed[DETI_STEPS_RING][DET_PH_COUNT];
	/* derived */
	int64_t derived_ns;
	/* results of the last evaluation, for health */
	uint8_t state;
	bool hung, down, throughput_low;
	uint32_t nconds;
	double median_step_s, mfu;
};

struct det_engine {
	pthread_mutex_t mu;
	struct det_limits lim;
	const struct det_rules *rules;
	uint64_t rules_gen;
	struct rdb_map jobs; /* name hash -> chain of deti_job */
	struct deti_job *lru_head, *lru_tail;
	uint64_t njobs, nranks, bytes;
	struct deti_job *last_job; /* feed cache */
	int64_t last_now_ns;	   /* newest now_ns of any call (metadata has none) */
	struct deti_hit *hits;	   /* per-evaluation list of ranks at fault */
	size_t hits_n;
	double *scratch; /* cross-rank work arrays, 4 x scratch_n */
	uint32_t *scratch_ranks;
	size_t scratch_n;
	struct det_engine_stats st;
};

/* A rank at fault in one detector, gathered to decide per-rank vs job-level. */
struct deti_hit {
	uint32_t rank;
	double value, base;
	int64_t step, first_ns;
	const char *note; /* static text for the description, or NULL */
};

/* One evaluation's output for one job. */
struct deti_emit {
	int (*fn)(void *arg, const struct det_cond *c);
	void *arg;
	struct deti_job *job;
	int rc;		/* first non-zero fn return */
	uint32_t count; /* conditions emitted for the job */
};

/* A condition to emit; text is formatted by the caller. */
struct deti_cond_in {
	unsigned rule;
	int64_t rank; /* DET_RANK_NONE for job-level */
	const char *phase, *metric;
	double value, baseline;
	int64_t step;
};

/* engine.c */
void deti_emit(struct deti_emit *em, const struct deti_cond_in *in, const char *summary,
	       const char *desc);
double deti_median(double *v, size_t n);	  /* reorders v; NAN if n == 0 */
double deti_mad(double *v, size_t n, double med); /* overwrites v */
bool deti_fresh(int64_t then_ns, int64_t now_ns, double within_s);
double deti_rule_p(const struct deti_job *j, unsigned rule, unsigned param);
/* Scratch arrays of at least n entries (4 double arrays and one rank array),
 * or false (-ENOMEM). */
bool deti_scratch(struct det_engine *e, size_t n);
struct deti_hit *deti_hits(struct det_engine *e, size_t n);	      /* >= n entries or NULL */
struct deti_rank *deti_rank_at(const struct deti_job *j, uint32_t i); /* NULL if none */
bool deti_rank_retired(const struct deti_job *j, const struct deti_rank *r);
bool deti_job_judged(const struct deti_job *j);	  /* not finished/failed */
uint8_t deti_job_state(const struct deti_job *j); /* DET_JOB_* after the last evaluation */
struct deti_job *deti_job_find(struct det_engine *e, const char *job, size_t len); /* or NULL */
void deti_job_rules(struct det_engine *e, struct deti_job *j); /* re-resolve if the set changed */

/* detectors_num.c */
void deti_num_feed(struct deti_job *j, struct deti_num *n, int which, double v, int64_t step,
		   int64_t ts_ns, int64_t now_ns, bool warmup);
void deti_ls_feed(struct deti_job *j, struct deti_lscale *ls, bool skipped, double v, int64_t step);
void deti_eval_numerics(struct det_engine *e, struct deti_emit *em, int64_t now_ns);

/* detectors_prog.c */
void deti_eval_progress(struct det_engine *e, struct deti_emit *em, int64_t now_ns);
double deti_job_step_time(struct det_engine *e, struct deti_job *j, int64_t now_ns);
double deti_rank_rate(const struct deti_rank *r, int64_t now_ns);
/* Records a phase time of a step (add: spans of one phase in one step add
 * up, e.g. per micro-batch; metrics replace, and a span of a phase whose
 * metric is there is ignored, whichever arrives first). */
void deti_steprec_set(struct deti_rank *r, int64_t step, unsigned phase, double seconds, bool add);

/* detectors_hw.c */
void deti_gpu_feed(struct deti_job *j, struct deti_gpu *g, unsigned metric, double v, int64_t step,
		   int64_t now_ns);
void deti_ecc_feed(struct deti_rank *r, bool xid, double v, int64_t step, int64_t now_ns,
		   bool warmup);
void deti_eval_hardware(struct det_engine *e, struct deti_emit *em, int64_t now_ns);
void deti_eval_invariants(struct det_engine *e, struct deti_emit *em, int64_t now_ns);
double deti_job_mfu(const struct deti_job *j, int64_t now_ns);
double deti_sum_rate(const struct deti_job *j, bool tokens, int64_t now_ns, uint32_t *nranks);

#endif
