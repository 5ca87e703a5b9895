/* grafana.c - route hook: the Grafana JSON datasource comes with the query issue.
 * Until then it handles nothing and the request falls through to 404. */
#include "server/srv.h"

bool srv_grafana_route(struct srv_req *req, struct srv_resp *resp)
{
	(void)req;
	(void)resp;
	return false;
}
