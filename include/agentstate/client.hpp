// SPDX-License-Identifier: Apache-2.0
// agentstate/client.hpp: a client of `agentstate serve` (docs/protocol.md):
// JSON-RPC 2.0 lines over TCP, TLS, a Unix socket or a pair of descriptors
// (a child's stdin and stdout pipes, see rpc_client::adopt), with an optional token,
// many requests in flight on one connection (pipelining, matched by id), a
// deadline per call, and the `watch` change feed. Library agentstate_client.
//
// Threads: each rpc_client owns one I/O thread, started by connect() and
// joined by the destructor. Every handler (a call's reply_handler, a watch's
// watch_handler) runs on that thread, one at a time (except the reply of a
// call refused before it was queued, see call_async), so a handler must not
// block for long and must not wait on a blocking call of the same client
// (call() and watch() from the I/O thread fail at once, see below). A
// handler must not throw: an exception that escapes one is caught and
// dropped so the I/O thread goes on. Every other member may be called from
// any thread at any time. There is no reconnection: once the connection has
// ended, connect a new client. A write to a pipe whose reader has gone ends
// the connection (EPIPE); it raises no SIGPIPE (the I/O thread blocks it).
//
// Memory: request bytes waiting to be sent are capped (max_send_queue_bytes),
// and so is a reply line being read (max_line_bytes). Calls in flight are
// not counted: a server that stops reading (its --max-in-flight) makes the
// send queue fill, and then calls are refused.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "agentstate/error.hpp"
#include "agentstate/json.hpp"

namespace agentstate {

/// How rpc_client::connect reaches a server.
struct client_options {
  /// Where the server listens, in the syntax `serve --listen` and
  /// `agentstate watch ADDR` accept: `unix:PATH`, `HOST:PORT`,
  /// `[HOST]:PORT` (IPv6), `tcp://HOST:PORT`, `:PORT` or `PORT` (host
  /// 127.0.0.1). Port 0 names no server and is refused.
  std::string address;
  /// When not empty, connect() sends `authenticate` with it as the
  /// connection's first request and fails unless it is accepted.
  std::string token;
  /// TLS over TCP (not with a Unix socket): the server's certificate must be
  /// signed by `tls_ca` (a PEM file; empty: the system's CAs) and name the
  /// host connected to (its IP address, or its DNS name, also sent as SNI).
  bool tls = false;
  std::string tls_ca;
  /// A client certificate chain and its key (PEM), for servers started with
  /// --tls-client-ca; both empty: none.
  std::string tls_cert, tls_key;
  /// The most connect() may take: resolve, connect, TLS handshake and the
  /// authenticate round trip together.
  std::chrono::milliseconds connect_timeout{10000};
  /// The longest response or notification line accepted (without its
  /// newline); default as serve's --max-line-bytes. A longer response line is
  /// discarded as it arrives (never held whole) and fails its call with
  /// too_large; a longer line whose id cannot be read from its first bytes
  /// (a notification) ends the connection. At least 1024.
  std::size_t max_line_bytes = 16u << 20;
  /// The most request bytes queued for sending and not yet taken by the
  /// socket. A call that would pass it fails at once with unavailable
  /// ("send queue full"); a request line longer than the cap by itself fails
  /// with too_large. At least 1024.
  std::size_t max_send_queue_bytes = 64u << 20;
  /// Called on the I/O thread for each error line the server sends with a
  /// null id (a connection-level error such as "idle for N s" or "too many
  /// connections", usually just before it closes the connection), with the
  /// line's `error` object. Optional.
  std::function<void(const json& error)> on_server_error;
};

/// The outcome of one call, handed over exactly once.
struct rpc_reply {
  /// The response's `result` member, or an error:
  /// - answered: the server's error: code from `error.data.kind` (internal
  ///   for a kind this build does not know), message from `error.message`,
  ///   current_version and oldest_cursor from `error.data` when present.
  /// - not answered (the library ended the call): unavailable when the call
  ///   was refused before it was queued (the client is closed, or the send
  ///   queue is full), when the connection was lost or closed with the call
  ///   outstanding, or when its deadline passed; too_large when the request
  ///   line is longer than max_send_queue_bytes or its response line is
  ///   longer than max_line_bytes; invalid_argument for a blocking call made
  ///   on the client's own I/O thread, or a method or params that cannot be
  ///   written as JSON. The message says which.
  /// A call not answered may or may not have run on the server.
  result<json> value;
  /// True when `value` is the server's answer.
  bool answered = false;
  /// The server's `error` object, verbatim (code, message, data), when it
  /// answered with an error; null otherwise.
  json error_object;

