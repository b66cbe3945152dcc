// SPDX-License-Identifier: Apache-2.0
// agentstate/options.hpp: how an engine is opened, and its limits.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "agentstate/error.hpp"
#include "agentstate/json.hpp"
#include "agentstate/types.hpp"

namespace agentstate {

/// How durable an acknowledged write is.
enum class durability {
  /// fsync per group commit: an acknowledged write survives an OS crash or
  /// power loss. The default.
  sync,
  /// No fsync: an acknowledged write survives a crash of this process. An OS
  /// crash or power loss may lose the last transactions and, as LMDB's
  /// MDB_NOSYNC documents, may corrupt the store unless the filesystem
  /// preserves write order. `flush()` forces what is acknowledged to disk.
  nosync,
  /// Nothing on disk; everything is gone when the engine closes. `dir` is
  /// ignored. Same semantics otherwise (one conformance suite covers both).
  memory,
};

/// Fixed limits that keep every store key under LMDB's 511-byte key limit.
/// They are not configurable: raising them could make stored keys unreadable.
inline constexpr std::size_t max_name_bytes = 100; ///< app, user, session ids
inline constexpr std::size_t max_event_id_bytes = 128;
inline constexpr std::size_t max_state_key_bytes = 200;

/// Tunable limits. Violations are refused with too_large / invalid_argument
/// before anything is stored.
struct limits {
  std::size_t max_event_bytes = 1 << 20; ///< an event as stored (JSON)
  std::size_t max_value_bytes = 1 << 20; ///< one state value (JSON)
  std::size_t max_state_bytes = 4 << 20; ///< a create's initial state
  /// Nesting of each value a client supplies (a state value, `content`, any
  /// other member's value); `{}`/`[]` count one level.
  std::size_t max_json_depth = 64;
  /// The largest answer one read builds: a list_sessions page ends early at
  /// this budget (at least one session per page; too_large only when one
  /// session alone exceeds it); get_session's selected events past it are
  /// too_large; inject_state through `serve` renders at most this much.
  /// Sizes are those of the JSON (or text) answered.
  std::size_t max_response_bytes = std::size_t{64} << 20;
};

/// A derived key (docs/semantics.md N1): the engine stores fn(inputs) under
/// "derived:"+name whenever a create or an append changes (sets, removes or
/// modifies) one of `inputs` in that session, in the same transaction, and
/// records it in the stored event's state_delta. `fn` gets an object holding
/// each present input (prefixed key -> value; missing inputs are absent).
/// Changes to a user:/app: input made through another session do not
/// recompute this session's key until this session changes an input.
/// REQUIRES of fn: pure, fast, non-blocking (it runs on the store writer
/// thread inside the write transaction; it must not call the engine). A
/// throwing fn fails the append with invalid_argument.
struct derived_key {
  std::string name; ///< stored as "derived:"+name
  std::vector<std::string> inputs; ///< session, user: or app: keys
  std::function<json(const json& inputs)> fn;
};

/// How much of the change log (the feed read_changes serves) the store
/// keeps: the newest `max_entries` committed changes, none older than
/// `max_age`; the newest change is always kept. A cursor older than what is
/// kept gets errc::cursor_expired. Trimmed by the writer as it commits (at
/// most two old entries per new one, so a lowered bound takes effect over
/// the following commits). Each kept change holds its event's stored text
/// and state changes, so under durability::memory the log takes at least as
/// much of the process's memory as the events it covers: a long in-memory
/// run that reads no feed can lower max_entries.
struct change_retention {
  std::uint64_t max_entries = 1'000'000;
  std::chrono::seconds max_age{7 * 24 * 3600};
};

/// The actor scheduler's policy.
enum class scheduler_policy {
  /// One central queue (the default): cheaper blocking calls from host
  /// threads and cheap spawns; idle workers poll per options::spin_wait.
  sharing,
  /// Work stealing (CAF's own policy, unchanged).
  stealing,
};

/// When engine::open may start a new, empty store (docs/storage.md, "Damage
/// and recovery").
enum class create_policy {
  /// The default: when `dir` is missing or holds none of a store's files.
  /// A directory that holds the store's lock files (agentstate.lock,
  /// lock.mdb) but no data.mdb, or an empty one, held a store whose data is
  /// gone: refused with data_corrupt naming the path, never replaced by an
  /// empty store. Unless it also holds agentstate.creating, the mark of a
  /// creation that was cut off (docs/storage.md): the store is made again.
  if_new,
  /// Also in such a directory (`serve --create`): a new empty store.
  always,
  /// Never: a directory without data.mdb is refused with not_found.
  never,
};

/// How far a replicated range's writes have reached in a store: the epoch
/// the last one was committed under and its sequence number in the range
/// (1, 2, ... across epochs; {0, 0}: none yet).
struct replica_position {
  std::uint64_t epoch = 0;
  std::uint64_t seq = 0;
};

/// A run of write sets committed, in commit order, in the range [lo, hi) of
/// the shard hash that an engine leads (engine::lead_range), for the range's
/// followers: `batch` (engine::apply_replica's input) carries them; they
/// follow position `prev` and end at `last`.
struct replica_shipment {
  std::uint64_t lo = 0, hi = 0;
  replica_position prev, last;
  std::string batch;
};

struct options {
  /// Store directory, created if missing (see `create`). Required unless
  /// durability is memory. One engine per directory: a second open, in this
  /// process or another, is refused with errc::unavailable.
  std::string dir;
  /// Whether open may start an empty store in `dir` (create_policy). Before
  /// LMDB maps an existing data.mdb, open checks it against its meta pages
  /// and refuses a truncated or damaged file with data_corrupt.
  create_policy create = create_policy::if_new;
  durability mode = durability::sync;
  /// The store may grow to this size; beyond it appends fail with
  /// storage_full (nothing already stored is affected). The file grows with
  /// the data; this is address space, not disk, until used. Set it below the
  /// disk's free space to get storage_full before the disk fills (`serve
  /// --max-store-mb`). A disk that fills first also gives storage_full (a
  /// failed commit with less than 16 MiB free on the store's filesystem);
  /// nothing of the failed write is stored, and the same write (the same
  /// event id) succeeds once space frees. An existing store larger than this
  /// opens at its own size.
  std::uint64_t max_store_bytes = std::uint64_t{64} << 30;
  /// durability::nosync only (refused otherwise): LMDB writes pages through
  /// a writable memory map (MDB_WRITEMAP) instead of write(2) at commit,
  /// which saves the kernel's per-page copy and takes ~20-40% more appends
  /// per second when many sessions append at once (docs/performance.md, b).
  /// Costs, which is why it is off by default:
  ///  * a full disk ends the process with SIGBUS (the page write that needs
  ///    a new disk block faults inside LMDB) instead of failing appends with
  ///    storage_full; nothing committed before is lost;
  ///  * the data file's apparent size is max_store_bytes from the first
  ///    open (a sparse file: disk blocks are used only as data is written;
  ///    copy it with tools that keep holes, or with `agentstate backup`);
  ///  * a stray write through a wild pointer in the host process can
  ///    corrupt the store, where a read-only map would fault;
  ///  * every page the writer writes is mapped into the process, and
  ///    max_resident_store_bytes does not keep up with it: bench e (1M
  ///    sessions) peaks at ~1.1 GB RSS with it, ~450 MB without.
  /// Write sets that need a savepoint (a failed write retried alone, atomic
  /// modifies, derived keys) commit one transaction each instead, since
  /// LMDB cannot nest transactions on a writable map.
  bool write_map = false;
  /// LMDB reads through a memory map, so every store page the process reads
  /// stays mapped and counts in its RSS (VmRSS/VmHWM), although it is OS
  /// page cache, shared and reclaimable. Every 250 ms (25 ms while pages map
  /// fast), and after every 64 transactions, the engine compares how much
  /// the process's resident file-backed memory has grown (since open or the
  /// last drop) with this bound and, when over, drops the store's pages from
  /// the process (madvise MADV_DONTNEED). The page cache keeps them: the next
  /// touch of each is a minor page fault, never I/O. The measure is
  /// process-wide: a host that maps a large file of its own causes at most
  /// one needless drop per bound of that file's growth, and none once it
  /// stops growing (growth is counted from the last drop).
  /// 0 = never. Costs one thread per LMDB store.
  std::uint64_t max_resident_store_bytes = std::uint64_t{128} << 20;
  /// Session, user and app actors idle this long (checked once per period,
  /// so between one and two periods) are passivated, dropping a session's
  /// live temp: state, and rehydrated from the store on next use.
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(60)};
  /// At most about this many session actors are live (and as many user and
  /// app scope actors): beyond it, the least recently used are passivated at
  /// once, as if idle (approximately: per shard of 64), unless busy with an
  /// append, a read or an invocation's lease. 0 = sized from memory: one per
  /// 4 KiB of an eighth of physical memory, at least 10,000 (786,432 with
  /// 24 GiB). After passivations the engine returns the freed heap to the
  /// OS (malloc_trim, at most once a second).
  std::size_t max_live_sessions = 0;
  /// Group commit caps: the writer drains at most this many write sets, or
  /// this many bytes, into one transaction.
  std::size_t max_batch_count = 1024;
  std::size_t max_batch_bytes = 32 << 20;
  /// How long a waiting thread polls before it sleeps: the store writer
  /// waiting for work, one thread per engine blocked in a blocking call,
  /// and (scheduler_policy::sharing) one idle worker. Others sleep at once.
  /// Under scheduler_policy::sharing the blocked caller also runs queued
  /// actor jobs while it polls (its own call's, usually), which spares an
  /// awaited call the hand-off to a worker and back.
  /// Under durability::sync, while a commit runs, the caller and the worker
  /// poll on up to max(spin_wait, 1 ms). Costs up to this much CPU per wait;
  /// buys faster awaited calls (docs/performance.md, "Polling"). 0 = never
  /// poll. At most 10 ms.
  std::chrono::microseconds spin_wait{50};
  /// Worker threads; 0 = the number of cores.
  std::size_t threads = 0;
  /// How workers share actors (docs/performance.md, "Scheduler").
  scheduler_policy scheduler = scheduler_policy::sharing;
  agentstate::limits limits;
  agentstate::change_retention change_retention;
  /// T1: how long a session created without create_request::ttl_s lives
  /// after its creation; 0 = it does not expire.
  std::chrono::milliseconds default_session_ttl{0};
  /// T2: whether appends refresh the expiry of a session created without
  /// create_request::refresh_ttl.
  bool refresh_ttl_on_append = false;
  /// Whether creates and appends may write `app:` keys (state, state_delta,
  /// state_remove, modify). false: one that does is refused with
  /// invalid_argument, storing nothing. `agentstate serve --cluster` sets it
  /// false until the cluster applies `app:` writes at the app's home shard
  /// (docs/cluster.md).
  bool app_scope_writes = true;
  /// A cluster node's app: scope (docs/cluster.md). When `here` is set and
  /// answers false for an app (another node owns the app's home shard), an
  /// append that writes app: keys of that app is committed in two steps: an
  /// outbox row (store/outbox.hpp), then, once `send` has had its app: part
  /// applied at the home (engine::apply_app_write there) and answered the
  /// outcome, the event with the resolved values, acknowledged then. `send`
  /// may answer on any thread; a retryable failure (unavailable) is sent
  /// again after `retry` while the session's later commands wait. Only
  /// modifies built from the protocol's form (state_modify::spec) can be
  /// sent. Both unset: every app is here.
  struct app_home_hooks {
    std::function<bool(const std::string& app)> here;
    std::function<void(app_write_request, callback<app_write_result>)> send;
    std::chrono::milliseconds retry{500};
    /// An append (or create) whose home has answered only unavailable for
    /// this long since it started is answered unavailable (in doubt: it is
    /// still sent every `retry` and finished when the home answers; retry
    /// it with its event id), and until then every command of its session
    /// is answered unavailable unread.
    std::chrono::milliseconds answer_after{5000};
  } app_home;
  /// T3: how often the reaper deletes sessions that have expired (they are
  /// invisible from the moment they expire; this bounds how long their rows
  /// stay). At least 1 ms.
  std::chrono::milliseconds reap_interval{std::chrono::seconds(1)};
  /// The wall clock, in seconds since the Unix epoch; empty = the system
  /// clock. Every timed rule of the engine reads it, and nothing else does:
  /// an event's timestamp when the caller gives none, a session's created
  /// and last update times, its expiry at create and at each refreshing
  /// append (T1, T2), whether it has expired for reads, listings, appends
  /// and deletes, which sessions the reaper finds due (T3), the commit time
  /// of each change-log row and the change_retention::max_age trim measured
  /// against it, and the store's creation time. The timers stay on the
  /// actor system's own clock: idle_timeout and reap_interval say when the
  /// passivation check and the reaper run, this clock what they find.
  /// Tools that open a store without an engine (export, prune, salvage) read
  /// the system clock. Called from any of the engine's threads at once:
  /// REQUIRES thread-safe, non-blocking, and never throwing.
  std::function<double()> wall_clock;
  /// A cluster node's replication of the ranges this engine leads
  /// (engine::lead_range): called with each run of write sets committed in
  /// one of them, in commit order per range, on the engine's writer thread
  /// (it must not block); it calls `done` exactly once, from any thread,
  /// when the range's followers hold the run durably (ok), or with the
  /// error to answer when they cannot. The answers of those writes wait for
  /// `done`: ok answers them as committed; an error answers each with it
  /// (the write stays committed here: in doubt) and ends the lead of the
  /// range, which is fenced (engine::fence_range) until it is led again.
  /// `done` may be called until the engine is destroyed, never after (stop
  /// the replicator before closing the engine). Unset: lead_range is
  /// refused.
  std::function<void(replica_shipment, std::function<void(result<void>)> done)> replicator;
  /// Derived keys (see derived_key); checked by engine::open.
  std::vector<derived_key> derived;
};

} // namespace agentstate
