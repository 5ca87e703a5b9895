/* timearg.c - the one parser of the times a query takes (srv.h:
 * srv_parse_time_ns), used by every endpoint with a time parameter (range,
 * downsample, crossrank, outliers, logs, spans, the InfluxDB /query WHERE
 * clause and Grafana's range), so that they all read the same spellings:
 *
 *   1700000000000000000            integer ns since the epoch
 *   2024-10-18T06:33:44.866Z       RFC 3339 / ISO 8601: date, optional
 *   2024-10-18 06:33:44+02:00      clock (T, t or space), fraction to ns,
 *   2024-10-18                     zone Z / +hh:mm / +hhmm / +hh (none: UTC)
 *   now, now-1h, now+30m, now-90s  relative to the server's clock; units
 *                                  ns, us, ms, s, m, h, d, w
 *
 * Results past int64 ns are clamped to INT64_MIN / INT64_MAX (an open end).
 * Pure functions: no state, no allocation; input is untrusted.
 */
#include "server/srv.h"
#include "common/rdb_err.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static bool digits(const char **p, int n, int *out)
{
	int v = 0;
	for (int i = 0; i < n; i++) {
		char c = (*p)[i];
		if (c < '0' || c > '9')
			return false;
		v = v * 10 + (c - '0');
	}
	*p += n;
	*out = v;
	return true;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian; H. Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

/* hh:mm[:ss[.frac]] into ns of the day. */
static bool parse_clock(const char **p, int64_t *ns)
{
	int h, mi, s = 0;
	int64_t frac = 0, scale = 1000000000;
	if (!digits(p, 2, &h) || *(*p)++ != ':' || !digits(p, 2, &mi) || h > 23 || mi > 59)
		return false;
	if (**p == ':' && (++*p, !digits(p, 2, &s) || s > 60))
		return false;
	if (**p == '.' || **p == ',') {
		++*p;
		if (**p < '0' || **p > '9')
			return false;
		for (; **p >= '0' && **p <= '9'; ++*p)
			if (scale > 1) {
				scale /= 10;
				frac += (**p - '0') * scale;
			}
	}
	*ns = ((int64_t)h * 3600 + mi * 60 + s) * 1000000000 + frac;
	return true;
}

/* Z, +hh:mm, +hhmm, +hh, or nothing (UTC), into the offset in ns. */
static bool parse_zone(const char *p, int64_t *off_ns)
{
	int h = 0, m = 0;
	*off_ns = 0;
	if (*p == 0 || ((*p == 'Z' || *p == 'z') && p[1] == 0))
		return true;
	if (*p != '+' && *p != '-')
		return false;
	int sign = *p++ == '-' ? -1 : 1;
	if (!digits(&p, 2, &h))
		return false;
	if (*p == ':')
		p++;
	if (*p && !digits(&p, 2, &m))
		return false;
	*off_ns = sign * ((int64_t)h * 60 + m) * 60000000000;
	return *p == 0 && h < 24 && m < 60;
}

static int64_t clamp_add(int64_t a, int64_t b)
{
	int64_t r;
	if (__builtin_add_overflow(a, b, &r))
		return b > 0 ? INT64_MAX : INT64_MIN;
	return r;
}

static int64_t clamp_mul(int64_t a, int64_t b)
{
	int64_t r;
	if (__builtin_mul_overflow(a, b, &r))
		return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
	return r;
}

int srv_parse_duration_ns(const char *s, int64_t *ns)
{
	static const struct {
		const char *name;
		int64_t ns;
	} units[] = {{"ns", 1},
		     {"us", 1000},
		     {"ms", 1000000},
		     {"s", 1000000000},
		     {"m", INT64_C(60000000000)},
		     {"h", INT64_C(3600000000000)},
		     {"d", INT64_C(86400000000000)},
		     {"w", INT64_C(604800000000000)}};
	const char *p = s;
	int64_t n = 0;
	if (*p < '0' || *p > '9')
		return RDB_EINVAL;
	for (; *p >= '0' && *p <= '9'; p++)
		n = clamp_add(clamp_mul(n, 10), *p - '0');
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcmp(p, units[i].name) == 0) {
			*ns = clamp_mul(n, units[i].ns);
			return 0;
		}
	return RDB_EINVAL;
}

int srv_parse_time_ns(const char *s, int64_t now_ns, int64_t *ts_ns)
{
	int y, mo, d;
	int64_t tod = 0, off, v;
	const char *p = s;
	if (!s || !*s)
		return RDB_EINVAL;
	if (strncmp(s, "now", 3) == 0) {
		if (s[3] == 0) {
			*ts_ns = now_ns;
			return 0;
		}
		if ((s[3] != '-' && s[3] != '+') || srv_parse_duration_ns(s + 4, &v))
			return RDB_EINVAL;
		*ts_ns = clamp_add(now_ns, s[3] == '-' ? -v : v);
		return 0;
	}
	if (srv_parse_i64(s, ts_ns) == 0)
		return 0;
	if (!digits(&p, 4, &y) || *p++ != '-' || !digits(&p, 2, &mo) || *p++ != '-' ||
	    !digits(&p, 2, &d) || mo < 1 || mo > 12 || d < 1 || d > 31)
		return RDB_EINVAL;
	if ((*p == 'T' || *p == 't' || *p == ' ') && (++p, !parse_clock(&p, &tod)))
		return RDB_EINVAL;
	if (!parse_zone(p, &off))
		return RDB_EINVAL;
	*ts_ns = clamp_add(
	    clamp_add(clamp_mul(days_from_civil(y, mo, d), INT64_C(86400000000000)), tod), -off);
	return 0;
}
