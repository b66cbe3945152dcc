// SPDX-License-Identifier: Apache-2.0
// Store format upgrades. Formats 1 and 2 kept each table in an LMDB database
// of its own (format 1 also a dedup index, `event_ids`); format 3 keeps the
// six small tables in one (`rows`); format 4 seals every value with a
// checksum (3 -> 4: tests/store/checksum_test.cpp). A store of an older
// layout is read as it is by read-only tools, and opening it for writing
// upgrades it in one transaction with every session, event, state row, list
// order and A6 answer kept. A store of an unknown format is refused and left
// as it was.
#include <doctest/doctest.h>

#include <lmdb.h>

#include <algorithm>

#include "store/kv.hpp"
#include "store/apply.hpp"
#include "store/format.hpp"
#include "store/keys.hpp"
#include "store/listing.hpp"
#include "store/reads.hpp"
#include "store/records.hpp"
#include "store/verify.hpp"
#include "support/legacy_store.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

namespace {

/// Runs `fn(txn, meta dbi)` in one raw LMDB write transaction on `dir`.
template <class F>
void raw_write(const std::string& dir, F&& fn) {
  MDB_env* env = nullptr;
  REQUIRE(mdb_env_create(&env) == 0);
  REQUIRE(mdb_env_set_maxdbs(env, 16) == 0);
  REQUIRE(mdb_env_set_mapsize(env, std::size_t{1} << 30) == 0);
  REQUIRE(mdb_env_open(env, dir.c_str(), MDB_NOTLS, 0644) == 0);
  MDB_txn* txn = nullptr;
  REQUIRE(mdb_txn_begin(env, nullptr, 0, &txn) == 0);
  MDB_dbi meta;
  REQUIRE(mdb_dbi_open(txn, "meta", 0, &meta) == 0);
  fn(txn, meta);
  REQUIRE(mdb_txn_commit(txn) == 0);
  mdb_env_close(env);
}

void put(MDB_txn* txn, MDB_dbi dbi, const std::string& k, const std::string& v) {
  MDB_val key{k.size(), const_cast<char*>(k.data())}, val{v.size(), const_cast<char*>(v.data())};
  REQUIRE(mdb_put(txn, dbi, &key, &val, 0) == 0);
}

std::string get(MDB_txn* txn, MDB_dbi dbi, const std::string& k) {
  MDB_val key{k.size(), const_cast<char*>(k.data())}, val;
  REQUIRE(mdb_get(txn, dbi, &key, &val) == 0);
  return {static_cast<const char*>(val.mv_data), val.mv_size};
}

/// Makes a closed store this build wrote what format 7 wrote: no state
/// tallies, meta["format"] "7".
void make_format7(MDB_txn* txn, MDB_dbi meta) {
  test::drop_tallies(txn);
  test::drop_session_counts(txn);
  test::drop_shard_index(txn);
  put(txn, meta, "format", "7");
}

/// Makes a closed store this build wrote what format 8 wrote: no session
/// counts, meta["format"] "8".
void make_format8(MDB_txn* txn, MDB_dbi meta) {
  test::drop_session_counts(txn);
  test::drop_shard_index(txn);
  put(txn, meta, "format", "8");
}

/// Rewrites a store the engine wrote (format 4) into the layout of formats
/// 1-2: values bare, each small table a database of its own, named as the
/// table.
void split_rows(MDB_txn* txn) {
  test::drop_tallies(txn);
  test::unseal_store(txn);
  MDB_dbi rows;
  REQUIRE(mdb_dbi_open(txn, "rows", 0, &rows) == 0);
  MDB_dbi split[store::table_count];
  for (std::size_t i = 0; i < store::table_count; ++i) {
    auto t = static_cast<store::table>(i);
    if (t != store::table::meta && t != store::table::events && test::format3_table(t))
      REQUIRE(mdb_dbi_open(txn, store::table_name(t), MDB_CREATE, &split[i]) == 0);
  }
  MDB_cursor* c = nullptr;
  REQUIRE(mdb_cursor_open(txn, rows, &c) == 0);
  MDB_val k, v;
  int moved = 0;
  for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
    REQUIRE(k.mv_size > 1);
    auto tag = static_cast<unsigned char>(*static_cast<const char*>(k.mv_data));
    REQUIRE(tag < store::table_count);
    MDB_val key{k.mv_size - 1, static_cast<char*>(k.mv_data) + 1};
    REQUIRE(mdb_put(txn, split[tag], &key, &v, 0) == 0);
    ++moved;
  }
  mdb_cursor_close(c);
  REQUIRE(moved > 0);
  REQUIRE(mdb_drop(txn, rows, 1) == 0);
}

