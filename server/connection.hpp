// SPDX-License-Identifier: Apache-2.0
// server/connection.hpp: one client connection of the network server: its
// socket (TCP, Unix or TLS over TCP), its rpc_session, its outbox and its
// timers. Internal to server/: server.cpp creates connections with
// make_connection; the implementation is server/connection.cpp.
//
// Threads: everything a connection does runs on its strand, except the
// rpc_session's write callback, which runs on engine threads (or inline on
// the strand), and the direct writes it leaves to engine workers.
//
// Writing: one writer at a time holds the outbox (outbox::busy): the strand
// (an asynchronous write) or, on a plain TCP or Unix socket, an engine
// worker. A response made on a worker is written by that worker at its
// next idle point (shared_state::idle, the engine's idle hook:
// protocol/idle_hook.hpp) with a non-blocking send(2), so the responses of
// jobs that run back to back leave in one write and no I/O thread wakes for
// them. What the socket does not take at once (or after 8 rounds or 256 KiB)
// goes back to the strand, which waits for the socket to become writable. A
// response made on another thread (on any thread, without an idle hook), and
// every response on TLS, posts a wake-up to the strand, which writes it. The
// strand closes the socket only once no worker is writing to it
// (stop_direct_writes).
//
// Flow control, never blocking an I/O thread:
//  * A complete line is handed to the rpc_session only when it may be
//    admitted: fewer than max_in_flight requests outstanding, the bytes of
//    the request lines in flight plus its own within max_in_flight_bytes
//    (this connection's) and max_server_in_flight_bytes (every
//    connection's; both waived when nothing is in flight), and the output
//    queued (the bytes of the responses made and not yet written, counted
//    as they are queued) plus a reservation for each request in flight (and
//    for this one) within max_output_bytes. The reservation is the largest
//    response the connection has been sent, at least 1 MiB and at least
//    max_output_bytes / max_in_flight; small responses never lower it, so
//    cheap requests cannot open the way for a burst of large ones. The
//    queue passes the cap only by what responses larger than every earlier
//    one add beyond their reservations. One request is always admitted
//    while the output is under the cap and nothing is in flight.
//  * Otherwise the connection is not read (at most one read's worth of lines
//    waits in `backlog_`) until a response is written or arrives, or a
//    request completes. Responses are never dropped while the client is
//    connected: a response that takes the queue over the cap is kept, and
//    the cap stops further reading.
//  * A partial line is kept as the pieces read (no doubling growth) up to
//    max_line_bytes (max_unauthenticated_line_bytes while the connection is
//    not authenticated), and while the partial lines of every connection
//    stay within max_partial_bytes; otherwise it is discarded as it arrives
//    and answered too_large.
//  * A line of at least shared_state::decode_off_thread_bytes is decoded on
//    the server's decoding threads (rpc_session::decode), so one client's
//    long line never holds up the other connections of its I/O thread.
//    It is admitted as any line, and its bytes count in the server's
//    request bytes in flight from then on (in_flight_bytes; the
//    rpc_session counts them once it is handed in). Until the strand has
//    handed it in (rpc_session::handle_decoded) the connection reads and
//    hands in nothing more, so its requests keep their order (nor can it
//    pass its own in-flight caps meanwhile); it counts as a request in
//    flight, not as idle, and a graceful close waits for it.
//  * With authentication, a connection not authenticated is closed after
//    auth_timeout, and such connections hold at most their share of the
//    slots (the server displaces the oldest at accept).
//
// Lifetime: held by shared_ptr (the server's registry and its pending
// handlers). It leaves the registry only once nothing is in flight, so its
// rpc_session's destructor never waits.
#pragma once

#include <asio.hpp>
#include <asio/ssl.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "agentstate/engine.hpp"
#include "protocol/idle_hook.hpp"
#include "protocol/rpc_session.hpp"
#include "server/counters.hpp"
#include "server/job_pool.hpp"
#include "server/log.hpp"
#include "server/server.hpp"

