// SPDX-License-Identifier: Apache-2.0
// tests/support/files.hpp: reading a whole file in a test. Test-only.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace agentstate::test {

/// The bytes of the file at `path` ("" when it cannot be read).
inline std::string file_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

} // namespace agentstate::test
