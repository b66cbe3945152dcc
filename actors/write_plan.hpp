// SPDX-License-Identifier: Apache-2.0
// actors/write_plan.hpp: what a session actor hands the store writer for one
// create, append or delete: the rows (store::write_set) and, when the result
// depends on committed values, the part only the writer can finish.
#pragma once

#include <memory>
#include <vector>

#include "agentstate/json.hpp"
#include "agentstate/types.hpp"
#include "store/write_set.hpp"

namespace agentstate::detail {

/// The part of an append (or create) that depends on the committed values at
/// commit time: atomic modifies and derived keys. The writer resolves it
/// inside the write transaction (resolve_late), adding rows to the write set
/// and the resolved values to `ev`, then encodes `ev` into its event row.
struct late_binding {
  event ev; ///< append: the event as stored so far (no temp: keys)
  std::vector<state_modify> modify;
  bool derive = false; ///< recompute derived keys whose inputs changed
  /// Filled by the writer: every value it added (prefixed key -> value).
  json added = json::object();
  /// app_write, filled by the writer: the outcome kept by an earlier apply
  /// of the same write id (the write set then fails already_exists,
  /// writing nothing), or, once applied, the outcome it kept.
  std::string outcome;
};

/// Owned by whoever holds it; moved, never copied, in messages.
struct write_plan {
  store::write_set ws;
  /// Set when the writer must resolve modifies or derived keys first.
  std::shared_ptr<late_binding> late;
};

} // namespace agentstate::detail
