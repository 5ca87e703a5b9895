/* batch_codec.c - the WAL encoding of write batches: a point batch as a
 * STO_WAL_REC_POINTS payload and an event batch as the events payload of a
 * STO_WAL_REC_BATCH record (storage/format.h has both layouts). The batches
 * themselves are the data model's (model/batch.h, model/events.h); this
 * file is where they meet the on-disk format. Decoders treat their input as
 * hostile: they replay WAL payloads. Pure functions.
 */
#include "storage/wal/batch_codec.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "storage/format.h"

#include <errno.h>
#include <string.h>

int sto_batch_encode(const struct mdl_batch *b, struct rdb_buf *out)
{
	return sto_batch_encode_sel(b, NULL, out);
}

int sto_batch_encode_sel(const struct mdl_batch *b, const bool *keep, struct rdb_buf *out)
{
	size_t nseries = mdl_batch_nseries(b), nkept = 0;
	size_t need = 4;
	for (size_t i = 0; i < nseries; i++) {
		const struct mdl_batch_series *s = mdl_batch_series_at(b, i);
		if (!s)
			return -ENOMEM;
		if (keep && !keep[i])
			continue;
		nkept++;
		need += 1 + 4 + 2 + 4 + (size_t)s->job_len + s->metric_len +
			s->pts.n * STO_WAL_POINT_SIZE;
	}
	size_t start = out->len;
	int rc = rdb_buf_reserve(out, need);
	if (rc)
		return rc;
	uint8_t *p = out->data + out->len;
	rdb_put_le32(p, (uint32_t)nkept);
	p += 4;
	for (size_t i = 0; i < nseries; i++) {
		const struct mdl_batch_series *s = mdl_batch_series_at(b, i);
		if (!s)
			return -ENOMEM;
		if (keep && !keep[i])
			continue;
		size_t jl = s->job_len, ml = s->metric_len;
		*p++ = (uint8_t)jl;
		memcpy(p, s->key.job, jl);
		p += jl;
		rdb_put_le32(p, s->key.rank);
		p += 4;
		rdb_put_le16(p, (uint16_t)ml);
		p += 2;
		memcpy(p, s->key.metric, ml);
		p += ml;
		rdb_put_le32(p, (uint32_t)s->pts.n);
		p += 4;
		for (size_t k = 0; k < s->pts.n; k++) {
			rdb_put_le64(p, (uint64_t)s->pts.ts_ns[k]);
			rdb_put_le64(p + 8, (uint64_t)s->pts.step[k]);
			rdb_put_le32(p + 16, s->pts.attempt[k]);
			rdb_put_le64(p + 20, s->pts.value[k]);
			p += STO_WAL_POINT_SIZE;
		}
	}
	out->len = start + (size_t)(p - (out->data + start));
	return 0;
}

int sto_batch_decode(struct mdl_batch *b, const uint8_t *p, size_t len)
{
	mdl_batch_reset(b);
	const uint8_t *end = p + len;
	if (len < 4)
		return RDB_ECORRUPT;
	uint32_t nseries = rdb_get_le32(p);
	p += 4;
	for (uint32_t i = 0; i < nseries; i++) {
		if (end - p < 1)
			return RDB_ECORRUPT;
		size_t jl = *p++;
		if ((size_t)(end - p) < jl + 4 + 2 || !mdl_job_valid((const char *)p, jl))
			return RDB_ECORRUPT;
		const char *job = (const char *)p;
		p += jl;
		uint32_t rank = rdb_get_le32(p);
		size_t ml = rdb_get_le16(p + 4);
		p += 6;
		if ((size_t)(end - p) < ml + 4 || !mdl_metric_valid((const char *)p, ml))
			return RDB_ECORRUPT;
		const char *metric = (const char *)p;
		p += ml;
		uint32_t n = rdb_get_le32(p);
		p += 4;
		if ((size_t)(end - p) / STO_WAL_POINT_SIZE < n)
			return RDB_ECORRUPT;
		for (uint32_t k = 0; k < n; k++, p += STO_WAL_POINT_SIZE) {
			int rc =
			    mdl_batch_add(b, job, jl, rank, metric, ml, (int64_t)rdb_get_le64(p),
					  (int64_t)rdb_get_le64(p + 8), rdb_get_le32(p + 16),
					  rdb_get_le64(p + 20));
			if (rc)
				return rc;
		}
	}
	return p == end ? 0 : RDB_ECORRUPT;
}

