// SPDX-License-Identifier: Apache-2.0
// tools/adk/times.hpp: the time forms ADK's SQLite stores use (datetime
/// text in UTC or local time, epoch seconds, JS milliseconds) to and from
/// agentstate's epoch seconds, and a member lookup in stored event JSON text.
/// Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "agentstate/json.hpp"

namespace agentstate::tools::adk {

/// Days from 1970-01-01 to the proleptic Gregorian date y-m-d.
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d);

/// Parses "YYYY-MM-DD HH:MM:SS[.f{1,9}]" (or with 'T'), as UTC or local time.
std::optional<double> parse_datetime(const std::string& s, bool local);

/// "YYYY-MM-DD HH:MM:SS.ffffff" of `t` (rounded to the microsecond), as UTC
/// or local time: what SQLAlchemy writes for a naive datetime.
std::string format_datetime(double t, bool local);

/// Epoch seconds -> milliseconds as ADK-JS keeps them: an integer when that
/// integer divided by 1000 gives `t` back exactly (everything ADK-JS wrote
/// does), else the real number of milliseconds.
json to_millis(double t);

/// The JSON number text of `t` seconds in milliseconds, exactly: the decimal
/// of `t` (which reads back as `t`) with its exponent raised by 3. A double
/// of milliseconds cannot hold every double of seconds (at today's times
/// ~1 in 40 would come back one unit in the last place off); this text can,
/// and ADK-JS reads it as the nearest double of milliseconds.
std::string millis_text(double t);

/// The inverse of millis_text for any JSON number text of milliseconds:
/// the nearest double to (that decimal) / 1000, rounded once.
std::optional<double> seconds_from_millis_text(std::string_view text);

/// The raw text of the last top-level member `key` of the JSON object
/// `text`, which must be valid JSON (it is parsed before). nullopt when the
/// object has no such member spelled without escapes.
std::optional<std::string_view> top_level_member(std::string_view text, std::string_view key);

} // namespace agentstate::tools::adk
