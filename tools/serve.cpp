// SPDX-License-Identifier: Apache-2.0
// Over 600 lines: the serve command whole: its options and their checks, signals, and
// both ways of serving (standard input, listeners).
// `agentstate serve`: the engine behind the JSON-RPC protocol (docs/protocol.md)
// on standard input/output, or on TCP, TLS and Unix-socket listeners through
// the network server (server/server.hpp).
#include <filesystem>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "actors/worker_idle.hpp"
#include "agentstate/engine.hpp"
#include "console/console.hpp"
#include "protocol/framing.hpp"
#include "server/server.hpp"
#include "tools/cli.hpp"
#include "tools/commands.hpp"
#include "tools/serve_cluster.hpp"

namespace agentstate::tools {

using protocol::serve_stream;
using protocol::stream_config;

namespace {

struct serve_config {
  options engine_opts;
  bool have_store = false;
  stream_config stream;
  server::server_config net;
  server::log_format log_format = server::log_format::text;
  cluster_flags cluster;
  /// --http: the web console's address; empty: no console.
  std::string http;
  bool http_actions = false;
};

int serve_usage_error(const std::string& message) {
  return usage_error("serve", message);
}

std::optional<std::uint64_t> parse_count(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 19)
    return std::nullopt;
  return std::stoull(s);
}

/// What the command line gave, as text; checked by check_args.
struct serve_args {
  std::string store, durability, log_format, auth_file, tls_cert, tls_key, tls_ca, http;
  bool memory = false, create = false, insecure = false, refresh_ttl = false, http_actions = false;
  bool has_store = false, has_auth_file = false;
  std::vector<std::string> listen;
  /// The options that take a count, by name, with their text.
  std::vector<std::pair<std::string, std::string>> counts;
  /// The network-only options given, in the order given.
  std::vector<std::string> network_only;
  cluster_flags cluster;
};

/// A count option: its name, range, where it goes in the config, its help.
struct count_flag {
  const char* name;
  std::uint64_t min, max;
  bool network_only;
  void (*set)(serve_config&, std::uint64_t);
  const char* help;
};

/// Sets one of the engine's byte limits.
template <std::size_t limits::*field>
void set_limit(serve_config& c, std::uint64_t n) {
  c.engine_opts.limits.*field = static_cast<std::size_t>(n);
}

const count_flag count_flags[] = {
  {"--threads", 0, 1024, false,
   [](serve_config& c, std::uint64_t n) { c.engine_opts.threads = static_cast<std::size_t>(n); },
   "engine worker threads (default: one per core)"},
  {"--max-line-bytes", 1, std::uint64_t{1} << 40, false,
   [](serve_config& c, std::uint64_t n) { c.stream.max_line_bytes = n; },
   "longest request line (default 16777216); a longer\n"
   "line is discarded and answered with kind too_large"},
  {"--max-in-flight", 1, 1u << 20, false,
   [](serve_config& c, std::uint64_t n) {
     c.stream.rpc.max_in_flight = static_cast<std::size_t>(n);
   },
   "requests admitted and not yet answered, per\nconnection (default 4096)"},
  {"--max-in-flight-bytes", 1024, std::uint64_t{1} << 40, false,
   [](serve_config& c, std::uint64_t n) {
     c.stream.rpc.max_in_flight_bytes = static_cast<std::size_t>(n);
   },
   "bytes of the request lines admitted and not yet\n"
   "answered, per connection (default 16777216); at it\n"
   "the connection is not read until answers free room"},
  {"--max-output-bytes", 1024, std::uint64_t{1} << 40, false,
   [](serve_config& c, std::uint64_t n) {
     c.stream.max_queued_bytes = static_cast<std::size_t>(n);
   },
   "responses waiting for a slow reader, per connection\n"
   "(default 67108864); beyond it the connection is not\n"
   "read until the client catches up"},
  {"--max-store-mb", 1, std::uint64_t{1} << 24, false,
   [](serve_config& c, std::uint64_t n) { c.engine_opts.max_store_bytes = n << 20; },
   "the store's size limit in MiB (default 65536): past it\n"
   "writes fail with storage_full, before the disk fills"},
  {"--max-event-bytes", 1024, std::uint64_t{1} << 30, false, set_limit<&limits::max_event_bytes>,
   "largest event as stored, in bytes (default 1048576);\n"
   "a larger one is refused with too_large"},
  {"--max-value-bytes", 16, std::uint64_t{1} << 30, false, set_limit<&limits::max_value_bytes>,
   "largest state value, in bytes (default 1048576)"},
  {"--max-state-bytes", 16, std::uint64_t{1} << 30, false, set_limit<&limits::max_state_bytes>,
   "largest initial state of a create_session, in bytes\n(default 4194304)"},
  {"--max-response-bytes", std::uint64_t{1} << 16, std::uint64_t{1} << 40, false,
   set_limit<&limits::max_response_bytes>,
   "largest answer a read builds (default 67108864; at\n"
   "least 65536): a list_sessions page ends early at it,\n"
   "anything else over it is too_large"},
  {"--session-idle-timeout-s", 1, 1u << 24, false,
   [](serve_config& c, std::uint64_t n) { c.engine_opts.idle_timeout = std::chrono::seconds(n); },
   "passivate a session's actor idle this long (default\n"
   "60); its state is reloaded from the store on next use"},
  {"--change-retention", 1, std::uint64_t{1} << 40, false,
   [](serve_config& c, std::uint64_t n) { c.engine_opts.change_retention.max_entries = n; },
   "changes the change log keeps for read_changes and\n"
   "watch (default 1000000; none older than 7 days)"},
  {"--max-watches", 0, 1u << 20, false,
   [](serve_config& c, std::uint64_t n) { c.stream.rpc.max_watches = static_cast<std::size_t>(n); },
   "live watches per connection (default 64); one more is\n"
   "refused with kind unavailable"},
  {"--max-server-watches", 0, 1u << 20, true,
   [](serve_config& c, std::uint64_t n) {
     c.net.lim.max_server_watches = static_cast<std::size_t>(n);
   },
   "live watches of all connections together (default\n1024)"},
  {"--session-ttl-s", 0, std::uint64_t{100} * 365 * 24 * 3600, false,
   [](serve_config& c, std::uint64_t n) {
     c.engine_opts.default_session_ttl = std::chrono::seconds(n);
   },
   "sessions created without ttl_s expire this long after\n"
   "creation (default 0: never)"},
  {"--change-retention-days", 1, 36500, false,
   [](serve_config& c, std::uint64_t n) {
     c.engine_opts.change_retention.max_age = std::chrono::hours(24 * n);
   },
   "days the change log keeps a change (default 7)"},
  {"--io-threads", 0, 1024, true,
   [](serve_config& c, std::uint64_t n) { c.net.io_threads = static_cast<std::size_t>(n); },
   "I/O threads (default: one per core)"},
  {"--max-connections", 1, 1u << 24, true,
   [](serve_config& c, std::uint64_t n) {
     c.net.lim.max_connections = static_cast<std::size_t>(n);
   },
   "connections at once (default 1024); one more gets an\nerror line and is closed"},
  {"--idle-timeout-s", 0, 1u << 24, true,
   [](serve_config& c, std::uint64_t n) { c.net.lim.idle_timeout = std::chrono::seconds(n); },
   "close a connection idle this long (default 300; 0:\nnever); one with a live watch is not\nidle "
   "while it reads what it is sent"},
  {"--line-timeout-s", 0, 1u << 24, true,
   [](serve_config& c, std::uint64_t n) { c.net.lim.line_timeout = std::chrono::seconds(n); },
   "close a connection whose request line (or TLS\n"
   "handshake) is not complete this long after it\n"
   "began (default 30; 0: never)"},
  {"--auth-timeout-s", 0, 1u << 24, true,
   [](serve_config& c, std::uint64_t n) { c.net.lim.auth_timeout = std::chrono::seconds(n); },
   "with --auth-file: close a connection not authenticated\n"
   "this long after it opened, whatever it sends (default\n"
   "10; 0: never)"},
  {"--max-unauthenticated", 0, 1u << 24, true,
   [](serve_config& c, std::uint64_t n) {
     c.net.lim.max_unauthenticated = static_cast<std::size_t>(n);
   },
   "with --auth-file: connections not yet authenticated at\n"
   "once (default 0: a quarter of --max-connections); a\n"
   "newer one displaces the oldest"},
  {"--max-server-in-flight-bytes", 1024, std::uint64_t{1} << 40, true,
   [](serve_config& c, std::uint64_t n) { c.net.lim.max_server_in_flight_bytes = n; },
   "the same of all connections together (default\n"
   "268435456; a connection with nothing in flight is\n"
   "still admitted one line)"},
  {"--max-partial-bytes", 1024, std::uint64_t{1} << 40, true,
   [](serve_config& c, std::uint64_t n) { c.net.lim.max_partial_bytes = n; },
   "unfinished request lines of all connections together\n"
   "(default 268435456); a line that would pass it is\n"
   "discarded and answered too_large"},
  {"--shutdown-grace-s", 0, 1u << 24, true,
   [](serve_config& c, std::uint64_t n) { c.net.lim.shutdown_grace = std::chrono::seconds(n); },
   "on SIGTERM, how long connections may take to finish\n"
   "before they are dropped (default 5)"},
};

// Turns the parsed text into `cfg`; returns the exit code when it is bad
// usage.
std::optional<int> check_args(const serve_args& a, serve_config& cfg) {
  std::optional<durability> mode;
  if (a.create)
    cfg.engine_opts.create = create_policy::always;
  if (a.insecure)
    cfg.net.insecure = true;
  cfg.engine_opts.refresh_ttl_on_append = a.refresh_ttl;
  if (a.has_store) {
    if (a.store.empty())
      return serve_usage_error("--store needs a directory");
    cfg.engine_opts.dir = a.store;
    cfg.have_store = true;
  }
  if (a.has_auth_file && a.auth_file.empty())
    return serve_usage_error("--auth-file needs a file");
  if (!a.durability.empty()) {
    if (a.durability == "sync")
      mode = durability::sync;
    else if (a.durability == "nosync")
      mode = durability::nosync;
    else
      return serve_usage_error("--durability must be sync or nosync, not '" + a.durability + "'");
  }
  for (auto& v : a.listen) {
    auto spec = server::parse_listen(v);
    if (!spec)
      return serve_usage_error("--listen needs [HOST:]PORT or unix:PATH, not '" + v + "'");
    cfg.net.listen.push_back(*spec);
  }
  for (auto& [name, v] : a.counts)
    for (auto& f : count_flags)
      if (name == f.name) {
        auto n = parse_count(v);
        if (!n || *n < f.min || *n > f.max)
          return serve_usage_error(name + " takes a whole number " + std::to_string(f.min) + ".."
                                   + std::to_string(f.max) + ", not '" + v + "'");
        f.set(cfg, *n);
      }
  if (!a.log_format.empty()) {
    if (a.log_format == "text")
      cfg.log_format = server::log_format::text;
    else if (a.log_format == "json")
      cfg.log_format = server::log_format::json;
    else
      return serve_usage_error("--log-format must be text or json, not '" + a.log_format + "'");
  }
  cfg.net.auth_file = a.auth_file;
  cfg.http = a.http;
  cfg.http_actions = a.http_actions;
  if (a.http_actions && a.http.empty())
    return serve_usage_error("--http-actions applies to --http");
  if (!a.http.empty()) {
    auto spec = server::parse_listen(a.http);
    if (!spec || spec->type != server::listen_spec::kind::tcp)
      return serve_usage_error("--http needs [HOST:]PORT, not '" + a.http + "'");
  }
  if (a.memory == cfg.have_store)
    return serve_usage_error("give exactly one of --store DIR and --memory");
  if (a.memory && mode)
    return serve_usage_error("--durability applies to --store only");
  if (cfg.net.listen.empty() && !a.network_only.empty())
    return serve_usage_error(a.network_only.front()
                             + " applies to --listen (standard input and output need no "
                               "authentication or limits of a network)");
  if (!a.tls_cert.empty() || !a.tls_key.empty() || !a.tls_ca.empty()) {
    if (a.tls_cert.empty() || a.tls_key.empty())
      return serve_usage_error("TLS needs both --tls-cert and --tls-key");
    cfg.net.tls = server::tls_files{a.tls_cert, a.tls_key, a.tls_ca};
  }
  cfg.engine_opts.mode = a.memory ? durability::memory : mode.value_or(durability::sync);
  cfg.stream.rpc.max_line_depth = cfg.engine_opts.limits.max_json_depth + 8;
  cfg.net.max_line_depth = cfg.stream.rpc.max_line_depth;
  cfg.net.lim.max_line_bytes = cfg.stream.max_line_bytes;
  cfg.net.lim.max_in_flight = cfg.stream.rpc.max_in_flight;
  cfg.net.lim.max_in_flight_bytes = cfg.stream.rpc.max_in_flight_bytes;
  cfg.net.lim.max_watches = cfg.stream.rpc.max_watches;
  cfg.net.lim.max_output_bytes = cfg.stream.max_queued_bytes;
  // Responses made on engine workers leave at their idle points (protocol/idle_hook.hpp).
  cfg.stream.idle = cfg.net.idle = &agentstate::detail::defer_until_idle;
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

int run_serve(serve_config& cfg);

/// The web console of --http on `eng`, started; null when there is none or
/// it could not start (`failed` is then set, the reason logged).
/// `tokens` receives the console's token source (reloaded on SIGHUP);
/// `server_stats` gives the network server's figures (none on standard input).
std::unique_ptr<console::console_server>
start_console(const serve_config& cfg, engine& eng, server::logger& log,
              std::shared_ptr<protocol::token_source>& tokens, bool& failed,
              std::function<json()> server_stats = {}) {
  failed = false;
  if (cfg.http.empty())
    return nullptr;
  console::console_config c;
  c.http = cfg.http;
  c.server_stats = std::move(server_stats);
  c.insecure = cfg.net.insecure;
  c.actions = cfg.http_actions;
  c.store_dir = cfg.have_store ? cfg.engine_opts.dir : std::string();
  c.max_line_depth = cfg.stream.rpc.max_line_depth;
  if (cfg.net.tls)
    c.tls = console::console_tls{cfg.net.tls->cert, cfg.net.tls->key, cfg.net.tls->client_ca};
  if (!cfg.net.auth_file.empty()) {
    auto t = protocol::token_table::load(cfg.net.auth_file);
    if (!t) {
      log.error("startup_failed", "--auth-file " + cfg.net.auth_file + ": " + t.err().message);
      failed = true;
      return nullptr;
    }
    tokens = std::make_shared<protocol::token_source>(std::move(*t));
    c.tokens = tokens;
  }
  auto srv = console::console_server::open(c, eng, log);
  if (!srv) {
    log.error("startup_failed", srv.err().message);
    failed = true;
    return nullptr;
  }
  (*srv)->start();
  return std::move(*srv);
}

/// Re-reads --auth-file for the console (the network server reloads its own).
void reload_console_tokens(const serve_config& cfg, protocol::token_source* tokens,
                           server::logger& log) {
  if (!tokens)
    return;
  auto t = protocol::token_table::load(cfg.net.auth_file);
  if (!t) {
    log.warn("tokens_reload_failed", "console: " + t.err().message);
    return;
  }
  tokens->replace(std::move(*t));
}

runner define_serve(command_line& cl) {
  auto a = std::make_shared<serve_args>();
  cl.usage = "agentstate serve (--store DIR | --memory) [options]";
  cl.description = R"(Serves the engine over JSON-RPC 2.0, one JSON object per line (see
docs/protocol.md): requests on standard input, responses on standard
output, or the same over TCP, TLS or Unix sockets with --listen. Logs go
to standard error, one line per event (--log-format); a failure after the
command line is read is one of them (event startup_failed, read_failed,
...), bad usage is one line in the voice of every command.)";
  cl.footer = "End of input (stdin) or SIGINT/SIGTERM: requests in flight finish, their\n"
              "responses are written, the store is flushed and closed, exit 0. A second\n"
              "signal exits at once (status 1). SIGHUP re-reads --auth-file.";
  cl.exit_status(exit_ok,
                 "stopped by the end of input or a signal, the store flushed and "
                 "closed");
  cl.exit_status(exit_failed,
                 "the store cannot be opened, flushed or closed, a listener cannot "
                 "be set up, the node cannot join its cluster, or a second signal "
                 "came (the error is logged)");
  auto& app = cl.app;
  auto* store = app.add_option("--store", a->store, "LMDB store directory (created if missing)")
                  ->type_name("DIR");
  app.add_flag("--memory", a->memory, "in-memory store: everything is gone at exit");
  app
    .add_option("--durability", a->durability,
                "sync (default): fsync per group commit, survives power\n"
                "loss; nosync: survives a crash of this process, not\n"
                "of the OS")
    ->type_name("MODE");
  auto counts = std::make_shared<std::vector<std::pair<cli_option*, std::string>>>();
  counts->reserve(std::size(count_flags));
  const std::string network = "network (with --listen; may be repeated)";
  auto add_count = [&](const count_flag& f) {
    counts->emplace_back(nullptr, std::string());
    auto* o = app.add_option(f.name, counts->back().second, f.help)->type_name("N");
    if (f.network_only)
      o->group(network);
    counts->back().first = o;
  };
  for (auto& f : count_flags)
    if (!f.network_only && std::string(f.name) != "--max-store-mb")
      add_count(f);
  app
    .add_option("--log-format", a->log_format,
                "text (default, logfmt) or json (one object per line)")
    ->type_name("FORMAT");
  app.add_flag("--create", a->create,
               "start an empty store even where a store's lock files\n"
               "remain without its data.mdb (refused otherwise: the\n"
               "data of a store that was there is gone)");
  app.add_flag("--refresh-ttl", a->refresh_ttl,
               "sessions created without refresh_ttl move their expiry\n"
               "to ttl_s past each stored append (default: expire\n"
               "ttl_s after creation)");
  for (auto& f : count_flags)
    if (std::string(f.name) == "--max-store-mb")
      add_count(f);
  repeatable(app.add_option("--listen", a->listen,
                            "a TCP listener ([HOST:]PORT; HOST defaults to 127.0.0.1,\n"
                            "PORT 0 picks a free port; each bound address is logged\n"
                            "as 'listening on HOST:PORT'; a HOST beyond loopback\n"
                            "needs --auth-file (or --tls-client-ca) or --insecure),\n"
                            "or a Unix socket (unix:PATH, created 0600 and removed\n"
                            "at exit; a stale socket file is replaced)"))
    ->type_name("ADDR")
    ->group(network);
  std::vector<cli_option*> net_only;
  auto* auth = app
                 .add_option("--auth-file", a->auth_file,
                             "tokens, one 'TOKEN APP[,APP...]' or 'TOKEN *' per\n"
                             "line, then optionally 'read-only'; each connection\n"
                             "must send 'authenticate' first. Re-read on SIGHUP")
                 ->type_name("FILE")
                 ->group(network);
  net_only.push_back(auth);
  net_only.push_back(
    app.add_flag("--insecure", a->insecure, "allow a non-loopback HOST without authentication")
      ->group(network));
  net_only.push_back(
    app.add_option("--tls-cert", a->tls_cert, "TLS on the TCP listeners: PEM certificate chain")
      ->type_name("FILE")
      ->group(network));
  net_only.push_back(app.add_option("--tls-key", a->tls_key, "its PEM private key")
                       ->type_name("FILE")
                       ->group(network));
  net_only.push_back(
    app.add_option("--tls-client-ca", a->tls_ca, "require client certificates signed by these CAs")
      ->type_name("FILE")
      ->group(network));
  for (auto& f : count_flags)
    if (f.network_only) {
      add_count(f);
      net_only.push_back(counts->back().first);
    }
  const std::string console_group = "web console (docs/console.md)";
  app
    .add_option("--http", a->http,
                "serve the web console at [HOST:]PORT (PORT 0 picks a\n"
                "free port; logged as 'console on http://HOST:PORT');\n"
                "tokens and TLS as for --listen; a HOST beyond loopback\n"
                "needs --auth-file or --insecure")
    ->type_name("ADDR")
    ->group(console_group);
  app
    .add_flag("--http-actions", a->http_actions,
              "the console offers delete, rewind and fork on the apps a\n"
              "token grants (default: read-only)")
    ->group(console_group);
  add_cluster_flags(cl, a->cluster);
  cli_app* parsed = &cl.app; // outlives the runner's call (parse_and_run)
  return [a, counts, net_only, store, auth, parsed] {
    a->has_store = store->count() > 0;
    a->has_auth_file = auth->count() > 0;
    for (auto& [o, v] : *counts)
      if (o->count() > 0)
        a->counts.emplace_back(o->get_name(), v);
    for (auto* o : parsed->parse_order())
      if (std::find(net_only.begin(), net_only.end(), o) != net_only.end())
        a->network_only.push_back(o->get_name());
    serve_config cfg;
    if (auto code = check_args(*a, cfg))
      return *code;
    bool tcp = std::any_of(cfg.net.listen.begin(), cfg.net.listen.end(),
                           [](const auto& l) { return l.type == server::listen_spec::kind::tcp; });
    a->cluster.peers_need_token = !cfg.net.auth_file.empty();
    a->cluster.peers_use_tls = cfg.net.tls.has_value();
    if (cfg.net.tls) {
      a->cluster.tls_cert = cfg.net.tls->cert;
      a->cluster.tls_key = cfg.net.tls->key;
    }
    if (auto why = check_cluster_flags(*parsed, a->cluster, tcp); !why.empty())
      return serve_usage_error(why);
    cfg.cluster = a->cluster;
    // The console's requests do not pass through the node's routing: on a node
    // they would read and write this node's shards only.
    if (cfg.cluster.given && !cfg.http.empty())
      return serve_usage_error("--http is not available on a cluster node");
    cfg.cluster.max_response_bytes = cfg.engine_opts.limits.max_response_bytes;
    return run_serve(cfg);
  };
}

