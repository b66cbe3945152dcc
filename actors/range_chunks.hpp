// SPDX-License-Identifier: Apache-2.0
// actors/range_chunks.hpp: a range's chunk as the engine's callers get it
// (engine::read_range, range_snapshot::read), shared by shard_handoff.cpp
// and replica_copy.cpp.
#pragma once

#include <cstddef>
#include <string>

#include "agentstate/engine.hpp"
#include "store/shard_copy.hpp"

namespace agentstate::detail {

/// The chunk of `reader`'s range that starts at `from` ("" : the start; else
/// a chunk's `next`), of about `max_bytes` (at least 1), serialised and
/// counted. Errors: invalid_argument (a bad `from`), as shard_reader::next.
result<range_chunk> read_chunk(store::shard_reader& reader, const std::string& from,
                               std::size_t max_bytes);

} // namespace agentstate::detail
