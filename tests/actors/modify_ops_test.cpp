// SPDX-License-Identifier: Apache-2.0
// test-name: invocation_modify_ops_test
// The built-in modifies (modify_ops, the protocol's `modify` operations):
// each resolved at commit like any state_modify; compare_and_set fails the
// whole append with condition_failed and stores nothing.
#include <doctest/doctest.h>

#include <thread>

#include "support/test_support.hpp"

using namespace agentstate;

namespace {

append_result append_ops(engine& e, const session_ref& ref, std::vector<state_modify> ops,
                         json delta = json::object()) {
  append_request req;
  req.ref = ref;
  req.ev = test::make_event(std::move(delta));
  req.modify = std::move(ops);
  auto r = e.append_event(std::move(req));
  INFO(test::describe(r));
  REQUIRE(r.ok());
  return std::move(r).value();
}

result<append_result> try_ops(engine& e, const session_ref& ref, std::vector<state_modify> ops) {
  append_request req;
  req.ref = ref;
  req.ev = test::make_event();
  req.modify = std::move(ops);
  return e.append_event(std::move(req));
}

} // namespace

TEST_CASE_TEMPLATE("modify_ops: increment, append, merge, set_if_absent and compare_and_set "
                   "in every scope",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(
    ref, json{{"list", json::array({1})}, {"obj", {{"a", 1}, {"b", 2}}}, {"user:n", 5}})));
  using namespace modify_ops;
  auto r = append_ops(e, ref,
                      {increment("user:n", 2), increment("app:f", 0.5), increment("fresh", 3),
                       append("list", "x"), append("app:log", json{{"k", 1}}),
                       merge("obj", json{{"b", 3}, {"c", 4}}), set_if_absent("once", "first"),
                       set_if_absent("user:n", 100)});
  const json& d = r.ev.actions.state_delta;
  CHECK(d["user:n"] == 7);
  CHECK(d["user:n"].is_number_integer());
  CHECK(d["app:f"] == 0.5);
  CHECK(d["fresh"] == 3);
  CHECK(d["list"] == json::array({1, "x"}));
  CHECK(d["app:log"] == json::array({{{"k", 1}}}));
  CHECK(d["obj"] == json{{"a", 1}, {"b", 3}, {"c", 4}});
  CHECK(d["once"] == "first");
  // set_if_absent after an increment of the same key sees the increment's value.
  auto again = append_ops(e, ref, {set_if_absent("once", "second"), increment("app:f", 1)});
  CHECK(again.ev.actions.state_delta["once"] == "first");
  CHECK(again.ev.actions.state_delta["app:f"] == 1.5);

  // compare_and_set: a match sets, the stored event records the value.
  auto cas = append_ops(e, ref, {compare_and_set("user:n", 7, "seven")});
  CHECK(cas.ev.actions.state_delta["user:n"] == "seven");
  auto s = test::get_existing(e, ref);
  CHECK(s.state["user:n"] == "seven");
  CHECK(s.state["obj"] == json{{"a", 1}, {"b", 3}, {"c", 4}});
  CHECK(s.version == 3);
}

TEST_CASE_TEMPLATE("modify_ops: a failed compare_and_set fails the whole append with "
                   "condition_failed; nothing is stored",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref, json{{"k", 1}})));
  using namespace modify_ops;
  append_request req;
  req.ref = ref;
  req.ev = test::make_event(json{{"other", 1}, {"user:x", 1}});
  req.modify = {increment("app:count", 1), compare_and_set("k", 2, 3)};
  auto r = e.append_event(std::move(req));
  REQUIRE_FALSE(r.ok());
  CHECK(r.code() == errc::condition_failed);
  CHECK(r.err().message.find("'k'") != std::string::npos);
  // A missing key matches no expected value, null included.
  auto missing = try_ops(e, ref, {compare_and_set("absent", nullptr, 1)});
  CHECK(missing.code() == errc::condition_failed);
  auto s = test::get_existing(e, ref);
  CHECK(s.version == 0);
  CHECK(s.state == json{{"k", 1}});
  CHECK(test::app_state(e, "app") == json::object());
  CHECK(test::user_state(e, "app", "u") == json::object());
  // The session goes on: a later append succeeds with the next version.
  auto ok = append_ops(e, ref, {compare_and_set("k", 1, 2)});
  CHECK(ok.version == 1);
  CHECK(test::get_existing(e, ref).state["k"] == 2);
}

