// SPDX-License-Identifier: Apache-2.0
// test-name: tools_serve_ttl_test
// Session expiry set by the server's flags, through a real `agentstate
// serve` on an LMDB store (docs/protocol.md): --session-ttl-s gives sessions
// created without ttl_s an expiry, --refresh-ttl makes each stored append
// move it, a request's own ttl_s and refresh_ttl win over both, and a
// session is gone for reads and appends once its expiry passes.
#include <chrono>
#include <thread>

#include "support/serve_process.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace agentstate::test;
using namespace std::chrono_literals;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

json append_params(const std::string& session, int n) {
  return with(session_params(session), "event",
              json{{"author", "agent"}, {"actions", {{"state_delta", {{"n", n}}}}}});
}

std::string kind_of(const json& r) {
  INFO("response: ", r.dump());
  REQUIRE(r.contains("error"));
  return r["error"]["data"]["kind"].get<std::string>();
}

} // namespace

TEST_CASE("serve --session-ttl-s: sessions created without ttl_s expire; ttl_s wins") {
  temp_dir dir;
  server s(
    {"--store", (dir.path() / "store").string(), "--durability", "nosync", "--session-ttl-s", "2"},
    (dir.path() / "stderr.txt").string());
  const double t0 = now_s();
  auto c = s.ok("create_session", session_params("short"));
  REQUIRE(c.contains("expires_at"));
  CHECK(c["expires_at"].get<double>() >= t0 + 2 - 0.01);
  CHECK(c["expires_at"].get<double>() <= now_s() + 2 + 0.01);
  auto forever = s.ok("create_session", with(session_params("forever"), "ttl_s", 0));
  CHECK(!forever.contains("expires_at"));
  auto longer = s.ok("create_session", with(session_params("longer"), "ttl_s", 3600));
  CHECK(longer["expires_at"].get<double>() >= t0 + 3600 - 0.01);
  // Without --refresh-ttl an append leaves the expiry where it was.
  s.ok("append_event", append_params("short", 1));
  auto got = s.ok("get_session", session_params("short"));
  CHECK(got["expires_at"] == c["expires_at"]);
  // Past the expiry the session is gone for reads and appends; the others
  // stay. `serve` is a child process on the system clock (no clock can be
  // given to it): the test waits for the outcome, reads answering null, and
  // checks that it came no earlier than the expiry.
  const double expires_at = c["expires_at"].get<double>();
  REQUIRE(
    eventually([&] { return s.ok("get_session", session_params("short")).is_null(); }, 10s, 20ms));
  CHECK(now_s() >= expires_at - 0.01);
  CHECK(kind_of(s.call("append_event", append_params("short", 2))) == "not_found");
  CHECK(s.ok("get_session", session_params("forever"))["id"] == "forever");
  CHECK(s.ok("get_session", session_params("longer"))["id"] == "longer");
}

TEST_CASE("serve --refresh-ttl: each stored append moves the expiry; refresh_ttl false wins") {
  temp_dir dir;
  server s({"--store", (dir.path() / "store").string(), "--durability", "nosync", "--session-ttl-s",
            "600", "--refresh-ttl"},
           (dir.path() / "stderr.txt").string());
  auto c = s.ok("create_session", session_params("moving"));
  auto fixed = s.ok("create_session", with(session_params("fixed"), "refresh_ttl", false));
  // The system clock (the child's too) must move on past the create before
  // the appends, so that a refreshed expiry is a later one.
  // Bounded (1 s), and not a check: the CHECKs below read the expiries.
  const double created = c["expires_at"].get<double>() - 600;
  (void)eventually([&] { return now_s() >= created + 0.002; }, 1s, 1ms);
  const double before = now_s();
  s.ok("append_event", append_params("moving", 1));
  s.ok("append_event", append_params("fixed", 1));
  auto moved = s.ok("get_session", session_params("moving"));
  CHECK(moved["expires_at"].get<double>() >= before + 600 - 0.01);
  CHECK(moved["expires_at"].get<double>() > c["expires_at"].get<double>());
  CHECK(s.ok("get_session", session_params("fixed"))["expires_at"] == fixed["expires_at"]);
  // A session that never expires stays so: there is no ttl to refresh by.
  auto forever = s.ok("create_session", with(session_params("forever"), "ttl_s", 0));
  CHECK(!forever.contains("expires_at"));
  s.ok("append_event", append_params("forever", 1));
  CHECK(!s.ok("get_session", session_params("forever")).contains("expires_at"));
}
