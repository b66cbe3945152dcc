// SPDX-License-Identifier: Apache-2.0
// tests/support/threads.hpp: what the threads of the test's own process are
// doing, read from /proc (Linux).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace agentstate::test {

/// Whether every thread of this process but the caller is blocked now: its
/// state in /proc/self/task/TID/stat is not R (running or runnable). With
/// spin-free waits this means every worker, timer and writer thread has
/// parked. False when /proc cannot be read.
inline bool other_threads_blocked() {
  const std::string self = std::to_string(::gettid());
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/self/task", ec), end;
  if (ec)
    return false;
  for (; it != end; it.increment(ec)) {
    if (ec)
      return false;
    if (it->path().filename() == self)
      continue;
    std::ifstream in(it->path() / "stat");
    std::string line;
    if (!std::getline(in, line))
      continue; // the thread has ended
    // "TID (COMM) STATE ...": COMM may hold spaces and parentheses.
    const auto close = line.rfind(')');
    if (close == std::string::npos || close + 2 >= line.size())
      return false;
    if (line[close + 2] == 'R')
      return false;
  }
  return true;
}

} // namespace agentstate::test
