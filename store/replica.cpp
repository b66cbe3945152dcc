// SPDX-License-Identifier: Apache-2.0
#include "store/replica.hpp"

#include <cstdio>
#include <limits>
#include <utility>

#include "store/crc32c.hpp"
#include "store/errors.hpp"
#include "store/keys.hpp"
#include "store/records.hpp"

namespace agentstate::store {

namespace {

// The last write_set::kind; a decoder refuses any op beyond it.
constexpr auto last_kind = write_set::kind::outbox_drop;

// write_set flags.
constexpr std::uint8_t has_origin = 1, no_origin_flag = 2, has_only_if = 4, elsewhere = 8;
constexpr std::uint8_t known_flags = has_origin | no_origin_flag | has_only_if | elsewhere;

constexpr std::size_t crc_bytes = 4;
constexpr std::size_t position_body = 16;

void put_varint(std::string& out, std::uint64_t x) {
  while (x >= 0x80) {
    out.push_back(static_cast<char>((x & 0x7f) | 0x80));
    x >>= 7;
  }
  out.push_back(static_cast<char>(x));
}

void put_str(std::string& out, std::string_view s) {
  put_varint(out, s.size());
  out.append(s);
}

void put_double(std::string& out, double x) {
  append_be64(out, bits_of(x));
}

void put_be32(std::string& out, std::uint32_t x) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((x >> shift) & 0xff));
}

void put_writes(std::string& out, const std::vector<state_write>& ws) {
  put_varint(out, ws.size());
  for (auto& w : ws) {
    out.push_back(w.erase ? 1 : 0);
    put_str(out, w.key);
    put_str(out, w.text);
  }
}

void put_strs(std::string& out, const std::vector<std::string>& xs) {
  put_varint(out, xs.size());
  for (auto& x : xs)
    put_str(out, x);
}

// Reads the fields of one encoding; every read checks what is left. The
// first failure is kept (`why`) and every later read returns a zero value.
struct reader {
  std::string_view in;
  std::optional<std::string> why;

  bool ok() const { return !why; }
  void fail(std::string what) {
    if (!why)
      why = std::move(what);
  }
  bool need(std::size_t n, const char* field) {
    if (ok() && in.size() < n)
      fail("truncated in " + std::string(field) + " (" + std::to_string(n) + " bytes needed, "
           + std::to_string(in.size()) + " left)");
    return ok();
  }
  std::uint8_t u8(const char* field) {
    if (!need(1, field))
      return 0;
    auto x = static_cast<std::uint8_t>(in[0]);
    in.remove_prefix(1);
    return x;
  }
  // LEB128, at most 10 bytes, in its shortest form.
  std::uint64_t varint(const char* field) {
    std::uint64_t x = 0;
    for (unsigned i = 0; ok(); ++i) {
      if (!need(1, field))
        return 0;
      auto b = static_cast<std::uint8_t>(in[0]);
      in.remove_prefix(1);
      if (i == 9 && b > 1) {
        fail(std::string(field) + " is not a 64-bit number");
        return 0;
      }
      x |= std::uint64_t{b & 0x7fu} << (7 * i);
      if (!(b & 0x80)) {
        if (b == 0 && i > 0)
          fail(std::string(field) + " is not in its shortest form");
        return ok() ? x : 0;
      }
    }
    return 0;
  }
  double f64(const char* field) {
    if (!need(8, field))
      return 0;
    auto x = double_of(read_be64(in));
    in.remove_prefix(8);
    return x;
  }
  std::string str(const char* field) {
    auto n = varint(field);
    if (!ok())
      return {};
    if (n > in.size()) {
      fail("the length of " + std::string(field) + " (" + std::to_string(n)
           + ") runs past the end (" + std::to_string(in.size()) + " bytes left)");
      return {};
    }
    std::string s(in.substr(0, static_cast<std::size_t>(n)));
    in.remove_prefix(static_cast<std::size_t>(n));
    return s;
  }
  // A count of items each at least `least` bytes long, refused when the
  // rest of the input cannot hold them.
  std::uint64_t count(const char* field, std::size_t least) {
    auto n = varint(field);
    if (ok() && n > in.size() / least)
      fail(std::to_string(n) + " " + field + " cannot fit in the " + std::to_string(in.size())
           + " bytes left");
    return ok() ? n : 0;
  }
  void writes(const char* field, std::vector<state_write>& out) {
    // Each: the erase byte and two lengths.
    auto n = count(field, 3);
    for (std::uint64_t i = 0; i < n && ok(); ++i) {
      state_write w;
      auto erase = u8(field);
      if (ok() && erase > 1)
        fail("an erase flag of " + std::string(field) + " is " + std::to_string(erase));
      w.erase = erase == 1;
      w.key = str(field);
      w.text = str(field);
      if (ok())
        out.push_back(std::move(w));
    }
  }
  void strs(const char* field, std::vector<std::string>& out) {
    auto n = count(field, 1);
    for (std::uint64_t i = 0; i < n && ok(); ++i) {
      auto s = str(field);
      if (ok())
        out.push_back(std::move(s));
    }
  }
  // The failure, or trailing bytes, as data_corrupt naming `what`.
  std::optional<error> finish(const char* what) {
    if (ok() && !in.empty())
      fail(std::to_string(in.size()) + " bytes after the end");
    if (ok())
      return std::nullopt;
    return error{errc::data_corrupt, std::string(what) + ": " + *why};
  }
};

