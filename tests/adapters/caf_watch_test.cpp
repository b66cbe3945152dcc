// SPDX-License-Identifier: Apache-2.0
// watch_to_actor (agentstate/caf.hpp) on an LMDB store: an event_based actor
// receives a scope's changes in commit order exactly once, one unanswered
// batch at a time, while threads append; its quitting ends the watch and
// its relay; cancel (also from the actor's own handler) stops delivery with
// a watch_end whose cursor resumes; close sends watch_end(closing); an
// error answer ends the watch, a value answer lets the next batch go.
// test-tiers: tsan
#include <doctest/doctest.h>

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <thread>

#include "agentstate/caf.hpp"
#include "support/change_feed.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using test::describe_change;
using test::scope_req;
using test::seq_of;
using namespace std::chrono_literals;

namespace {

using release_atom = caf::atom_constant<caf::atom("release")>;

// What one observer actor received, read by the test's thread.
struct record {
  std::mutex mtx;
  std::vector<std::string> got; // described changes, in arrival order
  std::string last_cursor;
  int batches = 0;
  bool overlap = false; // a batch came while the previous one was unanswered
  bool backwards = false;
  bool one_sender = true; // every message came from the same relay
  caf::actor_addr sender;
  std::optional<watch_end> end;
  int after_end = 0; // batches that came after the watch_end

