// SPDX-License-Identifier: Apache-2.0
// `agentstate watch DIR`: the real binary prints the change feed as JSON
// lines equal to read_changes' changes, beside the engine that owns the
// store, with its scope flags; --once stops at the head; bad flags exit 2,
// a foreign or expired cursor exits 1 naming the cause.
#include "support/change_feed.hpp"
#include "support/serve_process.hpp"
#include "support/test_support.hpp"

#include <sstream>

using namespace agentstate;
using namespace agentstate::test;

namespace {

std::vector<json> lines_of(const std::string& out) {
  std::vector<json> xs;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    auto j = parse_json(line, 512);
    REQUIRE(j.ok());
    xs.push_back(std::move(*j));
  }
  return xs;
}

std::vector<json> changes_of(engine& e, watch_request req) {
  std::vector<json> out;
  for (auto& c : test::read_feed(e, std::move(req)))
    out.push_back(to_json(c));
  return out;
}

} // namespace

TEST_CASE("agentstate watch: prints the feed as JSON lines beside the engine that owns the "
          "store; scope flags filter; --once stops at the head") {
  temp_dir dir;
  options o;
  o.dir = dir.str();
  o.mode = durability::nosync;
  auto e = MUST(engine::open(o));
  auto start = MUST(e->head_cursor());
  for (int s = 0; s < 3; ++s) {
    auto ref = sref("app", "u" + std::to_string(s % 2), "s" + std::to_string(s));
    MUST(e->create_session(create_req(ref, json{{"user:x", s}})));
    for (int i = 0; i < 4; ++i)
      append_ok(*e, ref, make_event(json{{"n", i}, {"app:last", i}}));
  }
  MUST(e->flush());
  auto [rc, out] = run_tool("watch '" + dir.str() + "' --once --from " + start + " 2>/dev/null");
  CHECK(rc == 0);
  watch_request every;
  every.from = start;
  CHECK(lines_of(out) == changes_of(*e, every));
  CHECK(lines_of(out).size() == 15);

  auto [rc2, out2] = run_tool("watch '" + dir.str() + "' --app app --user u1 --once --from " + start
                              + " 2>/dev/null");
  CHECK(rc2 == 0);
  watch_request user;
  user.scope = watch_scope::user;
  user.app_name = "app";
  user.user_id = "u1";
  user.from = start;
  auto want = changes_of(*e, user);
  CHECK(want.size() == 1); // s1's create sets user:x; its appends set no user: key
  CHECK(lines_of(out2) == want);

  // Without --from it starts at the head: nothing to print.
  auto [rc3, out3] = run_tool("watch '" + dir.str() + "' --once 2>/dev/null");
  CHECK(rc3 == 0);
  CHECK(out3.empty());

  CHECK(run_tool("watch '" + dir.str() + "' --session s0 --once 2>/dev/null").first == 2);
  CHECK(run_tool("watch '" + dir.str() + "' --once --from 0123456789abcdef-3 2>/dev/null").first
        == 1);
  CHECK(run_tool("watch --help >/dev/null 2>&1").first == 0);
  MUST(e->close());
}
