// SPDX-License-Identifier: Apache-2.0
// Hostile input through the C++ API (README guarantee 8): parse_json on
// hostile text, the codec on hostile JSON, and engine calls with hostile
// names, ids, keys, values and timestamps. Each gets a typed error (or the
// documented normalisation, docs/testing.md), nothing throws, nothing is
// stored (the store's export is byte-identical before and after), and every
// actor still answers afterwards.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "actors/engine_factory.hpp"
#include "store/exchange.hpp"
#include "store/verify.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace agentstate::test;

namespace {

std::string export_all(engine& e) {
  auto txn = detail::engine_factory::store_of(e).begin_read();
  std::string out;
  auto r = store::export_store(*txn, {}, [&](const std::string& line) { out += line + "\n"; });
  REQUIRE(r.ok());
  return out;
}

std::string deep_text(std::size_t depth, bool objects, bool closed = true) {
  std::string s;
  s.reserve(depth * 6);
  for (std::size_t i = 0; i < depth; ++i)
    s += objects ? "{\"a\":" : "[";
  if (objects)
    s += "1";
  if (closed)
    s += std::string(depth, objects ? '}' : ']');
  return s;
}

// A JSON value nested `depth` deep, built without recursion.
json deep_value(std::size_t depth) {
  json root = json::array();
  json* cur = &root;
  for (std::size_t i = 1; i < depth; ++i) {
    cur->push_back(json::array());
    cur = &(*cur)[0];
  }
  return root;
}

} // namespace

TEST_CASE("parse_json: hostile text gets a typed error or a documented normalisation") {
  struct bad {
    std::string text;
    errc code;
  };
  std::vector<bad> bads = {
    {R"({"a":)", errc::invalid_argument},
    {R"({"a":1} x)", errc::invalid_argument},
    {R"({}{})", errc::invalid_argument},
    {"NaN", errc::invalid_argument},
    {"[Infinity]", errc::invalid_argument},
    {"-Infinity", errc::invalid_argument},
    {"1e400", errc::invalid_argument},
    {"[-1e400]", errc::invalid_argument},
    {R"("\ud800")", errc::invalid_argument},
    {R"("\udc00")", errc::invalid_argument},
    {R"("\ud800\u0041")", errc::invalid_argument},
    {"\"\xff\"", errc::invalid_argument},
    {"\"\xc0\xaf\"", errc::invalid_argument},
    {"\"\xe0\x80\xaf\"", errc::invalid_argument},
    {"\"\xed\xa0\x80\"", errc::invalid_argument},
    {"\"\xf4\x90\x80\x80\"", errc::invalid_argument},
    {std::string("\"a\0b\"", 5), errc::invalid_argument},
    {std::string("\0", 1), errc::invalid_argument},
    {"", errc::invalid_argument},
    {"\xef\xbb\xbf", errc::invalid_argument},
    {deep_text(200000, false), errc::too_large},
    {deep_text(200000, true), errc::too_large},
    {deep_text(200000, false, false), errc::too_large},
    {deep_text(65, false), errc::too_large},
  };
  for (const auto& b : bads) {
    INFO("text: ", b.text.substr(0, 60));
    auto r = parse_json(b.text, 64);
    CHECK_ERR(r, b.code);
  }
  // 64 levels are fine at a limit of 64.
  CHECK_OK(parse_json(deep_text(64, false), 64));

  // Normalisations.
  auto dup = MUST(parse_json(R"({"k":1,"k":2})", 8));
  CHECK(dup == json{{"k", 2}}); // duplicate keys: the last wins
  auto big = MUST(parse_json("123456789012345678901234567890", 8));
  CHECK(big.is_number_float()); // beyond 64 bits: a double (precision lost)
  CHECK(big.get<double>() == doctest::Approx(1.2345678901234568e29));
  auto neg = MUST(parse_json("-123456789012345678901234567890", 8));
  CHECK(neg.is_number_float());
  auto u64 = MUST(parse_json("18446744073709551615", 8));
  CHECK(u64.is_number_unsigned());
  auto bom = MUST(parse_json("\xef\xbb\xbf{\"a\":1}", 8)); // a leading BOM is skipped
  CHECK(bom == json{{"a", 1}});
  auto nul = MUST(parse_json(R"("a\u0000b")", 8)); // the escape is a valid string
  CHECK(nul.get<std::string>() == std::string("a\0b", 3));
  auto pair = MUST(parse_json(R"("\ud83d\ude00")", 8));
  CHECK(pair.get<std::string>() == "\xf0\x9f\x98\x80");
  auto tiny = MUST(parse_json("1e-400", 8)); // underflow rounds to 0
  CHECK(tiny.get<double>() == 0.0);
}

