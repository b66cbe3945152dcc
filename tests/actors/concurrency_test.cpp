// SPDX-License-Identifier: Apache-2.0
// test-name: concurrency_test
// test-tiers: tsan write_map
// tests/actors/concurrency_test.cpp: real host threads against one engine, both
// stores. Concurrent appenders lose nothing and get one total order (README
// guarantee 2), concurrent creates of one id have one winner (C2), shared
// keys end at the last committed write (S4), reads are consistent snapshots
// (guarantee 4) and see acknowledged writes (guarantee 3), conditional appends
// (A7) give each version to exactly one writer.
//
// Worker threads never use doctest assertions: they record what went wrong
// in a `failures` and the test thread checks it after join().
#include "actors/engine_factory.hpp"
#include "support/store_probe.hpp"
#include "support/test_support.hpp"
#include "support/threads.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace agentstate;
using namespace agentstate::test;

#define STORES memory_store, lmdb_store

namespace {

/// Releases all waiting threads at once.
class start_gate {
public:
  void wait() const {
    while (!open_.load(std::memory_order_acquire))
      std::this_thread::yield();
  }
  void open() { open_.store(true, std::memory_order_release); }

private:
  std::atomic<bool> open_{false};
};

/// What worker threads saw go wrong (thread-safe).
class failures {
public:
  void add(std::string what) {
    count_.fetch_add(1);
    std::lock_guard<std::mutex> guard(mtx_);
    if (first_.size() < 10)
      first_.push_back(std::move(what));
  }
  int count() const { return count_.load(); }
  std::string summary() const {
    std::lock_guard<std::mutex> guard(mtx_);
    std::string out;
    for (const auto& s : first_)
      out += "\n  " + s;
    return out;
  }

private:
  std::atomic<int> count_{0};
  mutable std::mutex mtx_;
  std::vector<std::string> first_;
};

#define CHECK_NO_FAILURES(f)                                                                       \
  do {                                                                                             \
    INFO("failures in worker threads:", (f).summary());                                            \
    CHECK((f).count() == 0);                                                                       \
  } while (false)

/// What the callbacks of n async calls saw.
struct async_acks {
  explicit async_acks(int n)
    : version_of(static_cast<std::size_t>(n), 0), error_of(static_cast<std::size_t>(n)),
      calls(static_cast<std::size_t>(n)), pending(n) {}
  std::vector<std::uint64_t> version_of;
  std::vector<std::string> error_of;
  std::vector<std::atomic<int>> calls;
  std::mutex mtx;
  std::condition_variable cv;
  int pending;
};

/// Runs `fn` on a new thread; an exception becomes a failure instead of
/// std::terminate.
template <class F>
std::thread guarded(failures& f, F fn) {
  return std::thread([&f, fn = std::move(fn)]() mutable {
    try {
      fn();
    } catch (const std::exception& ex) {
      f.add(std::string("exception: ") + ex.what());
    } catch (...) {
      f.add("unknown exception");
    }
  });
}

void join_all(std::vector<std::thread>& ts) {
  for (auto& t : ts)
    t.join();
  ts.clear();
}

} // namespace

TEST_SUITE_BEGIN("concurrency");

