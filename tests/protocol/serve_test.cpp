// SPDX-License-Identifier: Apache-2.0
// test-name: tools_serve_test
// `agentstate serve` over stdin/stdout: the real binary, driven through pipes.
// Covers every method of docs/protocol.md, every error kind a client can reach,
// malformed lines, pipelining, per-session order, notifications and the
// end-of-input contract (exit 0, data durable).
#include "model/shard.hpp"
#include "support/serve_process.hpp"
#include "support/test_support.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>

extern char** environ;

namespace {

using namespace agentstate;
using namespace agentstate::test;
using namespace std::chrono_literals;

// The tool as a child process: requests go to its stdin, a thread collects
// its stdout lines, stderr goes to a file.

// Runs `serve args` with no input; returns {exit code, stdout}.
std::pair<int, std::string> run_once(const std::vector<std::string>& args) {
  std::string cmd = std::string(AGENTSTATE_BIN) + " serve";
  for (auto& a : args)
    cmd += " '" + a + "'";
  cmd += " </dev/null 2>/dev/null";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  while (auto n = std::fread(buf, 1, sizeof buf, p))
    out.append(buf, n);
  int status = ::pclose(p);
  REQUIRE(WIFEXITED(status));
  return {WEXITSTATUS(status), out};
}

json request(json id, const std::string& method, json params) {
  return json{
    {"jsonrpc", "2.0"}, {"id", std::move(id)}, {"method", method}, {"params", std::move(params)}};
}

json append_params(const std::string& session, json event) {
  return with(session_params(session), "event", std::move(event));
}

std::string error_kind(const json& r) {
  INFO("response: ", r.dump());
  REQUIRE(r.contains("error"));
  return r["error"]["data"]["kind"].get<std::string>();
}

int error_code(const json& r) {
  INFO("response: ", r.dump());
  REQUIRE(r.contains("error"));
  return r["error"]["code"].get<int>();
}

std::string error_message(const json& r) {
  REQUIRE(r.contains("error"));
  return r["error"]["message"].get<std::string>();
}

struct fixture {
  temp_dir dir;
  std::string store() const { return (dir.path() / "store").string(); }
  std::string err() const { return (dir.path() / "stderr.txt").string(); }
};

} // namespace

TEST_CASE("serve: --help exits 0 on stdout; bad usage exits 2") {
  auto [code, out] = run_once({"--help"});
  CHECK(code == 0);
  CHECK(out.find("usage: agentstate serve") != std::string::npos);
  CHECK(run_once({}).first == 2);
  CHECK(run_once({"--memory", "--store", "/tmp/x"}).first == 2);
  CHECK(run_once({"--memory", "--bogus"}).first == 2);
  CHECK(run_once({"--memory", "--max-line-bytes", "0"}).first == 2);
  CHECK(run_once({"--memory", "--durability", "maybe"}).first == 2);
  CHECK(run_once({"--memory", "--listen", "127.0.0.1:notaport"}).first == 2);
  // Empty input on an in-memory store: nothing to do, exit 0, nothing written.
  auto [ok_code, ok_out] = run_once({"--memory"});
  CHECK(ok_code == 0);
  CHECK(ok_out.empty());
}

