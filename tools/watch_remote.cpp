// SPDX-License-Identifier: Apache-2.0
// tools/watch_remote.cpp: `agentstate watch ADDR` (tools/watch_remote.hpp): a
// JSON-RPC client of `serve` over TCP, TLS or a Unix socket that prints the
// `watch` notifications (or `read_changes` pages with --once) as JSON lines.
#include "tools/watch_remote.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "tools/bench/serve_client.hpp"

namespace agentstate::tools {

namespace {

using clock_type = std::chrono::steady_clock;

constexpr int handshake_ms = 10000;
constexpr int answer_ms = 30000;
/// A ping after this long without a line keeps a quiet watch from the
/// server's --idle-timeout-s (default 300 s).
constexpr int keepalive_ms = 30000;
/// How long a stopping watch waits for the answer to its unwatch.
constexpr int unwatch_ms = 5000;

std::string ssl_errors() {
  std::string out;
  while (auto e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty())
      out += "; ";
    out += buf;
  }
  return out.empty() ? std::string("unknown TLS error") : out;
}

int remaining_ms(clock_type::time_point deadline) {
  auto left =
    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

/// One client connection: a non-blocking socket, TLS on it when asked.
/// Owns the socket and the OpenSSL objects. Single-threaded.
class connection {
public:
  enum class got { line, woken, timeout, closed, failed };

  ~connection() {
    if (ssl_)
      SSL_free(ssl_);
    if (ctx_)
      SSL_CTX_free(ctx_);
    if (fd_ >= 0)
      ::close(fd_);
  }

  /// Connected (and past the TLS handshake), or null with `why`.
  static std::unique_ptr<connection> open(const remote_watch& w, std::string& why) {
    std::unique_ptr<connection> c(new connection);
    if (w.at.type == server::listen_spec::kind::unix_socket)
      c->fd_ = bench::connect_unix(w.at.path, why);
    else
      c->fd_ = bench::connect_tcp(server::describe(w.at), why);
    if (c->fd_ < 0)
      return nullptr;
    if (::fcntl(c->fd_, F_SETFL, ::fcntl(c->fd_, F_GETFL) | O_NONBLOCK) != 0) {
      why = std::string("fcntl: ") + std::strerror(errno);
      return nullptr;
    }
    if (w.tls && !c->start_tls(w, why))
      return nullptr;
    return c;
  }

  /// Writes `line` and a newline, waiting for room up to answer_ms.
  bool send_line(const std::string& line, std::string& why) {
    std::string bytes = line + "\n";
    std::size_t off = 0;
    auto deadline = clock_type::now() + std::chrono::milliseconds(answer_ms);
    while (off < bytes.size()) {
      short events = POLLOUT;
      if (ssl_) {
        ERR_clear_error();
        int n = SSL_write(ssl_, bytes.data() + off, static_cast<int>(bytes.size() - off));
        if (n > 0) {
          off += static_cast<std::size_t>(n);
          continue;
        }
        int e = SSL_get_error(ssl_, n);
        if (e == SSL_ERROR_WANT_READ)
          events = POLLIN;
        else if (e != SSL_ERROR_WANT_WRITE) {
          why = "TLS write: " + ssl_errors();
          return false;
        }
      } else {
        auto n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
        if (n > 0) {
          off += static_cast<std::size_t>(n);
          continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          why = std::string("write: ") + std::strerror(errno);
          return false;
        }
      }
      pollfd p{fd_, events, 0};
      int left = remaining_ms(deadline);
      if (left == 0) {
        why = "the server takes no input";
        return false;
      }
      ::poll(&p, 1, left);
    }
    return true;
  }

  /// The next line (without its newline) into `line`; or `woken` when
  /// `wake_fd` (may be -1) becomes readable, `timeout` after `timeout_ms`
  /// (-1: none), `closed` at the end of the stream, `failed` with `why`.
  got next_line(std::string& line, int wake_fd, int timeout_ms, std::string& why) {
    auto deadline = clock_type::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        line.assign(buf_, 0, nl);
        if (!line.empty() && line.back() == '\r')
          line.pop_back();
        buf_.erase(0, nl + 1);
        return got::line;
      }
      short events = POLLIN;
      char chunk[65536];
      long n = read_some(chunk, sizeof chunk, events, why);
      if (n > 0) {
        buf_.append(chunk, static_cast<std::size_t>(n));
        continue;
      }
      if (n == 0)
        return got::closed;
      if (n == -2)
        return got::failed;
      pollfd p[2] = {{fd_, events, 0}, {wake_fd, POLLIN, 0}};
      int wait = timeout_ms < 0 ? -1 : remaining_ms(deadline);
      if (timeout_ms >= 0 && wait == 0)
        return got::timeout;
      int r = ::poll(p, wake_fd >= 0 ? 2 : 1, wait);
      if (r < 0 && errno != EINTR) {
        why = std::string("poll: ") + std::strerror(errno);
        return got::failed;
      }
      if (wake_fd >= 0 && (p[1].revents & POLLIN))
        return got::woken;
    }
  }

private:
  connection() = default;

