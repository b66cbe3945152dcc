// SPDX-License-Identifier: Apache-2.0
// protocol/rpc_session.hpp: the JSON-RPC 2.0 line handler behind `agentstate
// serve` (docs/protocol.md), the public class of the agentstate_protocol
// library. One rpc_session per client stream: it takes request lines, runs
// them through the engine's async API and hands back one response line per
// request. No processes, sockets or files: the framing (protocol/framing.hpp)
// and the command (tools/serve.cpp) sit on top, and a fuzzer can drive it
// directly.
//
// Inside the library: request.hpp decodes a line's envelope, methods.hpp
// checks each method's params (params.hpp) and builds its engine call,
// dispatcher.hpp orders and runs the calls, responses.hpp writes the answers.
#pragma once

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agentstate/engine.hpp"
#include "protocol/auth.hpp"

namespace agentstate::protocol {

/// JSON-RPC error codes used by the protocol.
namespace rpc_code {
inline constexpr int parse_error = -32700; ///< not JSON, bad UTF-8, too deep, too long
inline constexpr int invalid_request = -32600; ///< JSON, but not a request object
inline constexpr int method_not_found = -32601;
inline constexpr int invalid_params = -32602; ///< data.kind is "invalid_argument"
inline constexpr int engine_error = -32000; ///< data.kind is the errc name
/// Refused by the access check (auth.hpp): data.kind is "unauthenticated" or
/// "permission_denied".
inline constexpr int access_error = -32001;
} // namespace rpc_code

/// What a cluster's routing check sees of a request (rpc_config::route): its
/// method and, when the params carry them as strings, app_name, user_id and
/// scope (read_changes, watch). Null pointers: absent.
struct route_query {
  std::string_view method;
  const std::string* app_name = nullptr;
  const std::string* user_id = nullptr;
  const std::string* scope = nullptr;
  /// params.this_node is true (list_sessions, delete_app, read_changes,
  /// watch): only this node's own shards, as a node asks of the others when
  /// it runs a request across them (route_refusal::span).
  bool this_node = false;
  /// watch: params.from when it is a string.
  const std::string* from = nullptr;
};

/// An event of a watch opened at a peer (route_refusal::span_watch_open),
/// in the peer's order.
struct peer_watch_event {
  enum class kind {
    changes, ///< a `changes` notification: `params` is its params
    ended, ///< a `watch_ended` notification (its params); the last event
    lost, ///< the connection to the peer ended first (`why`); the last event
  };
  kind what = kind::changes;
  json params;
  std::string why;
};

/// A watch opened at a peer: where it starts (the peer's own cursor) and how
/// to end it (any thread, idempotent, never blocks; events may still come
/// after it and are to be ignored).
struct peer_watch {
  std::string cursor;
  std::function<void()> close;
};

using peer_watch_open = std::function<result<peer_watch>(
  const std::string& peer, json params, std::function<void(peer_watch_event)> on_event)>;

/// The answer to a request this node does not serve: data.kind `kind` (e.g.
/// "moved", "unavailable", "invalid_argument"), the message, and further
/// members of data (an object, or null). With `forward_to` set (a peer's
/// address) and rpc_config::forward given, a request other than `watch` is
/// forwarded there instead, and the peer's answer is the request's.
/// One part's answer to a request that spans nodes (route_refusal::span):
/// its `result`, or `error`, the JSON-RPC error object ({code, message,
/// data}) when it failed (then `result` is null).
struct span_answer {
  json result;
  json error;
};

struct route_refusal {
  std::string kind;
  std::string message;
  json data;
  std::string forward_to;
  /// With `span` set, `forward_to` empty and rpc_config::forward given: the
  /// request spans shards of this node and of `span_peers` (addresses).
  /// It runs here and is forwarded to each peer, each with the params
  /// `span_params` makes of the request's for that part (0: this node, i:
  /// span_peers[i - 1]; the request's own when empty), and
  /// `span` makes its answer of the parts' answers (this node's first,
  /// then span_peers' in order), given the request's own params. `span`
  /// runs once, on the thread of the last answer; it may throw (the request
  /// then fails with kind internal). kind, message and data are unused.
  std::vector<std::string> span_peers;
  std::function<json(const json& params, std::size_t part)> span_params;
  std::function<span_answer(const json& params, std::vector<span_answer> parts)> span;
  /// A `watch` across nodes: with `span_watch_open` and `span_cursor` set,
  /// `forward_to` empty and rpc_config::forward given, the watch runs here
  /// (the part's params: span_params(params, 0)) and at each of
  /// `span_peers` (span_params(params, i), opened by span_watch_open, which
  /// blocks until the peer answered). Each part's batches are relayed as
  /// they come under merged cursors: span_cursor(merged, part, cursor) is
  /// `merged` (a cursor this watch or the request's `from` gave; empty: none)
  /// with part `part`'s position moved to `cursor`, that part's own cursor.
  /// A restart (after a pause for room) opens every part again with
  /// span_params of the params with `from` set to the last merged cursor
  /// written.
  peer_watch_open span_watch_open;
  std::function<std::string(const std::string& merged, std::size_t part, const std::string& cursor)>
    span_cursor;
  /// With span_watch_open: the watch has no part here, only the one at
  /// span_peers[0] (another node's shard, relayed); part 0's params and
  /// cursor are unused.
  bool span_relay = false;
  /// A step after the request, for an answer that needs another node's
  /// part (the app: state of an app whose home shard is elsewhere): with
  /// `then` set, `forward_to` empty and rpc_config::forward given, the
  /// request runs as it would without this refusal (here, or as a span),
  /// and once it has succeeded, method `then_method` with `then_params`
  /// runs at `then_peer` (empty: on this node); `then` makes the answer of
  /// the request's result and the step's answer. A failed request is
  /// answered as it failed, without the step. `then` runs on the thread of
  /// the step's answer; it may throw (the request then fails with kind
  /// internal).
  std::string then_peer, then_method;
  json then_params;
  std::function<span_answer(json result, span_answer step)> then;
  /// The same step run first instead (`then` unset): with `before` set,
  /// the step runs, then the request runs here with the params
  /// `before(params, step answer)` makes of its own (the step's failure,
  /// returned as an error, answers the request). May throw (kind internal).
  std::function<span_answer(json params, span_answer step)> before;
};

/// How a forwarded request's answer comes back: the peer's result, or an
/// error with the peer's `error` object (null when the peer never answered:
/// then the error's kind and message answer the request). A request whose
/// params were given as text (rpc_config::forward) may be answered with the
/// result as text too: a binary value holding one JSON text's bytes.
using forward_done = std::function<void(result<json> value, json error_object)>;

/// rpc_config::node_call.
using node_call_fn = std::function<void(const std::string& method, json params,
                                        std::function<void(result<json>)> done)>;

struct rpc_config {
  /// Nesting allowed in a request line. The engine's own limit
  /// (limits::max_json_depth) applies to each client value inside it; this one
  /// must leave room for the envelope (request, params, event, actions,
  /// state_delta) or values the engine accepts would be refused here.
  std::size_t max_line_depth = 64 + 8;
  /// Requests admitted but not yet answered (0 counts as 1). handle_line()
  /// blocks while this many are outstanding, so a client that pipelines
  /// without bound cannot grow the server's memory without bound.
  std::size_t max_in_flight = 4096;
  /// Bytes of the request lines of the requests admitted and not yet
  /// answered (0 counts as 1). handle_line() also blocks while admitting a
  /// line would take them past this, unless nothing is in flight (a single
  /// line larger than the bound is admitted alone): a client pipelining
  /// large requests holds at most this much of them (and what parsing them
  /// made) in the server, plus one line.
  std::size_t max_in_flight_bytes = std::size_t{16} << 20;
  /// Bytes in flight of every stream sharing this counter (a server's
  /// connections), kept here for the owner's own bound and counters; null:
  /// not shared.
  std::shared_ptr<std::atomic<std::uint64_t>> server_in_flight_bytes;
  /// Authentication (auth.hpp): null, every method is allowed (stdio, a
  /// server without a token file); set, the stream must `authenticate`
  /// first and its token decides which apps it reaches.
  std::shared_ptr<const token_source> tokens;

