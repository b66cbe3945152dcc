// SPDX-License-Identifier: Apache-2.0
// options::app_home: an append that writes app: keys of an app whose home is
// another node goes through the outbox (store/outbox.hpp): its app: part is
// applied at the home once (a real second engine, engine::apply_app_write),
// the event is stored with the home's values and acknowledged after; a
// refusal at the home fails the append whole; a home that cannot be reached
// is retried; an append cut off by a close is finished at the next open,
// exactly once even when the home had applied it.
#include <doctest/doctest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <vector>

#include "model/shard.hpp"
#include "store/outbox.hpp"
#include "support/store_probe.hpp"
#include "support/test_support.hpp"

namespace {

using namespace agentstate;
using namespace std::chrono_literals;

state_modify op(const json& spec) {
  auto m = state_modify_from_json(spec);
  REQUIRE(m.ok());
  return std::move(m).value();
}

state_modify add(int by) {
  return op({{"key", "app:count"}, {"op", "increment"}, {"by", by}});
}

/// How the origin's hook reaches the home engine.
struct home_link {
  engine* home = nullptr;
  std::atomic<int> sent{0};
  std::atomic<int> refuse{0}; ///< answer this many sends `unavailable` first
  std::atomic<bool> mute{false}; ///< apply at the home, never answer
  std::atomic<bool> hold{false}; ///< neither apply nor answer
  /// Set at the first send (a barrier for a test that waits for it).
  std::promise<void> first_send;
  std::atomic<bool> sent_once{false};
};

options::app_home_hooks hooks(home_link& l) {
  options::app_home_hooks h;
  h.here = [](const std::string& app) { return app != "chat"; };
  h.send = [&l](app_write_request req, callback<app_write_result> cb) {
    ++l.sent;
    if (!l.sent_once.exchange(true))
      l.first_send.set_value();
    if (l.hold)
      return;
    if (l.refuse > 0) {
      --l.refuse;
      cb(error{errc::unavailable, "home unreachable (test)"});
      return;
    }
    if (l.mute) {
      auto r = l.home->apply_app_write(std::move(req));
      REQUIRE(r.ok());
      return;
    }
    l.home->apply_app_write(std::move(req), cb);
  };
  h.retry = 10ms;
  return h;
}

/// An engine on the store at `dir` (nosync) whose app: home hook reaches
/// `l`'s home.
std::unique_ptr<engine> open_node_at(const std::string& dir, home_link& l) {
  options o;
  o.dir = dir;
  o.mode = durability::nosync;
  o.app_home = hooks(l);
  return MUST(engine::open(o));
}

append_request with_app(const session_ref& ref, std::string id, json delta, int by = 0) {
  auto r = test::append_req(ref, test::make_event(std::move(delta), std::move(id)));
  if (by != 0)
    r.modify.push_back(add(by));
  return r;
}

/// A home engine and an origin engine whose hook reaches it, with a session
/// of app "chat" (whose home is the first) on the origin.
struct two_nodes {
  test::test_engine home;
  home_link l;
  test::test_engine origin;
  session_ref ref = test::sref("chat", "u", "s");

