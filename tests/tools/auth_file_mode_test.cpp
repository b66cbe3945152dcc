// SPDX-License-Identifier: Apache-2.0
// `agentstate serve --auth-file`: a token file its group or others may read
// gets a warning naming the file and its mode (#44); one only its owner
// reads gets none. A real `serve` child on a Unix socket, stopped by PID.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cstdio>
#include <fstream>

#include "server/net_support.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace agentstate::test;
using namespace agentstate::test::net;

namespace {

// Starts serve with the token file `tokens` (mode `mode`), waits until it
// serves (the warning, if any, is logged before), stops it with SIGTERM and
// returns its log.
std::string serve_log_with_tokens(const temp_dir& tmp, const std::string& tokens, mode_t mode) {
  std::ofstream(tokens) << "3f9c2e8a7b6d4c1e0f5a9b8c7d6e5f4a *\n";
  REQUIRE(::chmod(tokens.c_str(), mode) == 0);
  server_process srv({"--memory", "--listen", "unix:" + tmp.str() + "/sock", "--auth-file", tokens},
                     tmp.str() + "/serve.log");
  srv.wait_serving();
  srv.signal(SIGTERM);
  CHECK(srv.wait_exit() == 0);
  return srv.log();
}

} // namespace

TEST_CASE("serve --auth-file warns when the token file is world-readable (#44)") {
  temp_dir tmp;
  auto tokens = tmp.str() + "/tokens";
  for (mode_t mode : {0644, 0640, 0604}) {
    CAPTURE(mode);
    auto log = serve_log_with_tokens(tmp, tokens, mode);
    INFO("log: ", log);
    CHECK(log.find("auth_file_readable") != std::string::npos);
    CHECK(log.find(tokens) != std::string::npos);
    char octal[8];
    std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode));
    CHECK(log.find(std::string("mode ") + octal) != std::string::npos);
    CHECK(log.find(mode & S_IROTH ? "readable by every user" : "readable by its group")
          != std::string::npos);
  }
  // Owner-only: no warning. The warning is logged before the serving line,
  // so its absence from a log that holds that line is final.
  auto log = serve_log_with_tokens(tmp, tokens, 0600);
  INFO("log: ", log);
  CHECK(log.find("serving") != std::string::npos);
  CHECK(log.find("auth_file_readable") == std::string::npos);
}

namespace {

const std::string mode_token = "3f9c2e8a7b6d4c1e0f5a9b8c7d6e5f4a";

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

// Sends SIGHUP and waits until the log holds `n` lines of `event` (the
// reload's outcome, logged after any warning of that reload).
void reload_and_wait(server_process& srv, const std::string& event, std::size_t n) {
  srv.signal(SIGHUP);
  srv.log_when([&](const std::string& log) { return count_of(log, "event=" + event + " ") >= n; });
}

} // namespace

TEST_CASE("serve --auth-file: a SIGHUP reload did not repeat the token file mode warning (#44)") {
  temp_dir tmp;
  auto tokens = tmp.str() + "/tokens";
  std::ofstream(tokens) << mode_token << " *\n";
  REQUIRE(::chmod(tokens.c_str(), 0600) == 0);
  server_process srv({"--memory", "--listen", "unix:" + tmp.str() + "/sock", "--auth-file", tokens},
                     tmp.str() + "/serve.log");
  srv.wait_serving();
  CHECK(count_of(srv.log(), "auth_file_readable") == 0);

  REQUIRE(::chmod(tokens.c_str(), 0644) == 0);
  reload_and_wait(srv, "tokens_reloaded", 1);
  auto log = srv.log();
  INFO("log: ", log);
  CHECK(count_of(log, "event=auth_file_readable") == 1);
  CHECK(log.find("readable by every user (mode 0644)") != std::string::npos);

  // Owner-only again: no further warning.
  REQUIRE(::chmod(tokens.c_str(), 0600) == 0);
  reload_and_wait(srv, "tokens_reloaded", 2);
  CHECK(count_of(srv.log(), "event=auth_file_readable") == 1);

  REQUIRE(::chmod(tokens.c_str(), 0640) == 0);
  reload_and_wait(srv, "tokens_reloaded", 3);
  log = srv.log();
  CHECK(count_of(log, "event=auth_file_readable") == 2);
  CHECK(log.find("readable by its group (mode 0640)") != std::string::npos);
  srv.signal(SIGTERM);
  CHECK(srv.wait_exit() == 0);
}

TEST_CASE("serve --auth-file: a FIFO as the token file blocked the start forever; it is refused "
          "(#44)") {
  temp_dir tmp;
  auto fifo = tmp.str() + "/tokens";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  server_process srv({"--memory", "--listen", "unix:" + tmp.str() + "/sock", "--auth-file", fifo},
                     tmp.str() + "/serve.log");
  CHECK(srv.wait_exit() == 1);
  auto log = srv.log();
  INFO("log: ", log);
  CHECK(log.find("event=startup_failed") != std::string::npos);
  CHECK(log.find("is not a regular file (it is a FIFO)") != std::string::npos);
  CHECK(log.find("event=serving") == std::string::npos);
}

TEST_CASE("serve --auth-file: a SIGHUP reload of a token file replaced by a FIFO blocked; it keeps "
          "the tokens (#44)") {
  temp_dir tmp;
  auto tokens = tmp.str() + "/tokens";
  auto sock = tmp.str() + "/sock";
  std::ofstream(tokens) << mode_token << " *\n";
  REQUIRE(::chmod(tokens.c_str(), 0600) == 0);
  server_process srv({"--memory", "--listen", "unix:" + sock, "--auth-file", tokens},
                     tmp.str() + "/serve.log");
  srv.wait_serving();
  REQUIRE(::unlink(tokens.c_str()) == 0);
  REQUIRE(::mkfifo(tokens.c_str(), 0600) == 0);
  reload_and_wait(srv, "tokens_reload_failed", 1);
  auto log = srv.log();
  INFO("log: ", log);
  CHECK(log.find("is not a regular file (it is a FIFO); keeping the current tokens")
        != std::string::npos);
  // The server still answers, with the tokens it had: the reload did not
  // wait on the FIFO.
  client c(sock);
  CHECK(ok(c.call("authenticate", json{{"token", mode_token}})));
  CHECK(ok(c.call("get_app_state", json{{"app_name", "app"}})));
  srv.signal(SIGTERM);
  CHECK(srv.wait_exit() == 0);
}
