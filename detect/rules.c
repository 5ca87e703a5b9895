/* rules.c - rule sets: the built-in table (rules_table.c) plus an
 * operator's rules file, per-job resolution and the metric alias table.
 *
 * Design: a struct det_rules holds the base rules (defaults with the
 * [rule] sections applied), the [job] sections as masks of overridden
 * fields in file order, every string it owns, and an open-addressing hash
 * table of metric names (canonical names, built-in aliases, step_time.<phase
 * word>, operator aliases) -> det_metric_id, so that det_rules_metric is
 * one hash and a probe. The format is documented in rules.h.
 *
 * Failure: the parser builds into a fresh struct and hands it out only when
 * the whole file is valid; the first error stops parsing and is reported as
 * "file:line: [section] option: what is wrong (allowed ...)". Every line,
 * section count and alias count is bounded.
 *
 * Threading: building is single-threaded; a built set is immutable and
 * read concurrently.
 */
#include "detect/rules.h"
#include "model/alias.h"
#include "model/batch.h"

#include "common/rdb_buf.h"
#include "common/rdb_err.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_MAX_BYTES 4096
#define WHY_BYTES      512
#define SEC_NAME_BYTES 160

/* Override bits of one rule in one section. */
#define OV_ENABLED  (1u << 0)
#define OV_FOR	    (1u << 1)
#define OV_SEV	    (1u << 2)
#define OV_HOOKS    (1u << 3)
#define OV_PARAM(i) (1u << (4 + (i)))

struct rule_over {
	uint32_t set; /* OV_* bits given in the section */
	struct det_rule_eff v;
};

struct job_section {
	const char *pattern; /* owned (strs) */
	uint32_t line;
	struct rule_over ov[DET_RULE_COUNT];
};

struct alias_ent {
	uint64_t hash;
	const char *name; /* static or owned (strs); NULL = empty slot */
	uint32_t len;
	struct det_metric_id id;
};

struct det_rules {
	struct det_rule_eff base[DET_RULE_COUNT];
	struct job_section *jobs;
	size_t njobs;
	struct alias_ent *atab;
	size_t acap; /* power of two */
	size_t nuser_aliases;
	char **strs; /* every owned string */
	size_t nstrs, capstrs;
};

