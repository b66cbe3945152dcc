#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The package checks (registered by tests/CMakeLists.txt): the installed package, the
# .deb and add_subdirectory, each used by the consumer project in tests/package/consumer
# the way a host project would, out of the source tree, against a real LMDB store.
#
# usage: package_test.sh MODE BUILD_DIR SOURCE_DIR VERSION WORK_DIR CXX
#   install              cmake --install BUILD_DIR into WORK_DIR/prefix, then build the
#                        consumer with find_package and with pkg-config, and run them
#   deb                  cpack: the three Debian packages (agentstate, libagentstate-dev,
#                        agentstate-dbgsym), their names, fields, Depends, files, control
#                        files, copyright, changelog and man pages; the tool's hardening
#                        (PIE, RELRO, BIND_NOW, fortified functions, stack protector) and
#                        its debug symbols under its build-id; dpkg -x them into
#                        WORK_DIR/root, run its agentstate --version and build and run the
#                        consumer against it
#   deb-install          cpack, lintian (any error, or any hardening tag, fails), dpkg
#                        --root install into a
#                        fresh root made here, then the installed tool (--version, demo,
#                        serve started the way agentstate.service starts it, its reload
#                        signal), systemd-analyze verify of the unit, the consumer built
#                        against the installed libagentstate-dev alone, and a purge
#   subdirectory-configure
#                        configure the consumer with add_subdirectory(SOURCE_DIR): the
#                        consumer's CMakeLists fails when agentstate leaks settings
#   subdirectory-build   the same, then build and run the consumer (compiles the engine)
# WORK_DIR is emptied first and left for inspection. Exit 0 when every check holds.
set -euo pipefail
mode="$1" build="$2" src="$3" version="$4" work="$5" cxx="$6"
consumer_src="$src/tests/package/consumer"
rm -rf "$work"
mkdir -p "$work"

fail() { echo "package_test($mode): $*" >&2; exit 1; }
step() { echo "== $*"; }

# Builds the consumer project in WORK_DIR/$1 with the remaining cmake arguments and
# runs what it built (targets: consumer, and caf_consumer unless NO_CAF=1).
cmake_consumer() {
  local dir="$work/$1"; shift
  local targets=(consumer)
  [ "${NO_CAF:-0}" = 1 ] || targets+=(caf_consumer)
  cmake -S "$consumer_src" -B "$dir" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON -DCMAKE_CXX_COMPILER="$cxx" "$@" \
        > "$dir.configure.log" 2>&1 || { cat "$dir.configure.log" >&2; fail "configure failed"; }
  cmake --build "$dir" -j2 --target "${targets[@]}" > "$dir.build.log" 2>&1 \
    || { cat "$dir.build.log" >&2; fail "consumer build failed"; }
  "$dir/consumer" "$work/store-$(basename "$dir")" "$version" || fail "consumer failed"
  if [ "${NO_CAF:-0}" != 1 ]; then
    "$dir/caf_consumer" "$work/store-caf-$(basename "$dir")" || fail "caf_consumer failed"
  fi
}

# Compiles consumer.cpp with only what `pkg-config agentstate` gives for the package
# installed under $1 (its pkgconfig dir on PKG_CONFIG_PATH), and runs it.
pkgconfig_consumer() {
  local prefix="$1" pcdir
  pcdir="$(dirname "$(find "$prefix" -name agentstate.pc -path '*/pkgconfig/*' | head -1)")"
  [ -f "$pcdir/agentstate.pc" ] || fail "no agentstate.pc under $prefix"
  local pc=(env PKG_CONFIG_PATH="$pcdir" pkg-config)
  [ "$("${pc[@]}" --modversion agentstate)" = "$version" ] || fail "pkg-config --modversion"
  # The file finds its prefix from its own location (relocatable).
  local pc_prefix
  pc_prefix="$("${pc[@]}" --variable=prefix agentstate)"
  [ "$(realpath "$pc_prefix")" = "$(realpath "$prefix")" ] \
    || fail "pkg-config prefix $pc_prefix is not $prefix"
  local flags
  flags="$("${pc[@]}" --cflags --libs agentstate)"
  # shellcheck disable=SC2086 # the flags are words
  "$cxx" -std=c++17 -O1 "$consumer_src/consumer.cpp" -o "$work/consumer-pc" $flags \
    || fail "compiling with pkg-config flags failed: $flags"
  "$work/consumer-pc" "$work/store-pc" "$version" || fail "pkg-config consumer failed"
}

