// store/layout.hpp: how sessions, events and scoped state are laid out in the
// kv tables (README "Storage format" documents the same), and every read and
// write the engine makes. Functions here never throw: kv_failure and codec
// exceptions are caught at this boundary and returned as errors.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agentstate/error.hpp"
#include "agentstate/json.hpp"
#include "agentstate/types.hpp"
#include "store/kv.hpp"

namespace agentstate::store {

/// Version of the on-disk layout, stored in meta["format"].
/// - 1: a database per table, and a dedup index of event ids (`event_ids`).
/// - 2: no `event_ids` (session actors index their events' ids in memory,
///   built from the events).
/// - 3: the six small tables share one LMDB database (`rows`; open_lmdb_kv),
///   so an append's commit dirties fewer B-trees. Keys and values are those
///   of format 2.
/// init_meta upgrades a format 1 or 2 store when it opens one for writing, in
/// one transaction; read-only opens read every format as it is.
inline constexpr std::uint32_t format_version = 3;
/// The oldest format this build reads and upgrades.
inline constexpr std::uint32_t oldest_format_version = 1;
static_assert(format_version == 3, "init_meta needs the upgrade step to a new format");
/// The format meta["format"] names, when this build knows it (oldest to
/// current); 0 otherwise.
std::uint32_t known_format(std::string_view text);

/// Nesting bound for decoding stored JSON (values were checked against the
/// configured, smaller, limit when written). options::limit.max_json_depth
/// may not exceed it.
inline constexpr std::size_t stored_json_depth = 512;

// -- keys ----------------------------------------------------------------------
// Names never contain NUL (checked up front), so NUL separates components and a
// session's rows in every table share the prefix session_key + '\0'.

std::string session_key(std::string_view app, std::string_view user,
                        std::string_view id);
std::string user_scope_key(std::string_view app, std::string_view user);
/// Big-endian u64, so keys sort by number.
void append_be64(std::string& out, std::uint64_t x);
std::uint64_t read_be64(std::string_view x);
/// 8 bytes whose byte order is the numeric order of `x` (negatives included).
void append_ordered_double(std::string& out, double x);
double read_ordered_double(std::string_view x);

// -- records -------------------------------------------------------------------

struct session_record {
  std::uint64_t version = 0;
  double last_update_time = 0;
  double created = 0;
};

std::string encode_record(const session_record& x);
std::optional<session_record> decode_record(std::string_view x);

/// An event row: tag byte, the timestamp (8 bytes, so filters skip rows
/// without parsing them), then the event as JSON text.
std::string encode_event_row(double timestamp, std::string_view json_text);
/// Parses JSON the store wrote (no depth check: it was checked on write).
/// Errors: internal (corrupt).
result<json> parse_stored(std::string_view text);
std::optional<double> event_row_timestamp(std::string_view row);
result<event> decode_event_row(std::string_view row);
/// As above, into `out`, which must be default-constructed (what a vector's
/// emplace_back gives): no move of the decoded event. On an error `out` is
/// unspecified.
result<void> decode_event_row(std::string_view row, event& out);

// -- writes --------------------------------------------------------------------

/// One state row to write: the key (unprefixed for app/user scope), its
/// value (set for user/app rows, which are notified to scope actors, and for
/// creates; null otherwise), and the value's JSON text as stored. `erase`
/// deletes the row instead (value and text unused).
struct state_write {
  std::string key;
  json value;
  std::string text;
  bool erase = false;
};

/// The part of an append (or create) that only the store writer can finish,
/// because it depends on the committed values at commit time: atomic
/// modifies and derived keys. The writer resolves it inside the write
/// transaction (detail::resolve_late), adding rows to the write set and the
/// resolved values to `ev`, then encodes `ev` into event_row.
struct late_binding {
  event ev; ///< append: the event as stored so far (no temp: keys)
  std::vector<state_modify> modify;
  bool derive = false; ///< recompute derived keys whose inputs changed
  /// Filled by the writer: every value it added (prefixed key -> value).
  json added = json::object();
};

/// Everything one create, append or delete writes, prepared (validated and
/// encoded) by the session actor and applied by the writer in one nested
/// transaction. Owned by whoever holds it; moved, never copied, in messages.
struct write_set {
  enum class kind : std::uint8_t { create, append, remove } op = kind::append;
  std::string app, user, id;
  /// append: the version this event gets; the session must be at version-1.
  std::uint64_t version = 0;
  /// create: creation time; append: the event's timestamp.
  double time = 0;
  /// append: the event's row as stored (encode_event_row of its text),
  /// encoded by whoever prepares the write set, off the writer's thread.
  std::string event_row;
  std::vector<state_write> session_writes, user_writes, app_writes;
  /// Set when the writer must resolve modifies or derived keys first.
  std::shared_ptr<late_binding> late;

  /// Approximate bytes this write set puts (for the batch byte cap).
  std::size_t bytes() const;
};

/// Applies `ws` inside `txn`. Precondition failures come back as errors
/// (already_exists for a create of an existing id; not_found, or unavailable
/// when an earlier append of the session failed so this one's version no
/// longer follows), and only before the first write: an error return leaves
/// `txn` as it was. Throws kv_failure on storage failure, possibly after
/// some of the write set's puts.
result<void> apply(kv_write& txn, const write_set& ws);

// -- reads ---------------------------------------------------------------------

result<std::optional<session_record>> read_record(kv_read& txn, std::string_view skey);

/// The stored event of session `skey` at `version`, if any.
result<std::optional<append_result>> read_event(kv_read& txn, std::string_view skey,
                                                std::uint64_t version);

/// Calls fn(version, id) for every stored event of session `skey`, oldest
/// first. Errors: internal when a row does not decode. Cost: decodes every
/// event of the session (~1 µs each).
result<void> scan_event_ids(kv_read& txn, std::string_view skey,
                            const std::function<void(std::uint64_t, const std::string&)>& fn);

/// The session per G1-G6, in one snapshot. Does not validate `req`.
result<std::optional<session>> read_session(kv_read& txn, const get_request& req);
/// The same in a fresh snapshot of `kv` (storage failures become errors).
result<std::optional<session>> read_session(kv_store& kv, const get_request& req);

/// read_session as JSON text, equal to dump_json(to_json(session)), or
/// "null" when the session does not exist. Stored event texts are copied,
/// never parsed: O(bytes) instead of a DOM per event. `extra` (an object,
/// may be null) is merged into the state (the live invocation's temp: keys).
result<std::string> read_session_text(kv_read& txn, const get_request& req, const json* extra);
result<std::string> read_session_text(kv_store& kv, const get_request& req, const json* extra);

/// The stored value of one state key of session (app, user, id), by the
/// key's scope (S1; prefixed key), or nullopt when missing. Errors: internal
/// (corrupt). Throws kv_failure on storage failure.
result<std::optional<json>> read_state_value(kv_read& txn, std::string_view app,
                                             std::string_view user, std::string_view id,
                                             std::string_view key);

/// One scope's state object: user scope when `user` is given, else app scope.
/// Keys are unprefixed.
result<json> read_scope(kv_read& txn, std::string_view app,
                        const std::string* user);

/// L1-L3. REQUIRES: page_size in 1..1000.
result<session_page> list_sessions(kv_read& txn, const list_request& req,
                                   std::size_t page_size);

/// Reads meta; writes it when the store is new, and upgrades a format 1
/// store to format 2 (in one transaction: drops its `event_ids` table,
/// records the format). Errors: internal when the store's format is neither.
result<void> init_meta(kv_store& kv, std::string_view engine_version);

} // namespace agentstate::store
