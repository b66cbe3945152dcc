// SPDX-License-Identifier: Apache-2.0
// test-tiers: tsan
// TLS on `serve --listen` (docs/protocol.md, "TLS"): certificates made by the
// openssl CLI for each run, a real TLS client (Python's ssl module): a good
// certificate, a client trusting another CA, plain text sent to the TLS port,
// mutual TLS, and bad certificate files at start.
#include "server/net_support.hpp"

using namespace agentstate;
using namespace agentstate::test;
using namespace agentstate::test::net;

namespace {

struct tls_fixture {
  temp_dir dir;
  tls_pair server = make_tls_pair(dir.str(), "server");
  std::string log_path() const { return (dir.path() / "log.txt").string(); }
};

const std::string ping_line = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";

} // namespace

TEST_CASE("tls: a client trusting the server's CA is served; one trusting another CA is "
          "refused; plain text to the TLS port gets no answer; the server goes on") {
  tls_fixture f;
  auto other = make_tls_pair(f.dir.str(), "other");
  server_process srv(
    {"--listen", "0", "--memory", "--tls-cert", f.server.cert, "--tls-key", f.server.key},
    f.log_path());
  int port = srv.port();
  CHECK(srv.log().find("transport=tls") != std::string::npos);

  auto [code, out] = python_tls(
    port, f.server.ca,
    {ping_line,
     R"({"jsonrpc":"2.0","id":2,"method":"create_session","params":{"app_name":"a","user_id":"u","session_id":"tls"}})"});
  INFO("client: ", out);
  CHECK(code == 0);
  CHECK(out.find(R"({"jsonrpc":"2.0","id":1,"result":"pong"})") != std::string::npos);
  CHECK(out.find(R"("id":"tls")") != std::string::npos);
  CHECK(out.find("VERSION TLSv1.3") != std::string::npos);

  auto [bad_code, bad_out] = python_tls(port, other.ca, {ping_line});
  INFO("client with the wrong CA: ", bad_out);
  CHECK(bad_code == 3);
  CHECK(bad_out.find("CERTIFICATE_VERIFY_FAILED") != std::string::npos);

  // Plain JSON-RPC to the TLS port: no JSON answer, the connection closes.
  // Raw: the bytes in place of a TLS handshake.
  {
    raw_socket plain(port);
    REQUIRE(plain.connected());
    REQUIRE(plain.send(ping_line + "\n"));
    auto line = plain.next_raw(3s);
    CHECK((!line || line->find("pong") == std::string::npos));
    CHECK(plain.closed_within(5s));
  }
  srv.wait_log("event=tls_handshake_failed");

  // Still serving TLS clients.
  auto [again, again_out] = python_tls(port, f.server.ca, {ping_line});
  INFO("client after the failures: ", again_out);
  CHECK(again == 0);
  srv.signal(SIGTERM);
  CHECK(srv.wait_exit() == 0);
}

TEST_CASE("tls: --tls-client-ca requires a client certificate from that CA") {
  tls_fixture f;
  auto clients = make_tls_pair(f.dir.str(), "client");
  auto stranger = make_tls_pair(f.dir.str(), "stranger");
  server_process srv({"--listen", "0", "--memory", "--tls-cert", f.server.cert, "--tls-key",
                      f.server.key, "--tls-client-ca", clients.ca},
                     f.log_path());
  int port = srv.port();
  auto [code, out] = python_tls(port, f.server.ca, {ping_line}, clients.cert, clients.key);
  INFO("client with a certificate: ", out);
  CHECK(code == 0);
  CHECK(out.find("pong") != std::string::npos);

  auto [none, none_out] = python_tls(port, f.server.ca, {ping_line});
  INFO("client without a certificate: ", none_out);
  CHECK(none == 3);
  CHECK(none_out.find("pong") == std::string::npos);

  auto [wrong, wrong_out] = python_tls(port, f.server.ca, {ping_line}, stranger.cert, stranger.key);
  INFO("client with another CA's certificate: ", wrong_out);
  CHECK(wrong == 3);
  CHECK(wrong_out.find("pong") == std::string::npos);
  CHECK(srv.alive());
}

TEST_CASE("tls: tokens over TLS; bad certificate files stop the start") {
  tls_fixture f;
  auto tokens = (f.dir.path() / "tokens").string();
  write_text(tokens, "tls-token-0123456789abcdef app\n");
  {
    server_process srv({"--listen", "0", "--memory", "--tls-cert", f.server.cert, "--tls-key",
                        f.server.key, "--auth-file", tokens},
                       f.log_path());
    int port = srv.port();
    auto [code, out] = python_tls(
      port, f.server.ca,
      {R"({"jsonrpc":"2.0","id":1,"method":"get_app_state","params":{"app_name":"app"}})",
       R"({"jsonrpc":"2.0","id":2,"method":"authenticate","params":{"token":"tls-token-0123456789abcdef"}})",
       R"({"jsonrpc":"2.0","id":3,"method":"get_app_state","params":{"app_name":"app"}})"});
    INFO("client: ", out);
    CHECK(code == 0);
    CHECK(out.find(R"("id":1,"error")") != std::string::npos);
    CHECK(out.find("unauthenticated") != std::string::npos);
    CHECK(out.find(R"({"jsonrpc":"2.0","id":3,"result":{}})") != std::string::npos);
  }
  auto other = make_tls_pair(f.dir.str(), "other");
  struct bad {
    std::vector<std::string> args;
    std::string says;
  };
  for (const auto& b : std::vector<bad>{
         {{"--tls-cert", f.dir.str() + "/missing.pem", "--tls-key", f.server.key}, "--tls-cert"},
         {{"--tls-cert", f.server.cert, "--tls-key", other.key}, "does not match"},
         {{"--tls-cert", f.server.cert, "--tls-key", f.server.key, "--tls-client-ca", tokens},
          "--tls-client-ca"},
       }) {
    std::vector<std::string> args{"--listen", "0", "--memory"};
    args.insert(args.end(), b.args.begin(), b.args.end());
    server_process srv(args, f.log_path());
    CHECK(srv.wait_exit() == 1);
    INFO("log: ", srv.log());
    CHECK(srv.log().find(b.says) != std::string::npos);
  }
}
