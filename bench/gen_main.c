/* gen_main.c - rdb-gen: writes the benchmark workload to a file for inspection.
 *
 * Usage: rdb-gen [--size small|default|large] [--ranks R] [--metrics M]
 *                [--steps S] [--seed N] [--format json|ndjson|lp] [--out FILE]
 *        rdb-gen [workload options] --info
 *
 * json writes one JSON array holding every record; ndjson one record per
 * line; lp one InfluxDB line-protocol line per record (bench/peers.sh).
 * --info prints facts about the workload as key=value lines instead (job,
 * shape, first/last timestamps, the straggler, the window of the last 10 %
 * of steps) for scripts that build queries. Records are written step-major
 * (all ranks of step 0, then step 1...) and streamed, so the large size
 * needs no more memory than one record.
 * The bytes are exactly what rdb-load sends for the same options (rdb-load
 * only cuts them into bodies). Exit status 0, or 1 with a message on stderr.
 */
#include "bench/gen.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct args {
	struct gen_opts o;
	enum gen_format fmt;
	const char *out; /* NULL = stdout */
	int info;	 /* --info */
};

static void usage(FILE *f)
{
	fputs("usage: rdb-gen [--size small|default|large] [--ranks R] [--metrics M]\n"
	      "               [--steps S] [--seed N] [--format json|ndjson|lp] [--out FILE]\n"
	      "       rdb-gen [workload options] --info\n",
	      f);
}

static int parse_u32(const char *flag, const char *v, uint32_t lo, uint32_t hi, uint32_t *out)
{
	uint64_t x;

	if (gen_parse_u64(v, hi, &x) || x < lo) {
		fprintf(stderr, "rdb-gen: %s wants an integer in %u..%u, got '%s'\n", flag, lo, hi,
			v ? v : "");
		return -EINVAL;
	}
	*out = (uint32_t)x;
	return 0;
}

static int parse_one(struct args *a, const char *flag, const char *v)
{
	if (!v) {
		fprintf(stderr, "rdb-gen: %s needs a value\n", flag);
		return -EINVAL;
	}
	if (strcmp(flag, "--ranks") == 0)
		return parse_u32(flag, v, 1, 1u << 20, &a->o.ranks);
	if (strcmp(flag, "--metrics") == 0)
		return parse_u32(flag, v, 1, GEN_MAX_METRICS, &a->o.metrics);
	if (strcmp(flag, "--steps") == 0)
		return parse_u32(flag, v, 1, 1u << 30, &a->o.steps);
	if (strcmp(flag, "--seed") == 0)
		return gen_parse_u64(v, UINT64_MAX, &a->o.seed);
	if (strcmp(flag, "--out") == 0) {
		a->out = v;
		return 0;
	}
	if (strcmp(flag, "--format") == 0 && strcmp(v, "json") == 0) {
		a->fmt = GEN_JSON;
		return 0;
	}
	if (strcmp(flag, "--format") == 0 && strcmp(v, "ndjson") == 0) {
		a->fmt = GEN_NDJSON;
		return 0;
	}
	if (strcmp(flag, "--format") == 0 && strcmp(v, "lp") == 0) {
		a->fmt = GEN_LP;
		return 0;
	}
	fprintf(stderr, "rdb-gen: bad option %s %s\n", flag, v);
	return -EINVAL;
}

static int parse_args(int argc, char **argv, struct args *a)
{
	const char *size = "default";

	/* --size first, so that --ranks etc. override it wherever they appear. */
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "--size") == 0)
			size = argv[i + 1];
	if (gen_preset(size, &a->o)) {
		fprintf(stderr, "rdb-gen: unknown --size '%s'\n", size);
		return -EINVAL;
	}
	for (int i = 1; i < argc; i += 2) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			exit(0);
		}
		if (strcmp(argv[i], "--info") == 0) {
			a->info = 1;
			i--; /* takes no value */
			continue;
		}
		if (strcmp(argv[i], "--size") == 0)
			continue;
		if (parse_one(a, argv[i], i + 1 < argc ? argv[i + 1] : NULL))
			return -EINVAL;
	}
	return 0;
}

