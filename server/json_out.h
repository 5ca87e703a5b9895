/* json_out.h - the JSON text of the HTTP API: exact number formatting
 * (json_out.c) and one serialiser per endpoint for the typed results of
 * query/ (query_json.c: catalog, range, downsample, cross-rank, outliers;
 * events_json.c: logs, logs around a step, spans), plus the one mapping
 * from query error codes to HTTP statuses.
 *
 * Every writer appends to a bounded struct rdb_buf and returns 0 or the
 * buffer's error (RDB_ELIMIT past its bound, -ENOMEM); on failure the
 * buffer holds a partial text the caller discards. The srv_write_* calls
 * turn such a failure into the endpoint's 413/500 message in err.
 */
#ifndef SRV_JSON_OUT_H
#define SRV_JSON_OUT_H

#include "common/rdb_buf.h"
#include "query/agg.h"
#include "query/events.h"
#include "query/qry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- numbers (json_out.c) ---------------------------------------------------------- */

/* Writes a stored value as JSON: a number (shortest text that reads back to
 * the same bits, -0.0 kept), null for MDL_VALUE_NULL_BITS, "NaN" for the
 * canonical NaN, "+Inf"/"-Inf", other NaN payloads as "0x<16 hex>". */
int srv_json_value(struct rdb_buf *out, uint64_t bits);
/* Writes v as srv_json_value does, or null when !defined. */
int srv_json_f64(struct rdb_buf *out, double v, bool defined);
/* Writes a rank: a number, or "job" for the job-level pseudo-rank. */
int srv_json_rank(struct rdb_buf *out, uint32_t rank);
/* The texts srv_json_f64 and srv_json_rank write, into p (at least
 * SRV_FMT_VALUE_MAX bytes, not NUL-terminated; bytes past the returned
 * length may be overwritten, as srv_fmt_value's); return their length. */
size_t srv_fmt_f64(char *p, double v, bool defined);
size_t srv_fmt_rank(char *p, uint32_t rank);
/* Write an integer in decimal. 0 or the rdb_buf error. */
int srv_json_i64(struct rdb_buf *out, int64_t v);
int srv_json_u64(struct rdb_buf *out, uint64_t v);

/* The text srv_json_value writes, into p (at least SRV_FMT_VALUE_MAX
 * bytes, not NUL-terminated); returns its length. Bytes of p past that
 * length (within SRV_FMT_VALUE_MAX) may be overwritten: digits are stored
 * a word at a time. */
#define SRV_FMT_VALUE_MAX 40
size_t srv_fmt_value(char *p, uint64_t bits);
/* The same for a finite non-zero non-integral value, always through
 * snprintf + strtod: the reference srv_fmt_value must equal (tests). */
size_t srv_fmt_value_slow(char *p, uint64_t bits);
/* Comma-separated arrays (no brackets): integers; steps (MDL_STEP_NONE as
 * null); stored values as srv_json_value writes them. */
int srv_json_i64s(struct rdb_buf *out, const int64_t *v, size_t n);
int srv_json_steps(struct rdb_buf *out, const int64_t *v, size_t n);
int srv_json_u32s(struct rdb_buf *out, const uint32_t *v, size_t n);
int srv_json_values(struct rdb_buf *out, const uint64_t *bits, size_t n);
/* Decimal digits of v into p (at least 21 bytes); returns the length. */
size_t srv_fmt_i64(char *p, int64_t v);
size_t srv_fmt_u64(char *p, uint64_t v);

/* ---- query errors ------------------------------------------------------------------- */

/* The HTTP status of a query error code: 400 invalid, 404 not found, 413
 * too large, 422 limit or unsupported, 500 internal. */
int srv_qry_status(enum qry_code code);
/* A serialiser's failed write (query_json.c): RDB_ELIMIT is QRY_E_TOO_LARGE
 * "the response would exceed max_response_bytes; <advice>", anything else
 * QRY_E_INTERNAL "writing the response: <error>". Returns rc. */
int srv_out_failed(struct qry_error *err, int rc, const char *advice);

/* ---- endpoint serialisers (query_json.c, events_json.c) --------------------------------
 * Each writes the endpoint's whole JSON body into out. 0, or rc with err
 * filled: QRY_E_TOO_LARGE (413) when out's bound (max_response_bytes) is
 * reached, with the endpoint's advice; QRY_E_INTERNAL otherwise. */

/* {"jobs":[{"job":..,"series":N,"first_ts":ns|null,"last_ts":ns|null,
 * "last_step":N|null,"ranks":N, <extra's fields>, "meta":{...}},...]} ("meta"
 * when there is one; extra, when not NULL, appends ,"key":value fields). */
int srv_write_jobs(struct rdb_buf *out, const struct qry_jobs *r,
		   int (*extra)(void *arg, const char *job, struct rdb_buf *out), void *arg,
		   struct qry_error *err);
/* {"job":..,"metrics":[..]} */
int srv_write_metrics(struct rdb_buf *out, const struct qry_metrics *r, struct qry_error *err);
/* {"job":..,"ranks":[..],"job_level":bool} */
int srv_write_ranks(struct rdb_buf *out, const struct qry_ranks *r, struct qry_error *err);
/* {"series":[{"job","rank","metric","timestamps","steps","attempts","values"}],"points":N} */
int srv_write_points(struct rdb_buf *out, const struct qry_points *r, struct qry_error *err);
/* {"job":..,"axis":"step"|"time","width":W,"series":[{"job","rank","metric",
 *  "start":[..],"end":[..],"count":[..],"nan_count":[..],<agg>:[..]...}],
 *  "buckets":N,"from_rollups":N,"points_read":N,"chunks_from_stats":N,
 *  "chunks_decoded":N} */
int srv_write_downsample(struct rdb_buf *out, const struct qry_ds_result *r, struct qry_error *err);
/* {"job","metric","axis","width","ranks":[..],"start":[..],"end":[..],
 *  "count":[..],"mean":[..],"min":[..],"max":[..],"median":[..],"p10":[..],
 *  "p90":[..],"stddev":[..],"argmin":[..],"argmax":[..],"buckets":N,
 *  "points_read":N,"chunks_from_stats":N,"chunks_decoded":N}; with some
 * columns asked for, start, end and those (in this order). */
int srv_write_crossrank(struct rdb_buf *out, const struct qry_xr_result *r, struct qry_error *err);
/* {"job","metric","mode","direction","window":{..},["phases","wait_phases",]
 *  "ranks","ranks_scored","median","mad","scale","mad_zero","outliers":[{"rank",
 *  "value","median","score"[,"total","phases":{..}]}],"points_read",..} */
int srv_write_outliers(struct rdb_buf *out, const struct qry_out_result *r, struct qry_error *err);
/* {"job":J,"logs":[{"ts","rank","level","step","attempt","message","fields"}],
 *  "next_cursor":str|null} */
int srv_write_log_page(struct rdb_buf *out, const struct qry_log_page *r, struct qry_error *err);
/* {"job","rank","step","mode":"steps"|"time","anchor_ts":ns|null,
 *  "logs":[{..log..,"at_step":bool}]} */
int srv_write_around(struct rdb_buf *out, const struct qry_around *r, struct qry_error *err);
/* {"job","steps":[{"step","ranks":[{"rank","attempt","spans":[{"name","start",
 *  "duration_ns","end"}],"total_ns"}]}]} */
int srv_write_spans(struct rdb_buf *out, const struct qry_spans *r, struct qry_error *err);

#endif
