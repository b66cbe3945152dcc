// SPDX-License-Identifier: Apache-2.0
// test-tiers: tsan write_map
// A session's past (docs/semantics.md, H1-H6), on both stores: as-of reads
// equal the state recorded after every append; a rewind restores the state
// at its point (state from create included, app:/user: untouched, derived
// keys recomputed) as one event in ADK's shape; apply_rewinds equals ADK's
// backward scan (ported here from its description, independently of the
// engine's code) on random histories; forks copy events 1..N and the state
// as of N; list_invocations reports ranges and what rewinds undid; a rewind
// waits for the invocation lease and keeps versions contiguous among 64
// appenders.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "actors/engine_factory.hpp"
#include "support/fault_kv.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

namespace {

bool has_prefix(const std::string& s, const std::string& p) {
  return s.compare(0, p.size(), p) == 0;
}

// A session's own keys of a merged state (no app:, user: key).
json own_keys(const json& merged) {
  json out = json::object();
  for (auto it = merged.begin(); it != merged.end(); ++it)
    if (!has_prefix(it.key(), "app:") && !has_prefix(it.key(), "user:"))
      out[it.key()] = it.value();
  return out;
}

json shared_keys(const json& merged) {
  json out = json::object();
  for (auto it = merged.begin(); it != merged.end(); ++it)
    if (has_prefix(it.key(), "app:") || has_prefix(it.key(), "user:"))
      out[it.key()] = it.value();
  return out;
}

get_request as_of(const session_ref& ref, std::uint64_t v) {
  auto r = test::get_req(ref);
  r.as_of_version = v;
  return r;
}

// derived:total's function: a + b when both are numbers (a missing one
// counts as 0), else 0.
json total_of(const json& in) {
  auto a = in.value("a", json(0)), b = in.value("b", json(0));
  return json(a.is_number() && b.is_number() ? a.get<double>() + b.get<double>() : 0.0);
}

void with_derived(options& o) {
  derived_key d;
  d.name = "total";
  d.inputs = {"a", "b"};
  d.fn = total_of;
  o.derived.push_back(std::move(d));
}

// Random history: sets, removes, increments and shared-scope writes across
// invocations of 1-3 events. Returns the own state recorded after each
// version (index 0: as created).
std::vector<json> random_history(engine& e, const session_ref& ref, std::mt19937& rng, int n,
                                 std::vector<std::string>* invocations = nullptr) {
  std::vector<json> after{own_keys(test::get_existing(e, test::get_req(ref, 0)).state)};
  const char* keys[] = {"a", "b", "c", "d", "session:e"};
  int inv = 0, left = 0;
  for (int i = 0; i < n; ++i) {
    if (left == 0) {
      ++inv;
      left = 1 + static_cast<int>(rng() % 3);
    }
    --left;
    auto ev = test::make_event(json::object(), {}, std::nullopt, "inv-" + std::to_string(inv));
    if (invocations)
      invocations->push_back(ev.invocation_id);
    std::set<std::string> used;
    for (int k = 0; k < 2; ++k) {
      std::string key = keys[rng() % 5];
      if (!used.insert(key).second)
        continue;
      switch (rng() % 4) {
        case 0: ev.actions.state_remove.push_back(key); break;
        case 1: ev.actions.state_delta[key] = nullptr; break;
        default: ev.actions.state_delta[key] = static_cast<int>(rng() % 100);
      }
    }
    ev.actions.state_delta["user:u"] = i;
    ev.actions.state_delta["app:p"] = i;
    ev.actions.state_delta["temp:t"] = i;
    append_request req = test::append_req(ref, std::move(ev));
    if (rng() % 4 == 0)
      req.modify.push_back(modify_ops::increment("counter", json(1)));
    std::sort(req.ev.actions.state_remove.begin(), req.ev.actions.state_remove.end());
    auto r = e.append_event(std::move(req));
    REQUIRE(r.ok());
    after.push_back(own_keys(test::get_existing(e, test::get_req(ref, 0)).state));
  }
  return after;
}

// ADK's context builder: scanning back from the newest event, a rewind
// event jumps back to the first event of the invocation it names (when
// there is one before it); what it jumps over, and the rewind event itself,
// are left out.
std::vector<std::uint64_t> adk_kept(const std::vector<event>& evs) {
  std::vector<std::uint64_t> kept;
  long i = static_cast<long>(evs.size()) - 1;
  while (i >= 0) {
    const auto& x = evs[static_cast<std::size_t>(i)].actions.extra;
    if (x.contains("rewind_before_invocation_id")) {
      auto target = x["rewind_before_invocation_id"].get<std::string>();
      for (long j = 0; j < i; ++j)
        if (evs[static_cast<std::size_t>(j)].invocation_id == target) {
          i = j;
          break;
        }
    } else {
      kept.push_back(static_cast<std::uint64_t>(i) + 1);
    }
    --i;
  }
  std::reverse(kept.begin(), kept.end());
  return kept;
}

rewind_request rewind_to(const session_ref& ref, std::string inv) {
  rewind_request r;
  r.ref = ref;
  r.before_invocation_id = std::move(inv);
  return r;
}

rewind_request rewind_before(const session_ref& ref, std::uint64_t v) {
  rewind_request r;
  r.ref = ref;
  r.before_version = v;
  return r;
}

} // namespace

