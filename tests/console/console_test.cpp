// SPDX-License-Identifier: Apache-2.0
// The console's HTTP side (console/console.hpp) in process: a console_server on
// an engine, asked with cpp-httplib's client over loopback. Bad input (path and
// query encoding, page sizes, versions, bodies), the bound on live streams, a
// stream's end at stop(), token revocation, the Host and origin checks, and the
// checks open() makes of its address. The browser's view of the same is
// tests/console/browser/console.test.mjs.
#include <doctest/doctest.h>

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "agentstate/engine.hpp"
#include "console/console.hpp"
#include "protocol/auth.hpp"
#include "server/log.hpp"
#include "support/test_support.hpp"
#include "support/tool_run.hpp"

using namespace agentstate;

namespace {

const std::string token_all = "console-unit-token-every-app-01";
const std::string token_chat = "console-unit-token-chat-only-02";

/// A console on a fresh in-memory engine with one session (chat/alice/s1, two
/// events), optionally with tokens.
struct console_fixture {
  std::unique_ptr<engine> eng;
  server::logger log{server::log_format::text, stderr};
  std::shared_ptr<protocol::token_source> tokens;
  std::unique_ptr<console::console_server> srv;
  std::string host;
  int port = 0;

  explicit console_fixture(bool with_tokens, std::size_t max_streams = 32) {
    options o;
    o.mode = durability::memory;
    eng = MUST(engine::open(o));
    create_request c;
    c.app_name = "chat";
    c.user_id = "alice";
    c.session_id = "s1";
    MUST(eng->create_session(c));
    for (int i = 1; i <= 2; ++i) {
      append_request a;
      a.ref = {"chat", "alice", "s1"};
      a.ev.id = "ev-" + std::to_string(i);
      a.ev.author = "planner";
      MUST(eng->append_event(a));
    }
    console::console_config cfg;
    cfg.max_streams = max_streams;
    cfg.actions = true;
    if (with_tokens) {
      tokens = std::make_shared<protocol::token_source>(
        MUST(protocol::token_table::parse(token_all + " *\n" + token_chat + " chat\n")));
      cfg.tokens = tokens;
    }
    srv = MUST(console::console_server::open(cfg, *eng, log));
    srv->start();
    auto url = srv->url(); // http://127.0.0.1:PORT
    host = url.substr(7);
    port = std::stoi(host.substr(host.rfind(':') + 1));
  }

  ~console_fixture() {
    srv->stop();
    MUST(eng->close());
  }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(std::chrono::seconds(30));
    return c;
  }

  /// Logs in with `token`; returns the cookie header value.
  std::string login(const std::string& token) const {
    auto c = client();
    auto r = c.Post("/api/login", json{{"token", token}}.dump(), "application/json");
    REQUIRE(r);
    REQUIRE(r->status == 200);
    auto set = r->get_header_value("Set-Cookie");
    return set.substr(0, set.find(';'));
  }
};

/// GET `path`; returns {status, parsed body}.
std::pair<int, json> get(httplib::Client& c, const std::string& path,
                         const httplib::Headers& h = {}) {
  auto r = c.Get(path.c_str(), h);
  REQUIRE(r);
  return {r->status, json::parse(r->body, nullptr, false)};
}

std::string kind_of(const json& body) {
  return body.is_object() && body.contains("error") ? body["error"].value("kind", "") : "";
}

} // namespace