/// Whether the store holds an LMDB database called `name`.
bool has_database(MDB_txn* txn, const char* name) {
  MDB_dbi dbi;
  int rc = mdb_dbi_open(txn, name, 0, &dbi);
  REQUIRE((rc == 0 || rc == MDB_NOTFOUND));
  return rc == 0;
}

/// Rows per table, as `agentstate inspect` counts them (read-only open).
std::vector<std::uint64_t> entries(const std::string& dir) {
  auto info = store::open_lmdb_kv_readonly(dir)->info();
  return {std::begin(info.entries), std::end(info.entries)};
}

/// `agentstate verify`'s check, read-only, must pass with `events` events.
void verify_clean(const std::string& dir, std::uint64_t events) {
  auto kv = store::open_lmdb_kv_readonly(dir);
  auto txn = kv->begin_read();
  auto report = store::verify_store(*txn);
  INFO((report.messages.empty() ? std::string() : report.messages.front()));
  CHECK(report.ok());
  CHECK(report.events == events);
}

} // namespace

TEST_CASE("format upgrade: a format 1 store opens as the current format and keeps A6") {
  test::temp_dir dir;
  auto ref = test::sref("app", "u", "s");
  std::string generated;
  {
    auto e = test::open_store_dir(dir.str());
    MUST(e->create_session(test::create_req(ref)));
    test::append_ok(*e, ref, test::make_event(json{{"k", 1}}, "e1"));
    generated = test::append_ok(*e, ref, test::make_event(json{{"k", 2}})).ev.id;
    MUST(e->close());
  }
  // Make it what format 1 wrote: a database per table, the format, and its
  // dedup table.
  raw_write(dir.str(), [&](MDB_txn* txn, MDB_dbi meta) {
    split_rows(txn);
    put(txn, meta, "format", "1");
    MDB_dbi ids;
    REQUIRE(mdb_dbi_open(txn, "event_ids", MDB_CREATE, &ids) == 0);
    std::string skey = store::session_key("app", "u", "s");
    std::string v1, v2;
    store::append_be64(v1, 1);
    store::append_be64(v2, 2);
    put(txn, ids, skey + '\0' + "e1", v1);
    put(txn, ids, skey + '\0' + generated, v2);
  });
  verify_clean(dir.str(), 2); // read-only tools read format 1 as is
  {
    auto e = test::open_store_dir(dir.str());
    auto again = test::append_ok(*e, ref, test::make_event(json{{"k", 9}}, "e1"));
    CHECK(again.version == 1);
    CHECK(test::append_ok(*e, ref, test::make_event(json{{"k", 9}}, generated)).version == 2);
    CHECK(test::append_ok(*e, ref, test::make_event(json{{"k", 3}}, "e3")).version == 3);
    CHECK(e->stats().deduplicated == 2);
    MUST(e->close());
  }
  raw_write(dir.str(), [&](MDB_txn* txn, MDB_dbi meta) {
    CHECK(get(txn, meta, "format") == std::to_string(store::format_version));
    CHECK_FALSE(has_database(txn, "event_ids"));
    CHECK_FALSE(has_database(txn, "sessions"));
    CHECK(has_database(txn, "rows"));
  });
  verify_clean(dir.str(), 3);
}

