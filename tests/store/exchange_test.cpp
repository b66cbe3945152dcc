// SPDX-License-Identifier: Apache-2.0
// export -> import -> export is byte-identical, and import refuses bad input
// with the line number.
#include <doctest/doctest.h>

#include <sstream>

#include "store/exchange.hpp"
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

std::string export_all(kv_store& kv, export_filter f = {}) {
  std::string out;
  auto txn = kv.begin_read();
  auto n = export_store(*txn, f, [&](const std::string& line) { out += line + "\n"; });
  REQUIRE(n.ok());
  return out;
}

} // namespace

TEST_CASE("exchange: export, import, export round-trips a store exactly") {
  test::temp_dir a, b;
  {
    options o;
    o.dir = a.str();
    o.mode = durability::nosync;
    auto eng = engine::open(o);
    REQUIRE(eng.ok());
    auto& e = **eng;
    MUST(e.create_session(test::create_req("app", "u1", "s1", json{{"k", "v"}, {"user:a", 1}})));
    MUST(e.create_session(test::create_req("app2", "u2", "s2", json{{"app:z", {1, 2}}})));
    auto ev = test::make_event(json{{"n", 1.25}, {"nested", {{"a", {1, {{"b", nullptr}}}}}}});
    ev.content = json{{"parts", {{{"text", "héllo \"quoted\"\n"}}}}};
    ev.extra["custom_field"] = json{{"x", 1}};
    MUST(e.append_event(test::append_req(test::sref("app", "u1", "s1"), ev)));
    MUST(e.append_event(
      test::append_req(test::sref("app", "u1", "s1"), test::make_event(json::object(), "", 5.5))));
    MUST(e.close());
  }
  auto src = open_lmdb_kv(a.str(), false, std::uint64_t{1} << 30);
  auto first = export_all(*src);
  auto dst = open_lmdb_kv(b.str(), false, std::uint64_t{1} << 30);
  REQUIRE(init_meta(*dst, "test").ok());
  std::istringstream in(first);
  auto n = import_store(*dst, in);
  REQUIRE(n.ok());
  CHECK(*n == 6); // 2 sessions, 2 events, 1 user scope, 1 app scope
  CHECK(export_all(*dst) == first);
  auto txn = dst->begin_read();
  CHECK(verify_store(*txn).ok());
  // Filters: one session only.
  export_filter f;
  f.app = "app";
  f.user = "u1";
  f.session = "s1";
  auto one = export_all(*src, f);
  CHECK(one.find("\"s2\"") == std::string::npos);
  CHECK(one.find("\"s1\"") != std::string::npos);
}

TEST_CASE("exchange: import refuses bad input and a non-empty store, naming the line") {
  test::temp_dir d;
  auto kv = open_lmdb_kv(d.str(), false, std::uint64_t{1} << 30);
  REQUIRE(init_meta(*kv, "test").ok());
  auto run = [&](const std::string& text) {
    std::istringstream in(text);
    return import_store(*kv, in);
  };
  CHECK(run("").code() == errc::invalid_argument);
  CHECK(run("{\"type\":\"session\"}\n").code() == errc::invalid_argument);
  CHECK(run("{\"type\":\"header\",\"format\":99}\n").code() == errc::invalid_argument);
  auto r = run("{\"type\":\"header\",\"format\":1}\n{\"type\":\"bogus\"}\n");
  CHECK(r.code() == errc::invalid_argument);
  CHECK(r.err().message.find("line 2") != std::string::npos);
  CHECK(run("{\"type\":\"header\",\"format\":1}\nnot json\n").code() == errc::invalid_argument);
  REQUIRE(run("{\"type\":\"header\",\"format\":1}\n"
              "{\"type\":\"app_state\",\"app_name\":\"a\",\"state\":{\"k\":1}}\n")
            .ok());
  CHECK(run("{\"type\":\"header\",\"format\":1}\n").code() == errc::invalid_argument);
}
