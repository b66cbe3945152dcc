// SPDX-License-Identifier: Apache-2.0
// Over 600 lines: network_server's one impl (listeners, TLS, tokens, accept, registry, shutdown).
#include "server/server.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <set>
#include <thread>
#include <unordered_map>

#include "protocol/auth.hpp"
#include "server/connection.hpp"

namespace agentstate::server {

using namespace detail;

namespace {

using tcp_acceptor = asio::basic_socket_acceptor<asio::ip::tcp, strand_t>;
using unix_acceptor = asio::basic_socket_acceptor<asio::local::stream_protocol, strand_t>;

// Descriptors kept free for the engine (store files, its own threads'
// plumbing), reloading the token file and the spare descriptor.
constexpr std::size_t reserved_descriptors = 32;

std::string describe(const asio::ip::tcp::endpoint& e) {
  auto a = e.address();
  if (a.is_v6())
    return "[" + a.to_string() + "]:" + std::to_string(e.port());
  return a.to_string() + ":" + std::to_string(e.port());
}

bool is_loopback(const asio::ip::address& a) {
  if (a.is_v4())
    return a.to_v4().is_loopback();
  auto v6 = a.to_v6();
  if (v6.is_v4_mapped())
    return asio::ip::make_address_v4(asio::ip::v4_mapped, v6).is_loopback();
  return v6.is_loopback();
}

// The token file holds secrets: a warning naming it and its mode (the bits
// of the file just read) when its group or others may read it. Logged at
// start and at each reload that reads such a file.
void warn_if_tokens_readable(const std::string& path, unsigned mode, logger& log) {
  if ((mode & (S_IRGRP | S_IROTH)) == 0)
    return;
  char octal[16];
  std::snprintf(octal, sizeof octal, "%04o", mode & 07777u);
  log.warn("auth_file_readable",
           std::string("the token file is readable by ")
             + ((mode & S_IROTH) ? "every user" : "its group") + " (mode " + octal
             + "); make it readable by its owner only: chmod 600 " + path,
           {{"file", path}, {"mode", std::string(octal)}});
}

std::size_t open_descriptors() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (auto e = ::readdir(d))
      if (e->d_name[0] != '.')
        ++n;
    ::closedir(d);
  }
  return n;
}

error invalid(std::string message) {
  return error{errc::invalid_argument, std::move(message)};
}

} // namespace

struct network_server::impl {
  struct listener {
    listen_spec spec;
    std::string address; ///< as bound
    bool tls = false;
    std::unique_ptr<tcp_acceptor> tcp;
    std::unique_ptr<unix_acceptor> local;
    bool created_path = false; ///< unix: remove the file at exit
    dev_t dev = 0;
    ino_t ino = 0;
    std::unique_ptr<timer_t> retry; ///< accept back-off after a failure

    /// Stops accepting (idempotent).
    void close_acceptor() {
      asio::error_code ignored;
      if (tcp)
        tcp->close(ignored);
      if (local)
        local->close(ignored);
    }
  };

  impl(server_config c, logger& l)
    : cfg(std::move(c)), log(l), ctx(1), srv_strand(asio::make_strand(ctx)),
      grace_timer(srv_strand), sh(std::make_shared<shared_state>()) {
    for (std::size_t i = 1; i < threads(); ++i)
      more_ctx.push_back(std::make_unique<asio::io_context>(1));
    sh->log = &log;
    sh->lim = cfg.lim;
    sh->max_line_depth = cfg.max_line_depth;
    sh->idle = cfg.idle;
    sh->decoders = &decoders;
  }

  ~impl() {
    for (auto& l : listeners) {
      l.close_acceptor();
      if (l.created_path) {
        struct stat st {};
        if (::lstat(l.spec.path.c_str(), &st) == 0 && st.st_dev == l.dev && st.st_ino == l.ino)
          ::unlink(l.spec.path.c_str());
      }
    }
    {
      std::lock_guard<std::mutex> guard(registry_mtx);
      registry.clear();
    }
    if (spare_fd >= 0)
      ::close(spare_fd);
  }

  std::size_t threads() const {
    if (cfg.io_threads > 0)
      return cfg.io_threads;
    auto n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : n;
  }

  // -- open ------------------------------------------------------------------------

