// SPDX-License-Identifier: Apache-2.0
// actors/idle_sweeper.hpp: the clock of idle passivation. Once per
// options::idle_timeout it sends idle_tick to every live session, user and
// app actor (registry::send_all); each passivates on a tick that finds it
// idle since the one before (actors/idle.hpp), so after one to two periods.
// Live actors hold no timer of their own: an actor that quits (idle,
// evicted, deleted) is freed at once, not kept by a pending timer message
// until it fires, and the heap trimmer's next trim returns its memory. Runs
// on a scheduler thread; one per engine. In deterministic mode its sweeps
// come as the test advances the scheduler's clock.
#pragma once

#include <caf/actor.hpp>

namespace agentstate::detail {

struct engine_core;

/// Spawns the sweeper. Stop it with caf::anon_send_exit at close.
caf::actor spawn_idle_sweeper(engine_core& core);

} // namespace agentstate::detail
