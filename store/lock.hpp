// SPDX-License-Identifier: Apache-2.0
// store/lock.hpp: exclusive ownership of a store directory. The engine and
// any tool that writes a store (import) hold one; read-only tools (inspect,
// dump, verify, backup) do not, and may run beside an engine.
#pragma once

#include <string>

#include "agentstate/error.hpp"

namespace agentstate::store {

/// Holds `dir`: an entry in this process's registry of open stores, and an
/// flock on DIR/agentstate.lock (which records the owner's pid). Released on
/// destruction. Not copyable.
class store_lock {
public:
  store_lock() = default;
  ~store_lock() { release(); }
  store_lock(const store_lock&) = delete;
  store_lock& operator=(const store_lock&) = delete;

  /// Takes `dir` (canonical path). Errors: unavailable (open in this process,
  /// or locked by another process, whose pid the message names), io_error.
  result<void> acquire(const std::string& dir);
  void release() noexcept;
  bool held() const noexcept { return fd_ >= 0; }

private:
  int fd_ = -1;
  std::string dir_;
};

} // namespace agentstate::store
