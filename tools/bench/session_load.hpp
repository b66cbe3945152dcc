// SPDX-License-Identifier: Apache-2.0
// tools/bench/session_load.hpp: the sessions and appends the workloads make:
// names, deltas, requests, the closed loops that issue them through the
// engine's async API, and timed reads of one session. The loops run on the
// calling thread and block until done; their callbacks run on the engine's
// threads and log failures to x.errors.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>

#include "agentstate/engine.hpp"
#include "tools/bench/closed_loop.hpp"
#include "tools/bench/measures.hpp"
#include "tools/bench/run.hpp"

namespace agentstate::tools::bench {

/// `prefix` followed by `i` in decimal ("s12").
std::string sid(const char* prefix, std::size_t i);

/// The state delta of step `i`: {"step": i, "status": "s<i % 7>", "score": i / 2}.
json step_delta(std::size_t i);

/// An append of `delta` to `ref`, authored "bench", invocation "inv-<session id>".
append_request make_append(const session_ref& ref, json delta);

/// Creates the session `ref` (empty state) asynchronously; calls done(ok).
void issue_create(run_ctx& x, const session_ref& ref, step_done_fn done);

/// Appends `req` asynchronously; stores the ack latency in microseconds at
/// `*latency_us` (before done is called), then calls done(ok).
void issue_append(run_ctx& x, append_request req, double* latency_us, step_done_fn done);

/// Creates `n` sessions named by `ref_of` with `width` creates in flight.
/// True when no error has been logged on `x` (this run's or an earlier one).
bool create_sessions(run_ctx& x, std::size_t n, std::size_t width,
                     const std::function<session_ref(std::size_t)>& ref_of, const char* label);

/// Runs `jobs` sessions x `steps` appends (delta_of(job, step)) with `width`
/// chains in flight; each ack latency lands in `lat` (index job*steps+step;
/// its earlier samples are replaced). Returns the wall-clock seconds.
double append_loop(run_ctx& x, std::size_t jobs, std::size_t steps, std::size_t width,
                   const std::function<session_ref(std::size_t)>& ref_of,
                   const std::function<json(std::size_t, std::size_t)>& delta_of, samples& lat,
                   const char* label);

/// `times` reads of one session, one after another, until an error is logged
/// on `x`: each takes a copy of `req` and times `read(copy)` alone into `s`
/// (read: a blocking get_session or get_session_json). A failed result is
/// logged; a value goes to `check(i, value)` for read i.
template <class Read, class Check>
void timed_reads(run_ctx& x, const get_request& req, std::size_t times, samples& s, Read&& read,
                 Check&& check) {
  for (std::size_t i = 0; i < times && x.errors.count == 0; ++i) {
    get_request g = req;
    auto r = timed_call(s, [&] { return read(std::move(g)); });
    if (!r)
      x.errors.add(r.err());
    else
      check(i, *r);
  }
}

} // namespace agentstate::tools::bench
