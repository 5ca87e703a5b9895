/* gen.c - deterministic, realistic training-telemetry workload.
 *
 * Model. A data-parallel job of R ranks runs S steps starting at
 * 1700000000 s. Each step every rank does data -> forward -> backward ->
 * optimizer, then waits in all-reduce for the slowest rank, so wall time per
 * step is equal across ranks: step_time_r ~= max_r(compute_r) + comm. One
 * straggler rank (chosen by the seed) computes 15% slower; the job as a whole
 * slows with it, and the straggler shows up as a SHORT all-reduce wait while
 * every other rank's wait grows (exactly what DESIGN.md's outlier query has to
 * see through). A record's timestamp is the end of its step plus 0.5..3.5 ms of
 * per-rank jitter, converted the way Python clients do: int(time.time() * 1e9),
 * i.e. a float64 seconds value, so low digits carry float64 rounding.
 *
 * Value kinds (DESIGN.md "Performance targets"): tensor-derived metrics
 * (loss, grad_norm, ...) are computed in float and widened to double, as
 * tensor.item() of a float32 tensor gives; lr and timings are full float64;
 * memory, temperature, clocks and counters are integers. Doubles are printed
 * in the shortest form that strtod() maps back to the same bits (what
 * Python's repr() / json.dumps print), so the server sees exactly the value
 * the generator computed. No NaN/Inf: JSON cannot carry them. The same
 * records can be written as InfluxDB line protocol (gen_record_lp) with the
 * same value text, for the side-by-side benchmark with the peers.
 *
 * Determinism. All randomness comes from a counter-based hash of (seed,
 * rank, step, tag): no RNG state, any record can be built alone, on any
 * thread. Quantities that are inherently sequential (cumulative wall time,
 * dynamic loss scale, loss spikes) are precomputed per step in gen_create().
 * Monotonic counters use step * rate + bounded noise (noise < rate), which is
 * monotonic without a running sum.
 *
 * Errors: out-of-memory and buffer bounds are returned as negative errno.
 */
#include "bench/gen.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T0_S	     1700000000.0
#define GLOBAL	     UINT32_MAX /* pseudo-rank for job-wide randomness */
#define MIB	     (1024.0 * 1024.0)
#define LOCAL_BATCH  8
#define SEQ_LEN	     2048
#define PARAMS	     1.1e9
#define STRAGGLER_X  1.15
#define SCALE_WINDOW 500 /* loss-scale growth interval, steps */
#define PI	     3.14159265358979323846

/* Hash tags: one per independent random draw. */
enum tag {
	T_DATA = 1,
	T_FWD,
	T_BWD,
	T_OPT,
	T_STALL,
	T_STALL_LEN,
	T_COMM,
	T_AR,
	T_OVH,
	T_TS,
	T_LOSS,
	T_SPIKE,
	T_SPIKE_AMP,
	T_GNORM,
	T_OVERFLOW,
	T_STRAGGLER,
	T_HOT,
	T_ECC,
	T_UTIL,
	T_MEM,
	T_TEMP,
	T_POWER,
	T_CLOCK,
	T_CPU,
	T_RSS,
	T_QUEUE,
	T_PNORM,
	T_UPD,
	T_ACC,
	T_PCIE,
	T_NET,
	T_MEMBASE,
};

enum kind { K_F32, K_F64, K_INT };

struct val {
	enum kind kind;
	double d;  /* K_F32 (already widened) and K_F64 */
	int64_t i; /* K_INT */
};

struct gen {
	struct gen_opts o;
	char job[32];	       /* "bench-<seed>" */
	uint32_t straggler;    /* rank that computes STRAGGLER_X slower */
	uint32_t hot_rank;     /* rank whose GPU runs 10 C hotter and throttles */
	uint32_t ecc_rank;     /* rank that sees ECC errors late in the run */
	double *max_compute_s; /* [steps] slowest rank's data+fwd+bwd+opt */
	double *comm_s;	       /* [steps] pure all-reduce time */
	double *end_s;	       /* [steps] end of step, seconds since T0_S */
	float *loss_base;      /* [steps] mean loss incl. spikes */
	float *spike;	       /* [steps] spike amplitude (0 = none) */
	float *grad_norm;      /* [steps] global grad norm (same on all ranks) */
	double *lr;	       /* [steps] */
	double *loss_scale;    /* [steps] dynamic fp16 loss scale, power of 2 */
};

