// SPDX-License-Identifier: Apache-2.0
// tools/bench/workload_e.cpp: workload e, a million small sessions: load
// rate, random full reads, peak RSS, close and reopen time.
#include "tools/bench/workloads.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "tools/bench/closed_loop.hpp"
#include "tools/bench/progress.hpp"
#include "tools/bench/session_load.hpp"

namespace agentstate::tools::bench {

ojson workload_e(const config& cfg) {
  run_ctx x(cfg, "e");
  const std::size_t sessions = scaled(cfg, 1000000, 1000), reads = scaled(cfg, 10000, 100),
                    width = 256, users = std::max<std::size_t>(1, sessions / 1000);
  x.describe("sessions created with one event each, random full reads, peak RSS, reopen",
             {{"sessions", sessions},
              {"users", users},
              {"events", sessions},
              {"reads", reads},
              {"in_flight", std::min(width, sessions)}});
  const bool durable = cfg.mode != durability::memory;
  std::string tdesc = durable ? "peak_rss_mb <= 512 and reopen_s <= 1 (at 1,000,000 sessions)"
                              : "peak_rss_mb <= 512 (at 1,000,000 sessions; no reopen in memory)";
  bool ok = false;
  auto ref_of = [&](std::size_t j) {
    return session_ref{"bench-e", sid("u", j % users), sid("s", j)};
  };
  if (x.open(std::chrono::milliseconds(1000))) {
    samples lat;
    lat.us.assign(sessions, 0.0);
    std::uint64_t max_live = 0;
    double secs = 0, max_anon = 0;
    {
      progress prog(x.eng.get(), "e create+append", sessions * 2);
      x.cpu_start();
      auto t0 = steady::now();
      run_closed_loop(
        sessions, 2, width,
        [&](std::size_t j, std::size_t k, step_done_fn done) {
          auto ref = ref_of(j);
          if (k == 0)
            issue_create(x, ref, std::move(done));
          else
            issue_append(x, make_append(ref, step_delta(j)), &lat.us[j], std::move(done));
        },
        &prog);
      secs = since(t0);
      x.cpu_stop(double(sessions), "session");
      max_live = prog.max_live();
      max_anon = prog.max_anon_mb();
    }
    x.out["events_per_s"] = round_to(double(sessions) / secs, 0);
    x.out["sessions_per_s"] = round_to(double(sessions) / secs, 0);
    x.out["load_seconds"] = round_to(secs, 3);
    put_latency(x.out, "append_ack_", lat);
    x.out["max_sessions_live"] = std::max<std::uint64_t>(max_live, x.eng->stats().sessions_live);
    samples rd;
    std::mt19937_64 rng(42);
    for (std::size_t i = 0; i < reads && x.errors.count == 0; ++i) {
      get_request g;
      g.ref = ref_of(rng() % sessions);
      auto id = g.ref.session_id;
      auto r = timed_call(rd, [&] { return x.eng->get_session(std::move(g)); });
      if (!r)
        x.errors.add(r.err());
      else if (!*r || (*r)->events.size() != 1)
        x.errors.add("get_session of " + id + " did not return its one event");
    }
    put_headline_latency(x.out, "get_session (full) of a random session", rd);
    x.snapshot_engine();
    double peak = read_mem().hwm_mb;
    x.out["peak_rss_anon_mb"] = round_to(std::max(max_anon, read_mem().anon_mb), 1);
    x.out["peak_rss_anon_mb_of"] = "RssAnon sampled every 250 ms while loading";
    // Then idle: every actor passivates after the idle timeout (1 s here) and
    // the heap trimmer hands the freed heap back (one pass a second).
    {
      auto ti = steady::now();
      while (x.eng->stats().sessions_live > 0 && since(ti) < 60)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      x.out["sessions_live_after_idle"] = x.eng->stats().sessions_live;
      x.out["idle_passivation_s"] = round_to(since(ti), 2);
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      x.out["rss_anon_after_idle_mb"] = round_to(read_mem().anon_mb, 1);
      x.out["rss_anon_after_idle_mb_of"] =
        "RssAnon 2.5 s after the last actor passivated (idle_timeout 1 s)";
    }
    auto tc = steady::now();
    x.close();
    x.out["close_s"] = round_to(since(tc), 3);
    ok = peak <= 512;
    if (durable && x.errors.count == 0) {
      auto tr = steady::now();
      bool opened = x.reopen();
      double reopen = since(tr);
      x.out["reopen_s"] = round_to(reopen, 4);
      if (opened) {
        get_request g;
        g.ref = ref_of(sessions - 1);
        auto t = steady::now();
        auto r = x.eng->get_session(std::move(g));
        x.out["first_read_after_reopen_us"] = round_to(us_between(t, steady::now()), 1);
        if (!r || !*r || (*r)->version != 1)
          x.errors.add("after reopen, the last session is not there with version 1");
        x.close();
      }
      ok = ok && reopen <= 1.0;
    } else {
      x.out["reopen_s"] = nullptr;
    }
  }
  return x.finish(tdesc, ok && x.errors.count == 0);
}

} // namespace agentstate::tools::bench
