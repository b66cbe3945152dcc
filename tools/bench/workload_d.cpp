// SPDX-License-Identifier: Apache-2.0
// tools/bench/workload_d.cpp: workload d, RSS growth per event appended.
#include "tools/bench/workloads.hpp"

#include <algorithm>
#include <cstddef>
#include <string>

#include "tools/bench/session_load.hpp"

namespace agentstate::tools::bench {

ojson workload_d(const config& cfg) {
  run_ctx x(cfg, "d");
  const std::size_t sessions = scaled(cfg, 1000, 1), per = 100, width = 64;
  const std::size_t users = std::min<std::size_t>(100, sessions);
  const double events = double(sessions * per);
  x.describe(
    "sessions x 100 events; RSS growth over the pre-run baseline",
    {{"sessions", sessions}, {"events", sessions * per}, {"in_flight", std::min(width, sessions)}});
  const bool applies = cfg.mode != durability::memory;
  std::string tdesc = applies ? "rss_growth_mb_per_100k_events <= 64"
                              : "none for memory (the memory store holds the data in RAM; "
                                "64 MB per 100k events is set for LMDB)";
  bool ok = false;
  auto ref_of = [&](std::size_t j) {
    return session_ref{"bench-d", sid("u", j % users), sid("s", j)};
  };
  if (x.open() && create_sessions(x, sessions, width, ref_of, "d")) {
    samples lat;
    x.cpu_start();
    double secs = append_loop(
      x, sessions, per, width, ref_of, [](std::size_t, std::size_t k) { return step_delta(k); },
      lat, "d");
    x.cpu_stop(events);
    x.out["events_per_s"] = round_to(events / secs, 0);
    put_headline_latency(x.out, "append ack (async API, 64 callback chains)", lat);
    x.snapshot_engine();
    double per100k = x.rss_growth_mb * 100000.0 / events;
    x.out["rss_growth_mb_per_100k_events"] = round_to(per100k, 1);
    x.out["rss_anon_growth_mb_per_100k_events"] = round_to(x.anon_growth_mb * 100000.0 / events, 1);
    ok = !applies || per100k <= 64;
  }
  return x.finish(tdesc, ok && x.errors.count == 0);
}

} // namespace agentstate::tools::bench
