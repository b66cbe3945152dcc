#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks three rules of the repository's sources (tools/check_format.sh runs it):
#  - a product file (any source outside tests) over 600 lines says why in its
#    first 5 lines, in a comment with "Over 600 lines: REASON";
#  - a line of tests/, bindings/python/tests/ or bindings/js/test/ that sleeps (sleep_for,
#    sleep_until, usleep, sleep(, setTimeout() says why in a comment on it, on the line
#    above or in the comment lines just above, with "poll", "input" or "why:" (the
#    convention: docs/testing.md);
#  - no two .cpp files compiled into one product target (the library: store/,
#    model/, actors/, adapters/; protocol/; server/; cluster/; client/;
#    console/; the tool: tools/, tools/adk/, tools/bench/) define the same
#    name at file scope in an anonymous namespace or as a static function:
#    the unity build compiles them together in batches, where a call could
#    otherwise resolve to another file's helper.
# Prints each file and line that breaks one and exits 1.
#
# usage: tools/check_rules.sh
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "") ;;
  -h|--help) sed -n 3,16p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
# Rule 3: file-local names unique within a unity-built target.
if ! python3 - "${all[@]}" <<'PY'
import collections, re, sys
groups = {'store': 'library', 'model': 'library', 'actors': 'library', 'adapters': 'library',
          'protocol': 'protocol', 'server': 'server', 'cluster': 'cluster', 'client': 'client',
          'console': 'console', 'tools': 'tool'}
skip = {'return', 'if', 'for', 'while', 'switch', 'operator', 'const', 'auto', 'void', 'bool',
        'int', 'std', 'namespace', 'static', 'inline', 'constexpr'}
decl = [re.compile(r'^(?:template\s*<.*>\s*)?(?:struct|class|enum(?:\s+class)?|union)\s+([A-Za-z_]\w*)'),
        re.compile(r'^using\s+([A-Za-z_]\w*)\s*='),
        re.compile(r'^(?:template\s*<.*>\s*)?(?:static\s+|inline\s+|constexpr\s+|const\s+)*'
                   r'[\w:<>,*&\s]*?(?<!::)\b([A-Za-z_]\w*)\s*(?:\(|=|\{|;|\[)')]
static_fn = re.compile(r'^static\s+[\w:<>,*&\s]*?\b([A-Za-z_]\w*)\s*\(')
names = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sys.argv[1:]:
    parts = f.split('/')
    if not f.endswith('.cpp') or parts[0] not in groups:
        continue
    if parts[0] == 'tools' and len(parts) > 2 and parts[1] not in ('adk', 'bench'):
        continue
    anon = raw = False
    for n, line in enumerate(open(f, encoding='utf-8', errors='replace'), 1):
        if raw:  # inside a raw string literal R"(...)"
            raw = ')"' not in line
            continue
        if 'R"(' in line and ')"' not in line.split('R"(', 1)[1]:
            raw = True
        if line.startswith('namespace ') and '=' in line:
            continue  # a namespace alias: the same alias twice is one
        if re.match(r'^namespace\s*\{', line):
            anon = True
            continue
        if anon and re.match(r'^\}\s*//\s*namespace', line):
            anon = False
            continue
        m = None
        if anon and line[:1].isalpha():
            m = next((x for x in (r.match(line) for r in decl) if x), None)
        elif not anon:
            m = static_fn.match(line)
        if m and m.group(1) not in skip and f'{f}:{n}' not in names[groups[parts[0]]][m.group(1)]:
            names[groups[parts[0]]][m.group(1)].append(f'{f}:{n}')
bad = False
for target, defs in names.items():
    for name, where in sorted(defs.items()):
        files = {w.rsplit(':', 1)[0] for w in where}
        if len(files) > 1:
            bad = True
            print(f"{', '.join(where)}: '{name}' is defined file-locally in {len(files)} files of "
                  f"the {target}'s unity build: give each its own name or share one definition")
sys.exit(1 if bad else 0)
PY
then
  bad=1
fi
if ((bad)); then
  echo "check_rules.sh: the rules above are broken (see docs/testing.md and the top of this script)" >&2
  exit 1
fi
