// SPDX-License-Identifier: Apache-2.0
// Regression: a session id with surrounding spaces was trimmed by
// create_session but taken as given by get, append, delete and the invocation
// calls, so " padded " created "padded" and then every other call on
// " padded " answered not_found. Every method now trims the session id
// (model::normalize_ref); app name and user id are taken exactly.
#include <doctest/doctest.h>

#include "support/test_support.hpp"

using namespace agentstate;

TEST_CASE("regression: ' padded ' is trimmed on create but not on get or append") {
  for (auto kind : {test::store_kind::memory, test::store_kind::lmdb}) {
    CAPTURE(test::to_string(kind));
    auto eng = test::open_engine(kind);
    auto& e = *eng;
    auto created = MUST(e.create_session(test::create_req("app", "u", " padded ")));
    CHECK(created.id == "padded");
    auto padded = test::sref("app", "u", "\t padded \n");

    auto got = MUST(e.get_session(test::get_req(padded)));
    REQUIRE(got);
    CHECK(got->id == "padded");
    auto text = MUST(e.get_session_json(test::get_req(padded)));
    CHECK(text.find("\"id\":\"padded\"") != std::string::npos);

    CHECK(MUST(e.append_event(test::append_req(padded, test::make_event(json{{"k", 1}})))).version
          == 1);
    auto inv = MUST(e.begin_invocation(padded, "inv"));
    CHECK(inv.id == "padded");
    MUST(e.end_invocation(padded, "inv"));
    CHECK(MUST(e.get_session(test::get_req(test::sref("app", "u", "padded"))))->version == 1);

    // Names are not trimmed: " app " is another (valid) app name.
    auto other = MUST(e.get_session(test::get_req(test::sref(" app ", "u", "padded"))));
    CHECK_FALSE(other);

    MUST(e.delete_session(padded));
    CHECK_FALSE(MUST(e.get_session(test::get_req(test::sref("app", "u", "padded")))));
  }
}
