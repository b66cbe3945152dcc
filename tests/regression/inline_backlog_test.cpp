// SPDX-License-Identifier: Apache-2.0
// Regression: in durability memory, a delete_user or delete_app reached the
// writer without being counted in its backlog, while the writer uncounted
// it once committed: the count wrapped below zero, and from then on no
// session actor committed inline again (every append took the writer's hop).
#include <doctest/doctest.h>

#include "actors/engine_factory.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

TEST_CASE("regression: delete_user and delete_app leave the writer backlog at zero in memory") {
  auto opened =
    detail::engine_factory::open(test::make_options(test::store_kind::memory, ""), nullptr);
  REQUIRE(opened.ok());
  auto& e = **opened;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref)));
  test::append_ok(e, ref, test::make_event(json{{"n", 1}}));
  CHECK(detail::engine_factory::writer_backlog_of(e) == 0);
  MUST(e.delete_user("app", "other"));
  CHECK(detail::engine_factory::writer_backlog_of(e) == 0);
  MUST(e.delete_app("gone"));
  CHECK(detail::engine_factory::writer_backlog_of(e) == 0);
  test::append_ok(e, ref, test::make_event(json{{"n", 2}}));
  CHECK(detail::engine_factory::writer_backlog_of(e) == 0);
  CHECK(test::get_existing(e, ref).version == 2);
  MUST(e.close());
}
