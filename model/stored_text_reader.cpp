// SPDX-License-Identifier: Apache-2.0
// parse_stored_text and decode_event_text: the reader of the stored JSON
// form (model/event_text.hpp).
#include "model/event_text.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <system_error>
#include <utility>

#include "model/json_text.hpp"
#include "model/text.hpp"

namespace agentstate::model {

// -- reading the stored form ----------------------------------------------------

namespace {

constexpr bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Equality with a member name (a string literal): the length first, then
// the bytes, compared inline (the length is a constant).
template <std::size_t N>
bool is(std::string_view key, const char (&name)[N]) {
  return key.size() == N - 1 && std::memcmp(key.data(), name, N - 1) == 0;
}

// a < b in std::map's order (bytes compared unsigned), without a call:
// member names are short.
bool key_before(std::string_view a, std::string_view b) {
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] != b[i])
      return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[i]);
  return a.size() < b.size();
}

// The bytes of `w` (8 bytes of text in memory order) that end a plain run
// of a string (see plain_bytes): '"', '\\', a control byte or a byte of 0x80
// and above, each marked by its high bit. Zero exactly when there is none.
// Loaded little-endian, the least significant marked byte is the first such
// byte (a borrow may wrongly mark a more significant one).
[[gnu::always_inline]] inline std::uint64_t run_enders(std::uint64_t w) {
  constexpr std::uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
  const std::uint64_t quote = w ^ (ones * '"'), backslash = w ^ (ones * '\\');
  const std::uint64_t zero_quote = (quote - ones) & ~quote;
  const std::uint64_t zero_backslash = (backslash - ones) & ~backslash;
  const std::uint64_t control = (w - ones * 0x20) & ~w;
  return ((zero_quote | zero_backslash | control) & highs) | (w & highs);
}

// A cursor over JSON text in the stored form (see parse_stored_text). Every
// member function returns false, with the cursor anywhere, on text outside
// that form; the caller then discards what was built.
class stored_reader {
public:
  explicit stored_reader(std::string_view s) : p_(s.data()), end_(s.data() + s.size()) {}

  bool at_end() const { return p_ == end_; }
  bool next_is(char c) const { return p_ != end_ && *p_ == c; }

  template <std::size_t N>
  bool literal(const char (&word)[N]) {
    if (static_cast<std::size_t>(end_ - p_) < N - 1 || std::memcmp(p_, word, N - 1) != 0)
      return false;
    p_ += N - 1;
    return true;
  }

