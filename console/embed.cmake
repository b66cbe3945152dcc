# SPDX-License-Identifier: Apache-2.0
# Writes OUT, a C++ file defining agentstate::console::assets (console/assets.hpp):
# each of the console's page files as a raw string literal. Run by the build
# (cmake -P) whenever one of them changes; no file is read at run time.
set(pairs "index_html=index.html" "console_js=console.js" "console_css=console.css")
set(text "// Generated from console/assets/ by console/embed.cmake; do not edit.\n")
string(APPEND text "#include \"console/assets.hpp\"\n\nnamespace agentstate::console::assets {\n\n")
foreach(pair IN LISTS pairs)
  string(REPLACE "=" ";" parts "${pair}")
  list(GET parts 0 name)
  list(GET parts 1 file)
  file(READ "${SRC}/${file}" content)
  string(FIND "${content}" ")asset\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "console/assets/${file} holds the literal's delimiter )asset\"")
  endif()
  string(APPEND text "const char* const ${name} = R\"asset(${content})asset\";\n\n")
endforeach()
string(APPEND text "} // namespace agentstate::console::assets\n")
file(WRITE "${OUT}.tmp" "${text}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
