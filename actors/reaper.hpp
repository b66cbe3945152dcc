// SPDX-License-Identifier: Apache-2.0
// actors/reaper.hpp: deletes expired sessions (semantics T3). Readers stop
// seeing a session the moment it expires; the reaper removes its rows later.
// Every options::reap_interval it reads up to reap_batch due sessions from
// the store's expiry index and sends each session's actor a delete that
// applies only if the session is still expired when the actor reaches it
// (an append accepted before the expiry may have refreshed it). It waits
// for the whole batch to be answered before reading the next one, so at most
// reap_batch deletes are in flight and each is its own small write set (a
// large session is purged in steps, store/purge.hpp). Runs on a scheduler
// thread; one per engine. In deterministic mode its ticks fire as the test
// advances the scheduler's clock (tests/support/deterministic.hpp).
#pragma once

#include <cstddef>

#include <caf/actor.hpp>

namespace agentstate::detail {

struct engine_core;

/// Deletes in flight at most.
constexpr std::size_t reap_batch = 64;

/// Spawns the reaper. Stop it with caf::anon_send_exit at close.
caf::actor spawn_reaper(engine_core& core);

} // namespace agentstate::detail