static void errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void errf(char *err, size_t errlen, const char *fmt, ...)
{
	if (!err || errlen == 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static char *own_str(struct det_rules *r, const char *s, size_t n)
{
	if (r->nstrs == r->capstrs) {
		size_t cap = r->capstrs ? r->capstrs * 2 : 16;
		char **v = realloc(r->strs, cap * sizeof(*v));
		if (!v)
			return NULL;
		r->strs = v;
		r->capstrs = cap;
	}
	char *c = malloc(n + 1);
	if (!c)
		return NULL;
	memcpy(c, s, n);
	c[n] = 0;
	r->strs[r->nstrs++] = c;
	return c;
}

void det_rules_free(struct det_rules *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nstrs; i++)
		free(r->strs[i]);
	free(r->strs);
	free(r->jobs);
	free(r->atab);
	free(r);
}

/* ---- alias table ---------------------------------------------------------------------- */

/* The model's metric hash (mdl_metric_hash), so that the writers' filter
 * (want) looks a batch's series up with the hash each already carries. */
static uint64_t name_hash(const char *s, size_t n)
{
	return mdl_metric_hash(s, n);
}

/* Inserts or replaces name -> id. The table never fills: its capacity is
 * fixed at twice the largest possible entry count. */
static void alias_put(struct det_rules *r, const char *name, size_t len, struct det_metric_id id)
{
	uint64_t h = name_hash(name, len);
	size_t mask = r->acap - 1;
	for (size_t i = h & mask;; i = (i + 1) & mask) {
		struct alias_ent *e = &r->atab[i];
		if (!e->name) {
			*e = (struct alias_ent){h, name, (uint32_t)len, id};
			return;
		}
		if (e->hash == h && e->len == len && memcmp(e->name, name, len) == 0) {
			e->id = id;
			return;
		}
	}
}

struct det_metric_id det_rules_metric(const struct det_rules *r, const char *name, size_t len)
{
	return det_rules_metric_hashed(r, name, len, name_hash(name, len));
}

struct det_metric_id det_rules_metric_hashed(const struct det_rules *r, const char *name,
					     size_t len, uint64_t hash)
{
	uint64_t h = hash;
	size_t mask = r->acap - 1;
	for (size_t i = h & mask;; i = (i + 1) & mask) {
		const struct alias_ent *e = &r->atab[i];
		if (!e->name)
			return (struct det_metric_id){DET_MET_NONE, 0};
		if (e->hash == h && e->len == len && memcmp(e->name, name, len) == 0)
			return e->id;
	}
}

static size_t builtin_name_count(void)
{
	size_t n = DET_MET_COUNT + DET_PH_COUNT;
	const char *c;
	unsigned ph;
	for (size_t i = 0; mdl_metric_alias(i, &c); i++)
		n++;
	for (size_t i = 0; det_vocab_phase_word(i, &ph); i++)
		n++;
	return n;
}

/* Builds the table with the built-in names; user aliases are added later. */
static int alias_init(struct det_rules *r)
{
	size_t need = 2 * (builtin_name_count() + DET_RULES_ALIAS_MAX), cap = 64;
	while (cap < need)
		cap *= 2;
	r->atab = calloc(cap, sizeof(*r->atab));
	if (!r->atab)
		return -ENOMEM;
	r->acap = cap;
	for (unsigned m = 1; m < DET_MET_COUNT; m++) {
		for (unsigned p = 0; p < (m == DET_MET_PHASE ? DET_PH_COUNT : 1u); p++) {
			struct det_metric_id id = {(uint8_t)m, (uint8_t)p};
			const char *n = det_vocab_metric_name(id);
			alias_put(r, n, strlen(n), id);
		}
	}
	unsigned ph;
	const char *w;
	for (size_t i = 0; (w = det_vocab_phase_word(i, &ph)) != NULL; i++) {
		char buf[64];
		int n = snprintf(buf, sizeof(buf), "step_time.%s", w);
		char *s = own_str(r, buf, (size_t)n);
		if (!s)
			return -ENOMEM;
		alias_put(r, s, (size_t)n, (struct det_metric_id){DET_MET_PHASE, (uint8_t)ph});
	}
	const char *canon, *alias;
	for (size_t i = 0; (alias = mdl_metric_alias(i, &canon)) != NULL; i++) {
		struct det_metric_id id;
		if (det_vocab_canonical(canon, strlen(canon), &id) == 0)
			alias_put(r, alias, strlen(alias), id);
	}
	return 0;
}

/* ---- defaults and resolution ---------------------------------------------------------- */

static void spec_defaults(struct det_rule_eff out[DET_RULE_COUNT])
{
	for (unsigned i = 0; i < DET_RULE_COUNT; i++) {
		const struct det_rule_spec *s = det_rule_spec(i);
		memset(&out[i], 0, sizeof(out[i]));
		out[i].enabled = s->enabled;
		out[i].severity = s->severity;
		out[i].for_s = s->for_s;
		for (uint32_t k = 0; k < s->nparams; k++)
			out[i].p[k] = s->params[k].def;
	}
}

static int rules_new(struct det_rules **out)
{
	struct det_rules *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	spec_defaults(r->base);
	int rc = alias_init(r);
	if (rc) {
		det_rules_free(r);
		return rc;
	}
	*out = r;
	return 0;
}

int det_rules_default(struct det_rules **out)
{
	return rules_new(out);
}

static void apply_over(struct det_rule_eff *e, const struct rule_over *o)
{
	if (o->set & OV_ENABLED)
		e->enabled = o->v.enabled;
	if (o->set & OV_FOR)
		e->for_s = o->v.for_s;
	if (o->set & OV_SEV)
		e->severity = o->v.severity;
	if (o->set & OV_HOOKS) {
		e->nwebhooks = o->v.nwebhooks;
		memcpy(e->webhooks, o->v.webhooks, sizeof(e->webhooks));
	}
	for (unsigned k = 0; k < DET_PARAMS_MAX; k++)
		if (o->set & OV_PARAM(k))
			e->p[k] = o->v.p[k];
}

/* Glob match with '*' (any run) and '?' (one byte); iterative with one
 * backtrack point, so it is linear-ish and never recurses. */
static bool glob_match(const char *pat, const char *s, size_t slen)
{
	size_t pi = 0, si = 0, star = (size_t)-1, mark = 0, plen = strlen(pat);
	while (si < slen) {
		if (pi < plen && (pat[pi] == '?' || pat[pi] == s[si])) {
			pi++;
			si++;
		} else if (pi < plen && pat[pi] == '*') {
			star = pi++;
			mark = si;
		} else if (star != (size_t)-1) {
			pi = star + 1;
			si = ++mark;
		} else {
			return false;
		}
	}
	while (pi < plen && pat[pi] == '*')
		pi++;
	return pi == plen;
}

void det_rules_resolve(const struct det_rules *r, const char *job, size_t job_len,
		       struct det_rule_eff out[DET_RULE_COUNT])
{
	memcpy(out, r->base, sizeof(r->base));
	for (size_t j = 0; j < r->njobs; j++) {
		const struct job_section *js = &r->jobs[j];
		if (!glob_match(js->pattern, job, job_len))
			continue;
		for (unsigned i = 0; i < DET_RULE_COUNT; i++)
			apply_over(&out[i], &js->ov[i]);
	}
}

void det_rules_counts(const struct det_rules *r, size_t *job_sections, size_t *aliases)
{
	*job_sections = r->njobs;
	*aliases = r->nuser_aliases;
}

/* ---- parser ----------------------------------------------------------------------------- */

enum sec_kind { SEC_NONE, SEC_RULE, SEC_JOB, SEC_ALIASES };

struct parser {
	struct det_rules *r;
	const char *name; /* file name for messages */
	uint32_t line;
	enum sec_kind sec;
	int rule;			    /* SEC_RULE: its id */
	struct job_section *job;	    /* SEC_JOB */
	char secname[SEC_NAME_BYTES];	    /* "[rule X]" for messages */
	uint32_t rule_seen[DET_RULE_COUNT]; /* line of each [rule] section, 0 = none */
	uint32_t base_set[DET_RULE_COUNT];  /* OV_* bits set by [rule] sections */
	bool aliases_seen;
	char why[WHY_BYTES];
};

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

static void trim(const char **s, size_t *n)
{
	while (*n && is_space(**s)) {
		(*s)++;
		(*n)--;
	}
	while (*n && is_space((*s)[*n - 1]))
		(*n)--;
}

/* Cuts a '#' comment outside double quotes; RDB_EINVAL on an unterminated
 * quote. */
static int strip_comment(const char *s, size_t *n)
{
	bool q = false;
	for (size_t i = 0; i < *n; i++) {
		if (s[i] == '"')
			q = !q;
		else if (s[i] == '#' && !q) {
			*n = i;
			break;
		}
	}
	return q ? RDB_EINVAL : 0;
}

/* Removes surrounding double quotes from a value; a quote inside is an
 * error. */
static int unquote(struct parser *p, const char **v, size_t *n)
{
	if (*n >= 2 && (*v)[0] == '"' && (*v)[*n - 1] == '"') {
		(*v)++;
		*n -= 2;
	}
	if (memchr(*v, '"', *n)) {
		errf(p->why, sizeof(p->why), "a double quote may only surround the whole value");
		return RDB_EINVAL;
	}
	return 0;
}

static bool printable(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f)
			return false;
	return true;
}

