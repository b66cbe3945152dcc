// SPDX-License-Identifier: Apache-2.0
// model/json_text.hpp: the byte-level pieces of JSON text shared by the
// stored-event writer and the stored-text reader: strict UTF-8 and JSON's
// string escapes, in one table each. Pure; no allocation but `out`'s.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace agentstate::model {

// The length of the UTF-8 sequence starting at the non-ASCII byte s[i], or 0
// when it is not strict UTF-8 (overlong, surrogate, above U+10FFFF, cut off).
inline std::size_t utf8_sequence(std::string_view s, std::size_t i) noexcept {
  auto c = static_cast<unsigned char>(s[i]);
  std::size_t len;
  std::uint32_t cp;
  if ((c & 0xe0) == 0xc0) {
    len = 2;
    cp = c & 0x1f;
  } else if ((c & 0xf0) == 0xe0) {
    len = 3;
    cp = c & 0x0f;
  } else if ((c & 0xf8) == 0xf0) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size())
    return 0;
  for (std::size_t k = 1; k < len; ++k) {
    auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xc0) != 0x80)
      return 0;
    cp = (cp << 6) | (cc & 0x3f);
  }
  if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)
      || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return len;
}

// Bytes copied as they are without a closer look: printable ASCII but " and \.
inline constexpr std::array<bool, 256> plain_bytes = [] {
  std::array<bool, 256> t{};
  for (int c = 0x20; c < 0x80; ++c)
    t[static_cast<std::size_t>(c)] = c != '"' && c != '\\';
  return t;
}();

// JSON's short escapes: the character, and the letter after the backslash.
// (The encoder never writes "\/"; the reader accepts it.)
inline constexpr std::pair<char, char> short_escapes[] = {{'"', '"'},  {'\\', '\\'}, {'/', '/'},
                                                          {'\b', 'b'}, {'\f', 'f'},  {'\n', 'n'},
                                                          {'\r', 'r'}, {'\t', 't'}};

// escape_letter[c]: the letter escaping byte c, 0 if none; unescaped[e]:
// the byte an escape letter e stands for, 0 if e is not a short escape.
inline constexpr std::array<char, 256> escape_letter = [] {
  std::array<char, 256> t{};
  for (auto [c, e] : short_escapes)
    if (c != '/')
      t[static_cast<unsigned char>(c)] = e;
  return t;
}();
inline constexpr std::array<char, 256> unescaped = [] {
  std::array<char, 256> t{};
  for (auto [c, e] : short_escapes)
    t[static_cast<unsigned char>(e)] = c;
  return t;
}();

/// True when `s` is strict UTF-8: no overlong forms, no surrogates, nothing
/// above U+10FFFF (what nlohmann's encoder and the protocol accept).
/// True when `s` is strict UTF-8: no overlong forms, no surrogates, nothing
/// above U+10FFFF (what nlohmann's encoder and the protocol accept).
bool valid_utf8(std::string_view s) noexcept;

/// Appends `s` as a JSON string in nlohmann's escaping (ensure_ascii off):
/// ", \ and the control characters below 0x20 are escaped, the short forms
/// where JSON has them and \u00xx (lowercase hex) otherwise; everything else
/// is copied. Returns false, leaving `out` partly written, when `s` is not
/// strict UTF-8. One pass over `s`.
bool append_escaped(std::string& out, std::string_view s);

} // namespace agentstate::model
