/* main.c - rankdbd: configuration, start-up, signal handling, shutdown.
 *
 * Start: parse config (file, then flags), open the storage engine (WAL
 * replay happens here), start the HTTP server and the UDP listener (if
 * udp_port is set), write the port file. SIGTERM/SIGINT: stop accepting
 * requests, wait for those in flight, write the queued UDP datagrams, seal
 * and checkpoint everything (sto_close), exit 0. Exit 1 on any start-up
 * failure, with a log line saying why.
 */
#include "common/rdb_err.h"
#include "common/rdb_log.h"
#include "common/rdb_time.h"
#include "server/config.h"
#include "server/srv.h"
#include "server/udp.h"
#include "server/auth.h"
#include "server/udp_auth.h"
#include "server/tls.h"
#include "detect/service.h"
#include "storage/io/fault.h"

#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int write_port_file(const char *path, uint16_t port)
{
	char tmp[4200];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fprintf(f, "%u\n", port);
	if (fclose(f) != 0)
		return -errno;
	return rename(tmp, path) == 0 ? 0 : -errno; /* readers never see a partial file */
}

/* RANKDB_FAULTS (tests only, docs/OPERATIONS.md "Fault injection"): arms
 * storage fault points once the store is open (recovery runs clean; hit
 * numbers count from there). Only the environment of the
 * process can set it; nothing on the network reads or changes it. 0, or -1
 * when the text does not parse (logged; rankdbd then refuses to start). */
static int arm_test_faults(void)
{
	const char *spec = getenv("RANKDB_FAULTS");
	char err[512];
	if (!spec || !*spec)
		return 0;
	if (sto_fault_parse(spec, err, sizeof(err)) != 0) {
		rdb_error("main", "%s; exiting", err);
		return -1;
	}
	rdb_warn("main",
		 "RANKDB_FAULTS=%.200s is set: storage write sites will fail on purpose (fault "
		 "injection for tests); never set it in production, unset it and restart",
		 spec);
	return 0;
}

static int storage_options(const struct srv_config *cfg, struct sto_options *o)
{
	sto_options_default(o);
	o->data_dir = cfg->data_dir;
	if (strcmp(cfg->io_uring, "off") == 0)
		o->io_uring = false;
	if (strcmp(cfg->sync_policy, "none") == 0)
		o->sync = STO_SYNC_NONE;
	else
		o->sync = STO_SYNC_FDATASYNC;
	o->wal_rotate_bytes = cfg->wal_rotate_bytes;
	o->checkpoint_interval_s = cfg->checkpoint_interval_s;
	o->head_max_bytes = cfg->head_max_bytes;
	o->chunk_max_points = cfg->chunk_max_points;
	o->segment_max_bytes = cfg->segment_max_bytes;
	o->index_map_bytes = cfg->index_map_bytes;
	o->max_series = cfg->max_series;
	o->max_series_per_job = cfg->max_series_per_job;
	return 0;
}

