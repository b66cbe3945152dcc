// SPDX-License-Identifier: Apache-2.0
// `agentstate demo`: a short guided run on an LMDB store. It shows scoping
// across two users and three sessions, temp: state that never reaches disk, a
// crowd of concurrent agents appending (with a measured events/s line), and
// everything still there after the engine is closed and reopened. Every claim
// it prints is checked; a failed check exits 1.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "agentstate/engine.hpp"
#include "tools/cli.hpp"
#include "tools/commands.hpp"

namespace agentstate::tools {

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("   %s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok)
    ++failures;
}

template <class T>
T must(result<T> r, const char* what) {
  if (!r) {
    say("demo", "%s failed: %s", what, to_string(r.err()).c_str());
    std::exit(exit_failed);
  }
  return std::move(*r);
}

void must(result<void> r, const char* what) {
  if (!r) {
    say("demo", "%s failed: %s", what, to_string(r.err()).c_str());
    std::exit(exit_failed);
  }
}

event make_event(std::string author, std::string invocation, json delta) {
  event ev;
  ev.author = std::move(author);
  ev.invocation_id = std::move(invocation);
  ev.actions.state_delta = std::move(delta);
  ev.content = json{{"parts", json::array({json{{"text", "..."}}})}};
  return ev;
}

session fetch(engine& eng, const session_ref& ref, std::string invocation = {}) {
  get_request g;
  g.ref = ref;
  g.num_recent_events = 0;
  g.invocation_id = std::move(invocation);
  auto s = must(eng.get_session(g), "get_session");
  if (!s) {
    say("demo", "session %s vanished", ref.session_id.c_str());
    std::exit(exit_failed);
  }
  return std::move(*s);
}

} // namespace

struct demo_options {
  std::string dir = "./agentstate-data";
  bool fresh = false;
  std::string agents = "64", appends = "200";
};

int run_demo(const demo_options& o);

runner define_demo(command_line& cl) {
  auto o = std::make_shared<demo_options>();
  cl.usage = "agentstate demo [--dir DIR] [--fresh] [--agents N] [--appends N]";
  cl.description = R"(A short guided run of the engine on an LMDB store: scopes across two users
and three sessions, temp: state that never reaches disk, a crowd of
concurrent agents appending (with a measured events/s line), and all of it
still there after the engine is closed and reopened. Every claim it prints
is checked.)";
  cl.exit_status(exit_ok, "every check held");
  cl.exit_status(exit_failed,
                 "a check or an engine call failed (stdout marks a failed check "
                 "FAIL; stderr names the call)");
  cl.app
    .add_option("--dir", o->dir,
                "store directory (default ./agentstate-data); each run adds a\n"
                "new app to it, so earlier runs' data stays intact")
    ->type_name("DIR");
  cl.app.add_flag("--fresh", o->fresh, "delete the store in DIR first (only if DIR holds a store)");
  cl.app.add_option("--agents", o->agents, "concurrent agents in the crowd step (default 64)")
    ->type_name("N");
  cl.app.add_option("--appends", o->appends, "events each agent appends (default 200)")
    ->type_name("N");
  return [o] { return run_demo(*o); };
}

/// `v` as a count 1..100000; 0 for anything else.
int demo_count(const std::string& v) {
  if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos)
    return 0;
  int n = std::stoi(v);
  return n <= 100000 ? n : 0;
}

