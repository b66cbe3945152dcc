// SPDX-License-Identifier: Apache-2.0
// actors/heap_trimmer.hpp: gives freed heap memory back to the OS after
// actors passivate. A passivated actor's memory returns to the allocator,
// which keeps it for reuse; after a burst (many sessions, then idle) that
// would leave the process's RSS at its peak. Once a second the trimmer
// checks the passivation count and, when at least `min_passivations`
// actors passivated since its last trim, calls malloc_trim(0) (glibc; a
// no-op elsewhere), which returns every arena's free pages. Costs one timer
// message a second; a trim takes about a millisecond per GiB of heap, on one
// scheduler thread.
#pragma once

#include <caf/actor.hpp>

namespace agentstate::detail {

struct engine_core;

/// Passivations since the last trim that make the next tick trim.
constexpr std::uint64_t heap_trim_min_passivations = 256;

/// Spawns the trimmer. Stop it with caf::anon_send_exit at close.
caf::actor spawn_heap_trimmer(engine_core& core);

/// Returns the allocator's free memory to the OS now (glibc malloc_trim).
/// Returns whether anything was released.
bool trim_heap();

} // namespace agentstate::detail
