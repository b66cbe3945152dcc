// SPDX-License-Identifier: Apache-2.0
// test-name: invocation_invocation_test
// test-tiers: tsan
// docs/semantics.md I1-I3 through agentstate::invocation: the delta-aware view,
// appends carrying the pending change, the lease, output_key, templating.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "agentstate/invocation.hpp"
#include "support/deterministic.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

namespace {

invocation begin(engine& e, const session_ref& ref, std::string id = {}) {
  auto r = invocation::begin(e, ref, std::move(id));
  INFO(test::describe(r));
  REQUIRE(r.ok());
  return std::move(r).value();
}

/// An event for invocation::append: no invocation id of its own.
event plain(json delta = json::object()) {
  return test::make_event(std::move(delta), {}, std::nullopt, "");
}

event reply(std::string text, std::string author = "agent") {
  event ev;
  ev.author = std::move(author);
  ev.content = json{{"role", "model"}, {"parts", json::array({json{{"text", std::move(text)}}})}};
  return ev;
}

} // namespace

TEST_CASE_TEMPLATE("I1: reads see pending writes; the append carries and clears them", S,
                   test::memory_store, test::lmdb_store) {
  test::test_engine t = test::open_engine(S::kind);
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref, json{{"a", 1}, {"gone", true}, {"user:n", 5}})));
  auto inv = begin(e, ref, "inv-1");
  CHECK(inv.id() == "inv-1");
  CHECK(inv.version() == 0);
  auto& st = inv.state();
  CHECK(st.get<int>("user:n", 0) == 5);
  MUST(st.set("a", 2));
  MUST(st.set("temp:scratch", "x"));
  MUST(st.remove("gone"));
  MUST(st.modify("user:n", 0, [](const json& v) { return v.get<int>() + 1; }));
  CHECK(st.get<int>("a", 0) == 2);
  CHECK_FALSE(st.contains("gone"));
  CHECK(st.get<int>("user:n", 0) == 6);
  // Nothing is stored until the append.
  CHECK(test::get_existing(e, ref).state.value("a", 0) == 1);
  auto r = MUST(inv.append(test::make_event(json{{"b", 3}}, "e1", std::nullopt, "")));
  CHECK(r.version == 1);
  CHECK(r.ev.invocation_id == "inv-1");
  CHECK(r.ev.actions.state_delta == json{{"a", 2}, {"b", 3}, {"user:n", 6}});
  CHECK(r.ev.actions.state_remove == std::vector<std::string>{"gone"});
  CHECK_FALSE(st.dirty());
  CHECK(inv.version() == 1);
  CHECK(st.get<int>("b", 0) == 3);
  CHECK(st.get<std::string>("temp:scratch", "") == "x");
  auto stored = test::get_existing(e, ref);
  CHECK(stored.state == json{{"a", 2}, {"b", 3}, {"user:n", 6}});
  // The invocation's temp: state is in the session actor too (A3).
  auto within = test::get_existing(e, test::get_req(ref, 0, std::nullopt, "inv-1"));
  CHECK(within.state.value("temp:scratch", "") == "x");
  // end() drops temp: everywhere.
  MUST(inv.end());
  CHECK_FALSE(inv.live());
  CHECK_FALSE(inv.state().contains("temp:scratch"));
  CHECK_FALSE(test::get_existing(e, test::get_req(ref, 0, std::nullopt, "inv-1"))
                .state.contains("temp:scratch"));
  CHECK_ERR(inv.append(plain()), errc::invalid_argument);
}

TEST_CASE_TEMPLATE("I1: a failed append keeps the pending change; rollback restores removed "
                   "keys",
                   S, test::memory_store, test::lmdb_store) {
  test::test_engine t = test::open_engine(S::kind);
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref, json{{"keep", 1}})));
  auto inv = begin(e, ref);
  MUST(inv.state().set("x", 1));
  MUST(inv.state().remove("keep"));
  auto big = plain(json{{"huge", std::string(2 << 20, 'a')}});
  CHECK_ERR(inv.append(std::move(big)), errc::too_large);
  CHECK(inv.state().dirty());
  CHECK(inv.state().get<int>("x", 0) == 1);
  CHECK(test::get_existing(e, ref).version == 0);
  inv.state().rollback();
  CHECK(inv.state().get<int>("keep", 0) == 1);
  CHECK_FALSE(inv.state().contains("x"));
  // An event naming another invocation is refused.
  CHECK_ERR(inv.append(test::make_event(json::object(), "", std::nullopt, "other")),
            errc::invalid_argument);
}

