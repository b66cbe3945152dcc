// SPDX-License-Identifier: Apache-2.0
// The change feed's push form (engine::watch), on both stores: each watch's
// stream, delivered while real threads write, equals the log read back for
// its scope (commit order, no gap, no duplicate); batches come one at a
// time; a watch whose callback blocks falls behind and catches up exactly
// while writers go on; cancel and resume from the handle's cursor lose
// nothing; close ends watches with a cursor that resumes after reopening;
// an expired cursor is refused at start; an idle watch gets progress; many
// watches share a few delivery threads, and a blocked callback holds back
// no other watch.
// test-tiers: tsan
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <future>
#include <random>
#include <thread>
#include <utility>

#include "support/change_feed.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using test::describe_change;
using test::scope_req;
using test::seq_of;
using namespace std::chrono_literals;

namespace {

using sink = test::watch_sink;

// The log read back for `req` after `from`, described.
std::vector<std::string> logged(engine& e, watch_request req, const std::string& from) {
  std::vector<std::string> out;
  req.from = from;
  for (auto& c : test::read_feed(e, std::move(req)))
    out.push_back(describe_change(c, true));
  return out;
}

// Commits one change that a watch of `req` takes: a create of a new session
// in its app and user (session scope: an append to its session, or its
// create), setting a key of each scope.
void write_marker(engine& e, const watch_request& req) {
  static std::atomic<int> markers{0};
  const int n = markers.fetch_add(1);
  const json marked{{"app:marker", n}, {"user:marker", n}, {"marker", n}};
  if (req.scope == watch_scope::session) {
    auto ref = test::sref(req.app_name, req.user_id, req.session_id);
    if (test::get_maybe(e, ref))
      test::append_ok(e, ref, test::make_event(marked));
    else
      MUST(e.create_session(test::create_req(ref, marked)));
    return;
  }
  MUST(e.create_session(test::create_req(req.app_name.empty() ? "marker" : req.app_name,
                                         req.user_id.empty() ? "marker" : req.user_id,
                                         "marker-" + std::to_string(n), marked)));
}

// Checks that watch `s` of `req` took exactly the log's changes for `req`
// after `from`, with no writer left running. A barrier, not a wait: a
// marker change is committed last, and delivery is in commit order, so once
// `s` holds as many changes as the log up to the marker, it holds exactly
// those iff nothing unexpected came (up to 20 s for the marker).
void expect_caught_up(engine& e, sink& s, const watch_request& req, const std::string& from,
                      const char* what) {
  write_marker(e, req);
  auto want = logged(e, req, from);
  REQUIRE(!want.empty());
  REQUIRE(want.back().find("marker\":") != std::string::npos);
  bool reached = test::eventually([&] { return s.snapshot().size() >= want.size(); }, 20s);
  INFO(what << ": " << s.snapshot().size() << " of " << want.size());
  CHECK(reached);
  CHECK(s.snapshot() == want);
  CHECK(s.overlaps == 0);
  CHECK(!s.backwards);
}

using test::gate_opener;

// Appends from `threads` threads, each to sessions of its own.
// Session ids start with `tag`.
void write_load(engine& e, int threads, int per_thread, int sessions_per_thread,
                const std::string& tag = "") {
  std::vector<std::thread> ts;
  for (int w = 0; w < threads; ++w)
    ts.emplace_back([&e, w, per_thread, sessions_per_thread, tag] {
      std::mt19937 rng(99 + w);
      for (int i = 0; i < per_thread; ++i) {
        auto ref =
          test::sref("a" + std::to_string(w % 2), "u" + std::to_string(w % 3),
                     tag + "w" + std::to_string(w) + "s" + std::to_string(i % sessions_per_thread));
        if (i < sessions_per_thread) {
          REQUIRE(e.create_session(test::create_req(ref, json{{"user:hello", w}})).ok());
          continue;
        }
        if (rng() % 40 == 0) {
          REQUIRE(e.delete_session(ref).ok());
          REQUIRE(e.create_session(test::create_req(ref)).ok());
          continue;
        }
        json delta{{"k", i}, {"temp:t", i}};
        if (rng() % 3 == 0)
          delta["user:score"] = i;
        if (rng() % 5 == 0)
          delta["app:n"] = i;
        REQUIRE(e.append_event(test::append_req(ref, test::make_event(delta))).ok());
      }
    });
  for (auto& t : ts)
    t.join();
}

} // namespace

