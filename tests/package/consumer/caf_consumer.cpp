// SPDX-License-Identifier: Apache-2.0
// A CAF host outside the project (linked to agentstate::caf): drives an installed
// engine through its typed actor handle (agentstate/caf.hpp) on an LMDB store.
//
// usage: caf_consumer STORE_DIR   exit 0 when the session round-trips, 1 otherwise
#include <cstdio>
#include <optional>
#include <string>

#include <caf/all.hpp>

#include <agentstate/caf.hpp>

using namespace agentstate;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fputs("usage: caf_consumer STORE_DIR\n", stderr);
    return 1;
  }
  options opts;
  opts.dir = argv[1];
  auto eng = engine::open(opts);
  if (!eng) {
    std::fprintf(stderr, "caf_consumer: open: %s\n", to_string(eng.err()).c_str());
    return 1;
  }
  int rc = 1;
  {
    caf::actor_system_config cfg;
    add_error_category(cfg);
    caf::actor_system sys{cfg};
    auto h = spawn_engine_actor(sys, **eng);
    caf::scoped_actor self{sys};
    create_request c{"caf-app", "u1", "s1", json{{"user:n", 1}}};
    std::optional<session> created;
    self->request(h, caf::infinite, c)
      .receive([&](session& s) { created = std::move(s); },
               [&](caf::error& e) {
                 std::fprintf(stderr, "caf_consumer: create: %s\n", sys.render(e).c_str());
               });
    std::optional<session> got;
    get_request g;
    g.ref = {"caf-app", "u1", "s1"};
    self->request(h, caf::infinite, g)
      .receive([&](std::optional<session>& s) { got = std::move(s); },
               [&](caf::error& e) {
                 std::fprintf(stderr, "caf_consumer: get: %s\n", sys.render(e).c_str());
               });
    if (created && got && got->state == json{{"user:n", 1}}) {
      std::printf("caf_consumer: session %s %s\n", got->id.c_str(), got->state.dump().c_str());
      rc = 0;
    } else {
      std::fputs("caf_consumer: the session did not round-trip\n", stderr);
    }
    self->send_exit(h, caf::exit_reason::user_shutdown);
  }
  if (auto c = (*eng)->close(); !c) {
    std::fprintf(stderr, "caf_consumer: close: %s\n", to_string(c.err()).c_str());
    return 1;
  }
  return rc;
}
