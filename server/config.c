/* config.c - rankdbd's configuration, driven by one table.
 *
 * Design: the static table `opts` below is the only place an option is
 * described: name, type, default (as text, parsed by the same code as user
 * input, so a default can never disagree with the parser), bounds, field in
 * struct srv_config, one-line help and operator documentation. Defaults,
 * the config file parser, the command-line parser, --help, the start-up log
 * and the generated conf/rankdb.conf are all loops over that table; adding
 * an option is adding one entry (and its field in config.h).
 *
 * Types: OPT_STRING (bounds are byte lengths, the field size caps the
 * maximum), OPT_UINT (plain decimal), OPT_SIZE (decimal with an optional
 * 1024-based K/M/G/T suffix), OPT_DURATION (seconds, optional s/m/h/d
 * suffix), OPT_ENUM (one of a NULL-terminated word list, stored as the
 * string). Numbers are decimal only: no sign, no hex, no octal, no spaces.
 *
 * Failure: every entry point parses into a copy of the caller's struct and
 * copies it back only when everything succeeded, so a failed load, set or
 * argument parse leaves the caller's configuration as it was. Errors are
 * one line naming where (file:line, or --flag), which option, what is wrong
 * and what is allowed. Config file lines are bounded (LINE_MAX_BYTES); a
 * longer line is an error, never silently split.
 *
 * Threading: start-up code; not thread-safe and not meant to be.
 */
#include "server/config.h"

#include "common/rdb_err.h"
#include "common/rdb_log.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define LINE_MAX_BYTES 8192 /* longest config file line, newline included */
#define WHY_BYTES      512  /* room for one error reason */
#define VALUE_BYTES    64   /* room for a number or enum word as text */

#define KIB (1ull << 10)
#define MIB (1ull << 20)
#define GIB (1ull << 30)
#define TIB (1ull << 40)

enum opt_type { OPT_STRING, OPT_UINT, OPT_SIZE, OPT_DURATION, OPT_ENUM };

struct opt {
	const char *name; /* snake_case; the flag is --name-with-dashes */
	enum opt_type type;
	const char *def;	   /* default, as text */
	uint64_t min, max;	   /* numbers: inclusive value bounds; strings: min length */
	const char *const *values; /* OPT_ENUM: allowed words, NULL-terminated */
	size_t offset, size;	   /* the field in struct srv_config */
	const char *help;	   /* one line for --help */
	const char *doc;	   /* sentences for the operator, in rankdb.conf */
};

#define FIELD(f)                                                                                   \
	.offset = offsetof(struct srv_config, f), .size = sizeof(((struct srv_config *)0)->f)

static const char *const sync_values[] = {"fdatasync", "none", NULL};
static const char *const onoff_values[] = {"on", "off", NULL};
static const char *const auto_onoff_values[] = {"auto", "on", "off", NULL};
static const char *const log_values[] = {"debug", "info", "warn", "error", NULL};