TEST_CASE("console API: bad percent-encoding, page sizes and versions are typed 400s") {
  console_fixture f(false);
  auto c = f.client();
  struct bad_case {
    const char* path;
    int status;
    const char* kind;
  };
  const bad_case cases[] = {
    {"/api/apps/%ZZ/sessions", 400, "invalid_argument"},
    {"/api/apps/%4/sessions", 400, "invalid_argument"},
    {"/api/apps/chat%/sessions", 400, "invalid_argument"},
    {"/api/apps/%C3%28/sessions", 400, "invalid_argument"}, // not UTF-8
    {"/api/apps/%ED%A0%80/sessions", 400, "invalid_argument"}, // a surrogate
    {"/api/apps/chat/sessions?page_size=0", 400, "invalid_argument"},
    {"/api/apps/chat/sessions?page_size=201", 400, "invalid_argument"},
    {"/api/apps/chat/sessions?page_size=99999999999999999999999", 400, "invalid_argument"},
    {"/api/apps/chat/sessions?page_size=-1", 400, "invalid_argument"},
    {"/api/apps/chat/sessions?order=sideways", 400, "invalid_argument"},
    {"/api/apps/chat/sessions?page_token=forged", 400, "invalid_argument"},
    {"/api/apps/chat/sessions?prefix=%FF", 400, "invalid_argument"},
    {"/api/apps/chat/users/alice/sessions/s1?version=x", 400, "invalid_argument"},
    {"/api/apps/chat/users/alice/sessions/s1?version=3", 400, "invalid_argument"},
    {"/api/apps/chat/users/alice/sessions/s1?events=501", 400, "invalid_argument"},
    {"/api/apps/chat/users/alice/sessions/nope", 404, "not_found"},
    {"/api/apps/chat/users/alice/sessions/s1/nothing", 404, "not_found"},
    {"/api/nothing", 404, "not_found"},
    {"/nothing", 404, "not_found"},
    {"/api/watch?scope=session&app=chat&user=alice&session=s1&from=zz-1", 400, "invalid_argument"},
    {"/api/watch?scope=nowhere", 400, "invalid_argument"},
  };
  for (auto& k : cases) {
    CAPTURE(k.path);
    auto [status, body] = get(c, k.path);
    CHECK(status == k.status);
    CHECK(kind_of(body) == k.kind);
    CHECK(body["error"]["message"].is_string());
  }
  // The engine's own name check answers a name it refuses.
  auto [st, body] = get(c, "/api/apps/" + std::string(101, 'a') + "/sessions");
  CHECK(st == 413);
  CHECK(kind_of(body) == "too_large");
  // The good paths answer after all of it.
  auto [ok, session] = get(c, "/api/apps/chat/users/alice/sessions/s1?version=1&events=5");
  CHECK(ok == 200);
  CHECK(session["result"]["version"] == 1);
  CHECK(session["result"]["events"].size() == 1);
  auto [ok0, none] = get(c, "/api/apps/chat/users/alice/sessions/s1?version=2&events=0");
  CHECK(ok0 == 200);
  CHECK(none["result"]["events"].empty());
  auto [ok2, list] = get(c, "/api/apps/chat/sessions?page_size=1&total=1&prefix=s");
  CHECK(ok2 == 200);
  CHECK(list["result"]["total"] == 1);
  CHECK(list["result"]["sessions"][0]["id"] == "s1");
}

TEST_CASE("console API: an app's users in id order with their counts, paged across scans") {
  console_fixture f(false);
  // 3 users: u1 with 250 sessions (more than two protocol pages), u2 with 1, u3 with 2.
  auto add = [&](const std::string& user, int n) {
    for (int i = 0; i < n; ++i) {
      create_request c;
      c.app_name = "many";
      c.user_id = user;
      c.session_id = "s" + std::to_string(i);
      MUST(f.eng->create_session(c));
    }
  };
  add("u1", 250);
  add("u2", 1);
  add("u3", 2);
  auto c = f.client();
  auto [s1, b1] = get(c, "/api/apps/many/users?page_size=2");
  REQUIRE(s1 == 200);
  CHECK(b1["result"]["users"]
        == json::parse(R"([{"user_id":"u1","sessions":250},{"user_id":"u2","sessions":1}])"));
  REQUIRE(b1["result"]["next_page_token"].is_string());
  std::string tok = b1["result"]["next_page_token"];
  auto [s2, b2] = get(c, "/api/apps/many/users?page_size=2&page_token=" + tok);
  REQUIRE(s2 == 200);
  CHECK(b2["result"]["users"] == json::parse(R"([{"user_id":"u3","sessions":2}])"));
  CHECK(b2["result"]["next_page_token"].is_null());
  // A user with more sessions than one request scans (10 pages of 100): the
  // page ends inside it with a token, and the next page lists it again.
  for (int i = 0; i < 1001; ++i) {
    create_request cr;
    cr.app_name = "huge";
    cr.user_id = "a";
    cr.session_id = "s" + std::to_string(i);
    MUST(f.eng->create_session(cr));
  }
  create_request last;
  last.app_name = "huge";
  last.user_id = "b";
  last.session_id = "only";
  MUST(f.eng->create_session(last));
  auto [h1, hb1] = get(c, "/api/apps/huge/users?page_size=2");
  REQUIRE(h1 == 200);
  CHECK(hb1["result"]["users"] == json::parse(R"([{"user_id":"a","sessions":1001}])"));
  REQUIRE(hb1["result"]["next_page_token"].is_string());
  std::string htok = hb1["result"]["next_page_token"];
  auto [h2, hb2] = get(c, "/api/apps/huge/users?page_size=2&page_token=" + htok);
  REQUIRE(h2 == 200);
  CHECK(hb2["result"]["users"]
        == json::parse(R"([{"user_id":"a","sessions":1001},{"user_id":"b","sessions":1}])"));
  CHECK(hb2["result"]["next_page_token"].is_null());
  auto [s3, b3] = get(c, "/api/apps/many/users?page_size=101");
  CHECK(s3 == 400);
  CHECK(kind_of(b3) == "invalid_argument");
}