  // Observers for a server's counters and logs; each may be empty. They run
  // on the reader's thread or on engine threads, and must not block or throw.
  /// Extra members of `stats`' result under "server".
  std::function<json()> server_stats;
  /// Called with data.kind of every error answered.
  std::function<void(std::string_view kind)> on_error;
  /// Called after each `authenticate`, with whether the token was accepted.
  std::function<void(bool accepted)> on_authenticate;
  /// Called after one or more requests handed in (notifications included)
  /// have completed and been answered, once per group; in_flight() no longer
  /// counts them. A reader that stopped taking lines at max_in_flight
  /// resumes from here.
  std::function<void()> on_complete;

  /// Bytes written to the stream and not yet taken by the client. With it, a
  /// watch whose next batch would take them past max_watch_backlog pauses:
  /// its engine watch ends from inside the callback (no thread waits; the
  /// change log keeps what it has not sent) and on_watch_paused is called;
  /// the stream's owner calls resume_watches() once its output has drained.
  /// Without it, nothing bounds the notifications here.
  std::function<std::size_t()> queued_output_bytes;
  std::size_t max_watch_backlog = std::size_t{32} << 20;
  /// Called on a delivery thread when a watch pauses for room, never after
  /// end_watches() or the destructor has returned; must not block, throw or
  /// call back into the rpc_session.
  std::function<void()> on_watch_paused;