static bool pattern_valid(const char *s, size_t n)
{
	if (n == 0 || n > DET_JOB_MAX - 1)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-' || c == '*' || c == '?'))
			return false;
	}
	return true;
}

static bool metric_name_valid(const char *s, size_t n)
{
	if (n == 0 || n > 256)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c <= 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '{' || c == '}' ||
		    c == ',')
			return false;
	}
	return true;
}

static int parse_section(struct parser *p, const char *s, size_t n)
{
	if (n < 2 || s[n - 1] != ']') {
		errf(p->why, sizeof(p->why), "a section header must end with ']'");
		return RDB_EINVAL;
	}
	s++;
	n -= 2;
	trim(&s, &n);
	p->secname[0] = 0; /* errors in a header are not the previous section's */
	p->job = NULL;
	p->rule = -1;
	if (n == 7 && memcmp(s, "aliases", 7) == 0) {
		if (p->aliases_seen) {
			errf(p->why, sizeof(p->why), "[aliases] given twice");
			return RDB_EINVAL;
		}
		p->aliases_seen = true;
		p->sec = SEC_ALIASES;
		snprintf(p->secname, sizeof(p->secname), "[aliases]");
		return 0;
	}
	if (n > 5 && memcmp(s, "rule", 4) == 0 && is_space(s[4])) {
		const char *a = s + 5;
		size_t an = n - 5;
		trim(&a, &an);
		char name[DET_NAME_MAX] = "";
		if (an < sizeof(name)) {
			memcpy(name, a, an);
			name[an] = 0;
		}
		int id = det_rule_by_name(name);
		if (id < 0) {
			char list[640] = "";
			for (unsigned i = 0; i < DET_RULE_COUNT; i++) {
				strncat(list, i ? ", " : "", sizeof(list) - strlen(list) - 1);
				strncat(list, det_rule_spec(i)->alertname,
					sizeof(list) - strlen(list) - 1);
			}
			errf(p->why, sizeof(p->why), "unknown rule '%.*s' (allowed: %s)",
			     (int)(an > 64 ? 64 : an), a, list);
			return RDB_EINVAL;
		}
		if (p->rule_seen[id]) {
			errf(p->why, sizeof(p->why), "[rule %s] given twice (first on line %u)",
			     name, p->rule_seen[id]);
			return RDB_EINVAL;
		}
		p->rule_seen[id] = p->line;
		p->rule = id;
		p->sec = SEC_RULE;
		snprintf(p->secname, sizeof(p->secname), "[rule %s]", name);
		return 0;
	}
	if (n > 4 && memcmp(s, "job", 3) == 0 && is_space(s[3])) {
		const char *a = s + 4;
		size_t an = n - 4;
		trim(&a, &an);
		if (an >= 2 && a[0] == '"' && a[an - 1] == '"') {
			a++;
			an -= 2;
		}
		if (!pattern_valid(a, an)) {
			errf(p->why, sizeof(p->why),
			     "bad job pattern '%.*s' (allowed: 1..128 of A-Z a-z 0-9 . _ - and the "
			     "wildcards * ?)",
			     (int)(an > 64 ? 64 : an), a);
			return RDB_EINVAL;
		}
		if (p->r->njobs == DET_RULES_JOBS_MAX) {
			errf(p->why, sizeof(p->why), "more than %d [job] sections",
			     DET_RULES_JOBS_MAX);
			return RDB_ELIMIT;
		}
		struct job_section *v =
		    realloc(p->r->jobs, (p->r->njobs + 1) * sizeof(*p->r->jobs));
		if (!v)
			return -ENOMEM;
		p->r->jobs = v;
		struct job_section *js = &v[p->r->njobs];
		memset(js, 0, sizeof(*js));
		js->pattern = own_str(p->r, a, an);
		if (!js->pattern)
			return -ENOMEM;
		js->line = p->line;
		p->r->njobs++;
		p->job = js;
		p->sec = SEC_JOB;
		snprintf(p->secname, sizeof(p->secname), "[job \"%.*s\"]", (int)an, a);
		return 0;
	}
	errf(p->why, sizeof(p->why),
	     "unknown section '[%.*s]' (allowed: [rule NAME], [job \"PATTERN\"], [aliases])",
	     (int)(n > 64 ? 64 : n), s);
	return RDB_EINVAL;
}