TEST_CASE_TEMPLATE("64 threads appending to one session lose nothing", S, STORES) {
  auto t = open_engine(S::kind);
  auto& e = *t;
  auto ref = sref("app", "u", "hot");
  MUST(e.create_session(create_req(ref)));
  constexpr int threads = 64;
  constexpr int per_thread = 200;
  constexpr int total = threads * per_thread;

  struct ack {
    std::uint64_t version;
    std::string id;
  };
  std::vector<std::vector<ack>> acks(threads);
  failures f;
  start_gate gate;
  std::vector<std::thread> ts;
  for (int k = 0; k < threads; ++k) {
    ts.push_back(guarded(f, [&, k] {
      acks[k].reserve(per_thread);
      gate.wait();
      for (int i = 0; i < per_thread; ++i) {
        std::string id = "t" + std::to_string(k) + "-" + std::to_string(i);
        auto r =
          e.append_event(append_req(ref, make_event(json{{"t" + std::to_string(k), i}}, id)));
        if (!r.ok()) {
          f.add(id + ": " + describe(r));
          continue;
        }
        if (r->ev.id != id)
          f.add(id + ": acknowledged as " + r->ev.id);
        acks[k].push_back({r->version, id});
      }
    }));
  }
  gate.open();
  join_all(ts);
  CHECK_NO_FAILURES(f);

  auto s = get_existing(e, ref);
  CHECK(s.version == static_cast<std::uint64_t>(total));
  REQUIRE(s.events.size() == static_cast<std::size_t>(total));

  // Every id exactly once.
  std::map<std::string, int> seen;
  for (const auto& ev : s.events)
    ++seen[ev.id];
  CHECK(seen.size() == static_cast<std::size_t>(total));
  int dup = 0;
  for (const auto& [id, n] : seen)
    dup += n > 1;
  CHECK(dup == 0);

  // One total order: acknowledged versions are 1..total, each once, and the
  // event at position version-1 is the one acknowledged with that version.
  std::vector<std::uint64_t> versions;
  int misplaced = 0;
  int out_of_call_order = 0;
  for (int k = 0; k < threads; ++k) {
    std::uint64_t prev = 0;
    for (const auto& a : acks[k]) {
      versions.push_back(a.version);
      if (a.version == 0 || a.version > s.events.size() || s.events[a.version - 1].id != a.id)
        ++misplaced;
      if (a.version <= prev)
        ++out_of_call_order;
      prev = a.version;
    }
  }
  std::sort(versions.begin(), versions.end());
  std::vector<std::uint64_t> expected(total);
  std::iota(expected.begin(), expected.end(), std::uint64_t{1});
  CHECK(versions == expected);
  CHECK(misplaced == 0);
  CHECK(out_of_call_order == 0);

  // Each thread's own writes applied in its call order: its last value wins.
  for (int k = 0; k < threads; ++k)
    CHECK(s.state["t" + std::to_string(k)] == per_thread - 1);
  // Each thread's events appear in the order that thread appended them.
  std::vector<int> next(threads, 0);
  int order_violations = 0;
  for (const auto& ev : s.events) {
    auto dash = ev.id.find('-');
    int k = std::stoi(ev.id.substr(1, dash - 1));
    int i = std::stoi(ev.id.substr(dash + 1));
    if (i != next[k])
      ++order_violations;
    next[k] = i + 1;
  }
  CHECK(order_violations == 0);
}

TEST_CASE_TEMPLATE("16 concurrent creates of one id: exactly one succeeds", S, STORES) {
  auto t = open_engine(S::kind);
  auto& e = *t;
  constexpr int threads = 16;
  constexpr int rounds = 10;
  for (int round = 0; round < rounds; ++round) {
    INFO("round ", round);
    const std::string id = "race-" + std::to_string(round);
    std::vector<errc> codes(threads, errc::internal);
    std::vector<std::string> messages(threads);
    start_gate gate;
    std::vector<std::thread> ts;
    for (int k = 0; k < threads; ++k) {
      ts.emplace_back([&, k] {
        gate.wait();
        // Some spell the id with surrounding blanks: the trimmed id counts.
        std::string spelled = (k % 3 == 0) ? " " + id + " " : id;
        auto r = e.create_session(create_req("app", "u", spelled, json{{"winner", k}}));
        codes[k] = r.code();
        messages[k] = describe(r);
      });
    }
    gate.open();
    join_all(ts);

    int ok = 0, exists = 0, winner = -1;
    std::string others;
    for (int k = 0; k < threads; ++k) {
      if (codes[k] == errc::ok) {
        ++ok;
        winner = k;
      } else if (codes[k] == errc::already_exists) {
        ++exists;
      } else {
        others += " [" + std::to_string(k) + "] " + messages[k];
      }
    }
    INFO("unexpected results:", others);
    CHECK(ok == 1);
    CHECK(exists == threads - 1);
    auto s = get_existing(e, sref("app", "u", id));
    CHECK(s.version == 0);
    CHECK(s.state["winner"] == winner);
  }
  CHECK(list_all(e, "app").size() == rounds);
}

