// SPDX-License-Identifier: Apache-2.0
// The change feed's pull form (engine::read_changes, store format 6), on
// both stores: every committed create, append and delete appears once, in
// commit order, with exactly what it committed; each scope's feed equals the
// whole feed filtered by that scope; resuming from any cursor continues with
// no gap and no duplicate, across a restart; retention answers
// cursor_expired naming the oldest cursor; a cursor of another store is
// refused; temp: never appears.
// test-tiers: tsan
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "agentstate/scope.hpp"
#include "store/kv.hpp"
#include "support/files.hpp"
#include "support/manual_clock.hpp"
#include "support/change_feed.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace std::chrono_literals;
using test::describe_change;
using test::scope_req;
using test::seq_of;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> described(const std::vector<change>& xs) {
  std::vector<std::string> out;
  for (auto& c : xs)
    out.push_back(describe_change(c));
  return out;
}

bool starts_with(const std::string& s, const std::string& p) {
  return s.compare(0, p.size(), p) == 0;
}

// The test's own statement of a scope's filter, applied to the whole feed.
std::vector<change> filtered(const std::vector<change>& all, const watch_request& r) {
  std::vector<change> out;
  for (auto c : all) {
    bool id_ok = r.scope == watch_scope::all
      || (c.app_name == r.app_name
          && (r.scope == watch_scope::app
              || (c.user_id == r.user_id
                  && (r.scope == watch_scope::user || c.session_id == r.session_id))));
    if (!id_ok)
      continue;
    std::string scope_prefix;
    if (!r.include_sessions && r.scope == watch_scope::user)
      scope_prefix = "user:";
    if (!r.include_sessions && r.scope == watch_scope::app)
      scope_prefix = "app:";
    if (scope_prefix.empty() && r.key_prefix.empty()) {
      out.push_back(std::move(c));
      continue;
    }
    json delta = json::object();
    std::vector<std::string> removed;
    for (auto it = c.state_delta.begin(); it != c.state_delta.end(); ++it)
      if (starts_with(it.key(), scope_prefix) && starts_with(it.key(), r.key_prefix))
        delta[it.key()] = it.value();
    for (auto& k : c.state_remove)
      if (starts_with(k, scope_prefix) && starts_with(k, r.key_prefix))
        removed.push_back(k);
    if (delta.empty() && removed.empty())
      continue;
    c.state_delta = std::move(delta);
    c.state_remove = std::move(removed);
    if (!scope_prefix.empty())
      c.ev.reset();
    out.push_back(std::move(c));
  }
  return out;
}

// What one thread did and the store acknowledged.
struct acked {
  change_kind kind;
  session_ref ref;
  std::uint64_t version;
  std::string event_id;
};

} // namespace