/* Per-record derived timing, shared by several metrics. */
struct rec {
	const struct gen *g;
	uint32_t rank, step;
	double ph[4];	  /* data, forward, backward, optimizer; seconds */
	double allreduce; /* seconds */
	double step_time; /* seconds */
	int stalled;	  /* data-loader stall this step */
};

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t rnd(const struct gen *g, uint32_t rank, uint32_t step, enum tag t)
{
	uint64_t h = mix64(g->o.seed ^ 0x5bd1e995ull);
	h = mix64(h ^ rank);
	h = mix64(h ^ ((uint64_t)step << 8) ^ (uint64_t)t);
	return h;
}

/* Uniform in [0, 1). */
static double unit(const struct gen *g, uint32_t rank, uint32_t step, enum tag t)
{
	return (double)(rnd(g, rank, step, t) >> 11) * 0x1.0p-53;
}

/* Standard normal (Box-Muller on two halves of one hash chain). */
static double gauss(const struct gen *g, uint32_t rank, uint32_t step, enum tag t)
{
	uint64_t h = rnd(g, rank, step, t);
	double u1 = 1.0 - (double)(h >> 11) * 0x1.0p-53;
	double u2 = (double)(mix64(h) >> 11) * 0x1.0p-53;
	return sqrt(-2.0 * log(u1)) * cos(2.0 * PI * u2);
}

static double clampd(double v, double lo, double hi)
{
	return v < lo ? lo : (v > hi ? hi : v);
}

/* ---- timing ---- */

static int is_stalled(const struct gen *g, uint32_t rank, uint32_t step)
{
	return unit(g, rank, step, T_STALL) < 0.01;
}

static void phases(const struct gen *g, uint32_t rank, uint32_t step, double ph[4])
{
	double slow = rank == g->straggler ? STRAGGLER_X : 1.0;

	ph[0] = 0.012 * (1.0 + 0.15 * gauss(g, rank, step, T_DATA));
	if (is_stalled(g, rank, step))
		ph[0] += 0.05 + 0.15 * unit(g, rank, step, T_STALL_LEN);
	ph[1] = slow * 0.085 * (1.0 + 0.015 * gauss(g, rank, step, T_FWD));
	ph[2] = slow * 0.165 * (1.0 + 0.015 * gauss(g, rank, step, T_BWD));
	ph[3] = slow * 0.018 * (1.0 + 0.03 * gauss(g, rank, step, T_OPT));
	for (int i = 0; i < 4; i++)
		ph[i] = clampd(ph[i], 0.001, 10.0);
}

static void rec_init(struct rec *r, const struct gen *g, uint32_t rank, uint32_t step)
{
	double compute;

	r->g = g;
	r->rank = rank;
	r->step = step;
	r->stalled = is_stalled(g, rank, step);
	phases(g, rank, step, r->ph);
	compute = r->ph[0] + r->ph[1] + r->ph[2] + r->ph[3];
	r->allreduce = g->max_compute_s[step] - compute + g->comm_s[step] +
		       0.0002 * fabs(gauss(g, rank, step, T_AR));
	r->step_time = compute + r->allreduce + 0.0004 * unit(g, rank, step, T_OVH);
}

/* ---- per-step tables ---- */

static void build_timing(struct gen *g)
{
	double end = 0.0;

	for (uint32_t s = 0; s < g->o.steps; s++) {
		double maxc = 0.0, ph[4];

		for (uint32_t r = 0; r < g->o.ranks; r++) {
			phases(g, r, s, ph);
			double c = ph[0] + ph[1] + ph[2] + ph[3];
			if (c > maxc)
				maxc = c;
		}
		g->max_compute_s[s] = maxc;
		g->comm_s[s] = clampd(0.022 * (1.0 + 0.05 * gauss(g, GLOBAL, s, T_COMM)), 0.005, 1);
		end += maxc + g->comm_s[s] + 0.0004;
		g->end_s[s] = end;
	}
}

