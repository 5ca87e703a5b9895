/* test_codec.c - the chunk codec: bit-exact round trips over random and
 * realistic series at every chunk size that matters, the encoder's choice on
 * clear cases, hand-made malformed payloads, and byte-flip / truncation of
 * real payloads (run under ASan to catch any out-of-bounds read). Prints
 * bytes/point of the realistic series to stderr (not asserted). */
#include "common/rdb_buf.h"
#include "common/rdb_err.h"
#include "common/rdb_le.h"
#include "storage/chunk/codec.h"
#include "storage/chunk/codec_int.h"
#include "storage/format.h"
#include "tests/unit/check.h"
#include "tests/unit/rng.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

static const size_t sizes[] = {1, 2, 3, 100, 4096, 65536};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* uniform in [0, 1) */
static double rnd01(void)
{
	return (double)(rnd() >> 11) / 9007199254740992.0;
}

/* approximately normal, mean 0, sd 1 */
static double rnd_norm(void)
{
	double s = 0;
	for (int i = 0; i < 12; i++)
		s += rnd01();
	return s - 6.0;
}

static uint64_t f32w(float f)
{
	return rdb_f64_bits((double)f);
}

static struct mdl_cols make(size_t n)
{
	struct mdl_cols c = MDL_COLS_INIT;
	CHECK_EQ_INT(mdl_cols_reserve(&c, n), 0);
	c.n = n;
	for (size_t i = 0; i < n; i++) {
		c.ts_ns[i] = 1700000000000000000ll + (int64_t)i * 300000000ll;
		c.step[i] = (int64_t)i;
		c.attempt[i] = 0;
		c.value[i] = rdb_f64_bits((double)i);
	}
	return c;
}

static bool cols_equal(const struct mdl_cols *a, const struct mdl_cols *b)
{
	if (a->n != b->n)
		return false;
	size_t n = a->n;
	return !memcmp(a->ts_ns, b->ts_ns, n * 8) && !memcmp(a->step, b->step, n * 8) &&
	       !memcmp(a->attempt, b->attempt, n * 4) && !memcmp(a->value, b->value, n * 8);
}

/* Encodes, decodes (also with trailing bytes after the payload), checks the
 * result is bit-exact; returns the payload size. */
static size_t roundtrip(const struct mdl_cols *c, struct sto_codec_info *info)
{
	struct rdb_buf buf;
	rdb_buf_init(&buf, 64u << 20);
	CHECK_EQ_INT(rdb_buf_append(&buf, "xyz", 3), 0); /* encode appends */
	int rc = sto_codec_encode(c, &buf, info);
	CHECK_EQ_INT(rc, 0);
	size_t len = buf.len - 3;
	CHECK_EQ_INT(rdb_buf_append(&buf, "trailer", 7), 0);
	struct mdl_cols d = MDL_COLS_INIT;
	size_t used = 0;
	rc = sto_codec_decode(buf.data + 3, len + 7, (uint32_t)c->n, &d, &used);
	CHECK_EQ_INT(rc, 0);
	CHECK_EQ_INT(used, len);
	CHECK(cols_equal(c, &d));
	if (c->n > 1) /* n above max_points is refused */
		CHECK_EQ_INT(sto_codec_decode(buf.data + 3, len, (uint32_t)c->n - 1, &d, NULL),
			     RDB_ECORRUPT);
	/* without the ts column: the same bytes consumed, the other columns
	 * exact, ts_ns left as it was */
	struct mdl_cols e = MDL_COLS_INIT;
	CHECK_EQ_INT(mdl_cols_reserve(&e, c->n), 0);
	for (size_t i = 0; i < c->n; i++)
		e.ts_ns[i] = -7;
	used = 0;
	CHECK_EQ_INT(sto_codec_decode_flags(buf.data + 3, len + 7, (uint32_t)c->n,
					    STO_CODEC_SKIP_TS, &e, &used),
		     0);
	CHECK_EQ_INT(used, len);
	bool same = e.n == c->n;
	for (size_t i = 0; same && i < c->n; i++)
		same = e.ts_ns[i] == -7 && e.step[i] == c->step[i] &&
		       e.attempt[i] == c->attempt[i] && e.value[i] == c->value[i];
	CHECK(same);
	/* a payload cut inside any column is still refused */
	CHECK_EQ_INT(sto_codec_decode_flags(buf.data + 3, len - 1, (uint32_t)c->n,
					    STO_CODEC_SKIP_TS, &e, NULL),
		     RDB_ECORRUPT);
	mdl_cols_free(&e);
	mdl_cols_free(&d);
	rdb_buf_free(&buf);
	return len;
}

static bool is_name(uint8_t enc, const char *name)
{
	return strcmp(sto_codec_name(enc), name) == 0;
}

static bool is_f32(uint8_t enc)
{
	return is_name(enc, "f32_xor") || is_name(enc, "f32_shuf_zstd");
}

/* The value column, or its first block when stored in blocks, is float32. */
static bool value_f32(const struct sto_codec_info *info)
{
	if (is_name(info->enc_value, "blocked"))
		return is_f32(info->enc_value_block0);
	return is_f32(info->enc_value);
}

/* ---- value generators ---------------------------------------------------- */

typedef void (*fill_fn)(struct mdl_cols *c);

