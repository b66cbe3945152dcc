# SPDX-License-Identifier: Apache-2.0
# FindCAF: the C++ Actor Framework's core library, as the imported target CAF::core.
#
# CAF releases from 0.18 ship a CMake package (CAF::core); Debian's libcaf-dev
# (0.17) ships none, so this module falls back to the header and library.
# Result: CAF_FOUND, CAF_VERSION, the target CAF::core (headers + libcaf_core).
# Hints: CAF_ROOT or CMAKE_PREFIX_PATH; CAF_INCLUDE_DIR / CAF_CORE_LIBRARY (cache).
include(FindPackageHandleStandardArgs)

if(NOT TARGET CAF::core)
  find_package(CAF CONFIG QUIET)
endif()
if(TARGET CAF::core)
  find_package_handle_standard_args(CAF CONFIG_MODE)
  return()
endif()

find_path(CAF_INCLUDE_DIR caf/all.hpp)
find_library(CAF_CORE_LIBRARY NAMES caf_core)
if(CAF_INCLUDE_DIR AND EXISTS "${CAF_INCLUDE_DIR}/caf/config.hpp")
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_version_line
       REGEX "^#define CAF_VERSION [0-9]+")
  if(_caf_version_line MATCHES "CAF_VERSION ([0-9]+)")
    # CAF_VERSION is MAJOR * 10000 + MINOR * 100 + PATCH.
    math(EXPR _caf_major "${CMAKE_MATCH_1} / 10000")
    math(EXPR _caf_minor "(${CMAKE_MATCH_1} / 100) % 100")
    math(EXPR _caf_patch "${CMAKE_MATCH_1} % 100")
    set(CAF_VERSION "${_caf_major}.${_caf_minor}.${_caf_patch}")
  endif()
endif()
find_package_handle_standard_args(CAF
  REQUIRED_VARS CAF_CORE_LIBRARY CAF_INCLUDE_DIR
  VERSION_VAR CAF_VERSION
  REASON_FAILURE_MESSAGE "install Debian's libcaf-dev (tools/setup.sh does)")
mark_as_advanced(CAF_INCLUDE_DIR CAF_CORE_LIBRARY)

if(CAF_FOUND AND NOT TARGET CAF::core)
  find_package(Threads REQUIRED)
  add_library(CAF::core UNKNOWN IMPORTED)
  set_target_properties(CAF::core PROPERTIES
    IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES Threads::Threads)
endif()
