// SPDX-License-Identifier: Apache-2.0
// actors/session_actor.hpp: the session actor's state and the functions its
// handlers are made of, one file per job: its reply queue
// (session_replies.cpp), the commands that write (session_commands.cpp),
// event-id deduplication (session_dedup.cpp) and the invocation lease
// (session_lease.cpp); session_actor.cpp assembles the behavior. Everything
// here runs on the actor's own thread. Internal to actors/.
#pragma once

#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/core.hpp"
#include "actors/id_index.hpp"
#include "actors/messages.hpp"
#include "store/records.hpp"

namespace agentstate::detail {

using append_outcome = std::shared_ptr<std::optional<result<append_result>>>;

/// A write's outcome: the writer's verdict and, for a late-bound write set,
/// its resolved binding.
/// A write's outcome: ok or why not, the writer's late-bound results, and
/// (when ok) the commit sequence it took in the change log.
using write_done =
  std::function<void(result<void>, std::shared_ptr<late_binding>, std::uint64_t seq)>;

/// One command awaiting its turn to answer; finish() answers it once
/// `ready`. A write (`done` set) becomes ready when its commit's verdict
/// (code, message, late, seq) is in; any other command is answered by `run`.
struct pending {
  bool ready = false;
  std::function<void()> run;
  write_done done;
  errc code = errc::ok;
  std::string message; ///< why not, when code is not ok
  std::shared_ptr<late_binding> late;
  std::uint64_t seq = 0;

  void finish() {
    if (!done)
      run();
    else if (code == errc::ok)
      done(result<void>{}, std::move(late), seq);
    else
      done(error{code, std::move(message)}, nullptr, 0);
  }
};

/// A begin_invocation waiting for the lease, or a rewind (`then` set: run
/// once the lease is granted to invocation_id, instead of answering `cb`).
struct lease_waiter {
  std::string invocation_id;
  callback<session> cb;
  std::function<void()> then;
};

/// The append (or create) out at the home: what it needs to be sent again
/// and finished.
struct remote_append {
  std::uint64_t version = 0; ///< 0: a create
  std::string write_id;
  event ev; ///< as given, app: keys included
  std::vector<state_modify> modify; ///< every modify, each with its spec
  callback<append_result> cb; ///< empty for one finished after a restart
  append_outcome outcome; ///< A6: callers waiting on its event id
  std::vector<std::string> forget; ///< ids this send asks the home to forget
  /// When it was started (or resumed after a restart): its caller is
  /// answered once the home has been unreachable for answer_after from here.
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  /// A create: the request as given (app: keys included) and its caller
  /// (empty for one finished after a restart); `ev`, `modify`, `cb` unused.
  std::optional<create_request> create;
  callback<session> create_cb;
};

struct session_state {
  engine_core* core = nullptr;
  session_ref ref;
  std::string skey;
  std::string registry_key;
  std::uint64_t handled = 0; ///< routed messages handled (registry protocol)
  std::uint64_t handled_at_tick = 0; ///< `handled` at the previous idle tick

  bool loaded = false;
  /// exists/version as of every accepted command (including in-flight).
  bool exists = false;
  std::uint64_t version = 0;
  /// The record's expiry and refresh as of every accepted command (T1/T2;
  /// 0: none). An existing session past `expires` is gone for every command.
  double expires = 0;
  double refresh = 0;
  /// engine_core::fence_epoch when the record was loaded.
  std::uint64_t fence_epoch = 0;
  /// Set when a write failed: in-flight followers are doomed; new commands
  /// wait in `stash` until the queue drains and the record is re-read.
  bool stale = false;
  // Queues are lists, not deques: libstdc++'s deque allocates ~580 bytes
  // even when empty, and most live actors (idle ones) hold empty queues.
  std::list<std::function<void()>> stash;
  /// Set while a read of the live session waits behind in-flight writes: new
  /// commands wait in `stash` until it has answered, so the read sees every
  /// command before it and none after it.
  bool hold = false;
  /// Set when an inline commit (engine_core::inline_commits) made a queued
  /// write ready inside a handler: the handler's caller drains once the
  /// handler returns, never the handler itself.
  bool drain_due = false;
  /// Write sets sent to the writer and not yet answered (an inline commit
  /// may not overtake them).
  std::size_t with_writer = 0;
  /// An append whose app: part is out at the app's home
  /// (options::app_home, session_outbox.cpp): new commands wait in `stash`
  /// until it has committed.
  std::shared_ptr<remote_append> remote;
  /// Set when the engine closed while an append was out at its home: its
  /// outbox row stays for the next open, and every later command is
  /// answered unavailable unread (one that ran could take the append's
  /// version).
  bool closed_on_remote = false;
  /// Set when the append out at its home has waited longer than
  /// options::app_home::answer_after for a home that cannot be reached:
  /// its caller has been answered unavailable (in doubt) and every command
  /// is answered unavailable unread until it has committed or failed.
  bool remote_overdue = false;
  /// Set when the append out at its home could not commit because the
  /// session's shard is moving away (engine::fence_range): its caller has
  /// been answered unavailable (in doubt), and the append stays in its
  /// outbox row, which moves with the shard. The next command first
  /// resumes it from the store (resume_remote_append), as a new actor would.
  bool moved_out = false;

