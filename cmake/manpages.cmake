# SPDX-License-Identifier: Apache-2.0
# Generates the man pages of the agentstate tool with help2man, from the tool's own
# --help text: agentstate.1.gz and agentstate-<command>.1.gz for every command that
# `agentstate --help` lists. Run at build time (cmake -P) by the agentstate_man target.
#
# Every --help has one layout (tools/cli.hpp, command_line): "usage: " and its
# continuation lines first, then the description, options and notes, then
# "exit status:" and "environment:" last. The usage lines become the page's
# SYNOPSIS, the two last blocks its EXIT STATUS and ENVIRONMENT sections (through a
# help2man --include file, with FILES and SEE ALSO); help2man reads the rest as the
# DESCRIPTION and, from the first "arguments:" or "options:" heading, OPTIONS.
#
# Inputs (-D): AGENTSTATE_EXE (the built tool), HELP2MAN, MAN_DIR (output directory,
# emptied first), VERSION. Fails (non-zero exit) when the tool's help cannot be read,
# lacks a part of that layout, or help2man fails, so a stale or partial set is never
# installed.
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
file(MAKE_DIRECTORY "${MAN_DIR}/wrappers/tmp")

set(common --no-info --section=1 "--version-string=${VERSION}"
           "--source=agentstate ${VERSION}" "--manual=agentstate manual")

