#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages agentstate builds with, when any is missing.
# Idempotent; needs root (or sudo) only when something must be installed.
#
#   tools/setup.sh          what the C++ build (library, tool, tests' executables) and
#                           `agentstate demo` need: README command 1
#   tools/setup.sh --all    also what the test suite and packaging need (README command 2):
#                           the tests' helpers, etcd, the Python and JS bindings' runtimes,
#                           node and `npm ci` in bindings/js, chromium and `npm ci` in
#                           tests/console/browser, help2man, the style checker
set -euo pipefail
all=0
case "${1:-}" in
  "") ;;
  --all) all=1 ;;
  -h|--help)
    sed -n '5,10s/^# \{0,1\}//p' "$0"; exit 0 ;;
  *) echo "setup: unknown argument '$1' (use --all or nothing; --help)" >&2; exit 2 ;;
esac

# The build: compiler, CMake, the engine's libraries (CAF, LMDB and lmdbxx,
# nlohmann_json), doctest (the test executables are configured by default), and the
# tool's: SQLite (ADK stores), Asio and OpenSSL (serve's network layer, TLS), CLI11,
# libcurl (the cluster's client of etcd), cpp-httplib and pkgconf (the web console).
packages=(g++ cmake make libcaf-dev liblmdb-dev liblmdb++-dev nlohmann-json3-dev
          doctest-dev libsqlite3-dev libasio-dev libssl-dev libcli11-dev libcurl4-openssl-dev
          libcpp-httplib-dev pkgconf)
if [ "$all" -eq 1 ]; then
  # The tests: lmdb-utils (mdb_stat/mdb_dump in the storage suites), openssl (the TLS
  # tests' certificates and client), python3 and python3-pytest (bindings/python),
  # mypy (bindings/python's type check), python3-venv, python3-pip and
  # python3-setuptools (bindings/python's offline install test), python3-pydantic
  # (bindings/python's ADK Session check), help2man (man pages), dpkg-dev, file and
  # pkgconf (install and .deb tests), lintian (package_deb_install), clang-format
  # (tools/check_format.sh), libsimdjson-dev (json_readers_bench, the JSON readers'
  # comparison), etcd-server and etcd-client (the cluster tier starts its own etcd),
  # chromium (the console's browser test).
  packages+=(lmdb-utils openssl python3 python3-pytest mypy python3-venv python3-pip
             python3-setuptools python3-pydantic help2man dpkg-dev file pkgconf
             lintian clang-format libsimdjson-dev etcd-server etcd-client chromium)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
if [ "$all" -eq 1 ]; then
  # bindings/js needs node and npm (any install; Debian's when there is none) and, for
  # the sqlite3 native module its benchmark uses, python3 besides g++ and make.
  command -v node >/dev/null 2>&1 || missing+=(nodejs libnode-dev)
  command -v npm >/dev/null 2>&1 || missing+=(npm)
fi
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
[ "$all" -eq 1 ] || exit 0

# bindings/js: `npm ci` from the committed lock file, again only when the lock file
# changed since the last install.
js_dir="$(cd "$(dirname "$0")/.." && pwd)/bindings/js"
node_major="$(node -p 'process.versions.node.split(".")[0]')"
[ "$node_major" -ge 20 ] || echo "setup: warning: node $(node --version) is older than 20, which bindings/js needs" >&2
stamp="$js_dir/node_modules/.agentstate-lock-sha256"
want="$(sha256sum "$js_dir/package-lock.json" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: npm ci in bindings/js (downloads its packages, builds the sqlite3 module)"
  # node-gyp reads the headers of the installed node instead of downloading them.
  if [ -z "${npm_config_nodedir:-}" ] && [ -f /usr/include/node/node.h ]; then
    export npm_config_nodedir=/usr
  fi
  # The sqlite3 module links Debian's libsqlite3 (libsqlite3-dev, installed above for the
  # tool) instead of compiling the SQLite it bundles (about a minute of one core);
  # node-gyp compiles the module's own files on two jobs.
  if [ -z "${GYP_DEFINES:-}" ] && [ -f /usr/include/sqlite3.h ]; then
    export GYP_DEFINES="sqlite=/usr"
  fi
  export JOBS="${JOBS:-2}"
  (cd "$js_dir" && npm ci --no-audit --no-fund)
  echo "$want" > "$stamp"
else
  echo "setup: bindings/js node_modules up to date"
fi

# tests/console/browser (the console's browser test, puppeteer-core on the system
# chromium): `npm ci` from its committed lock file, again only when it changed.
console_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/console/browser"
stamp="$console_dir/node_modules/.agentstate-lock-sha256"
want="$(sha256sum "$console_dir/package-lock.json" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: npm ci in tests/console/browser (puppeteer-core; no browser download)"
  (cd "$console_dir" && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund)
  echo "$want" > "$stamp"
else
  echo "setup: tests/console/browser node_modules up to date"
fi
