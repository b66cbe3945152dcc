// SPDX-License-Identifier: Apache-2.0
// Reads answer the change-feed cursor of what they show (session::cursor,
// scope_snapshot::cursor), on both stores, while threads write: replaying
// the feed up to a read's cursor gives exactly the state the read returned,
// and the session's changes split at the cursor into the versions it shows
// and the ones it does not. So "read, then watch from the read's cursor"
// misses and repeats nothing. A create answers its own change's cursor.
#include <doctest/doctest.h>

#include <atomic>
#include <map>
#include <thread>

#include "support/change_feed.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using test::seq_of;

namespace {

// Every change after the oldest kept, in commit order.
std::vector<change> whole_feed(engine& e) {
  return test::read_feed(e, watch_request{});
}

bool starts_with(const std::string& s, const std::string& p) {
  return s.compare(0, p.size(), p) == 0;
}

// The keys starting with `prefix` that the changes of `all` accepted by
// `mine` set and removed, up to sequence `upto`, with the prefix cut off
// when `strip` is set.
json replay(const std::vector<change>& all, std::uint64_t upto, const std::string& prefix,
            bool strip, const std::function<bool(const change&)>& mine) {
  json out = json::object();
  for (auto& c : all) {
    if (seq_of(c.cursor) > upto)
      break;
    if (!mine(c))
      continue;
    auto key = [&](const std::string& k) { return strip ? k.substr(prefix.size()) : k; };
    for (auto it = c.state_delta.begin(); it != c.state_delta.end(); ++it)
      if (starts_with(it.key(), prefix))
        out[key(it.key())] = it.value();
    for (auto& k : c.state_remove)
      if (starts_with(k, prefix))
        out.erase(key(k));
  }
  return out;
}

struct session_read {
  std::uint64_t version;
  json state;
  std::string cursor;
};

struct scope_read {
  json state;
  std::string cursor;
};

} // namespace

TEST_CASE_TEMPLATE("read cursors: get_session's cursor splits the feed at exactly what the "
                   "session shows, while threads append",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  auto ref = test::sref("a", "u", "s");
  auto created = MUST(e.create_session(test::create_req(ref, json{{"k", -1}, {"user:n", -1}})));
  // Other sessions' writes move the head past what the session shows.
  auto other = test::sref("b", "v", "o");
  MUST(e.create_session(test::create_req(other)));

  const int writers = 3, per = 150;
  std::atomic<int> running{writers};
  std::vector<std::thread> ts;
  for (int w = 0; w < writers; ++w)
    ts.emplace_back([&, w] {
      for (int i = 0; i < per; ++i) {
        int v = w * per + i; // every value written once
        auto delta = json{{"k", v}, {"user:n", v}, {"app:m", v}, {"temp:t", v}};
        test::append_ok(e, ref, test::make_event(delta));
        if (i % 3 == 0)
          test::append_ok(e, other, test::make_event(json{{"x", v}}));
      }
      running.fetch_sub(1);
    });
  std::vector<session_read> reads;
  while (running.load() > 0 || reads.size() < 20) {
    auto s = test::get_existing(e, test::get_req(ref, 0));
    REQUIRE(!s.cursor.empty());
    reads.push_back({s.version, s.state, s.cursor});
  }
  for (auto& th : ts)
    th.join();
  auto all = whole_feed(e);

  // The create's cursor is its own change.
  REQUIRE(!created.cursor.empty());
  bool found = false;
  for (auto& c : all)
    if (c.cursor == created.cursor) {
      found = true;
      CHECK(c.kind == change_kind::create);
      CHECK(c.session_id == "s");
    }
  CHECK(found);

  auto of_session = [](const change& c) {
    return c.app_name == "a" && c.user_id == "u" && c.session_id == "s";
  };
  // Each check replays the feed: check at most 200 reads, spread evenly.
  const std::size_t step = std::max<std::size_t>(1, reads.size() / 200);
  for (std::size_t i = 0; i < reads.size(); i += step) {
    auto& r = reads[i];
    const auto at = seq_of(r.cursor);
    std::uint64_t shown = 0, next = 0;
    for (auto& c : all)
      if (of_session(c) && c.kind == change_kind::append) {
        if (seq_of(c.cursor) <= at)
          shown = std::max(shown, c.version);
        else if (next == 0)
          next = c.version;
      }
    INFO("read at " << r.cursor << " version " << r.version);
    CHECK(shown == r.version);
    CHECK((next == 0 || next == r.version + 1));
    // One session, user and app: the feed up to the cursor rebuilds the
    // merged state exactly (every value is written once).
    json expect = replay(all, at, "", false, [&](const change& c) { return c.app_name == "a"; });
    CHECK(r.state == expect);
  }
}

