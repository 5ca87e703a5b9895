/* engine.h - the detection engine: per-job state kept as acknowledged data
 * arrives, and every built-in detector evaluated over it.
 *
 * The engine is fed the points and spans of acknowledged writes
 * (det_engine_feed / det_engine_feed_span) and the parsed job metadata
 * (det_engine_set_meta); det_engine_eval judges every job and returns the
 * complete set of conditions that hold now (detect/cond.h), which the alert
 * lifecycle (alerts.c) turns into pending/firing/resolved alerts. It reads
 * no clock: every call takes now_ns (server CLOCK_REALTIME ns), so tests
 * are deterministic. Liveness and "when did the step move" use now_ns (the
 * server's receive time), never client timestamps.
 *
 * Memory: bounded by struct det_limits. Per rank the state is fixed-size
 * (rings of recent values, allocated when the rank first sends a watched
 * metric); ranks past max_ranks_per_job are ignored and counted; past
 * max_jobs or max_bytes the least recently fed jobs are evicted and
 * counted (their alerts resolve on the next evaluation).
 *
 * Threading: every function takes the engine's one mutex for its whole
 * call and nothing else; the lead feeds and evaluates from one detection
 * thread while HTTP threads read health. No function blocks on I/O. The
 * rule set given to det_engine_new/set_rules is read, not copied: it must
 * outlive the engine or the next det_engine_set_rules.
 */
#ifndef DET_ENGINE_H
#define DET_ENGINE_H

#include "detect/cond.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct det_rules;

#define DET_JOB_RANK  UINT32_MAX /* the job-level pseudo-rank (= STO_RANK_JOB) */
#define DET_STEP_NONE INT64_MIN	 /* "this point has no step" (= STO_STEP_NONE) */

/* Memory bounds and cadence. Zero fields take the defaults of
 * det_limits_default. */
struct det_limits {
	uint32_t max_jobs;	     /* jobs with state (default 1024) */
	uint32_t max_ranks_per_job;  /* real ranks 0..max-1 get state (default 16384) */
	uint64_t max_bytes;	     /* all state of all jobs (default 512 MiB) */
	uint32_t job_forget_s;	     /* a job silent this long is dropped (default 2 days) */
	uint32_t derived_interval_s; /* det_engine_derived cadence per job (default 10) */
};

/* Fills the defaults. */
void det_limits_default(struct det_limits *l);

/* Metadata status of a job. */
enum det_job_status {
	DET_STATUS_UNKNOWN = 0,
	DET_STATUS_RUNNING,
	DET_STATUS_FINISHED,
	DET_STATUS_FAILED,
};

/* The parsed fields of a job's metadata document; 0 / NAN where absent. */
struct det_job_meta {
	uint32_t world_size;
	uint64_t global_batch, micro_batch, grad_accum;
	double flops_per_token; /* NAN absent */
	double params;		/* NAN absent; flops_per_token = 6 x params if that is absent */
	double gpu_peak_flops;	/* per GPU, FLOP/s; NAN absent */
	uint8_t status;		/* enum det_job_status */
};

/* Health states. */
enum { DET_RANK_OK = 0, DET_RANK_STRAGGLER, DET_RANK_HUNG, DET_RANK_DOWN };
enum {
	DET_JOB_OK = 0,
	DET_JOB_DEGRADED, /* some condition holds (a rank down, a straggler, ...) */
	DET_JOB_HUNG,
	DET_JOB_DOWN,
	DET_JOB_FINISHED,
	DET_JOB_FAILED,
};

struct det_rank_health {
	uint32_t rank;
	int64_t last_seen_ns; /* server receive time of its latest data */
	int64_t last_step;    /* DET_STEP_NONE if it never sent a step */
	double steps_per_s;   /* recent progress rate; 0 when not moving */
	uint8_t state;	      /* DET_RANK_* */
	uint32_t attempt;
	char last_phase[DET_NAME_MAX]; /* latest phase it reported, "" if none */
};

struct det_job_health {
	char job[DET_JOB_MAX];
	uint8_t state; /* DET_JOB_* */
	int64_t step;  /* highest step of any rank; DET_STEP_NONE if none */
	double steps_per_s;
	double mfu;				      /* NAN unknown */
	double checkpoint_age_s;		      /* NAN unknown */
	uint32_t ranks_seen, ranks_alive, world_size; /* world_size 0 = not declared */
	int64_t first_seen_ns, last_seen_ns;
	double median_step_time_s;     /* NAN unknown */
	uint32_t nconditions;	       /* conditions of the job at the last evaluation */
	struct det_rank_health *ranks; /* malloc'd by det_engine_health, sorted by rank */
	size_t nranks;
};

