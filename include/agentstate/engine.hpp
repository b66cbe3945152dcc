// SPDX-License-Identifier: Apache-2.0
// agentstate/engine.hpp: START HERE. The session engine: open a store, then
// create, read, list and delete sessions and append events to them.
//
// Thread safety: an engine may be used from any number of threads at once.
// Every operation comes in two forms:
//   * async: takes a callback, returns at once; the callback runs exactly once,
//     on an engine thread (or inline, for reads served without an actor hop).
//     Callbacks must not block: they run on the engine's scheduler.
//   * blocking: the same call without the callback; waits for the result.
//     REQUIRES: not called from inside an engine callback. While it waits,
//     the calling thread may run queued engine work itself (an actor's
//     handling of this and other calls: options::spin_wait), so other
//     calls' callbacks may run on it: a callback must not wait for a lock
//     that a thread holds across a blocking call.
// No call throws. Errors are agentstate::error values (error.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agentstate/error.hpp"
#include "agentstate/json.hpp"
#include "agentstate/options.hpp"
#include "agentstate/types.hpp"
#include "agentstate/watch.hpp"

namespace agentstate {

/// Counters of one engine, cumulative since open unless noted.
struct engine_stats {
  std::uint64_t sessions_live = 0; ///< session actors now active
  std::uint64_t users_live = 0;
  std::uint64_t apps_live = 0;
  std::uint64_t activations = 0; ///< actors spawned (incl. rehydrations)
  std::uint64_t passivations = 0;
  std::uint64_t appends = 0; ///< events stored
  std::uint64_t deduplicated = 0; ///< appends answered with an already stored event (A6)
  std::uint64_t commits = 0; ///< write transactions committed
  std::uint64_t batched_writes = 0; ///< write sets in those transactions
  std::uint64_t max_batch = 0; ///< largest group commit seen
  std::uint64_t failed_writes = 0;
  /// Times the store's mapped pages were dropped from the process to honour
  /// options::max_resident_store_bytes.
  std::uint64_t resident_trims = 0;
  /// Live actors asked to passivate because options::max_live_sessions was
  /// reached.
  std::uint64_t evictions = 0;
  /// Times freed heap memory was returned to the OS after passivations.
  std::uint64_t heap_trims = 0;
};

json to_json(const engine_stats& x);

/// What engine::prune deletes: every session (of app_name, or of every app
/// when it is empty) whose last update is before the engine's wall clock
/// (options::wall_clock) minus older_than_s.
struct prune_request {
  double older_than_s = 0; ///< finite and > 0
  std::string app_name; ///< "" : every app
  bool dry_run = false; ///< find and count, delete nothing
  /// How many of the sessions the result names (0..10,000).
  std::size_t sample_limit = 100;
  /// When set: called after each step with the sessions deleted (or found,
  /// dry_run) so far, on an engine thread; it must not block.
  std::function<void(std::uint64_t sessions)> progress;
};

/// What a prune did (or, dry_run, would do).
struct prune_result {
  std::uint64_t sessions = 0; ///< deleted, or found (dry_run)
  /// The first sample_limit of them, in the order they were found (by app,
  /// then by last update time).
  std::vector<session_ref> sample;
  bool truncated = false; ///< sessions > sample.size()
  double cutoff = 0; ///< the last-update time before which sessions go
  std::uint64_t failed = 0; ///< deletes that failed
  /// Why the prune stopped before the end (a failed delete, a failed read
  /// of the store, the engine closing); the counts say what it did first.
  std::optional<error> stopped;
};

/// A range of the shard hash (docs/cluster.md, "Shards"): the sessions and
/// user scopes whose h(app ‖ 0 ‖ user), and the app scopes whose h(app), lie
/// in [lo, hi); hi 0 stands for 2^64, so {0, 0} is everything.
struct hash_range {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
};

/// One piece of a range's rows, as engine::read_range reads it.
struct range_chunk {
  /// The rows, serialised with a checksum: engine::write_range's input.
  std::string bytes;
  /// Where the next piece starts (read_range's `from`); "" : this was the last.
  std::string next;
  std::uint64_t sessions = 0; ///< sessions whose rows it carries
  std::uint64_t rows = 0; ///< rows it carries
};

/// A range's rows in short (engine::digest_range): their count and a
/// CRC-32C over them in order. Two stores whose ranges hold the same rows
/// have the same digest.
struct range_digest {
  std::uint64_t sessions = 0, rows = 0, bytes = 0;
  std::uint32_t crc = 0;
  bool operator==(const range_digest& o) const {
    return sessions == o.sessions && rows == o.rows && bytes == o.bytes && crc == o.crc;
  }
  bool operator!=(const range_digest& o) const { return !(*this == o); }
};

/// One snapshot of a range of the shard hash and its replica position, for
/// copying the range to a follower (engine::snapshot_range). Its position,
/// chunks and digest all come from that one snapshot, whatever the engine
/// commits after it was taken. Not thread-safe: one call at a time, from any
/// thread. REQUIRES, of a snapshot of an LMDB store (a read transaction of
/// the store): destroyed before its engine's close() (or destruction)
/// begins. A snapshot of a memory store is a copy that holds nothing of the
/// engine: it may outlive the engine.
class range_snapshot {
public:
  virtual ~range_snapshot() = default;
  /// The range's replica position in the snapshot ({0, 0}: none).
  virtual replica_position position() const = 0;
  /// As engine::read_range, every chunk from this one snapshot: the chunks
  /// from "" to the one whose `next` is "", applied in order with
  /// engine::write_range, leave a range as the snapshot holds it.
  /// Errors: as read_range; unavailable (an LMDB store's engine closing).
  virtual result<range_chunk> read(const std::string& from,
                                   std::size_t max_bytes = std::size_t{4} << 20) = 0;
  /// The digest of the range's rows in the snapshot (as digest_range).
  /// Cost: a read of all of the range. Errors: as read.
  virtual result<range_digest> digest() = 0;
};

namespace detail {
struct engine_core;
struct engine_factory; // internal: wrapped stores and the tests' access to internals
} // namespace detail

class engine {
public:
  /// Opens (creating if needed) the store described by `opts` and starts the
  /// engine. Errors: invalid_argument (bad options), unavailable (the store
  /// is open elsewhere), io_error (cannot create/open), internal (the store's
  /// format version is not one this build reads).
  static result<std::unique_ptr<engine>> open(const options& opts);