TEST_CASE("console API: bodies of actions and logins are checked before anything runs") {
  console_fixture f(false);
  auto c = f.client();
  auto [st, who] = get(c, "/api/whoami");
  REQUIRE(st == 200);
  std::string csrf = who["csrf"];
  httplib::Headers h = {{"X-Console-CSRF", csrf}};
  auto post = [&](const std::string& body, const char* type, const httplib::Headers& hh) {
    auto r = c.Post("/api/action", hh, body, type);
    REQUIRE(r);
    return std::make_pair(r->status, json::parse(r->body, nullptr, false));
  };
  // Nested 30,000 deep: refused as a bad member, never walked.
  std::string deep = std::string(30000, '[') + std::string(30000, ']');
  auto [s1, b1] = post("{\"action\":\"fork\",\"app_name\":\"chat\",\"user_id\":\"alice\","
                       "\"session_id\":\"s1\",\"new_session_id\":"
                         + deep + "}",
                       "application/json", h);
  CHECK(s1 == 400);
  CHECK(kind_of(b1) == "invalid_argument");
  auto [s2, b2] = post("not json", "application/json", h);
  CHECK(s2 == 400);
  auto [s3, b3] = post("{\"action\":\"drop_everything\"}", "application/json", h);
  CHECK(s3 == 400);
  auto [s4, b4] = post("{}", "text/plain", h);
  CHECK(s4 == 415);
  auto [s5, b5] = post("{\"action\":\"delete\",\"app_name\":\"chat\",\"user_id\":\"alice\","
                       "\"session_id\":\"s1\"}",
                       "application/json", {{"X-Console-CSRF", "wrong"}});
  CHECK(s5 == 403);
  CHECK(kind_of(b5) == "csrf");
  auto [s6, b6] = post("{\"action\":\"delete\",\"app_name\":\"chat\",\"user_id\":\"alice\","
                       "\"session_id\":\"s1\"}",
                       "application/json", {{"X-Console-CSRF", csrf}, {"Origin", "http://evil"}});
  CHECK(s6 == 403);
  CHECK(kind_of(b6) == "csrf");
  // A body past 64 KiB is refused by the server's payload bound.
  auto big = c.Post("/api/action", h, std::string(100000, ' '), "application/json");
  REQUIRE(big);
  CHECK(big->status == 413);
  // Nothing of it reached the store.
  get_request still;
  still.ref = {"chat", "alice", "s1"};
  CHECK(MUST(f.eng->get_session(still)).has_value());
  // The real action, then.
  auto [s7, b7] = post("{\"action\":\"fork\",\"app_name\":\"chat\",\"user_id\":\"alice\","
                       "\"session_id\":\"s1\",\"at_version\":1,\"new_session_id\":\"s2\"}",
                       "application/json", h);
  CHECK(s7 == 200);
  CHECK(b7["result"]["version"] == 1);
}

TEST_CASE("console: a Host that does not name a loopback console is refused") {
  console_fixture f(false);
  auto c = f.client();
  auto [s1, b1] = get(c, "/api/whoami", {{"Host", "evil.example:" + std::to_string(f.port)}});
  CHECK(s1 == 403);
  CHECK(kind_of(b1) == "permission_denied");
  auto [s2, b2] = get(c, "/api/whoami", {{"Host", "localhost:" + std::to_string(f.port)}});
  CHECK(s2 == 200);
}

