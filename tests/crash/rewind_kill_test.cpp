// SPDX-License-Identifier: Apache-2.0
// kill -9 during rewinds (H2): a child process (this binary, run for its
// hidden child case) appends events and rewinds one session on an LMDB
// store, recording each acknowledged write; the parent kills it at a random
// moment, 20 times, and after each kill reopens the store and checks that
// every acknowledged write is there, versions are contiguous, each rewind in
// the log is whole (the state after it is the state at its point) and the
// stored state is exactly the log replayed over the state from create (so no
// rewind is there in part), and `verify` finds nothing.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "store/kv.hpp"
#include "store/verify.hpp"
#include "support/spawn_self.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

namespace {

const session_ref the_session{"app", "u", "s"};

options store_options(const std::string& dir) {
  options o;
  o.dir = dir;
  o.mode = durability::nosync; // a process crash loses nothing acknowledged
  return o;
}

// The session's own state after replaying `evs[0..n)` over `state`.
json replay(json state, const std::vector<event>& evs, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    test::apply_event(state, evs[i]);
  return state;
}

const json created_state{{"c", 0}, {"k0", "created"}};

std::size_t lines_in(const std::string& path) {
  std::ifstream in(path);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);)
    ++n;
  return n;
}

// Writes each round's child acknowledges before the kill's seeded moment
// starts: the rounds' work does not depend on how fast the machine is.
constexpr std::size_t acks_per_round = 8;

} // namespace

TEST_CASE("rewind kill: the child appends and rewinds until it is killed" * doctest::skip()) {
  const char* dir = std::getenv("AGENTSTATE_REWIND_CHILD_DIR");
  const char* acks = std::getenv("AGENTSTATE_REWIND_CHILD_ACKS");
  REQUIRE(dir);
  REQUIRE(acks);
  int fd = ::open(acks, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  auto e = MUST(engine::open(store_options(dir)));
  auto c = e->create_session(test::create_req(the_session, created_state));
  REQUIRE((c.ok() || c.err().code == errc::already_exists));
  std::mt19937 rng(static_cast<unsigned>(::getpid()));
  const std::string run = std::to_string(::getpid());
  for (std::uint64_t i = 0;; ++i) {
    std::string id = "p" + run + "-" + std::to_string(i);
    result<append_result> r = error{errc::internal, ""};
    if (i % 4 == 3) {
      auto v = MUST(e->get_session(test::get_req(the_session, 0)))->version;
      rewind_request q;
      q.ref = the_session;
      q.before_version = 1 + rng() % v;
      q.event_id = id;
      r = e->rewind_session(q);
    } else {
      json delta{{"k" + std::to_string(rng() % 6), i}, {"c", i}};
      auto ev =
        test::make_event(delta, id, std::nullopt, "inv-" + run + "-" + std::to_string(i / 4));
      if (rng() % 5 == 0)
        ev.actions.state_remove.push_back("k" + std::to_string(6 + rng() % 2));
      r = e->append_event(test::append_req(the_session, std::move(ev)));
    }
    REQUIRE(r.ok());
    std::string line = id + "\n";
    REQUIRE(::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()));
  }
}

TEST_CASE("rewind kill: 20 kills during rewinds leave each rewind whole or absent") {
  test::temp_dir dir;
  auto store = (dir.path() / "store").string();
  auto acks = (dir.path() / "acks.txt").string();
  std::filesystem::create_directories(store);
  std::mt19937 rng(42);
  std::set<std::string> acknowledged;
  std::uint64_t rewinds_seen = 0;
  for (int round = 0; round < 20; ++round) {
    const auto acked = lines_in(acks);
    pid_t pid = test::spawn_self(
      "rewind kill: the child appends*",
      {"AGENTSTATE_REWIND_CHILD_DIR=" + store, "AGENTSTATE_REWIND_CHILD_ACKS=" + acks});
    // input: the kill -9 comes after the round's acks_per_round writes and a
    // seeded number (0-39) more, during the write that follows: a moment set
    // by the child's progress, read from its acknowledgement file, not by
    // time (every fourth write is a rewind).
    const auto more = acked + acks_per_round + rng() % 40;
    const bool acknowledged_all =
      test::eventually([&] { return lines_in(acks) >= more; }, std::chrono::seconds(60),
                       std::chrono::microseconds(200));
    if (!acknowledged_all)
      ::kill(pid, SIGKILL); // the REQUIRE fails the test
    REQUIRE(acknowledged_all);
    REQUIRE(::kill(pid, SIGKILL) == 0);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    INFO("round ", round);
    REQUIRE(WIFSIGNALED(status)); // it was running, not failed

    std::ifstream in(acks);
    for (std::string line; std::getline(in, line);)
      acknowledged.insert(line);
    auto e = MUST(engine::open(store_options(store)));
    auto s = MUST(e->get_session(test::get_req(the_session)));
    REQUIRE(s.has_value());
    REQUIRE(s->events.size() == s->version);
    std::set<std::string> stored;
    for (auto& ev : s->events)
      stored.insert(ev.id);
    for (auto& id : acknowledged)
      CHECK(stored.count(id) == 1);
    // Each rewind's effect is whole: right after it, the state is the one at
    // its point.
    for (std::size_t i = 0; i < s->events.size(); ++i) {
      auto& x = s->events[i].actions.extra;
      if (!x.contains("rewind_before_version"))
        continue;
      auto point = x["rewind_before_version"].get<std::size_t>();
      CHECK(replay(created_state, s->events, i + 1) == replay(created_state, s->events, point - 1));
      if (round == 19)
        ++rewinds_seen;
    }
    CHECK(s->state == replay(created_state, s->events, s->events.size()));
    MUST(e->close());
    auto kv = store::open_lmdb_kv_readonly(store);
    auto txn = kv->begin_read();
    auto report = store::verify_store(*txn);
    INFO((report.messages.empty() ? std::string() : report.messages.front()));
    CHECK(report.ok());
  }
  CHECK(acknowledged.size() >= 20 * acks_per_round);
  CHECK(rewinds_seen >= 20 * acks_per_round / 4);
}
