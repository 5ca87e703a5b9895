/* vocab.c - canonical metric names and phase words (the built-in metric
 * aliases are model/alias.c's, shared with queries).
 *
 * Design: three static tables, read by linear scans. They are consulted
 * when a rule set is built (rules.c puts every canonical name and alias into
 * a hash table), never per ingested point, so the scans cost nothing that
 * matters. Thread-safe: read-only data.
 */
#include "detect/vocab.h"

#include "common/rdb_err.h"

#include <string.h>

static const char *const metric_names[DET_MET_COUNT] = {
    [DET_MET_NONE] = "",
    [DET_MET_LOSS] = "loss",
    [DET_MET_GRAD_NORM] = "grad_norm",
    [DET_MET_LR] = "lr",
    [DET_MET_LOSS_SCALE] = "loss_scale",
    [DET_MET_SKIPPED_STEPS] = "skipped_steps",
    [DET_MET_PHASE] = "step_time",
    [DET_MET_SAMPLES_PER_SEC] = "samples_per_sec",
    [DET_MET_TOKENS_PER_SEC] = "tokens_per_sec",
    [DET_MET_GPU_TEMP] = "gpu.temp",
    [DET_MET_GPU_POWER] = "gpu.power",
    [DET_MET_GPU_UTIL] = "gpu.util",
    [DET_MET_GPU_SM_CLOCK] = "gpu.sm_clock",
    [DET_MET_GPU_MEM_USED] = "gpu.mem.used",
    [DET_MET_GPU_ECC_CORRECTABLE] = "gpu.ecc.correctable",
    [DET_MET_GPU_ECC_UNCORRECTABLE] = "gpu.ecc.uncorrectable",
    [DET_MET_GPU_XID] = "gpu.xid",
    [DET_MET_COLLECTIVE_FAILURES] = "collective.failures",
    [DET_MET_RESTARTS] = "restarts",
    [DET_MET_CHECKPOINT_DURATION] = "checkpoint.duration",
    [DET_MET_CONFIG_HASH] = "config_hash",
    [DET_MET_WORLD_SIZE] = "world_size",
    [DET_MET_HEARTBEAT] = "heartbeat",
};

/* step_time.<phase>, indexed by phase (DET_PH_STEP is plain step_time). */
static const char *const phase_metric_names[DET_PH_COUNT] = {
    "step_time",	   "step_time.dataloader", "step_time.forward",	   "step_time.backward",
    "step_time.optimizer", "step_time.checkpoint", "step_time.collective",
};

static const char *const phase_names[DET_PH_COUNT] = {
    "step", "dataloader", "forward", "backward", "optimizer", "checkpoint", "collective",
};

/* Other spellings of phases, as span names or after "step_time.". */
static const struct {
	const char *word;
	uint8_t phase;
} phase_words[] = {
    {"data", DET_PH_DATALOADER},
    {"data_loader", DET_PH_DATALOADER},
    {"dataloader_wait", DET_PH_DATALOADER},
    {"data_wait", DET_PH_DATALOADER},
    {"fwd", DET_PH_FORWARD},
    {"bwd", DET_PH_BACKWARD},
    {"optim", DET_PH_OPTIMIZER},
    {"optimizer_step", DET_PH_OPTIMIZER},
    {"opt_step", DET_PH_OPTIMIZER},
    {"ckpt", DET_PH_CHECKPOINT},
    {"allreduce", DET_PH_COLLECTIVE},
    {"all_reduce", DET_PH_COLLECTIVE},
    {"comm", DET_PH_COLLECTIVE},
    {"nccl", DET_PH_COLLECTIVE},
    {"step_time", DET_PH_STEP},
};

const char *det_vocab_metric_name(struct det_metric_id id)
{
	if (id.metric == DET_MET_PHASE)
		return id.phase < DET_PH_COUNT ? phase_metric_names[id.phase] : "";
	return id.metric < DET_MET_COUNT ? metric_names[id.metric] : "";
}

const char *det_vocab_phase_name(unsigned phase)
{
	return phase < DET_PH_COUNT ? phase_names[phase] : "";
}

static int eq(const char *a, size_t alen, const char *b)
{
	return strlen(b) == alen && memcmp(a, b, alen) == 0;
}

int det_vocab_canonical(const char *name, size_t len, struct det_metric_id *out)
{
	for (unsigned p = 0; p < DET_PH_COUNT; p++) {
		if (eq(name, len, phase_metric_names[p])) {
			*out = (struct det_metric_id){DET_MET_PHASE, (uint8_t)p};
			return 0;
		}
	}
	for (unsigned m = 1; m < DET_MET_COUNT; m++) {
		if (m != DET_MET_PHASE && eq(name, len, metric_names[m])) {
			*out = (struct det_metric_id){(uint8_t)m, 0};
			return 0;
		}
	}
	return RDB_ENOTFOUND;
}

int det_vocab_phase(const char *name, size_t len)
{
	for (unsigned p = 0; p < DET_PH_COUNT; p++)
		if (eq(name, len, phase_names[p]))
			return (int)p;
	for (size_t i = 0; i < sizeof(phase_words) / sizeof(phase_words[0]); i++)
		if (eq(name, len, phase_words[i].word))
			return phase_words[i].phase;
	return -1;
}

const char *det_vocab_phase_word(size_t i, unsigned *phase)
{
	if (i >= sizeof(phase_words) / sizeof(phase_words[0]))
		return NULL;
	*phase = phase_words[i].phase;
	return phase_words[i].word;
}
