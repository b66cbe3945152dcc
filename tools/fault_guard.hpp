// SPDX-License-Identifier: Apache-2.0
// tools/fault_guard.hpp: turns a fault while reading a store's memory map -
// SIGBUS (a page past the end of a truncated file), SIGSEGV (a damaged page
// pointing outside the map), a failed LMDB assertion (a damaged page header) -
// into a data_corrupt error for the one read that faulted, so a walk over a
// damaged store goes on with the next session.
//
// Installed only in the process of the store tools (inspect, verify, backup,
// dump, export, salvage), never by the engine or `serve`: leaving a read by
// siglongjmp skips the destructors of the frames it leaves (the read's cursor
// and buffers leak: a few hundred bytes per fault), and in a process whose
// other threads hold locks it would leave them held. Outside a guarded read,
// a fault keeps its default action (the process ends with the signal).
#pragma once

#include <functional>
#include <string>

#include "agentstate/error.hpp"

namespace agentstate::tools {

/// Installs the SIGBUS/SIGSEGV handlers and LMDB's assertion handler
/// (store::set_lmdb_assert_handler). Idempotent; call before opening a store.
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

} // namespace agentstate::tools
