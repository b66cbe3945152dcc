// SPDX-License-Identifier: Apache-2.0
// engine::apply_app_write: a cluster's app: write applied at the app's home,
// once per write id (store/app_writes.hpp), on both stores; and on LMDB,
// once across a restart. verify accepts a store holding kept outcomes.
#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "support/store_probe.hpp"
#include "support/test_support.hpp"

namespace {

using namespace agentstate;

app_write_request app_write(std::string id, json delta = json::object(),
                            std::vector<std::string> remove = {}) {
  app_write_request r;
  r.app_name = "chat";
  r.write_id = std::move(id);
  r.state_delta = std::move(delta);
  r.state_remove = std::move(remove);
  return r;
}

state_modify op(const json& spec) {
  auto m = state_modify_from_json(spec);
  REQUIRE(m.ok());
  return std::move(m).value();
}

app_write_request increment(std::string id, int by = 1) {
  auto r = app_write(std::move(id));
  r.modify.push_back(op({{"key", "app:count"}, {"op", "increment"}, {"by", by}}));
  return r;
}

} // namespace

TEST_CASE_TEMPLATE("app write: sets, removes and modifies apply at the home with their outcome", S,
                   test::memory_store, test::lmdb_store) {
  test::test_engine t = test::open_engine(S::kind);
  engine& e = *t;
  auto first = MUST(e.apply_app_write(app_write("w1", {{"app:mode", "fast"}, {"app:gone", 1}})));
  CHECK_FALSE(first.duplicate);
  CHECK(first.values == json{{"app:mode", "fast"}, {"app:gone", 1}});
  auto r = app_write("w2", json::object(), {"app:gone"});
  r.modify.push_back(op({{"key", "app:count"}, {"op", "increment"}, {"by", 5}}));
  r.modify.push_back(op({{"key", "app:count"}, {"op", "increment"}, {"by", 2}}));
  auto second = MUST(e.apply_app_write(std::move(r)));
  CHECK(second.values == json{{"app:count", 7}});
  CHECK(second.removed == std::vector<std::string>{"app:gone"});
  CHECK(MUST(e.get_app_state("chat")) == json{{"mode", "fast"}, {"count", 7}});
  // A session of the app reads them merged (S2).
  auto ref = test::sref("chat", "u", "s");
  MUST(e.create_session(test::create_req(ref)));
  CHECK(test::get_existing(e, ref).state.value("app:count", 0) == 7);
}

TEST_CASE_TEMPLATE("app write: a write id applied twice is applied once (a resent app write)", S,
                   test::memory_store, test::lmdb_store) {
  test::test_engine t = test::open_engine(S::kind);
  engine& e = *t;
  auto a = MUST(e.apply_app_write(increment("w1", 3)));
  CHECK(a.values == json{{"app:count", 3}});
  MUST(e.apply_app_write(increment("w2", 10)));
  auto again = MUST(e.apply_app_write(increment("w1", 3)));
  CHECK(again.duplicate);
  CHECK(again.values == json{{"app:count", 3}}); // the first apply's outcome
  CHECK(MUST(e.get_app_state("chat")).value("count", 0) == 13);
  // Forgetting w1 (its sender no longer needs it) lets the id be used again.
  auto f = increment("w3", 100);
  f.forget = {"w1"};
  MUST(e.apply_app_write(std::move(f)));
  auto reused = MUST(e.apply_app_write(increment("w1", 1000)));
  CHECK_FALSE(reused.duplicate);
  CHECK(MUST(e.get_app_state("chat")).value("count", 0) == 1113);
}

TEST_CASE_TEMPLATE("app write: concurrent sends of one write id apply it once", S,
                   test::memory_store, test::lmdb_store) {
  test::test_engine t = test::open_engine(S::kind);
  engine& e = *t;
  std::vector<std::thread> threads;
  std::vector<int> duplicates(8, -1);
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      auto r = e.apply_app_write(increment("same", 1));
      duplicates[i] = r.ok() ? (r.value().duplicate ? 1 : 0) : 2;
    });
  for (auto& th : threads)
    th.join();
  CHECK(std::count(duplicates.begin(), duplicates.end(), 0) == 1);
  CHECK(std::count(duplicates.begin(), duplicates.end(), 1) == 7);
  CHECK(MUST(e.get_app_state("chat")).value("count", 0) == 1);
}

