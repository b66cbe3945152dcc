// SPDX-License-Identifier: Apache-2.0
// protocol/responses.hpp: what a request comes to (a JSON result, result text
// already encoded, or a failure) and the JSON-RPC response line that carries
// it. Internal to agentstate_protocol.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "agentstate/error.hpp"
#include "agentstate/json.hpp"
#include "agentstate/types.hpp"
#include "protocol/rpc_session.hpp"

namespace agentstate::protocol::detail {

/// A request's error: the JSON-RPC code (rpc_code), a message for people, and
/// the response's data.kind (an errc name), data.current_version (set only
/// when the engine reported a version conflict) and data.oldest (set only
/// with cursor_expired: the oldest cursor the change log serves).
struct rpc_failure {
  int code = rpc_code::engine_error;
  std::string message;
  std::string kind;
  std::optional<std::uint64_t> current_version;
  std::optional<std::string> oldest;
  /// Further members of data (an object, or null for none): `moved`'s shard,
  /// owner, address and epoch.
  json data;
};

/// A result that is already JSON text, sent as is (get_session's stored
/// events are never parsed and re-encoded). The producer guarantees it is one
/// valid JSON value.
struct raw_result {
  std::string text;
};

/// A request's result (any JSON, null included) or its error.
using outcome = std::variant<json, raw_result, rpc_failure>;

/// Receives a request's outcome: called exactly once per request, on any
/// thread, possibly before the call that started the request returns.
/// Two words, trivially copyable: a callback that captures it fits the small
/// buffer of a std::function, so passing it on to the engine allocates
/// nothing. Does not own `ctx`; whoever made it keeps `ctx` alive until the
/// call.
class reply_fn {
public:
  reply_fn(void (*fn)(void* ctx, outcome o), void* ctx) noexcept : fn_(fn), ctx_(ctx) {}
  void operator()(outcome o) const { fn_(ctx_, std::move(o)); }

private:
  void (*fn_)(void*, outcome);
  void* ctx_;
};

/// A failure of `code` whose data.kind is `kind`. Throws only bad_alloc.
rpc_failure make_failure(int code, std::string message, errc kind);

/// The engine's error as an engine_error failure (kind and current_version
/// carried over). Throws only bad_alloc.
rpc_failure from_engine(const error& e);

/// A server bug or exhaustion at `where`: engine_error, kind "internal".
rpc_failure internal_failure(const char* where, const char* what);

/// The JSON-RPC error object of `f`: {code, message, data: {kind, ...}}.
/// Throws only bad_alloc.
json error_object(const rpc_failure& f);

/// The response line (no trailing newline) answering request `id` with `o`.
/// Bytes in messages that are not UTF-8 are replaced, so the line is always
/// valid JSON. Throws only bad_alloc.
std::string response_line(const json& id, const outcome& o);

/// The same line, built in a raw result's own buffer when `id` is an
/// integer (the head is put in front of the text, so a large result is not
/// copied into a second buffer); `o` is left unspecified. Throws only
/// bad_alloc.
std::string response_line(const json& id, outcome&& o);

/// `r`'s value through `convert`, or the engine's error. An exception thrown
/// by `convert` becomes an internal failure, so an outcome always results.
template <class T, class F>
outcome to_outcome(result<T>& r, F&& convert) {
  try {
    if (!r)
      return from_engine(r.err());
    return outcome{convert(r.value())};
  } catch (const std::exception& e) {
    return internal_failure("result encoding", e.what());
  }
}

/// null on success, or the engine's error.
outcome to_outcome(result<void>& r);

/// append_event's result {"event": Event, "version": N}, or the engine's
/// error. The event is encoded straight from the struct
/// (model::encode_event_text, the same bytes as the general encoder), not
/// through a DOM; a failure to encode becomes an internal failure.
outcome append_outcome(result<append_result>& r);

} // namespace agentstate::protocol::detail
