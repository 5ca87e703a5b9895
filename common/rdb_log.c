/* rdb_log.c - log lines on stderr, one write(2) each so lines from
 * different threads never interleave. Rate limiting uses a mutex per process
 * (rare path: only reached by lines that repeat). */
#include "common/rdb_log.h"
#include "common/rdb_err.h"
#include "common/rdb_time.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static enum rdb_log_level min_level = RDB_LOG_INFO;
static pthread_mutex_t rl_lock = PTHREAD_MUTEX_INITIALIZER;

void rdb_log_set_level(enum rdb_log_level min)
{
	min_level = min;
}

int rdb_log_parse_level(const char *s, enum rdb_log_level *out)
{
	static const char *names[] = {"debug", "info", "warn", "error"};
	for (int i = 0; i < 4; i++) {
		if (strcmp(s, names[i]) == 0) {
			*out = (enum rdb_log_level)i;
			return 0;
		}
	}
	return RDB_EINVAL;
}

static void vlog(enum rdb_log_level lvl, const char *subsys, const char *suffix, const char *fmt,
		 va_list ap)
{
	static const char *tags[] = {"DEBUG", "INFO", "WARN", "ERROR"};
	char line[2048];
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s [%s] ",
			 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
			 tm.tm_sec, ts.tv_nsec / 1000000, tags[lvl], subsys);
	if (n < 0)
		return;
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	if (m < 0)
		return;
	size_t len = (size_t)n + (size_t)m;
	if (len > sizeof(line) - 64)
		len = sizeof(line) - 64;
	if (suffix)
		len += (size_t)snprintf(line + len, sizeof(line) - len, "%s", suffix);
	line[len++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
}

void rdb_log(enum rdb_log_level lvl, const char *subsys, const char *fmt, ...)
{
	if (lvl < min_level)
		return;
	va_list ap;
	va_start(ap, fmt);
	vlog(lvl, subsys, NULL, fmt, ap);
	va_end(ap);
}

void rdb_log_limited(struct rdb_log_ratelimit *rl, int interval_s, enum rdb_log_level lvl,
		     const char *subsys, const char *fmt, ...)
{
	if (lvl < min_level)
		return;
	int64_t now = rdb_now_mono_ns();
	uint64_t suppressed;
	pthread_mutex_lock(&rl_lock);
	if (rl->last_ns != 0 && now - rl->last_ns < (int64_t)interval_s * 1000000000) {
		rl->suppressed++;
		pthread_mutex_unlock(&rl_lock);
		return;
	}
	suppressed = rl->suppressed;
	rl->suppressed = 0;
	rl->last_ns = now;
	pthread_mutex_unlock(&rl_lock);
	char suffix[96] = "";
	if (suppressed)
		snprintf(suffix, sizeof(suffix), " (%llu similar lines suppressed)",
			 (unsigned long long)suppressed);
	va_list ap;
	va_start(ap, fmt);
	vlog(lvl, subsys, suffix, fmt, ap);
	va_end(ap);
}
