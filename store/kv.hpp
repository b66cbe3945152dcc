// SPDX-License-Identifier: Apache-2.0
// store/kv.hpp: the storage seam. An ordered key-value store with named
// tables, snapshot read transactions and one write transaction at a time with
// nested (savepoint) transactions. LMDB and the in-memory store implement it;
// tests wrap it to inject faults. Everything above it in store/ (keys, records,
// apply, reads, listing, commit) is shared, so both stores have identical
// semantics.
//
// Errors: implementations throw kv_failure (never anything else); the store/
// functions above the seam catch it at their boundary and return an
// agentstate::error.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "agentstate/error.hpp"

namespace agentstate::store {

enum class table : std::uint8_t {
  meta,
  sessions,
  session_state,
  user_state,
  app_state,
  events,
  by_update,
  by_user,
  by_created, ///< format 5: a session in its app's creation order
  by_user_created, ///< format 5: a session in its user's creation order
  changes, ///< format 6: the change log, by commit sequence (store/change_log.hpp)
  origins, ///< format 7: a session's own state as created (as-of reads, rewinds)
  doomed, ///< format 7: deleted sessions whose rows are still being purged (store/purge.hpp)
  expiry, ///< format 7: sessions that expire, in expiry order (store/expiry.hpp)
  fences, ///< format 7: users and apps being deleted (store/scope_delete.hpp)
  session_counts, ///< format 9: each app's and user's number of sessions (store::count_sessions)
  app_writes, ///< format 10: a cluster's app: writes applied at their home (store/app_writes.hpp)
  outbox, ///< format 10: appends waiting for their app: part to be applied at its home (store/outbox.hpp)
  shard_index, ///< format 11: every session by the hash that places it in a cluster (store::index_session)
};
inline constexpr std::size_t table_count = 19;

/// The table's name in the store (LMDB sub-database name).
const char* table_name(table t) noexcept;

/// A failed storage call. `code` is storage_full, io_error, unavailable
/// (reader slots exhausted) or internal.
struct kv_failure {
  errc code;
  std::string message;
};

/// Visits one entry; returns false to stop.
using kv_visitor = std::function<bool(std::string_view key, std::string_view value)>;

/// A read transaction: a consistent snapshot of every table. Views returned
/// by get/scan are valid until the transaction ends or (for a write
/// transaction) until its next mutation. Used by one thread at a time.
class kv_read {
public:
  virtual ~kv_read() = default;

  virtual std::optional<std::string_view> get(table t, std::string_view key) = 0;

  /// Visits entries whose key starts with `prefix` and is >= `from` (empty:
  /// from the first), in ascending key order.
  virtual void scan(table t, std::string_view prefix, std::string_view from,
                    const kv_visitor& fn) = 0;

  /// Visits entries whose key starts with `prefix` and is <= `from` (empty:
  /// from the last), in descending key order.
  virtual void scan_back(table t, std::string_view prefix, std::string_view from,
                         const kv_visitor& fn) = 0;

  /// For a read transaction: the id of the last commit it sees. For a write
  /// transaction: the id its commit will have. Ids grow with every commit.
  virtual std::uint64_t txn_id() const = 0;

  /// Whether this snapshot's values are laid out as store formats 1-3 wrote
  /// them, without checksums (store/records.hpp): true only in a store
  /// opened read-only (open_lmdb_kv_readonly) whose meta["format"] is 1-3 as
  /// the snapshot begins. A store opened for writing is upgraded before use.
  virtual bool legacy_values() const { return false; }

  /// Whether this snapshot's state scopes carry tallies (store format 8,
  /// store::state_tally), which readers then check their rows against:
  /// false only in a store opened read-only whose meta["format"] is 1-7 as
  /// the snapshot begins. A store opened for writing is upgraded before use.
  virtual bool state_tallies() const { return true; }

  /// Whether this snapshot keeps each app's and user's session count
  /// (store format 9, table session_counts), which complete listings then
  /// check what they walked against: false only in a store opened
  /// read-only whose meta["format"] is 1-8 as the snapshot begins.
  virtual bool session_counts() const { return true; }

  /// Whether this snapshot keeps the shard index (store format 11, table
  /// shard_index), which `verify` then checks against the sessions: false
  /// only in a store opened read-only whose meta["format"] is 1-10 as the
  /// snapshot begins.
  virtual bool shard_index() const { return true; }

  /// Whether a reader must check the checksums of this snapshot's sealed
  /// values: false only for the in-memory store, whose values never leave
  /// the memory of the process that sealed them (no disk, file or copy can
  /// change them), so its readers check tags and sizes only.
  virtual bool checksums_needed() const { return true; }

  /// Whether table `fences` may hold a row in this snapshot: false only when
  /// it held none when the store was opened and no write transaction has
  /// put one since (readers then skip the fence lookups of every session
  /// read). Conservative: true when unknown.
  virtual bool may_hold_fences() const { return true; }
};

/// The write transaction. Only one exists at a time per store (begin_write
/// blocks until the previous one ends). Ends with commit() or destruction
/// (abort).
class kv_write : public kv_read {
public:
  virtual void put(table t, std::string_view key, std::string_view value) = 0;
  /// Returns whether the key existed.
  virtual bool del(table t, std::string_view key) = 0;
  /// Deletes the table called `name`, with its rows, if the store holds
  /// one. For tables an older format kept (see store::format_version), so
  /// `name` is none of `table`'s; the memory store never holds such a table.
  virtual void drop_table(std::string_view name) = 0;
  /// Moves every row of the LMDB database of its own that formats 1 and 2
  /// kept for `t` (named table_name(t)) into `t`, then deletes that database.
  /// No-op when the store holds none, or `t` still has a database of its own
  /// (meta, events); the memory store never holds one. Costs a put per row.
  virtual void absorb_table(table t) = 0;

