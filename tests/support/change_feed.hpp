// SPDX-License-Identifier: Apache-2.0
// tests/support/change_feed.hpp: builders and views of the change feed for
// the feed's tests (watch requests, a change as one comparable line, a
// cursor's sequence, a watch's sink).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <mutex>
#include <thread>
#include <string>
#include <utility>
#include <vector>

#include "agentstate/engine.hpp"
#include "support/test_support.hpp"

namespace agentstate::test {

inline watch_request scope_req(watch_scope s, std::string app = {}, std::string user = {},
                               std::string id = {}, bool sessions = false,
                               std::string prefix = {}) {
  watch_request r;
  r.scope = s;
  r.app_name = std::move(app);
  r.user_id = std::move(user);
  r.session_id = std::move(id);
  r.include_sessions = sessions;
  r.key_prefix = std::move(prefix);
  return r;
}

/// A change as one line: kind, identity, version, keys set and removed, the
/// event's id; with its cursor when `with_cursor`.
inline std::string describe_change(const change& c, bool with_cursor = false) {
  std::string s = (with_cursor ? c.cursor + " " : std::string()) + to_string(c.kind) + " "
    + c.app_name + "/" + c.user_id + "/" + c.session_id + " v" + std::to_string(c.version) + " "
    + c.state_delta.dump() + " -" + json(c.state_remove).dump();
  if (c.ev)
    s += " ev=" + c.ev->id;
  return s;
}

/// Every change of `req` after req.from (none: the oldest the log keeps) up
/// to the head, in pages of `page`, following the pages' cursors (a call
/// examines at most 65,536 rows). REQUIREs every read to succeed.
inline std::vector<change> read_feed(engine& e, watch_request req, std::size_t page = 1000) {
  std::vector<change> out;
  for (int guard = 0; guard < 100000; ++guard) {
    auto p = MUST(e.read_changes(req, page));
    for (auto& c : p.changes)
      out.push_back(std::move(c));
    REQUIRE(!p.cursor.empty());
    req.from = p.cursor;
    if (p.at_head && p.changes.empty())
      return out;
  }
  FAIL("read_changes never reached the head");
  return out;
}

/// A cursor's sequence number (the digits after its last '-').
inline std::uint64_t seq_of(const std::string& cursor) {
  return std::stoull(cursor.substr(cursor.rfind('-') + 1));
}

/// What one watch received: every change, checked as it arrives (cursors
/// only move forward, batches never overlap).
struct watch_sink {
  std::mutex mtx;
  std::vector<std::string> got;
  std::string last_cursor;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> batches{0};
  std::atomic<bool> ended{false};
  watch_end end;
  /// When set, every batch first waits until it is open (a callback blocked
  /// for as long as the test likes).
  std::shared_future<void> gate;
  std::size_t max_batch = 0;
  bool backwards = false;

  change_handler handler() {
    return [this](change_page p) {
      if (inside.fetch_add(1) != 0)
        overlaps.fetch_add(1);
      if (gate.valid())
        gate.wait();
      {
        std::lock_guard<std::mutex> lk(mtx);
        max_batch = std::max(max_batch, p.changes.size());
        for (auto& c : p.changes) {
          if (!last_cursor.empty() && seq_of(c.cursor) <= seq_of(last_cursor))
            backwards = true;
          last_cursor = c.cursor;
          got.push_back(describe_change(c, true));
        }
        if (!last_cursor.empty() && seq_of(p.cursor) < seq_of(last_cursor))
          backwards = true;
        last_cursor = p.cursor;
      }
      batches.fetch_add(1);
      inside.fetch_sub(1);
    };
  }
  end_handler ender() {
    return [this](const watch_end& e) {
      std::lock_guard<std::mutex> lk(mtx);
      end = e;
      ended = true;
    };
  }
  std::vector<std::string> snapshot() {
    std::lock_guard<std::mutex> lk(mtx);
    return got;
  }
  /// The largest batch so far (a batch may still be running).
  std::size_t largest_batch() {
    std::lock_guard<std::mutex> lk(mtx);
    return max_batch;
  }
};

/// Sets a watch_sink gate's promise once: by open(), or when it goes out of
/// scope (a test that fails early must not leave a callback blocked forever).
struct gate_opener {
  std::promise<void>& p;
  bool opened = false;
  void open() {
    if (!std::exchange(opened, true))
      p.set_value();
  }
  ~gate_opener() { open(); }
};

} // namespace agentstate::test
