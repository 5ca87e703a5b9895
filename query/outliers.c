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
 * A job that sends its phases as spans only (no <metric>.<phase> series)
 * is answered from its spans: per rank and span name the mean duration in
 * seconds over the window (latest attempt per step; a time window selects
 * spans by start), then the same ranking; the result says
 * phase_source "spans".
 */
#include "query/agg.h"
#include "common/rdb_err.h"
#include "common/rdb_sort.h"
#include "query/events.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PHASES QRY_MAX_PHASES

/* The query's state; rows, means and the figures live in the result. */
struct ostate {
	const struct qry_out_req *req;
	struct qry_match m;
	struct qry_bucketing bk;
	const char *phases[MAX_PHASES]; /* names of the phases (suffixes, into m) */
	bool wait[MAX_PHASES];
	size_t nphases;
	char span_names[MAX_PHASES][MDL_METRIC_MAX + 1]; /* phases read from spans */
	struct qry_out_result *r;
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int fail(struct qry_error *err, enum qry_code code, int rc, const char *msg)
{
	return qry_fail(err, code, rc, "%s", msg);
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
	/* the vocabulary's names (detect/vocab.c: collective, dataloader) and
	 * their common spellings */
	static const char *const defaults[] = {"allreduce", "data", "wait", "collective",
					       "dataloader"};
	size_t n = req->nwait ? req->nwait : sizeof(defaults) / sizeof(defaults[0]);
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
	char(*names)[MDL_METRIC_MAX + 1] = NULL;
	const char **ptr = NULL; /* nphases of them: up to MAX_LIST names may be asked for */
	struct qry_match_req mr = {
	    .job = req->job, .ranks = req->ranks, .nranks = req->nranks, .skip_job_level = true};
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
		ptr = malloc(req->nphases * sizeof(*ptr));
		if (!names || !ptr) {
			free(names);
			free(ptr);
			return fail(err, QRY_E_INTERNAL, -ENOMEM, "out of memory");
		}
		for (size_t i = 0; i < req->nphases; i++) {
			snprintf(names[i], sizeof(names[i]), "%s.%s", req->metric, req->phases[i]);
			ptr[i] = names[i];
		}
		mr.metrics = ptr;
		mr.nmetrics = req->nphases;
	}
	rc = qry_match(s, &mr, &o->m, err);
	free(ptr);
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
			return fail(err, QRY_E_INVALID, RDB_EINVAL, "phases: at most 64 phases");
		o->wait[o->nphases] = is_wait(o->req, p);
		any_work |= !o->wait[o->nphases];
		o->phases[o->nphases++] = p;
	}
	if (o->m.n && !any_work)
		return fail(err, QRY_E_INVALID, RDB_EINVAL,
			    "phases: every phase found is a wait phase; "
			    "name the compute phases with phases= or change wait_phases=");
	return 0;
}

static int alloc_rows(struct ostate *o)
{
	struct qry_out_result *res = o->r;
	size_t nph = o->req->phases_mode ? o->nphases : 1;
	res->rows = calloc(o->m.n ? o->m.n : 1, sizeof(*res->rows));
	res->means = malloc((o->m.n ? o->m.n : 1) * nph * sizeof(double));
	if (!res->rows || !res->means)
		return -ENOMEM;
	for (size_t i = 0; i < o->m.n; i++) {
		uint32_t rank = o->m.v[i].key.rank;
		if (res->nrows && res->rows[res->nrows - 1].rank == rank)
			continue;
		struct qry_out_row *r = &res->rows[res->nrows];
		r->rank = rank;
		r->phase = res->means + res->nrows * nph;
		for (size_t p = 0; p < nph; p++)
			r->phase[p] = NAN;
		res->nrows++;
	}
	return 0;
}

