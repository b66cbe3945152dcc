// SPDX-License-Identifier: Apache-2.0
// The change log across the store tools, driven through the real binary: a
// backup, plain or --compact, keeps the log and the store's epoch, so a
// cursor taken on the original resumes on the copy with exactly the same
// changes; export -> import starts a new epoch with an empty log, so the
// original's cursors are refused there instead of resuming at a wrong point.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "support/change_feed.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

namespace {

int run(const std::string& args) {
  int rc = std::system((std::string(AGENTSTATE_BIN) + " " + args).c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Every change after `from`, each with its cursor, as comparable lines.
std::vector<std::string> feed_after(engine& e, const std::string& from) {
  watch_request req;
  req.from = from;
  std::vector<std::string> out;
  for (auto& c : test::read_feed(e, std::move(req), 500))
    out.push_back(test::describe_change(c, true));
  return out;
}

} // namespace

TEST_CASE("tools: backup and backup --compact keep the change log and its epoch; an import "
          "starts a new epoch that refuses the old cursors") {
  test::temp_dir dir, out;
  std::string cursor, head;
  std::vector<std::string> expected;
  {
    options o;
    o.dir = dir.str();
    o.mode = durability::nosync;
    auto e = MUST(engine::open(o));
    for (int s = 0; s < 20; ++s)
      MUST(e->create_session(test::create_req("app", "u" + std::to_string(s % 3),
                                              "s" + std::to_string(s), json{{"user:k", s}})));
    for (int i = 0; i < 400; ++i) {
      auto ref = test::sref("app", "u" + std::to_string(i % 20 % 3), "s" + std::to_string(i % 20));
      auto r =
        test::append_ok(*e, ref, test::make_event(json{{"n", i}, {"pad", test::bytes(300)}}));
      if (i == 150)
        cursor = r.cursor;
    }
    // Deletes leave free pages for --compact to leave out.
    for (int s = 0; s < 10; ++s)
      MUST(
        e->delete_session(test::sref("app", "u" + std::to_string(s % 3), "s" + std::to_string(s))));
    expected = feed_after(*e, cursor);
    head = MUST(e->head_cursor());
    MUST(e->close());
  }
  REQUIRE(!cursor.empty());
  REQUIRE(expected.size() == 249 + 10); // appends 151..399, then the deletes

  for (const char* flag : {"", " --compact"}) {
    CAPTURE(flag);
    auto dest = out.str() + (*flag ? "/compact" : "/plain");
    REQUIRE(run("backup " + dir.str() + " " + dest + flag + " > /dev/null") == 0);
    CHECK(run("verify " + dest + " > /dev/null") == 0);
    options c;
    c.dir = dest;
    auto copy = MUST(engine::open(c));
    CHECK(MUST(copy->head_cursor()) == head);
    CHECK(feed_after(*copy, cursor) == expected);
    MUST(copy->close());
  }

  auto dump = out.str() + "/export.jsonl", imported = out.str() + "/imported";
  REQUIRE(run("export " + dir.str() + " > " + dump) == 0);
  REQUIRE(run("import " + imported + " < " + dump + " > /dev/null") == 0);
  options c;
  c.dir = imported;
  auto fresh = MUST(engine::open(c));
  watch_request req;
  req.from = cursor;
  auto refused = fresh->read_changes(req, 10);
  REQUIRE(!refused);
  CHECK(refused.code() == errc::invalid_argument); // another store's cursor
  // The imported store's sessions are there; its log starts empty.
  CHECK(MUST(fresh->get_session(test::get_req(test::sref("app", "u1", "s19")))).has_value());
  CHECK(MUST(fresh->read_changes(watch_request{}, 10)).changes.empty());
}
