// SPDX-License-Identifier: Apache-2.0
#include "actors/reaper.hpp"

#include <atomic>
#include <memory>
#include <string>

#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include "actors/core.hpp"
#include "actors/messages.hpp"
#include "store/expiry.hpp"
#include "store/reads.hpp"

namespace agentstate::detail {
/// The reaper's timer, and the end of a batch.
struct reap_tick {};
struct reap_done {};
} // namespace agentstate::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::reap_tick)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::reap_done)

namespace agentstate::detail {

namespace {

struct reaper_state {
  engine_core* core = nullptr;
  bool busy = false;
  /// The first session of the batch in flight, and whether it was full.
  std::string first;
  bool full = false;
};

using reaper_actor = caf::stateful_actor<reaper_state>;

void wait_tick(reaper_actor* self) {
  self->delayed_send(self, self->state.core->opts.reap_interval, reap_tick{});
}

// Sends one batch of expiry deletes and sets `busy`; false when nothing is
// due, when the store cannot be read now, or (`repeat` false) when the batch
// would start where the last one did (its delete failed: the next tick
// tries again).
bool send_batch(reaper_actor* self, bool repeat) {
  auto& st = self->state;
  auto& core = *st.core;
  st.busy = false;
  if (core.closed.load())
    return false;
  auto txn = store::begin_read(*core.kv);
  if (!txn)
    return false;
  auto due = store::due_sessions(**txn, wall_now(core), reap_batch);
  txn->reset();
  if (!due || due->empty())
    return false;
  auto first = session_registry_key(due->front());
  if (!repeat && first == st.first)
    return false;
  st.first = std::move(first);
  st.full = due->size() == reap_batch;
  st.busy = true;
  auto left = std::make_shared<std::atomic<std::size_t>>(due->size());
  caf::actor me = caf::actor_cast<caf::actor>(self);
  auto one_done = [left, me] {
    if (left->fetch_sub(1) == 1)
      caf::anon_send(me, reap_done{});
  };
  for (auto& ref : *due) {
    delete_cmd cmd{[one_done](result<void>) { one_done(); }, true};
    auto key = session_registry_key(ref);
    auto make = [&core, &ref] { return spawn_session_actor(core, ref); };
    if (!core.sessions.route(key, std::move(cmd), make))
      one_done(); // closing
  }
  return true;
}

caf::behavior reaper(reaper_actor* self, engine_core* core) {
  self->state.core = core;
  wait_tick(self);
  return {
    [self](reap_tick&) {
      if (self->state.busy)
        return;
      if (!send_batch(self, true))
        wait_tick(self);
    },
    [self](reap_done&) {
      self->state.busy = false;
      // A full batch may have left due sessions: the next follows at once.
      if (!(self->state.full && send_batch(self, false)))
        wait_tick(self);
    },
  };
}

} // namespace

caf::actor spawn_reaper(engine_core& core) {
  return core.sys->spawn(reaper, &core);
}

} // namespace agentstate::detail