  std::vector<std::string> snapshot() {
    std::lock_guard<std::mutex> lk(mtx);
    return got;
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lk(mtx);
    return got.size();
  }
  std::optional<watch_end> ended() {
    std::lock_guard<std::mutex> lk(mtx);
    return end;
  }
  void note_sender(const caf::actor_addr& a) {
    if (!sender)
      sender = a;
    one_sender = one_sender && sender == a;
  }
};

struct observer_state {
  std::optional<caf::response_promise> pending; // the batch not answered yet
  int seen = 0;
};
using observer_actor = caf::stateful_actor<observer_state>;

// Records every batch. With `hold`, answers each batch `hold` later through a
// response promise (the feed must wait); after `quit_after` batches (0:
// never) it quits; `on_batch` runs inside the handler (e.g. a cancel).
caf::behavior observer(observer_actor* self, std::shared_ptr<record> rec,
                       std::chrono::milliseconds hold, int quit_after,
                       std::function<void()> on_batch) {
  return {
    [=](change_page& p) {
      {
        std::lock_guard<std::mutex> lk(rec->mtx);
        rec->note_sender(caf::actor_cast<caf::actor_addr>(self->current_sender()));
        rec->overlap = rec->overlap || self->state.pending.has_value();
        rec->after_end += rec->end.has_value();
        ++rec->batches;
        for (auto& c : p.changes) {
          if (!rec->last_cursor.empty() && seq_of(c.cursor) <= seq_of(rec->last_cursor))
            rec->backwards = true;
          rec->last_cursor = c.cursor;
          rec->got.push_back(describe_change(c, true));
        }
        if (!rec->last_cursor.empty() && seq_of(p.cursor) < seq_of(rec->last_cursor))
          rec->backwards = true;
        rec->last_cursor = p.cursor;
      }
      if (on_batch)
        on_batch();
      if (hold.count() > 0) {
        self->state.pending = self->make_response_promise();
        self->delayed_send(self, hold, release_atom::value);
      }
      if (quit_after > 0 && ++self->state.seen >= quit_after)
        self->quit();
    },
    [=](release_atom) {
      if (self->state.pending) {
        auto rp = std::move(*self->state.pending);
        self->state.pending.reset();
        rp.deliver(caf::unit);
      }
    },
    [=](watch_end& e) {
      std::lock_guard<std::mutex> lk(rec->mtx);
      rec->note_sender(caf::actor_cast<caf::actor_addr>(self->current_sender()));
      rec->end = e;
    },
  };
}

// The log read back for `req` after `from` (up to `to`, when given), described.
std::vector<std::string> logged(engine& e, watch_request req, const std::string& from,
                                const std::string& to = {}) {
  std::vector<std::string> out;
  req.from = from;
  for (auto& c : test::read_feed(e, std::move(req)))
    if (to.empty() || seq_of(c.cursor) <= seq_of(to))
      out.push_back(describe_change(c, true));
  return out;
}

// Appends from `threads` threads to sessions of apps a0 and a1.
void write_load(engine& e, int threads, int per_thread, const std::string& tag) {
  std::vector<std::thread> ts;
  for (int w = 0; w < threads; ++w)
    ts.emplace_back([&e, w, per_thread, tag] {
      auto ref =
        test::sref("a" + std::to_string(w % 2), "u" + std::to_string(w), tag + std::to_string(w));
      REQUIRE(e.create_session(test::create_req(ref, json{{"app:seen", w}})).ok());
      for (int i = 0; i < per_thread; ++i) {
        json delta{{"k", i}};
        if (i % 4 == 0)
          delta["app:price"] = i;
        REQUIRE(e.append_event(test::append_req(ref, test::make_event(delta))).ok());
      }
    });
  for (auto& t : ts)
    t.join();
}

struct caf_host {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf_host() {
    add_error_category(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

} // namespace

TEST_CASE("caf watch: an actor receives a scope's every change in commit order exactly once, "
          "one unanswered batch at a time, while threads append") {
  auto t = test::open_engine(test::store_kind::lmdb);
  caf_host host;
  auto start = MUST(t->head_cursor());
  // Two scopes: a0's sessions whole (answered at once), and app: keys of
  // every app (answered 2 ms later through a response promise).
  auto whole = scope_req(watch_scope::app, "a0", {}, {}, true);
  auto prices = scope_req(watch_scope::all, {}, {}, {}, false, "app:");
  auto rec_whole = std::make_shared<record>();
  auto rec_prices = std::make_shared<record>();
  auto obs_whole = host.sys->spawn(observer, rec_whole, 0ms, 0, std::function<void()>{});
  auto obs_prices = host.sys->spawn(observer, rec_prices, 2ms, 0, std::function<void()>{});
  whole.from = start;
  prices.from = start;
  auto h_whole = MUST(watch_to_actor(*t, whole, obs_whole));
  auto h_prices = MUST(watch_to_actor(*t, prices, obs_prices));
  write_load(*t, 4, 150, "s");
  auto want_whole = logged(*t, whole, start);
  auto want_prices = logged(*t, prices, start);
  REQUIRE(want_whole.size() == 2 * 151);
  REQUIRE(want_prices.size() == 4 + 4 * 38);
  for (auto [rec, want] :
       {std::pair{rec_whole.get(), &want_whole}, std::pair{rec_prices.get(), &want_prices}}) {
    CHECK(test::eventually([&] { return rec->size() >= want->size(); }, 20s));
    CHECK(rec->snapshot() == *want);
    std::lock_guard<std::mutex> lk(rec->mtx);
    CHECK(!rec->overlap);
    CHECK(!rec->backwards);
    CHECK(rec->one_sender);
  }
  {
    std::lock_guard<std::mutex> lk(rec_prices->mtx);
    MESSAGE("held batches: " << rec_prices->batches << " for " << want_prices.size() << " changes");
  }
  h_whole->cancel();
  h_prices.reset(); // cancels
  for (auto* rec : {rec_whole.get(), rec_prices.get()}) {
    CHECK(test::eventually([&] { return rec->ended().has_value(); }));
    CHECK(rec->ended()->reason == watch_end_reason::cancelled);
  }
  caf::anon_send_exit(obs_whole, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(obs_prices, caf::exit_reason::user_shutdown);
  CHECK(test::eventually([&] { return host.sys->registry().running() == 0; }));
}

TEST_CASE("caf watch: the destination quitting ends the watch and its relay") {
  auto t = test::open_engine(test::store_kind::lmdb);
  caf_host host;
  auto rec = std::make_shared<record>();
  // Quits inside its second batch's handler (a batch in flight).
  auto obs = host.sys->spawn(observer, rec, 0ms, 2, std::function<void()>{});
  auto h = MUST(watch_to_actor(*t, scope_req(watch_scope::all), obs));
  CHECK(host.sys->registry().running() == 2); // the observer and the relay
  MUST(t->create_session(test::create_req("x", "u", "s")));
  CHECK(test::eventually([&] {
    std::lock_guard<std::mutex> lk(rec->mtx);
    return rec->batches >= 1;
  }));
  // Writes go on while the observer quits: the relay sees it go, cancels
  // the watch and ends with it.
  write_load(*t, 2, 40, "q");
  CHECK(test::eventually([&] { return host.sys->registry().running() == 0; }));
  {
    std::lock_guard<std::mutex> lk(rec->mtx);
    CHECK(rec->batches == 2);
    CHECK(!rec->end); // nobody to tell
  }
  // The watch stopped: its cursor stays while the log grows.
  auto at = h->cursor();
  write_load(*t, 1, 10, "r");
  CHECK(h->cursor() == at);
  CHECK(seq_of(MUST(t->head_cursor())) > seq_of(at));
  h.reset(); // the watch already ended: a no-op

  // A destination that is gone before the watch starts: the watch ends at once.
  auto gone = host.sys->spawn(observer, rec, 0ms, 0, std::function<void()>{});
  caf::anon_send_exit(gone, caf::exit_reason::user_shutdown);
  CHECK(test::eventually([&] { return host.sys->registry().running() == 0; }));
  auto h2 = MUST(watch_to_actor(*t, scope_req(watch_scope::all), gone));
  CHECK(test::eventually([&] { return host.sys->registry().running() == 0; }));
  write_load(*t, 1, 5, "g");
  {
    std::lock_guard<std::mutex> lk(rec->mtx);
    CHECK(rec->batches == 2);
  }
  CHECK(watch_to_actor(*t, scope_req(watch_scope::all), caf::actor{}).code()
        == errc::invalid_argument);
  CHECK(watch_to_actor(*t, scope_req(watch_scope::user, "a0"), gone).code()
        == errc::invalid_argument);
}

TEST_CASE("caf watch: cancel, from the test's thread or from the actor's own handler, stops "
          "delivery; the watch_end's cursor resumes with no gap") {
  auto t = test::open_engine(test::store_kind::lmdb);
  caf_host host;
  auto start = MUST(t->head_cursor());
  auto req = scope_req(watch_scope::all);
  req.from = start;
  auto rec = std::make_shared<record>();
  auto obs = host.sys->spawn(observer, rec, 1ms, 0, std::function<void()>{});
  auto h = MUST(watch_to_actor(*t, req, obs));
  std::atomic<bool> writing{true};
  std::thread writer([&] {
    write_load(*t, 3, 100, "c");
    writing = false;
  });
  CHECK(test::eventually([&] { return rec->size() >= 20; }));
  h->cancel(); // while writes go on
  CHECK(test::eventually([&] { return rec->ended().has_value(); }));
  auto end = *rec->ended();
  CHECK(end.reason == watch_end_reason::cancelled);
  CHECK(end.resume_from == h->cursor());
  writer.join();
  // What it got is the log up to its end, exactly; nothing came after.
  auto got = rec->snapshot();
  CHECK(got == logged(*t, req, start, end.resume_from));
  CHECK(rec->after_end == 0);
  // The first watch may have delivered every change before its cancel (a
  // loaded machine can run the writer to its end first): the second needs
  // changes after its start to deliver a first batch, in which it cancels.
  write_load(*t, 1, 10, "d");

  // A second watch from there, cancelled by the actor inside its first batch.
  auto rec2 = std::make_shared<record>();
  auto self_handle = std::make_shared<std::unique_ptr<watch_handle>>();
  auto handle_mtx = std::make_shared<std::mutex>();
  auto cancel_self = [self_handle, handle_mtx] {
    std::lock_guard<std::mutex> lk(*handle_mtx);
    if (*self_handle)
      (*self_handle)->cancel(); // returns without waiting for this actor
  };
  auto obs2 = host.sys->spawn(observer, rec2, 0ms, 0, std::function<void()>(cancel_self));
  auto req2 = req;
  req2.from = end.resume_from;
  {
    std::lock_guard<std::mutex> lk(*handle_mtx);
    *self_handle = MUST(watch_to_actor(*t, req2, obs2));
  }
  CHECK(test::eventually([&] { return rec2->ended().has_value(); }));
  auto end2 = *rec2->ended();
  CHECK(end2.reason == watch_end_reason::cancelled);
  auto got2 = rec2->snapshot();
  CHECK(!got2.empty());
  CHECK(got2 == logged(*t, req2, end.resume_from, end2.resume_from));
  // The rest of the log, after end2, by a third watch: the three together
  // are the log.
  auto rec3 = std::make_shared<record>();
  auto obs3 = host.sys->spawn(observer, rec3, 0ms, 0, std::function<void()>{});
  auto req3 = req;
  req3.from = end2.resume_from;
  auto h3 = MUST(watch_to_actor(*t, req3, obs3));
  auto all = logged(*t, req, start);
  got.insert(got.end(), got2.begin(), got2.end());
  CHECK(test::eventually([&] { return got.size() + rec3->size() >= all.size(); }, 20s));
  auto got3 = rec3->snapshot();
  got.insert(got.end(), got3.begin(), got3.end());
  CHECK(got == all);
  {
    std::lock_guard<std::mutex> lk(rec2->mtx);
    CHECK(rec2->after_end == 0);
    CHECK(rec2->batches >= 1); // a batch sent before the cancel returned may follow
  }
  h3.reset();
  {
    std::lock_guard<std::mutex> lk(*handle_mtx);
    self_handle->reset();
  }
  for (auto& a : {obs, obs2, obs3})
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  CHECK(test::eventually([&] { return host.sys->registry().running() == 0; }));
}

TEST_CASE("caf watch: closing the engine sends watch_end(closing) after every batch; an actor "
          "without a change_page handler ends its watch") {
  auto t = test::open_engine(test::store_kind::lmdb);
  caf_host host;
  auto start = MUST(t->head_cursor());
  auto req = scope_req(watch_scope::app, "a1", {}, {}, true);
  req.from = start;
  auto rec = std::make_shared<record>();
  auto obs = host.sys->spawn(observer, rec, 0ms, 0, std::function<void()>{});
  auto h = MUST(watch_to_actor(*t, req, obs));

  // An actor that only takes watch_end: its first batch is answered with
  // unexpected_message, which cancels its watch.
  auto refused = std::make_shared<std::optional<watch_end>>();
  auto refused_mtx = std::make_shared<std::mutex>();
  auto deaf =
    host.sys->spawn([refused, refused_mtx](caf::event_based_actor* self) -> caf::behavior {
      self->set_default_handler(caf::drop);
      return {[refused, refused_mtx](watch_end& e) {
        std::lock_guard<std::mutex> lk(*refused_mtx);
        *refused = e;
      }};
    });
  auto h_deaf = MUST(watch_to_actor(*t, scope_req(watch_scope::all), deaf));

  write_load(*t, 2, 30, "z");
  auto want = logged(*t, req, start);
  REQUIRE(want.size() == 31);
  CHECK(test::eventually([&] { return rec->size() >= want.size(); }));
  CHECK(test::eventually([&] {
    std::lock_guard<std::mutex> lk(*refused_mtx);
    return refused->has_value();
  }));
  {
    std::lock_guard<std::mutex> lk(*refused_mtx);
    CHECK((*refused)->reason == watch_end_reason::cancelled);
  }
  MUST(t->close());
  CHECK(test::eventually([&] { return rec->ended().has_value(); }));
  auto end = *rec->ended();
  CHECK(end.reason == watch_end_reason::closing);
  CHECK(!end.resume_from.empty());
  CHECK(rec->snapshot() == want);
  CHECK(rec->after_end == 0);
  h.reset();
  h_deaf.reset();
  caf::anon_send_exit(obs, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(deaf, caf::exit_reason::user_shutdown);
  CHECK(test::eventually([&] { return host.sys->registry().running() == 0; }));
}

TEST_CASE("caf watch: an answer with a value lets the next batch go, as an empty one does") {
  auto t = test::open_engine(test::store_kind::lmdb);
  caf_host host;
  auto got = std::make_shared<std::atomic<int>>(0);
  auto counter = host.sys->spawn([got](caf::event_based_actor*) -> caf::behavior {
    return {[got](change_page& p) -> int { return *got += int(p.changes.size()); },
            [](watch_end&) {}};
  });
  auto h = MUST(watch_to_actor(*t, scope_req(watch_scope::all), counter));
  for (int i = 1; i <= 3; ++i) { // each batch only after the previous one was answered
    MUST(t->create_session(test::create_req("v", "u", "s" + std::to_string(i))));
    CHECK(test::eventually([&] { return got->load() == i; }));
  }
  h.reset();
  caf::anon_send_exit(counter, caf::exit_reason::user_shutdown);
  CHECK(test::eventually([&] { return host.sys->registry().running() == 0; }));
}
