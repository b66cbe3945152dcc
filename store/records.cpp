// SPDX-License-Identifier: Apache-2.0
#include "store/records.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "model/event_text.hpp"
#include "store/crc32c.hpp"
#include "store/errors.hpp"
#include "store/keys.hpp"

namespace agentstate::store {

namespace {

constexpr char legacy_tag = 1; // records and event rows of formats 1-3
constexpr std::size_t record_body = 8 + 8 + 8;
// A record of a session that expires (session_record::expires) carries two
// more doubles.
constexpr std::size_t record_body_ttl = record_body + 8 + 8;
constexpr bool record_size(std::size_t n) {
  return n == record_body || n == record_body_ttl;
}

// Little-endian integers of N bytes (4 or 8) at p, whatever the host's order.
template <class U>
U read_le(const char* p) {
  U x = 0;
  for (int i = static_cast<int>(sizeof(U)) - 1; i >= 0; --i)
    x = static_cast<U>((x << 8) | static_cast<unsigned char>(p[i]));
  return x;
}
template <class U>
void write_le(char* p, U x) {
  for (std::size_t i = 0; i < sizeof(U); ++i)
    p[i] = static_cast<char>((x >> (8 * i)) & 0xff);
}

void append_le64(std::string& out, std::uint64_t x) {
  char b[8];
  write_le(b, x);
  out.append(b, 8);
}

std::uint64_t read_le64(const char* p) {
  return read_le<std::uint64_t>(p);
}

std::uint32_t checksum(std::string_view key, std::string_view body) {
  return crc32c_extend(crc32c_extend(0, key), body);
}

void put_le32(char* p, std::uint32_t x) {
  write_le(p, x);
}

std::uint32_t read_le32(const char* p) {
  return read_le<std::uint32_t>(p);
}

// The length of the valid UTF-8 sequence at s[i] (printable when ASCII), or
// 0 when there is none.
std::size_t utf8_run(std::string_view s, std::size_t i) {
  auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  if (c >= 0x20 && c < 0x7f)
    return 1;
  std::size_t n;
  std::uint32_t min;
  if (c >= 0xc2 && c <= 0xdf)
    n = 2, min = 0x80;
  else if (c >= 0xe0 && c <= 0xef)
    n = 3, min = 0x800;
  else if (c >= 0xf0 && c <= 0xf4)
    n = 4, min = 0x10000;
  else
    return 0;
  if (i + n > s.size())
    return 0;
  std::uint32_t cp = c & (0x7f >> n);
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80)
      return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

std::string joined(const std::vector<std::string_view>& parts, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n && i < parts.size(); ++i) {
    if (i)
      out += '/';
    out += printable(parts[i]);
  }
  return out;
}

} // namespace

void seal_in_place(std::string& row, std::string_view key) {
  row[0] = sealed_tag;
  put_le32(&row[1], checksum(key, std::string_view(row).substr(seal_bytes)));
}

void seal_into(std::string& out, std::string_view key, std::string_view body) {
  out.resize(seal_bytes + body.size());
  if (!body.empty())
    std::memcpy(&out[seal_bytes], body.data(), body.size());
  seal_in_place(out, key);
}

std::string seal(std::string_view key, std::string_view body) {
  std::string out;
  seal_into(out, key, body);
  return out;
}

std::optional<std::string_view> open_row(table t, std::string_view key, std::string_view value,
                                         bool legacy) noexcept {
  if (!legacy) {
    if (value.size() < seal_bytes || value[0] != sealed_tag)
      return std::nullopt;
    auto body = value.substr(seal_bytes);
    if (read_le32(value.data() + 1) != checksum(key, body))
      return std::nullopt;
    if ((t == table::sessions && !record_size(body.size()))
        || (t == table::events && body.size() < 8))
      return std::nullopt; // a bug of the writer rather than damage
    return body;
  }
  switch (t) {
    case table::sessions:
      if (value.size() != 1 + record_body || value[0] != legacy_tag)
        return std::nullopt;
      return value.substr(1);
    case table::events:
      if (value.size() < 9 || value[0] != legacy_tag)
        return std::nullopt;
      return value.substr(1);
    case table::by_update:
    case table::by_user:
    case table::by_created:
    case table::by_user_created:
      if (!value.empty())
        return std::nullopt;
      return value;
    default: return value;
  }
}

