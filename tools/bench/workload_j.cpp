// SPDX-License-Identifier: Apache-2.0
// tools/bench/workload_j.cpp: workload j, other sessions' appends while a
// large session's delete is purged (store/purge.hpp), against the same
// appends without it, in one run.
#include "tools/bench/workloads.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <string>
#include <thread>

#include "tools/bench/session_load.hpp"

namespace agentstate::tools::bench {

ojson workload_j(const config& cfg) {
  run_ctx x(cfg, "j");
  const std::size_t big = scaled(cfg, 1000000, 2000), sessions = 1000, per = 20, width = 64;
  x.describe("a session of N events deleted while 1,000 other sessions append (64 in flight): "
             "their ack p99 beside the same appends before the delete",
             {{"big_session_events", big},
              {"sessions", sessions},
              {"events", sessions * per},
              {"in_flight", width}});
  std::string tdesc = "p99_us_during_purge <= 2 x p99_us_without (at 1,000,000 events)";
  bool ok = false;
  session_ref big_ref{"bench-j", "big", "s0"};
  auto ref_of = [&](std::size_t j) {
    return session_ref{"bench-j", sid("u", j % 100), sid("s", j)};
  };
  auto delta_of = [](std::size_t, std::size_t k) { return step_delta(k); };
  if (x.open()
      && create_sessions(
        x, 1, 1, [&](std::size_t) { return big_ref; }, "j")
      && create_sessions(x, sessions, width, ref_of, "j")) {
    samples load;
    // The big session: 64 chains appending to it, so its appends pipeline
    // and share commits.
    append_loop(
      x, width, big / width, width, [&](std::size_t) { return big_ref; },
      [](std::size_t, std::size_t k) { return step_delta(k); }, load, "j load");
    samples without, during;
    append_loop(x, sessions, per, width, ref_of, delta_of, without, "j without");
    std::atomic<double> delete_us{0};
    std::atomic<bool> deleted{false};
    auto t0 = steady::now();
    x.eng->delete_session(big_ref, [&](result<void> r) {
      delete_us.store(us_between(t0, steady::now()));
      if (!r)
        x.errors.add(r.err());
      deleted.store(true);
    });
    double secs = append_loop(x, sessions, per, width, ref_of, delta_of, during, "j during");
    while (!deleted.load() && since(t0) < 60)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    x.out["events_per_s"] = round_to(double(sessions * per) / secs, 0);
    put_headline_latency(x.out, "append ack of the other sessions while the big session is purged",
                         during);
    put_latency(x.out, "without_", without);
    x.out["delete_ack_us"] = round_to(delete_us.load(), 1);
    x.out["big_session_events_loaded"] = (big / width) * width;
    if (auto s = x.eng->get_session(get_request{big_ref, 0, {}, {}}); !s || *s)
      x.errors.add("the deleted session is still readable");
    ok = deleted && during.pct(0.99) <= 2 * without.pct(0.99);
    x.snapshot_engine();
  }
  return x.finish(tdesc, ok && x.errors.count == 0);
}

} // namespace agentstate::tools::bench