  bool start_tls(const remote_watch& w, std::string& why) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    if (!ctx_) {
      why = "TLS: " + ssl_errors();
      return false;
    }
    SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    if (!w.tls_ca.empty()) {
      if (SSL_CTX_load_verify_locations(ctx_, w.tls_ca.c_str(), nullptr) != 1) {
        why = "cannot load the CA file " + w.tls_ca + ": " + ssl_errors();
        return false;
      }
    } else if (SSL_CTX_set_default_verify_paths(ctx_) != 1) {
      why = "cannot load the system's CAs: " + ssl_errors();
      return false;
    }
    if (!w.tls_cert.empty()) {
      if (SSL_CTX_use_certificate_chain_file(ctx_, w.tls_cert.c_str()) != 1
          || SSL_CTX_use_PrivateKey_file(ctx_, w.tls_key.c_str(), SSL_FILETYPE_PEM) != 1
          || SSL_CTX_check_private_key(ctx_) != 1) {
        why = "cannot use the client certificate " + w.tls_cert + " with key " + w.tls_key + ": "
          + ssl_errors();
        return false;
      }
    }
    ssl_ = SSL_new(ctx_);
    if (!ssl_ || SSL_set_fd(ssl_, fd_) != 1) {
      why = "TLS: " + ssl_errors();
      return false;
    }
    SSL_set_mode(ssl_, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    // The server's certificate must name the host connected to: its IP
    // address, or its DNS name (also sent as SNI).
    const std::string& host = w.at.host;
    unsigned char ip[16];
    bool numeric =
      ::inet_pton(AF_INET, host.c_str(), ip) == 1 || ::inet_pton(AF_INET6, host.c_str(), ip) == 1;
    if (numeric) {
      if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), host.c_str()) != 1) {
        why = "TLS: " + ssl_errors();
        return false;
      }
    } else if (SSL_set1_host(ssl_, host.c_str()) != 1
               || SSL_set_tlsext_host_name(ssl_, host.c_str()) != 1) {
      why = "TLS: " + ssl_errors();
      return false;
    }
    auto deadline = clock_type::now() + std::chrono::milliseconds(handshake_ms);
    for (;;) {
      ERR_clear_error();
      int r = SSL_connect(ssl_);
      if (r == 1)
        return true;
      int e = SSL_get_error(ssl_, r);
      short events = 0;
      if (e == SSL_ERROR_WANT_READ)
        events = POLLIN;
      else if (e == SSL_ERROR_WANT_WRITE)
        events = POLLOUT;
      else {
        auto verify = SSL_get_verify_result(ssl_);
        why = "TLS handshake with " + server::describe(w.at) + " failed: "
          + (verify != X509_V_OK
               ? std::string("the server's certificate: ") + X509_verify_cert_error_string(verify)
               : ssl_errors());
        return false;
      }
      int left = remaining_ms(deadline);
      if (left == 0) {
        why = "TLS handshake with " + server::describe(w.at) + " timed out";
        return false;
      }
      pollfd p{fd_, events, 0};
      ::poll(&p, 1, left);
    }
  }

  /// >0: bytes read; 0: end of stream; -1: nothing now (wait for `events`);
  /// -2: failed (`why`).
  long read_some(char* p, std::size_t n, short& events, std::string& why) {
    if (ssl_) {
      ERR_clear_error();
      int r = SSL_read(ssl_, p, static_cast<int>(n));
      if (r > 0)
        return r;
      int e = SSL_get_error(ssl_, r);
      if (e == SSL_ERROR_WANT_READ) {
        events = POLLIN;
        return -1;
      }
      if (e == SSL_ERROR_WANT_WRITE) {
        events = POLLOUT;
        return -1;
      }
      if (e == SSL_ERROR_ZERO_RETURN)
        return 0;
      if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)
        return 0; // closed without close_notify
      why = "TLS read: " + ssl_errors();
      return -2;
    }
    auto r = ::recv(fd_, p, n, 0);
    if (r > 0)
      return static_cast<long>(r);
    if (r == 0)
      return 0;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      events = POLLIN;
      return -1;
    }
    if (errno == ECONNRESET) {
      why = "connection reset";
      return -2;
    }
    why = std::string("read: ") + std::strerror(errno);
    return -2;
  }

  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  std::string buf_;
};