TEST_CASE_TEMPLATE("the last committed write to a shared key wins", S, STORES) {
  auto t = open_engine(S::kind);
  auto& e = *t;
  constexpr int sessions = 100;
  std::vector<session_ref> refs;
  for (int i = 0; i < sessions; ++i) {
    refs.push_back(sref("app", "u", "s" + std::to_string(i)));
    MUST(e.create_session(create_req(refs.back())));
  }
  std::string mismatch; // the first disagreeing view, for the failure message
  auto every_session_shows = [&](const std::string& key, const json& want) {
    int wrong = 0;
    mismatch.clear();
    for (const auto& r : refs) {
      auto s = get_existing(e, r);
      if (!has_key(s.state, key) || s.state[key] != want) {
        if (wrong++ == 0)
          mismatch = r.session_id + " shows " + key + " = " + s.state.value(key, json()).dump()
            + ", want " + want.dump();
      }
    }
    return wrong;
  };

  SUBCASE("sequential writes from different sessions") {
    for (int i = 0; i < sessions; ++i)
      append_ok(e, refs[i], make_event(json{{"user:x", i}, {"app:y", i}}));
    CHECK(user_state(e, "app", "u")["x"] == sessions - 1);
    CHECK(app_state(e, "app")["y"] == sessions - 1);
    CHECK(every_session_shows("user:x", sessions - 1) == 0);
    CHECK(every_session_shows("app:y", sessions - 1) == 0);
  }

  SUBCASE("concurrent waves, each followed by one write alone") {
    constexpr int threads = 8;
    for (int wave = 0; wave < 3; ++wave) {
      INFO("wave ", wave);
      std::set<std::string> written;
      for (int i = 0; i < sessions; ++i)
        written.insert("w" + std::to_string(wave) + "-s" + std::to_string(i));
      failures f;
      start_gate gate;
      std::vector<std::thread> ts;
      for (int k = 0; k < threads; ++k) {
        ts.push_back(guarded(f, [&, k] {
          gate.wait();
          for (int i = k; i < sessions; i += threads) {
            std::string v = "w" + std::to_string(wave) + "-s" + std::to_string(i);
            auto r =
              e.append_event(append_req(refs[i], make_event(json{{"user:x", v}, {"app:y", v}})));
            if (!r.ok())
              f.add(v + ": " + describe(r));
          }
        }));
      }
      gate.open();
      join_all(ts);
      CHECK_NO_FAILURES(f);

      // Some written value won, and every view agrees on it.
      json ux = user_state(e, "app", "u")["x"];
      json ay = app_state(e, "app")["y"];
      REQUIRE(ux.is_string());
      REQUIRE(ay.is_string());
      CHECK(written.count(ux.get<std::string>()) == 1);
      CHECK(written.count(ay.get<std::string>()) == 1);
      CHECK_MESSAGE(every_session_shows("user:x", ux) == 0, mismatch);
      CHECK_MESSAGE(every_session_shows("app:y", ay) == 0, mismatch);

      // A write acknowledged after all others is the last committed one.
      std::string last = "final-" + std::to_string(wave);
      append_ok(e, refs[(wave * 37) % sessions],
                make_event(json{{"user:x", last}, {"app:y", last}}));
      CHECK(user_state(e, "app", "u")["x"] == last);
      CHECK(app_state(e, "app")["y"] == last);
      CHECK(every_session_shows("user:x", last) == 0);
      CHECK(every_session_shows("app:y", last) == 0);
    }
  }
}