TEST_CASE_TEMPLATE("watch: every watch's stream, delivered while threads write, equals the log "
                   "for its scope, one batch at a time",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  auto start = MUST(e.head_cursor());
  std::vector<watch_request> reqs{
    scope_req(watch_scope::all),
    scope_req(watch_scope::session, "a1", "u1", "w1s2"),
    scope_req(watch_scope::user, "a0", "u0"),
    scope_req(watch_scope::user, "a0", "u2", {}, true),
    scope_req(watch_scope::app, "a1"),
    scope_req(watch_scope::all, {}, {}, {}, false, "app:"),
  };
  std::vector<std::unique_ptr<sink>> sinks;
  std::vector<std::unique_ptr<watch_handle>> handles;
  for (auto& r : reqs) {
    sinks.push_back(std::make_unique<sink>());
    auto h = e.watch(r, sinks.back()->handler(), sinks.back()->ender());
    REQUIRE(h.ok());
    handles.push_back(std::move(*h));
  }
  write_load(e, 6, 300, 4);
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    auto want = logged(e, reqs[i], start);
    CHECK(!want.empty());
    expect_caught_up(e, *sinks[i], reqs[i], start, "watch");
    for (auto& line : want)
      CHECK(line.find("temp:") == std::string::npos);
  }
  handles.clear(); // cancels
  for (auto& s : sinks) {
    CHECK(s->ended);
    CHECK(s->end.reason == watch_end_reason::cancelled);
  }
}

TEST_CASE_TEMPLATE("watch: a watch whose callback blocks falls behind while 64 writers go on, "
                   "then catches up exactly; batches stay bounded",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  auto start = MUST(e.head_cursor());
  sink slow, fast;
  std::promise<void> writers_done;
  slow.gate = writers_done.get_future().share(); // its first batch waits for every write
  auto hs = MUST(e.watch(scope_req(watch_scope::all), slow.handler(), slow.ender()));
  auto hf = MUST(e.watch(scope_req(watch_scope::all), fast.handler(), fast.ender()));
  // Opens the gate however the test leaves (before the handles, whose
  // cancel waits for the blocked batch).
  gate_opener opener{writers_done};
  auto t0 = std::chrono::steady_clock::now();
  write_load(e, 64, 40, 2);
  auto writing = std::chrono::steady_clock::now() - t0;
  auto want = logged(e, scope_req(watch_scope::all), start);
  REQUIRE(want.size() >= 64 * 40);
  // The writers did not wait for the slow watch: it has taken nothing yet.
  CHECK(slow.snapshot().empty());
  opener.open();
  MESSAGE("writing took " << std::chrono::duration<double>(writing).count() << " s");
  expect_caught_up(e, fast, scope_req(watch_scope::all), start, "fast");
  expect_caught_up(e, slow, scope_req(watch_scope::all), start, "slow");
  CHECK(slow.largest_batch() <= 256);
  CHECK(fast.largest_batch() <= 256);
}

// Threads of this process now (Linux: one entry per thread in /proc).
static std::size_t threads_now() {
  std::size_t n = 0;
  for ([[maybe_unused]] auto& entry : std::filesystem::directory_iterator("/proc/self/task"))
    ++n;
  return n;
}