static const uint64_t specials[] = {
    0x7ff8000000000000ull, 0x7ff8000000000001ull, 0x7ff0000000000001ull, 0xfff8000000000000ull,
    0x7fffffffffffffffull, 0x7ff0000000000000ull, 0xfff0000000000000ull, 0x8000000000000000ull,
    0x0000000000000000ull, 0x0000000000000001ull, 0x800fffffffffffffull, 0x0010000000000000ull,
    0x7fefffffffffffffull, 0x3ff0000000000000ull,
};
#define NSPECIALS (sizeof(specials) / sizeof(specials[0]))

static void fill_specials(struct mdl_cols *c)
{
	for (size_t i = 0; i < c->n; i++)
		c->value[i] = rnd() % 3 ? specials[rnd() % NSPECIALS] : rnd();
}

static void fill_random_bits(struct mdl_cols *c)
{
	for (size_t i = 0; i < c->n; i++)
		c->value[i] = rnd();
}

static void fill_constant(struct mdl_cols *c)
{
	for (size_t i = 0; i < c->n; i++)
		c->value[i] = rdb_f64_bits(0.125);
}

/* GPU memory used, bytes: a plateau with occasional allocations. */
static void fill_memory(struct mdl_cols *c)
{
	double mem = 30e9;
	for (size_t i = 0; i < c->n; i++) {
		if (rnd() % 50 == 0)
			mem += (double)((int64_t)(rnd() % 2000000) - 1000000) * 512;
		c->value[i] = rdb_f64_bits(mem);
	}
}

/* GPU temperature, whole degrees C. */
static void fill_temperature(struct mdl_cols *c)
{
	int t = 65;
	for (size_t i = 0; i < c->n; i++) {
		t += (int)(rnd() % 3) - 1;
		t = t < 40 ? 40 : t > 90 ? 90 : t;
		c->value[i] = rdb_f64_bits((double)t);
	}
}

/* tokens processed: a counter with noisy increments */
static void fill_counter(struct mdl_cols *c)
{
	double v = 0;
	for (size_t i = 0; i < c->n; i++) {
		v += 4096 + (double)(rnd() % 64);
		c->value[i] = rdb_f64_bits(v);
	}
}

static void fill_float32_random(struct mdl_cols *c)
{
	for (size_t i = 0; i < c->n; i++)
		c->value[i] = f32w((float)(rnd_norm() * 1000.0));
}

static void fill_noisy_f64(struct mdl_cols *c)
{
	for (size_t i = 0; i < c->n; i++)
		c->value[i] = rdb_f64_bits(100.0 + rnd_norm());
}

/* training loss: float32, exponential decay plus noise */
static void fill_loss(struct mdl_cols *c)
{
	for (size_t i = 0; i < c->n; i++) {
		double x = 2.0 + 8.0 * exp(-(double)i / 3000.0);
		c->value[i] = f32w((float)(x * (1.0 + 0.02 * rnd_norm())));
	}
}

/* gradient norm: float32, noisy with spikes */
static void fill_grad_norm(struct mdl_cols *c)
{
	for (size_t i = 0; i < c->n; i++) {
		double g = 1.0 + 0.3 * fabs(rnd_norm()) + (rnd() % 500 == 0 ? 20.0 : 0.0);
		c->value[i] = f32w((float)g);
	}
}

/* learning rate: linear warmup then cosine decay, full float64 */
static void fill_lr(struct mdl_cols *c)
{
	const double peak = 3e-4, warm = 2000, total = 100000;
	for (size_t i = 0; i < c->n; i++) {
		double s = (double)i, lr;
		if (s < warm)
			lr = peak * (s + 1) / warm;
		else
			lr = peak * 0.5 * (1 + cos(M_PI * (s - warm) / (total - warm)));
		c->value[i] = rdb_f64_bits(lr);
	}
}

/* step time, seconds: full float64 timings */
static void fill_step_time(struct mdl_cols *c)
{
	for (size_t i = 0; i < c->n; i++)
		c->value[i] = rdb_f64_bits(0.3 + 0.01 * fabs(rnd_norm()));
}

/* ---- time, step and attempt generators ----------------------------------- */

static void ts_regular_jitter(struct mdl_cols *c)
{
	for (size_t i = 0; i < c->n; i++)
		c->ts_ns[i] = 1700000000000000000ll + (int64_t)i * 300000000ll +
			      (int64_t)(rnd() % 2000000) - 1000000;
}

/* whole milliseconds, as from InfluxDB line protocol with precision=ms */
static void ts_ms_precision(struct mdl_cols *c)
{
	for (size_t i = 0; i < c->n; i++)
		c->ts_ns[i] = (1700000000000ll + (int64_t)i * 300 + (int64_t)(rnd() % 5)) * 1000000;
}

static void ts_out_of_order(struct mdl_cols *c)
{
	ts_regular_jitter(c);
	for (size_t i = 0; i + 1 < c->n; i++) {
		size_t j = i + (size_t)(rnd() % (c->n - i));
		int64_t t = c->ts_ns[i];
		c->ts_ns[i] = c->ts_ns[j];
		c->ts_ns[j] = t;
	}
}

static void ts_duplicates(struct mdl_cols *c)
{
	for (size_t i = 0; i < c->n; i++)
		c->ts_ns[i] = 1700000000000000000ll + (int64_t)(i / 8) * 1000000000ll;
}

static void ts_negative(struct mdl_cols *c)
{
	for (size_t i = 0; i < c->n; i++)
		c->ts_ns[i] = -5000000000ll + (int64_t)i * 7 - (int64_t)(rnd() % 3);
}

