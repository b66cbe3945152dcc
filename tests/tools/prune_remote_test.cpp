// SPDX-License-Identifier: Apache-2.0
// Maintenance through a running server, against a real `agentstate serve
// --listen` child on a store in a temp dir: the `prune` method (params
// errors, access by token, a dry run then a prune, a bounded sample),
// `agentstate prune --address` as a child process, `read_changes` from
// "start", and `agentstate watch --from-start` (store and server forms, once
// and live). Sessions are made old by their events' timestamps (a session's
// last update is its last event's, A5), so no test waits on a clock.
#include "model/ids.hpp"
#include "server/net_support.hpp"
#include "support/serve_process.hpp"
#include "support/watch_child.hpp"
#include "support/test_support.hpp"

#include <set>

using namespace agentstate;
using namespace agentstate::test;
using namespace agentstate::test::net;

namespace {

const std::string tok_all = "prune-all-token-0123456789abcdef";
const std::string tok_a = "prune-app-a-token-0123456789abcd";

std::string q(const std::string& s) {
  return "'" + s + "'";
}

struct prune_fixture {
  temp_dir dir;
  std::string store = (dir.path() / "store").string();
  std::string tokens = path("tokens");
  std::string all_file = path("tok-all");
  std::string a_file = path("tok-a");
  std::unique_ptr<server_process> srv;
  int port = 0;

  explicit prune_fixture(bool auth = true) {
    std::vector<std::string> args{"--listen", "127.0.0.1:0", "--store", store};
    if (auth) {
      write_text(tokens, tok_all + " *\n" + tok_a + " a\n");
      ::chmod(tokens.c_str(), 0600);
      write_text(all_file, tok_all + "\n");
      write_text(a_file, "# app a only\n" + tok_a + "\n");
      args.push_back("--auth-file");
      args.push_back(tokens);
    }
    srv = std::make_unique<server_process>(args, path("serve.log"));
    port = srv->port();
    srv->wait_serving();
  }
  std::string path(const std::string& name) const { return (dir.path() / name).string(); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }

  /// A client, authenticated with `token` when it is not empty.
  std::unique_ptr<client> connect(const std::string& token = tok_all) {
    auto c = std::make_unique<client>(port);
    REQUIRE(c->connected());
    if (!token.empty())
      REQUIRE(ok(c->call("authenticate", json{{"token", token}})));
    return c;
  }
};

/// Creates app/user/id and appends one event stamped `age` seconds ago.
void session_aged(client& c, const std::string& app, const std::string& user, const std::string& id,
                  double age) {
  REQUIRE(ok(c.call(
    "create_session",
    json{{"app_name", app}, {"user_id", user}, {"session_id", id}, {"state", {{"app:kept", 1}}}})));
  auto p = json{{"app_name", app}, {"user_id", user}, {"session_id", id}};
  p["event"] = json{{"author", "agent"},
                    {"invocation_id", "i"},
                    {"timestamp", model::now_seconds() - age},
                    {"actions", {{"state_delta", {{"n", 1}}}}}};
  REQUIRE(ok(c.call("append_event", p)));
}

const double day = 86400;

/// Two old sessions in app a, one in b, and a fresh one in each.
void write_sessions(client& c) {
  session_aged(c, "a", "u1", "old1", 3 * day);
  session_aged(c, "a", "u2", "old2", 2 * day);
  session_aged(c, "a", "u1", "fresh", 60);
  session_aged(c, "b", "u1", "old", 5 * day);
  session_aged(c, "b", "u1", "fresh", 60);
}

std::set<std::string> sample_of(const json& result) {
  std::set<std::string> out;
  for (const auto& s : result["sessions"])
    out.insert(s["app_name"].get<std::string>() + "/" + s["user_id"].get<std::string>() + "/"
               + s["session_id"].get<std::string>());
  return out;
}

/// The error response's code, kind and message.
void check_error(const std::optional<json>& r, int code, const std::string& kind,
                 const std::string& says) {
  REQUIRE(r);
  INFO("response: ", r->dump());
  REQUIRE(r->contains("error"));
  CHECK((*r)["error"]["code"] == code);
  CHECK(kind_of(r) == kind);
  CHECK((*r)["error"]["message"].get<std::string>().find(says) != std::string::npos);
}

/// Every change of scope all from `from` (absent: no `from` param) to the head.
json all_changes(client& c, const std::optional<std::string>& from) {
  json out = json::array();
  std::optional<std::string> at = from;
  for (;;) {
    json p{{"scope", "all"}, {"limit", 1000}};
    if (at)
      p["from"] = *at;
    auto r = c.call("read_changes", p);
    REQUIRE(ok(r));
    for (auto& ch : (*r)["result"]["changes"])
      out.push_back(ch);
    at = (*r)["result"]["cursor"].get<std::string>();
    if ((*r)["result"]["at_head"] == true)
      return out;
  }
}

} // namespace

