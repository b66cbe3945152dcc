// SPDX-License-Identifier: Apache-2.0
// actors/spin.hpp: the polling budget of waiting threads, and its extension
// while the writer commits (commit_poll). The polls run on a clock of the
// test's own that moves a fixed step at every reading, so the budgets show
// as counts of polls, never as measured time.
#include <doctest/doctest.h>

#include <chrono>
#include <functional>

#include "actors/core.hpp"
#include "actors/spin.hpp"

using namespace agentstate::detail;
using namespace std::chrono_literals;

namespace {

// Each reading is 100 µs after the one before. One test thread reads it.
struct step_clock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<step_clock>;
  static constexpr bool is_steady = true;
  static constexpr duration step = 100us;
  static inline duration elapsed{0};
  static time_point now() {
    elapsed += step;
    return time_point(elapsed);
  }
  // Time since `from` (a reading of elapsed), not counting as a reading.
  static duration since(duration from) { return elapsed - from; }
};

// A predicate that counts its calls; true from call ready_from + 1 on.
struct counted {
  int calls = 0;
  bool operator()() { return ++calls > ready_from; }
  int ready_from = 1 << 30; // never, unless set
};

} // namespace

TEST_CASE("spin_until: returns at once when ready, false after the budget otherwise") {
  CHECK(spin_until<step_clock>([] { return true; }, 0us));
  counted never;
  CHECK_FALSE(spin_until<step_clock>(std::ref(never), 0us));
  CHECK(never.calls == 1); // a zero budget polls once
  auto t = step_clock::elapsed;
  counted late;
  CHECK_FALSE(spin_until<step_clock>(std::ref(late), 2000us));
  // Polled until the clock passed the budget, and no further: one poll per
  // reading after the first, 2000 µs / 100 µs of them, and the first.
  CHECK(step_clock::since(t) == 2100us);
  CHECK(late.calls == 21);
  counted soon;
  soon.ready_from = 5;
  CHECK(spin_until<step_clock>(std::ref(soon), 2000us));
  CHECK(soon.calls == 6); // the poll that found it ready was the last
}

TEST_CASE("spin_until: polls past the budget while extend() holds, up to the cap") {
  auto t = step_clock::elapsed;
  counted never;
  CHECK_FALSE(spin_until<step_clock>(
    std::ref(never), 1000us, [] { return true; }, 20ms));
  CHECK(step_clock::since(t) == 20100us); // to the cap

  // Not extended: the budget alone.
  t = step_clock::elapsed;
  never.calls = 0;
  CHECK_FALSE(spin_until<step_clock>(
    std::ref(never), 1000us, [] { return false; }, 2s));
  CHECK(step_clock::since(t) == 1100us);
  CHECK(never.calls == 11);

  // A zero budget never polls, whatever the extension.
  t = step_clock::elapsed;
  never.calls = 0;
  CHECK_FALSE(spin_until<step_clock>(
    std::ref(never), 0us, [] { return true; }, 2s));
  CHECK(never.calls == 1);
  CHECK(step_clock::since(t) == 0us);

  // The extension ends when extend() stops holding; an answer that arrives
  // during it is seen.
  counted answer;
  answer.ready_from = 30; // 3 ms of polls: past the 1 ms budget
  int extends = 0;
  CHECK(spin_until<step_clock>(
    std::ref(answer), 1000us, [&] { return ++extends > 0; }, 10s));
  CHECK(answer.calls == 31);
  CHECK(extends > 0);
  // No answer, and extend() stops holding at 3 ms: polling ends there, long
  // before the cap.
  counted none;
  t = step_clock::elapsed;
  CHECK_FALSE(spin_until<step_clock>(
    std::ref(none), 1000us, [&] { return step_clock::since(t) < 3ms; }, 10s));
  CHECK(step_clock::since(t) == 3ms);
  CHECK(none.calls == 30);
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
