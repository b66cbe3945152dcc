// SPDX-License-Identifier: Apache-2.0
// engine::prune on both stores, timed by a manual wall clock: it deletes
// exactly the sessions last updated before clock - older_than_s (of one app
// or of all), each delete in the change feed, app and user state kept; a dry
// run finds the same sessions and deletes nothing; the sample of sessions is
// bounded and `truncated` says when it is; a prune of more than one page goes
// in steps of at most 256 sessions; appends to other sessions succeed while
// it runs; bad requests are invalid_argument.
#include <atomic>
#include <set>
#include <thread>

#include "support/manual_clock.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

namespace {

std::set<std::string> names_of(const std::vector<session_ref>& xs) {
  std::set<std::string> out;
  for (const auto& x : xs)
    out.insert(x.app_name + "/" + x.user_id + "/" + x.session_id);
  return out;
}

std::set<std::string> live_sessions(engine& e, const std::string& app) {
  std::set<std::string> out;
  for (auto& m : MUST(e.list_sessions(test::list_req(app, {}, 1000))).sessions)
    out.insert(app + "/" + m.user_id + "/" + m.id);
  return out;
}

prune_request older_than(double s, const std::string& app = {}, bool dry = false) {
  prune_request r;
  r.older_than_s = s;
  r.app_name = app;
  r.dry_run = dry;
  return r;
}

} // namespace

TEST_CASE_TEMPLATE("engine prune: deletes the sessions older than the cutoff by the engine's "
                   "clock, of one app or all; a dry run finds them and deletes nothing",
                   S, test::memory_store, test::lmdb_store) {
  test::manual_clock clock;
  auto t = test::open_engine(S::kind, [&](options& o) { clock.install(o); });
  auto& e = *t;
  auto make = [&](const std::string& app, const std::string& user, const std::string& id) {
    auto ref = test::sref(app, user, id);
    MUST(e.create_session(test::create_req(ref, json{{"app:kept", 1}, {"user:kept", 1}})));
    test::append_ok(e, ref, test::make_event(json{{"n", 1}}));
  };
  make("a", "u1", "old1");
  make("a", "u2", "old2");
  make("b", "u1", "old");
  clock.advance(1000);
  make("a", "u1", "fresh");
  make("b", "u1", "fresh");
  clock.advance(100);
  const auto start = MUST(e.head_cursor());

  // The old ones were last updated 1,100 s ago, the fresh ones 100 s ago.
  auto dry = MUST(e.prune(older_than(500, {}, true)));
  CHECK(dry.sessions == 3);
  CHECK(!dry.stopped);
  CHECK(!dry.truncated);
  CHECK(dry.cutoff == clock.now() - 500);
  CHECK(names_of(dry.sample) == std::set<std::string>{"a/u1/old1", "a/u2/old2", "b/u1/old"});
  CHECK(live_sessions(e, "a").size() == 3);
  CHECK(MUST(e.head_cursor()) == start); // nothing written

  auto only_b = MUST(e.prune(older_than(500, "b")));
  CHECK(only_b.sessions == 1);
  CHECK(names_of(only_b.sample) == std::set<std::string>{"b/u1/old"});
  CHECK(live_sessions(e, "a").size() == 3);
  CHECK(live_sessions(e, "b") == std::set<std::string>{"b/u1/fresh"});

  // Not older than 2,000 s: nothing.
  CHECK(MUST(e.prune(older_than(2000))).sessions == 0);

  auto rest = MUST(e.prune(older_than(500)));
  CHECK(rest.sessions == 2);
  CHECK(rest.failed == 0);
  CHECK(live_sessions(e, "a") == std::set<std::string>{"a/u1/fresh"});
  CHECK(test::app_state(e, "a") == json{{"kept", 1}});
  CHECK(test::user_state(e, "a", "u2") == json{{"kept", 1}});

  // Each delete is in the change feed.
  watch_request w;
  w.from = start;
  std::set<std::string> removed;
  for (auto& c : MUST(e.read_changes(w, 100)).changes)
    if (c.kind == change_kind::remove)
      removed.insert(c.app_name + "/" + c.user_id + "/" + c.session_id);
  CHECK(removed == std::set<std::string>{"a/u1/old1", "a/u2/old2", "b/u1/old"});

  // Once the clock moves on, the fresh ones are old too.
  clock.advance(1000);
  CHECK(MUST(e.prune(older_than(500))).sessions == 2);
  CHECK(live_sessions(e, "a").empty());
}

