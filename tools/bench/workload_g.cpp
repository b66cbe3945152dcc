// SPDX-License-Identifier: Apache-2.0
// tools/bench/workload_g.cpp: workload g, concurrent writers of user: and
// app: keys; checks the final values are the last acknowledged writes.
#include "tools/bench/workloads.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "tools/bench/session_load.hpp"

namespace agentstate::tools::bench {

ojson workload_g(const config& cfg) {
  run_ctx x(cfg, "g");
  const std::size_t sessions = scaled(cfg, 100, 4), per = 50;
  const std::size_t users = std::max<std::size_t>(1, std::min<std::size_t>(10, sessions / 2));
  x.describe("sessions of users all writing one user: key per user and one app: key, concurrently",
             {{"sessions", sessions},
              {"users", users},
              {"events", sessions * per + sessions},
              {"in_flight", sessions}});
  const std::string app = "bench-g";
  auto ref_of = [&](std::size_t j) { return session_ref{app, sid("u", j % users), sid("s", j)}; };
  auto value_of = [](std::size_t j, std::size_t k) {
    return "s" + std::to_string(j) + "#" + std::to_string(k);
  };
  bool correct = true;
  std::vector<std::string> failed_checks;
  auto check = [&](bool c, const std::string& what) {
    if (!c) {
      correct = false;
      if (failed_checks.size() < 5)
        failed_checks.push_back(what);
    }
  };
  auto scope_value = [&](const std::optional<std::string>& user) -> std::string {
    auto r = user ? x.eng->get_user_state(app, *user) : x.eng->get_app_state(app);
    if (!r) {
      x.errors.add(r.err());
      return "<error>";
    }
    return r->value("last", std::string("<missing>"));
  };
  // Every reader agrees: scope actors, and each session's merged snapshot.
  auto check_agree = [&](const char* phase) {
    auto a = scope_value(std::nullopt);
    for (std::size_t u = 0; u < users; ++u) {
      auto uv = scope_value(sid("u", u));
      for (std::size_t j = u; j < sessions; j += users) {
        get_request g;
        g.ref = ref_of(j);
        g.num_recent_events = 0;
        auto r = x.eng->get_session(std::move(g));
        if (!r || !*r) {
          check(false, std::string(phase) + ": session " + std::to_string(j) + " unreadable");
          continue;
        }
        auto& st = (*r)->state;
        check(st.value("user:last", std::string()) == uv,
              std::string(phase) + ": session " + std::to_string(j)
                + " sees user:last different from the user scope");
        check(st.value("app:last", std::string()) == a,
              std::string(phase) + ": session " + std::to_string(j)
                + " sees app:last different from the app scope");
      }
    }
  };
  bool ok = false;
  if (x.open() && create_sessions(x, sessions, sessions, ref_of, "g")) {
    samples lat;
    x.cpu_start();
    double secs = append_loop(
      x, sessions, per, sessions, ref_of,
      [&](std::size_t j, std::size_t k) {
        auto v = value_of(j, k);
        return json{{"user:last", v}, {"app:last", v}, {"step", k}};
      },
      lat, "g");
    x.cpu_stop(double(sessions * per));
    x.out["events_per_s"] = round_to(double(sessions * per) / secs, 0);
    put_headline_latency(x.out, "append ack (async API, one chain per session)", lat);
    // 1. After the concurrent phase: a session's writes commit in its order, so
    // each final value must be the last write of one of the writing sessions.
    auto a = scope_value(std::nullopt);
    bool a_ok = false;
    for (std::size_t j = 0; j < sessions; ++j)
      a_ok = a_ok || a == value_of(j, per - 1);
    check(a_ok, "app:last = '" + a + "' is not the last write of any session");
    for (std::size_t u = 0; u < users; ++u) {
      auto v = scope_value(sid("u", u));
      bool u_ok = false;
      for (std::size_t j = u; j < sessions; j += users)
        u_ok = u_ok || v == value_of(j, per - 1);
      check(u_ok,
            "user:last of u" + std::to_string(u) + " = '" + v
              + "' is not the last write of any of its sessions");
    }
    check_agree("concurrent");
    for (std::size_t j = 0; j < sessions; ++j) {
      get_request g;
      g.ref = ref_of(j);
      g.num_recent_events = 0;
      auto r = x.eng->get_session(std::move(g));
      check(r && *r && (*r)->version == per, "session " + std::to_string(j) + " lost events");
    }
    // 2. A sequential tail: one more write per session, each awaited; the last
    // acknowledged write of each key is then known exactly.
    std::vector<std::string> want_user(users);
    std::string want_app;
    for (std::size_t j = 0; j < sessions; ++j) {
      auto v = "tail-" + std::to_string(j);
      auto r = x.eng->append_event(make_append(ref_of(j), json{{"user:last", v}, {"app:last", v}}));
      if (!r) {
        x.errors.add(r.err());
        break;
      }
      want_user[j % users] = v;
      want_app = v;
    }
    auto verify_tail = [&](const char* phase) {
      check(scope_value(std::nullopt) == want_app,
            std::string(phase) + ": app:last is not the last acknowledged write");
      for (std::size_t u = 0; u < users; ++u)
        check(scope_value(sid("u", u)) == want_user[u],
              std::string(phase) + ": user:last of u" + std::to_string(u)
                + " is not the last acknowledged write");
      check_agree(phase);
    };
    verify_tail("tail");
    x.snapshot_engine();
    if (cfg.mode != durability::memory) {
      x.close();
      if (x.reopen())
        verify_tail("reopened");
    }
    ok = correct;
  }
  x.out["correct"] = correct && x.errors.count == 0;
  if (!failed_checks.empty())
    x.out["failed_checks"] = failed_checks;
  return x.finish("correct: final user:/app: values equal the last acknowledged write",
                  ok && x.errors.count == 0);
}

} // namespace agentstate::tools::bench
