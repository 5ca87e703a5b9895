/* fuzz_udp.c - the UDP datagram path: classification (ing_protocol_probe),
 * both parsers, and the merge of a datagram's points and events into a
 * worker's combined batch (mdl_batch_append / mdl_events_append), as
 * server/udp.c does. Invariants: no crash, no leak; a successful parse
 * added what its result says; a merge adds exactly what the datagram
 * holds. */
#include "common/rdb_err.h"
#include "ingest/protocol.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 65507)
		return 0; /* the listener drops larger datagrams before parsing */
	struct mdl_batch *b = NULL, *all = NULL;
	struct mdl_events *ev = NULL, *all_ev = NULL;
	struct ing_limits lim;
	struct ing_parse_opts po = {.lim = &lim};
	struct ing_parse_result res;
	ing_limits_default(&lim);
	ing_lp_options_default(&po.lp);
	po.lp.default_job = "fz";
	po.lp.default_ts_ns = 1700000000000000000;
	if (mdl_batch_new(100000, 10000, &b) || mdl_batch_new(100000, 10000, &all) ||
	    mdl_events_new(10000, 1 << 20, &ev) || mdl_events_new(10000, 1 << 20, &all_ev))
		abort();
	/* the combined batch already holds a point, as a worker's often does */
	if (mdl_batch_add(all, "fz", 2, 0, "m", 1, 1, 1, 0, 0))
		abort();
	const struct ing_protocol *proto = ing_protocol_probe(data, size);
	int rc = proto->parse(data, size, &po, b, ev, &res);
	if (rc == 0) {
		if (res.points != mdl_batch_points(b) || res.events != mdl_events_count(ev))
			abort();
		if (mdl_batch_points(b) + mdl_events_count(ev) == 0)
			abort();
		if (mdl_batch_append(all, b) != 0 || mdl_events_append(all_ev, ev) != 0)
			abort();
		if (mdl_batch_points(all) != mdl_batch_points(b) + 1 ||
		    mdl_events_count(all_ev) != mdl_events_count(ev))
			abort();
	} else if (rc == RDB_EINVAL && (res.nerrors == 0 || res.errors[0].msg[0] == 0)) {
		abort(); /* a refused datagram always says why */
	}
	mdl_batch_free(b);
	mdl_batch_free(all);
	mdl_events_free(ev);
	mdl_events_free(all_ev);
	return 0;
}
