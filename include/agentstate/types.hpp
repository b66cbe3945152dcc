// SPDX-License-Identifier: Apache-2.0
// agentstate/types.hpp: sessions, events, and the requests and replies of the
// engine API, with their JSON codec (docs/protocol.md "Objects").
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agentstate/error.hpp"
#include "agentstate/json.hpp"

namespace agentstate {

/// The actions an event carries. `extra` holds every member of "actions" other
/// than state_delta, state_remove and artifact_delta, preserved verbatim.
struct event_actions {
  json state_delta = json::object(); ///< applied on append (S1-S4)
  /// State keys this event deletes (prefixed like delta keys; S3 makes null a
  /// value, so a delete is this separate list). On the wire and in the store:
  /// "actions": {"state_remove": ["k", "user:k"]}, omitted when empty. A key
  /// may not be both set and removed by one event. temp:/turn: removes
  /// affect only the live invocation and are stripped like temp: sets.
  std::vector<std::string> state_remove;
  json artifact_delta = json::object(); ///< stored, never interpreted
  json extra = json::object();
};

/// One event of a session's log (D3). `extra` holds every unknown top-level
/// member, preserved verbatim through store and wire.
struct event {
  std::string id; ///< generated on append when empty
  std::string invocation_id;
  std::string author;
  std::optional<double> timestamp; ///< epoch seconds; now when absent
  std::optional<bool> partial; ///< partial events are never stored (A1)
  std::optional<json> content;
  event_actions actions;
  json extra = json::object();
};

/// A session without its events (list results, SessionMeta on the wire).
struct session_meta {
  std::string app_name;
  std::string user_id;
  std::string id;
  json state = json::object(); ///< merged: session + "app:"* + "user:"* (S2)
  double last_update_time = 0;
  std::uint64_t version = 0; ///< number of stored events (D2)
  /// T1: when the session expires (epoch seconds; unset: never). On the
  /// wire "expires_at", present only when set.
  std::optional<double> expires_at = std::nullopt;
};

/// What an as-of read (get_request::as_of_version) shows. On the wire:
/// "as_of": {"version", "shared_state": "current", "exact"}.
struct as_of_info {
  std::uint64_t version = 0;
  /// false for a session created before store format 7 (no record of the
  /// state it was created with): a key set at creation and changed later is
  /// missing from earlier versions' state.
  bool exact = true;
};

/// A session with (a possibly filtered window of) its events, oldest first.
struct session : session_meta {
  std::vector<event> events;
  /// The change-feed cursor (watch.hpp) of what this session shows: a watch
  /// or read_changes from it delivers exactly the changes the session does
  /// not yet reflect. get_session: the newest change of the snapshot it was
  /// read from. create_session: the create's own change (the shared scopes
  /// merged into its state are read just after it). begin_invocation: the
  /// snapshot it was read from. Empty for a session not read from an engine
  /// (for example, one decoded by session_from_json).
  std::string cursor;
  /// Set by a read with get_request::as_of_version: what the session shows.
  std::optional<as_of_info> as_of = std::nullopt;
};

/// Names one session (D1). Every engine call drops whitespace around
/// `session_id` (so " s " names "s", as create_session stores it); `app_name`
/// and `user_id` are taken exactly.
struct session_ref {
  std::string app_name;
  std::string user_id;
  std::string session_id;
};

struct create_request {
  std::string app_name;
  std::string user_id;
  std::string session_id; ///< trimmed; empty or blank -> generated (C1)
  json state = json::object(); ///< routed by scope; temp: keys dropped (C3)
  /// T1: the session expires this many seconds after its creation (> 0;
  /// 0: never). Unset: options::default_session_ttl.
  std::optional<double> ttl_s = std::nullopt;
  /// T2: each stored append moves the expiry to ttl_s past the moment the
  /// append is accepted. Unset: options::refresh_ttl_on_append.
  std::optional<bool> refresh_ttl = std::nullopt;
};

struct get_request {
  session_ref ref;
  std::optional<std::int64_t> num_recent_events; ///< G3; negative is invalid
  std::optional<double> after_timestamp; ///< G4; inclusive
  std::string invocation_id; ///< when the live one: temp: keys are included
  /// H1: the session as it was after this version (0: as created): events
  /// 1..N (then the filters above, inside them), the session's own state
  /// after N, and last_update_time and version as they were then. app: and
  /// user: state is current (session::as_of says so). A version past the
  /// session's is invalid_argument. Cost: one decode per event 1..N.
  std::optional<std::uint64_t> as_of_version = std::nullopt;
  /// H5: only the events ADK's context builder keeps: rewind markers, and
  /// the events each rewind undid, are left out (nested rewinds as ADK
  /// handles them); the filters above apply to what is kept. Cost: one
  /// decode per event of the session (or 1..as_of_version).
  bool apply_rewinds = false;
};

/// The order of a listing (L3). By update time a session that is written
/// during a paged scan moves: if its new time sorts before the cursor the
/// remaining pages miss it, if after, they list it again. By creation time
/// and by id nothing moves: every session that exists for the whole scan is
/// listed exactly once (one created during the scan is listed when it sorts
/// after the cursor).
enum class list_order : std::uint8_t {
  update_time, ///< last_update_time, then id (L3's order)
  id, ///< (user id,) session id, byte order
  created, ///< creation time, then id (then user id, app-wide)
};

/// How a listing carries the shared scopes' state.
enum class list_state : std::uint8_t {
  /// Each listed session's state is merged with its user: and app: state
  /// (L2, ADK's shape): the shared state is repeated in every session.
  merged,
  /// Each listed session's state is its own keys only; the page holds the
  /// app: state and each listed user's user: state once (session_page).
  once,
};

struct list_request {
  std::string app_name;
  std::optional<std::string> user_id; ///< absent -> every user (L1)
  std::optional<std::int64_t> page_size; ///< default 100, 1..1000
  std::string page_token; ///< from a previous page; empty = first
  list_order order_by = list_order::update_time;
  /// Reverse order (newest first by update time). A page token continues in
  /// the order it was made for.
  bool descending = false;
  /// Matching sessions to skip before the page (after page_token, when
  /// both are given). Costs O(offset) index reads, no session reads.
  std::uint64_t offset = 0;
  /// Count every matching session into session_page::total. Costs
  /// O(matching sessions) index reads.
  bool include_total = false;
  list_state shared_state = list_state::merged;
  /// Fill session_page::session_tokens: for each listed session, the page
  /// token that continues this listing after it.
  bool session_tokens = false;
  /// With shard_count > 0: only the sessions whose shard among shard_count
  /// (the cluster's placement of (app_name, user_id), docs/cluster.md) is
  /// one of `shards`, listed and counted alike; the others are skipped as
  /// expired ones are. What a cluster node answers of its own shards when
  /// its store also holds copies of others (a follower's, a moving shard's).
  std::uint32_t shard_count = 0;
  std::vector<std::uint32_t> shards;
};

struct session_page {
  std::vector<session_meta> sessions;
  std::optional<std::string> next_page_token; ///< absent on the last page
  std::optional<std::uint64_t> total; ///< with list_request::include_total
  /// With list_state::once: the app's state ("app:"-prefixed keys), and the
  /// state of each user with a listed session ("user:"-prefixed keys), by
  /// user id. Empty otherwise.
  json app_state = json::object();
  std::map<std::string, json> user_states;
  /// With list_request::session_tokens: one per listed session, in order,
  /// the token that continues the listing after it. Empty otherwise.
  std::vector<std::string> session_tokens;
};

/// An atomic read-modify-write of one state key, carried by an append. The
/// store writer resolves it inside the commit, in commit order: `fn` sees the
/// key's latest committed value (or `fallback` when the key is missing), and
/// its result is recorded in the stored event's state_delta like any set.
/// So 100 sessions incrementing one user: counter concurrently lose nothing.
/// Several modifies of one key in one append apply in order, after the
/// event's own state_delta.
/// REQUIRES of fn: pure, fast and non-blocking (it runs on the writer
/// thread inside the write transaction; it must not call the engine). A
/// throwing fn fails that append alone with invalid_argument.
struct state_modify {
  std::string key; ///< session, user: or app: key (not temp:/turn:/derived:)
  json fallback; ///< what fn sees when the key is missing
  std::function<json(const json& current)> fn;
  /// Compare-and-set: when set, the append fails with condition_failed,
  /// storing nothing, unless the key's value (as fn would see it, before
  /// the fallback) equals this; a missing key matches nothing.
  std::optional<json> expected = std::nullopt;
  /// The operation in the protocol's form ({"key", "op", ...}) when it was
  /// built from one (state_modify_from_json), else null: what a cluster
  /// node sends to an app's home, and keeps to finish the append after a
  /// crash (options::app_home).
  json spec = nullptr;
};

/// The built-in modifies (the protocol's `modify` operations), resolved at
/// commit like any state_modify. A key of the wrong type fails the append
/// with invalid_argument.
namespace modify_ops {
/// Adds `by` (a number) to the key's number, 0 when missing. Integers stay
/// integers; an integer overflow fails the append.
state_modify increment(std::string key, json by);
/// Appends `value` to the key's array ([] when missing).
state_modify append(std::string key, json value);
/// Sets each member of `value` (an object) in the key's object ({} when
/// missing); members not named keep their values.
state_modify merge(std::string key, json value);
/// Sets the key to `value` when it is missing; otherwise keeps (and
/// records) its value.
state_modify set_if_absent(std::string key, json value);
/// Sets the key to `value` when it holds `expected` (see
/// state_modify::expected).
state_modify compare_and_set(std::string key, json expected, json value);
} // namespace modify_ops

struct append_request {
  session_ref ref;
  event ev;
  std::optional<std::uint64_t> expected_version; ///< A7
  std::vector<state_modify> modify; ///< resolved at commit (see state_modify)
};

struct append_result {
  event ev; ///< as stored: id and timestamp set, no temp: keys
  std::uint64_t version; ///< the session's version after this event
  /// The append's cursor in the change feed (watch.hpp): reading changes
  /// from it starts with the next change committed after this one. For a
  /// re-appended id, the newest cursor when the stored event was found;
  /// empty for a partial event (not stored).
  std::string cursor;
  /// `ev` as stored JSON text, as get_session_json shows it (the protocol
  /// answers with it instead of encoding `ev` again). Empty when the call
  /// did not encode it: a partial event, a re-appended id, an append with
  /// `modify` or one that sets or removes a derived key's input.
  std::string text;
};

/// A rewind (H2): where the session's own state goes back to. Exactly one of
/// before_invocation_id (just before that invocation's first event) and
/// before_version (the state after before_version - 1) is set.
struct rewind_request {
  session_ref ref;
  std::string before_invocation_id;
  std::uint64_t before_version = 0;
  /// The rewind event's id (generated when empty); re-sending a stored id
  /// answers the stored event (A6).
  std::string event_id;
  /// A7: the rewind fails with version_conflict unless the session is at it.
  std::optional<std::uint64_t> expected_version = std::nullopt;
};

/// What a rewind changes in the session's own state (rewind_plan): the keys
/// restored with their values, the keys deleted.
struct rewind_changes {
  json state_delta = json::object();
  std::vector<std::string> state_remove;
  std::uint64_t before_version = 0; ///< the restored state is the one after before_version - 1
  bool exact = true; ///< as as_of_info::exact
};

/// One invocation of a session's log (H6).
struct invocation_info {
  std::string invocation_id;
  std::uint64_t first_version = 0, last_version = 0;
  std::uint64_t events = 0;
  bool annulled = false; ///< every event of it was undone by a later rewind
  bool rewind = false; ///< it is a rewind (its event is a rewind marker)
};

/// A fork (H4): a new session holding the events 1..at_version of `ref` and
/// its own state as of then.
struct fork_request {
  session_ref ref;
  std::uint64_t at_version = 0;
  std::string new_session_id; ///< trimmed; empty -> generated (C1)
};

/// A shared scope's state (keys without their "app:" or "user:" prefix) and
/// the change-feed cursor of what it shows: a watch of the scope from that
/// cursor delivers exactly the changes the state does not yet reflect.
struct scope_snapshot {
  json state = json::object();
  std::string cursor;
};

/// The app: part of an append made on another node of a cluster, applied at
/// the node that owns the app's home shard (docs/cluster.md). The sender
/// names it with a write id of its choosing: one id is applied once.
struct app_write_request {
  std::string app_name;
  /// 1 to 128 bytes, no NUL; unique per app among the writes whose
  /// outcomes are kept (a second write with a kept id is not applied).
  std::string write_id;
  json state_delta = json::object(); ///< app: keys -> values (S3)
  std::vector<std::string> state_remove; ///< app: keys deleted
  /// On app: keys: resolved in commit order after the sets and removes, in
  /// the order given, as an append's are.
  std::vector<state_modify> modify;
  /// Write ids (of this app) whose kept outcomes the sender no longer
  /// needs: dropped in the same commit. At most 1,024.
  std::vector<std::string> forget;
};

/// What an app write left in the keys it names. `duplicate`: the write id
/// was applied before, this is that apply's outcome, and nothing was
/// written now.
struct app_write_result {
  json values = json::object(); ///< prefixed key -> committed value
  std::vector<std::string> removed; ///< prefixed keys it left deleted
  bool duplicate = false;
};

// -- JSON codec --------------------------------------------------------------
// to_json never fails. The *_from_json functions check every known member's
// type and return invalid_argument naming the member; they never throw.

json to_json(const event& x);
json to_json(const session_meta& x);
/// With a "cursor" member when x.cursor is not empty, an "as_of" member
/// when x.as_of is set.
json to_json(const session& x);
json to_json(const rewind_changes& x);
json to_json(const invocation_info& x);
result<event> event_from_json(const json& x);
/// As above, moving the members out of `x` instead of copying them.
result<event> event_from_json(json&& x);
result<session> session_from_json(const json& x);
/// One protocol `modify` operation: {"key", "op": "increment" ("by"),
/// "append" / "merge" / "set_if_absent" ("value"), "compare_and_set"
/// ("expected", "value")}. Errors: invalid_argument naming the member.
result<state_modify> state_modify_from_json(const json& x);

} // namespace agentstate
