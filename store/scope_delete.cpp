// SPDX-License-Identifier: Apache-2.0
#include "store/scope_delete.hpp"

#include "store/apply.hpp"
#include "store/expiry.hpp"
#include "store/keys.hpp"
#include "store/purge.hpp"
#include "store/records.hpp"

namespace agentstate::store {

namespace {

// Deletes up to `max_rows` rows of session `skey`, and, once none is left,
// the session itself. Returns what it deleted.
std::size_t purge_session(kv_write& txn, const std::string& skey, std::size_t max_rows) {
  auto done = delete_session_rows(txn, skey, max_rows);
  if (done >= max_rows)
    return done;
  auto parts = split_key(skey, 3);
  if (auto raw = txn.get(table::sessions, skey)) {
    if (auto rec = decode_record(skey, *raw); rec && parts.size() == 3) {
      for (auto& [t, key] :
           list_entries(parts[0], parts[1], parts[2], rec->last_update_time, rec->created))
        txn.del(t, key);
      del_expiry(txn, skey, rec->expires);
    }
    if (parts.size() == 3) {
      count_sessions(txn, parts[0], parts[1], -1);
      index_session(txn, parts[0], parts[1], skey, false);
    }
  }
  txn.del(table::origins, skey);
  txn.del(table::sessions, skey);
  return done + 1;
}

} // namespace

std::string fence_key(std::string_view app, const std::string* user) {
  std::string k(app);
  k.push_back('\0');
  if (user) {
    k.append(*user);
    k.push_back('\0');
  }
  return k;
}

bool app_fenced(kv_read& txn, std::string_view app) {
  return txn.may_hold_fences() && txn.get(table::fences, fence_key(app, nullptr)).has_value();
}

bool fenced(kv_read& txn, std::string_view app, std::string_view user) {
  if (!txn.may_hold_fences())
    return false;
  const std::string u(user);
  return app_fenced(txn, app) || txn.get(table::fences, fence_key(app, &u)).has_value();
}

bool any_user_fenced(kv_read& txn, std::string_view app) {
  if (!txn.may_hold_fences())
    return false;
  std::string prefix(app);
  prefix.push_back('\0');
  bool any = false;
  txn.scan(table::fences, prefix, {}, [&](std::string_view k, std::string_view) {
    any = k.size() > prefix.size(); // not the app's own fence
    return !any;
  });
  return any;
}

void put_fence(kv_write& txn, std::string_view key) {
  txn.put(table::fences, key, seal(key, {}));
}

bool any_fence(kv_read& txn) {
  return !first_keys(txn, table::fences, {}, 1).empty();
}

std::size_t purge_fence_step(kv_write& txn, std::size_t max_rows) {
  auto first = first_keys(txn, table::fences, {}, 1);
  if (first.empty())
    return 0;
  const std::string& fence = first.front();
  // Whole sessions first, one at a time, in key order.
  auto sessions = first_keys(txn, table::sessions, fence, 1);
  if (!sessions.empty())
    return purge_session(txn, sessions.front(), max_rows);
  if (auto n =
        delete_keys(txn, table::user_state, first_keys(txn, table::user_state, fence, max_rows)))
    return n;
  const bool app = fence.find('\0') + 1 == fence.size();
  if (app) {
    if (auto n =
          delete_keys(txn, table::app_state, first_keys(txn, table::app_state, fence, max_rows)))
      return n;
    if (auto n =
          delete_keys(txn, table::app_writes, first_keys(txn, table::app_writes, fence, max_rows)))
      return n;
  }
  // Session counts left under an app's fence (its users', whose keys start
  // with the fence; each is 0 by now unless it was damaged).
  if (app)
    if (auto n = delete_keys(txn, table::session_counts,
                             first_keys(txn, table::session_counts, fence, max_rows)))
      return n;
  // The scope's state tally (format 8; a user's, under an app's fence, went
  // with the user's rows: its key starts with the fence) and its session
  // count (format 9) go with the fence.
  const std::string_view scope(fence.data(), fence.size() - 1);
  txn.del(app ? table::app_state : table::user_state, scope);
  txn.del(table::session_counts, scope);
  txn.del(table::fences, fence);
  return 1;
}

} // namespace agentstate::store
