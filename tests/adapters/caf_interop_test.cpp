// SPDX-License-Identifier: Apache-2.0
// test-name: caf_interop_test
// test-tiers: tsan
// The typed engine_actor handle, driven from a CAF host's own actor system.
#include <doctest/doctest.h>

#include <caf/all.hpp>

#include "agentstate/caf.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

TEST_CASE("caf: a CAF host drives the engine through the typed handle") {
  test::temp_dir dir;
  options opts;
  opts.dir = dir.str();
  opts.mode = durability::nosync;
  auto eng = engine::open(opts);
  REQUIRE(eng);
  caf::actor_system_config cfg;
  add_error_category(cfg);
  caf::actor_system sys{cfg};
  auto h = spawn_engine_actor(sys, **eng);
  caf::scoped_actor self{sys};

  create_request c;
  c.app_name = "app";
  c.user_id = "u";
  c.session_id = "s";
  c.state = json{{"user:lang", "en"}};
  std::optional<session> created;
  self->request(h, caf::infinite, c)
    .receive([&](session& s) { created = s; },
             [&](caf::error& e) { FAIL("create failed: " << sys.render(e)); });
  REQUIRE(created);
  CHECK(created->state.value("user:lang", "") == "en");

  append_request a;
  a.ref = {"app", "u", "s"};
  a.ev.id = "e1";
  a.ev.actions.state_delta = json{{"k", 1}};
  std::uint64_t version = 0;
  self->request(h, caf::infinite, a)
    .receive([&](append_result& r) { version = r.version; },
             [&](caf::error& e) { FAIL("append failed: " << sys.render(e)); });
  CHECK(version == 1);

  // Errors arrive as caf::error in the agentstate category, code = errc.
  caf::error err;
  self->request(h, caf::infinite, c)
    .receive([&](session&) { FAIL("duplicate create succeeded"); },
             [&](caf::error& e) { err = e; });
  CHECK(err.category() == error_category);
  CHECK(err.code() == static_cast<std::uint8_t>(errc::already_exists));
  CHECK(sys.render(err).find("already_exists") != std::string::npos);

  get_request g;
  g.ref = a.ref;
  std::optional<session> got;
  self->request(h, caf::infinite, g)
    .receive([&](std::optional<session>& s) { got = s; },
             [&](caf::error& e) { FAIL("get failed: " << sys.render(e)); });
  REQUIRE(got);
  CHECK(got->events.size() == 1);
  CHECK(got->state.value("k", 0) == 1);

  bool deleted = false;
  self->request(h, caf::infinite, delete_request{a.ref})
    .receive([&](caf::unit_t) { deleted = true; },
             [&](caf::error& e) { FAIL("delete failed: " << sys.render(e)); });
  CHECK(deleted);
  json user;
  self->request(h, caf::infinite, user_state_request{"app", "u"})
    .receive([&](json& j) { user = j; },
             [&](caf::error& e) { FAIL("user state failed: " << sys.render(e)); });
  CHECK(user.value("lang", "") == "en");
  self->send_exit(h, caf::exit_reason::user_shutdown);
}