TEST_CASE("I1: two invocations on one session run one after the other; different sessions "
          "run concurrently (deterministic scheduler)") {
  auto t = test::open_deterministic(test::store_kind::lmdb);
  engine& e = *t;
  auto a = test::sref("app", "u", "a");
  auto b = test::sref("app", "u", "b");
  test::pending_call<session> ca, cb;
  e.create_session(test::create_req(a), ca.cb());
  e.create_session(test::create_req(b), cb.cb());
  t.run();
  MUST(std::move(ca.get()));
  MUST(std::move(cb.get()));
  test::pending_call<invocation> first, other, second;
  invocation::begin(e, a, "first", first.cb());
  t.run();
  REQUIRE(first.ready());
  REQUIRE(first.get().ok());
  // Another session is not blocked by a's lease.
  invocation::begin(e, b, "on-b", other.cb());
  t.run();
  REQUIRE(other.ready());
  REQUIRE(other.get().ok());
  // A second begin on `a` waits while `first` holds the lease, however much runs.
  invocation::begin(e, a, "second", second.cb());
  t.run();
  CHECK_FALSE(second.ready());
  MUST(first.get()->state().set("temp:t", 1));
  test::pending_call<append_result> appended;
  first.get()->append(plain(json{{"k", 1}}), appended.cb());
  t.run();
  MUST(std::move(appended.get()));
  CHECK_FALSE(second.ready());
  test::pending_call<void> ended;
  first.get()->end(ended.cb());
  t.run();
  MUST(std::move(ended.get()));
  // Granted once first ended: it sees first's append, not its temp: keys.
  REQUIRE(second.ready());
  REQUIRE(second.get().ok());
  CHECK(second.get()->version() == 1);
  CHECK_FALSE(second.get()->state().contains("temp:t"));
  test::pending_call<void> e2, e3;
  second.get()->end(e2.cb());
  other.get()->end(e3.cb());
  t.run();
  MUST(std::move(e2.get()));
  MUST(std::move(e3.get()));
}

TEST_CASE("I1: many threads each running invocations on a shared session never overlap") {
  test::test_engine t = test::open_engine(test::store_kind::memory);
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref)));
  std::atomic<int> inside{0}, max_inside{0}, failures{0};
  std::vector<std::thread> pool;
  for (int w = 0; w < 8; ++w)
    pool.emplace_back([&, w] {
      for (int i = 0; i < 10; ++i) {
        auto inv = invocation::begin(e, ref, "w" + std::to_string(w) + "-" + std::to_string(i));
        if (!inv.ok()) {
          failures++;
          continue;
        }
        int now = ++inside;
        int m = max_inside.load();
        while (now > m && !max_inside.compare_exchange_weak(m, now)) {
        }
        // Read-modify-write through the view without modify(): safe only
        // because invocations on one session are serialised.
        int n = inv->state().get<int>("n", 0);
        (void)inv->state().set("n", n + 1);
        if (!inv->append(plain()).ok())
          failures++;
        --inside;
        (void)inv->end();
      }
    });
  for (auto& th : pool)
    th.join();
  CHECK(failures.load() == 0);
  CHECK(max_inside.load() == 1);
  CHECK(test::get_existing(e, ref).state.value("n", 0) == 80);
}

TEST_CASE("I1: a live lease keeps other invocations' appends from replacing its temp: state") {
  test::test_engine t = test::open_engine(test::store_kind::memory);
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref)));
  auto inv = begin(e, ref, "holder");
  MUST(inv.state().set("temp:mine", 1));
  MUST(inv.append(plain()));
  // A protocol-style append naming another invocation is stored...
  auto r = MUST(e.append_event(test::append_req(
    ref, test::make_event(json{{"temp:theirs", 2}, {"k", 1}}, "", std::nullopt, "intruder"))));
  CHECK(r.version == 2);
  // ...but the holder stays the live invocation.
  auto s = test::get_existing(e, test::get_req(ref, 0, std::nullopt, "holder"));
  CHECK(s.state.value("temp:mine", 0) == 1);
  CHECK_FALSE(s.state.contains("temp:theirs"));
  MUST(inv.end());
  // A begin on a missing session fails; the destructor of a live invocation ends it.
  CHECK_ERR(invocation::begin(e, test::sref("app", "u", "missing")), errc::not_found);
  { auto scoped = begin(e, ref, "scoped"); }
  auto next = begin(e, ref, "next"); // would wait forever if "scoped" still held the lease
  MUST(next.end());
}

