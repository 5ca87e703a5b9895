/* error.c - filling a struct qry_error (qry.h). Pure. */
#include "query/qry.h"

#include <stdarg.h>
#include <stdio.h>

int qry_fail(struct qry_error *err, enum qry_code code, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	err->code = code;
	return rc;
}