  /// Closes as close() does.
  ~engine();
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  // -- sessions --------------------------------------------------------------

  /// Creates a session (C1-C4); session::cursor is the create's change.
  /// Errors: already_exists, invalid_argument,
  /// too_large, storage_full, io_error, unavailable.
  void create_session(create_request req, callback<session> cb);
  result<session> create_session(create_request req);

  /// The session with merged state and the requested window of events, or
  /// nullopt when it does not exist (G1-G6). Reads one consistent snapshot of
  /// every scope; session::cursor is that snapshot's point in the change
  /// feed (read, then watch from it: no change missed or repeated). Errors: invalid_argument; too_large when the requested
  /// events' stored JSON passes limits::max_response_bytes (found before any
  /// is decoded: ask for fewer with num_recent_events or after_timestamp);
  /// data_corrupt.
  void get_session(get_request req, callback<std::optional<session>> cb);
  result<std::optional<session>> get_session(get_request req);

  /// get_session as the JSON text of the Session object (docs/protocol.md), equal
  /// to dump_json(to_json(*session)), or "null" when it does not exist.
  /// Stored events are copied as stored, never parsed: the fast path for
  /// servers and long sessions (docs/performance.md, c). Errors: as
  /// get_session.
  void get_session_json(get_request req, callback<std::string> cb);
  result<std::string> get_session_json(get_request req);

  /// One page of sessions of an app (and user), by ascending
  /// last_update_time then id (L1-L3). Errors: invalid_argument (bad token).
  void list_sessions(list_request req, callback<session_page> cb);
  result<session_page> list_sessions(list_request req);

  /// Removes a session and its events; a missing session is a no-op (X1).
  /// One small write whatever the session's size: once acknowledged the
  /// session is gone for every reader; the rows of a session of more than
  /// 1,024 events are then purged in bounded steps by the store writer
  /// (resumed at the next open after a crash).
  void delete_session(session_ref ref, callback<void> cb);
  result<void> delete_session(session_ref ref);

