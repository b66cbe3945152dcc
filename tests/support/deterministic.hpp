// SPDX-License-Identifier: Apache-2.0
// tests/support/deterministic.hpp: an engine whose actors run on CAF's test
// coordinator (engine_factory::open, deterministic), for tests where order
// and timing are the point: nothing runs until the test runs it, and idle
// timers fire when the test advances the clock. Use the async API only.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include <caf/actor_system.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include "actors/engine_factory.hpp"
#include "support/test_support.hpp"

namespace agentstate::test {

/// The outcome of one async call, filled when the test runs the actors.
template <class T>
class pending_call {
public:
  /// The callback to hand the engine.
  callback<T> cb() {
    auto slot = slot_;
    return [slot](result<T> r) { slot->emplace(std::move(r)); };
  }
  bool ready() const { return slot_->has_value(); }
  /// The outcome. REQUIRES: ready().
  result<T>& get() {
    REQUIRE(ready());
    return **slot_;
  }

private:
  std::shared_ptr<std::optional<result<T>>> slot_ = std::make_shared<std::optional<result<T>>>();
};

struct deterministic_engine {
  std::unique_ptr<temp_dir> dir; // destroyed last
  options opts;
  std::unique_ptr<engine> eng;
  caf::scheduler::test_coordinator* sched = nullptr;

  engine& operator*() const { return *eng; }
  engine* operator->() const { return eng.get(); }

  /// Runs actor jobs until none is left; returns how many ran.
  std::size_t run() { return sched->run(); }
  /// Moves the scheduler's clock on by `d`, fires the timers that fall due
  /// (idle checks, the reaper's ticks), and runs. The engine's wall clock,
  /// which those find expiry by, is options::wall_clock (manual_clock.hpp).
  std::size_t advance(std::chrono::milliseconds d) {
    sched->advance_time(d);
    return run();
  }
  /// Starts an async call (`start` gets its callback), runs the actors
  /// until none is left, and returns the call's outcome (REQUIREs one).
  template <class T, class Start>
  result<T> call(Start&& start) {
    pending_call<T> p;
    start(p.cb());
    run();
    return std::move(p.get());
  }
};

inline deterministic_engine open_deterministic(store_kind k,
                                               const std::function<void(options&)>& tweak = {}) {
  deterministic_engine t;
  t.dir = std::make_unique<temp_dir>();
  t.opts = make_options(k, t.dir->str());
  if (tweak)
    tweak(t.opts);
  auto r = detail::engine_factory::open(t.opts, nullptr, true);
  INFO("engine_factory::open(deterministic) -> ", describe(r));
  REQUIRE(r.ok());
  t.eng = std::move(r).value();
  t.sched = &dynamic_cast<caf::scheduler::test_coordinator&>(
    detail::engine_factory::system_of(*t.eng).scheduler());
  return t;
}

} // namespace agentstate::test