TEST_CASE("format upgrade: a format 2 store is read as it is, then upgraded to the current format "
          "with every row, list order and scope kept") {
  test::temp_dir dir;
  std::vector<session_ref> refs;
  {
    auto e = test::open_store_dir(dir.str());
    for (int u = 0; u < 3; ++u)
      for (int i = 0; i < 4; ++i) {
        auto ref =
          test::sref(u == 2 ? "other" : "app", "u" + std::to_string(u), "s" + std::to_string(i));
        MUST(e->create_session(test::create_req(ref)));
        for (int k = 0; k < 3; ++k)
          test::append_ok(*e, ref,
                          test::make_event(json{{"n", i * 10 + k},
                                                {"user:seen", k},
                                                {"app:last", ref.session_id},
                                                {"temp:scratch", k}}));
        refs.push_back(ref);
      }
    MUST(e->close());
  }
  auto snapshot = [&](engine& e) {
    json out = json::array();
    for (auto& ref : refs) {
      // The cursor names the store's epoch, new at the upgrade.
      auto s = json::parse(MUST(e.get_session_json(test::get_req(ref))));
      s.erase("cursor");
      out.push_back(std::move(s));
    }
    for (const char* app : {"app", "other"}) {
      out.push_back(test::session_ids(test::list_all(e, app, {}, 5)));
      out.push_back(test::session_ids(test::list_all(e, app, std::string("u1"), 3)));
      auto by_created = test::list_req(app, {}, 1000);
      by_created.order_by = list_order::created;
      out.push_back(test::session_ids(MUST(e.list_sessions(by_created)).sessions));
    }
    return out;
  };
  json before;
  {
    auto e = test::open_store_dir(dir.str());
    before = snapshot(*e);
    MUST(e->close());
  }
  auto counts = entries(dir.str());
  CHECK(counts[static_cast<int>(store::table::sessions)] == 12);
  CHECK(counts[static_cast<int>(store::table::events)] == 36);
  raw_write(dir.str(), [&](MDB_txn* txn, MDB_dbi meta) {
    split_rows(txn);
    put(txn, meta, "format", "2");
  });
  // Read-only opens read the old layout, which has no creation-order indexes,
  // no origins, no state tallies (12 sessions, 3 users and 2 apps with
  // state), no session counts (3 users, 2 apps) and no shard index (12
  // sessions); the upgrade puts them back.
  auto split_counts = counts;
  CHECK(counts[static_cast<int>(store::table::session_counts)] == 5);
  CHECK(counts[static_cast<int>(store::table::shard_index)] == 12);
  split_counts[static_cast<int>(store::table::session_counts)] = 0;
  split_counts[static_cast<int>(store::table::shard_index)] = 0;
  split_counts[static_cast<int>(store::table::by_created)] = 0;
  split_counts[static_cast<int>(store::table::by_user_created)] = 0;
  split_counts[static_cast<int>(store::table::origins)] = 0;
  split_counts[static_cast<int>(store::table::session_state)] -= 12;
  split_counts[static_cast<int>(store::table::user_state)] -= 3;
  split_counts[static_cast<int>(store::table::app_state)] -= 2;
  CHECK(counts[static_cast<int>(store::table::by_created)] == 12);
  CHECK(entries(dir.str()) == split_counts);
  verify_clean(dir.str(), 36);
  {
    auto e = test::open_store_dir(dir.str());
    CHECK(snapshot(*e) == before);
    test::append_ok(*e, refs[0], test::make_event(json{{"n", -1}}));
    MUST(e->close());
  }
  raw_write(dir.str(), [&](MDB_txn* txn, MDB_dbi meta) {
    CHECK(get(txn, meta, "format") == std::to_string(store::format_version));
    for (const char* name :
         {"sessions", "session_state", "user_state", "app_state", "by_update", "by_user"})
      CHECK_FALSE(has_database(txn, name));
  });
  auto after = entries(dir.str());
  CHECK(after[static_cast<int>(store::table::events)] == 37);
  after[static_cast<int>(store::table::events)] = 36;
  // The upgrade to format 6 (on the way to the current one) starts the change
  // log empty; then one append. The sessions, made by format 2, have no
  // origins.
  CHECK(counts[static_cast<int>(store::table::changes)] == 48);
  CHECK(after[static_cast<int>(store::table::changes)] == 1);
  after[static_cast<int>(store::table::changes)] = 48;
  CHECK(counts[static_cast<int>(store::table::origins)] == 12);
  CHECK(after[static_cast<int>(store::table::origins)] == 0);
  after[static_cast<int>(store::table::origins)] = 12;
  CHECK(after == counts);
  verify_clean(dir.str(), 37);
}