static const struct opt opts[] = {
    {.name = "data_dir",
     .type = OPT_STRING,
     .def = "./data",
     .min = 1,
     FIELD(data_dir),
     .help = "directory holding the WAL, chunk segments and series index",
     .doc = "Directory that holds everything rankdbd stores: the write-ahead log, the chunk "
	    "segment files and the LMDB series index. rankdbd locks it, so only one rankdbd "
	    "can use a directory at a time. Use a local file system; a relative path is "
	    "taken from rankdbd's working directory."},
    {.name = "http_addr",
     .type = OPT_STRING,
     .def = "127.0.0.1",
     .min = 1,
     FIELD(http_addr),
     .help = "IP address the HTTP API listens on",
     .doc = "Address the HTTP ingest and query API listens on. The default 127.0.0.1 only "
	    "accepts clients on this machine; set 0.0.0.0 (all interfaces) so that training "
	    "nodes can push telemetry over the network, and restrict who can reach the port "
	    "with a firewall."},
    {.name = "http_port",
     .type = OPT_UINT,
     .def = "7461",
     .min = 0,
     .max = 65535,
     FIELD(http_port),
     .help = "TCP port of the HTTP API; 0 picks a free port",
     .doc = "TCP port of the HTTP API. 0 lets the kernel pick a free port, which rankdbd "
	    "then writes to port_file; use that for tests and for running several instances "
	    "on one machine."},
    {.name = "port_file",
     .type = OPT_STRING,
     .def = "",
     .min = 0,
     FIELD(port_file),
     .help = "file to write the bound HTTP port to (empty: none)",
     .doc = "If not empty, rankdbd writes the TCP port it actually listens on to this file "
	    "once it accepts connections. Scripts and tests that start rankdbd with "
	    "http_port = 0 read it to find the server."},
    {.name = "http_threads",
     .type = OPT_UINT,
     .def = "8",
     .min = 1,
     .max = 256,
     FIELD(http_threads),
     .help = "HTTP worker threads",
     .doc = "Number of threads that parse requests and run queries. More threads serve more "
	    "clients and queries in parallel at the cost of memory per thread; about the "
	    "number of CPU cores is a good start."},
    {.name = "http_max_connections",
     .type = OPT_UINT,
     .def = "8192",
     .min = 1,
     .max = 65536,
     FIELD(http_max_connections),
     .help = "most open client connections",
     .doc = "Most open client connections. Connections beyond it are refused, so a flood of "
	    "clients cannot exhaust file descriptors or memory. The default holds a 4,096-rank "
	    "job with one keep-alive connection per rank plus clients and headroom. At start "
	    "rankdbd raises its soft open-file limit up to the hard limit when this (plus a "
	    "quarter for answering refusals, and 512 spare) needs it, and logs a warning when "
	    "the hard limit is too low (raise LimitNOFILE / ulimit -n then)."},
    {.name = "http_write_loop",
     .type = OPT_ENUM,
     .def = "on",
     .values = onoff_values,
     FIELD(http_write_loop),
     .help = "on: serve write requests from rankdb's own epoll loop, the rest by libmicrohttpd",
     .doc = "on (the default): rankdbd's own event loop owns the listening socket and serves "
	    "plain write requests (POST /write, /api/v2/write, /api/v1/write with a "
	    "Content-Length) itself, with fewer system calls and less copying per request "
	    "than libmicrohttpd; every other request, and every connection after its first "
	    "such request, goes to libmicrohttpd as before. Limits, deadlines, body budget "
	    "and parking are the same for both. off: libmicrohttpd serves everything, as "
	    "before; turn it off if a client sees a difference between the two (and report "
	    "it). With TLS the loop is off whatever this says."},
    {.name = "http_max_parked",
     .type = OPT_UINT,
     .def = "4096",
     .min = 0,
     .max = 1048576,
     FIELD(http_max_parked),
     .help = "most write requests waiting for their WAL sync without a thread (0: none)",
     .doc = "With sync_policy = fdatasync a write is acknowledged once its WAL record is on "
	    "stable storage. While it waits, its request is parked: the connection is "
	    "suspended and no HTTP thread is held, so one fdatasync covers every write in "
	    "flight, whatever the number of connections. This bounds how many requests may "
	    "be parked at once (each keeps its body and parsed batch in memory); past it a "
	    "write is answered 503 + Retry-After: 1 without being stored "
	    "(rankdb_http_parked_refused_total). 0 disables parking: every write waits on "
	    "its HTTP thread, as before."},
    {.name = "http_timeout_s",
     .type = OPT_DURATION,
     .def = "60",
     .min = 1,
     .max = 3600,
     FIELD(http_timeout_s),
     .help = "seconds a connection may idle or take to send a request",
     .doc = "Seconds a client connection may stay idle, or take to send a complete request "
	    "(headers and body), before rankdbd closes it; counted from the connection's start "
	    "or the end of its previous response, however slowly bytes trickle in. A body "
	    "gets one more second per http_min_body_rate_bytes it has delivered, so large "
	    "uploads at a reasonable rate finish. Lower values free connections held by "
	    "stalled clients sooner; higher values tolerate slow networks."},
    {.name = "http_connection_memory_bytes",
     .type = OPT_SIZE,
     .def = "16K",
     .min = 8 * KIB,
     .max = MIB,
     FIELD(http_connection_memory_bytes),
     .help = "libmicrohttpd's buffer per connection (request line, headers, reads)",
     .doc = "Memory libmicrohttpd gives each open connection for its request line, headers "
	    "and read buffer; it becomes resident once the connection has served a request, "
	    "so with thousands of keep-alive connections it is the largest per-connection "
	    "cost (4,096 connections x 16 KiB = 64 MiB). A request whose line and headers do "
	    "not fit is answered 431 (headers) or 414 (URI); raise it when clients send very "
	    "large headers (cookies, long tokens). Request bodies are not held here."},
    {.name = "http_min_body_rate_bytes",
     .type = OPT_SIZE,
     .def = "16K",
     .min = 1,
     .max = GIB,
     FIELD(http_min_body_rate_bytes),
     .help = "body bytes per second that earn a slow upload one more second",
     .doc = "Minimum transfer rate of a request body past http_timeout_s: each this many "
	    "bytes received extend the request's deadline by one second. A client that "
	    "sends slower (a slowloris) is disconnected at its deadline."},
    {.name = "max_body_bytes_in_flight",
     .type = OPT_SIZE,
     .def = "128M",
     .min = KIB,
     .max = 64 * GIB,
     FIELD(max_body_bytes_in_flight),
     .help = "request-body memory of all connections together",
     .doc = "One budget for the request bodies being received or handled, across all "
	    "connections (a body with Content-Length reserves that much when its headers "
	    "arrive; a chunked body as it grows). A request that does not fit is answered "
	    "503 with Retry-After before its body is read, so memory does not grow with the "
	    "number of connections. Should be at least max_body_bytes."},
    {.name = "max_body_bytes",
     .type = OPT_SIZE,
     .def = "16M",
     .min = KIB,
     .max = GIB,
     FIELD(max_body_bytes),
     .help = "largest accepted HTTP request body",
     .doc = "Largest HTTP request body rankdbd accepts; a larger request is rejected. Each "
	    "request in flight may hold this much memory; all of them together are bounded "
	    "by max_body_bytes_in_flight. Clients should split bigger batches."},
    {.name = "max_records_per_request",
     .type = OPT_UINT,
     .def = "100000",
     .min = 1,
     .max = 10000000,
     FIELD(max_records_per_request),
     .help = "most records one write request may carry",
     .doc = "Most records one write request may carry; a request with more is rejected. "
	    "Bounds the work and memory of a single batch."},
    {.name = "max_metrics_per_record",
     .type = OPT_UINT,
     .def = "1024",
     .min = 1,
     .max = 65536,
     FIELD(max_metrics_per_record),
     .help = "most metric values one record may carry",
     .doc = "Most metric values one record may carry (for example loss, grad_norm and lr of "
	    "one step). A record with more is rejected; this bounds how many series a single "
	    "record can touch."},
    {.name = "sync_policy",
     .type = OPT_ENUM,
     .def = "fdatasync",
     .values = sync_values,
     FIELD(sync_policy),
     .help = "when writes are acknowledged: fdatasync (durable) or none",
     .doc = "When a write is acknowledged. fdatasync: once its WAL record is on stable "
	    "storage, so acknowledged writes survive a power loss or kernel crash; writes "
	    "that arrive together share one fdatasync. none: once the record is written to "
	    "the WAL file, without fdatasync; acknowledged writes survive a kill -9 of "
	    "rankdbd but not a power loss or kernel crash, in exchange for lower write "
	    "latency and less disk load."},
    {.name = "wal_rotate_bytes",
     .type = OPT_SIZE,
     .def = "64M",
     .min = MIB,
     .max = 16 * GIB,
     FIELD(wal_rotate_bytes),
     .help = "checkpoint once the WAL file grows past this size",
     .doc = "A checkpoint (seal the in-memory head into chunks, start a new WAL file, delete "
	    "the old one) starts once the WAL file grows past this size, or once the head "
	    "holds this size / 64 points (1 M at 64M; the cadence the WAL size gave when "
	    "records named series by their strings). Larger values mean fewer, larger "
	    "checkpoints, but more memory, more disk for the WAL and a longer replay after "
	    "a crash."},
    {.name = "checkpoint_interval_s",
     .type = OPT_DURATION,
     .def = "60",
     .min = 1,
     .max = 86400,
     FIELD(checkpoint_interval_s),
     .help = "checkpoint once head data is this many seconds old",
     .doc = "A checkpoint also starts once the oldest data in the in-memory head is this "
	    "many seconds old, even if the WAL is small. Shorter intervals bound recovery "
	    "time and WAL size on quiet servers, at the cost of smaller chunks (worse "
	    "compression) and more index writes."},
    {.name = "head_max_bytes",
     .type = OPT_SIZE,
     .def = "512M",
     .min = MIB,
     .max = TIB,
     FIELD(head_max_bytes),
     .help = "memory bound of data not yet sealed into chunks",
     .doc = "Memory bound of the in-memory head, which holds points not yet sealed into "
	    "chunks. When it is full, writes are refused as busy (clients should retry) "
	    "until a checkpoint frees space. Size it to hold at least one checkpoint "
	    "interval of ingest."},
    {.name = "chunk_max_points",
     .type = OPT_UINT,
     .def = "4096",
     .min = 1,
     .max = 65536,
     FIELD(chunk_max_points),
     .help = "points per series before its chunk is sealed",
     .doc = "A series' head data is sealed into a compressed chunk once it holds this many "
	    "points. Larger chunks compress better and need fewer index entries, but queries "
	    "decode whole chunks, so a query over a short range reads more than it needs."},
    {.name = "segment_max_bytes",
     .type = OPT_SIZE,
     .def = "256M",
     .min = MIB,
     .max = 64 * GIB,
     FIELD(segment_max_bytes),
     .help = "size past which a new segment file is started",
     .doc = "Chunks are appended to segment files; a new segment file starts once the "
	    "current one passes this size. Larger segments mean fewer files; smaller ones are "
	    "quicker to copy, verify or repair one at a time."},
    {.name = "index_map_bytes",
     .type = OPT_SIZE,
     .def = "16G",
     .min = MIB,
     .max = 16 * TIB,
     FIELD(index_map_bytes),
     .help = "LMDB map size: the most the series index can grow to",
     .doc = "Size of the LMDB memory map of the series index, which is also the largest the "
	    "index file can grow; once it is full, writes that need new index entries fail. "
	    "It reserves virtual address space, not RAM or disk, so a generous value costs "
	    "little on 64-bit systems."},
    {.name = "max_series",
     .type = OPT_UINT,
     .def = "10000000",
     .min = 1,
     .max = 1000000000,
     FIELD(max_series),
     .help = "most distinct series the store accepts",
     .doc = "Most distinct series (one per job, rank and metric) the store accepts; writes "
	    "that would create more are refused. Protects memory and the index from a client "
	    "that invents new metric names or jobs without bound."},
    {.name = "max_query_points",
     .type = OPT_UINT,
     .def = "10000000",
     .min = 1,
     .max = 1000000000,
     FIELD(max_query_points),
     .help = "most points one query may read",
     .doc = "Most points one query may read; a query over more fails with an error asking "
	    "for a narrower range, instead of exhausting memory."},
    {.name = "max_response_bytes",
     .type = OPT_SIZE,
     .def = "256M",
     .min = 64 * KIB,
     .max = 4 * GIB,
     FIELD(max_response_bytes),
     .help = "largest query response body",
     .doc = "Largest response body one query may produce; a query whose result would be "
	    "larger fails instead of buffering it. Together with http_threads it bounds the "
	    "memory used for responses."},
    {.name = "admin_token",
     .type = OPT_STRING,
     .def = "",
     .min = 0,
     FIELD(admin_token),
     .help = "bearer token of the admin API (empty: admin API disabled)",
     .doc = "Secret that admin API requests (/api/v1/admin/..., used by rankctl --url) must "
	    "send as 'Authorization: Bearer <token>'. Empty (the default) disables the admin "
	    "API: every admin request gets 403. Use a long random string and keep the config "
	    "file readable by rankdbd's user only; rankdbd never logs the token."},
    {.name = "audit_log",
     .type = OPT_STRING,
     .def = "",
     .min = 0,
     FIELD(audit_log),
     .help = "file admin actions are appended to (empty: <data_dir>/audit.log)",
     .doc = "Every admin API request is appended to this file as one JSON line: time, "
	    "client address, action, target, result and duration (refusals rate-limited per "
	    "client, see Admin API and audit log). Empty (the default) means audit.log inside "
	    "data_dir."},
    {.name = "tls_cert_file",
     .type = OPT_STRING,
     .def = "",
     .min = 0,
     FIELD(tls_cert_file),
     .help = "PEM certificate (chain) to serve HTTPS with (empty: plain HTTP)",
     .doc = "With tls_key_file set too, the HTTP API speaks only HTTPS (TLS through "
	    "libmicrohttpd's GnuTLS support) on http_port. Read at start and again on SIGHUP "
	    "and POST /api/v1/admin/tls/reload (new connections get the new certificate; a "
	    "bad one is refused and the old one stays)."},
    {.name = "tls_key_file",
     .type = OPT_STRING,
     .def = "",
     .min = 0,
     FIELD(tls_key_file),
     .help = "PEM private key of tls_cert_file",
     .doc = "The unencrypted PEM private key of tls_cert_file; keep it readable by "
	    "rankdbd's user only."},
    {.name = "tokens_file",
     .type = OPT_STRING,
     .def = "",
     .min = 0,
     FIELD(tokens_file),
     .help = "file of scoped API tokens (empty: no tokens; see OPERATIONS.md, Securing rankdb)",
     .doc = "One token a line: id, scopes (ingest, query, admin), job-name patterns and the "
	    "SHA-256 of its secret (rankctl token add writes it). When set, every endpoint but "
	    "/healthz, /metrics and /ping needs a token with its scope (401 without one, 403 "
	    "with a wrong scope or job). Read again on SIGHUP and when the file changes. Empty "
	    "(the default): the API is open, admin_token still guards the admin API."},
    {.name = "allow_insecure",
     .type = OPT_ENUM,
     .def = "off",
     .values = onoff_values,
     FIELD(allow_insecure),
     .help = "on: allow a non-loopback http_addr without tokens, or udp_addr without keys",
     .doc = "rankdbd refuses to start on an http_addr other than loopback without a "
	    "tokens_file (anyone who reaches the port could read, write and delete), and on a "
	    "udp_addr other than loopback unless unsigned datagrams are refused (udp_keys_file "
	    "set, udp_allow_unauthenticated not on). on lets it start "
	    "anyway (with a warning in the log); for trusted networks only."},
    {.name = "retention_s",
     .type = OPT_DURATION,
     .def = "0",
     .min = 0,
     .max = 3153600000ull,
     FIELD(retention_s),
     .help = "default retention of stored data; 0 = keep forever",
     .doc = "Sealed data older than this (by the newest timestamp of each chunk) is dropped "
	    "by the background retention pass; 0 (the default) keeps everything forever. "
	    "Per-job overrides are set with rankctl retention set JOB SECONDS. Dropped data "
	    "frees disk space when compaction rewrites the segment files."},
    {.name = "retention_check_s",
     .type = OPT_DURATION,
     .def = "1h",
     .min = 0,
     .max = 604800,
     FIELD(retention_check_s),
     .help = "period of the background retention and compaction pass; 0 = never",
     .doc = "How often the background pass runs that applies retention and then compacts "
	    "segment files. 0 turns it off (run them with rankctl retention run and rankctl "
	    "compact instead)."},
    {.name = "compact_min_live_pct",
     .type = OPT_UINT,
     .def = "50",
     .min = 0,
     .max = 100,
     FIELD(compact_min_live_pct),
     .help = "compact segment files with less than this percent of live data",
     .doc = "Compaction rewrites a segment file whose live bytes (chunks the index still "
	    "points at) are below this percentage of its size, then deletes the old file. "
	    "Lower values rewrite less often and leave more dead space; 100 rewrites every "
	    "segment with any dead byte."},
    {.name = "index_compact_free_pct",
     .type = OPT_UINT,
     .def = "25",
     .min = 0,
     .max = 100,
     FIELD(index_compact_free_pct),
     .help = "compact the LMDB index file once this percent of its pages is free; 0 = never",
     .doc = "LMDB never shrinks index/data.mdb: pages freed by merges, compaction and "
	    "retention stay in the file for reuse. At the end of each compaction (rankctl "
	    "compact, or the background pass), once at least this percentage of the file's "
	    "pages is free (and the file is at least 1 MiB), the index is rewritten without "
	    "them: a compacted copy beside it, then a rename, with index reads and writes "
	    "paused only for the swap. Needs free disk space for the live index. 0 turns the "
	    "automatic rewrite off (rankctl compact --index runs it by hand)."},
    {.name = "rollup_time_width_s",
     .type = OPT_DURATION,
     .def = "60",
     .min = 0,
     .max = 31536000,
     FIELD(rollup_time_width_s),
     .help = "bucket width of the time rollup tier; 0 = no time tier",
     .doc = "Before retention drops a chunk, its points are folded into rollups: per "
	    "series and bucket, count, sum, min, max, first and last. This is the width of "
	    "the time tier's buckets. Downsample queries answer ranges that retention has "
	    "dropped from the rollups when their time width is a multiple of this. Changing it "
	    "later leaves the existing rollups at the old width."},
    {.name = "rollup_step_width",
     .type = OPT_UINT,
     .def = "100",
     .min = 0,
     .max = 1000000000000ull,
     FIELD(rollup_step_width),
     .help = "bucket width (in steps) of the step rollup tier; 0 = no step tier",
     .doc = "Width of the step tier's rollup buckets (see rollup_time_width_s). Downsample "
	    "queries on the step axis use it when their step width is a multiple of this."},
    {.name = "log_level",
     .type = OPT_ENUM,
     .def = "info",
     .values = log_values,
     FIELD(log_level),
     .help = "least severe log lines written: debug, info, warn or error",
     .doc = "Least severe log lines written to stderr. debug is verbose and meant for "
	    "diagnosing problems; warn and error keep only lines that need an operator's "
	    "attention."},
    {.name = "lp_default_job",
     .type = OPT_STRING,
     .def = "",
     .min = 0,
     FIELD(lp_default_job),
     .help = "job of line-protocol lines without a job tag (empty: such lines are errors)",
     .doc = "Job id given to InfluxDB line-protocol lines (HTTP /write, /api/v2/write and "
	    "UDP) that carry no job tag, for clients such as Telegraf that cannot add one. "
	    "Empty (the default): a line without a job tag is a bad line, reported to the "
	    "client and not stored. Must be a valid job id ([A-Za-z0-9._-], 1..128 bytes)."},
    {.name = "max_line_bytes",
     .type = OPT_SIZE,
     .def = "64K",
     .min = 256,
     .max = 64 * MIB,
     FIELD(max_line_bytes),
     .help = "longest accepted line-protocol line",
     .doc = "Longest InfluxDB line-protocol line rankdbd accepts; a longer line is a bad "
	    "line (reported and skipped, the other lines of the request are stored). Bounds "
	    "the work spent on one line."},
    {.name = "max_fields_per_line",
     .type = OPT_UINT,
     .def = "1024",
     .min = 1,
     .max = 65536,
     FIELD(max_fields_per_line),
     .help = "most fields one line-protocol line may carry",
     .doc = "Most fields one line-protocol line may carry (each numeric field is one point "
	    "of one series); a line with more is a bad line."},
    {.name = "max_tags_per_line",
     .type = OPT_UINT,
     .def = "64",
     .min = 1,
     .max = 1024,
     FIELD(max_tags_per_line),
     .help = "most tags one line-protocol line may carry",
     .doc = "Most tags one line-protocol line may carry, job and rank included; a line with "
	    "more is a bad line. Tags other than job and rank become part of the metric name, "
	    "so this also bounds how long and how varied metric names get."},
    {.name = "max_series_per_job",
     .type = OPT_UINT,
     .def = "1000000",
     .min = 1,
     .max = 1000000000,
     FIELD(max_series_per_job),
     .help = "most distinct series one job may have",
     .doc = "Most distinct series (rank and metric pairs) one job may have; writes that would "
	    "create more are refused. Keeps one job that turns a changing value into a tag "
	    "from using up max_series for every other job."},
    {.name = "udp_port",
     .type = OPT_UINT,
     .def = "0",
     .min = 0,
     .max = 65535,
     FIELD(udp_port),
     .help = "UDP port for line-protocol and JSON datagrams; 0 = no UDP listener",
     .doc = "UDP port on which rankdbd takes InfluxDB line protocol and JSON records, one or "
	    "more per datagram. 0 (the default) turns the UDP listener off. UDP is "
	    "fire-and-forget: the sender gets no answer, and datagrams rankdbd cannot take "
	    "are dropped and counted in /metrics (rankdb_udp_dropped_total), never silently."},
    {.name = "udp_addr",
     .type = OPT_STRING,
     .def = "127.0.0.1",
     .min = 1,
     FIELD(udp_addr),
     .help = "IP address the UDP listener binds to",
     .doc = "Address the UDP listener binds to. The default 127.0.0.1 only takes datagrams "
	    "from this machine; set 0.0.0.0 to take them from the network."},
    {.name = "udp_keys_file",
     .type = OPT_STRING,
     .def = "",
     .min = 0,
     FIELD(udp_keys_file),
     .help = "file of per-job UDP signing keys (empty: none; see OPERATIONS.md)",
     .doc = "One key a line: id, job-name patterns and the secret in hex (rankctl udp-key add "
	    "writes it; keep the file mode 600). When set, a datagram must be signed with one "
	    "of these keys (docs/API.md, Signed datagrams) and its records' jobs must match "
	    "the key's patterns; anything else is dropped and counted by reason. Read again on "
	    "SIGHUP, on POST /api/v1/admin/udp-keys/reload and when the file changes."},
    {.name = "udp_allow_unauthenticated",
     .type = OPT_ENUM,
     .def = "auto",
     .values = auto_onoff_values,
     FIELD(udp_allow_unauthenticated),
     .help = "store unsigned UDP datagrams: auto (only without udp_keys_file), on, off",
     .doc = "Whether a datagram without a signature is stored. auto (the default): yes when "
	    "no udp_keys_file is set (then udp_addr must be loopback unless allow_insecure = "
	    "on), no when one is. on: always (a non-loopback udp_addr then needs "
	    "allow_insecure = on). off: never. Refused datagrams count as "
	    "reason=\"unsigned\"."},
    {.name = "udp_max_skew_s",
     .type = OPT_DURATION,
     .def = "30",
     .min = 1,
     .max = 3600,
     FIELD(udp_max_skew_s),
     .help = "signed datagrams older or newer than this are dropped (stale)",
     .doc = "A signed datagram whose timestamp is further than this from rankdbd's clock is "
	    "dropped and counted as reason=\"stale\"; within it, each (timestamp, nonce) of a "
	    "key is taken once (reason=\"replay\"). Keep the senders' clocks in sync (NTP)."},
    {.name = "udp_queue_datagrams",
     .type = OPT_UINT,
     .def = "65536",
     .min = 16,
     .max = 16777216,
     FIELD(udp_queue_datagrams),
     .help = "most received datagrams waiting to be parsed",
     .doc = "Most received UDP datagrams waiting to be parsed and stored. When the queue is "
	    "full (storage slower than the senders), new datagrams are dropped and counted "
	    "as reason=\"queue_full\". A larger queue rides out longer bursts."},
    {.name = "udp_queue_bytes",
     .type = OPT_SIZE,
     .def = "64M",
     .min = 64 * KIB,
     .max = 16 * GIB,
     FIELD(udp_queue_bytes),
     .help = "most bytes of received datagrams waiting to be parsed",
     .doc = "Most bytes of received UDP datagrams waiting to be parsed and stored: the "
	    "memory bound of the UDP queue. Past it, new datagrams are dropped and counted "
	    "as reason=\"queue_full\", like past udp_queue_datagrams."},
    {.name = "udp_max_datagram_bytes",
     .type = OPT_SIZE,
     .def = "65507",
     .min = 512,
     .max = 65507,
     FIELD(udp_max_datagram_bytes),
     .help = "largest accepted UDP datagram",
     .doc = "Largest UDP datagram rankdbd takes (65507 is the most IPv4 can carry). A larger "
	    "datagram is dropped whole and counted as reason=\"oversize\"; senders should "
	    "keep datagrams under the path MTU anyway."},
    {.name = "io_uring",
     .type = OPT_ENUM,
     .def = "on",
     .values = onoff_values,
     FIELD(io_uring),
     .help = "write the WAL and segments through io_uring (on/off)",
     .doc = "File writes (WAL group commits, segment appends) go through io_uring when the "
	    "kernel allows it, and fall back to pwritev + fdatasync by themselves when it "
	    "does not. off forces the fallback, for kernels or container sandboxes (seccomp) "
	    "that forbid io_uring; the environment variable RANKDB_IO_URING=off does the "
	    "same. Both paths are equally durable; io_uring is faster."},
    {.name = "detect",
     .type = OPT_ENUM,
     .def = "on",
     .values = onoff_values,
     FIELD(detect),
     .help = "watch every run with the built-in detectors (on/off)",
     .doc = "Whether rankdbd watches every run as data arrives: the built-in detectors "
	    "(LossNonFinite, Straggler, TrainingHang, RankDown, GpuOverheat, ConfigMismatch "
	    "...) raise alerts with no rule to write, GET /api/v1/alerts lists them and GET "
	    "/api/v1/jobs/<job>/health shows each run at a glance. Detection runs beside "
	    "ingest on its own thread and never slows or blocks a write. docs/OPERATIONS.md, "
	    "\"Detection\", lists every detector."},
    {.name = "rules_file",
     .type = OPT_STRING,
     .def = "",
     FIELD(rules_file),
     .help = "operator rules file on top of the built-in detector defaults (\"\" = none)",
     .doc = "Path of a rules file that changes the built-in detectors' thresholds, for "
	    "durations, severities and webhooks, per job-name pattern, and adds metric "
	    "aliases (conf/rules.example has every rule with its default). A bad file keeps "
	    "rankdbd from starting, naming the line; on SIGHUP or POST "
	    "/api/v1/admin/rules/reload it is read again, and a bad file is refused while "
	    "the rules in force stay. Check a file with `rankctl rules check FILE`."},
    {.name = "alertmanager_url",
     .type = OPT_STRING,
     .def = "",
     FIELD(alertmanager_url),
     .help = "Alertmanager base URL(s), comma-separated, e.g. http://127.0.0.1:9093",
     .doc = "Where alerts go: one or more Alertmanagers (comma-separated base URLs; rankdbd "
	    "posts to <url>/api/v2/alerts), re-sending firing alerts every "
	    "alert_resend_interval_s and sending resolved ones with endsAt so they clear at "
	    "once. Empty: alerts are still computed, listed at /api/v1/alerts and written "
	    "into each job's logs. A receiver that is down never slows ingest; failed "
	    "deliveries are retried with backoff and counted in /metrics."},
    {.name = "alert_resend_interval_s",
     .type = OPT_DURATION,
     .def = "60",
     .min = 1,
     .max = 86400,
     FIELD(alert_resend_interval_s),
     .help = "how often firing alerts are re-sent to Alertmanager",
     .doc = "Firing alerts are re-sent to Alertmanager this often, each with endsAt four "
	    "intervals ahead: Alertmanager keeps them active through a few missed re-sends "
	    "and resolves them by itself if rankdbd goes away for good."},
    {.name = "detect_eval_interval_ms",
     .type = OPT_UINT,
     .def = "250",
     .min = 50,
     .max = 10000,
     FIELD(detect_eval_interval_ms),
     .help = "how often the detectors evaluate every job (ms)",
     .doc = "The detectors judge every job at least this often (and at most this often "
	    "while data streams in). Lower reacts faster and costs more CPU on the "
	    "detection thread."},
    {.name = "detect_max_jobs",
     .type = OPT_UINT,
     .def = "1024",
     .min = 1,
     .max = 1000000,
     FIELD(detect_max_jobs),
     .help = "jobs the detector keeps state for",
     .doc = "The detector keeps state for at most this many jobs; past it the job silent "
	    "longest is dropped (counted in rankdb_detect_jobs_evicted_total)."},
    {.name = "detect_max_bytes",
     .type = OPT_SIZE,
     .def = "512M",
     .min = 1048576,
     .max = 1099511627776ull,
     FIELD(detect_max_bytes),
     .help = "memory bound of the detector's state",
     .doc = "Memory the detector's per-job and per-rank state may take; past it the jobs "
	    "silent longest are dropped (counted)."},
    {.name = "public_url",
     .type = OPT_STRING,
     .def = "",
     FIELD(public_url),
     .help = "rankdbd's URL as users reach it, for links in alerts (\"\" = http://http_addr:port)",
     .doc = "Base URL under which people reach this rankdbd (for example behind a proxy); "
	    "alerts carry generatorURL = <public_url>/api/v1/alerts?job=... so Alertmanager "
	    "and its notifications link back. Empty: http://<http_addr>:<http_port>."},
};

