#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages agentstate builds with, when any is missing.
# Idempotent; needs root (or sudo) only when something must be installed.
set -euo pipefail
# libasio-dev and libssl-dev: the network server (server/: event loop, TLS); openssl:
# the CLI the TLS tests make their certificates and connect with. help2man (man
# pages), dpkg-dev (dpkg-shlibdeps), file and pkgconf: the install and .deb packaging
# and their tests (cmake/install.cmake, tests/package). libcli11-dev: the tool's command
# line (tools/cli.hpp; header-only). clang-format: the source style check
# (tools/check_format.sh, run by .ci/run).
packages=(g++ cmake make libcaf-dev liblmdb-dev liblmdb++-dev nlohmann-json3-dev
          doctest-dev lmdb-utils libsqlite3-dev libasio-dev libssl-dev openssl python3
          python3-pytest help2man dpkg-dev file pkgconf libcli11-dev clang-format)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
# bindings/js needs node and npm (any install; Debian's when there is none) and, for the
# sqlite3 native module its benchmark uses, python3 besides g++ and make.
command -v node >/dev/null 2>&1 || missing+=(nodejs libnode-dev)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
else
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
fi

# bindings/js: `npm ci` from the committed lock file, again only when the lock file
# changed since the last install.
js_dir="$(cd "$(dirname "$0")/.." && pwd)/bindings/js"
node_major="$(node -p 'process.versions.node.split(".")[0]')"
[ "$node_major" -ge 20 ] || echo "setup: warning: node $(node --version) is older than 20, which bindings/js needs" >&2
stamp="$js_dir/node_modules/.agentstate-lock-sha256"
want="$(sha256sum "$js_dir/package-lock.json" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: npm ci in bindings/js (builds the sqlite3 module from source: a few minutes)"
  # node-gyp reads the headers of the installed node instead of downloading them.
  if [ -z "${npm_config_nodedir:-}" ] && [ -f /usr/include/node/node.h ]; then
    export npm_config_nodedir=/usr
  fi
  (cd "$js_dir" && npm ci --no-audit --no-fund)
  echo "$want" > "$stamp"
else
  echo "setup: bindings/js node_modules up to date"
fi
