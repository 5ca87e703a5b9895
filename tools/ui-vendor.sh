#!/usr/bin/env bash
# Refreshes ui/vendor/ (the charting library compiled into rankdbd) from npm:
# `npm ci` of ui/package.json + ui/package-lock.json (an exact version and its
# sha512 integrity) in a temp dir, then copies uPlot's browser build, its CSS
# and its LICENSE into ui/vendor/. Run it after changing the pinned version;
# the build itself never touches the network (docs/UI.md, "Third-party code").
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d /tmp/rankdb-ui-vendor.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cp ui/package.json ui/package-lock.json "$tmp/"
(cd "$tmp" && npm ci --ignore-scripts --no-audit --no-fund >/dev/null)
src="$tmp/node_modules/uplot"
version=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$src/package.json")
cp "$src/dist/uPlot.iife.min.js" ui/vendor/uPlot.iife.min.js
cp "$src/dist/uPlot.min.css" ui/vendor/uPlot.min.css
cp "$src/LICENSE" ui/vendor/uPlot.LICENSE
echo "$version" > ui/vendor/uPlot.VERSION
echo "ui/vendor: uPlot $version"
