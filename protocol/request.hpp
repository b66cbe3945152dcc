// SPDX-License-Identifier: Apache-2.0
// protocol/request.hpp: decoding one request line (JSON-RPC 2.0 envelope:
// jsonrpc, id, method, params) into a prepared request or the error that
// answers it. Internal to agentstate_protocol.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "agentstate/json.hpp"
#include "protocol/methods.hpp"
#include "protocol/responses.hpp"

namespace agentstate::protocol::detail {

/// What one line asks for. At most one of `run` and `refusal` is set; neither
/// when the line is a notification whose method or params are wrong
/// (notifications are never answered once their envelope is readable). A
/// request refused for its params that still names a session comes back as
/// a `run` that answers the refusal in the session's order (refusal_call).
struct decoded_request {
  json id = nullptr; ///< the request's id; null when absent or unusable
  bool notification = false; ///< no "id": run, never answered
  std::optional<prepared> run; ///< the request to submit
  std::optional<rpc_failure> refusal; ///< the error to answer with `id`
  /// The access check's inputs (auth.hpp): the method named (empty when the
  /// line is no request), and params.app_name when it is a string.
  std::string method;
  std::optional<std::string> app_name;
  /// A cluster's routing inputs (rpc_config::route): params.user_id and
  /// params.scope when they are strings.
  std::optional<std::string> user_id;
  std::optional<std::string> scope;
  /// params.this_node is true: a cluster node's own part of a request that
  /// spans nodes (route_query::this_node).
  bool this_node = false;
  /// `cluster_map`'s params: such a request has neither `run` nor `refusal`
  /// and is answered by the session (rpc_config::cluster_map).
  std::optional<json> cluster_map;
  /// the params of shard_export, shard_import, shard_digest, shard_adopt or replicate (rpc_config::node_call), the
  /// same way.
  std::optional<json> node_call;
  /// `authenticate`'s token. Set only for an authenticate request with a
  /// string token; such a request has neither `run` nor `refusal` and is
  /// answered by the session, which holds the access state.
  std::optional<std::string> token;
  /// `watch`'s filter, or `unwatch`'s watch_id: such a request has neither
  /// `run` nor `refusal` and is answered by the session, which holds the
  /// stream's watches.
  std::optional<watch_request> watch;
  std::optional<std::string> unwatch;
};

/// Decodes `line` (without its '\n'; one trailing '\r' is ignored), nesting
/// at most `max_depth` deep. Any bytes are accepted: what is not a valid
/// request comes back as a refusal (parse_error, invalid_request,
/// method_not_found or invalid_params). Pure: runs nothing. Throws only
/// bad_alloc.
decoded_request decode_request(std::string_view line, std::size_t max_depth);

} // namespace agentstate::protocol::detail
