// SPDX-License-Identifier: Apache-2.0
// store/change_feed.hpp: the change log read as a feed: a watch_request's
// filter applied to log rows, and pages of changes for read_changes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "agentstate/error.hpp"
#include "agentstate/watch.hpp"
#include "store/change_log.hpp"
#include "store/kv.hpp"

namespace agentstate::store {

/// invalid_argument when `req` lacks a name its scope needs (app_name for
/// user, app and session; user_id for user and session; session_id for
/// session).
result<void> check_watch_request(const watch_request& req);

/// Whether `row`'s session is in `req`'s scope (its keys not looked at).
bool names_row(const watch_request& req, const change_row& row);

/// The change `row` is for `req`, filtered (user:/app: keys alone for a
/// scope without its sessions, then key_prefix), or nullopt when `req`
/// does not take it. Errors: data_corrupt (a row whose JSON does not
/// decode).
result<std::optional<change>> change_for(const watch_request& req, const change_row& row,
                                         std::string_view epoch);

/// What one page may hold: `changes` changes, from at most `rows` rows
/// examined, of at most `bytes` of stored text (the keys set and removed and
/// the event of each change taken; the first change is taken whatever its
/// size), so a page's memory is bounded whatever the events hold.
struct page_bounds {
  std::size_t changes = 256;
  std::size_t rows = 65536;
  std::size_t bytes = std::size_t{4} << 20;
};

/// A page of changes after sequence `after` (nullopt: from the oldest the
/// log keeps) within `bounds`, from one snapshot of `kv`; its cursor is past
/// the last row examined. Errors: cursor_expired (with oldest_cursor),
/// data_corrupt, storage errors.
/// `end_seq`, when given, receives the sequence the page's cursor names.
result<change_page> read_change_page(kv_store& kv, const watch_request& req,
                                     std::optional<std::uint64_t> after, const page_bounds& bounds,
                                     std::string_view epoch, std::uint64_t* end_seq = nullptr);

/// Whether the log bounded by `b` serves changes after `after`: ok, or
/// cursor_expired (with oldest_cursor), or invalid_argument (ahead of it).
result<void> check_cursor(const log_bounds& b, std::uint64_t after, std::string_view epoch);

} // namespace agentstate::store
