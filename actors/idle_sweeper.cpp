// SPDX-License-Identifier: Apache-2.0
#include "actors/idle_sweeper.hpp"

#include <caf/event_based_actor.hpp>

#include "actors/core.hpp"
#include "actors/messages.hpp"

namespace agentstate::detail {
/// The sweeper's own timer message.
struct idle_sweep {};
} // namespace agentstate::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::idle_sweep)

namespace agentstate::detail {

namespace {

caf::behavior idle_sweeper(caf::event_based_actor* self, engine_core* core) {
  self->delayed_send(self, core->opts.idle_timeout, idle_sweep{});
  return {
    [self, core](idle_sweep&) {
      core->sessions.send_all(idle_tick{});
      core->scopes.send_all(idle_tick{});
      self->delayed_send(self, core->opts.idle_timeout, idle_sweep{});
    },
  };
}

} // namespace

caf::actor spawn_idle_sweeper(engine_core& core) {
  return core.sys->spawn(idle_sweeper, &core);
}

} // namespace agentstate::detail