/* True for an IPv4 address in 127.0.0.0/8. */
static bool loopback(const char *addr)
{
	struct in_addr a;
	return inet_pton(AF_INET, addr, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

/* Refuses a listener open to others unless allow_insecure = on (then
 * warns): a non-loopback http_addr without a tokens_file, and a
 * non-loopback udp_addr that stores unsigned datagrams (no udp_keys_file,
 * or udp_allow_unauthenticated = on). 0 or -1 with the reason logged. */
static int insecure_bind(const struct srv_config *c)
{
	const char *open_addr = NULL, *why = NULL;
	if (!c->tokens_file[0] && !loopback(c->http_addr)) {
		open_addr = c->http_addr;
		why = "without a tokens_file: anyone who reaches it could read, write and "
		      "delete data";
	} else if (c->udp_port && !loopback(c->udp_addr) && srv_udp_auth_unsigned_ok()) {
		open_addr = c->udp_addr;
		why = "for UDP storing unsigned datagrams (no udp_keys_file, or "
		      "udp_allow_unauthenticated = on): anyone who reaches it could write";
	}
	if (!open_addr)
		return 0;
	if (strcmp(c->allow_insecure, "on") == 0) {
		rdb_warn("main", "listening on %s %s (allow_insecure = on)", open_addr, why);
		return 0;
	}
	rdb_error("main",
		  "refusing to listen on %s %s. Set tokens_file (see docs/OPERATIONS.md, "
		  "Securing rankdb), bind 127.0.0.1, or set allow_insecure = on; exiting",
		  open_addr, why);
	return -1;
}

/* Waits for SIGTERM or SIGINT; SIGHUP in the meantime reloads the
 * detector rules (a bad file is refused and logged; the old rules stay). */
static int wait_for_signal(struct srv_ctx *ctx)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	for (;;) {
		int sig = 0;
		if (sigwait(&set, &sig) != 0)
			continue;
		if (sig != SIGHUP)
			return sig;
		char msg[1024];
		rdb_info("main", "received SIGHUP: reloading the detector rules, the tokens, the "
				 "UDP keys and the TLS certificate");
		srv_detect_reload(ctx, msg, sizeof(msg));
		if (srv_auth_enabled())
			srv_auth_reload(msg, sizeof(msg));
		if (srv_udp_auth_enabled())
			srv_udp_auth_reload(msg, sizeof(msg));
		srv_tls_reload(msg, sizeof(msg)); /* logs; RDB_ENOTFOUND when TLS is off */
	}
}

int main(int argc, char **argv)
{
	static struct srv_config cfg;
	char err[1024];
	bool help = false;
	const char *config_path = NULL;
	srv_config_default(&cfg);
	if (argc == 2 && strcmp(argv[1], "--print-default-conf") == 0)
		return srv_config_write_conf(stdout) == 0 ? 0 : 1;
	if (srv_config_parse_args(&cfg, argc, argv, err, sizeof(err), &help, &config_path)) {
		fprintf(stderr, "rankdbd: %s\nTry 'rankdbd --help'.\n", err);
		return 2;
	}
	if (help) {
		srv_config_print_help(stdout, argv[0]);
		return 0;
	}
	enum rdb_log_level lvl = RDB_LOG_INFO;
	rdb_log_parse_level(cfg.log_level, &lvl);
	rdb_log_set_level(lvl);

	/* Signals are taken synchronously by the main thread; every thread
	 * started below inherits the blocked mask. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP); /* rules reload, handled in wait_for_signal */
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	rdb_info("main", "rankdbd starting (config %s)", config_path ? config_path : "defaults");
	if (det_notify_global_init() != 0) { /* libcurl, before any thread starts */
		rdb_error("main", "cannot initialise libcurl for alert delivery; exiting");
		return 1;
	}
	srv_config_log(&cfg);
	if (srv_auth_init(&cfg, err, sizeof(err)) != 0) {
		rdb_error("main", "%s; exiting", err);
		return 1;
	}
	if (srv_udp_auth_init(&cfg, err, sizeof(err)) != 0) {
		rdb_error("main", "%s; exiting", err);
		return 1;
	}
	if (insecure_bind(&cfg) != 0)
		return 1;
	static struct srv_ctx ctx;
	ctx.cfg = &cfg;
	ctx.started_ns = rdb_now_ns();
	ing_limits_default(&ctx.limits);
	ctx.limits.max_records = cfg.max_records_per_request;
	ctx.limits.max_metrics_per_record = cfg.max_metrics_per_record;

	struct sto_options so;
	storage_options(&cfg, &so);
	int rc = sto_open(&so, &ctx.sto);
	if (rc) {
		rdb_error("main", "cannot open the data directory %s: %s; exiting", cfg.data_dir,
			  rdb_strerror(rc));
		return 1;
	}
	if (arm_test_faults() != 0) { /* after recovery: hits count from here */
		sto_close(ctx.sto);
		return 1;
	}
	struct ing_pipeline_options po = {.max_series = cfg.max_series,
					  .max_series_per_job = cfg.max_series_per_job};
	rc = ing_pipeline_new(ctx.sto, &po, &ctx.pipe);
	if (rc) {
		rdb_error("main", "cannot create the ingest pipeline: %s; exiting",
			  rdb_strerror(rc));
		sto_close(ctx.sto);
		return 1;
	}
	rc = srv_detect_start(&ctx, (uint16_t)cfg.http_port, err, sizeof(err));
	if (rc) {
		rdb_error("main",
			  "cannot start detection: %s; exiting (fix the file, or set "
			  "detect = off)",
			  err);
		ing_pipeline_free(ctx.pipe);
		sto_close(ctx.sto);
		return 1;
	}
	srv_admin_init(&ctx); /* retention / compaction settings, audit log */
	size_t djl = strlen(cfg.lp_default_job);
	if (djl && !mdl_job_valid(cfg.lp_default_job, djl)) {
		rdb_error("main",
			  "lp_default_job '%s' is not a job id ([A-Za-z0-9._-], 1..128 "
			  "bytes); exiting",
			  cfg.lp_default_job);
		ing_pipeline_free(ctx.pipe);
		det_service_stop(ctx.detect);
		sto_close(ctx.sto);
		return 1;
	}
	struct srv_http *http = NULL;
	struct srv_udp *udp = NULL;
	uint16_t port = 0, udp_port = 0;
	rc = srv_http_start(&ctx, &http, &port);
	if (rc == 0)
		rc = srv_udp_start(&ctx, &udp, &udp_port);
	if (rc == 0 && cfg.port_file[0]) {
		rc = write_port_file(cfg.port_file, port);
		if (rc)
			rdb_error("main", "cannot write port file %s: %s", cfg.port_file,
				  strerror(-rc));
	}
	if (rc) {
		srv_http_stop(http);
		srv_udp_stop(udp);
		ing_pipeline_free(ctx.pipe);
		det_service_stop(ctx.detect);
		sto_close(ctx.sto);
		return 1;
	}
	rdb_info("main", "listening on %s://%s:%u (data in %s)",
		 cfg.tls_cert_file[0] ? "https" : "http", cfg.http_addr, port, cfg.data_dir);
	int sig = wait_for_signal(&ctx);
	rdb_info("main",
		 "received %s: stopping the HTTP server and UDP listener, then sealing "
		 "and checkpointing",
		 sig == SIGTERM ? "SIGTERM" : "SIGINT");
	srv_http_stop(http);
	srv_udp_stop(udp);
	ing_pipeline_free(ctx.pipe);  /* after the last write: no submit is in flight */
	det_service_stop(ctx.detect); /* its subscriber thread is gone with the pipeline */
	rc = sto_close_rc(ctx.sto);
	srv_udp_auth_shutdown();
	det_notify_global_cleanup();
	if (rc) {
		rdb_error("main",
			  "stopped, but the final checkpoint failed (%s): exiting 1; the "
			  "next start replays the WAL",
			  rdb_strerror(rc));
		return 1;
	}
	rdb_info("main", "stopped cleanly");
	return 0;
}