TEST_CASE("serve: every method of the protocol") {
  fixture f;
  server s({"--store", f.store(), "--durability", "nosync"}, f.err());

  // create_session: scopes routed, temp: dropped, no events, version 0.
  auto created =
    s.ok("create_session",
         with(session_params("s1"), "state",
              json{{"k", "v"}, {"app:shared", 1}, {"user:lang", "en"}, {"temp:x", 1}}));
  CHECK(created["id"] == "s1");
  CHECK(created["app_name"] == "app");
  CHECK(created["user_id"] == "u1");
  CHECK(created["version"] == 0);
  CHECK(created["events"] == json::array());
  CHECK(created["state"] == json{{"k", "v"}, {"app:shared", 1}, {"user:lang", "en"}});
  CHECK(created["last_update_time"].is_number());

  auto generated = s.ok("create_session", json{{"app_name", "app"}, {"user_id", "u1"}});
  CHECK(!generated["id"].get<std::string>().empty());

  // append_event: temp: stripped from the stored event, unknown fields kept.
  json ev{{"id", "e1"},
          {"invocation_id", "inv-1"},
          {"author", "agent"},
          {"timestamp", 1000.0},
          {"custom", {{"a", 1}}},
          {"content", {{"parts", json::array({{{"text", "hi"}}})}}},
          {"actions",
           {{"state_delta", {{"step", 1}, {"temp:scratch", "x"}, {"user:seen", true}}},
            {"transfer_to_agent", "other"}}}};
  auto appended = s.ok("append_event", append_params("s1", ev));
  CHECK(appended["version"] == 1);
  auto stored = appended["event"];
  CHECK(stored["id"] == "e1");
  CHECK(stored["custom"] == json{{"a", 1}});
  CHECK(stored["content"] == ev["content"]);
  CHECK(stored["actions"]["transfer_to_agent"] == "other");
  CHECK(stored["actions"]["state_delta"] == json{{"step", 1}, {"user:seen", true}});
  CHECK(stored["actions"]["artifact_delta"] == json::object());

  s.ok(
    "append_event",
    append_params(
      "s1",
      json{{"id", "e2"}, {"invocation_id", "inv-1"}, {"author", "agent"}, {"timestamp", 2000.0}}));
  auto third = s.ok(
    "append_event",
    with(
      append_params(
        "s1",
        json{{"id", "e3"}, {"invocation_id", "inv-1"}, {"author", "agent"}, {"timestamp", 3000.0}}),
      "expected_version", 2));
  CHECK(third["version"] == 3);

  // get_session: all, last n, after t, with the live invocation's temp: keys.
  auto all = s.ok("get_session", session_params("s1"));
  CHECK(all["version"] == 3);
  REQUIRE(all["events"].size() == 3);
  CHECK(all["events"][0]["id"] == "e1");
  CHECK(all["events"][2]["id"] == "e3");
  CHECK(all["last_update_time"] == 3000.0);
  CHECK(all["state"]["step"] == 1);
  CHECK(all["state"]["user:seen"] == true);
  CHECK(!all["state"].contains("temp:scratch"));
  auto last = s.ok("get_session", with(session_params("s1"), "num_recent_events", 1));
  REQUIRE(last["events"].size() == 1);
  CHECK(last["events"][0]["id"] == "e3");
  auto after = s.ok("get_session", with(session_params("s1"), "after_timestamp", 2000.0));
  CHECK(after["events"].size() == 2);
  auto live = s.ok("get_session", with(session_params("s1"), "invocation_id", "inv-1"));
  CHECK(live["state"]["temp:scratch"] == "x");

  // end_invocation drops the temp: state.
  CHECK(s.ok("end_invocation", with(session_params("s1"), "invocation_id", "inv-1")).is_null());
  auto ended = s.ok("get_session", with(session_params("s1"), "invocation_id", "inv-1"));
  CHECK(!ended["state"].contains("temp:scratch"));

  // list_sessions, one per page.
  std::vector<std::string> ids;
  json token = nullptr;
  for (int page = 0; page < 5; ++page) {
    json params{{"app_name", "app"}, {"user_id", "u1"}, {"page_size", 1}};
    if (!token.is_null())
      params["page_token"] = token;
    auto r = s.ok("list_sessions", params);
    REQUIRE(r["sessions"].size() <= 1);
    for (auto& m : r["sessions"]) {
      CHECK(!m.contains("events"));
      CHECK(m["state"]["app:shared"] == 1);
      ids.push_back(m["id"]);
    }
    token = r["next_page_token"];
    if (token.is_null())
      break;
    CHECK(token.is_string());
  }
  std::sort(ids.begin(), ids.end());
  auto want = std::vector<std::string>{"s1", generated["id"].get<std::string>()};
  std::sort(want.begin(), want.end());
  CHECK(ids == want);
  auto every_user = s.ok("list_sessions", json{{"app_name", "app"}});
  CHECK(every_user["sessions"].size() == 2);
  CHECK(every_user["next_page_token"].is_null());

  // Shared scopes, keys without prefix.
  CHECK(s.ok("get_app_state", json{{"app_name", "app"}}) == json{{"shared", 1}});
  CHECK(s.ok("get_user_state", json{{"app_name", "app"}, {"user_id", "u1"}})
        == json{{"lang", "en"}, {"seen", true}});

  CHECK(s.ok("flush", nullptr).is_null());
  auto stats = s.ok("stats", nullptr);
  CHECK(stats["appends"] == 3);
  CHECK(stats.contains("commits"));

  // delete_session, then the session reads as null; deleting again is a no-op.
  CHECK(s.ok("delete_session", session_params("s1")).is_null());
  CHECK(s.ok("get_session", session_params("s1")).is_null());
  CHECK(s.ok("delete_session", session_params("s1")).is_null());
  CHECK(s.wait_exit() == 0);
}

