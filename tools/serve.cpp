// SPDX-License-Identifier: Apache-2.0
// `agentstate serve`: the engine behind the JSON-RPC protocol (docs/protocol.md)
// on standard input/output, or on TCP, TLS and Unix-socket listeners through
// the network server (server/server.hpp).
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "agentstate/engine.hpp"
#include "protocol/framing.hpp"
#include "server/server.hpp"
#include "tools/commands.hpp"

namespace agentstate::tools {

using protocol::serve_stream;
using protocol::stream_config;

namespace {

const char* serve_usage =
  "usage: agentstate serve (--store DIR | --memory) [options]\n"
  "\n"
  "Serves the engine over JSON-RPC 2.0, one JSON object per line (see\n"
  "docs/protocol.md): requests on standard input, responses on standard\n"
  "output, or the same over TCP, TLS or Unix sockets with --listen. Logs go\n"
  "to standard error, one line per event.\n"
  "\n"
  "  --store DIR            LMDB store directory (created if missing)\n"
  "  --memory               in-memory store: everything is gone at exit\n"
  "  --durability MODE      sync (default): fsync per group commit, survives power\n"
  "                         loss; nosync: survives a crash of this process, not\n"
  "                         of the OS\n"
  "  --threads N            engine worker threads (default: one per core)\n"
  "  --max-line-bytes N     longest request line (default 16777216); a longer\n"
  "                         line is discarded and answered with kind too_large\n"
  "  --max-in-flight N      requests admitted and not yet answered, per\n"
  "                         connection (default 4096)\n"
  "  --max-output-bytes N   responses waiting for a slow reader, per connection\n"
  "                         (default 67108864); beyond it the connection is not\n"
  "                         read until the client catches up\n"
  "  --log-format FORMAT    text (default, logfmt) or json (one object per line)\n"
  "  --create               start an empty store even where a store's lock files\n"
  "                         remain without its data.mdb (refused otherwise: the\n"
  "                         data of a store that was there is gone)\n"
  "  --max-store-mb N       the store's size limit in MiB (default 65536): past it\n"
  "                         writes fail with storage_full, before the disk fills\n"
  "\n"
  "Network (with --listen; may be repeated):\n"
  "  --listen [HOST:]PORT   a TCP listener; HOST defaults to 127.0.0.1, PORT 0\n"
  "                         picks a free port; each bound address is logged as\n"
  "                         'listening on HOST:PORT'. A HOST beyond loopback\n"
  "                         needs --auth-file (or --tls-client-ca) or --insecure\n"
  "  --listen unix:PATH     a Unix socket, created 0600 and removed at exit; a\n"
  "                         stale socket file is replaced\n"
  "  --auth-file FILE       tokens, one 'TOKEN APP[,APP...]' or 'TOKEN *' per\n"
  "                         line; each connection must send 'authenticate'\n"
  "                         first. Re-read on SIGHUP\n"
  "  --insecure             allow a non-loopback HOST without authentication\n"
  "  --tls-cert FILE        TLS on the TCP listeners: PEM certificate chain\n"
  "  --tls-key FILE         its PEM private key\n"
  "  --tls-client-ca FILE   require client certificates signed by these CAs\n"
  "  --io-threads N         I/O threads (default: one per core)\n"
  "  --max-connections N    connections at once (default 1024); one more gets an\n"
  "                         error line and is closed\n"
  "  --idle-timeout-s N     close a connection idle this long (default 300; 0:\n"
  "                         never)\n"
  "  --line-timeout-s N     close a connection whose request line (or TLS\n"
  "                         handshake) is not complete this long after it\n"
  "                         began (default 30; 0: never)\n"
  "  --shutdown-grace-s N   on SIGTERM, how long connections may take to finish\n"
  "                         before they are dropped (default 5)\n"
  "\n"
  "End of input (stdin) or SIGINT/SIGTERM: requests in flight finish, their\n"
  "responses are written, the store is flushed and closed, exit 0. A second\n"
  "signal exits at once (status 1). SIGHUP re-reads --auth-file.\n"
  "Exit 1 when the store cannot be opened, flushed or closed, or a listener\n"
  "cannot be set up; 2 for bad usage.\n";

struct serve_config {
  options engine_opts;
  bool have_store = false;
  stream_config stream;
  server::server_config net;
  server::log_format log_format = server::log_format::text;
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
  std::vector<std::string> network_only; // options that need --listen
  std::string tls_cert, tls_key, tls_ca;
  auto count = [](const std::string& flag, const std::string& v, std::uint64_t min,
                  std::uint64_t max, std::uint64_t& out) -> std::optional<int> {
    auto n = parse_count(v);
    if (!n || *n < min || *n > max)
      return usage_error(flag + " must be an integer " + std::to_string(min) + ".."
                         + std::to_string(max) + ", not '" + v + "'");
    out = *n;
    return std::nullopt;
  };
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
    if (a == "--create") {
      cfg.engine_opts.create = create_policy::always;
      continue;
    }
    if (a == "--insecure") {
      cfg.net.insecure = true;
      network_only.push_back(a);
      continue;
    }
    static const char* valued[] = {
      "--store",          "--durability",       "--listen",         "--max-line-bytes",
      "--threads",        "--max-in-flight",    "--max-output-bytes", "--log-format",
      "--auth-file",      "--tls-cert",         "--tls-key",        "--tls-client-ca",
      "--io-threads",     "--max-connections",  "--idle-timeout-s", "--line-timeout-s",
      "--shutdown-grace-s", "--max-store-mb"};
    bool takes_value = false;
    for (auto v : valued)
      takes_value = takes_value || a == v;
    if (!takes_value)
      return usage_error("unknown option '" + a + "'");
    if (i + 1 >= xs.size())
      return usage_error(a + " needs a value");
    const auto& v = xs[++i];
    std::uint64_t n = 0;
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
      auto spec = server::parse_listen(v);
      if (!spec)
        return usage_error("--listen needs [HOST:]PORT or unix:PATH, not '" + v + "'");
      cfg.net.listen.push_back(*spec);
    } else if (a == "--max-line-bytes") {
      if (auto e = count(a, v, 1, std::uint64_t{1} << 40, n))
        return e;
      cfg.stream.max_line_bytes = n;
    } else if (a == "--threads") {
      if (auto e = count(a, v, 0, 1024, n))
        return e;
      cfg.engine_opts.threads = static_cast<std::size_t>(n);
    } else if (a == "--max-store-mb") {
      if (auto e = count(a, v, 1, std::uint64_t{1} << 24, n))
        return e;
      cfg.engine_opts.max_store_bytes = n << 20;
    } else if (a == "--max-in-flight") {
      if (auto e = count(a, v, 1, 1u << 20, n))
        return e;
      cfg.stream.rpc.max_in_flight = static_cast<std::size_t>(n);
    } else if (a == "--max-output-bytes") {
      if (auto e = count(a, v, 1024, std::uint64_t{1} << 40, n))
        return e;
      cfg.stream.max_queued_bytes = static_cast<std::size_t>(n);
    } else if (a == "--log-format") {
      if (v == "text")
        cfg.log_format = server::log_format::text;
      else if (v == "json")
        cfg.log_format = server::log_format::json;
      else
        return usage_error("--log-format must be text or json, not '" + v + "'");
    } else {
      network_only.push_back(a);
      if (a == "--auth-file") {
        if (v.empty())
          return usage_error("--auth-file needs a file");
        cfg.net.auth_file = v;
      } else if (a == "--tls-cert") {
        tls_cert = v;
      } else if (a == "--tls-key") {
        tls_key = v;
      } else if (a == "--tls-client-ca") {
        tls_ca = v;
      } else if (a == "--io-threads") {
        if (auto e = count(a, v, 0, 1024, n))
          return e;
        cfg.net.io_threads = static_cast<std::size_t>(n);
      } else if (a == "--max-connections") {
        if (auto e = count(a, v, 1, 1u << 24, n))
          return e;
        cfg.net.lim.max_connections = static_cast<std::size_t>(n);
      } else if (a == "--idle-timeout-s") {
        if (auto e = count(a, v, 0, 1u << 24, n))
          return e;
        cfg.net.lim.idle_timeout = std::chrono::seconds(n);
      } else if (a == "--line-timeout-s") {
        if (auto e = count(a, v, 0, 1u << 24, n))
          return e;
        cfg.net.lim.line_timeout = std::chrono::seconds(n);
      } else if (a == "--shutdown-grace-s") {
        if (auto e = count(a, v, 0, 1u << 24, n))
          return e;
        cfg.net.lim.shutdown_grace = std::chrono::seconds(n);
      }
    }
  }
  if (memory == cfg.have_store)
    return usage_error("give exactly one of --store DIR and --memory");
  if (memory && mode)
    return usage_error("--durability applies to --store only");
  if (cfg.net.listen.empty() && !network_only.empty())
    return usage_error(network_only.front() + " applies to --listen (standard input and output "
                                              "need no authentication or limits of a network)");
  if (!tls_cert.empty() || !tls_key.empty() || !tls_ca.empty()) {
    if (tls_cert.empty() || tls_key.empty())
      return usage_error("TLS needs both --tls-cert and --tls-key");
    cfg.net.tls = server::tls_files{tls_cert, tls_key, tls_ca};
  }
  cfg.engine_opts.mode = memory ? durability::memory : mode.value_or(durability::sync);
  cfg.stream.rpc.max_line_depth = cfg.engine_opts.limits.max_json_depth + 8;
  cfg.net.max_line_depth = cfg.stream.rpc.max_line_depth;
  cfg.net.lim.max_line_bytes = cfg.stream.max_line_bytes;
  cfg.net.lim.max_in_flight = cfg.stream.rpc.max_in_flight;
  cfg.net.lim.max_output_bytes = cfg.stream.max_queued_bytes;
  return std::nullopt;
}