std::string hex64(std::uint64_t x) {
  char b[19];
  std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(x));
  return b;
}

error damaged_position(std::string_view key) {
  std::string name = "meta row '" + printable(key) + "'";
  if (key.size() == replica_key_prefix.size() + 16
      && key.substr(0, replica_key_prefix.size()) == replica_key_prefix)
    name = "the replica position of shard [" + hex64(read_be64(key.substr(8))) + ", "
      + hex64(read_be64(key.substr(16))) + ")";
  return error{errc::data_corrupt,
               name
                 + " is damaged (its checksum or layout is wrong; `agentstate verify` lists "
                   "every damaged row)"};
}

} // namespace

std::string encode_write_set(const write_set& ws) {
  std::string out;
  out.reserve(ws.bytes());
  out.push_back(static_cast<char>(write_set_format));
  out.push_back(static_cast<char>(ws.op));
  std::uint8_t flags = 0;
  if (ws.origin_body)
    flags |= has_origin;
  if (ws.no_origin)
    flags |= no_origin_flag;
  if (ws.only_if)
    flags |= has_only_if;
  if (ws.app_elsewhere)
    flags |= elsewhere;
  out.push_back(static_cast<char>(flags));
  put_str(out, ws.app);
  put_str(out, ws.user);
  put_str(out, ws.id);
  put_varint(out, ws.version);
  put_double(out, ws.time);
  put_double(out, ws.expires);
  put_double(out, ws.refresh);
  put_str(out, ws.event_row);
  put_writes(out, ws.session_writes);
  put_writes(out, ws.user_writes);
  put_writes(out, ws.app_writes);
  if (ws.origin_body)
    put_str(out, *ws.origin_body);
  put_strs(out, ws.fork_events);
  put_str(out, ws.outcome);
  put_strs(out, ws.forget);
  if (ws.only_if) {
    put_varint(out, ws.only_if->version);
    put_double(out, ws.only_if->created);
    put_double(out, ws.only_if->last_update_time);
  }
  return out;
}

result<write_set> decode_write_set(std::string_view bytes) {
  reader r{bytes, {}};
  write_set ws;
  auto format = r.u8("the format byte");
  if (r.ok() && format != write_set_format)
    r.fail("unknown format " + std::to_string(format));
  auto op = r.u8("the op");
  if (r.ok() && op > static_cast<std::uint8_t>(last_kind))
    r.fail("unknown op " + std::to_string(op));
  ws.op = static_cast<write_set::kind>(r.ok() ? op : 0);
  auto flags = r.u8("the flags");
  if (r.ok() && (flags & ~known_flags) != 0)
    r.fail("unknown flags " + std::to_string(flags));
  ws.no_origin = (flags & no_origin_flag) != 0;
  ws.app_elsewhere = (flags & elsewhere) != 0;
  ws.app = r.str("app");
  ws.user = r.str("user");
  ws.id = r.str("id");
  ws.version = r.varint("version");
  ws.time = r.f64("time");
  ws.expires = r.f64("expires");
  ws.refresh = r.f64("refresh");
  ws.event_row = r.str("event_row");
  r.writes("session_writes", ws.session_writes);
  r.writes("user_writes", ws.user_writes);
  r.writes("app_writes", ws.app_writes);
  if (flags & has_origin) {
    auto body = r.str("origin_body");
    if (r.ok())
      ws.origin_body = std::move(body);
  }
  r.strs("fork_events", ws.fork_events);
  ws.outcome = r.str("outcome");
  r.strs("forget", ws.forget);
  if (flags & has_only_if) {
    write_set::record_guard g;
    g.version = r.varint("only_if.version");
    g.created = r.f64("only_if.created");
    g.last_update_time = r.f64("only_if.last_update_time");
    if (r.ok())
      ws.only_if = g;
  }
  if (auto e = r.finish("write set"))
    return std::move(*e);
  return ws;
}