TEST_CASE_TEMPLATE("read cursors: a shared scope's state with its cursor equals the feed "
                   "replayed up to that cursor, while threads append",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind, [](options& o) {
    o.idle_timeout = std::chrono::milliseconds(20); // scope actors passivate and reload
  });
  engine& e = *t;
  const std::vector<session_ref> refs{test::sref("a", "u0", "s0"), test::sref("a", "u1", "s1"),
                                      test::sref("z", "u0", "s2")};
  for (auto& r : refs)
    MUST(e.create_session(test::create_req(r, json{{"user:init", r.session_id}})));
  // Before any read: a store whose scopes were never loaded.
  auto first = MUST(e.get_user_state_with_cursor("a", "u0"));
  CHECK(first.state == json{{"init", "s0"}});

  const int per = 200;
  std::atomic<int> running{int(refs.size())};
  std::vector<std::thread> ts;
  for (std::size_t w = 0; w < refs.size(); ++w)
    ts.emplace_back([&, w] {
      for (int i = 0; i < per; ++i) {
        int v = int(w) * per + i;
        json delta{{"user:n", v}, {"app:m", v}, {"own", v}};
        if (i % 10 == 9)
          delta = json{{"app:tick", v}}; // a commit that writes no user: key
        auto ev = test::make_event(delta);
        if (i % 25 == 24)
          ev.actions.state_remove = {"user:init"};
        test::append_ok(e, refs[w], std::move(ev));
      }
      running.fetch_sub(1);
    });
  std::vector<scope_read> users, apps;
  users.push_back({first.state, first.cursor});
  auto read_both = [&] {
    auto u = MUST(e.get_user_state_with_cursor("a", "u0"));
    users.push_back({u.state, u.cursor});
    auto a = MUST(e.get_app_state_with_cursor("a"));
    apps.push_back({a.state, a.cursor});
  };
  while (running.load() > 0 || users.size() < 20)
    read_both();
  for (auto& th : ts)
    th.join();
  // Reads that follow the scope actors' passivations: each finds every user
  // and app scope actor passivated and loads it from the store again.
  for (int k = 0; k < 3; ++k) {
    REQUIRE(test::eventually([&] {
      auto st = e.stats();
      return st.users_live == 0 && st.apps_live == 0;
    }));
    read_both();
  }
  auto all = whole_feed(e);
  for (auto& r : users) {
    INFO("user read at " << r.cursor);
    CHECK(r.state == replay(all, seq_of(r.cursor), "user:", true, [](const change& c) {
            return c.app_name == "a" && c.user_id == "u0";
          }));
  }
  for (auto& r : apps) {
    INFO("app read at " << r.cursor);
    CHECK(r.state == replay(all, seq_of(r.cursor), "app:", true, [](const change& c) {
            return c.app_name == "a";
          }));
  }
  // A watch of the scope from a read's cursor starts with the first change
  // the read did not show.
  auto last = MUST(e.get_user_state_with_cursor("a", "u0"));
  watch_request from_last = test::scope_req(watch_scope::user, "a", "u0");
  from_last.from = last.cursor;
  auto after = MUST(e.read_changes(from_last, 10));
  CHECK(after.changes.empty());
  test::append_ok(e, refs[0], test::make_event(json{{"user:n", -5}}));
  after = MUST(e.read_changes(from_last, 10));
  REQUIRE(after.changes.size() == 1);
  CHECK(after.changes[0].state_delta == json{{"user:n", -5}});
}

TEST_CASE("read cursors: a missing scope answers {} with a cursor; bad names are refused") {
  auto t = test::open_engine(test::store_kind::lmdb);
  engine& e = *t;
  auto s = MUST(e.get_app_state_with_cursor("nobody"));
  CHECK(s.state == json::object());
  auto head = MUST(e.head_cursor());
  CHECK(s.cursor == head);
  auto bad = e.get_user_state_with_cursor("", "u");
  REQUIRE(!bad);
  CHECK(bad.code() == errc::invalid_argument);
  auto bad_app = e.get_app_state_with_cursor("");
  REQUIRE(!bad_app);
  CHECK(bad_app.code() == errc::invalid_argument);
}
