// SPDX-License-Identifier: Apache-2.0
// Regression: a second engine::open (or `serve`, or a read-only tool) on a
// store another engine was writing could answer data_corrupt ("truncated:
// the meta page ... claims N pages") instead of unavailable. The data file
// check took the file's size before it read the meta pages, so a commit in
// between (the writer grows the file, then writes a meta page claiming the
// new pages) made a healthy file look short; and open ran that check before
// it tried the lock. Now the size is read after the meta pages (and a check
// that finds damage reads the file again, so a meta page caught mid-write
// is read whole), and open takes the lock first: a store in use answers
// unavailable.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "store/file_check.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

TEST_CASE("regression: a store being written reads as damaged to a second open") {
  auto e = test::open_engine(test::store_kind::lmdb);
  const options& o = e.opts;
  // Many sessions, so the file keeps growing while the checks run.
  std::atomic<bool> stop{false};
  std::atomic<int> appended{0};
  std::thread writer([&] {
    std::atomic<int> in_flight{0};
    for (int i = 0; !stop.load(); ++i) {
      auto ref = test::sref("app", "u", "s" + std::to_string(i % 5000));
      if (i < 5000)
        MUST(e->create_session(test::create_req(ref)));
      while (in_flight.load() > 64)
        std::this_thread::yield();
      in_flight.fetch_add(1);
      e->append_event(test::append_req(ref, test::make_event(json{{"k", std::string(200, 'x')}})),
                      [&](result<append_result>) {
                        in_flight.fetch_sub(1);
                        appended.fetch_add(1);
                      });
    }
    while (in_flight.load() > 0)
      std::this_thread::yield();
  });
  struct joiner { // stops the writer however the checks end
    std::atomic<bool>& stop;
    std::thread& t;
    ~joiner() {
      stop.store(true);
      if (t.joinable())
        t.join();
    }
  } join_writer{stop, writer};
  int checks = 0, opens = 0;
  while (appended.load() < 60000) {
    auto state = store::check_data_file(o.dir);
    INFO("check ", checks, ": ", (state ? "ok" : state.err().message));
    REQUIRE(state.ok());
    ++checks;
    if (checks % 20 == 0) {
      auto second = engine::open(o);
      INFO("open ", opens, ": ", (second ? "opened" : second.err().message));
      REQUIRE_FALSE(second.ok());
      CHECK(second.err().code == errc::unavailable);
      ++opens;
    }
  }
  stop.store(true);
  writer.join();
  MESSAGE(checks, " file checks and ", opens, " second opens beside ", appended.load(), " appends");
  CHECK(checks > 100);
}
