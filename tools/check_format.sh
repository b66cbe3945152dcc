#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks that every C++ source of the repository is formatted as .clang-format
# says (clang-format from tools/setup.sh), then tools/check_rules.sh. Prints the
# files that are not and exits 1; `tools/check_format.sh --fix` formats them in place.
#
# usage: tools/check_format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "") mode=(--dry-run --Werror) ;;
  --fix) mode=(-i) ;;
  -h|--help) sed -n 3,7p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "check_format.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac
command -v clang-format >/dev/null || { echo "check_format.sh: clang-format not found: run tools/setup.sh --all" >&2; exit 1; }
mapfile -d '' files < <(find actors adapters client cluster console examples include model protocol server store tests tools \
  \( -path tests/package/consumer/build -o -name node_modules \) -prune -o \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \) -print0)
if ! clang-format "${mode[@]}" "${files[@]}"; then
  echo "check_format.sh: the files above differ from .clang-format; run tools/check_format.sh --fix" >&2
  exit 1
fi
# The rules of the sources that are not layout (long files, sleeps in tests).
tools/check_rules.sh
