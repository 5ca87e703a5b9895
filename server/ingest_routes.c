/* ingest_routes.c - route hook: InfluxDB line protocol endpoints (/write, /api/v2/write) come with the ingest issue.
 * Until then it handles nothing and the request falls through to 404. */
#include "server/srv.h"

bool srv_ingest_route(struct srv_req *req, struct srv_resp *resp)
{
	(void)req;
	(void)resp;
	return false;
}