  /// X2: removes every session of user `user_id` of `app_name` and the
  /// user's user: state, in one small write whatever their size: once
  /// acknowledged, all of it is gone for every reader (a change of kind
  /// remove_user in the feed), and the store writer deletes the rows in
  /// bounded steps (resumed at the next open after a crash). Until it has,
  /// a create under the user is refused with unavailable (retry) and an
  /// append gets not_found. A user that has nothing is a no-op with the same
  /// change. Errors: invalid_argument (names), storage errors.
  void delete_user(std::string app_name, std::string user_id, callback<void> cb);
  result<void> delete_user(std::string app_name, std::string user_id);
  /// X3: the same for a whole app: every session of every user, every
  /// user's user: state and the app: state (a change of kind remove_app).
  void delete_app(std::string app_name, callback<void> cb);
  result<void> delete_app(std::string app_name);

  /// Deletes every session whose last update is older than
  /// req.older_than_s (prune_request), each delete as delete_session's
  /// (in the change feed, a large session's rows purged in steps), in
  /// bounded steps beside other calls: each step reads one page of at most
  /// 256 such sessions (examining at most 4,096 index entries) from a fresh
  /// snapshot, and the next step starts once the page's deletes are
  /// answered, so memory stays bounded and other work interleaves. App and
  /// user state stay. A step after a failed delete does not start
  /// (prune_result::stopped). A delete commits only if its session is still
  /// as its step read it (the same version, creation and last update time,
  /// no append out at its app's home): a session written after its step
  /// read it (appended to, deleted, created again) stays, counted in
  /// neither sessions nor failed. Errors: invalid_argument (older_than_s,
  /// app_name, sample_limit), unavailable (closing).
  void prune(prune_request req, callback<prune_result> cb);
  result<prune_result> prune(prune_request req);

  /// Appends one event (A1-A7); acknowledged once durable per options::mode.
  /// Appends to one session are applied and acknowledged in call order (per
  /// calling thread). Re-appending a stored event id returns the original.
  /// Errors: not_found, version_conflict, invalid_argument, too_large,
  /// storage_full, io_error, unavailable.
  void append_event(append_request req, callback<append_result> cb);
  result<append_result> append_event(append_request req);

  /// Begins invocation `invocation_id` (generated when empty) on a session
  /// and takes the session's invocation lease: begins on one session are
  /// granted one at a time, first come first served; a begin waits while
  /// another invocation holds the lease, and is granted when that one ends
  /// (end_invocation). Begin again with the holder's id is granted at once.
  /// The granted invocation becomes the session's live one (temp: state of
  /// another is dropped); while a lease is held, appends naming another
  /// invocation are stored but do not replace the live one (their temp:
  /// keys are dropped). The reply is the session without events, its state
  /// including the invocation's temp: keys. Most hosts use
  /// agentstate::invocation (invocation.hpp), which wraps this.
  /// Errors: not_found, invalid_argument, unavailable (closing).
  /// REQUIRES: every granted invocation is ended; a thread must not begin
  /// a second invocation on a session whose lease it holds (it would wait
  /// for itself).
  void begin_invocation(session_ref ref, std::string invocation_id, callback<session> cb);
  result<session> begin_invocation(session_ref ref, std::string invocation_id);

  /// Ends an invocation: drops its temp: state if it is the session's live
  /// invocation, and releases the lease if it holds it; otherwise a no-op.
  void end_invocation(session_ref ref, std::string invocation_id, callback<void> cb);
  result<void> end_invocation(session_ref ref, std::string invocation_id);

  // -- the session's past (docs/semantics.md, H) -------------------------------
  // get_session reads a session as it was at any version
  // (get_request::as_of_version) and with the events rewinds undid left out
  // (get_request::apply_rewinds).

  /// Rewinds a session's own state (H2): appends one event, in ADK's shape
  /// (author "user", an invocation id of its own, actions.
  /// rewind_before_invocation_id, or rewind_before_version), that restores
  /// every session key changed since the point to its value there and
  /// deletes (state_remove) each key that did not exist there. app: and
  /// user: state is not rewound; derived: keys recompute from the restored
  /// inputs. Computed at the session's head once every append accepted
  /// before it has committed, and waits while another invocation holds the
  /// lease (as begin_invocation does). Errors: not_found, invalid_argument
  /// (the point: see rewind_request), version_conflict (expected_version),
  /// too_large, storage errors. Cost: one decode per event up to the head.
  void rewind_session(rewind_request req, callback<append_result> cb);
  result<append_result> rewind_session(rewind_request req);

