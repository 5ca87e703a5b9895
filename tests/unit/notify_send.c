/* notify_send.c - sends alerts given on the command line through det_notify
 * (detect/notify.h), waits until each delivery ended, prints the counters
 * as one JSON line and exits 0 if every delivery succeeded. A test driver
 * for tests/integration/test_alertmanager.py; not installed.
 *
 *   notify_send [--am URLS] [--generator URL] [--timeout-ms N]
 *               [--max-attempts N] [--now-ns N]
 *               --alert key=value... [--alert key=value...]
 *
 * Alert keys: state (firing|resolved; default firing), alertname, job,
 * rank (default: none, a job-level alert), phase, metric, severity
 * (warning|critical), summary, description, value, baseline, step,
 * active_ns, starts_ns (default now), ends_ns (default now for resolved),
 * id (default: position), for_s, webhook (repeatable), resend (1 = a
 * periodic re-send: Alertmanagers only).
 */
#include "common/rdb_time.h"
#include "detect/notify.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ALERTS 64

struct spec {
	struct det_alert al;
	bool resend;
};

static int die_usage(const char *msg, const char *arg)
{
	fprintf(stderr, "notify_send: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
	return 2;
}

static int parse_i64(const char *s, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end)
		return -1;
	*out = v;
	return 0;
}

static int parse_f64(const char *s, double *out)
{
	char *end;
	*out = strtod(s, &end);
	return end == s || *end ? -1 : 0;
}

#define COPY(field) snprintf(a->c.field, sizeof(a->c.field), "%s", v)

static int set_key(struct spec *sp, const char *kv, int64_t now_ns)
{
	struct det_alert *a = &sp->al;
	const char *eq = strchr(kv, '=');
	if (!eq)
		return -1;
	size_t klen = (size_t)(eq - kv);
	const char *v = eq + 1;
	int64_t i = 0;
#define KEY(name) (klen == strlen(name) && strncmp(kv, name, klen) == 0)
	if (KEY("state")) {
		a->state = strcmp(v, "resolved") == 0 ? DET_ALERT_RESOLVED : DET_ALERT_FIRING;
		if (a->state == DET_ALERT_RESOLVED && !a->ends_ns)
			a->ends_ns = now_ns;
		return strcmp(v, "resolved") == 0 || strcmp(v, "firing") == 0 ? 0 : -1;
	}
	if (KEY("alertname"))
		return COPY(alertname), 0;
	if (KEY("job"))
		return COPY(job), 0;
	if (KEY("phase"))
		return COPY(phase), 0;
	if (KEY("metric"))
		return COPY(metric), 0;
	if (KEY("summary"))
		return COPY(summary), 0;
	if (KEY("description"))
		return COPY(description), 0;
	if (KEY("severity")) {
		a->c.severity = strcmp(v, "critical") == 0 ? DET_SEV_CRITICAL : DET_SEV_WARNING;
		return 0;
	}
	if (KEY("value"))
		return parse_f64(v, &a->c.value);
	if (KEY("baseline"))
		return parse_f64(v, &a->c.baseline);
	if (KEY("webhook")) {
		if (a->c.nwebhooks == DET_WEBHOOKS_MAX)
			return -1;
		snprintf(a->c.webhooks[a->c.nwebhooks++], DET_URL_MAX, "%s", v);
		return 0;
	}
	if (parse_i64(v, &i) != 0)
		return -1;
	if (KEY("rank"))
		a->c.rank = i;
	else if (KEY("step"))
		a->c.step = i;
	else if (KEY("active_ns"))
		a->active_ns = i;
	else if (KEY("starts_ns"))
		a->starts_ns = i;
	else if (KEY("ends_ns"))
		a->ends_ns = i;
	else if (KEY("id"))
		a->id = (uint64_t)i;
	else if (KEY("for_s"))
		a->c.for_s = (uint32_t)i;
	else if (KEY("resend"))
		sp->resend = i != 0;
	else
		return -1;
	return 0;
#undef KEY
}