#define NOPTS (sizeof(opts) / sizeof(opts[0]))

static void errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void errf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* Finds an option by name where sep ('_' in files, '-' in flags) stands
 * for the table's '_'. name need not be NUL-terminated. */
static const struct opt *find_opt(const char *name, size_t len, char sep)
{
	for (size_t i = 0; i < NOPTS; i++) {
		const char *n = opts[i].name;
		size_t j = 0;

		for (; j < len && n[j]; j++) {
			char want = n[j] == '_' ? sep : n[j];
			if (name[j] != want)
				break;
		}
		if (j == len && n[j] == '\0')
			return &opts[i];
	}
	return NULL;
}

static uint64_t field_get_uint(const struct opt *o, const struct srv_config *c)
{
	const char *p = (const char *)c + o->offset;

	if (o->size == sizeof(uint32_t)) {
		uint32_t v;
		memcpy(&v, p, sizeof(v));
		return v;
	}
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static void field_set_uint(const struct opt *o, struct srv_config *c, uint64_t v)
{
	char *p = (char *)c + o->offset;

	if (o->size == sizeof(uint32_t)) {
		uint32_t v32 = (uint32_t)v;
		memcpy(p, &v32, sizeof(v32));
		return;
	}
	memcpy(p, &v, sizeof(v));
}

/* Multiplier of a unit suffix, or 0 if ch is not one for this type. */
static uint64_t unit_of(enum opt_type t, char ch)
{
	if (t == OPT_SIZE) {
		switch (ch) {
		case 'K':
		case 'k':
			return KIB;
		case 'M':
		case 'm':
			return MIB;
		case 'G':
		case 'g':
			return GIB;
		case 'T':
		case 't':
			return TIB;
		}
	} else if (t == OPT_DURATION) {
		switch (ch) {
		case 's':
			return 1;
		case 'm':
			return 60;
		case 'h':
			return 3600;
		case 'd':
			return 86400;
		}
	}
	return 0;
}

/* Parses a number with the type's optional suffix. 0, RDB_EINVAL (not a
 * number of this type) or -ERANGE (does not fit 64 bits). */
static int parse_number(enum opt_type t, const char *s, uint64_t *out)
{
	unsigned long long v;
	uint64_t mult = 1;
	char *end;

	if (!isdigit((unsigned char)s[0]))
		return RDB_EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	if (*end != '\0') {
		mult = unit_of(t, *end);
		if (mult == 0 || end[1] != '\0')
			return RDB_EINVAL;
	}
	if (v > UINT64_MAX / mult)
		return -ERANGE;
	*out = (uint64_t)v * mult;
	return 0;
}

/* Formats v as the option type's text: sizes with the largest exact suffix. */
static void format_number(enum opt_type t, uint64_t v, char *buf, size_t len)
{
	static const struct {
		uint64_t mult;
		char suffix;
	} units[] = {{TIB, 'T'}, {GIB, 'G'}, {MIB, 'M'}, {KIB, 'K'}};

	if (t == OPT_SIZE && v != 0) {
		for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
			if (v % units[i].mult == 0) {
				snprintf(buf, len, "%llu%c",
					 (unsigned long long)(v / units[i].mult), units[i].suffix);
				return;
			}
		}
	}
	snprintf(buf, len, "%llu", (unsigned long long)v);
}

