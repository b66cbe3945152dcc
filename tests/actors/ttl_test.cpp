// SPDX-License-Identifier: Apache-2.0
// test-tiers: tsan write_map
// Sessions that expire (semantics T1-T4), on both stores: a session created
// with ttl_s (or under options::default_session_ttl) is gone for every
// reader and writer the moment it expires, while its rows are still stored;
// the reaper then deletes it through its session actor (a delete change in
// the feed, nothing left, verify clean); appends refresh the expiry when
// asked; a create of an expired session's id replaces it; and the reaper's
// deletes never take a session whose expiry an accepted append moved, while
// many threads append. Time is the engine's wall clock (options::wall_clock),
// which the tests move (support/manual_clock.hpp); tests that need the reaper
// to run at a chosen point use the deterministic scheduler, whose clock fires
// its ticks.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <map>
#include <optional>
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
#include "support/deterministic.hpp"
#include "support/manual_clock.hpp"
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

// Session `ref` as a deterministic engine reads it (none when missing).
std::optional<session> get_now(test::deterministic_engine& t, const session_ref& ref) {
  return MUST(t.call<std::optional<session>>(
    [&](callback<std::optional<session>> cb) { t->get_session(test::get_req(ref), cb); }));
}

session create_now(test::deterministic_engine& t, create_request req) {
  return MUST(t.call<session>([&](callback<session> cb) { t->create_session(req, cb); }));
}

append_result append_now(test::deterministic_engine& t, const session_ref& ref, json delta) {
  return MUST(t.call<append_result>([&](callback<append_result> cb) {
    t->append_event(test::append_req(ref, test::make_event(std::move(delta))), cb);
  }));
}

} // namespace

TEST_CASE_TEMPLATE("ttl: an expired session is gone for every reader and writer at once, while "
                   "its rows wait for the reaper",
                   S, test::memory_store, test::lmdb_store) {
  // The reaper is held off, so what readers see is the expiry alone.
  test::manual_clock clock;
  auto t = test::open_engine(S::kind, [&](options& o) {
    o.reap_interval = std::chrono::hours(1);
    clock.install(o);
  });
  engine& e = *t;
  auto ref = test::sref("app", "u", "brief"), keep = test::sref("app", "u", "keep");
  auto created = MUST(e.create_session(with_ttl(ref, 1.0, {}, json{{"k", 1}})));
  REQUIRE(created.expires_at.has_value());
  CHECK(*created.expires_at == clock.now() + 1.0);
  MUST(e.create_session(test::create_req(keep)));
  // Up to the last instant before its expiry it reads, lists and counts
  // like any session.
  clock.set(std::nextafter(*created.expires_at, 0.0));
  auto s = test::get_existing(e, ref);
  CHECK(s.expires_at == created.expires_at);
  auto listed = test::list_all(e, "app");
  REQUIRE(listed.size() == 2);
  CHECK(test::session_ids(listed) == std::vector<std::string>{"brief", "keep"});
  auto from = MUST(e.head_cursor());
  clock.set(*created.expires_at); // the moment it expires

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
  test::manual_clock clock;
  auto t = test::open_deterministic(S::kind, [&](options& o) {
    o.reap_interval = 10ms;
    clock.install(o);
  });
  engine& e = *t;
  // More than one batch (64), with events and state rows of their own, all
  // expiring together.
  const int n = 150;
  double at = 0;
  for (int i = 0; i < n; ++i) {
    auto ref = test::sref("app", "u" + std::to_string(i % 7), "s" + std::to_string(i));
    at = *create_now(t, with_ttl(ref, 30.0, {}, json{{"k", i}})).expires_at;
    append_now(t, ref, json{{"n", i}});
  }
  auto lasting = test::sref("app", "u0", "lasting");
  create_now(t, test::create_req(lasting));
  append_now(t, lasting, json{{"n", 1}});
  // A tick before the expiry finds nothing due.
  clock.set(std::nextafter(at, 0.0));
  t.advance(10ms);
  CHECK(test::rows_under(e, store::table::sessions) == static_cast<std::size_t>(n) + 1);
  // One tick after it deletes them all: each full batch is followed at once
  // by the next.
  clock.set(at);
  t.advance(10ms);
  CHECK(test::rows_under(e, store::table::sessions) == 1);
  CHECK(test::rows_under(e, store::table::expiry) == 0);
  CHECK(test::rows_under(e, store::table::events) == 1);
  auto page = MUST(t.template call<session_page>(
    [&](callback<session_page> cb) { e.list_sessions(test::list_req("app"), cb); }));
  CHECK(test::session_ids(page.sessions) == std::vector<std::string>{"lasting"});
  CHECK_FALSE(page.next_page_token.has_value());
  test::check_verify(e);
  // Every change since the store was made, in pages.
  auto w = test::scope_req(watch_scope::app, "app", {}, {}, true);
  std::size_t removes = 0;
  for (int guard = 0;; ++guard) {
    REQUIRE(guard < 1000);
    auto p = MUST(
      t.template call<change_page>([&](callback<change_page> cb) { e.read_changes(w, 100, cb); }));
    for (auto& c : p.changes)
      removes += c.kind == change_kind::remove;
    w.from = p.cursor;
    if (p.at_head && p.changes.empty())
      break;
  }
  CHECK(removes == static_cast<std::size_t>(n));
}

