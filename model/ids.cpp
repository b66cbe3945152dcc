// SPDX-License-Identifier: Apache-2.0
#include "model/ids.hpp"

#include <chrono>
#include <cstdint>
#include <random>

namespace agentstate::model {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
    .count();
}

std::string make_uuid() {
  // Seeded with 256 bits: one random_device word (32 bits) would give only
  // 2^32 streams, so two threads or processes would repeat each other's
  // ids with a birthday chance of about n^2 / 2^33.
  thread_local std::mt19937_64 rng = [] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd(), rd(), rd(), rd(), rd()};
    return std::mt19937_64(seq);
  }();
  std::uint64_t hi = rng(), lo = rng();
  hi = (hi & 0xffffffffffff0fffULL) | 0x0000000000004000ULL;
  lo = (lo & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;
  // 8-4-4-4-12 lowercase hex digits, written directly (snprintf cost ~2.6k
  // instructions per generated id, a visible share of an append).
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(36, '-');
  std::size_t pos = 0;
  auto put = [&](std::uint64_t v, int nibbles) {
    for (int k = nibbles - 1; k >= 0; --k) {
      if (pos == 8 || pos == 13 || pos == 18 || pos == 23)
        ++pos;
      out[pos++] = digits[(v >> (4 * k)) & 0xf];
    }
  };
  put(hi, 16);
  put(lo, 16);
  return out;
}

} // namespace agentstate::model