/* Loss spikes: rare, decaying by half each step; one guaranteed at 60%. */
static void build_spikes(struct gen *g)
{
	float amp = 0.0f;
	uint32_t forced = g->o.steps >= 50 ? g->o.steps * 3 / 5 : UINT32_MAX;

	for (uint32_t s = 0; s < g->o.steps; s++) {
		amp *= 0.5f;
		if (amp < 0.01f)
			amp = 0.0f;
		if (s == forced || (s > 10 && unit(g, GLOBAL, s, T_SPIKE) < 0.004))
			amp += (float)(0.3 + 1.2 * unit(g, GLOBAL, s, T_SPIKE_AMP));
		g->spike[s] = amp;
	}
}

static void build_curves(struct gen *g)
{
	const float tau = (float)g->o.steps / 6.0f + 20.0f;
	const double peak = 3e-4, floor_lr = 3e-5;
	uint32_t warm = g->o.steps / 20 > 2000 ? 2000 : g->o.steps / 20;

	if (warm == 0)
		warm = 1;
	for (uint32_t s = 0; s < g->o.steps; s++) {
		float fs = (float)s;
		float base = 1.85f + 8.9f * expf(-fs / tau) + 0.6f * expf(-fs / (6.0f * tau));
		g->loss_base[s] = base * (1.0f + g->spike[s]);

		float gn = 0.35f + 2.5f * expf(-fs / (0.5f * tau));
		gn *= 1.0f + 0.08f * (float)gauss(g, GLOBAL, s, T_GNORM);
		g->grad_norm[s] = gn * (1.0f + 6.0f * g->spike[s]);

		if (s < warm) {
			g->lr[s] = peak * (double)(s + 1) / (double)warm;
		} else {
			double p = (double)(s - warm) / (double)(g->o.steps - warm);
			g->lr[s] = floor_lr + 0.5 * (peak - floor_lr) * (1.0 + cos(PI * p));
		}
	}
}

/* Dynamic loss scaling: halve on overflow, double after SCALE_WINDOW clean steps. */
static void build_loss_scale(struct gen *g)
{
	double scale = 65536.0;
	uint32_t clean = 0;

	for (uint32_t s = 0; s < g->o.steps; s++) {
		int overflow = g->spike[s] > 0.5f || unit(g, GLOBAL, s, T_OVERFLOW) < 0.0003;
		if (overflow) {
			scale = scale > 1.0 ? scale / 2.0 : 1.0;
			clean = 0;
		} else if (++clean == SCALE_WINDOW) {
			scale = scale < 16777216.0 ? scale * 2.0 : scale;
			clean = 0;
		}
		g->loss_scale[s] = scale;
	}
}

/* ---- metrics ---- */

static struct val f32(float v)
{
	return (struct val){.kind = K_F32, .d = (double)v};
}

static struct val f64(double v)
{
	return (struct val){.kind = K_F64, .d = v};
}

static struct val i64(int64_t v)
{
	return (struct val){.kind = K_INT, .i = v};
}

static float rank_loss(const struct rec *r)
{
	float n = (float)gauss(r->g, r->rank, r->step, T_LOSS);
	return r->g->loss_base[r->step] * (1.0f + 0.015f * n);
}

static double samples_per_s(const struct rec *r)
{
	return (double)LOCAL_BATCH / r->step_time;
}

/* Monotonic counter: step * rate + noise in [0, rate). */
static int64_t counter(const struct rec *r, double rate, enum tag t)
{
	return (int64_t)((double)r->step * rate + rate * unit(r->g, r->rank, r->step, t));
}

static int gpu_temp(const struct rec *r)
{
	double base = 55.0 + 20.0 * (1.0 - exp(-(double)r->step / 100.0));
	base += (double)(rnd(r->g, r->rank, 0, T_TEMP) % 6);
	if (r->rank == r->g->hot_rank)
		base += 10.0;
	return (int)lround(base + 0.8 * gauss(r->g, r->rank, r->step, T_TEMP));
}

