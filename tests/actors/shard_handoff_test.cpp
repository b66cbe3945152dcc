// SPDX-License-Identifier: Apache-2.0
// engine::fence_range, read_range, read_range_since, write_range,
// digest_range, drop_range (a shard leaving one store for another,
// actors/shard_handoff.cpp) on both stores: a fence refuses every write of
// its range and none outside it; a range copied chunk by chunk reads the
// same in the other engine, whatever that engine had cached; a copy made
// while writes go on and caught up from the change log ends equal to the
// source; an imported range is not reaped before it is unfenced; a dropped
// range is gone and nothing else is.
#include <doctest/doctest.h>

#include "model/shard.hpp"
#include "support/change_feed.hpp"
#include "support/deterministic.hpp"
#include "support/manual_clock.hpp"
#include "support/store_probe.hpp"
#include "support/test_support.hpp"

namespace {

using namespace agentstate;

constexpr std::uint32_t shards = 4;

hash_range range_of(std::uint32_t s) {
  auto r = model::shard_range(s, shards);
  return {r.lo, r.hi};
}

/// A user of app "chat" on shard `s`, and one not on it.
std::string user_on(std::uint32_t s, bool on = true) {
  for (int i = 0;; ++i) {
    std::string u = "u" + std::to_string(i);
    if ((model::shard_of("chat", u, shards) == s) == on)
      return u;
  }
}

/// Copies range `r` of `from` into `to`, chunks of at most `max_bytes`; the
/// chunks it took.
int copy_range(engine& from, engine& to, hash_range r, std::size_t max_bytes) {
  std::string at;
  int chunks = 0;
  do {
    auto c = MUST(from.read_range(r, at, max_bytes));
    MUST(to.write_range(r, c.bytes));
    at = c.next;
    ++chunks;
  } while (!at.empty());
  return chunks;
}

/// Applies the catch-up of `r` since `mark` from `from` to `to`; the
/// sessions its chunks carried.
std::uint64_t catch_up(engine& from, engine& to, hash_range r, std::uint64_t mark) {
  std::string at;
  std::uint64_t sessions = 0;
  do {
    auto c = MUST(from.read_range_since(r, mark, at, 1024));
    MUST(to.write_range(r, c.bytes));
    sessions += c.sessions;
    at = c.next;
  } while (!at.empty());
  return sessions;
}

} // namespace

TEST_CASE_TEMPLATE("shard handoff: a fenced range refuses its writes, and only its own", S,
                   test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  const auto home = model::home_shard("chat", shards);
  const std::uint32_t moving = (home + 1) % shards; // not the app's home
  auto in = test::sref("chat", user_on(moving), "s");
  auto out = test::sref("chat", user_on(moving, false), "s");
  MUST(e.create_session(test::create_req(in)));
  MUST(e.create_session(test::create_req(out)));
  test::append_ok(e, in, test::make_event({{"n", 1}}, "before"));
  MUST(e.fence_range(range_of(moving)));
  MUST(e.fence_range(range_of(moving))); // twice is one fence
  CHECK_ERR(e.append_event(test::append_req(in, test::make_event({{"n", 2}}, "e2"))),
            errc::unavailable);
  CHECK_ERR(e.create_session(test::create_req("chat", in.user_id, "t")), errc::unavailable);
  CHECK_ERR(e.delete_session(in), errc::unavailable);
  CHECK_ERR(e.delete_user("chat", in.user_id), errc::unavailable);
  CHECK_ERR(e.delete_app("chat"), errc::unavailable); // an app spans every range
  // Writes outside the range go on, app: keys of an app homed elsewhere too.
  test::append_ok(e, out, test::make_event({{"n", 1}, {"app:k", 1}}, "o1"));
  // Reads of the fenced range go on, and show what committed before.
  auto seen = test::get_existing(e, in);
  CHECK(seen.events.size() == 1);
  CHECK(seen.state.value("n", 0) == 1);
  MUST(e.unfence_range(range_of(moving)));
  test::append_ok(e, in, test::make_event({{"n", 3}}, "after"));
  CHECK(test::get_existing(e, in).events.size() == 2);
}

