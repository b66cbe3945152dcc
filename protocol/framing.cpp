// SPDX-License-Identifier: Apache-2.0
#include "protocol/framing.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
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
  std::string line; // the current line's bytes so far
  bool discarding = false; // the current line is over the limit
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

nowait_result write_nowait(int fd, bool socket, std::string_view data, std::size_t& off) {
  while (off < data.size()) {
    ssize_t n;
    if (socket) {
      n = ::send(fd, data.data() + off, data.size() - off, MSG_DONTWAIT | MSG_NOSIGNAL);
    } else {
      iovec v{const_cast<char*>(data.data() + off), data.size() - off};
      n = ::pwritev2(fd, &v, 1, -1, RWF_NOWAIT);
    }
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return nowait_result::blocked;
      // A descriptor or kernel without non-blocking writes of this kind.
      if (errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL || errno == ESPIPE
          || errno == ENOTSOCK)
        return nowait_result::unsupported;
      return nowait_result::failed;
    }
    off += static_cast<std::size_t>(n);
  }
  return nowait_result::all;
}

void put_back(std::string& pending, std::string& batch, std::size_t off) {
  batch.erase(0, off);
  batch += pending;
  pending.swap(batch);
}

void queue_line(std::string& pending, std::string& spare, std::string&& line) {
  const auto n = line.size() + 1;
  if (pending.empty() && pending.capacity() < n) {
    if (spare.capacity() >= n)
      pending.swap(spare);
    else if (line.capacity() >= n)
      pending.swap(line); // `line` is left empty
  }
  pending += line;
  pending += '\n';
}

void keep_spare(std::string& spare, std::string& batch) {
  batch.clear();
  if (batch.capacity() <= max_spare_bytes && batch.capacity() > spare.capacity())
    spare.swap(batch);
}

line_writer::line_writer(int fd, idle_hook idle)
  : fd_(fd), idle_(idle), deferral_(std::make_shared<deferral>()) {
  deferral_->writer = this;
  struct stat st;
  socket_ = ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
  thread_ = std::thread([this] { run(); });
}

line_writer::~line_writer() {
  close();
  std::lock_guard<std::mutex> guard(deferral_->mtx); // waits for a deferred write running now
  deferral_->writer = nullptr;
}

void line_writer::notify_room() {
  if (room_waiters_ > 0)
    room_cv_.notify_all();
}

void line_writer::push(std::string line) {
  std::unique_lock<std::mutex> lock(mtx_);
  if (failed_ || closing_)
    return;
  queue_line(pending_, spare_, std::move(line));
  if (busy_)
    return; // whoever writes takes it along
  if (!handed_off_ && direct_ && idle_) {
    if (deferred_)
      return; // the deferred write takes it along
    if (idle_([d = deferral_] {
          std::lock_guard<std::mutex> guard(d->mtx);
          if (d->writer)
            d->writer->write_deferred();
        })) {
      deferred_ = true;
      return;
    }
  }
  write_direct(lock);
}

void line_writer::write_deferred() {
  std::unique_lock<std::mutex> lock(mtx_);
  deferred_ = false;
  if (busy_ || failed_ || closing_ || pending_.empty())
    return; // a writer at work, or the thread (closing), takes pending_
  write_direct(lock);
}

void line_writer::write_direct(std::unique_lock<std::mutex>& lock) {
  if (handed_off_ || !direct_) {
    work_cv_.notify_one(); // the thread writes
    return;
  }
  busy_ = true;
  const auto end = write_rounds(
    fd_, socket_, pending_, spare_, lock, [this](std::size_t n) { writing_ = n; },
    [this](std::size_t) { writing_ = 0; }, [] { return false; });
  busy_ = false;
  if (end == direct_end::failed) {
    failed_ = true;
    std::string().swap(pending_);
  } else if (end != direct_end::drained) {
    if (end == direct_end::unsupported)
      direct_ = false;
    handed_off_ = true; // the thread writes the rest
  }
  if (handed_off_ || closing_ || !direct_)
    work_cv_.notify_one();
  notify_room();
}

