// SPDX-License-Identifier: Apache-2.0
// protocol/framing.hpp's line_writer with producers on engine workers (real
// engines on both stores), whose writes wait for the worker's idle point
// (the engine's idle hook, actors/worker_idle.hpp, as `serve` passes it), and
// on other threads, which write at once: every
// line arrives whole and in each producer's order, and a writer destroyed
// while a worker still holds its deferred write neither loses the line nor
// is touched afterwards.
// test-tiers: tsan
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "actors/worker_idle.hpp"
#include "protocol/framing.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace agentstate::test;
using namespace std::chrono_literals;

namespace {

// A pipe whose read end a thread drains into `text` until end of input.
struct pipe_reader {
  int fds[2] = {-1, -1};
  std::string text;
  std::thread thread;

  pipe_reader() {
    REQUIRE(::pipe(fds) == 0);
    thread = std::thread([this] {
      char buf[65536];
      for (;;) {
        auto n = ::read(fds[0], buf, sizeof buf);
        if (n <= 0)
          break;
        text.append(buf, static_cast<std::size_t>(n));
      }
    });
  }
  int write_fd() const { return fds[1]; }
  /// Closes the write end and waits for the reader to see end of input.
  std::string finish() {
    ::close(fds[1]);
    fds[1] = -1;
    thread.join();
    return text;
  }
  ~pipe_reader() {
    if (fds[1] >= 0)
      ::close(fds[1]);
    if (thread.joinable())
      thread.join();
    ::close(fds[0]);
  }
};

} // namespace

TEST_CASE_TEMPLATE("line_writer: lines from engine workers and from another thread arrive whole "
                   "and in each producer's order",
                   S, memory_store, lmdb_store) {
  auto e = open_engine(S::kind);
  pipe_reader pipe;
  auto out = std::make_unique<protocol::line_writer>(pipe.write_fd(), &detail::defer_until_idle);
  const int chains = 64, per_chain = 40, main_lines = 2000;
  std::atomic<int> finished{0};
  // Each chain appends to its own session; each append's callback (on a
  // worker) pushes the chain's next line and starts the next append.
  std::function<void(int, int)> step = [&](int c, int i) {
    if (i == per_chain) {
      ++finished;
      return;
    }
    e->append_event(
      append_req(sref("app", "u", "s" + std::to_string(c)), make_event(json{{"i", i}})),
      [&, c, i](result<append_result> r) {
        CHECK(r.ok());
        out->push("c" + std::to_string(c) + " " + std::to_string(i));
        step(c, i + 1);
      });
  };
  for (int c = 0; c < chains; ++c)
    REQUIRE(e->create_session(create_req(sref("app", "u", "s" + std::to_string(c)))).ok());
  for (int c = 0; c < chains; ++c)
    step(c, 0);
  for (int i = 0; i < main_lines; ++i)
    out->push("m " + std::to_string(i)); // not a worker: written at once
  REQUIRE(eventually([&] { return finished.load() == chains; }, 60s));
  out.reset(); // close(): writes what is left
  std::istringstream lines(pipe.finish());
  std::map<std::string, int> next; // producer -> next number expected
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    auto sp = line.find(' ');
    REQUIRE(sp != std::string::npos);
    auto who = line.substr(0, sp);
    int n = std::stoi(line.substr(sp + 1));
    INFO("line: ", line);
    CHECK(n == next[who]++);
    ++count;
  }
  CHECK(count == chains * per_chain + main_lines);
  CHECK(next["m"] == main_lines);
  for (int c = 0; c < chains; ++c)
    CHECK(next["c" + std::to_string(c)] == per_chain);
}

TEST_CASE_TEMPLATE("line_writer: destroyed while a worker holds its deferred write", S,
                   memory_store, lmdb_store) {
  auto e = open_engine(S::kind);
  pipe_reader pipe;
  auto out = std::make_unique<protocol::line_writer>(pipe.write_fd(), &detail::defer_until_idle);
  std::promise<void> pushed, destroyed;
  auto destroyed_f = destroyed.get_future().share();
  std::promise<void> callback_done;
  e->create_session(create_req(sref("app", "u", "s")), [&, destroyed_f](result<session> r) {
    CHECK(r.ok());
    out->push("late"); // on a worker: the write waits for this job's end
    pushed.set_value();
    destroyed_f.wait(); // the job ends after the writer is gone
    callback_done.set_value();
  });
  auto p = pushed.get_future();
  REQUIRE(p.wait_for(10s) == std::future_status::ready);
  out.reset(); // close() writes "late"; the deferred write finds no writer
  destroyed.set_value();
  REQUIRE(callback_done.get_future().wait_for(10s) == std::future_status::ready);
  // The worker goes on to its idle point and further jobs.
  CHECK(get_maybe(*e, sref("app", "u", "s")).has_value());
  CHECK(pipe.finish() == "late\n");
}
