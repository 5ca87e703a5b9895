/* error.c - filling a struct qry_error (qry.h). Pure. */
#include "query/qry.h"
#include "common/rdb_err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

struct qry_error *qry_error_new(void)
{
	struct qry_error *e = malloc(sizeof(*e));
	if (e) {
		e->code = 0;
		e->msg[0] = 0;
	}
	return e;
}

int qry_fail(struct qry_error *err, enum qry_code code, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	err->code = code;
	return rc;
}

int qry_fail_listing(struct qry_error *err, int rc, const char *what)
{
	if (rc == RDB_ELIMIT)
		return qry_fail(err, QRY_E_TOO_LARGE, rc,
				"response would exceed max_response_bytes; %s", what);
	return qry_fail(err, QRY_E_INTERNAL, rc, "%s: %s", what, rdb_strerror(rc));
}
