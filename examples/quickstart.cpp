// SPDX-License-Identifier: Apache-2.0
// examples/quickstart.cpp: the smallest complete use of the engine. Built with
// the project and run as a CTest smoke test; the README quotes it.
//
// usage: quickstart [STORE_DIR]   (default: a new directory under /tmp,
//                                   removed at exit)
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>

#include "agentstate/engine.hpp"

using namespace agentstate;

namespace {

int run(const std::string& dir) {
  options opts;
  opts.dir = dir; // durability::sync by default
  auto eng = engine::open(opts);
  if (!eng) {
    std::fprintf(stderr, "open: %s\n", to_string(eng.err()).c_str());
    return 1;
  }

  // Blocking form: an empty session id gets a generated one.
  create_request c{"my-app", "alice", "", json{{"user:lang", "en"}}};
  auto s = (*eng)->create_session(c);
  if (!s) {
    std::fprintf(stderr, "create: %s\n", to_string(s.err()).c_str());
    return 1;
  }

  // Async form: the callback runs once, on an engine thread, after the commit.
  append_request a;
  a.ref = {"my-app", "alice", s->id};
  a.ev.author = "planner";
  a.ev.invocation_id = "inv-1";
  a.ev.actions.state_delta = json{{"step", 1}, {"temp:scratch", "x"}, {"app:calls", 7}};
  std::promise<result<append_result>> done;
  (*eng)->append_event(a, [&done](result<append_result> r) { done.set_value(std::move(r)); });
  auto appended = done.get_future().get();
  if (!appended) {
    std::fprintf(stderr, "append: %s\n", to_string(appended.err()).c_str());
    return 1;
  }

  // Reads merge session, user: and app: state; temp: only within the invocation.
  get_request g;
  g.ref = a.ref;
  auto got = (*eng)->get_session(g);
  if (!got || !*got) {
    std::fprintf(stderr, "get failed\n");
    return 1;
  }
  std::printf("session %s v%llu: %s\n", (*got)->id.c_str(),
              static_cast<unsigned long long>((*got)->version), (*got)->state.dump().c_str());
  return (*got)->state == json{{"step", 1}, {"app:calls", 7}, {"user:lang", "en"}} ? 0 : 1;
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