/* Parses a whole-seconds duration: digits with an optional s/m/h/d suffix. */
static int parse_duration(const char *v, size_t n, double max_s, double *out)
{
	double mult = 1;
	if (n && (v[n - 1] == 's' || v[n - 1] == 'm' || v[n - 1] == 'h' || v[n - 1] == 'd')) {
		mult = v[n - 1] == 's' ? 1 : v[n - 1] == 'm' ? 60 : v[n - 1] == 'h' ? 3600 : 86400;
		n--;
	}
	if (n == 0 || n > 12)
		return RDB_EINVAL;
	double x = 0;
	for (size_t i = 0; i < n; i++) {
		if (v[i] < '0' || v[i] > '9')
			return RDB_EINVAL;
		x = x * 10 + (v[i] - '0');
	}
	x *= mult;
	if (x > max_s)
		return RDB_ELIMIT;
	*out = x;
	return 0;
}

/* A parameter value: a decimal number; parameters named *_s also take a
 * duration suffix (s, m, h, d). */
static int parse_number(const char *pname, const char *v, size_t n, double *out)
{
	size_t pl = strlen(pname);
	if (pl > 2 && strcmp(pname + pl - 2, "_s") == 0 && n > 1 &&
	    (v[n - 1] == 'm' || v[n - 1] == 'h' || v[n - 1] == 'd' || v[n - 1] == 's'))
		return parse_duration(v, n, 1e12, out) ? RDB_EINVAL : 0;
	char buf[64];
	if (n == 0 || n >= sizeof(buf))
		return RDB_EINVAL;
	memcpy(buf, v, n);
	buf[n] = 0;
	for (size_t i = 0; i < n; i++) {
		char c = buf[i];
		if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '-' ||
		      c == '+'))
			return RDB_EINVAL;
	}
	char *end = NULL;
	errno = 0;
	double x = strtod(buf, &end);
	if (end != buf + n || errno != 0 || !isfinite(x))
		return RDB_EINVAL;
	*out = x;
	return 0;
}

static bool url_valid(const char *v, size_t n)
{
	if (n >= DET_URL_MAX || !printable(v, n) || memchr(v, ' ', n))
		return false;
	return (n > 7 && memcmp(v, "http://", 7) == 0) || (n > 8 && memcmp(v, "https://", 8) == 0);
}

/* Sets one key of rule id into the override o (which tracks what was set,
 * for the "set twice" check). */
