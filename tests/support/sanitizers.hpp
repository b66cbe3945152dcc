// SPDX-License-Identifier: Apache-2.0
// tests/support/sanitizers.hpp: what the tests need to know about a sanitizer
// build (-DAGENTSTATE_SANITIZE=address|thread, docs/testing.md "Sanitizers"):
// whether this is one, how much slower it runs, and whether a child
// process's stderr holds a sanitizer report.
#pragma once

#include <string>

namespace agentstate::test {

// -- sanitizer builds -------------------------------------------------------------

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define AGENTSTATE_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define AGENTSTATE_TEST_SANITIZED 1
#endif
#endif

/// True in a -DAGENTSTATE_SANITIZE build (the tests are compiled with the
/// sanitizer too). Such a build maps shadow memory, so a child's RSS says
/// nothing about its own memory use: RSS budgets are checked in plain builds
/// only (the quick tier).
#ifdef AGENTSTATE_TEST_SANITIZED
inline constexpr bool sanitized_build = true;
#else
inline constexpr bool sanitized_build = false;
#endif

/// Waits for work to finish (not for a timeout under test) are this many
/// times longer in a sanitizer build, which runs the server 5-15 times slower.
inline constexpr int slowdown = sanitized_build ? 5 : 1;

// -- sanitizer reports of child processes ---------------------------------------

/// The line of `log` (a child's stderr) that starts a sanitizer report (TSan,
/// ASan, LSan, UBSan), or "" when there is none. A sanitizer build's child
/// (`agentstate serve`) writes its reports to its stderr; the test drivers of
/// such children fail the test on one, so a report in a child that the test
/// then kills, or one that does not end the child, still fails.
inline std::string sanitizer_report(const std::string& log) {
  static const char* const starts[] = {
    "WARNING: ThreadSanitizer:", "ERROR: AddressSanitizer:", "ERROR: LeakSanitizer:",
    "SUMMARY: UndefinedBehaviorSanitizer:"};
  for (const char* s : starts)
    if (auto at = log.find(s); at != std::string::npos) {
      auto begin = log.rfind('\n', at);
      begin = begin == std::string::npos ? 0 : begin + 1;
      return log.substr(begin, log.find('\n', at) - begin);
    }
  return "";
}

} // namespace agentstate::test
