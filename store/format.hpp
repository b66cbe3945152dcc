// SPDX-License-Identifier: Apache-2.0
// store/format.hpp: the store's format version, and the upgrade of older
// formats when a store is opened for writing (docs/storage.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "agentstate/error.hpp"
#include "store/kv.hpp"

namespace agentstate::store {

/// Version of the on-disk layout, stored in meta["format"].
/// - 1: a database per table, and a dedup index of event ids (`event_ids`).
/// - 2: no `event_ids` (session actors index their events' ids in memory).
/// - 3: the six small tables share one LMDB database (`rows`; open_lmdb_kv).
/// - 4: every value but meta's is sealed with a CRC-32C (store/records.hpp).
/// - 5: the creation-order list indexes `by_created` and `by_user_created`.
/// - 6: the change log (`changes`, store/change_log.hpp) and the store's
///   epoch (meta["epoch"]), which cursors name.
/// - 7: `origins`, each session's own state as created (store/history.hpp);
///   a session created by an older format has none. Also `doomed`
///   (store/purge.hpp), `expiry` with the 40-byte record of a session that
///   expires (store/expiry.hpp) and `fences` (store/scope_delete.hpp); every
///   reader takes records of 24 and 40 bytes.
/// - 8: each state scope's tally row (store::state_tally: its rows' count
///   and checksum sum), which every read of the scope checks.
/// - 9: each app's and user's session count (table session_counts), which
///   listings that walk a whole app or user check.
/// - 10: `app_writes`, the app: writes a cluster node applied as the app's
///   home, by write id (store/app_writes.hpp), and `outbox`, appends whose
///   app: part waits to be applied at its home (store/outbox.hpp).
/// - 11: `shard_index`, every session under the hash that places it in a
///   cluster (store::index_session), so a shard's sessions are one key range
///   (store/shard_copy.hpp copies them).
inline constexpr std::uint32_t format_version = 11;
/// The oldest format this build reads and upgrades.
inline constexpr std::uint32_t oldest_format_version = 1;
static_assert(format_version == 11, "init_meta needs the upgrade step to a new format");
/// The format meta["format"] names, when this build knows it (oldest to
/// current); 0 otherwise.
std::uint32_t known_format(std::string_view text);

/// Nesting bound for decoding stored JSON (values were checked against the
/// configured, smaller, limit when written). options::limits.max_json_depth
/// may not exceed it.
inline constexpr std::size_t stored_json_depth = 512;

/// Reads meta. A new store gets its meta written (meta["created"]: `now`,
/// epoch seconds; the overload without it reads the system clock); a store of an older known
/// format is upgraded to format_version in one transaction (1 -> 2 drops
/// `event_ids`; 2 -> 3 moves the small tables into `rows`; 3 -> 4 rewrites
/// every row with its value sealed, checking each: a row that does not
/// decode is sealed with a wrong checksum, so it reads as data_corrupt, as a
/// row damaged later would); 4 -> 5 adds two creation-order list entries
/// per session (a session whose record is damaged gets none); 5 -> 6 gives
/// the store an epoch and an empty change log (its sequence starts at 1);
/// 6 -> 7 writes nothing (the log and the epoch stay, so cursors stay valid);
/// 7 -> 8 puts each state scope's tally (a damaged row counts with the
/// checksum it carries, so it still reads as damaged); 8 -> 9 puts each
/// app's and user's session count (from the session records); 9 -> 10
/// writes nothing (`app_writes` and `outbox` start empty); 10 -> 11 puts
/// each session's shard index entry (from the session records, a damaged
/// one too: its key names its app and user). Cost of
/// 3 -> 4: a put and a JSON parse per row; of 4 -> 5: two puts per session;
/// of 7 -> 8: a pass over the state rows and a put per scope; of 8 -> 9: a
/// pass over the session records and a put per app and user; of 10 -> 11: a
/// pass over the session records and a put per session;
/// the transaction needs free map space for the pages it writes
/// (storage_full otherwise, the store left as it was). Errors:
/// internal when the format is unknown (the store is left as it was),
/// storage errors.
result<void> init_meta(kv_store& kv, std::string_view engine_version, double now);
result<void> init_meta(kv_store& kv, std::string_view engine_version);

} // namespace agentstate::store
