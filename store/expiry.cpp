// SPDX-License-Identifier: Apache-2.0
#include "store/expiry.hpp"

#include "store/errors.hpp"
#include "store/keys.hpp"
#include "store/records.hpp"

namespace agentstate::store {

namespace {

// The upper bound of entries due at `now`: every key of expiry `now` and
// before sorts below it.
std::string due_bound(double now) {
  std::string k;
  append_ordered_double(k, now);
  k.push_back('\xff');
  return k;
}

} // namespace

void put_expiry(kv_write& txn, std::string_view skey, double expires) {
  if (expires == 0)
    return;
  std::string k;
  set_expiry_key(k, expires, skey);
  txn.put(table::expiry, k, seal(k, {}));
}

void del_expiry(kv_write& txn, std::string_view skey, double expires) {
  if (expires == 0)
    return;
  std::string k;
  set_expiry_key(k, expires, skey);
  txn.del(table::expiry, k);
}

result<std::vector<session_ref>> due_sessions(kv_read& txn, double now, std::size_t max) {
  std::vector<session_ref> out;
  if (max == 0)
    return out;
  try {
    auto bound = due_bound(now);
    txn.scan(table::expiry, {}, {}, [&](std::string_view k, std::string_view) {
      if (k.size() < 8 || k >= bound)
        return k.size() < 8; // a damaged short key sorts first: skip it
      // An entry whose session's record does not hold its expiry is damage
      // (verify reports it): skipped, so the reaper never loops on it.
      auto skey = k.substr(8);
      auto raw = txn.get(table::sessions, skey);
      auto rec = raw ? decode_record(skey, *raw, txn.legacy_values()) : std::nullopt;
      auto p = split_key(skey, 3);
      if (rec && bits_of(rec->expires) == bits_of(read_ordered_double(k)) && p.size() == 3)
        out.push_back(session_ref{std::string(p[0]), std::string(p[1]), std::string(p[2])});
      return out.size() < max;
    });
    return out;
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

std::uint64_t count_expired(kv_read& txn, double now, std::string_view prefix) {
  std::uint64_t n = 0;
  auto bound = due_bound(now);
  txn.scan(table::expiry, {}, {}, [&](std::string_view k, std::string_view) {
    if (k.size() < 8)
      return true;
    if (k >= bound)
      return false;
    if (k.substr(8, prefix.size()) == prefix)
      ++n;
    return true;
  });
  return n;
}

double next_expiry(kv_read& txn) {
  double out = 0;
  txn.scan(table::expiry, {}, {}, [&](std::string_view k, std::string_view) {
    if (k.size() < 8)
      return true;
    out = read_ordered_double(k);
    return false;
  });
  return out;
}

} // namespace agentstate::store
