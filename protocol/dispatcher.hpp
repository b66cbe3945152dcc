// SPDX-License-Identifier: Apache-2.0
// protocol/dispatcher.hpp: the ordering of one stream's requests (per-session
// chains, flush barriers, the in-flight cap) and the writing of their
// responses. Internal to agentstate_protocol.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "agentstate/engine.hpp"
#include "protocol/methods.hpp"
#include "protocol/responses.hpp"

namespace agentstate::protocol::detail {

/// Runs prepared requests through the engine: a per_session request after
/// every earlier one naming the same session has completed, a barrier after
/// every earlier request has completed, a free one at once. Each answered
/// request's response line goes to `write`, one call at a time.
///
/// Ownership: always held by shared_ptr (create with std::make_shared); every
/// pending engine callback holds one, so it outlives its rpc_session when a
/// callback is still returning as wait_idle() wakes up. Borrows the engine.
/// Thread safety: submit() from one thread (the stream's reader); answer(),
/// wait_idle() and in_flight() from any; completions arrive on engine threads.
class dispatcher : public std::enable_shared_from_this<dispatcher> {
public:
  /// `max_in_flight` 0 counts as 1. `write` as for rpc_session.
  dispatcher(engine& e, std::function<void(std::string)> write, std::size_t max_in_flight);

  /// Admits and starts (or queues) `p`; answers with `id` unless
  /// `notification`. Blocks while max_in_flight requests are outstanding.
  /// Throws only bad_alloc, before the request is admitted.
  void submit(json id, bool notification, prepared p);

  /// Writes the response line answering `id` with `o`. Never throws: a line
  /// that cannot be built or written is dropped.
  void answer(const json& id, const outcome& o);

  /// Blocks until every submitted request has completed and been answered.
  /// REQUIRES: not called from an engine callback.
  void wait_idle();

  /// Requests submitted and not yet completed.
  std::size_t in_flight() const;

private:
  struct task {
    std::uint64_t seq = 0;
    json id;                   ///< null for notifications
    bool notification = false; ///< run, never answered
    operation op;
  };

  // A session with a request running; `waiting` are the later ones, in order.
  struct chain {
    std::deque<task> waiting;
  };

  template <class Then>
  bool start(task& t, Then then);
  void run_chain(const std::string& key, task t);
  std::optional<task> next_in_chain(const std::string& key);
  void run_free(task t);
  void run_barrier(task t);
  std::vector<task> ready_barriers();
  void complete(std::uint64_t seq, bool barrier);

  engine& eng_;
  std::function<void(std::string)> write_;
  std::size_t max_in_flight_;

  std::mutex write_mtx_;

  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::size_t in_flight_ = 0;          ///< admitted, not yet completed
  std::uint64_t next_seq_ = 0;
  std::set<std::uint64_t> unfinished_; ///< seqs of admitted non-barrier requests
  std::deque<task> barriers_;          ///< flushes waiting for earlier requests
  std::unordered_map<std::string, chain> chains_;
};

} // namespace agentstate::protocol::detail