  /// Live watches of this stream; a `watch` beyond it is refused with kind
  /// unavailable until one ends.
  std::size_t max_watches = 64;
  /// Live watches of every stream that shares this counter (a server's
  /// connections), at most max_server_watches; null: no shared bound.
  std::shared_ptr<std::atomic<std::size_t>> server_watches;
  std::size_t max_server_watches = 1024;

  /// A cluster node's routing (docs/cluster.md); empty: every request runs
  /// here. Called on the reader's thread for each request that is to run
  /// (after the access check, before it runs, `watch` included); a refusal
  /// answers the request instead (in its session's order when it names one).
  /// Must not block or throw.
  std::function<std::optional<route_refusal>(const route_query&)> route;
  /// The result of `cluster_map` for its params (an object); empty: the
  /// method is unknown here (method_not_found). An error answers with its
  /// kind. Called on the reader's thread; must not block for long or throw.
  std::function<result<json>(const json& params)> cluster_map;
  /// A cluster node's own methods `shard_export`, `shard_import`, `shard_digest`, `shard_adopt` and `replicate` (the
  /// steps of `cluster move` and a replicated shard's runs, docs/protocol.md): called with the method's
  /// name and params (an object) once the access check passed (they need a
  /// token granting '*'); `done` is called exactly once, on any thread.
  /// Empty: the methods are unknown here (method_not_found). Must not block
  /// or throw.
  node_call_fn node_call;
  /// Sends a request (method, params) to the peer at `peer` and calls `done`
  /// exactly once with its answer, on any thread. Requests given here for
  /// one peer must reach it in the order given (a session's order rides on
  /// it). Must not block or throw. `params` may be a binary value: the
  /// bytes of the params' JSON text, taken from the request line unread, to
  /// be sent as they are (such a request's result may come back as text,
  /// see forward_done). A JSON text never parses to a binary value, so
  /// the two forms cannot be confused.
  std::function<void(const std::string& peer, const std::string& method, json params,
                     forward_done done)>
    forward;
};

namespace detail {
class dispatcher;
struct decoded_request;
} // namespace detail

/// A request line decoded by rpc_session::decode(), waiting to be handed in
/// (rpc_session::handle_decoded()). Move-only; holds what decoding made of
/// the line (for a long line, far more than its bytes), so it is handed in
/// or dropped promptly.
class decoded_line {
public:
  decoded_line() noexcept;
  ~decoded_line();
  decoded_line(decoded_line&&) noexcept;
  decoded_line& operator=(decoded_line&&) noexcept;

  /// The bytes of the line.
  std::size_t bytes() const noexcept { return bytes_; }

private:
  friend class rpc_session;
  /// Null when decoding failed (`failure` says why).
  std::unique_ptr<detail::decoded_request> req_;
  /// The line itself, kept only for a cluster node's routing (which reads
  /// a forwarded request's params again).
  std::string line_;
  std::size_t bytes_ = 0;
  std::string failure_;
};

/// Serves one client stream. Requests for different sessions run concurrently
/// through the engine's async API; requests naming the same session
/// (app_name, user_id, session_id) run one at a time in the order their lines
/// were handed in; `flush` waits for every request handed in before it.
///
/// Thread safety: handle_line(), handle_decoded(), handle_oversized_line()
/// and drain() are meant to be called from one thread at a time (the reader
/// of the stream); decode() from any thread; responses are
/// written from engine threads too, and a watch's notifications from the
/// engine's delivery threads. Watches end with the rpc_session.
class rpc_session {
public:
  /// `write` receives each response as one JSON text without the trailing
  /// newline. It is called once per answered request, possibly from engine
  /// threads, never concurrently with itself. It must not block for long: it
  /// runs inside engine callbacks (queue the line; see framing.hpp).
  /// Exceptions it throws are caught and dropped (the response is lost).
  /// REQUIRES: `eng` outlives every request handed in (call drain() before
  /// closing it).
  rpc_session(engine& eng, std::function<void(std::string)> write, rpc_config cfg = {});

  /// Drains (see drain()).
  ~rpc_session();
  rpc_session(const rpc_session&) = delete;
  rpc_session& operator=(const rpc_session&) = delete;

  /// Handles one line (without its '\n'; one trailing '\r' is ignored). Any
  /// bytes at all are accepted: what is not a valid request is answered with
  /// an error response and changes nothing stored. A request is answered
  /// later, when the engine completes it; a notification (no "id") is run and
  /// never answered. With `tokens` set, a request the stream's access does
  /// not allow is answered with access_error and not run. Blocks only while
  /// the in-flight bounds (max_in_flight, max_in_flight_bytes) leave no
  /// room for it. Never throws.
  void handle_line(std::string_view line);

