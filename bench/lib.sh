# lib.sh - shell helpers shared by bench/run.sh and bench/peers.sh (sourced).
#
# bench_tmp PREFIX: makes $tmp (a fresh directory under /tmp) and installs an
# EXIT trap that kills the server whose PID is in $pid (only that PID, never
# by name) and removes $tmp unless $keep is 1.

bench_tmp() {
	tmp=$(mktemp -d "/tmp/$1.XXXXXX")
	pid=
	trap bench_cleanup EXIT
	trap 'exit 130' INT TERM
}

bench_cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	if [ "${keep:-0}" = 1 ]; then
		echo "$(basename "$0"): kept $tmp"
	else
		rm -rf "$tmp"
	fi
}

# kv FILE KEY: the value of key=value on the "result" line of an rdb-load output
kv() {
	awk -v k="$2" '$1 == "result" {
		for (i = 2; i <= NF; i++) {
			n = index($i, "=")
			if (substr($i, 1, n - 1) == k)
				v = substr($i, n + 1)
		}
	} END { print v }' "$1"
}
