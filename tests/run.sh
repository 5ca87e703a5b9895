#!/usr/bin/env bash
# Builds rankdb twice (release-like, and with AddressSanitizer +
# UndefinedBehaviorSanitizer) and runs every test against both builds:
# unit tests and fuzz-corpus replays (meson test), then the integration
# suite against the real rankdbd, and the client tests (tests/clients). Ends
# with the line "N passed, N failed".
#
#   tests/run.sh            everything
#   RDB_SKIP_SAN=1 tests/run.sh   skip the sanitizer build (quick local runs)
#
# The release-like build also runs the unit tests and the durability suite a
# second time with io_uring off (the pwritev/fdatasync fallback), and the
# HTTP and ingest integration tests with the write loop off.
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
passed=0
failed=0
export RDB_TEST_TMP=${RDB_TEST_TMP:-$(mktemp -d /tmp/rankdb-tests.XXXXXX)}
mkdir -p "$RDB_TEST_TMP" # a given RDB_TEST_TMP may not exist yet: tee needs it

count_meson() { # build dir -> adds its meson test results to the totals
	local log="$1/meson-logs/testlog.json"
	[ -f "$log" ] || { failed=$((failed + 1)); return; }
	local ok bad
	ok=$(grep -c '"result": "OK"' "$log")
	bad=$(grep -c -E '"result": "(FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS)"' "$log")
	passed=$((passed + ok))
	failed=$((failed + bad))
}

count_integration() { # log file -> adds the integration results
	local line
	line=$(grep -E '^integration: [0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
	if [ -z "$line" ]; then
		failed=$((failed + 1))
		return
	fi
	passed=$((passed + $(echo "$line" | awk '{print $2}')))
	failed=$((failed + $(echo "$line" | awk '{print $4}')))
}

run_build() { # name, meson args...
	local dir=$1
	shift
	echo "=== build $dir ($*)"
	if [ ! -f "$dir/build.ninja" ]; then
		meson setup "$dir" "$@" >"$RDB_TEST_TMP/$dir-setup.log" 2>&1 ||
			{ cat "$RDB_TEST_TMP/$dir-setup.log"; failed=$((failed + 1)); return 1; }
	fi
	ninja -C "$dir" || { failed=$((failed + 1)); return 1; }
	echo "=== unit and fuzz-replay tests ($dir)"
	meson test -C "$dir" --print-errorlogs --num-processes 2
	count_meson "$dir"
	echo "=== integration tests ($dir)"
	python3 tests/integration/run.py --bin "$root/$dir/server/rankdbd" -j 2 \
		2>&1 | tee "$RDB_TEST_TMP/$dir-integration.log"
	count_integration "$RDB_TEST_TMP/$dir-integration.log"
}

# The pwritev/fdatasync fallback of storage/io/uring.c (what runs where io_uring
# is forbidden): the unit tests and the durability suite again with it.
run_fallback() {
	echo "=== io_uring fallback pass (RANKDB_IO_URING=off): unit tests, durability suite"
	RANKDB_IO_URING=off meson test -C build --suite unit --print-errorlogs --num-processes 2
	count_meson build
	RANKDB_IO_URING=off python3 tests/integration/run.py --bin "$root/build/server/rankdbd" \
		-j 2 -k test_durability 2>&1 | tee "$RDB_TEST_TMP/fallback-integration.log"
	count_integration "$RDB_TEST_TMP/fallback-integration.log"
}

# The HTTP front end that is not the default (http_write_loop = on is; see
# server/wloop.c): the HTTP and ingest integration tests again with
# libmicrohttpd serving everything.
run_other_front_end() {
	echo "=== HTTP and ingest tests with the write loop off (run.py --server-flags)"
	local k
	for k in test_ingest test_parked test_errors test_security test_reliability test_http_edges; do
		[ -f "tests/integration/$k.py" ] || continue
		python3 tests/integration/run.py --server-flags "--http-write-loop off" \
			--bin "$root/build/server/rankdbd" -j 2 -k "$k" 2>&1 |
			tee "$RDB_TEST_TMP/loop-off-$k.log"
		count_integration "$RDB_TEST_TMP/loop-off-$k.log"
	done
}

# Source rules (tools/checksrc.sh: banned functions, symbol prefixes,
# clang-format, size report) and docs generated from code (the
# configuration reference).
run_checks() {
	echo "=== source checks"
	if tools/checksrc.sh build --format; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
	if python3 tools/gen-config-doc.py --check; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
	fi
	# What users and bench/ build: a release (-O3) build sees warnings the
	# -O2 and debug builds do not (-Wformat-truncation, maybe-uninitialized),
	# and -Werror turns them into a failed build.
	echo "=== release build (-Dbuildtype=release) of the programs and the client library"
	if { [ -d build-rel ] || meson setup build-rel -Dbuildtype=release \
		>"$RDB_TEST_TMP/build-rel-setup.log" 2>&1; } &&
		ninja -C build-rel server/rankdbd tools/rankctl clients/c/librdbc.so.0.1.0 \
			bench/rdb-gen bench/rdb-load >"$RDB_TEST_TMP/build-rel.log" 2>&1; then
		passed=$((passed + 1))
	else
		tail -n 40 "$RDB_TEST_TMP/build-rel-setup.log" "$RDB_TEST_TMP/build-rel.log" 2>/dev/null
		failed=$((failed + 1))
	fi
}

run_build build && run_fallback && run_other_front_end && run_checks

# Client tests (clients/python against a fake server, and the PyTorch DDP
# proof against the real rankdbd), once, with the normal build. The C
# client's tests are meson tests and run above with each build.
echo "=== client tests (tests/clients)"
python3 tests/clients/run.py --bin "$root/build/server/rankdbd" -j 2 \
	2>&1 | tee "$RDB_TEST_TMP/clients.log"
count_integration "$RDB_TEST_TMP/clients.log"
if [ -z "${RDB_SKIP_SAN:-}" ]; then
	export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
	export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
	run_build build-san -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
