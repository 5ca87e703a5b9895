/* test_json_out.c - the JSON text of the HTTP API (server/json_out.h): the
 * exact number formatter against printf + strtod, the mapping of query error
 * codes to statuses, and the endpoint serialisers over real query results
 * (a response over its bound is a 413; crossrank writes only the columns
 * asked for, its rank columns too, parsed back as JSON). */
#include "check.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "server/json_out.h"
#include "storage/sto.h"

#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define T0 1700000000000000000ll

static char base[4096];

/* Numbers: the exact fast formatter against printf + strtod, on values of
 * every kind (random bits, float32-widened, short decimals, powers of two
 * and ten and their neighbours, ties). No timing. */
static uint64_t pow10_of(int n)
{
	uint64_t p = 1;
	while (n-- > 0)
		p *= 10;
	return p;
}

static void test_json_numbers(void)
{
	uint64_t st = 0x9e3779b97f4a7c15ull;
	size_t bad = 0, n = 0;
	for (int i = 0; i < 400000; i++) {
		st ^= st << 13;
		st ^= st >> 7;
		st ^= st << 17;
		uint64_t r = st, bits;
		switch (i % 6) {
		case 0:
			bits = r;
			break;
		case 1:
			bits = (r & ((1ull << 52) - 1)) | ((1023 - 40 + (r >> 52) % 100) << 52);
			break;
		case 2: {
			uint32_t u = (uint32_t)r;
			float f;
			memcpy(&f, &u, 4);
			bits = rdb_f64_bits((double)f);
			break;
		}
		case 3:
			bits = rdb_f64_bits((double)(int64_t)(r % 100000000) /
					    pow(10, (double)((r >> 40) % 20)));
			break;
		case 4:
			bits = rdb_f64_bits(ldexp(1.0, (int)(r % 200) - 100)) + (r >> 62) - 1;
			break;
		default:
			bits = rdb_f64_bits(pow(10, (double)((int)(r % 60) - 30))) + (r >> 62) - 1;
			break;
		}
		double v = rdb_bits_f64(bits);
		if (isnan(v) || isinf(v) || v == 0 || (v == (double)(int64_t)v && fabs(v) < 1e15))
			continue;
		char a[SRV_FMT_VALUE_MAX], b[SRV_FMT_VALUE_MAX];
		size_t na = srv_fmt_value(a, bits), nb = srv_fmt_value_slow(b, bits);
		n++;
		if (na != nb || memcmp(a, b, na) != 0) {
			if (bad++ < 5)
				fprintf(stderr, "value %016llx: %.*s, printf says %.*s\n",
					(unsigned long long)bits, (int)na, a, (int)nb, b);
		}
	}
	CHECK(n > 300000);
	CHECK_EQ_INT((int)bad, 0);
	/* Values near the read-back boundary of 15 and 16 digits: a decimal
	 * of 15 or 16 digits read as a double, and its neighbours up to two
	 * ulps away, whose shorter candidates miss it by about half an ulp
	 * (the fast path rules most candidates out from their last digits
	 * alone; this is where that bound is tight). */
	bad = 0;
	for (int i = 0; i < 200000; i++) {
		st ^= st << 13;
		st ^= st >> 7;
		st ^= st << 17;
		int digits = 15 + (int)(st & 1);
		uint64_t d = pow10_of(digits - 1) + (st >> 8) % (9 * pow10_of(digits - 1));
		char dec[48];
		snprintf(dec, sizeof(dec), "%llue%d", (unsigned long long)d,
			 (int)((st >> 1) % 40) - 20 - digits);
		uint64_t bits = rdb_f64_bits(strtod(dec, NULL)) + ((st >> 6) % 5) - 2;
		char a[SRV_FMT_VALUE_MAX], b[SRV_FMT_VALUE_MAX];
		size_t na = srv_fmt_value(a, bits), nb = srv_fmt_value_slow(b, bits);
		if (na != nb || memcmp(a, b, na) != 0) {
			if (bad++ < 5)
				fprintf(stderr, "value %016llx: %.*s, printf says %.*s\n",
					(unsigned long long)bits, (int)na, a, (int)nb, b);
		}
	}
	CHECK_EQ_INT((int)bad, 0);
	struct {
		double v;
		const char *text;
	} fixed[] = {{0.1, "0.1"},
		     {-2.5, "-2.5"},
		     {1e-5, "1e-05"},
		     {3e-4, "0.0003"},
		     {11.560216903686523, "11.560216903686523"},
		     {1e15, "1e+15"},
		     {123456789012345.6, "123456789012345.6"},
		     {0.30000000000000004, "0.30000000000000004"},
		     {1e300, "1e+300"},
		     {5e-324, "5e-324"}, /* subnormals: the shortest text that reads back */
		     {1e-310, "1e-310"},
		     {-0.0, "-0.0"},
		     {42, "42"}};
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
		char a[SRV_FMT_VALUE_MAX];
		size_t na = srv_fmt_value(a, rdb_f64_bits(fixed[i].v));
		bool same = na == strlen(fixed[i].text) && memcmp(a, fixed[i].text, na) == 0;
		if (!same)
			fprintf(stderr, "%s: got %.*s\n", fixed[i].text, (int)na, a);
		CHECK(same);
	}
	struct rdb_buf out;
	rdb_buf_init(&out, 1 << 16);
	int64_t ints[] = {0, -1, 1700000000343437568ll, INT64_MIN, INT64_MAX, MDL_STEP_NONE};
	CHECK_EQ_INT(srv_json_i64s(&out, ints, 5), 0);
	CHECK_EQ_INT(srv_json_steps(&out, ints + 4, 2), 0);
	const char *want = "0,-1,1700000000343437568,-9223372036854775808,9223372036854775807"
			   "9223372036854775807,null";
	CHECK(out.len == strlen(want) && memcmp(out.data, want, out.len) == 0);
	rdb_buf_free(&out);
}