TEST_CASE("serve prune: bad params are invalid_params, access follows the token's apps, a dry run "
          "then a prune answer counts and a sample") {
  prune_fixture f;
  auto c = f.connect();
  write_sessions(*c);

  // Params.
  check_error(c->call("prune", json::object()), -32602, "invalid_argument", "older_than_s");
  check_error(c->call("prune", nullptr), -32602, "invalid_argument", "older_than_s");
  check_error(c->call("prune", json{{"older_than_s", 0}}), -32602, "invalid_argument", "above 0");
  check_error(c->call("prune", json{{"older_than_s", -3.5}}), -32602, "invalid_argument",
              "above 0");
  check_error(c->call("prune", json{{"older_than_s", "1d"}}), -32602, "invalid_argument",
              "'older_than_s' must be a number");
  check_error(c->call("prune", json{{"older_than_s", 10}, {"dry_run", "yes"}}), -32602,
              "invalid_argument", "'dry_run' must be a boolean");
  check_error(c->call("prune", json{{"older_than_s", 10}, {"app_name", 7}}), -32602,
              "invalid_argument", "'app_name' must be a string");
  check_error(c->call("prune", json{{"older_than_s", 10}, {"app_name", ""}}), -32602,
              "invalid_argument", "app_name");

  // Access: a token for app a prunes a, and neither b nor every app.
  {
    auto none = f.connect("");
    check_error(none->call("prune", json{{"older_than_s", day}, {"app_name", "a"}}), -32001,
                "unauthenticated", "authenticate");
    auto scoped = f.connect(tok_a);
    check_error(scoped->call("prune", json{{"older_than_s", day}}), -32001, "permission_denied",
                "this request's app");
    check_error(scoped->call("prune", json{{"older_than_s", day}, {"app_name", "b"}}), -32001,
                "permission_denied", "'b'");
    auto dry =
      scoped->call("prune", json{{"older_than_s", day}, {"app_name", "a"}, {"dry_run", true}});
    REQUIRE(ok(dry));
    CHECK((*dry)["result"]["would_delete"] == 2);
    CHECK(sample_of((*dry)["result"]) == std::set<std::string>{"a/u1/old1", "a/u2/old2"});
  }

  auto dry = c->call("prune", json{{"older_than_s", day}, {"dry_run", true}});
  REQUIRE(ok(dry));
  const json& d = (*dry)["result"];
  CHECK(d["would_delete"] == 3);
  CHECK(!d.contains("deleted"));
  CHECK(d["truncated"] == false);
  CHECK(sample_of(d) == std::set<std::string>{"a/u1/old1", "a/u2/old2", "b/u1/old"});
  CHECK(d["cutoff"].get<double>() < model::now_seconds() - day + 1);
  // Nothing was deleted.
  CHECK(ok(c->call("get_session", sref_params("b", "old", "u1"))));
  CHECK((*c->call("get_session", sref_params("b", "old", "u1")))["result"].is_object());

  const auto before = all_changes(*c, std::nullopt);
  auto only_a = c->call("prune", json{{"older_than_s", day}, {"app_name", "a"}});
  REQUIRE(ok(only_a));
  CHECK((*only_a)["result"]["deleted"] == 2);
  CHECK(sample_of((*only_a)["result"]) == std::set<std::string>{"a/u1/old1", "a/u2/old2"});
  auto rest = c->call("prune", json{{"older_than_s", day}});
  REQUIRE(ok(rest));
  CHECK((*rest)["result"]["deleted"] == 1);
  auto again = c->call("prune", json{{"older_than_s", day}, {"dry_run", true}});
  REQUIRE(ok(again));
  CHECK((*again)["result"]["would_delete"] == 0);
  CHECK((*again)["result"]["sessions"].empty());
  CHECK((*c->call("get_session", sref_params("b", "old", "u1")))["result"].is_null());
  CHECK((*c->call("get_session", sref_params("b", "fresh", "u1")))["result"].is_object());
  CHECK((*c->call("get_app_state", json{{"app_name", "a"}}))["result"] == json{{"kept", 1}});

  // Each delete is in the change feed; read_changes from "start" is the whole log.
  auto from_start = all_changes(*c, std::string("start"));
  CHECK(from_start == all_changes(*c, std::nullopt));
  REQUIRE(from_start.size() == before.size() + 3);
  std::set<std::string> removed;
  for (const auto& ch : from_start)
    if (ch["kind"] == "delete")
      removed.insert(ch["app_name"].get<std::string>() + "/" + ch["user_id"].get<std::string>()
                     + "/" + ch["session_id"].get<std::string>());
  CHECK(removed == std::set<std::string>{"a/u1/old1", "a/u2/old2", "b/u1/old"});

  f.srv->signal(SIGTERM);
  CHECK(f.srv->wait_exit() == 0);
}

