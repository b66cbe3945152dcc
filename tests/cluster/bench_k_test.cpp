// SPDX-License-Identifier: Apache-2.0
// `agentstate bench --workload k` at a tiny scale: it starts its own etcd and
// nodes, drives one node, the forwarded cluster and the routed cluster, stops
// them all, and prints its line without errors (the figures themselves are
// bench's, not a test's).
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

TEST_CASE("bench workload k runs one node and a 3-node cluster end to end") {
  using namespace agentstate;
  auto r = test::net::shell(
    std::string(AGENTSTATE_BIN) + " bench --workload k --durability memory --scale 0.01", false);
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
  // Every process it started is gone: no etcd of its own is left behind.
  CHECK(processes_naming("agentstate-bench-etcd") == 0);
}