  explicit rpc_reply(result<json> v) : value(std::move(v)) {}
};

/// The outcome of one call_raw_async, handed over exactly once: rpc_reply's
/// members, with the result as JSON text.
struct rpc_raw_reply {
  /// The response's `result` member as one JSON text, exactly as the server
  /// wrote it when it was checked to be one JSON value in place, else the
  /// compact writing of the value read; or an error as rpc_reply::value says.
  result<std::string> value;
  /// True when `value` is the server's answer.
  bool answered = false;
  /// As rpc_reply::error_object.
  json error_object;

  explicit rpc_raw_reply(result<std::string> v) : value(std::move(v)) {}
};

/// One event of a watch, in the server's order.
struct watch_event {
  enum class kind {
    changes, ///< a `changes` notification; `params` is its params
    ended, ///< a `watch_ended` notification (its params); the last event
    lost, ///< the connection ended first; `why` says how; the last event
  };
  kind what = kind::changes;
  /// changes: {"watch_id","changes":[...],"cursor"}; ended: {"watch_id",
  /// "reason","resume_from","error"?}; lost: null.
  json params;
  /// lost: unavailable and the reason; ok otherwise.
  error why{errc::ok, ""};
};

/// One connection to a server. Not copyable or movable (handlers hold it).
class rpc_client {
public:
  using duration = std::chrono::milliseconds;
  using reply_handler = std::function<void(rpc_reply)>;
  using raw_reply_handler = std::function<void(rpc_raw_reply)>;
  using watch_handler = std::function<void(const watch_event&)>;
  /// A deadline of zero: the call waits for its answer or the connection's
  /// end, however long that takes.
  static constexpr duration no_deadline = duration::zero();

  /// Connects as `o` says (and authenticates when o.token is set), waiting
  /// up to o.connect_timeout. Errors: invalid_argument (a malformed address,
  /// TLS with a Unix socket, an unreadable CA, certificate or key file: the
  /// message names the file), unavailable (cannot resolve, connect, or
  /// complete the TLS handshake — the message says why, naming the server's
  /// certificate problem when it was refused — or timed out), and the
  /// server's error for a refused token (unauthenticated).
  static result<std::unique_ptr<rpc_client>> connect(const client_options& o);

  /// A client on a byte stream the caller already has: requests are written
  /// to `write_fd` and responses read from `read_fd` (a server child's stdin
  /// and stdout pipes, as `agentstate serve` without --listen serves them),
  /// or both on one descriptor (a connected socket) when they are equal.
  /// The client works on close-on-exec duplicates of them, which it closes
  /// when the connection ends; the caller's descriptors stay open and its
  /// own (closing its copy of a child's stdin is what ends that child's
  /// input, once the client is gone too). Both are set non-blocking (the
  /// flag belongs to the open file, shared with the caller's copies). Of
  /// `o`, the token (sent as connect() does, within o.connect_timeout) and
  /// the limits and on_server_error apply; o.address is not read; server()
  /// is "fd:READ/WRITE". Errors: invalid_argument (a descriptor that is not
  /// open, or o.tls), and the server's error for a refused token.
  static result<std::unique_ptr<rpc_client>> adopt(int read_fd, int write_fd,
                                                   const client_options& o = {});

  /// Closes the connection (see close()) and joins the I/O thread.
  /// REQUIRES: not called from one of this client's handlers.
  ~rpc_client();
  rpc_client(const rpc_client&) = delete;
  rpc_client& operator=(const rpc_client&) = delete;

