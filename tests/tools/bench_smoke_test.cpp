// SPDX-License-Identifier: Apache-2.0
// `agentstate bench` as a smoke test: every workload at a tiny scale, each
// output line parsed as JSON and its fields checked for presence and sanity.
// Performance targets are not asserted (they are for --scale 1 on a quiet
// machine); correctness (workload g) and the absence of errors are.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "agentstate/json.hpp"
#include "support/test_support.hpp"

namespace {

struct run_result {
  int exit_code = -1;
  std::string out;
};

// Runs `cmd` through the shell; stdout is captured, stderr passes through.
run_result run(const std::string& cmd) {
  run_result r;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0)
    r.out.append(buf, n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty())
      out.push_back(line);
  return out;
}

// Runs a bench command that prints one workload: checks it exits 0 with one
// line of JSON and returns that line parsed.
agentstate::json run_one_line(const std::string& cmd) {
  auto r = run(cmd);
  INFO("stdout:\n", r.out);
  CHECK(r.exit_code == 0);
  auto lines = lines_of(r.out);
  REQUIRE(lines.size() == 1);
  auto parsed = agentstate::parse_json(lines[0], 64);
  REQUIRE(parsed.ok());
  return std::move(*parsed);
}

// Runs a bench command that prints `n` workloads: checks it exits 0 with `n`
// lines of JSON and returns them parsed.
std::vector<agentstate::json> run_lines(const std::string& cmd, std::size_t n) {
  auto r = run(cmd);
  INFO("stdout:\n", r.out);
  CHECK(r.exit_code == 0);
  auto lines = lines_of(r.out);
  REQUIRE(lines.size() == n);
  std::vector<agentstate::json> out;
  for (auto& line : lines) {
    auto parsed = agentstate::parse_json(line, 64);
    REQUIRE(parsed.ok());
    out.push_back(std::move(*parsed));
  }
  return out;
}

bool positive_number(const agentstate::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() && std::isfinite(j[key].get<double>())
    && j[key].get<double>() > 0;
}

bool finite_number(const agentstate::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() && std::isfinite(j[key].get<double>());
}

} // namespace

TEST_CASE("bench --help prints usage on stdout and exits 0") {
  auto r = run(std::string(AGENTSTATE_BIN) + " bench --help");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("usage: agentstate bench") != std::string::npos);
}

TEST_CASE("bench refuses bad usage with exit 2") {
  CHECK(run(std::string(AGENTSTATE_BIN) + " bench 2>/dev/null").exit_code == 2);
  CHECK(run(std::string(AGENTSTATE_BIN) + " bench --workload z 2>/dev/null").exit_code == 2);
  CHECK(run(std::string(AGENTSTATE_BIN) + " bench --workload a --scale 0 2>/dev/null").exit_code
        == 2);
  CHECK(
    run(std::string(AGENTSTATE_BIN) + " bench --workload a --durability fast 2>/dev/null").exit_code
    == 2);
  CHECK(run(std::string(AGENTSTATE_BIN) + " bench --workload a --spin-us -1 2>/dev/null").exit_code
        == 2);
}