TEST_CASE_TEMPLATE("readers see consistent snapshots while writers append", S, STORES) {
  auto t = open_engine(S::kind);
  auto& e = *t;
  constexpr int writers = 2;
  constexpr int readers = 3;
  constexpr int per_writer = 600;
  std::vector<session_ref> refs;
  std::vector<std::string> users;
  for (int w = 0; w < writers; ++w) {
    users.push_back("user" + std::to_string(w));
    refs.push_back(sref("app", users.back(), "s"));
    MUST(e.create_session(create_req(refs.back())));
  }
  std::atomic<int> writers_done{0};
  std::vector<std::atomic<int>> progress(writers); // appends acknowledged
  // Readers stop at this deadline even if writers are not done, so that a
  // writer starved by readers is a failure rather than a hang. Normal runs
  // take 0.5-3 s; a starved writer manages a few dozen appends, while a
  // writer on a slow or busy machine (TSan, a loaded CI host) is past half
  // its appends by then: only the former fails.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(12);
  std::atomic<long> reads{0};
  failures f;
  start_gate gate;
  std::vector<std::thread> ts;

  for (int w = 0; w < writers; ++w) {
    ts.push_back(guarded(f, [&, w] {
      struct done_guard {
        std::atomic<int>& n;
        ~done_guard() { n.fetch_add(1); } // also when the writer throws
      } done{writers_done};
      gate.wait();
      const auto& ref = refs[w];
      const std::string app_key = "n_" + users[w];
      for (int i = 1; i <= per_writer; ++i) {
        auto r =
          e.append_event(append_req(ref,
                                    make_event(json{{"n", i}, {"user:n", i}, {"app:" + app_key, i}},
                                               "w" + std::to_string(w) + "-" + std::to_string(i))));
        if (!r.ok()) {
          f.add("writer append: " + describe(r));
          break;
        }
        progress[w].store(i);
        if (r->version != static_cast<std::uint64_t>(i))
          f.add("writer " + std::to_string(w) + ": append " + std::to_string(i)
                + " acknowledged with version " + std::to_string(r->version));
        if (i % 50 == 0) {
          // Read-your-writes through every read path.
          auto g = e.get_session(get_req(ref, 1));
          if (!g.ok() || !g.value() || g.value()->version < static_cast<std::uint64_t>(i))
            f.add("writer read-your-writes: session at " + std::to_string(i) + " -> "
                  + (g.ok() && g.value() ? std::to_string(g.value()->version) : describe(g)));
          auto us = e.get_user_state("app", users[w]);
          if (!us.ok() || us.value().value("n", json()) != json(i))
            f.add("writer read-your-writes: user state at " + std::to_string(i) + " -> "
                  + (us.ok() ? us.value().dump() : describe(us)));
          auto as = e.get_app_state("app");
          if (!as.ok() || as.value().value(app_key, json()) != json(i))
            f.add("writer read-your-writes: app state " + app_key + " after append "
                  + std::to_string(i) + " -> "
                  + (as.ok() ? as.value().value(app_key, json()).dump() : describe(as)));
        }
      }
    }));
  }

  for (int rd = 0; rd < readers; ++rd) {
    ts.push_back(guarded(f, [&, rd] {
      gate.wait();
      std::vector<std::uint64_t> last_seen(writers, 0);
      long iter = 0;
      while (writers_done.load() < writers) {
        if (std::chrono::steady_clock::now() > deadline) {
          std::string p;
          bool starved = false;
          for (int w = 0; w < writers; ++w) {
            p += " " + std::to_string(progress[w].load()) + "/" + std::to_string(per_writer);
            starved = starved || progress[w].load() < per_writer / 2;
          }
          if (starved)
            f.add("reader " + std::to_string(rd)
                  + ": a writer is starved after 12 s of concurrent reads; progress:" + p);
          return;
        }
        ++iter;
        for (int w = 0; w < writers; ++w) {
          const bool full = iter % 50 == 0;
          auto g = e.get_session(full ? get_req(refs[w]) : get_req(refs[w], 5));
          reads.fetch_add(1);
          if (!g.ok() || !g.value()) {
            f.add("reader get_session: " + describe(g));
            return;
          }
          const session& s = *g.value();
          const std::string who = "reader " + std::to_string(rd) + " on " + users[w]
            + " at version " + std::to_string(s.version) + ": ";
          const std::uint64_t v = s.version;
          if (v < last_seen[w])
            f.add(who + "version went back from " + std::to_string(last_seen[w]));
          last_seen[w] = v;
          const std::size_t want_events = full ? v : std::min<std::uint64_t>(v, 5);
          if (s.events.size() != want_events) {
            f.add(who + std::to_string(s.events.size()) + " events");
            continue;
          }
          if (v == 0) {
            if (s.state.contains("n"))
              f.add(who + "state without events");
            continue;
          }
          // Session, user and app parts and the events are from one point.
          const json n = s.state.value("n", json());
          if (n != json(v))
            f.add(who + "state n = " + n.dump());
          if (s.state.value("user:n", json()) != json(v))
            f.add(who + "user:n = " + s.state.value("user:n", json()).dump());
          if (s.state.value("app:n_" + users[w], json()) != json(v))
            f.add(who + "app:n = " + s.state.value("app:n_" + users[w], json()).dump());
          for (std::size_t j = 0; j < s.events.size(); ++j) {
            const std::uint64_t version_of_j = v - s.events.size() + 1 + j;
            const std::string want_id =
              "w" + std::to_string(w) + "-" + std::to_string(version_of_j);
            if (s.events[j].id != want_id) {
              f.add(who + "event " + std::to_string(j) + " is " + s.events[j].id + ", want "
                    + want_id);
              break;
            }
          }
        }
      }
    }));
  }
  gate.open();
  join_all(ts);
  CHECK_NO_FAILURES(f);
  CHECK(reads.load() > 0);
  for (int w = 0; w < writers; ++w) {
    auto s = get_existing(e, refs[w]);
    CHECK(s.version == per_writer);
    CHECK(s.state["n"] == per_writer);
    CHECK(s.state["user:n"] == per_writer);
  }
}