  // Appends the string at the cursor, unescaped, to `out`.
  bool string(std::string& out) {
    if (!eat('"'))
      return false;
    const char* run = p_;
    for (;;) {
      if (!skip_plain() || p_ == end_)
        return false;
      auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        out.append(run, static_cast<std::size_t>(p_ - run));
        ++p_;
        return true;
      }
      if (c != '\\')
        return false; // a raw control character
      out.append(run, static_cast<std::size_t>(p_ - run));
      if (end_ - p_ < 2)
        return false;
      char e = p_[1];
      p_ += 2;
      if (char c = unescaped[static_cast<unsigned char>(e)]) {
        out += c;
        run = p_;
        continue;
      }
      if (e != 'u')
        return false;
      if (end_ - p_ < 4)
        return false;
      int cp = 0;
      for (int k = 0; k < 4; ++k) {
        int h = model::hex_digit(p_[k]);
        if (h < 0)
          return false;
        cp = (cp << 4) | h;
      }
      if (cp >= 0xd800 && cp <= 0xdfff)
        return false; // surrogate pairs: left to nlohmann
      p_ += 4;
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        out += static_cast<char>(0xc0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3f));
      } else {
        out += static_cast<char>(0xe0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
      }
      run = p_;
    }
  }

  // A member name at the cursor: a view of its text when it has no escape
  // (into the input, no copy), else of its unescaped form in `scratch`.
  bool key(std::string_view& view, std::string& scratch) {
    const char* open = p_;
    if (!eat('"'))
      return false;
    const char* start = p_;
    if (!skip_plain() || p_ == end_)
      return false;
    if (*p_ == '"') {
      view = std::string_view(start, static_cast<std::size_t>(p_ - start));
      ++p_;
      return true;
    }
    p_ = open; // an escape (or a raw control byte, refused there)
    scratch.clear();
    if (!string(scratch))
      return false;
    view = scratch;
    return true;
  }

  // Any value, into `out` (null on entry).
  bool value(json& out, int depth) {
    if (p_ == end_ || depth >= max_depth)
      return false;
    switch (*p_) {
      case '"': out = json::value_t::string; return string(out.get_ref<std::string&>());
      case '{': out = json::value_t::object; return object(out.get_ref<json::object_t&>(), depth);
      case '[': {
        out = json::value_t::array;
        auto& a = out.get_ref<json::array_t&>();
        return elements([&] { return value(a.emplace_back(), depth + 1); });
      }
      case 't': return literal("true") && (out = true, true);
      case 'f': return literal("false") && (out = false, true);
      case 'n': return literal("null");
      default: return number(out);
    }
  }

  // The members of the object at the cursor into `obj` (empty on entry).
  bool object(json::object_t& obj, int depth) {
    return members([&](std::string_view key) {
      auto it = obj.emplace_hint(obj.end(), key, nullptr);
      return value(it->second, depth + 1);
    });
  }

  // Reads an array, calling on_element() with the cursor at each element;
  // on_element must consume it.
  template <class F>
  bool elements(F&& on_element) {
    if (!eat('['))
      return false;
    if (eat(']'))
      return true;
    do {
      if (!on_element())
        return false;
    } while (eat(','));
    return eat(']');
  }

  // Reads an object, calling on_member(key) with the cursor at each member's
  // value; on_member must consume the value. Keys must strictly increase.
  template <class F>
  bool members(F&& on_member) {
    if (!eat('{'))
      return false;
    if (eat('}'))
      return true;
    // This key and the one before, in turn; an escaped one in its scratch.
    std::string_view keys[2];
    std::string scratch[2];
    for (int i = 0, n = 0;; i ^= 1, ++n) {
      if (!key(keys[i], scratch[i]) || !eat(':'))
        return false;
      if (n > 0 && !key_before(keys[i ^ 1], keys[i]))
        return false;
      if (!on_member(keys[i]))
        return false;
      if (eat('}'))
        return true;
      if (!eat(','))
        return false;
    }
  }

private:
  // Advances over plain bytes (plain_bytes) and valid UTF-8 sequences; stops
  // at '"', '\\', a control byte or the end. False on invalid UTF-8.
  [[gnu::always_inline]] bool skip_plain() {
    constexpr bool little_endian = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
    for (;;) {
      std::uint64_t enders = 0;
      for (std::uint64_t w; end_ - p_ >= 8; p_ += 8) {
        std::memcpy(&w, p_, 8);
        if ((enders = run_enders(w)) != 0)
          break;
      }
      if (little_endian && enders != 0)
        p_ += __builtin_ctzll(enders) / 8; // the first byte in memory is the lowest
      else
        while (p_ != end_ && plain_bytes[static_cast<unsigned char>(*p_)])
          ++p_;
      if (p_ == end_ || static_cast<unsigned char>(*p_) < 0x80)
        return true;
      auto len = utf8_sequence(std::string_view(p_, static_cast<std::size_t>(end_ - p_)), 0);
      if (len == 0)
        return false;
      p_ += len;
    }
  }

  // The default options::limits.max_json_depth; each level costs ~300 bytes
  // of stack (the reader recurses), so ~20 KB at most.
  static constexpr int max_depth = 64;

  bool eat(char c) {
    if (p_ == end_ || *p_ != c)
      return false;
    ++p_;
    return true;
  }

  // nlohmann's number types: unsigned for a non-negative integer, signed for
  // a negative one, double for a fraction or exponent. Integers of more than
  // 18 digits and doubles out of range are left to nlohmann.
  bool number(json& out) {
    const char* start = p_;
    bool negative = eat('-');
    const char* digits = p_;
    if (p_ == end_ || !is_digit(*p_))
      return false;
    if (*p_ == '0')
      ++p_;
    else
      while (p_ != end_ && is_digit(*p_))
        ++p_;
    const auto count = static_cast<std::size_t>(p_ - digits);
    bool fraction = false, exponent = false;
    const char* point = p_;
    if (eat('.')) {
      if (p_ == end_ || !is_digit(*p_))
        return false;
      while (p_ != end_ && is_digit(*p_))
        ++p_;
      fraction = true;
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-'))
        ++p_;
      if (p_ == end_ || !is_digit(*p_))
        return false;
      while (p_ != end_ && is_digit(*p_))
        ++p_;
      fraction = exponent = true;
    }
    if (fraction && !exponent && decimal(negative, digits, point, out))
      return true;
    if (!fraction) {
      if (count > 18)
        return false;
      std::uint64_t v = 0;
      for (const char* d = digits; d != p_; ++d)
        v = v * 10 + static_cast<std::uint64_t>(*d - '0');
      if (negative)
        out = -static_cast<std::int64_t>(v);
      else
        out = v;
      return true;
    }
    double d = 0;
    auto [ptr, ec] = std::from_chars(start, p_, d);
    if (ec != std::errc() || ptr != p_ || !std::isfinite(d))
      return false;
    out = d;
    return true;
  }

  // Digits, a point and digits (the cursor past them) as the double
  // from_chars gives, when at most 16 digits make an integer m <= 2^53:
  // then m and 10^k (k <= 16) are exact doubles and the one IEEE division
  // m / 10^k rounds correctly (Clinger's fast path). False, with `out`
  // untouched, for any other decimal.
  bool decimal(bool negative, const char* digits, const char* point, json& out) const {
    static constexpr double powers[] = {1e0, 1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7, 1e8,
                                        1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16};
    const auto places = static_cast<std::size_t>(p_ - point - 1);
    if (static_cast<std::size_t>(point - digits) + places > 16)
      return false;
    std::uint64_t m = 0;
    for (const char* d = digits; d != point; ++d)
      m = m * 10 + static_cast<std::uint64_t>(*d - '0');
    for (const char* d = point + 1; d != p_; ++d)
      m = m * 10 + static_cast<std::uint64_t>(*d - '0');
    if (m > (std::uint64_t{1} << 53))
      return false;
    const double v = static_cast<double>(m) / powers[places];
    out = negative ? -v : v;
    return true;
  }

  const char* p_;
  const char* end_;
};

} // namespace

