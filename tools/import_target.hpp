// SPDX-License-Identifier: Apache-2.0
// tools/import_target.hpp: the store an import writes into, for `import` and
// `import --from-adk-sqlite` alike.
#pragma once

#include <memory>
#include <string>

#include "store/kv.hpp"
#include "store/lock.hpp"

namespace agentstate::tools {

/// A store opened for an import: its directory (canonical), the lock that
/// makes this process its only owner, and the store (sync, brought to the
/// current format). The lock is released when this is destroyed, after the
/// store is closed.
struct import_target {
  std::string dir;
  store::store_lock lock;
  std::unique_ptr<store::kv_store> kv;
};

/// Creates `dir` when missing, locks it, opens it for writing and upgrades
/// it to the current format. nullptr on failure, after one line on stderr
/// that starts with "agentstate import: " (say()).
std::unique_ptr<import_target> open_import_target(const std::string& dir);

} // namespace agentstate::tools