TEST_CASE_TEMPLATE("concurrent conditional appends win each version once", S, STORES) {
  auto t = open_engine(S::kind);
  auto& e = *t;
  auto ref = sref("app", "u", "cas");
  MUST(e.create_session(create_req(ref)));
  constexpr int threads = 8;
  constexpr int wins_each = 40;
  std::vector<std::vector<std::uint64_t>> won(threads);
  std::atomic<long> conflicts{0};
  failures f;
  start_gate gate;
  std::vector<std::thread> ts;
  for (int k = 0; k < threads; ++k) {
    ts.push_back(guarded(f, [&, k] {
      gate.wait();
      std::uint64_t expected = 0;
      int attempts = 0;
      while (static_cast<int>(won[k].size()) < wins_each) {
        if (++attempts > 200000) {
          f.add("thread " + std::to_string(k) + " starved");
          return;
        }
        std::string id = "k" + std::to_string(k) + "-" + std::to_string(attempts);
        auto r = e.append_event(append_req(ref, make_event(json{{"last", k}}, id), expected));
        if (r.ok()) {
          if (r->version != expected + 1)
            f.add(id + ": expected " + std::to_string(expected) + " acknowledged as version "
                  + std::to_string(r->version));
          won[k].push_back(r->version);
          expected = r->version;
        } else if (r.code() == errc::version_conflict) {
          conflicts.fetch_add(1);
          if (!r.err().current_version) {
            f.add(id + ": version_conflict without current_version");
            return;
          }
          if (*r.err().current_version == expected) {
            f.add(id + ": version_conflict although current_version == expected");
            return;
          }
          expected = *r.err().current_version;
        } else {
          f.add(id + ": " + describe(r));
          return;
        }
      }
    }));
  }
  gate.open();
  join_all(ts);
  CHECK_NO_FAILURES(f);

  std::vector<std::uint64_t> all;
  for (const auto& w : won)
    all.insert(all.end(), w.begin(), w.end());
  std::sort(all.begin(), all.end());
  std::vector<std::uint64_t> expected(threads * wins_each);
  std::iota(expected.begin(), expected.end(), std::uint64_t{1});
  CHECK(all == expected);
  auto s = get_existing(e, ref);
  CHECK(s.version == threads * wins_each);
  CHECK(s.events.size() == threads * wins_each);
  MESSAGE("conflicts: ", conflicts.load());
}

