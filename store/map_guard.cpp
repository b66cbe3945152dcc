// SPDX-License-Identifier: Apache-2.0
#include "store/map_guard.hpp"

#include <signal.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>

#include "store/kv.hpp"

namespace agentstate::store::map_guard {

namespace {

thread_local point* current = nullptr;
std::atomic<std::uint64_t> faults{0};

// The actions installed before ours, run for a fault outside a guard point.
struct sigaction previous_segv {};
struct sigaction previous_bus {};

void pass_on(int sig, siginfo_t* info, void* context) {
  const struct sigaction& prev = sig == SIGBUS ? previous_bus : previous_segv;
  if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction) {
    prev.sa_sigaction(sig, info, context);
    return;
  }
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN && prev.sa_handler) {
    prev.sa_handler(sig);
    return;
  }
  // The default action, taken when the faulting instruction runs again on
  // return (SIG_IGN would loop forever on a synchronous fault: default too).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
}

void on_fault(int sig, siginfo_t* info, void* context) {
  if (point* p = current) {
    current = nullptr;
    p->cause = sig;
    // SA_NODEFER: the signal is not blocked in the handler, so leaving it
    // without restoring a mask leaves this thread's mask as it was.
    siglongjmp(p->jump, 1);
  }
  pass_on(sig, info, context);
}

} // namespace

point* armed() noexcept {
  return current;
}

void arm(point* p) noexcept {
  current = p;
}

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGSEGV, &sa, &previous_segv);
    ::sigaction(SIGBUS, &sa, &previous_bus);
  });
}

void on_lmdb_assert(const char* message) noexcept {
  if (point* p = current) {
    current = nullptr;
    p->cause = assertion_cause;
    std::strncpy(p->detail, message ? message : "?", sizeof p->detail - 1);
    p->detail[sizeof p->detail - 1] = '\0';
    siglongjmp(p->jump, 1);
  }
}

std::string describe(const point& p) {
  if (p.cause == assertion_cause)
    return std::string("LMDB assertion failed on a damaged page: ") + p.detail;
  if (p.cause == SIGBUS)
    return "bus error reading the map (SIGBUS: a page past the end of the file)";
  return "invalid address reading the map (SIGSEGV: a damaged page)";
}

void raise(const point& p, const char* what) {
  faults.fetch_add(1, std::memory_order_relaxed);
  throw map_fault{{errc::data_corrupt, std::string(what) + ": " + describe(p)}};
}

std::uint64_t caught() noexcept {
  return faults.load(std::memory_order_relaxed);
}

} // namespace agentstate::store::map_guard
