// SPDX-License-Identifier: Apache-2.0
// tools/bench/peer.hpp: another framework's session service run with a
// bench workload, for a same-run ratio (`agentstate bench --peer SCRIPT`;
// tools/bench/peers/).
#pragma once

#include <string>

#include "tools/bench/measures.hpp"

namespace agentstate::tools::bench {

/// Runs `node SCRIPT --workload W --scale S` (node from PATH, stderr merged
/// into stdout) and returns the last line it prints that parses as a JSON
/// object. When node cannot be started, the script exits other than 0,
/// prints no such line, or runs for more than `timeout_s` seconds (it is
/// then killed), returns {"error": why, "output": its last 300 bytes}.
/// Blocks until the script has ended; never throws but std::bad_alloc.
ojson run_peer(const std::string& script, char workload, double scale, int timeout_s = 600);

/// Adds `peer` (run_peer's result) to a workload's line and, when both
/// figures are positive numbers, "ratio_to_peer": the line's events_per_s
/// over the peer's.
void attach_peer(ojson& line, ojson peer);

} // namespace agentstate::tools::bench