static struct val m_loss(const struct rec *r)
{
	return f32(rank_loss(r));
}

static struct val m_grad_norm(const struct rec *r)
{
	return f32(r->g->grad_norm[r->step]);
}

static struct val m_lr(const struct rec *r)
{
	return f64(r->g->lr[r->step]);
}

static struct val m_step_time(const struct rec *r)
{
	return f64(r->step_time);
}

static struct val m_data(const struct rec *r)
{
	return f64(r->ph[0]);
}

static struct val m_forward(const struct rec *r)
{
	return f64(r->ph[1]);
}

static struct val m_backward(const struct rec *r)
{
	return f64(r->ph[2]);
}

static struct val m_optimizer(const struct rec *r)
{
	return f64(r->ph[3]);
}

static struct val m_allreduce(const struct rec *r)
{
	return f64(r->allreduce);
}

static struct val m_samples(const struct rec *r)
{
	return f64(samples_per_s(r));
}

static struct val m_tokens(const struct rec *r)
{
	return f64(samples_per_s(r) * SEQ_LEN);
}

static struct val m_gpu_util(const struct rec *r)
{
	uint64_t h = rnd(r->g, r->rank, r->step, T_UTIL);
	if (r->stalled)
		return i64(60 + (int64_t)(h % 21));
	return i64(97 + (int64_t)(h % 4));
}

static struct val m_mem_used(const struct rec *r)
{
	double base = 58e9 + 1e8 * (double)(rnd(r->g, r->rank, 0, T_MEMBASE) % 16);
	double wave = 20000.0 * sin((double)r->step * 0.01);
	int64_t units = (int64_t)(base / 512.0) + (int64_t)wave +
			(int64_t)(rnd(r->g, r->rank, r->step, T_MEM) % 64);
	return i64(units * 512);
}

static struct val m_mem_reserved(const struct rec *r)
{
	double base = 60e9 + 1e8 * (double)(rnd(r->g, r->rank, 0, T_MEMBASE) % 16);
	double ramp = 3e9 * clampd((double)r->step / (0.05 * r->g->o.steps + 1.0), 0.0, 1.0);
	int64_t blocks = (int64_t)((base + ramp) / (2.0 * MIB));
	return i64(blocks * 2 * 1024 * 1024);
}

static struct val m_temp(const struct rec *r)
{
	return i64(gpu_temp(r));
}

static struct val m_power(const struct rec *r)
{
	double w = 620.0 + 25.0 * gauss(r->g, r->rank, r->step, T_POWER);
	if (r->stalled)
		w -= 250.0;
	return i64((int64_t)lround(clampd(w, 80.0, 700.0)));
}

static struct val m_sm_clock(const struct rec *r)
{
	int64_t mhz = 1980;
	if (gpu_temp(r) >= 83)
		mhz = 1755;
	if (rnd(r->g, r->rank, r->step, T_CLOCK) % 3 == 0)
		mhz -= 15;
	return i64(mhz);
}

static struct val m_ecc(const struct rec *r)
{
	const struct gen *g = r->g;
	int64_t n = 0;
	if (r->rank == g->ecc_rank && r->step >= g->o.steps * 7 / 10)
		n = r->step >= g->o.steps * 9 / 10 ? 2 : 1;
	return i64(n);
}

static struct val m_cpu(const struct rec *r)
{
	double pct = 15.0 + 10.0 * unit(r->g, r->rank, r->step, T_CPU);
	return f32((float)(round(pct * 10.0) / 10.0)); /* psutil: one decimal */
}

static struct val m_rss(const struct rec *r)
{
	int64_t pages =
	    3000000 + (int64_t)r->step * 37 + (int64_t)(rnd(r->g, r->rank, r->step, T_RSS) % 1024);
	return i64(pages * 4096);
}

static struct val m_queue(const struct rec *r)
{
	if (r->stalled)
		return i64((int64_t)(rnd(r->g, r->rank, r->step, T_QUEUE) % 3));
	return i64(8);
}