TEST_CASE("serve: inject_state renders templates (I2); state_remove deletes keys") {
  fixture f;
  server s({"--memory"}, f.err());
  s.ok("create_session",
       with(session_params("s1"), "state",
            json{{"user:name", "Ada"}, {"app:tone", "dry"}, {"n", 3}, {"gone", 1}}));
  s.ok("append_event",
       append_params(
         "s1",
         json{{"invocation_id", "inv-1"},
              {"actions", {{"state_delta", {{"temp:topic", "x"}}}, {"state_remove", {"gone"}}}}}));
  auto text = s.ok(
    "inject_state",
    with(with(session_params("s1"), "template", "{user:name}/{app:tone}/{n}/{temp:topic}/{json:x}"),
         "invocation_id", "inv-1"));
  CHECK(text == "Ada/dry/3/x/{json:x}");
  // Without the invocation its temp: keys are missing: required is an error, ? is empty.
  auto missing = s.call("inject_state", with(session_params("s1"), "template", "{temp:topic}"));
  CHECK(error_kind(missing) == "not_found");
  CHECK(error_message(missing).find("temp:topic") != std::string::npos);
  CHECK(s.ok("inject_state", with(session_params("s1"), "template", "[{temp:topic?}]")) == "[]");
  CHECK(s.ok("inject_state", with(session_params("s1"), "template", "{gone?}")) == "");
  auto no_session = s.call("inject_state", with(session_params("nope"), "template", "x"));
  CHECK(error_kind(no_session) == "not_found");
  auto no_template = s.call("inject_state", session_params("s1"));
  CHECK(error_kind(no_template) == "invalid_argument");
  auto stored = s.ok("get_session", session_params("s1"));
  CHECK(!stored["state"].contains("gone"));
  CHECK(stored["events"][0]["actions"]["state_remove"] == json::array({"gone"}));
  CHECK(s.wait_exit() == 0);
}

TEST_CASE("serve: append_event's modify operations; condition_failed stores nothing") {
  fixture f;
  server s({"--memory"}, f.err());
  s.ok("create_session",
       with(session_params("s1"), "state", json{{"k", 1}, {"user:l", json::array()}}));
  json ops =
    json::array({json{{"key", "app:n"}, {"op", "increment"}, {"by", 2}},
                 json{{"key", "user:l"}, {"op", "append"}, {"value", "x"}},
                 json{{"key", "m"}, {"op", "merge"}, {"value", {{"a", 1}}}},
                 json{{"key", "once"}, {"op", "set_if_absent"}, {"value", true}},
                 json{{"key", "k"}, {"op", "compare_and_set"}, {"expected", 1}, {"value", 2}}});
  auto r = s.ok("append_event", with(append_params("s1", json{{"id", "e1"}}), "modify", ops));
  CHECK(r["version"] == 1);
  CHECK(r["event"]["actions"]["state_delta"]
        == json{{"app:n", 2}, {"user:l", {"x"}}, {"m", {{"a", 1}}}, {"once", true}, {"k", 2}});
  auto failed = s.call(
    "append_event",
    with(
      append_params("s1", json{{"id", "e2"}, {"actions", {{"state_delta", {{"z", 1}}}}}}), "modify",
      json::array({json{{"key", "k"}, {"op", "compare_and_set"}, {"expected", 1}, {"value", 3}}})));
  CHECK(error_code(failed) == -32000);
  CHECK(error_kind(failed) == "condition_failed");
  auto bad_op = s.call("append_event",
                       with(append_params("s1", json::object()), "modify",
                            json::array({json{{"key", "k"}, {"op", "nope"}}})));
  CHECK(error_code(bad_op) == -32602);
  CHECK(error_message(bad_op).find("unknown op") != std::string::npos);
  auto got = s.ok("get_session", session_params("s1"));
  CHECK(got["version"] == 1);
  CHECK(got["state"]["k"] == 2);
  CHECK(!got["state"].contains("z"));
  CHECK(s.wait_exit() == 0);
}