TEST_CASE_TEMPLATE("history H1: the state read as_of_version N equals the state recorded after "
                   "append N, for every N",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind, with_derived);
  engine& e = *t;
  std::mt19937 rng(7);
  for (int round = 0; round < 3; ++round) {
    auto ref = test::sref("app", "u", "s" + std::to_string(round));
    MUST(e.create_session(
      test::create_req(ref, json{{"a", 1}, {"c", "from create"}, {"user:x", 1}, {"temp:t", 1}})));
    auto recorded = random_history(e, ref, rng, 60);
    auto now = test::get_existing(e, ref);
    for (std::uint64_t n = 0; n < recorded.size(); ++n) {
      auto s = test::get_existing(e, as_of(ref, n));
      INFO("round ", round, " version ", n);
      CHECK(own_keys(s.state) == recorded[n]);
      CHECK(shared_keys(s.state) == shared_keys(now.state)); // app:/user: are current
      CHECK(s.version == n);
      REQUIRE(s.events.size() == n);
      for (std::uint64_t v = 0; v < n; ++v)
        CHECK(s.events[v].id == now.events[v].id);
      REQUIRE(s.as_of.has_value());
      CHECK(s.as_of->version == n);
      CHECK(s.as_of->exact);
      CHECK(s.last_update_time == (n == 0 ? s.last_update_time : *now.events[n - 1].timestamp));
    }
    // The filters apply inside 1..N; the text form equals the typed one.
    auto q = as_of(ref, 30);
    q.num_recent_events = 5;
    auto s = test::get_existing(e, q);
    REQUIRE(s.events.size() == 5);
    CHECK(s.events.front().id == now.events[25].id);
    CHECK(s.events.back().id == now.events[29].id);
    auto text = MUST(e.get_session_json(q));
    CHECK(json::parse(text) == to_json(s));
    CHECK(json::parse(text)["as_of"]
          == json{{"version", 30}, {"shared_state", "current"}, {"exact", true}});
  }
  auto ref = test::sref("app", "u", "s0");
  auto v = test::get_existing(e, ref).version;
  auto past = e.get_session(as_of(ref, v + 1));
  REQUIRE(!past.ok());
  CHECK(past.err().code == errc::invalid_argument);
  CHECK(past.err().current_version == v);
  // A missing session is still null.
  CHECK(!MUST(e.get_session(as_of(test::sref("app", "u", "nope"), 0))).has_value());
}