  /// Sends `{"jsonrpc":"2.0","id":N,"method":method,"params":params}` (no
  /// params member when `params` is null), N chosen here, and calls `done`
  /// exactly once with its outcome (see rpc_reply). Requests leave in the
  /// order the calls entered this function: the calls of one thread keep
  /// their order on the wire, which is what the server's per-session order
  /// is kept by; calls of several threads take some order. Replies come in
  /// any order (the server orders only one session's). `deadline` (>0): the
  /// call ends with unavailable that long after this call unless answered
  /// first; its request may still be sent and run. `done` runs on the I/O
  /// thread, except when the call is refused before it is queued (the client
  /// is closed, the send queue is full, the line is too large): then on the
  /// calling thread before call_async returns, with no lock of the client
  /// held.
  void call_async(const std::string& method, json params, reply_handler done,
                  duration deadline = no_deadline);

  /// call_async with the params as JSON text and the result handed back as
  /// JSON text (rpc_raw_reply), so that a caller relaying a request (a
  /// cluster node forwarding one) neither builds nor writes a JSON value.
  /// `params_text` is one JSON value (empty: no params member); a newline in
  /// it (whitespace, in valid JSON) is sent as a space. A text that is not
  /// one JSON value fails the call with invalid_argument before it is
  /// queued. Otherwise as call_async: order, deadline, threads, errors.
  void call_raw_async(const std::string& method, std::string_view params_text,
                      raw_reply_handler done, duration deadline = no_deadline);

  /// call_async that waits for the reply. From the client's I/O thread (a
  /// handler) it fails at once with invalid_argument instead of deadlocking.
  rpc_reply call(const std::string& method, json params, duration deadline = no_deadline);

  /// Sends `watch` with `params` (read_changes' params except limit); `done`
  /// gets its answer ({"watch_id","cursor"}) as call_async says. When the
  /// watch is accepted, `on_event` receives its notifications on the I/O
  /// thread, in order, the first of them after `done` has returned; the last
  /// is `ended` (watch_ended) or `lost` (the connection ended), after which
  /// `on_event` is released. When the watch is refused or not answered,
  /// `on_event` is never called.
  void watch_async(json params, watch_handler on_event, reply_handler done,
                   duration deadline = no_deadline);
  /// watch_async that waits for the answer (not from the I/O thread).
  rpc_reply watch(json params, watch_handler on_event, duration deadline = no_deadline);

  /// Sends `unwatch` for `watch_id` (a call as call_async says). The server
  /// sends the watch's `ended` (reason "cancelled") before this reply.
  void unwatch_async(const std::string& watch_id, reply_handler done,
                     duration deadline = no_deadline);

  /// Ends the connection: request bytes not yet sent are dropped, every
  /// outstanding call ends with unavailable ("the client closed the
  /// connection") and every live watch with `lost`, each exactly once, on the
  /// I/O thread; later calls are refused with unavailable. Returns at once
  /// (the completions may still be running); idempotent; any thread,
  /// handlers included.
  void close();

  /// False once the connection has ended (closed here, lost, or closed by
  /// the server). A call made after it turned false is refused.
  bool connected() const;

  /// The server as messages name it: "HOST:PORT", "[HOST]:PORT" or
  /// "unix:PATH"; "fd:READ/WRITE" for a client made by adopt().
  const std::string& server() const;

  /// Request bytes queued or in a write whose completion has not run yet (on
  /// the client's I/O thread, which may read the answers to those requests
  /// first); max_send_queue_bytes bounds this count.
  std::size_t queued_bytes() const;

  /// Calls sent or queued and not yet ended.
  std::size_t outstanding() const;

private:
  struct impl;
  explicit rpc_client(std::shared_ptr<impl> p);
  /// `c` once it has sent `authenticate` with `token` (when not empty) and
  /// it was accepted before `deadline`; else the error.
  static result<std::unique_ptr<rpc_client>>
  authenticated(std::unique_ptr<rpc_client> c, const std::string& token,
                std::chrono::steady_clock::time_point deadline);
  std::shared_ptr<impl> p_;
};

} // namespace agentstate
