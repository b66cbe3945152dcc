// SPDX-License-Identifier: Apache-2.0
// store/outbox.hpp: table `outbox` (store format 10). On a cluster node, an
// append that writes `app:` keys of an app whose home shard another node
// owns is committed in two steps (docs/cluster.md): first its outbox row,
// under the version it will take, holding the append as given and the write
// id its app: part is sent under; then, once the home has applied that part,
// the event itself, with the outbox row deleted in the same commit. A row
// left by a crash is finished by the session's actor before anything else.
// A create that writes such keys does the same at version 0, before its
// session exists. A session has at most one outbox row, always at its
// record's version + 1 (version 0: no record yet).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agentstate/error.hpp"
#include "store/kv.hpp"

namespace agentstate::store {

/// skey ‖ 0 ‖ be64(version).
std::string outbox_key(std::string_view skey, std::uint64_t version);

/// One outbox row: the version its append takes and its body (JSON text).
struct outbox_row {
  std::uint64_t version = 0;
  std::string body;
};

/// The outbox row of session `skey`, if any. Errors: data_corrupt (a damaged
/// row), storage errors.
result<std::optional<outbox_row>> read_outbox(kv_read& txn, std::string_view skey);

/// The sessions (their skeys) that have an outbox row, in key order.
/// Errors: data_corrupt (a damaged key), storage errors.
result<std::vector<std::string>> outbox_sessions(kv_read& txn);

/// Puts the outbox row of `skey` at `version`. Throws kv_failure.
void put_outbox(kv_write& txn, std::string_view skey, std::uint64_t version, std::string_view body);

/// Deletes the outbox row of `skey` at `version` (nothing when none). Throws
/// kv_failure.
void drop_outbox(kv_write& txn, std::string_view skey, std::uint64_t version);

} // namespace agentstate::store
