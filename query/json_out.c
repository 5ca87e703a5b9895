/* json_out.c - JSON text for stored values. Numbers are written with the
 * fewest significant digits (15, 16 or 17) that read back to the same
 * bits, so output is both exact and short. Pure functions. */
#include "query/qry.h"
#include "common/rdb_le.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int qry_json_value(struct rdb_buf *out, uint64_t bits)
{
	double v = rdb_bits_f64(bits);
	if (bits == STO_VALUE_NULL_BITS)
		return rdb_buf_append(out, "null", 4);
	if (bits == STO_VALUE_NAN_BITS)
		return rdb_buf_append(out, "\"NaN\"", 5);
	if (isinf(v))
		return rdb_buf_puts(out, v > 0 ? "\"+Inf\"" : "\"-Inf\"");
	if (isnan(v))
		return rdb_buf_printf(out, "\"0x%016llx\"", (unsigned long long)bits);
	if (v == 0)
		return rdb_buf_puts(out, signbit(v) ? "-0.0" : "0");
	if (v == (double)(int64_t)v && fabs(v) < 1e15)
		return rdb_buf_printf(out, "%lld", (long long)v);
	char tmp[40];
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
		if (prec == 17 || strtod(tmp, NULL) == v)
			break;
	}
	return rdb_buf_puts(out, tmp);
}

int qry_json_rank(struct rdb_buf *out, uint32_t rank)
{
	if (rank == STO_RANK_JOB)
		return rdb_buf_append(out, "\"job\"", 5);
	return rdb_buf_printf(out, "%u", rank);
}
