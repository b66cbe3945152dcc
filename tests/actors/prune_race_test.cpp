// SPDX-License-Identifier: Apache-2.0
// engine::prune beside writes to the sessions it found old, on both stores,
// on CAF's deterministic scheduler: the interleaving is driven by running
// every actor but the store writer, so that prune reads its page while a
// write to a session on it waits for the writer, uncommitted, and its
// delete reaches the writer after that write. A session written after its
// page was read (appended to; deleted and created again) stays; the other
// old sessions of the page go. A session prune deleted while its actor was
// live is gone for that actor too: a create under its id succeeds. A live
// actor of a session prune leaves keeps its cached record (it reads it no
// more often than before the prune).
#include <string_view>

#include <caf/local_actor.hpp>
#include <caf/resumable.hpp>

#include "support/deterministic.hpp"
#include "support/fault_kv.hpp"
#include "support/manual_clock.hpp"

using namespace agentstate;

namespace {

prune_request older_than(double s) {
  prune_request r;
  r.older_than_s = s;
  return r;
}

// Runs every queued actor job but the store writer's (the session actors
// and prune's, and what they queue) until none is left: writes sent to the
// writer wait there, uncommitted, in the order they were sent.
std::size_t run_all_but_writer(test::deterministic_engine& t) {
  return t.sched->run_jobs_filtered([](caf::resumable* job) {
    auto* a = dynamic_cast<caf::local_actor*>(job);
    if (!a)
      return false;
    const std::string_view name = a->name();
    return name == "agentstate.session" || name == "agentstate.prune";
  });
}

std::optional<session> read_now(engine& e, const session_ref& ref) {
  // A read without an invocation is served on the calling thread.
  std::optional<result<std::optional<session>>> out;
  e.get_session(test::get_req(ref), [&](result<std::optional<session>> r) { out = std::move(r); });
  REQUIRE(out.has_value());
  return MUST(std::move(*out));
}

template <class T, class Start>
result<T> call(test::deterministic_engine& t, Start&& start) {
  return t.call<T>(std::forward<Start>(start));
}

// test::open_deterministic over a store that counts its read transactions
// in `reads` (fault_plan::calls; it fails none).
test::deterministic_engine open_counting_reads(test::store_kind k, const test::manual_clock& clock,
                                               std::shared_ptr<store::fault_plan>& reads) {
  reads = std::make_shared<store::fault_plan>();
  reads->target = store::fault_target::reads;
  test::deterministic_engine t;
  t.dir = std::make_unique<test::temp_dir>();
  t.opts = test::make_options(k, t.dir->str());
  clock.install(t.opts);
  auto r = detail::engine_factory::open(
    t.opts,
    [reads](std::unique_ptr<store::kv_store> kv) {
      return store::make_faulty_kv(std::move(kv), reads);
    },
    true);
  INFO("engine_factory::open(deterministic) -> ", test::describe(r));
  REQUIRE(r.ok());
  t.eng = std::move(r).value();
  t.sched = &dynamic_cast<caf::scheduler::test_coordinator&>(
    detail::engine_factory::system_of(*t.eng).scheduler());
  return t;
}

} // namespace

TEST_CASE_TEMPLATE("prune_deletes_session_written_after_page_read: a session appended to after "
                   "prune read its page, before its delete committed, stays",
                   S, test::memory_store, test::lmdb_store) {
  test::manual_clock clock;
  auto t = test::open_deterministic(S::kind, [&](options& o) { clock.install(o); });
  auto& e = *t;
  const auto written = test::sref("app", "u", "written");
  const auto idle = test::sref("app", "u", "idle");
  for (const auto& ref : {written, idle}) {
    MUST(call<session>(t, [&](auto cb) { e.create_session(test::create_req(ref), cb); }));
    MUST(call<append_result>(t, [&](auto cb) {
      e.append_event(test::append_req(ref, test::make_event(json{{"n", 1}})), cb);
    }));
  }
  clock.advance(1000); // both last updated 1,000 s ago

  // The append reaches the session's actor first, and waits for the writer.
  test::pending_call<append_result> appended;
  e.append_event(test::append_req(written, test::make_event(json{{"n", 2}})), appended.cb());
  test::pending_call<prune_result> pruned;
  e.prune(older_than(500), pruned.cb());
  const auto head = MUST(e.head_cursor());
  CHECK(run_all_but_writer(t) > 0);
  // Prune has read its page (both sessions old in that snapshot) and sent
  // its deletes; nothing is committed yet.
  CHECK(!appended.ready());
  CHECK(!pruned.ready());
  CHECK(MUST(e.head_cursor()) == head);
  REQUIRE(read_now(e, written));
  CHECK(read_now(e, written)->version == 1);

  t.run(); // the writer: the append, then prune's deletes
  REQUIRE(appended.ready());
  CHECK(MUST(std::move(appended.get())).version == 2);
  REQUIRE(pruned.ready());
  auto r = MUST(std::move(pruned.get()));
  CHECK(r.sessions == 1);
  REQUIRE(r.sample.size() == 1);
  CHECK(r.sample[0].session_id == "idle");
  CHECK(r.failed == 0);
  CHECK(!r.stopped);
  auto kept = read_now(e, written);
  REQUIRE(kept);
  CHECK(kept->version == 2);
  CHECK(kept->state["n"] == 2);
  CHECK(!read_now(e, idle));

  // Now nothing was written since: the next prune (its own page read) takes
  // it once it is old again.
  clock.advance(1000);
  auto again = MUST(call<prune_result>(t, [&](auto cb) { e.prune(older_than(500), cb); }));
  CHECK(again.sessions == 1);
  CHECK(!read_now(e, written));
}

