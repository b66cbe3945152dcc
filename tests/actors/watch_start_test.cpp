// SPDX-License-Identifier: Apache-2.0
// engine::watch from the start (watch_request::from = from_start), on both
// stores: on an empty store it starts at the head; otherwise just before the
// oldest change kept when it begins, and it replays the log, then goes on
// live, for every scope, nothing missed or repeated while appends race its
// start; rows the retention trims before its first read are passed over
// (never cursor_expired). read_changes takes from_start as its default.
// test-tiers: tsan
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <mutex>
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

using start_sink = test::watch_sink;

using gate_guard = test::gate_opener;

watch_request from_start_req(watch_request r) {
  r.from = from_start;
  return r;
}

// The log's changes for `req` from the oldest kept, described.
std::vector<std::string> whole_log(engine& e, watch_request req) {
  req.from.reset();
  std::vector<std::string> out;
  for (auto& c : test::read_feed(e, std::move(req)))
    out.push_back(describe_change(c, true));
  return out;
}

// Commits a change `req` takes: an append, to its session or to the
// "mark" session of its app and user (a0/u0 and a1/u1 by default), setting
// a key of each scope.
void write_marker(engine& e, const watch_request& req, int n) {
  const std::string app = req.app_name.empty() ? "a0" : req.app_name;
  const std::string user = !req.user_id.empty() ? req.user_id : app == "a1" ? "u1" : "u0";
  const std::string id = req.session_id.empty() ? "mark" : req.session_id;
  test::append_ok(e, test::sref(app, user, id),
                  test::make_event(json{{"app:marker", n}, {"user:marker", n}, {"marker", n}}));
}

// The marker sessions of write_marker.
void make_markers(engine& e) {
  MUST(e.create_session(test::create_req("a0", "u0", "mark")));
  MUST(e.create_session(test::create_req("a1", "u1", "mark")));
}

// The barrier: a marker is committed last and delivery is in commit order,
// so once `s` holds as many changes as the log of `req` up to the marker, it
// holds exactly those iff nothing was missed or repeated (up to 20 s).
void expect_log(engine& e, start_sink& s, const watch_request& req, int marker) {
  write_marker(e, req, marker);
  auto want = whole_log(e, req);
  REQUIRE(!want.empty());
  REQUIRE(want.back().find("marker\":" + std::to_string(marker) + "}") != std::string::npos);
  const bool reached = test::eventually([&] { return s.snapshot().size() >= want.size(); }, 20s);
  INFO(s.snapshot().size() << " of " << want.size());
  CHECK(reached);
  CHECK(s.snapshot() == want);
  CHECK(!s.backwards);
  CHECK(!s.ended);
}

// The sequence of a described change (its first word, the cursor).
std::uint64_t seq_of_line(const std::string& line) {
  return seq_of(line.substr(0, line.find(' ')));
}

// Writes changes from one thread to five sessions of its own (of apps
// a0/a1, users u0/u1) until `stop` is set or `max` are written, counting
// each in `done`.
void write_until(engine& e, int thread, int max, const std::atomic<bool>& stop,
                 std::atomic<int>& done) {
  for (int i = 0; i < max && !stop.load(); ++i) {
    const int j = i % 5;
    auto ref = test::sref("a" + std::to_string(j % 2), "u" + std::to_string((j / 2) % 2),
                          "t" + std::to_string(thread) + "s" + std::to_string(j));
    json delta{{"k", i}};
    if (i % 3 == 0)
      delta["user:score"] = i;
    if (i % 4 == 0)
      delta["app:n"] = i;
    if (i < 5)
      REQUIRE(e.create_session(test::create_req(ref, delta)).ok());
    else
      REQUIRE(e.append_event(test::append_req(ref, test::make_event(delta))).ok());
    done.fetch_add(1);
  }
}

} // namespace

TEST_CASE_TEMPLATE("watch from start: an empty store's watch starts at its head; read_changes "
                   "takes from_start as its default",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  start_sink s;
  const auto req = from_start_req(scope_req(watch_scope::all));
  auto h = MUST(e.watch(req, s.handler(), s.ender()));
  CHECK(h->cursor() == MUST(e.head_cursor()));
  CHECK(seq_of(h->cursor()) == 0);
  make_markers(e);
  expect_log(e, s, req, 1);
  CHECK(s.snapshot().size() == 3);

  auto with = MUST(e.read_changes(from_start_req(scope_req(watch_scope::all)), 100));
  auto without = MUST(e.read_changes(scope_req(watch_scope::all), 100));
  CHECK(with.cursor == without.cursor);
  REQUIRE(with.changes.size() == without.changes.size());
  for (std::size_t i = 0; i < with.changes.size(); ++i)
    CHECK(describe_change(with.changes[i], true) == describe_change(without.changes[i], true));
}