TEST_CASE_TEMPLATE("ttl: appends refresh the expiry when asked, and only then", S,
                   test::memory_store, test::lmdb_store) {
  test::manual_clock clock;
  auto t = test::open_deterministic(S::kind, [&](options& o) {
    o.reap_interval = 5ms;
    clock.install(o);
  });
  engine& e = *t;
  auto sliding = test::sref("app", "u", "sliding"), fixed = test::sref("app", "u", "fixed");
  auto s0 = create_now(t, with_ttl(sliding, 2.0, true));
  auto f0 = create_now(t, with_ttl(fixed, 2.0));
  // Appends to both every 0.1 s until just before the fixed one's expiry,
  // the reaper running between them: the sliding one's expiry moves with
  // each append, the fixed one's never does.
  while (clock.now() < *f0.expires_at - 0.3) {
    append_now(t, sliding, json{{"t", clock.now()}});
    append_now(t, fixed, json{{"t", clock.now()}});
    clock.advance(0.1);
    t.advance(5ms);
  }
  REQUIRE(get_now(t, fixed));
  CHECK(get_now(t, fixed)->expires_at == f0.expires_at);
  auto moved = *get_now(t, sliding)->expires_at;
  CHECK(moved > *s0.expires_at + 1.0);
  // The fixed one expires; the reaper deletes it and not the sliding one.
  clock.set(*f0.expires_at);
  t.advance(5ms);
  CHECK_FALSE(get_now(t, fixed).has_value());
  CHECK_FALSE(record_stored(e, fixed));
  CHECK(record_stored(e, sliding));
  append_now(t, sliding, json{{"alive", true}});
  auto s = get_now(t, sliding);
  REQUIRE(s);
  CHECK(*s->expires_at == clock.now() + 2.0);
  CHECK(*s->expires_at >= moved);
  CHECK(s->state["alive"] == true);
  // A refresh needs a time to live; a bad one is refused before anything.
  auto create = [&](create_request req) {
    return t.template call<session>([&](callback<session> cb) { e.create_session(req, cb); });
  };
  for (auto bad : {-1.0, std::nan(""), 1e12}) {
    auto r = create(with_ttl(test::sref("app", "u", "bad"), bad));
    REQUIRE_FALSE(r.ok());
    CHECK(r.err().code == errc::invalid_argument);
  }
  auto r = create(with_ttl(test::sref("app", "u", "bad"), 0, true));
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().code == errc::invalid_argument);
  CHECK_FALSE(get_now(t, test::sref("app", "u", "bad")).has_value());
}

TEST_CASE_TEMPLATE("ttl: a create of an expired session's id replaces it; the engine's default "
                   "applies to creates without ttl_s",
                   S, test::memory_store, test::lmdb_store) {
  test::manual_clock clock;
  auto t = test::open_engine(S::kind, [&](options& o) {
    o.reap_interval = std::chrono::hours(1);
    o.default_session_ttl = 700ms;
    clock.install(o);
  });
  engine& e = *t;
  auto ref = test::sref("app", "u", "again");
  auto first = MUST(e.create_session(test::create_req(ref, json{{"old", 1}})));
  REQUIRE(first.expires_at.has_value());
  CHECK(*first.expires_at == clock.now() + 0.7);
  test::append_ok(e, ref, test::make_event(json{{"old", 2}}));
  // ttl_s 0 asks for a session that never expires, whatever the default.
  auto forever = MUST(e.create_session(with_ttl(test::sref("app", "u", "forever"), 0)));
  CHECK_FALSE(forever.expires_at.has_value());
  clock.set(*first.expires_at);
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
  CHECK(MUST(e.fork_session(f)).expires_at == clock.now() + 0.7);
}