// Regression: nlohmann's lexer takes a raw NUL byte for the end of input, so
// parse_json ignored whatever followed a NUL and accepted "{}\0garbage" as {}.
// The contract is invalid_argument; parse_json now refuses raw NUL bytes.
TEST_CASE("regression: parse_json refuses bytes after a raw NUL") {
  CHECK_ERR(parse_json(std::string("{}\0", 3), 8), errc::invalid_argument);
  CHECK_ERR(parse_json(std::string("{\"a\":1}\0garbage", 15), 8), errc::invalid_argument);
  CHECK_ERR(parse_json(std::string("1\0 2", 4), 8), errc::invalid_argument);
}

TEST_CASE("codec: hostile member types are invalid_argument, never a throw") {
  for (auto text :
       {R"({"id":5})", R"({"id":null,"author":[]})", R"({"timestamp":"now"})",
        R"({"timestamp":true})", R"({"actions":[]})", R"({"actions":{"state_delta":"x"}})",
        R"({"partial":"yes"})", R"({"invocation_id":{"a":1}})", R"("just a string")", R"([1,2])"}) {
    INFO("event: ", text);
    auto j = MUST(parse_json(text, 64));
    CHECK_ERR(event_from_json(j), errc::invalid_argument);
  }
}

TEST_CASE_TEMPLATE("engine API: an event in ADK-JS camelCase is refused naming the member, "
                   "never stored with its state ignored",
                   S, memory_store, lmdb_store) {
  auto t = open_engine(S::kind);
  auto& e = *t;
  auto ref = sref("app", "u", "s1");
  MUST(e.create_session(create_req(ref)));
  struct camel {
    const char* text;
    const char* snake;
  };
  for (auto c : {camel{R"({"actions":{"stateDelta":{"k":1}}})", "'actions.state_delta'"},
                 camel{R"({"actions":{"artifactDelta":{}}})", "'actions.artifact_delta'"},
                 camel{R"({"actions":{"stateRemove":["k"]}})", "'actions.state_remove'"},
                 camel{R"({"invocationId":"i"})", "'invocation_id'"}}) {
    INFO("event: ", c.text);
    auto ev = MUST(event_from_json(MUST(parse_json(c.text, 64))));
    auto r = e.append_event(append_req(ref, std::move(ev)));
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == errc::invalid_argument);
    CHECK(r.err().message.find(c.snake) != std::string::npos);
  }
  CHECK(get_existing(e, ref).version == 0);
}

