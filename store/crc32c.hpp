// SPDX-License-Identifier: Apache-2.0
// store/crc32c.hpp: CRC-32C (Castagnoli, the polynomial of iSCSI, ext4 and
// SSE4.2's crc32 instruction), the checksum every stored value carries
// (store/records.hpp). Pure functions, safe on any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace agentstate::store {

/// Extends `crc` (0 to start) over `n` bytes at `p`: crc32c(a ‖ b) ==
/// crc32c_extend(crc32c_extend(0, a), b). Uses the SSE4.2 instruction when
/// the CPU has it (checked once, at the first call), a table otherwise; both
/// give the same value. Cost with SSE4.2 here: ~4 ns for 24 bytes, ~20 ns
/// for 200 (one instruction per 8 bytes, three streams from 192 bytes on),
/// ~16-25 bytes/ns for kilobytes; the table: ~2 bytes/ns.
std::uint32_t crc32c_extend(std::uint32_t crc, const void* p, std::size_t n) noexcept;

inline std::uint32_t crc32c_extend(std::uint32_t crc, std::string_view x) noexcept {
  return crc32c_extend(crc, x.data(), x.size());
}

/// Three independent checksums at once: crc[i] = crc32c_extend(crc[i], p[i],
/// n[i]) for i < 3. With SSE4.2 the three run interleaved over their common
/// length: about three times one's speed for short inputs of equal length
/// (rows of one table), where one input alone is bound by the instruction's
/// latency.
void crc32c_extend3(std::uint32_t crc[3], const void* const p[3], const std::size_t n[3]) noexcept;

/// The table implementation alone (for tests comparing the two).
std::uint32_t crc32c_extend_portable(std::uint32_t crc, const void* p, std::size_t n) noexcept;
/// Whether crc32c_extend uses the SSE4.2 instruction on this CPU.
bool crc32c_hardware() noexcept;

} // namespace agentstate::store