TEST_CASE_TEMPLATE("modify_ops: a key of the wrong type fails that append with "
                   "invalid_argument",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref, json{{"str", "x"}, {"big", INT64_MAX}})));
  using namespace modify_ops;
  for (auto op :
       {increment("str", 1), append("str", 1), merge("str", json{{"a", 1}}), increment("big", 1)}) {
    auto r = try_ops(e, ref, {op});
    CHECK(r.code() == errc::invalid_argument);
    INFO(test::describe(r));
  }
  CHECK(test::get_existing(e, ref).version == 0);
}

TEST_CASE_TEMPLATE("modify_ops: concurrent increments and appends from real threads lose "
                   "nothing",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  constexpr int threads = 8, each = 50;
  for (int i = 0; i < threads; ++i)
    MUST(e.create_session(test::create_req("app", "u", "s" + std::to_string(i))));
  std::vector<std::thread> pool;
  std::atomic<int> failures{0};
  for (int w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      for (int k = 0; k < each; ++k) {
        auto r = try_ops(
          e, test::sref("app", "u", "s" + std::to_string(w)),
          {modify_ops::increment("user:n", 1), modify_ops::append("app:seen", w * 1000 + k)});
        if (!r.ok())
          failures.fetch_add(1);
      }
    });
  for (auto& th : pool)
    th.join();
  CHECK(failures.load() == 0);
  CHECK(test::user_state(e, "app", "u")["n"] == threads * each);
  CHECK(test::app_state(e, "app")["seen"].size() == threads * each);
}

TEST_CASE("modify_ops: state_modify_from_json decodes every op and names bad members") {
  auto inc = state_modify_from_json(json{{"key", "n"}, {"op", "increment"}, {"by", 2}});
  REQUIRE(inc.ok());
  CHECK(inc->key == "n");
  CHECK(inc->fn(json(1)) == 3);
  CHECK(inc->fallback == 0);
  auto cas = state_modify_from_json(
    json{{"key", "k"}, {"op", "compare_and_set"}, {"expected", 1}, {"value", 2}});
  REQUIRE(cas.ok());
  REQUIRE(cas->expected);
  CHECK(*cas->expected == 1);
  CHECK(cas->fn(json(1)) == 2);
  auto app = state_modify_from_json(json{{"key", "l"}, {"op", "append"}, {"value", "v"}});
  REQUIRE(app.ok());
  CHECK(app->fn(json::array()) == json::array({"v"}));
  auto bad = [](json x, const char* needle) {
    auto r = state_modify_from_json(x);
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == errc::invalid_argument);
    INFO(r.err().message);
    CHECK(r.err().message.find(needle) != std::string::npos);
  };
  bad(json::array(), "object");
  bad(json{{"op", "increment"}}, "'key'");
  bad(json{{"key", "k"}}, "'op'");
  bad(json{{"key", "k"}, {"op", "increment"}}, "'by'");
  bad(json{{"key", "k"}, {"op", "increment"}, {"by", "1"}}, "'by'");
  bad(json{{"key", "k"}, {"op", "merge"}, {"value", 1}}, "object");
  bad(json{{"key", "k"}, {"op", "append"}}, "'value'");
  bad(json{{"key", "k"}, {"op", "compare_and_set"}, {"value", 1}}, "'expected'");
  bad(json{{"key", "k"}, {"op", "explode"}}, "unknown op");
}