TEST_CASE("serve prune: the sample holds the first 100 sessions and truncated says there were "
          "more") {
  prune_fixture f(false);
  auto c = f.connect("");
  for (int i = 0; i < 130; ++i)
    session_aged(*c, "app", "u" + std::to_string(i % 3), "s" + std::to_string(i), 2 * day + i);
  auto r = c->call("prune", json{{"older_than_s", day}});
  REQUIRE(ok(r));
  CHECK((*r)["result"]["deleted"] == 130);
  CHECK((*r)["result"]["sessions"].size() == 100);
  CHECK((*r)["result"]["truncated"] == true);
  f.srv->signal(SIGTERM);
  CHECK(f.srv->wait_exit() == 0);
}

TEST_CASE("prune --address: a dry run and a prune through a running server, with a token file; "
          "errors exit 1 and usage errors 2") {
  prune_fixture f;
  auto c = f.connect();
  write_sessions(*c);
  const std::string at = " --address " + f.address() + " ";

  auto dry = run_tool(
    "prune" + at + "--older-than 1d --dry-run --json --token-file " + q(f.all_file), f.path("e1"));
  INFO("stderr: ", dry.err);
  REQUIRE(dry.rc == 0);
  auto dj = json::parse(dry.out);
  CHECK(dj["deleted"] == 3);
  CHECK(dj["dry_run"] == true);
  CHECK(dj["truncated"] == false);
  CHECK(sample_of(dj) == std::set<std::string>{"a/u1/old1", "a/u2/old2", "b/u1/old"});

  // A token for app a only: every app is refused (exit 1, the kind named), app a is not.
  auto refused =
    run_tool("prune" + at + "--older-than 1d --token-file " + q(f.a_file), f.path("e2"));
  CHECK(refused.rc == 1);
  CHECK(refused.err.find("permission_denied") != std::string::npos);
  CHECK(refused.err.find(tok_a) == std::string::npos);
  auto no_token = run_tool("prune" + at + "--older-than 1d", f.path("e3"));
  CHECK(no_token.rc == 1);
  CHECK(no_token.err.find("unauthenticated") != std::string::npos);

  auto only_a =
    run_tool("prune" + at + "--older-than 60h --app a --token-file " + q(f.a_file), f.path("e4"));
  INFO("stderr: ", only_a.err);
  REQUIRE(only_a.rc == 0);
  CHECK(only_a.out.find("deleted 1 sessions") != std::string::npos); // a/u1/old1 only (3 days)
  CHECK(only_a.out.find("in app 'a'") != std::string::npos);
  auto rest =
    run_tool("prune" + at + "--older-than 1d --json --token-file " + q(f.all_file), f.path("e5"));
  REQUIRE(rest.rc == 0);
  CHECK(json::parse(rest.out)["deleted"] == 2);
  CHECK(sample_of(json::parse(rest.out)) == std::set<std::string>{"a/u2/old2", "b/u1/old"});
  CHECK((*c->call("get_session", sref_params("a", "fresh", "u1")))["result"].is_object());

  // Usage: DIR and --address, neither, TLS options without --address, a bad duration.
  CHECK(run_tool("prune " + q(f.store) + at + "--older-than 1d", f.path("e6")).rc == 2);
  CHECK(run_tool("prune --older-than 1d", f.path("e7")).rc == 2);
  CHECK(run_tool("prune " + q(f.path("x")) + " --older-than 1d --token-file " + q(f.all_file),
                 f.path("e8"))
          .rc
        == 2);
  CHECK(run_tool("prune" + at + "--older-than 0", f.path("e9")).rc == 2);
  f.srv->signal(SIGTERM);
  CHECK(f.srv->wait_exit() == 0);
  // No server there now.
  auto gone =
    run_tool("prune" + at + "--older-than 1d --token-file " + q(f.all_file), f.path("e10"));
  CHECK(gone.rc == 1);
  CHECK(gone.err.find("cannot reach") != std::string::npos);
}

