/* protocol.c - the protocol table (see protocol.h): JSON records and
 * InfluxDB line protocol behind one parse signature. Pure parsing: nothing
 * here stores, counts or answers; input is hostile. */
#include "ingest/protocol.h"
#include "common/rdb_err.h"

#include <stddef.h>
#include <string.h>

static bool json_probe(const uint8_t *p, size_t len)
{
	size_t i = 0;
	while (i < len && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n'))
		i++;
	if (i + 3 <= len && memcmp(p + i, "\xef\xbb\xbf", 3) == 0)
		i += 3;
	return i < len && (p[i] == '{' || p[i] == '[');
}

/* JSON is all or nothing: one error refuses every record. */
static int json_parse(const uint8_t *body, size_t len, const struct ing_parse_opts *o,
		      struct mdl_batch *b, struct mdl_events *ev, struct ing_parse_result *res)
{
	size_t nrec = 0;
	memset(res, 0, sizeof(*res));
	struct ing_json_units u = {.precision_ns = o->lp.precision_ns,
				   .min_ts_ns = o->json_min_ts_ns ? o->json_min_ts_ns : INT64_MIN};
	int rc = ing_json_parse_units((const char *)body, len, o->lim, o->lp.default_ts_ns, &u, b,
				      ev, &res->errors[0], &nrec);
	if (rc == RDB_EINVAL || rc == RDB_ELIMIT) {
		res->nerrors = 1;
		res->records_bad = nrec ? nrec : 1;
		return rc;
	}
	if (rc)
		return rc;
	res->records_ok = nrec;
	res->points = mdl_batch_points(b);
	res->events = ev ? mdl_events_count(ev) : 0;
	return res->points + res->events ? 0 : RDB_ENOTFOUND;
}

static bool lp_probe(const uint8_t *p, size_t len)
{
	return !json_probe(p, len);
}

static int lp_parse(const uint8_t *body, size_t len, const struct ing_parse_opts *o,
		    struct mdl_batch *b, struct mdl_events *ev, struct ing_parse_result *res)
{
	struct ing_lp_result r;
	/* Every counter is set below and errors[] is read up to nerrors: no
	 * 5 KiB memset per request. */
	int rc = ing_lp_parse((const char *)body, len, &o->lp, b, ev, &r);
	res->records_ok = r.lines_ok;
	res->records_bad = r.lines_bad;
	res->points = r.points;
	res->events = r.events;
	res->string_fields_skipped = r.string_fields_skipped;
	res->nerrors = r.nerrors;
	memcpy(res->errors, r.errors, r.nerrors * sizeof(r.errors[0]));
	if (rc)
		return rc;
	if (r.points + r.events > 0)
		return 0;
	return r.lines_bad ? RDB_EINVAL : RDB_ENOTFOUND;
}

static const char *const json_types[] = {"application/json", "application/x-ndjson", NULL};
static const char *const lp_types[] = {"text/plain", NULL};

const struct ing_protocol ing_proto_json = {
    .name = "json", .content_types = json_types, .probe = json_probe, .parse = json_parse};
const struct ing_protocol ing_proto_lp = {
    .name = "line-protocol", .content_types = lp_types, .probe = lp_probe, .parse = lp_parse};

static const struct ing_protocol *const table[] = {&ing_proto_json, &ing_proto_lp};

const struct ing_protocol *ing_protocol_find(const char *name)
{
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		if (strcmp(table[i]->name, name) == 0)
			return table[i];
	}
	return NULL;
}

const struct ing_protocol *ing_protocol_probe(const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		if (table[i]->probe(p, len))
			return table[i];
	}
	return &ing_proto_lp;
}
