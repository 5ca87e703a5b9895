/* events.c - log and span queries over sto_events_read: paginated logs,
 * logs around a step, the per-step phase timeline, Grafana annotations.
 *
 * Bounded work. sto_events_read collects every match of its filter (at
 * most max_events, RDB_ELIMIT beyond) before handing them over, newest
 * first. A query that wants the newest (or oldest) N of a larger set
 * narrows the far end of the time window by bisection until the window
 * holds at most max_events matches (read_window): each probe is one bounded
 * read, at most ~64 probes. Only more than max_events matches at a single
 * timestamp cannot be narrowed: that is a 422.
 *
 * Log order and cursors. Pages are ordered by (ts desc, rank asc, content
 * hash asc); the content hash (xxh3 of message, fields, step, attempt,
 * level) breaks ties of equal (ts, rank). A cursor names the last record
 * returned: (ts, rank, hash, dup), where dup counts the records with that
 * very key already returned (identical records are told apart by count
 * only). The next page reads with to_ns = ts and skips every record at or
 * before that position, so pages neither repeat nor miss a record, however
 * many share a timestamp. The cursor text is 64 hex digits: the key and an
 * xxh3 check over the key and the query's filter, so a cursor that was
 * altered, or comes from another query, is refused (400).
 *
 * Results are typed (events.h): owned event copies, each naming its job.
 * Threading: reentrant; the storage API does the locking. Errors fill
 * struct qry_error with a code and what to change.
 */
#include "query/events.h"
#include "common/rdb_err.h"
#include "common/rdb_hash.h"
#include "common/rdb_le.h"
#include "common/rdb_sort.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CURSOR_SEED	    0x72616e6b64624355ull
#define KEY_BYTES	    24u /* ts 8, rank 4, hash 8, dup 4 */
#define MAX_ANCHOR_SERIES   65536u
#define MAX_ANNOTATION_JOBS 65536u

/* ---- owned copies of events -------------------------------------------------- */

/* A list being built: the events, and the job name every copy gets. */
struct evl {
	struct qry_event **v;
	size_t n, cap;
	const char *job;
};

static void evl_clear(struct evl *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	l->n = 0;
}

static void evl_free(struct evl *l)
{
	evl_clear(l);
	free(l->v);
	l->v = NULL;
	l->cap = 0;
}

/* Moves the events of l into out (l becomes empty). */
static void evl_give(struct evl *l, struct qry_events *out)
{
	out->v = l->v;
	out->n = l->n;
	out->cap = l->cap;
	l->v = NULL;
	l->n = l->cap = 0;
}

