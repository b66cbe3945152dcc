#include "store/event_text.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <system_error>
#include <utility>
#include <vector>

#include "store/json_encoder.hpp"

namespace agentstate::store {

namespace {

using serializer = nlohmann::detail::serializer<json>;

// The length of the UTF-8 sequence starting at the non-ASCII byte s[i], or 0
// when it is not strict UTF-8 (overlong, surrogate, above U+10FFFF, cut off).
std::size_t utf8_sequence(std::string_view s, std::size_t i) noexcept {
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
constexpr std::array<bool, 256> plain_bytes = [] {
  std::array<bool, 256> t{};
  for (int c = 0x20; c < 0x80; ++c)
    t[static_cast<std::size_t>(c)] = c != '"' && c != '\\';
  return t;
}();

// JSON's short escapes: the character, and the letter after the backslash.
// (The encoder never writes "\/"; the reader accepts it.)
constexpr std::pair<char, char> short_escapes[] = {
  {'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'\b', 'b'},
  {'\f', 'f'}, {'\n', 'n'}, {'\r', 'r'}, {'\t', 't'}};

// escape_letter[c]: the letter escaping byte c, 0 if none; unescaped[e]:
// the byte an escape letter e stands for, 0 if e is not a short escape.
constexpr std::array<char, 256> escape_letter = [] {
  std::array<char, 256> t{};
  for (auto [c, e] : short_escapes)
    if (c != '/')
      t[static_cast<unsigned char>(c)] = e;
  return t;
}();
constexpr std::array<char, 256> unescaped = [] {
  std::array<char, 256> t{};
  for (auto [c, e] : short_escapes)
    t[static_cast<unsigned char>(e)] = c;
  return t;
}();

// Appends `s` as a JSON string in nlohmann's escaping (ensure_ascii off):
// ", \ and the control characters below 0x20 are escaped, the short forms
// where JSON has them and \u00xx (lowercase hex) otherwise; everything else
// is copied. Returns false, leaving `out` partly written, when `s` is not
// strict UTF-8. One pass over `s`.
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

// One member of an object being written, in the order keys sort.
struct member {
  enum class kind { value, text, actions, removes };
  std::string_view key;
  kind how = kind::value;
  const json* value = nullptr;
  const std::string* text = nullptr;
};

bool key_less(const member& a, const member& b) {
  return a.key < b.key;
}

class writer {
public:
  explicit writer(json_encoder& enc) : out_(enc.buf), ser_(enc.ser) {}

  // False when a string is not valid UTF-8; nlohmann's own exceptions for a
  // value propagate to encode_event_text.
  bool object(std::vector<member>& members, const event& ev) {
    // Insertion sort (stable) for the usual handful of members: stable_sort
    // allocates a buffer.
    if (members.size() <= 16) {
      for (std::size_t i = 1; i < members.size(); ++i)
        for (std::size_t j = i; j > 0 && key_less(members[j], members[j - 1]); --j)
          std::swap(members[j], members[j - 1]);
    } else {
      std::stable_sort(members.begin(), members.end(), key_less);
    }
    out_ += '{';
    bool first = true;
    for (auto& m : members) {
      if (!first)
        out_ += ',';
      first = false;
      if (!string(m.key))
        return false;
      out_ += ':';
      switch (m.how) {
        case member::kind::value:
          ser_.dump(*m.value, false, false, 0);
          break;
        case member::kind::text:
          if (!string(*m.text))
            return false;
          break;
        case member::kind::actions:
          if (!actions(ev))
            return false;
          break;
        case member::kind::removes:
          out_ += '[';
          for (std::size_t i = 0; i < ev.actions.state_remove.size(); ++i) {
            if (i)
              out_ += ',';
            if (!string(ev.actions.state_remove[i]))
              return false;
          }
          out_ += ']';
          break;
      }
    }
    out_ += '}';
    return true;
  }

private:
  bool string(std::string_view s) { return append_escaped(out_, s); }

  // "actions": its unknown members, then state_delta, state_remove (when not
  // empty) and artifact_delta, which take precedence over unknown members of
  // the same name (as in to_json(event)).
  bool actions(const event& ev) {
    const auto& a = ev.actions;
    std::vector<member> m;
    m.reserve(3 + (a.extra.is_object() ? a.extra.size() : 0));
    m.push_back({"state_delta", member::kind::value, &a.state_delta});
    if (!a.state_remove.empty())
      m.push_back({"state_remove", member::kind::removes});
    m.push_back({"artifact_delta", member::kind::value, &a.artifact_delta});
    if (a.extra.is_object())
      for (auto it = a.extra.begin(); it != a.extra.end(); ++it)
        if (it.key() != "state_delta" && it.key() != "artifact_delta"
            && !(it.key() == "state_remove" && !a.state_remove.empty()))
          m.push_back({it.key(), member::kind::value, &it.value()});
    return object(m, ev);
  }

  std::string& out_;
  serializer& ser_;
};

} // namespace

// -- reading the stored form ----------------------------------------------------

namespace {

constexpr bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Equality with a member name: the length first, then the bytes.
bool is(const std::string& key, std::string_view name) {
  return key.size() == name.size() && std::memcmp(key.data(), name.data(), name.size()) == 0;
}

// a < b in std::map's order (bytes compared unsigned); most keys differ in
// their first byte, which is compared without a call.
bool key_before(const std::string& a, const std::string& b) {
  if (!a.empty() && !b.empty() && a[0] != b[0])
    return static_cast<unsigned char>(a[0]) < static_cast<unsigned char>(b[0]);
  return a < b;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

// A cursor over JSON text in the stored form (see parse_stored_text). Every
// member function returns false, with the cursor anywhere, on text outside
// that form; the caller then discards what was built.
class stored_reader {
public:
  explicit stored_reader(std::string_view s) : p_(s.data()), end_(s.data() + s.size()) {}

  bool at_end() const { return p_ == end_; }
  bool next_is(char c) const { return p_ != end_ && *p_ == c; }

  bool literal(std::string_view word) {
    if (static_cast<std::size_t>(end_ - p_) < word.size()
        || std::string_view(p_, word.size()) != word)
      return false;
    p_ += word.size();
    return true;
  }

  // Appends the string at the cursor, unescaped, to `out`.
  bool string(std::string& out) {
    if (!eat('"'))
      return false;
    const char* run = p_;
    for (;;) {
      while (p_ != end_ && plain_bytes[static_cast<unsigned char>(*p_)])
        ++p_;
      if (p_ == end_)
        return false;
      auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        out.append(run, static_cast<std::size_t>(p_ - run));
        ++p_;
        return true;
      }
      if (c >= 0x80) {
        auto len = utf8_sequence(std::string_view(p_, static_cast<std::size_t>(end_ - p_)), 0);
        if (len == 0)
          return false;
        p_ += len;
        continue;
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
        int h = hex_value(p_[k]);
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

  // Any value, into `out` (null on entry).
  bool value(json& out, int depth) {
    if (p_ == end_ || depth >= max_depth)
      return false;
    switch (*p_) {
      case '"':
        out = json::value_t::string;
        return string(out.get_ref<std::string&>());
      case '{':
        out = json::value_t::object;
        return object(out.get_ref<json::object_t&>(), depth);
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
    return members([&](const std::string& key) {
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
    std::string keys[2]; // this key and the one before, in turn
    for (int i = 0, n = 0;; i ^= 1, ++n) {
      std::string& key = keys[i];
      key.clear();
      if (!string(key) || !eat(':'))
        return false;
      if (n > 0 && !key_before(keys[i ^ 1], key))
        return false;
      if (!on_member(static_cast<const std::string&>(key)))
        return false;
      if (eat('}'))
        return true;
      if (!eat(','))
        return false;
    }
  }

private:
  // The default options::limit max_json_depth; each level costs ~300 bytes
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
    bool fraction = false;
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
      fraction = true;
    }
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

  const char* p_;
  const char* end_;
};

} // namespace

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

result<std::string> encode_event_text(const event& ev) {
  thread_local json_encoder enc;
  enc.buf.clear();
  try {
    writer w(enc);
    // Top level: the known members, then unknown ones that do not collide
    // with a known name (known members win, as in to_json(event)).
    std::vector<member> m;
    m.reserve(7 + (ev.extra.is_object() ? ev.extra.size() : 0));
    m.push_back({"id", member::kind::text, nullptr, &ev.id});
    m.push_back({"invocation_id", member::kind::text, nullptr, &ev.invocation_id});
    m.push_back({"author", member::kind::text, nullptr, &ev.author});
    json timestamp, partial;
    if (ev.timestamp) {
      timestamp = *ev.timestamp;
      m.push_back({"timestamp", member::kind::value, &timestamp});
    }
    if (ev.partial) {
      partial = *ev.partial;
      m.push_back({"partial", member::kind::value, &partial});
    }
    if (ev.content)
      m.push_back({"content", member::kind::value, &*ev.content});
    m.push_back({"actions", member::kind::actions});
    if (ev.extra.is_object()) {
      const std::size_t known = m.size();
      for (auto it = ev.extra.begin(); it != ev.extra.end(); ++it) {
        bool taken = false;
        for (std::size_t k = 0; k < known && !taken; ++k)
          taken = m[k].key == it.key();
        if (!taken)
          m.push_back({it.key(), member::kind::value, &it.value()});
      }
    }
    if (!w.object(m, ev))
      return error{errc::invalid_argument,
                   "event: cannot encode value: a string is not valid UTF-8"};
  } catch (const json::exception& e) {
    return error{errc::invalid_argument, std::string("event: cannot encode value: ") + e.what()};
  } catch (const std::exception& e) {
    return error{errc::internal, std::string("event: JSON encoder: ") + e.what()};
  }
  return enc.take();
}

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
  auto actions = [&](const std::string& key) {
    if (is(key, "state_delta"))
      return object_member(ev.actions.state_delta);
    if (is(key, "artifact_delta"))
      return object_member(ev.actions.artifact_delta);
    if (is(key, "state_remove")) {
      auto& removes = ev.actions.state_remove;
      return r.literal("null")
             || r.elements([&] { return r.string(removes.emplace_back()); });
    }
    auto& extra = ev.actions.extra.get_ref<json::object_t&>();
    return r.value(extra.emplace_hint(extra.end(), key, nullptr)->second, 1);
  };
  bool ok = r.members([&](const std::string& key) {
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

} // namespace agentstate::store
