// SPDX-License-Identifier: Apache-2.0
// Hostile input through the real `agentstate serve` (README guarantee 8:
// bad input is harmless). Every line below gets a typed error, or one of the
// documented normalisations (docs/testing.md "Hostile input"); the server
// answers a probe after each; and `agentstate export` of the store is
// byte-identical before and after. A 64 MiB line against the default 16 MiB
// --max-line-bytes is refused without the server's peak RSS growing by the
// line's size.
#include "support/serve_process.hpp"

using namespace agentstate;
using namespace agentstate::test;

namespace {

struct hostile {
  std::string label;
  std::string line;
  int code; ///< expected error.code; 0 = success expected
  std::string kind; ///< expected data.kind (errors only)
  std::function<void(const json&)> check = {}; ///< extra check of the response
};

std::string req_text(const std::string& id_json, const std::string& method,
                     const std::string& params_json) {
  return R"({"jsonrpc":"2.0","id":)" + id_json + R"(,"method":")" + method + R"(","params":)"
    + params_json + "}";
}

// A get_session whose session_id member is the raw JSON text `sid`.
std::string get_with_sid(const std::string& sid) {
  return req_text("\"h\"", "get_session",
                  R"({"app_name":"app","user_id":"u1","session_id":)" + sid + "}");
}

// A create_session whose session_id is the raw bytes `sid` inside quotes.
std::string create_with_raw_sid(const std::string& raw) {
  return req_text("\"h\"", "create_session",
                  R"({"app_name":"app","user_id":"u1","session_id":")" + raw + "\"}");
}

// An append to s1 whose event member is the raw JSON text `ev`.
std::string append_raw_event(const std::string& ev) {
  return req_text("\"h\"", "append_event",
                  R"({"app_name":"app","user_id":"u1","session_id":"s1","event":)" + ev + "}");
}

std::string export_store(const std::string& store) {
  auto [rc, out] = run_tool("export '" + store + "' 2>/dev/null");
  REQUIRE(rc == 0);
  REQUIRE(!out.empty());
  return out;
}

} // namespace