  /// `answer_after`: the origin's options::app_home::answer_after.
  explicit two_nodes(test::store_kind k,
                     std::chrono::milliseconds answer_after = std::chrono::milliseconds(5000))
    : home(test::open_engine(k)) {
    l.home = &*home;
    origin = test::open_engine(k, [&](options& o) {
      o.app_home = hooks(l);
      o.app_home.answer_after = answer_after;
    });
    MUST(origin->create_session(test::create_req(ref)));
  }
};

/// The shard range (of 4) holding user "u" of app "chat".
hash_range range_of_u() {
  auto r = model::shard_range(model::shard_of("chat", "u", 4), 4);
  return {r.lo, r.hi};
}

/// Starts an append of e1 (app:count + 5) on the origin whose commit the
/// origin's fence of the session's range refuses after the home applied its
/// app: part; returns what its caller heard.
result<append_result> append_fenced_after_home(two_nodes& t) {
  auto& [home, l, origin, ref] = t;
  REQUIRE(origin->opts().app_home.answer_after >= 1h); // its caller hears of the fence alone
  l.refuse = 1 << 30; // every send answered unavailable: the origin sends again
  // Shared: the answer may come after a failed wait below has ended the test.
  auto heard = std::make_shared<std::promise<result<append_result>>>();
  origin->append_event(with_app(ref, "e1", {{"k", 1}}, 5),
                       [heard](result<append_result> r) { heard->set_value(std::move(r)); });
  // The outbox row is committed before the first send.
  REQUIRE(l.first_send.get_future().wait_for(10s) == std::future_status::ready);
  MUST(origin->fence_range(range_of_u()));
  l.refuse = 0; // the next send is applied at the home; the commit is fenced
  auto f = heard->get_future();
  REQUIRE(f.wait_for(10s) == std::future_status::ready);
  return f.get();
}

} // namespace

TEST_CASE_TEMPLATE("app outbox: an append whose commit a shard move's fence refuses is left in "
                   "the outbox and finished once by the engine the range moves to",
                   S, test::memory_store, test::lmdb_store) {
  two_nodes t(S::kind, 1h);
  auto& [home, l, origin, ref] = t;
  auto heard = append_fenced_after_home(t);
  CHECK(heard.code() == errc::unavailable); // in doubt
  CHECK(MUST(home->get_app_state("chat")).value("count", 0) == 5);
  // The range moves: its rows, the outbox row among them, to the next engine.
  auto next = test::open_engine(S::kind, [&](options& o) { o.app_home = hooks(l); });
  std::string at;
  do {
    auto c = MUST(origin->read_range(range_of_u(), at));
    MUST(next->write_range(range_of_u(), c.bytes));
    at = c.next;
  } while (!at.empty());
  MUST(next->unfence_range(range_of_u())); // it owns the range now
  // The retry with the same event id answers the append the next engine
  // finished under the same write id (the home applied it once).
  auto again = MUST(next->append_event(with_app(ref, "e1", {{"k", 1}}, 5)));
  CHECK(again.version == 1);
  CHECK(again.ev.actions.state_delta["app:count"] == 5);
  auto s = test::get_existing(*next, ref);
  CHECK(test::event_ids(s.events) == std::vector<std::string>{"e1"});
  CHECK(MUST(home->get_app_state("chat")).value("count", 0) == 5);
  MUST(origin->drop_range(range_of_u()));
  CHECK_FALSE(test::get_maybe(*origin, ref).has_value());
}

TEST_CASE_TEMPLATE("app outbox: an append a shard move's fence left in the outbox is finished "
                   "where it was when the move is undone",
                   S, test::memory_store, test::lmdb_store) {
  two_nodes t(S::kind, 1h);
  auto& [home, l, origin, ref] = t;
  CHECK(append_fenced_after_home(t).code() == errc::unavailable);
  MUST(origin->unfence_range(range_of_u()));
  auto again = MUST(origin->append_event(with_app(ref, "e1", {{"k", 1}}, 5)));
  CHECK(again.version == 1);
  auto s = test::get_existing(*origin, ref);
  CHECK(test::event_ids(s.events) == std::vector<std::string>{"e1"});
  CHECK(s.events[0].actions.state_delta["app:count"] == 5);
  CHECK(MUST(home->get_app_state("chat")).value("count", 0) == 5);
}