TEST_CASE_TEMPLATE("shard handoff: the app's home range refuses the app's app: writes", S,
                   test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  const auto home = model::home_shard("chat", shards);
  auto elsewhere = test::sref("chat", user_on(home, false), "s");
  MUST(e.create_session(test::create_req(elsewhere)));
  MUST(e.fence_range(range_of(home)));
  CHECK_ERR(e.append_event(test::append_req(elsewhere, test::make_event({{"app:k", 1}}, "a1"))),
            errc::unavailable);
  app_write_request w;
  w.app_name = "chat";
  w.write_id = "w1";
  w.state_delta = {{"app:k", 2}};
  CHECK_ERR(e.apply_app_write(w), errc::unavailable);
  // Its session part alone commits.
  test::append_ok(e, elsewhere, test::make_event({{"n", 1}}, "a2"));
  MUST(e.unfence_range(range_of(home)));
  MUST(e.apply_app_write(w));
  CHECK(test::app_state(e, "chat").value("k", 0) == 2);
}

TEST_CASE_TEMPLATE("shard handoff: a range copied chunk by chunk reads the same in the other "
                   "engine, and a dropped range is gone",
                   S, test::memory_store, test::lmdb_store) {
  auto a = test::open_engine(S::kind);
  auto b = test::open_engine(S::kind);
  const auto home = model::home_shard("chat", shards);
  std::vector<session_ref> in, out;
  for (int i = 0; i < 6; ++i) {
    auto ref = test::sref("chat", user_on(home), "s" + std::to_string(i));
    MUST(a->create_session(test::create_req(ref, {{"user:plan", "pro"}, {"k", i}})));
    for (int j = 0; j < 5; ++j)
      test::append_ok(*a, ref,
                      test::make_event({{"n", j}, {"app:total", i * 10 + j}},
                                       "e" + std::to_string(i) + "-" + std::to_string(j)));
    in.push_back(ref);
  }
  auto other = test::sref("chat", user_on(home, false), "x");
  MUST(a->create_session(test::create_req(other)));
  out.push_back(other);
  // Small chunks: one session each at most.
  CHECK(copy_range(*a, *b, range_of(home), 1024) >= 6);
  for (auto& ref : in) {
    auto x = test::get_existing(*a, ref);
    auto y = test::get_existing(*b, ref);
    CHECK(x.version == y.version);
    CHECK(x.state == y.state);
    CHECK(test::event_ids(x.events) == test::event_ids(y.events));
  }
  CHECK(test::app_state(*b, "chat") == test::app_state(*a, "chat"));
  CHECK(test::user_state(*b, "chat", in[0].user_id) == json{{"plan", "pro"}});
  CHECK_FALSE(test::get_maybe(*b, other).has_value()); // outside the range
  CHECK(MUST(b->drop_range(range_of(home))) == 6);
  for (auto& ref : in)
    CHECK_FALSE(test::get_maybe(*b, ref).has_value());
  CHECK(test::app_state(*b, "chat") == json::object());
  MUST(a->drop_range(range_of(home)));
  CHECK(test::get_maybe(*a, other).has_value()); // the rest stays
  CHECK_FALSE(test::get_maybe(*a, in[0]).has_value());
}