TEST_CASE("bench --workload all at a tiny scale: one sane JSON line per workload") {
  agentstate::test::temp_dir dir;
  auto r = run(std::string(AGENTSTATE_BIN)
               + " bench --workload all --scale 0.001 --durability nosync --dir " + dir.str());
  INFO("stdout:\n", r.out);
  CHECK(r.exit_code == 0);
  auto lines = lines_of(r.out);
  std::set<std::string> seen;
  for (auto& line : lines) {
    INFO("line: ", line);
    auto parsed = agentstate::parse_json(line, 64);
    REQUIRE(parsed.ok());
    auto& j = *parsed;
    REQUIRE(j.is_object());
    REQUIRE(j.contains("workload"));
    REQUIRE(j["workload"].is_string());
    auto w = j["workload"].get<std::string>();
    CHECK(seen.insert(w).second);
    CHECK(j.value("durability", "") == "nosync");
    CHECK(j.value("errors", -1) == 0);
    // Common fields.
    CHECK(positive_number(j, "seconds"));
    CHECK(finite_number(j, "rss_growth_mb"));
    CHECK(positive_number(j, "peak_rss_mb"));
    CHECK(positive_number(j, "p50_us"));
    CHECK(positive_number(j, "p99_us"));
    CHECK(j["p99_us"].get<double>() >= j["p50_us"].get<double>());
    CHECK(j.contains("latency_of"));
    CHECK(j.contains("events_per_s"));
    CHECK(j.contains("target"));
    REQUIRE(j.contains("meets_target"));
    CHECK(j["meets_target"].is_boolean());
    // Engine settings and the batches it saw.
    REQUIRE(j.contains("settings"));
    auto& s = j["settings"];
    CHECK(s.value("scheduler", "") != "");
    CHECK(s.value("threads", 0) >= 1);
    CHECK(s.value("max_batch_count", 0) >= 1);
    CHECK(s.value("idle_timeout_ms", 0) >= 1);
    CHECK(s.value("spin_wait_us", -1) == 50); // options::spin_wait's default
    CHECK(s.value("workers_poll", false) == (s.value("scheduler", "") == "sharing"));
    REQUIRE(j.contains("stats"));
    auto& st = j["stats"];
    CHECK(st.value("commits", 0) >= 1);
    CHECK(st.value("batched_writes", 0) >= st.value("commits", 0));
    CHECK(st.value("max_batch", 0) >= 1);
    // Per workload.
    if (w == "f") {
      CHECK(j["events_per_s"].is_null());
      CHECK(positive_number(j, "sessions_per_s"));
      CHECK(positive_number(j, "first_p50_us"));
      CHECK(positive_number(j, "deep_p50_us"));
      CHECK(j.value("pages", 0) >= 2);
    } else if (w == "i") {
      CHECK(j["events_per_s"].is_null());
      for (auto f : {"rewind_small_p50_us", "rewind_large_p50_us", "rewind_plan_small_p50_us",
                     "as_of_large_p50_us", "as_of_large_recent10_p50_us"})
        CHECK(positive_number(j, f));
    } else {
      CHECK(positive_number(j, "events_per_s"));
    }
    if (w == "a") {
      // The bare engine round trip, measured after the appends.
      REQUIRE(j.contains("round_trip"));
      auto& rt = j["round_trip"];
      CHECK(rt.value("calls", 0) == j.value("events", -1));
      CHECK(positive_number(rt, "per_s"));
      CHECK(positive_number(rt, "p50_us"));
      REQUIRE(positive_number(j, "ratio_to_round_trip"));
      CHECK(j["ratio_to_round_trip"].get<double>()
            == doctest::Approx(j["events_per_s"].get<double>() / rt["per_s"].get<double>())
                 .epsilon(0.01));
    }
    if (w == "b") {
      REQUIRE(j.contains("blocking"));
      CHECK(positive_number(j["blocking"], "events_per_s"));
      CHECK(positive_number(j["blocking"], "p50_us"));
    }
    if (w == "c") {
      CHECK(positive_number(j, "full_p50_us"));
      CHECK(positive_number(j, "recent10_p50_us"));
      CHECK(positive_number(j, "full_p99_us"));
      CHECK(positive_number(j, "recent10_p99_us"));
    }
    if (w == "d")
      CHECK(finite_number(j, "rss_growth_mb_per_100k_events"));
    if (w == "e") {
      CHECK(positive_number(j, "reopen_s"));
      CHECK(j.value("settings", agentstate::json::object()).value("idle_timeout_ms", 0) == 1000);
    }
    if (w == "g")
      CHECK(j.value("correct", false) == true);
    if (w == "h") {
      CHECK(positive_number(j, "ack_p50_us"));
      CHECK(positive_number(j, "catch_up_changes_per_s"));
      CHECK(positive_number(j, "b_events_per_s_0_watches"));
      CHECK(positive_number(j, "b_ratio_100_watches"));
      // Every change of the watched sessions reached its watch.
      const int watched = std::min(100, j.value("b_sessions", 0));
      CHECK(j.value("b_changes_delivered_100_watches", 0) == watched * 20);
    }
  }
  CHECK(seen == std::set<std::string>{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"});
}

TEST_CASE("bench in memory mode runs a workload, with --spin-us passed to the engine") {
  for (auto& line :
       run_lines(std::string(AGENTSTATE_BIN)
                   + " bench --workload a,g --scale 0.001 --durability memory --spin-us 0",
                 2)) {
    CHECK(line.value("durability", "") == "memory");
    CHECK(line.value("settings", agentstate::json::object()).value("spin_wait_us", -1) == 0);
    CHECK(line.value("settings", agentstate::json::object()).value("workers_poll", true) == false);
    CHECK(positive_number(line, "events_per_s"));
    if (line.value("workload", "") == "a")
      CHECK(positive_number(line.value("round_trip", agentstate::json::object()), "per_s"));
  }
}

TEST_CASE("bench --via stdio and tcp run h: each change's notification timed beside its ack") {
  for (const char* via : {"stdio", "tcp"}) {
    CAPTURE(via);
    auto r = run(std::string(AGENTSTATE_BIN) + " bench --via " + via
                 + " --workload h --scale 0.01 --durability memory");
    INFO("stdout:\n", r.out);
    CHECK(r.exit_code == 0);
    auto lines = lines_of(r.out);
    REQUIRE(lines.size() == 1);
    auto parsed = agentstate::parse_json(lines[0], 64);
    REQUIRE(parsed.ok());
    auto& j = *parsed;
    CHECK(j.value("workload", "") == "h");
    CHECK(j.value("errors", -1) == 0);
    CHECK(j.value("events", 0) == 20);
    CHECK(positive_number(j, "p50_us"));
    CHECK(positive_number(j, "ack_p50_us"));
    CHECK(positive_number(j, "events_per_s"));
  }
}

TEST_CASE("bench --write-map runs b on a writable map, reports it, and needs nosync") {
  agentstate::test::temp_dir dir;
  auto j = run_one_line(std::string(AGENTSTATE_BIN)
                        + " bench --workload b --scale 0.01 "
                          "--durability nosync --write-map --dir "
                        + dir.str());
  CHECK(j.value("errors", -1) == 0);
  CHECK(j.value("settings", agentstate::json::object()).value("write_map", false) == true);
  CHECK(positive_number(j, "events_per_s"));
  // The sparse file is as large as the map; store_mb counts what is used.
  CHECK(j.value("store_mb", 1e9) < 64.0);

  auto refused =
    run(std::string(AGENTSTATE_BIN) + " bench --workload b --scale 0.01 --write-map 2>&1");
  CHECK(refused.exit_code == 2);
  CHECK(refused.out.find("--write-map needs --durability nosync") != std::string::npos);
}

TEST_CASE("bench a in sync mode measures the disk's commit limit and reports the ratio") {
  agentstate::test::temp_dir dir;
  auto j = run_one_line(std::string(AGENTSTATE_BIN) + " bench --workload a --scale 0.005 --dir "
                        + dir.str() + " 2>/dev/null");
  CHECK(j.value("durability", "") == "sync");
  REQUIRE(j.contains("machine"));
  CHECK(positive_number(j["machine"], "lmdb_1put_commits_per_s_before"));
  CHECK(positive_number(j["machine"], "lmdb_1put_commits_per_s_after"));
  CHECK(positive_number(j["machine"], "fdatasync_p50_us_before"));
  REQUIRE(positive_number(j, "ratio_to_lmdb_commit_limit"));
  auto ratio = j["ratio_to_lmdb_commit_limit"].get<double>();
  auto eps = j["events_per_s"].get<double>();
  auto limit = j["machine"]["lmdb_1put_commits_per_s_before"].get<double>();
  CHECK(ratio == doctest::Approx(eps / limit).epsilon(0.01));
  // The probes leave nothing behind.
  CHECK(std::filesystem::is_empty(dir.str()));
}

TEST_CASE("bench --peer runs the peer script after a and b and reports ratio_to_peer; a peer "
          "that fails is reported and changes nothing else") {
  agentstate::test::temp_dir dir;
  auto write = [&](const char* name, const std::string& text) {
    auto path = dir.path() / name;
    std::FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
    return path.string();
  };
  // Echoes its arguments; noise before the result line, as real peers log.
  auto good = write("good.mjs",
                    "const a = process.argv.slice(2);\n"
                    "const arg = (k) => a[a.indexOf(k) + 1];\n"
                    "console.log('loading');\n"
                    "console.error('a warning');\n"
                    "console.log(JSON.stringify({peer: 'fake', workload: "
                    "arg('--workload'), scale: Number(arg('--scale')), "
                    "events_per_s: 1000}));\n");
  auto bad = write("bad.mjs", "console.log('cannot load the framework');\nprocess.exit(3);\n");

  for (auto& line :
       run_lines(std::string(AGENTSTATE_BIN)
                   + " bench --workload a,b,c --scale 0.002 --durability memory --peer " + good,
                 3)) {
    auto w = line.value("workload", "");
    if (w == "c") { // the peers run a and b only
      CHECK(!line.contains("peer"));
      continue;
    }
    REQUIRE(line.contains("peer"));
    auto& peer = line["peer"];
    CHECK(peer.value("peer", "") == "fake");
    CHECK(peer.value("workload", "") == w);
    CHECK(peer.value("scale", 0.0) == doctest::Approx(0.002));
    REQUIRE(positive_number(line, "events_per_s"));
    CHECK(line.value("ratio_to_peer", 0.0)
          == doctest::Approx(line["events_per_s"].get<double>() / 1000));
  }

  auto failed =
    run_one_line(std::string(AGENTSTATE_BIN)
                 + " bench --workload a --scale 0.002 --durability memory --peer " + bad);
  CHECK(positive_number(failed, "events_per_s"));
  CHECK(!failed.contains("ratio_to_peer"));
  auto& peer = failed["peer"];
  CHECK(peer.value("error", "").find("exited with 3") != std::string::npos);
  CHECK(peer.value("output", "").find("cannot load the framework") != std::string::npos);

  CHECK(run(std::string(AGENTSTATE_BIN) + " bench --workload a --peer " + dir.str()
            + "/missing.mjs 2>/dev/null")
          .exit_code
        == 2);
  CHECK(run(std::string(AGENTSTATE_BIN) + " bench --workload a --via stdio --peer " + good
            + " 2>/dev/null")
          .exit_code
        == 2);
}
