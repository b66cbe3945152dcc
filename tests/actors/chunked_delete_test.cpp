// SPDX-License-Identifier: Apache-2.0
// test-tiers: tsan write_map
// Deleting a large session (store/purge.hpp), on both stores: the session is
// gone for every reader at once (get, list, the feed's delete change), its
// rows are purged in bounded steps by the writer while other sessions keep
// appending, a create of the same id during the purge gives a new empty
// session that none of the old rows leak into, and `verify` is clean before
// and after the purge finishes.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "actors/engine_factory.hpp"
#include "store/apply.hpp"
#include "store/keys.hpp"
#include "store/purge.hpp"
#include "store/verify.hpp"
#include "support/store_probe.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

namespace {

// A session of `n` events, each setting a key of its own (so its state rows
// are many too), loaded with async appends.
void load(engine& e, const session_ref& ref, std::size_t n) {
  MUST(e.create_session(test::create_req(ref, json{{"origin", 1}})));
  std::atomic<std::size_t> done{0}, failed{0};
  for (std::size_t i = 0; i < n; ++i)
    e.append_event(test::append_req(ref, test::make_event(json{{"k" + std::to_string(i), i}})),
                   [&](result<append_result> r) {
                     if (!r)
                       failed.fetch_add(1);
                     done.fetch_add(1);
                   });
  REQUIRE(test::eventually([&] { return done.load() == n; }, std::chrono::seconds(60)));
  REQUIRE(failed.load() == 0);
}

} // namespace

TEST_CASE_TEMPLATE("chunked delete: a large session vanishes at once and its rows are purged in "
                   "steps while others append",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  auto big = test::sref("app", "u", "big"), other = test::sref("app", "u", "other");
  const std::size_t n = 3 * store::inline_delete_events + 17;
  load(e, big, n);
  MUST(e.create_session(test::create_req(other)));
  auto before = MUST(e.head_cursor());

  std::atomic<bool> stop{false};
  std::atomic<int> appended{0};
  std::thread writer([&] {
    while (!stop.load()) {
      test::append_ok(e, other, test::make_event(json{{"n", appended.load()}}));
      appended.fetch_add(1);
    }
  });
  MUST(e.delete_session(big));
  // Gone for every reader at once, whatever is left to purge.
  CHECK(!test::get_maybe(e, big).has_value());
  for (auto& m : MUST(e.list_sessions(test::list_req("app"))).sessions)
    CHECK(m.id != "big");
  // The delete is in the feed (among the other session's appends).
  watch_request w;
  w.scope = watch_scope::session;
  w.app_name = "app";
  w.user_id = "u";
  w.session_id = "big";
  w.from = before;
  auto page = MUST(e.read_changes(w, 10));
  REQUIRE(page.changes.size() == 1);
  CHECK(page.changes.front().kind == change_kind::remove);
  REQUIRE(test::eventually([&] { return !test::purging(e); }, std::chrono::seconds(30)));
  // On a loaded machine the purge can end before the other thread appends.
  REQUIRE(test::eventually([&] { return appended.load() > 0; }));
  stop.store(true);
  writer.join();
  CHECK(test::rows_under(e, store::table::events, test::rows_of(big)) == 0);
  CHECK(test::rows_under(e, store::table::session_state, test::rows_of(big)) == 0);
  CHECK(appended.load() > 0);
  CHECK(test::get_existing(e, other).version == static_cast<std::uint64_t>(appended.load()));
  auto report = test::verify_engine(e);
  INFO((report.messages.empty() ? std::string() : report.messages.front()));
  CHECK(report.ok());
  CHECK(report.purging == 0);
}

TEST_CASE_TEMPLATE("chunked delete: a create of the same id during the purge is a new empty "
                   "session",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  auto big = test::sref("app", "u", "big");
  load(e, big, 2 * store::inline_delete_events + 5);
  MUST(e.delete_session(big));
  auto fresh = MUST(e.create_session(test::create_req(big, json{{"new", true}})));
  CHECK(fresh.version == 0);
  CHECK(fresh.state == json{{"new", true}});
  test::append_ok(e, big, test::make_event(json{{"k1", "again"}}));
  REQUIRE(test::eventually([&] { return !test::purging(e); }, std::chrono::seconds(30)));
  auto s = test::get_existing(e, big);
  CHECK(s.version == 1);
  CHECK(s.events.size() == 1);
  CHECK(s.state == json{{"new", true}, {"k1", "again"}});
  CHECK(test::rows_under(e, store::table::events, test::rows_of(big)) == 1);
  test::check_verify(e);
  // The new session's past starts at its own creation.
  auto q = test::get_req(big);
  q.as_of_version = 0;
  CHECK(test::get_existing(e, q).state == json{{"new", true}});
}

TEST_CASE("chunked delete: a purge left by a closed engine resumes at the next open") {
  test::temp_dir dir;
  auto opts = test::make_options(test::store_kind::lmdb, dir.str());
  auto big = test::sref("app", "u", "big");
  {
    auto e = MUST(engine::open(opts));
    load(*e, big, store::inline_delete_events + 100);
    MUST(e->close());
  }
  // The delete's own transaction, as the engine's writer commits it, and no
  // purge step after it: what a crash right after the delete leaves.
  {
    auto kv = store::open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30);
    auto w = kv->begin_write();
    store::write_set ws;
    ws.op = store::write_set::kind::remove;
    ws.app = big.app_name;
    ws.user = big.user_id;
    ws.id = big.session_id;
    REQUIRE(store::apply(*w, ws).ok());
    w->commit();
    auto txn = kv->begin_read();
    CHECK(store::any_doomed(*txn));
    auto report = store::verify_store(*txn);
    CHECK(report.ok());
    CHECK(report.purging == 1);
  }
  auto e = MUST(engine::open(opts));
  CHECK(!test::get_maybe(*e, big).has_value());
  REQUIRE(test::eventually([&] { return !test::purging(*e); }, std::chrono::seconds(30)));
  CHECK(test::rows_under(*e, store::table::events, test::rows_of(big)) == 0);
  test::check_verify(*e);
}