TEST_CASE("serve: list_sessions' order, offset and include_total") {
  fixture f;
  server s({"--memory"}, f.err());
  for (int i = 0; i < 5; ++i) {
    auto sid = "s" + std::to_string(i);
    s.ok("create_session", session_params(sid));
    s.ok("append_event", append_params(sid, json{{"timestamp", 100.0 + i}}));
  }
  auto ids = [](const json& r) {
    std::vector<std::string> out;
    for (auto& m : r["sessions"])
      out.push_back(m["id"]);
    return out;
  };
  auto desc =
    s.ok("list_sessions",
         json{{"app_name", "app"}, {"order", "desc"}, {"page_size", 2}, {"include_total", true}});
  CHECK(ids(desc) == std::vector<std::string>{"s4", "s3"});
  CHECK(desc["total"] == 5);
  auto next = s.ok("list_sessions",
                   json{{"app_name", "app"},
                        {"order", "desc"},
                        {"page_size", 2},
                        {"page_token", desc["next_page_token"]}});
  CHECK(ids(next) == std::vector<std::string>{"s2", "s1"});
  CHECK(!next.contains("total"));
  auto off = s.ok("list_sessions", json{{"app_name", "app"}, {"offset", 3}});
  CHECK(ids(off) == std::vector<std::string>{"s3", "s4"});
  auto bad = s.call("list_sessions", json{{"app_name", "app"}, {"order", "sideways"}});
  CHECK(error_code(bad) == -32602);
  auto bad_total = s.call("list_sessions", json{{"app_name", "app"}, {"include_total", 1}});
  CHECK(error_code(bad_total) == -32602);
  auto bad_offset = s.call("list_sessions", json{{"app_name", "app"}, {"offset", -1}});
  CHECK(error_code(bad_offset) == -32602);
  // shards and shard_count: together, numbers below the count.
  const auto shard_of_u = model::shard_of("app", "u1", 4);
  auto in_shard = s.ok("list_sessions",
                       json{{"app_name", "app"},
                            {"shards", json::array({shard_of_u})},
                            {"shard_count", 4},
                            {"include_total", true}});
  CHECK(in_shard["total"] == 5);
  auto other = s.ok("list_sessions",
                    json{{"app_name", "app"},
                         {"shards", json::array({(shard_of_u + 1) % 4})},
                         {"shard_count", 4},
                         {"include_total", true}});
  CHECK(other["total"] == 0);
  CHECK(other["sessions"].empty());
  for (const auto& wrong : {json{{"shards", json::array({0})}}, json{{"shard_count", 4}},
                            json{{"shards", json::array({4})}, {"shard_count", 4}},
                            json{{"shards", json::array({0})}, {"shard_count", 0}},
                            json{{"shards", "0"}, {"shard_count", 4}}}) {
    json params = wrong;
    params["app_name"] = "app";
    INFO(params.dump());
    CHECK(error_code(s.call("list_sessions", params)) == -32602);
  }
  CHECK(s.wait_exit() == 0);
}