TEST_CASE_TEMPLATE("shard handoff: a session cached before an import reads the imported events "
                   "(regression: a stale event id index appended an imported id twice)",
                   S, test::memory_store, test::lmdb_store) {
  auto a = test::open_engine(S::kind);
  auto b = test::open_engine(S::kind);
  auto ref = test::sref("chat", user_on(1), "s");
  // b holds an old copy of the session, cached by a live actor with its
  // event ids indexed.
  MUST(b->create_session(test::create_req(ref)));
  test::append_ok(*b, ref, test::make_event({{"n", 0}}, "old"));
  CHECK(test::append_ok(*b, ref, test::make_event({{"n", 0}}, "old")).version == 1);
  // a's copy went on further; it is imported into b.
  MUST(a->create_session(test::create_req(ref)));
  test::append_ok(*a, ref, test::make_event({{"n", 1}}, "e1"));
  test::append_ok(*a, ref, test::make_event({{"n", 2}}, "e2"));
  copy_range(*a, *b, range_of(1), std::size_t{1} << 20);
  MUST(b->unfence_range(range_of(1))); // b owns it now
  // An append retried with an id the import brought answers that event.
  auto again = test::append_ok(*b, ref, test::make_event({{"n", 2}}, "e2"));
  CHECK(again.version == 2);
  auto next = test::append_ok(*b, ref, test::make_event({{"n", 3}}, "e3"));
  CHECK(next.version == 3);
  auto got = test::get_existing(*b, ref);
  CHECK(test::event_ids(got.events) == std::vector<std::string>{"e1", "e2", "e3"});
  CHECK(got.state.value("n", 0) == 3);
}

TEST_CASE_TEMPLATE("shard handoff: bad chunks and positions are refused and change nothing", S,
                   test::memory_store, test::lmdb_store) {
  auto a = test::open_engine(S::kind);
  auto b = test::open_engine(S::kind);
  auto ref = test::sref("chat", user_on(2), "s");
  MUST(a->create_session(test::create_req(ref)));
  auto c = MUST(a->read_range(range_of(2), ""));
  CHECK(c.next.empty());
  CHECK(c.sessions == 1);
  CHECK_ERR(b->write_range(range_of(3), c.bytes), errc::invalid_argument); // another range
  std::string damaged = c.bytes;
  damaged[damaged.size() / 2] ^= 1;
  CHECK_ERR(b->write_range(range_of(2), damaged), errc::data_corrupt);
  CHECK_ERR(b->write_range(range_of(2), "nonsense"), errc::data_corrupt);
  CHECK_ERR(a->read_range(range_of(2), "9zz"), errc::invalid_argument);
  CHECK_ERR(a->read_range(range_of(2), "1abc"), errc::invalid_argument);
  CHECK_FALSE(test::get_maybe(*b, ref).has_value());
  MUST(b->write_range(range_of(2), c.bytes));
  CHECK(test::get_maybe(*b, ref).has_value());
}

