// SPDX-License-Identifier: Apache-2.0
#include "protocol/framing.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace agentstate::protocol {

namespace {

error io_failure(const char* what) {
  return error{errc::io_error, std::string(what) + ": " + std::strerror(errno)};
}

} // namespace

result<void> read_lines(int fd, int stop_fd, std::uint64_t max_line_bytes,
                        const std::function<void(std::string_view)>& on_line,
                        const std::function<void(std::uint64_t)>& on_oversized) {
  std::string line;          // the current line's bytes so far
  bool discarding = false;   // the current line is over the limit
  std::uint64_t discarded = 0;
  std::string buf(64 * 1024, '\0');
  for (;;) {
    if (stop_fd >= 0) {
      pollfd fds[2] = {{fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR)
          continue;
        return io_failure("poll");
      }
      if (fds[1].revents != 0)
        return {};
    }
    auto n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
        continue;
      if (errno == ECONNRESET)
        return {};
      return io_failure("read");
    }
    if (n == 0) {
      if (discarding)
        on_oversized(discarded);
      else if (!line.empty())
        on_line(line);
      return {};
    }
    const char* p = buf.data();
    const char* end = p + n;
    while (p < end) {
      auto nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
      const char* stop = nl ? nl : end;
      auto seg = static_cast<std::uint64_t>(stop - p);
      if (discarding) {
        discarded += seg;
      } else if (line.size() + seg > max_line_bytes) {
        discarding = true;
        discarded = line.size() + seg;
        std::string().swap(line);
      } else if (nl && line.empty()) {
        on_line(std::string_view(p, seg)); // whole line in the buffer: no copy
        p = nl + 1;
        continue;
      } else {
        line.append(p, seg);
      }
      if (!nl)
        break;
      if (discarding) {
        on_oversized(discarded);
        discarding = false;
        discarded = 0;
      } else {
        on_line(line);
        line.clear();
      }
      p = nl + 1;
    }
  }
}

// -- line_writer ---------------------------------------------------------------------

line_writer::line_writer(int fd) : fd_(fd), thread_([this] { run(); }) {}

line_writer::~line_writer() {
  close();
}

void line_writer::push(std::string line) {
  std::lock_guard<std::mutex> guard(mtx_);
  if (failed_ || closing_)
    return;
  if (pending_.empty() && line.capacity() > line.size()) {
    pending_ = std::move(line);
  } else {
    pending_ += line;
  }
  pending_ += '\n';
  cv_.notify_all();
}

void line_writer::wait_below(std::size_t bytes) {
  std::unique_lock<std::mutex> lock(mtx_);
  cv_.wait(lock, [&] { return failed_ || closing_ || pending_.size() + writing_ < bytes; });
}

void line_writer::close() {
  {
    std::lock_guard<std::mutex> guard(mtx_);
    closing_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable())
    thread_.join();
}

bool line_writer::ok() const {
  std::lock_guard<std::mutex> guard(mtx_);
  return !failed_;
}

void line_writer::run() {
  bool socket = true; // send() with MSG_NOSIGNAL until the fd proves not a socket
  std::string batch;
  std::unique_lock<std::mutex> lock(mtx_);
  for (;;) {
    cv_.wait(lock, [this] { return !pending_.empty() || closing_; });
    if (pending_.empty())
      return; // closing, and everything is written
    batch.clear();
    batch.swap(pending_);
    writing_ = batch.size();
    lock.unlock();
    std::size_t off = 0;
    bool failed = false;
    while (off < batch.size()) {
      ssize_t n;
      if (socket) {
        n = ::send(fd_, batch.data() + off, batch.size() - off, MSG_NOSIGNAL);
        if (n < 0 && errno == ENOTSOCK) {
          socket = false;
          continue;
        }
      } else {
        n = ::write(fd_, batch.data() + off, batch.size() - off);
      }
      if (n < 0) {
        if (errno == EINTR)
          continue;
        failed = true; // EPIPE, ECONNRESET, ...: the reader is gone
        break;
      }
      off += static_cast<std::size_t>(n);
    }
    lock.lock();
    writing_ = 0;
    if (failed) {
      failed_ = true;
      std::string().swap(pending_);
    }
    cv_.notify_all();
    if (failed)
      return;
  }
}

// -- serve_stream ----------------------------------------------------------------------

result<void> serve_stream(engine& eng, int in_fd, int out_fd, int stop_fd,
                          const stream_config& cfg) {
  line_writer out(out_fd);
  rpc_session rpc(eng, [&out](std::string line) { out.push(std::move(line)); }, cfg.rpc);
  auto r = read_lines(
    in_fd, stop_fd, cfg.max_line_bytes,
    [&](std::string_view line) {
      out.wait_below(cfg.max_queued_bytes);
      rpc.handle_line(line);
    },
    [&](std::uint64_t bytes) { rpc.handle_oversized_line(bytes, cfg.max_line_bytes); });
  rpc.drain();
  out.close();
  return r;
}

} // namespace agentstate::protocol
