#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks two rules of the repository's sources (tools/check_format.sh runs it):
#  - a product file (any source outside tests) over 600 lines says why in its
#    first 5 lines, in a comment with "Over 600 lines: REASON";
#  - a line of tests/, bindings/python/tests/ or bindings/js/test/ that sleeps (sleep_for,
#    sleep_until, usleep, sleep(, setTimeout() says why in a comment on it, on the line
#    above or in the comment lines just above, with "poll", "input" or "why:" (the
#    convention: docs/testing.md).
# Prints each file and line that breaks one and exits 1.
#
# usage: tools/check_rules.sh
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "") ;;
  -h|--help) sed -n 3,10p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "check_rules.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac

# The sources: the checkout's files (tracked or not ignored), or, outside a
# git checkout, those find sees outside build trees and node_modules.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -d '' all < <(git ls-files -z --cached --others --exclude-standard)
else
  mapfile -d '' all < <(find . -type d \( -name .git -o -name node_modules -o -name 'build*' \) \
    -prune -o -type f -print0 | sed -z 's|^\./||')
fi

# Not held to the sleep rule yet (drop each from here once it passes).
sleep_rule_pending=()

bad=0
for f in "${all[@]}"; do
  [[ -f "$f" ]] || continue
  case "$f" in
    *.cpp|*.hpp|*.h|*.py|*.sh|*.js|*.mjs|*.ts|*.cmake|CMakeLists.txt|*/CMakeLists.txt|.ci/*) ;;
    *) continue ;;
  esac
  case "$f" in
    tests/*|bindings/python/tests/*|bindings/js/test/*)
      for d in "${sleep_rule_pending[@]}"; do
        [[ "$f" == "$d"* ]] && continue 2
      done
      # Rule 2: a sleep says why (on its line or the comment lines above).
      out=$(awk '
        function is_comment(l) { return l ~ /^[ \t]*(\/\/|#)/ }
        function says_why(l) { return l ~ /(\/\/|#).*(poll|input|why:)/ }
        {
          if ($0 ~ /(sleep_for|sleep_until|usleep|setTimeout|(^|[^_a-zA-Z])sleep)[ \t]*\(/ && !is_comment($0)) {
            if (!says_why($0) && !says_why(prev) && !says_why(block))
              printf "%s:%d: a sleep without its reason (a comment with poll, input or why:)\n", FILENAME, FNR
          }
          # block: the comment lines that end just above the next line.
          block = is_comment($0) ? block " " $0 : ""
          prev = $0
        }' "$f")
      if [[ -n "$out" ]]; then
        echo "$out"
        bad=1
      fi
      ;;
    */test/*|*/tests/*) ;;
    *)
      # Rule 1: a long product file says why at its top.
      n=$(wc -l <"$f")
      if ((n > 600)) && ! head -n 5 "$f" | grep -q 'Over 600 lines: '; then
        echo "$f: $n lines without 'Over 600 lines: REASON' in its first 5 lines"
        bad=1
      fi
      ;;
  esac
done
if ((bad)); then
  echo "check_rules.sh: the rules above are broken (see docs/testing.md and the top of this script)" >&2
  exit 1
fi
