// SPDX-License-Identifier: Apache-2.0
// tools/adk/adk_sqlite.hpp: ADK's SQLite session stores, in and out of agentstate
// (`agentstate import --from-adk-sqlite`, `agentstate export --to-adk-sqlite`).
//
// Both directions go through the store's JSON-lines exchange records
// (store/exchange.hpp): an ADK file is read into the records import_store
// writes, and the records export_store emits are written as ADK rows. So this
// code never touches the store's layout.
//
// The three flavours ADK writes (tables sessions, events, app_states,
// user_states in each; detected from tables, columns and metadata):
//   adk-python-database  ADK-Python DatabaseSessionService, schema v1:
//                        adk_internal_metadata(schema_version = "1"); times are
//                        DATETIME text "YYYY-MM-DD HH:MM:SS.ffffff", UTC for
//                        sessions and state rows, local time for
//                        events.timestamp; event_data is the event's
//                        snake_case JSON with timestamp in epoch seconds.
//   adk-python-sqlite    ADK-Python SqliteSessionService: no metadata table;
//                        times are REAL epoch seconds; event_data as above.
//   adk-js               ADK-JS DatabaseSessionService (MikroORM): metadata
//                        schema_version "1"; state columns declared `json`;
//                        times are epoch milliseconds; event_data is the JS
//                        event with its keys turned to snake_case, timestamp
//                        in epoch milliseconds.
// ADK-Python's v0 schema (events.actions holds pickles) and anything else are
// refused before anything is written.
//
// Mapping, ADK -> agentstate (the inverse is used for export):
//   sessions row    -> session record: create_time -> created, update_time ->
//                      last_update_time (epoch seconds), state -> its own
//                      state without temp: keys; version = events kept.
//   events row      -> event record, versions 1..n by the timestamp column,
//                      ties in insertion order (rowid; ADK-JS's own service
//                      serves same-millisecond events in the reverse order,
//                      which import does not copy). The event is event_data
//                      member for member
//                      (snake_case, unknown members kept), except:
//                      id, invocation_id: the columns for adk-python-database
//                      (what it serves), event_data's for the others (what
//                      they serve), the column when event_data has none;
//                      timestamp: event_data's, in seconds (adk-js: / 1000);
//                      the column when event_data has none. For
//                      adk-python-database the column is only a local-time,
//                      microsecond rendering of event_data's value.
//                      temp: keys leave actions.state_delta.
//   user_states row -> user_state record; app_states row -> app_state record.
//                      These tables are the truth for current state: events'
//                      deltas are not replayed.
//
// Export writes every session, event and state row back in one of the three
// flavours (default adk-js) so that ADK serves them unchanged:
//   events: event_data = the stored event's JSON; the columns id,
//   invocation_id, timestamp are filled from the event. adk-js gets
//   event_data's timestamp in milliseconds written as number text that keeps
//   every digit (an integer when the time is a whole millisecond), so event
//   times come back exactly in every flavour.
//   Times in columns take the flavour's form above. What they keep:
//   adk-python-sqlite every bit; adk-python-database microseconds (sub-
//   microsecond digits of a session's times are rounded); adk-js a double of
//   milliseconds (whole milliseconds exactly, other times to within one unit
//   in the last place, ~0.24 us today). ADK-JS's DatabaseSessionService reads
//   that column into a JS Date and so serves session times cut to whole
//   milliseconds; the file keeps the exact value.
//   Every app and every (app, user) with a session gets a state row ({} when
//   agentstate holds no state for it: ADK-Python's append_event expects the
//   row). agentstate keeps no update time of app or user state: those rows'
//   update_time is the latest last_update_time of the scope's sessions (the
//   export's time when it has none), and an import does not read it.
//   Members only agentstate writes (actions.state_remove, unknown members of
//   agentstate clients) are written as they are: ADK-JS passes them through,
//   ADK-Python's Event model refuses members it does not know.
//   ADK serves a session's events in timestamp order; agentstate keeps append
//   order. They agree unless a client appended a timestamp earlier than the
//   session's last one.
//
// Threads: none; everything runs on the caller's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agentstate/error.hpp"
#include "agentstate/json.hpp"
#include "store/kv.hpp"

