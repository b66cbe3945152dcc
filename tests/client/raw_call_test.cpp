// SPDX-License-Identifier: Apache-2.0
// rpc_client::call_raw_async (include/agentstate/client.hpp) against a real
// `agentstate serve` child: params sent as text, results handed back as the
// server's text, pipelined appends kept in call order, the server's error
// object kept, and params text that is not one JSON value refused before it
// is sent.
#include "server/net_support.hpp"
#include "support/test_support.hpp"

#include "agentstate/client.hpp"

#include <future>

using namespace agentstate;
using namespace agentstate::test;
using namespace agentstate::test::net;

namespace {

std::unique_ptr<rpc_client> raw_client(server_process& srv) {
  client_options o;
  o.address = "127.0.0.1:" + std::to_string(srv.port());
  auto c = rpc_client::connect(o);
  INFO("connect: ", c.err().message);
  REQUIRE(c.ok());
  return std::move(*c);
}

/// call_raw_async, waited for.
rpc_raw_reply raw_call(rpc_client& c, const std::string& method, const std::string& params) {
  std::promise<rpc_raw_reply> got;
  c.call_raw_async(method, params, [&](rpc_raw_reply r) { got.set_value(std::move(r)); });
  return got.get_future().get();
}

std::string session_text(const std::string& session) {
  return R"({"app_name":"app","user_id":"u","session_id":")" + session + "\"}";
}

} // namespace

TEST_CASE("client raw: params go as text and results come back as the server wrote them; "
          "pipelined appends keep their order; a newline in the params is sent as a space") {
  temp_dir dir;
  server_process srv({"--memory", "--listen", "0"}, (dir.path() / "log").string());
  auto c = raw_client(srv);
  auto created = raw_call(*c, "create_session", session_text("s"));
  REQUIRE(created.value.ok());
  CHECK(created.answered);

  constexpr int n = 200;
  std::vector<std::string> texts(n);
  std::vector<int> times(n, 0);
  std::mutex mtx;
  std::condition_variable cv;
  int done = 0;
  for (int i = 0; i < n; ++i) {
    // Whitespace with newlines between the tokens, and a value with the
    // characters a scanner could trip on.
    std::string params = "{\n\"app_name\": \"app\",\n \"user_id\":\"u\", \"session_id\":\"s\",\n"
                         "\"event\":{\"id\":\"e"
      + std::to_string(i) + R"(","author":"a","actions":{"state_delta":{"k":"}\"],{[\u00e9","n":)"
      + std::to_string(i) + "}}}\n}";
    c->call_raw_async("append_event", params, [&, i](rpc_raw_reply r) {
      std::lock_guard<std::mutex> g(mtx);
      ++times[static_cast<std::size_t>(i)];
      if (r.answered && r.value.ok())
        texts[static_cast<std::size_t>(i)] = *r.value;
      ++done;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mtx);
    REQUIRE(cv.wait_for(lock, 60s, [&] { return done == n; }));
  }
  for (int i = 0; i < n; ++i) {
    INFO("append ", i, ": ", texts[static_cast<std::size_t>(i)]);
    CHECK(times[static_cast<std::size_t>(i)] == 1);
    auto v = parse_json(texts[static_cast<std::size_t>(i)], 64);
    REQUIRE(v.ok());
    CHECK((*v)["version"] == i + 1);
    CHECK((*v)["event"]["actions"]["state_delta"]["k"] == "}\"],{[\xc3\xa9");
    // The server's own compact text, not a writing of a parsed value.
    CHECK(texts[static_cast<std::size_t>(i)].find('\n') == std::string::npos);
    CHECK(*dump_json(*v) == texts[static_cast<std::size_t>(i)]);
  }

  // The same session read both ways: the raw text is the value call() reads.
  auto raw = raw_call(*c, "get_session", session_text("s"));
  REQUIRE(raw.value.ok());
  auto parsed = c->call("get_session", sref_params("app", "s"));
  REQUIRE(parsed.value.ok());
  CHECK(*parse_json(*raw.value, 64) == *parsed.value);
  CHECK((*parsed.value)["events"].size() == static_cast<std::size_t>(n));
  // No params at all.
  auto pong = raw_call(*c, "ping", "");
  REQUIRE(pong.value.ok());
  CHECK(*pong.value == "\"pong\"");
}

TEST_CASE("client raw: an error answer keeps the server's error object; a closed client refuses "
          "with unavailable") {
  temp_dir dir;
  server_process srv({"--memory", "--listen", "0"}, (dir.path() / "log").string());
  auto c = raw_client(srv);
  REQUIRE(raw_call(*c, "create_session", session_text("s")).value.ok());
  auto dup = raw_call(*c, "create_session", session_text("s"));
  CHECK(dup.answered);
  CHECK(dup.value.code() == errc::already_exists);
  CHECK(dup.error_object["data"]["kind"] == "already_exists");
  CHECK(dup.error_object["code"] == -32000);
  auto conflict = raw_call(*c, "append_event",
                           R"({"app_name":"app","user_id":"u","session_id":"s",)"
                           R"("event":{"author":"a"},"expected_version":7})");
  CHECK(conflict.value.code() == errc::version_conflict);
  CHECK(conflict.error_object["data"]["current_version"] == 0);

  c->close();
  auto late = raw_call(*c, "ping", "");
  CHECK(!late.answered);
  CHECK(late.value.code() == errc::unavailable);
}

TEST_CASE("client raw: params text that is not one JSON value is refused with invalid_argument "
          "before it is sent; every valid form is sent") {
  temp_dir dir;
  server_process srv({"--memory", "--listen", "0"}, (dir.path() / "log").string());
  auto c = raw_client(srv);
  const std::string bad[] = {
    "{",
    R"({"a":1}x)",
    R"({"a":1,})",
    "[1 2]",
    "01",
    "-",
    "1.",
    "[1e400]",
    "\"\xff\"",
    "\"\xed\xa0\x80\"",
    "\"\xc3\"",
    R"("\udc00")",
    R"("\ud800x")",
    R"("\x")",
    "\"a\tb\"",
    "tru",
    "\xef\xbb\xbf{}",
  };
  for (const auto& text : bad) {
    INFO("params text: ", text);
    bool ran_here = false;
    rpc_raw_reply got{std::string()};
    c->call_raw_async("get_session", text, [&](rpc_raw_reply r) {
      ran_here = true;
      got = std::move(r);
    });
    REQUIRE(ran_here); // on the calling thread, before call_raw_async returned
    CHECK(!got.answered);
    CHECK(got.value.code() == errc::invalid_argument);
    CHECK(c->outstanding() == 0);
  }
  // Valid texts of every kind reach the server, which answers each (here
  // with its own refusal of params that are not get_session's).
  const std::string good[] = {
    "[]",
    "{}",
    "[1e300,-0,0.5E-3,12345678901234567890123]",
    R"({"s":"\ud834\udd1e\u00e9\/\b\f\n\r\t\"\\","t":true,"f":false,"n":null})",
    "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"",
    "  [ [ { } ] ]  ",
  };
  for (const auto& text : good) {
    INFO("params text: ", text);
    auto r = raw_call(*c, "get_session", text);
    CHECK(r.answered);
    CHECK(r.value.code() == errc::invalid_argument);
  }
  CHECK(raw_call(*c, "ping", "").value.ok());
}