TEST_CASE_TEMPLATE("shard handoff: a copy made while writes go on, caught up from the change log "
                   "under the fence, ends equal to the source",
                   S, test::memory_store, test::lmdb_store) {
  auto a = test::open_engine(S::kind);
  auto b = test::open_engine(S::kind);
  const auto home = model::home_shard("chat", shards);
  const auto r = range_of(home);
  std::vector<session_ref> in;
  for (int i = 0; i < 12; ++i) {
    auto ref = test::sref("chat", user_on(home) + (i % 2 ? "" : "x"), "s" + std::to_string(i));
    if (model::shard_of("chat", ref.user_id, shards) != home)
      ref.user_id = user_on(home);
    MUST(a->create_session(test::create_req(ref, {{"user:plan", "free"}, {"k", i}})));
    for (int j = 0; j < 3; ++j)
      test::append_ok(
        *a, ref, test::make_event({{"n", j}}, "e" + std::to_string(i) + "-" + std::to_string(j)));
    in.push_back(ref);
  }
  auto other = test::sref("chat", user_on(home, false), "x");
  MUST(a->create_session(test::create_req(other)));
  const auto mark = MUST(a->range_mark());
  CHECK(mark > 0);
  // The first copy, one session per chunk, with writes between its chunks:
  // to sessions copied already and not yet, a create, a delete, user: and
  // app: state, and a session outside the range.
  std::string at;
  int step = 0;
  do {
    auto c = MUST(a->read_range(r, at, 1024));
    MUST(b->write_range(r, c.bytes));
    at = c.next;
    switch (step++) {
      case 1:
        test::append_ok(*a, in[0], test::make_event({{"n", 9}, {"user:plan", "pro"}}, "late0"));
        break;
      case 2: test::append_ok(*a, in[11], test::make_event({{"app:total", 5}}, "late11")); break;
      case 3: MUST(a->create_session(test::create_req("chat", in[1].user_id, "new"))); break;
      case 4: MUST(a->delete_session(in[2])); break;
      case 5: test::append_ok(*a, other, test::make_event({{"n", 1}}, "out")); break;
      default: break;
    }
  } while (!at.empty());
  CHECK(step > 6);
  CHECK(MUST(a->digest_range(r)) != MUST(b->digest_range(r))); // the copy is behind
  MUST(a->fence_range(r));
  const auto carried = catch_up(*a, *b, r, mark);
  // Only what changed: the sessions the log names, not the whole range.
  CHECK(carried == 3); // in[0], in[11], the new one (in[2] is carried as its absence)
  const auto da = MUST(a->digest_range(r));
  CHECK(da == MUST(b->digest_range(r)));
  CHECK(da.sessions == 12);
  MUST(b->unfence_range(r));
  for (auto& ref : in) {
    auto x = test::get_maybe(*a, ref);
    auto y = test::get_maybe(*b, ref);
    REQUIRE(x.has_value() == y.has_value());
    if (x) {
      CHECK(x->version == y->version);
      CHECK(x->state == y->state);
    }
  }
  CHECK_FALSE(test::get_maybe(*b, in[2]).has_value());
  CHECK(test::get_maybe(*b, test::sref("chat", in[1].user_id, "new")).has_value());
  CHECK(test::user_state(*b, "chat", in[0].user_id) == json{{"plan", "pro"}});
  CHECK(test::app_state(*b, "chat").value("total", 0) == 5);
  CHECK_FALSE(test::get_maybe(*b, other).has_value()); // outside the range
  // Nothing changed since: a catch-up carries no session.
  CHECK(catch_up(*a, *b, r, MUST(a->range_mark())) == 0);
}

TEST_CASE_TEMPLATE("shard handoff: a catch-up past a deleted user or app, or past the log's "
                   "retention, is refused",
                   S, test::memory_store, test::lmdb_store) {
  auto a = test::open_engine(S::kind, [](options& o) { o.change_retention.max_entries = 4; });
  auto ref = test::sref("chat", user_on(1), "s");
  MUST(a->create_session(test::create_req(ref)));
  auto mark = MUST(a->range_mark());
  MUST(a->delete_user("chat", ref.user_id));
  CHECK_ERR(a->read_range_since(range_of(1), mark, ""), errc::condition_failed);
  CHECK_ERR(a->read_range_since(range_of(1), mark, "9zz"), errc::invalid_argument);
  mark = MUST(a->range_mark());
  MUST(a->create_session(test::create_req(test::sref("other", "u", "s"))));
  MUST(a->delete_app("other")); // an app's sessions lie in every range
  CHECK_ERR(a->read_range_since(range_of(1), mark, ""), errc::condition_failed);
  mark = MUST(a->range_mark());
  for (int i = 0; i < 10; ++i)
    MUST(a->create_session(test::create_req(test::sref("chat", "v", "t" + std::to_string(i)))));
  CHECK_ERR(a->read_range_since(range_of(1), mark, ""), errc::cursor_expired);
}