TEST_CASE_TEMPLATE("read_changes: every acknowledged write once, in commit order, and replaying "
                   "the feed rebuilds every stored scope",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  const std::vector<std::string> apps{"a0", "a1"}, users{"u0", "u1", "u2"};
  const int threads = 4, ops = 250;
  std::vector<std::vector<acked>> done(threads);
  std::vector<std::thread> ts;
  for (int w = 0; w < threads; ++w)
    ts.emplace_back([&, w] {
      std::mt19937 rng(1234 + w);
      auto pick = [&](int n) { return int(rng() % unsigned(n)); };
      for (int i = 0; i < ops; ++i) {
        // Each thread owns its session ids, so its own view of each
        // session's version is exact.
        auto ref = test::sref(apps[pick(2)], users[pick(3)],
                              "w" + std::to_string(w) + "s" + std::to_string(pick(4)));
        int op = pick(10);
        if (op == 0) {
          auto r = e.delete_session(ref);
          REQUIRE(r.ok());
          continue; // deletes of absent sessions are not logged: counted below
        }
        auto cur = e.get_session(test::get_req(ref, 0));
        REQUIRE(cur.ok());
        if (!*cur) {
          json st{{"init", i}, {"user:seen", w}, {"temp:t", 1}};
          auto c = e.create_session(test::create_req(ref, st));
          REQUIRE(c.ok());
          done[w].push_back({change_kind::create, ref, 0, {}});
          continue;
        }
        json delta{{"k" + std::to_string(pick(3)), i},
                   {"user:u" + std::to_string(pick(2)), w * 1000 + i},
                   {"app:x" + std::to_string(pick(2)), i},
                   {"temp:scratch", i}};
        auto ev = test::make_event(delta);
        if (pick(3) == 0)
          ev.actions.state_remove = {"k" + std::to_string(3 + pick(2)),
                                     "user:gone" + std::to_string(pick(2))};
        auto r = e.append_event(test::append_req(ref, ev));
        REQUIRE(r.ok());
        done[w].push_back({change_kind::append, ref, r->version, r->ev.id});
      }
    });
  for (auto& x : ts)
    x.join();

  auto all = test::read_feed(e, scope_req(watch_scope::all), 97);
  // Cursors strictly increase.
  for (std::size_t i = 1; i < all.size(); ++i)
    CHECK(seq_of(all[i].cursor) > seq_of(all[i - 1].cursor));

  // Each acknowledged create and append appears exactly once.
  std::map<std::string, int> seen;
  for (auto& c : all) {
    if (c.kind == change_kind::append) {
      REQUIRE(c.ev);
      CHECK(c.ev->id.size() > 0);
      seen["append " + c.ev->id] += 1;
    }
    for (auto it = c.state_delta.begin(); it != c.state_delta.end(); ++it)
      CHECK_MESSAGE(scope_of(it.key()) != scope::temp, describe_change(c));
  }
  std::size_t appends = 0, creates = 0;
  for (auto& d : done)
    for (auto& a : d) {
      if (a.kind == change_kind::append) {
        ++appends;
        CHECK(seen["append " + a.event_id] == 1);
      } else {
        ++creates;
      }
    }
  std::size_t feed_creates = 0, feed_appends = 0;
  for (auto& c : all) {
    feed_creates += c.kind == change_kind::create;
    feed_appends += c.kind == change_kind::append;
  }
  CHECK(feed_appends == appends);
  CHECK(feed_creates == creates);

  // Replaying the feed in order rebuilds every session's state and version,
  // and every user and app scope, exactly as stored.
  std::map<std::string, json> sessions; // "app/user/id" -> state
  std::map<std::string, std::uint64_t> versions;
  std::map<std::string, json> shared; // "user:app/user" or "app:app" -> state
  for (auto& c : all) {
    auto key = c.app_name + "/" + c.user_id + "/" + c.session_id;
    if (c.kind == change_kind::create) {
      CHECK(sessions.count(key) == 0);
      sessions[key] = json::object();
      CHECK(c.version == 0);
    } else if (c.kind == change_kind::remove) {
      CHECK(sessions.count(key) == 1);
      CHECK(c.version == versions[key]);
      sessions.erase(key);
      versions.erase(key);
      continue;
    } else {
      CHECK(c.version == versions[key] + 1);
    }
    versions[key] = c.version;
    for (auto it = c.state_delta.begin(); it != c.state_delta.end(); ++it) {
      auto sc = scope_of(it.key());
      if (sc == scope::session)
        sessions[key][it.key()] = it.value();
      else if (sc == scope::user)
        shared["user:" + c.app_name + "/" + c.user_id][std::string(unprefixed(it.key()))] =
          it.value();
      else if (sc == scope::app)
        shared["app:" + c.app_name][std::string(unprefixed(it.key()))] = it.value();
    }
    for (auto& k : c.state_remove) {
      auto sc = scope_of(k);
      if (sc == scope::session)
        sessions[key].erase(k);
      else if (sc == scope::user)
        shared["user:" + c.app_name + "/" + c.user_id].erase(std::string(unprefixed(k)));
    }
  }
  std::size_t live = 0;
  for (auto& app : apps) {
    for (auto& user : users) {
      auto want_user = shared.count("user:" + app + "/" + user) ? shared["user:" + app + "/" + user]
                                                                : json::object();
      CHECK(test::user_state(e, app, user) == want_user);
      for (int w = 0; w < threads; ++w)
        for (int s = 0; s < 4; ++s) {
          auto ref = test::sref(app, user, "w" + std::to_string(w) + "s" + std::to_string(s));
          auto got = test::get_maybe(e, ref);
          auto key = app + "/" + user + "/" + ref.session_id;
          REQUIRE(got.has_value() == (sessions.count(key) == 1));
          if (!got)
            continue;
          ++live;
          CHECK(got->version == versions[key]);
          json session_keys = json::object();
          for (auto it = got->state.begin(); it != got->state.end(); ++it)
            if (scope_of(it.key()) == scope::session)
              session_keys[it.key()] = it.value();
          CHECK(session_keys == sessions[key]);
        }
    }
    auto want_app = shared.count("app:" + app) ? shared["app:" + app] : json::object();
    CHECK(test::app_state(e, app) == want_app);
  }
  CHECK(live == sessions.size());

  // Each scope's feed equals the whole feed filtered by that scope.
  std::vector<watch_request> scopes{
    scope_req(watch_scope::session, "a0", "u1", "w2s1"),
    scope_req(watch_scope::user, "a1", "u0"),
    scope_req(watch_scope::user, "a1", "u0", {}, true),
    scope_req(watch_scope::app, "a0"),
    scope_req(watch_scope::app, "a0", {}, {}, true),
    scope_req(watch_scope::all, {}, {}, {}, false, "user:u1"),
    scope_req(watch_scope::app, "a1", {}, {}, true, "k"),
    scope_req(watch_scope::user, "a0", "u2", {}, false, "user:gone"),
  };
  for (auto& r : scopes) {
    auto got = test::read_feed(e, r, 13);
    auto want = filtered(all, r);
    INFO("scope " << int(r.scope) << " " << r.app_name << "/" << r.user_id << "/" << r.session_id
                  << " sessions=" << r.include_sessions << " prefix=" << r.key_prefix);
    CHECK(!want.empty());
    CHECK(described(got) == described(want));
  }
  CHECK(MUST(e.head_cursor()) == all.back().cursor);
}