  /// Decodes `line` as handle_line() would, running nothing and touching no
  /// state of the stream: callable from any thread, concurrently with the
  /// reader's calls, so that a long line's decoding can leave the reader's
  /// thread. Never throws (a failure is answered by handle_decoded()).
  decoded_line decode(std::string line) const noexcept;

  /// Handles a line decode() made exactly as handle_line() would have
  /// handled the line: called by the stream's reader, in the stream's line
  /// order (a line decoded elsewhere is handed in before any later line).
  /// Never throws.
  void handle_decoded(decoded_line l);

  /// Answers a line that was discarded because it had `bytes` bytes, more
  /// than `limit` (parse error, kind too_large, id null). Never throws.
  void handle_oversized_line(std::uint64_t bytes, std::uint64_t limit);
  /// As above; `why` (non-empty) follows the message: which limit it was.
  void handle_oversized_line(std::uint64_t bytes, std::uint64_t limit, const std::string& why);

  /// Ends every watch of the stream, each with a `watch_ended` notification
  /// (reason closing, resume_from after the last `changes` written) passed
  /// to `write` before this returns; batches not yet written are dropped
  /// (resuming reads them again). Watches started later are not ended. Call
  /// when the stream is closing gracefully, before drain(). Waits only for a
  /// batch being written now: the engine watches are released on a thread
  /// of their own, never on the caller's.
  void end_watches();

  /// Restarts the watches paused for room (rpc_config::queued_output_bytes)
  /// while the queued output is at most half of max_watch_backlog. Any
  /// thread but a watch's callback; call after output was written.
  void resume_watches();

  /// Ends, with watch_ended (reason permission_denied), every watch the
  /// stream's access no longer allows: call after the token source's table
  /// was replaced. (A refused `authenticate` does this itself, and a batch
  /// is never delivered past a revocation.) Any thread but a watch's
  /// callback.
  void check_watch_access();

  /// Whether a watch waits for resume_watches(). Thread-safe.
  bool watches_paused() const;

  /// Blocks until every request handed in so far has completed and its
  /// response has been passed to `write`. REQUIRES: not called from an engine
  /// callback.
  void drain();

  /// Whether the stream has a live watch (started and not yet ended by
  /// unwatch or end_watches()). Thread-safe.
  bool watching() const;

  /// Requests handed in and not yet completed.
  std::size_t in_flight() const;
  /// The bytes of their request lines (rpc_config::max_in_flight_bytes).
  std::size_t in_flight_bytes() const;

private:
  struct observers;
  struct watches;
  void authenticate(detail::decoded_request& d);
  void start_watch(detail::decoded_request& d);
  void answer_cluster_map(detail::decoded_request& d);
  void answer_node_call(detail::decoded_request& d, std::size_t bytes);
  /// What handle_line() does with a decoded line `d`, read from `line`
  /// (`bytes` bytes).
  void handle_request(detail::decoded_request& d, std::string_view line, std::size_t bytes);
  /// Answers a line whose handling threw `what` (id null, kind internal).
  void answer_internal(const char* what);
  /// Applies route_ to `d` (read from `line`); true when it was refused
  /// (and answered) or forwarded.
  bool route_refused(detail::decoded_request& d, std::string_view line);
  void stop_watch(detail::decoded_request& d);
  /// Starts `d`'s watch across nodes as `r` says (route_refusal::span_watch_open);
  /// `params` are the request's.
  void start_span_watch(detail::decoded_request& d, json params, route_refusal& r);
  /// What both starts share, for the admitted watch `w` holding `d`'s
  /// request: `start(w)` under the watch's lock (an error answers `d`),
  /// then the watch is live and `d` answered its id and cursor.
  template <class W, class Start>
  void begin_watch(detail::decoded_request& d, const std::shared_ptr<W>& w, Start&& start);
  void refuse(const detail::decoded_request& d, int code, const std::string& message,
              std::string_view kind);
  /// Ends every watch; `reason` null: silently (the stream is gone).
  void end_all(const char* reason);

  /// Shared with the engine callbacks still pending (see dispatcher).
  std::shared_ptr<detail::dispatcher> dispatch_;
  std::size_t max_line_depth_;
  access_gate gate_;
  /// The config's observers, shared with the replies they watch; null when
  /// there are none.
  std::shared_ptr<const observers> observers_;
  /// The stream's watches (`watch`, `unwatch`); ended before drain().
  std::shared_ptr<watches> watches_;
  std::function<std::optional<route_refusal>(const route_query&)> route_;
  std::function<result<json>(const json&)> cluster_map_;
  node_call_fn node_call_;
  std::function<void(const std::string&, const std::string&, json, forward_done)> forward_;
  engine& eng_;
};

} // namespace agentstate::protocol