/* What the option accepts, for errors, --help and the conf file. */
static void format_allowed(const struct opt *o, char *buf, size_t len)
{
	char lo[VALUE_BYTES], hi[VALUE_BYTES];
	size_t used = 0;

	switch (o->type) {
	case OPT_STRING:
		snprintf(buf, len, "%s, at most %zu bytes",
			 o->min ? "a non-empty string" : "a string (may be empty)", o->size - 1);
		return;
	case OPT_ENUM:
		buf[0] = '\0';
		for (const char *const *v = o->values; *v && used < len; v++) {
			int n = snprintf(buf + used, len - used, "%s%s", v == o->values ? "" : ", ",
					 *v);
			used += n > 0 ? (size_t)n : 0;
		}
		return;
	default:
		break;
	}
	format_number(o->type, o->min, lo, sizeof(lo));
	format_number(o->type, o->max, hi, sizeof(hi));
	snprintf(buf, len, "%s..%s%s", lo, hi, o->type == OPT_DURATION ? " seconds" : "");
}

static const char *type_noun(enum opt_type t)
{
	switch (t) {
	case OPT_UINT:
		return "a whole number";
	case OPT_SIZE:
		return "a size (bytes, optional suffix K, M, G or T, 1024-based)";
	case OPT_DURATION:
		return "a duration (seconds, optional suffix s, m, h or d)";
	default:
		return "a value";
	}
}