TEST_CASE_TEMPLATE("history H2: a rewind restores the session's own state at its point, keeps "
                   "the state from create, and leaves app:/user: state as it is",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind, with_derived);
  engine& e = *t;
  std::mt19937 rng(11);
  for (int round = 0; round < 8; ++round) {
    auto ref = test::sref("app", "u", "r" + std::to_string(round));
    MUST(e.create_session(test::create_req(ref, json{{"a", 5}, {"kept", "from create"}})));
    std::vector<std::string> invs;
    auto recorded = random_history(e, ref, rng, 30, &invs);
    // A point: the first event of a random invocation.
    auto inv = invs[rng() % invs.size()];
    std::uint64_t point =
      static_cast<std::uint64_t>(std::find(invs.begin(), invs.end(), inv) - invs.begin()) + 1;
    auto before = test::get_existing(e, ref);
    auto plan = MUST(e.rewind_plan(rewind_to(ref, inv)));
    CHECK(plan.before_version == point);
    auto r = MUST(e.rewind_session(rewind_to(ref, inv)));
    INFO("round ", round, " rewind before ", inv, " (v", point, ")");
    CHECK(r.version == before.version + 1);
    CHECK(r.ev.author == "user");
    CHECK(r.ev.invocation_id.rfind("e-", 0) == 0);
    CHECK(r.ev.actions.extra["rewind_before_invocation_id"] == inv);
    CHECK(r.ev.actions.state_remove == plan.state_remove);
    auto after = test::get_existing(e, ref);
    json want = recorded[point - 1];
    // derived:total recomputes from the restored inputs.
    json got = own_keys(after.state);
    CHECK(got.value("kept", json()) == want.value("kept", json()));
    got.erase("derived:total");
    want.erase("derived:total");
    CHECK(got == want);
    REQUIRE(after.state.contains("derived:total")); // computed at create (a)
    CHECK(after.state["derived:total"] == total_of(after.state));
    CHECK(shared_keys(after.state) == shared_keys(before.state));
    // A rewind is an event like any other: the state before it is readable.
    CHECK(own_keys(test::get_existing(e, as_of(ref, before.version)).state)
          == own_keys(before.state));
  }
}

TEST_CASE_TEMPLATE("history H2 regressions: ADK's reported rewind bugs", S, test::memory_store,
                   test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref, json{{"lang", "fr"}, {"n", 0}})));
  test::append_ok(e, ref, test::make_event(json{{"n", 1}}, "e1", std::nullopt, "i1"));
  test::append_ok(e, ref, test::make_event(json{{"n", 2}, {"x", true}}, "e2", std::nullopt, "i2"));
  test::append_ok(e, ref,
                  test::make_event(json{{"n", 3}, {"lang", "de"}}, "e3", std::nullopt, "i3"));

  SUBCASE("google/adk-python#4839: the state a session was created with survives a rewind") {
    MUST(e.rewind_session(rewind_to(ref, "i1")));
    auto s = test::get_existing(e, ref);
    CHECK(s.state == json{{"lang", "fr"}, {"n", 0}});
  }
  SUBCASE("a rewind is computed at the head, not from a session read with num_recent_events") {
    auto partial = test::get_existing(e, test::get_req(ref, 1));
    REQUIRE(partial.events.size() == 1);
    MUST(e.rewind_session(rewind_to(ref, "i3")));
    CHECK(test::get_existing(e, ref).state == json{{"lang", "fr"}, {"n", 2}, {"x", true}});
  }
  SUBCASE("a key created after the point is deleted, not set to null (google/adk-python#6728)") {
    auto r = MUST(e.rewind_session(rewind_before(ref, 2)));
    CHECK(r.ev.actions.state_remove == std::vector<std::string>{"x"});
    CHECK(r.ev.actions.extra["rewind_before_version"] == 2);
    CHECK(!test::get_existing(e, ref).state.contains("x"));
  }
  SUBCASE("nested rewinds: undoing a rewind brings its state back; apply_rewinds follows ADK") {
    auto r1 = MUST(e.rewind_session(rewind_to(ref, "i2")));
    CHECK(test::get_existing(e, ref).state == json{{"lang", "fr"}, {"n", 1}});
    test::append_ok(e, ref, test::make_event(json{{"n", 10}}, "e5", std::nullopt, "i5"));
    // Rewinding before the first rewind restores the state it undid.
    MUST(e.rewind_session(rewind_to(ref, r1.ev.invocation_id)));
    CHECK(test::get_existing(e, ref).state == json{{"lang", "de"}, {"n", 3}, {"x", true}});
    auto q = test::get_req(ref);
    q.apply_rewinds = true;
    auto kept = test::get_existing(e, q);
    std::vector<std::string> ids;
    for (auto& ev : kept.events)
      ids.push_back(ev.id);
    CHECK(ids == std::vector<std::string>{"e1", "e2", "e3"});
    auto invs = MUST(e.list_invocations(ref));
    REQUIRE(invs.size() == 6);
    CHECK(invs[0].invocation_id == "i1");
    CHECK(!invs[0].annulled);
    CHECK(invs[3].rewind);
    CHECK(invs[3].annulled); // the first rewind, undone by the second
    CHECK(invs[4].invocation_id == "i5");
    CHECK(invs[4].annulled);
    CHECK(invs[5].rewind);
    CHECK(!invs[5].annulled);
  }
  SUBCASE("bad points are refused and change nothing") {
    auto v = test::get_existing(e, ref).version;
    auto r = e.rewind_session(rewind_to(ref, "no-such-invocation"));
    REQUIRE(!r.ok());
    CHECK(r.err().code == errc::invalid_argument);
    auto r2 = e.rewind_session(rewind_before(ref, v + 1));
    REQUIRE(!r2.ok());
    CHECK(r2.err().code == errc::invalid_argument);
    rewind_request both = rewind_to(ref, "i1");
    both.before_version = 1;
    CHECK(e.rewind_session(both).err().code == errc::invalid_argument);
    CHECK(e.rewind_session(rewind_to(test::sref("app", "u", "nope"), "i1")).err().code
          == errc::not_found);
    auto stale = rewind_to(ref, "i1");
    stale.expected_version = v - 1;
    CHECK(e.rewind_session(stale).err().code == errc::version_conflict);
    CHECK(test::get_existing(e, ref).version == v);
  }
  SUBCASE("a rewind re-sent with its event id answers the stored one (A6)") {
    auto req = rewind_to(ref, "i2");
    req.event_id = "rw-1";
    auto a = MUST(e.rewind_session(req));
    test::append_ok(e, ref, test::make_event(json{{"n", 9}}));
    auto b = MUST(e.rewind_session(req));
    CHECK(b.version == a.version);
    CHECK(b.ev.id == "rw-1");
    CHECK(test::get_existing(e, ref).state["n"] == 9);
  }
}