/* A computed double (an aggregate, a score) is written as a stored value
 * is (docs/API.md: shortest text that reads back, -0.0 kept, "NaN",
 * "+Inf"/"-Inf"), or null when undefined: the same text whether it goes
 * through srv_json_f64 or straight into an array cell (srv_fmt_f64). */
static void test_json_f64(void)
{
	struct {
		double v;
		bool defined;
		const char *text;
	} pin[] = {{0.1, true, "0.1"},
		   {1e300, true, "1e+300"},
		   {-0.0, true, "-0.0"},
		   {5e-324, true, "5e-324"},
		   {NAN, true, "\"NaN\""},
		   {INFINITY, true, "\"+Inf\""},
		   {-INFINITY, true, "\"-Inf\""},
		   {0.1, false, "null"}};
	for (size_t i = 0; i < sizeof(pin) / sizeof(pin[0]); i++) {
		struct rdb_buf out;
		rdb_buf_init(&out, 64);
		CHECK_EQ_INT(srv_json_f64(&out, pin[i].v, pin[i].defined), 0);
		bool same =
		    out.len == strlen(pin[i].text) && memcmp(out.data, pin[i].text, out.len) == 0;
		if (!same)
			fprintf(stderr, "%s: got %.*s\n", pin[i].text, (int)out.len,
				(const char *)out.data);
		CHECK(same);
		char cell[SRV_FMT_VALUE_MAX];
		size_t n = srv_fmt_f64(cell, pin[i].v, pin[i].defined);
		CHECK(n == out.len && memcmp(cell, out.data, n) == 0);
		rdb_buf_free(&out);
	}
}

/* Integers of every digit count (the formatter works eight digits at a
 * time) against printf, and arrays written straight into a buffer: the
 * same text as element by element, and past the buffer's bound exactly
 * when the text is longer than the bound. */
static void test_json_integers(void)
{
	uint64_t st = 0x2545f4914f6cdd1dull;
	size_t bad = 0;
	for (int i = 0; i < 200000; i++) {
		st ^= st << 13;
		st ^= st >> 7;
		st ^= st << 17;
		int64_t v = (int64_t)(st >> (st % 64));
		v = i % 3 == 0 ? -v : v;
		if (i < 38) /* 10^k (k <= 18) and its neighbours */
			v = (int64_t)pow(10, i / 2) - (i % 2);
		char a[32], b[32];
		size_t na = srv_fmt_i64(a, v);
		int nb = snprintf(b, sizeof(b), "%lld", (long long)v);
		if (na != (size_t)nb || memcmp(a, b, na) != 0)
			bad++;
	}
	CHECK_EQ_INT((int)bad, 0);
	int64_t v[1000];
	char want[32 * 1000];
	size_t wlen = 0;
	for (size_t i = 0; i < 1000; i++) {
		v[i] = (int64_t)(i * 7919) * (i % 2 ? -1 : 1) * 1000003;
		wlen += (size_t)snprintf(want + wlen, sizeof(want) - wlen, "%s%lld", i ? "," : "",
					 (long long)v[i]);
	}
	for (size_t max = wlen - 30; max <= wlen + 30; max++) {
		struct rdb_buf out;
		rdb_buf_init(&out, max);
		int rc = srv_json_i64s(&out, v, 1000);
		CHECK_EQ_INT(rc, max >= wlen ? 0 : RDB_ELIMIT);
		if (rc == 0)
			CHECK(out.len == wlen && memcmp(out.data, want, wlen) == 0);
		rdb_buf_free(&out);
	}
}