static void spec_init(struct spec *sp, size_t idx, int64_t now_ns)
{
	memset(sp, 0, sizeof(*sp));
	struct det_alert *a = &sp->al;
	a->c.rank = DET_RANK_NONE;
	a->c.value = NAN;
	a->c.baseline = NAN;
	a->c.step = INT64_MIN;
	a->state = DET_ALERT_FIRING;
	a->starts_ns = now_ns;
	a->updated_ns = now_ns;
	a->id = idx + 1;
}

int main(int argc, char **argv)
{
	static struct spec specs[MAX_ALERTS];
	size_t n = 0;
	struct det_notify_options o;
	memset(&o, 0, sizeof(o));
	o.retry_min_ms = 50;
	o.retry_max_ms = 500;
	int64_t now_ns = rdb_now_ns();
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		const char *val = i + 1 < argc ? argv[i + 1] : NULL;
		int64_t x;
		if (strcmp(arg, "--alert") == 0) {
			if (n == MAX_ALERTS)
				return die_usage("too many alerts", NULL);
			spec_init(&specs[n], n, now_ns);
			n++;
		} else if (strcmp(arg, "--am") == 0 && val) {
			o.alertmanager_urls = val;
			i++;
		} else if (strcmp(arg, "--generator") == 0 && val) {
			o.generator_url = val;
			i++;
		} else if (strcmp(arg, "--timeout-ms") == 0 && val && parse_i64(val, &x) == 0) {
			o.timeout_ms = (uint32_t)x;
			i++;
		} else if (strcmp(arg, "--max-attempts") == 0 && val && parse_i64(val, &x) == 0) {
			o.max_attempts = (uint32_t)x;
			i++;
		} else if (strcmp(arg, "--now-ns") == 0 && val && parse_i64(val, &now_ns) == 0) {
			i++;
		} else if (n > 0 && set_key(&specs[n - 1], arg, now_ns) == 0) {
			continue;
		} else {
			return die_usage("bad argument", arg);
		}
	}
	for (size_t k = 0; k < n; k++)
		if (!specs[k].al.active_ns)
			specs[k].al.active_ns = specs[k].al.starts_ns;
	if (det_notify_global_init() != 0)
		return 1;
	struct det_notify *nt = NULL;
	if (det_notify_new(&o, &nt) != 0)
		return die_usage("bad options", NULL);
	for (size_t k = 0; k < n; k++) {
		int rc = specs[k].resend ? det_notify_resend(nt, &specs[k].al, now_ns)
					 : det_notify_send(nt, &specs[k].al, now_ns);
		if (rc)
			fprintf(stderr, "notify_send: alert %zu not queued (%d)\n", k + 1, rc);
	}
	struct det_notify_stats st;
	for (int w = 0; w < 6000; w++) { /* at most 60 s */
		det_notify_stats(nt, &st);
		if (st.depth == 0)
			break;
		struct timespec ts = {0, 10 * 1000000L};
		nanosleep(&ts, NULL);
	}
	det_notify_stats(nt, &st);
	det_notify_free(nt);
	det_notify_global_cleanup();
	printf("{\"sent_am\":%llu,\"sent_webhook\":%llu,\"failed_am\":%llu,\"failed_webhook\":%llu,"
	       "\"retried_am\":%llu,\"retried_webhook\":%llu,\"refused\":%llu,\"depth\":%llu}\n",
	       (unsigned long long)st.sent[0], (unsigned long long)st.sent[1],
	       (unsigned long long)st.failed[0], (unsigned long long)st.failed[1],
	       (unsigned long long)st.retried[0], (unsigned long long)st.retried[1],
	       (unsigned long long)st.refused, (unsigned long long)st.depth);
	bool ok = st.failed[0] == 0 && st.failed[1] == 0 && st.refused == 0 && st.depth == 0 &&
		  st.dropped_full[0] == 0 && st.dropped_full[1] == 0;
	return ok ? 0 : 1;
}