TEST_CASE("format upgrade: a store of an unknown format is refused and left as it was") {
  test::temp_dir dir;
  {
    auto e = test::open_store_dir(dir.str());
    MUST(e->create_session(test::create_req("app", "u", "s")));
    MUST(e->close());
  }
  raw_write(dir.str(), [&](MDB_txn* txn, MDB_dbi meta) {
    put(txn, meta, "format", std::to_string(store::format_version + 1));
    MDB_dbi ids;
    REQUIRE(mdb_dbi_open(txn, "event_ids", MDB_CREATE, &ids) == 0);
    put(txn, ids, "k", "v");
  });
  options o;
  o.dir = dir.str();
  o.mode = durability::nosync;
  auto r = engine::open(o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().message.find("store format " + std::to_string(store::format_version + 1))
        != std::string::npos);
  raw_write(dir.str(), [&](MDB_txn* txn, MDB_dbi meta) {
    CHECK(get(txn, meta, "format") == std::to_string(store::format_version + 1));
    MDB_dbi ids;
    REQUIRE(mdb_dbi_open(txn, "event_ids", 0, &ids) == 0);
    CHECK(get(txn, ids, "k") == "v");
  });
}

TEST_CASE(
  "format upgrade: a format 6 store opens as the current format with its cursors valid; its "
  "sessions' as-of reads are marked inexact, new sessions' exact") {
  test::temp_dir dir;
  auto ref = test::sref("app", "u", "s");
  std::string cursor;
  {
    auto e = test::open_store_dir(dir.str());
    MUST(e->create_session(test::create_req(ref, json{{"made", 1}, {"later", 0}})));
    test::append_ok(*e, ref, test::make_event(json{{"later", 1}}));
    cursor = test::append_ok(*e, ref, test::make_event(json{{"k", 2}})).cursor;
    MUST(e->close());
  }
  raw_write(dir.str(), [&](MDB_txn* txn, MDB_dbi) {
    test::drop_tallies(txn);
    test::make_format6(txn);
  });
  auto e = test::open_store_dir(dir.str());
  raw_write(dir.str(), [&](MDB_txn* txn, MDB_dbi meta) {
    CHECK(get(txn, meta, "format") == std::to_string(store::format_version));
  });
  // The log and the epoch stay: the cursor still reads.
  watch_request w;
  w.from = cursor;
  CHECK(MUST(e->read_changes(w, 10)).changes.empty());
  get_request q = test::get_req(ref);
  q.as_of_version = 0;
  auto past = test::get_existing(*e, q);
  REQUIRE(past.as_of.has_value());
  CHECK_FALSE(past.as_of->exact);
  // A key no event touched is known from creation; one set at creation and
  // changed later is not.
  CHECK(past.state == json{{"made", 1}});
  // A rewind of such a session is computed the same way, and says so.
  rewind_request rw;
  rw.ref = ref;
  rw.before_version = 2;
  auto plan = MUST(e->rewind_plan(rw));
  CHECK_FALSE(plan.exact);
  CHECK(plan.state_delta == json::object());
  CHECK(plan.state_remove == std::vector<std::string>{"k"});
  auto ref2 = test::sref("app", "u", "new");
  MUST(e->create_session(test::create_req(ref2, json{{"a", 1}})));
  q.ref = ref2;
  CHECK(test::get_existing(*e, q).as_of->exact);
  MUST(e->close());
  verify_clean(dir.str(), 2);
}

