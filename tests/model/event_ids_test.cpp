// SPDX-License-Identifier: Apache-2.0
// One rule for the strings that identify an event (model::check_event_ids):
// id, invocation_id and author are at most 128 bytes of UTF-8 without a NUL
// byte (#44: a NUL invocation_id or author was stored), on append as in the
// imports (tests/tools/import_repeats_test.cpp).
#include <doctest/doctest.h>

#include <string>

#include "model/checks.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

TEST_CASE("event ids: a NUL invocation_id, id or author is refused with invalid_argument (#44)") {
  for (auto member : {"id", "invocation_id", "author"}) {
    CAPTURE(member);
    auto ev = test::make_event();
    std::string bad("a\0b", 3);
    if (std::string(member) == "id")
      ev.id = bad;
    else if (std::string(member) == "invocation_id")
      ev.invocation_id = bad;
    else
      ev.author = bad;
    auto r = model::check_event_ids(ev);
    REQUIRE(!r);
    CHECK(r.err().code == errc::invalid_argument);
    CHECK(r.err().message == std::string("'event.") + member + "' contains a NUL byte");

    // The engine refuses the append with the same error, and stores nothing.
    auto e = test::open_engine(test::store_kind::memory);
    MUST(e->create_session(test::create_req("app", "u", "s")));
    auto a = e->append_event(test::append_req(test::sref("app", "u", "s"), ev));
    REQUIRE(!a.ok());
    CHECK(a.err().code == errc::invalid_argument);
    CHECK(test::get_existing(*e, test::sref("app", "u", "s")).version == 0);
  }
}

TEST_CASE("event ids: the same length and UTF-8 rule for id, invocation_id and author") {
  auto ev = test::make_event({}, std::string(128, 'i'), std::nullopt, std::string(128, 'v'),
                             std::string(128, 'a'));
  CHECK(model::check_event_ids(ev).ok());
  ev.author = std::string(129, 'a');
  auto r = model::check_event_ids(ev);
  REQUIRE(!r);
  CHECK(r.err().code == errc::too_large);
  CHECK(r.err().message == "'event.author' is 129 bytes; the limit is 128");
  ev.author = "\xff";
  r = model::check_event_ids(ev);
  REQUIRE(!r);
  CHECK(r.err().code == errc::invalid_argument);
  CHECK(r.err().message == "'event.author' is not valid UTF-8");
}