static struct val m_tflops(const struct rec *r)
{
	return f32((float)(6.0 * PARAMS * samples_per_s(r) * SEQ_LEN / 1e12));
}

static struct val m_loss_scale(const struct rec *r)
{
	return f64(r->g->loss_scale[r->step]);
}

static struct val m_clip_frac(const struct rec *r)
{
	float gn = r->g->grad_norm[r->step];
	return f32(gn > 1.0f ? 1.0f - 1.0f / gn : 0.0f);
}

static struct val m_param_norm(const struct rec *r)
{
	float s = (float)r->step, tau = (float)r->g->o.steps / 3.0f + 20.0f;
	float n = 1e-4f * (float)gauss(r->g, GLOBAL, r->step, T_PNORM);
	return f32((250.0f + 30.0f * (1.0f - expf(-s / tau))) * (1.0f + n));
}

static struct val m_update_ratio(const struct rec *r)
{
	float ratio = (float)(r->g->lr[r->step] / 3e-4) * 1e-3f;
	return f32(ratio * (1.0f + 0.05f * (float)gauss(r->g, GLOBAL, r->step, T_UPD)));
}

static struct val m_perplexity(const struct rec *r)
{
	return f32(expf(rank_loss(r)));
}

static struct val m_accuracy(const struct rec *r)
{
	float s = (float)r->step, tau = (float)r->g->o.steps / 5.0f + 20.0f;
	float a = 0.62f * (1.0f - expf(-s / tau));
	a += 0.01f * (float)gauss(r->g, r->rank, r->step, T_ACC);
	return f32(a < 0.0f ? 0.0f : a);
}

static struct val m_tokens_seen(const struct rec *r)
{
	return i64((int64_t)(r->step + 1) * LOCAL_BATCH * SEQ_LEN);
}

static struct val m_pcie_tx(const struct rec *r)
{
	return i64(counter(r, 48e6, T_PCIE));
}

static struct val m_net_rx(const struct rec *r)
{
	return i64(counter(r, 2.6e9, T_NET));
}

static struct val m_mem_clock(const struct rec *r)
{
	(void)r;
	return i64(2619);
}

static const struct {
	const char *name;
	struct val (*fn)(const struct rec *r);
} metrics[GEN_MAX_METRICS] = {
    {"loss", m_loss},
    {"grad_norm", m_grad_norm},
    {"lr", m_lr},
    {"step_time", m_step_time},
    {"step_time.data", m_data},
    {"step_time.forward", m_forward},
    {"step_time.backward", m_backward},
    {"step_time.optimizer", m_optimizer},
    {"step_time.allreduce", m_allreduce},
    {"samples_per_s", m_samples},
    {"tokens_per_s", m_tokens},
    {"gpu.util", m_gpu_util},
    {"gpu.mem_used_bytes", m_mem_used},
    {"gpu.mem_reserved_bytes", m_mem_reserved},
    {"gpu.temp_c", m_temp},
    {"gpu.power_w", m_power},
    {"gpu.sm_clock_mhz", m_sm_clock},
    {"gpu.ecc_errors", m_ecc},
    {"host.cpu_util", m_cpu},
    {"host.rss_bytes", m_rss},
    {"dataloader.queue", m_queue},
    {"throughput.tflops", m_tflops},
    {"loss.scale", m_loss_scale},
    {"grad_norm.clip_frac", m_clip_frac},
    {"param_norm", m_param_norm},
    {"update_ratio", m_update_ratio},
    {"perplexity", m_perplexity},
    {"accuracy", m_accuracy},
    {"tokens_seen", m_tokens_seen},
    {"gpu.pcie_tx_bytes", m_pcie_tx},
    {"host.net_rx_bytes", m_net_rx},
    {"gpu.mem_clock_mhz", m_mem_clock},
};

const char *gen_metric_name(uint32_t i)
{
	return i < GEN_MAX_METRICS ? metrics[i].name : NULL;
}

/* ---- buffer ---- */

void gen_buf_init(struct gen_buf *b, size_t max_bytes)
{
	*b = (struct gen_buf){.max = max_bytes};
}

