// SPDX-License-Identifier: Apache-2.0
// tools/bench/workload_h.cpp: workload h, the change feed: a watch's
// delivery latency, workload b's appends with 0 and with 100 watches in one
// run (the ratio), and the rate of catch-up reads of the log.
#include "tools/bench/workloads.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tools/bench/session_load.hpp"

namespace agentstate::tools::bench {

namespace {

// b's append phase (1,000* sessions x 20, 64 in flight) on a fresh store,
// with `watches` watches of one session each (sessions 0, 1, ...) counting
// what they receive; returns events/s, and the changes the watches got
// into `delivered` once they caught up.
double b_with_watches(run_ctx& x, std::size_t sessions, std::size_t watches,
                      std::uint64_t& delivered) {
  const std::size_t per = 20, width = 64, users = std::min<std::size_t>(100, sessions);
  auto ref_of = [&](std::size_t j) {
    return session_ref{"bench-h", sid("u", j % users), sid("s", j)};
  };
  x.dir.reset();
  if (!x.open() || !create_sessions(x, sessions, width, ref_of, "h"))
    return 0;
  std::atomic<std::uint64_t> got{0};
  std::vector<std::unique_ptr<watch_handle>> hs;
  for (std::size_t i = 0; i < std::min(watches, sessions); ++i) {
    auto ref = ref_of(i);
    watch_request r;
    r.scope = watch_scope::session;
    r.app_name = ref.app_name;
    r.user_id = ref.user_id;
    r.session_id = ref.session_id;
    auto h = x.eng->watch(r, [&got](change_page p) { got.fetch_add(p.changes.size()); });
    if (!h) {
      x.errors.add(h.err());
      return 0;
    }
    hs.push_back(std::move(*h));
  }
  samples lat;
  double secs = append_loop(
    x, sessions, per, width, ref_of, [](std::size_t, std::size_t k) { return step_delta(k); }, lat,
    "h appends");
  const std::uint64_t want = std::min(watches, sessions) * per;
  auto t0 = steady::now();
  while (got.load() < want && since(t0) < 30)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  delivered = got.load();
  if (delivered != want)
    x.errors.add("watches delivered " + std::to_string(delivered) + " of " + std::to_string(want)
                 + " changes");
  hs.clear();
  return double(sessions * per) / secs;
}

} // namespace

ojson workload_h(const config& cfg) {
  run_ctx x(cfg, "h");
  const std::size_t n = scaled(cfg, 5000, 10), sessions = scaled(cfg, 1000, 8);
  x.describe("the change feed: delivery latency of one watch over n awaited appends; b's "
             "appends with 0 and 100 session watches; catch-up reads of the whole log",
             {{"latency_events", n}, {"b_sessions", sessions}, {"b_events", sessions * 20}});
  const char* tdesc = "p50_us - ack_p50_us <= 50 and b_ratio_100_watches >= 0.85";
  bool ok = false;
  // 1. Latency: one watch of everything; each append awaited. An append's
  // change is matched to its call by its event id.
  if (x.open()) {
    session_ref ref{"bench-h", "u0", "s0"};
    create_request cr;
    cr.app_name = ref.app_name;
    cr.user_id = ref.user_id;
    cr.session_id = ref.session_id;
    if (auto c = x.eng->create_session(std::move(cr)); !c)
      x.errors.add(c.err());
    std::mutex mtx;
    std::unordered_map<std::string, steady::time_point> sent;
    samples deliver, ack;
    std::atomic<std::size_t> got{0};
    auto h = x.eng->watch(watch_request{}, [&](change_page p) {
      auto now = steady::now();
      std::lock_guard<std::mutex> lk(mtx);
      for (auto& c : p.changes)
        if (c.ev)
          if (auto it = sent.find(c.ev->id); it != sent.end())
            deliver.us.push_back(us_between(it->second, now));
      got.fetch_add(p.changes.size());
    });
    if (!h)
      x.errors.add(h.err());
    for (std::size_t i = 0; i < n && x.errors.count == 0; ++i) {
      auto req = make_append(ref, step_delta(i));
      req.ev.id = "h" + std::to_string(i);
      {
        std::lock_guard<std::mutex> lk(mtx);
        sent[req.ev.id] = steady::now();
      }
      auto r = timed_call(ack, [&] { return x.eng->append_event(std::move(req)); });
      if (!r)
        x.errors.add(r.err());
    }
    auto t0 = steady::now();
    while (got.load() < n && since(t0) < 30)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (h)
      (*h)->cancel();
    std::lock_guard<std::mutex> lk(mtx);
    put_latency(x.out, "", deliver);
    put_latency(x.out, "ack_", ack);
    x.out["latency_of"] = "delivery: an append's call to the watch's callback with its change "
                          "(ack_: the call to its answer; appends awaited one at a time)";
    if (deliver.us.size() != n)
      x.errors.add("the watch delivered " + std::to_string(deliver.us.size()) + " of "
                   + std::to_string(n) + " appends");
    if (!deliver.us.empty() && !ack.us.empty())
      ok = deliver.p50() - ack.p50() <= 50;
  }
  x.close();
  // 2. Throughput: b with 0 and with 100 watches, alternated over `pairs`
  // fresh stores (one phase is ~0.2 s of appends, so a single pair swings
  // with the machine): each pair's ratio, and their median.
  constexpr int pairs = 5;
  std::vector<double> eps0, eps100, ratios;
  std::uint64_t d100 = 0;
  for (int i = 0; i < pairs && x.errors.count == 0; ++i) {
    std::uint64_t d0 = 0;
    double e0 = b_with_watches(x, sessions, 0, d0);
    // 3. Catch-up (once): the whole log of the first run with 0 watches,
    // read back.
    if (i == 0 && x.errors.count == 0) {
      std::size_t read = 0;
      auto t0 = steady::now();
      watch_request all;
      for (;;) {
        auto p = x.eng->read_changes(all, 10000);
        if (!p) {
          x.errors.add(p.err());
          break;
        }
        read += p->changes.size();
        all.from = p->cursor;
        if (p->at_head && p->changes.empty())
          break;
      }
      double secs = since(t0);
      x.out["catch_up_changes"] = read;
      x.out["catch_up_changes_per_s"] = round_to(double(read) / secs, 0);
    }
    x.close();
    if (x.errors.count != 0)
      break;
    double e100 = b_with_watches(x, sessions, 100, d100);
    if (i + 1 < pairs)
      x.close();
    if (e0 > 0 && e100 > 0) {
      eps0.push_back(e0);
      eps100.push_back(e100);
      ratios.push_back(e100 / e0);
    }
  }
  if (x.eng)
    x.snapshot_engine();
  auto median = [](std::vector<double> v) {
    if (v.empty())
      return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  x.out["events_per_s"] = round_to(median(eps100), 0);
  x.out["b_events_per_s_0_watches"] = round_to(median(eps0), 0);
  x.out["b_events_per_s_100_watches"] = round_to(median(eps100), 0);
  x.out["b_changes_delivered_100_watches"] = d100;
  if (!ratios.empty()) {
    ojson each = ojson::array();
    for (double r : ratios)
      each.push_back(round_to(r, 3));
    x.out["b_ratios_100_watches"] = std::move(each);
    x.out["b_ratio_100_watches"] = round_to(median(ratios), 3);
    ok = ok && median(ratios) >= 0.85;
  }
  return x.finish(tdesc, ok && x.errors.count == 0);
}

} // namespace agentstate::tools::bench
