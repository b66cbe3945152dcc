#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The package checks (registered by tests/CMakeLists.txt): the installed package, the
# .deb and add_subdirectory, each used by the consumer project in tests/package/consumer
# the way a host project would, out of the source tree, against a real LMDB store.
#
# usage: package_test.sh MODE BUILD_DIR SOURCE_DIR VERSION WORK_DIR CXX
#   install              cmake --install BUILD_DIR into WORK_DIR/prefix, then build the
#                        consumer with find_package and with pkg-config, and run them
#   deb                  cpack -G DEB, check the .deb's name, Depends and man pages,
#                        dpkg -x it into WORK_DIR/root, run its agentstate --version and
#                        build and run the consumer against that root
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

case "$mode" in
install)
  prefix="$work/prefix"
  step "cmake --install $build --prefix $prefix"
  cmake --install "$build" --prefix "$prefix" > "$work/install.log" \
    || { cat "$work/install.log" >&2; fail "cmake --install failed"; }
  [ "$("$prefix/bin/agentstate" --version)" = "agentstate $version" ] \
    || fail "installed agentstate --version"
  [ -f "$prefix/include/agentstate/version.hpp" ] || fail "version.hpp not installed"
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
  step "cpack -G DEB"
  (cd "$build" && cpack -G DEB -B "$work/cpack" > "$work/cpack.log" 2>&1) \
    || { cat "$work/cpack.log" >&2; fail "cpack failed"; }
  deb="$work/cpack/agentstate_${version}_amd64.deb"
  [ -f "$deb" ] || fail "no $deb; cpack made: $(ls "$work/cpack")"
  depends="$(dpkg-deb -f "$deb" Depends)"
  echo "Depends: $depends"
  for want in libc6 libstdc++6 libcaf-core libsqlite3 liblmdb0 liblmdb-dev libcaf-dev \
              nlohmann-json3-dev; do
    case "$depends" in *"$want"*) ;; *) fail "Depends lacks $want" ;; esac
  done
  root="$work/root"
  dpkg -x "$deb" "$root"
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
  grep -q "^agentstate_DIR:PATH=$root/usr/" "$work/deb_find_package/CMakeCache.txt" \
    || fail "find_package did not use the .deb's package"
  step "pkg-config agentstate from the .deb's root"
  pkgconfig_consumer "$root/usr"
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
  fail "unknown mode (install, deb, subdirectory-configure, subdirectory-build)"
  ;;
esac
echo "package_test($mode): ok"