TEST_CASE_TEMPLATE("history H5: apply_rewinds keeps what ADK's backward scan keeps, on random "
                   "histories with nested rewinds",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  std::mt19937 rng(3);
  for (int round = 0; round < 10; ++round) {
    auto ref = test::sref("app", "u", "h" + std::to_string(round));
    MUST(e.create_session(test::create_req(ref)));
    std::vector<std::string> invs;
    for (int step = 0; step < 40; ++step) {
      if (!invs.empty() && rng() % 6 == 0) {
        // Rewinds name ordinary invocations and, now and then, other rewinds.
        auto all = test::get_existing(e, ref).events;
        auto& target = all[rng() % all.size()].invocation_id;
        MUST(e.rewind_session(rewind_to(ref, target)));
        continue;
      }
      std::string inv = "i" + std::to_string(step / 2);
      invs.push_back(inv);
      test::append_ok(e, ref, test::make_event(json{{"k", step}}, {}, std::nullopt, inv));
    }
    auto all = test::get_existing(e, ref).events;
    auto want = adk_kept(all);
    auto q = test::get_req(ref);
    q.apply_rewinds = true;
    auto kept = test::get_existing(e, q).events;
    std::vector<std::uint64_t> got;
    for (auto& ev : kept)
      for (std::uint64_t v = 0; v < all.size(); ++v)
        if (all[v].id == ev.id)
          got.push_back(v + 1);
    INFO("round ", round);
    CHECK(got == want);
    // The filters apply to what is kept.
    q.num_recent_events = 3;
    auto last3 = test::get_existing(e, q).events;
    REQUIRE(last3.size() == std::min<std::size_t>(3, want.size()));
    for (std::size_t i = 0; i < last3.size(); ++i)
      CHECK(last3[i].id == all[want[want.size() - last3.size() + i] - 1].id);
    // An invocation is annulled when none of its events is kept or a marker.
    for (auto& span : MUST(e.list_invocations(ref))) {
      bool any_kept = false;
      for (auto v = span.first_version; v <= span.last_version; ++v)
        if (all[v - 1].invocation_id == span.invocation_id
            && std::find(want.begin(), want.end(), v) != want.end())
          any_kept = true;
      if (!span.rewind)
        CHECK(span.annulled == !any_kept);
    }
  }
}