/* The row of a rank: rows are in ascending rank order (from the match). */
static struct qry_out_row *row_of(struct ostate *o, uint32_t rank)
{
	size_t lo = 0, hi = o->r->nrows;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (o->r->rows[mid].rank < rank)
			lo = mid + 1;
		else
			hi = mid;
	}
	return &o->r->rows[lo];
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
	for (size_t r = 0; r < o->r->nrows; r++)
		for (size_t p = 0; p < nph; p++)
			o->r->rows[r].phase[p] = NAN;
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
	for (size_t i = 0; i < o->r->nrows; i++) {
		struct qry_out_row *r = &o->r->rows[i];
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

static int robust_scores(struct qry_out_result *o)
{
	double *v = malloc((o->nrows ? o->nrows : 1) * sizeof(*v));
	size_t n = 0;
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < o->nrows; i++)
		if (o->rows[i].ok)
			v[n++] = o->rows[i].value;
	if (n) {
		rdb_sort(v, n, sizeof(*v), cmp_double);
		o->median = qry_quantile_sorted(v, n, 0.5);
		for (size_t i = 0; i < n; i++)
			v[i] = fabs(v[i] - o->median);
		rdb_sort(v, n, sizeof(*v), cmp_double);
		o->mad = qry_quantile_sorted(v, n, 0.5);
	}
	o->scale = 1.4826 * o->mad;
	if (!(o->scale > 0)) {
		o->mad_zero = true;
		o->scale = fmax(1e-9 * fabs(o->median), 1e-300);
	}
	for (size_t i = 0; i < o->nrows; i++)
		o->rows[i].score = (o->rows[i].value - o->median) / o->scale;
	o->nscored = n;
	free(v);
	return 0;
}

static double order_key(const struct qry_out_row *r, enum qry_direction d)
{
	if (!r->ok)
		return -INFINITY;
	return d == QRY_DIR_HIGH ? r->score : d == QRY_DIR_LOW ? -r->score : fabs(r->score);
}

