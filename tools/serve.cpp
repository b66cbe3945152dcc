// SPDX-License-Identifier: Apache-2.0
// `agentstate serve`: the engine behind the JSON-RPC protocol (PROTOCOL.md,
// docs/protocol.md), on standard input/output or on a TCP port.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "agentstate/engine.hpp"
#include "tools/commands.hpp"
#include "protocol/framing.hpp"

namespace agentstate::tools {

using protocol::serve_stream;
using protocol::stream_config;

namespace {

const char* serve_usage =
  "usage: agentstate serve (--store DIR | --memory) [options]\n"
  "\n"
  "Serves the engine over JSON-RPC 2.0, one JSON object per line (see\n"
  "docs/protocol.md): requests on standard input, responses on standard\n"
  "output, or the same over TCP with --listen. Logs go to standard error.\n"
  "\n"
  "  --store DIR            LMDB store directory (created if missing)\n"
  "  --memory               in-memory store: everything is gone at exit\n"
  "  --durability MODE      sync (default): fsync per group commit, survives power\n"
  "                         loss; nosync: survives a crash of this process, not\n"
  "                         of the OS\n"
  "  --listen [HOST:]PORT   serve TCP clients instead of stdin/stdout; HOST\n"
  "                         defaults to 127.0.0.1, PORT 0 picks a free port; the\n"
  "                         bound address is printed to stderr as\n"
  "                         'listening on HOST:PORT'\n"
  "  --max-line-bytes N     longest request line (default 16777216); a longer\n"
  "                         line is discarded and answered with kind too_large\n"
  "  --threads N            engine worker threads (default: one per core)\n"
  "\n"
  "End of input (stdin) or SIGINT/SIGTERM: requests in flight finish, the store\n"
  "is flushed and closed, exit 0. A second signal exits at once (status 1).\n"
  "Exit 1 when the store cannot be opened, flushed or closed, or the port not\n"
  "bound; 2 for bad usage.\n";

struct serve_config {
  options engine_opts;
  bool have_store = false;
  std::optional<std::string> listen;
  stream_config stream;
};

int usage_error(const std::string& message) {
  std::fprintf(stderr, "serve: %s\n\n%s", message.c_str(), serve_usage);
  return 2;
}

std::optional<std::uint64_t> parse_count(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 19)
    return std::nullopt;
  return std::stoull(s);
}

// Returns the exit code when the arguments end the run (help, bad usage).
std::optional<int> parse_args(const args& xs, serve_config& cfg) {
  bool memory = false;
  std::optional<durability> mode;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const auto& a = xs[i];
    if (a == "--help" || a == "-h") {
      std::fputs(serve_usage, stdout);
      return 0;
    }
    if (a == "--memory") {
      memory = true;
      continue;
    }
    auto takes_value = a == "--store" || a == "--durability" || a == "--listen"
                       || a == "--max-line-bytes" || a == "--threads";
    if (!takes_value)
      return usage_error("unknown option '" + a + "'");
    if (i + 1 >= xs.size())
      return usage_error(a + " needs a value");
    const auto& v = xs[++i];
    if (a == "--store") {
      if (v.empty())
        return usage_error("--store needs a directory");
      cfg.engine_opts.dir = v;
      cfg.have_store = true;
    } else if (a == "--durability") {
      if (v == "sync")
        mode = durability::sync;
      else if (v == "nosync")
        mode = durability::nosync;
      else
        return usage_error("--durability must be sync or nosync, not '" + v + "'");
    } else if (a == "--listen") {
      cfg.listen = v;
    } else if (a == "--max-line-bytes") {
      auto n = parse_count(v);
      if (!n || *n == 0)
        return usage_error("--max-line-bytes must be a positive integer, not '" + v + "'");
      cfg.stream.max_line_bytes = *n;
    } else if (a == "--threads") {
      auto n = parse_count(v);
      if (!n || *n > 1024)
        return usage_error("--threads must be an integer 0..1024, not '" + v + "'");
      cfg.engine_opts.threads = static_cast<std::size_t>(*n);
    }
  }
  if (memory == cfg.have_store)
    return usage_error("give exactly one of --store DIR and --memory");
  if (memory && mode)
    return usage_error("--durability applies to --store only");
  cfg.engine_opts.mode = memory ? durability::memory : mode.value_or(durability::sync);
  cfg.stream.rpc.max_line_depth = cfg.engine_opts.limits.max_json_depth + 8;
  return std::nullopt;
}

// -- signals ---------------------------------------------------------------------