static int write_all(const struct gen *g, enum gen_format fmt, FILE *f)
{
	const struct gen_opts *o = gen_opts_of(g);
	struct gen_buf b;
	int rc = 0;

	gen_buf_init(&b, 1u << 20);
	if (fmt == GEN_JSON)
		fputs("[", f);
	for (uint32_t s = 0; s < o->steps && rc == 0; s++) {
		for (uint32_t r = 0; r < o->ranks && rc == 0; r++) {
			int first = s == 0 && r == 0;
			b.len = 0;
			if (fmt == GEN_JSON && !first)
				rc = gen_buf_append(&b, ",\n", 2);
			if (rc == 0 && fmt == GEN_LP)
				rc = gen_record_lp(g, r, s, &b);
			else if (rc == 0)
				rc = gen_record(g, r, s, &b);
			if (rc == 0 && fmt != GEN_JSON)
				rc = gen_buf_append(&b, "\n", 1);
			if (rc == 0 && fwrite(b.data, 1, b.len, f) != b.len)
				rc = -EIO;
		}
	}
	if (rc == 0 && fmt == GEN_JSON)
		fputs("]\n", f);
	gen_buf_free(&b);
	return rc;
}

/* Smallest (lo) or largest timestamp of one step over all ranks. */
static int64_t step_ts(const struct gen *g, uint32_t step, int lo)
{
	int64_t best = gen_record_ts(g, 0, step);

	for (uint32_t r = 1; r < gen_opts_of(g)->ranks; r++) {
		int64_t t = gen_record_ts(g, r, step);
		if (lo ? t < best : t > best)
			best = t;
	}
	return best;
}

/* key=value facts for scripts; tail = the last 10 % of steps (at least 1). */
static void print_info(const struct gen *g, FILE *f)
{
	const struct gen_opts *o = gen_opts_of(g);
	uint32_t tail = o->steps / 10 ? o->steps / 10 : 1;

	fprintf(f,
		"job=%s\nranks=%" PRIu32 "\nmetrics=%" PRIu32 "\nsteps=%" PRIu32 "\nseed=%" PRIu64
		"\npoints=%" PRIu64 "\nstraggler=%" PRIu32 "\n",
		gen_job(g), o->ranks, o->metrics, o->steps, o->seed,
		(uint64_t)o->ranks * o->steps * o->metrics, gen_straggler(g));
	fprintf(f, "t_first_ns=%" PRId64 "\nt_last_ns=%" PRId64 "\n", step_ts(g, 0, 1),
		step_ts(g, o->steps - 1, 0));
	fprintf(f, "tail_steps=%" PRIu32 "\nt_tail_ns=%" PRId64 "\n", tail,
		step_ts(g, o->steps - tail, 1));
}

int main(int argc, char **argv)
{
	struct args a = {.fmt = GEN_JSON};
	struct gen *g = NULL;
	FILE *f = stdout;
	int rc;

	if (parse_args(argc, argv, &a)) {
		usage(stderr);
		return 1;
	}
	rc = gen_create(&a.o, &g);
	if (rc) {
		fprintf(stderr, "rdb-gen: cannot create generator: %s\n", strerror(-rc));
		return 1;
	}
	if (a.info) {
		print_info(g, stdout);
		gen_destroy(g);
		return 0;
	}
	if (a.out && !(f = fopen(a.out, "w"))) {
		fprintf(stderr, "rdb-gen: cannot open %s: %s\n", a.out, strerror(errno));
		gen_destroy(g);
		return 1;
	}
	rc = write_all(g, a.fmt, f);
	if ((f == stdout ? fflush(f) : fclose(f)) != 0 && rc == 0)
		rc = -EIO;
	gen_destroy(g);
	if (rc) {
		fprintf(stderr, "rdb-gen: writing %s failed: %s\n", a.out ? a.out : "stdout",
			strerror(-rc));
		return 1;
	}
	return 0;
}