TEST_CASE_TEMPLATE("prune_deletes_session_written_after_page_read: a session deleted and created "
                   "again after prune read its page stays as created",
                   S, test::memory_store, test::lmdb_store) {
  test::manual_clock clock;
  auto t = test::open_deterministic(S::kind, [&](options& o) { clock.install(o); });
  auto& e = *t;
  const auto ref = test::sref("app", "u", "s");
  // Version 0 before and after: only its creation time tells them apart.
  MUST(call<session>(t, [&](auto cb) { e.create_session(test::create_req(ref), cb); }));
  clock.advance(1000);

  test::pending_call<void> deleted;
  e.delete_session(ref, deleted.cb());
  test::pending_call<session> created;
  e.create_session(test::create_req(ref, json{{"again", true}}), created.cb());
  test::pending_call<prune_result> pruned;
  e.prune(older_than(500), pruned.cb());
  CHECK(run_all_but_writer(t) > 0);
  CHECK(!created.ready());
  CHECK(!pruned.ready());
  t.run();
  MUST(std::move(deleted.get()));
  MUST(std::move(created.get()));
  auto r = MUST(std::move(pruned.get()));
  CHECK(r.sessions == 0);
  CHECK(r.failed == 0);
  CHECK(!r.stopped);
  auto kept = read_now(e, ref);
  REQUIRE(kept);
  CHECK(kept->version == 0);
  CHECK(kept->state["again"] == true);
}

TEST_CASE_TEMPLATE("prune: a session deleted while its actor is live is gone for that actor: a "
                   "create under its id succeeds, an append is not_found",
                   S, test::memory_store, test::lmdb_store) {
  test::manual_clock clock;
  auto t = test::open_deterministic(S::kind, [&](options& o) { clock.install(o); });
  auto& e = *t;
  const auto a = test::sref("app", "u", "a"), b = test::sref("app", "u", "b");
  for (const auto& ref : {a, b})
    MUST(call<session>(t, [&](auto cb) { e.create_session(test::create_req(ref), cb); }));
  clock.advance(1000);
  // Their actors are live (nothing passivates them here), loaded with the
  // records prune deletes.
  auto r = MUST(call<prune_result>(t, [&](auto cb) { e.prune(older_than(500), cb); }));
  CHECK(r.sessions == 2);
  CHECK(!read_now(e, a));
  auto made = call<session>(t, [&](auto cb) { e.create_session(test::create_req(a), cb); });
  INFO(test::describe(made));
  CHECK(made.ok());
  auto app = call<append_result>(t, [&](auto cb) {
    e.append_event(test::append_req(b, test::make_event(json{{"n", 1}})), cb);
  });
  CHECK(app.code() == errc::not_found);
}

TEST_CASE_TEMPLATE("prune_reloads_live_sessions: a live session actor that a prune leaves does not "
                   "read its record again after the prune's deletes",
                   S, test::memory_store, test::lmdb_store) {
  test::manual_clock clock;
  std::shared_ptr<store::fault_plan> reads;
  auto t = open_counting_reads(S::kind, clock, reads);
  auto& e = *t;
  const auto live = test::sref("app", "u", "live"), old = test::sref("app", "u", "old");
  for (const auto& ref : {live, old})
    MUST(call<session>(t, [&](auto cb) { e.create_session(test::create_req(ref), cb); }));
  clock.advance(1000); // "old" was last updated 1,000 s ago; "live" is appended to now
  // The read transactions one append to the loaded "live" takes.
  auto append_reads = [&](int n) {
    const auto before = reads->calls.load();
    MUST(call<append_result>(t, [&](auto cb) {
      e.append_event(test::append_req(live, test::make_event(json{{"n", n}})), cb);
    }));
    return reads->calls.load() - before;
  };
  append_reads(1);
  const auto plain = append_reads(2);

  auto r = MUST(call<prune_result>(t, [&](auto cb) { e.prune(older_than(500), cb); }));
  CHECK(r.sessions == 1);
  REQUIRE(r.sample.size() == 1);
  CHECK(r.sample[0].session_id == "old");
  CHECK(!read_now(e, old));
  // The delete went through "old"'s actor; "live"'s cached record is still
  // good, so its next append reads no more than the one before the prune.
  CHECK(append_reads(3) == plain);
  auto kept = read_now(e, live);
  REQUIRE(kept);
  CHECK(kept->version == 3);
  CHECK(kept->state["n"] == 3);
}