TEST_CASE_TEMPLATE("app outbox: an append's app: part is applied at the home, the event stored "
                   "with its values",
                   S, test::memory_store, test::lmdb_store) {
  two_nodes t(S::kind);
  auto& [home, l, origin, ref] = t;
  auto a = MUST(origin->append_event(with_app(ref, "e1", {{"app:mode", "on"}, {"k", 1}}, 5)));
  CHECK(a.version == 1);
  CHECK(a.ev.actions.state_delta == json{{"app:mode", "on"}, {"k", 1}, {"app:count", 5}});
  CHECK(MUST(home->get_app_state("chat")) == json{{"mode", "on"}, {"count", 5}});
  CHECK(MUST(origin->get_app_state("chat")).empty()); // kept at the home only
  auto s = test::get_existing(*origin, ref);
  CHECK(s.state.value("k", 0) == 1);
  REQUIRE(s.events.size() == 1);
  CHECK(s.events[0].actions.state_delta["app:count"] == 5);
  // Other apps, and appends without app: keys, stay local.
  auto other = test::sref("other", "u", "s");
  MUST(origin->create_session(test::create_req(other)));
  MUST(origin->append_event(with_app(other, "o1", {{"app:x", 1}})));
  CHECK(MUST(origin->get_app_state("other")) == json{{"x", 1}});
  MUST(origin->append_event(with_app(ref, "e2", {{"k", 2}})));
  CHECK(l.sent == 1);
}

TEST_CASE_TEMPLATE("app outbox: appends pipelined to one session keep their order; each app: "
                   "increment is applied once",
                   S, test::memory_store, test::lmdb_store) {
  two_nodes t(S::kind);
  auto& [home, l, origin, ref] = t;
  l.refuse = 3; // the first sends find the home unreachable: retried
  std::mutex mtx;
  std::vector<result<append_result>> got;
  constexpr int n = 20;
  for (int i = 0; i < n; ++i) {
    auto req = i % 2 ? with_app(ref, "e" + std::to_string(i), {{"k", i}}, 1)
                     : with_app(ref, "e" + std::to_string(i), {{"k", i}});
    origin->append_event(std::move(req), [&](result<append_result> r) {
      std::lock_guard<std::mutex> lk(mtx);
      got.push_back(std::move(r));
    });
  }
  REQUIRE(test::eventually(
    [&] {
      std::lock_guard<std::mutex> lk(mtx);
      return got.size() == n;
    },
    20s));
  for (int i = 0; i < n; ++i) {
    REQUIRE(got[static_cast<std::size_t>(i)].ok());
    auto& a = got[static_cast<std::size_t>(i)].value();
    CHECK(a.version == static_cast<std::uint64_t>(i + 1));
    if (i % 2)
      CHECK(a.ev.actions.state_delta["app:count"] == (i + 1) / 2);
  }
  CHECK(MUST(home->get_app_state("chat")).value("count", 0) == n / 2);
  CHECK(test::get_existing(*origin, ref).version == n);
}

TEST_CASE_TEMPLATE("app outbox: a refusal at the home fails the append whole, and the session "
                   "goes on",
                   S, test::memory_store, test::lmdb_store) {
  two_nodes t(S::kind);
  auto& [home, l, origin, ref] = t;
  auto cas = test::append_req(ref, test::make_event(json{{"k", 1}}, "e1"));
  cas.modify.push_back(
    op({{"key", "app:x"}, {"op", "compare_and_set"}, {"expected", 1}, {"value", 2}}));
  CHECK(origin->append_event(std::move(cas)).code() == errc::condition_failed);
  CHECK(test::get_existing(*origin, ref).version == 0);
  // A modify without the protocol's form cannot be sent.
  auto host_fn = test::append_req(ref, test::make_event(json::object(), "e2"));
  host_fn.modify.push_back(state_modify{"app:x", 0, [](const json& v) { return v; }});
  CHECK(origin->append_event(std::move(host_fn)).code() == errc::invalid_argument);
  auto ok = MUST(origin->append_event(with_app(ref, "e3", {{"app:x", 7}})));
  CHECK(ok.version == 1);
  CHECK(MUST(home->get_app_state("chat")) == json{{"x", 7}});
  test::check_verify(*origin);
}