/* Values at and next to integers of every binary magnitude: an integer
 * below 1e15 is written as one, anything else as the shortest text that
 * reads back (srv_fmt_value decides that from the exponent field first). */
static void test_json_near_integers(void)
{
	size_t bad = 0;
	for (int e = -2; e <= 64; e++) {
		for (int j = 0; j < 40; j++) {
			double b0 = ldexp(1.0, e) + (j < 20 ? j : -(j - 20) * 3.0);
			double cand[] = {b0,
					 nextafter(b0, 0),
					 nextafter(b0, INFINITY),
					 b0 + 0.5,
					 -b0,
					 1e15 - j,
					 1e15 + j,
					 -1e15 + j};
			for (size_t c = 0; c < sizeof(cand) / sizeof(cand[0]); c++) {
				double v = cand[c];
				if (v == 0 || isinf(v))
					continue;
				char a[SRV_FMT_VALUE_MAX], b[SRV_FMT_VALUE_MAX];
				size_t na = srv_fmt_value(a, rdb_f64_bits(v)), nb;
				if (fabs(v) < 1e15 && v == (double)(int64_t)v)
					nb = (size_t)snprintf(b, sizeof(b), "%lld",
							      (long long)(int64_t)v);
				else
					nb = srv_fmt_value_slow(b, rdb_f64_bits(v));
				if (na != nb || memcmp(a, b, na) != 0) {
					if (bad++ < 5)
						fprintf(stderr, "%.17g: %.*s, want %.*s\n", v,
							(int)na, a, (int)nb, b);
				}
			}
		}
	}
	CHECK_EQ_INT((int)bad, 0);
}

static void test_statuses(void)
{
	CHECK_EQ_INT(srv_qry_status(QRY_E_INVALID), 400);
	CHECK_EQ_INT(srv_qry_status(QRY_E_NOT_FOUND), 404);
	CHECK_EQ_INT(srv_qry_status(QRY_E_TOO_LARGE), 413);
	CHECK_EQ_INT(srv_qry_status(QRY_E_LIMIT), 422);
	CHECK_EQ_INT(srv_qry_status(QRY_E_UNSUPPORTED), 422);
	CHECK_EQ_INT(srv_qry_status(QRY_E_INTERNAL), 500);
}

static struct sto *open_store(void)
{
	char dir[4300];
	snprintf(dir, sizeof(dir), "%s/store", base);
	struct sto_options o;
	sto_options_default(&o);
	o.data_dir = dir;
	o.chunk_max_points = 8;
	o.sync = STO_SYNC_NONE;
	o.index_map_bytes = 64ull << 20;
	struct sto *s = NULL;
	CHECK_EQ_INT(sto_open(&o, &s), 0);
	return s;
}

