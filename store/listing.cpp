// SPDX-License-Identifier: Apache-2.0
#include "store/listing.hpp"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agentstate/scope.hpp"
#include "model/shard.hpp"
#include "store/apply.hpp"
#include "store/crc32c.hpp"
#include "store/errors.hpp"
#include "store/expiry.hpp"
#include "store/keys.hpp"
#include "store/scope_delete.hpp"
#include "store/reads.hpp"

namespace agentstate::store {

namespace {

std::string to_hex(std::string_view x) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(x.size() * 2);
  for (unsigned char c : x) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

std::optional<std::string> from_hex(std::string_view x) {
  if (x.size() % 2 != 0)
    return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9')
      return c - '0';
    if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
    return -1;
  };
  std::string out;
  out.reserve(x.size() / 2);
  for (std::size_t i = 0; i < x.size(); i += 2) {
    int hi = nibble(x[i]), lo = nibble(x[i + 1]);
    if (hi < 0 || lo < 0)
      return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

constexpr char token_format = 1;

// The listing a token is for: order_by (0 update time, 1 created, 2 id),
// then the direction and whether it lists one user.
char listing_shape(const list_request& req) {
  int order = req.order_by == list_order::created ? 1 : req.order_by == list_order::id ? 2 : 0;
  return static_cast<char>(order | (req.descending ? 4 : 0) | (req.user_id ? 8 : 0));
}

// The checksum of a token: over its format and shape bytes, the listing's
// key prefix (its app, and its user when it lists one) and the position.
std::uint32_t token_check(std::string_view head, std::string_view prefix,
                          std::string_view position) {
  auto crc = crc32c_extend(0, head);
  crc = crc32c_extend(crc, prefix);
  return crc32c_extend(crc, position);
}

// hex(format ‖ shape ‖ position ‖ CRC-32C, big-endian), where position is
// the last listed index key without the listing's prefix.
std::string make_token(const list_request& req, std::string_view prefix, std::string_view key) {
  std::string raw{token_format, listing_shape(req)};
  auto position = key.substr(prefix.size());
  auto crc = token_check(raw, prefix, position);
  raw.append(position);
  for (int shift = 24; shift >= 0; shift -= 8)
    raw.push_back(static_cast<char>((crc >> shift) & 0xff));
  return to_hex(raw);
}

// The index key a token of this listing continues after; `min_position`:
// the fewest bytes a position of this index holds.
result<std::string> read_token(const list_request& req, const std::string& prefix,
                               std::size_t min_position) {
  const auto& text = req.page_token;
  if (text.size() > max_page_token_bytes)
    return error{errc::invalid_argument,
                 "'page_token' is " + std::to_string(text.size()) + " bytes; the limit is "
                   + std::to_string(max_page_token_bytes)};
  auto raw = from_hex(text);
  if (!raw || raw->size() < 2 + min_position + 4 || (*raw)[0] != token_format)
    return error{errc::invalid_argument, "'page_token' is not a page token list_sessions issued"};
  std::string_view body(*raw);
  auto position = body.substr(2, body.size() - 6);
  std::uint32_t crc = 0;
  for (std::size_t i = body.size() - 4; i < body.size(); ++i)
    crc = (crc << 8) | static_cast<unsigned char>(body[i]);
  if (crc != token_check(body.substr(0, 2), prefix, position))
    return error{errc::invalid_argument,
                 "'page_token' is not a token of this listing (another app or user, or damaged)"};
  if (body[1] != listing_shape(req))
    return error{errc::invalid_argument,
                 "'page_token' was issued for another order_by or order of this listing"};
  return prefix + std::string(position);
}

} // namespace

result<session_page> list_sessions(kv_read& txn, const list_request& req, std::size_t page_size,
                                   std::size_t max_bytes, double now) {
  try {
    const bool by_user = req.user_id.has_value();
    const bool by_id = req.order_by == list_order::id;
    const bool by_created = req.order_by == list_order::created;
    // By id the scan walks the session records themselves (key app, user,
    // id); by update or creation time one of the list indexes (8 bytes of
    // time after the prefix).
    table index = by_id ? table::sessions
      : by_created      ? (by_user ? table::by_user_created : table::by_created)
                        : (by_user ? table::by_user : table::by_update);
    const std::size_t time_bytes = by_id ? 0 : 8;
    std::string prefix =
      by_user ? user_scope_key(req.app_name, *req.user_id) + '\0' : req.app_name + '\0';
    std::string from;
    if (!req.page_token.empty()) {
      auto tok = read_token(req, prefix, time_bytes + 1);
      if (!tok)
        return std::move(tok).err();
      from = std::move(*tok);
    }
    struct hit {
      std::string key, user, id;
    };
    std::vector<hit> hits;
    bool more = false;
    std::uint64_t skip = req.offset;
    std::optional<error> err;
    const bool legacy = txn.legacy_values();
    // T1: expired sessions not yet reaped are left out (their records are
    // read only when some session under the prefix has expired).
    const std::uint64_t expired_here = count_expired(txn, now, prefix);
    // X2/X3: nothing under a deleted app or user is listed; in an app's
    // listing, sessions of deleted users are skipped one by one.
    if (by_user ? fenced(txn, req.app_name, *req.user_id) : app_fenced(txn, req.app_name)) {
      session_page empty;
      if (req.include_total)
        empty.total = 0;
      return empty;
    }
    const bool user_fences = !by_user && any_user_fenced(txn, req.app_name);
    // The user and id an index entry names (REQUIRES: an intact entry).
    auto parse = [&](std::string_view k, hit& h) {
      auto rest = k.substr(prefix.size() + time_bytes);
      if (by_user) {
        h.user = *req.user_id;
        h.id = std::string(rest);
      } else if (by_id) { // user ‖ 0 ‖ id
        auto nul = rest.find('\0');
        h.user = std::string(rest.substr(0, nul));
        h.id = nul == std::string_view::npos ? "" : std::string(rest.substr(nul + 1));
      } else {
        auto nul = rest.find('\0');
        h.id = std::string(rest.substr(0, nul));
        h.user = nul == std::string_view::npos ? "" : std::string(rest.substr(nul + 1));
      }
    };
    // list_request::shards: whether a user's sessions are of a listed shard
    // (the last user's answer kept: an index groups many entries by user).
    const bool by_shard = req.shard_count > 0;
    std::vector<bool> listed_shards;
    if (by_shard) {
      listed_shards.assign(req.shard_count, false);
      for (auto s : req.shards)
        if (s < req.shard_count)
          listed_shards[s] = true;
    }
    std::optional<std::string> shard_user;
    bool shard_user_listed = false;
    auto outside = [&](const std::string& user) {
      if (!by_shard)
        return false;
      if (!shard_user || user != *shard_user) {
        shard_user = user;
        shard_user_listed = listed_shards[model::shard_of(req.app_name, user, req.shard_count)];
      }
      return !shard_user_listed;
    };
    // Whether the session an entry names is gone for readers (T1, X2), or
    // outside the listed shards.
    auto gone = [&](const hit& h) {
      if (outside(h.user))
        return true;
      if (user_fences && fenced(txn, req.app_name, h.user))
        return true;
      if (expired_here == 0)
        return false;
      auto skey = session_key(req.app_name, h.user, h.id);
      auto raw = txn.get(table::sessions, skey);
      auto rec = raw ? decode_record(skey, *raw, legacy) : std::nullopt;
      return rec && expired(*rec, now);
    };
    // Every index entry the scan visits, listed or not (skipped by offset,
    // expired, under a user's fence), and whether it stopped before the end
    // of the range.
    std::uint64_t walked = 0;
    bool stopped = false;
    auto visit = [&](std::string_view k, std::string_view v) {
      if (!from.empty() && k == from)
        return true;
      ++walked;
      if (!open_row(index, k, v, legacy) || k.size() < prefix.size() + time_bytes + 1) {
        err = damaged(index, k);
        return false;
      }
      hit h;
      const bool check = user_fences || expired_here > 0 || by_shard;
      if (check) {
        parse(k, h);
        if (gone(h))
          return true;
      }
      if (skip > 0) {
        --skip;
        return true;
      }
      if (hits.size() == page_size) {
        more = true;
        stopped = true;
        return false;
      }
      if (!check)
        parse(k, h);
      h.key = std::string(k);
      hits.push_back(std::move(h));
      return true;
    };
    if (req.descending)
      txn.scan_back(index, prefix, from, visit);
    else
      txn.scan(index, prefix, from, visit);
    if (err)
      return std::move(*err);
    // Format 9: a walk of the whole range (a listing from its start that
    // reached its end, or include_total's count) must find as many sessions
    // as the app's or user's count holds; an entry whose key was damaged
    // out of the range (still in order, so the scan's order checks pass)
    // is missed by the walk, not by the count.
    const std::string count_key =
      by_user ? user_scope_key(req.app_name, *req.user_id) : req.app_name;
    auto check_count = [&](std::uint64_t found) -> std::optional<error> {
      if (!txn.session_counts())
        return std::nullopt;
      auto stored = read_session_count(txn, count_key);
      if (!stored)
        return std::move(stored).err();
      if (*stored != found)
        return count_mismatch(count_key, *stored, found);
      return std::nullopt;
    };
    const bool whole = from.empty() && !stopped;
    if (whole)
      if (auto e = check_count(walked))
        return std::move(*e);
    // A page that reaches an end of the range (the start: a first page
    // ascending, or any page descending that ran out; the end likewise)
    // checks the seal of the key just past that end. A key damaged out of
    // the range, still in order, is that key, and its seal covers the key
    // it was written under; an intact neighbour's seal holds. One search
    // per end reached, so every page stays O(page) and a listing paged to
    // its end has checked both ends.
    auto neighbour = [&](bool after) -> std::optional<error> {
      std::optional<error> bad;
      auto look = [&](std::string_view k, std::string_view v) {
        if (!open_row(index, k, v, legacy))
          bad =
            error{errc::data_corrupt,
                  count_scope_name(count_key) + " cannot be listed: " + damaged(index, k).message};
        return false;
      };
      std::string bound = prefix.substr(0, prefix.size() - 1);
      if (after) {
        bound.push_back('\x01');
        txn.scan(index, {}, bound, look);
      } else {
        txn.scan_back(index, {}, bound, look);
      }
      return bad;
    };
    const bool reached_start = req.descending ? !stopped : from.empty();
    const bool reached_end = req.descending ? from.empty() : !stopped;
    if (reached_start)
      if (auto e = neighbour(false))
        return std::move(*e);
    if (reached_end)
      if (auto e = neighbour(true))
        return std::move(*e);
    session_page page;
    if (req.include_total) {
      std::uint64_t n = 0, all = 0;
      const bool check = user_fences || expired_here > 0 || by_shard;
      txn.scan(index, prefix, {}, [&](std::string_view k, std::string_view) {
        hit h;
        if (check && k.size() >= prefix.size() + time_bytes + 1)
          parse(k, h);
        ++all;
        n += !check || !gone(h);
        return true;
      });
      if (!whole)
        if (auto e = check_count(all))
          return std::move(*e);
      page.total = n;
    }
    auto app_state = read_rows(txn, table::app_state, req.app_name + '\0');
    if (!app_state)
      return std::move(app_state).err();
    const bool once = req.shared_state == list_state::once;
    std::map<std::string, json> users;
    std::size_t bytes = 0;
    if (once) {
      page.app_state = merge_state(json::object(), json::object(), *app_state);
      bytes += page.app_state.dump().size() + 64;
    }
    for (std::size_t i = 0; i < hits.size(); ++i) {
      auto& h = hits[i];
      auto skey = session_key(req.app_name, h.user, h.id);
      auto rec = read_record(txn, skey);
      if (!rec)
        return std::move(rec).err();
      if (!*rec)
        return error{errc::data_corrupt,
                     row_name(table::sessions, skey)
                       + " is missing while the list index names it (the store is damaged; "
                         "`agentstate verify` lists every damaged row)"};
      auto own = read_rows(txn, table::session_state, skey + '\0');
      if (!own)
        return std::move(own).err();
      auto u = users.find(h.user);
      if (u == users.end()) {
        auto us = read_rows(txn, table::user_state, user_scope_key(req.app_name, h.user) + '\0');
        if (!us) {
          auto e = std::move(us).err();
          if (e.code == errc::data_corrupt)
            e.message = "session '" + printable(req.app_name) + "/" + printable(h.user) + "/"
              + printable(h.id) + "' cannot be listed: " + e.message;
          return e;
        }
        u = users.emplace(h.user, std::move(*us)).first;
      }
      session_meta m;
      m.app_name = req.app_name;
      m.user_id = h.user;
      m.id = h.id;
      m.state = once ? std::move(*own) : merge_state(*own, u->second, *app_state);
      m.last_update_time = (*rec)->last_update_time;
      m.version = (*rec)->version;
      if ((*rec)->expires != 0)
        m.expires_at = (*rec)->expires;
      // The session's JSON: its state, ids and the fixed members, and in
      // the once form its user's state the first time the user is listed.
      auto size = m.state.dump().size() + m.app_name.size() + m.user_id.size() + m.id.size() + 128;
      if (req.session_tokens)
        size += 2 * (h.key.size() - prefix.size() + 6) + 16; // its page_token member
      json user_state;
      if (once && page.user_states.count(h.user) == 0) {
        user_state = merge_state(json::object(), u->second, json::object());
        size += user_state.dump().size() + h.user.size() + 8;
      }
      if (bytes + size > max_bytes) {
        if (page.sessions.empty())
          return error{errc::too_large,
                       "session '" + h.id + "' alone is larger than the response limit ("
                         + std::to_string(max_bytes) + " bytes)"};
        more = true;
        hits.resize(i);
        break;
      }
      bytes += size;
      if (!user_state.is_null())
        page.user_states.emplace(h.user, std::move(user_state));
      page.sessions.push_back(std::move(m));
      if (req.session_tokens)
        page.session_tokens.push_back(make_token(req, prefix, h.key));
    }
    if (more && !hits.empty())
      page.next_page_token = make_token(req, prefix, hits.back().key);
    return page;
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

} // namespace agentstate::store
