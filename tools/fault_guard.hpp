// SPDX-License-Identifier: Apache-2.0
// tools/fault_guard.hpp: one step of a store tool's walk (a session, a table)
// as a result: a data_corrupt from the store (store/map_guard.hpp turns every
// fault inside an LMDB call into one) or a fault anywhere else in the step
// (SIGBUS, SIGSEGV, a failed LMDB assertion) ends that step only, so a walk
// over a damaged store goes on with the next session.
//
// The outer guard is for the store tools (inspect, verify, backup, dump,
// export, salvage) only, never the engine or `serve`: leaving a step by
// siglongjmp skips the destructors of the frames it leaves (its buffers leak:
// a few hundred bytes per fault), and in a process whose other threads hold
// locks it would leave them held. Outside a guarded step and outside an LMDB
// call, a fault keeps the action installed before (by default the process
// ends with the signal).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "agentstate/error.hpp"
#include "store/kv.hpp"

namespace agentstate::tools {

/// Installs the SIGBUS/SIGSEGV handlers (store/map_guard.hpp). Idempotent;
/// call before opening a store.
void install_fault_guard();

/// Runs `fn` on this thread under the guard (nesting allowed). A fault inside
/// it returns data_corrupt: "`what`: <signal or assertion>"; a kv_failure
/// thrown by it returns its code; other exceptions pass through. REQUIRES of fn: it takes no lock and starts no
/// thread that touches the map (a fault there is not caught); what it
/// allocated before a fault leaks. Cost: one sigsetjmp (saves the signal
/// mask: one syscall).
result<void> guarded(const std::string& what, const std::function<void()>& fn);

/// How many faults guarded() has turned into errors in this process.
std::uint64_t faults_caught();

/// Opens DIR read-only; on failure says why as `command` (say(), "agentstate
/// COMMAND: not_found: ...") and returns null. Every read-only tool reads the
/// map under the fault guard: a fault on a damaged page ends the command
/// with a data_corrupt message and exit 1, never a signal.
std::unique_ptr<store::kv_store> open_readonly(const std::string& dir, const std::string& command);

} // namespace agentstate::tools
