// SPDX-License-Identifier: Apache-2.0
// tests/support/store_probe.hpp: looks into an open engine's store from a
// test (row counts, purges left, verify), each in a fresh snapshot.
#pragma once

#include <cstddef>
#include <string>

#include "actors/engine_factory.hpp"
#include "store/keys.hpp"
#include "store/purge.hpp"
#include "store/verify.hpp"
#include "support/test_support.hpp"

namespace agentstate::test {

/// Rows of table `t` whose key starts with `prefix` ("" = every row).
inline std::size_t rows_under(engine& e, store::table t, const std::string& prefix = {}) {
  auto txn = detail::engine_factory::store_of(e).begin_read();
  std::size_t n = 0;
  txn->scan(t, prefix, {}, [&](std::string_view, std::string_view) {
    ++n;
    return true;
  });
  return n;
}

/// The prefix of every row of session `ref` in the session-keyed tables.
inline std::string rows_of(const session_ref& ref) {
  return store::session_key(ref.app_name, ref.user_id, ref.session_id) + '\0';
}

/// Whether a deleted session, user or app still has rows to purge.
inline bool purging(engine& e) {
  auto txn = detail::engine_factory::store_of(e).begin_read();
  return store::any_purge(*txn);
}

inline store::verify_report verify_engine(engine& e) {
  auto txn = detail::engine_factory::store_of(e).begin_read();
  return store::verify_store(*txn);
}

/// CHECKs that verify finds no fault, showing the first one.
inline void check_verify(engine& e) {
  auto report = verify_engine(e);
  INFO((report.messages.empty() ? std::string() : report.messages.front()));
  CHECK(report.ok());
}

} // namespace agentstate::test