  /// What rewind_session would change now, without writing (H3): for hosts
  /// that restore artifacts first. Errors as rewind_session.
  void rewind_plan(rewind_request req, callback<rewind_changes> cb);
  result<rewind_changes> rewind_plan(rewind_request req);

  /// A session's invocations in order of their first event, each with its
  /// version range and whether a rewind undid it (H6), from one snapshot on
  /// the calling thread. Errors: not_found, invalid_argument, storage errors.
  /// Cost: one decode per event.
  void list_invocations(session_ref ref, callback<std::vector<invocation_info>> cb);
  result<std::vector<invocation_info>> list_invocations(session_ref ref);

  /// Creates session (ref's app, ref's user, new_session_id) holding events
  /// 1..at_version of `ref` (same ids and versions) and its own state after
  /// at_version, in one write (H4); the source is unchanged. The reply is
  /// the new session without events. Errors: already_exists, not_found (the
  /// source), invalid_argument (at_version past the source's version),
  /// storage errors.
  void fork_session(fork_request req, callback<session> cb);
  result<session> fork_session(fork_request req);

  // -- shared scopes -----------------------------------------------------------

  /// The app's state, keys without the "app:" prefix ({} when none).
  void get_app_state(std::string app_name, callback<json> cb);
  result<json> get_app_state(std::string app_name);

  /// The (app, user)'s state, keys without the "user:" prefix.
  void get_user_state(std::string app_name, std::string user_id, callback<json> cb);
  result<json> get_user_state(std::string app_name, std::string user_id);

  /// get_app_state and get_user_state with the change-feed cursor of what
  /// the state shows (scope_snapshot): watching the scope from that cursor
  /// misses and repeats no change. The cursor may be older than the store's
  /// head (changes of other scopes since are not in this state's past).
  void get_app_state_with_cursor(std::string app_name, callback<scope_snapshot> cb);
  result<scope_snapshot> get_app_state_with_cursor(std::string app_name);
  void get_user_state_with_cursor(std::string app_name, std::string user_id,
                                  callback<scope_snapshot> cb);
  result<scope_snapshot> get_user_state_with_cursor(std::string app_name, std::string user_id);

  /// Applies a cluster's app write (app_write_request) here, as the app's
  /// home, in one commit that keeps its outcome under its write id, so a
  /// write sent twice is applied once: the second answers the first's
  /// outcome with `duplicate` set. The app actor sees it as any app: write;
  /// it takes no change-feed row (the append it belongs to logs it on its
  /// own node). Errors: invalid_argument (names, a key without the app:
  /// prefix, a key both set and removed, a bad modify, too many forgets),
  /// too_large (a value), condition_failed (a compare_and_set), unavailable
  /// (the app is being deleted), storage errors; a failed write keeps no
  /// outcome, so it may be sent again.
  void apply_app_write(app_write_request req, callback<app_write_result> cb);
  result<app_write_result> apply_app_write(app_write_request req);

  // -- moving a range of the shard hash to another store (a cluster node's
  //    part of `cluster move`, docs/cluster.md) --------------------------------
  // Blocking, on the calling thread; they take the commit lock, so a call
  // holds back this engine's commits while it runs (write_range and
  // drop_range for one chunk's commit at a time).

