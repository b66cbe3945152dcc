// SPDX-License-Identifier: Apache-2.0
// tools/bench/probes.hpp: what the disk under the store allows right now, for
// sync-mode lines: a flush's latency and LMDB's rate of durable one-put
// commits. Each probe writes only in a file or directory of its own under the
// given directory, removes it afterwards, and blocks the calling thread for
// its run (typically well under a second).
#pragma once

#include <string>

namespace agentstate::tools::bench {

/// Medians in microseconds; -1 when the probe cannot run.
struct flush_probe {
  double fdatasync_us = -1; ///< write a 4 KiB data page, then fdatasync it
  double dsync_write_us = -1; ///< write a 120-byte meta record through O_DSYNC
};

/// The disk's flush latency, measured the way LMDB commits in sync mode:
/// 50 rounds of a data page write + fdatasync, then a meta record write on a
/// second descriptor opened O_DSYNC, in a file under `dir`.
flush_probe probe_flush(const std::string& dir);

/// This machine's ceiling for workload a in sync mode: 300 durable LMDB
/// commits of one 200-byte put each (the pattern a single awaited session is
/// bound by; the ceiling probe's durable one-put commit) into a fresh store in
/// a temp directory under `dir`. Commits per second; -1 when the probe cannot
/// run.
double probe_lmdb_commits(const std::string& dir);

} // namespace agentstate::tools::bench
