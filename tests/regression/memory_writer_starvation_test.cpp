// SPDX-License-Identifier: Apache-2.0
// test-tiers: tsan
// Regression: the in-memory store used std::shared_mutex, which glibc makes
// reader-preferring, so a steady stream of get_session readers starved the
// store writer and appends stalled for as long as the readers ran.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "support/test_support.hpp"

using namespace agentstate;

TEST_CASE("regression: readers do not starve the memory store's writer") {
  auto eng = test::open_engine(test::store_kind::memory);
  auto& e = *eng;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req("app", "u", "s")));
  std::atomic<bool> done{false};
  std::vector<std::thread> readers;
  for (int i = 0; i < 4; ++i)
    readers.emplace_back([&] {
      while (!done.load())
        (void)e.get_session(test::get_req(ref, 5));
    });
  // A hang detector, not a speed check: 300 appends take milliseconds when
  // the writer gets the lock; starved, they did not finish in minutes.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int appended = 0;
  while (appended < 300 && std::chrono::steady_clock::now() < deadline) {
    if (e.append_event(test::append_req(ref, test::make_event(json{{"n", appended}}))).ok())
      ++appended;
  }
  done = true;
  for (auto& t : readers)
    t.join();
  CHECK(appended == 300);
}
