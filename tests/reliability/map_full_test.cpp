// SPDX-License-Identifier: Apache-2.0
// Map full for real (no fault injection): an LMDB store opened with the
// smallest allowed maximum (1 MiB) is filled until append_event answers
// storage_full. Everything stored before is intact, the failed append left
// no trace in any scope, actors still answer, the store verifies clean; after
// a reopen with a larger maximum the very same append (same event id)
// succeeds at the next version. README guarantees 1 and 8, and the map-full rule of docs/storage.md.
#include <doctest/doctest.h>

#include "actors/engine_factory.hpp"
#include "store/verify.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace agentstate::test;

namespace {

event big_event(int i, std::size_t pad) {
  auto e = make_event(json{{"n", i}, {"user:last", i}, {"app:last", i}, {"temp:t", i}},
                      "ev-" + std::to_string(i), 1700000000.0 + i);
  e.content = json{{"pad", std::string(pad, static_cast<char>('a' + i % 26))}};
  return e;
}

void check_verify(engine& e) {
  auto txn = detail::engine_factory::store_of(e).begin_read();
  auto rep = store::verify_store(*txn);
  INFO((rep.messages.empty() ? std::string() : rep.messages.front()));
  CHECK(rep.ok());
}

} // namespace

namespace {

// The scenario, durable (sync) or on a writable map (nosync, write_map),
// where the map's growth also resizes the file.
void fill_until_full(bool write_map) {
  temp_dir dir;
  options o;
  o.dir = dir.str();
  o.mode = write_map ? durability::nosync : durability::sync;
  o.write_map = write_map;
  o.max_store_bytes = std::uint64_t{1} << 20; // the minimum check_options allows

  // Below the minimum is refused up front.
  {
    auto small = o;
    small.max_store_bytes = (std::uint64_t{1} << 20) - 1;
    CHECK_ERR(engine::open(small), errc::invalid_argument);
  }

  auto first = MUST(engine::open(o));
  auto s1 = sref("app", "u", "s1");
  auto s2 = sref("app", "u", "s2");
  MUST(first->create_session(create_req(s1, json{{"user:created", true}})));
  MUST(first->create_session(create_req(s2)));

  // Alternate between the sessions with ~20 KiB events until the map is full.
  int acked = 0;
  int failed_at = -1;
  result<append_result> failure = error{errc::internal, "never failed"};
  for (int i = 0; i < 1000; ++i) {
    auto& ref = i % 2 == 0 ? s1 : s2;
    auto r = first->append_event(append_req(ref, big_event(i, 20000)));
    if (!r.ok()) {
      failed_at = i;
      failure = std::move(r);
      break;
    }
    CHECK(r->version == static_cast<std::uint64_t>(i / 2 + 1));
    ++acked;
  }
  INFO("acked before full: ", acked, "; failure: ", describe(failure));
  REQUIRE(failed_at >= 0);
  CHECK(acked > 10);
  CHECK(failure.code() == errc::storage_full);
  MESSAGE("1 MiB store: ", acked, " x 20 KiB appends acknowledged, append #", failed_at,
          " refused with storage_full: ", failure.err().message);

  // Everything acknowledged is intact; the refused append left nothing.
  auto check_intact = [&](engine& e) {
    auto a = get_existing(e, s1);
    auto b = get_existing(e, s2);
    CHECK(a.version + b.version == static_cast<std::uint64_t>(acked));
    CHECK(a.events.size() == a.version);
    CHECK(b.events.size() == b.version);
    for (std::size_t v = 0; v < a.events.size(); ++v)
      CHECK(a.events[v].id == "ev-" + std::to_string(2 * v));
    for (std::size_t v = 0; v < b.events.size(); ++v)
      CHECK(b.events[v].id == "ev-" + std::to_string(2 * v + 1));
    CHECK(app_state(e, "app").value("last", -1) == acked - 1);
    CHECK(user_state(e, "app", "u").value("last", -1) == acked - 1);
    CHECK(user_state(e, "app", "u").value("created", false));
    CHECK(has_no_temp_keys(a.state));
    check_verify(e);
  };
  check_intact(*first);

  // Actors still answer; a retry of the same append is refused the same way
  // (no half-stored event makes it look like a duplicate).
  auto& full_ref = failed_at % 2 == 0 ? s1 : s2;
  CHECK_ERR(first->append_event(append_req(full_ref, big_event(failed_at, 20000))),
            errc::storage_full);
  CHECK(get_maybe(*first, sref("app", "u", "nope")) == std::nullopt);
  check_intact(*first);
  MUST(first->close());
  first.reset();

  // Reopen at the same maximum: still intact, still full.
  {
    auto again = MUST(engine::open(o));
    check_intact(*again);
    CHECK_ERR(again->append_event(append_req(full_ref, big_event(failed_at, 20000))),
              errc::storage_full);
    MUST(again->close());
  }

  // Reopen with a larger maximum: the same append (same id) now succeeds.
  o.max_store_bytes = std::uint64_t{8} << 20;
  auto bigger = MUST(engine::open(o));
  check_intact(*bigger);
  auto before = get_existing(*bigger, full_ref).version;
  auto r = MUST(bigger->append_event(append_req(full_ref, big_event(failed_at, 20000))));
  CHECK(r.version == before + 1);
  CHECK(r.ev.id == "ev-" + std::to_string(failed_at));
  CHECK(app_state(*bigger, "app").value("last", -1) == failed_at);
  // And it is idempotent from here on.
  auto again = MUST(bigger->append_event(append_req(full_ref, big_event(failed_at, 20000))));
  CHECK(again.version == r.version);
  check_verify(*bigger);
  MUST(bigger->close());
}

} // namespace

TEST_CASE("map full: a 1 MiB store fills up, refuses with storage_full, keeps everything, "
          "and takes the same append after a reopen with a larger maximum") {
  fill_until_full(false);
}

TEST_CASE("map full on a writable map (write_map): the same, nothing lost, no crash") {
  fill_until_full(true);
}

TEST_CASE("write_map needs durability nosync: refused at open with sync or memory") {
  temp_dir dir;
  options o;
  o.dir = dir.str();
  o.write_map = true;
  o.mode = durability::sync;
  CHECK_ERR(engine::open(o), errc::invalid_argument);
  o.mode = durability::memory;
  CHECK_ERR(engine::open(o), errc::invalid_argument);
  o.mode = durability::nosync;
  auto e = MUST(engine::open(o));
  MUST(e->close());
}
