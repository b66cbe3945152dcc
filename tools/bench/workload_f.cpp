// SPDX-License-Identifier: Apache-2.0
// tools/bench/workload_f.cpp: workload f, list_sessions of one large app,
// first page and a deep page by token.
#include "tools/bench/workloads.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "tools/bench/session_load.hpp"

namespace agentstate::tools::bench {

ojson workload_f(const config& cfg) {
  run_ctx x(cfg, "f");
  const std::size_t sessions = scaled(cfg, 100000, 300), page = 100, reads = 300, width = 64;
  x.describe("list_sessions of one app: first page and a deep page by token",
             {{"sessions", sessions}, {"page_size", page}, {"reads", reads}});
  std::string tdesc = "first_p50_us <= 5000 and deep_p50_us <= 5000";
  bool ok = false;
  auto ref_of = [&](std::size_t j) {
    return session_ref{"bench-f", sid("u", j % 100), sid("s", j)};
  };
  auto tcreate = steady::now();
  if (x.open() && create_sessions(x, sessions, width, ref_of, "f")) {
    double csecs = since(tcreate);
    x.out["sessions_per_s"] = round_to(double(sessions) / csecs, 0);
    // Walk every page once: counts the sessions and finds the deep token.
    std::vector<std::string> tokens;
    std::size_t seen = 0;
    auto tw = steady::now();
    std::string token;
    for (;;) {
      list_request l;
      l.app_name = "bench-f";
      l.page_size = static_cast<std::int64_t>(page);
      l.page_token = token;
      auto r = x.eng->list_sessions(std::move(l));
      if (!r) {
        x.errors.add(r.err());
        break;
      }
      seen += r->sessions.size();
      if (!r->next_page_token)
        break;
      token = *r->next_page_token;
      tokens.push_back(token);
    }
    x.out["walk_seconds"] = round_to(since(tw), 3);
    x.out["pages"] = tokens.size() + 1;
    if (seen != sessions)
      x.errors.add("listing returned " + std::to_string(seen) + " sessions, expected "
                   + std::to_string(sessions));
    // The token of the page 90% of the way through.
    std::string deep = tokens.empty() ? std::string() : tokens[tokens.size() * 9 / 10];
    x.out["deep_page_index"] = tokens.empty() ? 0 : tokens.size() * 9 / 10 + 1;
    auto timed = [&](const std::string& tok, samples& s) {
      for (std::size_t i = 0; i < reads && x.errors.count == 0; ++i) {
        list_request l;
        l.app_name = "bench-f";
        l.page_size = static_cast<std::int64_t>(page);
        l.page_token = tok;
        auto r = timed_call(s, [&] { return x.eng->list_sessions(std::move(l)); });
        if (!r)
          x.errors.add(r.err());
        else if (r->sessions.empty())
          x.errors.add("an empty page");
      }
    };
    samples first, deepp;
    timed("", first);
    timed(deep, deepp);
    put_headline_latency(x.out, "list_sessions deep page (by token)", deepp);
    put_latency(x.out, "first_", first);
    put_latency(x.out, "deep_", deepp);
    ok = first.p50() <= 5000 && deepp.p50() <= 5000;
    x.snapshot_engine();
  }
  return x.finish(tdesc, ok && x.errors.count == 0);
}

} // namespace agentstate::tools::bench
