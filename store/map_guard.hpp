// SPDX-License-Identifier: Apache-2.0
// store/map_guard.hpp: a damaged page never ends the process. Every LMDB call
// of store/ runs inside a guard point: a SIGSEGV or SIGBUS raised by that
// call (LMDB following a damaged page), or a failed LMDB assertion (a page
// header that is not what its parent says), leaves the call by siglongjmp
// and becomes kv_failure{data_corrupt} thrown from the point. Only LMDB's C
// frames are left that way, so no destructor is skipped; the transaction the
// call ran in is aborted by its owner as for any other kv_failure.
//
// Values LMDB hands out are checked against the part of the map the file
// backs (lmdb_txn.hpp) before anyone reads them, so code reading a value
// outside an LMDB call never faults on a damaged size either.
//
// The handlers are process-wide, installed when the first LMDB store opens.
// A fault outside a guard point is not ours: the handler that was installed
// before ours runs (or the default action: the process ends with the signal),
// so a host's own crash handler keeps working. Internal to store/ and the
// store tools.
#pragma once

#include <setjmp.h>

#include <cstdint>
#include <string>

#include "store/kv.hpp"

namespace agentstate::store::map_guard {

/// One guarded region on this thread's stack. The region's sigsetjmp must run
/// in a frame that stays live while the point is armed.
struct point {
  sigjmp_buf jump;
  int cause = 0; ///< SIGSEGV, SIGBUS, or assertion_cause
  char detail[192] = {}; ///< the LMDB assertion's text
};
constexpr int assertion_cause = -1;

/// This thread's innermost armed point, or null. Written only by its thread.
point* armed() noexcept;
void arm(point* p) noexcept;

/// Installs the SIGSEGV/SIGBUS handlers (chained to the ones installed
/// before) once per process. Thread-safe.
void install();

/// The assertion handler LMDB calls (mdb_env_set_assert): leaves the armed
/// point, or returns when none is armed (LMDB then aborts the process).
void on_lmdb_assert(const char* message) noexcept;

/// What a fault inside an LMDB call throws: a data_corrupt kv_failure that
/// also says LMDB was left mid-call (a write transaction it was in cannot be
/// aborted safely: lmdb_txn.hpp refuses writes from then on).
struct map_fault : kv_failure {};

/// What left the point: "LMDB assertion failed on a damaged page: ...",
/// "bus error reading the map (...)" or "invalid address reading the map (...)".
std::string describe(const point& p);

/// Throws map_fault naming `what` and the point's cause, and counts the fault.
[[noreturn]] void raise(const point& p, const char* what);

/// Faults turned into errors in this process so far.
std::uint64_t caught() noexcept;

/// Runs `call` (an LMDB call: C frames only) under a fresh point and returns
/// what it returns; a fault or assertion inside it throws as raise().
/// Cost: one sigsetjmp without a signal mask (no system call, a few ns).
template <class F>
inline auto guarded_call(const char* what, F&& call) {
  point p;
  point* const outer = armed();
  if (sigsetjmp(p.jump, 0) != 0) {
    arm(outer);
    raise(p, what);
  }
  arm(&p);
  auto rc = call();
  arm(outer);
  return rc;
}

} // namespace agentstate::store::map_guard
