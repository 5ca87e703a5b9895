/* outliers.c - the straggler report: ranks ordered by how far their metric
 * sits from the other ranks over a window, robustly.
 *
 * Each rank's value is the mean of its non-NaN values in the window (one
 * bucket of the bucket engine, so whole chunks come from their statistics;
 * on the step axis the latest attempt wins per step). Across ranks:
 * median m, MAD = median |x - m|, and score = (x - m) / (1.4826 * MAD), a
 * z-score for normal data that a few outliers cannot drag. When MAD is 0
 * (more than half the ranks identical) the scale becomes
 * max(1e-9 * |m|, 1e-300) and the answer says "mad_zero":true: scores are
 * then only an ordering.
 *
 * Phase mode: under data parallelism collectives equalize step time (the
 * peers of a slow rank wait for it in all-reduce), so raw step time cannot
 * tell who is slow. With phases <metric>.<phase> (forward, backward, ...),
 * each rank's own work = sum of the means of its non-wait phases (wait
 * phases default to allreduce, data, wait), and the ranking is by the score
 * of own work. A rank missing a non-wait phase is left out of the ranking.
 */
#include "query/agg.h"
#include "common/rdb_err.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PHASES 64

struct orow {
	uint32_t rank;
	bool ok;       /* has a value (all non-wait phases in phase mode) */
	double value;  /* window mean, or own work */
	double total;  /* phase mode: sum of every phase's mean */
	double score;
	double *phase; /* phase mode: nphases means, NAN where absent */
};

struct ostate {
	const struct qry_out_req *req;
	struct qry_match m;
	struct qry_bucketing bk;
	const char *phases[MAX_PHASES]; /* names of the phases (suffixes) */
	bool wait[MAX_PHASES];
	size_t nphases;
	struct orow *rows;
	size_t nrows;
	double *means; /* nrows * nphases (or nrows in value mode) */
	double median, mad, scale;
	bool mad_zero;
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int fail(struct qry_error *err, int status, int rc, const char *msg)
{
	err->status = status;
	snprintf(err->msg, sizeof(err->msg), "%s", msg);
	return rc;
}

/* The phase a matched metric belongs to (its suffix after "<metric>."). */
static const char *suffix(const struct ostate *o, const char *metric)
{
	return metric + strlen(o->req->metric) + 1;
}

static int phase_index(const struct ostate *o, const char *name)
{
	for (size_t i = 0; i < o->nphases; i++)
		if (strcmp(o->phases[i], name) == 0)
			return (int)i;
	return -1;
}

static bool is_wait(const struct qry_out_req *req, const char *phase)
{
	static const char *const defaults[] = {"allreduce", "data", "wait"};
	size_t n = req->nwait ? req->nwait : 3;
	for (size_t i = 0; i < n; i++)
		if (strcmp(req->nwait ? req->wait_phases[i] : defaults[i], phase) == 0)
			return true;
	return false;
}

/* Selects the series: the metric, or its phases (given, or every
 * <metric>.<phase> of the job). */
static int select_series(struct sto *s, struct ostate *o, struct qry_error *err)
{
	const struct qry_out_req *req = o->req;
	char (*names)[MDL_METRIC_MAX + 1] = NULL;
	const char *ptr[MAX_PHASES];
	struct qry_match_req mr = {.job = req->job, .ranks = req->ranks, .nranks = req->nranks,
				   .skip_job_level = true};
	char prefix[MDL_METRIC_MAX + 2];
	int rc = 0;
	if (!req->phases_mode) {
		mr.metrics = &req->metric;
		mr.nmetrics = 1;
	} else if (req->nphases == 0) {
		snprintf(prefix, sizeof(prefix), "%s.", req->metric);
		mr.prefix = prefix;
	} else {
		names = malloc(req->nphases * sizeof(*names));
		if (!names)
			return fail(err, 500, -ENOMEM, "out of memory");
		for (size_t i = 0; i < req->nphases; i++) {
			snprintf(names[i], sizeof(names[i]), "%s.%s", req->metric, req->phases[i]);
			ptr[i] = names[i];
		}
		mr.metrics = ptr;
		mr.nmetrics = req->nphases;
	}
	rc = qry_match(s, &mr, &o->m, err);
	free(names);
	return rc;
}

/* Collects the distinct phases of the matched series. */
static int collect_phases(struct ostate *o, struct qry_error *err)
{
	bool any_work = false;
	for (size_t i = 0; i < o->m.n; i++) {
		const char *p = suffix(o, o->m.v[i].key.metric);
		if (phase_index(o, p) >= 0)
			continue;
		if (o->nphases == MAX_PHASES)
			return fail(err, 400, RDB_EINVAL, "phases: at most 64 phases");
		o->wait[o->nphases] = is_wait(o->req, p);
		any_work |= !o->wait[o->nphases];
		o->phases[o->nphases++] = p;
	}
	if (o->m.n && !any_work)
		return fail(err, 400, RDB_EINVAL, "phases: every phase found is a wait phase; "
			    "name the compute phases with phases= or change wait_phases=");
	return 0;
}

static int alloc_rows(struct ostate *o)
{
	size_t nph = o->req->phases_mode ? o->nphases : 1;
	o->rows = calloc(o->m.n ? o->m.n : 1, sizeof(*o->rows));
	o->means = malloc((o->m.n ? o->m.n : 1) * nph * sizeof(double));
	if (!o->rows || !o->means)
		return -ENOMEM;
	for (size_t i = 0; i < o->m.n; i++) {
		uint32_t rank = o->m.v[i].key.rank;
		if (o->nrows && o->rows[o->nrows - 1].rank == rank)
			continue;
		struct orow *r = &o->rows[o->nrows];
		r->rank = rank;
		r->phase = o->means + o->nrows * nph;
		for (size_t p = 0; p < nph; p++)
			r->phase[p] = NAN;
		o->nrows++;
	}
	return 0;
}

/* The row of a rank: rows are in ascending rank order (from the match). */
static struct orow *row_of(struct ostate *o, uint32_t rank)
{
	size_t lo = 0, hi = o->nrows;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (o->rows[mid].rank < rank)
			lo = mid + 1;
		else
			hi = mid;
	}
	return &o->rows[lo];
}

