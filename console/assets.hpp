// SPDX-License-Identifier: Apache-2.0
// console/assets.hpp: the console's page, compiled into the binary from
// console/assets/ (console/embed.cmake writes their definitions at build time).
#pragma once

namespace agentstate::console::assets {

extern const char* const index_html;
extern const char* const console_js;
extern const char* const console_css;

} // namespace agentstate::console::assets
