// SPDX-License-Identifier: Apache-2.0
// tools/bench/workload_i.cpp: workload i, a session's past: rewind_session,
// rewind_plan and get_session as_of_version on sessions of N and 10N events.
#include "tools/bench/workloads.hpp"

#include <cstdint>
#include <string>

#include "tools/bench/session_load.hpp"

namespace agentstate::tools::bench {

namespace {

// Loads `n` events into session `ref` (created here), awaited one at a
// time, five events per invocation ("inv-<k>"), each setting step keys.
bool load_session(run_ctx& x, const session_ref& ref, std::size_t n) {
  create_request c;
  c.app_name = ref.app_name;
  c.user_id = ref.user_id;
  c.session_id = ref.session_id;
  c.state = json{{"origin", true}};
  if (auto r = x.eng->create_session(std::move(c)); !r) {
    x.errors.add(r.err());
    return false;
  }
  for (std::size_t i = 0; i < n; ++i) {
    auto req = make_append(ref, step_delta(i));
    req.ev.invocation_id = "inv-" + std::to_string(i / 5);
    req.ev.actions.state_delta["k" + std::to_string(i % 50)] = i;
    if (auto r = x.eng->append_event(std::move(req)); !r) {
      x.errors.add(r.err());
      return false;
    }
  }
  return true;
}

// The point the rewinds of a session of `n` events go back to: the first
// invocation of its second half.
std::string mid_invocation(std::size_t n) {
  return "inv-" + std::to_string(n / 2 / 5);
}

} // namespace

ojson workload_i(const config& cfg) {
  run_ctx x(cfg, "i");
  const std::size_t small = scaled(cfg, 1000, 10), large = scaled(cfg, 10000, 10), reps = 30;
  x.describe("a session's past: rewind_session, rewind_plan, get_session as_of_version "
             "(half way, all its events, and num_recent_events=10) on sessions of N and 10N "
             "events",
             {{"events_small", small}, {"events_large", large}, {"calls_each", reps}});
  std::string tdesc = "rewind_small_p50_us <= 3000 and rewind_large_p50_us <= 30000 and "
                      "as_of_large_p50_us <= 30000 (at 1,000 and 10,000 events)";
  bool ok = false;
  session_ref small_ref{"bench-i", "u0", "small"}, large_ref{"bench-i", "u0", "large"};
  if (x.open() && load_session(x, small_ref, small) && load_session(x, large_ref, large)) {
    auto rewinds = [&](const session_ref& ref, std::size_t n, samples& s, samples& plan) {
      for (std::size_t i = 0; i < reps && x.errors.count == 0; ++i) {
        rewind_request r;
        r.ref = ref;
        r.before_invocation_id = mid_invocation(n);
        auto p = timed_call(plan, [&] { return x.eng->rewind_plan(r); });
        if (!p)
          x.errors.add(p.err());
        auto a = timed_call(s, [&] { return x.eng->rewind_session(r); });
        if (!a)
          x.errors.add(a.err());
      }
    };
    auto as_of = [&](const session_ref& ref, std::size_t n, std::optional<std::int64_t> num,
                     samples& s) {
      get_request g;
      g.ref = ref;
      g.as_of_version = n / 2;
      g.num_recent_events = num;
      timed_reads(
        x, g, reps, s, [&](get_request r) { return x.eng->get_session(std::move(r)); },
        [&](std::size_t, const std::optional<session>& got) {
          if (!got || got->version != n / 2)
            x.errors.add("get_session as_of_version returned another version");
        });
    };
    samples rw_small, plan_small, rw_large, plan_large, asof_small, asof_large, asof_large10;
    as_of(small_ref, small, std::nullopt, asof_small);
    as_of(large_ref, large, std::nullopt, asof_large);
    as_of(large_ref, large, std::int64_t{10}, asof_large10);
    rewinds(small_ref, small, rw_small, plan_small);
    rewinds(large_ref, large, rw_large, plan_large);
    put_headline_latency(x.out, "rewind_session of the session of N events", rw_small);
    put_latency(x.out, "rewind_small_", rw_small);
    put_latency(x.out, "rewind_large_", rw_large);
    put_latency(x.out, "rewind_plan_small_", plan_small);
    put_latency(x.out, "rewind_plan_large_", plan_large);
    put_latency(x.out, "as_of_small_", asof_small);
    put_latency(x.out, "as_of_large_", asof_large);
    put_latency(x.out, "as_of_large_recent10_", asof_large10);
    ok = rw_small.p50() <= 3000 && rw_large.p50() <= 30000 && asof_large.p50() <= 30000;
    x.snapshot_engine();
  }
  return x.finish(tdesc, ok && x.errors.count == 0);
}

} // namespace agentstate::tools::bench