static int set_string(const struct opt *o, const char *s, struct srv_config *c, char *why,
		      size_t wlen)
{
	size_t n = strlen(s);

	if (n < o->min) {
		errf(why, wlen, "must not be empty");
		return RDB_EINVAL;
	}
	if (n >= o->size) {
		errf(why, wlen, "value is %zu bytes long, at most %zu allowed", n, o->size - 1);
		return RDB_EINVAL;
	}
	memcpy((char *)c + o->offset, s, n + 1);
	return 0;
}

static int set_enum(const struct opt *o, const char *s, struct srv_config *c, char *why,
		    size_t wlen)
{
	char allowed[WHY_BYTES / 2];

	for (const char *const *v = o->values; *v; v++) {
		if (strcmp(s, *v) == 0)
			return set_string(o, s, c, why, wlen);
	}
	format_allowed(o, allowed, sizeof(allowed));
	errf(why, wlen, "'%.64s' is not one of: %s", s, allowed);
	return RDB_EINVAL;
}

static int set_number(const struct opt *o, const char *s, struct srv_config *c, char *why,
		      size_t wlen)
{
	char allowed[WHY_BYTES / 2];
	uint64_t v;
	int r = parse_number(o->type, s, &v);

	format_allowed(o, allowed, sizeof(allowed));
	if (r == RDB_EINVAL) {
		errf(why, wlen, "'%.64s' is not %s (allowed %s)", s, type_noun(o->type), allowed);
		return RDB_EINVAL;
	}
	if (r < 0 || v < o->min || v > o->max) {
		errf(why, wlen, "'%.64s' is out of range (allowed %s)", s, allowed);
		return RDB_EINVAL;
	}
	field_set_uint(o, c, v);
	return 0;
}

