/* config.h - rankdbd's configuration: one table of options drives the
 * defaults, the config file, the command-line flags, --help and the
 * shipped conf/rankdb.conf.
 *
 * Config file: "name = value" lines; blank lines and '#' comments (a '#'
 * outside double quotes starts a comment, also after a value). A value may
 * be double-quoted to keep '#' or surrounding spaces; there are no escapes.
 * Flags: --name-with-dashes VALUE or --name-with-dashes=VALUE.
 * Value types: string; unsigned integer; size in bytes with an optional
 * 1024-based suffix K, M, G or T ("64M"); duration in seconds with an
 * optional suffix s, m, h or d ("5m" = 300); enum (one of fixed words).
 *
 * Every function here is single-threaded start-up code; none blocks except
 * on reading the config file. All fallible functions leave *c untouched on
 * failure and write a one-line reason into err (which may be NULL).
 */
#ifndef SRV_CONFIG_H
#define SRV_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A plain value type. Strings are NUL-terminated and always fit. */
struct srv_config {
	char data_dir[4096];		       /* WAL, segments and index live here */
	char http_addr[64];		       /* listen address of the HTTP API */
	uint32_t http_port;		       /* 0 = pick a free port (see port_file) */
	char port_file[4096];		       /* write the bound port here; "" = don't */
	uint32_t http_threads;		       /* worker threads of the HTTP server */
	uint32_t http_max_connections;	       /* open connections; beyond: refused */
	uint64_t http_max_parked;	       /* writes parked until durable; beyond: 503 */
	uint32_t http_timeout_s;	       /* idle / slow-request timeout per connection */
	uint64_t http_min_body_rate_bytes;     /* body bytes that earn one more second */
	uint64_t http_connection_memory_bytes; /* libmicrohttpd's buffer per connection */
	char http_write_loop[8];	       /* on / off: the write loop (server/wloop.c) */
	uint64_t max_body_bytes_in_flight;     /* request bodies of all connections together */
	uint64_t max_body_bytes;	       /* largest accepted request body */
	uint64_t max_records_per_request;
	uint64_t max_metrics_per_record;
	char sync_policy[16];		  /* "fdatasync" or "none" */
	uint64_t wal_rotate_bytes;	  /* checkpoint once the WAL file passes this */
	uint32_t checkpoint_interval_s;	  /* ... or once head data is this old */
	uint64_t head_max_bytes;	  /* memory bound of the in-memory head */
	uint32_t chunk_max_points;	  /* seal a series' head chunk at this many points */
	uint64_t segment_max_bytes;	  /* start a new segment file past this */
	uint64_t index_map_bytes;	  /* LMDB map size (address space, not RAM) */
	uint64_t max_series;		  /* distinct series; beyond: writes refused */
	uint64_t max_query_points;	  /* points one query may read */
	uint64_t max_response_bytes;	  /* largest query response body */
	char admin_token[256];		  /* bearer token of the admin API; "" = admin API off */
	char tls_cert_file[4096];	  /* PEM certificate (chain) for HTTPS; "" = plain HTTP */
	char tls_key_file[4096];	  /* PEM private key of tls_cert_file */
	char tokens_file[4096];		  /* scoped API tokens (server/auth.c); "" = none */
	char allow_insecure[8];		  /* "on": non-loopback bind without tokens allowed */
	char audit_log[4096];		  /* admin audit log; "" = <data_dir>/audit.log */
	uint64_t retention_s;		  /* default retention of sealed data; 0 = forever */
	uint32_t retention_check_s;	  /* background retention + compaction period */
	uint32_t compact_min_live_pct;	  /* compact segments less live than this percent */
	uint32_t rollup_time_width_s;	  /* time rollup tier bucket width; 0 = off */
	uint64_t rollup_step_width;	  /* step rollup tier bucket width; 0 = off */
	char log_level[16];		  /* "debug", "info", "warn" or "error" */
	char lp_default_job[129];	  /* job of line-protocol lines without one; "" = error */
	uint64_t max_line_bytes;	  /* longest line-protocol line */
	uint32_t max_fields_per_line;	  /* line protocol: fields of one line */
	uint32_t max_tags_per_line;	  /* line protocol: tags of one line */
	uint64_t max_series_per_job;	  /* distinct series of one job (storage enforces) */
	uint32_t udp_port;		  /* UDP listener port; 0 = no UDP listener */
	char udp_addr[64];		  /* UDP listen address */
	uint32_t udp_queue_datagrams;	  /* datagrams waiting to be parsed; beyond: dropped */
	uint64_t udp_queue_bytes;	  /* bytes of datagrams waiting; beyond: dropped */
	uint64_t udp_max_datagram_bytes;  /* larger datagrams are dropped (oversize) */
	char io_uring[4];		  /* "on" or "off": off forces pwritev+fdatasync */
	char detect[4];			  /* "on" or "off": built-in detectors */
	char rules_file[4096];		  /* operator rules file; "" = built-in defaults */
	char alertmanager_url[2048];	  /* comma-separated Alertmanager base URLs */
	uint32_t alert_resend_interval_s; /* firing alerts re-sent this often */
	uint32_t detect_eval_interval_ms; /* detectors evaluate this often */
	uint32_t detect_max_jobs;	  /* jobs with detector state */
	uint64_t detect_max_bytes;	  /* memory bound of detector state */
	char public_url[512];		  /* base URL for links in alerts; "" = http://addr:port */