TEST_CASE("serve: list_sessions by creation time, and shared_state once") {
  fixture f;
  server s({"--memory"}, f.err());
  // Created s0..s3 in order, then appended in reverse: update order s3..s0.
  for (int i = 0; i < 4; ++i)
    s.ok("create_session", session_params("s" + std::to_string(i)));
  for (int i = 3; i >= 0; --i)
    s.ok(
      "append_event",
      append_params("s" + std::to_string(i), json{{"actions", {{"state_delta", {{"app:k", i}}}}}}));
  auto ids = [](const json& r) {
    std::vector<std::string> out;
    for (auto& m : r["sessions"])
      out.push_back(m["id"]);
    return out;
  };
  CHECK(ids(s.ok("list_sessions", json{{"app_name", "app"}}))
        == std::vector<std::string>{"s3", "s2", "s1", "s0"});
  auto first =
    s.ok("list_sessions", json{{"app_name", "app"}, {"order_by", "created"}, {"page_size", 3}});
  CHECK(ids(first) == std::vector<std::string>{"s0", "s1", "s2"});
  auto rest = s.ok(
    "list_sessions",
    json{{"app_name", "app"}, {"order_by", "created"}, {"page_token", first["next_page_token"]}});
  CHECK(ids(rest) == std::vector<std::string>{"s3"});
  CHECK(rest["next_page_token"].is_null());

  auto merged = s.ok("list_sessions", json{{"app_name", "app"}});
  CHECK(!merged.contains("app_state"));
  CHECK(merged["sessions"][0]["state"]["app:k"] == 0);
  auto once = s.ok("list_sessions", json{{"app_name", "app"}, {"shared_state", "once"}});
  CHECK(once["app_state"] == json{{"app:k", 0}});
  REQUIRE(once["user_states"].is_object());
  CHECK(once["user_states"].size() == 1);
  CHECK(once["user_states"].begin().key() == merged["sessions"][0]["user_id"]);
  for (auto& m : once["sessions"])
    CHECK(!m["state"].contains("app:k"));

  auto bad_order = s.call("list_sessions", json{{"app_name", "app"}, {"order_by", "birth"}});
  CHECK(error_code(bad_order) == -32602);
  CHECK(error_message(bad_order).find("created") != std::string::npos);
  auto bad_form = s.call("list_sessions", json{{"app_name", "app"}, {"shared_state", "twice"}});
  CHECK(error_code(bad_form) == -32602);
  CHECK(s.wait_exit() == 0);
}

TEST_CASE("serve: engine errors carry their kind") {
  fixture f;
  server s({"--memory"}, f.err());
  s.ok("create_session", session_params("s1"));

  auto dup = s.call("create_session", session_params("s1"));
  CHECK(error_code(dup) == -32000);
  CHECK(error_kind(dup) == "already_exists");

  auto missing = s.call("append_event", append_params("nope", json{{"author", "a"}}));
  CHECK(error_code(missing) == -32000);
  CHECK(error_kind(missing) == "not_found");

  auto bad_page = s.call("list_sessions", json{{"app_name", "app"}, {"page_size", 0}});
  CHECK(error_kind(bad_page) == "invalid_argument");
  CHECK(error_message(bad_page).find("page_size") != std::string::npos);
  auto negative = s.call("get_session", with(session_params("s1"), "num_recent_events", -1));
  CHECK(error_kind(negative) == "invalid_argument");

  auto conflict =
    s.call("append_event", with(append_params("s1", json{{"author", "a"}}), "expected_version", 7));
  CHECK(error_code(conflict) == -32000);
  CHECK(error_kind(conflict) == "version_conflict");
  CHECK(conflict["error"]["data"]["current_version"] == 0);

  auto long_name = s.call("create_session", session_params("s2", "u1", bytes(101)));
  CHECK(error_code(long_name) == -32000);
  CHECK(error_kind(long_name) == "too_large");
  auto deep = json::array();
  for (int i = 0; i < 66; ++i)
    deep = json::array({deep});
  auto too_deep = s.call("append_event",
                         append_params("s1", json{{"actions", {{"state_delta", {{"k", deep}}}}}}));
  CHECK(error_kind(too_deep) == "too_large");

  // Nothing above changed the session.
  auto got = s.ok("get_session", session_params("s1"));
  CHECK(got["version"] == 0);
  CHECK(s.wait_exit() == 0);
}

