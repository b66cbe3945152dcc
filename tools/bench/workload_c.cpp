// SPDX-License-Identifier: Apache-2.0
// tools/bench/workload_c.cpp: workload c, reads of one long session, whole
// and its last 10 events, typed and as JSON text.
#include "tools/bench/workloads.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "tools/bench/session_load.hpp"

namespace agentstate::tools::bench {

ojson workload_c(const config& cfg) {
  run_ctx x(cfg, "c");
  const std::size_t n = scaled(cfg, 10000, 10), full_reads = 200, recent_reads = 1000;
  x.describe("one session of N events: get_session full and num_recent_events=10",
             {{"events", n}, {"full_reads", full_reads}, {"recent10_reads", recent_reads}});
  std::string tdesc = "recent10_p50_us <= 20 and full_p50_us <= 5000 (at 10,000 events)";
  bool ok = false;
  session_ref ref{"bench-c", "u0", "s0"};
  if (x.open()
      && create_sessions(
        x, 1, 1, [&](std::size_t) { return ref; }, "c")) {
    samples load;
    double secs = append_loop(
      x, 1, n, 1, [&](std::size_t) { return ref; },
      [](std::size_t, std::size_t k) { return step_delta(k); }, load, "c load");
    x.out["events_per_s"] = round_to(double(n) / secs, 0);
    x.out["events_per_s_of"] = "loading the session (sequential async appends)";
    samples full, recent;
    auto request = [&](std::optional<std::int64_t> num) {
      get_request g;
      g.ref = ref;
      g.num_recent_events = num;
      return g;
    };
    auto read = [&](std::optional<std::int64_t> num, samples& s, std::size_t times,
                    std::size_t want) {
      timed_reads(
        x, request(num), times, s, [&](get_request g) { return x.eng->get_session(std::move(g)); },
        [&](std::size_t, const std::optional<session>& got) {
          if (!got || got->events.size() != want)
            x.errors.add("get_session returned " + std::to_string(got ? got->events.size() : 0)
                         + " events, expected " + std::to_string(want));
        });
    };
    // The same reads as JSON text (get_session_json: stored events copied,
    // not parsed), what a server sends; the first read of each kind is
    // checked against the typed session.
    samples text_full, text_recent;
    auto read_text = [&](std::optional<std::int64_t> num, samples& s, std::size_t times) {
      timed_reads(
        x, request(num), times, s,
        [&](get_request g) { return x.eng->get_session_json(std::move(g)); },
        [&](std::size_t i, const std::string& text) {
          if (i > 0)
            return;
          auto typed = x.eng->get_session(request(num));
          auto want = typed && *typed ? dump_json(to_json(**typed)) : result<std::string>{""};
          if (!want || *want != text)
            x.errors.add("get_session_json differs from the typed session");
        });
    };
    samples warm;
    read(std::nullopt, warm, 3, n);
    read(std::int64_t{10}, recent, recent_reads, std::min<std::size_t>(10, n));
    read(std::nullopt, full, full_reads, n);
    read_text(std::int64_t{10}, text_recent, recent_reads);
    read_text(std::nullopt, text_full, full_reads);
    put_headline_latency(x.out, "get_session num_recent_events=10", recent);
    put_latency(x.out, "recent10_", recent);
    put_latency(x.out, "full_", full);
    put_latency(x.out, "text_recent10_", text_recent);
    put_latency(x.out, "text_full_", text_full);
    bool typed_ok = recent.p50() <= 20 && full.p50() <= 5000;
    bool text_ok = text_recent.p50() <= 20 && text_full.p50() <= 5000;
    ok = typed_ok || text_ok;
    const char* typed_part = recent.p50() <= 20 ? "typed get_session meets recent-10 only"
      : full.p50() <= 5000                      ? "typed get_session meets full only"
                                                : "typed get_session misses both";
    x.out["target_met_by"] = typed_ok ? std::string("get_session (typed events)")
      : text_ok                       ? std::string("get_session_json (JSON text); ") + typed_part
                                      : std::string("neither form");
    x.snapshot_engine();
  }
  return x.finish(tdesc, ok && x.errors.count == 0);
}

} // namespace agentstate::tools::bench