TEST_CASE_TEMPLATE("shard handoff: an imported range is not reaped before it is unfenced "
                   "(regression: an importing node's reaper deleted expired sessions it did not "
                   "own yet, and logged the deletes)",
                   S, test::memory_store, test::lmdb_store) {
  using namespace std::chrono_literals;
  test::manual_clock clock;
  auto a = test::open_engine(S::kind, [&](options& o) { clock.install(o); });
  auto t = test::open_deterministic(S::kind, [&](options& o) {
    o.reap_interval = 10ms;
    clock.install(o);
  });
  engine& b = *t;
  auto ref = test::sref("chat", user_on(3), "s");
  auto req = test::create_req(ref);
  req.ttl_s = 30.0;
  auto created = MUST(a->create_session(req));
  auto c = MUST(a->read_range(range_of(3), ""));
  MUST(b.write_range(range_of(3), c.bytes));
  t.advance(10ms); // a first tick, before the expiry: nothing is due
  clock.set(*created.expires_at + 1.0);
  t.advance(10ms); // the next finds it due: its delete is refused
  CHECK(test::rows_under(b, store::table::sessions) == 1);
  auto feed = MUST(t.template call<change_page>(
    [&](callback<change_page> cb) { b.read_changes(test::scope_req(watch_scope::all), 100, cb); }));
  CHECK(feed.changes.empty());
  MUST(b.unfence_range(range_of(3)));
  t.advance(10ms); // now it is this engine's: the next tick reaps it
  CHECK(test::rows_under(b, store::table::sessions) == 0);
}

TEST_CASE_TEMPLATE("shard handoff: merge_range adds another store's range to the sessions held "
                   "here, passes over what it added before, and refuses a session held here "
                   "with other contents",
                   S, test::memory_store, test::lmdb_store) {
  auto old = test::open_engine(S::kind);
  auto here = test::open_engine(S::kind);
  const auto home = model::home_shard("chat", shards);
  const auto r = range_of(home);
  const auto user = user_on(home);
  for (int i = 0; i < 3; ++i) {
    auto ref = test::sref("chat", user, "old" + std::to_string(i));
    MUST(old->create_session(test::create_req(ref, {{"user:plan", "pro"}, {"app:seen", i}})));
    test::append_ok(*old, ref, test::make_event({{"n", i}}, "e" + std::to_string(i)));
  }
  // here holds a session of its own in the range, of another user.
  std::string other;
  for (int i = 0; other.empty(); ++i) {
    REQUIRE(i < 10000);
    auto u = "v" + std::to_string(i);
    if (model::shard_of("chat", u, shards) == home)
      other = u;
  }
  auto mine = test::sref("chat", other, "mine");
  MUST(here->create_session(test::create_req(mine, {{"user:plan", "free"}})));
  auto c = MUST(old->read_range(r, ""));
  REQUIRE(c.next.empty());
  auto m = MUST(here->merge_range(r, c.bytes));
  CHECK(m.sessions == 3);
  CHECK(m.present == 0);
  for (int i = 0; i < 3; ++i) {
    auto ref = test::sref("chat", user, "old" + std::to_string(i));
    auto x = test::get_existing(*old, ref);
    auto y = test::get_existing(*here, ref);
    CHECK(x.version == y.version);
    CHECK(x.last_update_time == y.last_update_time);
    CHECK(test::event_ids(x.events) == test::event_ids(y.events));
  }
  CHECK(test::get_maybe(*here, mine).has_value()); // nothing deleted
  CHECK(test::app_state(*here, "chat").value("seen", -1) == 2);
  CHECK(test::user_state(*here, "chat", user) == json{{"plan", "pro"}});
  // Again: everything is passed over.
  auto again = MUST(here->merge_range(r, c.bytes));
  CHECK(again.added == 0);
  CHECK(again.present == m.added);
  // A session here with other contents refuses the chunk, which changes nothing.
  test::append_ok(*here, test::sref("chat", user, "old0"), test::make_event({{"n", 9}}, "x"));
  CHECK_ERR(here->merge_range(r, c.bytes), errc::already_exists);
  CHECK(test::get_existing(*here, test::sref("chat", user, "old0")).version == 2);
  // The sessions merged are live here: appends and listings see them.
  test::append_ok(*here, test::sref("chat", user, "old1"), test::make_event({{"n", 5}}, "y"));
  CHECK(test::get_existing(*here, test::sref("chat", user, "old1")).version == 2);
}
