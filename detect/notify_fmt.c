/* notify_fmt.c - the JSON documents rankdb delivers for an alert
 * (notify_int.h): Alertmanager's v2 "postable alert" and rankdb's webhook
 * document (both specified in docs/API.md, "Alert delivery").
 *
 * Alertmanager v2 (POST /api/v2/alerts takes an array of these):
 *   {"labels": {alertname, job, rank?, severity, phase?, metric?},
 *    "annotations": {summary?, description?, value?, baseline?, step?},
 *    "startsAt": RFC 3339, "endsAt": RFC 3339, "generatorURL"?: URL}
 * Labels and annotations are strings; empty ones are left out (Alertmanager
 * drops empty labels anyway). A firing alert's endsAt is a lease, now +
 * valid_for (Prometheus: 4 x max(resend delay, evaluation interval)): the
 * periodic re-send extends it, and if rankdbd stops sending Alertmanager
 * resolves the alert by itself when it passes. A resolved alert carries its
 * resolution time, which is in the past, so Alertmanager resolves it at once.
 *
 * Times are UTC with millisecond precision ("2024-05-01T12:00:00.123Z").
 * Numbers in annotations use the shortest of %.15g / %.17g that reads back
 * exactly; NaN is left out, infinities are "+Inf" / "-Inf". Strings are
 * escaped as JSON; bytes that are not valid UTF-8 become U+FFFD, so a
 * receiver's strict decoder never rejects a document.
 *
 * Pure functions; thread-safe.
 */
#include "detect/notify_int.h"

#include "common/rdb_err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Length of the valid UTF-8 sequence at p (p[0] >= 0x80), or 0. */
static size_t utf8_len(const unsigned char *p)
{
	unsigned c = p[0], lo = 0x80, hi = 0xBF;
	size_t n;
	if (c >= 0xC2 && c <= 0xDF) {
		n = 2;
	} else if (c >= 0xE0 && c <= 0xEF) {
		n = 3;
		if (c == 0xE0)
			lo = 0xA0; /* no overlong forms */
		if (c == 0xED)
			hi = 0x9F; /* no surrogates */
	} else if (c >= 0xF0 && c <= 0xF4) {
		n = 4;
		if (c == 0xF0)
			lo = 0x90;
		if (c == 0xF4)
			hi = 0x8F; /* <= U+10FFFF */
	} else {
		return 0;
	}
	if (p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (p[i] < 0x80 || p[i] > 0xBF)
			return 0;
	return n;
}

static int json_str(struct rdb_buf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)s;
	int rc = rdb_buf_putc(b, '"');
	while (*p && rc == 0) {
		unsigned c = *p;
		if (c >= 0x80) {
			size_t n = utf8_len(p);
			rc = n ? rdb_buf_append(b, p, n) : rdb_buf_append(b, "\xEF\xBF\xBD", 3);
			p += n ? n : 1;
			continue;
		}
		if (c == '"' || c == '\\') {
			char e[2] = {'\\', (char)c};
			rc = rdb_buf_append(b, e, 2);
		} else if (c < 0x20 || c == 0x7F) {
			char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
			rc = rdb_buf_append(b, e, 6);
		} else {
			rc = rdb_buf_putc(b, (char)c);
		}
		p++;
	}
	return rc ? rc : rdb_buf_putc(b, '"');
}

/* "name":"value" with a leading ',' unless *first. */
static int json_member(struct rdb_buf *b, int *first, const char *name, const char *value)
{
	int rc = *first ? 0 : rdb_buf_putc(b, ',');
	*first = 0;
	if (rc == 0)
		rc = json_str(b, name);
	if (rc == 0)
		rc = rdb_buf_putc(b, ':');
	return rc ? rc : json_str(b, value);
}

static void fmt_double(char *out, size_t size, double v)
{
	if (isinf(v)) {
		snprintf(out, size, "%s", v > 0 ? "+Inf" : "-Inf");
		return;
	}
	snprintf(out, size, "%.15g", v);
	if (strtod(out, NULL) != v)
		snprintf(out, size, "%.17g", v);
}

/* RFC 3339, UTC, milliseconds. */
static void fmt_time(char *out, size_t size, int64_t ns)
{
	int64_t s = ns / 1000000000, rem = ns % 1000000000;
	if (rem < 0) {
		rem += 1000000000;
		s--;
	}
	time_t t = (time_t)s;
	struct tm tm;
	if (!gmtime_r(&t, &tm)) {
		snprintf(out, size, "1970-01-01T00:00:00.000Z");
		return;
	}
	snprintf(out, size, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(rem / 1000000));
}

static const char *severity_name(uint8_t sev)
{
	return sev == DET_SEV_CRITICAL ? "critical" : "warning";
}

static int labels_obj(struct rdb_buf *b, const struct det_cond *c)
{
	int first = 1, rc = rdb_buf_putc(b, '{');
	char rank[24];
	if (rc == 0)
		rc = json_member(b, &first, "alertname", c->alertname);
	if (rc == 0)
		rc = json_member(b, &first, "job", c->job);
	if (rc == 0 && c->rank >= 0) {
		snprintf(rank, sizeof(rank), "%lld", (long long)c->rank);
		rc = json_member(b, &first, "rank", rank);
	}
	if (rc == 0)
		rc = json_member(b, &first, "severity", severity_name(c->severity));
	if (rc == 0 && c->phase[0])
		rc = json_member(b, &first, "phase", c->phase);
	if (rc == 0 && c->metric[0])
		rc = json_member(b, &first, "metric", c->metric);
	return rc ? rc : rdb_buf_putc(b, '}');
}