// -- signals ---------------------------------------------------------------------

// SIGINT, SIGTERM and SIGHUP are blocked in every thread (the engine's and the
// I/O pool's included: they inherit the mask) and taken by one thread with
// sigwait(). The first SIGINT/SIGTERM calls `on_stop`; a second one exits at
// once (status 1). SIGHUP calls `on_hup`.
class signal_watch {
public:
  explicit signal_watch(server::logger& log) : log_(log) {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGHUP);
    ::pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
  }

  ~signal_watch() { stop(); }

  /// Stops taking signals (later ones stay blocked and pending); the
  /// callbacks are not called after it returns.
  void stop() {
    if (thread_.joinable()) {
      done_ = true;
      ::pthread_kill(thread_.native_handle(), SIGTERM);
      thread_.join();
    }
  }

  signal_watch(const signal_watch&) = delete;
  signal_watch& operator=(const signal_watch&) = delete;

  /// Starts taking signals; ones that arrived before wait until now.
  void start(std::function<void()> on_stop, std::function<void()> on_hup) {
    on_stop_ = std::move(on_stop);
    on_hup_ = std::move(on_hup);
    thread_ = std::thread([this] { run(); });
  }

private:
  void run() {
    int received = 0;
    for (;;) {
      int sig = 0;
      if (::sigwait(&set_, &sig) != 0)
        continue;
      if (done_)
        return;
      if (sig == SIGHUP) {
        if (on_hup_)
          on_hup_();
        continue;
      }
      const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
      if (++received > 1) {
        log_.warn("signal", std::string("second signal (") + name + "); exiting now");
        std::_Exit(1);
      }
      log_.info("signal", std::string(name) + " received; finishing requests in flight");
      on_stop_();
    }
  }

  server::logger& log_;
  sigset_t set_;
  std::atomic<bool> done_{false};
  std::function<void()> on_stop_;
  std::function<void()> on_hup_;
  std::thread thread_;
};