TEST_CASE_TEMPLATE("watch from start: every scope's watch replays the log from its oldest change "
                   "and goes on live, nothing missed or repeated while appends race its start",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  make_markers(e);
  std::atomic<bool> no_stop{false};
  std::atomic<int> before{0};
  write_until(e, 0, 60, no_stop, before); // changes already in the log

  const std::vector<watch_request> reqs{
    from_start_req(scope_req(watch_scope::all)),
    from_start_req(scope_req(watch_scope::session, "a0", "u0", "t0s0")),
    from_start_req(scope_req(watch_scope::session, "a1", "u1", "t0s3")),
    from_start_req(scope_req(watch_scope::user, "a0", "u0")),
    from_start_req(scope_req(watch_scope::user, "a1", "u1", {}, true)),
    from_start_req(scope_req(watch_scope::app, "a0")),
    from_start_req(scope_req(watch_scope::app, "a1", {}, {}, true)),
    from_start_req(scope_req(watch_scope::all, {}, {}, {}, false, "user:")),
  };
  // Writers run while the watches start, each watch once the writers have
  // committed 40 more changes, and go on until every watch has started.
  const int threads = 3, max = 20000;
  std::atomic<bool> stop{false};
  std::atomic<int> done{0};
  std::vector<std::thread> writers;
  for (int w = 1; w <= threads; ++w)
    writers.emplace_back([&e, w, &stop, &done] { write_until(e, w, max, stop, done); });
  std::vector<std::unique_ptr<start_sink>> sinks;
  std::vector<std::unique_ptr<watch_handle>> handles;
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    const int due = static_cast<int>(i + 1) * 40;
    CHECK(test::eventually([&] { return done.load() >= due; }, 20s));
    sinks.push_back(std::make_unique<start_sink>());
    auto h = e.watch(reqs[i], sinks.back()->handler(), sinks.back()->ender());
    INFO("watch " << i << ": " << test::describe(h));
    REQUIRE(h.ok());
    handles.push_back(std::move(*h));
  }
  const bool racing = done.load() < threads * max;
  stop = true;
  for (auto& w : writers)
    w.join();
  CHECK(racing); // every watch started while the writers were writing
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    INFO("watch " << i);
    expect_log(e, *sinks[i], reqs[i], static_cast<int>(100 + i));
  }
  handles.clear();
  for (auto& s : sinks)
    CHECK(s->end.reason == watch_end_reason::cancelled);
}

TEST_CASE_TEMPLATE("watch from start: it starts just before the oldest change kept when it "
                   "begins; rows trimmed before its first read are passed over, not "
                   "cursor_expired",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind, [](options& o) { o.change_retention.max_entries = 20; });
  engine& e = *t;
  make_markers(e);
  const auto ref = test::sref("a0", "u0", "mark");
  for (int i = 0; i < 60; ++i)
    test::append_ok(e, ref, test::make_event(json{{"n", i}}));
  // The oldest cursor the log serves now: what a read from before it names.
  auto oldest_now = [&] {
    auto head = MUST(e.head_cursor());
    auto r = scope_req(watch_scope::all);
    r.from = head.substr(0, head.rfind('-') + 1) + "0";
    auto expired = e.read_changes(r, 10);
    REQUIRE(expired.code() == errc::cursor_expired);
    REQUIRE(expired.err().oldest_cursor);
    return *expired.err().oldest_cursor;
  };

  // Every delivery thread the engine may run (16) held in a callback, so
  // the watch from the start cannot make its first read yet.
  std::promise<void> open;
  std::shared_future<void> gate = open.get_future().share();
  std::vector<std::unique_ptr<start_sink>> blocked;
  std::vector<std::unique_ptr<watch_handle>> blocked_handles;
  gate_guard guard{open}; // destroyed first: no handle waits on a closed gate
  for (int i = 0; i < 16; ++i) {
    blocked.push_back(std::make_unique<start_sink>());
    blocked.back()->gate = gate;
    blocked_handles.push_back(MUST(
      e.watch(scope_req(watch_scope::all), blocked.back()->handler(), blocked.back()->ender())));
  }
  test::append_ok(e, ref, test::make_event(json{{"wake", 1}}));
  auto inside = [&] {
    int n = 0;
    for (auto& b : blocked)
      n += b->inside.load();
    return n;
  };
  REQUIRE(test::eventually([&] { return inside() == 16; }, 20s));

  start_sink s;
  const auto req = from_start_req(scope_req(watch_scope::all));
  const auto oldest = oldest_now();
  auto h = MUST(e.watch(req, s.handler(), s.ender()));
  CHECK(h->cursor() == oldest);
  // The retention trims past that point while the watch waits for a thread.
  for (int i = 0; i < 60; ++i)
    test::append_ok(e, ref, test::make_event(json{{"m", i}}));
  CHECK(seq_of(oldest_now()) > seq_of(oldest));
  CHECK(s.snapshot().empty());
  CHECK(h->cursor() == oldest); // no read yet

  guard.open();
  // The retention goes on trimming, so the log now holds only the newest
  // changes: the watch's stream (every change, as it takes them all) is
  // consecutive, from past the trimmed rows to the marker, committed last,
  // and ends with the log as it is now.
  write_marker(e, req, 1);
  const auto want = whole_log(e, req);
  REQUIRE(!want.empty());
  REQUIRE(want.back().find("marker\":1}") != std::string::npos);
  CHECK(test::eventually(
    [&] {
      auto got = s.snapshot();
      return s.ended || (!got.empty() && got.back() == want.back());
    },
    20s));
  REQUIRE(!s.ended); // not cursor_expired
  const auto got = s.snapshot();
  REQUIRE(got.size() >= want.size());
  CHECK(std::equal(want.begin(), want.end(), got.end() - static_cast<std::ptrdiff_t>(want.size())));
  for (std::size_t i = 1; i < got.size(); ++i)
    CHECK(seq_of_line(got[i]) == seq_of_line(got[i - 1]) + 1);
  CHECK(seq_of_line(got.front()) > seq_of(oldest) + 1); // trimmed rows passed over
  CHECK(!s.backwards);
  CHECK(!s.ended);
}
