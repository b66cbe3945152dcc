// SPDX-License-Identifier: Apache-2.0
// protocol/idle_hook.hpp: the seam through which the protocol's writers
// (protocol/framing.hpp's line_writer, server/connection.cpp) leave a write
// to the thread that produced the output, for when that thread runs out of
// work. The protocol and the server own the type; the host that runs them
// supplies the implementation: `agentstate serve` (tools/serve.cpp) passes
// the engine's, agentstate::detail::defer_until_idle (actors/worker_idle.hpp),
// which queues the task on an engine worker thread until its next idle point.
#pragma once

#include <functional>

namespace agentstate::protocol {

/// Queues `task` to run on the calling thread at that thread's next idle
/// point and returns true; or, when the calling thread has no idle points
/// (it is no engine worker), drops `task` and returns false: the caller
/// does the work itself.
/// An implementation runs each task it accepted at most once, in the order
/// accepted, with no lock of the caller's held; it may drop tasks still
/// queued when the thread ends, so a task may only hasten what its owner
/// also does without it. Null: no thread has idle points (every write is
/// made by the producer at once, or by the writer's own thread).
using idle_hook = bool (*)(std::function<void()> task);

} // namespace agentstate::protocol
