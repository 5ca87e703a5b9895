/* cond.h - the value types that flow through detection: a condition (what
 * a detector says holds right now) and an alert (a condition's lifecycle:
 * pending -> firing -> resolved). Plain value types shared by the detector
 * engine (engine.c), the alert lifecycle (alerts.c), delivery (notify.c)
 * and the glue that feeds them (detect.c). No functions here.
 *
 * Identity: an alert is one (alertname, job, rank, phase, metric); however
 * many points confirm it, there is one alert per identity. rank is
 * DET_RANK_NONE for job-level alerts; phase and metric are "" when they do
 * not apply.
 */
#ifndef DET_COND_H
#define DET_COND_H

#include <stdbool.h>
#include <stdint.h>

#define DET_RANK_NONE	 (-1) /* job-level alert: no rank label */
#define DET_NAME_MAX	 48   /* alertname, phase: bytes incl. NUL */
#define DET_JOB_MAX	 129  /* job id [A-Za-z0-9._-]{1,128} incl. NUL */
#define DET_METRIC_MAX	 128  /* metric label bytes incl. NUL (longer: cut) */
#define DET_SUMMARY_MAX	 256  /* annotation "summary" incl. NUL */
#define DET_DESC_MAX	 1024 /* annotation "description" incl. NUL */
#define DET_WEBHOOKS_MAX 4    /* webhook URLs one rule may name */
#define DET_URL_MAX	 512  /* one URL incl. NUL */

enum det_severity {
	DET_SEV_WARNING = 0,
	DET_SEV_CRITICAL = 1,
};

/* What a detector asserts about one identity at one evaluation. The set of
 * conditions an evaluation returns is complete: an active alert whose
 * identity is not in the set has cleared. */
struct det_cond {
	char alertname[DET_NAME_MAX]; /* fixed names: LossNonFinite, Straggler, ... */
	char job[DET_JOB_MAX];
	int64_t rank;			/* DET_RANK_NONE: job-level */
	char phase[DET_NAME_MAX];	/* "forward", "dataloader", ... or "" */
	char metric[DET_METRIC_MAX];	/* "loss", "grad_norm", ... or "" */
	uint8_t severity;		/* enum det_severity, from the rule */
	uint32_t for_s;			/* pending this long before firing (rule) */
	char summary[DET_SUMMARY_MAX];	/* one line for a person */
	char description[DET_DESC_MAX]; /* the numbers that justify it */
	double value;			/* the observed value (NAN if none) */
	double baseline;		/* what it was compared with (NAN if none) */
	int64_t step;			/* step where it was seen; INT64_MIN if none */
	uint32_t nwebhooks;		/* webhook URLs of the rule (0..DET_WEBHOOKS_MAX) */
	char webhooks[DET_WEBHOOKS_MAX][DET_URL_MAX];
};

enum det_alert_state {
	DET_ALERT_PENDING = 0,
	DET_ALERT_FIRING = 1,
	DET_ALERT_RESOLVED = 2,
};

/* An alert: a condition plus its lifecycle. Times are server wall-clock
 * nanoseconds (CLOCK_REALTIME). */
struct det_alert {
	struct det_cond c;  /* the latest condition seen for the identity */
	uint8_t state;	    /* enum det_alert_state */
	int64_t active_ns;  /* the condition was first seen (pending since) */
	int64_t starts_ns;  /* firing since (0 while pending) */
	int64_t ends_ns;    /* resolved at (0 while active) */
	int64_t updated_ns; /* last evaluation that touched it */
	uint64_t id;	    /* unique per process; stable while the alert lives */
};

#endif
