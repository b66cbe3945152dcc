// Store format 1 -> 2: a format 1 store (with its `event_ids` dedup table)
// opens, is upgraded in one transaction (the table dropped, format 2
// recorded), and keeps every session, event and A6 answer. A store of an
// unknown format is refused and left as it was.
#include <doctest/doctest.h>

#include <lmdb.h>

#include "store/kv.hpp"
#include "store/layout.hpp"
#include "store/verify.hpp"
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

/// `agentstate verify`'s check, read-only, must pass with `events` events.
void verify_clean(const std::string& dir, std::uint64_t events) {
  auto kv = store::open_lmdb_kv_readonly(dir);
  auto txn = kv->begin_read();
  auto report = store::verify_store(*txn);
  INFO((report.messages.empty() ? std::string() : report.messages.front()));
  CHECK(report.ok());
  CHECK(report.events == events);
}

std::unique_ptr<engine> open_at(const std::string& dir) {
  options o;
  o.dir = dir;
  o.mode = durability::nosync;
  auto r = engine::open(o);
  INFO(test::describe(r));
  REQUIRE(r.ok());
  return std::move(r).value();
}

} // namespace

TEST_CASE("format upgrade: a format 1 store opens as format 2 and keeps A6") {
  test::temp_dir dir;
  auto ref = test::sref("app", "u", "s");
  std::string generated;
  {
    auto e = open_at(dir.str());
    MUST(e->create_session(test::create_req(ref)));
    test::append_ok(*e, ref, test::make_event(json{{"k", 1}}, "e1"));
    generated = test::append_ok(*e, ref, test::make_event(json{{"k", 2}})).ev.id;
    MUST(e->close());
  }
  // Make it what format 1 wrote: the format, and its dedup table.
  raw_write(dir.str(), [&](MDB_txn* txn, MDB_dbi meta) {
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
    auto e = open_at(dir.str());
    auto again = test::append_ok(*e, ref, test::make_event(json{{"k", 9}}, "e1"));
    CHECK(again.version == 1);
    CHECK(test::append_ok(*e, ref, test::make_event(json{{"k", 9}}, generated)).version == 2);
    CHECK(test::append_ok(*e, ref, test::make_event(json{{"k", 3}}, "e3")).version == 3);
    CHECK(e->stats().deduplicated == 2);
    MUST(e->close());
  }
  raw_write(dir.str(), [&](MDB_txn* txn, MDB_dbi meta) {
    CHECK(get(txn, meta, "format") == "2");
    MDB_dbi ids;
    CHECK(mdb_dbi_open(txn, "event_ids", 0, &ids) == MDB_NOTFOUND);
  });
  verify_clean(dir.str(), 3);
}

TEST_CASE("format upgrade: a store of an unknown format is refused and left as it was") {
  test::temp_dir dir;
  {
    auto e = open_at(dir.str());
    MUST(e->create_session(test::create_req("app", "u", "s")));
    MUST(e->close());
  }
  raw_write(dir.str(), [&](MDB_txn* txn, MDB_dbi meta) {
    put(txn, meta, "format", "3");
    MDB_dbi ids;
    REQUIRE(mdb_dbi_open(txn, "event_ids", MDB_CREATE, &ids) == 0);
    put(txn, ids, "k", "v");
  });
  options o;
  o.dir = dir.str();
  o.mode = durability::nosync;
  auto r = engine::open(o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().message.find("store format 3") != std::string::npos);
  raw_write(dir.str(), [&](MDB_txn* txn, MDB_dbi meta) {
    CHECK(get(txn, meta, "format") == "3");
    MDB_dbi ids;
    REQUIRE(mdb_dbi_open(txn, "event_ids", 0, &ids) == 0);
    CHECK(get(txn, ids, "k") == "v");
  });
}