  /// Fences `r`: from the return on, every write to a session or user scope
  /// in r, to the app scope of an app in r (its app_write, or an append that
  /// writes it here), and every delete_app, fails unavailable ("moving");
  /// writes committed before the call stay and are what read_range reads.
  /// Fences are this engine's only (not stored); fencing a range twice is
  /// one fence. Errors: unavailable (closing).
  result<void> fence_range(hash_range r);
  /// Lifts the fence `r` (nothing when none) and starts the sessions in r
  /// whose appends wait for their app: part (resume_range).
  result<void> unfence_range(hash_range r);
  /// The rows of `r` from `from` ("" : the start; else a chunk's `next`), at
  /// most 256 sessions or scopes and about `max_bytes` (at least one whole
  /// session), from one snapshot. Every session, user scope and app scope
  /// of r with its rows (events, state, origins, waiting outbox rows, kept
  /// app write outcomes); no change-feed rows: the copy's store logs none.
  /// Errors: invalid_argument (a bad `from`), data_corrupt (a damaged row:
  /// nothing of a damaged store is read), storage errors.
  result<range_chunk> read_range(hash_range r, const std::string& from,
                                 std::size_t max_bytes = std::size_t{4} << 20);
  /// The sequence of the newest change in this store's log (0: none): the
  /// mark a later read_range_since counts from. Take it before the first
  /// read_range of a copy. Errors: storage errors.
  result<std::uint64_t> range_mark();
  /// A catch-up of a copy of `r` whose read_range calls all began after
  /// range_mark() answered `since`: from one snapshot, the rows of every
  /// session and user scope of r that a change after `since` names (its
  /// absence, when it is gone), and every app scope of r, from `from` as
  /// read_range pages. Applied (write_range) over that copy, the chunks
  /// leave r as this snapshot holds it, provided that nothing else of r
  /// changed: call it with r fenced, and compare digest_range at both ends
  /// (a write that logs no change, such as a waiting append's outbox row
  /// dropped after its failure, is not in it). Errors: cursor_expired (the
  /// log no longer holds every change after `since`), condition_failed (a
  /// change after `since` deletes a user of r or an app: read all of r
  /// again with read_range), as read_range.
  result<range_chunk> read_range_since(hash_range r, std::uint64_t since, const std::string& from,
                                       std::size_t max_bytes = std::size_t{4} << 20);
  /// The digest of every row of `r` (what read_range reads), from one
  /// snapshot. Cost: a read of all of r. Errors: as read_range.
  result<range_digest> digest_range(hash_range r);
  /// Applies a chunk of `r` that read_range read from another store, in one
  /// commit: what this store held in the spans the chunk covers is replaced
  /// by the chunk's rows, so the chunks of one reading, applied in order,
  /// leave r as the source held it. It fences r first (fence_range): the
  /// rows are not this engine's to write, reap or prune until
  /// unfence_range. Cached session and scope state is read again. Errors: data_corrupt (a damaged chunk or a row whose seal
  /// fails), invalid_argument (a chunk that does not parse, or of another
  /// range), unavailable (a row under a delete in progress here), storage
  /// errors; a failed chunk changes nothing.
  result<void> write_range(hash_range r, std::string_view chunk);
  /// What merge_range did: sessions and scopes (user, app) written, those
  /// passed over because this store held them with the same rows, and the
  /// sessions written.
  struct range_merge {
    std::uint64_t added = 0, present = 0, sessions = 0;
  };
  /// Adds a chunk of `r` that read_range read from another store to the
  /// rows of r this store holds, in one commit, deleting nothing and
  /// fencing nothing (a store adopted into a cluster, `cluster adopt`): a
  /// session, user scope or app scope this store does not hold is written
  /// with its rows (ids, versions, times and events as they were), and one
  /// it holds with the same rows is passed over, so a merge run again
  /// changes nothing. Nothing is logged in the change feed. Cached state is
  /// read again. Errors: already_exists (this store holds one of them with
  /// other rows: named; the chunk changes nothing), as write_range.
  result<range_merge> merge_range(hash_range r, std::string_view chunk);
  /// Deletes every row of `r`, in commits of one chunk's rows each, logging
  /// nothing in the change feed (the rows moved; nothing was deleted).
  /// Cached state is read again. The sessions deleted. Errors: as
  /// read_range, storage errors (what was deleted before stays deleted).
  result<std::uint64_t> drop_range(hash_range r);
  /// Starts the sessions in `r` that have an append waiting for its app:
  /// part in the outbox, so each finishes it (as at open). Errors: storage
  /// errors.
  result<void> resume_range(hash_range r);

  // -- replicating a range of the shard hash (a cluster node's part of a
  //    shard's replicas, docs/cluster.md) -------------------------------------
  // Blocking, on the calling thread; they take the commit lock.

