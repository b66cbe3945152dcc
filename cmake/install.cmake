# SPDX-License-Identifier: Apache-2.0
# Install rules, the CMake package, pkg-config file, man pages and the Debian packages.
# Included from the top-level CMakeLists.txt when AGENTSTATE_INSTALL is on.
#
# `cmake --install` (GNUInstallDirs; lib/<multiarch> only when configured for /usr):
#   ${libdir}/libagentstate.a
#   ${libdir}/cmake/agentstate/  agentstateConfig.cmake, ConfigVersion, Targets,
#                                FindCAF.cmake, FindLMDB.cmake
#   ${libdir}/pkgconfig/agentstate.pc
#   include/agentstate/*.hpp but client.hpp (with the generated version.hpp)
#   bin/agentstate, share/man/man1/agentstate*.1.gz, share/doc/agentstate/{LICENSE,README.md}
# Components: tool (bin, man), dev (library files), doc (LICENSE, README.md).
#
# The Debian packages (`cpack` in the build directory, from any build of the tool):
#   agentstate         tool + deb_tool: /usr/bin/agentstate (stripped), the man pages,
#                      /usr/lib/systemd/system/agentstate.service, /etc/default/agentstate,
#                      /usr/share/doc/agentstate/{copyright,changelog.Debian.gz}
#   libagentstate-dev  deb_dev: the dev files in /usr/lib/<multiarch>, the headers,
#                      /usr/share/doc/libagentstate-dev/{copyright,changelog.Debian.gz}
#   agentstate-dbgsym  deb_dbgsym: the tool's detached debug symbols,
#                      /usr/lib/debug/.build-id/<xx>/<rest of its build-id>.debug, as
#                      Debian's dh_strip makes them (gdb and debuginfod find them by
#                      the build-id the stripped /usr/bin/agentstate keeps), and
#                      /usr/share/doc/agentstate-dbgsym -> agentstate (it depends on it)
# The deb_* components are EXCLUDE_FROM_ALL: only a component install (CPack's) puts
# them anywhere, so `cmake --install` writes nothing outside its prefix. The packages'
# paths are fixed (/usr, /etc) whatever CMAKE_INSTALL_PREFIX the build was configured
# with; packaging/ holds their unit, defaults, maintainer scripts, copyright, changelog.
include(CMakePackageConfigHelpers)
# `cmake --install` and cpack install what is built and never start a build of
# everything (the tests included) themselves: build first.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY TRUE)

