// SPDX-License-Identifier: Apache-2.0
// list_request::order_by: by id, a paged scan lists every session that exists
// for the whole scan exactly once, while other threads append to (and so
// move, by update time) the sessions being listed. Regression for the probe's
// "listing during writes misses and repeats sessions" (500 of each), which
// remains true of the update-time order and is documented there.
#include <doctest/doctest.h>

#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "support/test_support.hpp"

using namespace agentstate;

namespace {

list_request by_id(std::optional<std::string> user, std::string token, bool descending = false) {
  auto r = test::list_req("app", std::move(user), 7, std::move(token));
  r.order_by = list_order::id;
  r.descending = descending;
  return r;
}

} // namespace

TEST_CASE_TEMPLATE("list order by id: stable under concurrent appends, each session once", S,
                   test::memory_store, test::lmdb_store) {
  auto eng = test::open_engine(S::kind);
  auto& e = *eng;
  constexpr int users = 4, per_user = 50;
  for (int u = 0; u < users; ++u)
    for (int i = 0; i < per_user; ++i)
      MUST(e.create_session(
        test::create_req("app", "u" + std::to_string(u), "s" + std::to_string(i))));
  std::atomic<bool> stop{false};
  std::atomic<int> appended{0};
  std::atomic<bool> failed{false};
  std::thread writer([&] {
    std::mt19937 rng(7);
    while (!stop.load()) {
      auto u = rng() % users, i = rng() % per_user;
      auto r = e.append_event(
        test::append_req(test::sref("app", "u" + std::to_string(u), "s" + std::to_string(i)),
                         test::make_event(json{{"n", 1}})));
      if (!r.ok()) {
        failed = true;
        return;
      }
      appended.fetch_add(1);
    }
  });
  // The listings below run while appends land.
  while (appended.load() < 20 && !failed.load())
    std::this_thread::yield();
  REQUIRE_FALSE(failed.load());
  for (bool descending : {false, true}) {
    for (int pass = 0; pass < 3; ++pass) {
      std::map<std::string, int> seen;
      std::string last;
      std::string token;
      int pages = 0;
      do {
        auto page = MUST(e.list_sessions(by_id(std::nullopt, token, descending)));
        for (auto& m : page.sessions) {
          auto key = m.user_id + "/" + m.id;
          if (!last.empty())
            CHECK((descending ? key < last : key > last)); // strictly ordered
          last = key;
          ++seen[key];
        }
        token = page.next_page_token.value_or("");
        ++pages;
      } while (!token.empty() && pages < 1000);
      CHECK(seen.size() == users * per_user);
      for (auto& [k, n] : seen) {
        INFO(k);
        CHECK(n == 1);
      }
    }
  }
  // One user's sessions, by id.
  std::string token;
  int listed = 0;
  do {
    auto page = MUST(e.list_sessions(by_id(std::string("u2"), token)));
    for (auto& m : page.sessions)
      CHECK(m.user_id == "u2");
    listed += static_cast<int>(page.sessions.size());
    token = page.next_page_token.value_or("");
  } while (!token.empty());
  CHECK(listed == per_user);
  stop = true;
  writer.join();
  CHECK_FALSE(failed.load());
}