TEST_CASE("engine prune: more than a page goes in steps of at most 256 sessions, the sample "
          "holds sample_limit sessions and truncated says there were more") {
  test::manual_clock clock;
  auto t = test::open_engine(test::store_kind::lmdb, [&](options& o) { clock.install(o); });
  auto& e = *t;
  // 3 apps; in each, old sessions then fresh ones, so the walk skips to the
  // next app at its first fresh session.
  const std::vector<std::string> apps{"a", "b", "c"};
  for (const auto& app : apps)
    for (int i = 0; i < 250; ++i)
      MUST(e.create_session(
        test::create_req(app, "u" + std::to_string(i % 7), "old" + std::to_string(i))));
  clock.advance(1000);
  for (const auto& app : apps)
    for (int i = 0; i < 5; ++i)
      MUST(e.create_session(test::create_req(app, "u", "fresh" + std::to_string(i))));

  std::vector<std::uint64_t> steps;
  auto dry = older_than(500, {}, true);
  dry.sample_limit = 40;
  dry.progress = [&steps](std::uint64_t n) { steps.push_back(n); };
  auto found = MUST(e.prune(std::move(dry)));
  CHECK(found.sessions == 750);
  CHECK(found.sample.size() == 40);
  CHECK(found.truncated);
  CHECK(found.sample.front().app_name == "a");
  REQUIRE(steps.size() >= 3);
  CHECK(steps.back() == 750);
  for (std::size_t i = 0; i < steps.size(); ++i)
    CHECK(steps[i] - (i ? steps[i - 1] : 0) <= 256);

  steps.clear();
  auto del = older_than(500);
  del.progress = [&steps](std::uint64_t n) { steps.push_back(n); };
  auto done = MUST(e.prune(std::move(del)));
  CHECK(done.sessions == 750);
  CHECK(done.sample.size() == 100); // the default sample_limit
  CHECK(done.truncated);
  REQUIRE(steps.size() >= 3);
  for (std::size_t i = 0; i < steps.size(); ++i)
    CHECK(steps[i] - (i ? steps[i - 1] : 0) <= 256);
  for (const auto& app : apps)
    CHECK(live_sessions(e, app).size() == 5);

  auto none = MUST(e.prune(older_than(500, {}, true)));
  CHECK(none.sessions == 0);
  CHECK(none.sample.empty());
  CHECK(!none.truncated);
}

TEST_CASE("engine prune: appends to other sessions keep succeeding while a prune runs") {
  test::manual_clock clock;
  auto t = test::open_engine(test::store_kind::lmdb, [&](options& o) { clock.install(o); });
  auto& e = *t;
  for (int i = 0; i < 1200; ++i)
    MUST(e.create_session(
      test::create_req("app", "u" + std::to_string(i % 13), "old" + std::to_string(i))));
  clock.advance(1000);
  const int writers = 4, appends = 150;
  for (int w = 0; w < writers; ++w)
    MUST(e.create_session(test::create_req("app", "live", "w" + std::to_string(w))));

  std::atomic<bool> go{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < writers; ++w)
    threads.emplace_back([&, w] {
      while (!go.load())
        std::this_thread::yield();
      auto ref = test::sref("app", "live", "w" + std::to_string(w));
      for (int i = 0; i < appends; ++i)
        if (!e.append_event(test::append_req(ref, test::make_event(json{{"i", i}}))))
          ++failures;
    });
  go = true;
  auto pruned = MUST(e.prune(older_than(500)));
  for (auto& th : threads)
    th.join();
  CHECK(pruned.sessions == 1200);
  CHECK(failures.load() == 0);
  CHECK(live_sessions(e, "app").size() == writers);
  for (int w = 0; w < writers; ++w)
    CHECK(test::get_existing(e, test::sref("app", "live", "w" + std::to_string(w))).version
          == static_cast<std::uint64_t>(appends));
}

TEST_CASE("engine prune: a bad request is invalid_argument and deletes nothing") {
  test::manual_clock clock;
  auto t = test::open_engine(test::store_kind::memory, [&](options& o) { clock.install(o); });
  auto& e = *t;
  MUST(e.create_session(test::create_req("app", "u", "s")));
  clock.advance(1000);
  for (double bad : {0.0, -5.0, std::nan(""), HUGE_VAL}) {
    INFO("older_than_s ", bad);
    auto r = e.prune(older_than(bad));
    REQUIRE(!r);
    CHECK(r.code() == errc::invalid_argument);
  }
  auto bad_app = e.prune(older_than(10, std::string("a\0b", 3)));
  REQUIRE(!bad_app);
  CHECK(bad_app.code() == errc::invalid_argument);
  auto big_sample = older_than(10);
  big_sample.sample_limit = 10001;
  auto r = e.prune(std::move(big_sample));
  REQUIRE(!r);
  CHECK(r.code() == errc::invalid_argument);
  CHECK(live_sessions(e, "app").size() == 1);
}