/* Each series writes its own cell (rank row, phase): the parts of
 * qry_agg_each never share one. */
static int mean_fn(void *arg, unsigned part, size_t i, const struct qry_buckets *bs)
{
	struct ostate *o = arg;
	const struct qry_series *se = &o->m.v[i];
	(void)part;
	int p = o->req->phases_mode ? phase_index(o, suffix(o, se->key.metric)) : 0;
	if (bs->n && bs->b[0].a.count)
		row_of(o, se->key.rank)->phase[p] = bs->b[0].a.sum / (double)bs->b[0].a.count;
	return 0;
}

static void mean_reset(void *arg)
{
	struct ostate *o = arg;
	size_t nph = o->req->phases_mode ? o->nphases : 1;
	for (size_t r = 0; r < o->nrows; r++)
		for (size_t p = 0; p < nph; p++)
			o->rows[r].phase[p] = NAN;
}

/* Reads every selected series' window mean into its row. */
static int read_means(struct qry_scan *sc, struct ostate *o, struct qry_error *err)
{
	struct qry_each e = {mean_fn, mean_reset, o};
	size_t failed = 0;
	int rc = qry_agg_each(sc, &o->m, &o->bk, &e, &failed);
	if (rc)
		qry_agg_read_error(err, rc, &o->m.v[failed].key, sc);
	return rc;
}

static void row_values(struct ostate *o)
{
	for (size_t i = 0; i < o->nrows; i++) {
		struct orow *r = &o->rows[i];
		if (!o->req->phases_mode) {
			r->value = r->phase[0];
			r->ok = !isnan(r->value);
			continue;
		}
		r->ok = true;
		r->value = r->total = 0;
		for (size_t p = 0; p < o->nphases; p++) {
			if (!isnan(r->phase[p]))
				r->total += r->phase[p];
			else if (!o->wait[p])
				r->ok = false;
			if (!o->wait[p])
				r->value += r->phase[p];
		}
	}
}

