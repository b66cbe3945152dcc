// SPDX-License-Identifier: Apache-2.0
// test-tiers: tsan write_map
// Sessions that expire (semantics T1-T4), on both stores: a session created
// with ttl_s (or under options::default_session_ttl) is gone for every
// reader and writer the moment it expires, while its rows are still stored;
// the reaper then deletes it through its session actor (a delete change in
// the feed, nothing left, verify clean); appends refresh the expiry when
// asked; a create of an expired session's id replaces it; and the reaper's
// deletes never take a session whose expiry an accepted append moved, while
// many threads append.
#include <doctest/doctest.h>

#include <atomic>
#include <map>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "actors/engine_factory.hpp"
#include "store/exchange.hpp"
#include "store/expiry.hpp"
#include "store/keys.hpp"
#include "store/verify.hpp"
#include "support/change_feed.hpp"
#include "support/store_probe.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace std::chrono_literals;

namespace {

// Whether the store still holds session `ref`'s record, in a fresh snapshot.
bool record_stored(engine& e, const session_ref& ref) {
  auto txn = detail::engine_factory::store_of(e).begin_read();
  return txn
    ->get(store::table::sessions, store::session_key(ref.app_name, ref.user_id, ref.session_id))
    .has_value();
}

create_request with_ttl(const session_ref& ref, double ttl, std::optional<bool> refresh = {},
                        json state = json::object()) {
  auto r = test::create_req(ref, std::move(state));
  r.ttl_s = ttl;
  r.refresh_ttl = refresh;
  return r;
}

// Sleeps until the wall clock is past `t` (epoch seconds).
void sleep_past(double t) {
  while (test::now_epoch() <= t)
    std::this_thread::sleep_for(5ms);
}

} // namespace

TEST_CASE_TEMPLATE("ttl: an expired session is gone for every reader and writer at once, while "
                   "its rows wait for the reaper",
                   S, test::memory_store, test::lmdb_store) {
  // The reaper is held off, so what readers see is the expiry alone.
  auto t = test::open_engine(S::kind, [](options& o) { o.reap_interval = std::chrono::hours(1); });
  engine& e = *t;
  auto ref = test::sref("app", "u", "brief"), keep = test::sref("app", "u", "keep");
  auto before = test::now_epoch();
  auto created = MUST(e.create_session(with_ttl(ref, 1.0, {}, json{{"k", 1}})));
  REQUIRE(created.expires_at.has_value());
  CHECK(*created.expires_at >= before + 1.0);
  CHECK(*created.expires_at <= test::now_epoch() + 1.0);
  MUST(e.create_session(test::create_req(keep)));
  // While it lives it reads, lists and counts like any session.
  if (test::now_epoch() < *created.expires_at - 0.5) { // the machine may be slow
    auto s = test::get_existing(e, ref);
    CHECK(s.expires_at == created.expires_at);
    auto listed = test::list_all(e, "app");
    REQUIRE(listed.size() == 2);
    CHECK(test::session_ids(listed) == std::vector<std::string>{"brief", "keep"});
  }
  auto from = MUST(e.head_cursor());
  sleep_past(*created.expires_at);

  CHECK_FALSE(test::get_maybe(e, ref).has_value());
  CHECK(test::session_ids(test::list_all(e, "app")) == std::vector<std::string>{"keep"});
  auto req = test::list_req("app");
  req.include_total = true;
  CHECK(MUST(e.list_sessions(req)).total == 1u);
  auto app = e.append_event(test::append_req(ref, test::make_event(json{{"k", 2}})));
  REQUIRE_FALSE(app.ok());
  CHECK(app.err().code == errc::not_found);
  auto invs = e.list_invocations(ref);
  REQUIRE_FALSE(invs.ok());
  CHECK(invs.err().code == errc::not_found);
  CHECK(MUST(e.get_session_json(test::get_req(ref))) == "null");
  // Nothing was deleted yet: the rows wait for the reaper, and verify is
  // clean (the session and its expiry entry agree).
  CHECK(record_stored(e, ref));
  CHECK(test::rows_under(e, store::table::expiry) == 1);
  test::check_verify(e);
  // A delete of an expired session deletes it (a change in the feed).
  MUST(e.delete_session(ref));
  CHECK_FALSE(record_stored(e, ref));
  CHECK(test::rows_under(e, store::table::expiry) == 0);
  auto w = test::scope_req(watch_scope::session, "app", "u", "brief");
  w.from = from;
  auto cs = test::read_feed(e, w);
  REQUIRE(cs.size() == 1);
  CHECK(cs.front().kind == change_kind::remove);
}

