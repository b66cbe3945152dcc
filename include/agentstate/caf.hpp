// SPDX-License-Identifier: Apache-2.0
// agentstate/caf.hpp: the engine as a typed CAF actor, for hosts built on CAF
// 0.17. The only public header that includes CAF; non-CAF hosts never need it.
//
//   caf::actor_system_config cfg;
//   agentstate::add_error_category(cfg);           // readable errors
//   caf::actor_system sys{cfg};
//   auto eng = agentstate::engine::open(opts);
//   agentstate::engine_actor h = agentstate::spawn_engine_actor(sys, **eng);
//   self->request(h, caf::infinite, append_request{...}).then(
//     [](append_result& r) {...}, [](caf::error& e) {...});
//
// Every request is answered exactly once: with the result, or with a
// caf::error whose category is `error_category` and whose code is the errc
// number (the message is its first context element). The engine must outlive
// the actor; closing the engine makes the actor answer `unavailable`.
//
// The change feed as messages (watch_to_actor): an actor subscribes to a
// watch and receives its batches as change_page requests, then a watch_end:
//
//   auto w = agentstate::watch_to_actor(eng, req, observer);  // observer's behavior:
//   //   [](agentstate::change_page& p) {...},     // answered when it returns
//   //   [](agentstate::watch_end& e) {...}        // last message of this watch
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <caf/unit.hpp>

#include "agentstate/watch.hpp"

#include "agentstate/engine.hpp"

namespace agentstate {

/// Request types that the engine API takes as plain arguments.
struct delete_request {
  session_ref ref;
};
/// engine::begin_invocation: answered when the session's lease is granted.
/// The actor never blocks while a begin waits for the lease.
struct begin_invocation_request {
  session_ref ref;
  std::string invocation_id;
};
struct end_invocation_request {
  session_ref ref;
  std::string invocation_id;
};
struct app_state_request {
  std::string app_name;
};
struct user_state_request {
  std::string app_name;
  std::string user_id;
};

/// The engine's message interface; each row mirrors one engine call.
using engine_actor = caf::typed_actor<caf::replies_to<create_request>::with<session>,
                                      caf::replies_to<get_request>::with<std::optional<session>>,
                                      caf::replies_to<list_request>::with<session_page>,
                                      caf::replies_to<delete_request>::with<caf::unit_t>,
                                      caf::replies_to<append_request>::with<append_result>,
                                      caf::replies_to<begin_invocation_request>::with<session>,
                                      caf::replies_to<end_invocation_request>::with<caf::unit_t>,
                                      caf::replies_to<app_state_request>::with<json>,
                                      caf::replies_to<user_state_request>::with<json>>;

/// The category of every caf::error the engine actor answers with.
inline const caf::atom_value error_category = caf::atom("agentstate");

/// An engine error as a caf::error (code = errc number, context = message).
caf::error to_caf_error(const error& x);

/// Registers a renderer so caf::to_string shows "agentstate.kind: message".
void add_error_category(caf::actor_system_config& cfg);

/// Spawns, in `sys`, an actor that serves engine_actor requests through
/// `eng`'s async API (it never blocks). REQUIRES: `eng` outlives the actor.
engine_actor spawn_engine_actor(caf::actor_system& sys, engine& eng);

/// Starts engine::watch(req) with `dest` as its receiver: each batch goes to
/// `dest` as a request carrying a change_page, and the watch's end as one
/// message carrying a watch_end.
///
/// Ordering: batches arrive in commit order, one at a time: the next is sent
/// only once `dest` answered the previous one. A handler that returns void
/// answers when it returns; one that makes a response promise holds the
/// feed until it delivers (any answer but an error counts). The watch_end
/// arrives after every batch, and its resume_from is past every batch that
/// was sent. Both messages come from one relay actor per watch
/// (current_sender() there tells an actor's watches apart).
///
/// Ends: as engine::watch (cancel or the handle's destruction: cancelled;
/// engine close: closing; cursor_expired; failed). Besides, the watch
/// cancels itself when `dest` terminates (no end message then) or answers a
/// batch with an error (e.g. unexpected_message when it has no change_page
/// handler; the watch_end, reason cancelled, follows).
///
/// The handle: cancel() returns without waiting for `dest` (it may be called
/// from `dest`'s own handlers); after it returns no new batch is sent, but
/// batches sent before may still arrive, always before the watch_end.
/// cursor() is as watch_handle's: past every batch sent (once `dest` is
/// gone, including batches it never handled).
///
/// Threads and costs: the watch's callback (engine::watch) waits on a
/// delivery thread while a batch is unanswered (no queue grows: the log
/// keeps what is not sent; an answer slower than about 10 ms makes the
/// engine add a delivery thread);
/// the relay, spawned in `dest`'s actor system (not hidden: that system's
/// await_all_actors_done waits for it), lives until the watch has ended; per
/// batch one message to the relay and one request/response with `dest`.
///
/// REQUIRES: the watch ends before `dest`'s actor system is destroyed, and
/// `dest` does not close the engine while a batch is in flight
/// (engine::close waits for the answer to a batch in flight). Errors: as
/// engine::watch, and invalid_argument for an invalid `dest`.
result<std::unique_ptr<watch_handle>> watch_to_actor(engine& eng, watch_request req,
                                                     caf::actor dest);

} // namespace agentstate

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::create_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::get_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::list_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::delete_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::append_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::begin_invocation_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::end_invocation_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::app_state_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::user_state_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::session)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::optional<agentstate::session>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::session_page)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::append_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::json)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::change_page)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::watch_end)
