// SPDX-License-Identifier: Apache-2.0
// client/transport.cpp: connecting the stream of client/transport.hpp (TCP,
// Unix socket, TLS) with a bound on the whole attempt, and the stream over a
// caller's pair of descriptors.
#include "client/transport.hpp"

#include <asio/ssl.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace agentstate::client_detail {

namespace {

using tcp = asio::ip::tcp;
using local = asio::local::stream_protocol;
using tls_socket = asio::ssl::stream<tcp::socket>;

/// A stream over socket type S. The TLS context, when any, outlives the
/// socket (declared first, destroyed last).
template <class S>
class basic_stream final : public stream {
public:
  template <class... A>
  explicit basic_stream(std::shared_ptr<asio::ssl::context> ctx, A&&... a)
    : ctx_(std::move(ctx)), sock(std::forward<A>(a)...) {}

  void read_some(asio::mutable_buffer b, io_handler h) override {
    sock.async_read_some(b, std::move(h));
  }
  void write(asio::const_buffer b, io_handler h) override {
    asio::async_write(sock, b, std::move(h));
  }
  void close() override {
    asio::error_code ec;
    sock.lowest_layer().close(ec);
  }

private:
  std::shared_ptr<asio::ssl::context> ctx_;

public:
  S sock;
};

/// Reads from one descriptor and writes to another (a child's stdout and
/// stdin), or both on one when `write_` is empty.
class fd_stream final : public stream {
public:
  explicit fd_stream(asio::io_context& io) : read_(io) {}

  /// Takes `read_fd` and `write_fd` (the same for one descriptor). On an
  /// error (a descriptor the reactor cannot watch, such as a regular file)
  /// `write_fd` is not taken, and `read_fd` is when `read_taken` says so.
  asio::error_code assign(int read_fd, int write_fd, bool& read_taken) {
    asio::error_code ec;
    read_.assign(read_fd, ec);
    read_taken = !ec;
    if (ec || write_fd == read_fd)
      return ec;
    write_.emplace(read_.get_executor());
    write_->assign(write_fd, ec);
    return ec;
  }

  void read_some(asio::mutable_buffer b, io_handler h) override {
    read_.async_read_some(b, std::move(h));
  }
  void write(asio::const_buffer b, io_handler h) override {
    asio::async_write(write_ ? *write_ : read_, b, std::move(h));
  }
  void close() override {
    asio::error_code ec;
    read_.close(ec);
    if (write_)
      write_->close(ec);
  }

private:
  asio::posix::stream_descriptor read_;
  std::optional<asio::posix::stream_descriptor> write_;
};

/// One connection attempt: resolve (TCP), connect, TLS handshake; the timer
/// abandons it. Kept alive by its pending handlers.
struct connector : std::enable_shared_from_this<connector> {
  connector(asio::io_context& io, server::listen_spec a,
            std::function<void(result<std::unique_ptr<stream>>)> d)
    : at(std::move(a)), name(server::describe(at)), resolver(io), timer(io), done(std::move(d)) {}

  server::listen_spec at;
  std::string name;
  tcp::resolver resolver;
  asio::steady_timer timer;
  std::function<void(result<std::unique_ptr<stream>>)> done;
  std::unique_ptr<basic_stream<tcp::socket>> plain;
  std::unique_ptr<basic_stream<local::socket>> unix_sock;
  std::unique_ptr<basic_stream<tls_socket>> tls;
  bool finished = false;

  void finish(result<std::unique_ptr<stream>> r) {
    if (finished)
      return;
    finished = true;
    asio::error_code ec;
    timer.cancel();
    resolver.cancel();
    done(std::move(r));
  }

  void fail(errc code, std::string why) {
    for (stream* s : {static_cast<stream*>(plain.get()), static_cast<stream*>(unix_sock.get()),
                      static_cast<stream*>(tls.get())})
      if (s)
        s->close();
    finish(error{code, std::move(why)});
  }