# `text` as a CMake list of its lines, with ';', '[' and ']' (which CMake's lists
# read) replaced by tokens that roff_text puts back.
function(help_lines text out)
  string(REPLACE ";" "@SEMI@" text "${text}")
  string(REPLACE "[" "@LSQ@" text "${text}")
  string(REPLACE "]" "@RSQ@" text "${text}")
  string(REPLACE "\n" ";" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# One line of help text (from help_lines) as roff text: its characters back, '\' and
# '-' escaped, a leading '.' or "'" kept from being read as a request and a leading
# '[' from being read by help2man as an --include section.
function(roff_text line out)
  string(REPLACE "@SEMI@" ";" line "${line}")
  string(REPLACE "@LSQ@" "[" line "${line}")
  string(REPLACE "@RSQ@" "]" line "${line}")
  string(REPLACE "\\" "\\e" line "${line}")
  string(REPLACE "-" "\\-" line "${line}")
  if(line MATCHES "^[.'[]")
    set(line "\\&${line}")
  endif()
  set(${out} "${line}" PARENT_SCOPE)
endfunction()

# The "  KEY   text" list of a --help block (exit codes, environment variables) as
# roff .TP items; lines indented further continue an item, other lines are text.
function(roff_list block out)
  help_lines("${block}" lines)
  set(roff "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^  ([A-Za-z0-9_]+)  +(.*)$")
      roff_text("${CMAKE_MATCH_1}" key)
      roff_text("${CMAKE_MATCH_2}" text)
      string(APPEND roff ".TP\n.B ${key}\n${text}\n")
    elseif(line MATCHES "^    +(.*)$")
      roff_text("${CMAKE_MATCH_1}" text)
      string(APPEND roff "${text}\n")
    elseif(NOT line MATCHES "^[ \t]*$")
      string(STRIP "${line}" line)
      roff_text("${line}" text)
      string(APPEND roff ".PP\n${text}\n")
    endif()
  endforeach()
  set(${out} "${roff}" PARENT_SCOPE)
endfunction()

# helper: the page `page` from the --help text `help`: writes the text help2man reads
# (the usage, exit status and environment blocks taken out) and the include file with
# SYNOPSIS, EXIT STATUS, ENVIRONMENT and `see_also` (roff), runs help2man through a
# wrapper that prints that text, then gzips the page (-n: no timestamp, so the output
# is reproducible).
function(make_page page help name see_also)
  string(FIND "${help}" "\n\n" usage_end)
  string(FIND "${help}" "\nexit status:\n" exit_at)
  string(FIND "${help}" "\nenvironment:\n" env_at)
  if(NOT help MATCHES "^usage: " OR usage_end LESS 0 OR exit_at LESS 0 OR env_at LESS exit_at)
    message(FATAL_ERROR "manpages.cmake: the --help of ${page} lacks the usage, 'exit status:' "
                        "or 'environment:' block (tools/cli.hpp):\n${help}")
  endif()
  string(SUBSTRING "${help}" 0 ${usage_end} usage)
  math(EXPR body_at "${usage_end} + 2")
  math(EXPR body_len "${exit_at} - ${body_at}")
  string(SUBSTRING "${help}" ${body_at} ${body_len} body)
  math(EXPR exit_from "${exit_at} + 14")
  math(EXPR exit_len "${env_at} - ${exit_from}")
  string(SUBSTRING "${help}" ${exit_from} ${exit_len} exit_block)
  math(EXPR env_from "${env_at} + 14")
  string(SUBSTRING "${help}" ${env_from} -1 env_block)

  # SYNOPSIS: a line that starts with the program begins a form; an indented line
  # continues the one before.
  string(REGEX REPLACE "^usage: " "" usage "${usage}")
  help_lines("${usage}" lines)
  set(synopsis "")
  foreach(line IN LISTS lines)
    string(STRIP "${line}" line)
    if(line MATCHES "^agentstate( [a-z][a-z0-9_-]*)?( (.*))?$")
      set(program "agentstate${CMAKE_MATCH_1}")
      roff_text("${CMAKE_MATCH_3}" rest)
      if(synopsis)
        string(APPEND synopsis ".br\n")
      endif()
      if(NOT page STREQUAL "agentstate" AND NOT program STREQUAL "agentstate")
        string(APPEND synopsis ".B ${program}\n${rest}\n")
      else()
        # The tool's own forms name the command as text ("agentstate COMMAND").
        roff_text("${line}" whole)
        string(REGEX REPLACE "^agentstate ?" "" whole "${whole}")
        string(APPEND synopsis ".B agentstate\n${whole}\n")
      endif()
    elseif(line)
      roff_text("${line}" rest)
      string(APPEND synopsis "${rest}\n")
    endif()
  endforeach()
  roff_list("${exit_block}" exit_roff)
  roff_list("${env_block}" env_roff)

  # help2man starts OPTIONS at a line "Options:": the first list of the body.
  string(REGEX REPLACE "(^|\n)(arguments|options):\n" "\\1Options:\n\\2:\n" body "${body}")
  file(WRITE "${MAN_DIR}/wrappers/${page}.txt" "${body}")
  file(WRITE "${MAN_DIR}/wrappers/tmp/${page}"
       "#!/bin/sh\nexec cat \"${MAN_DIR}/wrappers/${page}.txt\"\n")
  file(COPY "${MAN_DIR}/wrappers/tmp/${page}" DESTINATION "${MAN_DIR}/wrappers"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                        WORLD_READ WORLD_EXECUTE)
  # FILES: a store's files, on every page; a node's and the service's, on serve's.
  string(CONCAT files ".TP\n.I DIR/data.mdb\nthe store's data (LMDB) in its directory DIR (\\-\\-store "
            "for serve and console)\n.TP\n.I DIR/lock.mdb\nLMDB's reader table; while a process "
            "holds the store, another is refused naming its pid\n")
  if(page STREQUAL "agentstate-serve" OR page STREQUAL "agentstate")
    string(APPEND files ".TP\n.I DIR/cluster-moves.json\nserve \\-\\-cluster: the shard "
           "moves this node is in the middle of (docs/cluster.md)\n.TP\n"
           ".I /etc/default/agentstate\nthe options of the packaged service, "
           "agentstate.service, which runs serve on /var/lib/agentstate\n")
  endif()
  file(WRITE "${MAN_DIR}/wrappers/${page}.h2m"
       "[SYNOPSIS]\n${synopsis}\n[EXIT STATUS]\n${exit_roff}\n[ENVIRONMENT]\n${env_roff}\n"
       "[FILES]\n${files}\n[SEE ALSO]\n${see_also}")

  execute_process(COMMAND "${HELP2MAN}" ${common} "--name=${name}"
                          "--output=${MAN_DIR}/${page}.1"
                          "--include=${MAN_DIR}/wrappers/${page}.h2m"
                          "${MAN_DIR}/wrappers/${page}"
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
  if(see_also)
    string(APPEND see_also ",\n")
  endif()
  string(APPEND see_also ".BR agentstate-${c} (1)")
endforeach()
make_page(agentstate "${top_help}"
          "embedded session engine for agent hosts: store tools and JSON-RPC server"
          "${see_also}\n")

# agentstate-<command>.1: help2man names a page after the program it runs, so each
# command's text is printed by a wrapper called agentstate-<command>.
foreach(c IN LISTS commands)
  execute_process(COMMAND "${AGENTSTATE_EXE}" ${c} --help
                  OUTPUT_VARIABLE help RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "manpages.cmake: '${AGENTSTATE_EXE} ${c} --help' failed (${rc}): ${err}")
  endif()
  set(name "${summary_${c}}")
  if(NOT name)
    set(name "agentstate ${c}")
  endif()
  make_page("agentstate-${c}" "${help}" "${name}" ".BR agentstate (1)\n")
endforeach()
file(REMOVE_RECURSE "${MAN_DIR}/wrappers")
list(LENGTH commands n)
message(STATUS "agentstate: ${n} command man pages + agentstate.1 in ${MAN_DIR}")
