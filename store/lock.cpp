// SPDX-License-Identifier: Apache-2.0
#include "store/lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>

namespace agentstate::store {

namespace {

std::mutex open_dirs_mtx;
std::set<std::string> open_dirs;

void forget(const std::string& dir) {
  std::lock_guard<std::mutex> guard(open_dirs_mtx);
  open_dirs.erase(dir);
}

} // namespace

result<void> store_lock::acquire(const std::string& dir) {
  {
    std::lock_guard<std::mutex> guard(open_dirs_mtx);
    if (!open_dirs.insert(dir).second)
      return error{errc::unavailable, "store '" + dir + "' is already open in this process"};
  }
  auto path = dir + "/agentstate.lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    forget(dir);
    return error{errc::io_error, "cannot open lock file " + path + ": " + std::strerror(errno)};
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {};
    auto n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    ::close(fd);
    forget(dir);
    std::string owner = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "?";
    while (!owner.empty() && (owner.back() == '\n' || owner.back() == ' '))
      owner.pop_back();
    return error{errc::unavailable,
                 "store '" + dir + "' is in use by another process (pid " + owner + ")"};
  }
  auto pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) == 0) {
    // The pid is informational only; the lock is what counts.
    [[maybe_unused]] auto written = ::pwrite(fd, pid.data(), pid.size(), 0);
  }
  fd_ = fd;
  dir_ = dir;
  return {};
}

void store_lock::release() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
    forget(dir_);
    dir_.clear();
  }
}

} // namespace agentstate::store