  result<void> open() {
    bool any_tcp = false;
    for (const auto& l : cfg.listen)
      any_tcp = any_tcp || l.type == listen_spec::kind::tcp;
    if (cfg.tls && !any_tcp)
      return invalid("--tls-cert applies to TCP listeners, and every --listen is a Unix socket");
    if (!cfg.auth_file.empty()) {
      unsigned mode = 0;
      auto t = protocol::token_table::load(cfg.auth_file, &mode);
      if (!t)
        return error{errc::invalid_argument, "--auth-file: " + t.err().message};
      warn_if_tokens_readable(cfg.auth_file, mode, log);
      if (t->size() == 0)
        log.warn("tokens_loaded", "the token file holds no token: nobody can authenticate",
                 {{"file", cfg.auth_file}});
      tokens = std::make_shared<protocol::token_source>(std::move(*t));
      sh->tokens = tokens;
    }
    if (cfg.tls)
      if (auto r = make_tls(); !r)
        return r;
    if (auto r = limit_connections(); !r)
      return r;
    for (const auto& spec : cfg.listen) {
      auto r = spec.type == listen_spec::kind::tcp ? bind_tcp(spec) : bind_unix(spec);
      if (!r)
        return r;
    }
    spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    return {};
  }

  result<void> make_tls() {
    auto& files = *cfg.tls;
    ssl.emplace(asio::ssl::context::tls_server);
    asio::error_code ec;
    ssl->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2
                       | asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1
                       | asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use,
                     ec);
    // Idle connections give their TLS buffers back.
    ::SSL_CTX_set_mode(ssl->native_handle(), SSL_MODE_RELEASE_BUFFERS);
    if (ssl->use_certificate_chain_file(files.cert, ec); ec)
      return invalid("--tls-cert '" + files.cert + "': " + ec.message());
    if (ssl->use_private_key_file(files.key, asio::ssl::context::pem, ec); ec) {
      // OpenSSL checks the key against the certificate while loading it.
      if (ec.category() == asio::error::get_ssl_category()
          && ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == X509_R_KEY_VALUES_MISMATCH)
        return invalid("--tls-key '" + files.key + "' does not match the certificate '" + files.cert
                       + "'");
      return invalid("--tls-key '" + files.key + "': " + ec.message());
    }
    if (::SSL_CTX_check_private_key(ssl->native_handle()) != 1)
      return invalid("--tls-key '" + files.key + "' does not match the certificate '" + files.cert
                     + "'");
    if (!files.client_ca.empty()) {
      if (ssl->load_verify_file(files.client_ca, ec); ec)
        return invalid("--tls-client-ca '" + files.client_ca + "': " + ec.message());
      ssl->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert, ec);
    }
    return {};
  }

  // Raises the soft descriptor limit to the hard one and lowers the
  // connection cap to what the limit leaves.
  result<void> limit_connections() {
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
      rlimit raised = rl;
      raised.rlim_cur = rl.rlim_max;
      if (::setrlimit(RLIMIT_NOFILE, &raised) == 0)
        rl = raised;
    }
    cap = cfg.lim.max_connections;
    if (rl.rlim_cur != RLIM_INFINITY) {
      auto used = open_descriptors() + cfg.listen.size() + reserved_descriptors;
      auto room = rl.rlim_cur > used ? static_cast<std::size_t>(rl.rlim_cur - used) : 0;
      if (room == 0)
        return invalid("the descriptor limit (RLIMIT_NOFILE " + std::to_string(rl.rlim_cur)
                       + ") leaves no room for connections");
      if (room < cap) {
        log.warn("max_connections_lowered",
                 "--max-connections lowered to " + std::to_string(room)
                   + " by the descriptor limit",
                 {{"max_connections", room}, {"rlimit_nofile", rl.rlim_cur}});
        cap = room;
      }
    }
    sh->max_unauthenticated = cfg.lim.max_unauthenticated > 0
      ? std::min(cfg.lim.max_unauthenticated, cap)
      : std::max<std::size_t>(1, cap / 4);
    return {};
  }

  result<void> bind_tcp(const listen_spec& spec) {
    asio::ip::tcp::resolver resolver(ctx);
    asio::error_code ec;
    auto found = resolver.resolve(
      spec.host, spec.port,
      asio::ip::tcp::resolver::passive | asio::ip::tcp::resolver::numeric_service, ec);
    if (ec)
      return error{errc::io_error,
                   "cannot listen on " + server::describe(spec) + ": cannot resolve '" + spec.host
                     + "': " + ec.message()};
    bool authenticated = tokens || (cfg.tls && !cfg.tls->client_ca.empty());
    if (!authenticated && !cfg.insecure)
      for (const auto& r : found)
        if (!is_loopback(r.endpoint().address()))
          return invalid("--listen " + server::describe(spec) + " reaches beyond this machine ("
                         + r.endpoint().address().to_string()
                         + "): configure --auth-file (or --tls-client-ca), or pass --insecure");
    std::string last = "no address";
    for (const auto& r : found) {
      auto a = std::make_unique<tcp_acceptor>(srv_strand);
      asio::error_code e;
      a->open(r.endpoint().protocol(), e);
      if (!e)
        a->set_option(asio::socket_base::reuse_address(true), e);
      if (!e)
        a->bind(r.endpoint(), e);
      if (!e)
        a->listen(asio::socket_base::max_listen_connections, e);
      if (e) {
        last = describe(r.endpoint()) + ": " + e.message();
        continue;
      }
      listener l;
      l.spec = spec;
      l.tls = cfg.tls.has_value();
      l.address = describe(a->local_endpoint());
      l.tcp = std::move(a);
      log.info("listening", "listening on " + l.address,
               {{"address", l.address},
                {"transport", l.tls ? "tls" : "tcp"},
                {"auth", tokens ? "token" : "none"}});
      listeners.push_back(std::move(l));
      return {};
    }
    return error{errc::io_error, "cannot listen on " + server::describe(spec) + ": " + last};
  }

  result<void> bind_unix(const listen_spec& spec) {
    if (spec.path.size() >= sizeof(sockaddr_un{}.sun_path))
      return invalid("--listen unix:" + spec.path + ": the path is longer than "
                     + std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) + " bytes");
    struct stat st {};
    if (::lstat(spec.path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode))
        return invalid("--listen unix:" + spec.path + ": the path exists and is not a socket");
      asio::local::stream_protocol::socket probe(ctx);
      asio::error_code e;
      probe.connect(asio::local::stream_protocol::endpoint(spec.path), e);
      if (!e)
        return error{errc::io_error,
                     "cannot listen on unix:" + spec.path
                       + ": a server is already listening there"};
      if (e != asio::error::connection_refused)
        return error{errc::io_error,
                     "cannot listen on unix:" + spec.path
                       + ": cannot tell whether the socket there is stale: " + e.message()};
      if (::unlink(spec.path.c_str()) != 0)
        return error{errc::io_error,
                     "cannot listen on unix:" + spec.path
                       + ": cannot remove the stale socket: " + std::strerror(errno)};
      log.info("stale_socket_removed", "removed a stale socket", {{"path", spec.path}});
    }
    auto a = std::make_unique<unix_acceptor>(srv_strand);
    asio::error_code e;
    a->open(asio::local::stream_protocol(), e);
    if (!e) {
      // Created 0600: only the server's user may connect. The umask covers
      // the moment between bind() and chmod().
      auto old = ::umask(0177);
      a->bind(asio::local::stream_protocol::endpoint(spec.path), e);
      ::umask(old);
    }
    if (!e && ::chmod(spec.path.c_str(), 0600) != 0)
      e = asio::error_code(errno, asio::system_category());
    if (!e)
      a->listen(asio::socket_base::max_listen_connections, e);
    if (e)
      return error{errc::io_error, "cannot listen on unix:" + spec.path + ": " + e.message()};
    listener l;
    l.spec = spec;
    l.address = "unix:" + spec.path;
    if (::lstat(spec.path.c_str(), &st) == 0) {
      l.created_path = true;
      l.dev = st.st_dev;
      l.ino = st.st_ino;
    }
    l.local = std::move(a);
    log.info("listening", "listening on " + l.address,
             {{"address", l.address}, {"transport", "unix"}, {"auth", tokens ? "token" : "none"}});
    listeners.push_back(std::move(l));
    return {};
  }

  // -- run ---------------------------------------------------------------------------

  void run(engine& eng) {
    sh->eng = &eng;
    sh->server_stats = [this] { return stats_json(); };
    sh->on_finished = [this](std::uint64_t id) { remove(id); };
    sh->on_auth_state = [this](std::uint64_t id, bool unauthenticated_now) {
      std::lock_guard<std::mutex> guard(registry_mtx);
      if (unauthenticated_now)
        unauthenticated.insert(id);
      else
        unauthenticated.erase(id);
    };
    auto guard = asio::make_work_guard(ctx);
    std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards;
    for (auto& c : more_ctx)
      guards.push_back(asio::make_work_guard(*c));
    asio::post(srv_strand, [this] {
      for (auto& l : listeners) {
        if (stopping)
          break;
        if (l.tcp)
          accept_next(l, *l.tcp);
        else
          accept_next(l, *l.local);
      }
    });
    log.info("serving", "serving with " + std::to_string(threads()) + " I/O thread(s)",
             {{"io_threads", threads()}, {"max_connections", cap}});
    std::vector<std::thread> pool;
    for (auto& c : more_ctx)
      pool.emplace_back([this, &c] { run_loop(*c); });
    run_loop(ctx);
    for (auto& t : pool)
      t.join();
    // No strand runs any more: a decoding still under way finishes, and its
    // connection's wake-up is dropped with the I/O contexts.
    decoders.stop();
  }

  void run_loop(asio::io_context& io) {
    for (;;) {
      try {
        io.run();
        return;
      } catch (const std::exception& e) {
        log.error("internal", std::string("an I/O handler failed: ") + e.what());
      } catch (...) {
        log.error("internal", "an I/O handler failed");
      }
    }
  }

  // The I/O context (so the thread) of the next connection: in turn. On
  // srv_strand.
  asio::io_context& next_context() {
    auto i = next_ctx++ % (more_ctx.size() + 1);
    return i == 0 ? ctx : *more_ctx[i - 1];
  }

  template <class Acceptor>
  void accept_next(listener& l, Acceptor& a) {
    a.async_accept(asio::make_strand(next_context()),
                   [this, &l, &a](const asio::error_code& ec, auto sock) {
                     if (stopping)
                       return;
                     if (ec)
                       return on_accept_error(l, a, ec);
                     on_accepted(l, std::move(sock));
                     accept_next(l, a);
                   });
  }

  template <class Acceptor>
  void on_accept_error(listener& l, Acceptor& a, const asio::error_code& ec) {
    auto delay = std::chrono::milliseconds(0);
    if (ec == asio::error::no_descriptors || ec.value() == ENFILE) {
      // Out of descriptors: the spare one lets the waiting client be told.
      if (spare_fd >= 0) {
        ::close(spare_fd);
        spare_fd = -1;
      }
      int fd = ::accept4(a.native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        refuse_fd(fd, l.tls, "the descriptor limit is reached", l.address);
        ::close(fd);
      }
      spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      delay = std::chrono::milliseconds(50);
    } else if (ec != asio::error::connection_aborted && ec != asio::error::interrupted
               && ec != asio::error::would_block) {
      log.error("accept_failed", ec.message(), {{"listener", l.address}});
      delay = std::chrono::milliseconds(100);
    }
    if (delay.count() == 0)
      return accept_next(l, a);
    if (!l.retry)
      l.retry = std::make_unique<timer_t>(srv_strand);
    l.retry->expires_after(delay);
    l.retry->async_wait([this, &l, &a](const asio::error_code&) {
      if (!stopping)
        accept_next(l, a);
    });
  }

  // Tells a client over the cap why it is closed (TLS clients get no line:
  // it would need a handshake).
  void refuse_fd(int fd, bool tls, const std::string& why, const std::string& listener_name) {
    sh->stats.add(sh->stats.connections_refused);
    log.warn("connection_refused", why, {{"listener", listener_name}});
    if (!tls) {
      auto line = connection_error_line("too many connections: " + why + "; retry later");
      (void)!::send(fd, line.data(), line.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    ::shutdown(fd, SHUT_WR);
  }

  static std::string peer_of(const tcp_socket& s) {
    asio::error_code ec;
    auto e = s.remote_endpoint(ec);
    return ec ? std::string("?") : describe(e);
  }

  static std::string peer_of(unix_socket& s) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(s.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
      return "unix:pid=" + std::to_string(cred.pid) + ",uid=" + std::to_string(cred.uid);
    return "unix";
  }

  template <class Socket>
  void on_accepted(listener& l, Socket sock) {
    auto peer = peer_of(sock);
    std::size_t open_now;
    {
      std::lock_guard<std::mutex> guard(registry_mtx);
      open_now = registry.size();
    }
    if (open_now >= cap) {
      refuse_fd(sock.native_handle(), l.tls,
                "max_connections (" + std::to_string(cap) + ") reached, from " + peer, l.address);
      asio::error_code ignored;
      sock.close(ignored);
      return;
    }
    auto id = ++next_id;
    if (sh->tokens)
      displace_unauthenticated();
    std::shared_ptr<connection_base> c;
    if constexpr (std::is_same_v<Socket, tcp_socket>) {
      asio::error_code ignored;
      sock.set_option(asio::ip::tcp::no_delay(true), ignored);
      if (l.tls)
        c = make_connection(sh, tls_stream(std::move(sock), *ssl), id, peer);
      else
        c = make_connection(sh, std::move(sock), id, peer);
    } else {
      c = make_connection(sh, std::move(sock), id, peer);
    }
    {
      std::lock_guard<std::mutex> guard(registry_mtx);
      registry.emplace(id, c);
    }
    sh->stats.add(sh->stats.connections_open);
    sh->stats.add(sh->stats.connections_total);
    log.info("connection_opened", "", {{"conn", id}, {"peer", peer}, {"listener", l.address}});
    c->start();
  }

  // At their share (limits::max_unauthenticated), the oldest connections
  // not authenticated make room for the one being accepted.
  void displace_unauthenticated() {
    std::vector<std::shared_ptr<connection_base>> out;
    {
      std::lock_guard<std::mutex> guard(registry_mtx);
      while (!unauthenticated.empty() && unauthenticated.size() >= sh->max_unauthenticated) {
        auto oldest = *unauthenticated.begin();
        unauthenticated.erase(unauthenticated.begin());
        if (auto it = registry.find(oldest); it != registry.end())
          out.push_back(it->second);
      }
    }
    for (auto& c : out)
      c->displace();
  }

  void remove(std::uint64_t id) {
    {
      std::lock_guard<std::mutex> guard(registry_mtx);
      registry.erase(id);
    }
    sh->stats.sub(sh->stats.connections_open, 1);
    if (stopping)
      asio::post(srv_strand, [this] { check_done(); });
  }

  // -- stop ---------------------------------------------------------------------------

  void request_stop() {
    asio::post(srv_strand, [this] { begin_shutdown(); });
  }

  void begin_shutdown() {
    if (stopping)
      return;
    stopping = true;
    for (auto& l : listeners) {
      l.close_acceptor();
      if (l.retry)
        l.retry->cancel();
    }
    auto open = snapshot();
    log.info("shutdown",
             "stopped accepting; " + std::to_string(open.size())
               + " connection(s) finishing their requests",
             {{"connections", open.size()}, {"grace_s", cfg.lim.shutdown_grace.count()}});
    for (auto& c : open)
      c->shutdown();
    grace_timer.expires_after(cfg.lim.shutdown_grace);
    grace_timer.async_wait([this](const asio::error_code& ec) {
      if (!ec)
        grace_expired();
    });
    check_done();
  }

  void grace_expired() {
    if (done)
      return;
    auto open = snapshot();
    log.warn("shutdown_grace_expired",
             std::to_string(open.size()) + " connection(s) still open after "
               + std::to_string(cfg.lim.shutdown_grace.count())
               + " s (not reading their responses, or requests still running); dropping them",
             {{"connections", open.size()}});
    for (auto& c : open)
      c->drop();
    // The drops close the sockets; whatever the engine still owes them is
    // finished when the engine closes.
    grace_timer.expires_after(std::chrono::milliseconds(200));
    grace_timer.async_wait([this](const asio::error_code&) { finish(); });
  }

  void check_done() {
    if (done)
      return;
    std::lock_guard<std::mutex> guard(registry_mtx);
    if (registry.empty())
      asio::post(srv_strand, [this] { finish(); });
  }

  void finish() {
    if (done)
      return;
    done = true;
    grace_timer.cancel();
    ctx.stop();
    for (auto& c : more_ctx)
      c->stop();
  }

  std::vector<std::shared_ptr<connection_base>> snapshot() {
    std::vector<std::shared_ptr<connection_base>> out;
    std::lock_guard<std::mutex> guard(registry_mtx);
    out.reserve(registry.size());
    for (auto& [id, c] : registry)
      out.push_back(c);
    return out;
  }

  json stats_json() {
    std::uint64_t in_flight = 0;
    {
      std::lock_guard<std::mutex> guard(registry_mtx);
      for (auto& [id, c] : registry)
        in_flight += c->in_flight();
    }
    auto j = sh->stats.to_json(in_flight, sh->in_flight_bytes->load());
    j["max_connections"] = cap;
    j["io_threads"] = threads();
    j["watches"] = sh->watches->load();
    {
      std::lock_guard<std::mutex> guard(registry_mtx);
      j["unauthenticated"] = unauthenticated.size();
    }
    j["partial_line_bytes"] = sh->partial_bytes.load();
    if (sh->cluster_stats)
      j["cluster"] = sh->cluster_stats();
    return j;
  }

  void reload_tokens() {
    if (!tokens) {
      log.info("tokens_reload_skipped", "SIGHUP: no --auth-file to reload");
      return;
    }
    unsigned mode = 0;
    auto t = protocol::token_table::load(cfg.auth_file, &mode);
    if (!t) {
      log.error("tokens_reload_failed", t.err().message + "; keeping the current tokens",
                {{"file", cfg.auth_file}});
      return;
    }
    warn_if_tokens_readable(cfg.auth_file, mode, log);
    auto n = t->size();
    tokens->replace(std::move(*t));
    for (auto& c : snapshot())
      c->access_changed();
    log.info("tokens_reloaded", "", {{"file", cfg.auth_file}, {"tokens", n}});
  }

  server_config cfg;
  logger& log;
  /// One I/O context per I/O thread, each run by its thread alone: `ctx` (the
  /// thread that calls run(); also the listeners' and the server's own
  /// strand) and `more_ctx`. A connection lives on one of them for its
  /// whole life, so its handlers never wake another I/O thread. `more_ctx`
  /// is declared first so that it goes last: an accept still queued on `ctx`
  /// at destruction holds a socket of one of them.
  std::vector<std::unique_ptr<asio::io_context>> more_ctx;
  asio::io_context ctx;
  /// The decoding of long request lines (shared_state::decoders): as many
  /// threads as I/O threads, at least 2, so one long decoding does not
  /// hold up another connection's alone. Declared after the I/O contexts,
  /// so stopped before they go: a decoding's wake-up posts to one.
  detail::job_pool decoders{std::max<std::size_t>(2, threads())};
  std::size_t next_ctx = 0; ///< srv_strand only
  strand_t srv_strand;
  timer_t grace_timer;
  std::optional<asio::ssl::context> ssl;
  std::shared_ptr<protocol::token_source> tokens;
  std::shared_ptr<shared_state> sh;
  std::vector<listener> listeners;
  std::size_t cap = 0;
  int spare_fd = -1;
  std::atomic<bool> stopping{false};
  bool done = false; ///< srv_strand only
  std::atomic<std::uint64_t> next_id{0};
  std::mutex registry_mtx;
  std::unordered_map<std::uint64_t, std::shared_ptr<connection_base>> registry;
  /// With authentication: the connections not authenticated now, oldest
  /// (lowest id) first (under registry_mtx).
  std::set<std::uint64_t> unauthenticated;
};

result<std::unique_ptr<network_server>> network_server::open(server_config cfg, logger& log) {
  if (cfg.listen.empty())
    return error{errc::invalid_argument, "no listener"};
  auto p = std::make_unique<impl>(std::move(cfg), log);
  if (auto r = p->open(); !r)
    return r.err();
  return std::unique_ptr<network_server>(new network_server(std::move(p)));
}

network_server::network_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

network_server::~network_server() = default;

void network_server::run(engine& eng) {
  impl_->run(eng);
}

void network_server::request_stop() {
  impl_->request_stop();
}

void network_server::reload_tokens() {
  impl_->reload_tokens();
}

void network_server::set_routing(
  std::function<std::optional<protocol::route_refusal>(const protocol::route_query&)> route,
  std::function<result<json>(const json&)> cluster_map,
  std::function<void(const std::string&, const std::string&, json, protocol::forward_done)>
    forward) {
  impl_->sh->route = std::move(route);
  impl_->sh->cluster_map = std::move(cluster_map);
  impl_->sh->forward = std::move(forward);
}

void network_server::set_node_calls(protocol::node_call_fn call) {
  impl_->sh->node_call = std::move(call);
}

void network_server::set_cluster_stats(std::function<json()> figures) {
  impl_->sh->cluster_stats = std::move(figures);
}

json network_server::stats() const {
  return impl_->stats_json();
}

std::vector<std::string> network_server::addresses() const {
  std::vector<std::string> out;
  for (const auto& l : impl_->listeners)
    out.push_back(l.address);
  return out;
}

} // namespace agentstate::server