  /// Makes this engine the leader of `r` under `epoch`: from the return on,
  /// each write set committed in r also stores r's position (its epoch, the
  /// next sequence number) in the same commit and is shipped through
  /// options::replicator; its answer waits for the replicator. Lifts a
  /// fence of r. A write set that would write two ranges of which one is
  /// led (an append writing app: keys of an app homed in another range:
  /// send those through options::app_home) and every delete_app fail
  /// unavailable while any range is led. The position r's writes follow.
  /// Errors: invalid_argument (no replicator; `epoch` below the epoch of
  /// r's stored position), unavailable (closing), storage errors.
  result<replica_position> lead_range(hash_range r, std::uint64_t epoch);
  /// Ends the lead of `r` and fences it: its writes fail unavailable until
  /// it is led again or unfenced. Write sets already shipped are still
  /// answered as the replicator says.
  result<void> unlead_range(hash_range r);
  /// The position of `r` in this store ({0, 0}: none). Errors: data_corrupt
  /// (a damaged position row), storage errors.
  result<replica_position> range_position(hash_range r);
  /// `r`'s position and the digest of its rows (digest_range), from one
  /// snapshot: two copies at the same position hold the same rows when
  /// their digests are equal. Cost: a read of all of r. Errors: as
  /// range_position and digest_range.
  result<std::pair<replica_position, range_digest>> replica_state(hash_range r);
  /// Applies a shipment's `batch` of range `r` as a follower, in one commit
  /// with r's new position: fences r first (this engine does not write it
  /// itself), then refuses, changing nothing, a batch whose epoch is below
  /// that of r's position (condition_failed: a deposed leader's) or that
  /// does not follow r's position (version_conflict: a gap, or a store
  /// that diverged; the message gives both positions). A write set that
  /// does not apply here as it did at the leader means the stores diverged:
  /// data_corrupt, nothing written. Nothing is logged in the change feed.
  /// The position reached. Errors also: condition_failed (this engine
  /// leads r; r is fenced all the same), invalid_argument (not a batch),
  /// unavailable (closing), storage errors. apply_replicas with one input.
  result<replica_position> apply_replica(hash_range r, std::string_view batch);
  /// One shipment's batch for apply_replicas.
  struct replica_input {
    hash_range range;
    std::string_view batch;
  };
  /// Applies the batches of several shipments (of one range or several,
  /// each range's in its order) in ONE commit: each input as apply_replica
  /// would apply it alone, in the order given, every range's new position
  /// stored in the same commit. An input refused (for any of
  /// apply_replica's reasons) changes nothing and does not stop the others:
  /// the commit holds exactly the inputs that applied, and a later input
  /// of the same range is checked against the position the range reached
  /// without it (one that followed it no longer follows: version_conflict,
  /// the message naming the refused input). So the outcome equals calling
  /// apply_replica for each input in turn, at the cost of one commit. The
  /// result for each input, in order: the position its range reached with
  /// it, or why it was refused. The commit counts in stats() (commits,
  /// batched_writes, max_batch) as a group commit of the write sets that
  /// applied. `batch` is read during the call only. Errors of the whole
  /// call, answered to every input, nothing applied: unavailable (closing),
  /// storage errors (of the commit or of any write). Cost: a diverged input
  /// (data_corrupt) is found only by applying it, so each one found costs
  /// the group a transaction begun again without it.
  std::vector<result<replica_position>> apply_replicas(const std::vector<replica_input>& in);

  // Repairing a follower's copy of a range (one that fell out of the
  // range's in-sync set, or a node that restarted): the leader takes
  // snapshot_range(r); the follower calls begin_replica_copy(r), then
  // write_range(r, chunk) for each of the snapshot's chunks in order, then
  // end_replica_copy(r, snapshot's position, snapshot's digest); the
  // leader's shipments whose `prev` is that position then apply on top
  // (apply_replica). A chunk that writes a user or app whose delete this
  // store is still purging answers unavailable: write it again later.

