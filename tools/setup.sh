#!/usr/bin/env bash
# Installs the Debian packages agentstate builds with, when any is missing.
# Idempotent; needs root (or sudo) only when something must be installed.
set -euo pipefail
packages=(g++ cmake make libcaf-dev liblmdb-dev liblmdb++-dev nlohmann-json3-dev
          doctest-dev lmdb-utils libsqlite3-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
  "${missing[@]}"
