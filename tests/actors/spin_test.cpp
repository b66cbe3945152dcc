// SPDX-License-Identifier: Apache-2.0
// actors/spin.hpp: the polling budget of waiting threads, and its extension
// while the writer commits (commit_poll). Only lower bounds on time are
// asserted, and upper bounds far above the budgets, so load cannot fail them.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "actors/core.hpp"
#include "actors/spin.hpp"

using namespace agentstate::detail;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

TEST_CASE("spin_until: returns at once when ready, false after the budget otherwise") {
  CHECK(spin_until([] { return true; }, 0us));
  CHECK_FALSE(spin_until([] { return false; }, 0us));
  auto t = steady::now();
  CHECK_FALSE(spin_until([] { return false; }, 2000us));
  auto spent = steady::now() - t;
  CHECK(spent >= 2ms);
  CHECK(spent < 1s);
}

TEST_CASE("spin_until: polls past the budget while extend() holds, up to the cap") {
  auto t = steady::now();
  CHECK_FALSE(spin_until([] { return false; }, 1000us, [] { return true; }, 20ms));
  CHECK(steady::now() - t >= 20ms);

  // Not extended: the budget alone.
  t = steady::now();
  CHECK_FALSE(spin_until([] { return false; }, 1000us, [] { return false; }, 2s));
  auto spent = steady::now() - t;
  CHECK(spent >= 1ms);
  CHECK(spent < 1s);

  // A zero budget never polls, whatever the extension.
  t = steady::now();
  CHECK_FALSE(spin_until([] { return false; }, 0us, [] { return true; }, 2s));
  CHECK(steady::now() - t < 1s);

  // The extension ends when extend() stops holding; an answer that arrives
  // during it is seen.
  std::atomic<bool> extending{true}, ready{false};
  std::thread other([&] {
    std::this_thread::sleep_for(30ms);
    ready = true;
  });
  t = steady::now();
  CHECK(spin_until([&] { return ready.load(); }, 1000us, [&] { return extending.load(); }, 10s));
  CHECK(steady::now() - t >= 30ms);
  other.join();

  std::thread stopper([&] {
    std::this_thread::sleep_for(30ms);
    extending = false;
  });
  ready = false;
  t = steady::now();
  CHECK_FALSE(
    spin_until([&] { return ready.load(); }, 1000us, [&] { return extending.load(); }, 10s));
  spent = steady::now() - t;
  CHECK(spent >= 30ms);
  CHECK(spent < 5s);
  stopper.join();
}

TEST_CASE("commit_poll: waiters poll through a commit in sync mode only") {
  agentstate::options o;
  o.mode = agentstate::durability::sync;
  CHECK(commit_poll(o) == 1ms);
  o.spin_wait = 5ms;
  CHECK(commit_poll(o) == 5ms); // never below the budget
  o.spin_wait = 0us;
  CHECK(commit_poll(o) == 0us); // no polling at all
  for (auto mode : {agentstate::durability::nosync, agentstate::durability::memory}) {
    o.mode = mode;
    o.spin_wait = 50us;
    CHECK(commit_poll(o) == 50us); // the budget alone: commits take tens of µs
  }
}