int run_demo(const demo_options& o) {
  const std::string& dir = o.dir;
  const bool fresh = o.fresh;
  const int agents = demo_count(o.agents), appends = demo_count(o.appends);
  if (agents < 1)
    return usage_error("demo", "--agents takes a whole number 1..100000, not '" + o.agents + "'");
  if (appends < 1)
    return usage_error("demo", "--appends takes a whole number 1..100000, not '" + o.appends + "'");
  namespace fs = std::filesystem;
  if (fresh && fs::exists(fs::path(dir) / "data.mdb")) {
    std::error_code ec;
    for (auto name : {"data.mdb", "lock.mdb", "agentstate.lock"})
      fs::remove(fs::path(dir) / name, ec);
  }
  options opts;
  opts.dir = dir;
  opts.mode = durability::sync;
  std::mt19937 rng{std::random_device{}()};
  const std::string app = "travel-" + std::to_string(rng() % 1000000);

  std::printf("agentstate demo: store %s (LMDB, fsync per group commit), app '%s'\n\n", dir.c_str(),
              app.c_str());
  auto eng = must(engine::open(opts), "open");

  // -- 1. scopes -----------------------------------------------------------------
  std::printf("1. Scopes: app: is shared by everyone, user: by one user's sessions,\n"
              "   plain keys by one session, temp: by one invocation only.\n");
  session_ref a1{app, "alice", "trip-paris"}, a2{app, "alice", "trip-rome"},
    b1{app, "bob", "trip-oslo"};
  create_request c;
  c.app_name = app;
  c.user_id = "alice";
  c.session_id = a1.session_id;
  c.state =
    json{{"app:currency", "EUR"}, {"user:seat", "aisle"}, {"city", "Paris"}, {"temp:scratch", 1}};
  auto s = must(eng->create_session(c), "create_session");
  std::printf("   alice/trip-paris created: %s\n", s.state.dump().c_str());
  check(!s.state.contains("temp:scratch"), "temp: keys in an initial state are dropped");
  c.session_id = a2.session_id;
  c.state = json{{"city", "Rome"}};
  s = must(eng->create_session(c), "create_session");
  std::printf("   alice/trip-rome  created: %s\n", s.state.dump().c_str());
  check(s.state.value("user:seat", "") == "aisle" && s.state.value("app:currency", "") == "EUR",
        "a second session of alice sees app: and user: keys");
  check(s.state.value("city", "") == "Rome", "but only its own session keys");
  c.user_id = "bob";
  c.session_id = b1.session_id;
  c.state = json{{"city", "Oslo"}};
  s = must(eng->create_session(c), "create_session");
  std::printf("   bob/trip-oslo    created: %s\n", s.state.dump().c_str());
  check(s.state.value("app:currency", "") == "EUR" && !s.state.contains("user:seat"),
        "bob sees the app: key, not alice's user: key");

  // -- 2. an invocation with temp: state -----------------------------------------
  std::printf("\n2. An invocation writes temp:, user: and session keys in one event.\n");
  append_request ar;
  ar.ref = a1;
  ar.ev = make_event("planner", "inv-1",
                     json{{"temp:draft", "3 hotels"}, {"user:seat", "window"}, {"nights", 3}});
  auto stored = must(eng->append_event(ar), "append_event");
  std::printf("   stored event v%llu: state_delta %s\n",
              static_cast<unsigned long long>(stored.version),
              stored.ev.actions.state_delta.dump().c_str());
  check(!stored.ev.actions.state_delta.contains("temp:draft"),
        "the stored event carries no temp: key");
  check(fetch(*eng, a1, "inv-1").state.value("temp:draft", "") == "3 hotels",
        "a read within invocation inv-1 sees temp:draft");
  check(!fetch(*eng, a1).state.contains("temp:draft"), "a read outside it does not");
  check(fetch(*eng, a2).state.value("user:seat", "") == "window",
        "alice's other session sees user:seat=window at once");
  must(eng->end_invocation(a1, "inv-1"), "end_invocation");
  check(!fetch(*eng, a1, "inv-1").state.contains("temp:draft"),
        "ending the invocation drops its temp: state");

  // -- 3. a crowd ------------------------------------------------------------------
  std::printf("\n3. A crowd: %d agents append %d events each, concurrently, each to its own\n"
              "   session, all bumping one app: key; every append waits for its fsync.\n",
              agents, appends);
  std::vector<session_ref> crowd;
  for (int i = 0; i < agents; ++i) {
    create_request cr;
    cr.app_name = app;
    cr.user_id = "crowd-" + std::to_string(i % 8);
    cr.session_id = "agent-" + std::to_string(i);
    must(eng->create_session(cr), "create_session");
    crowd.push_back({app, cr.user_id, cr.session_id});
  }
  std::atomic<int> errors{0};
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < agents; ++i)
    threads.emplace_back([&, i] {
      for (int j = 1; j <= appends; ++j) {
        append_request r;
        r.ref = crowd[i];
        r.ev = make_event("agent-" + std::to_string(i), "run-" + std::to_string(i),
                          json{{"step", j}, {"app:last_step", j}, {"user:active", i}});
        if (!eng->append_event(std::move(r)))
          ++errors;
      }
    });
  for (auto& t : threads)
    t.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  long total = static_cast<long>(agents) * appends;
  auto st = eng->stats();
  std::printf("   %ld events in %.2f s: %.0f events/s durable (%d agents, mean group commit "
              "%.1f events)\n",
              total, secs, total / secs, agents,
              st.commits ? double(st.batched_writes) / double(st.commits) : 0.0);
  check(errors.load() == 0, "no append failed");
  bool all = true;
  for (auto& r : crowd)
    all = all && fetch(*eng, r).version == static_cast<std::uint64_t>(appends);
  check(all, "every agent's session holds all its events, versions 1.." + std::to_string(appends));

  // -- 4. close and reopen -----------------------------------------------------------
  std::printf("\n4. Close the engine, open the store again.\n");
  must(eng->close(), "close");
  eng.reset();
  auto t1 = std::chrono::steady_clock::now();
  eng = must(engine::open(opts), "reopen");
  std::printf(
    "   reopened in %.1f ms\n",
    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count());
  auto p = fetch(*eng, a1, "inv-1");
  check(p.version == 1 && p.state.value("nights", 0) == 3, "alice/trip-paris: event and state");
  check(p.state.value("user:seat", "") == "window" && p.state.value("app:currency", "") == "EUR",
        "shared scopes survived");
  check(!p.state.contains("temp:draft") && !p.state.contains("temp:scratch"),
        "no temp: key reached disk");
  all = true;
  long events = 0;
  for (auto& r : crowd) {
    get_request g;
    g.ref = r;
    auto full = must(eng->get_session(g), "get_session");
    all = all && full && full->events.size() == static_cast<std::size_t>(appends);
    if (full)
      events += static_cast<long>(full->events.size());
  }
  check(all, "all " + std::to_string(events) + " crowd events are still there");
  auto appstate = must(eng->get_app_state(app), "get_app_state");
  check(appstate.value("last_step", 0) == appends, "app:last_step = " + std::to_string(appends));
  list_request l;
  l.app_name = app;
  l.user_id = "alice";
  auto page = must(eng->list_sessions(l), "list_sessions");
  check(page.sessions.size() == 2, "alice has 2 sessions");
  must(eng->close(), "close");
  std::printf("\n%s\n", failures == 0 ? "demo: all checks passed" : "demo: CHECKS FAILED");
  if (failures != 0)
    say("demo", "%d checks failed (marked FAIL above)", failures);
  return failures == 0 ? exit_ok : exit_failed;
}

static const bool demo_registered = register_command(
  {"demo", "a guided run of the engine on an LMDB store (./agentstate-data)", define_demo});

} // namespace agentstate::tools
