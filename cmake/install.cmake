# SPDX-License-Identifier: Apache-2.0
# Install rules, the CMake package, pkg-config file, man pages and the CPack .deb.
# Included from the top-level CMakeLists.txt when AGENTSTATE_INSTALL is on.
#
# Layout (GNUInstallDirs; a .deb installs under /usr):
#   lib/<multiarch>/libagentstate.a
#   lib/<multiarch>/cmake/agentstate/  agentstateConfig.cmake, ConfigVersion, Targets,
#                                      FindCAF.cmake, FindLMDB.cmake
#   lib/<multiarch>/pkgconfig/agentstate.pc
#   include/agentstate/*.hpp but client.hpp (with the generated version.hpp)
#   bin/agentstate, share/man/man1/agentstate*.1.gz, share/doc/agentstate/
include(CMakePackageConfigHelpers)
# `cmake --install` and cpack install what is built and never start a build of
# everything (the tests included) themselves: build first.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY TRUE)

set(AGENTSTATE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/agentstate)

install(TARGETS agentstate_core agentstate_caf
        EXPORT agentstateTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# client.hpp stays out: its library (agentstate_client) is internal for now.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/agentstate
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev
        FILES_MATCHING PATTERN "*.hpp" PATTERN "client.hpp" EXCLUDE)
install(FILES ${PROJECT_BINARY_DIR}/include/agentstate/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/agentstate COMPONENT dev)

install(EXPORT agentstateTargets NAMESPACE agentstate::
        DESTINATION ${AGENTSTATE_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(cmake/agentstateConfig.cmake.in
  ${PROJECT_BINARY_DIR}/agentstateConfig.cmake
  INSTALL_DESTINATION ${AGENTSTATE_CMAKE_DIR})
# Before 1.0 a minor release may break the API: same major.minor only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/agentstateConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/agentstateConfig.cmake
              ${PROJECT_BINARY_DIR}/agentstateConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindLMDB.cmake
        DESTINATION ${AGENTSTATE_CMAKE_DIR} COMPONENT dev)

# pkg-config: prefix is the install prefix, found relative to the .pc file's directory
# (${pcfiledir}), so `cmake --install --prefix`, DESTDIR and the .deb all give a correct
# file; every other path derives from it.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(AGENTSTATE_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH AGENTSTATE_PC_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
  string(REGEX REPLACE "/$" "" AGENTSTATE_PC_PREFIX "${AGENTSTATE_PC_PREFIX}")
  set(AGENTSTATE_PC_PREFIX "\${pcfiledir}/${AGENTSTATE_PC_PREFIX}")
endif()
configure_file(cmake/agentstate.pc.in ${PROJECT_BINARY_DIR}/agentstate.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/agentstate.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

install(FILES ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT dev)

if(AGENTSTATE_BUILD_TOOLS)
  install(TARGETS agentstate RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tool)

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

# -- CPack: `cpack -G DEB` in the build directory -> agentstate_<version>_amd64.deb ----
# One package with the tool, man pages, library, headers and the CMake/pkg-config
# files. Depends: the tool's shared libraries (dpkg-shlibdeps) plus what a consumer of
# the static library compiles and links against.
set(CPACK_PACKAGE_NAME agentstate)
set(CPACK_PACKAGE_VENDOR "agentstate")
set(CPACK_PACKAGE_CONTACT "agentstate developers <dev@agentstate.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "embedded session engine for agent hosts (ADK semantics)")
set(CPACK_PACKAGE_DESCRIPTION
    "agentstate keeps agent sessions: an append-only event log per session and scoped
state (app:, user:, session, temp:) in LMDB, safe under concurrency. This package
holds the agentstate tool (JSON-RPC server, store tools, benchmarks) with its man
pages, and the C++17 library, headers, CMake package and pkg-config file.")
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_SOURCE_GENERATOR "")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # agentstate_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "nlohmann-json3-dev (>= 3.9), libcaf-dev (>= 0.17), liblmdb-dev")
include(CPack)