TEST_CASE("format upgrade: a format 7 store opens as the current format with every state scope "
          "tallied") {
  test::temp_dir dir;
  auto a = test::sref("app", "u", "s1"), b = test::sref("app", "v", "s2");
  std::string before_a, before_b;
  {
    auto e = test::open_store_dir(dir.str());
    for (auto& ref : {a, b}) {
      MUST(e->create_session(test::create_req(ref, json{{"k0", 0}, {"user:u0", 0}})));
      test::append_ok(*e, ref,
                      test::make_event(json{{"k1", 1}, {"user:u1", 1}, {"app:a0", ref.user_id}}));
    }
    // A session with no state of its own, and one deleted.
    MUST(e->create_session(test::create_req(test::sref("app", "u", "bare"))));
    MUST(e->delete_session(test::sref("app", "u", "bare")));
    MUST(e->create_session(test::create_req(test::sref("app", "w", "empty"))));
    before_a = MUST(e->get_session_json(test::get_req(a)));
    before_b = MUST(e->get_session_json(test::get_req(b)));
    MUST(e->close());
  }
  raw_write(dir.str(), [&](MDB_txn* txn, MDB_dbi meta) { make_format7(txn, meta); });
  // Read-only tools read format 7 as it is: no tallies to check.
  verify_clean(dir.str(), 2);
  {
    auto e = test::open_store_dir(dir.str());
    raw_write(dir.str(), [&](MDB_txn* txn, MDB_dbi meta) {
      CHECK(get(txn, meta, "format") == std::to_string(store::format_version));
    });
    CHECK(MUST(e->get_session_json(test::get_req(a))) == before_a);
    CHECK(MUST(e->get_session_json(test::get_req(b))) == before_b);
    MUST(e->close());
  }
  verify_clean(dir.str(), 2);
  // Each scope's tally counts its rows.
  auto kv = store::open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30);
  {
    auto r = kv->begin_read();
    auto tally = [&](store::table t, const std::string& key) {
      auto raw = r->get(t, key);
      REQUIRE(raw);
      auto x = store::decode_tally(key, *raw);
      REQUIRE(x);
      return x->rows;
    };
    CHECK(tally(store::table::session_state, store::session_key("app", "u", "s1")) == 2);
    CHECK(tally(store::table::user_state, store::user_scope_key("app", "u")) == 2);
    CHECK(tally(store::table::app_state, "app") == 1);
    // No rows, no tally.
    CHECK_FALSE(r->get(store::table::session_state, store::session_key("app", "w", "empty")));
  }
  // So a row lost after the upgrade is data_corrupt.
  {
    auto w = kv->begin_write();
    REQUIRE(
      w->del(store::table::user_state, store::sub_key(store::user_scope_key("app", "v"), "u1")));
    w->commit();
  }
  kv.reset();
  auto e = test::open_store_dir(dir.str());
  CHECK(e->get_session_json(test::get_req(b)).code() == errc::data_corrupt);
  CHECK(MUST(e->get_session_json(test::get_req(a))) == before_a);
  MUST(e->close());
}