bool parse_stored_text(std::string_view text, json& out) {
  stored_reader r(text);
  out = json();
  return r.value(out, 0) && r.at_end();
}

bool decode_event_text(std::string_view text, event& ev) {
  stored_reader r(text);
  // A string member, or null for absent (read_string in the codec).
  auto text_member = [&](std::string& out) { return r.literal("null") || r.string(out); };
  // An object member into `out` (an empty object), or null for absent.
  auto object_member = [&](json& out) {
    return r.literal("null") || r.object(out.get_ref<json::object_t&>(), 1);
  };
  auto actions = [&](std::string_view key) {
    if (is(key, "state_delta"))
      return object_member(ev.actions.state_delta);
    if (is(key, "artifact_delta"))
      return object_member(ev.actions.artifact_delta);
    if (is(key, "state_remove")) {
      auto& removes = ev.actions.state_remove;
      return r.literal("null") || r.elements([&] { return r.string(removes.emplace_back()); });
    }
    auto& extra = ev.actions.extra.get_ref<json::object_t&>();
    return r.value(extra.emplace_hint(extra.end(), key, nullptr)->second, 1);
  };
  bool ok = r.members([&](std::string_view key) {
    if (is(key, "id"))
      return text_member(ev.id);
    if (is(key, "invocation_id"))
      return text_member(ev.invocation_id);
    if (is(key, "author"))
      return text_member(ev.author);
    if (is(key, "actions"))
      return r.literal("null") || r.members(actions);
    if (is(key, "timestamp")) {
      json t;
      if (!r.value(t, 1))
        return false;
      if (t.is_null())
        return true;
      if (!t.is_number())
        return false;
      ev.timestamp = t.get<double>();
      return std::isfinite(*ev.timestamp);
    }
    if (is(key, "partial")) {
      if (r.literal("null"))
        return true;
      if (r.literal("true"))
        return ev.partial = true, true;
      return r.literal("false") && (ev.partial = false, true);
    }
    if (is(key, "content")) {
      ev.content.emplace();
      return r.value(*ev.content, 1);
    }
    auto& extra = ev.extra.get_ref<json::object_t&>();
    return r.value(extra.emplace_hint(extra.end(), key, nullptr)->second, 1);
  });
  return ok && r.at_end();
}

} // namespace agentstate::model
