// SPDX-License-Identifier: Apache-2.0
// store/shard_copy.hpp: copying the rows of a range of the shard hash
// (model/shard.hpp: one shard's range, or any) from one store to another, in
// bounded chunks, so that a cluster can move a shard between nodes.
//
// What belongs to a range [lo, hi):
//   - every session whose h(app ‖ 0 ‖ user) is in it (found through the shard
//     index, store format 11), with every row keyed under its session key;
//   - the `user:` scope of every (app, user) whose hash is in it (sessions or
//     not);
//   - the `app:` scope and the kept app writes of every app whose h(app) is
//     in it.
//
// Tables (store/kv.hpp), and what a copy does with each:
//   copied as rows:   sessions (the record), session_state (rows and tally),
//                     events, origins, outbox (a session's appends whose
//                     app: part is out), user_state and app_state (rows and
//                     tallies), app_writes (the outcomes kept at an app's
//                     home);
//   rebuilt in the target from the records it writes: by_update, by_user,
//                     by_created, by_user_created, expiry, session_counts,
//                     shard_index;
//   not copied:       meta (each store's own), changes (each store numbers
//                     its own change log: a copy logs nothing, so the target's
//                     feeds and watches do not see it), doomed and fences
//                     (the source's deletes in progress: a session, user or
//                     app under one is gone for every reader, and is not
//                     copied; the target refuses a chunk that writes under a
//                     fence of its own, unavailable).
//
// A copy is a sequence of chunks. shard_reader reads them from the source,
// all in one read transaction (one snapshot), each from a resumable
// shard_position; shard_writer applies each to the target inside a write
// transaction. A chunk covers spans of the range in three phases - the
// sessions in shard index order, then the user scopes, then the app scopes
// (each in key order) - and applying it replaces whatever the target held in
// those spans with the chunk's rows, so the chunks of one copy, applied in
// order, leave the target's range exactly as the source's snapshot held it
// (nothing outside the range changes), however the copy was cut into chunks.
// A chunk has a compact serialised form with a CRC-32C (encode_chunk,
// decode_chunk), so chunks can be shipped between nodes as bytes.
//
// Every row keeps its sealed value (store/records.hpp): the key is the same
// in both stores, so the seal still holds, and the writer checks each one.
//
// Bounds: a chunk holds at most shard_limits::max_items sessions or scopes
// and stops adding them once past max_bytes, but holds at least one whole
// session or scope (a session's events are never split across chunks). The
// writer collects the keys of the target's rows in a chunk's spans before it
// deletes them. Enumerating the user scopes costs one search per user scope
// of each store (the user_state table is in name order, not hash order);
// apps are few.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agentstate/error.hpp"
#include "model/shard.hpp"
#include "store/kv.hpp"

namespace agentstate::store {

/// The phases of a copy, in order.
enum class shard_phase : std::uint8_t { sessions = 0, users = 1, apps = 2, done = 3 };

/// Where a copy stands: the phase, and the last key it covered in that
/// phase's order ("" = the phase's start). Sessions: a shard_index key;
/// users: a user scope key (app ‖ 0 ‖ user); apps: an app name.
struct shard_position {
  shard_phase phase = shard_phase::sessions;
  std::string after;
  bool operator==(const shard_position& o) const { return phase == o.phase && after == o.after; }
};

/// One row as stored: its table, its key, its sealed value.
struct shard_row {
  table t = table::sessions;
  std::string key, value;
};

/// A span of one phase: the keys after `after` up to `last` (inclusive), or
/// to the end of the phase with `to_end`; or, when `after` and `last` are
/// the same key (not to_end), exactly that key (an exact span: one session,
/// user scope or app, as a catch-up copies them). And the source's rows in
/// it. A sessions span's rows are, per session, its record and then its
/// other rows; a users span's its scopes' user_state rows; an apps span's
/// app_state and app_writes rows.
struct shard_span {
  shard_phase phase = shard_phase::sessions;
  std::string after, last;
  bool to_end = false;
  std::vector<shard_row> rows;
};

/// What one chunk carries: the range it belongs to, its spans (in phase
/// order, and within a phase in key order, none overlapping the one before),
/// and the position the next chunk starts from (phase done: this is the
/// last).
struct shard_chunk {
  model::hash_range range;
  std::vector<shard_span> spans;
  shard_position next;
};

struct shard_limits {
  /// Sessions (in the sessions phase) or scopes (users, apps) per chunk.
  std::size_t max_items = 256;
  /// A chunk stops taking sessions or scopes once its rows pass this many bytes.
  std::size_t max_bytes = std::size_t{4} << 20;
};

/// What a catch-up copies (shard_reader::next_touched): the sessions (by
/// shard index key) and the user scopes (app ‖ 0 ‖ user) that may have
/// changed since an earlier copy, each sorted and without repeats. A key the
/// source no longer holds is copied as its absence (the target drops it).
struct shard_touched {
  std::vector<std::string> sessions, users;
};

/// A range's rows in short: how many, and a CRC-32C of them in order (table,
/// key and value of each, with their lengths). Two stores whose ranges hold
/// the same rows have the same digest.
struct shard_digest {
  std::uint64_t sessions = 0, rows = 0, bytes = 0;
  std::uint32_t crc = 0;
  bool operator==(const shard_digest& o) const {
    return sessions == o.sessions && rows == o.rows && bytes == o.bytes && crc == o.crc;
  }
};

/// Reads a range's chunks from a store, in one read transaction of it.
class shard_reader {
public:
  /// REQUIRES: `kv` outlives the reader. Errors: storage errors.
  static result<std::unique_ptr<shard_reader>> open(kv_store& kv, model::hash_range range);
  /// Over an existing snapshot (a store of format 11), which must outlive the
  /// reader.
  shard_reader(kv_read& txn, model::hash_range range);
  ~shard_reader();
  shard_reader(const shard_reader&) = delete;
  shard_reader& operator=(const shard_reader&) = delete;

