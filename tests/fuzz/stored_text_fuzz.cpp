// SPDX-License-Identifier: Apache-2.0
// tests/fuzz/stored_text_fuzz.cpp: libFuzzer target over the stored-text
// readers (parse_stored_text, decode_event_text), differential against
// nlohmann (fuzz/stored_text_check.hpp). Built only with -DAGENTSTATE_FUZZ=ON
// and clang (docs/testing.md, tier "fuzz"; ASan+UBSan with
// -DAGENTSTATE_SANITIZE=address). Aborts on a difference. A crasher goes to
// tests/fuzz/stored_text/ (replayed by store_codec_test, quick tier).
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "fuzz/stored_text_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto wrong = stored_text_check::check(text);
  if (!wrong.empty()) {
    std::fprintf(stderr, "stored_text_fuzz: %s\n", wrong.c_str());
    std::abort();
  }
  return 0;
}
