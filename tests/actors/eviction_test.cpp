// SPDX-License-Identifier: Apache-2.0
// options::max_live_sessions and the heap trimmer (issue 18 item 6). Probe
// findings, as regressions: "200k live sessions: 569 MB; nothing bounds the
// number of live actors" and "after every actor was passivated RSS stayed at
// 583 MB". Real threads, a real LMDB store in a temporary directory. The
// engine's stats are polled (test::eventually): evictions are messages handled
// on the engine's threads, and idle passivation runs on the actor system's
// steady timer, which options::wall_clock does not drive.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "actors/engine_factory.hpp"
#include "actors/heap_trimmer.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace std::chrono_literals;

namespace {

// This process's resident anonymous memory (heap and stacks, not the
// store's mapped file), in KiB.
long rss_anon_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("RssAnon:", 0) == 0)
      return std::stol(line.substr(8));
  return -1;
}

std::string sid(std::size_t i, const std::string& prefix = "s") {
  return prefix + std::to_string(i);
}

// `n` sessions named `prefix`0.., each created with {"n": i} and one
// appended event, from `threads` host threads.
void load(engine& e, std::size_t n, int threads, const std::string& prefix = "s") {
  std::atomic<std::size_t> next{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&] {
      for (std::size_t i; (i = next.fetch_add(1)) < n;) {
        auto ref = test::sref("app", "u" + std::to_string(i % 50), sid(i, prefix));
        auto c = e.create_session(test::create_req(ref, json{{"n", i}}));
        auto a = c ? e.append_event(test::append_req(ref, test::make_event(json{{"k", i}}, "e")))
                   : result<append_result>(c.err());
        if (!a && failures.fetch_add(1) < 3)
          MESSAGE("session ", i, (c ? " append: " : " create: "), a.err().message);
      }
    });
  for (auto& t : ts)
    t.join();
  REQUIRE(failures.load() == 0);
}

// As load, through the async API with `window` sessions in flight: the
// burst's pace is the engine's throughput, not a blocked caller's wake-up
// latency, which a loaded machine stretches most.
void load_async(engine& e, std::size_t n, std::size_t window) {
  std::mutex m;
  std::condition_variable cv;
  std::size_t finished = 0;
  std::atomic<int> failures{0};
  std::atomic<std::size_t> next{0};
  std::function<void()> start;
  auto done = [&](const std::string& what, std::size_t i, const error* err) {
    if (err && failures.fetch_add(1) < 3)
      MESSAGE("session ", i, what, err->message);
    start(); // before counting: once the last one counts, the caller's frame may go
    std::lock_guard<std::mutex> lk(m);
    ++finished;
    cv.notify_one();
  };
  start = [&] {
    const std::size_t i = next.fetch_add(1);
    if (i >= n)
      return;
    auto ref = test::sref("app", "u" + std::to_string(i % 50), sid(i));
    e.create_session(test::create_req(ref, json{{"n", i}}), [&, ref, i](result<session> c) {
      if (!c)
        return done(" create: ", i, &c.err());
      e.append_event(
        test::append_req(ref, test::make_event(json{{"k", i}}, "e")),
        [&, i](result<append_result> a) { done(" append: ", i, a ? nullptr : &a.err()); });
    });
  };
  for (std::size_t k = 0; k < window; ++k)
    start();
  std::unique_lock<std::mutex> lk(m);
  cv.wait(lk, [&] { return finished == n; });
  REQUIRE(failures.load() == 0);
}

} // namespace

TEST_CASE("max_live_sessions bounds the live session actors; evicted sessions read back whole") {
  test::temp_dir d;
  options o = test::make_options(test::store_kind::lmdb, d.str());
  o.mode = durability::nosync;
  o.max_live_sessions = 640; // 10 per shard
  o.idle_timeout = 60s; // only eviction passivates here
  auto opened = engine::open(o);
  REQUIRE(opened.ok());
  auto& e = **opened;
  CHECK(e.opts().max_live_sessions == 640);
  load(e, 5000, 4);
  // Evictions are messages: the count settles once they are handled (the
  // 60 s are a hang guard).
  CHECK(test::eventually([&] { return e.stats().sessions_live <= 640; }, 60s));
  INFO("sessions_live ", e.stats().sessions_live, ", evictions ", e.stats().evictions);
  CHECK(e.stats().evictions >= 5000 - 640);
  CHECK(e.stats().passivations >= 5000 - 640);
  // Every session, live or evicted, reads back whole.
  std::mt19937 rng(7);
  for (int k = 0; k < 300; ++k) {
    std::size_t i = rng() % 5000;
    auto ref = test::sref("app", "u" + std::to_string(i % 50), sid(i));
    auto got = e.get_session(test::get_req(ref));
    REQUIRE(got.ok());
    REQUIRE(got->has_value());
    auto& s = **got;
    CHECK(s.events.size() == 1);
    CHECK(s.state.at("n") == i);
    CHECK(s.state.at("k") == i);
  }
  CHECK(test::eventually([&] { return e.stats().sessions_live <= 640; }, 60s));
  REQUIRE(e.close().ok());
}