TEST_CASE_TEMPLATE("read_changes: resuming from any cursor continues with no gap and no "
                   "duplicate, also after a restart",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  auto ref = test::sref("app", "u", "s");
  MUST(t->create_session(test::create_req(ref, json{{"a", 0}})));
  for (int i = 1; i <= 300; ++i) {
    auto r = test::sref("app", "u" + std::to_string(i % 3), "s" + std::to_string(i % 7));
    if (i % 50 == 0) {
      MUST(t->delete_session(r));
      continue;
    }
    if (!test::get_maybe(*t, r))
      MUST(t->create_session(test::create_req(r)));
    test::append_ok(*t, r, test::make_event(json{{"n", i}, {"user:n", i}}));
  }
  auto all = test::read_feed(*t, scope_req(watch_scope::all));
  REQUIRE(all.size() > 300);
  auto user = scope_req(watch_scope::user, "app", "u1");
  auto user_all = test::read_feed(*t, user);
  REQUIRE(user_all.size() > 50);
  std::mt19937 rng(7);
  for (int k = 0; k < 1000; ++k) {
    // A resume from a random change's cursor, in pages of a random size.
    const auto& xs = k % 2 ? all : user_all;
    auto req = k % 2 ? scope_req(watch_scope::all) : user;
    std::size_t i = rng() % xs.size();
    req.from = xs[i].cursor;
    auto page = MUST(t->read_changes(req, 1 + rng() % 40));
    REQUIRE(page.changes.size() <= xs.size() - i - 1);
    for (std::size_t j = 0; j < page.changes.size(); ++j)
      REQUIRE(describe_change(page.changes[j]) == describe_change(xs[i + 1 + j]));
    if (!page.changes.empty())
      CHECK(seq_of(page.cursor) >= seq_of(page.changes.back().cursor));
  }
  // Following the cursors from the first change's, page by page, yields
  // exactly the rest.
  auto from_first = scope_req(watch_scope::all);
  from_first.from = all.front().cursor;
  auto rest = test::read_feed(*t, from_first, 7);
  CHECK(described(rest) == described(std::vector<change>(all.begin() + 1, all.end())));

  if (S::kind == test::store_kind::lmdb) {
    // The log and its cursors survive a restart; new changes follow on.
    auto mid = all[all.size() / 2].cursor;
    MUST(t->close());
    t.eng = MUST(engine::open(t.opts));
    auto req = scope_req(watch_scope::all);
    req.from = mid;
    auto again = test::read_feed(*t, req);
    CHECK(described(again)
          == described(std::vector<change>(all.begin() + all.size() / 2 + 1, all.end())));
    test::append_ok(*t, ref, test::make_event(json{{"after", "restart"}}));
    req.from = all.back().cursor;
    auto next = MUST(t->read_changes(req, 10));
    REQUIRE(next.changes.size() == 1);
    CHECK(next.changes[0].state_delta == json{{"after", "restart"}});
    CHECK(seq_of(next.changes[0].cursor) == seq_of(all.back().cursor) + 1);
  }
}