TEST_CASE("app outbox: an append cut off by a close is finished at the next open, once") {
  test::temp_dir hdir, odir;
  auto home = test::open_store_dir(hdir.str());
  home_link l;
  l.home = home.get();
  auto ref = test::sref("chat", "u", "s");
  auto open_origin = [&] { return open_node_at(odir.str(), l); };
  {
    auto origin = open_origin();
    MUST(origin->create_session(test::create_req(ref)));
    l.mute = true; // applied at the home; the answer is lost
    std::promise<result<append_result>> cut;
    origin->append_event(with_app(ref, "e1", {{"k", 1}}, 1),
                         [&](result<append_result> r) { cut.set_value(std::move(r)); });
    REQUIRE(test::eventually([&] { return l.sent == 1; }));
    // A later append of the session waits behind it; the close refuses it
    // unread, so it cannot take the version the cut one holds.
    std::promise<result<append_result>> later;
    origin->append_event(with_app(ref, "e2", {{"k", 2}}),
                         [&](result<append_result> r) { later.set_value(std::move(r)); });
    origin.reset(); // the close answers both
    CHECK(cut.get_future().get().code() == errc::unavailable);
    CHECK(later.get_future().get().code() == errc::unavailable);
  }
  CHECK(MUST(home->get_app_state("chat")).value("count", 0) == 1);
  {
    // The store waits for its app: part: it opens only as a node.
    options plain;
    plain.dir = odir.str();
    plain.mode = durability::nosync;
    CHECK(engine::open(plain).code() == errc::invalid_argument);
  }
  l.mute = false;
  auto origin = open_origin();
  REQUIRE(test::eventually([&] { return test::get_existing(*origin, ref).version == 1; }, 10s));
  auto s = test::get_existing(*origin, ref);
  REQUIRE(s.events.size() == 1);
  CHECK(s.events[0].id == "e1");
  CHECK(s.events[0].actions.state_delta["app:count"] == 1);
  CHECK(MUST(home->get_app_state("chat")).value("count", 0) == 1); // applied once
  // The caller's retry with the same event id gets the stored append.
  auto again = MUST(origin->append_event(with_app(ref, "e1", {{"k", 1}}, 1)));
  CHECK(again.version == 1);
  CHECK(MUST(home->get_app_state("chat")).value("count", 0) == 1);
  test::check_verify(*origin);
}

TEST_CASE_TEMPLATE("app outbox: a create with app: state has it applied at the home, and the "
                   "session created with its own keys",
                   S, test::memory_store, test::lmdb_store) {
  two_nodes t(S::kind);
  auto& [home, l, origin, ref] = t;
  l.refuse = 2; // the home cannot be reached at first: the create waits and is sent again
  auto made = MUST(origin->create_session(
    test::create_req(test::sref("chat", "u", "c1"), {{"app:mode", "on"}, {"own", 1}})));
  CHECK(made.state == json{{"app:mode", "on"}, {"own", 1}});
  CHECK(l.sent == 3);
  CHECK(MUST(home->get_app_state("chat")) == json{{"mode", "on"}});
  CHECK(MUST(origin->get_app_state("chat")).empty()); // kept at the home only
  auto s = test::get_existing(*origin, test::sref("chat", "u", "c1"));
  CHECK(s.state == json{{"own", 1}});
  CHECK(s.version == 0);
  // A second create of the id is refused before anything is sent.
  auto again =
    origin->create_session(test::create_req(test::sref("chat", "u", "c1"), {{"app:mode", "off"}}));
  CHECK(again.code() == errc::already_exists);
  CHECK(l.sent == 3);
  CHECK(MUST(home->get_app_state("chat")) == json{{"mode", "on"}});
  // A create without app: keys stays local.
  MUST(origin->create_session(test::create_req(test::sref("chat", "u", "c2"), {{"own", 2}})));
  CHECK(l.sent == 3);
  test::check_verify(*origin);
}