TEST_CASE("the default max_live_sessions is sized from memory, at least 10,000") {
  test::temp_dir d;
  options o = test::make_options(test::store_kind::memory, d.str());
  auto opened = engine::open(o);
  REQUIRE(opened.ok());
  CHECK((*opened)->opts().max_live_sessions >= 10000);
  REQUIRE((*opened)->close().ok());
}

TEST_CASE("after a burst of sessions passivates, the heap goes back to the OS "
          "(regressions: RSS stayed at its peak; an evicted actor's memory was kept until its "
          "idle timer fired, with no trim after)") {
  test::temp_dir d;
  options o = test::make_options(test::store_kind::lmdb, d.str());
  o.mode = durability::nosync;
  // The burst: 50,000 sessions in quick; AGENTSTATE_TEST_BURST_SESSIONS sets
  // another size (the stress tier's actors_eviction_200k: the probe's 200k).
  std::size_t burst = 50000;
  if (const char* n = std::getenv("AGENTSTATE_TEST_BURST_SESSIONS"))
    burst = std::stoul(n);
  // Longer than the load takes, so every session of the burst is live at
  // once; the test passivates them itself (engine_factory::passivate_all,
  // the passivation the capacity bound asks for), without waiting for idle
  // timers.
  o.idle_timeout = std::max<std::chrono::seconds>(60s, std::chrono::seconds(burst / 2000));
  o.max_live_sessions = burst + 10000;
  auto opened = engine::open(o);
  REQUIRE(opened.ok());
  auto& e = **opened;
  // Every live session, user and app actor passivated: asked again at each
  // poll, since one that was busy or had a message waiting stayed live.
  auto all_passivated = [&] {
    auto st = e.stats();
    if (st.sessions_live == 0 && st.users_live == 0 && st.apps_live == 0)
      return true;
    detail::engine_factory::passivate_all(e);
    return false;
  };
  load(e, 1000, 2, "warm"); // warm-up: threads, pools and the store's first pages
  REQUIRE(test::eventually(all_passivated, 60s));
  // One heap trim after the warm-up's passivations, for the baseline: made
  // here, at once, rather than waited for on the trimmer's timer (a trim
  // that frees nothing counts in no stat to wait on).
  detail::trim_heap();
  long baseline = rss_anon_kib();
  REQUIRE(baseline > 0);
  auto trims_before = e.stats().heap_trims;
  load_async(e, burst, 256);
  long peak = rss_anon_kib();
  REQUIRE(test::eventually(all_passivated, 60s));
  // The trimmer's next tick (at most a second away) trims and returns the
  // heap; the 30 s are a hang guard. Within 2x of the baseline, plus 8 MiB
  // of allocator slack (the baseline is a few MiB: heap and thread stacks,
  // not the store's mapped file). Both are waited for: the allocator may
  // give some memory back on its own before the trimmer's tick (regression:
  // the trim count was read before that tick, seen once in 14 runs beside
  // two busy loops).
  bool returned = test::eventually(
    [&] {
      return rss_anon_kib() <= 2 * baseline + 8 * 1024 && e.stats().heap_trims > trims_before;
    },
    30s);
  long after = rss_anon_kib();
  MESSAGE("RssAnon: baseline ", baseline / 1024, " MiB, peak with ", burst, " live sessions ",
          peak / 1024, " MiB, after idle ", after / 1024, " MiB");
  CHECK(peak > baseline + 16 * 1024); // the burst did hold memory
  CHECK(e.stats().heap_trims > trims_before);
  CHECK(returned);
  REQUIRE(e.close().ok());
}