struct det_engine_stats {
	uint64_t jobs, ranks;	 /* with state now */
	uint64_t bytes;		 /* state held */
	uint64_t jobs_evicted;	 /* for max_jobs / max_bytes */
	uint64_t jobs_forgotten; /* silent longer than job_forget_s */
	uint64_t ranks_refused;	 /* rank number past max_ranks_per_job */
	uint64_t points, spans;	 /* fed */
	uint64_t evaluations;
};

struct det_engine;

/* Creates an engine. lim NULL = defaults. rules must not be NULL (use
 * det_rules_default) and must outlive the engine or the next set_rules.
 * 0 or -ENOMEM; *out owned by the caller. */
int det_engine_new(const struct det_limits *lim, const struct det_rules *rules,
		   struct det_engine **out);
/* Frees the engine and all state. NULL ok. */
void det_engine_free(struct det_engine *e);
/* Switches to another rule set (after a reload). Rules in force per job are
 * re-resolved lazily; state and baselines are kept. The old set may be
 * freed once this returns. */
void det_engine_set_rules(struct det_engine *e, const struct det_rules *rules);

/* One series' points of one acknowledged write (columnar; n >= 0). job is
 * job_len bytes (not NUL-terminated), metric as sent (aliases are applied
 * here). steps[i] DET_STEP_NONE = absent; value_bits are IEEE-754 doubles.
 * warmup: history replayed after a restart - state and baselines are
 * updated, nothing triggered by a single point is raised (NaN, spike, ECC
 * increase). Never fails: a job or rank past the limits is counted and
 * skipped. */
void det_engine_feed(struct det_engine *e, const char *job, size_t job_len, uint32_t rank,
		     const char *metric, size_t metric_len, const int64_t *ts_ns,
		     const int64_t *steps, const uint32_t *attempts, const uint64_t *value_bits,
		     size_t n, int64_t now_ns, bool warmup);

/* One span (a timed phase of a step on a rank). name is the phase ("forward",
 * "dataloader", common spellings accepted; other names only count as the
 * rank's activity and last phase). warmup is accepted for symmetry with
 * det_engine_feed: no single span raises anything. */
void det_engine_feed_span(struct det_engine *e, const char *job, size_t job_len, uint32_t rank,
			  int64_t step, const char *name, size_t name_len, int64_t start_ns,
			  int64_t duration_ns, uint32_t attempt, int64_t now_ns, bool warmup);

/* Sets (replaces) the parsed metadata of job (NUL-terminated). Creates the
 * job's state if needed (a job known from metadata alone is not judged until
 * data arrives). 0, -ENOMEM, RDB_EINVAL (bad job id) or RDB_ELIMIT. */
int det_engine_set_meta(struct det_engine *e, const char *job, const struct det_job_meta *m);

/* Evaluates every detector of every job at now_ns and calls fn once per
 * condition that holds (the complete set: an identity absent from it has
 * cleared). Also drops jobs silent past job_forget_s. fn must not call back
 * into the engine; a non-zero return stops the walk and is returned. */
int det_engine_eval(struct det_engine *e, int64_t now_ns,
		    int (*fn)(void *arg, const struct det_cond *c), void *arg);

/* Derived job-level series to store: `mfu` (when the metadata allows it) and
 * `checkpoint.age` in seconds (once the job has checkpointed), at most once
 * per derived_interval_s per job. step is the job's highest step (or
 * DET_STEP_NONE). fn must not call back into the engine; a non-zero return
 * stops the walk and is returned. */
int det_engine_derived(struct det_engine *e, int64_t now_ns,
		       int (*fn)(void *arg, const char *job, const char *metric, int64_t ts_ns,
				 int64_t step, double value),
		       void *arg);

/* Typed health of one job (NUL-terminated id) at now_ns. 0, RDB_ENOTFOUND
 * (no state for it) or -ENOMEM. On success out->ranks is malloc'd (free with
 * det_job_health_free); on failure *out is untouched. Rank states reflect the
 * last det_engine_eval. */
int det_engine_health(struct det_engine *e, const char *job, int64_t now_ns,
		      struct det_job_health *out);
void det_job_health_free(struct det_job_health *h); /* frees ranks; NULL ok */

/* Calls fn with a summary (ranks NULL, nranks 0) of every job, in no
 * particular order. fn must not call back into the engine. */
int det_engine_jobs(struct det_engine *e, int64_t now_ns,
		    int (*fn)(void *arg, const struct det_job_health *summary), void *arg);

void det_engine_stats(struct det_engine *e, struct det_engine_stats *out);

#endif