TEST_CASE_TEMPLATE("async appends from one thread apply in call order", S, STORES) {
  auto t = open_engine(S::kind);
  auto& e = *t;
  auto ref = sref("app", "u", "async");
  MUST(e.create_session(create_req(ref)));
  constexpr int n = 2000;
  // Shared with the callbacks by shared_ptr: if the wait below times out the
  // callbacks may still run after this scope is gone.
  auto sh = std::make_shared<async_acks>(n);
  for (int i = 0; i < n; ++i) {
    e.append_event(append_req(ref, make_event(json{{"i", i}}, "a" + std::to_string(i))),
                   [sh, i](result<append_result> r) {
                     if (sh->calls[i].fetch_add(1) != 0)
                       return; // counted as an extra call below
                     if (r.ok())
                       sh->version_of[i] = r->version;
                     else
                       sh->error_of[i] = describe(r);
                     std::lock_guard<std::mutex> guard(sh->mtx);
                     if (--sh->pending == 0)
                       sh->cv.notify_all();
                   });
  }
  {
    std::unique_lock<std::mutex> lock(sh->mtx);
    REQUIRE(sh->cv.wait_for(lock, std::chrono::seconds(30), [&] { return sh->pending == 0; }));
  }
  int wrong_version = 0, errors = 0, extra_calls = 0;
  std::string first_error;
  for (int i = 0; i < n; ++i) {
    if (!sh->error_of[i].empty()) {
      ++errors;
      if (first_error.empty())
        first_error = sh->error_of[i];
    } else if (sh->version_of[i] != static_cast<std::uint64_t>(i + 1)) {
      ++wrong_version;
    }
    extra_calls += sh->calls[i].load() != 1;
  }
  INFO("first error: ", first_error);
  CHECK(errors == 0);
  CHECK(wrong_version == 0);
  CHECK(extra_calls == 0);
  auto s = get_existing(e, ref);
  CHECK(s.version == n);
  CHECK(s.state["i"] == n - 1);
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i)
    ids.push_back("a" + std::to_string(i));
  CHECK(event_ids(s.events) == ids);
}