static int set_rule_key(struct parser *p, int id, struct rule_over *o, const char *k, size_t kn,
			const char *v, size_t vn)
{
	const struct det_rule_spec *spec = det_rule_spec((unsigned)id);
	char key[64];
	if (kn >= sizeof(key))
		kn = sizeof(key) - 1;
	memcpy(key, k, kn);
	key[kn] = 0;
	uint32_t bit = 0;
	int pi = -1;
	if (strcmp(key, "enabled") == 0)
		bit = OV_ENABLED;
	else if (strcmp(key, "for") == 0)
		bit = OV_FOR;
	else if (strcmp(key, "severity") == 0)
		bit = OV_SEV;
	else if (strcmp(key, "webhook") == 0)
		bit = OV_HOOKS;
	for (uint32_t i = 0; !bit && i < spec->nparams; i++) {
		if (strcmp(key, spec->params[i].name) == 0) {
			pi = (int)i;
			bit = OV_PARAM(i);
		}
	}
	if (!bit) {
		char list[400] = "enabled, for, severity, webhook";
		for (uint32_t i = 0; i < spec->nparams; i++) {
			strncat(list, ", ", sizeof(list) - strlen(list) - 1);
			strncat(list, spec->params[i].name, sizeof(list) - strlen(list) - 1);
		}
		errf(p->why, sizeof(p->why), "unknown option '%s' of %s (allowed: %s)", key,
		     spec->alertname, list);
		return RDB_EINVAL;
	}
	if ((o->set & bit) && bit != OV_HOOKS) {
		errf(p->why, sizeof(p->why), "%s: set twice in this section", key);
		return RDB_EINVAL;
	}
	if (unquote(p, &v, &vn))
		return RDB_EINVAL;
	if (bit == OV_ENABLED) {
		if (vn == 4 && memcmp(v, "true", 4) == 0)
			o->v.enabled = true;
		else if (vn == 5 && memcmp(v, "false", 5) == 0)
			o->v.enabled = false;
		else
			goto bad_value;
	} else if (bit == OV_FOR) {
		double x;
		int rc = parse_duration(v, vn, 7 * 86400, &x);
		if (rc)
			goto bad_value;
		o->v.for_s = (uint32_t)x;
	} else if (bit == OV_SEV) {
		if (vn == 7 && memcmp(v, "warning", 7) == 0)
			o->v.severity = DET_SEV_WARNING;
		else if (vn == 8 && memcmp(v, "critical", 8) == 0)
			o->v.severity = DET_SEV_CRITICAL;
		else
			goto bad_value;
	} else if (bit == OV_HOOKS) {
		if (!url_valid(v, vn))
			goto bad_value;
		if (!(o->set & OV_HOOKS))
			o->v.nwebhooks = 0; /* the first line replaces the inherited list */
		if (o->v.nwebhooks == DET_WEBHOOKS_MAX) {
			errf(p->why, sizeof(p->why), "webhook: more than %d webhooks for %s",
			     DET_WEBHOOKS_MAX, spec->alertname);
			return RDB_EINVAL;
		}
		const char *u = own_str(p->r, v, vn);
		if (!u)
			return -ENOMEM;
		o->v.webhooks[o->v.nwebhooks++] = u;
	} else {
		const struct det_param_spec *ps = &spec->params[pi];
		double x;
		if (parse_number(ps->name, v, vn, &x) || x < ps->min || x > ps->max ||
		    (ps->integer && x != floor(x)))
			goto bad_value;
		o->v.p[pi] = x;
	}
	o->set |= bit;
	return 0;
bad_value:;
	char allowed[160];
	if (bit == OV_ENABLED)
		snprintf(allowed, sizeof(allowed), "true or false");
	else if (bit == OV_FOR)
		snprintf(allowed, sizeof(allowed),
			 "whole seconds with an optional s, m, h or d "
			 "suffix, at most 7d");
	else if (bit == OV_SEV)
		snprintf(allowed, sizeof(allowed), "warning or critical");
	else if (bit == OV_HOOKS)
		snprintf(allowed, sizeof(allowed),
			 "an http:// or https:// URL without spaces, "
			 "shorter than %d bytes",
			 DET_URL_MAX);
	else
		snprintf(allowed, sizeof(allowed), "%s %g..%g%s",
			 spec->params[pi].integer ? "a whole number" : "a number",
			 spec->params[pi].min, spec->params[pi].max,
			 strstr(spec->params[pi].name, "_s") ? ", or a duration like 90s, 5m, 2h"
							     : "");
	errf(p->why, sizeof(p->why), "%s: bad value '%.*s' (allowed: %s)", key,
	     (int)(vn > 64 ? 64 : vn), v, allowed);
	return RDB_EINVAL;
}

