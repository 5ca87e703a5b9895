/* rules_table.c - the built-in detectors: one table that drives the
 * defaults, the rules file parser's validation, the generated sample file
 * (conf/rules.example) and the documentation of every detector.
 *
 * Adding a parameter is adding one entry here and its index in rules.h;
 * the detector reads it as eff->p[DET_P_...]. Read-only data, thread-safe.
 */
#include "detect/rules.h"

#include <string.h>

#define P(n, d, lo, hi, integer, doc)                                                              \
	{                                                                                          \
		n, d, lo, hi, integer, doc                                                         \
	}

/* Shared by the numeric detectors that aggregate ranks into one alert. */
#define JOB_FRACTION_DOC                                                                           \
	"When at least this fraction of the ranks that report the metric (and at least two) "      \
	"are affected at once, one job-level alert (no rank label) replaces the per-rank ones; "   \
	"0 = always per rank."
#define SETTLE_DOC                                                                                 \
	"A single rank's alert waits until its peers have reported the same step, or this many "   \
	"seconds, so that a fault every rank shares becomes one job-level alert."

static const struct det_rule_spec specs[DET_RULE_COUNT] = {
    [DET_R_LOSS_NON_FINITE] =
	{"LossNonFinite",
	 true,
	 0,
	 DET_SEV_CRITICAL,
	 "loss or grad_norm is NaN or +-Inf (labels rank, metric), raised on the first such "
	 "point. A non-finite value is never also a LossSpike or GradNormSpike.",
	 4,
	 {P("clear_steps", 5, 1, 100000, true,
	    "The alert clears after this many finite points of the metric in a row."),
	  P("hold_s", 3600, 60, 604800, false,
	    "It also clears this many seconds after the last non-finite point when no "
	    "finite point came since (the rank stopped sending)."),
	  P("job_fraction", 0.5, 0, 1, false, JOB_FRACTION_DOC),
	  P("settle_s", 0.5, 0, 60, false, SETTLE_DOC)}},
    [DET_R_LOSS_SPIKE] =
	{"LossSpike",
	 true,
	 0,
	 DET_SEV_WARNING,
	 "A loss value jumps far above the rank's own recent history: more than k MAD-scaled "
	 "deviations (1.4826 x MAD) above the rolling median AND more than rel x |median| "
	 "above it, and as far above the median of the latest 5 points, reached by a jump "
	 "from the previous point (a gradual rise, or a harder batch on a rising curve, is "
	 "LossDivergence's). Per rank, or one job-level alert when most ranks spike "
	 "together.",
	 8,
	 {P("window", 32, 8, 64, true,
	    "Points of the rank's recent history in the rolling median/MAD baseline."),
	  P("warmup", 20, 4, 100000, true,
	    "Points a rank must have sent (since it started or restarted) before spikes "
	    "are judged."),
	  P("k", 6, 1, 1000, false, "MAD-scaled deviations above the median for a spike."),
	  P("rel", 0.3, 0, 1000, false,
	    "Minimum relative excess over the median (0.3 = 30 % above)."),
	  P("clear_steps", 10, 1, 100000, true,
	    "The alert clears after this many points in a row without a spike."),
	  P("hold_s", 600, 10, 604800, false,
	    "It also clears this many seconds after the last spike when no point came "
	    "since."),
	  P("job_fraction", 0.5, 0, 1, false, JOB_FRACTION_DOC),
	  P("settle_s", 2, 0, 60, false, SETTLE_DOC)}},
    [DET_R_LOSS_DIVERGENCE] =
	{"LossDivergence",
	 true,
	 0,
	 DET_SEV_CRITICAL,
	 "The loss trends upward: the medians of the latest rising + 1 blocks of points "
	 "rise (every pair in order but at most one, a Mann-Kendall test), the latest is "
	 "more than max(rel x |baseline|, k x noise) above the baseline and the one before "
	 "it three quarters as far. The baseline is the median of the 5 lowest block "
	 "medians of the recent history (at most 16 blocks), not the single lowest (a low "
	 "outlier on a noisy loss); noise is the standard error of a block median, from the "
	 "spread of the points within blocks or of the differences between consecutive block "
	 "medians, whichever is larger. A converged loss that only fluctuates, however "
	 "noisy, does not rise that far. Clears when the latest block median falls back "
	 "below half the excess that raised it.",
	 7,
	 {P("block", 8, 2, 64, true, "Points per block; the block median smooths noise."),
	  P("rising", 3, 2, 15, true,
	    "Block medians after the oldest of the trend test (rising + 1 blocks)."),
	  P("rel", 0.2, 0.01, 1000, false,
	    "Minimum rise of the latest block median over the baseline (0.2 = 20 %)."),
	  P("min_blocks", 8, 3, 16, true,
	    "Blocks of history needed before judging (warm-up: min_blocks x block "
	    "points); must exceed rising."),
	  P("job_fraction", 0.5, 0, 1, false, JOB_FRACTION_DOC),
	  P("settle_s", 60, 0, 3600, false,
	    "A single rank's alert waits until its peers have reported one more block past "
	    "the step where it diverged, or this many seconds: ranks that share a divergence "
	    "cross the limit up to a block apart, and that is one job-level alert."),
	  P("k", 6, 0, 1000, false,
	    "Minimum rise of the latest block median over the baseline in block-median "
	    "noise (standard errors); 0 = rel alone.")}},
    [DET_R_GRAD_NORM_SPIKE] =
	{"GradNormSpike",
	 true,
	 0,
	 DET_SEV_WARNING,
	 "grad_norm jumps far above the rank's own recent history; same test and "
	 "parameters as LossSpike, with wider defaults (gradient norms are spikier).",
	 8,
	 {P("window", 32, 8, 64, true,
	    "Points of the rank's recent history in the rolling median/MAD baseline."),
	  P("warmup", 20, 4, 100000, true,
	    "Points a rank must have sent (since it started or restarted) before spikes "
	    "are judged."),
	  P("k", 8, 1, 1000, false, "MAD-scaled deviations above the median for a spike."),
	  P("rel", 1.0, 0, 1000, false,
	    "Minimum relative excess over the median (1.0 = twice the median)."),
	  P("clear_steps", 10, 1, 100000, true,
	    "The alert clears after this many points in a row without a spike."),
	  P("hold_s", 600, 10, 604800, false,
	    "It also clears this many seconds after the last spike when no point came "
	    "since."),
	  P("job_fraction", 0.5, 0, 1, false, JOB_FRACTION_DOC),
	  P("settle_s", 2, 0, 60, false, SETTLE_DOC)}},
    [DET_R_LOSS_SCALE_COLLAPSE] =
	{"LossScaleCollapse",
	 true,
	 0,
	 DET_SEV_WARNING,
	 "Mixed-precision loss scaling is failing on a rank: loss_scale below floor, or "
	 "`halvings` halvings of loss_scale within window_steps steps, or skipped_steps "
	 "rising by `skipped` within window_steps steps (label metric: the test that tripped "
	 "first; both tripping together, as in a real collapse, are one alert).",
	 5,
	 {P("floor", 1, 0, 1e12, false,
	    "loss_scale below this is a collapse; 0 turns the floor test off."),
	  P("halvings", 4, 1, 64, true, "Halvings of loss_scale within window_steps."),
	  P("skipped", 20, 1, 1e9, true, "Increase of skipped_steps within window_steps."),
	  P("window_steps", 200, 10, 1e6, true,
	    "The window, in training steps, of the two rate tests."),
	  P("job_fraction", 0.5, 0, 1, false, JOB_FRACTION_DOC)}},
    [DET_R_TRAINING_HANG] =
	{"TrainingHang",
	 true,
	 0,
	 DET_SEV_CRITICAL,
	 "Ranks are alive (heartbeat or any data within RankDown's silence_s) but the job's "
	 "step has not moved for max(min_s, step_mult x the run's recent step time). Names "
	 "the rank(s) whose last activity (step and last reported phase) differs from the "
	 "rest; the rank label is set when exactly one rank differs. When the run's "
	 "checkpoints (checkpoint.duration points) come every N steps (learned from the last "
	 "two, or the run's first step and the first checkpoint) and the stall is at the next "
	 "one, the window grows by 1.5 x the last checkpoint's duration.",
	 3,
	 {P("min_s", 10, 1, 86400, false, "Shortest hang window, seconds."),
	  P("step_mult", 10, 1, 10000, false,
	    "The window in units of the run's median step time (the larger of the "
	    "reported step_time and the interval between step advances seen by the "
	    "server)."),
	  P("min_moves", 3, 1, 100000, true,
	    "Step advances the job must have shown before a hang is judged (a job still "
	    "loading is not hung).")}},
    [DET_R_RANK_DOWN] =
	{"RankDown",
	 true,
	 0,
	 DET_SEV_CRITICAL,
	 "A rank sent nothing (no point, span or heartbeat) for silence_s seconds while at "
	 "least one of its peers still sends. Ranks of an earlier attempt that did not come "
	 "back after a restart are not down.",
	 1,
	 {P("silence_s", 30, 1, 86400, false, "Silence of a rank, seconds.")}},
    [DET_R_JOB_DOWN] =
	{"JobDown",
	 true,
	 0,
	 DET_SEV_CRITICAL,
	 "Every rank of the job is silent for silence_s seconds and the job's metadata "
	 "status is not finished or failed.",
	 2,
	 {P("silence_s", 30, 1, 86400, false, "Silence of every rank, seconds."),
	  P("max_silence_s", 86400, 60, 31536000, false,
	    "A job silent longer than this is no longer judged (the alert resolves).")}},
    [DET_R_THROUGHPUT_DROP] =
	{"ThroughputDrop",
	 true,
	 30,
	 DET_SEV_WARNING,
	 "The job's throughput (samples_per_sec, else tokens_per_sec, summed over live "
	 "ranks; else 1 / median step_time) is at least `drop` below the run's own "
	 "baseline (median of samples over baseline_s) for the `for` duration. Not raised "
	 "while a Straggler, TrainingHang or JobDown of the job explains it.",
	 4,
	 {P("drop", 0.2, 0.01, 0.99, false, "Relative drop (0.2 = 20 % below baseline)."),
	  P("sample_s", 5, 1, 3600, false, "Seconds between baseline samples."),
	  P("baseline_s", 300, 10, 86400, false,
	    "Length of the baseline window, seconds (at most 128 samples are kept)."),
	  P("warmup_s", 60, 0, 86400, false,
	    "Seconds of samples needed before judging (at least 3 samples).")}},
    [DET_R_STRAGGLER] =
	{"Straggler",
	 true,
	 0,
	 DET_SEV_WARNING,
	 "A rank whose own work (step_time minus step_time.collective and "
	 "step_time.dataloader, or the sum of its compute phases), or whose data-loader "
	 "time, is above the peers' median of that step by more than k MAD-scaled "
	 "deviations and more than rel x median, in `hits` of the last `window` steps that "
	 "every live rank completed. Labels rank and phase (the phase with the largest "
	 "excess over the peers' median of that phase; \"compute\" when no phase is "
	 "reported). A slowdown every rank shares is not a straggler.",
	 6,
	 {P("k", 3, 0, 1000, false, "MAD-scaled deviations above the peers' median."),
	  P("rel", 0.1, 0, 1000, false,
	    "Minimum relative excess over the peers' median (0.1 = 10 %)."),
	  P("window", 30, 5, 64, true, "Judged steps in the sliding window."),
	  P("hits", 20, 1, 64, true, "Slow steps within the window; at most window."),
	  P("min_ranks", 3, 3, 1e6, true, "Ranks with data for a step before it is judged."),
	  P("skip_steps", 5, 0, 100000, true,
	    "Steps after a rank starts or restarts that are not judged (compilation, "
	    "cache warm-up).")}},
    [DET_R_GPU_OVERHEAT] =
	{"GpuOverheat",
	 true,
	 30,
	 DET_SEV_WARNING,
	 "gpu.temp above temp_c (metric label gpu.temp), or gpu.sm_clock more than "
	 "`throttle` below the rank's own baseline or its peers' median while gpu.util is "
	 "at least util_min (metric label gpu.sm_clock), for the `for` duration.",
	 4,
	 {P("temp_c", 85, 30, 150, false, "Temperature limit, degrees Celsius."),
	  P("throttle", 0.25, 0, 0.99, false,
	    "Relative clock drop that counts as throttling (0.25 = 25 % below); 0 turns "
	    "the clock test off."),
	  P("util_min", 80, 0, 100, false,
	    "The clock test only applies while gpu.util is at least this (percent)."),
	  P("warmup", 10, 1, 32, true,
	    "Busy clock samples of the rank before its own baseline counts.")}},
    [DET_R_GPU_ECC_ERRORS] =
	{"GpuEccErrors",
	 true,
	 0,
	 DET_SEV_CRITICAL,
	 "gpu.ecc.uncorrectable increases, or gpu.xid changes to a new non-zero value, on a "
	 "rank (labels rank, metric); raised on the first increase. The first value a rank "
	 "reports is its baseline, not an increase.",
	 1,
	 {P("hold_s", 3600, 10, 604800, false,
	    "The alert stays active this many seconds after the last increase.")}},
    [DET_R_CONFIG_MISMATCH] =
	{"ConfigMismatch",
	 true,
	 0,
	 DET_SEV_CRITICAL,
	 "A rank whose config_hash or world_size differs from the majority of ranks or from "
	 "the metadata (labels rank, metric); world_size x micro_batch x grad_accum != "
	 "global_batch in the metadata (metric global_batch); or fewer ranks reporting "
	 "than the declared world_size grace_s after the job's first data (metric ranks).",
	 1,
	 {P("grace_s", 120, 0, 86400, false,
	    "Seconds after the job's first data before missing ranks count.")}},
    [DET_R_CHECKPOINT_STALE] =
	{"CheckpointStale",
	 true,
	 0,
	 DET_SEV_WARNING,
	 "No checkpoint.duration point for max_age_s seconds, in a job that has "
	 "checkpointed at least once (or in any running job with always = 1).",
	 2,
	 {P("max_age_s", 7200, 60, 31536000, false, "Checkpoint age limit, seconds."),
	  P("always", 0, 0, 1, true,
	    "1: also judge jobs that never checkpointed (age from the job's first "
	    "data).")}},
    [DET_R_MFU_LOW] =
	{"MfuLow",
	 true,
	 300,
	 DET_SEV_WARNING,
	 "Model FLOPs utilisation below floor. MFU = tokens_per_sec summed over live ranks "
	 "x flops_per_token (else 6 x params) / (world_size x gpu_peak_flops), only when "
	 "the metadata declares those numbers. Stored as the job-level series mfu.",
	 2,
	 {P("floor", 0.2, 0, 1, false, "MFU floor (0.2 = 20 %)."),
	  P("warmup_s", 300, 0, 86400, false,
	    "Seconds after the job's first data before MFU is judged.")}},
};

const struct det_rule_spec *det_rule_spec(unsigned id)
{
	return id < DET_RULE_COUNT ? &specs[id] : NULL;
}

int det_rule_by_name(const char *alertname)
{
	for (unsigned i = 0; i < DET_RULE_COUNT; i++)
		if (strcmp(specs[i].alertname, alertname) == 0)
			return (int)i;
	return -1;
}