  tcp::socket& tcp_socket() { return plain ? plain->sock : tls->sock.next_layer(); }

  void start_tcp() {
    auto self = shared_from_this();
    resolver.async_resolve(at.host, at.port, tcp::resolver::numeric_service,
                           [self](const asio::error_code& ec, tcp::resolver::results_type rs) {
                             if (self->finished)
                               return;
                             if (ec)
                               return self->fail(errc::unavailable,
                                                 "cannot resolve '" + self->name
                                                   + "': " + ec.message());
                             self->connect_tcp(rs);
                           });
  }

  void connect_tcp(const tcp::resolver::results_type& rs) {
    auto self = shared_from_this();
    asio::async_connect(tcp_socket(), rs, [self](const asio::error_code& ec, const tcp::endpoint&) {
      if (self->finished)
        return;
      if (ec)
        return self->fail(errc::unavailable, "connect " + self->name + ": " + ec.message());
      asio::error_code ignored;
      self->tcp_socket().set_option(tcp::no_delay(true), ignored);
      if (self->tls)
        return self->handshake();
      self->finish(std::unique_ptr<stream>(std::move(self->plain)));
    });
  }

  void handshake() {
    auto self = shared_from_this();
    tls->sock.async_handshake(asio::ssl::stream_base::client, [self](const asio::error_code& ec) {
      if (self->finished)
        return;
      if (!ec)
        return self->finish(std::unique_ptr<stream>(std::move(self->tls)));
      auto verify = SSL_get_verify_result(self->tls->sock.native_handle());
      std::string why = "TLS handshake with " + self->name + " failed: "
        + (verify != X509_V_OK
             ? std::string("the server's certificate: ") + X509_verify_cert_error_string(verify)
             : ec.message());
      self->fail(errc::unavailable, why);
    });
  }

  void start_unix() {
    auto self = shared_from_this();
    unix_sock->sock.async_connect(local::endpoint(at.path), [self](const asio::error_code& ec) {
      if (self->finished)
        return;
      if (ec)
        return self->fail(errc::unavailable, "connect " + self->name + ": " + ec.message());
      self->finish(std::unique_ptr<stream>(std::move(self->unix_sock)));
    });
  }
};

/// The TLS client context `o` asks for, or invalid_argument naming the file.
result<std::shared_ptr<asio::ssl::context>> tls_context(const client_options& o) {
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  asio::error_code ec;
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2
                     | asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1
                     | asio::ssl::context::no_tlsv1_1,
                   ec);
  ctx->set_verify_mode(asio::ssl::verify_peer, ec);
  if (!o.tls_ca.empty()) {
    if (ctx->load_verify_file(o.tls_ca, ec); ec)
      return error{errc::invalid_argument,
                   "cannot load the CA file " + o.tls_ca + ": " + ec.message()};
  } else if (ctx->set_default_verify_paths(ec); ec) {
    return error{errc::invalid_argument, "cannot load the system's CAs: " + ec.message()};
  }
  if (!o.tls_cert.empty() || !o.tls_key.empty()) {
    ctx->use_certificate_chain_file(o.tls_cert, ec);
    if (!ec)
      ctx->use_private_key_file(o.tls_key, asio::ssl::context::pem, ec);
    if (!ec && SSL_CTX_check_private_key(ctx->native_handle()) != 1)
      ec = asio::error::invalid_argument;
    if (ec)
      return error{errc::invalid_argument,
                   "cannot use the client certificate " + o.tls_cert + " with key " + o.tls_key
                     + ": " + ec.message()};
  }
  return ctx;
}

/// Makes the server's certificate name `host` (an IP address or a DNS name,
/// the latter also sent as SNI). False on an OpenSSL failure.
bool expect_host(SSL* ssl, const std::string& host) {
  unsigned char ip[16];
  bool numeric =
    ::inet_pton(AF_INET, host.c_str(), ip) == 1 || ::inet_pton(AF_INET6, host.c_str(), ip) == 1;
  if (numeric)
    return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str()) == 1;
  return SSL_set1_host(ssl, host.c_str()) == 1 && SSL_set_tlsext_host_name(ssl, host.c_str()) == 1;
}

