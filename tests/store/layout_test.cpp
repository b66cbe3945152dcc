// SPDX-License-Identifier: Apache-2.0
// Key and record encodings of the storage layout, and the write
// preconditions of store::apply.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "store/apply.hpp"
#include "store/format.hpp"
#include "store/keys.hpp"
#include "store/listing.hpp"
#include "store/reads.hpp"
#include "store/records.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace agentstate::store;

TEST_CASE("layout: ordered doubles sort bytewise in numeric order and round-trip") {
  std::vector<double> xs{-1e300, -5.5, -1.0, -0.0, 0.0, 1e-300, 1.0, 1.5, 1700000000.25, 1e300};
  std::vector<std::string> enc;
  for (double x : xs) {
    std::string s;
    append_ordered_double(s, x);
    REQUIRE(s.size() == 8);
    CHECK(read_ordered_double(s) == x);
    enc.push_back(s);
  }
  CHECK(std::is_sorted(enc.begin(), enc.end()));
}

TEST_CASE("layout: big-endian u64 sorts numerically") {
  std::string a, b, c;
  append_be64(a, 1);
  append_be64(b, 256);
  append_be64(c, std::numeric_limits<std::uint64_t>::max());
  CHECK(a < b);
  CHECK(b < c);
  CHECK(read_be64(b) == 256);
  CHECK(read_be64(c) == std::numeric_limits<std::uint64_t>::max());
}

TEST_CASE("layout: session records and event rows round-trip; bad bytes are refused") {
  session_record r{42, 1700000000.5, 1690000000.25};
  auto skey = session_key("a", "u", "s");
  auto enc = encode_record(skey, r);
  CHECK(enc.size() == seal_bytes + 24);
  auto dec = decode_record(skey, enc);
  REQUIRE(dec);
  CHECK(dec->version == 42);
  CHECK(dec->last_update_time == 1700000000.5);
  CHECK(dec->created == 1690000000.25);
  CHECK_FALSE(decode_record(skey, enc.substr(1)));
  CHECK_FALSE(decode_record(skey, "x" + enc.substr(1)));
  CHECK_FALSE(decode_record(session_key("a", "u", "t"), enc)); // the key is checked too

  auto key = event_key(skey, 1);
  auto row = encode_event_row(key, 12.5, R"({"id":"e1","actions":{}})");
  auto body = open_row(table::events, key, row, false);
  REQUIRE(body);
  CHECK(event_body_timestamp(*body) == 12.5);
  auto ev = decode_event_body(*body);
  REQUIRE(ev);
  CHECK(ev->id == "e1");
  CHECK_FALSE(open_row(table::events, key, "\x04short", false));
  CHECK_FALSE(open_row(table::events, event_key(skey, 2), row, false));
  CHECK(decode_event_body("short").code() == errc::internal);
  auto bad = encode_event_row(key, 1, "{not json");
  CHECK(decode_event_body(*open_row(table::events, key, bad, false)).code() == errc::internal);
}

TEST_CASE("layout: session keys of different sessions never prefix each other's rows") {
  // "a"/"b"/"c" and "a"/"b"/"cd": rows use key + NUL, so prefixes are disjoint.
  auto k1 = session_key("a", "b", "c") + '\0';
  auto k2 = session_key("a", "b", "cd") + '\0';
  CHECK(k2.compare(0, k1.size(), k1) != 0);
}

namespace {

// A create of session app/u/s at time 10.
write_set sample_create() {
  write_set create;
  create.op = write_set::kind::create;
  create.app = "app";
  create.user = "u";
  create.id = "s";
  create.time = 10;
  return create;
}

// The first append (event e1, time 11) of the session `create` makes.
write_set sample_append(const write_set& create) {
  write_set append = create;
  append.op = write_set::kind::append;
  append.version = 1;
  append.time = 11;
  append.event_row =
    encode_event_row(event_key(session_key("app", "u", "s"), 1), append.time, R"({"id":"e1"})");
  return append;
}

} // namespace

