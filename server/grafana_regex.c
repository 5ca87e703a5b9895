/* grafana_regex.c - the bound on every regex a request may compile (Grafana
 * target names and the =~ / !~ ad hoc filters; nothing else in rankdbd
 * compiles a pattern from a request).
 *
 * Why: glibc's regcomp expands counted repetition by copying the repeated
 * subtree, so `((a{255}){255}){255}` (22 bytes) becomes 16.5 million nodes:
 * seconds of CPU and gigabytes of RSS for one unauthenticated request, and
 * backreferences make matching exponential. Before regcomp sees a pattern,
 * gf_regex_check walks it once (POSIX extended syntax plus the GNU escapes)
 * and computes the size of the tree regcomp will build: an atom is 1, a
 * group or alternation adds 1, `*` and `?` add 1, `+` doubles its operand,
 * {m,n} multiplies it by max(m, n) (m + 1 for {m,}). Stacked repetition
 * operators on one atom (a**, (x*)+{2}: glibc's epsilon closure of them is
 * exponential, found by fuzzing) and an unbalanced ')' (it would close the
 * "^(...)$" anchoring group early) are refused too. A pattern past
 * GF_REGEX_MAX_BYTES bytes, GF_REGEX_MAX_COST nodes, GF_REGEX_MAX_DEPTH
 * nested groups or GF_REGEX_MAX_REPEAT in one count, or one holding a
 * backreference (\1..\9), is refused with a reason; the callers answer 400.
 * With the tree bounded, regcomp's memory and regexec's per-name work
 * (glibc's lazily built DFA over at most that many positions) are bounded
 * too. What is left - matching a 2,000-node pattern against many long names
 * - is charged to a per-request budget (gf_regex_match): cost x (text bytes
 * + 1) summed over every match may not pass GF_REGEX_WORK_MAX (about half a
 * second of CPU on the slowest patterns), else the request gets a 400 that
 * says to narrow it.
 *
 * The walk is deliberately forgiving about syntax it does not need to
 * understand exactly: anything regcomp then refuses is refused by regcomp
 * with its own message. It must never under-count the copies regcomp makes.
 *
 * Threading: pure functions. Failure: RDB_EINVAL with the reason in why.
 */
#include "server/grafana_int.h"
#include "common/rdb_err.h"

#include <errno.h>
#include <stdlib.h>

#include <stdio.h>
#include <string.h>

struct walk {
	const char *p, *end;
	int depth;
	const char *why; /* first reason to refuse, static text */
	char detail[96];
};

static uint64_t cap_cost(uint64_t c)
{
	return c > GF_REGEX_MAX_COST ? GF_REGEX_MAX_COST + 1 : c;
}

/* Skips a bracket expression; p points just past '['. */
static void skip_bracket(struct walk *w)
{
	if (w->p < w->end && *w->p == '^')
		w->p++;
	if (w->p < w->end && *w->p == ']')
		w->p++; /* a leading ']' is a literal */
	while (w->p < w->end && *w->p != ']') {
		if (*w->p == '[' && w->p + 1 < w->end &&
		    (w->p[1] == ':' || w->p[1] == '.' || w->p[1] == '=')) {
			char close = w->p[1];
			const char *q = w->p + 2;
			while (q + 1 < w->end && !(q[0] == close && q[1] == ']'))
				q++;
			w->p = q + 1 < w->end ? q + 2 : w->end;
			continue;
		}
		w->p++;
	}
	if (w->p < w->end)
		w->p++;
}

/* Reads a decimal count of at most 9 digits; -1 if none. */
static long read_count(struct walk *w)
{
	long v = -1;
	int digits = 0;
	while (w->p < w->end && *w->p >= '0' && *w->p <= '9') {
		if (digits++ < 9)
			v = (v < 0 ? 0 : v * 10) + (*w->p - '0');
		w->p++;
	}
	return digits > 9 ? GF_REGEX_MAX_REPEAT + 1L : v;
}

/* Copies regcomp makes of the operand of a "{m}", "{m,}" or "{m,n}" at p
 * (just past '{'); 1 when it is not a valid interval (then a literal '{'
 * for glibc, or an error regcomp reports). */
static uint64_t interval_copies(struct walk *w)
{
	const char *start = w->p;
	long m = read_count(w), n = m;
	bool open = false;
	if (w->p < w->end && *w->p == ',') {
		w->p++;
		n = read_count(w);
		open = n < 0;
	}
	if (w->p >= w->end || *w->p != '}' || (m < 0 && n < 0)) {
		w->p = start;
		return 1;
	}
	w->p++;
	if (m > GF_REGEX_MAX_REPEAT || n > GF_REGEX_MAX_REPEAT) {
		w->why = "a repetition count is above the limit";
		snprintf(w->detail, sizeof(w->detail), " (at most %u)", GF_REGEX_MAX_REPEAT);
		return 1;
	}
	long copies = open ? (m < 0 ? 0 : m) + 1 : (n > m ? n : m);
	return copies < 1 ? 1 : (uint64_t)copies;
}

/* Whether p (at '{') starts a valid interval, without moving. */
static bool interval_ahead(struct walk *w)
{
	const char *save = w->p;
	w->p++;
	interval_copies(w);
	bool valid = w->p[-1] == '}';
	w->p = save;
	return valid;
}

static uint64_t walk_alt(struct walk *w);