TEST_CASE_TEMPLATE("read_changes: a create carries its initial state, a delete and re-create "
                   "of one id are two lifetimes, and temp: never appears",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  auto ref = test::sref("app", "u", "s");
  auto start = MUST(t->head_cursor());
  MUST(t->create_session(
    test::create_req(ref, json{{"a", 1}, {"user:b", 2}, {"app:c", 3}, {"temp:d", 4}})));
  test::append_ok(*t, ref, test::make_event(json{{"a", 5}, {"temp:x", 1}}, "e1"));
  MUST(t->delete_session(ref));
  MUST(t->delete_session(ref)); // a delete of nothing changes nothing
  MUST(t->create_session(test::create_req(ref)));
  test::append_ok(*t, ref, test::make_event(json{{"a", 6}}, "e2"));
  auto req = scope_req(watch_scope::session, "app", "u", "s");
  req.from = start;
  auto got = MUST(t->read_changes(req, 100));
  CHECK(got.at_head);
  REQUIRE(got.changes.size() == 5);
  CHECK(got.changes[0].kind == change_kind::create);
  CHECK(got.changes[0].state_delta == json{{"a", 1}, {"user:b", 2}, {"app:c", 3}});
  CHECK(got.changes[1].kind == change_kind::append);
  CHECK(got.changes[1].version == 1);
  CHECK(got.changes[1].state_delta == json{{"a", 5}});
  REQUIRE(got.changes[1].ev);
  CHECK(got.changes[1].ev->id == "e1");
  CHECK(got.changes[1].ev->actions.state_delta == json{{"a", 5}});
  CHECK(got.changes[2].kind == change_kind::remove);
  CHECK(got.changes[2].version == 1);
  CHECK(got.changes[3].kind == change_kind::create);
  CHECK(got.changes[3].state_delta == json::object());
  CHECK(got.changes[4].version == 1);
  CHECK(got.changes[4].ev->id == "e2");
  CHECK(got.cursor == got.changes[4].cursor);
  CHECK(MUST(t->head_cursor()) == got.cursor);
  // The feed of the app's keys alone sees the create's app: key, no event.
  auto app = scope_req(watch_scope::app, "app");
  app.from = start;
  auto a = MUST(t->read_changes(app, 100));
  REQUIRE(a.changes.size() == 1);
  CHECK(a.changes[0].state_delta == json{{"app:c", 3}});
  CHECK(!a.changes[0].ev);
  CHECK(a.cursor == got.cursor); // past every change examined
}

TEST_CASE_TEMPLATE("read_changes: bad requests and foreign cursors are refused with "
                   "invalid_argument",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  auto other = test::open_engine(S::kind);
  MUST(t->create_session(test::create_req("app", "u", "s")));
  MUST(other->create_session(test::create_req("app", "u", "s")));
  auto head = MUST(t->head_cursor());
  auto foreign = MUST(other->head_cursor());
  CHECK(head != foreign);
  auto req = scope_req(watch_scope::all);
  req.from = foreign;
  CHECK(t->read_changes(req, 10).code() == errc::invalid_argument);
  for (const char* bad : {"", "x", "-1", "abc-", "abc-1x", "abc-99999999999999999999999"}) {
    req.from = std::string(bad);
    CHECK_MESSAGE(t->read_changes(req, 10).code() == errc::invalid_argument, bad);
  }
  req.from = head;
  CHECK(t->read_changes(req, 0).code() == errc::invalid_argument);
  CHECK(t->read_changes(req, 10001).code() == errc::invalid_argument);
  CHECK(t->read_changes(scope_req(watch_scope::session, "app", "u"), 10).code()
        == errc::invalid_argument);
  CHECK(t->read_changes(scope_req(watch_scope::user, "app"), 10).code() == errc::invalid_argument);
  CHECK(t->read_changes(scope_req(watch_scope::app), 10).code() == errc::invalid_argument);
  // A cursor ahead of the store (its sequence not yet reached).
  req.from = head.substr(0, head.rfind('-')) + "-999";
  CHECK(t->read_changes(req, 10).code() == errc::invalid_argument);
}