/* Parses s into the option's field of *c; *c is unchanged on failure. The
 * reason written to why does not name the option: callers prefix it. */
static int opt_set(const struct opt *o, const char *s, struct srv_config *c, char *why, size_t wlen)
{
	switch (o->type) {
	case OPT_STRING:
		return set_string(o, s, c, why, wlen);
	case OPT_ENUM:
		return set_enum(o, s, c, why, wlen);
	default:
		return set_number(o, s, c, why, wlen);
	}
}

static void opt_get(const struct opt *o, const struct srv_config *c, char *buf, size_t len)
{
	if (o->type == OPT_STRING || o->type == OPT_ENUM)
		snprintf(buf, len, "%s", (const char *)c + o->offset);
	else
		format_number(o->type, field_get_uint(o, c), buf, len);
}

void srv_config_default(struct srv_config *c)
{
	char why[WHY_BYTES];

	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < NOPTS; i++) {
		int r = opt_set(&opts[i], opts[i].def, c, why, sizeof(why));
		/* A built-in default the parser rejects is a bug in the table;
		 * the unit tests load every default. */
		assert(r == 0);
		(void)r;
	}
}

int srv_config_set(struct srv_config *c, const char *name, const char *value, char *err,
		   size_t errlen)
{
	const struct opt *o = find_opt(name, strlen(name), '_');
	char why[WHY_BYTES];

	if (!o) {
		errf(err, errlen, "unknown option '%.64s'", name);
		return RDB_EINVAL;
	}
	if (opt_set(o, value, c, why, sizeof(why)) != 0) {
		errf(err, errlen, "%s: %s", o->name, why);
		return RDB_EINVAL;
	}
	return 0;
}

int srv_config_get(const struct srv_config *c, const char *name, char *buf, size_t len)
{
	const struct opt *o = find_opt(name, strlen(name), '_');
	char tmp[sizeof(c->data_dir) + VALUE_BYTES];

	if (!o)
		return RDB_ENOTFOUND;
	opt_get(o, c, tmp, sizeof(tmp));
	if (strlen(tmp) >= len)
		return RDB_ELIMIT;
	memcpy(buf, tmp, strlen(tmp) + 1);
	return 0;
}

/* ---- config file ---- */

static char *skip_space(char *p)
{
	while (*p == ' ' || *p == '\t')
		p++;
	return p;
}

