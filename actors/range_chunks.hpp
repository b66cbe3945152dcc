// SPDX-License-Identifier: Apache-2.0
// actors/range_chunks.hpp: what the engine's calls on ranges of the shard
// hash share (shard_handoff.cpp, replication.cpp, replica_copy.cpp): a
// range's chunk as their callers get it (engine::read_range,
// range_snapshot::read), the range in the model's terms, the closing error.
#pragma once

#include <cstddef>
#include <string>

#include "agentstate/engine.hpp"
#include "store/shard_copy.hpp"

namespace agentstate::detail {

/// `r` as the model's hash range.
inline model::hash_range to_model(hash_range r) {
  return {r.lo, r.hi};
}

/// What a call on a range answers once the engine is closing.
inline error closing() {
  return error{errc::unavailable, "the engine is closing"};
}

/// The chunk of `reader`'s range that starts at `from` ("" : the start; else
/// a chunk's `next`), of about `max_bytes` (at least 1), serialised and
/// counted. Errors: invalid_argument (a bad `from`), as shard_reader::next.
result<range_chunk> read_chunk(store::shard_reader& reader, const std::string& from,
                               std::size_t max_bytes);

} // namespace agentstate::detail
