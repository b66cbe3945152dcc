// SPDX-License-Identifier: Apache-2.0
// kill -9 during the purge of a large deleted session (store/purge.hpp), or
// of a deleted user or app holding one (store/scope_delete.hpp): a child
// process (this binary, run for its hidden child case) loads a session of
// 8,000 events, deletes it (or its user, or its app), records the
// acknowledgement and keeps running while its writer purges the rows; the
// parent kills it soon after, 6 times, 2 of each. After each kill what was
// deleted stays deleted, a read-only `verify` is clean (the rows left are
// counted as purging, not as faults), and an engine opened on the store
// finishes every purge.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include "actors/engine_factory.hpp"
#include "store/kv.hpp"
#include "store/purge.hpp"
#include "store/verify.hpp"
#include "support/spawn_self.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

namespace {

options store_options(const std::string& dir) {
  options o;
  o.dir = dir;
  o.mode = durability::nosync; // a process crash loses nothing acknowledged
  return o;
}

std::size_t lines_in(const std::string& path) {
  std::ifstream in(path);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);)
    ++n;
  return n;
}

} // namespace

TEST_CASE("purge kill: the child deletes a large session and waits" * doctest::skip()) {
  const char* dir = std::getenv("AGENTSTATE_PURGE_CHILD_DIR");
  const char* acks = std::getenv("AGENTSTATE_PURGE_CHILD_ACKS");
  const char* name = std::getenv("AGENTSTATE_PURGE_CHILD_SESSION");
  const char* mode = std::getenv("AGENTSTATE_PURGE_CHILD_MODE");
  REQUIRE(dir);
  REQUIRE(acks);
  REQUIRE(name);
  REQUIRE(mode);
  auto e = MUST(engine::open(store_options(dir)));
  const std::string m = mode;
  auto ref = test::sref(m == "app" ? name : "app", m == "user" ? name : "u", name);
  MUST(e->create_session(test::create_req(ref)));
  std::atomic<int> left{8000};
  std::promise<void> all_stored; // set by the last callback (on an engine thread)
  for (int i = 0; i < 8000; ++i)
    e->append_event(test::append_req(ref, test::make_event(json{{"k" + std::to_string(i), i}})),
                    [&](result<append_result> r) {
                      if (!r) // an engine thread: no doctest macro here
                        std::abort();
                      if (left.fetch_sub(1) == 1)
                        all_stored.set_value();
                    });
  all_stored.get_future().wait();
  if (m == "user")
    MUST(e->delete_user(ref.app_name, ref.user_id));
  else if (m == "app")
    MUST(e->delete_app(ref.app_name));
  else
    MUST(e->delete_session(ref));
  int fd = ::open(acks, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  std::string line = std::string(name) + "\n";
  REQUIRE(::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()));
  for (;;)
    ::pause(); // the child idles until the parent's kill -9
}

TEST_CASE("purge kill: 6 kills during purges; deleted sessions, users and apps stay deleted "
          "and every purge finishes") {
  test::temp_dir dir;
  auto store = (dir.path() / "store").string();
  auto acks = (dir.path() / "acks.txt").string();
  std::filesystem::create_directories(store);
  std::mt19937 rng(7);
  const char* modes[] = {"session", "user", "app"};
  int caught_mid_purge = 0;
  for (int round = 0; round < 6; ++round) {
    INFO("round ", round);
    std::string session = "big" + std::to_string(round);
    const auto acked = lines_in(acks);
    pid_t pid = test::spawn_self("purge kill: the child*",
                                 {"AGENTSTATE_PURGE_CHILD_DIR=" + store,
                                  "AGENTSTATE_PURGE_CHILD_ACKS=" + acks,
                                  "AGENTSTATE_PURGE_CHILD_SESSION=" + session,
                                  std::string("AGENTSTATE_PURGE_CHILD_MODE=") + modes[round % 3]});
    // The child's acknowledgement file, polled every 200 us: the kill's
    // moment below is measured from the acknowledgement.
    REQUIRE(test::eventually([&] { return lines_in(acks) != acked; }, std::chrono::seconds(60),
                             std::chrono::microseconds(200)));
    // input: the kill -9 comes once the purge has deleted a seeded share of
    // the session's 8,000 events (none, an eighth or a quarter), as the
    // store shows it read-only beside the child: a moment set by the purge's
    // progress, not by time. The store holds no other events then.
    const std::uint64_t at_most = 8000 - 1000 * (rng() % 3);
    {
      auto kv = store::open_lmdb_kv_readonly(store);
      (void)test::eventually(
        [&] {
          // The events table's own count (a database of its own: O(1)).
          return kv->info().entries[static_cast<std::size_t>(store::table::events)] <= at_most;
        },
        std::chrono::seconds(60), std::chrono::microseconds(200));
      REQUIRE(::kill(pid, SIGKILL) == 0);
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFSIGNALED(status));
    {
      auto kv = store::open_lmdb_kv_readonly(store);
      auto txn = kv->begin_read();
      auto report = store::verify_store(*txn);
      INFO((report.messages.empty() ? std::string() : report.messages.front()));
      CHECK(report.ok());
      caught_mid_purge += report.purging > 0;
    }
    auto e = MUST(engine::open(store_options(store)));
    for (int r = 0; r <= round; ++r) {
      auto name = "big" + std::to_string(r);
      std::string m = modes[r % 3];
      auto ref = test::sref(m == "app" ? name : "app", m == "user" ? name : "u", name);
      CHECK(!test::get_maybe(*e, ref).has_value());
    }
    CHECK(test::eventually([&] {
      auto txn = detail::engine_factory::store_of(*e).begin_read();
      return !store::any_purge(*txn);
    }));
    MUST(e->close());
    auto kv = store::open_lmdb_kv_readonly(store);
    auto txn = kv->begin_read();
    auto report = store::verify_store(*txn);
    CHECK(report.ok());
    CHECK(report.purging == 0);
    CHECK(report.events == 0);
    CHECK(report.session_rows == 0);
  }
  // Most kills land while rows are left (the purge of 16,000 rows takes
  // tens of milliseconds; the kill comes once at most a quarter is gone).
  CHECK(caught_mid_purge >= 3);
}
