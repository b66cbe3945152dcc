// SPDX-License-Identifier: Apache-2.0
// tests/support/replica_stores.hpp: a replicated cluster's stores, opened
// after its nodes stopped, compared (tests/cluster/*): each in-sync copy of
// each shard against its owner's, and a session as a store holds it for
// the history checker's `final` records. REQUIRES: doctest is included.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "agentstate/engine.hpp"
#include "model/shard.hpp"
#include "support/test_support.hpp"

namespace agentstate::test {

/// Shard `s` of a cluster of `shards` shards, as the engine's hash range.
inline hash_range shard_hash_range(std::uint32_t s, std::uint32_t shards) {
  auto r = model::shard_range(s, shards);
  return {r.lo, r.hi};
}

/// The session (app, user, id) as `store` holds it: {version, events}
/// (REQUIREs that it is there).
inline json final_session(engine& store, const std::string& app, const std::string& user,
                          const std::string& id) {
  auto text = store.get_session_json(get_req(sref(app, user, id)));
  INFO(describe(text));
  REQUIRE(text.ok());
  auto s = json::parse(*text);
  return {{"version", s["version"]}, {"events", s["events"]}};
}

/// CHECKs that every member of each shard's in-sync set in `status`
/// (`agentstate cluster status --json`) holds what the shard's owner holds:
/// the same rows (count and CRC) at the same position. Copies or owners
/// whose store is not in `stores` are passed over. The copies compared.
inline int check_replicas_equal(const json& status,
                                std::map<std::string, std::unique_ptr<engine>>& stores,
                                std::uint32_t shards) {
  int checked = 0;
  for (auto& e : status["map"]) {
    const std::uint32_t s = e["shard"];
    const std::string owner = e["owner"];
    if (!stores.count(owner))
      continue;
    const auto range = shard_hash_range(s, shards);
    auto want = stores[owner]->digest_range(range);
    auto at = stores[owner]->range_position(range);
    REQUIRE(want.ok());
    REQUIRE(at.ok());
    for (auto& f : e["isr"]) {
      const std::string id = f;
      if (id == owner || !stores.count(id))
        continue;
      INFO("shard ", s, " at ", id, " against its owner ", owner);
      auto got = stores[id]->digest_range(range);
      auto pos = stores[id]->range_position(range);
      REQUIRE(got.ok());
      REQUIRE(pos.ok());
      CHECK(got->rows == want->rows);
      CHECK(got->crc == want->crc);
      CHECK(pos->epoch == at->epoch);
      CHECK(pos->seq == at->seq);
      ++checked;
    }
  }
  return checked;
}

} // namespace agentstate::test
