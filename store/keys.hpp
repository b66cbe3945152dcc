// SPDX-License-Identifier: Apache-2.0
// store/keys.hpp: the key of every row (docs/storage.md). Names
// never contain NUL (checked before anything is stored), so NUL separates a
// key's components, and a session's rows in every table share the prefix
// session_key + '\0'. Pure functions.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace agentstate::store {

/// app ‖ 0 ‖ user ‖ 0 ‖ id: a session's record key and its rows' prefix.
std::string session_key(std::string_view app, std::string_view user, std::string_view id);
/// app ‖ 0 ‖ user: the prefix of one user's state rows and list index.
std::string user_scope_key(std::string_view app, std::string_view user);

/// Big-endian u64, so keys sort by number.
void append_be64(std::string& out, std::uint64_t x);
/// The u64 of append_be64; reads at most 8 bytes of `x`.
std::uint64_t read_be64(std::string_view x);
/// 8 bytes whose byte order is the numeric order of `x` (negatives included).
void append_ordered_double(std::string& out, double x);
double read_ordered_double(std::string_view x);

/// A double's bit pattern, and back (equal bits, not equal values: 0.0 and
/// -0.0 differ, as their ordered keys do).
inline std::uint64_t bits_of(double x) {
  std::uint64_t u;
  std::memcpy(&u, &x, 8);
  return u;
}
inline double double_of(std::uint64_t u) {
  double x;
  std::memcpy(&x, &u, 8);
  return x;
}

// Row keys. Each set_* form replaces `k`'s contents, so one buffer serves
// every key a write set touches (an append builds ~10); the returning forms
// are for one-off keys.

/// parent ‖ 0 ‖ child: a state row (session, user or app scope).
void set_sub_key(std::string& k, std::string_view parent, std::string_view child);
std::string sub_key(std::string_view parent, std::string_view child);
/// skey ‖ 0 ‖ be64(version): an event row.
void set_event_key(std::string& k, std::string_view skey, std::uint64_t version);
std::string event_key(std::string_view skey, std::uint64_t version);
/// app ‖ 0 ‖ ord64(t) ‖ id ‖ 0 ‖ user: a session in its app's list order
/// (by_update at its last update time, by_created at its creation time).
void set_by_update_key(std::string& k, std::string_view app, std::string_view user,
                       std::string_view id, double t);
/// app ‖ 0 ‖ user ‖ 0 ‖ ord64(t) ‖ id: a session in its user's list order
/// (by_user at its last update time, by_user_created at its creation time).
void set_by_user_key(std::string& k, std::string_view app, std::string_view user,
                     std::string_view id, double t);

/// ord64(expires) ‖ skey: a session that expires, in expiry order.
void set_expiry_key(std::string& k, double expires, std::string_view skey);

/// be64(h) ‖ skey, where h = model::user_hash(app, user) of the session's app
/// and user: a session in the shard index, in the order of the hash that
/// places it in a cluster (model/shard.hpp).
void set_shard_index_key(std::string& k, std::uint64_t h, std::string_view skey);
/// The index key of session (app, user, id) whose key is `skey`.
std::string shard_index_key(std::string_view app, std::string_view user, std::string_view skey);

/// Splits a key at its NULs into at most `max_parts` parts (the last keeps
/// the rest, NULs included). The views point into `k`.
std::vector<std::string_view> split_key(std::string_view k, std::size_t max_parts);

} // namespace agentstate::store