static void ts_extremes(struct mdl_cols *c)
{
	static const int64_t ext[] = {INT64_MIN, INT64_MAX, 0, -1, INT64_MIN + 1, INT64_MAX - 1};
	for (size_t i = 0; i < c->n; i++)
		c->ts_ns[i] = ext[rnd() % 6];
}

static void steps_absent(struct mdl_cols *c)
{
	for (size_t i = 0; i < c->n; i++)
		c->step[i] = MDL_STEP_NONE;
}

static void steps_partly_absent(struct mdl_cols *c)
{
	for (size_t i = 0; i < c->n; i++)
		c->step[i] = rnd() % 4 ? (int64_t)i : MDL_STEP_NONE;
}

static void steps_block_absent(struct mdl_cols *c)
{
	for (size_t i = 0; i < c->n; i++)
		c->step[i] = i < c->n / 3 ? MDL_STEP_NONE : (int64_t)i;
}

static void steps_gaps(struct mdl_cols *c)
{
	int64_t s = 1000;
	for (size_t i = 0; i < c->n; i++) {
		s += rnd() % 100 == 0 ? (int64_t)(rnd() % 5000) - 1000 : 10;
		c->step[i] = s;
	}
}

static void steps_extremes(struct mdl_cols *c)
{
	for (size_t i = 0; i < c->n; i++)
		c->step[i] = rnd() % 2 ? INT64_MAX : MDL_STEP_NONE + (int64_t)(rnd() % 3);
}

static void attempts_changing(struct mdl_cols *c)
{
	for (size_t i = 0; i < c->n; i++)
		c->attempt[i] = i < c->n / 2 ? 0 : (i < c->n * 3 / 4 ? 1 : 2);
}

static void attempts_random(struct mdl_cols *c)
{
	for (size_t i = 0; i < c->n; i++)
		c->attempt[i] = (uint32_t)rnd();
}

/* ---- round-trip tests ---------------------------------------------------- */

static void test_values_roundtrip(void)
{
	const fill_fn fills[] = {fill_specials,	      fill_random_bits, fill_constant,
				 fill_memory,	      fill_temperature, fill_counter,
				 fill_float32_random, fill_noisy_f64,	fill_loss,
				 fill_grad_norm,      fill_lr,		fill_step_time};
	for (size_t f = 0; f < sizeof(fills) / sizeof(fills[0]); f++) {
		for (size_t s = 0; s < NSIZES; s++) {
			struct mdl_cols c = make(sizes[s]);
			fills[f](&c);
			roundtrip(&c, NULL);
			mdl_cols_free(&c);
		}
	}
}

static void test_columns_roundtrip(void)
{
	const fill_fn fills[] = {ts_regular_jitter, ts_ms_precision,	 ts_out_of_order,
				 ts_duplicates,	    ts_negative,	 ts_extremes,
				 steps_absent,	    steps_partly_absent, steps_block_absent,
				 steps_gaps,	    steps_extremes,	 attempts_changing,
				 attempts_random};
	for (size_t f = 0; f < sizeof(fills) / sizeof(fills[0]); f++) {
		for (size_t s = 0; s < NSIZES; s++) {
			struct mdl_cols c = make(sizes[s]);
			fills[f](&c);
			fill_specials(&c);
			roundtrip(&c, NULL);
			mdl_cols_free(&c);
		}
	}
}

/* Every float32 class (NaN payloads, sNaN, denormals, +-0, +-Inf) widened
 * must be found float32-exact and come back bit-exact. */
static void test_float32_classes(void)
{
	static const uint32_t f32s[] = {0x7fc00000u, 0x7fc00001u, 0x7f800001u, 0xffbfffffu,
					0x00000001u, 0x807fffffu, 0x00400000u, 0x80000000u,
					0x7f800000u, 0xff800000u, 0x7f7fffffu, 0x00800000u};
	struct mdl_cols c = make(4096);
	for (size_t i = 0; i < c.n; i++) {
		uint32_t f = i < 12 ? f32s[i] : (uint32_t)rnd();
		float fl;
		memcpy(&fl, &f, 4);
		uint32_t e = (f >> 23) & 0xff, m = f & 0x7fffff;
		if (e == 0xff && m) /* NaN: widen on bits; the FPU would quiet it */
			c.value[i] = (uint64_t)(f >> 31) << 63 | 0x7ffull << 52 | (uint64_t)m << 29;
		else
			c.value[i] = f32w(fl);
	}
	struct sto_codec_info info;
	roundtrip(&c, &info);
	CHECK(value_f32(&info));
	/* one value that is not float32-exact disables the candidate (in its
	 * block, when the column is stored in blocks) */
	c.value[100] = 0x7ff0000000000001ull; /* a signalling NaN */
	roundtrip(&c, &info);
	CHECK(!value_f32(&info));
	mdl_cols_free(&c);
}

static uint32_t xs32(uint32_t *st)
{
	*st ^= *st << 13;
	*st ^= *st >> 17;
	*st ^= *st << 5;
	return *st;
}

/* The float64 pattern of float32 pattern f, field by field. */
static uint64_t widen_ref(uint32_t f)
{
	uint32_t e = (f >> 23) & 0xff, m = f & 0x7fffff;
	if (e == 0xff && m) /* NaN: on bits, the FPU would quiet it */
		return (uint64_t)(f >> 31) << 63 | 0x7ffull << 52 | (uint64_t)m << 29;
	float fl;
	memcpy(&fl, &f, 4);
	return f32w(fl);
}