  /// The chunk that starts at `from` (a default position: the range's
  /// start). Errors: invalid_argument (`from` is done, or the store keeps no
  /// shard index: a format before 11 opened read-only); data_corrupt (a
  /// damaged row of what the chunk would carry, or a shard index entry whose
  /// session is missing: nothing of a damaged store is copied); storage
  /// errors.
  result<shard_chunk> next(const shard_position& from, const shard_limits& limits = {});

  /// A catch-up's chunk that starts at `from`: an exact span for each of
  /// `t`'s sessions and then each of its user scopes (those of the range),
  /// then the whole apps phase as next() reads it. Applied in order after
  /// an earlier copy of the range, the chunks leave the target's range as
  /// this snapshot holds it, provided that nothing outside `t` and the apps
  /// changed in the source since that copy. Errors: as next().
  result<shard_chunk> next_touched(const shard_touched& t, const shard_position& from,
                                   const shard_limits& limits = {});

  /// The digest of the whole range as this snapshot holds it (the rows a
  /// copy carries, in a copy's order). Errors: as next().
  result<shard_digest> digest();

private:
  shard_reader(std::unique_ptr<kv_read> own, model::hash_range range);
  struct budget;
  result<bool> fill_sessions(shard_span& span, budget& b);
  result<bool> fill_users(shard_span& span, budget& b);
  result<bool> fill_apps(shard_span& span, budget& b);
  /// Spans from `at` on, phase after phase, until the budget is full or
  /// the copy is done; `at` ends where the next chunk starts.
  result<void> fill_phases(shard_chunk& chunk, shard_position& at, budget& b);
  /// Why no chunk can be read from `from` (done, or no shard index), if so.
  std::optional<error> unreadable(const shard_position& from);
  result<void> take_session(shard_span& span, budget& b, std::string_view skey);
  result<void> take_user(shard_span& span, budget& b, std::string_view scope);

  std::unique_ptr<kv_read> own_;
  kv_read& txn_;
  model::hash_range range_;
};

/// Applies chunks to a store.
class shard_writer {
public:
  /// Inside `txn` (the caller commits; a live engine's writer can run it as
  /// a write of its own): deletes what the target holds in each of the
  /// chunk's spans (within its range) and writes the chunk's rows, with the
  /// target's list entries, expiry entries, session counts and shard index
  /// kept. Errors: invalid_argument (a row outside its span or range, of a
  /// table its phase does not carry, or a session's row without its record
  /// first), data_corrupt (a row whose seal fails, or a target session in a
  /// span whose record is damaged), unavailable (a row under a delete fence
  /// of the target); after an error `txn` holds part of the chunk: abort it
  /// (or its savepoint). Throws kv_failure on storage failure.
  static result<void> apply(kv_write& txn, const shard_chunk& chunk);
  /// apply in a write transaction of its own, committed only when it
  /// succeeds (an error leaves the store as it was). Errors: as apply,
  /// storage errors.
  static result<void> apply(kv_store& kv, const shard_chunk& chunk);

  /// What merge did: sessions and scopes (user, app) written, and those
  /// passed over because the target held them with the same rows.
  struct merged {
    std::uint64_t added = 0, present = 0, sessions = 0;
  };
  /// Adds a chunk's rows to a target that may hold other rows of its range
  /// (a store being adopted into a cluster): nothing is deleted; each
  /// session, user scope and app scope of the chunk that the target does not
  /// hold is written as apply writes it, and one it holds with exactly the
  /// chunk's rows is passed over (a merge run again). Errors:
  /// already_exists (the target holds one of them with other rows; named),
  /// and as apply; after an error `txn` holds part of the chunk.
  static result<merged> merge(kv_write& txn, const shard_chunk& chunk);
  /// merge in a write transaction of its own, committed only when it
  /// succeeds.
  static result<merged> merge(kv_store& kv, const shard_chunk& chunk);
};

/// The serialised chunk: "ASSC", a version byte, the range, the next
/// position and the spans with their rows (lengths as big-endian u32), then
/// a CRC-32C of all that (big-endian u32).
std::string encode_chunk(const shard_chunk& chunk);
/// The chunk of encode_chunk's bytes. Errors: data_corrupt (truncated, not a
/// chunk, or its checksum fails); invalid_argument (the checksum holds but
/// the contents do not parse: an unknown version, phase or table, a length
/// past the end, bytes left over). Never reads past `bytes`.
result<shard_chunk> decode_chunk(std::string_view bytes);

struct shard_copy_stats {
  /// Chunks applied, sessions and rows they carried, their serialised bytes.
  std::uint64_t chunks = 0, sessions = 0, rows = 0, bytes = 0;
};

/// Copies `range` of `from` into `to`: reads every chunk in one read
/// transaction of `from`, passes each through encode_chunk and decode_chunk
/// (the form a node ships), and applies each in its own write transaction of
/// `to`. Afterwards `to`'s range is `from`'s snapshot's, and nothing outside
/// it changed. An error stops the copy with the chunks before it applied
/// (copying again from the start finishes it). Errors: as shard_reader::next
/// and shard_writer::apply.
result<shard_copy_stats> copy_shard(kv_store& from, kv_store& to, model::hash_range range,
                                    const shard_limits& limits = {});

} // namespace agentstate::store
