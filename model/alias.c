/* alias.c - the built-in metric alias table (contract: model/alias.h).
 * Linear scans over a small static table: callers resolve a name once per
 * query or per rule-set build, never per point. */
#include "model/alias.h"

#include <string.h>

/* DCGM_FI_DEV_FB_USED is MiB while gpu.mem.used is bytes; no detector reads
 * it, so the unit difference is harmless there. The volatile (since driver
 * load) ECC totals are mapped, not the aggregate ones: mapping both onto
 * one name would make their different values look like increases. */
static const struct {
	const char *alias, *canonical;
} builtin_aliases[] = {
    {"train.loss", "loss"},
    {"train.grad_norm", "grad_norm"},
    {"train.lr", "lr"},
    {"train.loss_scale", "loss_scale"},
    {"train.step_time", "step_time"},
    {"samples_per_second", "samples_per_sec"},
    {"tokens_per_second", "tokens_per_sec"},
    {"gpu.temp_c", "gpu.temp"},
    {"DCGM_FI_DEV_GPU_TEMP", "gpu.temp"},
    {"DCGM_FI_DEV_POWER_USAGE", "gpu.power"},
    {"DCGM_FI_DEV_SM_CLOCK", "gpu.sm_clock"},
    {"DCGM_FI_DEV_GPU_UTIL", "gpu.util"},
    {"DCGM_FI_DEV_FB_USED", "gpu.mem.used"},
    {"DCGM_FI_DEV_XID_ERRORS", "gpu.xid"},
    {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "gpu.ecc.uncorrectable"},
    {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "gpu.ecc.correctable"},
};

const char *mdl_metric_alias(size_t i, const char **canonical)
{
	if (i >= sizeof(builtin_aliases) / sizeof(builtin_aliases[0]))
		return NULL;
	*canonical = builtin_aliases[i].canonical;
	return builtin_aliases[i].alias;
}

const char *mdl_metric_canonical(const char *name)
{
	for (size_t i = 0; i < sizeof(builtin_aliases) / sizeof(builtin_aliases[0]); i++)
		if (strcmp(name, builtin_aliases[i].alias) == 0)
			return builtin_aliases[i].canonical;
	return name;
}

bool mdl_metric_same(const char *a, const char *b)
{
	return strcmp(mdl_metric_canonical(a), mdl_metric_canonical(b)) == 0;
}
