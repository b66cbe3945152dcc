// SPDX-License-Identifier: Apache-2.0
// store/app_writes.hpp: table `app_writes` (store format 10). In a cluster an
// app's `app:` state lives on the node that owns the app's home shard; an
// append elsewhere that writes `app:` keys has them applied there as one
// app write, named by a write id its node chose (docs/cluster.md). The home
// keeps each applied write's outcome under app ‖ 0 ‖ write id, so a write
// sent again (its node restarted, a connection lost) is answered with the
// first outcome instead of being applied twice. A row stays until the node
// that sent the write says it no longer needs it (`forget`), or its app is
// deleted.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "agentstate/error.hpp"
#include "store/kv.hpp"

namespace agentstate::store {

/// The longest write id (bytes).
inline constexpr std::size_t max_write_id_bytes = 128;

/// app ‖ 0 ‖ write_id.
std::string app_write_key(std::string_view app, std::string_view write_id);

/// The outcome kept for write `write_id` of `app` (the JSON text put_app_write
/// stored), nullopt when none is kept; data_corrupt when its row is damaged.
/// Storage errors as results.
result<std::optional<std::string>> read_app_write(kv_read& txn, std::string_view app,
                                                  std::string_view write_id);

/// Keeps `outcome` (JSON text) for write `write_id` of `app`. Throws
/// kv_failure.
void put_app_write(kv_write& txn, std::string_view app, std::string_view write_id,
                   std::string_view outcome);

/// Drops the outcome kept for `write_id` (nothing when none). Throws
/// kv_failure.
void forget_app_write(kv_write& txn, std::string_view app, std::string_view write_id);

} // namespace agentstate::store
