# SPDX-License-Identifier: Apache-2.0
# Generates the man pages of the agentstate tool with help2man, from the tool's own
# --help text: agentstate.1.gz and agentstate-<command>.1.gz for every command that
# `agentstate --help` lists. Run at build time (cmake -P) by the agentstate_man target.
#
# Inputs (-D): AGENTSTATE_EXE (the built tool), HELP2MAN, MAN_DIR (output directory,
# emptied first), VERSION. Fails (non-zero exit) when the tool's help cannot be read or
# help2man fails, so a stale or partial set is never installed.
foreach(v AGENTSTATE_EXE HELP2MAN MAN_DIR VERSION)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "manpages.cmake: -D${v}=... is required")
  endif()
endforeach()

execute_process(COMMAND "${AGENTSTATE_EXE}" --help
                OUTPUT_VARIABLE top_help RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "manpages.cmake: '${AGENTSTATE_EXE} --help' failed (${rc}): ${err}")
endif()

# The command list: the indented "name  summary" lines under a "commands:" (or
# "subcommands:") heading, up to the next blank line.
string(REPLACE ";" "," top_help_nosemi "${top_help}")
string(REPLACE "\n" ";" lines "${top_help_nosemi}")
set(in_list FALSE)
set(commands "")
foreach(line IN LISTS lines)
  if(line MATCHES "^[ \t]*$")
    if(in_list)
      set(in_list FALSE)
    endif()
  elseif(line MATCHES "^(sub)?commands:" OR line MATCHES "^(SUB)?COMMANDS:"
         OR line MATCHES "^(Sub)?[Cc]ommands:")
    set(in_list TRUE)
  elseif(in_list AND line MATCHES "^  +([a-z][a-z0-9_-]*)( +(.*))?$")
    set(name "${CMAKE_MATCH_1}")
    string(STRIP "${CMAKE_MATCH_3}" summary)
    list(APPEND commands "${name}")
    set(summary_${name} "${summary}")
  endif()
endforeach()
if(NOT commands)
  message(FATAL_ERROR "manpages.cmake: no commands found in '${AGENTSTATE_EXE} --help':\n${top_help}")
endif()

file(REMOVE_RECURSE "${MAN_DIR}")
file(MAKE_DIRECTORY "${MAN_DIR}/wrappers")

set(common --no-info --section=1 "--version-string=${VERSION}"
           "--source=agentstate ${VERSION}" "--manual=agentstate manual")

# helper: run help2man on `program`, writing MAN_DIR/<page>.1, then gzip it (-n: no
# timestamp, so the output is reproducible).
function(make_page program page name include_file)
  set(args ${common} "--name=${name}" "--output=${MAN_DIR}/${page}.1")
  if(include_file)
    list(APPEND args "--include=${include_file}")
  endif()
  execute_process(COMMAND "${HELP2MAN}" ${args} "${program}"
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT EXISTS "${MAN_DIR}/${page}.1")
    message(FATAL_ERROR "manpages.cmake: help2man failed for ${page} (${rc}): ${err}")
  endif()
  execute_process(COMMAND gzip -9nf "${MAN_DIR}/${page}.1" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "manpages.cmake: gzip failed for ${page}.1")
  endif()
endfunction()

# agentstate.1, with a SEE ALSO section naming each command's page.
set(see_also "")
foreach(c IN LISTS commands)
  string(APPEND see_also ".BR agentstate-${c} (1)\n")
endforeach()
file(WRITE "${MAN_DIR}/wrappers/agentstate.h2m" "[SEE ALSO]\n${see_also}")
make_page("${AGENTSTATE_EXE}" agentstate
          "embedded session engine for agent hosts: store tools and JSON-RPC server"
          "${MAN_DIR}/wrappers/agentstate.h2m")

# agentstate-<command>.1: help2man names a page after the program it runs, so each
# command is run through a wrapper script called agentstate-<command>.
foreach(c IN LISTS commands)
  file(WRITE "${MAN_DIR}/wrappers/tmp/agentstate-${c}"
       "#!/bin/sh\nexec \"${AGENTSTATE_EXE}\" ${c} \"$@\"\n")
  file(COPY "${MAN_DIR}/wrappers/tmp/agentstate-${c}" DESTINATION "${MAN_DIR}/wrappers"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                        WORLD_READ WORLD_EXECUTE)
  set(name "${summary_${c}}")
  if(NOT name)
    set(name "agentstate ${c}")
  endif()
  file(WRITE "${MAN_DIR}/wrappers/agentstate-${c}.h2m" "[SEE ALSO]\n.BR agentstate (1)\n")
  make_page("${MAN_DIR}/wrappers/agentstate-${c}" "agentstate-${c}" "${name}"
            "${MAN_DIR}/wrappers/agentstate-${c}.h2m")
endforeach()
file(REMOVE_RECURSE "${MAN_DIR}/wrappers")
list(LENGTH commands n)
message(STATUS "agentstate: ${n} command man pages + agentstate.1 in ${MAN_DIR}")
