// SPDX-License-Identifier: Apache-2.0
// store/fault_kv.hpp: a kv_store wrapper that fails chosen calls, for the
// fault-injection tests (the LevelDB "Env" idea). Failures are thrown before
// the inner store is touched, as kv_failure with the planned code, so they
// look to the engine exactly like LMDB's MDB_MAP_FULL (storage_full), EIO
// (io_error) or MDB_READERS_FULL (unavailable).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <condition_variable>
#include <mutex>

#include "store/kv.hpp"

namespace agentstate::store {

/// Which calls count towards `fail_at`.
enum class fault_target {
  writes, ///< begin_write, put, del, begin_nested, commit_nested, commit
  reads, ///< begin_read
};

/// Shared between a test and the wrapper. Thread-safe.
struct fault_plan {
  fault_target target = fault_target::writes;
  /// 1-based number of the counted call that fails first; 0 = never.
  std::uint64_t fail_at = 0;
  /// Fail only the call numbered fail_at (false), or every counted call from
  /// it on (true).
  bool forever = false;
  errc code = errc::io_error;

  std::atomic<std::uint64_t> calls{0}; ///< counted calls so far
  std::atomic<std::uint64_t> injected{0}; ///< failures thrown so far
  std::atomic<bool> disarmed{false}; ///< set to stop injecting

  /// While held (hold_writes() until release_writes()), every begin_write
  /// waits, before it takes the store's write transaction (so readers are
  /// not blocked): a test holds the store writer at the start of one commit,
  /// so that the writes sent meanwhile queue up for the next group commit.
  /// Independent of target and fail_at.
  void hold_writes();
  /// Ends the hold and wakes the held begin_write calls.
  void release_writes();
  /// begin_write calls waiting on the hold now.
  std::atomic<int> writes_held{0};

  /// Counts one call of `t`; throws kv_failure when it is planned to fail.
  void on_call(fault_target t, const char* what);
  /// Returns once the writes are not held.
  void wait_while_held();

private:
  std::mutex hold_mtx_;
  std::condition_variable hold_cv_;
  bool held_ = false; ///< guarded by hold_mtx_
};

std::unique_ptr<kv_store> make_faulty_kv(std::unique_ptr<kv_store> inner,
                                         std::shared_ptr<fault_plan> plan);

} // namespace agentstate::store
