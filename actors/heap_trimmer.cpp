// SPDX-License-Identifier: Apache-2.0
#include "actors/heap_trimmer.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <chrono>

#include <caf/event_based_actor.hpp>

#include "actors/core.hpp"

namespace agentstate::detail {
/// The trimmer's own timer message.
struct heap_trim_tick {};
} // namespace agentstate::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::heap_trim_tick)

namespace agentstate::detail {

namespace {

struct trimmer_state {
  engine_core* core = nullptr;
  std::uint64_t passivations_at_trim = 0;
};

caf::behavior heap_trimmer(caf::stateful_actor<trimmer_state>* self, engine_core* core) {
  self->state.core = core;
  self->delayed_send(self, std::chrono::seconds(1), heap_trim_tick{});
  return {
    [self](heap_trim_tick&) {
      auto& st = self->state;
      auto now = st.core->stats.passivations.load(std::memory_order_relaxed);
      if (now - st.passivations_at_trim >= heap_trim_min_passivations) {
        st.passivations_at_trim = now;
        if (trim_heap())
          st.core->stats.heap_trims.fetch_add(1, std::memory_order_relaxed);
      }
      self->delayed_send(self, std::chrono::seconds(1), heap_trim_tick{});
    },
  };
}

} // namespace

bool trim_heap() {
#if defined(__GLIBC__)
  return ::malloc_trim(0) != 0;
#else
  return false;
#endif
}

caf::actor spawn_heap_trimmer(engine_core& core) {
  return core.sys->spawn(heap_trimmer, &core);
}

} // namespace agentstate::detail
