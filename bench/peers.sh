#!/usr/bin/env bash
# bench/peers.sh - rankdb side by side with VictoriaMetrics and InfluxDB.
#
#   bench/peers.sh [--size small|default|large] [--connections C]
#                  [--batch-records N] [--reps N] [--query-budget-s S]
#                  [--systems rankdb,vm,influx] [--no-build] [--no-install] [--keep]
#   bench/peers.sh --shape per-rank [--connections C] [--ranks R --steps S] [--runs N]
#   bench/peers.sh --shape many-conns [--connections C] [--duration-s S]
#
# Without --size, --shape, --connections or --batch-records it makes the
# whole report (bench/out/results-all.md): bulk ingest + queries at the
# default size (64 ranks) and at large (512 ranks); per-rank ingest (one
# record per POST) with 64 and with 512 connections; 1,024 and 4,096
# keep-alive connections each posting one step per second (rankdb and VM).
#
# Installs the peers from Debian's packages if missing (victoria-metrics,
# influxdb), builds rdb-gen/rdb-load/rankdbd, then for every system: starts
# it on free 127.0.0.1 ports in a fresh temp dir, loads the same line
# protocol bytes with the same loader (rdb-load --format lp: same
# connections, same records per body), reads its peak RSS (VmHWM), flushes
# it, measures its data dir (du), stops it cleanly and measures again. Then
# restarts each one alone on its data and times the four queries
# (bench/peers.py; each query 2 + --reps times, at least 3 timed runs but
# no more once they took --query-budget-s). Prints one table (also written to
# bench/out/results-<size>.md). A missing rankdb endpoint (404) is reported
# as "n/a (endpoint missing)" and the run goes on.
#
# Environment: BUILD_DIR (default build), RANKDBD (another server binary),
# RANKDBD_ARGS (extra rankdbd flags), STOP_TIMEOUT_S (default 600). Only
# the PIDs this script started are ever signalled. Traffic: 127.0.0.1 only.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

size=default
connections=8
batch_records=64
shape=bulk
ranks=
steps=
runs=2
duration_s=30
all=1
reps=20
query_budget_s=30
systems=rankdb,vm,influx
build=1
install=1
keep=0
while [ $# -gt 0 ]; do
	case "$1" in
	--size) size=$2; all=0; shift 2 ;;
	--connections) connections=$2; all=0; shift 2 ;;
	--batch-records) batch_records=$2; all=0; shift 2 ;;
	--shape) shape=$2; all=0; shift 2 ;;
	--ranks) ranks=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--runs) runs=$2; shift 2 ;;
	--duration-s) duration_s=$2; shift 2 ;;
	--reps) reps=$2; shift 2 ;;
	--query-budget-s) query_budget_s=$2; shift 2 ;;
	--systems) systems=$2; shift 2 ;;
	--no-build) build=0; shift ;;
	--no-install) install=0; shift ;;
	--keep) keep=1; shift ;;
	-h|--help) sed -n '2,36p' "$0"; exit 0 ;;
	*) echo "peers.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
case "$shape" in bulk|per-rank|many-conns) ;; *) echo "peers.sh: bad --shape $shape" >&2; exit 2 ;; esac

# The whole report: every shape, one after the other, one table file.
if [ "$all" = 1 ]; then
	common=(--reps "$reps" --query-budget-s "$query_budget_s")
	[ "$install" = 1 ] || common+=(--no-install)
	[ "$keep" = 0 ] || common+=(--keep)
	nb=()
	[ "$build" = 1 ] || nb=(--no-build)
	mc_systems=$(echo ",$systems," | sed 's/,influx,/,/; s/^,//; s/,$//')
	set -x
	"$0" --size default --systems "$systems" "${common[@]}" "${nb[@]}"
	"$0" --size large --systems "$systems" "${common[@]}" --no-build
	"$0" --shape per-rank --connections 64 --systems "$systems" --runs "$runs" "${common[@]}" --no-build
	"$0" --shape per-rank --connections 512 --ranks 512 --steps 200 --systems "$systems" \
		--runs "$runs" "${common[@]}" --no-build
	for c in 1024 4096; do
		"$0" --shape many-conns --connections "$c" --duration-s "$duration_s" \
			--systems "$mc_systems" "${common[@]}" --no-build
	done
	set +x
	{
		echo "# bench/peers.sh: the whole report ($(date -u +%Y-%m-%dT%H:%MZ))"
		echo
		for f in results-default.md results-large.md results-per-rank-64.md \
			results-per-rank-512.md results-many-conns-1024.md results-many-conns-4096.md; do
			cat "bench/out/$f"
			echo
		done
	} >bench/out/results-all.md
	echo "peers.sh: wrote bench/out/results-all.md"
	exit 0