TEST_CASE_TEMPLATE("watch: 100 watches with quick callbacks share a few delivery threads; "
                   "callbacks blocked in 8 watches hold back no other watch",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  auto start = MUST(e.head_cursor());
  const auto before = threads_now();
  {
    // 100 watches of one session each, while 4 threads write to 6 sessions
    // each (w0s0 .. w3s5): 24 of the watches take changes.
    std::vector<std::unique_ptr<sink>> sinks;
    std::vector<std::unique_ptr<watch_handle>> hs;
    std::vector<session_ref> refs;
    for (int i = 0; i < 100; ++i) {
      const int w = i % 25 / 6, k = i % 25 % 6; // sessions w0s0..w3s5 and some never written
      auto ref = test::sref("a" + std::to_string(w % 2), "u" + std::to_string(w % 3),
                            "w" + std::to_string(i < 24 ? w : 10 + i) + "s" + std::to_string(k));
      refs.push_back(ref);
      sinks.push_back(std::make_unique<sink>());
      hs.push_back(
        MUST(e.watch(scope_req(watch_scope::session, ref.app_name, ref.user_id, ref.session_id),
                     sinks.back()->handler(), sinks.back()->ender())));
    }
    write_load(e, 4, 300, 6);
    for (int i = 0; i < 100; ++i) {
      INFO("watch of " << refs[i].session_id);
      auto req =
        scope_req(watch_scope::session, refs[i].app_name, refs[i].user_id, refs[i].session_id);
      CHECK((i < 24) == !logged(e, req, start).empty());
      expect_caught_up(e, *sinks[i], req, start, "a watch of one session");
    }
    // A thread per watch would be 100 more; the hub and its delivery
    // threads are a few (more when passes stall: on a loaded machine a pass
    // descheduled for 10 ms counts as a stall, so the bound leaves room).
    const auto during = threads_now();
    INFO("threads before " << before << ", with 100 watches " << during);
    CHECK(during <= before + 20);
  }
  // Eight watches of everything block in their first callback; a ninth
  // receives every change meanwhile, and the eight catch up once unblocked.
  std::promise<void> release;
  auto gate = release.get_future().share();
  std::vector<std::unique_ptr<sink>> blocked;
  std::vector<std::unique_ptr<watch_handle>> hs;
  gate_opener open_gate{release};
  auto from = MUST(e.head_cursor());
  for (int i = 0; i < 8; ++i) {
    blocked.push_back(std::make_unique<sink>());
    blocked.back()->gate = gate;
    hs.push_back(MUST(
      e.watch(scope_req(watch_scope::all), blocked.back()->handler(), blocked.back()->ender())));
  }
  sink free_one;
  auto hf = MUST(e.watch(scope_req(watch_scope::all), free_one.handler(), free_one.ender()));
  write_load(e, 4, 100, 3, "second-");
  expect_caught_up(e, free_one, scope_req(watch_scope::all), from,
                   "the watch beside 8 blocked ones");
  for (auto& b : blocked)
    CHECK(b->snapshot().empty());
  open_gate.open();
  for (auto& b : blocked)
    expect_caught_up(e, *b, scope_req(watch_scope::all), from, "a watch once unblocked");
}

TEST_CASE_TEMPLATE("watch: cancel, then a new watch from the handle's cursor, loses and repeats "
                   "nothing while writes go on",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  auto start = MUST(e.head_cursor());
  std::atomic<bool> writing{true};
  std::thread writer([&] {
    write_load(e, 4, 400, 3);
    writing = false;
  });
  std::vector<std::string> joined;
  std::string from = start;
  std::mt19937 rng(5);
  for (int round = 0; round < 40; ++round) {
    sink s;
    auto req = scope_req(watch_scope::all);
    req.from = from;
    auto h = MUST(e.watch(req, s.handler(), s.ender()));
    // input: the cancel lands after a seeded number of delivered batches
    // (0: at the start), or once the writes have ended; any point must lose
    // and repeat nothing.
    const int after = static_cast<int>(rng() % 4);
    (void)test::eventually([&] { return s.batches.load() >= after || !writing.load(); },
                           std::chrono::seconds(10), std::chrono::microseconds(100));
    h->cancel();
    auto got = s.snapshot();
    joined.insert(joined.end(), got.begin(), got.end());
    CHECK(s.ended);
    CHECK(s.end.reason == watch_end_reason::cancelled);
    CHECK(s.end.resume_from == h->cursor());
    from = h->cursor();
  }
  writer.join();
  sink rest;
  auto req = scope_req(watch_scope::all);
  req.from = from;
  auto h = MUST(e.watch(req, rest.handler(), rest.ender()));
  auto want = logged(e, scope_req(watch_scope::all), start);
  REQUIRE(want.size() >= joined.size());
  CHECK(std::vector<std::string>(want.begin(), want.begin() + joined.size()) == joined);
  expect_caught_up(e, rest, req, from, "rest");
}