  /// A snapshot of `r` and its replica position (range_snapshot), for a
  /// follower's copy. It holds no lock of this engine: writes go on while
  /// it is read, and none after the call is in it. Where the store's writes
  /// wait for its open readers (durability::memory), the call copies all of
  /// r into memory of the snapshot's own, holding back this engine's
  /// commits while it does (a read of all of r), so its later calls hold
  /// nothing of the store; otherwise (LMDB) it keeps one read transaction
  /// open until it is destroyed, and the pages that writes free meanwhile
  /// are not reused before then (the store's file may grow). Errors:
  /// unavailable (closing), data_corrupt (a damaged position row; with
  /// durability::memory also a damaged row of r), storage errors.
  result<std::unique_ptr<range_snapshot>> snapshot_range(hash_range r);
  /// Starts replacing this store's copy of `r` by a leader's snapshot:
  /// fences r (fence_range), then deletes r's position row in one commit
  /// and every row of r in commits of one chunk's rows each (as drop_range:
  /// nothing is logged in the change feed). Until end_replica_copy stores a
  /// position, r is at position {0, 0}: a copy cut off part-way (a crash)
  /// accepts no shipment but the first of a range's history (whose `prev`
  /// is {0, 0}) until it is copied again. Cached session and scope state is
  /// read again. REQUIRES: r is not led here (lead_range) until
  /// end_replica_copy answers. Errors: condition_failed (this engine leads
  /// r), unavailable (closing), as drop_range (what was deleted before
  /// stays deleted).
  result<void> begin_replica_copy(hash_range r);
  /// Ends a copy that begin_replica_copy began and write_range filled: when
  /// r's rows have the digest `expected` (the snapshot's), stores
  /// `position` (the snapshot's) as r's position, in one commit ({0, 0}:
  /// none is stored); r stays fenced. Holds back this engine's commits
  /// while it reads all of r. Cached session and scope state is read again.
  /// Errors: data_corrupt (r's rows have another digest: both are named;
  /// nothing changed, r's position stays as it was), condition_failed
  /// (this engine leads r), unavailable (closing), storage errors.
  result<void> end_replica_copy(hash_range r, replica_position position, range_digest expected);

  // -- the change feed (watch.hpp) ----------------------------------------------

  /// Up to `limit` (1 to 10,000) changes after req.from (none, or
  /// from_start: from the oldest change the log keeps) that match `req`,
  /// in commit order, from one snapshot, on the calling thread. Examines at
  /// most 65,536 changes per call (the page's cursor is past the last one
  /// examined), so a narrow filter over a long log answers in bounded time,
  /// and ends a page before its changes' stored text passes half of
  /// limits::max_response_bytes (a page holds at least one change), so its
  /// memory is bounded whatever the events hold.
  /// Errors: invalid_argument (a missing name for the scope, a cursor that
  /// is not this store's, or a limit out of range), cursor_expired (with
  /// error::oldest_cursor), data_corrupt (a damaged log row), storage
  /// errors. Cost: one decode per change examined.
  void read_changes(watch_request req, std::size_t limit, callback<change_page> cb);
  result<change_page> read_changes(watch_request req, std::size_t limit);

  /// The cursor of the newest committed change (what a read would see now).
  result<std::string> head_cursor();

  /// Starts a watch: every change after req.from (none: after the newest
  /// committed now; from_start: from the oldest change the log keeps, the
  /// handle's cursor starting just before the oldest kept at the call, and
  /// rows the retention trims before the watch's first read passed over,
  /// never cursor_expired) that matches `req`, in commit order, passed to
  /// `on_changes` in batches (watch.hpp). A watch that falls behind re-reads
  /// the log later: nothing is dropped and no writer waits for it. Watches
  /// share the engine's delivery threads (as many as cores, up to 4, more
  /// only while callbacks block); the writer pays one atomic load per commit
  /// while no watch exists. Errors: invalid_argument (as read_changes; a null
  /// on_changes), cursor_expired (req.from older than the retention, with
  /// error::oldest_cursor), unavailable (closing; no thread), storage errors.
  result<std::unique_ptr<watch_handle>> watch(watch_request req, change_handler on_changes,
                                              end_handler on_end = {});

  // -- lifecycle -------------------------------------------------------------

  /// Completes once everything acknowledged before the call is on disk
  /// (a no-op wait in sync mode; an fsync in nosync mode).
  void flush(callback<void> cb);
  result<void> flush();

  /// Refuses new work (unavailable), ends every watch (reason closing),
  /// finishes what is in flight, syncs and releases the store. Idempotent.
  /// Blocking. REQUIRES: not called from a watch's callback.
  result<void> close();

  engine_stats stats() const;
  const options& opts() const;

private:
  friend struct detail::engine_factory;
  explicit engine(std::unique_ptr<detail::engine_core> core);
  std::unique_ptr<detail::engine_core> core_;
};

} // namespace agentstate