static void test_serialisers(void)
{
	struct sto *s = open_store();
	struct mdl_batch *b;
	CHECK_EQ_INT(mdl_batch_new(1 << 16, 64, &b), 0);
	for (uint32_t r = 0; r < 8; r++)
		for (int64_t st = 0; st < 40; st++)
			mdl_batch_add(b, "jo", 2, r, "step_time", 9, T0 + st * 100 + r, st, 0,
				      rdb_f64_bits(r == 3 ? 2.0 : 1.0 + 0.01 * r));
	CHECK_EQ_INT(sto_write(s, b), 0);
	mdl_batch_free(b);
	struct qry_error err;
	const char *m[] = {"step_time"};
	struct qry_ds_req d = {.job = "jo",
			       .metrics = m,
			       .nmetrics = 1,
			       .aggs = QRY_AGG_AVG,
			       .max_points = 1000000,
			       .spec = {.range = {INT64_MIN, INT64_MAX, false, 0, INT64_MAX},
					.attempt = QRY_ATTEMPT_LATEST,
					.axis_set = true,
					.axis = QRY_AXIS_STEP,
					.width = 1}};
	struct qry_ds_result ds;
	CHECK_EQ_INT(qry_downsample(s, &d, &ds, &err), 0);
	/* a response over the bound is a 413 */
	struct rdb_buf small, out;
	rdb_buf_init(&small, 64);
	CHECK_EQ_INT(srv_write_downsample(&small, &ds, &err), RDB_ELIMIT);
	CHECK_EQ_INT(srv_qry_status(err.code), 413);
	rdb_buf_free(&small);
	/* every bound near the answer's length: the whole answer, the same
	 * bytes (columns are written straight into the buffer only when they
	 * fit, else a cell at a time), or a 413 - never a cut answer */
	struct rdb_buf full;
	rdb_buf_init(&full, 1 << 20);
	d.aggs =
	    QRY_AGG_AVG | QRY_AGG_MIN | QRY_AGG_MAX | QRY_AGG_SUM | QRY_AGG_FIRST | QRY_AGG_LAST;
	qry_ds_result_free(&ds);
	CHECK_EQ_INT(qry_downsample(s, &d, &ds, &err), 0);
	CHECK_EQ_INT(srv_write_downsample(&full, &ds, &err), 0);
	size_t n_ok = 0, n_413 = 0;
	for (size_t max = full.len > 3000 ? full.len - 3000 : 1; max <= full.len + 64; max++) {
		struct rdb_buf bounded;
		rdb_buf_init(&bounded, max);
		int rc = srv_write_downsample(&bounded, &ds, &err);
		if (rc == 0) {
			n_ok++;
			CHECK(bounded.len == full.len &&
			      memcmp(bounded.data, full.data, full.len) == 0);
		} else {
			n_413++;
			CHECK(rc == RDB_ELIMIT && max < full.len);
		}
		rdb_buf_free(&bounded);
	}
	CHECK(n_ok == 65 && n_413 > 0);
	rdb_buf_free(&full);
	qry_ds_result_free(&ds);
	/* crossrank agg=mean,max: start, end and those columns only */
	struct qry_xr_req q = {.job = "jo",
			       .metric = "step_time",
			       .max_points = 1000000,
			       .cols = QRY_XR_MEAN | QRY_XR_MAX,
			       .spec = d.spec};
	struct qry_xr_result xr;
	CHECK_EQ_INT(qry_crossrank(s, &q, &xr, &err), 0);
	rdb_buf_init(&out, 1 << 20);
	CHECK_EQ_INT(srv_write_crossrank(&out, &xr, &err), 0);
	rdb_buf_putc(&out, 0);
	const char *keep[] = {"\"start\":[0,1,", "\"end\":[0,1,", "\"mean\":[", "\"max\":[2,2,",
			      "\"ranks\":[0,1,2,3,4,5,6,7]"};
	for (int c = 0; c < 5; c++)
		CHECK(strstr((char *)out.data, keep[c]) != NULL);
	const char *drop[] = {"\"min\"",    "\"median\"", "\"p10\"",
			      "\"stddev\"", "\"argmax\"", "\"count\""};
	for (int c = 0; c < 6; c++)
		CHECK(strstr((char *)out.data, drop[c]) == NULL);
	/* its columns are arrays too: the whole answer or a 413 at every bound */
	size_t xr_len = out.len - 1, xr_ok = 0;
	for (size_t max = xr_len > 600 ? xr_len - 600 : 1; max <= xr_len + 8; max++) {
		struct rdb_buf bounded;
		rdb_buf_init(&bounded, max);
		int rc = srv_write_crossrank(&bounded, &xr, &err);
		if (rc == 0) {
			xr_ok++;
			CHECK(bounded.len == xr_len && memcmp(bounded.data, out.data, xr_len) == 0);
		} else {
			CHECK(rc == RDB_ELIMIT && max < xr_len);
		}
		rdb_buf_free(&bounded);
	}
	CHECK_EQ_INT(xr_ok, 9);
	rdb_buf_free(&out);
	qry_xr_result_free(&xr);
	sto_close(s);
}

/* The cross-rank fixture of test_crossrank_ranks: ranks of every digit
 * count up to the largest real rank, so rank cells of many widths meet the
 * bound. */
#define XA_STEPS  300
#define XA_NRANKS 7
static const uint32_t xa_ranks[XA_NRANKS] = {0, 1, 2, 9, 10, 99999, MDL_RANK_MAX};