static int robust_scores(struct ostate *o)
{
	double *v = malloc((o->nrows ? o->nrows : 1) * sizeof(*v));
	size_t n = 0;
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < o->nrows; i++)
		if (o->rows[i].ok)
			v[n++] = o->rows[i].value;
	if (n) {
		qsort(v, n, sizeof(*v), cmp_double);
		o->median = qry_quantile_sorted(v, n, 0.5);
		for (size_t i = 0; i < n; i++)
			v[i] = fabs(v[i] - o->median);
		qsort(v, n, sizeof(*v), cmp_double);
		o->mad = qry_quantile_sorted(v, n, 0.5);
	}
	o->scale = 1.4826 * o->mad;
	if (!(o->scale > 0)) {
		o->mad_zero = true;
		o->scale = fmax(1e-9 * fabs(o->median), 1e-300);
	}
	for (size_t i = 0; i < o->nrows; i++)
		o->rows[i].score = (o->rows[i].value - o->median) / o->scale;
	free(v);
	return 0;
}

static double order_key(const struct orow *r, enum qry_direction d)
{
	if (!r->ok)
		return -INFINITY;
	return d == QRY_DIR_HIGH ? r->score : d == QRY_DIR_LOW ? -r->score : fabs(r->score);
}

static int cmp_rows(const void *a, const void *b, void *arg)
{
	const struct orow *x = a, *y = b;
	enum qry_direction d = *(const enum qry_direction *)arg;
	double kx = order_key(x, d), ky = order_key(y, d);
	if (kx != ky)
		return kx > ky ? -1 : 1;
	return (x->rank > y->rank) - (x->rank < y->rank);
}

static int write_row(struct rdb_buf *out, const struct ostate *o, const struct orow *r,
		     bool first)
{
	int rc = rdb_buf_printf(out, "%s{\"rank\":%u,\"value\":", first ? "" : ",", r->rank);
	if (rc == 0)
		rc = qry_json_f64(out, r->value, true);
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"median\":");
	if (rc == 0)
		rc = qry_json_f64(out, o->median, true);
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"score\":");
	if (rc == 0)
		rc = qry_json_f64(out, r->score, true);
	if (rc == 0 && o->req->phases_mode) {
		rc = rdb_buf_puts(out, ",\"total\":");
		if (rc == 0)
			rc = qry_json_f64(out, r->total, true);
		if (rc == 0)
			rc = rdb_buf_puts(out, ",\"phases\":{");
		for (size_t p = 0; rc == 0 && p < o->nphases; p++) {
			rc = rdb_buf_puts(out, p ? "," : "");
			if (rc == 0)
				rc = rdb_buf_json_str(out, o->phases[p], strlen(o->phases[p]));
			if (rc == 0)
				rc = rdb_buf_putc(out, ':');
			if (rc == 0)
				rc = qry_json_f64(out, r->phase[p], !isnan(r->phase[p]));
		}
		if (rc == 0)
			rc = rdb_buf_putc(out, '}');
	}
	return rc ? rc : rdb_buf_putc(out, '}');
}

static int write_names(struct rdb_buf *out, const struct ostate *o, const char *key, bool wait)
{
	int rc = rdb_buf_printf(out, ",\"%s\":[", key);
	bool first = true;
	for (size_t p = 0; rc == 0 && p < o->nphases; p++) {
		if (o->wait[p] != wait)
			continue;
		rc = rdb_buf_puts(out, first ? "" : ",");
		first = false;
		if (rc == 0)
			rc = rdb_buf_json_str(out, o->phases[p], strlen(o->phases[p]));
	}
	return rc ? rc : rdb_buf_putc(out, ']');
}

static int write_head(struct rdb_buf *out, const struct ostate *o, size_t scored)
{
	static const char *const dirs[] = {"both", "high", "low"};
	const struct qry_out_req *req = o->req;
	const struct sto_range *r = &o->bk.range;
	int rc = rdb_buf_puts(out, "{\"job\":");
	if (rc == 0)
		rc = rdb_buf_json_str(out, req->job, strlen(req->job));
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"metric\":");
	if (rc == 0)
		rc = rdb_buf_json_str(out, req->metric, strlen(req->metric));
	if (rc == 0)
		rc = rdb_buf_printf(out, ",\"mode\":\"%s\",\"direction\":\"%s\",\"window\":",
				    req->phases_mode ? "phases" : "value", dirs[req->direction]);
	if (rc == 0 && r->by_step)
		rc = rdb_buf_printf(out, "{\"step_from\":%lld,\"step_to\":%lld}",
				    (long long)r->step_from, (long long)r->step_to);
	else if (rc == 0)
		rc = rdb_buf_printf(out, "{\"from\":%lld,\"to\":%lld}", (long long)r->from_ns,
				    (long long)r->to_ns);
	if (rc == 0 && req->phases_mode)
		rc = write_names(out, o, "phases", false);
	if (rc == 0 && req->phases_mode)
		rc = write_names(out, o, "wait_phases", true);
	if (rc == 0)
		rc = rdb_buf_printf(out, ",\"ranks\":%zu,\"ranks_scored\":%zu,\"median\":", o->nrows,
				    scored);
	if (rc == 0)
		rc = qry_json_f64(out, o->median, scored > 0);
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"mad\":");
	if (rc == 0)
		rc = qry_json_f64(out, o->mad, scored > 0);
	if (rc == 0)
		rc = rdb_buf_puts(out, ",\"scale\":");
	if (rc == 0)
		rc = qry_json_f64(out, o->scale, scored > 0);
	if (rc == 0)
		rc = rdb_buf_printf(out, ",\"mad_zero\":%s,\"outliers\":[",
				    o->mad_zero ? "true" : "false");
	return rc;
}

