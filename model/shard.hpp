// SPDX-License-Identifier: Apache-2.0
// model/shard.hpp: which shard of a cluster holds a session, a user scope and
// an app scope. The function is part of the protocol (docs/cluster.md gives it
// so that a client in any language can compute it) and never changes for a
// cluster: its shard count is fixed when the cluster is created.
//
//   f(bytes) = FNV-1a 64-bit: f = 14695981039346656037; for each byte b:
//              f = (f XOR b) * 1099511628211
//   m(x)     = x ^= x >> 33; x *= 0xff51afd7ed558ccd; x ^= x >> 33;
//              x *= 0xc4ceb9fe1a85ec53; x ^= x >> 33
//   h(bytes) = m(f(bytes))
//   shard_of(app, user, S) = ((h(app ‖ 0x00 ‖ user) >> 32) * S) >> 32
//   home_shard(app, S)     = ((h(app) >> 32) * S) >> 32
//
// in 64-bit unsigned arithmetic (mod 2^64), over the names' UTF-8 bytes (names
// never hold a NUL byte: the checks refuse one), with S <= 65536. m (the
// 64-bit finalizer of MurmurHash3) is there because a shard is a range of h's
// top bits, and FNV-1a's top bits barely depend on a name's last bytes: without
// it, users "u0" to "u63" fall in 2 of 16 shards. A session, its events and its user's `user:` scope
// share shard_of(app, user); the `app:` scope lives on home_shard(app).
//
// Each shard is a contiguous range of the hash: shard s holds exactly the
// hashes whose top 32 bits t satisfy floor(t * S / 2^32) = s (shard_range), so
// a store ordered by hash holds a shard's rows together and can copy them as
// one key range.
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

/// m: spreads every bit of `x` over all 64 (each output bit depends on every
/// input bit).
constexpr std::uint64_t spread64(std::uint64_t x) noexcept {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

/// h(app ‖ 0x00 ‖ user): the hash that places a session and its user scope.
constexpr std::uint64_t user_hash(std::string_view app, std::string_view user) noexcept {
  std::uint64_t h = fnv1a64(app);
  h = fnv1a64(std::string_view("\0", 1), h);
  return spread64(fnv1a64(user, h));
}

/// h(app): the hash that places an app's `app:` scope.
constexpr std::uint64_t app_hash(std::string_view app) noexcept {
  return spread64(fnv1a64(app));
}

/// The shard among `shards` whose range holds hash `h` (REQUIRES: 0 < shards <= 65536).
constexpr std::uint32_t shard_of_hash(std::uint64_t h, std::uint32_t shards) noexcept {
  return static_cast<std::uint32_t>(((h >> 32) * shards) >> 32);
}

/// The shard of (app, user) among `shards` (REQUIRES: 0 < shards <= 65536).
constexpr std::uint32_t shard_of(std::string_view app, std::string_view user,
                                 std::uint32_t shards) noexcept {
  return shard_of_hash(user_hash(app, user), shards);
}

/// The home shard of app's `app:` scope among `shards` (REQUIRES: 0 < shards <= 65536).
constexpr std::uint32_t home_shard(std::string_view app, std::uint32_t shards) noexcept {
  return shard_of_hash(app_hash(app), shards);
}

/// A range of hash values [lo, hi). hi == 0 stands for 2^64, the end of the hash
/// space (so {0, 0} is every hash); lo == hi != 0 is empty.
struct hash_range {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;

  constexpr bool contains(std::uint64_t h) const noexcept { return h >= lo && (hi == 0 || h < hi); }
  constexpr bool operator==(const hash_range& o) const noexcept { return lo == o.lo && hi == o.hi; }
};

/// The hashes shard `shard` of `shards` holds: every h with shard_of_hash(h, shards)
/// == shard (REQUIRES: 0 < shards <= 65536, shard < shards). The shards' ranges are
/// disjoint, in shard order, and cover the hash space; the last one ends at 2^64
/// (hi == 0).
constexpr hash_range shard_range(std::uint32_t shard, std::uint32_t shards) noexcept {
  // Shard s holds the top halves t with s * 2^32 <= t * S < (s + 1) * 2^32, that
  // is ceil(s * 2^32 / S) <= t < ceil((s + 1) * 2^32 / S); shifted back into the
  // top half, the last bound, 2^32 << 32, wraps to 0 (= 2^64).
  auto first_top = [shards](std::uint64_t s) { return ((s << 32) + shards - 1) / shards; };
  return {first_top(shard) << 32, first_top(std::uint64_t{shard} + 1) << 32};
}

} // namespace agentstate::model
