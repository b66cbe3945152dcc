// SPDX-License-Identifier: Apache-2.0
// store/replica.hpp: what a shard's primary ships to its followers, and how
// far each follower got (docs/storage.md, "Replica positions").
//
// A replicated shard's primary ships each committed write set
// (store/write_set.hpp) in order; a follower applies them with store::apply.
// encode_write_set / decode_write_set are a write set's wire form;
// replica_batch is a run of them as shipped; the position rows (table meta)
// record, per shard, the last write set a node committed.
//
// Decoders are strict: they accept exactly what the encoders make (every
// length, count and flag canonical, nothing after the end), so for any
// input a decoder accepts, encoding its answer gives the input back. They
// never throw, never read outside their input, and never allocate for a
// count the input cannot hold.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agentstate/error.hpp"
#include "store/kv.hpp"
#include "store/write_set.hpp"

namespace agentstate::store {

/// How far a node has committed a replicated shard's writes: the map epoch
/// under which the last one was committed and its sequence number within the
/// shard (1, 2, ... across epochs; {0, 0}: none yet).
struct replica_position {
  std::uint64_t epoch = 0;
  std::uint64_t seq = 0;
  friend bool operator==(const replica_position& a, const replica_position& b) {
    return a.epoch == b.epoch && a.seq == b.seq;
  }
  friend bool operator!=(const replica_position& a, const replica_position& b) { return !(a == b); }
};

/// The first byte of encode_write_set's and encode_replica_batch's output.
inline constexpr std::uint8_t write_set_format = 1;
inline constexpr std::uint8_t replica_batch_format = 1;

/// Every member of `ws` that store::apply and the change row it writes read:
/// op, app, user, id, version, time, event_row, the three state_write lists
/// (key, text, erase; not state_write::value), origin_body (present or not),
/// no_origin, fork_events, expires, refresh, outcome, forget, only_if
/// (present or not, and its members), app_elsewhere. Layout: format byte 1 ‖
/// op ‖ flags (1 origin_body present, 2 no_origin, 4 only_if present, 8
/// app_elsewhere) ‖ then, each string as varint length ‖ bytes, each list
/// as varint count ‖ items, integers as varints (LEB128, shortest form),
/// doubles as their big-endian bit patterns (8 bytes, bit-exact): app, user,
/// id, version, time, expires, refresh, event_row, session_writes,
/// user_writes, app_writes (each item erase byte 0/1 ‖ key ‖ text), origin
/// body (when present), fork_events, outcome, forget, only_if's version,
/// created and last_update_time (when present).
std::string encode_write_set(const write_set& ws);

/// The write set encode_write_set encoded (state_write::value left null).
/// Errors: data_corrupt, saying what is wrong, for any other input (an
/// unknown format byte, op or flag, a length or count beyond the remaining
/// bytes, a varint not in its shortest form, trailing bytes).
result<write_set> decode_write_set(std::string_view bytes);

/// A run of consecutive write sets of one shard as the primary ships it:
/// the position before the first (`prev`), the epoch they were committed
/// under, and their encodings (sequence numbers prev.seq + 1, + 2, ...).
struct replica_batch {
  replica_position prev;
  std::uint64_t epoch = 0;
  std::vector<std::string> sets; ///< each an encode_write_set
};

/// Layout: format byte 1 ‖ varint prev.epoch ‖ varint prev.seq ‖ varint
/// epoch ‖ varint count ‖ each set as varint length ‖ bytes ‖ crc32c of
/// everything before it (4 bytes, big-endian), so damage in transit is
/// caught before any set is applied.
std::string encode_replica_batch(const replica_batch& b);
/// The batch encode_replica_batch encoded. Errors: data_corrupt as for
/// decode_write_set, and for a failing checksum, an epoch below prev.epoch,
/// no sets, or sequence numbers beyond 2^64 - 1. Does not decode the sets.
result<replica_batch> decode_replica_batch(std::string_view bytes);

/// The key of the position row of the replicated shard [lo, hi)
/// (model::hash_range: hi 0 is the end of the hash space) in table meta:
/// "replica/" ‖ be64 lo ‖ be64 hi, so the rows of all shards scan in order
/// under the prefix replica_key_prefix.
inline constexpr std::string_view replica_key_prefix = "replica/";
std::string replica_key(std::uint64_t lo, std::uint64_t hi);

/// The position row of shard [lo, hi): nullopt when there is none. Errors:
/// data_corrupt for a damaged row; storage errors.
result<std::optional<replica_position>> read_replica_position(kv_read& txn, std::uint64_t lo,
                                                              std::uint64_t hi);
/// Stores `p` as the position of shard [lo, hi): sealed (store/records.hpp)
/// under its key, body be64 epoch ‖ be64 seq. Throws kv_failure.
void put_replica_position(kv_write& txn, std::uint64_t lo, std::uint64_t hi,
                          const replica_position& p);
/// Deletes the position row of shard [lo, hi), if any. Throws kv_failure.
void erase_replica_position(kv_write& txn, std::uint64_t lo, std::uint64_t hi);

/// The position row `key` → `value` of table meta (a key under
/// replica_key_prefix). Errors: data_corrupt when its key or value is
/// damaged (what `agentstate verify` reports for each such row).
result<replica_position> decode_replica_row(std::string_view key, std::string_view value);

} // namespace agentstate::store