// SIGINT and SIGTERM are blocked in every thread (the engine's included: they
// inherit the mask) and taken by one thread with sigwait(), which makes the
// stop pipe readable. Every reader polls that pipe, so one write stops them all.
class signal_watch {
public:
  signal_watch() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    ::pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    if (::pipe(pipe_) != 0) {
      pipe_[0] = pipe_[1] = -1;
      return;
    }
    ::fcntl(pipe_[0], F_SETFD, FD_CLOEXEC);
    ::fcntl(pipe_[1], F_SETFD, FD_CLOEXEC);
    thread_ = std::thread([this] { run(); });
  }

  ~signal_watch() {
    if (thread_.joinable()) {
      done_ = true;
      ::pthread_kill(thread_.native_handle(), SIGTERM);
      thread_.join();
    }
    for (int fd : pipe_)
      if (fd >= 0)
        ::close(fd);
  }

  signal_watch(const signal_watch&) = delete;
  signal_watch& operator=(const signal_watch&) = delete;

  /// Readable once a stop signal arrived; -1 if the pipe could not be made.
  int stop_fd() const { return pipe_[0]; }

private:
  void run() {
    int received = 0;
    for (;;) {
      int sig = 0;
      if (::sigwait(&set_, &sig) != 0)
        continue;
      if (done_)
        return;
      if (++received > 1) {
        std::fputs("serve: second signal; exiting now\n", stderr);
        std::_Exit(1);
      }
      std::fprintf(stderr, "serve: %s received; finishing requests in flight\n",
                   sig == SIGINT ? "SIGINT" : "SIGTERM");
      char c = 1;
      while (::write(pipe_[1], &c, 1) < 0 && errno == EINTR) {
      }
    }
  }

  sigset_t set_;
  int pipe_[2] = {-1, -1};
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// -- TCP -------------------------------------------------------------------------

struct listen_address {
  std::string host;
  std::string port;
};

// "[HOST]:PORT", "HOST:PORT", ":PORT" or "PORT"; the host defaults to loopback.
std::optional<listen_address> parse_listen(const std::string& s) {
  listen_address a;
  std::string port;
  if (!s.empty() && s.front() == '[') {
    auto close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':')
      return std::nullopt;
    a.host = s.substr(1, close - 1);
    port = s.substr(close + 2);
  } else if (auto colon = s.rfind(':'); colon != std::string::npos) {
    a.host = s.substr(0, colon);
    port = s.substr(colon + 1);
  } else {
    port = s;
  }
  if (a.host.empty())
    a.host = "127.0.0.1";
  auto n = parse_count(port);
  if (!n || *n > 65535)
    return std::nullopt;
  a.port = port;
  return a;
}

std::string describe_address(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (::getnameinfo(sa, len, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV)
      != 0)
    return "?";
  if (sa->sa_family == AF_INET6)
    return std::string("[") + host + "]:" + port;
  return std::string(host) + ":" + port;
}

// Binds and listens; returns the socket or -1 after logging why.
int open_listener(const listen_address& a) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(a.host.c_str(), a.port.c_str(), &hints, &found); rc != 0) {
    std::fprintf(stderr, "serve: cannot resolve '%s': %s\n", a.host.c_str(),
                 ::gai_strerror(rc));
    return -1;
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(found, ::freeaddrinfo);
  std::string last_error = "no address";
  for (auto ai = found; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 128) == 0)
      return fd;
    last_error = describe_address(ai->ai_addr, ai->ai_addrlen) + ": " + std::strerror(errno);
    ::close(fd);
  }
  std::fprintf(stderr, "serve: cannot listen on %s:%s: %s\n", a.host.c_str(), a.port.c_str(),
               last_error.c_str());
  return -1;
}

// How long a stop waits for connections to write their last responses.
constexpr std::chrono::seconds stop_grace{5};

