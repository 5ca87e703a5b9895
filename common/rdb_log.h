/* rdb_log.h - operator-facing log lines on stderr.
 *
 * Every line: ISO-8601 UTC time, level, subsystem, message. Messages name
 * the object (file, job/rank/metric, offset), what happened and what rankdbd
 * did about it. Thread-safe (one write(2) per line).
 */
#ifndef RDB_LOG_H
#define RDB_LOG_H

#include <stdint.h>

enum rdb_log_level { RDB_LOG_DEBUG, RDB_LOG_INFO, RDB_LOG_WARN, RDB_LOG_ERROR };

/* Lines below min are dropped. Not thread-safe against concurrent logging;
 * call once at start-up. */
void rdb_log_set_level(enum rdb_log_level min);
/* Parses "debug", "info", "warn", "error". Returns 0 or RDB_EINVAL. */
int rdb_log_parse_level(const char *s, enum rdb_log_level *out);

void rdb_log(enum rdb_log_level lvl, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Rate-limited logging for repeating per-client errors: at most one line per
 * interval_s per call site (the caller passes a static state word); the
 * suppressed count is reported on the next line that gets through. */
struct rdb_log_ratelimit {
	int64_t last_ns;
	uint64_t suppressed;
};
void rdb_log_limited(struct rdb_log_ratelimit *rl, int interval_s, enum rdb_log_level lvl,
		     const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#define rdb_debug(sub, ...) rdb_log(RDB_LOG_DEBUG, sub, __VA_ARGS__)
#define rdb_info(sub, ...)  rdb_log(RDB_LOG_INFO, sub, __VA_ARGS__)
#define rdb_warn(sub, ...)  rdb_log(RDB_LOG_WARN, sub, __VA_ARGS__)
#define rdb_error(sub, ...) rdb_log(RDB_LOG_ERROR, sub, __VA_ARGS__)

#endif
