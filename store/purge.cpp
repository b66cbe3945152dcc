// SPDX-License-Identifier: Apache-2.0
#include "store/purge.hpp"

#include <string>
#include <vector>

#include "store/errors.hpp"
#include "store/records.hpp"
#include "store/scope_delete.hpp"

namespace agentstate::store {

std::vector<std::string> first_keys(kv_read& txn, table t, std::string_view prefix,
                                    std::size_t max) {
  std::vector<std::string> keys;
  if (max == 0)
    return keys;
  txn.scan(t, prefix, {}, [&](std::string_view k, std::string_view) {
    keys.emplace_back(k);
    return keys.size() < max;
  });
  return keys;
}

std::size_t delete_keys(kv_write& txn, table t, const std::vector<std::string>& keys) {
  for (auto& k : keys)
    txn.del(t, k);
  return keys.size();
}

std::size_t delete_session_rows(kv_write& txn, std::string_view skey, std::size_t max_rows) {
  const std::string prefix = std::string(skey) + '\0';
  std::size_t done = 0;
  for (auto t : {table::events, table::session_state}) {
    done += delete_keys(txn, t, first_keys(txn, t, prefix, max_rows - done));
    if (done >= max_rows)
      return done;
  }
  // The session's state tally (format 8) goes with its last state row.
  if (txn.del(table::session_state, skey))
    ++done;
  return done;
}

void mark_doomed(kv_write& txn, std::string_view skey) {
  txn.put(table::doomed, skey, seal(skey, {}));
}

bool is_doomed(kv_read& txn, std::string_view skey) {
  return txn.get(table::doomed, skey).has_value();
}

void purge_now(kv_write& txn, std::string_view skey) {
  while (delete_session_rows(txn, skey, purge_step_rows) == purge_step_rows) {
  }
  txn.del(table::doomed, skey);
}

std::size_t purge_step(kv_write& txn, std::size_t max_rows) {
  auto first = first_keys(txn, table::doomed, {}, 1);
  if (first.empty())
    return purge_fence_step(txn, max_rows);
  const std::string& skey = first.front();
  auto done = delete_session_rows(txn, skey, max_rows);
  if (done >= max_rows)
    return done;
  txn.del(table::doomed, skey);
  return done + 1;
}

bool any_doomed(kv_read& txn) {
  return !first_keys(txn, table::doomed, {}, 1).empty();
}

bool any_purge(kv_read& txn) {
  return any_doomed(txn) || any_fence(txn);
}

result<bool> purge_left(kv_store& kv) {
  try {
    auto r = kv.begin_read();
    return any_purge(*r);
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<std::size_t> purge_once(kv_store& kv) {
  try {
    auto w = kv.begin_write();
    auto n = purge_step(*w);
    if (n)
      w->commit();
    return n;
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

} // namespace agentstate::store
