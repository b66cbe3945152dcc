// SPDX-License-Identifier: Apache-2.0
// store/records.hpp: the values of the `sessions` and `events` tables, and
// stored JSON (README "Storage format"). Pure encoders and decoders.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "agentstate/error.hpp"
#include "agentstate/json.hpp"
#include "agentstate/types.hpp"

namespace agentstate::store {

/// A session's record: tag 1, u64 version, f64 last_update_time, f64
/// created (little-endian, 25 bytes).
struct session_record {
  std::uint64_t version = 0;
  double last_update_time = 0;
  double created = 0;
};

std::string encode_record(const session_record& x);
/// nullopt when `x` is not a record of this layout.
std::optional<session_record> decode_record(std::string_view x);

/// An event row: tag byte, the timestamp (8 bytes, so filters skip rows
/// without parsing them), then the event as JSON text.
std::string encode_event_row(double timestamp, std::string_view json_text);
/// The JSON text of an event row (no copy); REQUIRES: event_row_timestamp(row).
inline std::string_view event_row_text(std::string_view row) {
  return row.substr(9);
}
/// The row's timestamp; nullopt when the row's tag is unknown.
std::optional<double> event_row_timestamp(std::string_view row);
/// Errors: internal (corrupt).
result<event> decode_event_row(std::string_view row);
/// As above, into `out`, which must be default-constructed (what a vector's
/// emplace_back gives): no move of the decoded event. On an error `out` is
/// unspecified.
result<void> decode_event_row(std::string_view row, event& out);

/// Parses JSON the store wrote (no depth check: it was checked on write).
/// Errors: internal (corrupt).
result<json> parse_stored(std::string_view text);

} // namespace agentstate::store
