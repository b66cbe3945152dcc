// SPDX-License-Identifier: Apache-2.0
// tools/bench/closed_loop.hpp: a fixed number of async calls in flight.
#pragma once

#include <cstddef>
#include <functional>

#include "tools/bench/progress.hpp"

namespace agentstate::tools::bench {

/// Called once per step with whether the step's call succeeded.
using step_done_fn = std::function<void(bool ok)>;
/// Starts step `step` of job `job` as one async call.
using issue_fn = std::function<void(std::size_t job, std::size_t step, step_done_fn done)>;

/// Runs `jobs` jobs of `steps` steps each as `width` concurrent callback
/// chains: a chain takes the next job and runs its steps in order, issuing
/// step k+1 from the callback of step k, then takes the next job.
/// `issue(job, step, done)` starts one async call and must call `done(ok)`
/// exactly once (from the engine's callback, on any thread). A failed step
/// ends its job and stops new jobs from starting. Each finished step counts
/// one unit on `prog` (may be null). Blocks until every chain has ended.
void run_closed_loop(std::size_t jobs, std::size_t steps, std::size_t width, issue_fn issue,
                     progress* prog);

} // namespace agentstate::tools::bench
