// SPDX-License-Identifier: Apache-2.0
// tests/support/lost_rows.hpp: a row gone from a closed LMDB store as if
// damage to the B-tree had hidden it, for the tests of reads that must
// notice what is missing. Test-only.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "store/kv.hpp"

namespace agentstate::test {

/// Deletes the row `key` of table `t` from the store in `dir` (closed):
/// no checksum fails, the row is simply not there.
inline void lose_row(const std::string& dir, store::table t, const std::string& key) {
  auto kv = store::open_lmdb_kv(dir, false, std::uint64_t{1} << 30);
  auto w = kv->begin_write();
  REQUIRE(w->del(t, key));
  w->commit();
}

} // namespace agentstate::test