TEST_CASE("format upgrade: a format 8 store opens with every app's and user's "
          "sessions counted") {
  test::temp_dir dir;
  {
    auto e = test::open_store_dir(dir.str());
    for (auto* user : {"u", "v"})
      for (int i = 0; i < 3; ++i)
        MUST(e->create_session(test::create_req(test::sref("app", user, "s" + std::to_string(i)))));
    MUST(e->create_session(test::create_req(test::sref("other", "u", "s"))));
    // A deleted session counts nowhere.
    MUST(e->delete_session(test::sref("app", "v", "s2")));
    MUST(e->close());
  }
  raw_write(dir.str(), [&](MDB_txn* txn, MDB_dbi meta) { make_format8(txn, meta); });
  // Read-only tools read format 8 as it is: no counts to check.
  verify_clean(dir.str(), 0);
  {
    auto ro = store::open_lmdb_kv_readonly(dir.str());
    auto r = ro->begin_read();
    CHECK_FALSE(r->session_counts());
    auto page = store::list_sessions(*r, test::list_req("app"), 100, std::size_t{1} << 20, 0);
    REQUIRE(page.ok());
    CHECK(page->sessions.size() == 5);
  }
  {
    auto e = test::open_store_dir(dir.str());
    raw_write(dir.str(), [&](MDB_txn* txn, MDB_dbi meta) {
      CHECK(get(txn, meta, "format") == std::to_string(store::format_version));
    });
    CHECK(test::list_all(*e, "app", std::nullopt, 2).size() == 5);
    MUST(e->close());
  }
  verify_clean(dir.str(), 0);
  auto kv = store::open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30);
  {
    auto r = kv->begin_read();
    auto count = [&](const std::string& key) { return MUST(store::read_session_count(*r, key)); };
    CHECK(count("app") == 5);
    CHECK(count(store::user_scope_key("app", "u")) == 3);
    CHECK(count(store::user_scope_key("app", "v")) == 2);
    CHECK(count("other") == 1);
    CHECK(count(store::user_scope_key("other", "u")) == 1);
  }
  // So an entry lost after the upgrade is data_corrupt for a listing that
  // walks the whole app.
  {
    auto w = kv->begin_write();
    std::string last;
    w->scan(store::table::by_update, "app" + std::string(1, '\0'), {},
            [&](std::string_view k, std::string_view) {
              last = std::string(k);
              return true;
            });
    REQUIRE(w->del(store::table::by_update, last));
    w->commit();
  }
  kv.reset();
  auto e = test::open_store_dir(dir.str());
  auto listed = e->list_sessions(test::list_req("app"));
  REQUIRE_FALSE(listed.ok());
  CHECK(listed.code() == errc::data_corrupt);
  CHECK(listed.err().message.find("app 'app'") != std::string::npos);
  MUST(e->close());
}

TEST_CASE("format upgrade: a format 10 store opens with every session in the shard index") {
  test::temp_dir dir;
  std::vector<std::string> want; // the index keys, in key order
  {
    auto e = test::open_store_dir(dir.str());
    for (auto* app : {"app", "other"})
      for (auto* user : {"u", "v", "w"})
        for (int i = 0; i < 3; ++i) {
          auto ref = test::sref(app, user, "s" + std::to_string(i));
          MUST(e->create_session(test::create_req(ref, json{{"k", i}})));
          want.push_back(
            store::shard_index_key(app, user, store::session_key(app, user, ref.session_id)));
        }
    // A deleted session has no entry.
    MUST(e->delete_session(test::sref("app", "v", "s1")));
    want.erase(std::find(want.begin(), want.end(),
                         store::shard_index_key("app", "v", store::session_key("app", "v", "s1"))));
    MUST(e->close());
  }
  std::sort(want.begin(), want.end());
  auto index_of = [&] {
    auto kv = store::open_lmdb_kv_readonly(dir.str());
    auto r = kv->begin_read();
    std::vector<std::string> out;
    r->scan(store::table::shard_index, {}, {}, [&](std::string_view k, std::string_view v) {
      CHECK(store::open_row(store::table::shard_index, k, v, false));
      out.emplace_back(k);
      return true;
    });
    return out;
  };
  REQUIRE(index_of() == want);
  raw_write(dir.str(), [&](MDB_txn* txn, MDB_dbi) { test::make_format10(txn); });
  CHECK(index_of().empty());
  // Read-only tools read format 10 as it is: no index to check.
  verify_clean(dir.str(), 0);
  {
    auto ro = store::open_lmdb_kv_readonly(dir.str());
    CHECK_FALSE(ro->begin_read()->shard_index());
  }
  {
    auto e = test::open_store_dir(dir.str());
    raw_write(dir.str(), [&](MDB_txn* txn, MDB_dbi meta) {
      CHECK(get(txn, meta, "format") == std::to_string(store::format_version));
    });
    MUST(e->close());
  }
  CHECK(index_of() == want);
  verify_clean(dir.str(), 0);
}
