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

/// Moves the row `key` of table `t` of the store in `dir` (closed) to
/// `new_key`, its value as it was, as if damage had changed the bytes of
/// its key: the row's seal no longer holds, but only a reader that reaches
/// it under its new key can tell.
inline void damage_key(const std::string& dir, store::table t, const std::string& key,
                       const std::string& new_key) {
  auto kv = store::open_lmdb_kv(dir, false, std::uint64_t{1} << 30);
  auto w = kv->begin_write();
  auto v = w->get(t, key);
  REQUIRE(v);
  const std::string value(*v);
  REQUIRE(w->del(t, key));
  REQUIRE_FALSE(w->get(t, new_key));
  w->put(t, new_key, value);
  w->commit();
}

} // namespace agentstate::test