TEST_CASE("serve: malformed lines are answered; the server goes on; nothing changes") {
  fixture f;
  server s({"--store", f.store(), "--durability", "nosync", "--max-line-bytes", "4096"}, f.err());
  s.ok("create_session", with(session_params("s1"), "state", json{{"k", 1}}));
  s.ok("append_event",
       append_params(
         "s1", json{{"id", "e1"}, {"author", "a"}, {"actions", {{"state_delta", {{"k", 2}}}}}}));
  auto before = s.ok("get_session", session_params("s1"));
  auto list_before = s.ok("list_sessions", json{{"app_name", "app"}});

  auto append_line = [](json params) { return request(1, "append_event", params).dump(); };
  struct bad_line {
    std::string text;
    int code;
    std::string kind;
    json id;
    std::string mentions; // the message must name this, when set
  };
  std::string deep_array = std::string(200, '[') + std::string(200, ']');
  std::vector<bad_line> lines = {
    {R"({"jsonrpc":"2.0","id":1,)", -32700, "invalid_argument", nullptr, ""},
    {R"({"jsonrpc":"2.0","id":2,"method":"stats"} trailing)", -32700, "invalid_argument", nullptr,
     ""},
    {"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"create_session\",\"params\":{\"app_name\":"
     "\"a\xff\xfe\",\"user_id\":\"u\",\"session_id\":\"bad\"}}",
     -32700, "invalid_argument", nullptr, ""},
    {"", -32700, "invalid_argument", nullptr, ""},
    {deep_array, -32700, "too_large", nullptr, ""},
    {"42", -32600, "invalid_argument", nullptr, ""},
    {R"("a string")", -32600, "invalid_argument", nullptr, ""},
    {R"([{"jsonrpc":"2.0","id":1,"method":"stats"}])", -32600, "invalid_argument", nullptr, ""},
    {R"({"id":7,"method":"stats"})", -32600, "invalid_argument", 7, "jsonrpc"},
    {R"({"jsonrpc":"1.0","id":7,"method":"stats"})", -32600, "invalid_argument", 7, "jsonrpc"},
    {R"({"jsonrpc":"2.0","id":8})", -32600, "invalid_argument", 8, "method"},
    {R"({"jsonrpc":"2.0","id":true,"method":"stats"})", -32600, "invalid_argument", nullptr, "id"},
    {R"({"jsonrpc":"2.0","id":"x","method":"drop_everything"})", -32601, "invalid_argument", "x",
     "drop_everything"},
    {R"({"jsonrpc":"2.0","id":9,"method":"get_session","params":["app","u1","s1"]})", -32602,
     "invalid_argument", 9, "params"},
    {request(10, "create_session", json{{"app_name", 5}, {"user_id", "u"}}).dump(), -32602,
     "invalid_argument", 10, "app_name"},
    {request(11, "get_session", with(session_params("s1"), "num_recent_events", "3")).dump(),
     -32602, "invalid_argument", 11, "num_recent_events"},
    {request(12, "get_session", json{{"app_name", "app"}, {"user_id", "u1"}}).dump(), -32602,
     "invalid_argument", 12, "session_id"},
    {append_line(append_params("s1", "not an event")), -32602, "invalid_argument", 1, "event"},
    {append_line(append_params("s1", json{{"timestamp", "yesterday"}})), -32602, "invalid_argument",
     1, "timestamp"},
    {append_line(append_params("s1", json{{"actions", {{"state_delta", json::array()}}}})), -32602,
     "invalid_argument", 1, "state_delta"},
    {append_line(with(append_params("s1", json::object()), "expected_version", -1)), -32602,
     "invalid_argument", 1, "expected_version"},
    {append_line(session_params("s1")), -32602, "invalid_argument", 1, "event"},
    {request(13, "list_sessions", json{{"app_name", "app"}, {"page_size", 1.5}}).dump(), -32602,
     "invalid_argument", 13, "page_size"},
    {request(14, "create_session", with(session_params("s9"), "state", json::array())).dump(),
     -32602, "invalid_argument", 14, "state"},
    // Over --max-line-bytes: discarded unread, even though it is a valid request.
    {request(15, "create_session", with(session_params("big"), "state", json{{"v", bytes(8000)}}))
       .dump(),
     -32700, "too_large", nullptr, "4096"},
  };
  int probe = 0;
  for (const auto& bad : lines) {
    INFO("line: ", bad.text.substr(0, 200));
    // A line refused while it is read is answered then; one that names a
    // session is answered in that session's order, which a stats probe on
    // another lane may overtake: the two answers are told apart by id.
    auto probe_id = "probe-" + std::to_string(++probe);
    s.send(bad.text + "\n" + request(probe_id, "stats", json::object()).dump() + "\n");
    auto r = s.next();
    auto p = s.next();
    if (r["id"] == probe_id)
      std::swap(r, p);
    INFO("response: ", r.dump());
    CHECK(error_code(r) == bad.code);
    CHECK(error_kind(r) == bad.kind);
    CHECK(r["id"] == bad.id);
    if (!bad.mentions.empty())
      CHECK(error_message(r).find(bad.mentions) != std::string::npos);
    CHECK(p["id"] == probe_id);
    CHECK(p.contains("result"));
  }

  // A 3 MiB line against a 4 KiB limit, in many pipe writes, then a CRLF line.
  s.send(request(16, "create_session",
                 with(session_params("huge"), "state", json{{"v", bytes(3 << 20)}}))
           .dump()
         + "\n" + request("after", "get_session", session_params("huge")).dump() + "\r\n");
  auto huge = s.next();
  CHECK(error_kind(huge) == "too_large");
  CHECK(huge["id"].is_null());
  auto after_huge = s.next();
  CHECK(after_huge["id"] == "after");
  CHECK(after_huge["result"].is_null());

  CHECK(s.ok("get_session", session_params("s1")) == before);
  CHECK(s.ok("list_sessions", json{{"app_name", "app"}}) == list_before);
  CHECK(s.ok("get_session", session_params("big")).is_null());
  CHECK(s.ok("get_session", session_params("bad", "u", "a")).is_null());
  CHECK(s.ok("get_session", session_params("s9")).is_null());
  CHECK(s.wait_exit() == 0);
}

