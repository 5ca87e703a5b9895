/* query_routes.c - route hook: downsample, cross-rank, outlier and metadata queries come with the query issue.
 * Until then it handles nothing and the request falls through to 404. */
#include "server/srv.h"

bool srv_query_route(struct srv_req *req, struct srv_resp *resp)
{
	(void)req;
	(void)resp;
	return false;
}