# Builds the Debian packages from BUILD_DIR into WORK_DIR/cpack; sets deb_version,
# multiarch, tool_deb, dev_deb and dbgsym_deb.
build_debs() {
  step "cpack (the Debian packages)"
  (cd "$build" && cpack -G DEB -B "$work/cpack" > "$work/cpack.log" 2>&1) \
    || { cat "$work/cpack.log" >&2; fail "cpack failed"; }
  deb_version="$(dpkg-parsechangelog -l "$src/packaging/changelog" -S Version)"
  [ "${deb_version%-*}" = "$version" ] \
    || fail "packaging/changelog's newest entry is $deb_version, the project is $version"
  multiarch="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null)"
  local arch
  arch="$(dpkg --print-architecture)"
  tool_deb="$work/cpack/agentstate_${deb_version}_${arch}.deb"
  dev_deb="$work/cpack/libagentstate-dev_${deb_version}_${arch}.deb"
  dbgsym_deb="$work/cpack/agentstate-dbgsym_${deb_version}_${arch}.deb"
  local made want
  made="$(cd "$work/cpack" && find . -maxdepth 1 -name '*.deb' | sed 's|^\./||' | LC_ALL=C sort | tr '\n' ' ')"
  want="$(printf '%s\n' "$tool_deb" "$dev_deb" "$dbgsym_deb" | xargs -n1 basename | LC_ALL=C sort | tr '\n' ' ')"
  [ "$made" = "$want" ] || fail "cpack made '$made', not $want"
}

# Fails unless the Depends of .deb $1 names every package in $2 (a list).
depends_on() {
  local depends
  depends="$(dpkg-deb -f "$1" Depends)"
  echo "$(basename "$1") Depends: $depends"
  for want in $2; do
    case ", $depends" in *", $want"*) ;; *) fail "$(basename "$1") Depends lacks $want" ;; esac
  done
}

# The regular files and links of .deb $1, one absolute path a line.
deb_files() { dpkg-deb -c "$1" | awk '$1 !~ /^d/ {print $6}' | sed 's|^\./|/|'; }

# Fails unless every path of .deb $1 starts with one of the prefixes in $2 and each
# path in $3 is there.
deb_layout() {
  local files
  files="$(deb_files "$1")"
  local path prefix ok
  while IFS= read -r path; do
    ok=0
    for prefix in $2; do
      case "$path" in "$prefix"*) ok=1 ;; esac
    done
    [ "$ok" = 1 ] || fail "$(basename "$1") holds $path (outside $2)"
  done <<< "$files"
  for path in $3; do
    grep -qxF "$path" <<< "$files" || fail "$(basename "$1") lacks $path"
  done
}

case "$mode" in
install)
  prefix="$work/prefix"
  step "cmake --install $build --prefix $prefix"
  cmake --install "$build" --prefix "$prefix" > "$work/install.log" \
    || { cat "$work/install.log" >&2; fail "cmake --install failed"; }
  [ "$("$prefix/bin/agentstate" --version)" = "agentstate $version" ] \
    || fail "installed agentstate --version"
  [ -f "$prefix/include/agentstate/version.hpp" ] || fail "version.hpp not installed"
  # The Debian packages' own files (unit, /etc/default, their docs) are not installed, and
  # nothing lands outside the prefix.
  outside="$(sed -n 's/^-- \(Installing\|Up-to-date\): //p' "$work/install.log" | grep -v "^$prefix/" || true)"
  [ -z "$outside" ] || fail "installed outside $prefix: $outside"
  for deb_only in lib/systemd share/doc/libagentstate-dev share/doc/agentstate/copyright; do
    [ ! -e "$prefix/$deb_only" ] || fail "cmake --install installed $deb_only (Debian packages only)"
  done
  [ -f "$prefix/share/man/man1/agentstate-serve.1.gz" ] || fail "man pages not installed"
  # Test-only code and internal trees stay out of the install.
  if find "$prefix" \( -name '*testing*' -o -name 'fault_kv*' -o -path '*/store/*' \
          -o -path '*/actors/*' -o -name '*protocol*.a' \) | grep -q .; then
    fail "internal or test-only files installed: $(find "$prefix" -name '*testing*' -o -name 'fault_kv*')"
  fi
  step "find_package(agentstate) with CMAKE_PREFIX_PATH=$prefix"
  cmake_consumer find_package -DCMAKE_PREFIX_PATH="$prefix"
  grep -q "^agentstate_DIR:PATH=$prefix/" "$work/find_package/CMakeCache.txt" \
    || fail "find_package did not use the installed package"
  step "pkg-config agentstate"
  pkgconfig_consumer "$prefix"
  ;;