# The library, headers, CMake package and pkg-config file under `libdir`, as `component`
# (ARGN: EXCLUDE_FROM_ALL or nothing).
function(agentstate_install_dev libdir component)
  set(cmake_dir ${libdir}/cmake/agentstate)
  set(gen_dir ${PROJECT_BINARY_DIR}/install-${component})
  install(TARGETS agentstate_core agentstate_caf
          EXPORT agentstateTargets-${component}
          ARCHIVE DESTINATION ${libdir} COMPONENT ${component} ${ARGN}
          LIBRARY DESTINATION ${libdir} COMPONENT ${component} ${ARGN}
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  # `cmake --install --strip` and the packages (CPACK_STRIP_FILES): the archive loses its
  # debug information (as Debian's dh_strip does), not the symbols a consumer links.
  if(CMAKE_STRIP)
    if(IS_ABSOLUTE "${libdir}")
      set(archive "\$ENV{DESTDIR}${libdir}/$<TARGET_FILE_NAME:agentstate_core>")
    else()
      set(archive "\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${libdir}/$<TARGET_FILE_NAME:agentstate_core>")
    endif()
    install(CODE "if(CMAKE_INSTALL_DO_STRIP)
  execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-debug --remove-section=.comment
    --remove-section=.note --enable-deterministic-archives \"${archive}\"
    RESULT_VARIABLE failed)
  if(failed)
    message(FATAL_ERROR \"strip of ${archive}: \${failed}\")
  endif()
endif()" COMPONENT ${component} ${ARGN})
  endif()
  # client.hpp stays out: its library (agentstate_client) is internal for now.
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/agentstate
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT ${component} ${ARGN}
          FILES_MATCHING PATTERN "*.hpp" PATTERN "client.hpp" EXCLUDE)
  install(FILES ${PROJECT_BINARY_DIR}/include/agentstate/version.hpp
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/agentstate COMPONENT ${component} ${ARGN})

  install(EXPORT agentstateTargets-${component} NAMESPACE agentstate::
          FILE agentstateTargets.cmake
          DESTINATION ${cmake_dir} COMPONENT ${component} ${ARGN})
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/agentstateConfig.cmake.in
    ${gen_dir}/agentstateConfig.cmake
    INSTALL_DESTINATION ${cmake_dir})
  install(FILES ${gen_dir}/agentstateConfig.cmake
                ${PROJECT_BINARY_DIR}/agentstateConfigVersion.cmake
                ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
                ${PROJECT_SOURCE_DIR}/cmake/FindLMDB.cmake
          DESTINATION ${cmake_dir} COMPONENT ${component} ${ARGN})

  # pkg-config: prefix is the install prefix, found relative to the .pc file's directory
  # (${pcfiledir}), so `cmake --install --prefix`, DESTDIR and the .deb all give a
  # correct file; every other path derives from it.
  if(IS_ABSOLUTE "${libdir}")
    set(AGENTSTATE_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  else()
    file(RELATIVE_PATH AGENTSTATE_PC_PREFIX "/prefix/${libdir}/pkgconfig" "/prefix")
    string(REGEX REPLACE "/$" "" AGENTSTATE_PC_PREFIX "${AGENTSTATE_PC_PREFIX}")
    set(AGENTSTATE_PC_PREFIX "\${pcfiledir}/${AGENTSTATE_PC_PREFIX}")
  endif()
  set(CMAKE_INSTALL_LIBDIR ${libdir}) # what agentstate.pc.in names the library directory
  configure_file(${PROJECT_SOURCE_DIR}/cmake/agentstate.pc.in ${gen_dir}/agentstate.pc @ONLY)
  install(FILES ${gen_dir}/agentstate.pc
          DESTINATION ${libdir}/pkgconfig COMPONENT ${component} ${ARGN})
endfunction()

# Before 1.0 a minor release may break the API: same major.minor only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/agentstateConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
agentstate_install_dev(${CMAKE_INSTALL_LIBDIR} dev)

install(FILES ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT doc)

if(AGENTSTATE_BUILD_TOOLS)
  install(TARGETS agentstate RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tool)
  # Stripped (`cmake --install --strip`, the packages): also without the .comment and
  # .note sections, as dh_strip leaves an executable.
  if(CMAKE_STRIP)
    install(CODE "if(CMAKE_INSTALL_DO_STRIP)
  execute_process(COMMAND \"${CMAKE_STRIP}\" --remove-section=.comment --remove-section=.note
    \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/$<TARGET_FILE_NAME:agentstate>\"
    RESULT_VARIABLE failed)
  if(failed)
    message(FATAL_ERROR \"strip of agentstate: \${failed}\")
  endif()
endif()" COMPONENT tool)
  endif()

  # Man pages: agentstate.1 and agentstate-<command>.1 from the tool's --help text
  # (cmake/manpages.cmake), regenerated whenever the tool is relinked.
  find_program(AGENTSTATE_HELP2MAN help2man)
  if(AGENTSTATE_HELP2MAN)
    set(man_dir ${PROJECT_BINARY_DIR}/man)
    add_custom_command(
      OUTPUT ${man_dir}/agentstate.1.gz
      COMMAND ${CMAKE_COMMAND} -DAGENTSTATE_EXE=$<TARGET_FILE:agentstate>
              -DHELP2MAN=${AGENTSTATE_HELP2MAN} -DMAN_DIR=${man_dir}
              -DVERSION=${PROJECT_VERSION} -P ${PROJECT_SOURCE_DIR}/cmake/manpages.cmake
      DEPENDS agentstate ${PROJECT_SOURCE_DIR}/cmake/manpages.cmake
      COMMENT "Generating the agentstate man pages with help2man"
      VERBATIM)
    add_custom_target(agentstate_man ALL DEPENDS ${man_dir}/agentstate.1.gz)
    install(DIRECTORY ${man_dir}/ DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT tool
            FILES_MATCHING PATTERN "*.1.gz")
  else()
    message(WARNING "help2man not found: no man pages are built or installed "
                    "(run tools/setup.sh --all; Debian package help2man)")
  endif()
endif()

# -- the Debian packages: `cpack` in the build directory --------------------------------
# -> agentstate_<version>-<release>_<arch>.deb and libagentstate-dev_<...>.deb (the
# release is the one of packaging/changelog's newest entry).
set(AGENTSTATE_DEB_DIR ${PROJECT_SOURCE_DIR}/packaging)
set(AGENTSTATE_DEB_LIBDIR lib)
if(CMAKE_LIBRARY_ARCHITECTURE)
  set(AGENTSTATE_DEB_LIBDIR lib/${CMAKE_LIBRARY_ARCHITECTURE})
endif()
# The dev files at the packages' libdir: those of `cmake --install` when it is the same
# (a build configured for /usr), else a second set installed for the package only.
set(AGENTSTATE_DEB_DEV_COMPONENTS deb_dev)
if(AGENTSTATE_DEB_LIBDIR STREQUAL CMAKE_INSTALL_LIBDIR)
  list(APPEND AGENTSTATE_DEB_DEV_COMPONENTS dev)
else()
  agentstate_install_dev(${AGENTSTATE_DEB_LIBDIR} deb_dev EXCLUDE_FROM_ALL)
endif()

# Each package's /usr/share/doc/<package>: the copyright (Debian's machine-readable
# format) and the Debian changelog, compressed (gzip -n: no name or time inside).
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${AGENTSTATE_DEB_DIR}/changelog)
file(STRINGS ${AGENTSTATE_DEB_DIR}/changelog AGENTSTATE_DEB_TOP LIMIT_COUNT 1)
if(NOT AGENTSTATE_DEB_TOP MATCHES "^agentstate \\(([^)-]+)-([^)]+)\\) ")
  message(FATAL_ERROR "packaging/changelog does not start with 'agentstate (VERSION-RELEASE) '")
endif()
set(AGENTSTATE_DEB_RELEASE ${CMAKE_MATCH_2})
if(NOT CMAKE_MATCH_1 STREQUAL PROJECT_VERSION)
  message(WARNING "packaging/changelog's newest entry is ${CMAKE_MATCH_1}, the project is "
                  "${PROJECT_VERSION}: add an entry for the packages")
endif()
find_program(AGENTSTATE_GZIP gzip REQUIRED)
file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/packaging)
execute_process(COMMAND ${AGENTSTATE_GZIP} -9nc ${AGENTSTATE_DEB_DIR}/changelog
                OUTPUT_FILE ${PROJECT_BINARY_DIR}/packaging/changelog.Debian.gz
                RESULT_VARIABLE gzip_result)
if(NOT gzip_result EQUAL 0)
  message(FATAL_ERROR "gzip packaging/changelog failed: ${gzip_result}")
endif()
foreach(pkg_comp agentstate:deb_tool libagentstate-dev:deb_dev)
  string(REPLACE ":" ";" pkg_comp ${pkg_comp})
  list(GET pkg_comp 0 pkg)
  list(GET pkg_comp 1 comp)
  install(FILES ${AGENTSTATE_DEB_DIR}/copyright
                ${PROJECT_BINARY_DIR}/packaging/changelog.Debian.gz
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${pkg} COMPONENT ${comp} EXCLUDE_FROM_ALL)
endforeach()
# The service: the unit in /usr/lib/systemd/system (Debian's place for a package's units),
# its options in /etc/default (a conffile: an upgrade keeps the administrator's edits).
install(FILES ${AGENTSTATE_DEB_DIR}/agentstate.service
        DESTINATION lib/systemd/system COMPONENT deb_tool EXCLUDE_FROM_ALL)
install(FILES ${AGENTSTATE_DEB_DIR}/agentstate.default RENAME agentstate
        DESTINATION /etc/default COMPONENT deb_tool EXCLUDE_FROM_ALL)

# The tool's debug information, split from the built (unstripped) tool: the symbols of
# the stripped /usr/bin/agentstate, whose build-id names the file. Compressed, as
# dh_strip writes them; read-only data, not executable.
if(AGENTSTATE_BUILD_TOOLS)
  find_program(AGENTSTATE_OBJCOPY NAMES objcopy REQUIRED)
  find_program(AGENTSTATE_READELF NAMES readelf REQUIRED)
  install(CODE "set(tool \"$<TARGET_FILE:agentstate>\")
execute_process(COMMAND \"${AGENTSTATE_READELF}\" -n \"\${tool}\"
  OUTPUT_VARIABLE notes RESULT_VARIABLE failed)
if(failed OR NOT notes MATCHES \"Build ID: ([0-9a-f][0-9a-f])([0-9a-f]+)\")
  message(FATAL_ERROR \"\${tool} has no build-id: its debug symbols cannot be named\")
endif()
set(dir \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/lib/debug/.build-id/\${CMAKE_MATCH_1}\")
set(debug \"\${dir}/\${CMAKE_MATCH_2}.debug\")
file(MAKE_DIRECTORY \"\${dir}\")
execute_process(COMMAND \"${AGENTSTATE_OBJCOPY}\" --only-keep-debug --compress-debug-sections
  \"\${tool}\" \"\${debug}\" RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR \"objcopy --only-keep-debug \${tool}: \${failed}\")
endif()
execute_process(COMMAND chmod 0644 \"\${debug}\" RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR \"chmod 0644 \${debug}: \${failed}\")
endif()
set(doc \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DATAROOTDIR}/doc\")
file(MAKE_DIRECTORY \"\${doc}\")
file(CREATE_LINK agentstate \"\${doc}/agentstate-dbgsym\" SYMBOLIC)" COMPONENT deb_dbgsym
          EXCLUDE_FROM_ALL)
endif()

set(CPACK_PACKAGE_NAME agentstate)
set(CPACK_PACKAGE_VENDOR "agentstate")
set(CPACK_PACKAGE_CONTACT "agentstate developers <dev@agentstate.invalid>")
# Each package's description below starts with its own synopsis line: no common one.
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "")
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_SOURCE_GENERATOR "")
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL ${AGENTSTATE_DEB_DEV_COMPONENTS})
if(AGENTSTATE_BUILD_TOOLS)
  list(APPEND CPACK_COMPONENTS_ALL tool deb_tool deb_dbgsym)
endif()
set(CPACK_COMPONENTS_GROUPING ONE_PER_GROUP)
set(CPACK_COMPONENT_TOOL_GROUP tool)
set(CPACK_COMPONENT_DEB_TOOL_GROUP tool)
set(CPACK_COMPONENT_DEV_GROUP dev)
set(CPACK_COMPONENT_DEB_DEV_GROUP dev)
set(CPACK_COMPONENT_DEB_DBGSYM_GROUP dbgsym)
# Executables are stripped in the packages (static archives are not: they keep the
# symbols a consumer links against).
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # <package>_<version>-<release>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_RELEASE ${AGENTSTATE_DEB_RELEASE})
set(CPACK_DEBIAN_PACKAGE_SOURCE agentstate)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_TOOL_PACKAGE_NAME agentstate)
set(CPACK_DEBIAN_TOOL_PACKAGE_SECTION database)
# Depends: the tool's shared libraries (dpkg-shlibdeps) and adduser (the postinst).
set(CPACK_DEBIAN_TOOL_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_TOOL_PACKAGE_DEPENDS adduser)
set(CPACK_DEBIAN_TOOL_PACKAGE_CONTROL_EXTRA
    ${AGENTSTATE_DEB_DIR}/conffiles ${AGENTSTATE_DEB_DIR}/postinst
    ${AGENTSTATE_DEB_DIR}/prerm ${AGENTSTATE_DEB_DIR}/postrm)
set(CPACK_DEBIAN_TOOL_DESCRIPTION
    "embedded session engine for agent hosts: server and tools
agentstate keeps agent sessions (ADK semantics): an append-only event log per
session and scoped state (app:, user:, session, temp:) in LMDB, safe under
concurrency. This package holds the agentstate tool: the JSON-RPC server
(agentstate serve, with a systemd unit), the store tools (inspect, verify,
backup, dump, export, import, salvage, prune, watch) and benchmarks, with
their man pages.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libagentstate-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# Depends: what a consumer of the static library compiles and links against.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "nlohmann-json3-dev (>= 3.9), libcaf-dev (>= 0.17), liblmdb-dev")
# The headers and library were in the one package agentstate 0.1.0 (no Debian release).
set(CPACK_DEBIAN_DEV_PACKAGE_BREAKS "agentstate (<< 0.1.0-1)")
set(CPACK_DEBIAN_DEV_PACKAGE_REPLACES "agentstate (<< 0.1.0-1)")
set(CPACK_DEBIAN_DEV_DESCRIPTION
    "embedded session engine for agent hosts: development files
agentstate keeps agent sessions (ADK semantics): an append-only event log per
session and scoped state (app:, user:, session, temp:) in LMDB, safe under
concurrency. This package holds the C++17 static library, its headers, the
CMake package (find_package(agentstate)) and the pkg-config file.")
# What Debian's debhelper names and describes a tool's automatic debug symbols package.
set(CPACK_DEBIAN_DBGSYM_PACKAGE_NAME agentstate-dbgsym)
set(CPACK_DEBIAN_DBGSYM_PACKAGE_SECTION debug)
set(CPACK_DEBIAN_DBGSYM_PACKAGE_DEPENDS "agentstate (= ${PROJECT_VERSION}-${AGENTSTATE_DEB_RELEASE})")
set(CPACK_DEBIAN_DBGSYM_DESCRIPTION "debug symbols for agentstate")
include(CPack)