static int set_alias(struct parser *p, const char *k, size_t kn, const char *v, size_t vn)
{
	if (!metric_name_valid(k, kn)) {
		errf(p->why, sizeof(p->why),
		     "bad metric name '%.*s' (allowed: 1..256 printable ASCII bytes except space "
		     "\" \\ { } ,)",
		     (int)(kn > 64 ? 64 : kn), k);
		return RDB_EINVAL;
	}
	if (unquote(p, &v, &vn))
		return RDB_EINVAL;
	struct det_metric_id id;
	if (det_vocab_canonical(k, kn, &id) == 0) {
		errf(p->why, sizeof(p->why), "'%.*s' is a canonical name and cannot be an alias",
		     (int)(kn > 64 ? 64 : kn), k);
		return RDB_EINVAL;
	}
	if (det_vocab_canonical(v, vn, &id) != 0) {
		errf(p->why, sizeof(p->why),
		     "%.*s: '%.*s' is not a canonical metric name (allowed: loss, grad_norm, lr, "
		     "loss_scale, skipped_steps, step_time, step_time.<phase>, samples_per_sec, "
		     "tokens_per_sec, gpu.*, checkpoint.duration, config_hash, world_size, "
		     "heartbeat, ... as in docs/OPERATIONS.md)",
		     (int)(kn > 64 ? 64 : kn), k, (int)(vn > 64 ? 64 : vn), v);
		return RDB_EINVAL;
	}
	if (p->r->nuser_aliases == DET_RULES_ALIAS_MAX) {
		errf(p->why, sizeof(p->why), "more than %d aliases", DET_RULES_ALIAS_MAX);
		return RDB_ELIMIT;
	}
	const char *name = own_str(p->r, k, kn);
	if (!name)
		return -ENOMEM;
	alias_put(p->r, name, kn, id);
	p->r->nuser_aliases++;
	return 0;
}

static int parse_kv(struct parser *p, const char *s, size_t n)
{
	const char *eq = memchr(s, '=', n);
	if (!eq) {
		errf(p->why, sizeof(p->why), "expected 'key = value' or a [section] header");
		return RDB_EINVAL;
	}
	const char *k = s, *v = eq + 1;
	size_t kn = (size_t)(eq - s), vn = n - kn - 1;
	trim(&k, &kn);
	trim(&v, &vn);
	if (kn == 0 || vn == 0) {
		errf(p->why, sizeof(p->why), "expected 'key = value' with a key and a value");
		return RDB_EINVAL;
	}
	if (p->sec == SEC_NONE) {
		errf(p->why, sizeof(p->why),
		     "'%.*s' outside a section (start with [rule NAME], [job \"PATTERN\"] or "
		     "[aliases])",
		     (int)(kn > 64 ? 64 : kn), k);
		return RDB_EINVAL;
	}
	if (p->sec == SEC_ALIASES)
		return set_alias(p, k, kn, v, vn);
	if (p->sec == SEC_RULE) {
		struct rule_over o = {p->base_set[p->rule], p->r->base[p->rule]};
		int rc = set_rule_key(p, p->rule, &o, k, kn, v, vn);
		if (rc == 0) {
			p->base_set[p->rule] = o.set;
			p->r->base[p->rule] = o.v;
		}
		return rc;
	}
	const char *dot = memchr(k, '.', kn);
	char name[DET_NAME_MAX];
	size_t nl = dot ? (size_t)(dot - k) : 0;
	int id = -1;
	if (dot && nl < sizeof(name)) {
		memcpy(name, k, nl);
		name[nl] = 0;
		id = det_rule_by_name(name);
	}
	if (id < 0) {
		errf(p->why, sizeof(p->why),
		     "'%.*s': keys of a [job] section are Rule.option (e.g. Straggler.enabled) "
		     "with a built-in rule name",
		     (int)(kn > 64 ? 64 : kn), k);
		return RDB_EINVAL;
	}
	return set_rule_key(p, id, &p->job->ov[id], dot + 1, kn - nl - 1, v, vn);
}

/* Cross-parameter checks on the rules a job would get. */
static int check_eff(const struct det_rule_eff e[DET_RULE_COUNT], char *why, size_t wlen)
{
	if (e[DET_R_STRAGGLER].p[DET_P_ST_HITS] > e[DET_R_STRAGGLER].p[DET_P_ST_WINDOW]) {
		errf(why, wlen, "Straggler: hits (%g) must not exceed window (%g)",
		     e[DET_R_STRAGGLER].p[DET_P_ST_HITS], e[DET_R_STRAGGLER].p[DET_P_ST_WINDOW]);
		return RDB_EINVAL;
	}
	const struct det_rule_eff *d = &e[DET_R_LOSS_DIVERGENCE];
	if (d->p[DET_P_DV_RISING] >= d->p[DET_P_DV_MIN_BLOCKS]) {
		errf(why, wlen, "LossDivergence: rising (%g) must be below min_blocks (%g)",
		     d->p[DET_P_DV_RISING], d->p[DET_P_DV_MIN_BLOCKS]);
		return RDB_EINVAL;
	}
	return 0;
}