namespace agentstate::server::detail {

using clock = std::chrono::steady_clock;
using strand_t = asio::strand<asio::io_context::executor_type>;
using tcp_socket = asio::basic_stream_socket<asio::ip::tcp, strand_t>;
using unix_socket = asio::basic_stream_socket<asio::local::stream_protocol, strand_t>;
using tls_stream = asio::ssl::stream<tcp_socket>;
using timer_t = asio::basic_waitable_timer<clock, asio::wait_traits<clock>, strand_t>;

/// What every connection shares with the server. Outlives every connection
/// (the server destroys connections before it).
struct shared_state {
  engine* eng = nullptr;
  logger* log = nullptr;
  limits lim;
  std::size_t max_line_depth = 72;
  std::shared_ptr<const protocol::token_source> tokens; ///< null: no authentication
  counters stats;
  /// Called on the connection's strand once it is closed and idle.
  std::function<void(std::uint64_t id)> on_finished;
  /// The "server" member of stats.
  std::function<json()> server_stats;
  /// Live watches of every connection (rpc_config::server_watches).
  std::shared_ptr<std::atomic<std::size_t>> watches = std::make_shared<std::atomic<std::size_t>>(0);
  /// With authentication: called on a connection's strand when it becomes
  /// unauthenticated (true: opened, or a token refused) or stops being so
  /// (authenticated, or finished); and the share of the slots such
  /// connections may hold (limits::max_unauthenticated, resolved).
  std::function<void(std::uint64_t id, bool unauthenticated)> on_auth_state;
  std::size_t max_unauthenticated = 1;
  /// Bytes of unfinished request lines of every connection.
  std::atomic<std::uint64_t> partial_bytes{0};
  /// Bytes of the request lines in flight, every connection
  /// (rpc_config::server_in_flight_bytes).
  std::shared_ptr<std::atomic<std::uint64_t>> in_flight_bytes =
    std::make_shared<std::atomic<std::uint64_t>>(0);
  /// A cluster node's routing and cluster_map (rpc_config); empty: none.
  std::function<std::optional<protocol::route_refusal>(const protocol::route_query&)> route;
  std::function<result<json>(const json&)> cluster_map;
  protocol::node_call_fn node_call;
  std::function<void(const std::string&, const std::string&, json, protocol::forward_done)> forward;
  /// A cluster node's own figures: the "cluster" member of the server's
  /// stats; empty: none.
  std::function<json()> cluster_stats;
  /// server_config::idle: where a worker leaves its direct write; null: none.
  protocol::idle_hook idle = nullptr;
  /// Where request lines of at least `decode_off_thread_bytes` bytes are
  /// decoded, off the I/O threads; null: every line on its I/O thread.
  /// Owned by the server, stopped after the I/O threads.
  job_pool* decoders = nullptr;
  std::size_t decode_off_thread_bytes = std::size_t{64} << 10;
};

/// The connection-level error line (id null, kind unavailable), with its '\n'.
std::string connection_error_line(const std::string& message);

class connection_base : public std::enable_shared_from_this<connection_base> {
public:
  virtual ~connection_base() = default;
  /// Each posts to the connection's strand.
  virtual void start() = 0;
  /// Graceful: stop reading, finish what is in flight, write it, close.
  virtual void shutdown() = 0;
  /// Close the socket now (responses still owed are lost), then finish.
  virtual void drop() = 0;
  /// The token table was replaced: end the watches it no longer allows.
  virtual void access_changed() = 0;
  /// Not authenticated and displaced by a newer connection: told and
  /// closed, unless it authenticated meanwhile.
  virtual void displace() = 0;
  /// Requests in flight. Any thread.
  virtual std::size_t in_flight() const = 0;
};

/// A connection over `stream`, its rpc_session created; nothing runs before
/// start(). `id` and `peer` name it in the log.
std::shared_ptr<connection_base> make_connection(std::shared_ptr<shared_state> sh,
                                                 tcp_socket stream, std::uint64_t id,
                                                 std::string peer);
std::shared_ptr<connection_base> make_connection(std::shared_ptr<shared_state> sh,
                                                 unix_socket stream, std::uint64_t id,
                                                 std::string peer);
std::shared_ptr<connection_base> make_connection(std::shared_ptr<shared_state> sh,
                                                 tls_stream stream, std::uint64_t id,
                                                 std::string peer);

} // namespace agentstate::server::detail