namespace agentstate::tools::adk {

enum class flavor { python_database, python_sqlite, js };

/// "adk-python-database", "adk-python-sqlite", "adk-js".
const char* flavor_name(flavor f) noexcept;
/// The flavour named `name` (as flavor_name spells it); nullopt otherwise.
std::optional<flavor> parse_flavor(std::string_view name) noexcept;

/// A row (or, for state, one key of a row) that agentstate cannot take:
/// beyond its limits, or unreadable. `where` names it (table columns).
struct skipped_row {
  std::string table;
  json where;
  std::string reason;
};

struct read_stats {
  std::uint64_t sessions = 0; ///< session records produced
  std::uint64_t events = 0; ///< event records produced
  std::uint64_t user_states = 0; ///< user_states rows taken
  std::uint64_t user_state_keys = 0; ///< their keys produced
  std::uint64_t app_states = 0;
  std::uint64_t app_state_keys = 0;
  std::uint64_t temp_keys_dropped = 0;
  std::vector<skipped_row> skipped; ///< in file order
};

/// An ADK SQLite file opened read-only, its flavour detected. One read
/// transaction spans the object's life, so every pass over it sees the same
/// snapshot (a writer is held off, or works on beside it in WAL mode).
/// Not thread-safe.
class source {
public:
  /// Opens and classifies `path`. Errors: not_found (no such file),
  /// invalid_argument (not SQLite, not ADK, ADK's v0 schema, an unknown
  /// schema_version: the message says which and what to do), io_error.
  static result<std::unique_ptr<source>> open(const std::string& path);
  virtual ~source() = default;

  virtual flavor kind() const noexcept = 0;
  /// adk_internal_metadata's schema_version ("" for adk-python-sqlite).
  virtual const std::string& schema_version() const noexcept = 0;

  /// One pass over the file: `next` yields the exchange records (header
  /// first; one JSON object per call, no newline) and records what it
  /// cannot take in `stats.skipped`. Rows beyond agentstate's limits are
  /// never yielded. Two passes over one source yield the same records and
  /// the same skipped rows. Errors: io_error / internal (SQLite failed).
  class pass {
  public:
    virtual ~pass() = default;
    /// Sets `line` to the next record and returns true; false at the end.
    virtual result<bool> next(std::string& line) = 0;
  };
  /// REQUIRES: no other pass of this source is in use.
  virtual std::unique_ptr<pass> start(read_stats& stats) = 0;
};

struct write_stats {
  std::uint64_t sessions = 0, events = 0, user_states = 0, app_states = 0;
};

/// Writes the snapshot `txn` into a new SQLite file `path` (which must not
/// exist) in flavour `f`. The file appears whole or not at all: rows go to
/// a temporary file beside it, which is synced and renamed at the end.
/// `progress(records)` is called now and then. Errors: already_exists,
/// io_error (SQLite or the file system), internal (the store does not
/// decode: run verify).
result<write_stats> write_file(store::kv_read& txn, const std::string& path, flavor f,
                               const std::function<void(std::uint64_t)>& progress = {});

/// What `import --from-adk-sqlite` and `export --to-adk-sqlite` were given
/// (parsed by tools/store_tools.cpp).
struct import_args {
  std::string file; ///< the SQLite file
  std::string dir; ///< the store
  bool skip_oversized = false;
};
struct export_args {
  std::string file; ///< the SQLite file to create
  std::string dir; ///< the store
  std::string flavor; ///< --adk-flavor; empty: adk-js
};

/// The commands. Exit codes as commands.hpp; each prints one JSON summary
/// on stdout.
int run_import(const import_args& a);
int run_export(const export_args& a);

/// The prose of the two in --help (what is read and written, the mapping).
extern const char* const import_help;
extern const char* const export_help;

} // namespace agentstate::tools::adk
