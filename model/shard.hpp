// SPDX-License-Identifier: Apache-2.0
// model/shard.hpp: which shard of a cluster holds a session, a user scope and
// an app scope. The function is part of the protocol (docs/cluster.md gives it
// so that a client in any language can compute it) and never changes for a
// cluster: its shard count is fixed when the cluster is created.
//
//   h(bytes) = FNV-1a 64-bit: h = 14695981039346656037; for each byte b:
//              h = (h XOR b) * 1099511628211 mod 2^64
//   shard_of(app, user, S) = h(app ‖ 0x00 ‖ user) mod S
//   home_shard(app, S)     = h(app) mod S
//
// over the names' UTF-8 bytes (names never hold a NUL byte: the checks refuse
// one). A session, its events and its user's `user:` scope share
// shard_of(app, user); the `app:` scope lives on home_shard(app).
#pragma once

#include <cstdint>
#include <string_view>

namespace agentstate::model {

/// FNV-1a 64-bit of `bytes`, continuing from `h`.
constexpr std::uint64_t fnv1a64(std::string_view bytes,
                                std::uint64_t h = 14695981039346656037ull) noexcept {
  for (unsigned char b : bytes) {
    h ^= b;
    h *= 1099511628211ull;
  }
  return h;
}

/// The shard of (app, user) among `shards` (REQUIRES: shards > 0).
constexpr std::uint32_t shard_of(std::string_view app, std::string_view user,
                                 std::uint32_t shards) noexcept {
  std::uint64_t h = fnv1a64(app);
  h = fnv1a64(std::string_view("\0", 1), h);
  h = fnv1a64(user, h);
  return static_cast<std::uint32_t>(h % shards);
}

/// The home shard of app's `app:` scope among `shards` (REQUIRES: shards > 0).
constexpr std::uint32_t home_shard(std::string_view app, std::uint32_t shards) noexcept {
  return static_cast<std::uint32_t>(fnv1a64(app) % shards);
}

} // namespace agentstate::model