std::size_t open_rows(table t, std::size_t n, const std::string_view* keys,
                      const std::string_view* values, bool legacy, std::string_view* bodies,
                      bool checksums) noexcept {
  if (legacy) {
    for (std::size_t i = 0; i < n; ++i) {
      auto b = open_row(t, keys[i], values[i], true);
      if (!b)
        return i;
      bodies[i] = *b;
    }
    return n;
  }
  for (std::size_t i = 0; i < n; i += 3) {
    std::size_t m = std::min<std::size_t>(3, n - i);
    std::uint32_t crc[3] = {0, 0, 0};
    const void* p[3] = {"", "", ""};
    std::size_t len[3] = {0, 0, 0};
    for (std::size_t j = 0; j < m; ++j) {
      auto v = values[i + j];
      if (v.size() < seal_bytes || v[0] != sealed_tag)
        return i + j;
      p[j] = keys[i + j].data();
      len[j] = keys[i + j].size();
    }
    if (checksums) {
      crc32c_extend3(crc, p, len);
      for (std::size_t j = 0; j < m; ++j) {
        p[j] = values[i + j].data() + seal_bytes;
        len[j] = values[i + j].size() - seal_bytes;
      }
      crc32c_extend3(crc, p, len);
    }
    for (std::size_t j = 0; j < m; ++j) {
      auto v = values[i + j];
      auto body = v.substr(seal_bytes);
      if ((checksums && read_le32(v.data() + 1) != crc[j])
          || (t == table::sessions && !record_size(body.size()))
          || (t == table::events && body.size() < 8))
        return i + j;
      bodies[i + j] = body;
    }
  }
  return n;
}

