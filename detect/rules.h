/* rules.h - detection rules: the built-in table of detectors (alert name,
 * on/off, `for` duration, severity, named numeric parameters with default,
 * bounds and documentation), metric aliases, and the operator's rules file
 * on top of them.
 *
 * Rules file (UTF-8 text, at most DET_RULES_FILE_MAX bytes; lines at most
 * 4095 bytes; '#' starts a comment outside double quotes; blank lines
 * ignored):
 *
 *   [rule Straggler]          # settings of one built-in detector
 *   enabled = false           # true | false
 *   for = 2m                  # pending this long before firing: N[s|m|h|d]
 *   severity = critical       # warning | critical
 *   rel = 0.25                # a parameter of the detector (det_rule_spec)
 *   webhook = http://ctl:8080/hook   # up to DET_WEBHOOKS_MAX lines; the
 *                                    # first replaces the inherited list
 *   [job "team-a-*"]          # overrides for jobs matching a glob (* ?)
 *   Straggler.enabled = true  # Rule.key = value, any key of a [rule]
 *   [aliases]
 *   my.loss = loss            # metric name = canonical vocabulary name
 *
 * Keys before the first section are an error. A [rule] section may appear
 * once per detector; a key once per section (webhook excepted). Every
 * matching [job] section applies, in file order, on top of the [rule]
 * sections. A value may be double-quoted (no escapes). A bad file is
 * refused whole: the error names file:line, the section and option, what
 * is wrong and what is allowed.
 *
 * Threading: a struct det_rules is immutable once built; any number of
 * threads may read it (resolve, metric lookup) concurrently. Building and
 * freeing are the caller's to serialise against readers.
 */
#ifndef DET_RULES_H
#define DET_RULES_H

#include "detect/cond.h"
#include "detect/vocab.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rdb_buf;

#define DET_RULES_FILE_MAX  (1u << 20) /* largest rules file, bytes */
#define DET_RULES_JOBS_MAX  256	       /* [job] sections */
#define DET_RULES_ALIAS_MAX 1024       /* [aliases] entries */
#define DET_PARAMS_MAX	    8	       /* parameters of one rule */

/* The built-in detectors; the value indexes det_rule_spec() and the
 * resolved table. */
enum det_rule_id {
	DET_R_LOSS_NON_FINITE = 0,
	DET_R_LOSS_SPIKE,
	DET_R_LOSS_DIVERGENCE,
	DET_R_GRAD_NORM_SPIKE,
	DET_R_LOSS_SCALE_COLLAPSE,
	DET_R_TRAINING_HANG,
	DET_R_RANK_DOWN,
	DET_R_JOB_DOWN,
	DET_R_THROUGHPUT_DROP,
	DET_R_STRAGGLER,
	DET_R_GPU_OVERHEAT,
	DET_R_GPU_ECC_ERRORS,
	DET_R_CONFIG_MISMATCH,
	DET_R_CHECKPOINT_STALE,
	DET_R_MFU_LOW,
	DET_RULE_COUNT
};

/* Parameter indexes per detector (into det_rule_eff.p). LossSpike and
 * GradNormSpike share one layout (DET_P_SP_*). */
enum { DET_P_NF_CLEAR_STEPS, DET_P_NF_HOLD_S, DET_P_NF_JOB_FRACTION, DET_P_NF_SETTLE_S };
enum {
	DET_P_SP_WINDOW,
	DET_P_SP_WARMUP,
	DET_P_SP_K,
	DET_P_SP_REL,
	DET_P_SP_CLEAR_STEPS,
	DET_P_SP_HOLD_S,
	DET_P_SP_JOB_FRACTION,
	DET_P_SP_SETTLE_S
};
enum {
	DET_P_DV_BLOCK,
	DET_P_DV_RISING,
	DET_P_DV_REL,
	DET_P_DV_MIN_BLOCKS,
	DET_P_DV_JOB_FRACTION,
	DET_P_DV_SETTLE_S,
	DET_P_DV_K
};
enum {
	DET_P_LS_FLOOR,
	DET_P_LS_HALVINGS,
	DET_P_LS_SKIPPED,
	DET_P_LS_WINDOW_STEPS,
	DET_P_LS_JOB_FRACTION
};
enum { DET_P_HG_MIN_S, DET_P_HG_STEP_MULT, DET_P_HG_MIN_MOVES };
enum { DET_P_RD_SILENCE_S };
enum { DET_P_JD_SILENCE_S, DET_P_JD_MAX_SILENCE_S };
enum { DET_P_TP_DROP, DET_P_TP_SAMPLE_S, DET_P_TP_BASELINE_S, DET_P_TP_WARMUP_S };
enum {
	DET_P_ST_K,
	DET_P_ST_REL,
	DET_P_ST_WINDOW,
	DET_P_ST_HITS,
	DET_P_ST_MIN_RANKS,
	DET_P_ST_SKIP_STEPS
};
enum { DET_P_GO_TEMP_C, DET_P_GO_THROTTLE, DET_P_GO_UTIL_MIN, DET_P_GO_WARMUP };
enum { DET_P_EC_HOLD_S };
enum { DET_P_CM_GRACE_S };
enum { DET_P_CK_MAX_AGE_S, DET_P_CK_ALWAYS };
enum { DET_P_MF_FLOOR, DET_P_MF_WARMUP_S };