static int parse_line(struct parser *p, const char *s, size_t n)
{
	if (strip_comment(s, &n)) {
		errf(p->why, sizeof(p->why), "unterminated double quote");
		return RDB_EINVAL;
	}
	trim(&s, &n);
	if (n == 0)
		return 0;
	if (!printable(s, n)) {
		errf(p->why, sizeof(p->why), "control characters or non-ASCII bytes in the line");
		return RDB_EINVAL;
	}
	if (s[0] == '[')
		return parse_section(p, s, n);
	return parse_kv(p, s, n);
}

/* After the last line: every job section must give valid combinations. */
static int parse_finish(struct parser *p)
{
	struct det_rule_eff e[DET_RULE_COUNT];
	if (check_eff(p->r->base, p->why, sizeof(p->why))) {
		p->line = 0;
		return RDB_EINVAL;
	}
	for (size_t j = 0; j < p->r->njobs; j++) {
		memcpy(e, p->r->base, sizeof(e));
		for (unsigned i = 0; i < DET_RULE_COUNT; i++)
			apply_over(&e[i], &p->r->jobs[j].ov[i]);
		if (check_eff(e, p->why, sizeof(p->why))) {
			p->line = p->r->jobs[j].line;
			snprintf(p->secname, sizeof(p->secname), "[job \"%s\"]",
				 p->r->jobs[j].pattern);
			return RDB_EINVAL;
		}
	}
	return 0;
}

int det_rules_parse_text(const char *text, size_t len, const char *name, struct det_rules **out,
			 char *err, size_t errlen)
{
	struct parser p;
	memset(&p, 0, sizeof(p));
	p.name = name ? name : "rules";
	p.rule = -1;
	int rc = rules_new(&p.r);
	if (rc) {
		errf(err, errlen, "%s: out of memory", p.name);
		return rc;
	}
	if (len > DET_RULES_FILE_MAX) {
		errf(err, errlen, "%s: %zu bytes, larger than the %u allowed", p.name, len,
		     DET_RULES_FILE_MAX);
		rc = RDB_ELIMIT;
		goto out;
	}
	for (size_t off = 0; off < len;) {
		const char *nl = memchr(text + off, '\n', len - off);
		size_t n = nl ? (size_t)(nl - (text + off)) : len - off;
		p.line++;
		if (n >= LINE_MAX_BYTES) {
			errf(err, errlen, "%s:%u: line longer than %d bytes", p.name, p.line,
			     LINE_MAX_BYTES - 1);
			rc = RDB_EINVAL;
			goto out;
		}
		if (memchr(text + off, 0, n)) {
			errf(err, errlen, "%s:%u: NUL byte in the line", p.name, p.line);
			rc = RDB_EINVAL;
			goto out;
		}
		p.why[0] = 0;
		rc = parse_line(&p, text + off, n);
		if (rc) {
			errf(err, errlen, "%s:%u: %s%s%s", p.name, p.line, p.secname,
			     p.secname[0] ? " " : "", rc == -ENOMEM ? "out of memory" : p.why);
			goto out;
		}
		off += n + (nl ? 1 : 0);
	}
	rc = parse_finish(&p);
	if (rc) {
		if (p.line)
			errf(err, errlen, "%s:%u: %s %s", p.name, p.line, p.secname, p.why);
		else
			errf(err, errlen, "%s: %s", p.name, p.why);
		goto out;
	}
	*out = p.r;
	p.r = NULL;
out:
	det_rules_free(p.r);
	return rc == RDB_ELIMIT && len <= DET_RULES_FILE_MAX ? RDB_EINVAL : rc;
}

int det_rules_load_file(const char *path, struct det_rules **out, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		int rc = -errno;
		errf(err, errlen, "%s: cannot open rules file: %s", path, rdb_strerror(rc));
		return rc;
	}
	char *buf = malloc(DET_RULES_FILE_MAX + 1);
	int rc = 0;
	if (!buf) {
		rc = -ENOMEM;
		errf(err, errlen, "%s: out of memory", path);
		goto out;
	}
	size_t n = fread(buf, 1, DET_RULES_FILE_MAX + 1, f);
	if (ferror(f)) {
		rc = -EIO;
		errf(err, errlen, "%s: cannot read rules file", path);
		goto out;
	}
	if (n > DET_RULES_FILE_MAX) {
		rc = RDB_ELIMIT;
		errf(err, errlen, "%s: larger than the %u bytes allowed for a rules file", path,
		     DET_RULES_FILE_MAX);
		goto out;
	}
	rc = det_rules_parse_text(buf, n, path, out, err, errlen);
