/* fuzz_udp.c - the UDP datagram path: classification (JSON or line
 * protocol), both parsers, and the merge of a datagram's points and events
 * into a worker's combined batch, as server/udp.c does. Invariants: no
 * crash, no leak; a successful parse added what its result says. */
#include "common/rdb_err.h"
#include "ingest/datagram.h"

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
	struct ing_lp_options lp;
	struct ing_datagram_result res;
	ing_limits_default(&lim);
	ing_lp_options_default(&lp);
	lp.default_job = "fz";
	lp.default_ts_ns = 1700000000000000000;
	if (mdl_batch_new(100000, 10000, &b) || mdl_batch_new(100000, 10000, &all) ||
	    mdl_events_new(10000, 1 << 20, &ev) || mdl_events_new(10000, 1 << 20, &all_ev))
		abort();
	int rc = ing_datagram_parse(data, size, &lim, &lp, b, ev, &res);
	if (rc == 0) {
		if (!res.json && res.lp.points != mdl_batch_points(b))
			abort();
		if (mdl_batch_points(b) + mdl_events_count(ev) == 0)
			abort();
		for (size_t i = 0; i < mdl_batch_nseries(b); i++) {
			const struct mdl_batch_series *s = mdl_batch_series_at(b, i);
			for (size_t j = 0; j < s->pts.n; j++)
				if (mdl_batch_add(all, s->key.job, strlen(s->key.job), s->key.rank,
						  s->key.metric, strlen(s->key.metric),
						  s->pts.ts_ns[j], s->pts.step[j], s->pts.attempt[j],
						  s->pts.value[j]) != 0)
					abort();
		}
		for (size_t i = 0; i < mdl_events_count(ev); i++)
			if (mdl_events_add(all_ev, mdl_events_at(ev, i)) != 0)
				abort();
		if (mdl_batch_points(all) != mdl_batch_points(b))
			abort();
	} else if (res.json && rc == RDB_EINVAL && res.json_err.msg[0] == 0) {
		abort(); /* a refused JSON datagram always says why */
	}
	mdl_batch_free(b);
	mdl_batch_free(all);
	mdl_events_free(ev);
	mdl_events_free(all_ev);
	return 0;
}
