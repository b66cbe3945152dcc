// SPDX-License-Identifier: Apache-2.0
// protocol/methods.hpp: the method table. Each method checks its params and
// prepares one engine call, with the ordering it needs. Internal to
// agentstate_protocol; docs/protocol.md documents every method.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "agentstate/engine.hpp"
#include "protocol/params.hpp"
#include "protocol/responses.hpp"

namespace agentstate::protocol::detail {

/// Starts one engine call and calls `reply` exactly once, on any thread
/// (possibly before returning). May throw before starting the call; the
/// dispatcher then replies with an internal failure.
using operation = std::function<void(engine&, const reply_fn&)>;

/// How a request runs relative to the others of its stream:
///  * free: at once;
///  * pipelined: a write the session's actor orders (create_session with an
///    id, append_event, delete_session, end_invocation): started as soon as
///    the earlier requests naming the same session have been started, so a
///    session's writes reach the engine back to back and share commits;
///  * per_session: a read of the session (get_session, inject_state), and an
///    append_event with `modify` (which can fail at commit, and would then
///    fail the appends pipelined behind it): started once every earlier
///    request naming the session has completed, and the later ones wait
///    until it has, so it sees exactly the writes before it;
///  * barrier (flush): once every earlier request has completed.
/// Either way a session's requests reach the engine in the stream's order.
enum class ordering { free, pipelined, per_session, barrier };

/// A checked request, ready to run.
struct prepared {
  operation op;
  ordering order = ordering::free;
  std::string key; ///< the session's sequencing key (pipelined, per_session)
  /// `stats`: the server's own counters (rpc_config::server_stats) join the
  /// result object as "server".
  bool server_stats = false;
};

/// A prepared request, or the invalid_params failure that refuses it.
using prepare_result = std::variant<prepared, rpc_failure>;

/// Checks `params` (an object) and prepares the call. Pure: runs nothing.
/// Throws only bad_alloc.
using prepare_fn = prepare_result (*)(const json& params);

/// append_event's call for the checked request `r` (what the method
/// prepares once its params are read; request.cpp's direct reader of
/// append_event lines builds `r` without a DOM and calls this too).
/// Throws only bad_alloc.
prepared append_call(append_request r);

/// The method named `name`, or nullptr when there is none (`authenticate` is
/// not here: rpc_session answers it, see auth.hpp). Cost: a scan of the
/// table's twelve names.
prepare_fn find_method(std::string_view name);

/// The sequencing key a request of method `name` with `params` would run
/// under (see prepared::key), judged from the name members alone (strings
/// app_name, user_id, session_id; create_session's trimmed and not empty);
/// nullopt when the method is not about one session or they are missing.
/// Throws only bad_alloc.
std::optional<std::string> named_session_key(std::string_view name, const json& params);

/// A request that only answers `f`, sequenced under `key` as a pipelined
/// write: a refused request that names a session is answered in that
/// session's order (after the responses to its earlier requests). Throws
/// only bad_alloc.
prepared refusal_call(rpc_failure f, std::string key);

/// The feed filter of `read_changes` and `watch` (scope, app_name, user_id,
/// session_id, include_sessions, key_prefix, from); a bad one is left as
/// p's failure.
watch_request read_watch_request(param_reader& p);

} // namespace agentstate::protocol::detail