static void trim_end(char *s)
{
	size_t n = strlen(s);

	while (n > 0 && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
}

/* Splits the value part of a line (after '=') in place: quoted or bare, a
 * trailing '#' comment dropped. */
static int split_value(char *p, char **value, char *why, size_t wlen)
{
	p = skip_space(p);
	if (*p == '"') {
		char *close = strchr(p + 1, '"');

		if (!close) {
			errf(why, wlen, "unterminated quoted value");
			return RDB_EINVAL;
		}
		*close = '\0';
		*value = p + 1;
		p = skip_space(close + 1);
		if (*p != '\0' && *p != '#') {
			errf(why, wlen, "unexpected text after the closing quote");
			return RDB_EINVAL;
		}
		return 0;
	}
	char *hash = strchr(p, '#');
	if (hash)
		*hash = '\0';
	trim_end(p);
	if (*p == '\0') {
		errf(why, wlen, "missing value (write \"\" for an empty string)");
		return RDB_EINVAL;
	}
	*value = p;
	return 0;
}

/* Splits one line (newline already stripped) in place. *key is NULL for a
 * blank or comment line. The reason names the key when there is one. */
static int split_line(char *line, char **key, char **value, char *why, size_t wlen)
{
	char *p = skip_space(line), *k, *kend;

	*key = NULL;
	if (*p == '\0' || *p == '#')
		return 0;
	k = p;
	while (*p && *p != '=' && *p != '#' && !isspace((unsigned char)*p))
		p++;
	kend = p;
	p = skip_space(p);
	if (*p != '=' || kend == k) {
		errf(why, wlen, "expected 'name = value'");
		return RDB_EINVAL;
	}
	*kend = '\0';
	if (split_value(p + 1, value, why, wlen) != 0) {
		char tmp[WHY_BYTES];

		snprintf(tmp, sizeof(tmp), "%s", why);
		errf(why, wlen, "%.64s: %s", k, tmp);
		return RDB_EINVAL;
	}
	*key = k;
	return 0;
}

/* Applies one line; seen[i] is the line that set opts[i] (0 = not yet). */
static int load_line(struct srv_config *c, char *line, unsigned lineno, unsigned *seen, char *why,
		     size_t wlen)
{
	const struct opt *o;
	char *key, *value, reason[WHY_BYTES];
	size_t i;

	if (split_line(line, &key, &value, why, wlen) != 0)
		return RDB_EINVAL;
	if (!key)
		return 0;
	o = find_opt(key, strlen(key), '_');
	if (!o) {
		errf(why, wlen, "unknown option '%.64s'%s", key,
		     strchr(key, '-') ? " (the config file spells names with '_', not '-')" : "");
		return RDB_EINVAL;
	}
	i = (size_t)(o - opts);
	if (seen[i]) {
		errf(why, wlen, "%s: set twice (first on line %u)", o->name, seen[i]);
		return RDB_EINVAL;
	}
	seen[i] = lineno;
	if (opt_set(o, value, c, reason, sizeof(reason)) != 0) {
		errf(why, wlen, "%s: %s", o->name, reason);
		return RDB_EINVAL;
	}
	return 0;
}

/* Strips the line ending. Returns false if the line did not fit the buffer. */
static bool end_line(char *line, FILE *f)
{
	size_t n = strlen(line);

	if (n > 0 && line[n - 1] == '\n') {
		line[--n] = '\0';
		if (n > 0 && line[n - 1] == '\r')
			line[--n] = '\0';
		return true;
	}
	/* No newline: either the last line of the file or a truncated one. */
	int ch = getc(f);
	if (ch == EOF)
		return true;
	ungetc(ch, f);
	return false;
}

/* Applies the lines of f (named name in errors) on top of *c, all or
 * nothing. */
static int load_stream(struct srv_config *c, FILE *f, const char *name, char *err, size_t errlen)
{
	struct srv_config tmp = *c;
	unsigned seen[NOPTS] = {0};
	char line[LINE_MAX_BYTES], why[WHY_BYTES];
	unsigned lineno = 0;
	errno = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		if (!end_line(line, f)) {
			errf(err, errlen, "%s:%u: line longer than %d bytes", name, lineno,
			     LINE_MAX_BYTES - 2);
			return RDB_EINVAL;
		}
		if (load_line(&tmp, line, lineno, seen, why, sizeof(why)) != 0) {
			errf(err, errlen, "%s:%u: %s", name, lineno, why);
			return RDB_EINVAL;
		}
	}
	if (ferror(f)) {
		int result = errno ? -errno : -EIO;
		errf(err, errlen, "%s: cannot read config file: %s", name, rdb_strerror(result));
		return result;
	}
	*c = tmp;
	return 0;
}

int srv_config_load_file(struct srv_config *c, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		int result = -errno;
		errf(err, errlen, "%s: cannot open config file: %s", path, rdb_strerror(result));
		return result;
	}
	int result = load_stream(c, f, path, err, errlen);
	fclose(f);
	return result;
}

int srv_config_load_text(struct srv_config *c, const char *text, size_t len, const char *name,
			 char *err, size_t errlen)
{
	if (len == 0)
		return 0;
	FILE *f = fmemopen((void *)text, len, "r");
	if (!f)
		return -errno;
	int result = load_stream(c, f, name, err, errlen);
	fclose(f);
	return result;
}

/* ---- command line ---- */

struct flag_scan {
	const char *value[NOPTS]; /* NULL: option not given on the command line */
	const char *config;	  /* -c/--config FILE, or NULL */
	bool help;
};

/* Takes the value of argv[*i]: after '=' or the next argument. */
static int flag_value(int argc, char **argv, int *i, const char *eq, const char **out, char *err,
		      size_t errlen)
{
	if (eq) {
		*out = eq + 1;
		return 0;
	}
	if (*i + 1 >= argc) {
		errf(err, errlen, "%s needs a value", argv[*i]);
		return RDB_EINVAL;
	}
	*out = argv[++*i];
	return 0;
}

/* Records one flag argument at argv[*i]; advances *i past its value. */
static int scan_flag(int argc, char **argv, int *i, struct flag_scan *fs, char *err, size_t errlen)
{
	const char *a = argv[*i], *name, *eq;
	const char **slot;
	size_t len;

	if (strcmp(a, "-c") == 0) {
		name = "config";
	} else if (strncmp(a, "--", 2) == 0 && a[2] != '\0') {
		name = a + 2;
	} else {
		errf(err, errlen, "unexpected argument '%.64s' (see --help)", a);
		return RDB_EINVAL;
	}
	eq = strchr(name, '=');
	len = eq ? (size_t)(eq - name) : strlen(name);
	if (len == 6 && strncmp(name, "config", 6) == 0) {
		slot = &fs->config;
	} else {
		const struct opt *o = find_opt(name, len, '-');
		if (!o) {
			errf(err, errlen, "unknown flag '--%.*s'%s", (int)(len > 64 ? 64 : len),
			     name,
			     memchr(name, '_', len) ? " (flags spell names with '-', not '_')"
						    : "");
			return RDB_EINVAL;
		}
		slot = &fs->value[o - opts];
	}
	if (*slot) {
		errf(err, errlen, "'%.*s' given twice", (int)(eq ? (size_t)(eq - a) : strlen(a)),
		     a);
		return RDB_EINVAL;
	}
	return flag_value(argc, argv, i, eq, slot, err, errlen);
}

static int scan_args(int argc, char **argv, struct flag_scan *fs, char *err, size_t errlen)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			fs->help = true;
			return 0;
		}
		int r = scan_flag(argc, argv, &i, fs, err, errlen);
		if (r)
			return r;
	}
	return 0;
}

