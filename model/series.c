/* series.c - validation of job ids and metric names. Pure functions. */
#include "model/series.h"

bool mdl_job_valid(const char *job, size_t len)
{
	if (len == 0 || len > MDL_JOB_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)job[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
		if (!ok)
			return false;
	}
	return true;
}

bool mdl_metric_valid(const char *metric, size_t len)
{
	if (len == 0 || len > MDL_METRIC_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)metric[i];
		if (c <= 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '{' || c == '}' ||
		    c == ',')
			return false;
	}
	return true;
}