TEST_CASE("layout: apply enforces create/append preconditions") {
  auto kv = make_memory_kv();
  auto create = sample_create();
  auto append = sample_append(create);
  auto w = kv->begin_write();
  CHECK(apply(*w, append).code() == errc::not_found);
  CHECK(apply(*w, create).ok());
  CHECK(apply(*w, create).code() == errc::already_exists);
  CHECK(apply(*w, append).ok());
  // A write set whose version does not follow the stored one is refused: an
  // earlier append of the session failed.
  append.version = 3;
  CHECK(apply(*w, append).code() == errc::unavailable);
  w->commit();
  auto r = kv->begin_read();
  auto rec = read_record(*r, session_key("app", "u", "s"));
  REQUIRE(rec);
  REQUIRE(*rec);
  CHECK((**rec).version == 1);
  CHECK((**rec).last_update_time == 11);
  auto found = read_event(*r, session_key("app", "u", "s"), 1);
  REQUIRE(found);
  REQUIRE(*found);
  CHECK((**found).version == 1);
  CHECK((**found).ev.id == "e1");
  auto none = read_event(*r, session_key("app", "u", "s"), 2);
  REQUIRE(none);
  CHECK_FALSE(*none);
  std::vector<std::pair<std::uint64_t, std::string>> ids;
  REQUIRE(scan_event_ids(*r, session_key("app", "u", "s"),
                         [&](std::uint64_t v, const std::string& id) { ids.emplace_back(v, id); }));
  CHECK(ids == std::vector<std::pair<std::uint64_t, std::string>>{{1, "e1"}});
}

namespace {

// Every row of every table as seen by `txn`: (table, key, value).
std::vector<std::tuple<int, std::string, std::string>> all_rows(kv_read& txn) {
  std::vector<std::tuple<int, std::string, std::string>> out;
  for (std::size_t t = 0; t < table_count; ++t)
    txn.scan(static_cast<table>(t), "", "", [&](std::string_view k, std::string_view v) {
      out.emplace_back(static_cast<int>(t), std::string(k), std::string(v));
      return true;
    });
  return out;
}

} // namespace

TEST_CASE("layout: a write set that apply refuses leaves the transaction as it was") {
  // The writer applies a whole group commit in one transaction without
  // savepoints (actors/writer.cpp, commit_batch_direct): a refused write set
  // must not have written anything first. Each refusal below carries rows in
  // every scope, so a put before its check would show.
  agentstate::test::temp_dir dir;
  std::vector<std::pair<std::string, std::unique_ptr<kv_store>>> stores;
  stores.emplace_back("memory", make_memory_kv());
  stores.emplace_back("lmdb", open_lmdb_kv(dir.str(), false, std::uint64_t{64} << 20));
  for (auto& [name, kv] : stores) {
    CAPTURE(name);
    auto create = sample_create();
    create.session_writes.push_back({"k", json(), "1"});
    create.user_writes.push_back({"uk", json(1), "1"});
    create.app_writes.push_back({"ak", json(1), "1"});
    auto append = sample_append(create);
    write_set missing = append;
    missing.id = "nobody";
    auto w = kv->begin_write();
    REQUIRE(apply(*w, create).ok());
    REQUIRE(apply(*w, append).ok());
    const auto before = all_rows(*w);
    REQUIRE(before.size() > 5);
    CHECK(apply(*w, create).code() == errc::already_exists);
    CHECK(all_rows(*w) == before);
    CHECK(apply(*w, missing).code() == errc::not_found);
    CHECK(all_rows(*w) == before);
    append.version = 3; // does not follow the stored version 1
    append.event_row =
      encode_event_row(event_key(session_key("app", "u", "s"), 3), append.time, R"({"id":"e3"})");
    CHECK(apply(*w, append).code() == errc::unavailable);
    CHECK(all_rows(*w) == before);
    w->commit();
    auto r = kv->begin_read();
    CHECK(all_rows(*r) == before);
  }
}