std::string printable(std::string_view x) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(x.size());
  for (std::size_t i = 0; i < x.size();) {
    if (auto n = utf8_run(x, i)) {
      out.append(x.substr(i, n));
      i += n;
      continue;
    }
    auto c = static_cast<unsigned char>(x[i++]);
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

std::string row_name(table t, std::string_view key) {
  if ((t == table::session_state || t == table::user_state || t == table::app_state)
      && is_tally_key(t, key))
    return scope_name(t, key) + " tally";
  switch (t) {
    case table::sessions: return "session '" + joined(split_key(key, 3), 3) + "' record";
    case table::origins: return "session '" + joined(split_key(key, 3), 3) + "' origin";
    case table::doomed: return "deleted session '" + joined(split_key(key, 3), 3) + "' purge mark";
    case table::fences: {
      auto p = split_key(key, 3);
      if (p.size() == 3)
        return "user '" + joined(p, 2) + "' delete fence";
      return "app '" + printable(p[0]) + "' delete fence";
    }
    case table::shard_index: {
      if (key.size() < 8)
        return "shard index entry '" + printable(key) + "'";
      return "session '" + joined(split_key(key.substr(8), 3), 3) + "' shard index entry";
    }
    case table::outbox: {
      if (key.size() < 9 || key[key.size() - 9] != '\0')
        return "outbox row '" + printable(key) + "'";
      auto skey = key.substr(0, key.size() - 9);
      return "session '" + joined(split_key(skey, 3), 3) + "' outbox row v"
        + std::to_string(read_be64(key.substr(key.size() - 8)));
    }
    case table::app_writes: {
      auto p = split_key(key, 2);
      return "app '" + printable(p[0]) + "' write '"
        + (p.size() == 2 ? printable(p[1]) : std::string()) + "'";
    }
    case table::expiry: {
      if (key.size() < 8)
        return "expiry entry '" + printable(key) + "'";
      return "session '" + joined(split_key(key.substr(8), 3), 3) + "' expiry entry";
    }
    case table::events: {
      if (key.size() < 9 || key[key.size() - 9] != '\0')
        return "event row '" + printable(key) + "'";
      auto skey = key.substr(0, key.size() - 9);
      return "session '" + joined(split_key(skey, 3), 3) + "' event v"
        + std::to_string(read_be64(key.substr(key.size() - 8)));
    }
    case table::session_state: {
      auto p = split_key(key, 4);
      return "session '" + joined(p, 3) + "' state row '"
        + (p.size() == 4 ? printable(p[3]) : std::string()) + "'";
    }
    case table::user_state: {
      auto p = split_key(key, 3);
      return "user '" + joined(p, 2) + "' state row '"
        + (p.size() == 3 ? printable(p[2]) : std::string()) + "'";
    }
    case table::app_state: {
      auto p = split_key(key, 2);
      return "app '" + printable(p[0]) + "' state row '"
        + (p.size() == 2 ? printable(p[1]) : std::string()) + "'";
    }
    case table::by_update:
    case table::by_created: {
      // app ‖ 0 ‖ ord64(t) ‖ id ‖ 0 ‖ user
      std::string what = std::string(table_name(t)) + " entry";
      auto nul = key.find('\0');
      if (nul == std::string_view::npos || key.size() < nul + 9)
        return what + " '" + printable(key) + "'";
      auto rest = split_key(key.substr(nul + 9), 2);
      return "session '" + printable(key.substr(0, nul)) + "/"
        + (rest.size() == 2 ? printable(rest[1]) : std::string()) + "/" + printable(rest[0]) + "' "
        + what;
    }
    case table::by_user:
    case table::by_user_created: {
      // app ‖ 0 ‖ user ‖ 0 ‖ ord64(t) ‖ id
      std::string what = std::string(table_name(t)) + " entry";
      auto p = split_key(key, 3);
      if (p.size() != 3 || p[2].size() < 8)
        return what + " '" + printable(key) + "'";
      return "session '" + joined(p, 2) + "/" + printable(p[2].substr(8)) + "' " + what;
    }
    case table::changes:
      if (key.size() != 8)
        return "change log row '" + printable(key) + "'";
      return "change " + std::to_string(read_be64(key));
    case table::session_counts: return count_scope_name(key) + " session count";
    case table::meta: break;
  }
  return "meta row '" + printable(key) + "'";
}

error damaged(table t, std::string_view key) {
  return error{errc::data_corrupt,
               row_name(t, key)
                 + " is damaged (its checksum or layout is wrong; "
                   "`agentstate verify` lists every damaged row)"};
}

error missing_rows(std::string_view skey, const std::string& what) {
  return error{errc::data_corrupt,
               "session '" + joined(split_key(skey, 3), 3) + "' is missing rows: " + what
                 + " (the store is damaged; `agentstate verify` lists every "
                   "damaged row)"};
}

std::uint32_t sealed_crc(std::string_view value) noexcept {
  return value.size() < seal_bytes ? 0 : read_le32(value.data() + 1);
}

bool is_tally_key(table t, std::string_view key) noexcept {
  const auto nuls = static_cast<std::size_t>(std::count(key.begin(), key.end(), '\0'));
  switch (t) {
    case table::session_state: return nuls == 2;
    case table::user_state: return nuls == 1;
    case table::app_state: return nuls == 0;
    default: return false;
  }
}

std::string_view scope_of_row(table t, std::string_view key) noexcept {
  int nuls = t == table::session_state ? 3 : t == table::user_state ? 2 : 1;
  for (std::size_t i = 0; i < key.size(); ++i)
    if (key[i] == '\0' && --nuls == 0)
      return key.substr(0, i);
  return key;
}

std::string encode_tally(std::string_view key, const state_tally& x) {
  std::string out(seal_bytes, '\0');
  append_le64(out, x.rows);
  append_le64(out, x.sum);
  seal_in_place(out, key);
  return out;
}

std::optional<state_tally> decode_tally(std::string_view key, std::string_view value) noexcept {
  if (value.size() != seal_bytes + 16 || value[0] != sealed_tag
      || read_le32(value.data() + 1) != checksum(key, value.substr(seal_bytes)))
    return std::nullopt;
  return state_tally{read_le64(value.data() + seal_bytes),
                     read_le64(value.data() + seal_bytes + 8)};
}

std::string scope_name(table t, std::string_view key) {
  switch (t) {
    case table::session_state: return "session '" + joined(split_key(key, 3), 3) + "' state";
    case table::user_state: return "user '" + joined(split_key(key, 2), 2) + "' state";
    default: return "app '" + printable(key) + "' state";
  }
}

error tally_mismatch(table t, std::string_view key, const state_tally& stored,
                     const state_tally& found) {
  std::string what = stored.rows == found.rows
    ? "its rows are not the ones its tally sums (" + std::to_string(found.rows) + " rows)"
    : "its tally counts " + std::to_string(stored.rows) + " rows, a read found "
      + std::to_string(found.rows);
  return error{errc::data_corrupt,
               scope_name(t, key) + " is missing rows: " + what
                 + " (the store is damaged; `agentstate verify` lists every damaged row)"};
}

std::string encode_session_count(std::string_view key, std::uint64_t n) {
  std::string out(seal_bytes, '\0');
  append_le64(out, n);
  seal_in_place(out, key);
  return out;
}

std::optional<std::uint64_t> decode_session_count(std::string_view key,
                                                  std::string_view value) noexcept {
  if (value.size() != seal_bytes + 8 || value[0] != sealed_tag
      || read_le32(value.data() + 1) != checksum(key, value.substr(seal_bytes)))
    return std::nullopt;
  return read_le64(value.data() + seal_bytes);
}

std::string count_scope_name(std::string_view key) {
  if (key.find('\0') == std::string_view::npos)
    return "app '" + printable(key) + "'";
  return "user '" + joined(split_key(key, 2), 2) + "'";
}

error count_mismatch(std::string_view key, std::uint64_t stored, std::uint64_t found) {
  return error{errc::data_corrupt,
               count_scope_name(key) + " is missing sessions: its count holds "
                 + std::to_string(stored) + " sessions, a listing of it found "
                 + std::to_string(found)
                 + " (the store is damaged; `agentstate verify` lists every damaged row)"};
}

result<json> parse_stored(std::string_view text) {
  json fast;
  if (model::parse_stored_text(text, fast))
    return fast;
  // Stored JSON was depth-checked when it was written, so the plain parser
  // (no per-value callback: about twice as fast) is safe here.
  auto v = json::parse(text.begin(), text.end(), nullptr, false);
  if (v.is_discarded())
    return error{errc::internal, "corrupt store: a stored JSON text does not parse"};
  return v;
}

std::string encode_record(std::string_view skey, const session_record& x) {
  std::string out;
  out.reserve(seal_bytes + record_body_ttl);
  out.resize(seal_bytes); // the seal, written last over the body
  append_le64(out, x.version);
  append_le64(out, bits_of(x.last_update_time));
  append_le64(out, bits_of(x.created));
  if (x.expires != 0 || x.refresh != 0) {
    append_le64(out, bits_of(x.expires));
    append_le64(out, bits_of(x.refresh));
  }
  seal_in_place(out, skey);
  return out;
}

std::optional<session_record> decode_record(std::string_view skey, std::string_view value,
                                            bool legacy) {
  auto body = open_row(table::sessions, skey, value, legacy);
  if (!body)
    return std::nullopt;
  session_record r;
  r.version = read_le64(body->data());
  r.last_update_time = double_of(read_le64(body->data() + 8));
  r.created = double_of(read_le64(body->data() + 16));
  if (body->size() == record_body_ttl) {
    r.expires = double_of(read_le64(body->data() + 24));
    r.refresh = double_of(read_le64(body->data() + 32));
  }
  return r;
}

std::string encode_event_row(std::string_view key, double timestamp, std::string_view json_text) {
  std::string out;
  out.resize(seal_bytes + 8 + json_text.size());
  auto ts = bits_of(timestamp);
  for (int i = 0; i < 8; ++i)
    out[seal_bytes + i] = static_cast<char>((ts >> (8 * i)) & 0xff);
  if (!json_text.empty())
    std::memcpy(&out[seal_bytes + 8], json_text.data(), json_text.size());
  seal_in_place(out, key);
  return out;
}

double event_body_timestamp(std::string_view body) {
  return double_of(read_le64(body.data()));
}

result<void> decode_event_body(std::string_view body, event& out) {
  if (body.size() < 8)
    return corrupt("event row shorter than its timestamp");
  if (model::decode_event_text(event_body_text(body), out))
    return {};
  auto j = parse_stored(event_body_text(body));
  if (!j)
    return std::move(j).err();
  auto ev = event_from_json(std::move(*j));
  if (!ev)
    return corrupt("event: " + ev.err().message);
  out = std::move(*ev);
  return {};
}

result<event> decode_event_body(std::string_view body) {
  event ev;
  if (auto r = decode_event_body(body, ev); !r)
    return std::move(r).err();
  return ev;
}

} // namespace agentstate::store
