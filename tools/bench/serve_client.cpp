// SPDX-License-Identifier: Apache-2.0
// tools/bench/serve_client.cpp: serve_child, the TCP connect, the response
// reader and the closed request loop of serve_client.hpp.
#include "tools/bench/serve_client.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

extern char** environ;

namespace agentstate::tools::bench {

struct serve_child::err_buffer {
  mutable std::mutex mtx;
  std::condition_variable cv;
  std::string text;
  bool closed = false;
};

std::unique_ptr<serve_child> serve_child::start(const std::string& bin,
                                                const std::vector<std::string>& args, bool tcp,
                                                std::string& why) {
  ::signal(SIGPIPE, SIG_IGN);
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    why = std::string("pipe: ") + std::strerror(errno);
    return nullptr;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  std::vector<std::string> argv_s{bin, "serve"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  std::unique_ptr<serve_child> c(new serve_child());
  int rc = ::posix_spawn(&c->pid_, bin.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  c->in_ = in[1];
  c->out_ = out[0];
  c->err_ = err[0];
  c->tcp_ = tcp;
  c->err_buf_ = std::make_shared<err_buffer>();
  if (rc != 0) {
    c->pid_ = -1;
    why = "cannot start " + bin + ": " + std::strerror(rc);
    return nullptr;
  }
  c->err_thread_ = std::thread([p = c.get()] { p->read_stderr(); });
  if (!tcp)
    return c;
  // The listener prints its bound address once it listens.
  const std::string marker = "listening on ";
  auto& b = *c->err_buf_;
  std::unique_lock<std::mutex> lock(b.mtx);
  bool found = b.cv.wait_for(lock, std::chrono::seconds(10), [&] {
    auto at = b.text.find(marker);
    return b.closed || (at != std::string::npos && b.text.find('\n', at) != std::string::npos);
  });
  auto at = b.text.find(marker);
  if (!found || at == std::string::npos) {
    why = "serve did not print 'listening on HOST:PORT'; stderr: " + b.text;
    return nullptr;
  }
  // The address ends the line's message: at a space, a quote or the line's
  // end ("listening on 127.0.0.1:41234" address=... in the text log form).
  auto from = at + marker.size();
  c->address_ = b.text.substr(from, b.text.find_first_of(" \"\n", from) - from);
  return c;
}

void serve_child::read_stderr() {
  char buf[4096];
  for (;;) {
    auto n = ::read(err_, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    std::lock_guard<std::mutex> guard(err_buf_->mtx);
    if (n <= 0) {
      err_buf_->closed = true;
      err_buf_->cv.notify_all();
      return;
    }
    err_buf_->text.append(buf, static_cast<std::size_t>(n));
    err_buf_->cv.notify_all();
  }
}

serve_child::~serve_child() {
  if (in_ >= 0)
    ::close(in_);
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (err_thread_.joinable())
    err_thread_.join();
  for (int fd : {out_, err_})
    if (fd >= 0)
      ::close(fd);
}

double serve_child::cpu_seconds() const {
  if (pid_ <= 0)
    return -1;
  std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) start after ')'.
  auto close = all.rfind(')');
  if (close == std::string::npos)
    return -1;
  std::istringstream rest(all.substr(close + 2));
  std::string field;
  double utime = -1, stime = -1;
  for (int i = 3; rest >> field; ++i) { // field 3 is the state
    if (i == 14)
      utime = std::strtod(field.c_str(), nullptr);
    if (i == 15) {
      stime = std::strtod(field.c_str(), nullptr);
      break;
    }
  }
  if (utime < 0 || stime < 0)
    return -1;
  return (utime + stime) / double(::sysconf(_SC_CLK_TCK));
}

int serve_child::stop() {
  if (in_ >= 0) {
    ::close(in_);
    in_ = -1;
  }
  if (pid_ <= 0)
    return -1;
  if (tcp_)
    ::kill(pid_, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int status = 0;
  for (;;) {
    auto r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_)
      break;
    if (r < 0 && errno != EINTR) {
      pid_ = -1;
      return -1;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string serve_child::stderr_text() const {
  std::lock_guard<std::mutex> guard(err_buf_->mtx);
  return err_buf_->text;
}

std::string self_binary() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "/proc/self/exe";
}

int connect_tcp(const std::string& address, std::string& why) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    why = "bad address '" + address + "'";
    return -1;
  }
  auto host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  auto port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    why = "cannot resolve '" + address + "': " + ::gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (auto ai = found; ai && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0)
      continue;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      why = "connect " + address + ": " + std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd >= 0) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

int connect_unix(const std::string& path, std::string& why) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof a.sun_path) {
    why =
      "bad socket path '" + path + "' (1 to " + std::to_string(sizeof a.sun_path - 1) + " bytes)";
    return -1;
  }
  std::memcpy(a.sun_path, path.data(), path.size());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    why = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    why = "connect unix:" + path + ": " + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

response_view read_response(std::string_view line) {
  static constexpr std::string_view prefix = R"({"jsonrpc":"2.0","id":)";
  response_view v;
  v.line = line;
  if (line.substr(0, prefix.size()) != prefix)
    return v;
  std::size_t p = prefix.size();
  std::uint64_t id = 0;
  std::size_t digits = 0;
  while (p < line.size() && line[p] >= '0' && line[p] <= '9' && digits < 19) {
    id = id * 10 + std::uint64_t(line[p] - '0');
    ++p;
    ++digits;
  }
  if (digits == 0 || p >= line.size() || line[p] != ',')
    return v;
  auto rest = line.substr(p + 1);
  v.ok = rest.substr(0, 9) == R"("result":)";
  if (!v.ok && rest.substr(0, 8) != R"("error":)")
    return v;
  v.well_formed = true;
  v.id = id;
  return v;
}

std::int64_t last_version(std::string_view line) {
  static constexpr std::string_view key = R"("version":)";
  auto at = line.rfind(key);
  if (at == std::string_view::npos)
    return -1;
  std::int64_t n = 0;
  std::size_t digits = 0;
  for (auto p = at + key.size(); p < line.size() && line[p] >= '0' && line[p] <= '9'; ++p)
    if (++digits <= 18)
      n = n * 10 + (line[p] - '0');
  return digits == 0 || digits > 18 ? -1 : n;
}

namespace {

struct stream_state {
  std::string in; ///< bytes read, not yet a whole line
  std::string out; ///< request bytes not yet written
  std::size_t out_off = 0;
};

// Writes what `s` has queued without blocking. False (with `why`) on failure.
bool flush_out(int fd, stream_state& s, std::string& why) {
  while (s.out_off < s.out.size()) {
    auto n = ::write(fd, s.out.data() + s.out_off, s.out.size() - s.out_off);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return true;
      why = std::string("writing requests: ") + std::strerror(errno);
      return false;
    }
    s.out_off += static_cast<std::size_t>(n);
  }
  s.out.clear();
  s.out_off = 0;
  return true;
}

} // namespace

std::string
run_requests(const std::vector<stream_fds>& streams,
             const std::function<void(std::size_t, std::string&)>& start,
             const std::function<void(std::size_t, std::string_view, std::string&)>& on_line,
             const std::function<std::size_t()>& outstanding) {
  std::vector<stream_state> st(streams.size());
  for (auto& s : streams)
    for (int fd : {s.write_fd, s.read_fd})
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  std::string why;
  for (std::size_t i = 0; i < streams.size(); ++i) {
    start(i, st[i].out);
    if (!flush_out(streams[i].write_fd, st[i], why))
      return why;
  }
  std::string buf(256 * 1024, '\0');
  std::vector<pollfd> fds;
  while (outstanding() > 0) {
    fds.clear();
    for (std::size_t i = 0; i < streams.size(); ++i) {
      fds.push_back({streams[i].read_fd, POLLIN, 0});
      if (!st[i].out.empty())
        fds.push_back({streams[i].write_fd, POLLOUT, 0});
    }
    int n = ::poll(fds.data(), fds.size(), 60000);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return std::string("poll: ") + std::strerror(errno);
    }
    if (n == 0)
      return "no response from serve for 60 s";
    std::size_t f = 0;
    for (std::size_t i = 0; i < streams.size(); ++i) {
      auto& s = st[i];
      bool readable = fds[f++].revents != 0;
      if (!s.out.empty())
        ++f; // the write side is flushed below whatever its revents say
      if (readable) {
        auto got = ::read(streams[i].read_fd, buf.data(), buf.size());
        if (got < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
          return std::string("reading responses: ") + std::strerror(errno);
        if (got == 0)
          return "serve closed the stream with " + std::to_string(outstanding())
            + " requests unanswered";
        if (got > 0) {
          std::string_view chunk(buf.data(), static_cast<std::size_t>(got));
          // Whole lines straight from the buffer; a partial one waits in s.in.
          while (!chunk.empty()) {
            auto nl = chunk.find('\n');
            if (nl == std::string_view::npos) {
              s.in.append(chunk);
              break;
            }
            if (s.in.empty()) {
              on_line(i, chunk.substr(0, nl), s.out);
            } else {
              s.in.append(chunk.substr(0, nl));
              on_line(i, s.in, s.out);
              s.in.clear();
            }
            chunk.remove_prefix(nl + 1);
          }
        }
      }
      if (!s.out.empty() && !flush_out(streams[i].write_fd, s, why))
        return why;
    }
  }
  return "";
}

} // namespace agentstate::tools::bench