TEST_CASE_TEMPLATE("engine API: hostile names, ids, keys, values and timestamps", S, memory_store,
                   lmdb_store) {
  auto t = open_engine(S::kind);
  auto& e = *t;
  auto ok_ref = sref("app", "u", "s1");
  MUST(e.create_session(create_req(ok_ref, json{{"k", 1}, {"user:u", 1}, {"app:a", 1}})));
  append_ok(e, ok_ref, make_event(json{{"k", 2}}, "e1", 1700000000.0));
  const auto before = S::kind == store_kind::lmdb ? export_all(e) : std::string();
  const auto session_before = to_json(get_existing(e, ok_ref));

  const std::string nul_name("s\0x", 3);
  const std::vector<std::pair<std::string, errc>> names = {
    {"", errc::invalid_argument},
    {nul_name, errc::invalid_argument},
    {std::string(1, '\0'), errc::invalid_argument},
    {"a\xff", errc::invalid_argument},
    {"\xc0\xaf", errc::invalid_argument},
    {"\xe0\x80\xaf", errc::invalid_argument},
    {"\xed\xa0\x80", errc::invalid_argument},
    {"\xf4\x90\x80\x80", errc::invalid_argument},
    {"a\xc3", errc::invalid_argument},
    {std::string(max_name_bytes + 1, 'n'), errc::too_large},
    {std::string(4096, 'n'), errc::too_large},
  };
  for (const auto& [name, code] : names) {
    INFO("name bytes: ", name.size());
    // As each of app, user, session on get, and on create (except "" as a
    // session id on create, which means "generate one": C1).
    CHECK_ERR(e.get_session(get_req(sref(name, "u", "s1"))), code);
    CHECK_ERR(e.get_session(get_req(sref("app", name, "s1"))), code);
    CHECK_ERR(e.get_session(get_req(sref("app", "u", name))), code);
    CHECK_ERR(e.create_session(create_req(name, "u", "x")), code);
    CHECK_ERR(e.create_session(create_req("app", name, "x")), code);
    if (!name.empty())
      CHECK_ERR(e.create_session(create_req("app", "u", name)), code);
    CHECK_ERR(e.append_event(append_req(sref("app", "u", name), make_event())), code);
    CHECK_ERR(e.get_app_state(name), code);
    CHECK_ERR(e.get_user_state("app", name), code);
    CHECK_ERR(e.list_sessions(list_req(name)), code);
    CHECK_ERR(e.delete_session(sref("app", "u", name)), code);
  }

  // Event ids and invocation ids: NUL, bad UTF-8, max+1, 4 KiB.
  const std::vector<std::pair<std::string, errc>> ids = {
    {std::string("e\0", 2), errc::invalid_argument},
    {"e\xff", errc::invalid_argument},
    {"\xed\xb0\x80", errc::invalid_argument},
    {std::string(max_event_id_bytes + 1, 'e'), errc::too_large},
    {std::string(4096, 'e'), errc::too_large},
  };
  for (const auto& [id, code] : ids) {
    INFO("id bytes: ", id.size());
    CHECK_ERR(e.append_event(append_req(ok_ref, make_event(json{{"k", 3}}, id))), code);
    CHECK_ERR(e.append_event(append_req(ok_ref, make_event(json{{"k", 3}}, "fresh", {}, id))),
              code);
  }

  // State keys in every scope: NUL, bad UTF-8, max+1, 4 KiB.
  const std::vector<std::pair<std::string, errc>> keys = {
    {std::string("k\0", 2), errc::invalid_argument},
    {"k\xff", errc::invalid_argument},
    {"\xc0\x80", errc::invalid_argument},
    {std::string(max_state_key_bytes + 1, 'k'), errc::too_large},
    {std::string(4096, 'k'), errc::too_large},
  };
  for (const auto& [key, code] : keys) {
    for (std::string prefix : {"", "user:", "app:", "temp:"}) {
      INFO("key: ", prefix, "+", key.size(), " bytes");
      auto k = prefix + key;
      if (prefix.size() + key.size() > max_state_key_bytes && code == errc::invalid_argument)
        continue;
      CHECK_ERR(e.append_event(append_req(ok_ref, make_event(json{{"k", 3}, {k, 1}}, "x"))), code);
      CHECK_ERR(e.create_session(create_req("app", "u", "new", json{{k, 1}})), code);
    }
  }

  // State values: a string with invalid UTF-8 (cannot be encoded) and values
  // nested past the limit, including 200,000 deep.
  CHECK_ERR(e.append_event(append_req(ok_ref, make_event(json{{"v", "bad\xff"}}, "x"))),
            errc::invalid_argument);
  CHECK_ERR(e.append_event(append_req(ok_ref, make_event(json{{"user:v", "bad\xc0\xaf"}}, "x"))),
            errc::invalid_argument);
  for (std::size_t depth : {65u, 1000u, 200000u}) {
    INFO("depth ", depth);
    CHECK_ERR(e.append_event(append_req(ok_ref, make_event(json{{"v", deep_value(depth)}}, "x"))),
              errc::too_large);
    auto ev = make_event(json::object(), "x");
    ev.content = deep_value(depth);
    CHECK_ERR(e.append_event(append_req(ok_ref, std::move(ev))), errc::too_large);
    CHECK_ERR(e.create_session(create_req("app", "u", "new", json{{"app:v", deep_value(depth)}})),
              errc::too_large);
  }

  // Timestamps: NaN and infinities are refused; so is a NaN filter.
  for (double ts :
       {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
        -std::numeric_limits<double>::infinity()}) {
    INFO("timestamp ", ts);
    CHECK_ERR(e.append_event(append_req(ok_ref, make_event(json{{"k", 9}}, "x", ts))),
              errc::invalid_argument);
  }
  {
    auto r = e.get_session(get_req(ok_ref, {}, std::numeric_limits<double>::quiet_NaN()));
    // A NaN filter is refused, or (documented) treated as no filter.
    INFO(describe(r));
    CHECK((r.code() == errc::invalid_argument || (r.ok() && r.value().has_value())));
  }
  CHECK_ERR(e.get_session(get_req(ok_ref, -1)), errc::invalid_argument);
  CHECK_ERR(e.list_sessions(list_req("app", {}, 0)), errc::invalid_argument);
  CHECK_ERR(e.list_sessions(list_req("app", {}, 1001)), errc::invalid_argument);
  CHECK_ERR(e.list_sessions(list_req("app", {}, {}, "not a token")), errc::invalid_argument);
  CHECK_ERR(e.list_sessions(list_req("app", {}, {}, std::string("\0\xff", 2))),
            errc::invalid_argument);

  // Nothing stored changed; every actor still answers.
  CHECK(to_json(get_existing(e, ok_ref)) == session_before);
  if (S::kind == store_kind::lmdb) {
    CHECK(export_all(e) == before);
    auto txn = detail::engine_factory::store_of(e).begin_read();
    CHECK(store::verify_store(*txn).ok());
  }
  CHECK(get_maybe(e, sref("app", "u", "new")) == std::nullopt);
  auto r = append_ok(e, ok_ref, make_event(json{{"k", 3}, {"user:u", 3}, {"app:a", 3}}, "e2"));
  CHECK(r.version == 2);
  CHECK(user_state(e, "app", "u").value("u", 0) == 3);
  CHECK(app_state(e, "app").value("a", 0) == 3);

  // Accepted boundaries: names at the limit, event id at the limit, a key
  // at the limit, an empty key, negative and huge finite timestamps.
  auto max_ref = sref(std::string(max_name_bytes, 'a'), std::string(max_name_bytes, 'u'),
                      std::string(max_name_bytes, 's'));
  MUST(e.create_session(create_req(max_ref)));
  auto ev = make_event(json{{std::string(max_state_key_bytes, 'k'), 1}, {"", 2}},
                       std::string(max_event_id_bytes, 'e'), -1e300);
  auto stored = append_ok(e, max_ref, ev);
  CHECK(stored.ev.id == std::string(max_event_id_bytes, 'e'));
  CHECK(stored.ev.timestamp == -1e300);
  append_ok(e, max_ref, make_event(json::object(), "late", 1e300));
  auto got = get_existing(e, max_ref);
  CHECK(got.version == 2);
  CHECK(got.state.value("", 0) == 2);
}