out:
	free(buf);
	fclose(f);
	return rc;
}

/* ---- the documented sample file --------------------------------------------------------- */

/* Appends text as '#' comment lines wrapped at about 80 columns. */
static int put_comment(struct rdb_buf *b, const char *text)
{
	int rc = 0;
	const char *s = text;
	while (*s && rc == 0) {
		size_t n = strlen(s), cut = n;
		if (n > 76) {
			cut = 76;
			while (cut > 0 && s[cut] != ' ')
				cut--;
			if (cut == 0)
				cut = 76;
		}
		rc = rdb_buf_printf(b, "# %.*s\n", (int)cut, s);
		s += cut;
		while (*s == ' ')
			s++;
	}
	return rc;
}

static int put_rule(struct rdb_buf *b, const struct det_rule_spec *s)
{
	int rc = rdb_buf_printf(b, "\n[rule %s]\n", s->alertname);
	rc = rc ? rc : put_comment(b, s->doc);
	rc = rc ? rc : rdb_buf_printf(b, "enabled = %s\n", s->enabled ? "true" : "false");
	rc = rc ? rc : rdb_buf_printf(b, "for = %us\n", s->for_s);
	rc = rc ? rc
		: rdb_buf_printf(b, "severity = %s\n",
				 s->severity == DET_SEV_CRITICAL ? "critical" : "warning");
	for (uint32_t i = 0; rc == 0 && i < s->nparams; i++) {
		const struct det_param_spec *p = &s->params[i];
		char doc[512];
		snprintf(doc, sizeof(doc), "%s: %s Allowed %s %g..%g.", p->name, p->doc,
			 p->integer ? "whole numbers" : "numbers", p->min, p->max);
		rc = put_comment(b, doc);
		rc = rc ? rc : rdb_buf_printf(b, "%s = %g\n", p->name, p->def);
	}
	return rc ? rc : rdb_buf_printf(b, "# webhook = https://controller.example/rankdb\n");
}

int det_rules_sample(struct rdb_buf *out)
{
	static const char head[] =
	    "rules.example - detection rules of rankdbd. Generated from the built-in rule "
	    "table (detect/rules_table.c): every detector with its defaults, so this file "
	    "as shipped changes nothing. Point the option rules_file at a copy, edit it, "
	    "check it with 'rankctl rules check FILE', and reload with SIGHUP, POST "
	    "/api/v1/admin/rules/reload or rankctl rules reload (a bad file is refused and the "
	    "old rules stay).";
	static const char fmt[] =
	    "Format: '# comment'; [rule NAME] sections with 'key = value' lines: enabled "
	    "(true|false), for (pending time before firing: 30s, 5m, 2h, 1d), severity "
	    "(warning|critical), webhook (an http(s) URL that gets every alert of the rule as "
	    "JSON; up to 4 lines) and the detector's parameters. [job \"team-a-*\"] sections "
	    "override rules for matching jobs (globs with * and ?), as Rule.key = value "
	    "lines, e.g. Straggler.enabled = false; every matching section applies, in file "
	    "order. [aliases] maps other metric names onto the vocabulary: name = canonical. "
	    "Parameters whose name ends in _s take seconds or a duration (90s, 5m, 2h).";
	int rc = put_comment(out, head);
	rc = rc ? rc : rdb_buf_puts(out, "#\n");
	rc = rc ? rc : put_comment(out, fmt);
	for (unsigned i = 0; rc == 0 && i < DET_RULE_COUNT; i++)
		rc = put_rule(out, det_rule_spec(i));
	rc = rc ? rc
		: rdb_buf_puts(out, "\n# An override for some jobs:\n"
				    "# [job \"sweep-*\"]\n"
				    "# LossSpike.enabled = false\n"
				    "# Straggler.rel = 0.25\n"
				    "\n[aliases]\n");
	rc = rc ? rc
		: put_comment(out, "Built in (need not be listed): metric name = the "
				   "canonical name it stands for.");
	const char *canon, *alias;
	for (size_t i = 0; rc == 0 && (alias = mdl_metric_alias(i, &canon)) != NULL; i++)
		rc = rdb_buf_printf(out, "# %s = %s\n", alias, canon);
	return rc;
}