TEST_CASE_TEMPLATE("ttl: the reaper never deletes a session an accepted append refreshed, while "
                   "threads append at the edge of expiry",
                   S, test::memory_store, test::lmdb_store) {
  // A real reaper (every 1 ms) races the appending threads. Time passes
  // only as the threads move the clock: each step is a random gap around
  // the ttl's scale, so some appends land just before a session's expiry
  // (the reaper may be deleting it then), some after it.
  test::manual_clock clock;
  auto t = test::open_engine(S::kind, [&](options& o) {
    o.reap_interval = 1ms;
    clock.install(o);
  });
  engine& e = *t;
  constexpr int threads = 4, per_thread = 4, rounds = 400;
  constexpr double ttl = 0.15;
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
      for (int round = 0; round < rounds; ++round) {
        int i = static_cast<int>(rng() % per_thread);
        clock.advance(double(rng() % 10) / 1000);
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
  // Everything expires and is reaped: nothing is left, verify is clean. (A
  // bounded poll: the reaper runs on its own timer.)
  clock.advance(2 * ttl);
  REQUIRE(test::eventually([&] { return test::rows_under(e, store::table::sessions) == 0; }, 30s));
  CHECK(test::rows_under(e, store::table::events) == 0);
  CHECK(test::rows_under(e, store::table::session_state) == 0);
  CHECK(test::rows_under(e, store::table::expiry) == 0);
  test::check_verify(e);
}

TEST_CASE_TEMPLATE("ttl: export carries a session's expiry and import restores it; an expired "
                   "session is not exported",
                   S, test::memory_store, test::lmdb_store) {
  // export_store, like every tool that opens a store without an engine,
  // reads the system clock: the engines' clock runs a minute behind it, so
  // a session that expires within that minute has expired for the export.
  test::manual_clock clock(test::now_epoch() - 60);
  auto tweak = [&](options& o) {
    o.reap_interval = std::chrono::hours(1);
    clock.install(o);
  };
  auto t = test::open_engine(S::kind, tweak);
  engine& e = *t;
  auto sliding = test::sref("app", "u", "sliding"), brief = test::sref("app", "u", "brief");
  // Created a moment apart: listings order them by time.
  auto s0 = MUST(e.create_session(with_ttl(sliding, 3600, true, json{{"k", 1}})));
  clock.advance(0.1);
  auto b0 = MUST(e.create_session(with_ttl(brief, 0.2)));
  clock.advance(0.1);
  MUST(e.create_session(test::create_req(test::sref("app", "u", "forever"))));
  clock.set(*b0.expires_at);
  CHECK_FALSE(test::get_maybe(e, brief).has_value());
  std::string text;
  {
    auto txn = detail::engine_factory::store_of(e).begin_read();
    MUST(store::export_store(*txn, {}, [&](const std::string& line) { text += line + "\n"; }));
  }
  CHECK(text.find("\"brief\"") == std::string::npos);
  CHECK(text.find("\"refresh_ttl_s\":3600") != std::string::npos);
  auto t2 = test::open_engine(S::kind, tweak);
  std::istringstream in(text);
  MUST(store::import_store(detail::engine_factory::store_of(*t2), in));
  auto s = test::get_existing(*t2, sliding);
  CHECK(s.expires_at == s0.expires_at);
  CHECK_FALSE(test::get_existing(*t2, test::sref("app", "u", "forever")).expires_at.has_value());
  CHECK(test::session_ids(test::list_all(*t2, "app"))
        == std::vector<std::string>{"sliding", "forever"});
  // The imported refresh still applies.
  test::append_ok(*t2, sliding, test::make_event(json{{"k", 2}}));
  CHECK(*test::get_existing(*t2, sliding).expires_at == clock.now() + 3600);
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
