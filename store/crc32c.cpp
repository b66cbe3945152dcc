#include "store/crc32c.hpp"

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
__attribute__((target("sse4.2"))) std::uint32_t hardware(std::uint32_t crc,
                                                         const unsigned char* p,
                                                         std::size_t n) noexcept {
  std::uint64_t c = ~crc;
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
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

std::uint32_t crc32c_extend(std::uint32_t crc, const void* p, std::size_t n) noexcept {
#ifdef AGENTSTATE_CRC32C_X86
  if (use_hardware())
    return hardware(crc, static_cast<const unsigned char*>(p), n);
#endif
  return portable(crc, static_cast<const unsigned char*>(p), n);
}

} // namespace agentstate::store
