// SPDX-License-Identifier: Apache-2.0
// store::verify_store passes healthy stores and names each kind of fault a
// test plants by writing the store's tables directly.
#include <doctest/doctest.h>

#include "store/kv.hpp"
#include "store/apply.hpp"
#include "store/format.hpp"
#include "store/keys.hpp"
#include "store/listing.hpp"
#include "store/reads.hpp"
#include "store/records.hpp"
#include "store/verify.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace agentstate::store;

namespace {

// A store with two sessions, three events and scope state, written by a real
// engine, then reopened at the kv level.
std::unique_ptr<kv_store> healthy_store(test::temp_dir& dir) {
  {
    options o;
    o.dir = dir.str();
    o.mode = durability::nosync;
    auto eng = engine::open(o);
    REQUIRE(eng.ok());
    auto& e = **eng;
    MUST(e.create_session(test::create_req("app", "u", "s1", json{{"k", 1}})));
    MUST(e.create_session(test::create_req("app", "u", "s2")));
    for (int i = 0; i < 2; ++i)
      MUST(e.append_event(test::append_req(
        test::sref("app", "u", "s1"),
        test::make_event(json{{"n", i}, {"user:x", i}, {"app:y", i}}, "e" + std::to_string(i)))));
    MUST(e.append_event(
      test::append_req(test::sref("app", "u", "s2"), test::make_event(json::object(), "e9"))));
    MUST(e.close());
  }
  return open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30);
}

verify_report check(kv_store& kv) {
  auto txn = kv.begin_read();
  return verify_store(*txn);
}

bool mentions(const verify_report& r, const std::string& what) {
  for (auto& m : r.messages)
    if (m.find(what) != std::string::npos)
      return true;
  return false;
}

std::string event_key(const std::string& skey, std::uint64_t v) {
  std::string k = skey + '\0';
  append_be64(k, v);
  return k;
}

} // namespace

TEST_CASE("verify: a store written by the engine is clean") {
  test::temp_dir dir;
  auto kv = healthy_store(dir);
  auto r = check(*kv);
  INFO((r.messages.empty() ? std::string() : r.messages.front()));
  CHECK(r.ok());
  CHECK(r.sessions == 2);
  CHECK(r.events == 3);
  // One shard index entry per session, under its user's hash.
  auto txn = kv->begin_read();
  std::vector<std::string> index;
  txn->scan(table::shard_index, {}, {}, [&](std::string_view k, std::string_view) {
    index.emplace_back(k);
    return true;
  });
  CHECK(index
        == std::vector<std::string>{shard_index_key("app", "u", session_key("app", "u", "s1")),
                                    shard_index_key("app", "u", session_key("app", "u", "s2"))});
}

TEST_CASE("verify: each planted fault is found and named") {
  test::temp_dir dir;
  auto kv = healthy_store(dir);
  auto s1 = session_key("app", "u", "s1");
  auto plant = [&](auto&& fn) {
    auto w = kv->begin_write();
    fn(*w);
    w->commit();
  };
  SUBCASE("a damaged event row (its checksum fails)") {
    plant([&](kv_write& w) { w.put(table::events, event_key(s1, 1), "\x01garbage"); });
    auto r = check(*kv);
    CHECK_FALSE(r.ok());
    CHECK(mentions(r, "session 'app/u/s1' event v1 is damaged"));
  }
  SUBCASE("an event row whose checksum passes but whose text is no event") {
    plant([&](kv_write& w) {
      auto k = event_key(s1, 1);
      w.put(table::events, k, encode_event_row(k, 1.0, "garbage"));
    });
    auto r = check(*kv);
    CHECK_FALSE(r.ok());
    CHECK(mentions(r, "v1"));
  }
  SUBCASE("a missing event (a gap in the versions)") {
    plant([&](kv_write& w) { w.del(table::events, event_key(s1, 1)); });
    auto r = check(*kv);
    CHECK_FALSE(r.ok());
    CHECK(mentions(r, "expected"));
  }
  SUBCASE("two events of a session with one id (A6)") {
    // v2 ("e1") rewritten as a copy of v1 ("e0"), timestamp and all.
    plant([&](kv_write& w) {
      auto first =
        open_row(table::events, event_key(s1, 1), *w.get(table::events, event_key(s1, 1)), false);
      REQUIRE(first);
      w.put(table::events, event_key(s1, 2), seal(event_key(s1, 2), std::string(*first)));
    });
    auto r = check(*kv);
    CHECK(r.faults == 1);
    CHECK(mentions(r, "event id 'e0' repeats v1"));
  }
  SUBCASE("a record whose version disagrees with the log") {
    plant([&](kv_write& w) {
      auto rec = decode_record(s1, *w.get(table::sessions, s1));
      rec->version = 5;
      w.put(table::sessions, s1, encode_record(s1, *rec));
    });
    CHECK(mentions(check(*kv), "record says version 5"));
  }
  SUBCASE("an orphan state row of a missing session") {
    plant([&](kv_write& w) {
      auto k = session_key("app", "u", "gone") + '\0' + "k";
      w.put(table::session_state, k, seal(k, "1"));
    });
    CHECK(mentions(check(*kv), "missing session"));
  }
  SUBCASE("a state value that is not JSON") {
    plant([&](kv_write& w) {
      auto k = user_scope_key("app", "u") + '\0' + "x";
      w.put(table::user_state, k, seal(k, "{"));
    });
    CHECK(mentions(check(*kv), "not valid JSON"));
  }
  SUBCASE("a session missing from a list index") {
    plant([&](kv_write& w) {
      std::vector<std::string> keys;
      w.scan(table::by_user, "", {}, [&](std::string_view k, std::string_view) {
        keys.emplace_back(k);
        return true;
      });
      w.del(table::by_user, keys.front());
    });
    CHECK(mentions(check(*kv), "by_user"));
  }
  SUBCASE("a session missing from the shard index") {
    plant(
      [&](kv_write& w) { REQUIRE(w.del(table::shard_index, shard_index_key("app", "u", s1))); });
    auto r = check(*kv);
    CHECK(r.faults == 1);
    CHECK(mentions(r, "session app/u/s1: missing from the shard index"));
  }
  SUBCASE("a shard index entry of no session") {
    plant([&](kv_write& w) {
      auto k = shard_index_key("app", "u", session_key("app", "u", "gone"));
      w.put(table::shard_index, k, seal(k, {}));
    });
    auto r = check(*kv);
    CHECK(r.faults == 1);
    CHECK(mentions(r, "session 'app/u/gone' shard index entry names a missing session"));
  }
  SUBCASE("a shard index entry under another hash than its session's") {
    plant([&](kv_write& w) {
      std::string k;
      set_shard_index_key(k, 12345, s1);
      w.put(table::shard_index, k, seal(k, {}));
    });
    auto r = check(*kv);
    CHECK(r.faults == 1);
    CHECK(mentions(r, "session 'app/u/s1' shard index entry is not under its session's hash"));
  }
  SUBCASE("a damaged shard index entry") {
    plant([&](kv_write& w) {
      w.put(table::shard_index, shard_index_key("app", "u", s1),
            "\x04"
            "bad!");
    });
    auto r = check(*kv);
    CHECK(r.faults == 1);
    CHECK(mentions(r, "session 'app/u/s1' shard index entry is damaged"));
  }
}
