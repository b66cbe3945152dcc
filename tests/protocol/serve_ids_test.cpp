// SPDX-License-Identifier: Apache-2.0
// `agentstate serve`: every parameter that names an invocation (or an event)
// follows the rule of an event's invocation_id (no NUL, valid UTF-8, at most
// 128 bytes) and a request breaking it is refused with a typed error naming
// the parameter, storing nothing (#44). The real binary, driven through pipes.
#include "support/serve_process.hpp"
#include "support/test_support.hpp"

namespace {

using namespace agentstate;
using namespace agentstate::test;

// The error of a refused request: its kind, and that its message names `field`.
void check_refused(const json& r, const std::string& kind, const std::string& field) {
  INFO("response: ", r.dump());
  REQUIRE(r.contains("error"));
  CHECK(r["error"]["data"]["kind"] == kind);
  CHECK(r["error"]["message"].get<std::string>().find(field) != std::string::npos);
}

} // namespace

TEST_CASE("serve: end_invocation accepted a NUL or over-long invocation_id; every invocation_id "
          "parameter is now checked (#44)") {
  temp_dir dir;
  server s({"--memory"}, (dir.path() / "stderr.txt").string());
  s.ok("create_session", session_params("s1"));
  // inv-1 is the live invocation, holding a temp: key.
  s.ok("append_event",
       with(session_params("s1"), "event",
            json{{"author", "a"},
                 {"invocation_id", "inv-1"},
                 {"actions", {{"state_delta", {{"temp:scratch", 1}, {"k", 1}}}}}}));

  const std::string nul = std::string("inv-1") + '\0' + "x";
  const std::string long_id(129, 'i');

  check_refused(s.call("end_invocation", with(session_params("s1"), "invocation_id", nul)),
                "invalid_argument", "invocation_id");
  check_refused(s.call("end_invocation", with(session_params("s1"), "invocation_id", long_id)),
                "too_large", "invocation_id");
  check_refused(s.call("end_invocation", with(session_params("s1"), "invocation_id", "")),
                "invalid_argument", "invocation_id");
  check_refused(s.call("get_session", with(session_params("s1"), "invocation_id", nul)),
                "invalid_argument", "invocation_id");
  check_refused(s.call("inject_state",
                       with(with(session_params("s1"), "invocation_id", nul), "template", "{k}")),
                "invalid_argument", "invocation_id");
  check_refused(s.call("rewind_session", with(session_params("s1"), "before_invocation_id", nul)),
                "invalid_argument", "before_invocation_id");
  check_refused(s.call("rewind_plan", with(session_params("s1"), "before_invocation_id", long_id)),
                "too_large", "before_invocation_id");
  check_refused(s.call("rewind_session",
                       with(with(session_params("s1"), "before_version", 1), "event_id", nul)),
                "invalid_argument", "event_id");
  check_refused(
    s.call("append_event",
           with(session_params("s1"), "event", json{{"author", "a"}, {"invocation_id", nul}})),
    "invalid_argument", "invocation_id");

  // Nothing was stored, and the live invocation kept its temp: state.
  auto got = s.ok("get_session", with(session_params("s1"), "invocation_id", "inv-1"));
  CHECK(got["version"] == 1);
  CHECK(got["state"]["temp:scratch"] == 1);
  auto invocations = s.ok("list_invocations", session_params("s1"));
  REQUIRE(invocations.size() == 1);
  CHECK(invocations[0]["invocation_id"] == "inv-1");
  // A well-formed end still ends it.
  CHECK(s.ok("end_invocation", with(session_params("s1"), "invocation_id", "inv-1")).is_null());
  got = s.ok("get_session", with(session_params("s1"), "invocation_id", "inv-1"));
  CHECK_FALSE(got["state"].contains("temp:scratch"));
  CHECK(s.wait_exit() == 0);
}