TEST_CASE("hostile input through serve: typed errors, the server keeps serving, stored "
          "bytes unchanged") {
  temp_dir tmp;
  const std::string store = (tmp.path() / "store").string();
  server s({"--store", store, "--durability", "nosync"}, (tmp.path() / "serve.err").string());
  s.ok("create_session",
       with(session_params("s1"), "state", json{{"k", 1}, {"user:u", 1}, {"app:a", 1}}));
  s.ok("append_event",
       with(session_params("s1"), "event",
            json{{"id", "e1"}, {"actions", {{"state_delta", {{"k", 2}}}}}}));
  s.ok("flush", nullptr);
  const auto exported_before = export_store(store);
  const auto session_before = s.ok("get_session", session_params("s1"));

  const std::string name100(100, 'n'), name101(101, 'n'), name4k(4096, 'n');
  const std::string evid129(129, 'e'), key201(201, 'k');
  const std::string deep_arrays = std::string(200000, '[') + std::string(200000, ']');
  std::string deep_objects;
  for (int i = 0; i < 200000; ++i)
    deep_objects += "{\"a\":";
  deep_objects += "1" + std::string(200000, '}');
  auto is_null_result = [](const json& r) { CHECK(r["result"].is_null()); };

  std::vector<hostile> cases = {
    // -- framing and syntax
    {"truncated JSON",
     R"({"jsonrpc":"2.0","id":"h","method":"get_session","params":{"app_name":"ap)", -32700,
     "invalid_argument"},
    {"truncated after a key", R"({"jsonrpc":"2.0","id")", -32700, "invalid_argument"},
    {"trailing garbage", req_text("\"h\"", "stats", "{}") + " garbage", -32700, "invalid_argument"},
    {"two objects on one line", req_text("\"h\"", "stats", "{}") + req_text("\"h\"", "stats", "{}"),
     -32700, "invalid_argument"},
    {"NaN literal", append_raw_event(R"({"timestamp":NaN})"), -32700, "invalid_argument"},
    {"Infinity literal", append_raw_event(R"({"timestamp":Infinity})"), -32700, "invalid_argument"},
    {"-Infinity literal", append_raw_event(R"({"timestamp":-Infinity})"), -32700,
     "invalid_argument"},
    {"1e400 timestamp", append_raw_event(R"({"timestamp":1e400})"), -32700, "invalid_argument"},
    {"-1e400 after_timestamp",
     req_text("\"h\"", "get_session",
              R"({"app_name":"app","user_id":"u1","session_id":"s1","after_timestamp":-1e400})"),
     -32700, "invalid_argument"},
    {"30-digit expected_version",
     req_text(
       "\"h\"", "append_event",
       R"({"app_name":"app","user_id":"u1","session_id":"s1","event":{},"expected_version":123456789012345678901234567890})"),
     -32602, "invalid_argument"},
    {"30-digit num_recent_events",
     req_text(
       "\"h\"", "get_session",
       R"({"app_name":"app","user_id":"u1","session_id":"s1","num_recent_events":123456789012345678901234567890})"),
     -32602, "invalid_argument"},
    {"30-digit page_size",
     req_text("\"h\"", "list_sessions",
              R"({"app_name":"app","page_size":-123456789012345678901234567890})"),
     -32602, "invalid_argument"},
    {"30-digit request id: a number, echoed as a double",
     req_text("123456789012345678901234567890", "stats", "{}"), 0, "",
     [](const json& r) { CHECK(r["id"].is_number_float()); }},
    {"duplicate keys: the last wins (session_id)",
     req_text("\"h\"", "get_session",
              R"({"app_name":"app","user_id":"u1","session_id":"nope","session_id":"s1"})"),
     0, "", [](const json& r) { CHECK(r["result"]["id"] == "s1"); }},
    {"duplicate keys: the last wins (method)",
     R"({"jsonrpc":"2.0","id":"h","method":"drop_everything","method":"stats"})", 0, "",
     [](const json& r) { CHECK(r["result"].contains("appends")); }},
    // -- strings and bytes
    {"lone high surrogate escape", create_with_raw_sid("\\ud800"), -32700, "invalid_argument"},
    {"lone low surrogate escape", create_with_raw_sid("\\udc00x"), -32700, "invalid_argument"},
    {"reversed surrogate pair", create_with_raw_sid("\\ude00\\ud83d"), -32700, "invalid_argument"},
    {"valid surrogate pair (normal input)", get_with_sid("\"\\ud83d\\ude00\""), 0, "",
     is_null_result},
    {"invalid UTF-8 byte 0xff", create_with_raw_sid("a\xff"), -32700, "invalid_argument"},
    {"truncated UTF-8 sequence", create_with_raw_sid("a\xc3"), -32700, "invalid_argument"},
    {"overlong '/' (C0 AF)", create_with_raw_sid("\xc0\xaf"), -32700, "invalid_argument"},
    {"overlong 3-byte (E0 80 AF)", create_with_raw_sid("\xe0\x80\xaf"), -32700, "invalid_argument"},
    {"UTF-8 encoded surrogate (ED A0 80)", create_with_raw_sid("\xed\xa0\x80"), -32700,
     "invalid_argument"},
    {"code point above U+10FFFF (F4 90 80 80)", create_with_raw_sid("\xf4\x90\x80\x80"), -32700,
     "invalid_argument"},
    {"invalid UTF-8 in a state key",
     append_raw_event("{\"actions\":{\"state_delta\":{\"k\xff\":1}}}"), -32700, "invalid_argument"},
    {"UTF-8 BOM before the request: skipped", "\xef\xbb\xbf" + get_with_sid("\"s1\""), 0, "",
     [](const json& r) { CHECK(r["result"]["id"] == "s1"); }},
    {"BOM inside a string is just U+FEFF", get_with_sid("\"\xef\xbb\xbfs1\""), 0, "",
     is_null_result},
    {"raw NUL inside a string", create_with_raw_sid(std::string("a\0b", 3)), -32700,
     "invalid_argument"},
    // A raw NUL is never valid JSON text, wherever it stands.
    {"raw NUL after a request, nothing after it",
     req_text("\"h\"", "stats", "{}") + std::string(1, '\0'), -32700, "invalid_argument"},
    {"a lone NUL byte", std::string(1, '\0'), -32700, "invalid_argument"},
    {"\\u0000 in session_id", create_with_raw_sid("s\\u0000x"), -32000, "invalid_argument"},
    {"\\u0000 in app_name",
     req_text("\"h\"", "create_session",
              R"({"app_name":"a\u0000","user_id":"u1","session_id":"x"})"),
     -32000, "invalid_argument"},
    {"\\u0000 in an event id", append_raw_event(R"({"id":"e\u0000"})"), -32000, "invalid_argument"},
    {"\\u0000 in a state key", append_raw_event(R"({"actions":{"state_delta":{"k\u0000":1}}})"),
     -32000, "invalid_argument"},
    {"\\u0000 in an invocation id", append_raw_event(R"({"invocation_id":"\u0000"})"), -32000,
     "invalid_argument"},
    // -- ADK-JS camelCase where the protocol has snake_case: refused, never
    //    stored with its state ignored
    {"camelCase actions.stateDelta", append_raw_event(R"({"actions":{"stateDelta":{"k":3}}})"),
     -32000, "invalid_argument"},
    {"camelCase actions.artifactDelta",
     append_raw_event(R"({"actions":{"artifactDelta":{"f":1}}})"), -32000, "invalid_argument"},
    {"camelCase actions.stateRemove", append_raw_event(R"({"actions":{"stateRemove":["k"]}})"),
     -32000, "invalid_argument"},
    {"camelCase invocationId", append_raw_event(R"({"invocationId":"inv"})"), -32000,
     "invalid_argument"},
    // -- shapes
    {"top-level number", "42", -32600, "invalid_argument"},
    {"top-level string", "\"stats\"", -32600, "invalid_argument"},
    {"top-level true", "true", -32600, "invalid_argument"},
    {"top-level null", "null", -32600, "invalid_argument"},
    {"top-level empty array", "[]", -32600, "invalid_argument"},
    {"top-level array of requests", "[" + req_text("\"h\"", "stats", "{}") + "]", -32600,
     "invalid_argument"},
    {"whitespace only", "   \t ", -32700, "invalid_argument"},
    {"200,000-deep arrays", deep_arrays, -32700, "too_large"},
    {"200,000-deep objects", deep_objects, -32700, "too_large"},
    {"200,000 unclosed brackets", std::string(200000, '['), -32700, "too_large"},
    {"deep value inside a valid request",
     append_raw_event("{\"content\":" + std::string(100, '[') + std::string(100, ']') + "}"),
     -32700, "too_large"},
    {"value 65 deep (over the engine's 64) inside a request",
     append_raw_event("{\"content\":" + std::string(65, '[') + std::string(65, ']') + "}"), -32000,
     "too_large"},
    // -- ids and keys: 0 bytes, max+1, 4 KiB (max itself: see the next test case)
    {"empty app_name",
     req_text("\"h\"", "get_session", R"({"app_name":"","user_id":"u1","session_id":"s1"})"),
     -32000, "invalid_argument"},
    {"empty user_id on create",
     req_text("\"h\"", "create_session", R"({"app_name":"app","user_id":"","session_id":"x"})"),
     -32000, "invalid_argument"},
    {"empty session_id on get", get_with_sid("\"\""), -32000, "invalid_argument"},
    {"session_id at max (100 bytes) on get", get_with_sid("\"" + name100 + "\""), 0, "",
     is_null_result},
    {"session_id max+1 (101 bytes)", create_with_raw_sid(name101), -32000, "too_large"},
    {"session_id 4 KiB", create_with_raw_sid(name4k), -32000, "too_large"},
    {"app_name 4 KiB", req_text("\"h\"", "get_app_state", "{\"app_name\":\"" + name4k + "\"}"),
     -32000, "too_large"},
    {"user_id max+1 on get_user_state",
     req_text("\"h\"", "get_user_state", "{\"app_name\":\"app\",\"user_id\":\"" + name101 + "\"}"),
     -32000, "too_large"},
    {"event id max+1 (129 bytes)", append_raw_event("{\"id\":\"" + evid129 + "\"}"), -32000,
     "too_large"},
    {"event id 4 KiB", append_raw_event("{\"id\":\"" + name4k + "\"}"), -32000, "too_large"},
    {"state key max+1 (201 bytes)",
     append_raw_event("{\"actions\":{\"state_delta\":{\"" + key201 + "\":1}}}"), -32000,
     "too_large"},
    {"state key 4 KiB", append_raw_event("{\"actions\":{\"state_delta\":{\"" + name4k + "\":1}}}"),
     -32000, "too_large"},
    {"user: key over the limit",
     append_raw_event("{\"actions\":{\"state_delta\":{\"user:" + key201 + "\":1}}}"), -32000,
     "too_large"},
    // -- non-string ids
    {"numeric session_id", get_with_sid("7"), -32602, "invalid_argument"},
    {"null session_id (= absent)", get_with_sid("null"), -32602, "invalid_argument"},
    {"array session_id", get_with_sid("[\"s1\"]"), -32602, "invalid_argument"},
    {"object session_id", get_with_sid("{\"id\":\"s1\"}"), -32602, "invalid_argument"},
    {"boolean session_id", get_with_sid("true"), -32602, "invalid_argument"},
    {"numeric event id", append_raw_event(R"({"id":5})"), -32602, "invalid_argument"},
    {"object request id", req_text("{\"a\":1}", "stats", "{}"), -32600, "invalid_argument"},
    {"array request id", req_text("[1]", "stats", "{}"), -32600, "invalid_argument"},
    {"boolean request id", req_text("false", "stats", "{}"), -32600, "invalid_argument"},
    // -- timestamps
    {"string timestamp", append_raw_event(R"({"timestamp":"now"})"), -32602, "invalid_argument"},
    {"boolean timestamp", append_raw_event(R"({"timestamp":true})"), -32602, "invalid_argument"},
    {"string after_timestamp",
     req_text("\"h\"", "get_session",
              R"({"app_name":"app","user_id":"u1","session_id":"s1","after_timestamp":"x"})"),
     -32602, "invalid_argument"},
    {"negative num_recent_events",
     req_text("\"h\"", "get_session",
              R"({"app_name":"app","user_id":"u1","session_id":"s1","num_recent_events":-1})"),
     -32000, "invalid_argument"},
    // -- requests that are refused before storing anything
    {"append to a missing session",
     req_text("\"h\"", "append_event",
              R"({"app_name":"app","user_id":"u1","session_id":"missing","event":{}})"),
     -32000, "not_found"},
    {"create of an existing session", create_with_raw_sid("s1"), -32000, "already_exists"},
    {"stale expected_version",
     req_text(
       "\"h\"", "append_event",
       R"({"app_name":"app","user_id":"u1","session_id":"s1","event":{},"expected_version":0})"),
     -32000, "version_conflict"},
  };

  int probe = 0;
  for (const auto& c : cases) {
    INFO("case: ", c.label);
    s.send(c.line + "\n");
    auto r = s.next(20s);
    INFO("response: ", r.dump().substr(0, 400));
    if (c.code == 0) {
      CHECK(r.contains("result"));
      CHECK(!r.contains("error"));
    } else {
      REQUIRE(r.contains("error"));
      CHECK(r["error"]["code"] == c.code);
      CHECK(r["error"]["data"]["kind"] == c.kind);
      if (c.code == -32700)
        CHECK(r["id"].is_null());
    }
    if (c.check)
      c.check(r);
    // The server keeps serving.
    auto id = "probe-" + std::to_string(++probe);
    s.send_line(rpc(id, "stats", json::object()));
    auto p = s.next(20s);
    CHECK(p["id"] == id);
    CHECK(p.contains("result"));
  }

  { // A 64 MiB line against the default 16 MiB limit.
    long hwm_before = s.status_kib("VmHWM");
    long rss_before = s.status_kib("VmRSS");
    REQUIRE(hwm_before > 0);
    // A valid create_session whose state value is 64 MiB, sent in 1 MiB writes.
    std::string head =
      R"({"jsonrpc":"2.0","id":"huge","method":"create_session","params":{"app_name":"app","user_id":"u1","session_id":"huge","state":{"v":")";
    s.send(head);
    std::string chunk(1 << 20, 'x');
    for (int i = 0; i < 64; ++i)
      s.send(chunk);
    s.send("\"}}}\n");
    auto r = s.next(60s);
    INFO("response: ", r.dump().substr(0, 400));
    CHECK(r["error"]["code"] == -32700);
    CHECK(r["error"]["data"]["kind"] == "too_large");
    CHECK(r["id"].is_null());
    long hwm_after = s.status_kib("VmHWM");
    long rss_after = s.status_kib("VmRSS");
    MESSAGE("64 MiB line: server VmHWM ", hwm_before / 1024, " -> ", hwm_after / 1024,
            " MiB, VmRSS ", rss_before / 1024, " -> ", rss_after / 1024, " MiB");
    // It holds at most the 16 MiB limit of the line (plus slack), never 64 MiB.
    CHECK(hwm_after - hwm_before < 40 * 1024);
    CHECK(s.ok("get_session", session_params("huge")).is_null());
  }

  // Nothing stored changed: the session reads the same and the export of
  // the whole store is byte-identical.
  CHECK(s.ok("get_session", session_params("s1")) == session_before);
  s.ok("flush", nullptr);
  CHECK(export_store(store) == exported_before);
  auto st = s.ok("stats", nullptr);
  CHECK(st["appends"] == 1);
  CHECK(s.wait_exit() == 0);
  CHECK(export_store(store) == exported_before);
}