json rpc(const std::string& id, const std::string& method, json params) {
  return json{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", std::move(params)}};
}

std::string text_of(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

/// One feed over one connection: the requests, the lines printed and the
/// cursor they reach. Single-threaded.
class feed {
public:
  feed(connection& c, const remote_watch& w) : c_(c), w_(w) {}

  int run() {
    if (!w_.token.empty()) {
      json answer;
      if (int rc = call("authenticate", json{{"token", w_.token}}, answer); rc != watch_ok)
        return rc;
    }
    return w_.once ? run_once() : run_live();
  }

private:
  // --once: read_changes pages from --from to the head. Without --from the
  // feed starts at the head: a watch answers where that is, and the
  // connection's end ends it.
  int run_once() {
    json answer;
    if (w_.from.empty()) {
      if (int rc = call("watch", w_.filter, answer); rc != watch_ok)
        return rc;
      std::fprintf(stderr, "watch: at %s\n", text_of(answer, "cursor").c_str());
      return watch_ok;
    }
    last_ = w_.from;
    for (;;) {
      json params = w_.filter;
      params["from"] = last_;
      params["limit"] = 1000;
      if (int rc = call("read_changes", params, answer); rc != watch_ok)
        return rc;
      if (!print(answer["changes"]))
        return watch_unreachable;
      last_ = text_of(answer, "cursor");
      if (answer.value("at_head", false)) {
        std::fprintf(stderr, "watch: at %s\n", last_.c_str());
        return watch_ok;
      }
    }
  }

  int run_live() {
    ::signal(SIGPIPE, SIG_IGN);
    if (!install_stop_handlers()) {
      std::fprintf(stderr, "watch: pipe: %s\n", std::strerror(errno));
      return watch_unreachable;
    }
    json params = w_.filter;
    if (!w_.from.empty())
      params["from"] = w_.from;
    json answer;
    if (int rc = call("watch", params, answer); rc != watch_ok)
      return rc;
    const std::string watch_id = text_of(answer, "watch_id");
    last_ = text_of(answer, "cursor");
    bool stopping = false;
    auto stop_deadline = clock_type::now();
    std::string line, why;
    for (;;) {
      int wait = stopping ? remaining_ms(stop_deadline) : keepalive_ms;
      if (stopping && wait == 0)
        return stopped();
      switch (c_.next_line(line, stopping ? -1 : stop_fd(), wait, why)) {
        case connection::got::timeout:
          if (stopping)
            return stopped();
          if (!c_.send_line(rpc("ping", "ping", nullptr).dump(), why))
            return lost(why);
          continue;
        case connection::got::woken:
          stopping = true;
          stop_deadline = clock_type::now() + std::chrono::milliseconds(unwatch_ms);
          if (!c_.send_line(rpc("unwatch", "unwatch", json{{"watch_id", watch_id}}).dump(), why))
            return stopped();
          continue;
        case connection::got::closed:
          return stopping ? stopped() : lost("the server closed the connection");
        case connection::got::failed: return stopping ? stopped() : lost(why);
        case connection::got::line: break;
      }
      auto msg = parse_json(line, 512);
      if (!msg || !msg->is_object())
        return lost("the server sent a line that is not a JSON object");
      const std::string method = text_of(*msg, "method");
      if (method == "changes") {
        const json& p = (*msg)["params"];
        if (!print(p["changes"]))
          return watch_unreachable;
        last_ = text_of(p, "cursor");
      } else if (method == "watch_ended") {
        const json& p = (*msg)["params"];
        std::string reason = text_of(p, "reason");
        last_ = text_of(p, "resume_from");
        if (stopping && reason == "cancelled")
          continue; // the unwatch's answer follows
        std::string detail;
        if (p.contains("error")) {
          detail = ": " + text_of(p["error"], "kind") + ": " + text_of(p["error"], "message");
          if (auto oldest = text_of(p["error"], "oldest"); !oldest.empty())
            detail += " (the oldest cursor it serves is " + oldest + ")";
        }
        std::fprintf(stderr, "watch: the server ended the watch (%s%s); resume with --from %s\n",
                     reason.c_str(), detail.c_str(), last_.c_str());
        return watch_ended;
      } else if (msg->contains("id")) {
        const json& id = (*msg)["id"];
        if (id == "unwatch") {
          if (msg->contains("result"))
            if (auto c = text_of((*msg)["result"], "resume_from"); !c.empty())
              last_ = c;
          return stopped();
        }
        if (id.is_null() && msg->contains("error")) {
          const json& e = (*msg)["error"];
          return lost("the server closed the connection (" + text_of(e["data"], "kind") + ": "
                      + text_of(e, "message") + ")");
        }
        // The keepalive's pong.
      }
    }
  }

  /// Sends one request and waits for its answer (no notification comes
  /// before the first watch's answer). watch_ok with its result in `out`, or
  /// the exit status after reporting the failure.
  int call(const std::string& method, json params, json& out) {
    std::string why, line;
    const std::string id = method;
    if (!c_.send_line(rpc(id, method, std::move(params)).dump(), why))
      return lost(why);
    for (;;) {
      switch (c_.next_line(line, -1, answer_ms, why)) {
        case connection::got::timeout:
          return lost("no answer to " + method + " within " + std::to_string(answer_ms / 1000)
                      + " s");
        case connection::got::closed: return lost("the server closed the connection");
        case connection::got::failed: return lost(why);
        default: break;
      }
      auto msg = parse_json(line, 512);
      if (!msg || !msg->is_object())
        return lost("the server sent a line that is not a JSON object");
      if (!msg->contains("id"))
        continue; // a notification
      const json& rid = (*msg)["id"];
      if (msg->contains("error") && (rid == id || rid.is_null()))
        return refused(method, (*msg)["error"]);
      if (rid != id)
        continue;
      out = (*msg)["result"];
      return watch_ok;
    }
  }

  int refused(const std::string& method, const json& e) {
    const json& data = e.contains("data") ? e["data"] : json::object();
    std::string kind = text_of(data, "kind");
    std::string hint;
    if (kind == "unauthenticated")
      hint = w_.token.empty() ? " (the server needs a token: give --token-file FILE or set "
                                "AGENTSTATE_TOKEN)"
                              : " (the token was refused)";
    else if (kind == "cursor_expired" && !text_of(data, "oldest").empty())
      hint = "; the oldest cursor it serves is " + text_of(data, "oldest") + " (resume with --from "
        + text_of(data, "oldest") + ", accepting the gap)";
    std::fprintf(stderr, "watch: the server refused %s: %s: %s%s\n", method.c_str(), kind.c_str(),
                 text_of(e, "message").c_str(), hint.c_str());
    return watch_refused;
  }

  int lost(const std::string& why) {
    if (last_.empty())
      std::fprintf(stderr, "watch: %s: %s\n", server::describe(w_.at).c_str(), why.c_str());
    else
      std::fprintf(stderr, "watch: %s: %s; printed up to %s (resume with --from %s)\n",
                   server::describe(w_.at).c_str(), why.c_str(), last_.c_str(), last_.c_str());
    return watch_lost;
  }

  int stopped() {
    std::fprintf(stderr, "watch: stopped at %s\n", last_.c_str());
    return watch_ok;
  }

  /// Prints each change of `changes` as one line; false when stdout fails.
  bool print(const json& changes) {
    if (changes.is_array())
      for (const auto& c : changes)
        std::printf("%s\n", c.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    std::fflush(stdout);
    if (std::ferror(stdout)) {
      std::fprintf(stderr, "watch: cannot write to standard output\n");
      return false;
    }
    return true;
  }

  connection& c_;
  const remote_watch& w_;
  std::string last_; ///< every change of the scope up to here is printed
};

bool decimal(const std::string& s) {
  if (s.empty() || s.size() > 5)
    return false;
  for (char ch : s)
    if (ch < '0' || ch > '9')
      return false;
  return true;
}

} // namespace

std::optional<server::listen_spec> server_address(const std::string& arg) {
  if (arg.rfind("unix:", 0) == 0)
    return server::parse_listen(arg);
  if (arg.rfind("tcp://", 0) == 0)
    return server::parse_listen(arg.substr(6));
  auto colon = arg.rfind(':');
  if (colon == std::string::npos || colon == 0 || !decimal(arg.substr(colon + 1)))
    return std::nullopt;
  struct stat st {};
  if (::stat(arg.c_str(), &st) == 0)
    return std::nullopt;
  return server::parse_listen(arg);
}

result<std::string> read_token_file(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return error{errc::invalid_argument,
                 "cannot read the token file " + path + ": " + std::strerror(errno)};
  std::string line;
  while (std::getline(in, line)) {
    auto start = line.find_first_not_of(" \t\r");
    if (start == std::string::npos || line[start] == '#')
      continue;
    auto end = line.find_first_of(" \t\r", start);
    return line.substr(start, end == std::string::npos ? std::string::npos : end - start);
  }
  return error{errc::invalid_argument, "the token file " + path + " holds no token"};
}

int run_remote_watch(const remote_watch& w) {
  std::string why;
  auto c = connection::open(w, why);
  if (!c) {
    std::fprintf(stderr, "watch: cannot reach %s: %s\n", server::describe(w.at).c_str(),
                 why.c_str());
    return watch_unreachable;
  }
  feed f(*c, w);
  return f.run();
}

namespace {

// SIGINT/SIGTERM: the handler writes a byte to the pipe the feed loops poll.
int wake_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int) {
  if (wake_pipe[1] >= 0) {
    char c = 1;
    [[maybe_unused]] auto n = ::write(wake_pipe[1], &c, 1);
  }
}

} // namespace

bool install_stop_handlers() {
  if (wake_pipe[0] >= 0)
    return true;
  if (::pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    return false;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  return true;
}

int stop_fd() {
  return wake_pipe[0];
}

bool wait_stop(unsigned ms) {
  if (wake_pipe[0] < 0)
    return false;
  pollfd p{wake_pipe[0], POLLIN, 0};
  int n;
  do
    n = ::poll(&p, 1, static_cast<int>(ms));
  while (n < 0 && errno == EINTR);
  return n > 0 && (p.revents & POLLIN);
}

} // namespace agentstate::tools
