#!/usr/bin/env bash
# bench/faults.sh - the detection benchmark in one command: builds rankdbd,
# then bench/faults.py starts a real Alertmanager (Debian
# prometheus-alertmanager) and rankdbd on 127.0.0.1 in a fresh /tmp dir,
# streams a realistic training run into rankdbd with bench/faultgen.py, injects
# each fault the detectors cover one at a time, and measures the time from the
# faulty write's acknowledgement to the alert in GET /api/v1/alerts and at
# Alertmanager; then clean runs (64 and 512 ranks, 10 min each) that must raise
# no alert. Prints one table, also written to bench/out/faults-<time>.md/.json.
#
#   bench/faults.sh [--no-build] [faults.py options: --ranks N --faults a,b
#                   --clean 64:600,512:600 --tail-s 30 --keep]
#
# Takes about 55 minutes with the defaults (faults ~35, clean runs 20).
# Environment: BUILD_DIR (default build), RANKDBD (default
# $BUILD_DIR/server/rankdbd), RDB_ALERTMANAGER (default
# /usr/bin/prometheus-alertmanager). Exit 1 if any fault was missed, had a
# wrong label or another alert beside it, or a clean run raised an alert.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
build=1
if [ "${1:-}" = "--no-build" ]; then
	build=0
	shift
fi
build_dir=${BUILD_DIR:-build}
rankdbd=${RANKDBD:-$build_dir/server/rankdbd}
if [ "$build" = 1 ] && [ -z "${RANKDBD:-}" ]; then
	[ -d "$build_dir" ] || meson setup "$build_dir"
	ninja -C "$build_dir" server/rankdbd
fi
[ -x "$rankdbd" ] || { echo "faults.sh: $rankdbd missing" >&2; exit 2; }
am=${RDB_ALERTMANAGER:-/usr/bin/prometheus-alertmanager}
[ -x "$am" ] || { echo "faults.sh: $am missing (tools/install-deps.sh installs prometheus-alertmanager)" >&2; exit 2; }
exec python3 bench/faults.py --rankdbd "$rankdbd" "$@"