void gen_buf_free(struct gen_buf *b)
{
	if (!b)
		return;
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

static int buf_reserve(struct gen_buf *b, size_t n)
{
	size_t cap;
	char *p;

	if (n > b->max - b->len)
		return -ENOBUFS;
	if (b->len + n <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 4096;
	while (cap < b->len + n)
		cap *= 2;
	if (cap > b->max)
		cap = b->max;
	p = realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

int gen_buf_append(struct gen_buf *b, const void *p, size_t n)
{
	int rc = buf_reserve(b, n);
	if (rc)
		return rc;
	memcpy(b->data + b->len, p, n);
	b->len += n;
	return 0;
}

int gen_buf_printf(struct gen_buf *b, const char *fmt, ...)
{
	char tmp[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(tmp))
		return -EINVAL;
	return gen_buf_append(b, tmp, (size_t)n);
}

/* Shortest %.Ng (N = 15..17) that reads back to the same double. */
static int put_double(struct gen_buf *b, double v)
{
	char tmp[40];
	int n = 0;

	for (int prec = 15; prec <= 17; prec++) {
		n = snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
		if (prec == 17 || strtod(tmp, NULL) == v)
			break;
	}
	return gen_buf_append(b, tmp, (size_t)n);
}

/* ---- records and bodies ---- */

int64_t gen_record_ts(const struct gen *g, uint32_t rank, uint32_t step)
{
	if (rank >= g->o.ranks || step >= g->o.steps)
		return 0;
	return (int64_t)((T0_S + g->end_s[step] + 0.0005 + 0.003 * unit(g, rank, step, T_TS)) *
			 1e9);
}

const char *gen_job(const struct gen *g)
{
	return g->job;
}

uint32_t gen_straggler(const struct gen *g)
{
	return g->straggler;
}

/* Appends one metric value: integers as integers, doubles shortest round-trip. */
static int put_val(struct gen_buf *b, const struct val *v)
{
	if (v->kind == K_INT)
		return gen_buf_printf(b, "%" PRId64, v->i);
	return put_double(b, v->d);
}

int gen_record(const struct gen *g, uint32_t rank, uint32_t step, struct gen_buf *b)
{
	size_t start = b->len;
	struct rec r;
	int rc;

	if (rank >= g->o.ranks || step >= g->o.steps)
		return -EINVAL;
	rec_init(&r, g, rank, step);
	int64_t ts_ns = gen_record_ts(g, rank, step);
	rc = gen_buf_printf(b,
			    "{\"job\":\"%s\",\"rank\":%" PRIu32 ",\"step\":%" PRIu32
			    ",\"timestamp\":%" PRId64 ",\"metrics\":{",
			    g->job, rank, step, ts_ns);
	for (uint32_t i = 0; i < g->o.metrics && rc == 0; i++) {
		struct val v = metrics[i].fn(&r);
		rc = gen_buf_printf(b, "%s\"%s\":", i ? "," : "", metrics[i].name);
		if (rc == 0)
			rc = put_val(b, &v);
	}
	if (rc == 0)
		rc = gen_buf_append(b, "}}", 2);
	if (rc)
		b->len = start;
	return rc;
}

/* Metric names hold only [a-z_.]: nothing to escape in line protocol. */
int gen_record_lp(const struct gen *g, uint32_t rank, uint32_t step, struct gen_buf *b)
{
	size_t start = b->len;
	struct rec r;
	int rc;

	if (rank >= g->o.ranks || step >= g->o.steps)
		return -EINVAL;
	rec_init(&r, g, rank, step);
	rc = gen_buf_printf(b, "train,job=%s,rank=%" PRIu32 " ", g->job, rank);
	for (uint32_t i = 0; i < g->o.metrics && rc == 0; i++) {
		struct val v = metrics[i].fn(&r);
		rc = gen_buf_printf(b, "%s=", metrics[i].name);
		if (rc == 0)
			rc = put_val(b, &v);
		if (rc == 0)
			rc = gen_buf_append(b, ",", 1);
	}
	if (rc == 0)
		rc = gen_buf_printf(b, "step=%" PRIu32 "i %" PRId64, step,
				    gen_record_ts(g, rank, step));
	if (rc)
		b->len = start;
	return rc;
}

int gen_body(const struct gen *g, const struct gen_range *rg, enum gen_format fmt,
	     struct gen_buf *b)
{
	size_t start = b->len;
	int rc = 0, first = 1;

	if (fmt == GEN_JSON)
		rc = gen_buf_append(b, "[", 1);
	for (uint32_t s = rg->step_lo; s < rg->step_hi && rc == 0; s++) {
		for (uint32_t r = rg->rank_lo; r < rg->rank_hi && rc == 0; r++) {
			if (fmt == GEN_JSON && !first)
				rc = gen_buf_append(b, ",", 1);
			first = 0;
			if (rc == 0 && fmt == GEN_LP)
				rc = gen_record_lp(g, r, s, b);
			else if (rc == 0)
				rc = gen_record(g, r, s, b);
			if (rc == 0 && fmt != GEN_JSON)
				rc = gen_buf_append(b, "\n", 1);
		}
	}
	if (rc == 0 && fmt == GEN_JSON)
		rc = gen_buf_append(b, "]", 1);
	if (rc)
		b->len = start;
	return rc;
}

/* ---- lifecycle ---- */

int gen_preset(const char *size, struct gen_opts *o)
{
	static const struct {
		const char *name;
		uint32_t ranks, steps;
	} presets[] = {{"small", 8, 200}, {"default", 64, 2000}, {"large", 512, 2000}};

	for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++) {
		if (strcmp(size, presets[i].name) == 0) {
			*o = (struct gen_opts){.seed = 1,
					       .ranks = presets[i].ranks,
					       .metrics = GEN_MAX_METRICS,
					       .steps = presets[i].steps};
			return 0;
		}
	}
	return -EINVAL;
}

const struct gen_opts *gen_opts_of(const struct gen *g)
{
	return &g->o;
}

void gen_destroy(struct gen *g)
{
	if (!g)
		return;
	free(g->max_compute_s);
	free(g->comm_s);
	free(g->end_s);
	free(g->loss_base);
	free(g->spike);
	free(g->grad_norm);
	free(g->lr);
	free(g->loss_scale);
	free(g);
}

static int gen_alloc_tables(struct gen *g)
{
	size_t n = g->o.steps;

	g->max_compute_s = calloc(n, sizeof(double));
	g->comm_s = calloc(n, sizeof(double));
	g->end_s = calloc(n, sizeof(double));
	g->loss_base = calloc(n, sizeof(float));
	g->spike = calloc(n, sizeof(float));
	g->grad_norm = calloc(n, sizeof(float));
	g->lr = calloc(n, sizeof(double));
	g->loss_scale = calloc(n, sizeof(double));
	if (!g->max_compute_s || !g->comm_s || !g->end_s || !g->loss_base || !g->spike ||
	    !g->grad_norm || !g->lr || !g->loss_scale)
		return -ENOMEM;
	return 0;
}

int gen_create(const struct gen_opts *o, struct gen **out)
{
	struct gen *g;

	if (o->ranks == 0 || o->steps == 0 || o->metrics == 0 || o->metrics > GEN_MAX_METRICS)
		return -EINVAL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->o = *o;
	snprintf(g->job, sizeof(g->job), "bench-%" PRIu64, o->seed);
	if (gen_alloc_tables(g)) {
		gen_destroy(g);
		return -ENOMEM;
	}
	g->straggler = (uint32_t)(rnd(g, GLOBAL, 0, T_STRAGGLER) % o->ranks);
	g->hot_rank = (uint32_t)(rnd(g, GLOBAL, 0, T_HOT) % o->ranks);
	g->ecc_rank = (uint32_t)(rnd(g, GLOBAL, 0, T_ECC) % o->ranks);
	build_timing(g);
	build_spikes(g);
	build_curves(g);
	build_loss_scale(g);
	*out = g;
	return 0;
}

int gen_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end != '\0' || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}