// One thread per connection; each connection is its own rpc_session, so one
// session's requests are ordered per connection.
int run_listener(engine& eng, const listen_address& a, int stop_fd, const stream_config& cfg) {
  int lfd = open_listener(a);
  if (lfd < 0)
    return 1;
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&bound), &len);
  std::fprintf(stderr, "listening on %s\n",
               describe_address(reinterpret_cast<sockaddr*>(&bound), len).c_str());
  std::fflush(stderr);

  // A connection's socket is closed by the listener after joining its thread,
  // so the descriptor number cannot be reused while the listener may still
  // shut it down.
  struct connection {
    std::thread thread;
    int fd = -1;
    std::shared_ptr<std::atomic<bool>> done = std::make_shared<std::atomic<bool>>(false);
  };
  std::list<connection> live;
  auto reap = [&live](bool all) {
    for (auto it = live.begin(); it != live.end();) {
      if (all || it->done->load()) {
        it->thread.join();
        ::close(it->fd);
        it = live.erase(it);
      } else {
        ++it;
      }
    }
  };

  for (;;) {
    pollfd fds[2] = {{lfd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    int n = ::poll(fds, stop_fd >= 0 ? 2 : 1, 1000);
    reap(false);
    if (n < 0 && errno != EINTR) {
      std::fprintf(stderr, "serve: poll: %s\n", std::strerror(errno));
      break;
    }
    if (n <= 0)
      continue;
    if (stop_fd >= 0 && fds[1].revents != 0)
      break;
    if (fds[0].revents == 0)
      continue;
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof peer;
    int cfd = ::accept4(lfd, reinterpret_cast<sockaddr*>(&peer), &peer_len, SOCK_CLOEXEC);
    if (cfd < 0) {
      if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
        std::fprintf(stderr, "serve: accept: %s\n", std::strerror(errno));
        std::this_thread::sleep_for(std::chrono::milliseconds(100)); // e.g. EMFILE
      }
      continue;
    }
    int one = 1;
    ::setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto who = describe_address(reinterpret_cast<sockaddr*>(&peer), peer_len);
    connection c;
    c.fd = cfd;
    auto done = c.done;
    try {
      c.thread = std::thread([&eng, cfd, stop_fd, cfg, who, done] {
        if (auto r = serve_stream(eng, cfd, cfd, stop_fd, cfg); !r)
          std::fprintf(stderr, "serve: connection %s: %s\n", who.c_str(),
                       r.err().message.c_str());
        ::shutdown(cfd, SHUT_WR);
        done->store(true);
      });
    } catch (const std::exception& e) {
      std::fprintf(stderr, "serve: cannot start a thread for %s: %s\n", who.c_str(), e.what());
      ::close(cfd);
      continue;
    }
    live.push_back(std::move(c));
  }
  ::close(lfd);
  // Every connection has seen the stop and is finishing its requests. One
  // whose client does not read its responses would block forever: after a
  // grace period its socket is shut down, which fails the pending writes.
  auto deadline = std::chrono::steady_clock::now() + stop_grace;
  while (std::chrono::steady_clock::now() < deadline) {
    reap(false);
    if (live.empty())
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!live.empty())
    std::fprintf(stderr, "serve: %zu connection(s) not reading their responses; dropping them\n",
                 live.size());
  for (auto& c : live)
    ::shutdown(c.fd, SHUT_RDWR);
  reap(true);
  return 0;
}

int run_serve(const args& xs) {
  serve_config cfg;
  if (auto code = parse_args(xs, cfg))
    return *code;
  std::optional<listen_address> where;
  if (cfg.listen) {
    where = parse_listen(*cfg.listen);
    if (!where)
      return usage_error("--listen needs [HOST:]PORT, not '" + *cfg.listen + "'");
  }

  signal_watch signals; // before the engine starts its threads
  if (signals.stop_fd() < 0) {
    std::fprintf(stderr, "serve: cannot create a pipe: %s\n", std::strerror(errno));
    return 1;
  }
  auto opened = engine::open(cfg.engine_opts);
  if (!opened) {
    std::fprintf(stderr, "serve: cannot open the store: %s\n",
                 to_string(opened.err()).c_str());
    return 1;
  }
  auto& eng = **opened;

  int code = 0;
  if (where) {
    code = run_listener(eng, *where, signals.stop_fd(), cfg.stream);
  } else {
    if (auto r = serve_stream(eng, STDIN_FILENO, STDOUT_FILENO, signals.stop_fd(), cfg.stream);
        !r) {
      std::fprintf(stderr, "serve: reading requests: %s\n", r.err().message.c_str());
      code = 1;
    }
  }
  if (auto r = eng.flush(); !r) {
    std::fprintf(stderr, "serve: flush failed: %s\n", to_string(r.err()).c_str());
    code = 1;
  }
  if (auto r = eng.close(); !r) {
    std::fprintf(stderr, "serve: close failed: %s\n", to_string(r.err()).c_str());
    code = 1;
  }
  return code;
}

} // namespace

static const bool registered = register_command(
  {"serve", "JSON-RPC over stdin/stdout or TCP (docs/protocol.md)", run_serve});

} // namespace agentstate::tools
