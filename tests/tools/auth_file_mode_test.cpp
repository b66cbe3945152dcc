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
