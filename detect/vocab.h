/* vocab.h - the metric vocabulary the detectors understand (DESIGN.md,
 * "Metric vocabulary"): canonical metric names, step phases, and the
 * built-in aliases that map other spellings (line protocol's train.loss,
 * DCGM exporter names) onto them.
 *
 * Pure tables and lookups: no state, no allocation, thread-safe. The
 * operator's [aliases] (rules.c) are added on top of the built-in ones into
 * the rule set's lookup table; the engine resolves a metric name once per
 * det_engine_feed call through det_rules_metric().
 */
#ifndef DET_VOCAB_H
#define DET_VOCAB_H

#include <stddef.h>
#include <stdint.h>

/* Watched metrics. DET_MET_NONE: a name the detectors do not read (it only
 * keeps the rank alive). */
enum det_metric {
	DET_MET_NONE = 0,
	DET_MET_LOSS,
	DET_MET_GRAD_NORM,
	DET_MET_LR,
	DET_MET_LOSS_SCALE,
	DET_MET_SKIPPED_STEPS,
	DET_MET_PHASE, /* step_time (phase DET_PH_STEP) or step_time.<phase> */
	DET_MET_SAMPLES_PER_SEC,
	DET_MET_TOKENS_PER_SEC,
	DET_MET_GPU_TEMP,
	DET_MET_GPU_POWER,
	DET_MET_GPU_UTIL,
	DET_MET_GPU_SM_CLOCK,
	DET_MET_GPU_MEM_USED,
	DET_MET_GPU_ECC_CORRECTABLE,
	DET_MET_GPU_ECC_UNCORRECTABLE,
	DET_MET_GPU_XID,
	DET_MET_COLLECTIVE_FAILURES,
	DET_MET_RESTARTS,
	DET_MET_CHECKPOINT_DURATION,
	DET_MET_CONFIG_HASH,
	DET_MET_WORLD_SIZE,
	DET_MET_HEARTBEAT,
	DET_MET_COUNT
};

/* Phases of a step, in the order they run. DET_PH_STEP is the whole step
 * (the metric step_time). */
enum det_phase {
	DET_PH_STEP = 0,
	DET_PH_DATALOADER,
	DET_PH_FORWARD,
	DET_PH_BACKWARD,
	DET_PH_OPTIMIZER,
	DET_PH_CHECKPOINT,
	DET_PH_COLLECTIVE,
	DET_PH_COUNT
};

/* A resolved metric name. */
struct det_metric_id {
	uint8_t metric; /* enum det_metric */
	uint8_t phase;	/* enum det_phase when metric == DET_MET_PHASE, else 0 */
};

/* The canonical name of a watched metric ("loss", "step_time.forward").
 * Static string; "" for DET_MET_NONE or out-of-range values. */
const char *det_vocab_metric_name(struct det_metric_id id);

/* The phase word ("forward", "dataloader"; "step" for DET_PH_STEP). Static
 * string; "" if out of range. */
const char *det_vocab_phase_name(unsigned phase);

/* Resolves a canonical name (exact, case-sensitive). Returns 0 and *out, or
 * RDB_ENOTFOUND (*out untouched). Aliases are not consulted. */
int det_vocab_canonical(const char *name, size_t len, struct det_metric_id *out);

/* Maps a span name (or the <phase> of step_time.<phase>) to a phase:
 * canonical words and common spellings ("fwd", "bwd", "allreduce",
 * "data", "optimizer_step", "step"). Returns the phase or -1. */
int det_vocab_phase(const char *name, size_t len);

/* The other spellings of phases: word i -> *phase, for i < n. Returns NULL
 * past the end. Static strings. */
const char *det_vocab_phase_word(size_t i, unsigned *phase);

/* The built-in metric aliases are model/alias.h's (mdl_metric_alias). */

#endif
