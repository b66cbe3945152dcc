// SPDX-License-Identifier: Apache-2.0
// store/summary.hpp: what `agentstate inspect` reports about a store.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "agentstate/error.hpp"
#include "store/kv.hpp"

namespace agentstate::store {

struct store_summary {
  std::string format; ///< meta["format"], "" when missing
  std::string engine_version; ///< meta["engine_version"]
  std::uint64_t apps = 0, users = 0, sessions = 0;
  kv_info info; ///< map size and use, readers, rows per table
  /// State rows of each scope kind, without the scopes' tally rows
  /// (format 8), which `state_tallies` counts (all three tables).
  std::uint64_t session_state_rows = 0, user_state_rows = 0, app_state_rows = 0;
  std::uint64_t state_tallies = 0;
  /// Rows of table session_counts (format 9): one per app and per user.
  std::uint64_t session_counts = 0;
  /// Rows of table shard_index (format 11): one per session.
  std::uint64_t shard_index = 0;
  /// data_corrupt errors of the session records that fail their checksum
  /// (the first 100; `damaged_records` counts them all). Counted sessions
  /// include them.
  std::vector<error> damaged;
  std::uint64_t damaged_records = 0;
};

/// Counts apps, users and sessions in one snapshot, with the store's info,
/// checking each session record's checksum, and the state rows apart from
/// their tallies. `progress(sessions_seen)` is called as sessions are
/// counted. Cost: one pass over the sessions table and (format 8 and
/// later) over the state tables, plus kv_store::info.
result<store_summary> summarize(kv_store& kv,
                                const std::function<void(std::uint64_t)>& progress = {});

} // namespace agentstate::store
