// SPDX-License-Identifier: Apache-2.0
// test-name: invocation_derived_test
// test-tiers: write_map
// docs/semantics.md N1 derived keys: registered by the host, recomputed by the
// engine when an append (or create) changes an input, stored under derived:.
#include <doctest/doctest.h>

#include <future>

#include "agentstate/invocation.hpp"
#include "agentstate/state.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

namespace {

std::atomic<int> total_calls{0};

void with_total(options& o) {
  o.derived.push_back(
    derived_key{"total", {"price", "qty", "user:discount"}, [](const json& in) -> json {
                  total_calls.fetch_add(1);
                  double d = in.value("user:discount", 0.0);
                  return in.value("price", 0.0) * in.value("qty", 0) - d;
                }});
  o.derived.push_back(derived_key{"fragile", {"boom"}, [](const json& in) -> json {
                                    if (in.value("boom", false))
                                      throw std::runtime_error("fragile input");
                                    return "calm";
                                  }});
}

} // namespace

TEST_CASE_TEMPLATE("N1 derived: recomputed when an append changes an input, stored under "
                   "derived:, recorded in the event",
                   S, test::memory_store, test::lmdb_store) {
  test::test_engine t = test::open_engine(S::kind, with_total);
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  auto s0 = MUST(e.create_session(test::create_req(ref, json{{"price", 2.5}, {"qty", 4}})));
  CHECK(s0.state.value("derived:total", 0.0) == 10.0); // computed at create too
  CHECK(test::get_existing(e, ref).state.value("derived:total", 0.0) == 10.0);
  int before = total_calls.load();
  MUST(e.append_event(test::append_req(ref, test::make_event(json{{"other", 1}}))));
  CHECK(total_calls.load() == before); // no input changed: not recomputed
  auto r = MUST(e.append_event(test::append_req(ref, test::make_event(json{{"qty", 6}}))));
  CHECK(r.ev.actions.state_delta.value("derived:total", 0.0) == 15.0);
  CHECK(test::get_existing(e, ref).state.value("derived:total", 0.0) == 15.0);
  // A user: input, and a removed input (missing inputs are absent).
  MUST(e.append_event(test::append_req(ref, test::make_event(json{{"user:discount", 1.0}}))));
  CHECK(test::get_existing(e, ref).state.value("derived:total", 0.0) == 14.0);
  auto rm = test::make_event();
  rm.actions.state_remove = {"price"};
  MUST(e.append_event(test::append_req(ref, std::move(rm))));
  CHECK(test::get_existing(e, ref).state.value("derived:total", 1.0) == -1.0);
  // A modify of an input recomputes with the modified value.
  append_request m = test::append_req(ref, test::make_event());
  m.modify = {state_modify{"price", 0, [](const json& v) { return v.get<double>() + 3; }}};
  auto rmod = MUST(e.append_event(std::move(m)));
  CHECK(rmod.ev.actions.state_delta.value("derived:total", 0.0) == 17.0);
  // Reads through the state view fall back to derived: for an unprefixed miss.
  state st{test::get_existing(e, ref).state};
  CHECK(st.get<double>("total", 0.0) == 17.0);
  CHECK(st.derived().get("total") == 17.0);
  // Templates read the same way: {total} renders derived:total unless a
  // direct key exists.
  auto inv = invocation::begin(e, ref);
  REQUIRE(inv.ok());
  CHECK(MUST(inv->inject("{total}")) == "17.0");
  MUST(inv->state().set("total", "direct"));
  CHECK(MUST(inv->inject("{total}")) == "direct");
  std::promise<result<void>> ended;
  inv->end([&](result<void> r) { ended.set_value(std::move(r)); });
  CHECK_FALSE(inv->live());
  CHECK(ended.get_future().get().ok());
}

TEST_CASE_TEMPLATE("N1 derived: a throwing function fails the append, nothing stored", S,
                   test::memory_store, test::lmdb_store) {
  test::test_engine t = test::open_engine(S::kind, with_total);
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref)));
  auto r = e.append_event(test::append_req(ref, test::make_event(json{{"boom", true}, {"x", 1}})));
  REQUIRE_FALSE(r.ok());
  CHECK(r.code() == errc::invalid_argument);
  CHECK(r.err().message.find("fragile") != std::string::npos);
  auto s = test::get_existing(e, ref);
  CHECK(s.version == 0);
  CHECK(s.state == json::object());
  MUST(e.append_event(test::append_req(ref, test::make_event(json{{"boom", false}}))));
  CHECK(test::get_existing(e, ref).state.value("derived:fragile", "") == "calm");
}

TEST_CASE("N1 derived: engine::open refuses bad registrations") {
  auto bad = [](std::function<void(options&)> f) {
    options o;
    o.mode = durability::memory;
    f(o);
    auto r = engine::open(o);
    return r.ok() ? errc::ok : r.code();
  };
  auto fn = [](const json&) -> json { return 1; };
  CHECK(bad([&](options& o) { o.derived.push_back({"", {"a"}, fn}); }) == errc::invalid_argument);
  CHECK(bad([&](options& o) { o.derived.push_back({"x", {}, fn}); }) == errc::invalid_argument);
  CHECK(bad([&](options& o) { o.derived.push_back({"x", {"a"}, {}}); }) == errc::invalid_argument);
  CHECK(bad([&](options& o) {
          o.derived.push_back({"x", {"temp:a"}, fn});
        })
        == errc::invalid_argument);
  CHECK(bad([&](options& o) {
          o.derived.push_back({"x", {"derived:y"}, fn});
        })
        == errc::invalid_argument);
  CHECK(bad([&](options& o) {
          o.derived.push_back({"x", {"a"}, fn});
          o.derived.push_back({"x", {"b"}, fn});
        })
        == errc::invalid_argument);
  CHECK(bad([&](options& o) {
          o.derived.push_back({"x", {"a", "user:b", "app:c"}, fn});
        })
        == errc::ok);
}