/* Prints the flag of o ("--http-port") into buf. */
static void flag_name(const struct opt *o, char *buf, size_t len)
{
	size_t i = 0;

	snprintf(buf, len, "--%s", o->name);
	for (char *p = buf; *p && i < len; p++, i++) {
		if (*p == '_')
			*p = '-';
	}
}

int srv_config_parse_args(struct srv_config *c, int argc, char **argv, char *err, size_t errlen,
			  bool *help, const char **config_path)
{
	struct flag_scan fs;
	struct srv_config tmp = *c;
	char why[WHY_BYTES], flag[VALUE_BYTES];
	int result;

	memset(&fs, 0, sizeof(fs));
	*help = false;
	*config_path = NULL;
	result = scan_args(argc, argv, &fs, err, errlen);
	if (result)
		return result;
	if (fs.help) {
		*help = true;
		return 0;
	}
	if (fs.config) {
		result = srv_config_load_file(&tmp, fs.config, err, errlen);
		if (result)
			return result;
	}
	for (size_t i = 0; i < NOPTS; i++) {
		if (!fs.value[i])
			continue;
		if (opt_set(&opts[i], fs.value[i], &tmp, why, sizeof(why)) != 0) {
			flag_name(&opts[i], flag, sizeof(flag));
			errf(err, errlen, "%s: %s", flag, why);
			return RDB_EINVAL;
		}
	}
	*c = tmp;
	*config_path = fs.config;
	return 0;
}

/* ---- help, conf file, log ---- */

static void metavar(const struct opt *o, char *buf, size_t len)
{
	size_t used = 0;

	switch (o->type) {
	case OPT_STRING:
		snprintf(buf, len, "STRING");
		return;
	case OPT_UINT:
		snprintf(buf, len, "N");
		return;
	case OPT_SIZE:
		snprintf(buf, len, "SIZE");
		return;
	case OPT_DURATION:
		snprintf(buf, len, "SECONDS");
		return;
	case OPT_ENUM:
		buf[0] = '\0';
		for (const char *const *v = o->values; *v && used < len; v++) {
			int n =
			    snprintf(buf + used, len - used, "%s%s", v == o->values ? "" : "|", *v);
			used += n > 0 ? (size_t)n : 0;
		}
		return;
	}
}

void srv_config_print_help(FILE *f, const char *argv0)
{
	char flag[VALUE_BYTES], meta[VALUE_BYTES], head[2 * VALUE_BYTES], allowed[WHY_BYTES / 2];

	fprintf(f,
		"Usage: %s [-c FILE] [--OPTION VALUE | --OPTION=VALUE]...\n"
		"rankdbd: the rankdb server, a time-series store for ML training telemetry.\n"
		"\n"
		"  -c, --config FILE   read options from FILE first (\"name = value\" lines, see\n"
		"                      conf/rankdb.conf); options on the command line override it\n"
		"  -h, --help          print this help and exit\n"
		"\n"
		"Options (in the config file, write the name with '_': http_port = 7461):\n",
		argv0);
	for (size_t i = 0; i < NOPTS; i++) {
		const struct opt *o = &opts[i];

		flag_name(o, flag, sizeof(flag));
		metavar(o, meta, sizeof(meta));
		snprintf(head, sizeof(head), "%s %s", flag, meta);
		fprintf(f, "  %-36s default %s%s\n", head, o->def[0] ? o->def : "\"\"",
			o->type == OPT_DURATION ? " s" : "");
		if (o->type == OPT_UINT || o->type == OPT_SIZE || o->type == OPT_DURATION) {
			format_allowed(o, allowed, sizeof(allowed));
			fprintf(f, "        %s (%s)\n", o->help, allowed);
		} else {
			fprintf(f, "        %s\n", o->help);
		}
	}
}

/* Writes text as '#' comment lines of at most width columns. */
static void write_wrapped(FILE *f, const char *text, size_t width)
{
	const char *p = text;

	while (*p) {
		size_t len = strlen(p), cut = len;

		if (len > width - 2) {
			cut = width - 2;
			while (cut > 0 && p[cut] != ' ')
				cut--;
			if (cut == 0) /* one word longer than the line: keep it whole */
				cut = strcspn(p, " ");
		}
		fprintf(f, "# %.*s\n", (int)cut, p);
		p += cut;
		while (*p == ' ')
			p++;
	}
}

static const char *type_line(enum opt_type t)
{
	switch (t) {
	case OPT_STRING:
		return "string";
	case OPT_UINT:
		return "whole number";
	case OPT_SIZE:
		return "size in bytes, suffix K, M, G or T (1024-based)";
	case OPT_DURATION:
		return "seconds, or a number with suffix s, m, h or d";
	case OPT_ENUM:
		return "one of";
	}
	return "";
}

int srv_config_write_conf(FILE *f)
{
	char allowed[WHY_BYTES / 2];

	fputs("# rankdb.conf - configuration of rankdbd, the rankdb server.\n"
	      "#\n"
	      "# Generated from the option table in server/config.c; every option is listed\n"
	      "# with its default value. Start rankdbd with -c /path/to/rankdb.conf.\n"
	      "# Syntax: one \"name = value\" per line; '#' starts a comment. Quote a value\n"
	      "# (\"...\") to keep a '#' or surrounding spaces in it. An option may appear\n"
	      "# once. Each option can also be given as a command-line flag with '-' for\n"
	      "# '_' (--http-port 7461 or --http-port=7461); flags override this file.\n",
	      f);
	for (size_t i = 0; i < NOPTS; i++) {
		const struct opt *o = &opts[i];

		fputs("\n", f);
		write_wrapped(f, o->doc, 80);
		format_allowed(o, allowed, sizeof(allowed));
		if (o->type == OPT_STRING)
			fprintf(f, "# Type: %s.\n", allowed);
		else
			fprintf(f, "# Type: %s: %s.\n", type_line(o->type), allowed);
		if (o->type == OPT_STRING)
			fprintf(f, "%s = \"%s\"\n", o->name, o->def);
		else
			fprintf(f, "%s = %s\n", o->name, o->def);
	}
	return ferror(f) ? -EIO : 0;
}

void srv_config_log(const struct srv_config *c)
{
	struct srv_config def;
	char val[sizeof(c->data_dir) + VALUE_BYTES], dval[sizeof(c->data_dir) + VALUE_BYTES];

	srv_config_default(&def);
	for (size_t i = 0; i < NOPTS; i++) {
		const struct opt *o = &opts[i];
		const char *q = o->type == OPT_STRING ? "\"" : "";

		opt_get(o, c, val, sizeof(val));
		opt_get(o, &def, dval, sizeof(dval));
		if (strcmp(o->name, "admin_token") == 0 && val[0])
			snprintf(val, sizeof(val), "(set, not logged)");
		if (strcmp(val, dval) == 0)
			rdb_info("config", "%s = %s%s%s", o->name, q, val, q);
		else
			rdb_info("config", "%s = %s%s%s (default %s%s%s)", o->name, q, val, q, q,
				 dval, q);
	}
}