  std::string invocation; ///< the live invocation, "" when none
  json temp = json::object();
  /// The invocation holding the lease ("" when free) and those waiting.
  std::string lease;
  std::list<lease_waiter> waiters;

  std::list<std::shared_ptr<pending>> queue;
  std::unordered_map<std::string, append_outcome> in_flight_ids;
  /// The stored events' ids (A6), built from the store on the first lookup
  /// and told of every append that commits; unset until then, and again
  /// after a failed write or a delete.
  std::optional<event_id_index> ids;
  bool stopping = false;

  static inline const char* name = "agentstate.session";
};

using session_actor_t = session_actor_hdl::stateful_pointer<session_state>;

// -- reply queue (session_replies.cpp) -----------------------------------------

/// Reads the session record. On failure the actor stays unloaded (the next
/// command tries again) and the error says why.
result<void> load(session_actor_t self);
/// load, also returning the record as read (none: no session).
result<std::optional<store::session_record>> load_record(session_actor_t self);

/// Answers queued commands from the front while they are ready; once the
/// queue is empty after a failed write, re-reads the record and replays the
/// stash. Repeats while drain_due is set by what it ran.
void drain(session_actor_t self);

/// Quits once a shutdown was asked and nothing is queued.
void maybe_finish(session_actor_t self);

/// Whether a command arriving now must wait (in `stash`) instead of running:
/// while a failed write is being resolved or a read waits behind writes
/// (`stale`, `hold`), until the queue drains (so every command is still
/// answered in arrival order and reads see exactly the commands before them).
inline bool entry_waits(const session_state& st) {
  return st.stale || st.hold || st.remote;
}

/// Runs a command now, or stashes it while entry_waits.
void enter(session_actor_t self, std::function<void()> fn);

/// Queues an answer that is ready now (it still waits for earlier ones).
void answer(session_actor_t self, std::function<void()> fn);

/// Sends `plan` to the writer, or with inline_commits, when it may, commits
/// it now and sets drain_due; `done` runs in order with the verdict, never inside
/// submit. The closures given to CAF hold only `self` and the pending
/// entry, so nothing large is copied per append.
void submit(session_actor_t self, write_plan plan, write_done done);

/// Loads the record on first use. Returns false (after answering `cb` in
/// order) when the store cannot be read.
template <class T>
bool ensure_loaded(session_actor_t self, callback<T>& cb) {
  auto& st = self->state;
  // A user or app deleted since the load (X2/X3): with nothing in flight,
  // the record is read again (writes in flight fail under the fence and
  // make the actor re-read it anyway).
  if (st.loaded && st.queue.empty() && st.fence_epoch != st.core->fence_epoch.load()) {
    st.loaded = false;
    st.ids.reset(); // the events may have changed under it (engine::write_range)
  }
  if (st.loaded)
    return true;
  auto r = load(self);
  if (r)
    return true;
  answer(self, [cb = std::move(cb), e = std::move(r).err()] { cb(e); });
  return false;
}

// -- commands (session_commands.cpp) ---------------------------------------------

/// Whether the session exists but has expired by now (T1).
bool has_expired(const session_state& st);

/// Loads the record on first use; false (after answering `cb` in order with
/// the load's error or already_exists) unless the session does not exist:
/// what a create and a fork start with. A session that has expired is
/// deleted first (its delete is queued before the caller's write, T4).
bool ensure_absent(session_actor_t self, callback<session>& cb);

void on_create(session_actor_t self, create_cmd& cmd);
void on_append(session_actor_t self, append_cmd& cmd);
void on_get(session_actor_t self, get_cmd& cmd);
void on_delete(session_actor_t self, delete_cmd& cmd);
void on_prune_delete(session_actor_t self, prune_delete_cmd& cmd);

/// What an append's commit answers (in order): the caller's `cb` (none for
/// an append finished after a restart), A6's waiters through `outcome`, the
/// id index, the live invocation's temp: keys.
write_done append_done(session_actor_t self, callback<append_result> cb, append_result stored,
                       json temp, std::vector<std::string> temp_removed, append_outcome outcome);

// -- app: writes at the app's home, options::app_home (session_outbox.cpp) --------

/// Whether `req` writes app: keys of an app whose home is another node.
bool app_part_elsewhere(const session_state& st, const append_request& req);
/// Whether a create whose plan is `ws` writes app: keys of an app whose home
/// is another node.
bool app_part_elsewhere(const session_state& st, const store::write_set& ws);
/// A create with app: keys whose home is another node, as an append is
/// (start_remote_append): the outbox row at version 0, the app: part at the
/// home, then the session with the home's values. REQUIRES: on_create's
/// checks passed (the session is absent, the request prepares).
void start_remote_create(session_actor_t self, create_cmd& cmd);
/// What a create's commit answers: the session as created (its own state
/// `own`, merged with the shared scopes as stored here, then the prefixed
/// keys of `home_values`: the app: values a remote create's home applied).
write_done create_done(session_actor_t self, callback<session> cb, json own, double created,
                       double expires, json home_values = nullptr);
/// Commits the append's outbox row, sends its app: part to the home and,
/// with the outcome, commits the event (store/outbox.hpp). REQUIRES: the
/// append passed on_append's checks (A6, expected_version) and has its id
/// and timestamp.
void start_remote_append(session_actor_t self, append_cmd& cmd, bool generated);
/// At activation: finishes the append a crash left in the outbox before
/// any command runs (when the store cannot be read, the commands fail as a
/// failed load makes them).
void resume_remote_append(session_actor_t self);
/// The home's answer to the app: part in flight.
void on_app_sent(session_actor_t self, app_sent& msg);

// -- event-id deduplication, A6 (session_dedup.cpp) ------------------------------

/// A6 for a caller's event id: when an append with `cmd`'s id is in flight
/// or stored, queues `cmd`'s answer as that append's outcome and returns
/// true. Costs a hash lookup, a read transaction and a read of each
/// candidate event (one, unless hashes collide); the first lookup after
/// activation builds the id index (decoding every stored event once).
bool answer_duplicate(session_actor_t self, append_cmd& cmd);

// -- the invocation lease and live temp: state (session_lease.cpp) ---------------

/// The live invocation's temp: keys when `invocation_id` names it, else null.
const json* live_temp(const session_state& st, const std::string& invocation_id);
/// read_session plus the temp: keys of req.invocation_id when it is live.
result<std::optional<session>> read_live(session_actor_t self, const get_request& req,
                                         std::size_t max_bytes);
void on_begin_invocation(session_actor_t self, begin_invocation_cmd& cmd);
void on_end_invocation(session_actor_t self, end_invocation_cmd& cmd);
/// Takes the lease for `invocation_id` (waiting like a begin while another
/// invocation holds it) and then runs `then`; `cb` gets not_found when the
/// session is gone by then.
void take_lease(session_actor_t self, std::string invocation_id, std::function<void()> then,
                callback<session> cb);
/// Releases the lease `invocation_id` holds (and its temp: state), granting
/// it to the next waiter.
void release_lease(session_actor_t self, const std::string& invocation_id);

// -- the session's past: rewinds and forks (session_history.cpp) -------------------

/// H2/H3: a rewind is computed at the session's true head (after every
/// append accepted before it has committed, with later commands held) under
/// the invocation lease, and appended as one event with expected_version.
/// rewind_plan is the same computation, answered without writing.
void on_rewind(session_actor_t self, rewind_cmd& cmd);
/// H4: creates this session as a fork of another one's events 1..N.
void on_fork(session_actor_t self, fork_cmd& cmd);

} // namespace agentstate::detail