TEST_CASE("watch: close ends every watch with a cursor that resumes after reopening") {
  auto t = test::open_engine(test::store_kind::lmdb);
  auto start = MUST(t->head_cursor());
  sink s;
  auto h = MUST(t->watch(scope_req(watch_scope::all), s.handler(), s.ender()));
  write_load(*t, 2, 50, 2);
  MUST(t->close());
  REQUIRE(s.ended);
  CHECK(s.end.reason == watch_end_reason::closing);
  auto resume = s.end.resume_from;
  auto seen = s.snapshot();
  h.reset(); // after close: a no-op
  t.eng = MUST(engine::open(t.opts));
  test::append_ok(*t, test::sref("a0", "u0", "w0s0"), test::make_event(json{{"after", 1}}));
  sink rest;
  auto req = scope_req(watch_scope::all);
  req.from = resume;
  auto h2 = MUST(t->watch(req, rest.handler(), rest.ender()));
  auto want = logged(*t, scope_req(watch_scope::all), start);
  REQUIRE(want.size() >= seen.size() + 1);
  CHECK(std::vector<std::string>(want.begin(), want.begin() + seen.size()) == seen);
  expect_caught_up(*t, rest, req, resume, "after reopen");
}

TEST_CASE_TEMPLATE("watch: a cursor older than the retention is refused at start with "
                   "cursor_expired; bad requests with invalid_argument",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind, [](options& o) { o.change_retention.max_entries = 20; });
  auto start = MUST(t->head_cursor());
  auto ref = test::sref("app", "u", "s");
  MUST(t->create_session(test::create_req(ref)));
  for (int i = 0; i < 200; ++i)
    test::append_ok(*t, ref, test::make_event(json{{"n", i}}));
  sink s;
  auto req = scope_req(watch_scope::all);
  req.from = start;
  auto r = t->watch(req, s.handler(), s.ender());
  REQUIRE(r.code() == errc::cursor_expired);
  REQUIRE(r.err().oldest_cursor);
  req.from = *r.err().oldest_cursor;
  auto ok = t->watch(req, s.handler(), s.ender());
  CHECK(ok.ok());
  CHECK(t->watch(scope_req(watch_scope::user, "app"), s.handler(), s.ender()).code()
        == errc::invalid_argument);
  CHECK(t->watch(scope_req(watch_scope::all), nullptr, s.ender()).code() == errc::invalid_argument);
}

TEST_CASE_TEMPLATE("watch: a callback may cancel its own watch; an idle watch's cursor moves "
                   "past changes it does not take",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  std::unique_ptr<watch_handle> self;
  std::mutex mtx;
  std::atomic<int> calls{0};
  std::atomic<bool> ended{false};
  {
    std::lock_guard<std::mutex> lk(mtx);
    self = MUST(e.watch(
      scope_req(watch_scope::all),
      [&](change_page) {
        calls.fetch_add(1);
        std::lock_guard<std::mutex> lk2(mtx);
        self.reset(); // cancels from inside its own callback
      },
      [&](const watch_end&) { ended = true; }));
  }
  // A witness of the same scope: once it has taken s2's create, the hub
  // has handed that change out, and the watch that ended (after its last
  // batch, as on_end promises) took none of it.
  sink witness;
  auto hw = MUST(e.watch(scope_req(watch_scope::all), witness.handler(), witness.ender()));
  MUST(e.create_session(test::create_req("x", "u", "s")));
  CHECK(test::eventually([&] { return ended.load(); }));
  MUST(e.create_session(test::create_req("x", "u", "s2")));
  CHECK(test::eventually([&] { return witness.snapshot().size() == 2; }));
  CHECK(calls == 1);

  // A watch of app "quiet" while only app "busy" is written: an empty
  // batch moves its cursor within about a second.
  sink idle;
  auto head = MUST(e.head_cursor());
  auto h =
    MUST(e.watch(scope_req(watch_scope::app, "quiet", {}, {}, true), idle.handler(), idle.ender()));
  MUST(e.create_session(test::create_req("busy", "u", "s")));
  CHECK(test::eventually(
    [&] {
      std::lock_guard<std::mutex> lk(idle.mtx);
      return !idle.last_cursor.empty() && seq_of(idle.last_cursor) > seq_of(head);
    },
    5s));
  CHECK(idle.snapshot().empty());
}
