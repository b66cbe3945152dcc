// SPDX-License-Identifier: Apache-2.0
#include "store/change_feed.hpp"

#include <utility>

#include "model/event_text.hpp"
#include "store/errors.hpp"
#include "store/records.hpp"

namespace agentstate::store {

namespace {

bool has_prefix_of(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

// The scope prefix a feed without sessions keeps ("" = every key).
std::string_view scope_prefix(const watch_request& req) {
  if (req.include_sessions)
    return {};
  switch (req.scope) {
    case watch_scope::user: return "user:";
    case watch_scope::app: return "app:";
    default: return {};
  }
}

} // namespace

bool names_row(const watch_request& req, const change_row& row) {
  // A deleted app or user contains every scope inside it.
  const bool whole_app = row.kind == change_kind::remove_app;
  const bool whole_user = row.kind == change_kind::remove_user;
  switch (req.scope) {
    case watch_scope::all: return true;
    case watch_scope::app: return row.app == req.app_name;
    case watch_scope::user:
      return row.app == req.app_name && (whole_app || row.user == req.user_id);
    case watch_scope::session:
      return row.app == req.app_name
        && (whole_app || (row.user == req.user_id && (whole_user || row.id == req.session_id)));
  }
  return false;
}

namespace {

result<event> decode_change_event(std::string_view text) {
  event ev;
  if (model::decode_event_text(text, ev))
    return ev;
  auto j = parse_stored(text);
  if (!j)
    return std::move(j).err();
  auto e = event_from_json(std::move(*j));
  if (!e)
    return error{errc::data_corrupt, "change log event: " + e.err().message};
  return e;
}

} // namespace

result<void> check_watch_request(const watch_request& req) {
  auto need = [](const std::string& v, const char* what) -> result<void> {
    if (v.empty())
      return error{errc::invalid_argument, std::string("a watch of this scope needs ") + what};
    return {};
  };
  if (req.scope != watch_scope::all)
    if (auto r = need(req.app_name, "app_name"); !r)
      return r;
  if (req.scope == watch_scope::user || req.scope == watch_scope::session)
    if (auto r = need(req.user_id, "user_id"); !r)
      return r;
  if (req.scope == watch_scope::session)
    if (auto r = need(req.session_id, "session_id"); !r)
      return r;
  return {};
}

result<std::optional<change>> change_for(const watch_request& req, const change_row& row,
                                         std::string_view epoch) {
  if (!names_row(req, row))
    return std::optional<change>{};
  const auto scope_keys = scope_prefix(req);
  const bool filtered = !scope_keys.empty() || !req.key_prefix.empty();
  auto keep = [&](std::string_view key) {
    return has_prefix_of(key, scope_keys) && has_prefix_of(key, req.key_prefix);
  };
  change c;
  auto delta = parse_stored(row.delta);
  auto removed = parse_stored(row.removed);
  if (!delta || !removed || !delta->is_object() || !removed->is_array())
    return damaged(table::changes, change_key(row.seq));
  if (filtered) {
    for (auto it = delta->begin(); it != delta->end(); ++it)
      if (keep(it.key()))
        c.state_delta[it.key()] = std::move(it.value());
    for (auto& k : *removed)
      if (k.is_string() && keep(k.get_ref<const std::string&>()))
        c.state_remove.push_back(k.get<std::string>());
    const bool whole_scope =
      row.kind == change_kind::remove_user || row.kind == change_kind::remove_app;
    if (c.state_delta.empty() && c.state_remove.empty() && !whole_scope)
      return std::optional<change>{};
  } else {
    c.state_delta = std::move(*delta);
    for (auto& k : *removed)
      if (k.is_string())
        c.state_remove.push_back(k.get<std::string>());
  }
  if (scope_keys.empty() && row.kind == change_kind::append && !row.event.empty()) {
    auto ev = decode_change_event(row.event);
    if (!ev)
      return std::move(ev).err();
    c.ev = std::move(*ev);
  }
  c.cursor = format_cursor(epoch, row.seq);
  c.kind = row.kind;
  c.app_name = std::string(row.app);
  c.user_id = std::string(row.user);
  c.session_id = std::string(row.id);
  c.version = row.version;
  return std::optional<change>{std::move(c)};
}

result<void> check_cursor(const log_bounds& b, std::uint64_t after, std::string_view epoch) {
  if (after > b.last)
    return error{errc::invalid_argument,
                 "cursor " + format_cursor(epoch, after)
                   + " is ahead of this store's changes (the newest is "
                   + format_cursor(epoch, b.last) + ")"};
  if (b.first != 0 && after + 1 < b.first) {
    error e{errc::cursor_expired,
            "cursor " + format_cursor(epoch, after)
              + " is older than the change log keeps; the oldest cursor "
                "it serves is "
              + format_cursor(epoch, b.first - 1)};
    e.oldest_cursor = format_cursor(epoch, b.first - 1);
    return e;
  }
  return {};
}

result<change_page> read_change_page(kv_store& kv, const watch_request& req,
                                     std::optional<std::uint64_t> after, const page_bounds& limits,
                                     std::string_view epoch, std::uint64_t* end_seq) {
  try {
    auto txn = kv.begin_read();
    auto bounds = read_log_bounds(*txn);
    if (!bounds)
      return std::move(bounds).err();
    std::uint64_t from = after ? *after : (bounds->first ? bounds->first - 1 : 0);
    if (auto ok = check_cursor(*bounds, from, epoch); !ok)
      return std::move(ok).err();
    change_page page;
    std::uint64_t at = from;
    std::size_t examined = 0, bytes = 0;
    std::optional<error> err;
    auto r = scan_changes(*txn, from, [&](const change_row& row) {
      if (examined >= limits.rows || page.changes.size() >= limits.changes)
        return false;
      auto c = change_for(req, row, epoch);
      if (!c) {
        err = std::move(c).err();
        return false;
      }
      if (*c) {
        const auto size = row.delta.size() + row.removed.size() + row.event.size();
        if (!page.changes.empty() && bytes + size > limits.bytes)
          return false; // the next page starts with it
        bytes += size;
        page.changes.push_back(std::move(**c));
      }
      ++examined;
      at = row.seq;
      return true;
    });
    if (!r)
      return std::move(r).err();
    if (err)
      return std::move(*err);
    page.cursor = format_cursor(epoch, std::max(at, from));
    page.at_head = std::max(at, from) >= bounds->last;
    if (end_seq)
      *end_seq = std::max(at, from);
    return page;
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

} // namespace agentstate::store
