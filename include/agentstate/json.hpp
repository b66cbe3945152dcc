// SPDX-License-Identifier: Apache-2.0
// agentstate/json.hpp: the JSON value type and the bounded parser.
#pragma once

#include <cstddef>
#include <string_view>

#include <nlohmann/json.hpp>

#include "agentstate/error.hpp"

namespace agentstate {

/// Every JSON value in the API is an nlohmann::json.
using json = nlohmann::json;

/// Parses `text` as one JSON value, refusing nesting deeper than `max_depth`
/// (arrays and objects count one level each) before any deep value is built.
/// Errors: invalid_argument (syntax, invalid UTF-8, trailing data, a raw NUL
/// byte; the message gives the byte offset), too_large (depth). Never throws.
result<json> parse_json(std::string_view text, std::size_t max_depth);

/// Depth of `x` (a scalar is 0, `{}` and `[]` are 1), computed without
/// recursion, stopping early once it exceeds `limit`. O(nodes).
std::size_t json_depth(const json& x, std::size_t limit);

/// Compact serialization. Errors: invalid_argument when a string holds invalid
/// UTF-8. REQUIRES: json_depth(x) is bounded (dump recurses).
result<std::string> dump_json(const json& x);

} // namespace agentstate