static int cmp_rows(const void *a, const void *b, void *arg)
{
	const struct qry_out_row *x = a, *y = b;
	enum qry_direction d = *(const enum qry_direction *)arg;
	double kx = order_key(x, d), ky = order_key(y, d);
	if (kx != ky)
		return kx > ky ? -1 : 1;
	return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Orders the rows by the direction's score and fills the result's head. */
static int finish(struct ostate *o)
{
	struct qry_out_result *r = o->r;
	enum qry_direction d = o->req->direction;
	qsort_r(r->rows, r->nrows, sizeof(*r->rows), cmp_rows, &d);
	r->nlisted = r->nscored < o->req->limit ? r->nscored : o->req->limit;
	snprintf(r->job, sizeof(r->job), "%s", o->req->job);
	snprintf(r->metric, sizeof(r->metric), "%s", o->req->metric);
	r->phases_mode = o->req->phases_mode;
	r->direction = d;
	r->window = o->bk.range;
	r->nphases = o->nphases;
	if (!o->nphases)
		return 0;
	r->phases = malloc(o->nphases * sizeof(*r->phases));
	if (!r->phases)
		return -ENOMEM;
	for (size_t p = 0; p < o->nphases; p++) {
		snprintf(r->phases[p], sizeof(r->phases[p]), "%s", o->phases[p]);
		r->wait[p] = o->wait[p];
	}
	return 0;
}

/* Resolves the window: step or time range, or the last N steps of the data. */
static int resolve_window(struct qry_scan *sc, struct ostate *o, struct qry_error *err)
{
	struct qry_bucket_spec spec = o->req->spec;
	if (o->req->last_steps > 0) {
		struct qry_extent e;
		size_t failed = 0;
		qry_extent_init(&e);
		int rc = qry_agg_extent_all(sc, &o->m, &spec.range, &e, &failed);
		if (rc)
			return qry_agg_read_error(err, rc, &o->m.v[failed].key, sc);
		if (!e.has_steps)
			return fail(err, QRY_E_INVALID, RDB_EINVAL,
				    "last_steps: the metric has no points "
				    "with a step in the range; use from/to instead");
		spec.range.by_step = true;
		spec.range.step_to = e.max_step;
		spec.range.step_from = e.max_step - o->req->last_steps + 1 > e.min_step
					   ? e.max_step - o->req->last_steps + 1
					   : e.min_step;
	}
	spec.axis_set = true;
	spec.axis = spec.range.by_step ? QRY_AXIS_STEP : QRY_AXIS_TIME;
	spec.width = 0;
	qry_agg_choose(&spec, NULL, &o->bk);
	o->bk.ts_unused = true; /* window means only */
	o->bk.sums_only = true;
	return 0;
}

/* ---- phases from spans ---------------------------------------------------------- */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

static bool span_in_window(const struct ostate *o, const struct mdl_event *e, int64_t min_step)
{
	const struct qry_bucket_spec *sp = &o->req->spec;
	if (e->step < min_step)
		return false;
	if (sp->from_set && e->ts_ns < sp->range.from_ns)
		return false;
	if (sp->to_set && e->ts_ns > sp->range.to_ns)
		return false;
	if (o->req->nphases == 0)
		return true;
	for (size_t i = 0; i < o->req->nphases; i++)
		if (strlen(o->req->phases[i]) == e->text_len &&
		    memcmp(o->req->phases[i], e->text, e->text_len) == 0)
			return true;
	return false;
}

/* The phase index of a span's name, added when new; -1 past MAX_PHASES. */
static int span_phase(struct ostate *o, const struct mdl_event *e)
{
	size_t len = e->text_len > MDL_METRIC_MAX ? MDL_METRIC_MAX : e->text_len;
	for (size_t i = 0; i < o->nphases; i++)
		if (strlen(o->span_names[i]) == len && memcmp(o->span_names[i], e->text, len) == 0)
			return (int)i;
	if (o->nphases == MAX_PHASES)
		return -1;
	memcpy(o->span_names[o->nphases], e->text, len);
	o->span_names[o->nphases][len] = 0;
	o->phases[o->nphases] = o->span_names[o->nphases];
	o->wait[o->nphases] = is_wait(o->req, o->span_names[o->nphases]);
	return (int)o->nphases++;
}

/* Phase means from the job's spans into fresh rows (o->m matched nothing). */
static int span_means(struct sto *s, struct ostate *o, const struct qry_spans *sp,
		      struct qry_error *err)
{
	const struct qry_out_req *req = o->req;
	struct qry_out_result *res = o->r;
	int64_t min_step = INT64_MIN, max_step = INT64_MIN;
	(void)s;
	for (size_t i = 0; i < sp->spans.n; i++)
		if (sp->spans.v[i]->ev.step > max_step)
			max_step = sp->spans.v[i]->ev.step;
	/* (no spans: max_step stays INT64_MIN, and the window starts there) */
	if (req->last_steps > 0 && max_step >= INT64_MIN + (req->last_steps - 1))
		min_step = max_step - req->last_steps + 1;
	uint32_t *ranks = malloc((sp->spans.n ? sp->spans.n : 1) * sizeof(*ranks));
	size_t nr = 0;
	if (!ranks)
		return fail(err, QRY_E_INTERNAL, -ENOMEM, "out of memory");
	for (size_t i = 0; i < sp->spans.n; i++) {
		const struct mdl_event *e = &sp->spans.v[i]->ev;
		if (e->rank != MDL_RANK_JOB && span_in_window(o, e, min_step) &&
		    span_phase(o, e) >= 0)
			ranks[nr++] = e->rank;
	}
	rdb_sort(ranks, nr, sizeof(*ranks), cmp_u32);
	size_t w = 0;
	for (size_t i = 0; i < nr; i++)
		if (w == 0 || ranks[w - 1] != ranks[i])
			ranks[w++] = ranks[i];
	nr = w;
	size_t nph = o->nphases ? o->nphases : 1;
	res->rows = calloc(nr ? nr : 1, sizeof(*res->rows));
	res->means = calloc((nr ? nr : 1) * nph, sizeof(double));
	double *cnt = calloc((nr ? nr : 1) * nph, sizeof(double));
	int rc = res->rows && res->means && cnt ? 0 : -ENOMEM;
	for (size_t i = 0; rc == 0 && i < nr; i++) {
		res->rows[i].rank = ranks[i];
		res->rows[i].phase = res->means + i * nph;
	}
	res->nrows = rc == 0 ? nr : 0;
	for (size_t i = 0; rc == 0 && i < sp->spans.n; i++) {
		const struct mdl_event *e = &sp->spans.v[i]->ev;
		if (e->rank == MDL_RANK_JOB || !span_in_window(o, e, min_step))
			continue;
		int p = span_phase(o, e);
		if (p < 0)
			continue;
		struct qry_out_row *r = row_of(o, e->rank);
		size_t at = (size_t)(r - res->rows) * nph + (size_t)p;
		res->means[at] += (double)e->duration_ns / 1e9;
		cnt[at] += 1;
	}
	for (size_t i = 0; rc == 0 && i < nr * nph; i++)
		res->means[i] = cnt[i] ? res->means[i] / cnt[i] : NAN;
	free(cnt);
	free(ranks);
	if (rc)
		return fail(err, QRY_E_INTERNAL, rc, "out of memory");
	bool any_work = false;
	for (size_t p = 0; p < o->nphases; p++)
		any_work |= !o->wait[p];
	if (nr == 0)
		return qry_fail(
		    err, QRY_E_NOT_FOUND, RDB_ENOTFOUND,
		    "job '%.128s' has no metric starting with '%.200s.' and no spans in "
		    "the window",
		    req->job, req->metric);
	if (!any_work)
		return fail(err, QRY_E_INVALID, RDB_EINVAL,
			    "phases: every phase found is a wait phase; "
			    "name the compute phases with phases= or change wait_phases=");
	o->bk.range = req->spec.range;
	if (req->last_steps > 0 || !(req->spec.from_set || req->spec.to_set)) {
		o->bk.range.by_step = true;
		o->bk.range.step_from = req->last_steps > 0 ? min_step : req->spec.range.step_from;
		o->bk.range.step_to = req->last_steps > 0 ? max_step : req->spec.range.step_to;
	}
	res->phase_source_spans = true;
	return 0;
}

/* The rows' values read: scores them, sorts and lists them (finish). */
static int score_rows(struct ostate *o, struct qry_error *err)
{
	row_values(o);
	int rc = robust_scores(o->r);
	if (rc == 0)
		rc = finish(o);
	return rc ? fail(err, QRY_E_INTERNAL, rc, "out of memory") : 0;
}

/* phases mode without <metric>.<phase> series: the job's spans. */
static int run_spans(struct sto *s, struct ostate *o, struct qry_error *err)
{
	const struct qry_out_req *req = o->req;
	struct qry_spans_req sr = {
	    .job = req->job,
	    .ranks = req->ranks,
	    .nranks = req->nranks,
	    .step_from = req->spec.range.by_step ? req->spec.range.step_from : 0,
	    .step_to = req->spec.range.by_step ? req->spec.range.step_to : INT64_MAX,
	    .attempt = req->spec.attempt >= 0 ? req->spec.attempt : -1,
	    .max_events = req->max_points};
	struct qry_spans sp = {0};
	int rc = qry_spans(s, &sr, &sp, err);
	if (rc == 0)
		rc = span_means(s, o, &sp, err);
	qry_spans_free(&sp);
	return rc ? rc : score_rows(o, err);
}

static int run(struct sto *s, struct qry_scan *sc, struct ostate *o, struct qry_error *err)
{
	struct qry_error miss;
	int rc = select_series(s, o, o->req->phases_mode ? &miss : err);
	if (rc == RDB_ENOTFOUND && o->req->phases_mode) /* no <metric>.<phase> series */
		return run_spans(s, o, err);
	if (rc && o->req->phases_mode)
		*err = miss;
	if (rc == 0 && o->req->phases_mode)
		rc = collect_phases(o, err);
	if (rc == 0)
		rc = resolve_window(sc, o, err);
	if (rc)
		return rc;
	rc = alloc_rows(o);
	if (rc)
		return fail(err, QRY_E_INTERNAL, rc, "out of memory");
	rc = read_means(sc, o, err);
	if (rc)
		return rc;
	qry_totals_of(sc, &o->r->totals);
	return score_rows(o, err);
}

void qry_out_result_free(struct qry_out_result *r)
{
	if (!r)
		return;
	free(r->rows);
	free(r->means);
	free(r->phases);
	memset(r, 0, sizeof(*r));
}

int qry_outliers(struct sto *s, const struct qry_out_req *req, struct qry_out_result *out,
		 struct qry_error *err)
{
	struct ostate *o = calloc(1, sizeof(*o));
	struct qry_scan *sc = malloc(sizeof(*sc));
	int rc;
	memset(out, 0, sizeof(*out));
	if (!o || !sc) {
		rc = fail(err, QRY_E_INTERNAL, -ENOMEM, "out of memory");
		goto out;
	}
	o->req = req;
	o->r = out;
	qry_scan_init(sc, s, req->max_points);
	rc = run(s, sc, o, err);
	qry_scan_free(sc);
out:
	if (rc)
		qry_out_result_free(out);
	if (o)
		qry_match_free(&o->m);
	free(o);
	free(sc);
	return rc;
}