deb)
  build_debs
  for pkg_deb in "agentstate $tool_deb" "libagentstate-dev $dev_deb" \
                 "agentstate-dbgsym $dbgsym_deb"; do
    fields="$(dpkg-deb -f "${pkg_deb#* }" Package Version Source | tr '\n' ' ')"
    [ "$fields" = "Package: ${pkg_deb%% *} Version: $deb_version Source: agentstate " ] \
      || fail "$(basename "${pkg_deb#* }"): $fields"
  done
  # The tool's shared libraries (dpkg-shlibdeps; names matched by prefix, as sonames
  # and t64 suffixes vary between releases) and adduser (its postinst); what a consumer
  # of the static library compiles and links against.
  depends_on "$tool_deb" "adduser libc6 libstdc++6 libcaf-core liblmdb0 libsqlite3 libssl libcurl"
  depends_on "$dev_deb" "nlohmann-json3-dev libcaf-dev liblmdb-dev"
  [ "$(dpkg-deb -f "$dbgsym_deb" Depends)" = "agentstate (= $deb_version)" ] \
    || fail "agentstate-dbgsym Depends: $(dpkg-deb -f "$dbgsym_deb" Depends)"
  [ "$(dpkg-deb -f "$dbgsym_deb" Section)" = debug ] || fail "agentstate-dbgsym is not in debug"
  lib="/usr/lib/$multiarch"
  deb_layout "$tool_deb" "/usr/bin/ /usr/share/man/man1/ /usr/share/doc/agentstate/ \
/usr/lib/systemd/system/ /etc/default/" "/usr/bin/agentstate \
/usr/lib/systemd/system/agentstate.service /etc/default/agentstate \
/usr/share/doc/agentstate/copyright /usr/share/doc/agentstate/changelog.Debian.gz"
  deb_layout "$dev_deb" "/usr/include/agentstate/ $lib/ /usr/share/doc/libagentstate-dev/" \
    "$lib/libagentstate.a $lib/cmake/agentstate/agentstateConfig.cmake \
$lib/cmake/agentstate/agentstateTargets.cmake $lib/pkgconfig/agentstate.pc \
/usr/include/agentstate/engine.hpp /usr/include/agentstate/version.hpp \
/usr/share/doc/libagentstate-dev/copyright /usr/share/doc/libagentstate-dev/changelog.Debian.gz"
  # Control files: /etc/default/agentstate is a conffile; the maintainer scripts are
  # executable shell scripts.
  dpkg-deb -e "$tool_deb" "$work/control"
  [ "$(cat "$work/control/conffiles")" = /etc/default/agentstate ] \
    || fail "conffiles: $(cat "$work/control/conffiles")"
  for script in postinst prerm postrm; do
    [ -x "$work/control/$script" ] || fail "no executable $script"
    sh -n "$work/control/$script" || fail "$script is not valid sh"
  done
  dpkg-deb -e "$dev_deb" "$work/dev-control"
  for f in "$work/dev-control"/*; do
    case "$(basename "$f")" in control | md5sums) ;; *) fail "libagentstate-dev has $f" ;; esac
  done
  root="$work/root"
  dpkg -x "$tool_deb" "$root"
  dpkg -x "$dev_deb" "$root"
  file -b "$root/usr/bin/agentstate" | grep -q ', stripped' || fail "agentstate is not stripped"
  # Debian's hardening (dpkg-buildflags, hardening=+all), as lintian's hardening checks
  # read it: a position-independent executable, full RELRO (the GNU_RELRO segment and
  # immediate binding), fortified functions (__*_chk) and the stack protector.
  elf="$root/usr/bin/agentstate"
  readelf -hW "$elf" | grep -Eq '^ *Type: +DYN ' || fail "agentstate is not position-independent"
  readelf -lW "$elf" | grep -q ' GNU_RELRO ' || fail "agentstate has no GNU_RELRO segment"
  readelf -dW "$elf" | grep -Eq '\(FLAGS\) +.*BIND_NOW|\(BIND_NOW\)' \
    || fail "agentstate is not linked with -z now (no BIND_NOW)"
  dynsyms="$(readelf --dyn-syms -W "$elf")"
  grep -Eq ' __[a-z0-9_]+_chk@' <<< "$dynsyms" \
    || fail "agentstate calls no fortified function (_FORTIFY_SOURCE)"
  grep -q ' __stack_chk_fail@' <<< "$dynsyms" || fail "agentstate has no stack protector"
  # Its debug symbols: agentstate-dbgsym's file named by the tool's build-id.
  build_id="$(readelf -nW "$elf" | sed -n 's/.*Build ID: \([0-9a-f]*\).*/\1/p')"
  [ "${#build_id}" -ge 16 ] || fail "agentstate has no build-id"
  debug="/usr/lib/debug/.build-id/${build_id:0:2}/${build_id:2}.debug"
  deb_layout "$dbgsym_deb" "/usr/lib/debug/.build-id/ /usr/share/doc/agentstate-dbgsym" "$debug"
  dpkg -x "$dbgsym_deb" "$root"
  [ "$(readelf -nW "$root$debug" | sed -n 's/.*Build ID: \([0-9a-f]*\).*/\1/p')" = "$build_id" ] \
    || fail "$debug is not the debug file of this agentstate"
  readelf -SW "$root$debug" | grep -q ' \.debug_line ' || fail "$debug holds no line table"
  readelf -SW "$root$debug" | grep -q ' \.symtab ' || fail "$debug holds no symbol table"
  for pkg in agentstate libagentstate-dev; do
    doc="$root/usr/share/doc/$pkg"
    head -1 "$doc/copyright" \
      | grep -qxF 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' \
      || fail "$doc/copyright is not in Debian's machine-readable format"
    grep -qx 'License: Apache-2.0' "$doc/copyright" || fail "$doc/copyright: no License: Apache-2.0"
    zcat "$doc/changelog.Debian.gz" > "$work/changelog.$pkg"
    [ "$(dpkg-parsechangelog -l "$work/changelog.$pkg" -S Version)" = "$deb_version" ] \
      || fail "$doc/changelog.Debian.gz's newest entry is not $deb_version"
  done
  grep -qx 'ExecStart=/usr/bin/agentstate serve .*' "$root/usr/lib/systemd/system/agentstate.service" \
    || fail "agentstate.service does not start /usr/bin/agentstate serve"
  [ "$("$root/usr/bin/agentstate" --version)" = "agentstate $version" ] \
    || fail "the .deb's agentstate --version"
  # A page per command that `agentstate --help` lists, plus agentstate.1.
  commands="$("$root/usr/bin/agentstate" --help | awk '/^(sub)?[Cc]ommands:|^SUBCOMMANDS:/{on=1; next} on && /^ *$/{on=0} on && /^  +[a-z]/{print $1}')"
  [ -n "$commands" ] || fail "no commands in agentstate --help"
  for c in "" $commands; do
    page="$root/usr/share/man/man1/agentstate${c:+-$c}.1.gz"
    [ -f "$page" ] || fail "missing man page $page"
    title="$(echo "agentstate${c:+-$c}" | tr '[:lower:]' '[:upper:]')"
    zcat "$page" | grep -Eq "^\.TH \"?$title\"? \"?1\"? " || fail "$page has no .TH $title 1"
    zcat "$page" | grep -q "^\.SH DESCRIPTION" || fail "$page has no DESCRIPTION"
  done
  zcat "$root/usr/share/man/man1/agentstate-serve.1.gz" | grep -q -- 'max\\-line\\-bytes' \
    || fail "agentstate-serve.1 does not carry serve's options"
  step "find_package(agentstate) from the .deb's root"
  NO_CAF=1 cmake_consumer deb_find_package -DCMAKE_PREFIX_PATH="$root/usr"
  grep -q "^agentstate_DIR:PATH=$root$lib/cmake/agentstate\$" "$work/deb_find_package/CMakeCache.txt" \
    || fail "find_package did not use the .deb's package"
  step "pkg-config agentstate from the .deb's root"
  pkgconfig_consumer "$root/usr"
  ;;
deb-install)
  build_debs
  step "lintian"
  command -v lintian > /dev/null || fail "lintian not found (tools/setup.sh --all installs it)"
  lintian_status=0
  lintian --fail-on error --display-info "$tool_deb" "$dev_deb" "$dbgsym_deb" \
    > "$work/lintian.log" 2>&1 || lintian_status=$?
  cat "$work/lintian.log"
  if [ "$lintian_status" != 0 ] || grep -q '^E: ' "$work/lintian.log"; then
    fail "lintian reports errors (exit $lintian_status)"
  fi
  # Its hardening checks (hardening-no-relro, -no-bindnow, -no-fortify-functions, ...)
  # at any level.
  if grep -q ' hardening-' "$work/lintian.log"; then
    fail "lintian finds the tool not hardened: $(grep ' hardening-' "$work/lintian.log")"
  fi
  # The root holds only these three packages: their other Depends must be what this
  # machine has, the libraries and headers the installed tool and the consumer use.
  for deb in "$tool_deb" "$dev_deb" "$dbgsym_deb"; do
    for dep in $(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/(.*)//; s/|.*//'); do
      [ "$dep" != agentstate ] || continue # agentstate-dbgsym's, installed beside it
      dpkg-query -W -f='${Status}' "$dep" 2>/dev/null | grep -q 'install ok installed' \
        || fail "$(basename "$deb") depends on $dep, which this machine lacks"
    done
  done

  step "dpkg --root: install into a fresh root"
  root="$work/root"
  admin="$root/var/lib/dpkg"
  mkdir -p "$admin/info" "$admin/updates" "$admin/triggers" "$root/var/log"
  : > "$admin/status"
  : > "$admin/available"
  dpkg_root=(dpkg --root="$root" --log="$root/var/log/dpkg.log" --force-not-root --force-depends)
  "${dpkg_root[@]}" --unpack "$tool_deb" "$dev_deb" "$dbgsym_deb" > "$work/dpkg.log" 2>&1 \
    || { cat "$work/dpkg.log" >&2; fail "dpkg --unpack failed"; }
  # dpkg runs maintainer scripts chrooted into the root, which needs root privileges
  # and a system there (sh, adduser, deb-systemd-helper): the postinst (it makes the
  # system user agentstate) is skipped; dpkg still configures the package (the conffile
  # into place, the status installed). The scripts' syntax is checked by mode deb.
  rm "$admin/info/agentstate.postinst"
  "${dpkg_root[@]}" --configure -a >> "$work/dpkg.log" 2>&1 \
    || { cat "$work/dpkg.log" >&2; fail "dpkg --configure failed"; }
  status="$(dpkg-query --admindir="$admin" -W -f='${Package} ${Status}\n' | LC_ALL=C sort | tr '\n' ' ')"
  [ "$status" = "agentstate install ok installed agentstate-dbgsym install ok installed libagentstate-dev install ok installed " ] \
    || fail "dpkg status in the root: $status"
  dpkg-query --admindir="$admin" -W -f='${Conffiles}' agentstate | grep -q '^ /etc/default/agentstate ' \
    || fail "/etc/default/agentstate is not a conffile in the root"
  [ -f "$root/etc/default/agentstate" ] || fail "no /etc/default/agentstate in the root"
  "${dpkg_root[@]}" --verify agentstate libagentstate-dev agentstate-dbgsym \
    || fail "dpkg --verify in the root"

  step "the installed agentstate"
  tool="$root/usr/bin/agentstate"
  [ "$("$tool" --version)" = "agentstate $version" ] || fail "installed agentstate --version"
  "$tool" demo --dir "$work/demo" --agents 4 --appends 20 > "$work/demo.log" 2>&1 \
    || { cat "$work/demo.log" >&2; fail "installed agentstate demo failed"; }

  step "serve, started the way agentstate.service starts it"
  unit="$root/usr/lib/systemd/system/agentstate.service"
  exec_start="$(sed -n 's/^ExecStart=//p' "$unit")"
  grep -qx 'EnvironmentFile=-\{0,1\}/etc/default/agentstate' "$unit" \
    || fail "the unit does not read /etc/default/agentstate"
  # shellcheck disable=SC2016 # systemd's $MAINPID, not the shell's
  grep -qx 'ExecReload=/bin/kill -HUP $MAINPID' "$unit" || fail "the unit's ExecReload is not SIGHUP"
  # The unit's environment: /etc/default/agentstate from the root, listening on a port
  # the system picks (7400 may be taken here), the store in WORK_DIR.
  # shellcheck disable=SC1091 # the installed defaults file
  . "$root/etc/default/agentstate"
  case "$AGENTSTATE_LISTEN" in 127.0.0.1:*) ;; *) fail "the default listener is not loopback: $AGENTSTATE_LISTEN" ;; esac
  AGENTSTATE_LISTEN=127.0.0.1:0
  state="$work/state"
  argv=()
  # systemd's expansion: ${VAR} is one word, $VAR is split at whitespace.
  # shellcheck disable=SC2016 # the unit's words, matched as written
  for word in $exec_start; do
    case "$word" in
      /usr/bin/agentstate) argv+=("$tool") ;;
      /var/lib/agentstate) argv+=("$state") ;;
      '${AGENTSTATE_LISTEN}') argv+=("$AGENTSTATE_LISTEN") ;;
      '$AGENTSTATE_OPTS') for o in $AGENTSTATE_OPTS; do argv+=("$o"); done ;;
      *'$'*) fail "ExecStart has $word, which this test does not expand" ;;
      *) argv+=("$word") ;;
    esac
  done
  [ "${argv[0]} ${argv[1]}" = "$tool serve" ] || fail "ExecStart: $exec_start"
  "${argv[@]}" < /dev/null > "$work/serve.out" 2> "$work/serve.log" &
  serve_pid=$!
  trap 'kill -KILL "$serve_pid" 2>/dev/null || true' EXIT
  # Reads the serve log as it grows (tail -f: woken by each write) until a line
  # matches the extended regular expression $1, serve exits, or 30 s pass.
  await_log() {
    local line fd tail_pid
    exec {fd}< <(exec timeout 30 tail --pid="$serve_pid" -n +1 -f "$work/serve.log")
    tail_pid=$!
    while IFS= read -r line <&"$fd"; do
      if [[ $line =~ $1 ]]; then
        kill "$tail_pid" 2>/dev/null || true
        exec {fd}<&-
        return 0
      fi
    done
    exec {fd}<&-
    cat "$work/serve.log" >&2
    kill -0 "$serve_pid" 2>/dev/null || fail "serve exited"
    fail "serve did not log $1 within 30 s"
  }
  await_log 'listening on 127\.0\.0\.1:[0-9]'
  port="$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/serve.log" | head -1)"
  # One request line on a new TCP connection; prints the response line.
  rpc() {
    local reply=""
    exec 3<> "/dev/tcp/127.0.0.1/$port" || fail "cannot connect to serve on port $port"
    printf '%s\n' "$1" >&3
    IFS= read -r -t 30 reply <&3 || true
    exec 3>&-
    printf '%s\n' "$reply"
  }
  rpc '{"jsonrpc":"2.0","id":1,"method":"ping"}' | grep -q '"result":"pong"' \
    || fail "ping over TCP"
  rpc '{"jsonrpc":"2.0","id":2,"method":"create_session","params":{"app_name":"pkg","user_id":"u","session_id":"s1"}}' \
    | grep -q '"id":"s1"' || fail "create_session over TCP"
  # ExecReload: SIGHUP re-reads the token file (none here) and the server keeps serving.
  kill -HUP "$serve_pid"
  await_log 'tokens_reload_skipped'
  rpc '{"jsonrpc":"2.0","id":3,"method":"get_session","params":{"app_name":"pkg","user_id":"u","session_id":"s1"}}' \
    | grep -q '"id":"s1"' || fail "get_session after SIGHUP"
  kill -TERM "$serve_pid"
  serve_status=0
  wait "$serve_pid" || serve_status=$?
  trap - EXIT
  [ "$serve_status" = 0 ] || { cat "$work/serve.log" >&2; fail "serve exited $serve_status on SIGTERM"; }
  "$tool" verify "$state" > "$work/verify.log" 2>&1 \
    || { cat "$work/verify.log" >&2; fail "verify of the served store"; }

  step "systemd-analyze verify agentstate.service"
  if command -v systemd-analyze > /dev/null; then
    # The copy starts the root's binary (verify wants the command on this machine);
    # Documentation= is looked up in the root's man pages.
    mkdir -p "$work/unit"
    sed "s|/usr/bin/agentstate|$tool|" "$unit" > "$work/unit/agentstate.service"
    MANPATH="$root/usr/share/man" systemd-analyze verify "$work/unit/agentstate.service" \
      > "$work/systemd-analyze.log" 2>&1 || { cat "$work/systemd-analyze.log" >&2; fail "systemd-analyze verify failed"; }
    if [ -s "$work/systemd-analyze.log" ]; then
      cat "$work/systemd-analyze.log" >&2
      fail "systemd-analyze verify has remarks"
    fi
  else
    echo "systemd-analyze not found: the unit is not verified (Debian package systemd)"
  fi

  step "the consumer against the installed libagentstate-dev"
  cmake_consumer deb_install_find_package -DCMAKE_PREFIX_PATH="$root/usr"
  grep -q "^agentstate_DIR:PATH=$root/usr/lib/$multiarch/cmake/agentstate\$" \
    "$work/deb_install_find_package/CMakeCache.txt" \
    || fail "find_package did not use the installed package"
  pkgconfig_consumer "$root/usr"

  step "dpkg --purge"
  # As above: prerm and postrm (systemd, the store in /var/lib) would run chrooted.
  rm "$admin/info/agentstate.prerm" "$admin/info/agentstate.postrm"
  "${dpkg_root[@]}" --purge agentstate-dbgsym agentstate libagentstate-dev \
    >> "$work/dpkg.log" 2>&1 \
    || { cat "$work/dpkg.log" >&2; fail "dpkg --purge failed"; }
  left="$(find "$root" -mindepth 1 ! -type d ! -path "$root/var/*")"
  [ -z "$left" ] || fail "purge left: $left"
  ;;
subdirectory-configure | subdirectory-build)
  step "add_subdirectory(agentstate)"
  if [ "$mode" = subdirectory-configure ]; then
    cmake -S "$consumer_src" -B "$work/subdirectory" -DAGENTSTATE_CONSUMER_MODE=subdirectory \
          -DAGENTSTATE_SOURCE_DIR="$src" -DCMAKE_CXX_COMPILER="$cxx" \
      || fail "configure with add_subdirectory failed"
    grep -q "^CMAKE_BUILD_TYPE:STRING=$" "$work/subdirectory/CMakeCache.txt" \
      || fail "agentstate set the parent's CMAKE_BUILD_TYPE"
  else
    cmake_consumer subdirectory -DAGENTSTATE_CONSUMER_MODE=subdirectory \
                   -DAGENTSTATE_SOURCE_DIR="$src"
  fi
  ;;
*)
  fail "unknown mode (install, deb, deb-install, subdirectory-configure, subdirectory-build)"
  ;;
esac
echo "package_test($mode): ok"
