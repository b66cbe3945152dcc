// SPDX-License-Identifier: Apache-2.0
// model/json_writer.hpp: compact JSON text of a json value, appended to a
// caller's buffer, byte for byte what json::dump() writes (no indent,
// ensure_ascii off), without json::dump()'s per-call setup (an indent
// string, an output adapter, a localeconv() call) and without nlohmann's
// internal serializer. Pure; no allocation but `out`'s.
#pragma once

#include <string>
#include <string_view>

#include "agentstate/json.hpp"

namespace agentstate::model {

/// What the writer does with a string that is not strict UTF-8.
enum class utf8_policy {
  strict, ///< refuse it (json::dump()'s default error handler)
  replace, ///< write U+FFFD for each invalid part (error_handler_t::replace)
};

/// Appends the text of `x` as json::dump(-1, ' ', false, handler) writes it:
/// object members in key order, integers in decimal, doubles as
/// append_double, strings as append_escaped. With `strict`, returns false
/// (leaving `out` partly written) at the first string, key or value, that is
/// not strict UTF-8; with `replace` it always returns true.
/// REQUIRES: json_depth(x) is bounded (the writer recurses).
[[nodiscard]] bool append_json(std::string& out, const json& x,
                               utf8_policy policy = utf8_policy::strict);

/// Appends `v` as json::dump() writes a double: null when not finite;
/// otherwise the digits nlohmann's Grisu2 gives (they read back as `v`;
/// usually, not always, the shortest such), placed by the position p of the
/// decimal point after the first digit: for -4 < p <= 15 in plain notation
/// ("0.000ddd", "dd.ddd", or "ddd000.0" for an integral value), otherwise
/// as "d.ddde+NN" / "de-NN" with at least two exponent digits; -0.0 is
/// "-0.0".
void append_double(std::string& out, double v);

/// Appends `s` as a JSON string the way append_escaped does, writing U+FFFD
/// (as its UTF-8 bytes) in place of each part that is not strict UTF-8: a
/// byte that cannot start a sequence, or the longest start of a sequence
/// that the next byte (or the end of `s`) breaks off.
void append_escaped_lossy(std::string& out, std::string_view s);

} // namespace agentstate::model
