/* fuzz_srv.h - what the HTTP-facing fuzz targets share: one store in a
 * temp dir with a few series (two jobs, four ranks, three metrics, some log
 * records), a server context on it, and a request runner that routes a
 * request through srv_dispatch exactly as http.c does after the headers and
 * body arrived. Included by one .c file per target. */
#ifndef RDB_FUZZ_SRV_H
#define RDB_FUZZ_SRV_H

#include "common/rdb_log.h"
#include "common/rdb_time.h"
#include "server/srv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct srv_config fz_cfg;
static struct srv_ctx fz_ctx;
static char fz_dir[64];

static void fz_cleanup(void)
{
	char cmd[128];
	ing_pipeline_free(fz_ctx.pipe);
	sto_close(fz_ctx.sto);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", fz_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", fz_dir);
}

static void fz_run(const char *method, const char *path, struct srv_arg *args, int nargs,
		   const uint8_t *body, size_t body_len)
{
	struct srv_req req = {.ctx = &fz_ctx,
			      .method = method,
			      .path = path,
			      .body = body,
			      .body_len = body_len,
			      .peer = "127.0.0.1:1"};
	for (int i = 0; i < nargs && i < SRV_MAX_ARGS; i++)
		req.args[req.nargs++] = args[i];
	req.args_overflow = nargs > SRV_MAX_ARGS;
	struct srv_resp resp = {0};
	rdb_buf_init(&resp.body, fz_cfg.max_response_bytes + 4096);
	srv_dispatch(&req, &resp);
	if (resp.status < 100 || resp.status > 599)
		abort();
	rdb_buf_free(&resp.body);
}

static int fz_init(void)
{
	if (fz_ctx.sto)
		return 0;
	rdb_log_set_level(RDB_LOG_ERROR);
	srv_config_default(&fz_cfg);
	fz_cfg.max_query_points = 100000;
	fz_cfg.max_response_bytes = 1u << 20;
	snprintf(fz_dir, sizeof(fz_dir), "/tmp/rdb-fuzz-srv-%ld", (long)getpid());
	struct sto_options so;
	sto_options_default(&so);
	so.data_dir = fz_dir;
	so.sync = STO_SYNC_NONE;
	so.chunk_max_points = 64;
	fz_ctx.cfg = &fz_cfg;
	ing_limits_default(&fz_ctx.limits);
	if (sto_open(&so, &fz_ctx.sto) != 0)
		return -1;
	if (ing_pipeline_new(fz_ctx.sto, NULL, &fz_ctx.pipe) != 0)
		return -1; /* writes go through the pipeline (no subscribers here) */
	atexit(fz_cleanup);
	char rec[512];
	struct rdb_buf b;
	rdb_buf_init(&b, 1u << 20);
	for (int step = 0; step < 200; step++)
		for (int rank = 0; rank < 4; rank++) {
			snprintf(rec, sizeof(rec),
				 "{\"job\":\"j%d\",\"rank\":%d,\"step\":%d,\"timestamp\":%lld,"
				 "\"metrics\":{\"loss\":%g,\"grad_norm\":%g,\"step_time\":%g}}\n",
				 rank % 2 + 1, rank, step,
				 1700000000000000000ll + step * 1000000000ll + rank,
				 1.0 / (step + 1), 0.5 + rank, 1.0 + (rank == 3));
			rdb_buf_puts(&b, rec);
		}
	rdb_buf_puts(&b, "{\"type\":\"log\",\"job\":\"j1\",\"rank\":2,\"level\":\"error\","
			 "\"message\":\"NCCL timeout\",\"step\":150,\"timestamp\":"
			 "1700000150000000000,\"fields\":{\"host\":\"h2\"}}\n");
	fz_run("POST", "/api/v1/write", NULL, 0, b.data, b.len);
	rdb_buf_free(&b);
	sto_checkpoint(fz_ctx.sto); /* half the data in chunks, the rest in the head */
	fz_run(
	    "POST", "/api/v1/write", NULL, 0,
	    (const uint8_t *)"{\"job\":\"j1\",\"rank\":0,\"step\":500,\"metrics\":{\"loss\":0.1}}",
	    55);
	return 0;
}

#endif
