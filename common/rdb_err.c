/* rdb_err.c - names for error codes. Thread-safe: returns static strings only. */
#include "common/rdb_err.h"

#include <string.h>

const char *rdb_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case RDB_ECORRUPT:
		return "data corrupt (checksum or structure check failed)";
	case RDB_EFORMAT:
		return "unknown on-disk format version";
	case RDB_ELIMIT:
		return "configured limit reached";
	case RDB_EBUSY:
		return "server saturated, retry later";
	case RDB_EINVAL:
		return "invalid input";
	case RDB_ENOTFOUND:
		return "not found";
	case RDB_EIO:
		return "I/O subsystem failed earlier and refuses work";
	default:
		break;
	}
	if (err < 0 && err > -4096)
		return strerrordesc_np(-err) ? strerrordesc_np(-err) : "unknown errno";
	return "unknown error";
}
