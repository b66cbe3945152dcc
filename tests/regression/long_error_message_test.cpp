// SPDX-License-Identifier: Apache-2.0
// Regression: "a malformed 15 MiB line is echoed whole in its error". The
// parser's message quotes what it last read and an unknown method's message
// names the method, so a bad line came back at its full size. Error messages
// are now cut to 1 KiB (at a UTF-8 boundary) before they are sent.
#include <doctest/doctest.h>

#include "support/serve_process.hpp"

using namespace agentstate;
using namespace agentstate::test;

TEST_CASE("regression: a malformed 15 MiB line is echoed whole in its error") {
  temp_dir tmp;
  server s({"--memory"}, (tmp.path() / "serve.err").string());
  const std::string big(15u << 20, 'x');
  // Malformed: the parser stops after the long key.
  s.send("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"get_session\",\"params\":{\"" + big
         + "\" oops}}\n");
  // Well-formed, naming an unknown method 1 MiB long.
  s.send_line(json{{"jsonrpc", "2.0"}, {"id", 2}, {"method", std::string(1u << 20, 'y')}});
  // Multi-byte characters at the cut stay whole.
  // ("unknown method '" is 16 bytes: the 1,024-byte cut falls inside the é.)
  s.send_line(json{{"jsonrpc", "2.0"},
                   {"id", 3},
                   {"method", std::string(1007, 'a') + "\xc3\xa9" + std::string(3000, 'b')}});
  for (int i = 0; i < 3; ++i) {
    auto r = s.next(30s);
    REQUIRE(r.contains("error"));
    auto m = r["error"]["message"].get<std::string>();
    INFO(m.substr(0, 200));
    CHECK(m.size() <= 1100);
    CHECK(m.find("bytes in all") != std::string::npos);
    CHECK(m.find("\xef\xbf\xbd") == std::string::npos); // no replaced half character
  }
  // Still serving.
  auto pong = s.call("ping", nullptr);
  CHECK(pong["result"] == "pong");
  CHECK(s.wait_exit() == 0);
}
