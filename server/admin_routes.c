/* admin_routes.c - route hook: the admin API (/api/v1/admin/...) comes with the data-lifecycle issue.
 * Until then it handles nothing and the request falls through to 404. */
#include "server/srv.h"

bool srv_admin_route(struct srv_req *req, struct srv_resp *resp)
{
	(void)req;
	(void)resp;
	return false;
}

void srv_admin_init(struct srv_ctx *ctx)
{
	(void)ctx;
}