/* One named numeric parameter of a detector. */
struct det_param_spec {
	const char *name;     /* key in the rules file */
	double def, min, max; /* default and inclusive bounds */
	bool integer;	      /* whole numbers only */
	const char *doc;      /* one or two sentences, with the unit */
};

/* One built-in detector. */
struct det_rule_spec {
	const char *alertname; /* fixed name, e.g. "Straggler" */
	bool enabled;	       /* default on/off */
	uint32_t for_s;	       /* default `for` */
	uint8_t severity;      /* default, enum det_severity */
	const char *doc;       /* what it detects, for the sample file and docs */
	uint32_t nparams;
	struct det_param_spec params[DET_PARAMS_MAX];
};

/* The rule in force for one job: defaults, [rule] and matching [job]
 * sections applied. Webhook strings are owned by the struct det_rules it
 * was resolved from and live as long as it. */
struct det_rule_eff {
	bool enabled;
	uint8_t severity; /* enum det_severity */
	uint32_t for_s;
	double p[DET_PARAMS_MAX];
	uint32_t nwebhooks;
	const char *webhooks[DET_WEBHOOKS_MAX];
};

struct det_rules; /* opaque, immutable once built */

/* The built-in spec of detector id (< DET_RULE_COUNT), or NULL. Static. */
const struct det_rule_spec *det_rule_spec(unsigned id);
/* The id of an alert name (exact), or -1. */
int det_rule_by_name(const char *alertname);

/* Builds the built-in rules (no file). 0 or -ENOMEM; *out owned by the
 * caller (det_rules_free). Does not block. */
int det_rules_default(struct det_rules **out);

/* Parses a rules file held in memory; name is used in error messages
 * ("name:line: ..."). On success *out is a new rule set owned by the
 * caller. On failure returns RDB_EINVAL (RDB_ELIMIT if len is larger than
 * DET_RULES_FILE_MAX, -ENOMEM), *out is untouched and
 * err (if not NULL) holds one line naming where, what and what is allowed.
 * text need not be NUL-terminated. Does not block. */
int det_rules_parse_text(const char *text, size_t len, const char *name, struct det_rules **out,
			 char *err, size_t errlen);

/* Reads and parses the file at path (blocks on the read). As
 * det_rules_parse_text; -errno if it cannot be read, RDB_ELIMIT if it is
 * larger than DET_RULES_FILE_MAX. */
int det_rules_load_file(const char *path, struct det_rules **out, char *err, size_t errlen);

/* Frees a rule set. NULL ok. The caller makes sure no engine still uses
 * it (det_engine_set_rules to another set first). */
void det_rules_free(struct det_rules *r);

/* Fills out[DET_RULE_COUNT] with the rules in force for job (job_len
 * bytes). Cannot fail. */
void det_rules_resolve(const struct det_rules *r, const char *job, size_t job_len,
		       struct det_rule_eff out[DET_RULE_COUNT]);

/* Resolves a metric name as sent (canonical, built-in or operator alias,
 * step_time.<phase word>). Unknown names give {DET_MET_NONE, 0}. One hash
 * of the name and a probe or two; thread-safe. */
struct det_metric_id det_rules_metric(const struct det_rules *r, const char *name, size_t len);
/* det_rules_metric with the name's hash already made: hash must be
 * mdl_metric_hash(name, len) (model/batch.h; a batch series carries it as
 * metric_hash). No hashing; thread-safe. */
struct det_metric_id det_rules_metric_hashed(const struct det_rules *r, const char *name,
					     size_t len, uint64_t hash);

/* Number of [job] sections and operator aliases (for the reload log line). */
void det_rules_counts(const struct det_rules *r, size_t *job_sections, size_t *aliases);

/* Appends the built-in defaults as a documented rules file (every detector,
 * every parameter with its default, bounds and meaning; the built-in
 * aliases as comments) to out. Parsing the result gives the built-in
 * rules. 0, -ENOMEM or RDB_ELIMIT (out's bound). */
int det_rules_sample(struct rdb_buf *out);

#endif