  /// Savepoints: a nested transaction whose effects vanish on abort_nested.
  /// REQUIRES: commit/abort_nested match a begin_nested.
  virtual void begin_nested() = 0;
  virtual void commit_nested() = 0;
  virtual void abort_nested() noexcept = 0;

  /// Makes every effect durable per the store's mode. Throws kv_failure; the
  /// transaction is over either way.
  virtual void commit() = 0;
};

struct kv_info {
  std::uint64_t map_size = 0; ///< bytes the store may grow to
  std::uint64_t used_bytes = 0; ///< bytes in use (pages * page size)
  std::uint64_t last_txn_id = 0;
  unsigned max_readers = 0;
  unsigned readers_used = 0;
  /// Rows per table. LMDB counts a table that shares the `rows` database
  /// (open_lmdb_kv) by walking its rows: O(rows).
  std::uint64_t entries[table_count] = {};
};

class kv_store {
public:
  virtual ~kv_store() = default;
  virtual std::unique_ptr<kv_read> begin_read() = 0;
  virtual std::unique_ptr<kv_write> begin_write() = 0;
  /// Forces committed data to disk (nosync mode's flush). Throws kv_failure.
  virtual void sync() = 0;
  virtual kv_info info() = 0;
  /// Writes a consistent copy of the store, as of one snapshot, into the
  /// existing empty directory `dest`, while writers go on. `compact` omits
  /// free pages. Throws kv_failure (internal for the memory store).
  virtual void copy_to(const std::string& dest, bool compact) = 0;
  /// The same copy written as one data.mdb image to the open file
  /// descriptor `fd` (a pipe, a file, standard output), from its current
  /// position; `fd` stays open and owned by the caller. Throws kv_failure
  /// (io_error when writing to `fd` fails; internal for stores that have no
  /// file image, as this default does).
  virtual void copy_to_fd(int /*fd*/, bool /*compact*/) {
    throw kv_failure{errc::internal, "this store has no file image to copy"};
  }
  /// How many times the store dropped its mapped pages from the process to
  /// keep them under the resident bound (open_lmdb_kv); 0 for other stores.
  virtual std::uint64_t resident_trims() const { return 0; }
  /// How many checks of the resident bound the store has made (each reads
  /// the process's resident bytes and trims when they are over the bound);
  /// 0 for other stores. Counted as a check ends, after its trim is in
  /// resident_trims(): once this count is two above a value read after a
  /// change to the mapped pages, a check that began after the change has
  /// ended.
  virtual std::uint64_t resident_checks() const { return 0; }
  /// Whether write transactions support begin_nested (false for an LMDB
  /// store opened with a writable map, where begin_nested throws).
  virtual bool nests() const { return true; }
};

/// The in-memory store (durability::memory).
std::unique_ptr<kv_store> make_memory_kv();

/// Bounds the store's pages mapped into the process (they count in its RSS):
/// every `period` (a tenth of it after a check that saw a quarter of the
/// bound mapped since the one before), and after every 64 transactions
/// begun (a burst of reads maps pages fast), when the process's resident
/// file-backed memory has grown by more than `max_bytes` since open or the
/// last drop (from the lowest value seen, re-anchored after each drop), the
/// map's pages are dropped from the process (madvise MADV_DONTNEED). They
/// stay in the OS page cache; the next touch of each is a minor fault, never
/// I/O, and readers in flight are unaffected (a shared read-only file
/// mapping refaults the same bytes). max_bytes 0 = never.
struct resident_bound {
  std::uint64_t max_bytes = 0;
  std::chrono::milliseconds period{250};
};

/// Opens an LMDB environment in `dir` (which must exist) as docs/storage.md describes:
/// MDB_NOTLS, every database opened once here, stale readers cleared.
/// Layout (store format 3): `meta` and `events` are LMDB databases of their
/// own; the six small tables share one, `rows`, where a row's key is the
/// table's number (its `table` value, one byte) followed by its key, so an
/// append's record, state and index rows dirty one B-tree instead of six.
/// A store of formats 1-2 (a database per table) opens with empty small
/// tables until absorb_table moves their rows (store::init_meta does).
/// `sync` = fsync per commit. With a resident bound, one thread checks it
/// (woken every period; stopped by the store's destructor). `write_map`
/// (REQUIRES: !sync) opens with MDB_WRITEMAP (options::write_map has the
/// costs); such a store does not nest transactions. Before the map is made,
/// DIR/data.mdb is checked against its meta pages (store/file_check.hpp):
/// data_corrupt when they disagree (a missing or empty file is created).
/// A commit that fails on a full disk is storage_full (lmdb_handle.hpp,
/// fail_write). Throws kv_failure.
std::unique_ptr<kv_store> open_lmdb_kv(const std::string& dir, bool sync, std::uint64_t map_size,
                                       resident_bound bound = {}, bool write_map = false);

/// Opens an existing store for reading only (MDB_RDONLY): safe beside an
/// engine in another process; begin_write throws. Reads either layout: a
/// store without `rows` (formats 1-2) is read table by table. Errors:
/// not_found when `dir` holds no store, data_corrupt when data.mdb is empty
/// or disagrees with its meta pages, otherwise as open_lmdb_kv.
/// `allow_damage` (agentstate salvage): a data file shorter than its meta
/// pages claim is opened anyway; a read of a page past its end is
/// data_corrupt (store/map_guard.hpp).
std::unique_ptr<kv_store> open_lmdb_kv_readonly(const std::string& dir, bool allow_damage = false);

} // namespace agentstate::store