void qry_events_free(struct qry_events *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static uint64_t content_hash(const struct mdl_event *e)
{
	uint8_t nums[34];
	rdb_put_le64(nums, (uint64_t)e->step);
	rdb_put_le64(nums + 8, (uint64_t)e->duration_ns);
	rdb_put_le32(nums + 16, e->attempt);
	nums[20] = e->level;
	nums[21] = e->kind;
	rdb_put_le64(nums + 22, (uint64_t)e->text_len);
	rdb_put_le32(nums + 30, (uint32_t)e->fields_len);
	uint64_t h = rdb_hash64(nums, sizeof(nums), CURSOR_SEED);
	h = rdb_hash64(e->text, e->text_len, h);
	return rdb_hash64(e->fields, e->fields_len, h);
}

/* sto_ev_fn: appends a copy of e. */
/* sto_ev_fn: appends a copy of e naming l->job (or e's own job). */
static int evl_add(void *arg, const struct mdl_event *e)
{
	struct evl *l = arg;
	const char *job = l->job ? l->job : e->job;
	size_t jl = l->job ? strlen(l->job) : e->job_len;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct qry_event **p = realloc(l->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		l->v = p;
		l->cap = cap;
	}
	struct qry_event *c = malloc(sizeof(*c) + e->text_len + e->fields_len + jl + 2);
	if (!c)
		return -ENOMEM;
	c->ev = *e;
	memcpy(c->data, e->text, e->text_len);
	memcpy(c->data + e->text_len, e->fields, e->fields_len);
	c->data[e->text_len + e->fields_len] = 0;
	memcpy(c->data + e->text_len + e->fields_len + 1, job, jl);
	c->data[e->text_len + e->fields_len + 1 + jl] = 0;
	c->ev.text = c->data;
	c->ev.fields = c->data + e->text_len;
	c->ev.job = c->data + e->text_len + e->fields_len + 1;
	c->ev.job_len = jl;
	c->hash = content_hash(e);
	l->v[l->n++] = c;
	return 0;
}

static void sort_evl(struct evl *l, int (*cmp)(const void *, const void *))
{
	if (l->n > 1)
		rdb_sort(l->v, l->n, sizeof(*l->v), cmp);
}

static void evl_swap(struct evl *a, struct evl *b)
{
	struct evl t = *a;
	*a = *b;
	*b = t;
}

/* Replaces l's contents by the matches of f. */
static int read_all(struct sto *s, const struct sto_ev_filter *f, size_t max, struct evl *l,
		    struct sto_read_error *re)
{
	evl_clear(l);
	l->job = f->job;
	int rc = sto_events_read(s, f, max, evl_add, l, re);
	if (rc)
		evl_clear(l);
	return rc;
}

/* b - a for a <= b, without overflow. */
static uint64_t gap(int64_t a, int64_t b)
{
	return (uint64_t)b - (uint64_t)a;
}

static int64_t midpoint(int64_t a, int64_t b)
{
	return a + (int64_t)(gap(a, b) / 2);
}

/* Reads the matches of f into l; if more than max match, the widest window
 * at f's near end (the newest end when newest, else the oldest) holding at
 * most max matches. *narrowed tells whether the window was cut. RDB_ELIMIT
 * when even one timestamp at the near end holds more than max. */
static int read_window(struct sto *s, const struct sto_ev_filter *f, size_t max, bool newest,
		       struct evl *l, bool *narrowed, struct sto_read_error *re)
{
	struct sto_ev_filter g = *f;
	struct evl probe = {.job = f->job};
	*narrowed = false;
	int rc = read_all(s, f, max, l, re);
	if (rc != RDB_ELIMIT)
		return rc;
	*narrowed = true;
	/* bad: a bound whose window holds more than max; good: one that fits */
	int64_t bad = newest ? f->from_ns : f->to_ns, good = newest ? f->to_ns : f->from_ns;
	g.from_ns = g.to_ns = good;
	rc = read_all(s, &g, max, l, re);
	while (rc == 0 && (newest ? gap(bad, good) : gap(good, bad)) > 1) {
		int64_t mid = newest ? midpoint(bad, good) : midpoint(good, bad);
		*(newest ? &g.from_ns : &g.to_ns) = mid;
		rc = read_all(s, &g, max, &probe, re);
		if (rc == 0) {
			good = mid;
			evl_swap(l, &probe);
		} else if (rc == RDB_ELIMIT) {
			bad = mid;
			rc = 0;
		}
	}
	evl_free(&probe);
	if (rc)
		evl_clear(l);
	return rc;
}

/* ---- errors ------------------------------------------------------------------------ */

/* A failed storage read as an answer. */
static int read_failed(struct qry_error *err, int rc, const struct sto_read_error *re, size_t max,
		       const char *narrow)
{
	if (rc == RDB_ELIMIT)
		return qry_fail(err, QRY_E_LIMIT, rc,
				"the query selects more than %zu events; "
				"narrow it (%s)",
				max, narrow);
	return qry_fail(err, QRY_E_INTERNAL, rc, "reading events: %s",
			re && re->msg[0] ? re->msg : rdb_strerror(rc));
}

int qry_events_scan(struct sto *s, const struct sto_ev_filter *f, size_t max_events,
		    int (*fn)(void *arg, const struct mdl_event *e), void *arg,
		    struct sto_read_error *re)
{
	return sto_events_read(s, f, max_events, fn, arg, re);
}

/* ---- unknown jobs ------------------------------------------------------------------ */

static int stop_cb(void *arg, const struct mdl_series_key *k, uint64_t id)
{
	(void)arg;
	(void)k;
	(void)id;
	return 1;
}

static int stop_ev_cb(void *arg, const struct mdl_event *e)
{
	(void)arg;
	(void)e;
	return 1;
}

/* A job is known if it has a series or an event. 0 with err filled 404 if
 * not, else the storage error. */
static int check_job(struct sto *s, const char *job, struct qry_error *err)
{
	struct sto_ev_filter f = {.job = job,
				  .kinds = (1u << MDL_EV_LOG) | (1u << MDL_EV_SPAN),
				  .from_ns = INT64_MIN,
				  .to_ns = INT64_MAX,
				  .attempt = -1};
	struct sto_read_error *re = malloc(sizeof(*re));
	int rc = sto_list_series(s, job, stop_cb, NULL);
	if (rc == 0 && re)
		rc = sto_events_read(s, &f, 1, stop_ev_cb, NULL, re);
	else if (rc == 0)
		rc = -ENOMEM;
	if (rc == 1 || rc == RDB_ELIMIT)
		rc = 0; /* found something */
	else if (rc == 0)
		rc = qry_fail(err, QRY_E_NOT_FOUND, RDB_ENOTFOUND,
			      "unknown job '%.128s' (it has "
			      "no series, logs or spans; GET /api/v1/jobs lists the jobs)",
			      job);
	else
		qry_fail(err, QRY_E_INTERNAL, rc, "looking up job '%.128s': %s", job,
			 re && re->msg[0] ? re->msg : rdb_strerror(rc));
	free(re);
	return rc;
}

/* ---- cursors ------------------------------------------------------------------------ */

struct cursor {
	int64_t ts_ns;
	uint32_t rank;
	uint64_t hash;
	uint32_t dup; /* records with exactly this key already returned */
};

/* Hash of everything that selects records (not limit, not the cursor). */
static uint64_t filter_hash(const struct sto_ev_filter *f)
{
	uint8_t nums[41];
	rdb_put_le64(nums, (uint64_t)f->from_ns);
	rdb_put_le64(nums + 8, (uint64_t)f->to_ns);
	rdb_put_le64(nums + 16, f->by_step ? (uint64_t)f->step_from : 0);
	rdb_put_le64(nums + 24, f->by_step ? (uint64_t)f->step_to : 0);
	rdb_put_le64(nums + 32, (uint64_t)f->attempt);
	nums[40] = f->min_level;
	uint64_t h = rdb_hash64(nums, sizeof(nums), CURSOR_SEED);
	h = rdb_hash64(f->job, strlen(f->job) + 1, h);
	h = rdb_hash64(f->ranks, f->nranks * sizeof(*f->ranks), h);
	h = rdb_hash64(f->text ? f->text : "", f->text ? strlen(f->text) + 1 : 0, h);
	for (size_t i = 0; i < f->nfields; i++) {
		h = rdb_hash64(f->field_keys[i], strlen(f->field_keys[i]) + 1, h);
		h = rdb_hash64(f->field_vals[i], strlen(f->field_vals[i]) + 1, h);
	}
	return h;
}

static void cursor_key(const struct cursor *c, uint8_t *b)
{
	rdb_put_le64(b, (uint64_t)c->ts_ns);
	rdb_put_le32(b + 8, c->rank);
	rdb_put_le64(b + 12, c->hash);
	rdb_put_le32(b + 20, c->dup);
}

static void cursor_encode(const struct cursor *c, uint64_t fhash, char *out)
{
	uint8_t b[KEY_BYTES + 8];
	cursor_key(c, b);
	rdb_put_le64(b + KEY_BYTES, rdb_hash64(b, KEY_BYTES, fhash));
	for (size_t i = 0; i < sizeof(b); i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

static int cursor_decode(const char *text, uint64_t fhash, struct cursor *c)
{
	uint8_t b[KEY_BYTES + 8];
	if (strlen(text) != 2 * sizeof(b))
		return RDB_EINVAL;
	for (size_t i = 0; i < sizeof(b); i++) {
		int hi = hexval(text[2 * i]), lo = hexval(text[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return RDB_EINVAL;
		b[i] = (uint8_t)(hi << 4 | lo);
	}
	if (rdb_get_le64(b + KEY_BYTES) != rdb_hash64(b, KEY_BYTES, fhash))
		return RDB_EINVAL;
	c->ts_ns = (int64_t)rdb_get_le64(b);
	c->rank = rdb_get_le32(b + 8);
	c->hash = rdb_get_le64(b + 12);
	c->dup = rdb_get_le32(b + 20);
	return 0;
}

/* Page order: ts desc, rank asc, hash asc. */
static int cmp_key(int64_t ts, uint32_t rank, uint64_t hash, const struct cursor *c)
{
	if (ts != c->ts_ns)
		return ts > c->ts_ns ? -1 : 1;
	if (rank != c->rank)
		return rank < c->rank ? -1 : 1;
	if (hash != c->hash)
		return hash < c->hash ? -1 : 1;
	return 0;
}

static int cmp_page(const void *a, const void *b)
{
	const struct qry_event *x = *(struct qry_event *const *)a;
	const struct qry_event *y = *(struct qry_event *const *)b;
	struct cursor k = {y->ev.ts_ns, y->ev.rank, y->hash, 0};
	return cmp_key(x->ev.ts_ns, x->ev.rank, x->hash, &k);
}

/* ---- GET /api/v1/logs -------------------------------------------------------------- */

struct page {
	const struct cursor *after; /* NULL: first page */
	size_t first, n;	    /* l->v[first .. first+n) is the page */
	bool more;
	struct cursor next;
};

/* Picks the page out of the sorted list: skips what the cursor says was
 * returned, takes up to limit, and computes the next cursor. */
static void pick_page(const struct evl *l, size_t limit, bool narrowed, struct page *p)
{
	size_t i = 0;
	uint32_t seen_equal = 0;
	for (; p->after && i < l->n; i++) {
		const struct qry_event *e = l->v[i];
		int c = cmp_key(e->ev.ts_ns, e->ev.rank, e->hash, p->after);
		if (c > 0 || (c == 0 && seen_equal == p->after->dup))
			break;
		seen_equal += c == 0;
	}
	p->first = i;
	p->n = l->n - i < limit ? l->n - i : limit;
	p->more = narrowed || p->first + p->n < l->n;
	if (p->n == 0)
		return;
	const struct qry_event *last = l->v[p->first + p->n - 1];
	p->next = (struct cursor){last->ev.ts_ns, last->ev.rank, last->hash, 0};
	for (size_t k = p->first + p->n; k-- > p->first;) {
		if (cmp_key(l->v[k]->ev.ts_ns, l->v[k]->ev.rank, l->v[k]->hash, &p->next))
			break;
		p->next.dup++;
	}
	if (p->after && cmp_key(p->next.ts_ns, p->next.rank, p->next.hash, p->after) == 0)
		p->next.dup += p->after->dup;
}

/* Moves the page's events out of l into out, with the next cursor. */
static void take_page(struct evl *l, const struct page *p, uint64_t fhash, struct qry_log_page *out)
{
	for (size_t i = 0; i < p->first; i++)
		free(l->v[i]);
	for (size_t i = p->first + p->n; i < l->n; i++)
		free(l->v[i]);
	if (p->n)
		memmove(l->v, l->v + p->first, p->n * sizeof(*l->v));
	l->n = p->n;
	evl_give(l, &out->logs);
	if (p->more && p->n)
		cursor_encode(&p->next, fhash, out->next_cursor);
}

void qry_log_page_free(struct qry_log_page *p)
{
	if (p)
		qry_events_free(&p->logs);
}

static const char *const LOGS_NARROW = "a time range from/to, a step range, fewer ranks, a "
				       "higher level, or words q";

int qry_logs(struct sto *s, const struct qry_logs_req *req, struct qry_log_page *out,
	     struct qry_error *err)
{
	struct sto_ev_filter f = req->filter;
	struct evl l = {.job = f.job};
	struct cursor after;
	struct page p = {0};
	bool narrowed = false;
	uint64_t fhash = filter_hash(&req->filter);
	struct sto_read_error *re = malloc(sizeof(*re));
	int rc = re ? 0 : qry_fail(err, QRY_E_INTERNAL, -ENOMEM, "out of memory");
	memset(out, 0, sizeof(*out));
	f.kinds = 1u << MDL_EV_LOG;
	if (rc == 0 && req->cursor) {
		rc = cursor_decode(req->cursor, fhash, &after);
		if (rc) {
			qry_fail(err, QRY_E_INVALID, rc,
				 "parameter cursor is not a next_cursor of "
				 "this query (altered, or the filter parameters changed); start "
				 "again without it");
			goto out;
		}
		p.after = &after;
		f.to_ns = after.ts_ns < f.to_ns ? after.ts_ns : f.to_ns;
	}
	if (rc == 0 && f.from_ns <= f.to_ns) {
		rc = read_window(s, &f, req->max_events, true, &l, &narrowed, re);
		if (rc)
			read_failed(err, rc, re, req->max_events, LOGS_NARROW);
	}
	if (rc)
		goto out;
	sort_evl(&l, cmp_page);
	pick_page(&l, req->limit, narrowed, &p);
	if (p.n == 0 && narrowed) {
		rc = qry_fail(err, QRY_E_LIMIT, RDB_ELIMIT,
			      "more than %zu log records share one "
			      "timestamp here; narrow the query (%s)",
			      req->max_events, LOGS_NARROW);
		goto out;
	}
	if (p.n == 0 && !req->cursor && (rc = check_job(s, f.job, err)))
		goto out;
	snprintf(out->job, sizeof(out->job), "%s", req->filter.job);
	take_page(&l, &p, fhash, out);
out:
	evl_free(&l);
	free(re);
	return rc;
}

/* ---- GET /api/v1/logs/around --------------------------------------------------------- */

static int cmp_oldest(const void *a, const void *b)
{
	return cmp_page(b, a);
}

struct rank_series {
	uint32_t rank;
	uint64_t *ids;
	size_t n, cap;
};

static int rank_series_cb(void *arg, const struct mdl_series_key *k, uint64_t id)
{
	struct rank_series *r = arg;
	if (k->rank != r->rank)
		return 0;
	if (r->n == MAX_ANCHOR_SERIES)
		return RDB_ELIMIT;
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 64;
		uint64_t *p = realloc(r->ids, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		r->ids = p;
		r->cap = cap;
	}
	r->ids[r->n++] = id;
	return 0;
}

/* The earliest point of the rank at the step, any metric: *ts stays
 * INT64_MAX if there is none. */
static int point_anchor(struct sto *s, const struct qry_around_req *req, int64_t *ts,
			struct sto_read_error *re, struct qry_error *err)
{
	struct rank_series r = {.rank = req->rank};
	struct mdl_cols pts = MDL_COLS_INIT;
	struct sto_range range = {INT64_MIN, INT64_MAX, true, req->step, req->step};
	int rc = sto_list_series(s, req->job, rank_series_cb, &r);
	for (size_t i = 0; rc == 0 && i < r.n; i++) {
		rc = sto_read(s, r.ids[i], &range, req->max_events, &pts, re);
		for (size_t k = 0; rc == 0 && k < pts.n; k++)
			*ts = pts.ts_ns[k] < *ts ? pts.ts_ns[k] : *ts;
	}
	if (rc)
		read_failed(err, rc, re, req->max_events,
			    "the rank has too many metrics or "
			    "points at this step; use window_steps");
	free(r.ids);
	mdl_cols_free(&pts);
	return rc;
}

/* The anchor of time mode: the rank's oldest log at the step, else its
 * earliest point there; *ts stays INT64_MAX if neither exists. */
static int find_anchor(struct sto *s, const struct qry_around_req *req, int64_t *ts,
		       struct sto_read_error *re, struct qry_error *err)
{
	struct sto_ev_filter f = {.job = req->job,
				  .kinds = 1u << MDL_EV_LOG,
				  .ranks = &req->rank,
				  .nranks = 1,
				  .from_ns = INT64_MIN,
				  .to_ns = INT64_MAX,
				  .by_step = true,
				  .step_from = req->step,
				  .step_to = req->step,
				  .attempt = -1};
	struct evl l = {0};
	bool narrowed;
	*ts = INT64_MAX;
	int rc = read_window(s, &f, req->max_events, false, &l, &narrowed, re);
	if (rc)
		read_failed(err, rc, re, req->max_events, "use window_steps");
	else if (l.n)
		*ts = l.v[l.n - 1]->ev.ts_ns;
	else
		rc = point_anchor(s, req, ts, re, err);
	evl_free(&l);
	return rc;
}

/* Time mode: the `before` logs before the anchor, then `after` from it on,
 * into l oldest first. */
static int read_around(struct sto *s, const struct qry_around_req *req, int64_t anchor,
		       struct evl *l, struct sto_read_error *re, struct qry_error *err)
{
	struct sto_ev_filter f = {.job = req->job,
				  .kinds = 1u << MDL_EV_LOG,
				  .min_level = req->min_level,
				  .ranks = &req->rank,
				  .nranks = 1,
				  .from_ns = INT64_MIN,
				  .to_ns = anchor,
				  .attempt = -1};
	struct evl after = {0};
	bool narrowed;
	int rc = 0;
	f.to_ns = anchor > INT64_MIN ? anchor - 1 : anchor;
	if (req->before && anchor > INT64_MIN)
		rc = read_window(s, &f, req->max_events, true, l, &narrowed, re);
	sort_evl(l, cmp_page);
	for (size_t i = req->before; i < l->n; i++)
		free(l->v[i]);
	l->n = l->n < req->before ? l->n : req->before;
	f.from_ns = anchor;
	f.to_ns = INT64_MAX;
	if (rc == 0 && req->after)
		rc = read_window(s, &f, req->max_events, false, &after, &narrowed, re);
	sort_evl(&after, cmp_oldest);
	for (size_t i = 0; rc == 0 && i < after.n && i < req->after; i++)
		rc = evl_add(l, &after.v[i]->ev);
	if (rc)
		read_failed(err, rc, re, req->max_events, "lower before/after");
	evl_free(&after);
	return rc;
}

static int read_steps(struct sto *s, const struct qry_around_req *req, struct evl *l,
		      struct sto_read_error *re, struct qry_error *err)
{
	int64_t k = req->window_steps;
	struct sto_ev_filter f = {.job = req->job,
				  .kinds = 1u << MDL_EV_LOG,
				  .min_level = req->min_level,
				  .ranks = &req->rank,
				  .nranks = 1,
				  .from_ns = INT64_MIN,
				  .to_ns = INT64_MAX,
				  .by_step = true,
				  .step_from = req->step > k ? req->step - k : 0,
				  .step_to = req->step > INT64_MAX - k ? INT64_MAX : req->step + k,
				  .attempt = -1};
	int rc = read_all(s, &f, req->max_events, l, re);
	if (rc)
		read_failed(err, rc, re, req->max_events,
			    "a smaller window_steps or a higher "
			    "level");
	return rc;
}

void qry_around_free(struct qry_around *a)
{
	if (a)
		qry_events_free(&a->logs);
}

int qry_logs_around(struct sto *s, const struct qry_around_req *req, struct qry_around *out,
		    struct qry_error *err)
{
	struct evl l = {.job = req->job};
	int64_t anchor = INT64_MAX;
	struct sto_read_error *re = malloc(sizeof(*re));
	int rc = re ? 0 : qry_fail(err, QRY_E_INTERNAL, -ENOMEM, "out of memory");
	memset(out, 0, sizeof(*out));
	if (rc == 0 && req->window_steps >= 0)
		rc = read_steps(s, req, &l, re, err);
	else if (rc == 0)
		rc = find_anchor(s, req, &anchor, re, err);
	if (rc == 0 && req->window_steps < 0 && anchor != INT64_MAX)
		rc = read_around(s, req, anchor, &l, re, err);
	if (rc == 0 && l.n == 0)
		rc = check_job(s, req->job, err);
	if (rc == 0 && req->window_steps < 0 && anchor == INT64_MAX)
		rc = qry_fail(err, QRY_E_NOT_FOUND, RDB_ENOTFOUND,
			      "rank %u of job '%.128s' has "
			      "no log and no point at step %lld; pick another step, or use "
			      "window_steps to look at the logs of neighbouring steps",
			      req->rank, req->job, (long long)req->step);
	if (rc)
		goto out;
	sort_evl(&l, cmp_oldest);
	snprintf(out->job, sizeof(out->job), "%s", req->job);
	out->rank = req->rank;
	out->step = req->step;
	out->steps_mode = req->window_steps >= 0;
	out->anchor_ts_ns = anchor;
	evl_give(&l, &out->logs);
out:
	evl_free(&l);
	free(re);
	return rc;
}

/* ---- GET /api/v1/spans ------------------------------------------------------------------ */

static int cmp_span(const void *a, const void *b)
{
	const struct mdl_event *x = &(*(struct qry_event *const *)a)->ev;
	const struct mdl_event *y = &(*(struct qry_event *const *)b)->ev;
	if (x->step != y->step)
		return x->step < y->step ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	if (x->attempt != y->attempt)
		return x->attempt < y->attempt ? -1 : 1;
	if (x->ts_ns != y->ts_ns)
		return x->ts_ns < y->ts_ns ? -1 : 1;
	size_t n = x->text_len < y->text_len ? x->text_len : y->text_len;
	int c = memcmp(x->text, y->text, n);
	if (c)
		return c;
	return x->text_len == y->text_len ? 0 : (x->text_len < y->text_len ? -1 : 1);
}

static bool same_group(const struct mdl_event *a, const struct mdl_event *b)
{
	return a->step == b->step && a->rank == b->rank;
}

void qry_spans_free(struct qry_spans *sp)
{
	if (!sp)
		return;
	qry_events_free(&sp->spans);
	free(sp->g);
	memset(sp, 0, sizeof(*sp));
}

/* Groups the sorted spans by (step, rank); with latest, a group keeps only
 * its highest attempt (the others are dropped from l). */
static int group_spans(struct evl *l, bool latest, struct qry_spans *out)
{
	size_t w = 0;
	out->g = malloc((l->n ? l->n : 1) * sizeof(*out->g));
	if (!out->g)
		return -ENOMEM;
	for (size_t i = 0, end; i < l->n; i = end) {
		const struct mdl_event *e = &l->v[i]->ev;
		int64_t step = e->step;
		uint32_t rank = e->rank, attempt;
		end = i + 1;
		while (end < l->n && same_group(&l->v[end]->ev, e))
			end++;
		attempt = l->v[end - 1]->ev.attempt;
		size_t from = i; /* e is freed below when the latest attempt drops it */
		for (; latest && l->v[from]->ev.attempt != attempt; from++)
			free(l->v[from]);
		struct qry_span_group *g = &out->g[out->ng++];
		*g = (struct qry_span_group){step, rank, attempt, w, end - from, 0};
		for (size_t k = from; k < end; k++) {
			g->total_ns += l->v[k]->ev.duration_ns;
			l->v[w++] = l->v[k];
		}
	}
	l->n = w;
	return 0;
}

int qry_spans(struct sto *s, const struct qry_spans_req *req, struct qry_spans *out,
	      struct qry_error *err)
{
	struct sto_ev_filter f = {.job = req->job,
				  .kinds = 1u << MDL_EV_SPAN,
				  .ranks = req->ranks,
				  .nranks = req->nranks,
				  .from_ns = INT64_MIN,
				  .to_ns = INT64_MAX,
				  .by_step = true,
				  .step_from = req->step_from,
				  .step_to = req->step_to,
				  .attempt = req->attempt};
	struct evl l = {.job = req->job};
	struct sto_read_error *re = malloc(sizeof(*re));
	memset(out, 0, sizeof(*out));
	int rc = re ? read_all(s, &f, req->max_events, &l, re) : -ENOMEM;
	if (rc) {
		read_failed(err, rc, re, req->max_events, "a smaller step range, or fewer ranks");
		goto out;
	}
	if (l.n == 0 && (rc = check_job(s, req->job, err)))
		goto out;
	sort_evl(&l, cmp_span);
	rc = group_spans(&l, req->attempt < 0, out);
	if (rc) {
		qry_fail(err, QRY_E_INTERNAL, rc, "out of memory");
		qry_spans_free(out);
		goto out;
	}
	snprintf(out->job, sizeof(out->job), "%s", req->job);
	evl_give(&l, &out->spans);
out:
	evl_free(&l);
	free(re);
	return rc;
}

/* ---- Grafana annotations ------------------------------------------------------------------ */

struct job_names {
	char (*names)[MDL_JOB_MAX + 1];
	size_t n, cap;
};

static int job_name_cb(void *arg, const char *job, uint64_t nseries)
{
	struct job_names *j = arg;
	(void)nseries;
	if (j->n == MAX_ANNOTATION_JOBS)
		return RDB_ELIMIT;
	if (j->n == j->cap) {
		size_t cap = j->cap ? j->cap * 2 : 16;
		char(*p)[MDL_JOB_MAX + 1] = realloc(j->names, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		j->names = p;
		j->cap = cap;
	}
	snprintf(j->names[j->n++], MDL_JOB_MAX + 1, "%s", job);
	return 0;
}

/* Moves the newest `limit` of src into dst, which then keeps its newest
 * limit; src is emptied. */
static int keep_newest(struct evl *dst, struct evl *src, size_t limit)
{
	size_t take = src->n < limit ? src->n : limit;
	int rc = 0;
	sort_evl(src, cmp_page);
	if (dst->n + take > dst->cap) {
		struct qry_event **p = realloc(dst->v, (dst->n + take) * sizeof(*p));
		rc = p ? 0 : -ENOMEM;
		if (p) {
			dst->v = p;
			dst->cap = dst->n + take;
		}
	}
	for (size_t i = 0; rc == 0 && i < take; i++) {
		dst->v[dst->n++] = src->v[i];
		src->v[i] = NULL;
	}
	evl_clear(src);
	sort_evl(dst, cmp_page);
	for (size_t i = limit; i < dst->n; i++)
		free(dst->v[i]);
	dst->n = dst->n < limit ? dst->n : limit;
	return rc;
}

int qry_events_annotations(struct sto *s, const char *job, int64_t from_ns, int64_t to_ns,
			   uint8_t min_level, size_t limit, struct qry_events *out,
			   struct qry_error *err)
{
	struct job_names jobs = {0};
	struct evl all = {0}, one = {0};
	struct sto_read_error *re = malloc(sizeof(*re));
	bool narrowed;
	int rc = re ? 0 : -ENOMEM;
	if (rc == 0 && job)
		rc = job_name_cb(&jobs, job, 0);
	else if (rc == 0)
		rc = sto_list_jobs(s, job_name_cb, &jobs);
	memset(out, 0, sizeof(*out));
	if (rc) {
		qry_fail(err, rc == RDB_ELIMIT ? QRY_E_LIMIT : QRY_E_INTERNAL, rc,
			 "listing jobs: %s", rdb_strerror(rc));
		goto out;
	}
	for (size_t i = 0; rc == 0 && i < jobs.n && from_ns <= to_ns && limit; i++) {
		struct sto_ev_filter f = {.job = jobs.names[i],
					  .kinds = 1u << MDL_EV_LOG,
					  .min_level = min_level,
					  .from_ns = from_ns,
					  .to_ns = to_ns,
					  .attempt = -1};
		one.job = jobs.names[i];
		rc = read_window(s, &f, QRY_EV_SCAN_MAX, true, &one, &narrowed, re);
		if (rc == 0)
			rc = keep_newest(&all, &one, limit);
		else
			read_failed(err, rc, re, QRY_EV_SCAN_MAX,
				    "a shorter time range or a "
				    "higher level");
	}
	if (rc)
		goto out;
	evl_give(&all, out);
out:
	evl_free(&all);
	evl_free(&one);
	free(jobs.names);
	free(re);
	return rc;
}