TEST_CASE_TEMPLATE("ttl: the reaper deletes expired sessions in batches, and each deletion is in "
                   "the feed",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind, [](options& o) { o.reap_interval = 10ms; });
  engine& e = *t;
  auto from = MUST(e.head_cursor());
  // More than one batch (64), with events and state rows of their own, all
  // expiring together 3 s from now (time enough to append to each first,
  // even under TSan).
  const int n = 150;
  const double at = test::now_epoch() + 3.0;
  double last = 0;
  for (int i = 0; i < n; ++i) {
    auto ref = test::sref("app", "u" + std::to_string(i % 7), "s" + std::to_string(i));
    auto ttl = at - test::now_epoch();
    REQUIRE(ttl > 0.5);
    last = *MUST(e.create_session(with_ttl(ref, ttl, {}, json{{"k", i}}))).expires_at;
    test::append_ok(e, ref, test::make_event(json{{"n", i}}));
  }
  auto lasting = test::sref("app", "u0", "lasting");
  MUST(e.create_session(test::create_req(lasting)));
  test::append_ok(e, lasting, test::make_event(json{{"n", 1}}));
  sleep_past(last);
  REQUIRE(test::eventually([&] { return test::rows_under(e, store::table::sessions) == 1; }, 30s));
  CHECK(test::rows_under(e, store::table::expiry) == 0);
  CHECK(test::rows_under(e, store::table::events) == 1);
  CHECK(test::session_ids(test::list_all(e, "app")) == std::vector<std::string>{"lasting"});
  test::check_verify(e);
  auto w = test::scope_req(watch_scope::app, "app", {}, {}, true);
  w.from = from;
  std::size_t removes = 0;
  for (auto& c : test::read_feed(e, w))
    removes += c.kind == change_kind::remove;
  CHECK(removes == static_cast<std::size_t>(n));
}

TEST_CASE_TEMPLATE("ttl: appends refresh the expiry when asked, and only then", S,
                   test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind, [](options& o) { o.reap_interval = 5ms; });
  engine& e = *t;
  auto sliding = test::sref("app", "u", "sliding"), fixed = test::sref("app", "u", "fixed");
  auto s0 = MUST(e.create_session(with_ttl(sliding, 2.0, true)));
  auto f0 = MUST(e.create_session(with_ttl(fixed, 2.0)));
  // Appends to both until past the fixed one's expiry: the sliding one's
  // expiry moves with each append, the fixed one's never does.
  while (test::now_epoch() < *f0.expires_at - 0.3) {
    test::append_ok(e, sliding, test::make_event(json{{"t", test::now_epoch()}}));
    test::append_ok(e, fixed, test::make_event(json{{"t", test::now_epoch()}}));
    std::this_thread::sleep_for(50ms);
  }
  CHECK(test::get_existing(e, fixed).expires_at == f0.expires_at);
  auto moved = *test::get_existing(e, sliding).expires_at;
  CHECK(moved > *s0.expires_at + 1.0);
  sleep_past(*f0.expires_at);
  CHECK_FALSE(test::get_maybe(e, fixed).has_value());
  test::append_ok(e, sliding, test::make_event(json{{"alive", true}}));
  auto s = test::get_existing(e, sliding);
  CHECK(*s.expires_at >= moved);
  CHECK(s.state["alive"] == true);
  // A refresh needs a time to live; a bad one is refused before anything.
  for (auto bad : {-1.0, std::nan(""), 1e12}) {
    auto r = e.create_session(with_ttl(test::sref("app", "u", "bad"), bad));
    REQUIRE_FALSE(r.ok());
    CHECK(r.err().code == errc::invalid_argument);
  }
  auto r = e.create_session(with_ttl(test::sref("app", "u", "bad"), 0, true));
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().code == errc::invalid_argument);
  CHECK_FALSE(test::get_maybe(e, test::sref("app", "u", "bad")).has_value());
}

TEST_CASE_TEMPLATE("ttl: a create of an expired session's id replaces it; the engine's default "
                   "applies to creates without ttl_s",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind, [](options& o) {
    o.reap_interval = std::chrono::hours(1);
    o.default_session_ttl = 700ms;
  });
  engine& e = *t;
  auto ref = test::sref("app", "u", "again");
  auto first = MUST(e.create_session(test::create_req(ref, json{{"old", 1}})));
  REQUIRE(first.expires_at.has_value());
  test::append_ok(e, ref, test::make_event(json{{"old", 2}}));
  // ttl_s 0 asks for a session that never expires, whatever the default.
  auto forever = MUST(e.create_session(with_ttl(test::sref("app", "u", "forever"), 0)));
  CHECK_FALSE(forever.expires_at.has_value());
  sleep_past(*first.expires_at);
  auto again = MUST(e.create_session(with_ttl(ref, 0, {}, json{{"new", 1}})));
  CHECK(again.version == 0);
  CHECK_FALSE(again.expires_at.has_value());
  auto s = test::get_existing(e, ref);
  CHECK(s.events.empty());
  CHECK(s.state == json{{"new", 1}});
  CHECK(test::rows_under(e, store::table::expiry) == 0);
  test::check_verify(e);
  // A fork is a new session: the default applies to it too.
  fork_request f;
  f.ref = test::sref("app", "u", "forever");
  f.at_version = 0;
  f.new_session_id = "forked";
  CHECK(MUST(e.fork_session(f)).expires_at.has_value());
}

