// SPDX-License-Identifier: Apache-2.0
// model/text.hpp: small text helpers shared by every floor.
#pragma once

#include <string_view>

namespace agentstate::model {

/// `s` without leading and trailing bytes found in `chars` (by default
/// ASCII whitespace). A view into `s`; never allocates.
constexpr std::string_view trim(std::string_view s,
                                std::string_view chars = " \t\r\n\f\v") noexcept {
  auto b = s.find_first_not_of(chars);
  if (b == std::string_view::npos)
    return {};
  return s.substr(b, s.find_last_not_of(chars) - b + 1);
}

/// The value of hex digit `c` (0-9, a-f, A-F), or -1.
constexpr int hex_digit(char c) noexcept {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

} // namespace agentstate::model