/* sto_codec_widen_f32 finds one value of every special class (zero,
 * denormal, Inf, NaN) at any place among normal ones, in runs of odd and
 * even length, and widens every value exactly. */
static void test_widen_f32(void)
{
	static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu,
					   0x7f800000u, 0xff800000u, 0x7fc00001u, 0xffbfffffu};
	static const uint32_t edge[] = {0x00800000u, 0x7f7fffffu, 0x80800000u, 0xff7fffffu};
	uint64_t v[67], want[67];
	uint32_t st = 0x2545f491u; /* its own sequence: the shared rnd() feeds later tests */
	for (size_t n = 1; n <= 67; n += 11) {
		for (size_t s = 0; s <= sizeof(special) / sizeof(special[0]); s++) {
			size_t at = (size_t)xs32(&st) % n;
			for (size_t i = 0; i < n; i++) {
				uint32_t f = i % 5 == 4 ? edge[i % 4]
							: (xs32(&st) & 0x807fffffu) |
							      (1 + xs32(&st) % 254) << 23;
				if (s < sizeof(special) / sizeof(special[0]) && i == at)
					f = special[s];
				v[i] = f;
				want[i] = widen_ref(f);
			}
			sto_codec_widen_f32(v, n);
			CHECK(memcmp(v, want, n * sizeof(v[0])) == 0);
		}
	}
}

static void test_choices(void)
{
	struct sto_codec_info info;
	struct mdl_cols c = make(4096);
	fill_temperature(&c);
	roundtrip(&c, &info);
	CHECK(is_name(info.enc_value, "int"));
	CHECK(is_name(info.enc_step, "delta_rle"));
	CHECK(is_name(info.enc_attempt, "const32"));
	CHECK(info.bytes_step < 16);
	fill_counter(&c);
	roundtrip(&c, &info);
	CHECK(is_name(info.enc_value, "int"));
	/* a plateau gauge: "int", or its bit patterns as an int64 stream, can win */
	fill_memory(&c);
	roundtrip(&c, &info);
	CHECK(info.bytes_value < c.n / 4);
	fill_loss(&c);
	roundtrip(&c, &info);
	CHECK(value_f32(&info));
	fill_float32_random(&c);
	roundtrip(&c, &info);
	CHECK(value_f32(&info));
	fill_constant(&c);
	steps_absent(&c);
	attempts_changing(&c);
	roundtrip(&c, &info);
	CHECK(is_name(info.enc_value, "const64"));
	CHECK(is_name(info.enc_step, "absent"));
	CHECK_EQ_INT(info.bytes_step, 0);
	CHECK(is_name(info.enc_attempt, "rle32"));
	steps_partly_absent(&c);
	attempts_random(&c);
	roundtrip(&c, &info);
	CHECK(is_name(info.enc_step, "masked"));
	CHECK(is_name(info.enc_attempt, "raw32"));
	ts_ms_precision(&c);
	roundtrip(&c, &info);
	CHECK(is_name(info.enc_ts, "scaled"));
	CHECK(info.bytes_ts < c.n * 2);
	c.value[7] = rdb_f64_bits(-0.0); /* -0.0 is not an integer gauge */
	roundtrip(&c, &info);
	CHECK(!is_name(info.enc_value, "int"));
	mdl_cols_free(&c);
}

/* The encoder skips candidates that cannot or rarely win (the varint
 * stream's zstd frame when the stream is far larger than the best
 * candidate, the 64-bit XOR stream of float32-exact values, their 64-bit
 * byte planes on short columns); the winners stay the same at the chunk
 * sizes many series seal (a few hundred points) and at full chunks. */
static void test_choices_pruned(void)
{
	const size_t ns[] = {200, 4096};
	for (size_t k = 0; k < 2; k++) {
		struct sto_codec_info info;
		struct mdl_cols c = make(ns[k]);
		ts_regular_jitter(&c);
		fill_lr(&c); /* smooth float64: the delta stream's zstd frame */
		roundtrip(&c, &info);
		CHECK(is_name(info.enc_value, "zstd"));
		fill_temperature(&c); /* small integer steps: "int", zstd inside */
		roundtrip(&c, &info);
		CHECK(is_name(info.enc_value, "int"));
		fill_loss(&c); /* float32 values: a float32 encoding, never 64-bit xor */
		roundtrip(&c, &info);
		CHECK(value_f32(&info));
		fill_grad_norm(&c);
		roundtrip(&c, &info);
		CHECK(value_f32(&info));
		fill_step_time(&c); /* full float64 timings: the 64-bit byte planes */
		roundtrip(&c, &info);
		CHECK(is_name(info.enc_value, "shuf_zstd") ||
		      (is_name(info.enc_value, "blocked") &&
		       is_name(info.enc_value_block0, "shuf_zstd")));
		mdl_cols_free(&c);
	}
	/* a long float32 loss curve: its 64-bit byte planes, which beat the
	 * float32 ones there, are still tried */
	rng_state = RNG_SEED;
	struct sto_codec_info info;
	struct mdl_cols c = make(65536);
	fill_loss(&c);
	roundtrip(&c, &info);
	CHECK(is_name(info.enc_value, "shuf_zstd"));
	mdl_cols_free(&c);
}

/* The three varint streams are measured before one is written: the one
 * kept is the shortest. Time columns of 20 points (too short for zstd),
 * none on a grid (so "scaled" does not apply). */