/// A close-on-exec duplicate of `fd`, or invalid_argument naming it.
result<int> duplicate(int fd, const char* role) {
  int d = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (d < 0)
    return error{errc::invalid_argument,
                 std::string("cannot use descriptor ") + std::to_string(fd) + " to " + role + ": "
                   + std::strerror(errno)};
  return d;
}

} // namespace

result<server::listen_spec> parse_address(const std::string& address) {
  auto text = address.rfind("tcp://", 0) == 0 ? address.substr(6) : address;
  auto at = server::parse_listen(text);
  if (!at)
    return error{errc::invalid_argument,
                 "'" + address + "' is not an address (unix:PATH, HOST:PORT or [HOST]:PORT)"};
  if (at->type == server::listen_spec::kind::tcp && at->port == "0")
    return error{errc::invalid_argument, "'" + address + "' names port 0, which no server has"};
  return *at;
}

bool is_end_of_stream(const asio::error_code& ec) {
  return ec == asio::error::eof || ec == asio::ssl::error::stream_truncated;
}

void connect_stream(asio::io_context& io, const server::listen_spec& at, const client_options& o,
                    std::chrono::milliseconds timeout,
                    std::function<void(result<std::unique_ptr<stream>>)> done) {
  auto c = std::make_shared<connector>(io, at, std::move(done));
  if (at.type == server::listen_spec::kind::unix_socket) {
    if (o.tls)
      return c->finish(error{errc::invalid_argument, "TLS is for TCP addresses, not " + c->name});
    if (at.path.size() >= sizeof(sockaddr_un::sun_path))
      return c->finish(error{errc::invalid_argument,
                             "bad socket path '" + at.path + "' (1 to "
                               + std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes)"});
    c->unix_sock = std::make_unique<basic_stream<local::socket>>(nullptr, io);
  } else if (o.tls) {
    auto ctx = tls_context(o);
    if (!ctx)
      return c->finish(std::move(ctx).err());
    c->tls = std::make_unique<basic_stream<tls_socket>>(*ctx, io, **ctx);
    SSL* ssl = c->tls->sock.native_handle();
    SSL_set_mode(ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (!expect_host(ssl, at.host))
      return c->finish(
        error{errc::invalid_argument,
              "TLS: cannot expect the host name '" + at.host + "' in a certificate"});
  } else {
    c->plain = std::make_unique<basic_stream<tcp::socket>>(nullptr, io);
  }
  c->timer.expires_after(timeout);
  c->timer.async_wait([c](const asio::error_code& ec) {
    if (ec || c->finished)
      return;
    c->fail(errc::unavailable, "connecting to " + c->name + " timed out");
  });
  if (at.type == server::listen_spec::kind::unix_socket)
    c->start_unix();
  else
    c->start_tcp();
}

result<std::unique_ptr<stream>> adopt_stream(asio::io_context& io, int read_fd, int write_fd) {
  auto r = duplicate(read_fd, "read from");
  if (!r)
    return std::move(r).err();
  int w = *r;
  if (write_fd != read_fd) {
    auto d = duplicate(write_fd, "write to");
    if (!d) {
      ::close(*r);
      return std::move(d).err();
    }
    w = *d;
  }
  auto s = std::make_unique<fd_stream>(io);
  bool read_taken = false;
  if (auto ec = s->assign(*r, w, read_taken)) {
    s.reset(); // closes what it took
    if (!read_taken)
      ::close(*r);
    if (w != *r)
      ::close(w);
    return error{errc::invalid_argument,
                 "cannot use descriptors " + std::to_string(read_fd) + "/"
                   + std::to_string(write_fd) + ": " + ec.message()};
  }
  return std::unique_ptr<stream>(std::move(s));
}

} // namespace agentstate::client_detail