TEST_CASE("serve: pipelined requests across sessions are all answered, matched by id") {
  fixture f;
  server s({"--store", f.store(), "--durability", "nosync"}, f.err());
  const int sessions = 16;
  const int appends = 25;
  std::string batch;
  for (int k = 0; k < sessions; ++k)
    batch +=
      request("c" + std::to_string(k), "create_session", session_params("s" + std::to_string(k)))
        .dump()
      + "\n";
  for (int j = 0; j < appends; ++j)
    for (int k = 0; k < sessions; ++k)
      batch += request("s" + std::to_string(k) + "-a" + std::to_string(j), "append_event",
                       append_params("s" + std::to_string(k),
                                     json{{"author", "a"}, {"id", "e" + std::to_string(j)}}))
                 .dump()
        + "\n";
  for (int k = 0; k < sessions; ++k)
    batch += request(k, "get_session",
                     with(session_params("s" + std::to_string(k)), "num_recent_events", 0))
               .dump()
      + "\n";
  s.send(batch);
  auto got = s.collect(sessions * (appends + 2));
  for (int k = 0; k < sessions; ++k) {
    auto sk = "s" + std::to_string(k);
    auto c = got[json("c" + std::to_string(k)).dump()];
    CHECK(c["result"]["id"] == sk);
    for (int j = 0; j < appends; ++j) {
      auto& r = got[json(sk + "-a" + std::to_string(j)).dump()];
      INFO("response: ", r.dump());
      CHECK(r["result"]["version"] == j + 1);
      CHECK(r["result"]["event"]["id"] == "e" + std::to_string(j));
    }
    auto& g = got[json(k).dump()];
    CHECK(g["result"]["version"] == appends);
  }
  CHECK(s.wait_exit() == 0);
  CHECK(s.rest().empty()); // nothing written beyond the lines taken
}