static void test_varint_stream_choice(void)
{
	struct sto_codec_info info;
	struct mdl_cols c = make(20);
	int64_t t = 1700000000000000000ll, d;
	for (size_t i = 0; i < c.n; i++)
		c.ts_ns[i] = t + (int64_t)i; /* one constant delta: delta_rle */
	roundtrip(&c, &info);
	CHECK(is_name(info.enc_ts, "delta_rle"));
	for (size_t i = 0; i < c.n; i++, t += d) {
		d = 1000 * (int64_t)i + 1; /* deltas growing by 1000: dod */
		c.ts_ns[i] = t;
	}
	roundtrip(&c, &info);
	CHECK(is_name(info.enc_ts, "dod"));
	for (size_t i = 0; i < c.n; i++, t += d) {
		d = i % 2 ? 200 : 1; /* alternating 1, 200: delta */
		c.ts_ns[i] = t;
	}
	roundtrip(&c, &info);
	CHECK(is_name(info.enc_ts, "delta"));
	mdl_cols_free(&c);
}

/* training loss, timestamps in whole milliseconds */
static void fill_loss_ms(struct mdl_cols *c)
{
	fill_loss(c);
	ts_ms_precision(c);
}

struct realistic {
	const char *name;
	fill_fn fill;
};

static void test_realistic_report(void)
{
	static const struct realistic series[] = {
	    {"loss (f32)", fill_loss},	      {"grad_norm (f32)", fill_grad_norm},
	    {"lr cosine (f64)", fill_lr},     {"step_time (f64)", fill_step_time},
	    {"gpu.mem (int)", fill_memory},   {"gpu.temp (int)", fill_temperature},
	    {"tokens (int)", fill_counter},   {"noisy f64", fill_noisy_f64},
	    {"loss, ts in ms", fill_loss_ms},
	};
	const size_t ns[] = {4096, 65536};
	for (size_t k = 0; k < 2; k++) {
		for (size_t i = 0; i < sizeof(series) / sizeof(series[0]); i++) {
			struct mdl_cols c = make(ns[k]);
			ts_regular_jitter(&c);
			series[i].fill(&c);
			struct sto_codec_info in;
			size_t len = roundtrip(&c, &in);
			fprintf(stderr,
				"  n=%-6zu %-16s %6.3f B/pt  ts %s %.2f, step %s %.3f, "
				"attempt %s, value %s %.3f\n",
				ns[k], series[i].name, (double)len / (double)c.n,
				sto_codec_name(in.enc_ts), (double)in.bytes_ts / (double)c.n,
				sto_codec_name(in.enc_step), (double)in.bytes_step / (double)c.n,
				sto_codec_name(in.enc_attempt), sto_codec_name(in.enc_value),
				(double)in.bytes_value / (double)c.n);
			mdl_cols_free(&c);
		}
	}
}

/* The short columns a checkpoint seals with many series (tens to a few
 * hundred points): their zstd frames are probes (raw literals) unless one
 * may win, then compressed again at the full level. Every column round-
 * trips, whichever of the two frames it kept, and the float32 and 64-bit
 * byte planes still win where they won before (loss curves, timings). */
static void test_short_columns(void)
{
	static const fill_fn fills[] = {fill_loss,	fill_grad_norm, fill_lr,
					fill_step_time, fill_memory,	fill_temperature,
					fill_counter,	fill_noisy_f64, fill_loss_ms};
	const size_t ns[] = {2, 16, 63, 64, 65, 100, 128, 256, 300};
	size_t planes = 0, frames = 0;
	rng_state = RNG_SEED;
	for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
		for (size_t i = 0; i < sizeof(fills) / sizeof(fills[0]); i++) {
			struct sto_codec_info info;
			struct mdl_cols c = make(ns[k]);
			ts_regular_jitter(&c);
			fills[i](&c);
			roundtrip(&c, &info);
			planes += is_name(info.enc_value, "f32_shuf_zstd") ||
				  is_name(info.enc_value, "shuf_zstd");
			frames += is_name(info.enc_value, "zstd");
			mdl_cols_free(&c);
		}
	}
	CHECK(planes > 0);
	struct sto_codec_info info;
	struct mdl_cols c = make(64);
	ts_regular_jitter(&c);
	fill_step_time(&c); /* full float64 timings: the 64-bit byte planes */
	roundtrip(&c, &info);
	CHECK(is_name(info.enc_value, "shuf_zstd"));
	fill_lr(&c); /* smooth float64: the delta stream's zstd frame */
	roundtrip(&c, &info);
	CHECK(is_name(info.enc_value, "zstd"));
	CHECK(frames > 0);
	mdl_cols_free(&c);
}

/* A value column stored as a probe frame (zstd level -1, kept because no
 * probe was worth compressing again) must be one the full level would not
 * shrink: a probe that can still win against the XOR stream is compressed
 * again. Low-cardinality fractional float32 columns in random order put
 * probes right at the XOR stream's bound (an off-by-one there stored a
 * 231-byte probe where the full level makes 175; 22 of these 3,000
 * columns failed before the fix). */