TEST_CASE_TEMPLATE("I3: output_key stores the final text, or parsed JSON with a schema, "
                   "honouring prefixes",
                   S, test::memory_store, test::lmdb_store) {
  test::test_engine t = test::open_engine(S::kind);
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  auto other = test::sref("app", "u", "other");
  MUST(e.create_session(test::create_req(ref)));
  MUST(e.create_session(test::create_req(other)));
  auto inv = begin(e, ref, "inv");
  auto ev = reply("Hello ");
  ev.content->at("parts").push_back(json{{"text", "hidden"}, {"thought", true}});
  ev.content->at("parts").push_back(json{{"text", "world"}});
  auto r = MUST(inv.append_final(std::move(ev), {"greeting"}));
  CHECK(r.ev.actions.state_delta.value("greeting", "") == "Hello world");
  MUST(inv.append_final(reply(R"({"score": 3, "tags": ["a"]})"), {"user:verdict", true}));
  MUST(inv.append_final(reply("draft"), {"temp:draft"}));
  CHECK(inv.state().get<std::string>("temp:draft", "") == "draft");
  // user: is shared with the user's other sessions; temp: never stored.
  auto o = test::get_existing(e, other);
  CHECK(o.state["user:verdict"] == json{{"score", 3}, {"tags", {"a"}}});
  auto s = test::get_existing(e, ref);
  CHECK_FALSE(s.state.contains("temp:draft"));
  for (auto& stored : s.events)
    CHECK_FALSE(stored.actions.state_delta.contains("temp:draft"));
  // Schema'd text that is not JSON: an error, nothing appended.
  auto before = inv.version();
  CHECK_ERR(inv.append_final(reply("not json"), {"user:verdict", true}), errc::invalid_argument);
  CHECK(test::get_existing(e, ref).version == before);
  // No content parts, or a partial event: nothing recorded.
  event plain;
  CHECK(apply_output_key(plain, {"k"}).ok());
  CHECK(plain.actions.state_delta.empty());
  auto partial = reply("x");
  partial.partial = true;
  CHECK(apply_output_key(partial, {"k"}).ok());
  CHECK(partial.actions.state_delta.empty());
  auto blank = reply("  ");
  CHECK(apply_output_key(blank, {"k", true}).ok());
  CHECK(blank.actions.state_delta.empty());
  CHECK(apply_output_key(blank, {"derived:k"}).code() == errc::invalid_argument);
  CHECK(apply_output_key(blank, {""}).code() == errc::invalid_argument);
  MUST(inv.end());
}

TEST_CASE("I2: inject over the invocation's view sees pending and temp: values") {
  test::test_engine t = test::open_engine(test::store_kind::memory);
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref, json{{"user:name", "Ada"}, {"app:tone", "dry"}})));
  auto inv = begin(e, ref);
  MUST(inv.state().set("temp:topic", "engines"));
  auto text = MUST(inv.inject("{user:name} wants {temp:topic} in a {app:tone} tone{missing?}."));
  CHECK(text == "Ada wants engines in a dry tone.");
  auto missing = inv.inject("{nope}");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.code() == errc::not_found);
  CHECK(missing.err().message.find("nope") != std::string::npos);
}

TEST_CASE("I1: refresh shows another session's user: write and keeps the pending change") {
  test::test_engine t = test::open_engine(test::store_kind::lmdb);
  engine& e = *t;
  auto a = test::sref("app", "u", "a");
  auto b = test::sref("app", "u", "b");
  MUST(e.create_session(test::create_req(a, json{{"user:n", 1}})));
  MUST(e.create_session(test::create_req(b)));
  auto inv = begin(e, a);
  MUST(inv.state().set("mine", 1));
  MUST(inv.state().modify("user:n", 0, [](const json& v) { return v.get<int>() * 10; }));
  CHECK(inv.state().get<int>("user:n", 0) == 10);
  MUST(e.append_event(test::append_req(b, test::make_event(json{{"user:n", 4}}))));
  CHECK(inv.state().get<int>("user:n", 0) == 10); // a snapshot until refreshed
  MUST(inv.refresh());
  CHECK(inv.state().get<int>("user:n", 0) == 40); // re-previewed on the new value
  CHECK(inv.state().get<int>("mine", 0) == 1);
  auto r = MUST(inv.append(plain()));
  CHECK(r.ev.actions.state_delta.value("user:n", 0) == 40);
}

// Regression: ending the lease holder cleared its temp: state at once, and an
// append of that invocation still in flight then put it back on its ack.
TEST_CASE("regression: end_invocation behind an in-flight append does not bring temp: back") {
  test::test_engine t = test::open_engine(test::store_kind::lmdb);
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref)));
  for (int round = 0; round < 20; ++round) {
    std::string id = "A" + std::to_string(round);
    MUST(e.begin_invocation(ref, id));
    std::promise<result<append_result>> appended;
    std::promise<result<void>> ended;
    e.append_event(
      test::append_req(ref, test::make_event(json{{"temp:x", round}}, "", std::nullopt, id)),
      [&](result<append_result> r) { appended.set_value(std::move(r)); });
    e.end_invocation(ref, id, [&](result<void> r) { ended.set_value(std::move(r)); });
    REQUIRE(appended.get_future().get().ok());
    REQUIRE(ended.get_future().get().ok());
    auto s = test::get_existing(e, test::get_req(ref, 0, std::nullopt, id));
    CHECK_FALSE(s.state.contains("temp:x"));
  }
}
