// SPDX-License-Identifier: Apache-2.0
// actors/messages.hpp: every message the engine's actors exchange, and the
// typed interface of each internal actor, so the compiler checks every
// route. Commands carry their reply callback; payloads are moved into
// messages, never copied (a copied JSON event costs microseconds). No
// message leaves the process: they are allowed as unsafe (unserialisable)
// message types.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/write_plan.hpp"
#include "agentstate/error.hpp"
#include "agentstate/types.hpp"

namespace agentstate::detail {

// -- to session actors (routed by the registry) ----------------------------

/// REQUIRES: names validated, req.session_id trimmed and non-empty.
struct create_cmd {
  create_request req;
  callback<session> cb;
};
struct append_cmd {
  append_request req;
  callback<append_result> cb;
};
/// A get that names an invocation (needs the live temp: state). Answers
/// through `text_cb` (get_session_json) when it is set, else `cb`.
struct get_cmd {
  get_request req;
  callback<std::optional<session>> cb;
  callback<std::string> text_cb;
};
struct delete_cmd {
  callback<void> cb;
  /// The reaper's delete (T3): applies only if the session has expired by
  /// the time the actor reaches it.
  bool only_expired = false;
};
/// engine::prune's delete: applies only while the session is as prune read
/// it (store::write_set::only_if), judged once no earlier write of the
/// session is in flight; otherwise `cb` gets condition_failed.
struct prune_delete_cmd {
  store::write_set::record_guard only_if;
  callback<void> cb;
};
/// REQUIRES: invocation_id validated and non-empty.
struct begin_invocation_cmd {
  std::string invocation_id;
  callback<session> cb;
};
struct end_invocation_cmd {
  std::string invocation_id;
  callback<void> cb;
};

/// REQUIRES: ref normalised. `dry_run` (rewind_plan) answers through
/// `plan_cb` and writes nothing; otherwise `cb` gets the rewind's append.
struct rewind_cmd {
  rewind_request req;
  bool dry_run = false;
  callback<append_result> cb;
  callback<rewind_changes> plan_cb;
};
/// To the new session's actor. REQUIRES: names validated, new id trimmed.
struct fork_cmd {
  fork_request req;
  callback<session> cb;
};

// -- to user and app actors --------------------------------------------------

/// One of the callbacks is set: `cb` for the state alone, `snapshot_cb`
/// for the state with its cursor.
struct scope_get_cmd {
  callback<json> cb;
  callback<scope_snapshot> snapshot_cb;
  void fail(error e) {
    if (snapshot_cb)
      snapshot_cb(std::move(e));
    else
      cb(std::move(e));
  }
};
/// Committed writes to one scope, from the writer, in commit order.
struct scope_commit {
  struct write {
    std::string key; ///< unprefixed
    json value;
    bool erase = false;
  };
  std::uint64_t txn_id = 0;
  std::uint64_t seq = 0; ///< the commit's sequence in the change log
  std::vector<write> writes;
};

// -- to any routed actor -------------------------------------------------------

/// Finish what is in flight, then quit (engine close).
struct shutdown_cmd {};

/// To a session actor from itself: the home's answer to an append's app:
/// part (options::app_home), or (`retry`) the time to send it again.
struct app_sent {
  std::shared_ptr<result<app_write_result>> outcome;
  bool retry = false;
  std::string write_id; ///< the append's: a message of another one is ignored
};

/// An actor's own periodic idleness check (one timer per idle period, not a
/// timeout re-armed by every message).
struct idle_tick {};

/// The registry's request to passivate now: the actor's shard is over
/// capacity and this actor is its least recently routed (registry.hpp).
struct evict_cmd {};

// -- to and from the writer ----------------------------------------------------

struct write_cmd {
  write_plan plan;
};
struct flush_cmd {};
struct stop_writer_cmd {};
/// Wakes the writer to purge what an inline commit deleted (core.hpp,
/// try_commit_inline); no answer.
struct purge_cmd {};
/// A replicator's verdict on shipment `id` (options::replicator, from any
/// thread): the writer then answers the write sets that waited for it, with
/// `code` and `message` when it is not ok.
struct shipped_cmd {
  std::uint64_t id = 0;
  errc code = errc::ok;
  std::string message;
};
/// The writer's answer to write_cmd and flush_cmd: ok, or the error. A
/// late-bound write set's binding comes back resolved. `spent` is the write
/// set itself, handed back so that its memory is freed by the session
/// actor's thread instead of the store writer's, the engine's busiest.
struct write_reply {
  errc code = errc::ok;
  std::string message;
  std::shared_ptr<late_binding> late;
  store::write_set spent;
  std::uint64_t seq = 0; ///< the write set's commit sequence (when ok)
};

// -- interfaces ------------------------------------------------------------------

/// A session actor: one per live session, routed by the registry.
using session_actor_hdl =
  caf::typed_actor<caf::reacts_to<create_cmd>, caf::reacts_to<append_cmd>, caf::reacts_to<get_cmd>,
                   caf::reacts_to<delete_cmd>, caf::reacts_to<prune_delete_cmd>,
                   caf::reacts_to<begin_invocation_cmd>, caf::reacts_to<end_invocation_cmd>,
                   caf::reacts_to<rewind_cmd>, caf::reacts_to<fork_cmd>,
                   caf::reacts_to<shutdown_cmd>, caf::reacts_to<idle_tick>,
                   caf::reacts_to<evict_cmd>, caf::reacts_to<app_sent>>;

/// A user or app scope actor: one per live shared scope.
using scope_actor_hdl = caf::typed_actor<caf::reacts_to<scope_get_cmd>,
                                         caf::reacts_to<scope_commit>, caf::reacts_to<shutdown_cmd>,
                                         caf::reacts_to<idle_tick>, caf::reacts_to<evict_cmd>>;

/// The store writer (a detached blocking actor; its handle is typed).
using writer_hdl =
  caf::typed_actor<caf::replies_to<write_cmd>::with<write_reply>,
                   caf::replies_to<flush_cmd>::with<write_reply>, caf::reacts_to<stop_writer_cmd>,
                   caf::reacts_to<purge_cmd>, caf::reacts_to<shipped_cmd>>;

} // namespace agentstate::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::create_cmd)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::app_sent)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::append_cmd)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::get_cmd)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::delete_cmd)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::prune_delete_cmd)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::begin_invocation_cmd)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::end_invocation_cmd)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::rewind_cmd)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::fork_cmd)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::scope_get_cmd)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::scope_commit)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::shutdown_cmd)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::idle_tick)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::evict_cmd)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::write_cmd)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::flush_cmd)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::stop_writer_cmd)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::purge_cmd)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::shipped_cmd)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::write_reply)