TEST_CASE_TEMPLATE("blocking callers each get their own answer whatever spin_wait is", S, STORES) {
  // One waiter per engine polls (up to spin_wait), the others sleep; with a
  // 10 ms budget the poller catches its answer while polling, with 0 nobody
  // polls. A crossed or lost answer shows as a wrong id or version, or a hang.
  using std::chrono::microseconds;
  for (auto spin : {microseconds(0), microseconds(50), microseconds(10'000)}) {
    CAPTURE(spin.count());
    auto t = open_engine(S::kind, [spin](options& o) { o.spin_wait = spin; });
    auto& e = *t;
    constexpr int threads = 8;
    constexpr int per_thread = 100;
    failures f;
    start_gate gate;
    std::vector<std::thread> ts;
    for (int k = 0; k < threads; ++k) {
      ts.push_back(guarded(f, [&, k] {
        auto ref = sref("app", "u" + std::to_string(k % 2), "s" + std::to_string(k));
        if (auto c = e.create_session(create_req(ref)); !c.ok())
          return f.add("create " + ref.session_id + ": " + describe(c));
        gate.wait();
        for (int i = 0; i < per_thread; ++i) {
          auto id = ref.session_id + "-" + std::to_string(i);
          auto r = e.append_event(append_req(ref, make_event(json{{"i", i}}, id)));
          if (!r.ok())
            f.add(id + ": " + describe(r));
          else if (r->ev.id != id || r->version != static_cast<std::uint64_t>(i + 1))
            f.add(id + ": answered with " + r->ev.id + " at version " + std::to_string(r->version));
          auto g = e.get_user_state("app", "u" + std::to_string(k % 2));
          if (!g.ok())
            f.add(id + ": get_user_state: " + describe(g));
        }
      }));
    }
    gate.open();
    join_all(ts);
    CHECK_NO_FAILURES(f);
    for (int k = 0; k < threads; ++k)
      CHECK(
        get_existing(e, sref("app", "u" + std::to_string(k % 2), "s" + std::to_string(k))).version
        == per_thread);
  }
}

TEST_CASE_TEMPLATE("bursts after idle pauses are all answered, with workers parked or polling", S,
                   STORES) {
  // Between bursts every idle CAF worker parks (the pauses outlast
  // spin_wait); a burst must wake enough of them. With more workers than
  // cores and many sessions, a lost or missing wake-up leaves an actor
  // queued with nobody to run it, which shows as a timeout here.
  using std::chrono::microseconds;
  struct setting {
    microseconds spin;
    std::size_t threads;
  };
  for (auto c : {setting{microseconds(0), 2}, setting{microseconds(50), 1},
                 setting{microseconds(50), 4}, setting{microseconds(2'000), 3}}) {
    CAPTURE(c.spin.count());
    CAPTURE(c.threads);
    auto t = open_engine(S::kind, [c](options& o) {
      o.spin_wait = c.spin;
      o.threads = c.threads;
      o.scheduler = scheduler_policy::sharing;
    });
    auto& e = *t;
    constexpr int sessions = 24, bursts = 12;
    for (int k = 0; k < sessions; ++k)
      MUST(e.create_session(create_req(sref("app", "u", "b" + std::to_string(k)))));
    auto sh = std::make_shared<async_acks>(sessions * bursts);
    for (int b = 0; b < bursts; ++b) {
      // Every poller has given up and parked before the burst. CAF's own
      // work_sharing (spin_wait 0) parks idle workers at once and counts
      // none: there every other thread of the process is blocked instead.
      if (c.spin.count() > 0)
        REQUIRE(eventually([&] { return detail::engine_factory::parked_workers(e) == c.threads; }));
      else
        REQUIRE(eventually([] { return test::other_threads_blocked(); }));
      for (int k = 0; k < sessions; ++k) {
        int i = b * sessions + k;
        e.append_event(append_req(sref("app", "u", "b" + std::to_string(k)),
                                  make_event(json{{"b", b}}, "e" + std::to_string(i))),
                       [sh, i](result<append_result> r) {
                         if (sh->calls[i].fetch_add(1) != 0)
                           return;
                         if (r.ok())
                           sh->version_of[i] = r->version;
                         else
                           sh->error_of[i] = describe(r);
                         std::lock_guard<std::mutex> guard(sh->mtx);
                         --sh->pending;
                         sh->cv.notify_all();
                       });
      }
      std::unique_lock<std::mutex> lock(sh->mtx);
      // Each burst is answered before the next pause begins.
      REQUIRE(sh->cv.wait_for(lock, std::chrono::seconds(30),
                              [&] { return sh->pending == (bursts - b - 1) * sessions; }));
    }
    for (int i = 0; i < sessions * bursts; ++i) {
      CAPTURE(i);
      CHECK(sh->error_of[i].empty());
      CHECK(sh->version_of[i] == static_cast<std::uint64_t>(i / sessions + 1));
      CHECK(sh->calls[i].load() == 1);
    }
  }
}

TEST_CASE("an idle engine stops polling: its threads sleep once spin_wait has passed") {
  // Every poller gives up after spin_wait (10 ms here, the most allowed): an
  // engine left idle must then have every scheduler worker parked on its
  // condition variable, none polling. A worker that polled without end
  // would never count as parked (the bounded poll below then fails).
  constexpr std::size_t workers = 3;
  auto t = open_engine(store_kind::lmdb, [](options& o) {
    o.spin_wait = std::chrono::milliseconds(10);
    o.scheduler = scheduler_policy::sharing;
    o.threads = workers;
  });
  auto& e = *t;
  auto ref = sref("app", "u", "idle");
  MUST(e.create_session(create_req(ref)));
  for (int i = 0; i < 20; ++i)
    MUST(e.append_event(append_req(ref, make_event(json{{"i", i}}, "i" + std::to_string(i)))));
  CHECK(eventually([&] { return detail::engine_factory::parked_workers(e) == workers; }));
  // The store writer polls only while deleted rows wait to be purged; none do.
  CHECK_FALSE(purging(e));
  CHECK(get_existing(e, ref).version == 20);
}

TEST_CASE("spin_wait outside 0..10 ms is refused at open") {
  for (auto spin : {std::chrono::microseconds(-1), std::chrono::microseconds(10'001)}) {
    CAPTURE(spin.count());
    auto o = make_options(store_kind::memory, "");
    o.spin_wait = spin;
    auto r = engine::open(o);
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == errc::invalid_argument);
  }
}

TEST_SUITE_END();
