// SPDX-License-Identifier: Apache-2.0
// tools/bench/via_workloads.hpp: workloads a, b and c through `agentstate
// serve` (`bench --via stdio|tcp`): the same shapes driven over the JSON-RPC
// protocol by agentstate::rpc_client in the bench process (over the child's
// pipes, or loopback TCP), each next to the same shape run in-process on the
// engine's async API in the same run, with the ratio.
//
//   a  one session, 20,000* appends pipelined with 256 in flight (one stream)
//   b  1,000* sessions over 100 users, 20 appends each, 64 in flight as 64
//      chains (each awaits its previous append); over TCP on 8 connections of
//      8 chains each, over stdio on the one stream
//   c  one session of 10,000* events (loaded as a, not timed against
//      anything), then get_session awaited one at a time: num_recent_events=10
//      (1,000 reads) and full (200 reads); in-process: get_session_json
//   h  the change feed: one stream watches everything, then 2,000* appends
//      awaited one at a time; an append's call to its change's notification
//      (no in-process counterpart: workload h has it)
//
// Each returns its JSON line (run_ctx::finish) and never throws for a failed
// call: errors are counted in the line. The child `serve` runs on a fresh
// store (none with memory) with the bench's durability and --threads, and is
// stopped as a client would stop it (end of input; SIGTERM for a listener);
// an exit status other than 0 is an error.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>
#include "tools/bench/measures.hpp"
#include "tools/bench/run.hpp"

namespace agentstate::tools::bench {

/// serve's store arguments for the run's durability: --memory, or a fresh
/// temp store under cfg.base_dir (made into `dir`) and --durability; and
/// --threads when cfg sets it. nullopt, with the error added to `x`, when
/// the temp store cannot be made.
std::optional<std::vector<std::string>> serve_store_args(run_ctx& x, const config& cfg,
                                                         std::unique_ptr<temp_store>& dir);

/// Workload `w` ('a', 'b', 'c' or 'h') through serve over cfg.via.
ojson via_workload(char w, const config& cfg);

} // namespace agentstate::tools::bench