TEST_CASE("console: a token removed from the table stops working at the next request") {
  console_fixture f(true);
  auto c = f.client();
  auto [s0, b0] = get(c, "/api/apps/chat/sessions");
  CHECK(s0 == 401);
  auto bad =
    c.Post("/api/login", json{{"token", "not-a-token-of-the-table"}}.dump(), "application/json");
  REQUIRE(bad);
  CHECK(bad->status == 401);
  auto cookie = f.login(token_chat);
  httplib::Headers h = {{"Cookie", cookie}};
  auto [s1, b1] = get(c, "/api/apps/chat/sessions", h);
  CHECK(s1 == 200);
  auto [s2, b2] = get(c, "/api/apps/mail/sessions", h);
  CHECK(s2 == 403);
  CHECK(kind_of(b2) == "permission_denied");
  auto [s3, b3] = get(c, "/api/stats", h);
  CHECK(s3 == 403);
  f.tokens->replace(MUST(protocol::token_table::parse(token_all + " *\n")));
  auto [s4, b4] = get(c, "/api/apps/chat/sessions", h);
  CHECK(s4 == 401);
  CHECK(kind_of(b4) == "unauthenticated");
}

TEST_CASE("console: live streams are bounded, and stop() ends the open ones") {
  console_fixture f(false, 1);
  std::atomic<bool> got_ready{false};
  std::atomic<int> status{0};
  std::string received;
  std::thread reader([&] {
    auto c = f.client();
    auto r = c.Get(
      "/api/watch?scope=session&app=chat&user=alice&session=s1",
      [&](const httplib::Response& res) {
        status = res.status;
        return true;
      },
      [&](const char* data, std::size_t n) {
        received.append(data, n);
        if (received.find("event: ready") != std::string::npos)
          got_ready = true;
        return true;
      });
    (void)r;
  });
  // The stream's first event, written once its watch has started.
  REQUIRE(test::eventually([&] { return got_ready.load(); }, std::chrono::seconds(20)));
  CHECK(status == 200);
  auto c = f.client();
  auto [s1, b1] = get(c, "/api/watch?scope=session&app=chat&user=alice&session=s1");
  CHECK(s1 == 503);
  CHECK(kind_of(b1) == "unavailable");
  // The open stream ends when the console stops; the reader returns.
  f.srv->stop();
  reader.join();
}

TEST_CASE("console_server::open: a malformed, unguarded or taken address is refused "
          "(a taken port is not shared through SO_REUSEPORT)") {
  options o;
  o.mode = durability::memory;
  auto eng = MUST(engine::open(o));
  server::logger log;
  {
    console::console_config cfg;
    cfg.http = "unix:/tmp/x";
    auto r = console::console_server::open(cfg, *eng, log);
    REQUIRE(!r);
    CHECK(r.err().code == errc::invalid_argument);
  }
  {
    console::console_config cfg;
    cfg.http = "0.0.0.0:0"; // beyond loopback, no tokens
    auto r = console::console_server::open(cfg, *eng, log);
    REQUIRE(!r);
    CHECK(r.err().code == errc::invalid_argument);
  }
  {
    console::console_config cfg;
    cfg.http = "127.0.0.1:0";
    auto first = MUST(console::console_server::open(cfg, *eng, log));
    auto port = first->url().substr(first->url().rfind(':') + 1);
    cfg.http = "127.0.0.1:" + port; // taken
    auto r = console::console_server::open(cfg, *eng, log);
    REQUIRE(!r);
    CHECK(r.err().code == errc::io_error);
  }
  MUST(eng->close());
}

TEST_CASE("agentstate console and serve --http: bad usage is exit 2 before any store is opened") {
  test::temp_dir dir;
  auto store = (dir.path() / "store").string();
  struct usage_case {
    std::vector<std::string> args;
    const char* says;
  };
  const usage_case cases[] = {
    {{"console"}, "--store is required"},
    {{"console", "--store", store, "--http", "nope"}, "--http needs [HOST:]PORT"},
    {{"console", "--store", store, "--http", "unix:/tmp/s"}, "--http needs [HOST:]PORT"},
    {{"console", "--store", store, "--tls-cert", "c.pem"}, "TLS needs both"},
    {{"console", "--store", store, "--log-format", "xml"}, "--log-format must be"},
    {{"serve", "--memory", "--http-actions"}, "--http-actions applies to --http"},
    {{"serve", "--memory", "--http", "nope"}, "--http needs [HOST:]PORT"},
    {{"serve", "--memory", "--listen", "127.0.0.1:0", "--cluster", "c", "--etcd",
      "http://127.0.0.1:1", "--node-id", "n1", "--http", "127.0.0.1:0"},
     "--http is not available on a cluster node"},
  };
  for (auto& k : cases) {
    auto r = test::run_tool(k.args);
    CAPTURE(r.err);
    CHECK(r.rc == 2);
    CHECK(r.err.find(k.says) != std::string::npos);
    CHECK(r.err.rfind("agentstate ", 0) == 0);
  }
  CHECK(!std::filesystem::exists(store));
}
