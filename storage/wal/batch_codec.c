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
#include "common/rdb_varint.h"
#include "storage/format.h"

#include <errno.h>
#include <string.h>

int sto_batch_encode(const struct mdl_batch *b, struct rdb_buf *out)
{
	return sto_batch_encode_sel(b, NULL, out);
}

size_t sto_batch_encoded_size(const struct mdl_batch *b, const bool *keep, size_t *nkept)
{
	size_t nseries = mdl_batch_nseries(b), kept = 0, need = 4;
	for (size_t i = 0; i < nseries; i++) {
		const struct mdl_batch_series *s = mdl_batch_series_at(b, i);
		if (!s || (keep && !keep[i]))
			continue;
		kept++;
		need += 1 + 4 + 2 + 4 + (size_t)s->job_len + s->metric_len +
			s->pts.n * STO_WAL_POINT_SIZE;
	}
	if (nkept)
		*nkept = kept;
	return need;
}

int sto_batch_encode_sel(const struct mdl_batch *b, const bool *keep, struct rdb_buf *out)
{
	size_t nseries = mdl_batch_nseries(b), nkept;
	size_t need = sto_batch_encoded_size(b, keep, &nkept);
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

int sto_batch_split(const uint8_t *p, size_t len, struct sto_batch_parts *out)
{
	const uint8_t *end = p + len;
	if (len < 1 || p[0] > STO_BATCH_ID_MAX || len - 1 < p[0])
		return RDB_ECORRUPT;
	out->id_len = p[0];
	out->id = (const char *)p + 1;
	p += 1 + out->id_len;
	const uint8_t **part[2] = {&out->points, &out->events};
	size_t *plen[2] = {&out->points_len, &out->events_len};
	for (int i = 0; i < 2; i++) {
		if (end - p < 4 || (size_t)(end - p - 4) < rdb_get_le32(p))
			return RDB_ECORRUPT;
		*plen[i] = rdb_get_le32(p);
		*part[i] = p + 4;
		p += 4 + *plen[i];
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

/* ---- Series definitions and compact points -------------------------------
 * Integers in the compact payload are LEB128 varints (7 bits a byte, low
 * first, at most 10 bytes for 64 bits); signed quantities are zigzag
 * encoded ((d << 1) ^ (d >> 63)), all of it computed in uint64_t so that
 * any delta, e.g. from a step to MDL_STEP_NONE, wraps instead of
 * overflowing. Both come from common/rdb_varint.h, which the chunk codec
 * uses too. */

#define CPT_MIN_POINT  (3u + 8u) /* three 1-byte deltas and the value */
#define CPT_MIN_SERIES 2u	 /* two 1-byte varints */
#define CPT_MAX_POINT  (3u * RDB_VARINT_MAX + 8u)
#define CPT_MAX_SERIES (2u * RDB_VARINT_MAX)

int sto_defs_add(struct rdb_buf *out, size_t start, uint64_t sid, const struct sto_wal_key *k)
{
	bool first = out->len == start;
	size_t need = (first ? 4 : 0) + STO_WAL_DEF_FIXED_BYTES + k->job_len + k->metric_len;
	if (sid == 0 || k->job_len < 1 || k->job_len > MDL_JOB_MAX || k->metric_len < 1 ||
	    k->metric_len > MDL_METRIC_MAX || out->len < start)
		return -EINVAL;
	int rc = rdb_buf_reserve(out, need);
	if (rc)
		return rc;
	uint8_t *p = out->data + out->len;
	if (first) {
		rdb_put_le32(p, 0);
		p += 4;
	}
	rdb_put_le64(p, sid);
	p[8] = (uint8_t)k->job_len;
	memcpy(p + 9, k->job, k->job_len);
	p += 9 + k->job_len;
	rdb_put_le32(p, k->rank);
	rdb_put_le16(p + 4, k->metric_len);
	memcpy(p + 6, k->metric, k->metric_len);
	out->len += need;
	uint8_t *cnt = out->data + start;
	rdb_put_le32(cnt, rdb_get_le32(cnt) + 1);
	return 0;
}

/* Parses the definition at *p into sid/k; advances *p. 0 or RDB_ECORRUPT
 * (also for series id 0: ids start at 1). Every check a definition needs
 * is here, so that sto_defs_decode can refuse a record before applying
 * any of it. */
static int def_parse(const uint8_t **pp, const uint8_t *end, uint64_t *sid, struct sto_wal_key *k)
{
	const uint8_t *p = *pp;
	if ((size_t)(end - p) < 9)
		return RDB_ECORRUPT;
	*sid = rdb_get_le64(p);
	if (*sid == 0)
		return RDB_ECORRUPT;
	k->job_len = p[8];
	p += 9;
	if ((size_t)(end - p) < (size_t)k->job_len + 6 ||
	    !mdl_job_valid((const char *)p, k->job_len))
		return RDB_ECORRUPT;
	k->job = (const char *)p;
	p += k->job_len;
	k->rank = rdb_get_le32(p);
	k->metric_len = rdb_get_le16(p + 4);
	p += 6;
	if ((size_t)(end - p) < k->metric_len || !mdl_metric_valid((const char *)p, k->metric_len))
		return RDB_ECORRUPT;
	k->metric = (const char *)p;
	*pp = p + k->metric_len;
	return 0;
}

int sto_defs_decode(const uint8_t *p, size_t len, sto_defs_fn fn, void *arg)
{
	const uint8_t *end = p + len;
	if (len < 4)
		return RDB_ECORRUPT;
	uint32_t n = rdb_get_le32(p);
	if (n > (len - 4) / (STO_WAL_DEF_FIXED_BYTES + 2))
		return RDB_ECORRUPT;
	uint64_t sid;
	struct sto_wal_key k;
	const uint8_t *q = p + 4;
	for (uint32_t i = 0; i < n; i++)
		if (def_parse(&q, end, &sid, &k))
			return RDB_ECORRUPT;
	if (q != end)
		return RDB_ECORRUPT;
	q = p + 4;
	for (uint32_t i = 0; i < n; i++) {
		(void)def_parse(&q, end, &sid, &k);
		int rc = fn(arg, sid, &k);
		if (rc)
			return rc;
	}
	return 0;
}

/* The delta base: the previous point of the series, or for a series'
 * first point the first point of the series before it in the record (0
 * for the record's first series). */
struct cpt_base {
	uint64_t ts, step, attempt;
};

int sto_batch_encode_compact(const struct mdl_batch *b, const uint64_t *sids, struct rdb_buf *out)
{
	size_t nseries = mdl_batch_nseries(b);
	size_t need = 4 + nseries * CPT_MAX_SERIES + mdl_batch_points(b) * CPT_MAX_POINT;
	if (nseries > UINT32_MAX)
		return RDB_ELIMIT;
	int rc = rdb_buf_reserve(out, need);
	if (rc)
		return rc;
	uint8_t *start = out->data + out->len, *p = start + 4;
	rdb_put_le32(start, (uint32_t)nseries);
	struct cpt_base first = {0};
	uint64_t prev_sid = 0;
	for (size_t i = 0; i < nseries; i++) {
		const struct mdl_batch_series *s = mdl_batch_series_at(b, i);
		p += rdb_varint_put(p, rdb_zigzag(sids[i] - prev_sid));
		p += rdb_varint_put(p, s->pts.n);
		prev_sid = sids[i];
		struct cpt_base at = first;
		for (size_t k = 0; k < s->pts.n; k++) {
			struct cpt_base v = {(uint64_t)s->pts.ts_ns[k], (uint64_t)s->pts.step[k],
					     s->pts.attempt[k]};
			p += rdb_varint_put(p, rdb_zigzag(v.ts - at.ts));
			p += rdb_varint_put(p, rdb_zigzag(v.step - at.step));
			p += rdb_varint_put(p, rdb_zigzag(v.attempt - at.attempt));
			rdb_put_le64(p, s->pts.value[k]);
			p += 8;
			if (k == 0)
				first = v;
			at = v;
		}
	}
	out->len += (size_t)(p - start);
	return 0;
}

/* Walks the npoints points of one series of a compact payload, adding
 * them to b under k (b NULL: checks them only). */
static int cpt_points(struct mdl_batch *b, const struct sto_wal_key *k, uint64_t npoints,
		      const uint8_t **pp, const uint8_t *end, struct cpt_base *first)
{
	struct cpt_base at = *first;
	for (uint64_t i = 0; i < npoints; i++) {
		uint64_t d[3];
		for (int f = 0; f < 3; f++)
			if (rdb_varint_get(pp, end, &d[f]))
				return RDB_ECORRUPT;
		if (end - *pp < 8)
			return RDB_ECORRUPT;
		struct cpt_base v = {at.ts + rdb_unzigzag(d[0]), at.step + rdb_unzigzag(d[1]),
				     at.attempt + rdb_unzigzag(d[2])};
		if (v.attempt > UINT32_MAX)
			return RDB_ECORRUPT;
		int rc = b ? mdl_batch_add(b, k->job, k->job_len, k->rank, k->metric, k->metric_len,
					   (int64_t)v.ts, (int64_t)v.step, (uint32_t)v.attempt,
					   rdb_get_le64(*pp))
			   : 0;
		if (rc)
			return rc;
		*pp += 8;
		if (i == 0)
			*first = v;
		at = v;
	}
	return 0;
}

int sto_batch_decode_compact(struct mdl_batch *b, const uint8_t *p, size_t len,
			     sto_sid_lookup_fn lookup, void *arg, uint64_t *missing_sid)
{
	mdl_batch_reset(b);
	const uint8_t *end = p + len;
	if (len < 4)
		return RDB_ECORRUPT;
	uint32_t nseries = rdb_get_le32(p);
	p += 4;
	if (nseries > (len - 4) / CPT_MIN_SERIES)
		return RDB_ECORRUPT;
	struct cpt_base first = {0};
	uint64_t sid = 0;
	for (uint32_t i = 0; i < nseries; i++) {
		uint64_t dsid, npoints;
		if (rdb_varint_get(&p, end, &dsid) || rdb_varint_get(&p, end, &npoints) ||
		    npoints > (size_t)(end - p) / CPT_MIN_POINT)
			return RDB_ECORRUPT;
		sid += rdb_unzigzag(dsid);
		if (sid == 0)
			return RDB_ECORRUPT; /* ids start at 1: no definition names 0 */
		const struct sto_wal_key *k = lookup(arg, sid);
		if (!k) {
			*missing_sid = sid;
			return RDB_ENOTFOUND;
		}
		if (!mdl_job_valid(k->job, k->job_len) ||
		    !mdl_metric_valid(k->metric, k->metric_len))
			return RDB_ECORRUPT;
		int rc = cpt_points(b, k, npoints, &p, end, &first);
		if (rc)
			return rc;
	}
	return p == end ? 0 : RDB_ECORRUPT;
}

enum sto_wal_fate sto_wal_rec_fate(uint8_t type, int rc)
{
	bool batch = type == STO_WAL_REC_BATCH || type == STO_WAL_REC_CBATCH;
	if (!batch && type != STO_WAL_REC_POINTS && type != STO_WAL_REC_DEFS)
		return STO_WAL_SKIP_UNKNOWN;
	if (rc == 0)
		return STO_WAL_TAKE;
	if (rc == RDB_ENOTFOUND && batch)
		return STO_WAL_SKIP_UNDEFINED;
	if (rc == RDB_ECORRUPT || (rc == RDB_EINVAL && type == STO_WAL_REC_POINTS))
		return STO_WAL_SKIP_UNPARSED;
	return STO_WAL_STOP;
}
