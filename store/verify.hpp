// SPDX-License-Identifier: Apache-2.0
// store/verify.hpp: a full consistency check of a store's layout
// (docs/storage.md, "Tables and rows"). Used by `agentstate verify` and by the crash tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "store/kv.hpp"

namespace agentstate::store {

struct verify_report {
  std::uint64_t sessions = 0;
  std::uint64_t events = 0;
  std::uint64_t session_rows = 0;
  std::uint64_t user_rows = 0;
  std::uint64_t app_rows = 0;
  std::uint64_t changes = 0; ///< rows of the change log (format 6)
  /// Deleted sessions, users and apps whose rows are still being purged
  /// (format 7: purge marks and delete fences).
  std::uint64_t purging = 0;
  std::uint64_t faults = 0; ///< every fault found
  std::vector<std::string> messages; ///< the first 100 faults, described
  bool ok() const { return faults == 0; }
};

/// Checks, in the snapshot `txn`: the format version (1 to 11); every row's
/// checksum (format 4: every value of every table but meta, each bad row
/// reported by its row_name, as data_corrupt names it); every session
/// record decodes; its events are versions 1..version without gaps, each row
/// decodes to an event whose timestamp matches the row's, and no two events
/// of a session share an id (A6); both list
/// indexes hold exactly one entry per session at its last_update_time; every
/// state row's key is well-formed and its value decodes; (format 8) every
/// state scope's rows match its tally (store::state_tally), but those of a
/// scope being purged; (format 9) every app's and user's session count
/// matches its session records, and no count row names a scope without
/// one; (format 11) every session has its intact shard index entry and every
/// entry names a session under its hash; no table holds rows
/// of a missing session (the rows of a deleted session still being purged
/// are counted in `purging`, not as faults; so are the sessions of a user or
/// app being deleted, whose events are not checked); origins are JSON
/// objects of existing sessions; each session that expires has its expiry
/// entry and every entry its session; the change log's rows decode and
/// their sequence has no gap; every replica position row (table meta,
/// store/replica.hpp) is intact. Cost: one pass over every table.
/// `progress(sessions_done)` is called every 10,000 sessions. Never throws:
/// a storage failure is reported as a fault.
verify_report verify_store(kv_read& txn, const std::function<void(std::uint64_t)>& progress = {});

/// What every whole-store reader (verify, export, dump, backup) checks, so
/// that none answers 0 with part of the data: walks every table of the
/// snapshot in full (keys in order, every leaf page's layout: kv_read's
/// checks) and compares the rows reached in each B-tree with the count the
/// store records for it (recorded_counts, store/tree_counts.hpp), naming the tables and
/// the difference; with `seals`, also checks every row's seal (every table
/// but meta). Cost: one pass over every row (with `seals`, a CRC each).
/// Never throws: a storage failure is reported as a fault.
verify_report check_row_counts(kv_read& txn, bool seals);

} // namespace agentstate::store