TEST_CASE_TEMPLATE("read_changes: a cursor older than the retention gets cursor_expired naming "
                   "the oldest cursor, which resumes exactly",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind, [](options& o) { o.change_retention.max_entries = 50; });
  auto ref = test::sref("app", "u", "s");
  auto start = MUST(t->head_cursor());
  MUST(t->create_session(test::create_req(ref)));
  for (int i = 0; i < 400; ++i)
    test::append_ok(*t, ref, test::make_event(json{{"n", i}}));
  auto req = scope_req(watch_scope::all);
  req.from = start;
  auto r = t->read_changes(req, 10);
  REQUIRE(r.code() == errc::cursor_expired);
  REQUIRE(r.err().oldest_cursor);
  req.from = *r.err().oldest_cursor;
  auto kept = test::read_feed(*t, req);
  // The newest 50 (a few more while trimming catches up), ending at the
  // last append, contiguous.
  REQUIRE(kept.size() >= 50);
  CHECK(kept.size() <= 50 + 40);
  CHECK(kept.back().state_delta == json{{"n", 399}});
  for (std::size_t i = 1; i < kept.size(); ++i)
    CHECK(kept[i].version == kept[i - 1].version + 1);
  // Without a cursor, a read starts at the oldest kept change.
  auto from_oldest = test::read_feed(*t, scope_req(watch_scope::all));
  CHECK(described(from_oldest) == described(kept));
}

TEST_CASE_TEMPLATE("read_changes: changes older than max_age go at a later commit, after earlier "
                   "commits found the oldest one young enough to keep",
                   S, test::memory_store, test::lmdb_store) {
  test::manual_clock clock;
  auto t = test::open_engine(S::kind, [&](options& o) {
    o.change_retention.max_age = 1s;
    clock.install(o);
  });
  auto ref = test::sref("app", "u", "s");
  auto start = MUST(t->head_cursor());
  MUST(t->create_session(test::create_req(ref)));
  // Each of these commits finds the oldest change young and keeps it.
  for (int i = 0; i < 5; ++i)
    test::append_ok(*t, ref, test::make_event(json{{"n", i}}));
  auto req = scope_req(watch_scope::all);
  req.from = start;
  REQUIRE(test::read_feed(*t, req).size() == 6);
  clock.advance(1.5);
  // Two old rows go per commit (and 16 more): one commit drops all six.
  test::append_ok(*t, ref, test::make_event(json{{"n", 5}}));
  auto r = t->read_changes(req, 10);
  REQUIRE(r.code() == errc::cursor_expired);
  auto kept = test::read_feed(*t, scope_req(watch_scope::all));
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].state_delta == json{{"n", 5}});
}

TEST_CASE_TEMPLATE("read_changes: a page ends before its changes pass half of max_response_bytes "
                   "(one change at least), and paging still returns every change once",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind, [](options& o) { o.limits.max_response_bytes = 1 << 20; });
  engine& e = *t;
  auto ref = test::sref("a", "u", "s");
  MUST(e.create_session(test::create_req(ref)));
  auto start = MUST(e.head_cursor());
  // 12 appends of a ~100 KB value (the value and the event that carries it:
  // ~200 KB of stored text each, two to a page), then one of ~900 KB: larger
  // than a page alone.
  for (int i = 0; i < 12; ++i)
    test::append_ok(e, ref, test::make_event(json{{"big", test::bytes(100000, char('a' + i))}}));
  test::append_ok(e, ref, test::make_event(json{{"huge", test::bytes(450000)}}));
  watch_request req = scope_req(watch_scope::all);
  req.from = start;
  std::vector<std::uint64_t> versions;
  std::size_t pages = 0;
  for (int guard = 0; guard < 100; ++guard) {
    auto p = MUST(e.read_changes(req, 10000));
    std::size_t text = 0;
    for (auto& c : p.changes) {
      text += c.state_delta.dump().size() + (c.ev ? to_json(*c.ev).dump().size() : 0);
      versions.push_back(c.version);
    }
    if (p.changes.size() > 1)
      CHECK(text <= std::size_t{600} << 10); // half a MiB of stored text, and JSON's margin
    if (!p.changes.empty())
      ++pages;
    req.from = p.cursor;
    if (p.at_head && p.changes.empty())
      break;
  }
  CHECK(pages == 7); // two ~200 KB changes a page, the huge one alone
  std::vector<std::uint64_t> want;
  for (std::uint64_t v = 1; v <= 13; ++v)
    want.push_back(v);
  CHECK(versions == want);
}