fi

case "$size" in
small) sink_repeat=200 ;;
default) sink_repeat=10 ;;
large) sink_repeat=2 ;;
*) echo "peers.sh: bad --size $size" >&2; exit 2 ;;
esac
for s in ${systems//,/ }; do
	case "$s" in rankdb|vm|influx) ;; *) echo "peers.sh: unknown system $s" >&2; exit 2 ;; esac
done
has() { case ",$systems," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

build_dir=${BUILD_DIR:-build}
rankdbd=${RANKDBD:-$build_dir/server/rankdbd}
gen=$build_dir/bench/rdb-gen
load=$build_dir/bench/rdb-load
stop_timeout_s=${STOP_TIMEOUT_S:-600}
vm_bin=victoria-metrics
influx_bin=influxd

# ---- peers from Debian's packages ----

install_peers() {
	local pkgs=()
	has vm && ! command -v "$vm_bin" >/dev/null && pkgs+=(victoria-metrics)
	has influx && ! command -v "$influx_bin" >/dev/null && pkgs+=(influxdb)
	[ ${#pkgs[@]} -eq 0 ] && return 0
	[ "$install" = 1 ] || { echo "peers.sh: missing ${pkgs[*]} (--no-install)" >&2; exit 2; }
	apt-cache policy "${pkgs[@]}"
	local sudo=()
	[ "$(id -u)" = 0 ] || sudo=(sudo -n)
	# The packages' own services are not started in containers (policy-rc.d);
	# this script never uses them.
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends \
		"${pkgs[@]}"
}
install_peers

if [ "$build" = 1 ]; then
	[ -d "$build_dir" ] || meson setup "$build_dir"
	targets=(bench/rdb-load bench/rdb-gen)
	[ -n "${RANKDBD:-}" ] || targets+=(server/rankdbd)
	ninja -C "$build_dir" "${targets[@]}"
fi
for f in "$gen" "$load"; do
	[ -x "$f" ] || { echo "peers.sh: $f missing (build it, or drop --no-build)" >&2; exit 2; }
done
if has rankdb && [ ! -x "$rankdbd" ]; then
	echo "peers.sh: $rankdbd missing" >&2
	exit 2
fi

. "$(dirname "$0")/lib.sh"
bench_tmp rankdb-peers

# ---- helpers ----

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}
du_b() { if [ -e "$1" ]; then du -sb "$1" | cut -f1; else echo 0; fi; }
du_alloc() { if [ -e "$1" ]; then du -s --block-size=1 "$1" | cut -f1; else echo 0; fi; }
# http_code METHOD URL [curl args...]: the status code, 000 on connection failure
# Admin token of the benchmark's rankdbd (its checkpoint is the settle step).
rankdb_token=bench-$RANDOM$RANDOM

http_code() {
	local m=$1 u=$2
	shift 2
	curl -s -g -o /dev/null -w '%{http_code}' -X "$m" --max-time 60 "$@" "$u" || true
}
hwm_kb() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$1/status" 2>/dev/null || true; }
now() { date +%s.%N; }
since() { echo "$(now) $1" | awk '{ printf "%.1f", $1 - $2 }'; }

# wait_ready URL CODE LOG: polls until URL answers CODE (<= 60 s) while $pid lives
wait_ready() {
	for _ in $(seq 600); do
		kill -0 "$pid" 2>/dev/null || break
		[ "$(http_code GET "$1")" = "$2" ] && return 0
		sleep 0.1
	done
	echo "peers.sh: server (pid $pid) not ready at $1; its log:" >&2
	tail -n 30 "$3" >&2
	exit 1
}

# stop_server SIGNAL: stops $pid, waits; sets stop_s and server_rc
stop_server() {
	local t0 stopped=0
	t0=$(now)
	kill "-$1" "$pid" 2>/dev/null || true
	for _ in $(seq $((stop_timeout_s * 10))); do
		kill -0 "$pid" 2>/dev/null || { stopped=1; break; }
		sleep 0.1
	done
	server_rc=0
	if [ "$stopped" = 1 ]; then
		wait "$pid" || server_rc=$?
	else
		echo "peers.sh: pid $pid still running ${stop_timeout_s}s after SIG$1; killing it" >&2
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		server_rc=killed
	fi
	stop_s=$(since "$t0")
	pid=
}

# ---- the three servers: start_<sys> sets pid, port, data (dir to measure), log ----

start_rankdb() {
	data=$tmp/rankdb/data
	log=$tmp/rankdb/rankdbd.log
	mkdir -p "$data"
	rm -f "$tmp/rankdb/port"
	# shellcheck disable=SC2086 # RANKDBD_ARGS is a list of words on purpose
	"$rankdbd" --data-dir "$data" --http-port 0 --port-file "$tmp/rankdb/port" \
		--log-level warn --admin-token "$rankdb_token" ${RANKDBD_ARGS:-} >>"$log" 2>&1 &
	pid=$!
	for _ in $(seq 600); do
		[ -s "$tmp/rankdb/port" ] && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	port=$(tr -dc '0-9' <"$tmp/rankdb/port" 2>/dev/null || true)
	[ -n "$port" ] || { echo "peers.sh: rankdbd did not start" >&2; tail -n 30 "$log" >&2; exit 1; }
	wait_ready "http://127.0.0.1:$port/api/v1/jobs" 200 "$log"
}

start_vm() {
	data=$tmp/vm/data
	log=$tmp/vm/vm.log
	mkdir -p "$data"
	[ -n "${vm_port:-}" ] || vm_port=$(free_port)
	port=$vm_port
	# No dedup (-dedup.minScrapeInterval unset), no self-scrape, no result cache.
	"$vm_bin" -storageDataPath "$data" -httpListenAddr "127.0.0.1:$port" \
		-retentionPeriod 100y -search.disableCache -search.maxUniqueTimeseries 10000000 \
		-search.maxPointsPerTimeseries 1000000 -loggerLevel ERROR >>"$log" 2>&1 &
	pid=$!
	wait_ready "http://127.0.0.1:$port/health" 200 "$log"
}

influx_conf() {
	cat <<-EOF
	# generated by bench/peers.sh: everything local, in $tmp/influx
	reporting-disabled = true
	bind-address = "127.0.0.1:$2"
	[meta]
	  dir = "$1/meta"
	[data]
	  dir = "$1/data"
	  wal-dir = "$1/wal"
	  query-log-enabled = false
	  # Let a finished run settle: snapshot the cache to TSM and fully
	  # compact once writes stop (defaults 10m and 4h).
	  cache-snapshot-write-cold-duration = "2s"
	  compact-full-write-cold-duration = "5s"
	[coordinator]
	  max-select-point = 0
	  max-select-series = 0
	[retention]
	  enabled = false
	[monitor]
	  store-enabled = false
	[http]
	  enabled = true
	  bind-address = "127.0.0.1:$3"
	  auth-enabled = false
	  log-enabled = false
	  max-row-limit = 0
	[logging]
	  level = "warn"
	[subscriber]
	  enabled = false
	[[graphite]]
	  enabled = false
	[[collectd]]
	  enabled = false
	[[opentsdb]]
	  enabled = false
	[[udp]]
	  enabled = false
	[continuous_queries]
	  enabled = false
	EOF
}

start_influx() {
	data=$tmp/influx/db
	log=$tmp/influx/influxd.log
	mkdir -p "$data"
	if [ -z "${influx_port:-}" ]; then
		influx_port=$(free_port)
		influx_conf "$data" "$(free_port)" "$influx_port" >"$tmp/influx/influxdb.conf"
	fi
	port=$influx_port
	"$influx_bin" run -config "$tmp/influx/influxdb.conf" >>"$log" 2>&1 &
	pid=$!
	wait_ready "http://127.0.0.1:$port/ping" 204 "$log"
}

stop_signal() { case "$1" in vm) echo INT ;; *) echo TERM ;; esac; }

