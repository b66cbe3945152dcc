// SPDX-License-Identifier: Apache-2.0
// protocol/methods.hpp: the method table. Each method checks its params and
// prepares one engine call, with the ordering it needs. Internal to
// agentstate_protocol; docs/protocol.md documents every method.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <variant>

#include "agentstate/engine.hpp"
#include "protocol/responses.hpp"

namespace agentstate::protocol::detail {

/// Starts one engine call and calls `reply` exactly once, on any thread
/// (possibly before returning). May throw before starting the call; the
/// dispatcher then replies with an internal failure.
using operation = std::function<void(engine&, const reply_fn&)>;

/// How a request runs relative to the others of its stream: alone, behind the
/// earlier requests naming the same session, or after every earlier request
/// has completed (flush).
enum class ordering { free, per_session, barrier };

/// A checked request, ready to run.
struct prepared {
  operation op;
  ordering order = ordering::free;
  std::string key; ///< the session's sequencing key, with ordering::per_session
};

/// A prepared request, or the invalid_params failure that refuses it.
using prepare_result = std::variant<prepared, rpc_failure>;

/// Checks `params` (an object) and prepares the call. Pure: runs nothing.
/// Throws only bad_alloc.
using prepare_fn = prepare_result (*)(const json& params);

/// The method named `name`, or nullptr when there is none. Cost: a scan of
/// the table's eleven names.
prepare_fn find_method(std::string_view name);

} // namespace agentstate::protocol::detail
