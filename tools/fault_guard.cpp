// SPDX-License-Identifier: Apache-2.0
#include "tools/fault_guard.hpp"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <cstring>

#include "store/kv.hpp"

namespace agentstate::tools {

namespace {

// The innermost guarded() frame of this thread, or null.
thread_local sigjmp_buf* active = nullptr;
// The assertion LMDB reported (copied: its buffer is LMDB's stack).
thread_local char assertion[256];

std::atomic<std::uint64_t> caught{0};
constexpr int assertion_jump = -1;

void on_fault(int sig, siginfo_t*, void*) {
  if (sigjmp_buf* to = active) {
    active = nullptr;
    siglongjmp(*to, sig);
  }
  // Not inside a guarded read: the default action, taken when the faulting
  // instruction runs again on return.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(sig, &dfl, nullptr);
}

void on_assert(const char* msg) {
  if (sigjmp_buf* to = active) {
    std::strncpy(assertion, msg ? msg : "?", sizeof assertion - 1);
    assertion[sizeof assertion - 1] = '\0';
    active = nullptr;
    siglongjmp(*to, assertion_jump);
  }
  // Outside a guarded read LMDB goes on to abort, as without the guard.
}

} // namespace

void install_fault_guard() {
  static const bool once = [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, nullptr);
    ::sigaction(SIGSEGV, &sa, nullptr);
    store::set_lmdb_assert_handler(on_assert);
    return true;
  }();
  (void)once;
}

result<void> guarded(const std::string& what, const std::function<void()>& fn) {
  sigjmp_buf here;
  sigjmp_buf* const outer = active;
  int sig = sigsetjmp(here, 1);
  if (sig == 0) {
    active = &here;
    try {
      fn();
    } catch (const store::kv_failure& f) {
      active = outer;
      return error{f.code, what + ": " + f.message};
    } catch (...) {
      active = outer;
      throw;
    }
    active = outer;
    return {};
  }
  active = outer;
  caught.fetch_add(1, std::memory_order_relaxed);
  std::string why = sig == assertion_jump ? std::string("LMDB assertion failed: ") + assertion
                    : sig == SIGBUS       ? std::string("bus error reading the map (SIGBUS: "
                                                        "the file is shorter than its pages)")
                                          : std::string("invalid address reading the map "
                                                        "(SIGSEGV: a damaged page)");
  return error{errc::data_corrupt, what + ": " + why};
}

std::uint64_t faults_caught() {
  return caught.load(std::memory_order_relaxed);
}

} // namespace agentstate::tools
