// SPDX-License-Identifier: Apache-2.0
// store/tree_counts.hpp: the row counts the store records for its B-trees,
// against which whole-store readers check the rows they reach (a row LMDB
// can no longer reach has no checksum to fail; store/verify.hpp,
// check_row_counts).
#pragma once

#include <cstdint>
#include <vector>

#include "store/kv.hpp"

namespace agentstate::store {

/// One B-tree of a store: the tables it holds and the rows it records.
struct tree_count {
  std::vector<table> tables;
  std::uint64_t rows = 0;
};

/// One entry per B-tree of the snapshot `txn` (LMDB: mdb_stat's entry
/// count of each database; the tables sharing `rows` are one entry). Empty
/// for a snapshot of a store that records none (the memory store, a test's
/// wrapper). Throws kv_failure.
std::vector<tree_count> recorded_counts(kv_read& txn);

} // namespace agentstate::store