static int write_report(struct rdb_buf *out, struct ostate *o)
{
	enum qry_direction d = o->req->direction;
	size_t scored = 0;
	for (size_t i = 0; i < o->nrows; i++)
		scored += o->rows[i].ok;
	qsort_r(o->rows, o->nrows, sizeof(*o->rows), cmp_rows, &d);
	int rc = write_head(out, o, scored);
	size_t n = scored < o->req->limit ? scored : o->req->limit;
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = write_row(out, o, &o->rows[i], i == 0);
	return rc ? rc : rdb_buf_putc(out, ']');
}

/* Resolves the window: step or time range, or the last N steps of the data. */
static int resolve_window(struct qry_scan *sc, struct ostate *o, struct qry_error *err)
{
	struct qry_bucket_spec spec = o->req->spec;
	if (o->req->last_steps > 0) {
		struct qry_extent e;
		qry_extent_init(&e);
		for (size_t i = 0; i < o->m.n; i++) {
			int rc = qry_agg_extent(sc, o->m.v[i].id, &spec.range, &e);
			if (rc)
				return qry_agg_read_error(err, rc, &o->m.v[i].key, sc);
		}
		if (!e.has_steps)
			return fail(err, 400, RDB_EINVAL, "last_steps: the metric has no points "
				    "with a step in the range; use from/to instead");
		spec.range.by_step = true;
		spec.range.step_to = e.max_step;
		spec.range.step_from = e.max_step - o->req->last_steps + 1 > e.min_step ?
			e.max_step - o->req->last_steps + 1 : e.min_step;
	}
	spec.axis_set = true;
	spec.axis = spec.range.by_step ? QRY_AXIS_STEP : QRY_AXIS_TIME;
	spec.width = 0;
	qry_agg_choose(&spec, NULL, &o->bk);
	return 0;
}

static int run(struct sto *s, struct qry_scan *sc, struct ostate *o, struct rdb_buf *out,
	       struct qry_error *err)
{
	int rc = select_series(s, o, err);
	if (rc == 0 && o->req->phases_mode)
		rc = collect_phases(o, err);
	if (rc == 0)
		rc = resolve_window(sc, o, err);
	if (rc)
		return rc;
	rc = alloc_rows(o);
	if (rc)
		return fail(err, 500, rc, "out of memory");
	rc = read_means(sc, o, err);
	if (rc)
		return rc;
	row_values(o);
	rc = robust_scores(o);
	if (rc == 0)
		rc = write_report(out, o);
	if (rc == 0)
		rc = qry_write_scan_totals(out, sc);
	return rc ? qry_agg_out_error(err, rc) : 0;
}

int qry_outliers(struct sto *s, const struct qry_out_req *req, struct rdb_buf *out,
		 struct qry_error *err)
{
	struct ostate *o = calloc(1, sizeof(*o));
	struct qry_scan *sc = malloc(sizeof(*sc));
	int rc;
	if (!o || !sc) {
		rc = fail(err, 500, -ENOMEM, "out of memory");
		goto out;
	}
	o->req = req;
	qry_scan_init(sc, s, req->max_points);
	rc = run(s, sc, o, out, err);
	qry_scan_free(sc);
out:
	if (o) {
		qry_match_free(&o->m);
		free(o->rows);
		free(o->means);
	}
	free(o);
	free(sc);
	return rc;
}
