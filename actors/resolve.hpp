// SPDX-License-Identifier: Apache-2.0
// actors/resolve.hpp: the store writer's half of a late-bound write plan.
#pragma once

#include "actors/core.hpp"
#include "actors/write_plan.hpp"
#include "store/kv.hpp"

namespace agentstate::detail {

/// Finishes a late-bound plan inside the writer's transaction, in commit
/// order: resolves modifies against the committed values (in order),
/// recomputes derived keys whose inputs changed, adds their rows and, for
/// appends, records them in plan.late->ev and encodes it into
/// plan.ws.event_row. Host functions that throw or return values over the
/// limits fail this plan alone (invalid_argument / too_large); a
/// compare_and_set that does not match fails it with condition_failed.
/// Storage failures come back as errors. Runs on the writer's thread.
/// REQUIRES: plan.late set.
result<void> resolve_late(store::kv_read& txn, const engine_core& core, write_plan& plan);

} // namespace agentstate::detail
