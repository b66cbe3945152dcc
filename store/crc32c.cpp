// SPDX-License-Identifier: Apache-2.0
#include "store/crc32c.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define AGENTSTATE_CRC32C_X86 1
#endif

namespace agentstate::store {

namespace {

constexpr std::uint32_t poly = 0x82f63b78; // CRC-32C, reflected

// Slicing-by-8 tables: t[0] is the byte-wise table; t[k][b] advances b by k
// further zero bytes.
struct tables {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  tables() {
    for (std::uint32_t b = 0; b < 256; ++b) {
      std::uint32_t c = b;
      for (int i = 0; i < 8; ++i)
        c = (c >> 1) ^ (poly & (0u - (c & 1)));
      t[0][b] = c;
    }
    for (std::uint32_t b = 0; b < 256; ++b)
      for (int k = 1; k < 8; ++k)
        t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  }
};

const tables& table_set() {
  static const tables x;
  return x;
}

std::uint32_t portable(std::uint32_t crc, const unsigned char* p, std::size_t n) noexcept {
  const auto& t = table_set().t;
  crc = ~crc;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  while (n >= 8) {
    std::uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= crc;
    crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24]
      ^ t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
#endif
  while (n--)
    crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
  return ~crc;
}

#ifdef AGENTSTATE_CRC32C_X86
// The CRC register (no inversions) is linear: the register after bytes A ‖ B
// from register r is shift_|B|(reg(r, A)) ^ reg(0, B), where shift_k(r) is
// the register after k zero bytes from r (r·x^(8k) mod P). So three
// independent streams over adjacent blocks of k bytes run the crc32
// instruction at its throughput (one a cycle) instead of its latency (three
// cycles), and two shifts join them.
struct shift_table {
  std::uint32_t t[4][256];
};

// shift_k as four byte tables (it is linear in the register's 32 bits).
shift_table make_shift(std::size_t k) {
  const auto& t0 = table_set().t[0];
  std::uint32_t basis[32];
  for (int i = 0; i < 32; ++i) {
    std::uint32_t r = 1u << i;
    for (std::size_t z = 0; z < k; ++z)
      r = (r >> 8) ^ t0[r & 0xff];
    basis[i] = r;
  }
  shift_table s;
  for (int byte = 0; byte < 4; ++byte)
    for (int b = 0; b < 256; ++b) {
      std::uint32_t v = 0;
      for (int i = 0; i < 8; ++i)
        if ((b >> i) & 1)
          v ^= basis[8 * byte + i];
      s.t[byte][b] = v;
    }
  return s;
}

inline std::uint32_t shifted(const shift_table& s, std::uint64_t r) {
  return s.t[0][r & 0xff] ^ s.t[1][(r >> 8) & 0xff] ^ s.t[2][(r >> 16) & 0xff]
    ^ s.t[3][(r >> 24) & 0xff];
}

// Block sizes of the three streams (multiples of 8), largest first.
constexpr std::size_t block_sizes[] = {1024, 128, 64};

struct shift_tables {
  shift_table s[3];
  shift_tables() {
    for (int i = 0; i < 3; ++i)
      s[i] = make_shift(block_sizes[i]);
  }
};

const shift_tables& shifts() {
  static const shift_tables x;
  return x;
}

__attribute__((target("sse4.2"))) inline std::uint64_t word(const unsigned char* p) {
  std::uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

// Runs the three streams over blocks of k bytes while 3k bytes remain.
__attribute__((target("sse4.2"))) void three_streams(std::uint64_t& c0, const unsigned char*& p,
                                                     std::size_t& n, std::size_t k,
                                                     const shift_table& s) {
  while (n >= 3 * k) {
    std::uint64_t c1 = 0, c2 = 0;
    for (const unsigned char* end = p + k; p < end; p += 8) {
      c0 = _mm_crc32_u64(c0, word(p));
      c1 = _mm_crc32_u64(c1, word(p + k));
      c2 = _mm_crc32_u64(c2, word(p + 2 * k));
    }
    c0 = shifted(s, c0) ^ c1;
    c0 = shifted(s, c0) ^ c2;
    p += 2 * k;
    n -= 3 * k;
  }
}

__attribute__((target("sse4.2"))) std::uint32_t hardware(std::uint32_t crc, const unsigned char* p,
                                                         std::size_t n) noexcept {
  std::uint64_t c = static_cast<std::uint32_t>(~crc);
  if (n >= 3 * block_sizes[2]) {
    const auto& s = shifts();
    for (int i = 0; i < 3; ++i)
      three_streams(c, p, n, block_sizes[i], s.s[i]);
  }
  while (n >= 8) {
    c = _mm_crc32_u64(c, word(p));
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<std::uint32_t>(c);
  while (n--)
    c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

bool detect() noexcept {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#else
bool detect() noexcept {
  return false;
}
#endif

#ifdef AGENTSTATE_CRC32C_X86
__attribute__((target("sse4.2"))) void
hardware3(std::uint32_t crc[3], const unsigned char* const p[3], const std::size_t n[3]) noexcept {
  std::uint64_t c0 = static_cast<std::uint32_t>(~crc[0]);
  std::uint64_t c1 = static_cast<std::uint32_t>(~crc[1]);
  std::uint64_t c2 = static_cast<std::uint32_t>(~crc[2]);
  std::size_t m = std::min(n[0], std::min(n[1], n[2])) & ~std::size_t{7};
  const unsigned char *a = p[0], *b = p[1], *c = p[2];
  for (std::size_t i = 0; i < m; i += 8) {
    c0 = _mm_crc32_u64(c0, word(a + i));
    c1 = _mm_crc32_u64(c1, word(b + i));
    c2 = _mm_crc32_u64(c2, word(c + i));
  }
  crc[0] = hardware(~static_cast<std::uint32_t>(c0), a + m, n[0] - m);
  crc[1] = hardware(~static_cast<std::uint32_t>(c1), b + m, n[1] - m);
  crc[2] = hardware(~static_cast<std::uint32_t>(c2), c + m, n[2] - m);
}
#endif

bool use_hardware() noexcept {
  static const bool yes = detect();
  return yes;
}

} // namespace

bool crc32c_hardware() noexcept {
  return use_hardware();
}

std::uint32_t crc32c_extend_portable(std::uint32_t crc, const void* p, std::size_t n) noexcept {
  return portable(crc, static_cast<const unsigned char*>(p), n);
}

void crc32c_extend3(std::uint32_t crc[3], const void* const p[3], const std::size_t n[3]) noexcept {
#ifdef AGENTSTATE_CRC32C_X86
  if (use_hardware()) {
    const unsigned char* const q[3] = {static_cast<const unsigned char*>(p[0]),
                                       static_cast<const unsigned char*>(p[1]),
                                       static_cast<const unsigned char*>(p[2])};
    hardware3(crc, q, n);
    return;
  }
#endif
  for (int i = 0; i < 3; ++i)
    crc[i] = portable(crc[i], static_cast<const unsigned char*>(p[i]), n[i]);
}

std::uint32_t crc32c_extend(std::uint32_t crc, const void* p, std::size_t n) noexcept {
#ifdef AGENTSTATE_CRC32C_X86
  if (use_hardware())
    return hardware(crc, static_cast<const unsigned char*>(p), n);
#endif
  return portable(crc, static_cast<const unsigned char*>(p), n);
}

} // namespace agentstate::store
