// SPDX-License-Identifier: Apache-2.0
#include "model/json_text.hpp"

namespace agentstate::model {

bool valid_utf8(std::string_view s) noexcept {
  std::size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    auto len = utf8_sequence(s, i);
    if (len == 0)
      return false;
    i += len;
  }
  return true;
}

bool append_escaped(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  std::size_t run = 0; // start of the bytes not yet copied
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (plain_bytes[c]) {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      auto len = utf8_sequence(s, i);
      if (len == 0)
        return false;
      i += len;
      continue;
    }
    out.append(s.data() + run, i - run);
    run = ++i;
    out += '\\';
    if (char e = escape_letter[c]) {
      out += e;
    } else {
      out += "u00";
      out += hex[c >> 4];
      out += hex[c & 0xf];
    }
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
  return true;
}

} // namespace agentstate::model
