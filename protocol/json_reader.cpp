// SPDX-License-Identifier: Apache-2.0
#include "protocol/json_reader.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <system_error>

#include "model/json_text.hpp"

namespace agentstate::protocol::detail {

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

void put_utf8(std::string& out, unsigned cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xc0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += char(0xe0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  } else {
    out += char(0xf0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3f));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  }
}

} // namespace

json_cursor::json_cursor(std::string_view text, std::size_t max_depth)
  : text_(text), p_(text.data()), end_(text.data() + text.size()), max_depth_(max_depth) {}

void json_cursor::ws() {
  while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r'))
    ++p_;
}

bool json_cursor::take(char c) {
  ws();
  if (p_ == end_ || *p_ != c)
    return false;
  ++p_;
  return true;
}

bool json_cursor::next_is(char c) {
  ws();
  return p_ < end_ && *p_ == c;
}

bool json_cursor::at_end() {
  ws();
  return p_ == end_;
}

bool json_cursor::take_null() {
  ws();
  return p_ < end_ && *p_ == 'n' && literal("null");
}

bool json_cursor::hex4(unsigned& out) {
  if (end_ - p_ < 4)
    return false;
  out = 0;
  for (int i = 0; i < 4; ++i) {
    char c = *p_++;
    unsigned d;
    if (c >= '0' && c <= '9')
      d = unsigned(c - '0');
    else if (c >= 'a' && c <= 'f')
      d = unsigned(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      d = unsigned(c - 'A' + 10);
    else
      return false;
    out = out * 16 + d;
  }
  return true;
}

// After a backslash. nlohmann's escapes: the short ones and \uXXXX, a high
// surrogate only as the first of a pair.
bool json_cursor::escape(std::string& out) {
  if (p_ == end_)
    return false;
  char e = *p_++;
  if (e != 'u') {
    char c = model::unescaped[static_cast<unsigned char>(e)];
    if (c == 0)
      return false;
    out += c;
    return true;
  }
  unsigned cp;
  if (!hex4(cp))
    return false;
  if (cp >= 0xd800 && cp <= 0xdbff) {
    if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u')
      return false;
    p_ += 2;
    unsigned lo;
    if (!hex4(lo) || lo < 0xdc00 || lo > 0xdfff)
      return false;
    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
  } else if (cp >= 0xdc00 && cp <= 0xdfff) {
    return false;
  }
  put_utf8(out, cp);
  return true;
}

// Runs of plain bytes are appended whole; other bytes are checked one by one
// (control characters refused, UTF-8 strict as nlohmann's lexer).
bool json_cursor::read_string(std::string& out) {
  if (!take('"'))
    return false;
  const char* run = p_;
  while (p_ < end_) {
    auto c = static_cast<unsigned char>(*p_);
    if (c == '"') {
      out.append(run, p_);
      ++p_;
      return true;
    }
    if (c == '\\') {
      out.append(run, p_);
      ++p_;
      if (!escape(out))
        return false;
      run = p_;
    } else if (c < 0x20) {
      return false;
    } else if (c >= 0x80) {
      auto n = model::utf8_sequence(text_, static_cast<std::size_t>(p_ - text_.data()));
      if (n == 0)
        return false;
      p_ += n;
    } else {
      ++p_;
    }
  }
  return false;
}

bool json_cursor::read_key(std::string_view& out, std::string& scratch) {
  if (!next_is('"'))
    return false;
  // Plain printable ASCII up to the closing quote is the name as it stands.
  const char* first = p_ + 1;
  const char* q = first;
  while (q < end_ && model::plain_bytes[static_cast<unsigned char>(*q)])
    ++q;
  if (q < end_ && *q == '"') {
    out = std::string_view(first, static_cast<std::size_t>(q - first));
    p_ = q + 1;
    return true;
  }
  scratch.clear();
  if (!read_string(scratch))
    return false;
  out = scratch;
  return true;
}

// nlohmann's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?; an
// integer is unsigned unless negative; a fraction or exponent makes a
// double (correctly rounded, as strtod).
bool json_cursor::read_number(json& out) {
  ws();
  const char* start = p_;
  bool negative = false;
  if (p_ < end_ && *p_ == '-') {
    negative = true;
    ++p_;
  }
  if (p_ == end_)
    return false;
  if (*p_ == '0') {
    ++p_;
  } else if (*p_ >= '1' && *p_ <= '9') {
    while (p_ < end_ && is_digit(*p_))
      ++p_;
  } else {
    return false;
  }
  // One or more digits, taken.
  auto digits = [&] {
    if (p_ == end_ || !is_digit(*p_))
      return false;
    while (p_ < end_ && is_digit(*p_))
      ++p_;
    return true;
  };
  bool fractional = false;
  if (p_ < end_ && *p_ == '.') {
    ++p_;
    if (!digits())
      return false;
    fractional = true;
  }
  if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
    ++p_;
    if (p_ < end_ && (*p_ == '+' || *p_ == '-'))
      ++p_;
    if (!digits())
      return false;
    fractional = true;
  }
  if (fractional) {
    double d;
    auto r = std::from_chars(start, p_, d);
    if (r.ec != std::errc() || r.ptr != p_ || !std::isfinite(d))
      return false;
    out = d;
  } else if (negative) {
    std::int64_t v;
    auto r = std::from_chars(start, p_, v);
    if (r.ec != std::errc() || r.ptr != p_)
      return false;
    out = v;
  } else {
    std::uint64_t v;
    auto r = std::from_chars(start, p_, v);
    if (r.ec != std::errc() || r.ptr != p_)
      return false;
    out = v;
  }
  return true;
}

bool json_cursor::literal(std::string_view word) {
  if (static_cast<std::size_t>(end_ - p_) < word.size()
      || std::string_view(p_, word.size()) != word)
    return false;
  p_ += word.size();
  return true;
}

bool json_cursor::read_value(json& out, std::size_t depth) {
  ws();
  if (p_ == end_)
    return false;
  switch (*p_) {
    case '{': {
      if (!may_open(depth))
        return false;
      ++p_;
      if (out.is_object())
        out.get_ref<json::object_t&>().clear(); // keeps the map: no allocation
      else
        out = json::object();
      auto& members = *out.get_ptr<json::object_t*>();
      return read_members(*this, [&](std::string_view name) {
        auto [it, fresh] = members.emplace(std::string(name), nullptr);
        return fresh && read_value(it->second, depth + 1);
      });
    }
    case '[': {
      if (!may_open(depth))
        return false;
      ++p_;
      out = json::array();
      auto& items = *out.get_ptr<json::array_t*>();
      return read_items(*this, [&] {
        items.emplace_back();
        return read_value(items.back(), depth + 1);
      });
    }
    case '"': out = json::value_t::string; return read_string(*out.get_ptr<json::string_t*>());
    case 't': out = true; return literal("true");
    case 'f': out = false; return literal("false");
    case 'n': out = nullptr; return literal("null");
    default: return read_number(out);
  }
}

bool read_json_fast(std::string_view text, std::size_t max_depth, json& out) {
  // A byte order mark is skipped by nlohmann only at the very start.
  if (!text.empty() && static_cast<unsigned char>(text.front()) == 0xef)
    return false;
  json_cursor c(text, max_depth);
  return c.read_value(out, 0) && c.at_end();
}

result<json> parse_request_json(std::string_view text, std::size_t max_depth) {
  try {
    json out;
    if (read_json_fast(text, max_depth, out))
      return out;
  } catch (const std::bad_alloc&) {
    // parse_json decides, and reports exhaustion its own way.
  }
  return parse_json(text, max_depth);
}

} // namespace agentstate::protocol::detail