TEST_CASE_TEMPLATE("history H4: a fork holds events 1..N and the state as of N; the source is "
                   "unchanged",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  std::mt19937 rng(5);
  auto ref = test::sref("app", "u", "src");
  MUST(e.create_session(test::create_req(ref, json{{"a", "created"}})));
  auto recorded = random_history(e, ref, rng, 25);
  auto src = test::get_existing(e, ref);
  fork_request f;
  f.ref = ref;
  f.at_version = 12;
  f.new_session_id = " fork ";
  auto made = MUST(e.fork_session(f));
  CHECK(made.id == "fork");
  CHECK(made.version == 12);
  CHECK(own_keys(made.state) == recorded[12]);
  CHECK(!made.cursor.empty());
  auto fork = test::get_existing(e, test::sref("app", "u", "fork"));
  REQUIRE(fork.events.size() == 12);
  for (std::size_t i = 0; i < 12; ++i)
    CHECK(to_json(fork.events[i]) == to_json(src.events[i]));
  // The fork's own past is exact, from the source's creation on.
  for (std::uint64_t n = 0; n <= 12; ++n)
    CHECK(own_keys(test::get_existing(e, as_of(test::sref("app", "u", "fork"), n)).state)
          == recorded[n]);
  auto again = test::get_existing(e, ref);
  again.cursor = src.cursor; // the fork moved the store's head, not the source
  CHECK(to_json(again) == to_json(src));
  // It is a session like any other.
  auto a = test::append_ok(e, test::sref("app", "u", "fork"), test::make_event(json{{"b", 1}}));
  CHECK(a.version == 13);
  CHECK(e.fork_session(f).err().code == errc::already_exists);
  f.new_session_id = "other";
  f.at_version = src.version + 1;
  CHECK(e.fork_session(f).err().code == errc::invalid_argument);
  f.ref = test::sref("app", "u", "nope");
  f.at_version = 0;
  CHECK(e.fork_session(f).err().code == errc::not_found);
  CHECK(!test::get_maybe(e, test::sref("app", "u", "other")).has_value());
}

TEST_CASE_TEMPLATE("history H2: a rewind waits while another invocation holds the lease", S,
                   test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref, json{{"n", 0}})));
  test::append_ok(e, ref, test::make_event(json{{"n", 1}}, {}, std::nullopt, "i1"));
  MUST(e.begin_invocation(ref, "live"));
  std::atomic<bool> done{false};
  std::optional<result<append_result>> got;
  e.rewind_session(rewind_to(ref, "i1"), [&](result<append_result> r) {
    got = std::move(r);
    done.store(true);
  });
  // The live invocation goes on writing; the rewind has not run. (A
  // barrier: the session actor took the rewind before this append, sent
  // after it from this thread, and has answered the append, and a read
  // through the actor after that.)
  test::append_ok(e, ref, test::make_event(json{{"n", 2}}, {}, std::nullopt, "live"));
  CHECK(test::get_existing(e, test::get_req(ref, 0, std::nullopt, "live")).version == 2);
  CHECK(!done.load());
  MUST(e.end_invocation(ref, "live"));
  REQUIRE(test::eventually([&] { return done.load(); }));
  REQUIRE(got->ok());
  CHECK(got->value().version == 3);
  CHECK(test::get_existing(e, ref).state == json{{"n", 0}});
  // The lease is free again.
  MUST(e.begin_invocation(ref, "next"));
  MUST(e.end_invocation(ref, "next"));
}