/* Rank xa_ranks[j]'s point at step st: false when it has none, else its
 * value's bits. Steps without any point (st % 17 == 5) and steps whose
 * points are all NaN or null (st % 19 == 7) are buckets without data;
 * st % 13 == 0 has one rank only; some ranks hold NaN, null or nothing at
 * some steps (not counted there); values -3..3 make ties between ranks,
 * and every rank holds the min and the max of some steps. */
static bool xa_point(int64_t st, size_t j, uint64_t *bits)
{
	if (st % 17 == 5 || (st % 13 == 0 && j != XA_NRANKS - 1) || (j == 3 && st % 11 == 4))
		return false;
	if (st % 19 == 7)
		*bits = j % 2 ? MDL_VALUE_NULL_BITS : MDL_VALUE_NAN_BITS;
	else if (j == 1 && st % 7 == 3)
		*bits = MDL_VALUE_NAN_BITS;
	else if (j == 2 && st % 5 == 1)
		*bits = MDL_VALUE_NULL_BITS;
	else
		*bits = rdb_f64_bits(
		    (double)((st * 5 + (int64_t)(j * j * 3) + st / 9 * (int64_t)j) % 7) - 3.0);
	return true;
}

/* The expected rows, computed from xa_point alone: per step with a value,
 * the step and the ranks holding the min and the max (ties: lowest rank). */
static size_t xa_expect(int64_t *step, uint32_t *argmin, uint32_t *argmax)
{
	size_t n = 0;
	for (int64_t st = 0; st < XA_STEPS; st++) {
		double lo = 0, hi = 0;
		bool any = false;
		for (size_t j = 0; j < XA_NRANKS; j++) {
			uint64_t bits;
			if (!xa_point(st, j, &bits) || isnan(rdb_bits_f64(bits)))
				continue;
			double v = rdb_bits_f64(bits);
			if (!any || v < lo) {
				lo = v;
				argmin[n] = xa_ranks[j];
			}
			if (!any || v > hi) {
				hi = v;
				argmax[n] = xa_ranks[j];
			}
			any = true;
		}
		if (any)
			step[n++] = st;
	}
	return n;
}

/* An array member of o holding integers equal to want[0..n). */
static bool json_ints_are(const json_t *o, const char *key, const int64_t *want, size_t n)
{
	const json_t *a = json_object_get(o, key);
	if (!json_is_array(a) || json_array_size(a) != n) {
		fprintf(stderr, "\"%s\": not an array of %zu\n", key, n);
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		const json_t *v = json_array_get(a, i);
		if (!json_is_integer(v) || json_integer_value(v) != want[i]) {
			fprintf(stderr, "\"%s\"[%zu]: want %lld\n", key, i, (long long)want[i]);
			return false;
		}
	}
	return true;
}

/* crossrank with argmin and argmax asked for, over buckets with and
 * without data: under every bound up to past the answer's length, the whole
 * answer byte for byte or a 413; and the answer parses as JSON with the
 * ranks expected (integers, never null or "job": buckets without data have
 * no row, the job-level pseudo-rank is not compared), through the streamed
 * rows (argmin/argmax only) and the sorted ones (median too). */
