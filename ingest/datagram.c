/* datagram.c - one UDP datagram into a batch: JSON records (array or
 * NDJSON) when its first non-blank byte (after an optional UTF-8 BOM) is
 * '{' or '[', InfluxDB line protocol otherwise. Pure parsing; the UDP
 * listener (server/udp.c) counts and stores. Input is hostile and not
 * NUL-terminated. */
#include "ingest/datagram.h"
#include "common/rdb_err.h"

#include <string.h>

bool ing_datagram_is_json(const uint8_t *p, size_t len)
{
	size_t i = 0;
	while (i < len && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n'))
		i++;
	if (i + 3 <= len && memcmp(p + i, "\xef\xbb\xbf", 3) == 0)
		i += 3;
	return i < len && (p[i] == '{' || p[i] == '[');
}

int ing_datagram_parse(const uint8_t *p, size_t len, const struct ing_limits *lim,
		       const struct ing_lp_options *lp, struct mdl_batch *b, struct mdl_events *ev,
		       struct ing_datagram_result *res)
{
	memset(res, 0, sizeof(*res));
	if (ing_datagram_is_json(p, len)) {
		res->json = true;
		size_t nrec = 0;
		int rc = ing_json_parse_all((const char *)p, len, lim, lp->default_ts_ns, b, ev,
					    &res->json_err, &nrec);
		return rc;
	}
	int rc = ing_lp_parse((const char *)p, len, lp, b, ev, &res->lp);
	if (rc)
		return rc;
	if (res->lp.points + res->lp.events > 0)
		return 0;
	return res->lp.lines_bad ? RDB_EINVAL : RDB_ENOTFOUND; /* all bad, or only blank */
}
