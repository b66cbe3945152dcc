// SPDX-License-Identifier: Apache-2.0
// tests/crash/crash_child.cpp: the process the kill -9 loop (crash_loop.cpp)
// kills. Not a test by itself.
//
//   crash_child DIR sync|nosync THREADS
//
// Opens the LMDB store DIR, makes sure every session of the fixed workload
// exists, then appends forever from THREADS threads (each thread owns some
// sessions and appends to them in turn, blocking calls). Event ids and values
// are deterministic, so the parent can check the store against the acks:
//
//   session (app, user, sid), its n-th event: id "<sid>#<n>", stored at
//   version n, delta {"n": n, "temp:t": n, "user:<sid>.n": n,
//                     "app:<user>.<sid>.n": n, "<sid>.hist": [..]?}
//
// The child re-derives n from the store at start (n = version + 1), so every
// run continues where the last one stopped. Before appending it re-sends the
// last stored event id of each session and checks the engine answers with the
// original version (A6: idempotent retries after a restart).
//
// stdout (a pipe to the parent), one line per event, written with one
// write() (atomic: shorter than PIPE_BUF) after the append returned ok:
//   ack APP USER SID N VERSION
// and "ready" once the sessions exist. With CRASH_CHILD_LIE=1 in the
// environment it acks each append *before* making it (a broken engine, to
// show that the parent's checks catch lost acknowledged appends). Exit codes: 0 never (it is killed),
// 2 usage, 3 an engine call failed or answered wrongly (stderr says which).
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "agentstate/engine.hpp"
#include "crash/workload.hpp"

using namespace agentstate;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "crash_child: %s\n", what.c_str());
  std::fflush(stderr);
  std::_Exit(3);
}

void say(const std::string& line) {
  auto s = line + "\n";
  std::size_t off = 0;
  while (off < s.size()) {
    auto n = ::write(1, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      std::_Exit(0); // parent gone
    off += static_cast<std::size_t>(n);
  }
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: crash_child DIR sync|nosync|nosync-write-map THREADS\n");
    return 2;
  }
  options o;
  o.dir = argv[1];
  o.mode = std::string(argv[2]) == "sync" ? durability::sync : durability::nosync;
  o.write_map = std::string(argv[2]) == "nosync-write-map";
  int threads = std::atoi(argv[3]);
  if (threads < 1)
    threads = 1;
  auto opened = engine::open(o);
  if (!opened)
    fail("open: " + to_string(opened.err()));
  auto& e = **opened;

  auto sessions = crashload::all_sessions();
  std::vector<std::uint64_t> next(sessions.size());
  for (std::size_t i = 0; i < sessions.size(); ++i) {
    const auto& ref = sessions[i];
    auto got = e.get_session(get_request{ref, 1, std::nullopt, {}});
    if (!got)
      fail("get_session: " + to_string(got.err()));
    if (!got.value()) {
      create_request c{ref.app_name, ref.user_id, ref.session_id, json::object()};
      auto r = e.create_session(c);
      if (!r && r.code() != errc::already_exists)
        fail("create_session: " + to_string(r.err()));
      next[i] = 1;
      continue;
    }
    auto version = got.value()->version;
    next[i] = version + 1;
    if (version > 0) {
      // A6 after restart: the last stored event again -> its original version.
      auto again =
        e.append_event(append_request{ref, crashload::make_event(ref, version), std::nullopt, {}});
      if (!again)
        fail("re-append " + crashload::event_id(ref, version) + ": " + to_string(again.err()));
      if (again->version != version)
        fail("re-append " + crashload::event_id(ref, version) + " answered version "
             + std::to_string(again->version) + ", stored at " + std::to_string(version));
    }
  }
  say("ready");

  const bool lie = std::getenv("CRASH_CHILD_LIE") != nullptr;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (;;) {
        for (std::size_t i = static_cast<std::size_t>(t); i < sessions.size();
             i += static_cast<std::size_t>(threads)) {
          const auto& ref = sessions[i];
          auto n = next[i];
          if (lie)
            say("ack " + ref.app_name + " " + ref.user_id + " " + ref.session_id + " "
                + std::to_string(n) + " " + std::to_string(n));
          auto r =
            e.append_event(append_request{ref, crashload::make_event(ref, n), std::nullopt, {}});
          if (!r)
            fail("append " + crashload::event_id(ref, n) + ": " + to_string(r.err()));
          if (r->version != n)
            fail("append " + crashload::event_id(ref, n) + " got version "
                 + std::to_string(r->version));
          if (!lie)
            say("ack " + ref.app_name + " " + ref.user_id + " " + ref.session_id + " "
                + std::to_string(n) + " " + std::to_string(r->version));
          next[i] = n + 1;
        }
      }
    });
  }
  for (auto& w : workers)
    w.join();
  return 0;
}
