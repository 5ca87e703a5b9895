/* series.h - the data model's names and bounds: the series key (job, rank,
 * metric), the job-level pseudo-rank, "no step", the value bits of null,
 * and the validation of job ids and metric names. Plain value types and
 * pure functions; everything that parses, stores or queries points agrees
 * on these.
 */
#ifndef MDL_SERIES_H
#define MDL_SERIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MDL_JOB_MAX    128u	   /* job id bytes, [A-Za-z0-9._-] */
#define MDL_METRIC_MAX 256u	   /* metric name bytes */
#define MDL_RANK_JOB   0xffffffffu /* the job-level pseudo-rank */
#define MDL_RANK_MAX   0x7fffffffu /* largest real rank */
#define MDL_STEP_NONE  INT64_MIN   /* "this point has no step" */

/* Value bits for a JSON null ("no value"): a quiet NaN with payload 1, so it
 * is stored like any NaN and read back as null. The plain NaN that clients
 * send as NaN / "NaN" is the canonical quiet NaN 0x7ff8000000000000. */
#define MDL_VALUE_NULL_BITS 0x7ff8000000000001ull
#define MDL_VALUE_NAN_BITS  0x7ff8000000000000ull

struct mdl_series_key {
	char job[MDL_JOB_MAX + 1];	 /* NUL-terminated */
	uint32_t rank;			 /* MDL_RANK_JOB for the job-level pseudo-rank */
	char metric[MDL_METRIC_MAX + 1]; /* NUL-terminated */
};

/* Validates a job id ([A-Za-z0-9._-]{1,128}). */
bool mdl_job_valid(const char *job, size_t len);
/* Validates a metric name: 1..MDL_METRIC_MAX bytes of printable ASCII other
 * than space, '"', '\\' and '{' '}' ','. ';' and '=' are allowed: line
 * protocol appends extra tags as ";key=value" (ingest/lp.h). */
bool mdl_metric_valid(const char *metric, size_t len);

#endif