/* One atom: its cost, or 0 at the end of a branch. */
static uint64_t walk_atom(struct walk *w)
{
	char c = *w->p++;
	switch (c) {
	case '(': {
		if (++w->depth > (int)GF_REGEX_MAX_DEPTH) {
			w->why = "groups are nested too deeply";
			snprintf(w->detail, sizeof(w->detail), " (at most %u levels)",
				 GF_REGEX_MAX_DEPTH);
			return 1;
		}
		uint64_t c2 = walk_alt(w);
		if (w->p < w->end && *w->p == ')')
			w->p++;
		w->depth--;
		return cap_cost(c2 + 1);
	}
	case '[':
		skip_bracket(w);
		return 1;
	case '\\':
		if (w->p < w->end && *w->p >= '1' && *w->p <= '9') {
			w->why = "backreferences (\\1..\\9) are not supported";
			return 1;
		}
		if (w->p < w->end)
			w->p++;
		return 1;
	default:
		return 1;
	}
}

/* A branch: atoms, each with its repetition operators. */
static uint64_t walk_branch(struct walk *w)
{
	uint64_t cost = 0;
	while (w->p < w->end && !w->why && *w->p != '|' && *w->p != ')') {
		uint64_t a = walk_atom(w);
		int ops = 0;
		while (w->p < w->end && !w->why) {
			char op = *w->p;
			if ((op == '*' || op == '?' || op == '+' || op == '{') && ops++ &&
			    (op != '{' || interval_ahead(w))) {
				/* glibc's epsilon closures of stacked operators, e.g.
				 * (a**********)**********, take exponential time */
				w->why = "stacked repetition operators (like a** or a+{2}) are not "
					 "supported; use one per atom";
				break;
			}
			if (op == '*' || op == '?') {
				w->p++;
				a = cap_cost(a + 1);
			} else if (op == '+') {
				w->p++;
				a = cap_cost(a * 2 + 1);
			} else if (op == '{') {
				w->p++;
				uint64_t k = interval_copies(w);
				if (w->p[-1] == '{')
					break; /* a literal '{': the next atom */
				a = cap_cost(a * k + 1);
			} else {
				break;
			}
		}
		cost = cap_cost(cost + a);
	}
	return cost;
}

static uint64_t walk_alt(struct walk *w)
{
	uint64_t cost = walk_branch(w);
	while (w->p < w->end && !w->why && *w->p == '|') {
		w->p++;
		cost = cap_cost(cost + 1 + walk_branch(w));
	}
	return cost;
}

int gf_regex_check(const char *src, uint32_t *cost_out, char *why, size_t whylen)
{
	size_t len = strlen(src);
	if (len > GF_REGEX_MAX_BYTES) {
		snprintf(why, whylen, "pattern is %zu bytes, at most %u are allowed", len,
			 GF_REGEX_MAX_BYTES);
		return RDB_EINVAL;
	}
	struct walk w = {.p = src, .end = src + len};
	uint64_t cost = 0;
	while (w.p < w.end && !w.why) {
		cost = cap_cost(cost + walk_alt(&w));
		if (w.p < w.end && *w.p == ')')
			w.why = "unbalanced ')'"; /* it would close the anchoring group */
		if (cost > GF_REGEX_MAX_COST && !w.why)
			w.why = "pattern is too complex";
	}
	if (!w.why && cost > GF_REGEX_MAX_COST)
		w.why = "pattern is too complex";
	if (!w.why) {
		*cost_out = (uint32_t)(cost ? cost : 1);
		return 0;
	}
	if (strcmp(w.why, "pattern is too complex") == 0)
		snprintf(w.detail, sizeof(w.detail),
			 " (nested repetition expands past %u nodes; use fewer or smaller "
			 "{m,n} counts)",
			 GF_REGEX_MAX_COST);
	snprintf(why, whylen, "%s%s", w.why, w.detail);
	return RDB_EINVAL;
}

int gf_regex_compile(struct gf_regex *rx, const char *src, char *why, size_t whylen)
{
	memset(rx, 0, sizeof(*rx));
	int rc = gf_regex_check(src, &rx->cost, why, whylen);
	if (rc)
		return rc;
	size_t n = strlen(src);
	char *pat = malloc(n + 5);
	if (!pat)
		return -ENOMEM;
	snprintf(pat, n + 5, "^(%s)$", src);
	rc = regcomp(&rx->re, pat, REG_EXTENDED | REG_NOSUB);
	free(pat);
	if (rc) {
		regerror(rc, &rx->re, why, whylen);
		return rc == REG_ESPACE ? -ENOMEM : RDB_EINVAL;
	}
	rx->ok = true;
	return 0;
}

void gf_regex_free(struct gf_regex *rx)
{
	if (rx && rx->ok)
		regfree(&rx->re);
	if (rx)
		rx->ok = false;
}

bool gf_regex_match(struct gf *g, const struct gf_regex *rx, const char *text)
{
	if (g->rx_over)
		return false;
	uint64_t work = (uint64_t)rx->cost * (strlen(text) + 1);
	if (g->rx_work + work > GF_REGEX_WORK_MAX) {
		g->rx_over = true;
		gf_fail(g, 400,
			"the regex patterns of this request need more matching work than "
			"one request may take (%llu units of pattern size x name bytes); narrow "
			"the selection with payload job and rank, or use simpler patterns",
			(unsigned long long)GF_REGEX_WORK_MAX);
		return false;
	}
	g->rx_work += work;
	return regexec(&rx->re, text, 0, NULL, 0) == 0;
}
