// SPDX-License-Identifier: Apache-2.0
#include "store/change_log.hpp"

#include <charconv>
#include <cstring>
#include <limits>
#include <vector>

#include "model/ids.hpp"
#include "model/json_text.hpp"
#include "store/errors.hpp"
#include "store/keys.hpp"
#include "store/records.hpp"

namespace agentstate::store {

namespace {

// A change row's body: kind (1 byte) ‖ be64 version ‖ be64 bits of the
// commit time ‖ five sections, each be32 length ‖ bytes (app, user, id,
// delta, removed) ‖ the event text (the rest; empty unless an append).
constexpr std::size_t fixed_bytes = 17;

void append_be32(std::string& out, std::uint32_t x) {
  char b[4] = {char(x >> 24), char(x >> 16), char(x >> 8), char(x)};
  out.append(b, 4);
}

std::uint32_t read_be32(std::string_view x) {
  auto u = [&](std::size_t i) { return std::uint32_t(static_cast<unsigned char>(x[i])); };
  return (u(0) << 24) | (u(1) << 16) | (u(2) << 8) | u(3);
}

void append_section(std::string& out, std::string_view s) {
  append_be32(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}

// Appends the keys `writes` sets, as `"prefix+key":text` members, to
// `delta` and the keys it erases, as strings, to `removed` (each without
// its closing bracket).
void add_writes(std::string& delta, std::string& removed, std::string_view prefix,
                const std::vector<state_write>& writes) {
  std::string name;
  for (auto& w : writes) {
    name.assign(prefix);
    name += w.key;
    std::string& out = w.erase ? removed : delta;
    if (out.size() > 1)
      out += ',';
    model::append_escaped(out, name); // keys were checked as UTF-8 when prepared
    if (!w.erase) {
      out += ':';
      out += w.text;
    }
  }
}

std::uint64_t bits_of_time(double t) {
  std::uint64_t b;
  std::memcpy(&b, &t, sizeof b);
  return b;
}

} // namespace

std::string change_key(std::uint64_t seq) {
  std::string k;
  append_be64(k, seq);
  return k;
}

void log_change(kv_write& txn, const write_set& ws, std::uint64_t version, change_log& log) {
  std::string delta = "{", removed = "[";
  add_writes(delta, removed, {}, ws.session_writes);
  add_writes(delta, removed, "user:", ws.user_writes);
  add_writes(delta, removed, "app:", ws.app_writes);
  delta += '}';
  removed += ']';
  std::string_view event_text;
  auto key = change_key(log.next);
  if (ws.op == write_set::kind::append) {
    // The row encode_event_row sealed in this process: its checksum is not
    // checked again.
    std::string_view sealed = ws.event_row;
    if (sealed.size() < seal_bytes + 8 || sealed[0] != sealed_tag)
      throw kv_failure{errc::internal, "change log: the event row of the write set is not sealed"};
    event_text = event_body_text(sealed.substr(seal_bytes));
  }
  // The row is built in place behind room for its seal.
  std::string row(seal_bytes, '\0');
  row.reserve(seal_bytes + fixed_bytes + 20 + ws.app.size() + ws.user.size() + ws.id.size()
              + delta.size() + removed.size() + event_text.size());
  row += static_cast<char>(ws.op); // 0 create, 1 append, 2 delete, 3 delete_user, 4 delete_app
  append_be64(row, version);
  append_be64(row, bits_of_time(log.now));
  append_section(row, ws.app);
  append_section(row, ws.user);
  append_section(row, ws.id);
  append_section(row, delta);
  append_section(row, removed);
  row.append(event_text);
  seal_in_place(row, key);
  txn.put(table::changes, key, row);
  if (log.oldest == 0)
    log.oldest = log.next;
  ++log.next;
}

void trim_log(kv_write& txn, change_log& log, std::size_t max_deletes) {
  if (log.oldest == 0)
    return;
  const std::uint64_t last = log.next - 1;
  const double cutoff = log.now - log.keep.max_age_seconds;
  // The oldest row within the count and known to be young enough: the scan
  // below would stop at it.
  if (log.timed == log.oldest && last - log.oldest + 1 <= log.keep.max_entries
      && !(log.timed_time < cutoff))
    return;
  std::vector<std::uint64_t> drop;
  txn.scan(table::changes, {}, change_key(log.oldest), [&](std::string_view k, std::string_view v) {
    if (drop.size() >= max_deletes || k.size() != 8)
      return false;
    auto seq = read_be64(k);
    if (seq >= last)
      return false; // the newest entry stays
    const bool over_count = last - seq + 1 > log.keep.max_entries;
    bool too_old = false;
    if (!over_count) {
      auto row = decode_change(k, v);
      log.timed = seq;
      // A damaged row stays for verify to name.
      log.timed_time = row ? row->time : std::numeric_limits<double>::infinity();
      too_old = log.timed_time < cutoff;
    }
    if (!over_count && !too_old)
      return false;
    drop.push_back(seq);
    return true;
  });
  for (auto seq : drop)
    txn.del(table::changes, change_key(seq));
  if (!drop.empty())
    log.oldest = drop.back() + 1;
}

void clear_log(kv_write& txn) {
  std::vector<std::string> keys;
  txn.scan(table::changes, {}, {}, [&](std::string_view k, std::string_view) {
    keys.emplace_back(k);
    return true;
  });
  for (auto& k : keys)
    txn.del(table::changes, k);
}

namespace {

// The sequence of the change row at (k, v), checked against the row's seal,
// which covers its key: a damaged key is data_corrupt, never a wrong cursor.
result<std::uint64_t> sealed_seq(std::string_view k, std::string_view v) {
  if (k.size() != 8 || !open_row(table::changes, k, v, false))
    return damaged(table::changes, k);
  return read_be64(k);
}

} // namespace

result<std::uint64_t> read_log_last(kv_read& txn) {
  try {
    result<std::uint64_t> last = std::uint64_t{0};
    txn.scan_back(table::changes, {}, {}, [&](std::string_view k, std::string_view v) {
      last = sealed_seq(k, v);
      return false;
    });
    return last;
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<log_bounds> read_log_bounds(kv_read& txn) {
  try {
    log_bounds b;
    result<std::uint64_t> first = std::uint64_t{0};
    txn.scan(table::changes, {}, {}, [&](std::string_view k, std::string_view v) {
      first = sealed_seq(k, v);
      return false;
    });
    if (!first)
      return std::move(first).err();
    b.first = *first;
    auto last = read_log_last(txn);
    if (!last)
      return std::move(last).err();
    b.last = *last;
    return b;
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<log_head> read_log_head(kv_store& kv) {
  try {
    auto txn = kv.begin_read();
    auto epoch = txn->get(table::meta, "epoch");
    if (!epoch)
      return error{errc::data_corrupt, "the store has no epoch (meta row 'epoch')"};
    log_head h;
    h.epoch = std::string(*epoch);
    auto b = read_log_bounds(*txn);
    if (!b)
      return std::move(b).err();
    h.bounds = *b;
    return h;
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

std::string new_epoch() {
  auto u = model::make_secure_uuid();
  std::string out;
  for (char c : u)
    if (c != '-' && out.size() < 16)
      out += c;
  return out;
}

std::string format_cursor(std::string_view epoch, std::uint64_t seq) {
  char digits[20];
  auto end = std::to_chars(digits, digits + sizeof digits, seq).ptr;
  std::string out;
  out.reserve(epoch.size() + 1 + static_cast<std::size_t>(end - digits));
  out.append(epoch).append(1, '-').append(digits, end);
  return out;
}

result<std::uint64_t> parse_cursor(std::string_view cursor, std::string_view epoch) {
  auto bad = [&] {
    return error{errc::invalid_argument,
                 "'" + printable(cursor.substr(0, 64))
                   + "' is not a cursor (cursors come from this "
                     "store's reads, appends and change feeds)"};
  };
  auto dash = cursor.rfind('-');
  if (dash == std::string_view::npos || dash + 1 == cursor.size() || cursor.size() - dash > 21)
    return bad();
  std::uint64_t seq = 0;
  for (char c : cursor.substr(dash + 1)) {
    if (c < '0' || c > '9')
      return bad();
    auto d = std::uint64_t(c - '0');
    if (seq > (UINT64_MAX - d) / 10)
      return bad();
    seq = seq * 10 + d;
  }
  if (cursor.substr(0, dash) != epoch)
    return error{errc::invalid_argument,
                 "cursor '" + printable(cursor.substr(0, 64))
                   + "' belongs to another store (or to this store before an import)"};
  return seq;
}

result<change_row> decode_change(std::string_view key, std::string_view value) {
  auto body = open_row(table::changes, key, value, false);
  auto corrupt = [&] { return damaged(table::changes, key); };
  if (!body || key.size() != 8 || body->size() < fixed_bytes)
    return corrupt();
  std::string_view b = *body;
  change_row row;
  row.seq = read_be64(key);
  auto kind = static_cast<unsigned char>(b[0]);
  if (kind > 4)
    return corrupt();
  static constexpr change_kind kinds[] = {change_kind::create, change_kind::append,
                                          change_kind::remove, change_kind::remove_user,
                                          change_kind::remove_app};
  row.kind = kinds[kind];
  row.version = read_be64(b.substr(1));
  auto tb = read_be64(b.substr(9));
  std::memcpy(&row.time, &tb, sizeof tb);
  b.remove_prefix(fixed_bytes);
  std::string_view* sections[] = {&row.app, &row.user, &row.id, &row.delta, &row.removed};
  for (auto* s : sections) {
    if (b.size() < 4)
      return corrupt();
    auto n = read_be32(b);
    b.remove_prefix(4);
    if (b.size() < n)
      return corrupt();
    *s = b.substr(0, n);
    b.remove_prefix(n);
  }
  row.event = b;
  return row;
}

result<void> scan_changes(kv_read& txn, std::uint64_t after,
                          const std::function<bool(const change_row&)>& fn) {
  try {
    std::optional<error> err;
    bool first = true;
    txn.scan(
      table::changes, {}, change_key(after + 1), [&](std::string_view k, std::string_view v) {
        auto row = decode_change(k, v);
        if (!row) {
          err = std::move(row).err();
          return false;
        }
        if (first && row->seq != after + 1) {
          err = error{errc::cursor_expired,
                      "the change log no longer holds the changes after " + std::to_string(after)};
          return false;
        }
        first = false;
        return fn(*row);
      });
    if (err)
      return std::move(*err);
    if (first && after > 0) {
      // Nothing after `after`: expired only when the log's first entry is
      // beyond it.
      auto b = read_log_bounds(txn);
      if (!b)
        return std::move(b).err();
      if (b->last < after)
        return error{errc::invalid_argument,
                     "cursor " + std::to_string(after) + " is ahead of this store's changes"};
    }
    return {};
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

} // namespace agentstate::store
