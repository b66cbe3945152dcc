// The JSON codec of the public types, the bounded parser, and scope helpers.
#include <doctest/doctest.h>

#include <string>

#include "agentstate/scope.hpp"
#include "agentstate/types.hpp"

using namespace agentstate;

TEST_CASE("codec: unknown members at the top level and in actions round-trip verbatim") {
  json in = json::parse(R"({
    "id": "e1", "invocation_id": "i1", "author": "bot", "timestamp": 12.5,
    "partial": false, "content": {"parts": [{"text": "hi"}]},
    "branch": "a.b", "custom": {"x": [1, 2, {"y": null}]},
    "actions": {"state_delta": {"k": 1}, "artifact_delta": {"f": 2},
                "transfer_to_agent": "other", "escalate": true}
  })");
  auto ev = event_from_json(in);
  REQUIRE(ev);
  CHECK(ev->extra.at("branch") == "a.b");
  CHECK(ev->actions.extra.at("transfer_to_agent") == "other");
  CHECK(to_json(*ev) == in);
}

TEST_CASE("codec: wrong member types are invalid_argument naming the member") {
  auto bad = [](const char* text) { return event_from_json(json::parse(text)); };
  auto r = bad(R"({"id": 5})");
  CHECK(r.code() == errc::invalid_argument);
  CHECK(r.err().message.find("'id'") != std::string::npos);
  CHECK(bad(R"({"timestamp": "now"})").code() == errc::invalid_argument);
  CHECK(bad(R"({"partial": 1})").code() == errc::invalid_argument);
  CHECK(bad(R"({"actions": []})").code() == errc::invalid_argument);
  CHECK(bad(R"({"actions": {"state_delta": [1]}})").code() == errc::invalid_argument);
  CHECK(event_from_json(json::array()).code() == errc::invalid_argument);
  // null for an optional member means absent.
  auto ok = bad(R"({"id": null, "timestamp": null, "actions": null})");
  REQUIRE(ok);
  CHECK(ok->id.empty());
  CHECK_FALSE(ok->timestamp);
}

TEST_CASE("codec: sessions round-trip through JSON") {
  session s;
  s.app_name = "a";
  s.user_id = "u";
  s.id = "s";
  s.state = json{{"k", 1}};
  s.version = 2;
  s.last_update_time = 3.5;
  event e;
  e.id = "e";
  e.timestamp = 1;
  s.events.push_back(e);
  auto back = session_from_json(to_json(s));
  REQUIRE(back);
  CHECK(to_json(*back) == to_json(s));
}

TEST_CASE("parse_json refuses deep nesting without recursing, and bad text") {
  std::string deep(200000, '[');
  deep += std::string(200000, ']');
  auto r = parse_json(deep, 64);
  CHECK(r.code() == errc::too_large);
  std::string ok64 = std::string(64, '[') + std::string(64, ']');
  CHECK(parse_json(ok64, 64).ok());
  std::string over = std::string(65, '[') + std::string(65, ']');
  CHECK(parse_json(over, 64).code() == errc::too_large);
  CHECK(parse_json("{\"a\":1} trailing", 64).code() == errc::invalid_argument);
  CHECK(parse_json("{\"a\":", 64).code() == errc::invalid_argument);
  CHECK(parse_json("\"\xff\"", 64).code() == errc::invalid_argument);
  CHECK(json_depth(json::parse("[[1],{\"a\":{}}]"), 100) == 3);
  CHECK(json_depth(json(5), 100) == 0);
}

TEST_CASE("dump_json reports invalid UTF-8 instead of throwing") {
  json bad = std::string("\xc3\x28");
  CHECK(dump_json(bad).code() == errc::invalid_argument);
  CHECK(dump_json(json{{"k", "v"}}).value() == R"({"k":"v"})");
}

TEST_CASE("S1 scope_of: prefixes are case-sensitive and the first match wins") {
  CHECK(scope_of("app:x") == scope::app);
  CHECK(scope_of("app:") == scope::app);
  CHECK(scope_of("user:x") == scope::user);
  CHECK(scope_of("temp:x") == scope::temp);
  CHECK(scope_of("App:x") == scope::session);
  CHECK(scope_of("x") == scope::session);
  CHECK(scope_of("") == scope::session);
  CHECK(scope_of("app:user:x") == scope::app);
  // N1: turn: lives like temp:; session:, bg: and derived: are session keys.
  CHECK(scope_of("turn:x") == scope::temp);
  CHECK(unprefixed("turn:x") == "x");
  CHECK(scope_of("session:x") == scope::session);
  CHECK(scope_of("bg:x") == scope::session);
  CHECK(scope_of("derived:x") == scope::session);
  CHECK(is_derived("derived:x"));
  CHECK_FALSE(is_derived("x"));
  CHECK(unprefixed("user:x") == "x");
  CHECK(unprefixed("plain") == "plain");
}

TEST_CASE("S2 partition_delta and merge_state split and merge by scope") {
  auto d = partition_delta(json{{"app:a", 1}, {"user:u", 2}, {"temp:t", 3}, {"s", 4}});
  CHECK(d.app == json{{"a", 1}});
  CHECK(d.user == json{{"u", 2}});
  CHECK(d.temp == json{{"temp:t", 3}});
  CHECK(d.session == json{{"s", 4}});
  CHECK(strip_temp(json{{"temp:t", 3}, {"s", 4}}) == json{{"s", 4}});
  auto m = merge_state(json{{"s", 1}}, json{{"u", 2}}, json{{"a", 3}});
  CHECK(m == json{{"s", 1}, {"user:u", 2}, {"app:a", 3}});
}