# settle DIR: waits (<= 120 s) until the files under DIR and their sizes stay
# unchanged for 7 s in a row (background flushes and compactions are done;
# rankdb deletes compacted-away segments 5 s after the compaction, so a
# shorter quiet spell measured them twice)
settle() {
	local prev="" cur same=0
	for _ in $(seq 240); do
		cur=$(find "$1" -type f -printf '%p %s\n' 2>/dev/null | sort | md5sum)
		if [ "$cur" = "$prev" ]; then
			same=$((same + 1))
			[ "$same" -ge 14 ] && return 0
		else
			same=0
		fi
		prev=$cur
		sleep 0.5
	done
	echo "peers.sh: $1 still changing after 120 s; measuring anyway" >&2
}

machine="$(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)),"
machine+=" $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo),"
machine+=" Linux $(uname -r)"
pkg_version() { dpkg-query -W -f '${Version}' "$1" 2>/dev/null || echo '?'; }
has vm && machine+=", victoria-metrics $(pkg_version victoria-metrics)"
has influx && machine+=", influxdb $(pkg_version influxdb)"
if has rankdb; then
	machine+=", rankdb $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')"
	git -C "$repo" diff --quiet 2>/dev/null || machine+="+dirty"
fi
load_failed=0

# ---- per-rank and many-connection shapes (ingest only) ----