TEST_CASE_TEMPLATE("app write: bad input is refused and stores nothing", S, test::memory_store,
                   test::lmdb_store) {
  test::test_engine t = test::open_engine(S::kind);
  engine& e = *t;
  CHECK(e.apply_app_write(app_write("w", {{"mode", 1}})).code() == errc::invalid_argument);
  CHECK(e.apply_app_write(app_write("w", {{"user:x", 1}})).code() == errc::invalid_argument);
  CHECK(e.apply_app_write(app_write("w", {{"app:x", 1}}, {"app:x"})).code()
        == errc::invalid_argument);
  CHECK(e.apply_app_write(app_write("", {{"app:x", 1}})).code() == errc::invalid_argument);
  CHECK(e.apply_app_write(app_write(std::string(129, 'w'), {{"app:x", 1}})).code()
        == errc::invalid_argument);
  auto bad_app = app_write("w", {{"app:x", 1}});
  bad_app.app_name = std::string("a\0b", 3);
  CHECK(e.apply_app_write(std::move(bad_app)).code() == errc::invalid_argument);
  auto session_modify = app_write("w");
  session_modify.modify.push_back(op({{"key", "count"}, {"op", "increment"}, {"by", 1}}));
  CHECK(e.apply_app_write(std::move(session_modify)).code() == errc::invalid_argument);
  // A modify that fails at commit (a compare_and_set, a wrong type) keeps no
  // outcome: the same id applies once the condition holds.
  MUST(e.apply_app_write(app_write("set", {{"app:x", "text"}})));
  auto wrong_type = app_write("w");
  wrong_type.modify.push_back(op({{"key", "app:x"}, {"op", "increment"}, {"by", 1}}));
  CHECK(e.apply_app_write(std::move(wrong_type)).code() == errc::invalid_argument);
  auto cas = app_write("w", {{"app:y", 1}});
  cas.modify.push_back(
    op({{"key", "app:x"}, {"op", "compare_and_set"}, {"expected", "other"}, {"value", 2}}));
  CHECK(e.apply_app_write(std::move(cas)).code() == errc::condition_failed);
  CHECK(MUST(e.get_app_state("chat")) == json{{"x", "text"}});
  auto ok = app_write("w", {{"app:y", 1}});
  ok.modify.push_back(
    op({{"key", "app:x"}, {"op", "compare_and_set"}, {"expected", "text"}, {"value", 2}}));
  CHECK_FALSE(MUST(e.apply_app_write(std::move(ok))).duplicate);
  CHECK(MUST(e.get_app_state("chat")) == json{{"x", 2}, {"y", 1}});
}

TEST_CASE("app write: a kept outcome survives a restart, and verify accepts it") {
  test::temp_dir dir;
  {
    auto e = test::open_store_dir(dir.str());
    MUST(e->apply_app_write(increment("w1", 4)));
  }
  auto e = test::open_store_dir(dir.str());
  auto again = MUST(e->apply_app_write(increment("w1", 4)));
  CHECK(again.duplicate);
  CHECK(MUST(e->get_app_state("chat")).value("count", 0) == 4);
  test::check_verify(*e);
}

TEST_CASE("app write: delete_app drops the app's kept outcomes") {
  test::temp_dir dir;
  auto e = test::open_store_dir(dir.str());
  MUST(e->apply_app_write(increment("w1", 4)));
  MUST(e->delete_app("chat"));
  MUST(e->flush());
  // Once the purge has run, the id is free again and the state starts empty.
  for (int i = 0; i < 200; ++i) {
    auto r = e->apply_app_write(increment("w1", 1));
    if (r.code() == errc::unavailable) { // the purge runs between commits: poll it
      MUST(e->flush());
      continue;
    }
    REQUIRE(r.ok());
    CHECK_FALSE(r.value().duplicate);
    break;
  }
  CHECK(MUST(e->get_app_state("chat")).value("count", 0) == 1);
}
