#!/usr/bin/env bash
# checksrc.sh - the source rules CI keeps (in the spirit of curl's checksrc):
#
#   1. banned functions: sprintf, vsprintf, strcpy, strcat, atoi, atol, atoll,
#      strtok, gets (use snprintf, rdb_buf, strtoll with checks), and bare
#      qsort (use rdb_sort: qsort(NULL, 0) is undefined) - in the
#      product's code (tests may build fixtures as they like);
#   2. symbol prefixes: every global symbol a module's static library defines
#      carries its module prefix, or one of the module's internal sub-prefixes
#      for symbols shared between its own files (hidden outside the library):
#      storage sti_ (engine internals), ix_ (index tables),
#      evh_/evc_/eve_/evf_/ev_rec_ (events);
#      ingest ijs_ (JSON lexer), ilp_ (line protocol); detect deti_ (engine
#      internals); server gf_ (Grafana), wl_ (the write loop)
#      (nm on the built libraries);
#   3. storage layering: a storage sub-module includes only headers of lower
#      ones (io < base < wal, index < chunk < api < events < state <
#      lifecycle (segfiles, flushq, rollup < merge < compact < lifecycle.c)
#      < engine < top; docs/ARCHITECTURE.md), lmdb.h only in
#      storage/index/ix_int.h and that header only in storage/index/, and
#      nothing outside storage/ includes its internal headers; the objects of
#      a lower sub-module reference no symbol a higher one defines (nm), so
#      no call goes back up;
#   4. clang-format: with --format, every C file is formatted as .clang-format
#      says (clang-format --dry-run -Werror);
#   5. a size report: files over 1,000 lines and functions over 80 lines
#      (printed, not failed: a signal for review).
#
# Usage: tools/checksrc.sh BUILD_DIR [--format]
# Exit 1 when a rule (1-4) is broken; prints "checksrc: ok" otherwise.
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
# qsort(NULL, 0, ...) is undefined (UBSan aborts): sorts go through rdb_sort.
# shellcheck disable=SC2086
hits=$(grep -rnE '\bqsort[[:space:]]*\(' --include='*.c' --include='*.h' $product 2>/dev/null |
	grep -vE '^(common/rdb_sort\.h|clients/c/)' || true)
if [ -n "$hits" ]; then
	echo "$hits"
	echo "checksrc: bare qsort above (use rdb_sort from common/rdb_sort.h: defined for n == 0)"
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
check_lib "$build/server/librdb_server.a" 'srv_|gf_|wl_'

echo "== storage layering"
# The rank of a storage file or header (path relative to the tree root):
# lower ranks never include or call higher ones; same-rank files of one
# group (a folder, or the top-level group named) may use each other.
sto_rank() {
	case $1 in
	storage/io/*) echo "0 io" ;;
	storage/format.h | storage/series.[ch]) echo "10 base" ;;
	storage/wal/*) echo "20 wal" ;;
	storage/index/*) echo "20 index" ;;
	storage/chunk/*) echo "30 chunk" ;;
	storage/sto.h | storage/admin.h | storage/rebuild.h) echo "40 api" ;;
	storage/events/*) echo "50 events" ;;
	storage/store_int.h) echo "60 state" ;;
	storage/jobmeta/*) echo "65 jobmeta" ;;
	# lifecycle/ inside: lifecycle.c -> compact.c -> merge.c -> the rest
	storage/lifecycle/merge.c) echo "71 merge" ;;
	storage/lifecycle/compact.c) echo "72 compact" ;;
	storage/lifecycle/lifecycle.c) echo "73 life" ;;
	storage/lifecycle/*) echo "70 lifecycle" ;;
	storage/engine/*) echo "80 engine" ;;
	storage/admin.c | storage/rebuild.c) echo "90 top" ;;
	*) echo "? unknown" ;;
	esac
}
for f in $(git ls-files storage | grep -E '\.(c|h)$'); do
	read -r fr fg <<<"$(sto_rank "$f")"
	if [ "$fr" = "?" ]; then
		echo "checksrc: $f has no rank in tools/checksrc.sh sto_rank (add it to its layer)"
		fail=1
		continue
	fi
	for h in $(sed -nE 's/^#include "(storage\/[^"]+)".*/\1/p' "$f"); do
		read -r hr hg <<<"$(sto_rank "$h")"
		if [ "$hr" = "?" ] || [ "$hr" -gt "$fr" ] || { [ "$hr" -eq "$fr" ] && [ "$hg" != "$fg" ]; }; then
			echo "checksrc: $f ($fg) includes $h ($hg): storage dependencies point down only"
			fail=1
		fi
	done
done
# shellcheck disable=SC2086
bad=$(grep -rlE '#include <lmdb\.h>' --include='*.c' --include='*.h' $product tests bench |
	grep -vx 'storage/index/ix_int.h' || true)
# shellcheck disable=SC2086
bad="$bad$(grep -rlE '#include "storage/index/ix_int\.h"' --include='*.c' --include='*.h' $product tests bench |
	grep -v '^storage/index/' || true)"
# shellcheck disable=SC2086
bad="$bad$(grep -rlE '#include "storage/(store_int\.h|engine/|lifecycle/)' --include='*.c' --include='*.h' \
	$product tests bench | grep -v '^storage/' || true)"
if [ -n "$bad" ]; then
	echo "$bad" | sed 's/^/  /'
	echo "checksrc: files above include an internal storage header (or lmdb.h outside storage/index/ix_int.h)"
	fail=1
fi
# Calls: an object of a lower sub-module must not reference a symbol that a
# higher one defines (a declaration alone would let a call go back up).
objdir="$build/storage/librdb_storage.a.p"
if [ -d "$objdir" ]; then
	declare -A sym_rank=() sym_grp=()
	for o in "$objdir"/*.o; do
		src=$(basename "$o" .o)	   # e.g. lifecycle_compact.c
		case $src in
		io_* | wal_* | index_* | chunk_* | events_* | lifecycle_* | engine_* | jobmeta_*)
			src="storage/${src%%_*}/${src#*_}"
			;;
		*) src="storage/$src" ;;
		esac
		read -r r g <<<"$(sto_rank "$src")"
		for sym in $(nm --defined-only "$o" 2>/dev/null | awk '$2 ~ /[TDBR]/ {print $3}'); do
			sym_rank[$sym]=$r
			sym_grp[$sym]=$g
		done
		echo "$o $r $g"
	done >"$build/checksrc-ranks.txt"
	while read -r o r g; do
		for sym in $(nm --undefined-only "$o" 2>/dev/null | awk '{print $NF}'); do
			sr=${sym_rank[$sym]:-}
			[ -n "$sr" ] || continue
			if [ "$sr" -gt "$r" ] || { [ "$sr" -eq "$r" ] && [ "${sym_grp[$sym]}" != "$g" ]; }; then
				echo "checksrc: $(basename "$o") ($g) calls $sym of ${sym_grp[$sym]}: storage calls point down only"
				fail=1
			fi
		done
	done <"$build/checksrc-ranks.txt"
fi

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
