// SPDX-License-Identifier: Apache-2.0
// console/console.hpp: the web console (docs/console.md): an HTTP server
// (cpp-httplib) that shows a store's apps, users, sessions, events and state
// in a browser, follows them live through server-sent events, and runs the
// few writes the console offers. Every read and write goes through
// protocol::rpc_session, the handler behind `serve`: the console answers
// exactly what a protocol client with the same token would get, under the
// same access check. The page (HTML, JS, CSS) is compiled into the binary.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "agentstate/engine.hpp"
#include "protocol/auth.hpp"
#include "server/log.hpp"

namespace agentstate::console {

struct console_tls {
  std::string cert; ///< PEM certificate chain
  std::string key; ///< PEM private key
  std::string client_ca; ///< PEM CAs for client certificates; empty: none asked
};

struct console_config {
  /// `[HOST:]PORT` as `serve --listen` takes it (HOST defaults to
  /// 127.0.0.1; PORT 0 picks a free port).
  std::string http = "127.0.0.1:0";
  /// The server's tokens (protocol/auth.hpp), shared with its reloads; null:
  /// no authentication, every app (loopback only unless `insecure`).
  std::shared_ptr<const protocol::token_source> tokens;
  /// Allow a non-loopback HOST without tokens.
  bool insecure = false;
  std::optional<console_tls> tls;
  /// The console's writes (delete, rewind, fork) are offered; without it the
  /// console is read-only for every token.
  bool actions = false;
  /// The store's directory, for its size on disk; empty: not shown.
  std::string store_dir;
  /// The figures of the protocol server beside the console
  /// (server::network_server::stats): `stats` through the console carries
  /// them under "server", as on that server's connections, and the store
  /// page shows its connections and watches. Empty: none (`agentstate
  /// console`, `serve` on standard input). Called on the console's threads.
  std::function<json()> server_stats;
  /// The nesting a request may have (rpc_config::max_line_depth).
  std::size_t max_line_depth = 64 + 8;
  /// Live streams (server-sent events) at once; one more is refused (503).
  std::size_t max_streams = 32;
  /// Logins kept (with tokens); a newer one displaces the oldest.
  std::size_t max_logins = 1024;
  /// The interval of the store page's commit and append samples.
  std::chrono::milliseconds sample_every{2000};
};

/// The console's server. open() binds; start() serves on threads of its
/// own; stop() (or the destructor) ends the live streams and waits for
/// every request. REQUIRES: the engine outlives the console_server's stop().
class console_server {
public:
  /// Binds the address, loads the TLS files. Errors: invalid_argument (a
  /// malformed address; a non-loopback HOST without tokens or `insecure`;
  /// TLS files that do not load), io_error (cannot bind).
  static result<std::unique_ptr<console_server>> open(console_config cfg, engine& eng,
                                                      server::logger& log);
  ~console_server();
  console_server(const console_server&) = delete;
  console_server& operator=(const console_server&) = delete;

  /// Serves from now on; logs `console on http://HOST:PORT`.
  void start();
  /// Stops serving; returns once every request has ended. Idempotent.
  void stop();
  /// The URL of the console, e.g. http://127.0.0.1:41234.
  std::string url() const;

  struct impl;

private:
  explicit console_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace agentstate::console