TEST_CASE_TEMPLATE("ttl: the reaper never deletes a session an accepted append refreshed, while "
                   "threads append at the edge of expiry",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind, [](options& o) { o.reap_interval = 1ms; });
  engine& e = *t;
  constexpr int threads = 4, per_thread = 4;
  constexpr double ttl = 0.15;
  const auto until = std::chrono::steady_clock::now() + 2s;
  std::atomic<int> failures{0}, expired{0}, acked{0};
  std::vector<std::thread> pool;
  for (int th = 0; th < threads; ++th)
    pool.emplace_back([&, th] {
      std::mt19937 rng(th);
      std::vector<session_ref> refs;
      // Acked appends since each session's last create, by event id.
      std::vector<std::vector<std::string>> ids(per_thread);
      for (int i = 0; i < per_thread; ++i) {
        refs.push_back(test::sref("app", "t" + std::to_string(th), "s" + std::to_string(i)));
        if (!e.create_session(with_ttl(refs.back(), ttl, true)).ok())
          failures.fetch_add(1);
      }
      while (std::chrono::steady_clock::now() < until) {
        int i = static_cast<int>(rng() % per_thread);
        // Gaps around the ttl: some appends land just before the expiry
        // (the reaper may be deleting then), some after it.
        std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 40));
        auto r = e.append_event(test::append_req(refs[i], test::make_event(json{{"i", i}})));
        if (r) {
          ids[i].push_back(r->ev.id);
          acked.fetch_add(1);
        } else if (r.err().code == errc::not_found) {
          expired.fetch_add(1);
          ids[i].clear();
          if (!e.create_session(with_ttl(refs[i], ttl, true)).ok())
            failures.fetch_add(1);
        } else {
          failures.fetch_add(1);
        }
        // Every acked append since the create is there, in order: none was
        // taken by a reaper's delete.
        auto s = test::get_maybe(e, refs[i]);
        if (s && test::event_ids(s->events) != ids[i])
          failures.fetch_add(1);
      }
    });
  for (auto& th : pool)
    th.join();
  CHECK(failures.load() == 0);
  CHECK(acked.load() > 0);
  MESSAGE("acked ", acked.load(), ", expired and re-created ", expired.load());
  // Everything expires and is reaped: nothing is left, verify is clean.
  REQUIRE(test::eventually([&] { return test::rows_under(e, store::table::sessions) == 0; }, 30s));
  CHECK(test::rows_under(e, store::table::events) == 0);
  CHECK(test::rows_under(e, store::table::session_state) == 0);
  CHECK(test::rows_under(e, store::table::expiry) == 0);
  test::check_verify(e);
}

TEST_CASE_TEMPLATE("ttl: export carries a session's expiry and import restores it; an expired "
                   "session is not exported",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind, [](options& o) { o.reap_interval = std::chrono::hours(1); });
  engine& e = *t;
  auto sliding = test::sref("app", "u", "sliding"), brief = test::sref("app", "u", "brief");
  auto s0 = MUST(e.create_session(with_ttl(sliding, 3600, true, json{{"k", 1}})));
  auto b0 = MUST(e.create_session(with_ttl(brief, 0.2)));
  MUST(e.create_session(test::create_req(test::sref("app", "u", "forever"))));
  sleep_past(*b0.expires_at);
  std::string text;
  {
    auto txn = detail::engine_factory::store_of(e).begin_read();
    MUST(store::export_store(*txn, {}, [&](const std::string& line) { text += line + "\n"; }));
  }
  CHECK(text.find("\"brief\"") == std::string::npos);
  CHECK(text.find("\"refresh_ttl_s\":3600") != std::string::npos);
  auto t2 = test::open_engine(S::kind, [](options& o) { o.reap_interval = std::chrono::hours(1); });
  std::istringstream in(text);
  MUST(store::import_store(detail::engine_factory::store_of(*t2), in));
  auto s = test::get_existing(*t2, sliding);
  CHECK(s.expires_at == s0.expires_at);
  CHECK_FALSE(test::get_existing(*t2, test::sref("app", "u", "forever")).expires_at.has_value());
  CHECK(test::session_ids(test::list_all(*t2, "app"))
        == std::vector<std::string>{"sliding", "forever"});
  // The imported refresh still applies.
  test::append_ok(*t2, sliding, test::make_event(json{{"k", 2}}));
  CHECK(*test::get_existing(*t2, sliding).expires_at > *s0.expires_at);
  test::check_verify(*t2);
  // A bad expiry in a record is refused with the line named.
  auto t3 = test::open_engine(S::kind);
  std::istringstream bad(
    "{\"type\":\"header\",\"format\":1}\n"
    "{\"type\":\"session\",\"app_name\":\"a\",\"user_id\":\"u\",\"id\":\"s\",\"created\":1,"
    "\"last_update_time\":1,\"version\":0,\"state\":{},\"expires_at\":-5}\n");
  auto r = store::import_store(detail::engine_factory::store_of(*t3), bad);
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().code == errc::invalid_argument);
  CHECK(r.err().message.find("expires_at") != std::string::npos);
}
