// SPDX-License-Identifier: Apache-2.0
#include "store/keys.hpp"

#include "model/shard.hpp"

namespace agentstate::store {

std::string session_key(std::string_view app, std::string_view user, std::string_view id) {
  std::string k;
  k.reserve(app.size() + user.size() + id.size() + 2);
  k.append(app);
  k.push_back('\0');
  k.append(user);
  k.push_back('\0');
  k.append(id);
  return k;
}

std::string user_scope_key(std::string_view app, std::string_view user) {
  return sub_key(app, user);
}

void append_be64(std::string& out, std::uint64_t x) {
  char b[8];
  for (int i = 0; i < 8; ++i)
    b[i] = static_cast<char>((x >> (8 * (7 - i))) & 0xff);
  out.append(b, 8); // one append: one capacity check, not eight
}

std::uint64_t read_be64(std::string_view x) {
  std::uint64_t u = 0;
  for (std::size_t i = 0; i < 8 && i < x.size(); ++i)
    u = (u << 8) | static_cast<unsigned char>(x[i]);
  return u;
}

void append_ordered_double(std::string& out, double x) {
  std::uint64_t u = bits_of(x);
  u = (u & (std::uint64_t{1} << 63)) ? ~u : (u | (std::uint64_t{1} << 63));
  append_be64(out, u);
}

double read_ordered_double(std::string_view x) {
  std::uint64_t u = read_be64(x);
  u = (u & (std::uint64_t{1} << 63)) ? (u & ~(std::uint64_t{1} << 63)) : ~u;
  return double_of(u);
}

void set_sub_key(std::string& k, std::string_view parent, std::string_view child) {
  k.assign(parent);
  k.push_back('\0');
  k.append(child);
}

std::string sub_key(std::string_view parent, std::string_view child) {
  std::string k;
  k.reserve(parent.size() + 1 + child.size());
  set_sub_key(k, parent, child);
  return k;
}

void set_shard_index_key(std::string& k, std::uint64_t h, std::string_view skey) {
  k.clear();
  append_be64(k, h);
  k.append(skey);
}

std::string shard_index_key(std::string_view app, std::string_view user, std::string_view skey) {
  std::string k;
  k.reserve(8 + skey.size());
  set_shard_index_key(k, model::user_hash(app, user), skey);
  return k;
}

void set_event_key(std::string& k, std::string_view skey, std::uint64_t version) {
  k.assign(skey);
  k.push_back('\0');
  append_be64(k, version);
}

std::string event_key(std::string_view skey, std::uint64_t version) {
  std::string k;
  k.reserve(skey.size() + 9);
  set_event_key(k, skey, version);
  return k;
}

void set_by_update_key(std::string& k, std::string_view app, std::string_view user,
                       std::string_view id, double t) {
  k.assign(app);
  k.push_back('\0');
  append_ordered_double(k, t);
  k.append(id);
  k.push_back('\0');
  k.append(user);
}

void set_by_user_key(std::string& k, std::string_view app, std::string_view user,
                     std::string_view id, double t) {
  k.assign(app);
  k.push_back('\0');
  k.append(user);
  k.push_back('\0');
  append_ordered_double(k, t);
  k.append(id);
}

void set_expiry_key(std::string& k, double expires, std::string_view skey) {
  k.clear();
  append_ordered_double(k, expires);
  k.append(skey);
}

std::vector<std::string_view> split_key(std::string_view k, std::size_t max_parts) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    auto nul = k.find('\0');
    if (nul == std::string_view::npos)
      break;
    parts.push_back(k.substr(0, nul));
    k.remove_prefix(nul + 1);
  }
  parts.push_back(k);
  return parts;
}

} // namespace agentstate::store