TEST_CASE("hostile input through serve: boundary values that are accepted round-trip exactly") {
  temp_dir tmp;
  const std::string store = (tmp.path() / "store").string();
  server s({"--store", store, "--durability", "nosync"}, (tmp.path() / "serve.err").string());
  const std::string name100(100, 'n'), evid128(128, 'e'), key200(200, 'k');
  auto sp = session_params(name100, std::string(100, 'u'), std::string(100, 'a'));
  auto created = s.ok("create_session", sp);
  CHECK(created["id"] == name100);
  auto append = [&](json ev) { return s.ok("append_event", with(sp, "event", std::move(ev))); };
  // Max-length event id and state key, an empty state key, a NUL inside a
  // string *value* (allowed: only names and keys refuse NUL), non-BMP text.
  auto r = append(json{{"id", evid128},
                       {"actions",
                        {{"state_delta",
                          {{key200, 1},
                           {"", "empty key"},
                           {"v", std::string("a\0b", 3)},
                           {"emoji", "\xf0\x9f\x98\x80"}}}}}});
  CHECK(r["event"]["id"] == evid128);
  // Timestamps: negative, zero, huge (all finite) are stored as given.
  for (double ts : {-1.0, 0.0, 1e300, -1e300}) {
    auto x = append(json{{"timestamp", ts}});
    CHECK(x["event"]["timestamp"] == ts);
  }
  // An empty event id means "generate one" (C1/A-rules), not an error.
  auto gen = append(json{{"id", ""}});
  CHECK(gen["event"]["id"].get<std::string>().size() > 0);
  auto got = s.ok("get_session", sp);
  CHECK(got["version"] == 6);
  CHECK(got["state"][key200] == 1);
  CHECK(got["state"][""] == "empty key");
  CHECK(got["state"]["v"] == std::string("a\0b", 3));
  CHECK(got["state"]["emoji"] == "\xf0\x9f\x98\x80");
  CHECK(s.wait_exit() == 0);
  auto [rc, out] = run_tool("verify '" + store + "' 2>&1");
  INFO(out);
  CHECK(rc == 0);
}

// Regression: nlohmann's lexer reads a raw NUL byte as the end of input, so
// parse_json accepted anything after a NUL: "{...}\0garbage" was answered as
// the request before the NUL, where docs/protocol.md promises -32700 for
// trailing data. parse_json now refuses raw NUL bytes.
TEST_CASE("regression: hostile input through serve: bytes after a raw NUL are refused") {
  temp_dir tmp;
  server s({"--memory"}, (tmp.path() / "serve.err").string());
  s.send(std::string(R"({"jsonrpc":"2.0","id":"h","method":"stats"})") + std::string(1, '\0')
         + " garbage\n");
  auto r = s.next();
  INFO("response: ", r.dump());
  CHECK(r.contains("error"));
  CHECK(r["id"].is_null());
  CHECK(s.wait_exit() == 0);
}