# cpu_ticks PID: utime + stime of the process, in clock ticks
cpu_ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }

write_path() {
	case "$1" in
	influx)
		curl -s -f -o /dev/null -X POST "http://127.0.0.1:$port/query" \
			--data-urlencode "q=CREATE DATABASE bench"
		echo "/write?db=bench&precision=ns"
		;;
	*) echo "/write?precision=ns" ;;
	esac
}

if [ "$shape" = per-rank ]; then
	wl=(--size "$size")
	[ -z "$ranks" ] || wl+=(--ranks "$ranks")
	[ -z "$steps" ] || wl+=(--steps "$steps")
	echo "== per-rank ingest: ${wl[*]}, $connections connections, 1 record per POST, $runs run(s) per system"
	hz=$(getconf CLK_TCK)
	records=
	for r in $(seq "$runs"); do
		for s in ${systems//,/ }; do
			mkdir -p "$tmp/$s"
			rm -rf "$tmp/$s/data" "$tmp/$s/db"
			"start_$s"
			path=$(write_path "$s")
			c0=$(cpu_ticks "$pid")
			rc=0
			"$load" "${wl[@]}" --format lp --connections "$connections" --batch-records 1 \
				--host 127.0.0.1 --port "$port" --path "$path" >"$tmp/$s.load" || rc=$?
			c1=$(cpu_ticks "$pid")
			[ "$rc" = 0 ] || { load_failed=1; echo "peers.sh: loading $s failed (exit $rc)" >&2; }
			req=$(kv "$tmp/$s.load" bodies) # one record per body: requests
			records=$req
			rps=""
			if [ "$s" = rankdb ]; then
				m=$(curl -s "http://127.0.0.1:$port/metrics")
				rps=$(echo "$m" | awk '/^rankdb_wal_records_total /{ r = $2 } /^rankdb_wal_syncs_total /{ s = $2 } END { if (s) printf "%.2f", r / s }')
			fi
			secs=$(kv "$tmp/$s.load" seconds)
			{
				echo "points_per_s=$(kv "$tmp/$s.load" points_per_s)"
				echo "seconds=$secs"
				echo "errors=$(kv "$tmp/$s.load" errors)"
				echo "resends=$(kv "$tmp/$s.load" resends)"
				echo "requests_per_s=$(awk -v n="$req" -v t="$secs" 'BEGIN { if (t > 0) printf "%.0f", n / t }')"
				echo "cpu_us_per_req=$(awk -v a="$c0" -v b="$c1" -v n="$req" -v hz="$hz" 'BEGIN { if (n > 0) printf "%.1f", (b - a) * 1e6 / hz / n }')"
				echo "records_per_sync=$rps"
				echo "loader_cpu_us_per_req=$(kv "$tmp/$s.load" loader_cpu_us_per_req)"
				echo "loader_runq_s=$(kv "$tmp/$s.load" loader_runq_s)"
				echo "p50_ms=$(kv "$tmp/$s.load" p50_ms)"
				echo "p99_ms=$(kv "$tmp/$s.load" p99_ms)"
			} >"$tmp/$s.run$r.kv"
			echo "== $s run $r: $(kv "$tmp/$s.load" points_per_s) points/s, $(sed -n 's/cpu_us_per_req=//p' "$tmp/$s.run$r.kv") us CPU/request"
			stop_server "$(stop_signal "$s")"
		done
	done
	mkdir -p bench/out
	python3 bench/peers.py shape-table --shape per-rank --dir "$tmp" --systems "$systems" \
		--out "bench/out/results-per-rank-$connections.md" --connections "$connections" \
		--records "$records" --machine "$machine"
	[ "$load_failed" = 0 ] || { echo "peers.sh: some loads failed" >&2; exit 1; }
	exit 0
fi

if [ "$shape" = many-conns ]; then
	echo "== many connections: $connections, one step per second each, ${duration_s}s"
	for s in ${systems//,/ }; do
		mkdir -p "$tmp/$s"
		rm -rf "$tmp/$s/data" "$tmp/$s/db"
		"start_$s"
		path=$(write_path "$s")
		python3 bench/many_conns.py --port "$port" --pid "$pid" --connections "$connections" \
			--duration-s "$duration_s" --path "$path" --out "$tmp/$s.run1.kv" ||
			{ load_failed=1; echo "peers.sh: $s had errors at $connections connections" >&2; }
		stop_server "$(stop_signal "$s")"
	done
	mkdir -p bench/out
	python3 bench/peers.py shape-table --shape many-conns --dir "$tmp" --systems "$systems" \
		--out "bench/out/results-many-conns-$connections.md" --connections "$connections" \
		--duration-s "$duration_s" --machine "$machine"
	[ "$load_failed" = 0 ] || { echo "peers.sh: some runs had errors" >&2; exit 1; }
	exit 0
fi

# ---- workload ----

"$gen" --size "$size" --info >"$tmp/info"
job=$(sed -n 's/^job=//p' "$tmp/info")
load_args=(--size "$size" --format lp --connections "$connections"
	--batch-records "$batch_records")


echo "== workload: $(tr '\n' ' ' <"$tmp/info")"
echo "== loader ceiling (line protocol, in-process discard sink)"
"$load" "${load_args[@]}" --sink --repeat "$sink_repeat" | tee "$tmp/sink.out"
{
	echo "points_per_s=$(kv "$tmp/sink.out" points_per_s)"
	echo "body_bytes=$(($(kv "$tmp/sink.out" bytes) / sink_repeat))"
} >"$tmp/sink.kv"

rankdb_prefix=train.
load_failed=0

# ingest SYS: start, load, RSS, flush, du, stop, du; writes $tmp/SYS.kv
ingest() {
	local sys=$1 path fmt=lp note="" ingest_note="" du_before du_after
	mkdir -p "$tmp/$sys"
	echo "== $sys: starting"
	"start_$sys"
	case "$sys" in
	rankdb)
		path="/write?precision=ns"
		if [ "$(http_code POST "http://127.0.0.1:$port$path" --data-binary '')" = 404 ]; then
			# No line-protocol endpoint yet: load the same records as JSON so
			# disk, RSS and queries still get figures; ingest is n/a.
			ingest_note="n/a (endpoint missing)"
			path=/api/v1/write
			fmt=json
			rankdb_prefix=
			note="POST /write answered 404: loaded the same records as JSON via /api/v1/write"
			note+=" (metrics named loss, step_time, ...)"
		fi
		;;
	vm) path="/write?precision=ns" ;;
	influx)
		path="/write?db=bench&precision=ns"
		curl -s -f -o /dev/null -X POST "http://127.0.0.1:$port/query" \
			--data-urlencode "q=CREATE DATABASE bench"
		;;
	esac
	echo "== $sys: loading 127.0.0.1:$port$path"
	local rc=0
	"$load" "${load_args[@]}" --format "$fmt" --host 127.0.0.1 --port "$port" --path "$path" |
		tee "$tmp/$sys.load" || rc=${PIPESTATUS[0]}
	[ "$rc" = 0 ] || { load_failed=1; echo "peers.sh: loading $sys failed (exit $rc)" >&2; }
	if [ -n "$ingest_note" ]; then
		note+="; JSON ingest $(kv "$tmp/$sys.load" points_per_s) points/s"
	fi
	local hwm du_ingest t_settle
	hwm=$(hwm_kb "$pid")
	du_ingest=$(du_b "$data")
	# Settle: each system reaches the state it keeps at rest. rankdb seals
	# its head into chunks and drops the WAL at a checkpoint (asked for here;
	# on its own after checkpoint_interval_s) and merges small chunks in a
	# compaction (asked for here; on its own every retention_check_s); VM flushes and
	# merges on request; InfluxDB snapshots its cache to TSM and compacts once
	# the shard is write-cold (2 s / 5 s here).
	t_settle=$(now)
	case "$sys" in
	rankdb)
		# checkpoint (VM's force_flush), then compact: merge the small
		# chunks that frequent checkpoints leave (VM's force_merge); the
		# server's own background pass does this every retention_check_s.
		http_code POST "http://127.0.0.1:$port/api/v1/admin/checkpoint" \
			-H "Authorization: Bearer $rankdb_token" >/dev/null
		http_code POST "http://127.0.0.1:$port/api/v1/admin/compact" \
			-H "Authorization: Bearer $rankdb_token" >/dev/null
		settle "$data"
		;;
	vm)
		http_code GET "http://127.0.0.1:$port/internal/force_flush" >/dev/null
		http_code GET "http://127.0.0.1:$port/internal/force_merge" >/dev/null
		settle "$data/data"
		;;
	influx) sleep 6; settle "$data" ;;
	esac
	local settle_s
	settle_s=$(since "$t_settle")
	du_before=$(du_b "$data")
	local sig
	sig=$(stop_signal "$sys")
	echo "== $sys: stopping (SIG$sig, pid $pid)"
	stop_server "$sig"
	[ "$server_rc" = 0 ] || echo "peers.sh: $sys exited with status $server_rc" >&2
	du_after=$(du_b "$data")
	{
		for k in points points_per_s seconds errors retries resends bytes; do
			echo "$k=$(kv "$tmp/$sys.load" $k)"
		done
		echo "hwm_kb=$hwm"
		echo "du_ingest=$du_ingest"
		echo "du_before=$du_before"
		echo "settle_s=$settle_s"
		echo "du_after=$du_after"
		echo "du_alloc_after=$(du_alloc "$data")"
		echo "stop_s=$stop_s"
		echo "server_rc=$server_rc"
		echo "ingest_note=$ingest_note"
		echo "note=$note"
		if [ "$sys" = rankdb ]; then
			echo "chunks_index=$(($(du_b "$data/chunks") + $(du_b "$data/index")))"
		fi
	} >"$tmp/$sys.kv"
	echo "== $sys: $(kv "$tmp/$sys.load" points_per_s) points/s, disk $du_ingest ->" \
		"$du_before (settled ${settle_s}s) -> $du_after bytes (stopped ${stop_s}s)," \
		"VmHWM ${hwm:-?} kB"
}

# queries SYS: restart on its data, time the queries, stop
queries() {
	local sys=$1
	echo "== $sys: restarting on its data for the queries"
	"start_$sys"
	python3 bench/peers.py query --system "$sys" --port "$port" --info "$tmp/info" \
		--reps "$reps" --budget-s "$query_budget_s" --out "$tmp/$sys.q.json" --metric-prefix "$rankdb_prefix" || true
	stop_server "$(stop_signal "$sys")"
}

for s in ${systems//,/ }; do
	ingest "$s"
done
for s in ${systems//,/ }; do
	queries "$s"
done

mkdir -p bench/out
echo
python3 bench/peers.py table --size "$size" --dir "$tmp" --systems "$systems" \
	--out "bench/out/results-$size.md" --connections "$connections" \
	--batch-records "$batch_records" --reps "$reps" --machine "$machine"
echo "peers.sh: wrote bench/out/results-$size.md (job $job)"
[ "$load_failed" = 0 ] || { echo "peers.sh: some loads failed" >&2; exit 1; }
