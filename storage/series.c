/* series.c - the on-disk series key record and chunk statistics. Pure
 * functions. */
#include "storage/series.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"

#include <math.h>
#include <string.h>

size_t sto_key_rec_len(const struct mdl_series_key *k)
{
	return 1 + strlen(k->job) + 4 + 2 + strlen(k->metric);
}

void sto_key_rec_put(uint8_t *p, const struct mdl_series_key *k)
{
	size_t jl = strlen(k->job), ml = strlen(k->metric);
	*p++ = (uint8_t)jl;
	memcpy(p, k->job, jl);
	p += jl;
	rdb_put_le32(p, k->rank);
	rdb_put_le16(p + 4, (uint16_t)ml);
	memcpy(p + 6, k->metric, ml);
}

int sto_key_rec_get(const uint8_t *p, size_t len, struct mdl_series_key *k, size_t *used)
{
	memset(k, 0, sizeof(*k));
	if (len < 1)
		return RDB_ECORRUPT;
	size_t jl = p[0];
	if (jl == 0 || jl > MDL_JOB_MAX || len < 1 + jl + 6 ||
	    !mdl_job_valid((const char *)p + 1, jl))
		return RDB_ECORRUPT;
	size_t ml = rdb_get_le16(p + 5 + jl);
	if (ml > MDL_METRIC_MAX || len - (1 + jl + 6) < ml ||
	    (ml && !mdl_metric_valid((const char *)p + 7 + jl, ml)))
		return RDB_ECORRUPT;
	memcpy(k->job, p + 1, jl);
	k->rank = rdb_get_le32(p + 1 + jl);
	memcpy(k->metric, p + 7 + jl, ml);
	*used = 1 + jl + 6 + ml;
	return 0;
}

void sto_chunk_stats_compute(const struct mdl_cols *c, struct sto_chunk_stats *out)
{
	struct sto_chunk_stats s;
	memset(&s, 0, sizeof(s));
	s.count = (uint32_t)c->n;
	s.min_ts_ns = INT64_MAX;
	s.max_ts_ns = INT64_MIN;
	s.min_step = MDL_STEP_NONE;
	s.max_step = MDL_STEP_NONE;
	s.min_attempt = UINT32_MAX;
	size_t first = 0, last = 0;
	bool have_value = false;
	for (size_t i = 0; i < c->n; i++) {
		int64_t ts = c->ts_ns[i];
		/* first/last: smallest/largest (ts, step); ties keep the earliest index */
		if (ts < c->ts_ns[first] || (ts == c->ts_ns[first] && c->step[i] < c->step[first]))
			first = i;
		if (ts > c->ts_ns[last] || (ts == c->ts_ns[last] && c->step[i] >= c->step[last]))
			last = i;
		if (ts < s.min_ts_ns)
			s.min_ts_ns = ts;
		if (ts > s.max_ts_ns)
			s.max_ts_ns = ts;
		int64_t st = c->step[i];
		if (st != MDL_STEP_NONE) {
			s.step_count++;
			if (s.min_step == MDL_STEP_NONE || st < s.min_step)
				s.min_step = st;
			if (s.max_step == MDL_STEP_NONE || st > s.max_step)
				s.max_step = st;
		}
		if (c->attempt[i] < s.min_attempt)
			s.min_attempt = c->attempt[i];
		if (c->attempt[i] > s.max_attempt)
			s.max_attempt = c->attempt[i];
		double v = rdb_bits_f64(c->value[i]);
		if (isnan(v)) {
			s.nan_count++;
			continue;
		}
		if (!have_value) {
			s.min = v;
			s.max = v;
			have_value = true;
		} else {
			if (v < s.min || (v == 0 && s.min == 0 && signbit(v)))
				s.min = v;
			if (v > s.max)
				s.max = v;
		}
		s.sum += v;
	}
	if (c->n == 0) {
		s.min_ts_ns = 0;
		s.max_ts_ns = 0;
		s.min_attempt = 0;
	} else {
		s.first = c->value[first];
		s.last = c->value[last];
	}
	*out = s;
}