static void test_probe_kept_only_when_full_level_does_not_shrink_it(void)
{
	rng_state = RNG_SEED;
	for (int it = 0; it < 3000; it++) {
		size_t n = 2 + rnd() % 300;
		uint64_t *v = malloc(n * sizeof(*v));
		CHECK(v != NULL);
		for (size_t i = 0; i < n; i++) {
			double d = (double)(rnd() % 5) * 0.5;
			memcpy(&v[i], &d, sizeof(d));
		}
		struct blob best = {0};
		CHECK_EQ_INT(sto_codec_enc_values(v, n, &best), 0);
		if (best.probe && best.enc == ENC_F32_SHUF_ZSTD) {
			struct blob zc = {0}, full = {0};
			uint64_t *f32 = NULL;
			CHECK_EQ_INT(sto_codec_enc_values_f32(v, n, &zc, &f32, 0), 0);
			CHECK(f32 != NULL);
			CHECK_EQ_INT(
			    sto_codec_enc_shuf_zstd(f32, n, 4, ENC_F32_SHUF_ZSTD, &full, SIZE_MAX),
			    0);
			CHECK(best.len <= full.len);
			sto_codec_blob_free(&zc);
			sto_codec_blob_free(&full);
			free(f32);
		}
		sto_codec_blob_free(&best);
		free(v);
	}
}

/* ---- errors and hostile input -------------------------------------------- */

static void test_encode_errors(void)
{
	struct mdl_cols c = make(100);
	struct rdb_buf buf;
	rdb_buf_init(&buf, 40);
	CHECK_EQ_INT(rdb_buf_append(&buf, "abc", 3), 0);
	CHECK_EQ_INT(sto_codec_encode(&c, &buf, NULL), RDB_ELIMIT);
	CHECK_EQ_INT(buf.len, 3);
	c.n = 0;
	CHECK_EQ_INT(sto_codec_encode(&c, &buf, NULL), RDB_EINVAL);
	c.n = STO_CHUNK_MAX_POINTS + 1;
	CHECK_EQ_INT(sto_codec_encode(&c, &buf, NULL), RDB_EINVAL);
	CHECK_EQ_INT(buf.len, 3);
	rdb_buf_free(&buf);
	mdl_cols_free(&c);
}

struct col_spec {
	uint8_t enc;
	const char *bytes;
	size_t len;
};

/* Builds n, then ts/step/attempt from good defaults and the given value
 * column (or the given step column when step != NULL), and decodes. */
static int decode_handmade(uint32_t n, const struct col_spec *step, const struct col_spec *value)
{
	uint8_t p[256];
	size_t o = 4;
	rdb_put_le32(p, n);
	static const char zero8[8] = {0};
	const struct col_spec cols[4] = {
	    {2, zero8, 8},				     /* const64 ts */
	    step ? *step : (struct col_spec){7, "", 0},	     /* absent */
	    {16, zero8, 4},				     /* const32 */
	    value ? *value : (struct col_spec){2, zero8, 8}, /* const64 */
	};
	for (int i = 0; i < 4; i++) {
		p[o] = cols[i].enc;
		rdb_put_le32(p + o + 1, (uint32_t)cols[i].len);
		memcpy(p + o + 5, cols[i].bytes, cols[i].len);
		o += 5 + cols[i].len;
	}
	uint8_t *exact = malloc(o);
	memcpy(exact, p, o);
	struct mdl_cols d = MDL_COLS_INIT;
	int rc = sto_codec_decode(exact, o, 65536, &d, NULL);
	mdl_cols_free(&d);
	free(exact);
	return rc;
}

#define SPEC(e, s) (&(struct col_spec){(e), (s), sizeof(s) - 1})