TEST_CASE_TEMPLATE("history H2: rewinds racing 64 appenders keep versions contiguous and land "
                   "whole",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref)));
  test::append_ok(e, ref, test::make_event(json{{"base", 1}}, {}, std::nullopt, "i0"));
  std::vector<std::thread> ts;
  std::atomic<int> appended{0}, rewinds{0};
  for (int w = 0; w < 64; ++w)
    ts.emplace_back([&, w] {
      for (int i = 0; i < 10; ++i) {
        auto r =
          e.append_event(test::append_req(ref,
                                          test::make_event(json{{"w" + std::to_string(w), i}}, {},
                                                           std::nullopt, "w" + std::to_string(w))));
        if (r.ok())
          appended.fetch_add(1);
      }
    });
  ts.emplace_back([&] {
    for (int i = 0; i < 10; ++i)
      if (e.rewind_session(rewind_to(ref, "i0")).ok())
        rewinds.fetch_add(1);
  });
  for (auto& th : ts)
    th.join();
  CHECK(appended.load() == 640);
  CHECK(rewinds.load() == 10);
  auto s = test::get_existing(e, ref);
  CHECK(s.version == 1 + 640 + 10);
  REQUIRE(s.events.size() == s.version);
  // Each rewind restored the state before i0 at the moment it was computed:
  // replaying the log event by event, every rewind leaves only the keys
  // written after it, none from before.
  json state = json::object();
  for (auto& ev : s.events) {
    test::apply_event(state, ev);
    if (ev.actions.extra.contains("rewind_before_invocation_id"))
      CHECK(state == json::object());
  }
  CHECK(own_keys(s.state) == state);
}

TEST_CASE_TEMPLATE("history H2: a rewind sent behind appends whose write fails is computed from "
                   "the re-read record, or fails alone; nothing is left in part",
                   S, test::memory_store, test::lmdb_store) {
  std::uint64_t rewound = 0;
  for (std::uint64_t n = 1; n <= 40; ++n) {
    CAPTURE(n);
    test::temp_dir dir;
    auto plan = std::make_shared<store::fault_plan>();
    plan->target = store::fault_target::writes;
    plan->code = errc::io_error;
    auto opened = detail::engine_factory::open(test::make_options(S::kind, dir.str()),
                                               [plan](std::unique_ptr<store::kv_store> kv) {
                                                 return store::make_faulty_kv(std::move(kv), plan);
                                               });
    REQUIRE(opened.ok());
    auto& e = **opened;
    auto ref = test::sref("app", "u", "s");
    MUST(e.create_session(test::create_req(ref, json{{"k", "created"}})));
    test::append_ok(e, ref, test::make_event(json{{"k", 0}}, {}, std::nullopt, "i0"));
    plan->fail_at = plan->calls.load() + n; // the n-th write call from here fails
    // Appends pipelined into the session actor, then a rewind behind them.
    std::atomic<int> left{6};
    for (int i = 1; i <= 5; ++i)
      e.append_event(
        test::append_req(ref, test::make_event(json{{"k", i}, {"x", i}}, {}, std::nullopt, "i1")),
        [&](result<append_result>) { left.fetch_sub(1); });
    std::optional<result<append_result>> rw;
    e.rewind_session(rewind_to(ref, "i1"), [&](result<append_result> r) {
      rw = std::move(r);
      left.fetch_sub(1);
    });
    REQUIRE(test::eventually([&] { return left.load() == 0; }));
    plan->disarmed = true;
    auto s = test::get_existing(e, ref);
    REQUIRE(s.events.size() == s.version);
    // The stored state is the log replayed; a stored rewind left the state
    // of before i1.
    json state = json{{"k", "created"}};
    for (auto& ev : s.events) {
      test::apply_event(state, ev);
      if (ev.actions.extra.contains("rewind_before_invocation_id"))
        CHECK(state == json{{"k", 0}});
    }
    CHECK(s.state == state);
    REQUIRE(rw.has_value());
    // Computed after the failed write is resolved: it fails only when its
    // own write does, or when none of i1's appends was stored (then there is
    // no such point), never for an earlier append's failure.
    bool i1_stored = false;
    for (auto& ev : s.events)
      i1_stored = i1_stored || ev.invocation_id == "i1";
    if (!rw->ok())
      CHECK(rw->err().code == (i1_stored ? errc::io_error : errc::invalid_argument));
    if (rw->ok()) {
      ++rewound;
      // Nothing was sent after it: it is the last event.
      CHECK(rw->value().version == s.version);
      CHECK(rw->value().ev.id == s.events.back().id);
    }
  }
  CHECK(rewound > 0);
}
