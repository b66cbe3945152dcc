// SPDX-License-Identifier: Apache-2.0
// agentstate/invocation.hpp: one run of an agent over a session (docs/semantics.md
// I1-I3): a delta-aware state view, appends that carry its pending change,
// templating over it, output_key, and the end that drops temp:/turn: state.
//
//   auto inv = invocation::begin(eng, {"app", "u1", "s1"});   // waits its turn
//   inv->state().set("temp:draft", "...");                     // pending
//   inv->state().modify("user:calls", 0, [](const json& n) { return n.get<int>() + 1; });
//   auto prompt = inv->inject("You help {user:name}. Draft: {temp:draft?}");
//   inv->append_final(reply, {"summary"});                     // carries the change
//   inv->end();                                                // or let it go out of scope
//
// Two invocations on one session run one after the other (the session
// actor's invocation lease, engine::begin_invocation); invocations on
// different sessions run concurrently. An invocation object is used by one
// thread or actor at a time; while an async call on it is in flight, only
// that call's callback may touch it. REQUIRES: the engine outlives it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "agentstate/engine.hpp"
#include "agentstate/state.hpp"
#include "agentstate/template.hpp"

namespace agentstate {

/// Where an agent's final response is recorded (I3).
struct output_key {
  std::string key; ///< a state key; its prefix decides its scope (S1, N1)
  bool has_schema = false; ///< the agent declares an output schema: store parsed JSON
};

/// The text of an event's response: the "text" of every element of
/// content.parts that has one and is not marked "thought": true,
/// concatenated in order. nullopt when the event has no content parts.
std::optional<std::string> response_text(const event& ev);

/// Records `ev`'s response under out.key in ev.actions.state_delta (I3): the
/// text, or with a schema the text parsed as JSON (depth-limited). Records
/// nothing for a partial event, an event without content parts, or (with a
/// schema) blank text. Errors, recording nothing: invalid_argument when the
/// key is empty or derived:, or the schema'd text is not JSON; too_large when
/// it nests deeper than `max_json_depth`.
result<void> apply_output_key(event& ev, const output_key& out, std::size_t max_json_depth = 64);

class invocation {
public:
  /// Begins an invocation (engine::begin_invocation: waits while another
  /// invocation of the session runs). An empty id is generated. Errors: as
  /// engine::begin_invocation.
  static result<invocation> begin(engine& eng, session_ref ref, std::string invocation_id = {});
  static void begin(engine& eng, session_ref ref, std::string invocation_id,
                    callback<invocation> cb);

  invocation(invocation&&) noexcept;
  invocation& operator=(invocation&&) noexcept;
  /// Ends the invocation if it is still live (without waiting).
  ~invocation();

  const std::string& id() const;
  const session_ref& ref() const;
  /// The session's version after this invocation's latest append (at begin:
  /// the version then).
  std::uint64_t version() const;
  /// False once end() was called or the object was moved from.
  bool live() const;

  /// The merged state as of begin (or the latest refresh) with this
  /// invocation's appends and pending change applied. Writes made here are
  /// carried by the next append.
  agentstate::state& state();
  const agentstate::state& state() const;

  /// Appends `ev` carrying the pending change: its sets are merged under
  /// ev's own state_delta (ev's keys win), its removes are added to
  /// ev.actions.state_remove, its modifies are resolved at commit (after the
  /// delta). ev.invocation_id is set to id(). On success the pending change
  /// is cleared and the stored values (modify results included) are folded
  /// into state(); on error nothing changes and the change stays pending.
  /// Errors: as engine::append_event; invalid_argument when the invocation
  /// has ended or ev names another invocation.
  result<append_result> append(event ev);
  void append(event ev, callback<append_result> cb);
  /// apply_output_key(ev, out), then append(ev) (I3).
  result<append_result> append_final(event ev, const output_key& out);

  /// inject_state over state().all() (I2), where an unprefixed name that is
  /// missing falls back to "derived:"+name, as state reads do (N1).
  result<std::string> inject(std::string_view tmpl, const artifact_lookup& artifacts = {}) const;

  /// Re-reads the merged state (other sessions' user:/app: writes become
  /// visible); the pending change is kept and re-applied on top (modifies
  /// are re-previewed against the new values). Errors: as get_session;
  /// not_found when the session is gone.
  result<void> refresh();

  /// Ends the invocation: its temp:/turn: keys are dropped (here and in the
  /// session actor) and the session's lease passes to the next waiter. A
  /// pending change is discarded. Idempotent.
  result<void> end();
  /// The same, async: the invocation is no longer live when this returns;
  /// `cb` runs once the session actor has released the lease.
  void end(callback<void> cb);

private:
  struct impl;
  explicit invocation(std::shared_ptr<impl> p);
  std::shared_ptr<impl> p_;
};

} // namespace agentstate