static int annotations_obj(struct rdb_buf *b, const struct det_cond *c)
{
	int first = 1, rc = rdb_buf_putc(b, '{');
	char num[40];
	if (rc == 0 && c->summary[0])
		rc = json_member(b, &first, "summary", c->summary);
	if (rc == 0 && c->description[0])
		rc = json_member(b, &first, "description", c->description);
	if (rc == 0 && !isnan(c->value)) {
		fmt_double(num, sizeof(num), c->value);
		rc = json_member(b, &first, "value", num);
	}
	if (rc == 0 && !isnan(c->baseline)) {
		fmt_double(num, sizeof(num), c->baseline);
		rc = json_member(b, &first, "baseline", num);
	}
	if (rc == 0 && c->step != INT64_MIN) {
		snprintf(num, sizeof(num), "%lld", (long long)c->step);
		rc = json_member(b, &first, "step", num);
	}
	return rc ? rc : rdb_buf_putc(b, '}');
}

/* "generatorURL":"BASE/api/v1/alerts?job=J&alertname=A", or nothing. */
static int generator_member(struct rdb_buf *b, const struct det_notify_fmt *f,
			    const struct det_cond *c)
{
	if (!f->generator_url[0])
		return 0;
	struct rdb_buf url;
	rdb_buf_init(&url, DET_URL_MAX + 2 * 3 * (DET_JOB_MAX + DET_NAME_MAX));
	int rc = rdb_buf_printf(&url, "%s/api/v1/alerts?job=", f->generator_url);
	const char *parts[2] = {c->job, c->alertname};
	for (int k = 0; k < 2 && rc == 0; k++) {
		if (k == 1)
			rc = rdb_buf_puts(&url, "&alertname=");
		for (const unsigned char *p = (const unsigned char *)parts[k]; *p && rc == 0; p++) {
			if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
			    (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' || *p == '_' ||
			    *p == '~')
				rc = rdb_buf_putc(&url, (char)*p);
			else
				rc = rdb_buf_printf(&url, "%%%02X", *p);
		}
	}
	if (rc == 0)
		rc = rdb_buf_putc(&url, 0);
	if (rc == 0)
		rc = rdb_buf_puts(b, ",\"generatorURL\":");
	if (rc == 0)
		rc = json_str(b, (const char *)url.data);
	rdb_buf_free(&url);
	return rc;
}

static int time_member(struct rdb_buf *b, const char *name, int64_t ns)
{
	char t[96];
	fmt_time(t, sizeof(t), ns);
	int rc = rdb_buf_printf(b, ",\"%s\":", name);
	return rc ? rc : json_str(b, t);
}

int det_fmt_am(const struct det_notify_fmt *f, const struct det_alert *al, int64_t now_ns,
	       struct rdb_buf *b)
{
	if (al->state != DET_ALERT_FIRING && al->state != DET_ALERT_RESOLVED)
		return RDB_EINVAL;
	int64_t ends_ns = al->state == DET_ALERT_RESOLVED ? al->ends_ns : now_ns + f->valid_for_ns;
	int rc = rdb_buf_puts(b, "{\"labels\":");
	if (rc == 0)
		rc = labels_obj(b, &al->c);
	if (rc == 0)
		rc = rdb_buf_puts(b, ",\"annotations\":");
	if (rc == 0)
		rc = annotations_obj(b, &al->c);
	if (rc == 0)
		rc = time_member(b, "startsAt", al->starts_ns);
	if (rc == 0)
		rc = time_member(b, "endsAt", ends_ns);
	if (rc == 0)
		rc = generator_member(b, f, &al->c);
	return rc ? rc : rdb_buf_putc(b, '}');
}

static int number_member(struct rdb_buf *b, const char *name, double v)
{
	if (!isfinite(v))
		return rdb_buf_printf(b, ",\"%s\":null", name);
	char num[40];
	fmt_double(num, sizeof(num), v);
	return rdb_buf_printf(b, ",\"%s\":%s", name, num);
}

int det_fmt_webhook(const struct det_notify_fmt *f, const struct det_alert *al, int64_t now_ns,
		    struct rdb_buf *b)
{
	if (al->state != DET_ALERT_FIRING && al->state != DET_ALERT_RESOLVED)
		return RDB_EINVAL;
	int rc = rdb_buf_printf(b,
				"{\"version\":\"1\",\"source\":\"rankdb\",\"id\":\"%llu\","
				"\"state\":\"%s\",\"labels\":",
				(unsigned long long)al->id,
				al->state == DET_ALERT_FIRING ? "firing" : "resolved");
	if (rc == 0)
		rc = labels_obj(b, &al->c);
	if (rc == 0)
		rc = rdb_buf_puts(b, ",\"annotations\":");
	if (rc == 0)
		rc = annotations_obj(b, &al->c);
	if (rc == 0)
		rc = time_member(b, "at", now_ns);
	if (rc == 0)
		rc = time_member(b, "activeAt", al->active_ns);
	if (rc == 0)
		rc = time_member(b, "startsAt", al->starts_ns);
	if (rc == 0 && al->state == DET_ALERT_RESOLVED)
		rc = time_member(b, "endsAt", al->ends_ns);
	else if (rc == 0)
		rc = rdb_buf_puts(b, ",\"endsAt\":null");
	if (rc == 0)
		rc = number_member(b, "value", al->c.value);
	if (rc == 0)
		rc = number_member(b, "baseline", al->c.baseline);
	if (rc == 0 && al->c.step != INT64_MIN)
		rc = rdb_buf_printf(b, ",\"step\":%lld", (long long)al->c.step);
	else if (rc == 0)
		rc = rdb_buf_puts(b, ",\"step\":null");
	if (rc == 0)
		rc = generator_member(b, f, &al->c);
	return rc ? rc : rdb_buf_putc(b, '}');
}
