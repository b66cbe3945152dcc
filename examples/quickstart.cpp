// SPDX-License-Identifier: Apache-2.0
// examples/quickstart.cpp: the smallest complete use of the engine, then one
// invocation over the state API, then a watch of the session's changes. Built with the project and run as a CTest
// smoke test (example_quickstart), which fails when a printed check fails.
// The README quotes the regions between `// [readme:NAME]` and
// `// [/readme:NAME]` word for word; tests/tools/readme_snippets_test.cpp
// checks that they are identical.
//
// usage: quickstart [STORE_DIR]   (default: a new directory under /tmp,
//                                   removed at exit)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <utility>

#include "agentstate/engine.hpp"
#include "agentstate/invocation.hpp"

using namespace agentstate;

namespace {

// Prints what failed; the exit code of a failed step.
int fail(const char* what, const error& e) {
  std::fprintf(stderr, "%s: %s\n", what, to_string(e).c_str());
  return 1;
}

// Prints one check; false when it failed.
bool check(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  return ok;
}

// One invocation on session `id` of the engine `eng`: typed reads, writes in
// every scope, an atomic modify, a template and an output key.
int run_invocation(const std::unique_ptr<engine>& eng, const std::string& id) {
  // The README quotes this region as it stands.
  // clang-format off
  // [readme:invocation]
  auto inv = invocation::begin(*eng, {"my-app", "alice", id});      // waits its turn
  if (!inv)
    return fail("begin", inv.err());
  state& st = inv->state();
  int visits = st.get<int>("user:visits", 0);                       // typed, with fallback
  st.set("user:visits", visits + 1);                                // every session of alice
  st.set("temp:draft", "an outline");                               // this invocation only
  st.remove("stale_plan");                                          // an explicit delete
  st.modify("app:calls", 0, [](const json& n) { return n.get<int>() + 1; });  // atomic
  auto names = st.user().keys();                                    // names without "user:"
  auto prompt = inv->inject("Help {user:name}. Draft: {temp:draft?}");       // I2
  if (!prompt)
    return fail("inject", prompt.err());
  event reply;
  reply.author = "planner";
  reply.content = json{{"parts", {{{"text", "Plan for: " + *prompt}}}}};
  auto stored = inv->append_final(reply, output_key{"summary"});   // I3: carries the change
  if (!stored)
    return fail("append_final", stored.err());
  inv->end();                                                       // drops temp:/turn:
  // [/readme:invocation]
  // clang-format on

  auto after = eng->get_session(get_request{{"my-app", "alice", id}, 0, {}, {}});
  if (!after || !*after)
    return fail("get", after ? error{errc::not_found, id} : after.err());
  const json& s = (*after)->state;
  bool ok = check(*prompt == "Help Alice. Draft: an outline", "the template read user: and temp:");
  ok &= check(s.value("summary", "") == "Plan for: Help Alice. Draft: an outline",
              "the output key holds the reply's text");
  ok &= check(s.value("user:visits", 0) == 1, "user:visits counted once");
  ok &= check(s.value("app:calls", 0) == 8, "app:calls incremented atomically (7 -> 8)");
  ok &= check(!s.contains("temp:draft"), "temp:draft never reached the store");
  ok &= check(std::find(names.begin(), names.end(), "name") != names.end(),
              "the user view lists names without their prefix");
  return ok ? 0 : 1;
}

// Reads session `id`, then watches it from the read's cursor: the append
// that follows is the first change delivered, and nothing before it.
int run_watch(const std::unique_ptr<engine>& eng, const std::string& id) {
  // The README quotes this region as it stands.
  // clang-format off
  // [readme:watch]
  auto seen = eng->get_session(get_request{{"my-app", "alice", id}, 0, {}, {}});
  if (!seen || !*seen)
    return fail("get", seen ? error{errc::not_found, id} : seen.err());
  watch_request w;
  w.scope = watch_scope::session;          // or user, app (+ include_sessions), all
  w.app_name = "my-app";
  w.user_id = "alice";
  w.session_id = id;
  w.from = (*seen)->cursor;                // exclusive: what the read did not show
  std::promise<change> next;
  bool first = true;
  auto watching = eng->watch(w, [&](change_page page) {  // one batch at a time, in commit order
    for (auto& c : page.changes)
      if (std::exchange(first, false))
        next.set_value(c);
  });
  if (!watching)
    return fail("watch", watching.err());
  append_request a{{"my-app", "alice", id}, {}, {}, {}};
  a.ev.author = "critic";
  a.ev.actions.state_delta = json{{"verdict", "ok"}};
  if (auto r = eng->append_event(a); !r)
    return fail("append", r.err());
  change c = next.get_future().get();      // c.version == (*seen)->version + 1
  (*watching)->cancel();                   // or let the handle go
  // [/readme:watch]
  // clang-format on
  bool ok = check(c.kind == change_kind::append && c.version == (*seen)->version + 1,
                  "the watch's first change is the append after the read");
  ok &= check(c.state_delta == json{{"verdict", "ok"}}, "the change carries its state delta");
  return ok ? 0 : 1;
}

int run(const std::string& dir) {
  // The README quotes this region as it stands.
  // clang-format off
  // [readme:quickstart]
  options opts;
  opts.dir = dir; // durability::sync by default
  auto eng = engine::open(opts);
  if (!eng)
    return fail("open", eng.err());

  // Blocking form: an empty session id gets a generated one.
  create_request c{"my-app", "alice", "", json{{"user:lang", "en"}, {"user:name", "Alice"}}};
  auto s = (*eng)->create_session(c);
  if (!s)
    return fail("create", s.err());

  // Async form: the callback runs once, on an engine thread, after the commit.
  append_request a;
  a.ref = {"my-app", "alice", s->id};
  a.ev.author = "planner";
  a.ev.invocation_id = "inv-1";
  a.ev.actions.state_delta = json{{"step", 1}, {"temp:scratch", "x"}, {"app:calls", 7}};
  std::promise<result<append_result>> done;
  (*eng)->append_event(a, [&done](result<append_result> r) { done.set_value(std::move(r)); });
  if (auto appended = done.get_future().get(); !appended)
    return fail("append", appended.err());

  // Reads merge session, user: and app: state; temp: only within the invocation.
  get_request g;
  g.ref = a.ref;
  auto got = (*eng)->get_session(g);
  // [/readme:quickstart]
  // clang-format on
  if (!got || !*got)
    return fail("get", got ? error{errc::not_found, s->id} : got.err());
  std::printf("session %s v%llu: %s\n", (*got)->id.c_str(),
              static_cast<unsigned long long>((*got)->version), (*got)->state.dump().c_str());
  bool ok =
    check((*got)->state
            == json{{"step", 1}, {"app:calls", 7}, {"user:lang", "en"}, {"user:name", "Alice"}},
          "the merged state holds every scope but temp:");
  int rc = run_invocation(*eng, s->id);
  int wrc = run_watch(*eng, s->id);
  return ok && rc == 0 && wrc == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  if (argc > 1)
    return run(argv[1]);
  char tmpl[] = "/tmp/agentstate-quickstart-XXXXXX";
  if (!::mkdtemp(tmpl)) {
    std::perror("quickstart: mkdtemp");
    return 1;
  }
  int rc = run(tmpl); // the engine is closed when run returns
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
  return rc;
}
