#!/usr/bin/env bash
# Installs what building and testing rankdb needs on Debian 12 (run as root,
# or with sudo available). Idempotent: a no-op when everything is present.
set -euo pipefail
pkgs=(build-essential meson ninja-build pkg-config clang-format
      liblmdb-dev liburing-dev libzstd-dev libmicrohttpd-dev libjansson-dev libxxhash-dev
      zlib1g-dev libcurl4-gnutls-dev python3 curl
      prometheus-alertmanager
      chromium fonts-dejavu-core # the dashboard's browser tests (tests/integration/test_ui.py)
      python3-venv python3-torch # clients/python tests and the DDP proof
      python3-influxdb # the real InfluxDB 1.x client against /ping and /query (tests/integration/test_newuser.py)
      libgnutls28-dev) # SHA-256, HMAC-SHA256 and the TLS certificate (common/rdb_sha256.c, common/rdb_tls.c, clients/c/rdbc_sign.c)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "installing: ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