TEST_CASE("serve: one session's requests run in the order they were read") {
  fixture f;
  server s({"--store", f.store(), "--durability", "nosync"}, f.err());
  std::string batch = request("create", "create_session", session_params("one")).dump() + "\n";
  for (int i = 1; i <= 200; ++i)
    batch += request(i, "append_event",
                     append_params("one", json{{"author", "a"}, {"id", "e" + std::to_string(i)}}))
               .dump()
      + "\n";
  batch += request("get", "get_session", session_params("one")).dump() + "\n";
  // Reads served from a snapshot and appends, interleaved: each read sees
  // exactly the appends before it.
  for (int i = 201; i <= 250; ++i) {
    batch += request(i, "append_event", append_params("one", json{{"author", "a"}})).dump() + "\n";
    batch += request("get-" + std::to_string(i), "get_session",
                     with(session_params("one"), "num_recent_events", 0))
               .dump()
      + "\n";
  }
  s.send(batch);
  auto got = s.collect(1 + 200 + 1 + 100);
  CHECK(got[json("create").dump()].contains("result"));
  for (int i = 1; i <= 200; ++i)
    CHECK(got[json(i).dump()]["result"]["version"] == i);
  auto g = got[json("get").dump()]["result"];
  CHECK(g["version"] == 200);
  REQUIRE(g["events"].size() == 200);
  for (int i = 1; i <= 200; ++i)
    CHECK(g["events"][i - 1]["id"] == "e" + std::to_string(i));
  for (int i = 201; i <= 250; ++i) {
    CHECK(got[json(i).dump()]["result"]["version"] == i);
    CHECK(got[json("get-" + std::to_string(i)).dump()]["result"]["version"] == i);
  }
  CHECK(s.wait_exit() == 0);
}

TEST_CASE("serve: notifications run and are never answered") {
  fixture f;
  server s({"--memory"}, f.err());
  auto note = [](const std::string& method, json params) {
    return json{{"jsonrpc", "2.0"}, {"method", method}, {"params", std::move(params)}}.dump()
      + "\n";
  };
  s.send(
    note("create_session", session_params("n1"))
    + note("append_event", append_params("n1", {{"author", "a"}}))
    + note("append_event", append_params("n1", {{"author", "a"}}))
    + note("append_event", append_params("n1", {{"author", "a"}}))
    + note("no_such_method", json::object()) + note("append_event", json{{"app_name", 1}})
    + note("create_session", session_params("n1")) // already_exists: still no answer
    + request("probe", "get_session", with(session_params("n1"), "num_recent_events", 0)).dump()
    + "\n");
  auto r = s.next();
  CHECK(r["id"] == "probe");
  CHECK(r["result"]["version"] == 3);
  CHECK(s.wait_exit() == 0);
  CHECK(s.rest().empty()); // nothing written beyond the lines taken
}

TEST_CASE("serve: end of input finishes in-flight work, flushes, exits 0; data is durable") {
  fixture f;
  {
    server s({"--store", f.store()}, f.err()); // durability sync, the default
    std::string batch = request("create", "create_session", session_params("d1")).dump() + "\n";
    for (int i = 1; i <= 100; ++i)
      batch += request(i, "append_event",
                       append_params(
                         "d1", json{{"author", "a"}, {"actions", {{"state_delta", {{"n", i}}}}}}))
                 .dump()
        + "\n";
    batch += R"({"jsonrpc":"2.0","id":"flush","method":"flush"})"
             "\n";
    s.send(batch);
    CHECK(s.wait_exit() == 0); // closes stdin at once, reads nothing first
    auto got = s.collect(102);
    CHECK(got[json("flush").dump()]["result"].is_null());
    CHECK(got[json(100).dump()]["result"]["version"] == 100);
  }
  options o;
  o.dir = f.store();
  auto eng = engine::open(o);
  REQUIRE_OK(eng);
  auto sess = get_existing(**eng, sref("app", "u1", "d1"));
  CHECK(sess.version == 100);
  CHECK(sess.events.size() == 100);
  CHECK(sess.state["n"] == 100);
}

TEST_CASE("serve: SIGTERM in stdin mode answers what was read, exits 0") {
  fixture f;
  server s({"--store", f.store(), "--durability", "nosync"}, f.err());
  std::string batch = request("create", "create_session", session_params("t1")).dump() + "\n";
  for (int i = 1; i <= 20; ++i)
    batch += request(i, "append_event", append_params("t1", json{{"author", "a"}})).dump() + "\n";
  s.send(batch);
  auto got = s.collect(21);
  CHECK(got[json(20).dump()]["result"]["version"] == 20);
  s.signal(SIGTERM); // stdin stays open: only the signal ends the run
  CHECK(s.wait_exit(15s, false) == 0);
  std::ifstream err(f.err());
  std::string text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  CHECK(text.find("SIGTERM") != std::string::npos);
}
