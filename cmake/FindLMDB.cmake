# SPDX-License-Identifier: Apache-2.0
# FindLMDB: the Lightning Memory-Mapped Database library, as the imported target LMDB::LMDB.
#
# Result: LMDB_FOUND, LMDB_VERSION, the target LMDB::LMDB (lmdb.h + liblmdb).
# Hints: LMDB_ROOT or CMAKE_PREFIX_PATH; LMDB_INCLUDE_DIR / LMDB_LIBRARY (cache).
include(FindPackageHandleStandardArgs)

find_path(LMDB_INCLUDE_DIR lmdb.h)
find_library(LMDB_LIBRARY NAMES lmdb)
if(LMDB_INCLUDE_DIR AND EXISTS "${LMDB_INCLUDE_DIR}/lmdb.h")
  file(STRINGS "${LMDB_INCLUDE_DIR}/lmdb.h" _lmdb_version_lines
       REGEX "^#define MDB_VERSION_(MAJOR|MINOR|PATCH)[ \t]+[0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*MDB_VERSION_${_part}[ \t]+([0-9]+).*" "\\1" _lmdb_${_part}
           "${_lmdb_version_lines}")
  endforeach()
  set(LMDB_VERSION "${_lmdb_MAJOR}.${_lmdb_MINOR}.${_lmdb_PATCH}")
endif()
find_package_handle_standard_args(LMDB
  REQUIRED_VARS LMDB_LIBRARY LMDB_INCLUDE_DIR
  VERSION_VAR LMDB_VERSION
  REASON_FAILURE_MESSAGE "install Debian's liblmdb-dev (tools/setup.sh does)")
mark_as_advanced(LMDB_INCLUDE_DIR LMDB_LIBRARY)

if(LMDB_FOUND AND NOT TARGET LMDB::LMDB)
  add_library(LMDB::LMDB UNKNOWN IMPORTED)
  set_target_properties(LMDB::LMDB PROPERTIES
    IMPORTED_LOCATION "${LMDB_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${LMDB_INCLUDE_DIR}")
endif()
