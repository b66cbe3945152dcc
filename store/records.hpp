// SPDX-License-Identifier: Apache-2.0
// store/records.hpp: the values of every table but `meta` (docs/storage.md),
// and stored JSON. Pure encoders and decoders.
//
// Store format 4 seals every value: tag 4 ‖ crc32c(key ‖ body) (LE32) ‖
// body, where key is the row's key in its table (without the shared
// database's table byte). The checksum covers the key, so a damaged key is
// caught as surely as a damaged value. Formats 1-3 stored the bodies bare
// (records and event rows under tag 1, state rows as JSON text, index rows
// empty); a store of those formats is read through the same decoders with
// `legacy` true (kv_read::legacy_values) and gets sealed values when it is
// opened for writing (init_meta).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "agentstate/error.hpp"
#include "agentstate/json.hpp"
#include "agentstate/types.hpp"
#include "store/kv.hpp"

namespace agentstate::store {

/// The first byte of every sealed value, and the bytes before its body.
inline constexpr char sealed_tag = 4;
inline constexpr std::size_t seal_bytes = 5;

/// Replaces `out`'s contents with the sealed value of `body` under `key`.
/// Cost: one copy of `body` and a CRC over key and body.
void seal_into(std::string& out, std::string_view key, std::string_view body);
std::string seal(std::string_view key, std::string_view body);
/// Seals `row` where it lies: its first seal_bytes bytes are room for the
/// header and the rest is the body. Cost: a CRC over key and body, no copy.
/// REQUIRES: row.size() >= seal_bytes.
void seal_in_place(std::string& row, std::string_view key);
/// The body of `value`, the value of row `key` of table `t` (not meta), or
/// nullopt when the row is damaged: for a sealed value (legacy false) a
/// wrong tag or checksum; for a legacy one (store formats 1-3) a wrong tag
/// or size. No copy: the view points into `value`.
std::optional<std::string_view> open_row(table t, std::string_view key, std::string_view value,
                                         bool legacy) noexcept;

/// open_row over n rows of table `t` (keys[i], values[i]), checking three
/// checksums at a time (crc32c_extend3: ~1.5x faster for event rows than
/// one by one). Sets bodies[i] for every row and returns n, or returns the
/// index of the first damaged row (bodies then partly set). `bodies` may
/// be `values` (each body replaces its row). With `checksums` false
/// (kv_read::checksums_needed) sealed values are checked for tag and size
/// only.
std::size_t open_rows(table t, std::size_t n, const std::string_view* keys,
                      const std::string_view* values, bool legacy, std::string_view* bodies,
                      bool checksums = true) noexcept;

/// The row `key` of table `t` as a reader names it in errors: "session
/// 'app/user/id' event v3", "user 'app/user' state row 'k'", ... Bytes that
/// are not printable ASCII or part of valid UTF-8 show as \xNN, so a damaged
/// key still gives valid UTF-8.
std::string row_name(table t, std::string_view key);
/// `x` as row_name shows names: valid UTF-8 whatever the bytes.
std::string printable(std::string_view x);
/// data_corrupt: "<row_name> is damaged (...)".
error damaged(table t, std::string_view key);
/// data_corrupt for session `skey` whose rows disagree with its record (a
/// row lost from the store's pages): "session 'app/user/id' is missing
/// rows: <what> (...)".
error missing_rows(std::string_view skey, const std::string& what);

/// A scope's state tally (store format 8): how many state rows the scope
/// (a session's own state, a user's, an app's) holds, and the sum, modulo
/// 2^64, of the checksums their seals carry. It is stored as a row of the
/// scope's state table whose key is the scope's prefix without its trailing
/// NUL (`skey`, `app ‖ 0 ‖ user`, `app`): it sorts just before the scope's
/// rows, usually on their leaf page, and is absent while the scope has no
/// rows. Every write of a state row keeps it (store/apply.hpp,
/// put_state_row); every read that gathers a scope's rows compares them
/// with it, so a row lost from the store's pages, or one replaced by
/// another sealed row, is data_corrupt instead of state without the key.
struct state_tally {
  std::uint64_t rows = 0;
  std::uint64_t sum = 0;
  bool operator==(const state_tally& o) const { return rows == o.rows && sum == o.sum; }
  bool operator!=(const state_tally& o) const { return !(*this == o); }
};

/// The checksum a sealed value carries (its bytes 1-4), 0 for a value
/// shorter than a seal.
std::uint32_t sealed_crc(std::string_view value) noexcept;
/// `t` with the row whose stored value is `value` counted in, or out.
inline void tally_in(state_tally& t, std::string_view value) noexcept {
  ++t.rows;
  t.sum += sealed_crc(value);
}
inline void tally_out(state_tally& t, std::string_view value) noexcept {
  --t.rows;
  t.sum -= sealed_crc(value);
}
/// Whether `key` of state table `t` (session_state, user_state, app_state)
/// is a scope's tally row rather than a state row (two, one, no NULs).
bool is_tally_key(table t, std::string_view key) noexcept;
/// The scope (tally key) of a state row `key` of table `t`: the key up to
/// its third (session_state), second (user_state) or first (app_state) NUL;
/// the whole key when it has fewer.
std::string_view scope_of_row(table t, std::string_view key) noexcept;
/// The sealed tally row of scope `key`.
std::string encode_tally(std::string_view key, const state_tally& x);
/// nullopt when `value` is not an intact tally row of scope `key`.
std::optional<state_tally> decode_tally(std::string_view key, std::string_view value) noexcept;
/// The scope `key` of state table `t` as errors name it: "session
/// 'app/user/id' state", "user 'app/user' state", "app 'app' state".
std::string scope_name(table t, std::string_view key);
/// data_corrupt for the scope `key` of state table `t` whose rows (`found`)
/// disagree with its tally (`stored`).
error tally_mismatch(table t, std::string_view key, const state_tally& stored,
                     const state_tally& found);

/// An app's or a user's session count (store format 9): a row of table
/// session_counts under `app` or `app ‖ 0 ‖ user`, body u64 the number of
/// sessions the scope holds (the sessions whose records and list entries
/// exist; sessions under a delete fence count until their purge removes
/// them), little-endian, sealed; absent while the scope has none. Every
/// write that creates or removes a session keeps both (store/apply.hpp,
/// count_sessions); a listing that walks a scope's whole range compares
/// what it walked with it (store/listing.hpp), so an entry whose key was
/// damaged out of the range is data_corrupt instead of a shorter listing.
///
/// The sealed count row of scope `key`.
std::string encode_session_count(std::string_view key, std::uint64_t n);
/// nullopt when `value` is not an intact count row of scope `key`.
std::optional<std::uint64_t> decode_session_count(std::string_view key,
                                                  std::string_view value) noexcept;
/// The scope a count row `key` names: "app 'app'" (no NUL), "user
/// 'app/user'".
std::string count_scope_name(std::string_view key);
/// data_corrupt for the scope `key` whose walked sessions (`found`) disagree
/// with its count (`stored`).
error count_mismatch(std::string_view key, std::uint64_t stored, std::uint64_t found);

/// A session's record: u64 version, f64 last_update_time, f64 created
/// (little-endian, 24 bytes of body), and for a session that expires f64
/// expires, f64 refresh (40 bytes).
struct session_record {
  std::uint64_t version = 0;
  double last_update_time = 0;
  double created = 0;
  /// Epoch seconds at which the session expires (T1); 0: never.
  double expires = 0;
  /// Seconds each append moves `expires` to past the append's acceptance
  /// (T2); 0: appends leave it.
  double refresh = 0;
};

/// Whether `r` has expired at `now` (epoch seconds): readers then see no
/// session (T1) although its rows are still stored.
inline bool expired(const session_record& r, double now) {
  return r.expires != 0 && r.expires <= now;
}

/// The sealed record of session `skey`.
std::string encode_record(std::string_view skey, const session_record& x);
/// nullopt when `value` is not an intact record of session `skey`.
std::optional<session_record> decode_record(std::string_view skey, std::string_view value,
                                            bool legacy = false);

/// An event row's body: the timestamp (8 bytes, so filters skip rows without
/// parsing them), then the event as JSON text. The row is the sealed body
/// under its key (event_key).
std::string encode_event_row(std::string_view key, double timestamp, std::string_view json_text);
/// An event body's JSON text (no copy). REQUIRES: body.size() >= 8 (what
/// open_row guarantees for an event row).
inline std::string_view event_body_text(std::string_view body) {
  return body.substr(8);
}
double event_body_timestamp(std::string_view body);
/// Decodes an event body (open_row's answer). Errors: internal (the body
/// passed its checksum but does not decode: a bug of the writer).
result<event> decode_event_body(std::string_view body);
/// As above, into `out`, which must be default-constructed (what a vector's
/// emplace_back gives): no move of the decoded event. On an error `out` is
/// unspecified.
result<void> decode_event_body(std::string_view body, event& out);

/// Parses JSON the store wrote (no depth check: it was checked on write).
/// Errors: internal (not JSON).
result<json> parse_stored(std::string_view text);

} // namespace agentstate::store