void line_writer::wait_below(std::size_t bytes) {
  std::unique_lock<std::mutex> lock(mtx_);
  ++room_waiters_;
  room_cv_.wait(lock, [&] { return failed_ || closing_ || pending_.size() + writing_ < bytes; });
  --room_waiters_;
}

void line_writer::close() {
  {
    std::lock_guard<std::mutex> guard(mtx_);
    closing_ = true;
    work_cv_.notify_all();
    notify_room();
  }
  if (thread_.joinable())
    thread_.join();
}

bool line_writer::ok() const {
  std::lock_guard<std::mutex> guard(mtx_);
  return !failed_;
}

// The thread writes what producers could not write without blocking (and
// everything, where non-blocking writes do not work), with blocking calls,
// until the queue is empty; then producers write again.
void line_writer::run() {
  std::string batch;
  std::unique_lock<std::mutex> lock(mtx_);
  for (;;) {
    work_cv_.wait(lock, [this] {
      return !busy_ && (closing_ || (!pending_.empty() && (handed_off_ || !direct_)));
    });
    if (pending_.empty())
      return; // closing, and everything is written
    busy_ = true;
    batch.clear();
    batch.swap(pending_);
    writing_ = batch.size();
    lock.unlock();
    std::size_t off = 0;
    bool failed = false;
    while (off < batch.size()) {
      ssize_t n = socket_ ? ::send(fd_, batch.data() + off, batch.size() - off, MSG_NOSIGNAL)
                          : ::write(fd_, batch.data() + off, batch.size() - off);
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
    busy_ = false;
    if (failed) {
      failed_ = true;
      std::string().swap(pending_);
      notify_room();
      return;
    }
    if (pending_.empty())
      handed_off_ = false;
    notify_room();
  }
}

// -- serve_stream ----------------------------------------------------------------------

std::size_t line_writer::queued() const {
  std::lock_guard<std::mutex> lk(mtx_);
  if (failed_ || closing_)
    return 0;
  return pending_.size() + writing_;
}

result<void> serve_stream(engine& eng, int in_fd, int out_fd, int stop_fd,
                          const stream_config& cfg) {
  line_writer out(out_fd, cfg.idle);
  auto rc = cfg.rpc;
  const std::size_t backlog = std::max<std::size_t>(2, cfg.max_queued_bytes / 2);
  rc.queued_output_bytes = [&out] { return out.queued(); };
  rc.max_watch_backlog = backlog;
  // Watches paused for room are restarted by `resumer` once the output has
  // drained to half the backlog (rpc_session::resume_watches).
  std::mutex mtx;
  std::condition_variable cv;
  bool paused = false, done = false;
  rc.on_watch_paused = [&] {
    {
      std::lock_guard<std::mutex> lk(mtx);
      paused = true;
    }
    cv.notify_one();
  };
  rpc_session rpc(
    eng, [&out](std::string line) { out.push(std::move(line)); }, rc);
  std::thread resumer([&] {
    std::unique_lock<std::mutex> lk(mtx);
    for (;;) {
      cv.wait(lk, [&] { return paused || done; });
      if (done)
        return;
      lk.unlock();
      out.wait_below(backlog / 2 + 1);
      rpc.resume_watches();
      lk.lock();
      // Output queued meanwhile may have left some paused: wait for room
      // again (a watch pausing from here on sets the flag itself).
      paused = rpc.watches_paused();
    }
  });
  auto r = read_lines(
    in_fd, stop_fd, cfg.max_line_bytes,
    [&](std::string_view line) {
      out.wait_below(cfg.max_queued_bytes);
      rpc.handle_line(line);
    },
    [&](std::uint64_t bytes) { rpc.handle_oversized_line(bytes, cfg.max_line_bytes); });
  rpc.end_watches();
  {
    std::lock_guard<std::mutex> lk(mtx);
    done = true;
  }
  cv.notify_one();
  rpc.drain();
  out.close(); // wakes the resumer's wait_below
  resumer.join();
  return r;
}

} // namespace agentstate::protocol