std::string encode_replica_batch(const replica_batch& b) {
  std::size_t n = 1 + 4 * 10 + crc_bytes;
  for (auto& s : b.sets)
    n += s.size() + 10;
  std::string out;
  out.reserve(n);
  out.push_back(static_cast<char>(replica_batch_format));
  put_varint(out, b.prev.epoch);
  put_varint(out, b.prev.seq);
  put_varint(out, b.epoch);
  put_strs(out, b.sets);
  put_be32(out, crc32c_extend(0, out));
  return out;
}

result<replica_batch> decode_replica_batch(std::string_view bytes) {
  auto corrupt = [](std::string what) {
    return error{errc::data_corrupt, "replica batch: " + std::move(what)};
  };
  if (bytes.size() < 1 + crc_bytes)
    return corrupt("truncated (" + std::to_string(bytes.size()) + " bytes)");
  if (static_cast<std::uint8_t>(bytes[0]) != replica_batch_format)
    return corrupt("unknown format " + std::to_string(static_cast<std::uint8_t>(bytes[0])));
  const auto body = bytes.substr(0, bytes.size() - crc_bytes);
  auto tail = bytes.substr(body.size());
  std::uint32_t stored = 0;
  for (char c : tail)
    stored = (stored << 8) | static_cast<unsigned char>(c);
  if (stored != crc32c_extend(0, body))
    return corrupt("its checksum fails (damaged or truncated in transit)");
  reader r{body.substr(1), {}};
  replica_batch b;
  b.prev.epoch = r.varint("prev.epoch");
  b.prev.seq = r.varint("prev.seq");
  b.epoch = r.varint("epoch");
  r.strs("sets", b.sets);
  if (auto e = r.finish("replica batch"))
    return std::move(*e);
  if (b.epoch < b.prev.epoch)
    return corrupt("epoch " + std::to_string(b.epoch) + " is below the epoch "
                   + std::to_string(b.prev.epoch) + " of its previous position");
  if (b.sets.empty())
    return corrupt("it holds no write set");
  if (b.prev.seq > std::numeric_limits<std::uint64_t>::max() - b.sets.size())
    return corrupt("its sequence numbers run past 2^64 - 1");
  return b;
}

std::string replica_key(std::uint64_t lo, std::uint64_t hi) {
  std::string k(replica_key_prefix);
  append_be64(k, lo);
  append_be64(k, hi);
  return k;
}

result<replica_position> decode_replica_row(std::string_view key, std::string_view value) {
  if (key.size() != replica_key_prefix.size() + 16
      || key.substr(0, replica_key_prefix.size()) != replica_key_prefix)
    return damaged_position(key);
  auto body = open_row(table::meta, key, value, false);
  if (!body || body->size() != position_body)
    return damaged_position(key);
  return replica_position{read_be64(*body), read_be64(body->substr(8))};
}

result<std::optional<replica_position>> read_replica_position(kv_read& txn, std::uint64_t lo,
                                                              std::uint64_t hi) {
  try {
    auto key = replica_key(lo, hi);
    auto raw = txn.get(table::meta, key);
    if (!raw)
      return std::optional<replica_position>{};
    auto p = decode_replica_row(key, *raw);
    if (!p)
      return std::move(p).err();
    return std::optional<replica_position>{*p};
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

void put_replica_position(kv_write& txn, std::uint64_t lo, std::uint64_t hi,
                          const replica_position& p) {
  auto key = replica_key(lo, hi);
  std::string body;
  append_be64(body, p.epoch);
  append_be64(body, p.seq);
  txn.put(table::meta, key, seal(key, body));
}

void erase_replica_position(kv_write& txn, std::uint64_t lo, std::uint64_t hi) {
  txn.del(table::meta, replica_key(lo, hi));
}

} // namespace agentstate::store
