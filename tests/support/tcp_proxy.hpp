// SPDX-License-Identifier: Apache-2.0
// tests/support/tcp_proxy.hpp: a loopback TCP forwarder run on threads of the
// test process, to put a network partition between two processes of a test.
//
// Contract:
// - It listens on 127.0.0.1:port() (a port the kernel picked) and forwards
//   each connection it accepts to 127.0.0.1:target, bytes both ways, in
//   order. When either end closes or fails, both are closed. A connection
//   whose target cannot be reached is closed at once.
// - cut(): closes every forwarded connection (both ends see the close) and,
//   until heal(), closes each new connection as soon as it is accepted: a
//   partition that the processes notice at once. Returns once every
//   forwarded connection is closed.
// - blackhole(): keeps every connection open, accepts new ones, and forwards
//   no byte either way until heal(): a silent partition (the ends see no
//   error, only no answer). What is sent meanwhile stays in the sockets'
//   buffers and is forwarded after heal(), as TCP delivers what it retransmits
//   once a partition heals.
// - heal(): forwarding as at the start.
// - The destructor closes every connection and the listener, and stops and
//   joins every thread the proxy started; each thread waits in poll() with a
//   short timeout and checks the proxy's state after each wait.
// Test-only; no doctest assertions off the test's thread (the constructor
// REQUIREs its listener).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <doctest/doctest.h>

namespace agentstate::test {

class tcp_proxy {
public:
  /// Forwards to 127.0.0.1:target_port (which need not listen yet).
  explicit tcp_proxy(int target_port) : target_(target_port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listen_fd_ >= 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listen_fd_, 64) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~tcp_proxy() {
    stop_ = true;
    if (acceptor_.joinable())
      acceptor_.join();
    std::list<std::unique_ptr<link>> left;
    {
      std::lock_guard<std::mutex> lock(mtx_);
      for (auto& l : links_)
        l->shut();
      left.swap(links_);
    }
    for (auto& l : left)
      l->pump.join();
    ::close(listen_fd_);
  }
  tcp_proxy(const tcp_proxy&) = delete;
  tcp_proxy& operator=(const tcp_proxy&) = delete;

  /// The port it listens on (127.0.0.1).
  int port() const { return port_; }

  /// Closes every forwarded connection and refuses new ones until heal().
  void cut() {
    std::unique_lock<std::mutex> lock(mtx_);
    mode_ = mode::cut;
    for (auto& l : links_)
      l->shut();
    // Each pump sees its sockets shut within one poll period and ends.
    closed_cv_.wait(lock, [&] {
      for (auto& l : links_)
        if (!l->done)
          return false;
      return true;
    });
  }

  /// Keeps the connections, forwards nothing until heal().
  void blackhole() { mode_ = mode::blackhole; }

  /// Forwards again.
  void heal() { mode_ = mode::open; }

  /// Connections accepted so far (forwarded or refused).
  int accepted() const { return accepted_.load(); }

private:
  enum class mode { open, blackhole, cut };
  static constexpr int poll_ms = 20;
  static constexpr std::size_t buffer_limit = 256 * 1024;

  /// One forwarded connection: client end `a`, target end `b`, and the
  /// thread that pumps bytes between them.
  struct link {
    int a = -1, b = -1;
    std::thread pump;
    bool done = false; ///< guarded by mtx_: the pump closed a and b
    /// Shuts both sockets down unless the pump closed them (the pump closes
    /// them when it ends). Called with mtx_ held.
    void shut() const {
      if (done)
        return;
      ::shutdown(a, SHUT_RDWR);
      ::shutdown(b, SHUT_RDWR);
    }
  };

  void accept_loop() {
    while (!stop_) {
      reap();
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, poll_ms) <= 0) // poll: wakes to see stop_
        continue;
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0)
        continue;
      ++accepted_;
      if (mode_ == mode::cut) {
        ::close(fd);
        continue;
      }
      int to = connect_target();
      if (to < 0) {
        ::close(fd);
        continue;
      }
      auto l = std::make_unique<link>();
      l->a = fd;
      l->b = to;
      link* raw = l.get();
      std::lock_guard<std::mutex> lock(mtx_);
      if (mode_ == mode::cut) { // cut while it connected
        ::close(fd);
        ::close(to);
        continue;
      }
      raw->pump = std::thread([this, raw] { pump(*raw); });
      links_.push_back(std::move(l));
    }
  }

  /// Joins the pumps that ended.
  void reap() {
    std::list<std::unique_ptr<link>> ended;
    {
      std::lock_guard<std::mutex> lock(mtx_);
      for (auto it = links_.begin(); it != links_.end();)
        if ((*it)->done)
          ended.splice(ended.end(), links_, it++);
        else
          ++it;
    }
    for (auto& l : ended)
      l->pump.join();
  }

  int connect_target() const {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      return -1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(target_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  /// Moves bytes a -> b and b -> a (non-blocking, each way through a
  /// bounded buffer) until either end ends, the proxy is cut or stopped.
  void pump(link& l) {
    for (int fd : {l.a, l.b})
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    std::string to_b, to_a; // bytes read and not yet written
    bool alive = true;
    while (alive && !stop_ && mode_ != mode::cut) {
      if (mode_ == mode::blackhole) {
        // poll: no socket watched (a hang-up would wake it at once), a
        // short wait until the mode changes.
        ::poll(nullptr, 0, poll_ms);
        continue;
      }
      pollfd p[2] = {{l.a, 0, 0}, {l.b, 0, 0}};
      if (to_b.size() < buffer_limit)
        p[0].events |= POLLIN;
      if (to_a.size() < buffer_limit)
        p[1].events |= POLLIN;
      if (!to_a.empty())
        p[0].events |= POLLOUT;
      if (!to_b.empty())
        p[1].events |= POLLOUT;
      // poll: a short wait, so that a change of mode or stop_ is seen.
      if (::poll(p, 2, poll_ms) <= 0)
        continue;
      alive = move(p[0], l.a, to_b) && move(p[1], l.b, to_a) && flush(p[1], l.b, to_b)
        && flush(p[0], l.a, to_a);
    }
    std::lock_guard<std::mutex> lock(mtx_);
    ::close(l.a);
    ::close(l.b);
    l.done = true;
    closed_cv_.notify_all();
  }

  /// Reads what `fd` has into `out`; false when it ended or failed.
  static bool move(const pollfd& p, int fd, std::string& out) {
    if (p.revents & (POLLERR | POLLNVAL))
      return false;
    if (!(p.revents & (POLLIN | POLLHUP)))
      return true;
    char chunk[65536];
    auto n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n > 0) {
      out.append(chunk, static_cast<std::size_t>(n));
      return true;
    }
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
  }

  /// Writes what it can of `in` to `fd`; false when `fd` failed.
  static bool flush(const pollfd& p, int fd, std::string& in) {
    if (in.empty() || !(p.revents & POLLOUT))
      return true;
    auto n = ::send(fd, in.data(), in.size(), MSG_NOSIGNAL);
    if (n > 0) {
      in.erase(0, static_cast<std::size_t>(n));
      return true;
    }
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
  }

  int target_;
  int port_ = 0;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<mode> mode_{mode::open};
  std::atomic<int> accepted_{0};
  std::mutex mtx_;
  std::condition_variable closed_cv_;
  std::list<std::unique_ptr<link>> links_; ///< guarded by mtx_
  std::thread acceptor_;
};

} // namespace agentstate::test
