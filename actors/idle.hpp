// SPDX-License-Identifier: Apache-2.0
// actors/idle.hpp: passivation of idle routed actors (session, user, app).
// Each such actor's state has `core`, `registry_key`, `handled` (routed messages
// handled) and `handled_at_tick`; the idle sweeper (actors/idle_sweeper.hpp) sends the ticks.
#pragma once

#include <caf/event_based_actor.hpp>

#include "actors/core.hpp"
#include "actors/messages.hpp"

namespace agentstate::detail {

/// Handles an idle_tick (actors/idle_sweeper.hpp sends one to every live
/// actor once per idle period): an actor that handled no routed message
/// since the previous tick, and is not `busy`, leaves the registry and quits
/// (only if no routed message waits for it: registry::try_passivate). So an
/// actor passivates after one to two idle periods.
template <class Actor, class Registry>
void on_idle_tick(Actor* self, Registry& registry, bool busy) {
  auto& st = self->state;
  bool idle = !busy && st.handled == st.handled_at_tick;
  st.handled_at_tick = st.handled;
  if (idle && registry.try_passivate(st.registry_key, self->address(), st.handled)) {
    st.core->stats.passivations.fetch_add(1, std::memory_order_relaxed);
    self->quit();
  }
}

/// Handles an evict_cmd (the registry is over capacity): passivates now
/// unless `busy` or a routed message waits (try_passivate). A refusing actor
/// stays live; its next idle tick passivates it as usual.
template <class Actor, class Registry>
void on_evict(Actor* self, Registry& registry, bool busy) {
  auto& st = self->state;
  if (!busy && registry.try_passivate(st.registry_key, self->address(), st.handled)) {
    st.core->stats.passivations.fetch_add(1, std::memory_order_relaxed);
    self->quit();
  }
}

} // namespace agentstate::detail
