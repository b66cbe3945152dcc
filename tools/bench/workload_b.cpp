// SPDX-License-Identifier: Apache-2.0
// tools/bench/workload_b.cpp: workload b, appends to many sessions in
// flight, on the async API and then on the blocking API.
#include "tools/bench/workloads.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "tools/bench/progress.hpp"
#include "tools/bench/session_load.hpp"

namespace agentstate::tools::bench {

ojson workload_b(const config& cfg) {
  run_ctx x(cfg, "b");
  const std::size_t sessions = scaled(cfg, 1000, 8), per = 20, width = 64;
  const std::size_t users = std::min<std::size_t>(100, sessions);
  x.describe("sessions over users, 20 events each, 64 appends in flight",
             {{"sessions", sessions},
              {"users", users},
              {"events", sessions * per},
              {"in_flight", std::min(width, sessions)}});
  double target = cfg.mode == durability::sync ? 30000 : 100000;
  std::string tdesc = cfg.mode == durability::sync ? "events_per_s >= 30000"
    : cfg.mode == durability::nosync
    ? "events_per_s >= 100000"
    : "events_per_s >= 100000 (the nosync target; none is set for memory)";
  auto ref_of = [&](std::size_t j) {
    return session_ref{"bench-b", sid("u", j % users), sid("s", j)};
  };
  auto delta_of = [](std::size_t, std::size_t k) { return step_delta(k); };
  bool ok = false;
  // 1. async API: 64 callback chains (the headline figures).
  if (x.open() && create_sessions(x, sessions, width, ref_of, "b")) {
    samples lat;
    x.cpu_start();
    double secs = append_loop(x, sessions, per, width, ref_of, delta_of, lat, "b async");
    x.cpu_stop(double(sessions * per));
    double eps = double(sessions * per) / secs;
    x.out["events_per_s"] = round_to(eps, 0);
    put_headline_latency(x.out, "append ack (async API, 64 callback chains)", lat);
    x.out["api"] = "async";
    x.out["write_seconds"] = round_to(secs, 3);
    ok = eps >= target;
    x.snapshot_engine();
  }
  x.close();
  // 2. blocking API: 64 threads, each taking sessions in turn; a fresh store.
  x.dir.reset();
  if (x.errors.count == 0 && x.open() && create_sessions(x, sessions, width, ref_of, "b")) {
    samples lat;
    lat.us.assign(sessions * per, 0.0);
    std::atomic<std::size_t> next{0};
    progress prog(x.eng.get(), "b blocking append", sessions * per);
    double cpu0 = cpu_seconds();
    auto t0 = steady::now();
    std::vector<std::thread> ths;
    for (std::size_t w = 0; w < width; ++w)
      ths.emplace_back([&] {
        for (;;) {
          auto j = next.fetch_add(1);
          if (j >= sessions || x.errors.count > 0)
            return;
          auto ref = ref_of(j);
          for (std::size_t k = 0; k < per; ++k) {
            auto req = make_append(ref, step_delta(k));
            auto t = steady::now();
            auto r = x.eng->append_event(std::move(req));
            lat.us[j * per + k] = us_between(t, steady::now());
            prog.add();
            if (!r) {
              x.errors.add(r.err());
              return;
            }
          }
        }
      });
    for (auto& t : ths)
      t.join();
    double secs = since(t0);
    double cpu = cpu_seconds() - cpu0;
    ojson b;
    b["events_per_s"] = round_to(double(sessions * per) / secs, 0);
    put_latency(b, "", lat);
    b["threads"] = width;
    b["cpu_us_per_event"] = round_to(cpu * 1e6 / double(sessions * per), 1);
    b.update(pick_stats(to_json(x.eng->stats()), {"commits", "mean_batch", "max_batch"}));
    x.out["blocking"] = b;
  }
  return x.finish(tdesc, ok && x.errors.count == 0);
}

} // namespace agentstate::tools::bench