static void test_handmade(void)
{
	CHECK_EQ_INT(decode_handmade(3, NULL, NULL), 0);
	CHECK_EQ_INT(decode_handmade(0, NULL, NULL), RDB_ECORRUPT);
	CHECK_EQ_INT(decode_handmade(65537, NULL, NULL), RDB_ECORRUPT);
	CHECK_EQ_INT(decode_handmade(3, NULL, SPEC(99, "")), RDB_ECORRUPT);
	CHECK_EQ_INT(decode_handmade(3, NULL, SPEC(7, "")), RDB_ECORRUPT); /* absent value */
	/* delta: 3 varints exactly; one more byte is trailing garbage */
	CHECK_EQ_INT(decode_handmade(3, SPEC(3, "\x02\x02\x02"), NULL), 0);
	CHECK_EQ_INT(decode_handmade(3, SPEC(3, "\x02\x02\x02\x00"), NULL), RDB_ECORRUPT);
	CHECK_EQ_INT(decode_handmade(3, SPEC(3, "\x02\x02"), NULL), RDB_ECORRUPT);
	/* overlong varint (11 bytes) */
	CHECK_EQ_INT(
	    decode_handmade(1, SPEC(3, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), NULL),
	    RDB_ECORRUPT);
	/* a 10-byte varint holds 64 bits: a 10th byte of 1 is the top bit, one
	 * of 2 would be a 65th bit (refused, as the WAL's reader refuses it,
	 * instead of dropping it and reading another number) */
	CHECK_EQ_INT(decode_handmade(1, SPEC(3, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), NULL),
		     0);
	CHECK_EQ_INT(decode_handmade(1, SPEC(3, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02"), NULL),
		     RDB_ECORRUPT);
	/* delta_rle: run 2 fills n = 3; run 3 overflows; run 0 is refused */
	CHECK_EQ_INT(decode_handmade(3, SPEC(5, "\x00\x02\x02"), NULL), 0);
	CHECK_EQ_INT(decode_handmade(3, SPEC(5, "\x00\x02\x03"), NULL), RDB_ECORRUPT);
	CHECK_EQ_INT(decode_handmade(3, SPEC(5, "\x00\x02\x00\x02\x02"), NULL), RDB_ECORRUPT);
	/* masked: bitmap 0b101, inner const64 */
	CHECK_EQ_INT(decode_handmade(3, SPEC(8, "\x00\x05\x02\x01\0\0\0\0\0\0\0"), NULL), 0);
	CHECK_EQ_INT(decode_handmade(3, SPEC(8, "\x00\x0d\x02\x01\0\0\0\0\0\0\0"), NULL),
		     RDB_ECORRUPT); /* bit past n */
	CHECK_EQ_INT(decode_handmade(3, SPEC(8, "\x00\x00\x02\x01\0\0\0\0\0\0\0"), NULL),
		     RDB_ECORRUPT); /* nothing present */
	CHECK_EQ_INT(decode_handmade(3, SPEC(8, "\x01\x01\x01\x01\x02\x01\0\0\0\0\0\0\0"), NULL),
		     0); /* runs 1,1,1 */
	CHECK_EQ_INT(decode_handmade(3, SPEC(8, "\x01\x01\x03\x02\x01\0\0\0\0\0\0\0"), NULL),
		     RDB_ECORRUPT); /* runs past n */
	CHECK_EQ_INT(decode_handmade(3, SPEC(8, "\x00\x05"), NULL), RDB_ECORRUPT);
	/* int: 2^53 is fine, 2^53 + 1 is not */
	CHECK_EQ_INT(decode_handmade(1, NULL, SPEC(35, "\x02\0\0\0\0\0\0\x20\0")), 0);
	CHECK_EQ_INT(decode_handmade(1, NULL, SPEC(35, "\x02\x01\0\0\0\0\0\x20\0")), RDB_ECORRUPT);
	/* xor: '10' (reuse) before any window; lead + len > 64 */
	CHECK_EQ_INT(decode_handmade(2, NULL, SPEC(32, "\0\0\0\0\0\0\0\0\x80\0")), RDB_ECORRUPT);
	CHECK_EQ_INT(decode_handmade(2, NULL, SPEC(32, "\0\0\0\0\0\0\0\0\xff\xff\xff\0")),
		     RDB_ECORRUPT);
	/* xor: two equal values = 64 bits + '0', padded; padding must be zero */
	CHECK_EQ_INT(decode_handmade(2, NULL, SPEC(32, "\0\0\0\0\0\0\0\0\x00")), 0);
	CHECK_EQ_INT(decode_handmade(2, NULL, SPEC(32, "\0\0\0\0\0\0\0\0\x01")), RDB_ECORRUPT);
	CHECK_EQ_INT(decode_handmade(2, NULL, SPEC(32, "\0\0\0\0\0\0\0\0\0\0")), RDB_ECORRUPT);
	/* scaled: g = 1000, base 5, inner delta 0,1,2 -> 5, 1005, 2005; g < 2 and
	 * scaled inside scaled are refused */
	CHECK_EQ_INT(decode_handmade(3, SPEC(9, "\xe8\x07\x0a\x03\x00\x02\x02"), NULL), 0);
	CHECK_EQ_INT(decode_handmade(3, SPEC(9, "\x01\x0a\x03\x00\x02\x02"), NULL), RDB_ECORRUPT);
	CHECK_EQ_INT(decode_handmade(3, SPEC(9, "\x02\x0a\x09\x02\x00\x03\x00\x02\x02"), NULL),
		     RDB_ECORRUPT);
}

/* A zstd frame whose content size is not exactly n * 8 is refused: the
 * same payload read as n - 1 or n + 1 points fails. */
static void test_zstd_sizes(void)
{
	struct mdl_cols c = make(500); /* one frame: fewer than two blocks' worth */
	fill_noisy_f64(&c);
	steps_absent(&c);
	for (size_t i = 0; i < c.n; i++)
		c.ts_ns[i] = 5;
	struct rdb_buf buf;
	rdb_buf_init(&buf, 1u << 20);
	struct sto_codec_info info;
	CHECK_EQ_INT(sto_codec_encode(&c, &buf, &info), 0);
	CHECK(is_name(info.enc_value, "shuf_zstd"));
	struct mdl_cols d = MDL_COLS_INIT;
	CHECK_EQ_INT(sto_codec_decode(buf.data, buf.len, 65536, &d, NULL), 0);
	rdb_put_le32(buf.data, 499);
	CHECK_EQ_INT(sto_codec_decode(buf.data, buf.len, 65536, &d, NULL), RDB_ECORRUPT);
	rdb_put_le32(buf.data, 501);
	CHECK_EQ_INT(sto_codec_decode(buf.data, buf.len, 65536, &d, NULL), RDB_ECORRUPT);
	mdl_cols_free(&d);
	rdb_buf_free(&buf);
	mdl_cols_free(&c);
}

/* Flips bytes and truncates a real payload everywhere: decode must fail
 * with RDB_ECORRUPT, or succeed with points that round-trip. A flip may
 * decode to the very same points: the formats are not canonical (unused
 * zstd header bits; an XOR "reuse window" and a "new window" with the same
 * bits), and the chunk record's xxHash is what detects those. Truncation
 * always fails. */
static void mutate_all(const struct mdl_cols *c)
{
	struct rdb_buf buf;
	rdb_buf_init(&buf, 1u << 20);
	CHECK_EQ_INT(sto_codec_encode(c, &buf, NULL), 0);
	size_t len = buf.len;
	uint8_t *m = malloc(len);
	struct mdl_cols d = MDL_COLS_INIT;
	int bad = 0, same = 0;
	for (size_t i = 0; i < len; i++) {
		static const uint8_t flips[] = {0x01, 0x80, 0xff, 0x10};
		for (size_t f = 0; f < sizeof(flips); f++) {
			memcpy(m, buf.data, len);
			m[i] ^= flips[f];
			int rc = sto_codec_decode(m, len, 65536, &d, NULL);
			if (rc != 0 && rc != RDB_ECORRUPT) {
				bad++;
				fprintf(stderr, "byte %zu of %zu ^ 0x%02x: rc %d\n", i, len,
					flips[f], rc);
			}
			if (rc == 0) {
				same += cols_equal(c, &d);
				roundtrip(&d, NULL);
			}
		}
	}
	for (size_t cut = 0; cut < len; cut++) {
		uint8_t *t = malloc(cut ? cut : 1);
		memcpy(t, buf.data, cut);
		if (sto_codec_decode(t, cut, 65536, &d, NULL) != RDB_ECORRUPT)
			bad++;
		free(t);
	}
	CHECK_EQ_INT(bad, 0);
	if (same)
		fprintf(stderr, "  %d of %zu flips decoded to the same points\n", same, 4 * len);
	mdl_cols_free(&d);
	free(m);
	rdb_buf_free(&buf);
}

static void test_corruption(void)
{
	const fill_fn vals[] = {fill_specials, fill_loss, fill_float32_random, fill_temperature,
				fill_counter,  fill_lr,	  fill_random_bits,    fill_noisy_f64};
	const fill_fn others[] = {ts_regular_jitter, steps_partly_absent, steps_block_absent,
				  attempts_changing, attempts_random,	  steps_gaps,
				  ts_extremes,	     ts_duplicates};
	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		struct mdl_cols c = make(i % 2 ? 150 : 40);
		vals[i](&c);
		others[i](&c);
		mutate_all(&c);
		mdl_cols_free(&c);
	}
}

/* Tail reads: only the points from the first step >= min_step on, the
 * same bits as a whole decode, from a blocked value column (the blocks
 * before not decoded) and from a column in one piece (as chunks written
 * before blocks existed): both are read the same way. */
static void check_tail(struct mdl_cols *c, bool want_blocked)
{
	struct rdb_buf buf;
	struct sto_codec_info info;
	struct mdl_cols whole = MDL_COLS_INIT, tail = MDL_COLS_INIT;
	rdb_buf_init(&buf, 1u << 22);
	CHECK_EQ_INT(sto_codec_encode(c, &buf, &info), 0);
	CHECK(is_name(info.enc_value, "blocked") == want_blocked);
	CHECK_EQ_INT(sto_codec_decode(buf.data, buf.len, 65536, &whole, NULL), 0);
	CHECK(cols_equal(c, &whole));
	static const int64_t from[] = {INT64_MIN, 0, 1, 255, 256, 1000, 1800, 1999, 2000, 9999};
	for (size_t f = 0; f < sizeof(from) / sizeof(from[0]); f++) {
		size_t dropped = 99, used = 0, lead = sto_codec_lead_below(c, from[f]);
		CHECK_EQ_INT(sto_codec_decode_tail(buf.data, buf.len, 65536, 0, from[f], &tail,
						   &used, &dropped),
			     0);
		CHECK_EQ_INT(dropped, lead);
		CHECK_EQ_INT(tail.n, c->n - lead);
		CHECK_EQ_INT(used, buf.len);
		for (size_t i = 0; i < tail.n && i + lead < c->n; i++)
			CHECK(tail.ts_ns[i] == c->ts_ns[i + lead] &&
			      tail.step[i] == c->step[i + lead] &&
			      tail.attempt[i] == c->attempt[i + lead] &&
			      tail.value[i] == c->value[i + lead]);
	}
	/* a block length pointing past the column is corruption, whole or tail */
	if (want_blocked) {
		size_t at =
		    4 + 5 + info.bytes_ts + 5 + info.bytes_step + 5 + info.bytes_attempt + 5;
		at += 2; /* varint B (256) */
		rdb_put_le32(buf.data + at, 0x7fffffffu);
		CHECK_EQ_INT(sto_codec_decode(buf.data, buf.len, 65536, &whole, NULL),
			     RDB_ECORRUPT);
		size_t dropped;
		CHECK_EQ_INT(
		    sto_codec_decode_tail(buf.data, buf.len, 65536, 0, 1800, &tail, NULL, &dropped),
		    RDB_ECORRUPT);
	}
	mdl_cols_free(&whole);
	mdl_cols_free(&tail);
	rdb_buf_free(&buf);
}

static void test_tail(void)
{
	struct mdl_cols c = make(2000);
	fill_loss(&c);
	check_tail(&c, true);
	c.step[5] = MDL_STEP_NONE; /* a point without a step counts as below */
	check_tail(&c, true);
	fill_temperature(&c); /* integers: one "int" column, no blocks */
	check_tail(&c, false);
	mdl_cols_free(&c);
}

int main(void)
{
	RUN(test_values_roundtrip);
	RUN(test_columns_roundtrip);
	RUN(test_float32_classes);
	RUN(test_widen_f32);
	RUN(test_choices);
	RUN(test_choices_pruned);
	RUN(test_varint_stream_choice);
	RUN(test_realistic_report);
	RUN(test_short_columns);
	RUN(test_probe_kept_only_when_full_level_does_not_shrink_it);
	RUN(test_encode_errors);
	RUN(test_handmade);
	RUN(test_zstd_sizes);
	RUN(test_tail);
	RUN(test_corruption);
	return check_summary("codec");
}
