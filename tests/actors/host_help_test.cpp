// SPDX-License-Identifier: Apache-2.0
// The polling thread of a blocking call runs queued actor jobs while it waits
// (help_until, actors/core.hpp): its own call's session actor then runs on the
// caller's thread; only where the engine polls (spin_wait above zero); calls
// from many threads, blocking and async, are each answered once with nothing
// lost; and close() while a thread helps returns and leaves every call
// answered.
// test-tiers: tsan
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support/test_support.hpp"

using namespace agentstate;
using namespace agentstate::test;
using namespace std::chrono_literals;

#define STORES memory_store, lmdb_store

namespace {

// An append of `ev` that counts `key` up by one at commit and records the
// thread the count ran on (in durability::memory a session actor commits
// its own write set, so the modify runs where the actor runs).
append_request counted_append(const session_ref& ref, const std::string& key,
                              std::thread::id* ran_on) {
  append_request r = append_req(ref, make_event(json{{"step", 1}}));
  state_modify m;
  m.key = key;
  m.fallback = 0;
  m.fn = [ran_on](const json& current) {
    if (ran_on != nullptr)
      *ran_on = std::this_thread::get_id();
    return json(current.get<std::int64_t>() + 1);
  };
  r.modify.push_back(std::move(m));
  return r;
}

// How many of `n` blocking counted appends ran their modify on the calling
// thread; checks each call's answer and the final count.
int appends_run_here(test_engine& eng, int n) {
  auto ref = sref("app", "u", "s");
  MUST(eng->create_session(create_req(ref)));
  int here = 0;
  for (int i = 0; i < n; ++i) {
    std::thread::id ran_on;
    auto r = eng->append_event(counted_append(ref, "n", &ran_on));
    REQUIRE(r.ok());
    CHECK(r.value().version == static_cast<std::uint64_t>(i + 1));
    here += ran_on == std::this_thread::get_id() ? 1 : 0;
  }
  auto s = MUST(eng->get_session(get_req(ref)));
  REQUIRE(s.has_value());
  CHECK(s->state.value("n", -1) == n);
  return here;
}

} // namespace

TEST_CASE("host help: a blocking call's session actor runs on the calling thread") {
  auto eng = open_engine(store_kind::memory);
  // Workers may win the race for some jobs; the waiting caller, which is
  // counted on to take its own call's job, takes most of them.
  CHECK(appends_run_here(eng, 300) > 0);
}

TEST_CASE("host help: with spin_wait 0 no caller runs an actor's job") {
  auto eng = open_engine(store_kind::memory, [](options& o) { o.spin_wait = 0us; });
  CHECK(appends_run_here(eng, 100) == 0);
}

TEST_CASE_TEMPLATE("host help: blocking and async calls from many threads are each answered once",
                   S, STORES) {
  auto eng = open_engine(S::kind);
  constexpr int threads = 6, per_thread = 150, async_calls = 400;
  std::vector<session_ref> refs;
  for (int t = 0; t < threads; ++t) {
    refs.push_back(sref("app", "u", "s" + std::to_string(t)));
    MUST(eng->create_session(create_req(refs.back())));
  }
  // One thread's async appends to every session, counting user:n, answered
  // on whichever thread runs the session actors (helping callers included).
  std::atomic<int> async_answers{0}, async_failures{0};
  std::thread async_sender([&] {
    for (int i = 0; i < async_calls; ++i)
      eng->append_event(counted_append(refs[i % threads], "user:n", nullptr),
                        [&](result<append_result> r) {
                          if (!r.ok())
                            async_failures.fetch_add(1);
                          async_answers.fetch_add(1);
                        });
  });
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        auto r = eng->append_event(counted_append(refs[t], "user:n", nullptr));
        if (!r.ok())
          failures.fetch_add(1);
        auto g = eng->get_app_state("app"); // a blocking read between appends
        if (!g.ok())
          failures.fetch_add(1);
      }
    });
  for (auto& th : pool)
    th.join();
  async_sender.join();
  // The async answers come on the engine's threads.
  test::eventually([&] { return async_answers.load() >= async_calls; }, 30s);
  CHECK(failures.load() == 0);
  CHECK(async_answers.load() == async_calls);
  CHECK(async_failures.load() == 0);
  std::uint64_t events = 0;
  for (auto& ref : refs) {
    auto s = MUST(eng->get_session(get_req(ref)));
    REQUIRE(s.has_value());
    events += s->version;
    CHECK(s->state.value("user:n", -1) == threads * per_thread + async_calls);
  }
  CHECK(events == static_cast<std::uint64_t>(threads * per_thread + async_calls));
}

TEST_CASE_TEMPLATE("host help: close() while threads wait in blocking calls", S, STORES) {
  auto eng = open_engine(S::kind);
  constexpr int threads = 4;
  std::vector<session_ref> refs;
  for (int t = 0; t < threads; ++t) {
    refs.push_back(sref("app", "u", "s" + std::to_string(t)));
    MUST(eng->create_session(create_req(refs.back())));
  }
  std::atomic<int> stored{0}, refused{0}, started{0};
  std::mutex codes_mtx;
  std::set<errc> codes;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      started.fetch_add(1);
      for (;;) {
        auto r = eng->append_event(append_req(refs[t], make_event(json{{"k", t}})));
        if (r.ok()) {
          stored.fetch_add(1);
          continue;
        }
        refused.fetch_add(1);
        std::lock_guard<std::mutex> g(codes_mtx);
        codes.insert(r.err().code);
        return;
      }
    });
  REQUIRE(test::eventually([&] { return started.load() >= threads && stored.load() >= 200; }));
  CHECK(eng->close().ok());
  for (auto& th : pool)
    th.join(); // every thread's last call was answered
  CHECK(refused.load() == threads);
  CHECK(codes == std::set<errc>{errc::unavailable});
}