// A pipe whose read end becomes readable on stop (serve_stream polls it).
class stop_pipe {
public:
  stop_pipe() {
    if (::pipe2(fds_, O_CLOEXEC) != 0)
      fds_[0] = fds_[1] = -1;
  }
  ~stop_pipe() {
    for (int fd : fds_)
      if (fd >= 0)
        ::close(fd);
  }
  int read_fd() const { return fds_[0]; }
  void raise() {
    char c = 1;
    while (::write(fds_[1], &c, 1) < 0 && errno == EINTR) {
    }
  }

private:
  int fds_[2] = {-1, -1};
};

int finish_engine(engine& eng, server::logger& log, int code) {
  if (auto r = eng.flush(); !r) {
    log.error("flush_failed", to_string(r.err()));
    code = 1;
  }
  if (auto r = eng.close(); !r) {
    log.error("close_failed", to_string(r.err()));
    code = 1;
  }
  return code;
}

int run_serve(const args& xs) {
  serve_config cfg;
  if (auto code = parse_args(xs, cfg))
    return *code;
  server::logger log(cfg.log_format);
  signal_watch signals(log); // before any thread starts

  if (cfg.net.listen.empty()) {
    stop_pipe stop;
    if (stop.read_fd() < 0) {
      log.error("startup_failed", std::string("cannot create a pipe: ") + std::strerror(errno));
      return 1;
    }
    auto opened = engine::open(cfg.engine_opts);
    if (!opened) {
      log.error("startup_failed", "cannot open the store: " + to_string(opened.err()));
      return 1;
    }
    auto& eng = **opened;
    signals.start([&stop] { stop.raise(); }, [&log] {
      log.info("signal", "SIGHUP: nothing to reload on standard input");
    });
    int code = 0;
    if (auto r = serve_stream(eng, STDIN_FILENO, STDOUT_FILENO, stop.read_fd(), cfg.stream); !r) {
      log.error("read_failed", "reading requests: " + r.err().message);
      code = 1;
    }
    code = finish_engine(eng, log, code);
    signals.stop();
    return code;
  }

  // Listeners first: a taken port or a bad certificate fails before the store
  // is touched.
  auto srv = server::network_server::open(cfg.net, log);
  if (!srv) {
    log.error("startup_failed", srv.err().message);
    return 1;
  }
  auto opened = engine::open(cfg.engine_opts);
  if (!opened) {
    log.error("startup_failed", "cannot open the store: " + to_string(opened.err()));
    return 1;
  }
  auto& eng = **opened;
  auto& net = **srv;
  signals.start([&net] { net.request_stop(); }, [&net] { net.reload_tokens(); });
  net.run(eng);
  int code = finish_engine(eng, log, 0);
  signals.stop();
  log.info("stopped", "", {{"exit_code", code}});
  // The engine is closed: whatever it still owed a dropped connection has
  // been handed over, and the network server may go.
  srv->reset();
  return code;
}

} // namespace

static const bool registered = register_command(
  {"serve", "JSON-RPC over stdin/stdout, TCP, TLS or Unix sockets (docs/protocol.md)",
   run_serve});

} // namespace agentstate::tools
