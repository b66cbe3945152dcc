// SPDX-License-Identifier: Apache-2.0
#include "store/summary.hpp"

#include <set>
#include <string_view>

#include "store/errors.hpp"
#include "store/records.hpp"

namespace agentstate::store {

result<store_summary> summarize(kv_store& kv, const std::function<void(std::uint64_t)>& progress) {
  try {
    store_summary out;
    out.info = kv.info();
    auto txn = kv.begin_read();
    std::set<std::string, std::less<>> apps, users;
    const bool legacy = txn->legacy_values();
    txn->scan(table::sessions, {}, {}, [&](std::string_view k, std::string_view v) {
      if (!decode_record(k, v, legacy) && ++out.damaged_records <= 100)
        out.damaged.push_back(damaged(table::sessions, k));
      auto a = k.find('\0');
      auto u = k.find('\0', a + 1);
      if (apps.find(k.substr(0, a)) == apps.end())
        apps.emplace(k.substr(0, a));
      if (users.find(k.substr(0, u)) == users.end())
        users.emplace(k.substr(0, u));
      ++out.sessions;
      if (progress)
        progress(out.sessions);
      return true;
    });
    // In the sessions' snapshot: each state table's rows, the tallies apart.
    const table state[3] = {table::session_state, table::user_state, table::app_state};
    std::uint64_t* rows[3] = {&out.session_state_rows, &out.user_state_rows, &out.app_state_rows};
    const bool tallied = txn->state_tallies();
    for (int i = 0; i < 3; ++i) {
      const auto t = state[i];
      txn->scan(t, {}, {}, [&](std::string_view k, std::string_view) {
        if (tallied && is_tally_key(t, k))
          ++out.state_tallies;
        else
          ++*rows[i];
        return true;
      });
    }
    if (txn->session_counts())
      txn->scan(table::session_counts, {}, {}, [&](std::string_view, std::string_view) {
        ++out.session_counts;
        return true;
      });
    if (txn->shard_index())
      txn->scan(table::shard_index, {}, {}, [&](std::string_view, std::string_view) {
        ++out.shard_index;
        return true;
      });
    out.apps = apps.size();
    out.users = users.size();
    if (auto v = txn->get(table::meta, "format"))
      out.format = std::string(*v);
    if (auto v = txn->get(table::meta, "engine_version"))
      out.engine_version = std::string(*v);
    return out;
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

} // namespace agentstate::store
