// SPDX-License-Identifier: Apache-2.0
// server/counters.hpp: the network server's counters, shown under "server"
// in `stats` (docs/protocol.md). Internal to server/.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "agentstate/json.hpp"

namespace agentstate::server::detail {

/// Thread safety: every member from any thread; relaxed atomics (the values
/// are for monitoring, read without a common snapshot). The counters the I/O
/// threads bump per read and those the writers bump per response sit on
/// cache lines of their own, so neither side's updates evict the other's.
struct counters {
  // Bumped by the I/O threads as they read.
  alignas(64) std::atomic<std::uint64_t> requests{0}; ///< lines handed to the protocol
  std::atomic<std::uint64_t> bytes_in{0};
  // Bumped by whoever queues or writes responses (engine workers, I/O threads).
  alignas(64) std::atomic<std::uint64_t> bytes_out{0};
  std::atomic<std::uint64_t> queued_output_bytes{0}; ///< responses not yet written (gauge)
  alignas(64) std::atomic<std::uint64_t> connections_open{0};
  std::atomic<std::uint64_t> connections_total{0}; ///< accepted and served
  std::atomic<std::uint64_t> connections_refused{0}; ///< over --max-connections
  std::atomic<std::uint64_t> auth_failures{0};
  std::atomic<std::uint64_t> tls_handshake_failures{0};
  std::atomic<std::uint64_t> idle_timeouts{0};
  std::atomic<std::uint64_t> line_timeouts{0};
  std::atomic<std::uint64_t> auth_timeouts{0};
  std::atomic<std::uint64_t> paused_reads{0}; ///< times a connection stopped being read
  /// The most bytes of request lines in flight at once, all connections.
  std::atomic<std::uint64_t> in_flight_bytes_peak{0};

  void add(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) {
    c.fetch_add(n, std::memory_order_relaxed);
  }
  void sub(std::atomic<std::uint64_t>& c, std::uint64_t n) {
    c.fetch_sub(n, std::memory_order_relaxed);
  }
  /// c = max(c, v).
  void raise(std::atomic<std::uint64_t>& c, std::uint64_t v) {
    auto now = c.load(std::memory_order_relaxed);
    while (now < v && !c.compare_exchange_weak(now, v, std::memory_order_relaxed)) {
    }
  }

  void error(std::string_view kind) {
    std::lock_guard<std::mutex> guard(mtx_);
    auto it = errors_.find(kind);
    if (it == errors_.end())
      errors_.emplace(std::string(kind), 1);
    else
      ++it->second;
  }

  /// Every counter; `in_flight` is summed by the caller over live
  /// connections, `in_flight_bytes` is the bytes of their request lines.
  json to_json(std::uint64_t in_flight, std::uint64_t in_flight_bytes) const {
    auto get = [](const std::atomic<std::uint64_t>& c) {
      return c.load(std::memory_order_relaxed);
    };
    json errors = json::object();
    {
      std::lock_guard<std::mutex> guard(mtx_);
      for (const auto& [k, v] : errors_)
        errors[k] = v;
    }
    return json{{"connections_open", get(connections_open)},
                {"connections_total", get(connections_total)},
                {"connections_refused", get(connections_refused)},
                {"requests", get(requests)},
                {"errors", std::move(errors)},
                {"bytes_in", get(bytes_in)},
                {"bytes_out", get(bytes_out)},
                {"queued_output_bytes", get(queued_output_bytes)},
                {"in_flight", in_flight},
                {"in_flight_bytes", in_flight_bytes},
                {"in_flight_bytes_peak", get(in_flight_bytes_peak)},
                {"auth_failures", get(auth_failures)},
                {"tls_handshake_failures", get(tls_handshake_failures)},
                {"idle_timeouts", get(idle_timeouts)},
                {"line_timeouts", get(line_timeouts)},
                {"auth_timeouts", get(auth_timeouts)},
                {"paused_reads", get(paused_reads)}};
  }

private:
  mutable std::mutex mtx_;
  std::map<std::string, std::uint64_t, std::less<>> errors_;
};

} // namespace agentstate::server::detail