static void test_crossrank_ranks(void)
{
	struct sto *s = open_store();
	struct mdl_batch *b;
	CHECK_EQ_INT(mdl_batch_new(1 << 16, 64, &b), 0);
	for (int64_t st = 0; st < XA_STEPS; st++) {
		for (size_t j = 0; j < XA_NRANKS; j++) {
			uint64_t bits;
			if (xa_point(st, j, &bits))
				CHECK_EQ_INT(mdl_batch_add(b, "xa", 2, xa_ranks[j], "loss", 4,
							   T0 + st * 100 + (int64_t)j, st, 0, bits),
					     0);
		}
		/* the job level: lower and higher than every rank, at every step */
		CHECK_EQ_INT(mdl_batch_add(b, "xa", 2, MDL_RANK_JOB, "loss", 4, T0 + st * 100 + 50,
					   st, 0, rdb_f64_bits(st % 2 ? -100.0 : 100.0)),
			     0);
	}
	CHECK_EQ_INT(sto_write(s, b), 0);
	mdl_batch_free(b);
	static int64_t step[XA_STEPS], lo[XA_STEPS], hi[XA_STEPS];
	uint32_t argmin[XA_STEPS], argmax[XA_STEPS];
	size_t nrows = xa_expect(step, argmin, argmax);
	for (size_t i = 0; i < nrows; i++) {
		lo[i] = argmin[i];
		hi[i] = argmax[i];
	}
	/* the fixture has every case: gaps, one-rank rows, every rank (of
	 * every width) holding a min and a max */
	CHECK(nrows > 200 && nrows < XA_STEPS - 25);
	bool one = false;
	for (size_t i = 0; i < nrows; i++)
		one |= step[i] % 13 == 0;
	CHECK(one);
	for (size_t j = 0; j < XA_NRANKS; j++) {
		bool has_min = false, has_max = false;
		for (size_t i = 0; i < nrows; i++) {
			has_min |= argmin[i] == xa_ranks[j] && step[i] % 13 != 0;
			has_max |= argmax[i] == xa_ranks[j] && step[i] % 13 != 0;
		}
		CHECK(has_min && has_max);
	}
	int64_t ranks[XA_NRANKS];
	for (size_t j = 0; j < XA_NRANKS; j++)
		ranks[j] = xa_ranks[j];
	const uint32_t cols[] = {QRY_XR_ARGMIN | QRY_XR_ARGMAX,
				 QRY_XR_ARGMIN | QRY_XR_ARGMAX | QRY_XR_MEDIAN};
	for (size_t c = 0; c < 2; c++) {
		struct qry_error err;
		struct qry_xr_req q = {
		    .job = "xa",
		    .metric = "loss",
		    .max_points = 1000000,
		    .cols = cols[c],
		    .spec = {.range = {INT64_MIN, INT64_MAX, false, 0, INT64_MAX},
			     .attempt = QRY_ATTEMPT_LATEST,
			     .axis_set = true,
			     .axis = QRY_AXIS_STEP,
			     .width = 1}};
		struct qry_xr_result xr;
		CHECK_EQ_INT(qry_crossrank(s, &q, &xr, &err), 0);
		struct rdb_buf out;
		rdb_buf_init(&out, 1 << 20);
		CHECK_EQ_INT(srv_write_crossrank(&out, &xr, &err), 0);
		json_error_t jerr;
		json_t *o = json_loadb((const char *)out.data, out.len, 0, &jerr);
		CHECK(o != NULL);
		if (!o)
			fprintf(stderr, "crossrank answer: %s at %d\n", jerr.text, jerr.position);
		CHECK(json_ints_are(o, "ranks", ranks, XA_NRANKS));
		CHECK(json_ints_are(o, "start", step, nrows));
		CHECK(json_ints_are(o, "end", step, nrows));
		CHECK(json_ints_are(o, "argmin", lo, nrows));
		CHECK(json_ints_are(o, "argmax", hi, nrows));
		CHECK(json_integer_value(json_object_get(o, "buckets")) == (json_int_t)nrows);
		CHECK(json_object_get(o, "mean") == NULL && json_object_get(o, "count") == NULL);
		CHECK((json_object_get(o, "median") != NULL) == (c == 1));
		json_decref(o);
		/* every bound from nothing to past the answer's length */
		size_t len = out.len, n_ok = 0, n_bad = 0;
		for (size_t max = 1; max <= len + 8; max++) {
			struct rdb_buf bounded;
			rdb_buf_init(&bounded, max);
			int rc = srv_write_crossrank(&bounded, &xr, &err);
			if (rc == 0) {
				n_ok++;
				if (bounded.len != len || memcmp(bounded.data, out.data, len) != 0)
					n_bad++;
			} else if (rc != RDB_ELIMIT || max >= len ||
				   srv_qry_status(err.code) != 413) {
				n_bad++;
			}
			rdb_buf_free(&bounded);
		}
		CHECK_EQ_INT(n_ok, 9);
		CHECK_EQ_INT(n_bad, 0);
		rdb_buf_free(&out);
		qry_xr_result_free(&xr);
	}
	sto_close(s);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int main(void)
{
	const char *tmp = getenv("RDB_TEST_TMP");
	snprintf(base, sizeof(base), "%s/test_json_out.XXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	RUN(test_json_numbers);
	RUN(test_json_integers);
	RUN(test_json_near_integers);
	RUN(test_json_f64);
	RUN(test_statuses);
	RUN(test_serialisers);
	RUN(test_crossrank_ranks);
	int rc = check_summary("json_out");
	if (rc == 0)
		nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return rc;
}
