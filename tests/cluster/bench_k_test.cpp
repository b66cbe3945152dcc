// SPDX-License-Identifier: Apache-2.0
// `agentstate bench --workload k` at a tiny scale, on LMDB stores: it starts
// its own etcd and nodes, drives one node, the forwarded, routed and
// replicated clusters, kills a replicated node, wipes its store and has it
// rejoin (2 MiB of copies), stops them all, and prints its line without
// errors (the figures themselves are bench's, not a test's: no time bound).
#include <doctest/doctest.h>

#include "server/net_support.hpp"

#include <filesystem>

namespace {

/// How many live processes have `needle` in their command line (/proc).
int processes_naming(const std::string& needle) {
  int n = 0;
  for (auto& entry : std::filesystem::directory_iterator("/proc")) {
    auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    std::string cmdline = agentstate::test::net::read_text(entry.path().string() + "/cmdline");
    if (cmdline.find(needle) != std::string::npos)
      ++n;
  }
  return n;
}

} // namespace

TEST_CASE("bench workload k runs one node and 3-node clusters end to end, with a rejoin") {
  using namespace agentstate;
  auto r = test::net::shell(
    std::string(AGENTSTATE_BIN) + " bench --workload k --durability nosync --scale 0.01", false);
  INFO(r.second);
  REQUIRE(r.first == 0);
  auto line = json::parse(r.second, nullptr, false);
  REQUIRE(line.is_object());
  CHECK(line["workload"] == "k");
  CHECK(line["errors"] == 0);
  for (const char* phase : {"one_node", "forwarded", "smart"}) {
    INFO(phase);
    CHECK(line[phase]["events_per_s"].get<double>() > 0);
  }
  CHECK(line["forwarded"].contains("ratio_to_one_node"));
  CHECK(line.contains("forward_hop_p50_us"));
  // The wiped node came back into every in-sync set, every copy equal.
  auto& rejoin = line["rejoin"];
  REQUIRE(rejoin.is_object());
  CHECK(rejoin["shards"] == 256);
  REQUIRE(rejoin["restart_to_in_sync_s"].is_number());
  CHECK(rejoin["restart_to_in_sync_s"].get<double>() > 0);
  CHECK(rejoin["copy_bytes"].get<double>() > 0);
  CHECK(rejoin["store_bytes"].get<double>() > 0);
  CHECK(rejoin["verify_equal"].get<double>() > 0);
  CHECK(rejoin["verify_different"] == 0);
  // Every process it started is gone: no etcd of its own is left behind.
  CHECK(processes_naming("agentstate-bench-etcd") == 0);
}