/* Record layout (all LE): u32 count, then per event: u8 kind, u8 level,
 * u32 rank, u32 attempt, i64 ts, i64 step, i64 duration, u8 job_len, job,
 * u32 text_len, text, u32 fields_len, fields. */
#define EV_FIXED 39u

int sto_events_encode(const struct mdl_events *b, struct rdb_buf *out)
{
	size_t n = mdl_events_count(b);
	size_t need = 4;
	for (size_t i = 0; i < n; i++) {
		const struct mdl_event *e = mdl_events_at(b, i);
		need += EV_FIXED + 1 + 4 + 4 + e->job_len + e->text_len + e->fields_len;
	}
	int rc = rdb_buf_reserve(out, need);
	if (rc)
		return rc;
	uint8_t *p = out->data + out->len;
	rdb_put_le32(p, (uint32_t)n);
	p += 4;
	for (size_t i = 0; i < n; i++) {
		const struct mdl_event *e = mdl_events_at(b, i);
		p[0] = e->kind;
		p[1] = e->level;
		rdb_put_le32(p + 2, e->rank);
		rdb_put_le32(p + 6, e->attempt);
		rdb_put_le64(p + 10, (uint64_t)e->ts_ns);
		rdb_put_le64(p + 18, (uint64_t)e->step);
		rdb_put_le64(p + 26, (uint64_t)e->duration_ns);
		p[34] = (uint8_t)e->job_len;
		p += 35;
		memcpy(p, e->job, e->job_len);
		p += e->job_len;
		rdb_put_le32(p, (uint32_t)e->text_len);
		memcpy(p + 4, e->text, e->text_len);
		p += 4 + e->text_len;
		rdb_put_le32(p, (uint32_t)e->fields_len);
		memcpy(p + 4, e->fields, e->fields_len);
		p += 4 + e->fields_len;
	}
	out->len = (size_t)(p - out->data);
	return 0;
}

int sto_events_decode(struct mdl_events *b, const uint8_t *p, size_t len)
{
	mdl_events_reset(b);
	const uint8_t *end = p + len;
	if (len < 4)
		return RDB_ECORRUPT;
	uint32_t n = rdb_get_le32(p);
	p += 4;
	for (uint32_t i = 0; i < n; i++) {
		struct mdl_event e;
		if ((size_t)(end - p) < 35)
			return RDB_ECORRUPT;
		e.kind = p[0];
		e.level = p[1];
		e.rank = rdb_get_le32(p + 2);
		e.attempt = rdb_get_le32(p + 6);
		e.ts_ns = (int64_t)rdb_get_le64(p + 10);
		e.step = (int64_t)rdb_get_le64(p + 18);
		e.duration_ns = (int64_t)rdb_get_le64(p + 26);
		e.job_len = p[34];
		p += 35;
		if ((size_t)(end - p) < e.job_len + 4 || !mdl_job_valid((const char *)p, e.job_len))
			return RDB_ECORRUPT;
		e.job = (const char *)p;
		p += e.job_len;
		e.text_len = rdb_get_le32(p);
		p += 4;
		if ((size_t)(end - p) < e.text_len + 4)
			return RDB_ECORRUPT;
		e.text = (const char *)p;
		p += e.text_len;
		e.fields_len = rdb_get_le32(p);
		p += 4;
		if ((size_t)(end - p) < e.fields_len)
			return RDB_ECORRUPT;
		e.fields = (const char *)p;
		p += e.fields_len;
		int rc = mdl_events_add(b, &e);
		if (rc)
			return rc == RDB_EINVAL ? RDB_ECORRUPT : rc;
	}
	return p == end ? 0 : RDB_ECORRUPT;
}
