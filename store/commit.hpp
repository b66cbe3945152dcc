// SPDX-License-Identifier: Apache-2.0
// store/commit.hpp: a group commit. Many write sets go into one write
// transaction, and each fails alone: a precondition failure writes nothing;
// a storage failure part-way through one write set is taken back by a
// savepoint (or, on a store that cannot nest, by a transaction per write
// set). Only the store writer calls it.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "agentstate/error.hpp"
#include "store/change_log.hpp"
#include "store/kv.hpp"
#include "store/write_set.hpp"

namespace agentstate::store {

/// One write set of a group commit and, after commit_batch, its outcome.
struct batch_entry {
  write_set* ws = nullptr; ///< the rows; `resolve` may add to them
  /// Run `resolve` for this entry inside the transaction before its rows are
  /// applied (its rows depend on committed values).
  bool late = false;
  errc code = errc::ok; ///< ok when committed
  std::string message; ///< why not, otherwise
  std::uint64_t txn_id = 0; ///< the transaction that committed it (when ok)
  std::uint64_t seq = 0; ///< its commit sequence (when ok and logged; else 0)
};

/// Finishes entry `i` inside `txn` (adds rows, encodes its event). Called at
/// most once per entry: an entry it failed is not retried.
using resolve_fn = std::function<result<void>(kv_read& txn, std::size_t i)>;

/// Called once for each transaction of a commit_batch that is about to
/// commit, after its write sets were applied, with the indexes (ascending)
/// of the entries it holds that succeeded. It may write rows of its own to
/// `txn` (throwing kv_failure as the writers do: the transaction then fails
/// whole). Every earlier entry's outcome is final when it runs; it may be
/// called again for entries of a transaction that did not commit.
using seal_fn = std::function<void(kv_write& txn, const std::vector<std::size_t>& ok)>;

/// Commits `entries` (fills each one's outcome). With a `log`, each entry
/// that changes the store takes the next commit sequence and writes its
/// change row in its own (nested) transaction, stamped with `now` (epoch
/// seconds: the engine's wall clock, options::wall_clock), and each
/// transaction trims the log to its retention (max_age measured back from
/// `now`) before it commits; `log` is left as the committed store has it. Entries without `late` go
/// straight into one transaction; if one of them fails part-way, or any is
/// late, the batch runs with a savepoint per entry (on a store that does not
/// nest: a transaction per entry). A failed commit fails every entry of its
/// transaction. Never throws. Cost: LMDB copies each page a transaction
/// dirties once per (nested) transaction, so the straight path saves a page
/// copy for every page two write sets share.
/// With a `seal`, calls it before each transaction commits.
void commit_batch(kv_store& kv, std::vector<batch_entry>& entries, const resolve_fn& resolve,
                  change_log* log, double now, const seal_fn& seal = {});

/// One transaction that puts one row and commits: what a bare commit costs
/// on the store's disk (the bench's reference). Storage errors as results.
result<void> commit_one(kv_store& kv, table t, std::string_view key, std::string_view value);

/// Forces committed data to disk (kv_store::sync as a result).
result<void> sync(kv_store& kv);

} // namespace agentstate::store