// The engine `serve` runs; null after logging why it could not open.
std::unique_ptr<engine> open_engine(const serve_config& cfg, server::logger& log) {
  auto opened = engine::open(cfg.engine_opts);
  if (!opened) {
    log.error("startup_failed", "cannot open the store: " + to_string(opened.err()));
    return nullptr;
  }
  return std::move(*opened);
}

int run_serve(serve_config& cfg) {
  server::logger log(cfg.log_format);
  signal_watch signals(log); // before any thread starts

  if (cfg.net.listen.empty()) {
    stop_pipe stop;
    if (stop.read_fd() < 0) {
      log.error("startup_failed", std::string("cannot create a pipe: ") + std::strerror(errno));
      return 1;
    }
    auto opened = open_engine(cfg, log);
    if (!opened)
      return 1;
    auto& eng = *opened;
    std::shared_ptr<protocol::token_source> console_tokens;
    bool console_failed = false;
    auto web = start_console(cfg, eng, log, console_tokens, console_failed);
    if (console_failed)
      return finish_engine(eng, log, 1);
    signals.start([&stop] { stop.raise(); },
                  [&log] { log.info("signal", "SIGHUP: nothing to reload on standard input"); });
    int code = 0;
    if (auto r = serve_stream(eng, STDIN_FILENO, STDOUT_FILENO, stop.read_fd(), cfg.stream); !r) {
      log.error("read_failed", "reading requests: " + r.err().message);
      code = 1;
    }
    if (web)
      web->stop();
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
  // A cluster node's app: writes go to the app's home shard through the
  // member, which joins once the engine is open: until then (an append a
  // crash left in the outbox, finished at open) they are sent again later.
  auto link = std::make_shared<std::atomic<const cluster_member*>>(nullptr);
  if (cfg.cluster.given) {
    cfg.engine_opts.app_home.here = [link](const std::string& app) {
      auto* m = link->load();
      return m && m->app_here(app);
    };
    cfg.engine_opts.app_home.send = [link](app_write_request req, callback<app_write_result> cb) {
      auto* m = link->load();
      if (!m) {
        cb(error{errc::unavailable, "this node has not joined its cluster yet"});
        return;
      }
      m->send_app_write(std::move(req), std::move(cb));
    };
    cfg.engine_opts.replicator = [link](replica_shipment s,
                                        std::function<void(result<void>)> done) {
      auto* m = link->load();
      if (!m) {
        done(error{errc::unavailable, "this node has left its cluster"});
        return;
      }
      m->ship(std::move(s), std::move(done));
    };
  }
  // A store made now holds no copy of any shard, whatever the map says.
  std::error_code absent;
  const bool new_store =
    !cfg.have_store || !std::filesystem::exists(cfg.engine_opts.dir + "/data.mdb", absent);
  auto opened = open_engine(cfg, log);
  if (!opened)
    return 1;
  auto& eng = *opened;
  auto& net = **srv;
  std::unique_ptr<cluster_member> member;
  if (cfg.cluster.given) {
    std::string address = cfg.cluster.advertise;
    for (auto& a : net.addresses())
      if (address.empty() && a.rfind("unix:", 0) != 0)
        address = a;
    if (address.rfind("0.0.0.0:", 0) == 0 || address.rfind("[::]:", 0) == 0) {
      log.error("startup_failed",
                "the listener " + address
                  + " is every interface, which other nodes cannot dial: "
                    "give --advertise HOST:PORT");
      return finish_engine(eng, log, 1);
    }
    auto joined = cluster_member::join(cfg.cluster, address, log);
    if (!joined) {
      log.error("startup_failed", "cannot join the cluster: " + joined.err().message);
      return finish_engine(eng, log, 1);
    }
    member = std::move(*joined);
    link->store(member.get());
    log.info("cluster",
             "joined cluster '" + cfg.cluster.cluster + "' as node '" + cfg.cluster.node_id
               + "' at " + address);
    auto* m = member.get();
    // Given with --no-forward too: the member's routes forward only the
    // requests that must reach another node (the app: state at its home).
    std::function<void(const std::string&, const std::string&, json, protocol::forward_done)>
      forward = [m](const std::string& peer, const std::string& method, json params,
                    protocol::forward_done done) {
        m->forward(peer, method, std::move(params), std::move(done));
      };
    // The routes ask the replicator whether a shard is led: it starts first.
    if (auto r =
          m->start_moves(eng, cfg.have_store ? cfg.engine_opts.dir : std::string(), new_store, log);
        !r) {
      log.error("startup_failed", "cannot start the node's shard moves: " + r.err().message);
      link->store(nullptr);
      member.reset();
      return finish_engine(eng, log, 1);
    }
    net.set_routing([m](const protocol::route_query& q) { return m->route(q); },
                    [m](const json& params) { return m->cluster_map(params); }, std::move(forward));
    net.set_node_calls(
      [m](const std::string& method, json params, std::function<void(result<json>)> done) {
        m->node_call(method, std::move(params), std::move(done));
      });
    net.set_cluster_stats([m] { return m->stats(); });
  }
  std::shared_ptr<protocol::token_source> console_tokens;
  bool console_failed = false;
  auto web =
    start_console(cfg, eng, log, console_tokens, console_failed, [&net] { return net.stats(); });
  if (console_failed) {
    if (member)
      member->stop_moves();
    link->store(nullptr);
    member.reset();
    return finish_engine(eng, log, 1);
  }
  signals.start([&net] { net.request_stop(); },
                [&net, &cfg, &log, t = console_tokens.get()] {
                  net.reload_tokens();
                  reload_console_tokens(cfg, t, log);
                });
  net.run(eng);
  if (web)
    web->stop();
  if (member)
    member->stop_moves(); // it uses the engine
  int code = finish_engine(eng, log, 0);
  link->store(nullptr);
  member.reset(); // leaves the cluster
  signals.stop();
  log.info("stopped", "", {{"exit_code", code}});
  // The engine is closed: whatever it still owed a dropped connection has
  // been handed over, and the network server may go.
  srv->reset();
  return code;
}

} // namespace

static const bool serve_registered = register_command(
  {"serve", "the JSON-RPC protocol over stdio, TCP, TLS or Unix sockets", define_serve});

} // namespace agentstate::tools
