// SPDX-License-Identifier: Apache-2.0
// The one doctest main shared by every test executable. A run whose filters
// select no test case fails: each CTest test runs one source file's cases of
// its directory's executable (--source-file), so a filter that no longer
// matches (a renamed or moved file) must not pass as an empty run.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "agentstate/error.hpp"
#include "store/kv.hpp"

// A storage failure that escapes a test case names its code and message
// (store::kv_failure is not a std::exception).
REGISTER_EXCEPTION_TRANSLATOR(const agentstate::store::kv_failure& f) {
  return doctest::String(
    ("store::kv_failure " + std::string(agentstate::to_string(f.code)) + ": " + f.message).c_str());
}

namespace {

struct run_counts {
  bool ran = false;
  unsigned selected = 0;
};
run_counts counts;

struct selection_listener : doctest::IReporter {
  explicit selection_listener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override {
    counts.ran = true;
    counts.selected = s.numTestCasesPassingFilters;
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

} // namespace

REGISTER_LISTENER("selection", 1, selection_listener);

int main(int argc, char** argv) {
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  int rc = context.run();
  if (context.shouldExit() || rc != 0)
    return rc;
  if (counts.ran && counts.selected == 0) {
    std::fprintf(stderr, "%s: no test case matched the filters\n", argc > 0 ? argv[0] : "test");
    return 1;
  }
  return rc;
}
