// SPDX-License-Identifier: Apache-2.0
// A program outside the project that uses an installed agentstate (the package test:
// tests/package/package_test.sh builds it with find_package, with pkg-config and from a
// .deb). It creates a session and appends an event in an LMDB store, closes the engine,
// reopens the store and checks what it reads back.
//
// usage: consumer STORE_DIR EXPECTED_VERSION   exit 0 when every check holds, 1 otherwise
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include <agentstate/engine.hpp>
#include <agentstate/version.hpp>

using namespace agentstate;

namespace {

int fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "consumer: %s: %s\n", what, detail.c_str());
  return 1;
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 3)
    return fail("usage", "consumer STORE_DIR EXPECTED_VERSION");
  const std::string dir = argv[1];
  if (std::strcmp(version_string, argv[2]) != 0)
    return fail("version.hpp says", version_string);

  options opts;
  opts.dir = dir;
  {
    auto eng = engine::open(opts);
    if (!eng)
      return fail("open", to_string(eng.err()));
    auto s = (*eng)->create_session({"consumer-app", "u1", "s1", json{{"user:lang", "en"}}});
    if (!s)
      return fail("create", to_string(s.err()));
    append_request a;
    a.ref = {"consumer-app", "u1", "s1"};
    a.ev.author = "agent";
    a.ev.invocation_id = "inv-1";
    a.ev.actions.state_delta = json{{"step", 2}, {"temp:scratch", "x"}};
    auto r = (*eng)->append_event(a);
    if (!r)
      return fail("append", to_string(r.err()));
    if (auto c = (*eng)->close(); !c)
      return fail("close", to_string(c.err()));
  }
  if (!std::filesystem::exists(std::filesystem::path(dir) / "data.mdb"))
    return fail("no LMDB data file in", dir);

  auto eng = engine::open(opts);
  if (!eng)
    return fail("reopen", to_string(eng.err()));
  get_request g;
  g.ref = {"consumer-app", "u1", "s1"};
  auto got = (*eng)->get_session(g);
  if (!got || !*got)
    return fail("get after reopen", got ? "no session" : to_string(got.err()));
  const json want = {{"step", 2}, {"user:lang", "en"}};
  if ((*got)->state != want || (*got)->events.size() != 1)
    return fail("read back",
                (*got)->state.dump() + " with " + std::to_string((*got)->events.size())
                  + " events");
  std::printf("consumer: agentstate %s, session %s v%llu %s\n", version_string, (*got)->id.c_str(),
              static_cast<unsigned long long>((*got)->version), (*got)->state.dump().c_str());
  return 0;
}