TEST_CASE("app outbox: a create cut off by a close is finished at the next open, once") {
  test::temp_dir hdir, odir;
  auto home = test::open_store_dir(hdir.str());
  home_link l;
  l.home = home.get();
  auto ref = test::sref("chat", "u", "c");
  auto open_origin = [&] { return open_node_at(odir.str(), l); };
  {
    auto origin = open_origin();
    l.mute = true; // applied at the home; the answer is lost
    std::promise<result<session>> cut;
    origin->create_session(test::create_req(ref, {{"app:n", 1}, {"own", "x"}}),
                           [&](result<session> r) { cut.set_value(std::move(r)); });
    REQUIRE(test::eventually([&] { return l.sent == 1; }));
    // An append to the session waits behind the create; the close refuses
    // it unread (run, it would find no session yet).
    std::promise<result<append_result>> later;
    origin->append_event(with_app(ref, "e1", {{"k", 1}}),
                         [&](result<append_result> r) { later.set_value(std::move(r)); });
    origin.reset();
    CHECK(cut.get_future().get().code() == errc::unavailable);
    CHECK(later.get_future().get().code() == errc::unavailable);
  }
  {
    // The create's outbox row waits, before its session exists: verify
    // takes it.
    auto kv = store::open_lmdb_kv_readonly(odir.str());
    auto txn = kv->begin_read();
    auto report = store::verify_store(*txn);
    INFO((report.messages.empty() ? std::string() : report.messages.front()));
    CHECK(report.ok());
    auto row = store::read_outbox(*txn, store::session_key("chat", "u", "c"));
    REQUIRE(row.ok());
    REQUIRE(row->has_value());
    CHECK((*row)->version == 0);
  }
  CHECK(MUST(home->get_app_state("chat")) == json{{"n", 1}});
  l.mute = false;
  auto origin = open_origin();
  REQUIRE(test::eventually(
    [&] {
      auto got = origin->get_session([&] {
        get_request g;
        g.ref = ref;
        return g;
      }());
      return got.ok() && got->has_value();
    },
    10s));
  CHECK(test::get_existing(*origin, ref).state == json{{"own", "x"}});
  CHECK(l.sent == 2);
  CHECK(MUST(home->get_app_state("chat")) == json{{"n", 1}}); // applied once
  CHECK(origin->create_session(test::create_req(ref)).code() == errc::already_exists);
  test::check_verify(*origin);
}

TEST_CASE_TEMPLATE("app outbox: a home unreachable past answer_after: the append is answered "
                   "unavailable in doubt, the session's commands refused unread, and it is "
                   "finished once the home answers",
                   S, test::memory_store, test::lmdb_store) {
  test::test_engine home = test::open_engine(S::kind);
  home_link l;
  l.home = &*home;
  l.refuse = 1000000; // unreachable until the test says otherwise
  auto origin = test::open_engine(S::kind, [&](options& o) {
    o.app_home = hooks(l);
    o.app_home.answer_after = 0ms; // the first unavailable answers the caller
  });
  auto ref = test::sref("chat", "u", "s");
  MUST(origin->create_session(test::create_req(ref)));
  auto first = origin->append_event(with_app(ref, "e1", {{"k", 1}}, 1));
  CHECK(first.code() == errc::unavailable);
  CHECK(first.err().message.find("in doubt") != std::string::npos);
  // Until it is finished, the session answers unavailable unread.
  auto later = origin->append_event(with_app(ref, "e2", {{"k", 2}}));
  CHECK(later.code() == errc::unavailable);
  auto again = origin->append_event(with_app(ref, "e1", {{"k", 1}}, 1));
  CHECK(again.code() == errc::unavailable);
  CHECK(MUST(home->get_app_state("chat")).empty());
  l.refuse = 0; // the home answers the next send
  REQUIRE(test::eventually([&] { return test::get_existing(*origin, ref).version == 1; }, 10s));
  // The retry with its event id gets the stored append; the session goes on.
  auto stored = MUST(origin->append_event(with_app(ref, "e1", {{"k", 1}}, 1)));
  CHECK(stored.version == 1);
  CHECK(stored.ev.actions.state_delta["app:count"] == 1);
  CHECK(MUST(origin->append_event(with_app(ref, "e2", {{"k", 2}}))).version == 2);
  CHECK(MUST(home->get_app_state("chat")) == json{{"count", 1}});
}
