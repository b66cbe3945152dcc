// SPDX-License-Identifier: Apache-2.0
// server/server.hpp: the network side of `agentstate serve` (docs/protocol.md,
// "Listeners" to "Shutting down"): TCP, TLS and Unix-socket listeners on a
// fixed pool of I/O threads (Asio), one protocol::rpc_session per connection,
// authentication, and the limits that keep one client from hurting the
// others. No thread per connection: a connection costs its socket and a few
// KiB while idle.
//
// Threads: run() drives the I/O pool, one event loop per I/O thread; a
// connection stays on one loop. The engine's threads stay separate: they
// queue responses into a connection's outbox and, on a plain socket, send
// them with non-blocking writes (server/connection.hpp; server_config::idle),
// never blocking;
// what a socket does not take is left to the connection's I/O thread. An I/O
// thread never blocks on a client: a connection that may not admit another
// request (in-flight cap, output cap) is simply not read until it may, and
// a request line of 64 KiB or more is parsed on the server's own parsing
// threads (server/job_pool.hpp), stopped once the I/O threads are.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agentstate/engine.hpp"
#include "protocol/idle_hook.hpp"
#include "protocol/rpc_session.hpp"
#include "server/address.hpp"
#include "server/log.hpp"

namespace agentstate::server {

/// Per-connection and server-wide limits; each is a `serve` flag.
struct limits {
  /// Connections served at once; a connection beyond it is sent one error
  /// line (kind unavailable) and closed. Lowered at start to what the
  /// descriptor limit (RLIMIT_NOFILE) allows.
  std::size_t max_connections = 1024;
  /// A connection with nothing in flight that neither sends nor takes a byte
  /// for this long is sent an error line and closed (0: never).
  std::chrono::seconds idle_timeout{300};
  /// A request line (from its first byte) or a TLS handshake that does not
  /// complete within this time closes the connection (0: never).
  std::chrono::seconds line_timeout{30};
  /// Requests admitted and not yet answered, per connection.
  std::size_t max_in_flight = 4096;
  /// Bytes of the request lines admitted and not yet answered, per
  /// connection and of all connections together. A connection whose next
  /// line would pass either is not read until answers free room (a
  /// connection with nothing in flight is always admitted one line, so the
  /// server-wide bound can be passed by at most one line per connection).
  std::size_t max_in_flight_bytes = std::size_t{16} << 20;
  std::uint64_t max_server_in_flight_bytes = std::uint64_t{256} << 20;
  /// Responses waiting for a slow reader, per connection (bytes).
  std::size_t max_output_bytes = std::size_t{64} << 20;
  /// Longest request line; longer ones are answered too_large and discarded.
  std::uint64_t max_line_bytes = std::uint64_t{16} << 20;
  /// SIGTERM: how long connections may take to finish before they are dropped.
  std::chrono::seconds shutdown_grace{5};
  /// Live watches per connection, and of all connections together (each
  /// costs the engine a thread); a `watch` beyond either is refused
  /// (unavailable).
  std::size_t max_watches = 64;
  std::size_t max_server_watches = 1024;
  /// With authentication: a connection not authenticated this long after it
  /// opened (or after a refused token ended its access) is sent an error
  /// line and closed, whatever it sends meanwhile (0: never).
  std::chrono::seconds auth_timeout{10};
  /// With authentication: connections not authenticated at once. One more
  /// displaces the oldest of them (sent an error line and closed), so they
  /// never hold more than this share of the slots and a newcomer always
  /// gets its chance to authenticate. 0: a quarter of max_connections (at
  /// least 1).
  std::size_t max_unauthenticated = 0;
  /// Longest request line of a connection not authenticated (its requests
  /// are ping and authenticate, both short).
  std::uint64_t max_unauthenticated_line_bytes = std::uint64_t{64} << 10;
  /// Bytes of unfinished request lines of all connections together; a
  /// piece that would pass it discards its line, answered too_large.
  std::uint64_t max_partial_bytes = std::uint64_t{256} << 20;
};

struct tls_files {
  std::string cert; ///< PEM certificate chain
  std::string key; ///< PEM private key
  std::string client_ca; ///< PEM CAs for client certificates; empty: none asked
};

struct server_config {
  std::vector<listen_spec> listen;
  /// TLS on every TCP listener (Unix sockets stay plain).
  std::optional<tls_files> tls;
  /// Token file (protocol/auth.hpp); empty: no authentication.
  std::string auth_file;
  /// Allow a non-loopback TCP address without authentication.
  bool insecure = false;
  /// I/O threads; 0: one per core.
  std::size_t io_threads = 0;
  limits lim;
  /// rpc_config::max_line_depth.
  std::size_t max_line_depth = 64 + 8;
  /// The engine's idle hook (protocol/idle_hook.hpp): a response made on an
  /// engine worker is sent by that worker at its next idle point. Null:
  /// every response is written by the connection's I/O thread.
  protocol::idle_hook idle = nullptr;
};

class network_server {
public:
  /// Checks the configuration, loads the token file and the TLS files, and
  /// binds every listener, logging `listening on ADDRESS` for each. Nothing is
  /// served before run(). Errors: invalid_argument (a non-loopback address
  /// without authentication or --insecure, bad TLS files, bad token file, a
  /// Unix path that exists and is not a stale socket), io_error (cannot
  /// bind or listen; the message names the address).
  static result<std::unique_ptr<network_server>> open(server_config cfg, logger& log);

  /// Closes the listeners and removes the Unix socket files this server
  /// created. REQUIRES: run() has returned or was never called; the engine
  /// given to run() is closed (its last callbacks may still be queued here).
  ~network_server();
  network_server(const network_server&) = delete;
  network_server& operator=(const network_server&) = delete;

  /// Serves with `eng` until request_stop(), then shuts down gracefully:
  /// stops accepting and reading, lets requests in flight finish and their
  /// responses be written, closes every connection; after limits::
  /// shutdown_grace the connections still open are dropped. Returns then.
  /// Blocking; the calling thread is one of the I/O threads.
  void run(engine& eng);

  /// Starts the shutdown. Any thread (not a signal handler).
  void request_stop();

  /// Re-reads the token file; a file that cannot be read or parsed keeps the
  /// current table and is logged. No-op without authentication. Any thread.
  void reload_tokens();

  /// The bound addresses (TCP ports resolved), in --listen order.
  std::vector<std::string> addresses() const;

  /// What `stats` answers under "server" on this server's connections
  /// (connections_open, watches, ...; docs/protocol.md). Any thread, until
  /// the server is destroyed.
  json stats() const;

  /// A cluster node's routing, `cluster_map` and forwarding for every
  /// connection (protocol::rpc_config::route, cluster_map, forward; each may
  /// be empty). REQUIRES: before run().
  void set_routing(
    std::function<std::optional<protocol::route_refusal>(const protocol::route_query&)> route,
    std::function<result<json>(const json&)> cluster_map,
    std::function<void(const std::string&, const std::string&, json, protocol::forward_done)>
      forward);

  /// A cluster node's node methods (shard_export, shard_import, shard_digest,
  /// shard_adopt, replicate, replica_state, replica_position, replica_copy)
  /// for every connection (protocol::rpc_config::node_call). REQUIRES:
  /// before run().
  void set_node_calls(protocol::node_call_fn call);

  /// A cluster node's figures, added to `stats`'s "server" member as
  /// "cluster" (called on any thread, per stats request). REQUIRES: before
  /// run().
  void set_cluster_stats(std::function<json()> figures);

private:
  struct impl;
  explicit network_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace agentstate::server
