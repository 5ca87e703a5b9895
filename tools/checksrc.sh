#!/usr/bin/env bash
# checksrc.sh - the source rules CI keeps (in the spirit of curl's checksrc):
#
#   1. banned functions: sprintf, vsprintf, strcpy, strcat, atoi, atol, atoll,
#      strtok, gets (use snprintf, rdb_buf, strtoll with checks) - in the
#      product's code (tests may build fixtures as they like);
#   2. symbol prefixes: every global symbol a module's static library defines
#      carries its module prefix, or one of the module's internal sub-prefixes
#      for symbols shared between its own files (hidden outside the library):
#      storage sti_ (engine internals), ix_ (index tables),
#      evh_/evc_/eve_/evf_/ev_rec_ (events);
#      ingest ijs_ (JSON lexer), ilp_ (line protocol); detect deti_ (engine
#      internals); server gf_ (Grafana)
#      (nm on the built libraries);
#   3. clang-format: with --format, every C file is formatted as .clang-format
#      says (clang-format --dry-run -Werror);
#   4. a size report: files over 1,000 lines and functions over 80 lines
#      (printed, not failed: a signal for review).
#
# Usage: tools/checksrc.sh BUILD_DIR [--format]
# Exit 1 when a rule (1-3) is broken; prints "checksrc: ok" otherwise.
set -u
cd "$(dirname "$0")/.."
build=${1:-build}
fail=0
product="common model storage ingest query detect server tools clients/c"

echo "== banned functions"
# shellcheck disable=SC2086
hits=$(grep -rnE '\b(sprintf|vsprintf|strcpy|strcat|atoi|atol|atoll|strtok|gets)[[:space:]]*\(' \
	--include='*.c' --include='*.h' $product 2>/dev/null | grep -vE '\b(snprintf|vsnprintf)\(' || true)
if [ -n "$hits" ]; then
	echo "$hits"
	echo "checksrc: banned functions above (use snprintf, rdb_buf_*, strtoll with checks)"
	fail=1
fi

echo "== symbol prefixes"
# library file : allowed prefixes (regex)
check_lib() {
	local lib=$1 re=$2 dir
	dir=$(basename "$(dirname "$lib")")
	[ -f "$dir/meson.build" ] || return 0 # the module does not exist (yet)
	[ -f "$lib" ] || { echo "checksrc: $lib not built"; fail=1; return; }
	local bad
	bad=$(nm -g --defined-only "$lib" 2>/dev/null | awk 'NF==3 && $2 ~ /[TDBR]/ {print $3}' |
		grep -vE "^($re)" || true)
	if [ -n "$bad" ]; then
		echo "$lib defines symbols without its prefix ($re):"
		echo "$bad" | sed 's/^/  /'
		fail=1
	fi
}
check_lib "$build/common/librdb_common.a" 'rdb_'
check_lib "$build/model/librdb_model.a" 'mdl_'
check_lib "$build/storage/librdb_storage.a" 'sto_|sti_|ix_|evh_|evc_|eve_|evf_|ev_rec_'
check_lib "$build/ingest/librdb_ingest.a" 'ing_|ijs_|ilp_'
check_lib "$build/ingest/librdb_pipeline.a" 'ing_'
check_lib "$build/query/librdb_query.a" 'qry_'
check_lib "$build/detect/librdb_detect.a" 'det_|deti_'
check_lib "$build/detect/librdb_detect_service.a" 'det_'
check_lib "$build/server/librdb_server.a" 'srv_|gf_'

if [ "${2:-}" = "--format" ]; then
	echo "== clang-format"
	# shellcheck disable=SC2086
	files=$(git ls-files $product tests bench | grep -E '\.(c|h)$')
	# shellcheck disable=SC2086
	if ! clang-format --dry-run -Werror $files 2>"$build/clang-format.log"; then
		head -40 "$build/clang-format.log"
		echo "checksrc: files above are not formatted; run: clang-format -i <file>"
		fail=1
	fi
fi

echo "== size report (not a failure)"
# shellcheck disable=SC2086
for f in $(git ls-files $product | grep -E '\.c$'); do
	n=$(wc -l <"$f")
	[ "$n" -gt 1000 ] && echo "  file $f: $n lines"
	awk -v f="$f" '
		/^[a-z].*\(/ && !/;[[:space:]]*$/ { name = $0; start = NR }
		/^}/ && start { if (NR - start > 80) printf "  function %s:%d: %d lines\n", f, start, NR - start; start = 0 }
	' "$f"
done

if [ "$fail" -ne 0 ]; then
	echo "checksrc: FAILED"
	exit 1
fi
echo "checksrc: ok"
