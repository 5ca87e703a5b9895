/* rdb_err.h - error codes shared by every module.
 *
 * Fallible functions return int: 0 on success, a negative errno value, or
 * one of the negative RDB_E* codes below. rdb_strerror() names any of them.
 */
#ifndef RDB_ERR_H
#define RDB_ERR_H

enum {
	RDB_ECORRUPT = -10001,	/* on-disk data failed a checksum or structure check */
	RDB_EFORMAT = -10002,	/* on-disk data has a format version we do not know */
	RDB_ELIMIT = -10003,	/* a configured bound (size, count, memory) was reached */
	RDB_EBUSY = -10004,	/* saturated: retry later (backpressure) */
	RDB_EINVAL = -10005,	/* invalid input from a client */
	RDB_ENOTFOUND = -10006, /* the named object does not exist */
	RDB_EIO = -10007,	/* an I/O subsystem is broken and refuses work */
};

/* Returns a static, human-readable name for err (0, -errno, or RDB_E*). */
const char *rdb_strerror(int err);

#endif