	/* index compaction: rewrite index/data.mdb once this % of it is free; 0 = never */
	uint32_t index_compact_free_pct;

	/* authenticated UDP (udp_auth.c) */
	char udp_keys_file[4096];	   /* per-job UDP signing keys; "" = none */
	char udp_allow_unauthenticated[8]; /* "auto", "on", "off": store unsigned datagrams */
	uint32_t udp_max_skew_s;	   /* signed datagram timestamps within now ± this */
};

/* Fills *c with the default of every option. Cannot fail. */
void srv_config_default(struct srv_config *c);

/* Applies the options of the config file at path on top of *c. Errors name
 * "path:line", the option, the reason and the allowed range or values:
 * unknown option, malformed line, bad or out-of-range value, an option given
 * twice. Returns 0, -errno if the file cannot be read, or RDB_EINVAL. */
int srv_config_load_file(struct srv_config *c, const char *path, char *err, size_t errlen);

/* As srv_config_load_file for a file's text held in memory (len bytes, not
 * NUL-terminated), named name in errors. */
int srv_config_load_text(struct srv_config *c, const char *text, size_t len, const char *name,
			 char *err, size_t errlen);

/* Sets one option by its snake_case name from its text form. Returns 0, or
 * RDB_EINVAL (unknown name, bad or out-of-range value). */
int srv_config_set(struct srv_config *c, const char *name, const char *value, char *err,
		   size_t errlen);

/* Writes the current value of option name as text that srv_config_set
 * accepts (sizes with a suffix when exact, e.g. "64M"). Returns 0,
 * RDB_ENOTFOUND for an unknown name, or RDB_ELIMIT if buf is too small. */
int srv_config_get(const struct srv_config *c, const char *name, char *buf, size_t len);

/* Parses rankdbd's command line (argv[0] is skipped) on top of *c:
 * -c/--config FILE, -h/--help and --option VALUE / --option=VALUE. The
 * config file, if given, is applied first; the flags then override it,
 * wherever they stand on the line. A flag given twice, an unknown flag, a
 * stray argument or a config file that cannot be read is an error.
 * On -h/--help: *help = true, returns 0 and applies nothing.
 * *config_path is set to the FILE argument (pointing into argv) or NULL.
 * Returns 0, -errno (config file unreadable) or RDB_EINVAL. */
int srv_config_parse_args(struct srv_config *c, int argc, char **argv, char *err, size_t errlen,
			  bool *help, const char **config_path);

/* Prints usage and every option: flag, value type, range, default, help. */
void srv_config_print_help(FILE *f, const char *argv0);

/* Writes the default config file (every option with its default value and
 * its documentation as comments): the source of conf/rankdb.conf.
 * Returns 0 or -EIO if f reports a write error. */
int srv_config_write_conf(FILE *f);

/* Logs one INFO line per option (subsystem "config"). Call at start-up. */
void srv_config_log(const struct srv_config *c);

#endif