TEST_CASE("watch --from-start: the store and server forms replay the change log from its oldest "
          "change, --once and live") {
  prune_fixture f(false);
  auto c = f.connect("");
  write_sessions(*c); // 10 changes
  const auto expected = all_changes(*c, std::nullopt);
  REQUIRE(expected.size() == 10);

  auto dir = run_tool("watch " + q(f.store) + " --from-start --once", f.path("e1"));
  auto addr = run_tool("watch " + f.address() + " --from-start --once", f.path("e2"));
  INFO("dir stderr: ", dir.err, " addr stderr: ", addr.err);
  REQUIRE(dir.rc == 0);
  REQUIRE(addr.rc == 0);
  CHECK(addr.out == dir.out);
  auto lines = lines_of(dir.out);
  REQUIRE(lines.size() == expected.size());
  for (std::size_t i = 0; i < lines.size(); ++i)
    CHECK(json::parse(lines[i]) == expected[i]);
  CHECK(addr.err == dir.err); // both name the head cursor
  auto app_b = run_tool("watch " + f.address() + " --from-start --once --app b --include-sessions",
                        f.path("e3"));
  CHECK(lines_of(app_b.out).size() == 4);

  for (const std::string& where : {f.store, f.address()}) {
    INFO("live from ", where);
    std::vector<std::string> args{where, "--from-start"};
    if (where == f.store) {
      args.push_back("--poll-ms");
      args.push_back("5");
    }
    watch_child live(args, f.path("live"));
    auto old = live.lines(expected.size());
    CHECK(old == lines_of(dir.out));
    const auto n = expected.size() + (where == f.store ? 0 : 2);
    session_aged(*c, "b", "u9", where == f.store ? "new1" : "new2", 0); // 2 changes
    auto got = live.lines(n + 2);
    CHECK(json::parse(got[n])["kind"] == "create");
    live.signal(SIGTERM);
    CHECK(live.wait_exit() == 0);
    CHECK(live.count() == n + 2);
  }

  CHECK(run_tool("watch " + q(f.store) + " --from-start --from x", f.path("e4")).rc == 2);
  f.srv->signal(SIGTERM);
  CHECK(f.srv->wait_exit() == 0);
}
