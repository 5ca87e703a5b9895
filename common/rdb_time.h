/* rdb_time.h - the one internal time type: int64_t nanoseconds. */
#ifndef RDB_TIME_H
#define RDB_TIME_H

#include <stdint.h>

/* Wall clock, nanoseconds since the Unix epoch (UTC). */
int64_t rdb_now_ns(void);
/* Monotonic clock, nanoseconds; only differences are meaningful. */
int64_t rdb_now_mono_ns(void);

#endif
